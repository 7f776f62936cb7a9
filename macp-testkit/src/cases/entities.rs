//! Entities: identifier convergence, merges, relationships and the graph.

use std::collections::HashSet;
use std::sync::Arc;

use macp_core::model::{EntityType, Evidence, EvidenceKind, Identifier};
use macp_core::service::{AddEntity, AddRelationship, GraphQuery, MergeEntities, PostFinding};
use macp_core::{EntityId, Limits};

use crate::Backend;

use super::*;

// ---------------------------------------------------------------------------------------------
// Entities

/// Adding an entity whose (normalised) identifier is claimed attaches to the existing entity,
/// adding the new identifiers and missing properties to it.
pub async fn shared_identifier_attaches_to_the_existing_entity(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let first = f
        .macp
        .add_entity(
            &f.alice,
            AddEntity::new(f.room, f.a.clone(), "db-1", EntityType::Resource)
                .identifier("hostname", "db-1.prod.internal")
                .property("engine", "postgres"),
        )
        .await
        .unwrap();
    assert!(first.created);
    let second = f
        .macp
        .add_entity(
            &f.bob,
            AddEntity::new(f.room, f.b.clone(), "primary database", EntityType::Resource)
                .identifier("Hostname", "DB-1.prod.internal.")
                .identifier("arn", "arn:aws:rds:us-west-2:1:db:db-1")
                .property("engine", "mysql")
                .property("version", "15"),
        )
        .await
        .unwrap();
    assert!(!second.created, "a shared identifier attaches");
    assert_eq!(second.entity.entity_id, first.entity.entity_id);
    assert_eq!(
        second.matched_identifiers,
        vec![Identifier { id_type: "hostname".into(), value: "db-1.prod.internal".into() }]
    );
    assert_eq!(
        second.entity.identifiers.len(),
        2,
        "the new identifier was added: {:?}",
        second.entity.identifiers
    );
    assert_eq!(second.entity.properties["engine"], "postgres", "existing properties are kept");
    assert_eq!(second.entity.properties["version"], "15", "missing properties are added");
    // The added identifier is now claimed too.
    let third = f
        .macp
        .add_entity(
            &f.alice,
            AddEntity::new(f.room, f.a.clone(), "rds", EntityType::Resource)
                .identifier("arn", "arn:aws:rds:us-west-2:1:db:db-1"),
        )
        .await
        .unwrap();
    assert_eq!(third.entity.entity_id, first.entity.entity_id);
    assert_eq!(f.macp.room_summary(&f.alice, f.room).await.unwrap().entity_count, 1);
    // Entities without identifiers never match each other.
    let x = f
        .macp
        .add_entity(&f.alice, AddEntity::new(f.room, f.a.clone(), "db-1", EntityType::Resource))
        .await
        .unwrap();
    assert!(x.created);
}

/// Sixteen concurrent adds sharing an identifier yield exactly one entity.
pub async fn concurrent_adds_sharing_an_identifier_yield_one_entity(backend: Backend) {
    let f = Arc::new(Fixture::new(&backend).await);
    let mut tasks = Vec::new();
    for i in 0..16 {
        let f = f.clone();
        tasks.push(tokio::spawn(async move {
            let (who, ag) = if i % 2 == 0 { (&f.alice, f.a.clone()) } else { (&f.bob, f.b.clone()) };
            f.macp
                .add_entity(
                    who,
                    AddEntity::new(f.room, ag, format!("host {i}"), EntityType::Resource)
                        .identifier("hostname", "ip-10-0-1-7")
                        .identifier("instance_id", format!("i-{i:04}")),
                )
                .await
                .unwrap()
        }));
    }
    let mut ids = HashSet::new();
    let mut created = 0;
    for t in tasks {
        let o = t.await.unwrap();
        ids.insert(o.entity.entity_id);
        created += usize::from(o.created);
    }
    assert_eq!(ids.len(), 1, "all sixteen converged on one entity");
    assert_eq!(created, 1, "exactly one add created it");
    let summary = f.macp.room_summary(&f.alice, f.room).await.unwrap();
    assert_eq!(summary.entity_count, 1);
    let graph = f
        .macp
        .entity_graph(
            &f.alice,
            GraphQuery { room_id: f.room, entity_id: None, identifier: None, depth: None },
        )
        .await
        .unwrap();
    assert_eq!(
        graph.entities[0].entity.identifiers.len(),
        17,
        "every instance id attached to the one entity"
    );
}

