//! Embedding MACP: two people's agents work one investigation in a room on the embedded SQLite
//! backend.
//!
//! ```text
//! cargo run -p macp-examples --example investigation
//! ```
//!
//! The data goes to `$MACP_DATA_DIR` if set, else to a fresh directory under the system temp
//! directory (printed at the end).

use std::sync::Arc;

use macp_core::model::{AgentStatus, EntityType, Evidence, EvidenceKind};
use macp_core::search::builtin::BuiltinEmbedder;
use macp_core::service::{
    AddEntity, AddRelationship, CreateRoom, DeclareStatus, GraphQuery, JoinRoom, MergeEntities, PostFinding,
    SearchFindings, TimelineQuery, UpdatesQuery,
};
use macp_core::{AgentId, Macp, Principal};
use macp_local::SqliteStore;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = match std::env::var_os("MACP_DATA_DIR") {
        Some(d) => std::path::PathBuf::from(d),
        None => std::env::temp_dir().join(format!("macp-example-{}", std::process::id())),
    };
    let store = Arc::new(SqliteStore::open(&dir)?);
    // The built-in embedding model and the store's own vector index give semantic search;
    // without them search_findings matches words only.
    let macp = Macp::builder()
        .store(store.clone())
        .embedder(Arc::new(BuiltinEmbedder::load()?))
        .vector_index(store)
        .build()?;
    // Indexes any finding whose indexing failed at post time (none here), every 30 s.
    let _reconciler = macp.start_reconciler(std::time::Duration::from_secs(30));

    // Two people, each driving their own agent.
    let alice = Principal::new("alice@example.com")?;
    let bob = Principal::new("bob@example.com")?;
    let room = macp
        .create_room(
            &alice,
            CreateRoom::new("Find why checkout returns 502s since 09:40 UTC and what fixes it.")
                .name("checkout-502"),
        )
        .await?;
    let a = macp.join_room(&alice, JoinRoom::new(room.room_id).agent(AgentId::new("alice-claude")?)).await?;
    let b = macp.join_room(&bob, JoinRoom::new(room.room_id).agent(AgentId::new("bob-kiro")?)).await?;
    println!("room {} ({}): {}", room.room_id, room.name.as_deref().unwrap_or("-"), room.objective);

    // Bob starts polling for updates before anything is posted.
    let mut bob_cursor = macp.updates(&bob, UpdatesQuery::new(room.room_id)).await?.cursor;

    // Both agents name the same database host, spelled differently: one entity.
    let db = macp
        .add_entity(
            &alice,
            AddEntity::new(room.room_id, a.agent_id.clone(), "orders-db primary", EntityType::Resource)
                .identifier("hostname", "orders-db-1.prod.internal"),
        )
        .await?;
    let db_again = macp
        .add_entity(
            &bob,
            AddEntity::new(room.room_id, b.agent_id.clone(), "orders DB", EntityType::Resource)
                .identifier("hostname", "ORDERS-DB-1.prod.internal.")
                .identifier("arn", "arn:aws:rds:us-west-2:123456789012:db:orders-db-1"),
        )
        .await?;
    println!(
        "identifier match: bob's add {} entity {} (created: {})",
        if db_again.created { "created" } else { "attached to" },
        db_again.entity.entity_id,
        db_again.created
    );
    assert_eq!(db.entity.entity_id, db_again.entity.entity_id);

    // Two names for one service, discovered separately, then merged.
    let api = macp
        .add_entity(
            &alice,
            AddEntity::new(room.room_id, a.agent_id.clone(), "checkout-api", EntityType::Service)
                .identifier("service", "checkout-api"),
        )
        .await?;
    let deploy = macp
        .add_entity(
            &bob,
            AddEntity::new(room.room_id, b.agent_id.clone(), "checkout (k8s)", EntityType::Service)
                .identifier("k8s_deployment", "checkout-v7"),
        )
        .await?;
    macp.add_relationship(
        &bob,
        AddRelationship {
            description: Some("connection pool to the orders DB".into()),
            ..AddRelationship::new(
                room.room_id,
                b.agent_id.clone(),
                deploy.entity.entity_id,
                "depends_on",
                db.entity.entity_id,
            )
        },
    )
    .await?;
    let merged = macp
        .merge_entities(
            &alice,
            MergeEntities {
                room_id: room.room_id,
                agent_id: Some(a.agent_id.clone()),
                winner_entity_id: api.entity.entity_id,
                loser_entity_id: deploy.entity.entity_id,
            },
        )
        .await?;
    println!(
        "merged {} into {}; aliases now {:?}",
        deploy.entity.entity_id, merged.entity.entity.entity_id, merged.entity.aliases
    );

    // Findings, with tags, entity refs and evidence.
    macp.post_finding(
        &alice,
        PostFinding::new(
            room.room_id,
            a.agent_id.clone(),
            "502s started 09:41, right after deploy checkout-v7.",
        )
        .tags(["triage", "evidence"])
        .entity_refs([api.entity.entity_id])
        .evidence([Evidence {
            kind: EvidenceKind::Cloudtrail,
            reference: "evt-7f3a".into(),
            description: Some("UpdateService at 09:40:55".into()),
            captured_at: None,
        }]),
    )
    .await?;
    macp.post_finding(
        &bob,
        PostFinding::new(
            room.room_id,
            b.agent_id.clone(),
            "orders-db-1 connections pinned at max_connections=500 from 09:41; the new pool size is 4x.",
        )
        .tags(["root-cause"])
        // Bob still uses the old id of the merged service: it resolves to the winner.
        .entity_refs([deploy.entity.entity_id, db.entity.entity_id]),
    )
    .await?;
    macp.declare_status(
        &bob,
        DeclareStatus {
            room_id: room.room_id,
            agent_id: Some(b.agent_id.clone()),
            status: AgentStatus::Blocked,
            reason: Some("need a DBA to confirm before lowering the pool size".into()),
        },
    )
    .await?;

    // Bob's poll returns both findings, once.
    let updates = macp.updates(&bob, UpdatesQuery::new(room.room_id).cursor(bob_cursor.clone())).await?;
    bob_cursor = updates.cursor;
    println!("\nbob's updates ({} new):", updates.findings.len());
    for f in &updates.findings {
        println!("  #{} [{}] {} — {}", f.seq, f.tags.join(","), f.agent_id, f.content);
    }
    let again = macp.updates(&bob, UpdatesQuery::new(room.room_id).cursor(bob_cursor)).await?;
    assert!(again.findings.is_empty(), "nothing is repeated");

    // Search by meaning: none of these words is in the finding it should find first.
    let hits = macp
        .search_findings(
            &bob,
            SearchFindings {
                limit: Some(1),
                ..SearchFindings::new(room.room_id, "database hit its connection ceiling")
            },
        )
        .await?;
    if let Some(h) = hits.results.first() {
        println!(
            "
search \"database hit its connection ceiling\" → {:.2} {}",
            h.score, h.finding.content
        );
    }

    let timeline = macp.timeline(&alice, TimelineQuery::new(room.room_id)).await?;
    println!(
        "\ntimeline: {} findings; root-cause refs resolve to {:?}",
        timeline.findings.len(),
        timeline.findings[1].entity_refs
    );

    let graph = macp
        .entity_graph(
            &alice,
            GraphQuery { room_id: room.room_id, entity_id: None, identifier: None, depth: None },
        )
        .await?;
    println!(
        "\nentity graph: {} entities, {} relationships",
        graph.total_entities, graph.total_relationships
    );
    for r in &graph.relationships {
        println!("  {} -[{}]-> {}", r.source_entity_id, r.relationship_type, r.target_entity_id);
    }

    let context = macp.room_context(&alice, room.room_id).await?;
    println!("\nbounded room context ({} bytes):", serde_json::to_vec(&context)?.len());
    println!("{}", serde_json::to_string_pretty(&context)?);
    println!("\ndata directory: {}", dir.display());
    Ok(())
}