/// `add_entity` with a key replays its first result, attach or create.
pub async fn idempotent_add_entity_replays_the_first_result(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let req = AddEntity::new(f.room, f.a.clone(), "api", EntityType::Service)
        .identifier("service", "api")
        .idempotency_key("e1");
    let first = f.macp.add_entity(&f.alice, req.clone()).await.unwrap();
    let again = f.macp.add_entity(&f.alice, req).await.unwrap();
    assert!(again.replayed && again.created, "the replay reports the first result (created)");
    assert_eq!(again.entity.entity_id, first.entity.entity_id);
    let attach = AddEntity::new(f.room, f.b.clone(), "API", EntityType::Service)
        .identifier("service", "API")
        .idempotency_key("e2");
    let a1 = f.macp.add_entity(&f.bob, attach.clone()).await.unwrap();
    let a2 = f.macp.add_entity(&f.bob, attach).await.unwrap();
    assert!(!a1.created && !a2.created && a2.replayed);
    assert_eq!(f.macp.room_summary(&f.alice, f.room).await.unwrap().entity_count, 1);
}

/// Entity input limits are refused.
pub async fn entity_limits_refuse_and_never_truncate(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let l = Limits::default();
    let mut req = AddEntity::new(f.room, f.a.clone(), "many", EntityType::Resource);
    for i in 0..=l.max_identifiers {
        req = req.identifier("ip", format!("10.0.0.{i}"));
    }
    let e = expect_code(f.macp.add_entity(&f.alice, req).await, "invalid_input");
    assert_eq!(e.limit(), Some(l.max_identifiers as u64));
    expect_code(
        f.macp
            .add_entity(
                &f.alice,
                AddEntity::new(f.room, f.a.clone(), "n".repeat(l.max_name_bytes + 1), EntityType::Resource),
            )
            .await,
        "invalid_input",
    );
    expect_code(
        f.macp
            .add_entity(
                &f.alice,
                AddEntity::new(f.room, f.a.clone(), "x", EntityType::Resource).identifier("bad type!", "v"),
            )
            .await,
        "invalid_input",
    );
    let big = "p".repeat(l.max_properties_bytes);
    expect_code(
        f.macp
            .add_entity(
                &f.alice,
                AddEntity::new(f.room, f.a.clone(), "x", EntityType::Resource).property("blob", big),
            )
            .await,
        "invalid_input",
    );
    assert_eq!(f.macp.room_summary(&f.alice, f.room).await.unwrap().entity_count, 0);
}

/// Merge is lazy: the loser gets `merged_into`, identifiers unite on the winner, and every read
/// (graph, finding refs, relationship endpoints, artifact links, identifier matches) resolves
/// the old id to the winner.
pub async fn merge_is_lazy_and_aliases_resolve_on_every_read(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let winner = f.entity("payments-api", "service", "payments-api").await;
    let loser = f.entity("payments", "k8s_deployment", "payments-v2").await;
    let db = f.entity("db-1", "hostname", "db-1").await;
    f.link(loser, "depends_on", db).await;
    let finding = f
        .macp
        .post_finding(
            &f.alice,
            PostFinding::new(f.room, f.a.clone(), "payments times out on db-1").entity_refs([loser, db]),
        )
        .await
        .unwrap()
        .finding;
    let merged = f
        .macp
        .merge_entities(
            &f.bob,
            MergeEntities {
                room_id: f.room,
                agent_id: Some(f.b.clone()),
                winner_entity_id: winner,
                loser_entity_id: loser,
            },
        )
        .await
        .unwrap();
    assert!(!merged.already_merged);
    assert_eq!(merged.entity.entity.entity_id, winner);
    assert_eq!(merged.entity.aliases, vec![loser]);
    assert_eq!(merged.entity.entity.identifiers.len(), 2, "identifiers united on the winner");

    // Graph from the old id lands on the winner, with the loser's edge.
    let g = f
        .macp
        .entity_graph(
            &f.alice,
            GraphQuery { room_id: f.room, entity_id: Some(loser), identifier: None, depth: None },
        )
        .await
        .unwrap();
    assert_eq!(g.root, Some(winner));
    assert_eq!(g.relationships.len(), 1);
    assert_eq!((g.relationships[0].source_entity_id, g.relationships[0].target_entity_id), (winner, db));
    // The whole-room graph lists the winner with its alias, and not the loser.
    let all = f
        .macp
        .entity_graph(
            &f.alice,
            GraphQuery { room_id: f.room, entity_id: None, identifier: None, depth: None },
        )
        .await
        .unwrap();
    assert_eq!(all.total_entities, 2);
    assert!(all.entities.iter().all(|e| e.entity.entity_id != loser));
    // Finding refs resolve.
    let read = f.all_findings(&f.alice).await;
    assert_eq!(read[0].finding_id, finding.finding_id);
    assert_eq!(read[0].entity_refs, vec![winner, db]);
    // add_relationship with the old id attaches to the winner.
    let rel = f
        .macp
        .add_relationship(&f.alice, AddRelationship::new(f.room, f.a.clone(), db, "serves", loser))
        .await
        .unwrap();
    assert_eq!(rel.relationship.target_entity_id, winner);
    // A post can still name the old id; it reads back as the winner.
    let p = f
        .macp
        .post_finding(&f.alice, PostFinding::new(f.room, f.a.clone(), "again").entity_refs([loser]))
        .await
        .unwrap();
    assert_eq!(p.finding.entity_refs, vec![winner]);
    // The loser's identifier now resolves to the winner.
    let via_ident = f
        .macp
        .add_entity(
            &f.alice,
            AddEntity::new(f.room, f.a.clone(), "p", EntityType::Service)
                .identifier("k8s_deployment", "payments-v2"),
        )
        .await
        .unwrap();
    assert_eq!(via_ident.entity.entity_id, winner);
}

/// Chains resolve to the end, merging into an entity that was merged away targets its winner,
/// and merging two ids of one entity is a no-op — no cycles.
pub async fn merge_chains_resolve_without_cycles(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let a = f.entity("a", "host", "a").await;
    let b = f.entity("b", "host", "b").await;
    let c = f.entity("c", "host", "c").await;
    let d = f.entity("d", "host", "d").await;
    let merge = |w: EntityId, l: EntityId| {
        f.macp.merge_entities(
            &f.alice,
            MergeEntities {
                room_id: f.room,
                agent_id: Some(f.a.clone()),
                winner_entity_id: w,
                loser_entity_id: l,
            },
        )
    };
    merge(b, c).await.unwrap(); // c -> b
    merge(a, b).await.unwrap(); // b -> a, so c -> b -> a
    let into_merged = merge(c, d).await.unwrap(); // winner c resolves to a
    assert_eq!(
        into_merged.entity.entity.entity_id, a,
        "merging into a merged-away entity targets its winner"
    );
    let mut aliases = into_merged.entity.aliases.clone();
    aliases.sort();
    let mut expected = vec![b, c, d];
    expected.sort();
    assert_eq!(aliases, expected);
    let back = merge(d, a).await.unwrap();
    assert!(back.already_merged, "reverse merge of one entity is a no-op");
    for id in [a, b, c, d] {
        let g = f
            .macp
            .entity_graph(
                &f.alice,
                GraphQuery { room_id: f.room, entity_id: Some(id), identifier: None, depth: None },
            )
            .await
            .unwrap();
        assert_eq!(g.root, Some(a), "{id} resolves to the chain's end");
    }
    assert_eq!(f.macp.room_summary(&f.alice, f.room).await.unwrap().entity_count, 1);
    expect_code(merge(a, EntityId::generate()).await, "not_found");
}

/// Opposite merges racing each other still leave one canonical entity.
pub async fn concurrent_opposite_merges_never_form_a_cycle(backend: Backend) {
    let f = Arc::new(Fixture::new(&backend).await);
    for round in 0..8 {
        let x = f.entity("x", "host", &format!("x{round}")).await;
        let y = f.entity("y", "host", &format!("y{round}")).await;
        let mut tasks = Vec::new();
        for (w, l) in [(x, y), (y, x), (x, y), (y, x)] {
            let f = f.clone();
            tasks.push(tokio::spawn(async move {
                f.macp
                    .merge_entities(
                        &f.alice,
                        MergeEntities {
                            room_id: f.room,
                            agent_id: Some(f.a.clone()),
                            winner_entity_id: w,
                            loser_entity_id: l,
                        },
                    )
                    .await
                    .unwrap()
            }));
        }
        let mut winners = HashSet::new();
        let mut applied = 0;
        for t in tasks {
            let o = t.await.unwrap();
            winners.insert(o.entity.entity.entity_id);
            applied += usize::from(!o.already_merged);
        }
        assert_eq!(winners.len(), 1, "all merges report the same canonical entity");
        assert_eq!(applied, 1, "exactly one merge applied");
        let gx = f
            .macp
            .entity_graph(
                &f.alice,
                GraphQuery { room_id: f.room, entity_id: Some(x), identifier: None, depth: None },
            )
            .await
            .unwrap();
        let gy = f
            .macp
            .entity_graph(
                &f.alice,
                GraphQuery { room_id: f.room, entity_id: Some(y), identifier: None, depth: None },
            )
            .await
            .unwrap();
        assert_eq!(gx.root, gy.root);
    }
}

/// Asserting the same edge twice keeps one edge and unites its evidence.
pub async fn repeated_relationship_adds_evidence_to_one_edge(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let web = f.entity("web", "service", "web").await;
    let db = f.entity("db", "service", "db").await;
    let ev = |r: &str| Evidence {
        kind: EvidenceKind::Datadog,
        reference: r.into(),
        description: None,
        captured_at: None,
    };
    let first = f
        .macp
        .add_relationship(
            &f.alice,
            AddRelationship {
                evidence: vec![ev("dd/1")],
                description: Some("calls".into()),
                ..AddRelationship::new(f.room, f.a.clone(), web, "Depends-On", db)
            },
        )
        .await
        .unwrap();
    assert!(first.created);
    assert_eq!(first.relationship.relationship_type, "depends_on", "types are normalised");
    let second = f
        .macp
        .add_relationship(
            &f.bob,
            AddRelationship {
                evidence: vec![ev("dd/1"), ev("dd/2")],
                ..AddRelationship::new(f.room, f.b.clone(), web, "depends_on", db)
            },
        )
        .await
        .unwrap();
    assert!(!second.created);
    assert_eq!(second.relationship.evidence, vec![ev("dd/1"), ev("dd/2")]);
    assert_eq!(second.relationship.description.as_deref(), Some("calls"));
    assert_eq!(second.relationship.agent_id, f.a, "the first assertion's author is kept");
    assert_eq!(f.macp.room_summary(&f.alice, f.room).await.unwrap().relationship_count, 1);
}

/// A repeated assertion never replaces what the edge has: a description stays the first one
/// given, and evidence keeps its order, each item once.
pub async fn a_repeated_relationship_keeps_its_first_description_and_evidence_order(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let web = f.entity("web", "service", "web").await;
    let db = f.entity("db", "service", "db").await;
    let ev = |r: &str| Evidence {
        kind: EvidenceKind::Log,
        reference: r.into(),
        description: None,
        captured_at: None,
    };
    let first = f
        .macp
        .add_relationship(
            &f.alice,
            AddRelationship {
                evidence: vec![ev("log/b"), ev("log/a")],
                description: Some("web calls db for sessions".into()),
                ..AddRelationship::new(f.room, f.a.clone(), web, "calls", db)
            },
        )
        .await
        .unwrap();
    assert!(first.created);
    let again = f
        .macp
        .add_relationship(
            &f.bob,
            AddRelationship {
                evidence: vec![ev("log/c"), ev("log/a"), ev("log/c")],
                description: Some("a different account of the same edge".into()),
                ..AddRelationship::new(f.room, f.b.clone(), web, "calls", db)
            },
        )
        .await
        .unwrap();
    assert!(!again.created);
    assert_eq!(
        again.relationship.description.as_deref(),
        Some("web calls db for sessions"),
        "the first description stays"
    );
    assert_eq!(
        again.relationship.evidence,
        vec![ev("log/b"), ev("log/a"), ev("log/c")],
        "first assertion's evidence in its order, then new items once each"
    );
    let graph = f
        .macp
        .entity_graph(
            &f.alice,
            GraphQuery { room_id: f.room, entity_id: Some(web), identifier: None, depth: Some(1) },
        )
        .await
        .unwrap();
    assert_eq!(graph.relationships.len(), 1);
    assert_eq!(graph.relationships[0], again.relationship, "what is stored is what was answered");
}

/// An entity's identifiers are a set sorted by (type, value), whatever order they arrive in,
/// after an attach and after a merge; and the first value given for a property stays.
pub async fn entity_identifiers_stay_a_sorted_set_through_attach_and_merge(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let id = |t: &str, v: &str| Identifier { id_type: t.into(), value: v.into() };
    let a = f
        .macp
        .add_entity(
            &f.alice,
            AddEntity::new(f.room, f.a.clone(), "api", EntityType::Resource)
                .identifier("k8s_service", "api")
                .identifier("arn", "arn:aws:ecs:us-west-2:1:service/api")
                .property("owner", "team-a"),
        )
        .await
        .unwrap();
    let sorted = |v: &[Identifier]| {
        let mut s = v.to_vec();
        s.sort();
        s.dedup();
        s
    };
    assert_eq!(a.entity.identifiers, sorted(&a.entity.identifiers));
    // Attach through a shared identifier, with new ones out of order and one already held.
    let attached = f
        .macp
        .add_entity(
            &f.bob,
            AddEntity::new(f.room, f.b.clone(), "api service", EntityType::Resource)
                .identifier("url", "https://api.internal")
                .identifier("k8s_service", "api")
                .identifier("hostname", "api.internal")
                .property("owner", "team-b")
                .property("tier", "1"),
        )
        .await
        .unwrap();
    assert_eq!(attached.entity.entity_id, a.entity.entity_id);
    let want = vec![
        id("arn", "arn:aws:ecs:us-west-2:1:service/api"),
        id("hostname", "api.internal"),
        id("k8s_service", "api"),
        id("url", "https://api.internal"),
    ];
    assert_eq!(attached.entity.identifiers, want, "sorted, each once");
    assert_eq!(attached.entity.properties["owner"], "team-a", "the first value stays");
    assert_eq!(attached.entity.properties["tier"], "1");
    // Merge an entity whose identifiers interleave with and repeat the winner's.
    let b = f
        .macp
        .add_entity(
            &f.alice,
            AddEntity::new(f.room, f.a.clone(), "api (old name)", EntityType::Resource)
                .identifier("ip", "10.0.0.7")
                .identifier("ecs_task", "api-task"),
        )
        .await
        .unwrap();
    let merged = f
        .macp
        .merge_entities(
            &f.alice,
            MergeEntities {
                room_id: f.room,
                agent_id: Some(f.a.clone()),
                winner_entity_id: a.entity.entity_id,
                loser_entity_id: b.entity.entity_id,
            },
        )
        .await
        .unwrap();
    let mut all = want.clone();
    all.extend([id("ecs_task", "api-task"), id("ip", "10.0.0.7")]);
    assert_eq!(merged.entity.entity.identifiers, sorted(&all), "the union, sorted, each once");
    let graph = f
        .macp
        .entity_graph(
            &f.bob,
            GraphQuery {
                room_id: f.room,
                entity_id: Some(b.entity.entity_id),
                identifier: None,
                depth: Some(1),
            },
        )
        .await
        .unwrap();
    let root = graph.entities.iter().find(|e| e.entity.entity_id == a.entity.entity_id).unwrap();
    assert_eq!(
        root.entity.identifiers, merged.entity.entity.identifiers,
        "what is stored is what was answered"
    );
}

/// Endpoints must exist in the room, and an entity cannot relate to itself (even via a merge).
pub async fn relationship_endpoints_must_exist_and_differ(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let x = f.entity("x", "host", "x").await;
    let y = f.entity("y", "host", "y").await;
    expect_code(
        f.macp
            .add_relationship(
                &f.alice,
                AddRelationship::new(f.room, f.a.clone(), x, "depends_on", EntityId::generate()),
            )
            .await,
        "not_found",
    );
    expect_code(
        f.macp
            .add_relationship(&f.alice, AddRelationship::new(f.room, f.a.clone(), x, "depends_on", x))
            .await,
        "invalid_input",
    );
    expect_code(
        f.macp
            .add_relationship(&f.alice, AddRelationship::new(f.room, f.a.clone(), x, "depends on!", y))
            .await,
        "invalid_input",
    );
    f.macp
        .merge_entities(
            &f.alice,
            MergeEntities {
                room_id: f.room,
                agent_id: Some(f.a.clone()),
                winner_entity_id: x,
                loser_entity_id: y,
            },
        )
        .await
        .unwrap();
    expect_code(
        f.macp.add_relationship(&f.alice, AddRelationship::new(f.room, f.a.clone(), x, "same_as", y)).await,
        "invalid_input",
    );
}

/// `add_relationship` with a key replays.
pub async fn idempotent_add_relationship_replays(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let x = f.entity("x", "host", "x").await;
    let y = f.entity("y", "host", "y").await;
    let req = AddRelationship {
        idempotency_key: Some("r1".into()),
        ..AddRelationship::new(f.room, f.a.clone(), x, "caused_by", y)
    };
    let first = f.macp.add_relationship(&f.alice, req.clone()).await.unwrap();
    let again = f.macp.add_relationship(&f.alice, req.clone()).await.unwrap();
    assert!(again.replayed);
    assert_eq!(again.relationship, first.relationship);
    expect_code(
        f.macp.add_relationship(&f.alice, AddRelationship { description: Some("other".into()), ..req }).await,
        "conflict",
    );
}

/// A graph walk returns the neighbourhood to the requested depth; deeper than the cap is refused.
pub async fn entity_graph_walks_to_depth_and_refuses_deeper(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let mut chain = Vec::new();
    for i in 0..5 {
        chain.push(f.entity(&format!("n{i}"), "host", &format!("n{i}")).await);
    }
    for w in chain.windows(2) {
        f.link(w[0], "depends_on", w[1]).await;
    }
    let walk = |depth| {
        f.macp.entity_graph(
            &f.alice,
            GraphQuery { room_id: f.room, entity_id: Some(chain[0]), identifier: None, depth: Some(depth) },
        )
    };
    let one = walk(1).await.unwrap();
    assert_eq!(one.entities.iter().map(|e| e.entity.entity_id).collect::<Vec<_>>(), chain[..2].to_vec());
    assert_eq!(one.relationships.len(), 1);
    let three = walk(3).await.unwrap();
    assert_eq!(three.entities.len(), 4);
    assert_eq!(three.relationships.len(), 3);
    assert_eq!(three.entities[1].degree, 2, "degree counts edges in and out");
    let e = expect_code(walk(Limits::default().max_graph_depth + 1).await, "invalid_input");
    assert_eq!(e.limit(), Some(Limits::default().max_graph_depth as u64));
    let whole = f
        .macp
        .entity_graph(
            &f.alice,
            GraphQuery { room_id: f.room, entity_id: None, identifier: None, depth: None },
        )
        .await
        .unwrap();
    assert_eq!((whole.entities.len(), whole.relationships.len(), whole.truncated), (5, 4, false));
}

/// A merge may not leave the winner with more identifiers than an entity may hold: it is refused
/// with the limit and merges nothing. Attaching by identifiers an entity already holds is never
/// refused by the limit.
pub async fn merge_refuses_to_exceed_the_identifier_limit(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let max = Limits::default().max_identifiers;
    let add = |name: &'static str, from: usize, n: usize| {
        let mut req = AddEntity::new(f.room, f.a.clone(), name, EntityType::Resource);
        for i in from..from + n {
            req = req.identifier("host", format!("ip-10-0-{i}-1"));
        }
        let (macp, who) = (f.macp.clone(), f.alice.clone());
        async move { macp.add_entity(&who, req).await.unwrap().entity.entity_id }
    };
    let merge = |w: EntityId, l: EntityId| {
        let req = MergeEntities {
            room_id: f.room,
            agent_id: Some(f.a.clone()),
            winner_entity_id: w,
            loser_entity_id: l,
        };
        let (macp, who) = (f.macp.clone(), f.alice.clone());
        async move { macp.merge_entities(&who, req).await }
    };
    let a = add("fleet-a", 0, max - 4).await;
    let b = add("fleet-b", 100, 8).await;
    let e = expect_code(merge(a, b).await, "invalid_input");
    assert_eq!(e.limit(), Some(max as u64), "{e}");
    let g = f
        .macp
        .entity_graph(
            &f.alice,
            GraphQuery { room_id: f.room, entity_id: None, identifier: None, depth: None },
        )
        .await
        .unwrap();
    assert_eq!(g.entities.len(), 2, "nothing was merged");

    let c = add("fleet-c", 200, 4).await;
    let merged = merge(a, c).await.unwrap();
    assert_eq!(merged.entity.entity.identifiers.len(), max, "exactly at the limit is allowed");
    // Attaching by identifiers the entity holds adds nothing and is not refused.
    let again = f
        .macp
        .add_entity(
            &f.bob,
            AddEntity::new(f.room, f.b.clone(), "fleet", EntityType::Resource)
                .identifier("host", "ip-10-0-0-1")
                .identifier("host", "ip-10-0-200-1"),
        )
        .await
        .unwrap();
    assert_eq!(again.entity.entity_id, a);
    // One new identifier on a full entity is refused with the limit.
    let e = expect_code(
        f.macp
            .add_entity(
                &f.bob,
                AddEntity::new(f.room, f.b.clone(), "fleet", EntityType::Resource)
                    .identifier("host", "ip-10-0-0-1")
                    .identifier("host", "ip-10-9-9-9"),
            )
            .await,
        "invalid_input",
    );
    assert_eq!(e.limit(), Some(max as u64));
}

/// An entity is looked up by one of its identifiers (normalised like any other) without being
/// created: an identifier nobody holds is `not_found` and writes nothing; a merged-away
/// entity's identifier finds the winner.
pub async fn an_entity_is_found_by_identifier_without_creating_it(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let db = f.entity("orders-db", "hostname", "orders-db.prod").await;
    let rds = f.entity("orders rds", "arn", "arn:aws:rds:us-east-1:1:db:orders").await;
    let g = f
        .macp
        .entity_graph(&f.alice, GraphQuery::new(f.room).by_identifier("HOSTNAME", "Orders-DB.prod", 0))
        .await
        .unwrap();
    assert_eq!(g.root, Some(db));
    assert_eq!(g.entities.len(), 1);
    let before = f.macp.room_summary(&f.alice, f.room).await.unwrap().entity_count;
    expect_code(
        f.macp
            .entity_graph(&f.alice, GraphQuery::new(f.room).by_identifier("hostname", "nowhere.prod", 1))
            .await,
        "not_found",
    );
    assert_eq!(
        f.macp.room_summary(&f.alice, f.room).await.unwrap().entity_count,
        before,
        "a lookup creates nothing"
    );
    f.macp.merge_entities(&f.alice, MergeEntities::new(f.room, f.a.clone(), db, rds)).await.unwrap();
    let g = f
        .macp
        .entity_graph(
            &f.alice,
            GraphQuery::new(f.room).by_identifier("arn", "arn:aws:rds:us-east-1:1:db:orders", 1),
        )
        .await
        .unwrap();
    assert_eq!(g.root, Some(db), "the merged-away entity's identifier finds the winner");
    expect_code(
        f.macp
            .entity_graph(
                &f.alice,
                GraphQuery {
                    entity_id: Some(db),
                    ..GraphQuery::new(f.room).by_identifier("hostname", "orders-db.prod", 1)
                },
            )
            .await,
        "invalid_input",
    );
}
