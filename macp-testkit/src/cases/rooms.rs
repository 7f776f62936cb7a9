//! Rooms: creating, listing, closing, the summary and the bounded context.

use macp_core::model::{AgentStatus, Channel, EntityType, RoomStatus, VisibilityMode};
use macp_core::service::{
    AddEntity, AddRelationship, CloseRoom, CreateRoom, DeclareStatus, GraphQuery, JoinRoom, ListArtifacts,
    ListRooms, MergeEntities, PostFinding, RoomFilter, UpdatesQuery,
};
use macp_core::{FindingId, Limits, Macp, RoomId};

use crate::Backend;

use super::*;

// ---------------------------------------------------------------------------------------------
// Rooms

/// A new room gets a UUID, `full` visibility, `active` status and its creator.
pub async fn create_room_assigns_id_and_defaults(backend: Backend) {
    let (macp, _) = backend.service();
    let alice = principal("alice");
    let room = macp
        .create_room(
            &alice,
            CreateRoom { tags: vec!["Sev-2".into()], ..CreateRoom::new("  Why is p99 up?  ") },
        )
        .await
        .unwrap();
    assert_eq!(room.visibility_mode, VisibilityMode::Full);
    assert_eq!(room.status, RoomStatus::Active);
    assert_eq!(room.created_by.as_str(), "alice");
    assert_eq!(room.objective, "Why is p99 up?", "objective is trimmed");
    assert_eq!(room.tags, vec!["sev-2"], "tags are normalised");
    let again = macp.room_summary(&alice, room.room_id).await.unwrap().room;
    assert_eq!(again, *room, "the stored room reads back identically");
}

/// Bad input is refused with a stable code and the limit, and nothing is written.
pub async fn create_room_refuses_bad_input_and_writes_nothing(backend: Backend) {
    let (macp, _) = backend.service();
    let alice = principal("alice");
    expect_code(macp.create_room(&alice, CreateRoom::new("   ")).await, "invalid_input");
    let long = "x".repeat(Limits::default().max_objective_bytes + 1);
    let e = expect_code(macp.create_room(&alice, CreateRoom::new(long)).await, "invalid_input");
    assert_eq!(e.limit(), Some(Limits::default().max_objective_bytes as u64));
    let many_tags: Vec<String> = (0..17).map(|i| format!("t{i}")).collect();
    expect_code(
        macp.create_room(&alice, CreateRoom { tags: many_tags, ..CreateRoom::new("ok") }).await,
        "invalid_input",
    );
    let page = macp.list_rooms(&alice, ListRooms::default()).await.unwrap();
    assert!(page.rooms.is_empty(), "refused creates wrote nothing: {:?}", page.rooms);
}

/// Rooms list newest first, page with a cursor, and filter by status.
pub async fn list_rooms_pages_newest_first_and_filters_by_status(backend: Backend) {
    let (macp, clock) = backend.service();
    let alice = principal("alice");
    let mut ids = Vec::new();
    for i in 0..5 {
        clock.advance_ms(1000);
        ids.push(macp.create_room(&alice, CreateRoom::new(format!("room {i}"))).await.unwrap().room_id);
    }
    macp.close_room(&alice, CloseRoom::new(ids[1]), Channel::Person).await.unwrap();
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = macp
            .list_rooms(&alice, ListRooms { status: RoomFilter::All, limit: Some(2), cursor })
            .await
            .unwrap();
        assert!(page.rooms.len() <= 2);
        seen.extend(page.rooms.iter().map(|r| r.room_id));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    let newest_first: Vec<RoomId> = ids.iter().rev().copied().collect();
    assert_eq!(seen, newest_first, "all rooms, newest first, each once");
    let closed = macp.list_rooms(&alice, ListRooms::new().status(RoomFilter::Closed)).await.unwrap();
    assert_eq!(closed.rooms.iter().map(|r| r.room_id).collect::<Vec<_>>(), vec![ids[1]]);
    let active = macp.list_rooms(&alice, ListRooms::new()).await.unwrap();
    assert_eq!(active.rooms.len(), 4);
    expect_code(
        macp.list_rooms(&alice, ListRooms { limit: Some(0), ..Default::default() }).await,
        "invalid_input",
    );
    let e = expect_code(
        macp.list_rooms(&alice, ListRooms { limit: Some(10_000), ..Default::default() }).await,
        "invalid_input",
    );
    assert_eq!(e.limit(), Some(Limits::default().max_page as u64));
}

/// A closed room answers every read and refuses every write with `room_closed`.
pub async fn closed_room_stays_readable_and_refuses_writes(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let e1 = f.entity("web-1", "hostname", "web-1").await;
    let e2 = f.entity("db-1", "hostname", "db-1").await;
    f.link(e1, "depends_on", e2).await;
    let finding = f.post("web-1 cannot reach db-1", &["triage"]).await;
    let closed = f.macp.close_room(&f.bob, CloseRoom::new(f.room), Channel::Person).await.unwrap();
    assert_eq!(closed.status, RoomStatus::Closed);
    assert_eq!(closed.closed_by.as_ref().map(|u| u.as_str()), Some("bob@example.com"));

    let (m, r, a) = (&f.macp, f.room, f.a.clone());
    expect_code(m.post_finding(&f.alice, PostFinding::new(r, a.clone(), "late")).await, "room_closed");
    expect_code(m.join_room(&f.alice, JoinRoom::new(r)).await, "room_closed");
    expect_code(
        m.declare_status(
            &f.alice,
            DeclareStatus { room_id: r, agent_id: Some(a.clone()), status: AgentStatus::Idle, reason: None },
        )
        .await,
        "room_closed",
    );
    expect_code(
        m.add_entity(&f.alice, AddEntity::new(r, a.clone(), "x", EntityType::Service)).await,
        "room_closed",
    );
    expect_code(
        m.add_relationship(&f.alice, AddRelationship::new(r, a.clone(), e2, "caused_by", e1)).await,
        "room_closed",
    );
    expect_code(
        m.merge_entities(
            &f.alice,
            MergeEntities {
                room_id: r,
                agent_id: Some(a.clone()),
                winner_entity_id: e1,
                loser_entity_id: e2,
            },
        )
        .await,
        "room_closed",
    );
    expect_code(
        m.register_artifact(&f.alice, artifact_req(r, a.clone(), "log.txt", vec![])).await,
        "room_closed",
    );

    let timeline = f.all_findings(&f.bob).await;
    assert_eq!(timeline.iter().map(|x| x.finding_id).collect::<Vec<_>>(), vec![finding.finding_id]);
    let updates = m.updates(&f.bob, UpdatesQuery::new(r)).await.unwrap();
    assert_eq!(updates.findings.len(), 1);
    let ctx = m.room_context(&f.bob, r).await.unwrap();
    assert_eq!(ctx.room.status, RoomStatus::Closed);
    assert_eq!(ctx.findings.total, 1);
    let summary = m.room_summary(&f.bob, r).await.unwrap();
    assert_eq!((summary.finding_count, summary.entity_count, summary.relationship_count), (1, 2, 1));
    let graph = m
        .entity_graph(&f.bob, GraphQuery { room_id: r, entity_id: Some(e1), identifier: None, depth: None })
        .await
        .unwrap();
    assert_eq!(graph.relationships.len(), 1);
    if f.transfer.is_some() {
        m.list_artifacts(
            &f.bob,
            ListArtifacts { room_id: r, finding_id: None, entity_id: None, limit: None, cursor: None },
        )
        .await
        .unwrap();
    }
}

/// Closing twice keeps the first close.
pub async fn close_room_is_idempotent(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let first = f.macp.close_room(&f.alice, CloseRoom::new(f.room), Channel::Person).await.unwrap();
    f.clock.advance_ms(5000);
    let second = f.macp.close_room(&f.bob, CloseRoom::new(f.room), Channel::Person).await.unwrap();
    assert_eq!(first, second, "the second close changes nothing");
    expect_code(
        f.macp.close_room(&f.alice, CloseRoom::new(RoomId::generate()), Channel::Person).await,
        "not_found",
    );
}

// ---------------------------------------------------------------------------------------------
// Summary and context

/// Summary counts are exact.
pub async fn room_summary_counts_are_exact(backend: Backend) {
    let f = Fixture::new(&backend).await;
    for i in 0..7 {
        f.post(&format!("f{i}"), if i < 3 { &["dead-end"] } else { &["root-cause", "triage"] }).await;
    }
    let x = f.entity("x", "host", "x").await;
    let y = f.entity("y", "host", "y").await;
    let z = f.entity("z", "host", "z").await;
    f.link(x, "depends_on", y).await;
    f.macp
        .merge_entities(
            &f.alice,
            MergeEntities {
                room_id: f.room,
                agent_id: Some(f.a.clone()),
                winner_entity_id: x,
                loser_entity_id: z,
            },
        )
        .await
        .unwrap();
    f.clock.advance_ms(10_000);
    // With artifact storage, one artifact counts too; without, the count is 0.
    let artifacts = if f.transfer.is_some() {
        let key = f.upload("1.log", b"log").await;
        f.macp.register_artifact(&f.alice, artifact_req(f.room, f.a.clone(), &key, vec![])).await.unwrap();
        1
    } else {
        0
    };
    let s = f.macp.room_summary(&f.alice, f.room).await.unwrap();
    assert_eq!(s.finding_count, 7);
    assert_eq!(s.entity_count, 2, "merged aliases are not counted");
    assert_eq!(s.relationship_count, 1);
    assert_eq!(s.artifact_count, artifacts);
    assert_eq!(s.agents.total, 2);
    assert_eq!(s.tag_counts.get("dead-end"), Some(&3));
    assert_eq!(s.tag_counts.get("root-cause"), Some(&4));
    assert_eq!(s.latest_activity, f.clock_now(), "latest activity is the last write");
}

/// In a 10,000-finding room the context stays within its caps and byte budget, and reports
/// exact totals so the agent knows what it did not see.
pub async fn room_context_is_bounded_in_a_large_room(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let body = "Observed elevated 502s from the checkout ALB; correlating with deploy events and DB connection pool saturation. ".repeat(6);
    for i in 0..10_000u32 {
        let tag = ["triage", "hypothesis", "evidence", "dead-end"][(i % 4) as usize];
        f.macp
            .post_finding(&f.alice, PostFinding::new(f.room, f.a.clone(), format!("#{i} {body}")).tags([tag]))
            .await
            .unwrap();
    }
    let hub = f.entity("svc-0", "service", "svc-0").await;
    for i in 1..40 {
        let e = f.entity(&format!("svc-{i}"), "service", &format!("svc-{i}")).await;
        f.link(hub, "depends_on", e).await;
    }
    let ctx = f.macp.room_context(&f.bob, f.room).await.unwrap();
    let caps = f.macp.context_caps().clone();
    let size = serde_json::to_vec(&ctx).unwrap().len();
    assert!(size <= caps.budget_bytes, "context is {size} bytes, over the {} budget", caps.budget_bytes);
    assert_eq!(ctx.findings.total, 10_000, "total is exact");
    assert!(ctx.findings.shown <= caps.findings && ctx.findings.shown >= 1);
    assert_eq!(ctx.findings.items.len(), ctx.findings.shown);
    assert_eq!(ctx.findings.items.last().unwrap().seq, 10_000, "the newest finding is shown");
    assert!(
        ctx.findings.items.windows(2).all(|w| w[0].seq + 1 == w[1].seq),
        "the shown findings are the latest, in order"
    );
    assert!(
        ctx.findings
            .items
            .iter()
            .all(|x| x.content_truncated && x.content.chars().count() == caps.content_preview_chars)
    );
    assert_eq!(ctx.entities.total, 40);
    assert!(ctx.entities.shown <= caps.entities);
    assert_eq!(ctx.entities.items[0].name, "svc-0", "the hub has the highest degree");
    assert_eq!(ctx.entities.items[0].degree, 39);
    assert_eq!(ctx.tag_counts.values().sum::<u64>(), 10_000);
    assert_eq!(ctx.tag_counts.get("dead-end"), Some(&2_500));
    assert_eq!(ctx.agents.counts.total, 2);
    assert_eq!(ctx.caps, caps, "the caps used are reported");
    // A tighter budget drops items but keeps the response valid and within budget. (The
    // service refuses a budget that could not hold a room at its input limits: lower them.)
    let mut small_limits = macp_core::Limits::default();
    small_limits.max_objective_bytes = 512;
    small_limits.max_name_bytes = 100;
    small_limits.max_tags = 4;
    small_limits.max_tag_bytes = 32;
    let mut tight_caps = macp_core::ContextCaps::default();
    tight_caps.budget_bytes = 4096;
    let refused = Macp::builder().store(backend.store.clone()).context_caps(tight_caps.clone()).build();
    let err = refused.expect_err("a 4 KiB budget cannot hold a 4 KiB objective");
    assert_eq!((err.code(), err.limit()), ("invalid_input", Some(12_736)), "{err}");
    let tight = Macp::builder()
        .store(backend.store.clone())
        .limits(small_limits)
        .context_caps(tight_caps)
        .build()
        .unwrap();
    let small = tight.room_context(&f.bob, f.room).await.unwrap();
    assert!(serde_json::to_vec(&small).unwrap().len() <= 4096);
    assert!(small.findings.shown < ctx.findings.shown);
    assert_eq!(small.findings.total, 10_000);
}

/// A room whose findings carry thousands of distinct tags still gets a context within its byte
/// budget: `tag_counts` lists the most used tags up to the cap, and says how many exist.
pub async fn room_context_lists_the_most_used_tags_within_budget(backend: Backend) {
    let f = Fixture::new(&backend).await;
    for i in 0..250u32 {
        let mut tags: Vec<String> = (0..15).map(|k| format!("host:ip-10-{i}-{k}-0.ec2.internal")).collect();
        tags.push(if i % 5 == 0 { "root-cause".into() } else { "evidence".into() });
        f.macp
            .post_finding(&f.alice, PostFinding::new(f.room, f.a.clone(), format!("finding {i}")).tags(tags))
            .await
            .unwrap();
    }
    let ctx = f.macp.room_context(&f.bob, f.room).await.unwrap();
    let caps = f.macp.context_caps().clone();
    let size = serde_json::to_vec(&ctx).unwrap().len();
    assert!(size <= caps.budget_bytes, "context is {size} bytes, over the {} budget", caps.budget_bytes);
    assert_eq!(ctx.tags_total, 250 * 15 + 2, "every distinct tag is counted");
    assert_eq!(ctx.tags_shown, ctx.tag_counts.len());
    assert!(ctx.tags_shown <= caps.tags);
    assert_eq!(ctx.tag_counts.get("evidence"), Some(&200), "the most used tags are listed, exactly");
    assert_eq!(ctx.tag_counts.get("root-cause"), Some(&50));
    assert!(ctx.findings.shown >= 5, "tag counts never push the latest findings below five");
    assert_eq!(ctx.findings.items.last().unwrap().content, "finding 249");
    let summary = f.macp.room_summary(&f.bob, f.room).await.unwrap();
    assert_eq!(summary.tag_counts.len(), ctx.tags_total, "the summary has every tag");
}

/// A newcomer orients from the context alone in a 2,000-finding room: it stays within its caps
/// and byte budget; its totals (findings, per tag, entities, relationships, agents by status)
/// are exact; it shows authors, tags, identifiers and blocked reasons; and polling from its
/// cursor returns exactly the findings posted afterwards, by several writers at once.
pub async fn a_newcomer_orients_in_a_2000_finding_room(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let carol = principal("carol@example.com");
    let c =
        f.macp.join_room(&carol, JoinRoom::new(f.room).agent(agent("carol-codex"))).await.unwrap().agent_id;
    let tags = ["triage", "evidence", "hypothesis", "dead-end", "root-cause", "remediation"];
    let mut want_tags = std::collections::BTreeMap::<String, u64>::new();
    let writers = [(&f.alice, &f.a), (&f.bob, &f.b), (&carol, &c)];
    for i in 0..2_000usize {
        // Every 7th finding carries two tags; the per-tag counts must count both.
        let mut t = vec![tags[i % tags.len()]];
        if i % 7 == 0 {
            t.push("follow-up");
        }
        for x in &t {
            *want_tags.entry((*x).to_owned()).or_default() += 1;
        }
        let (who, agent_id) = writers[i % 3];
        let body = format!("#{i}: {} on orders-db-{} at 14:{:02} UTC", tags[i % tags.len()], i % 5, i % 60);
        f.macp.post_finding(who, PostFinding::new(f.room, agent_id.clone(), body).tags(t)).await.unwrap();
    }
    let db = f.entity("orders-db-primary", "hostname", "orders-db-primary.prod.internal").await;
    for i in 0..24 {
        let svc = f.entity(&format!("svc-{i}"), "service", &format!("svc-{i}")).await;
        f.link(svc, "depends_on", db).await;
    }
    for (who, agent_id, status, reason) in [
        (&f.alice, &f.a, AgentStatus::Active, Some("reading the pool metrics")),
        (&f.bob, &f.b, AgentStatus::Idle, None),
        (&carol, &c, AgentStatus::Blocked, Some("need read access to the RDS logs")),
    ] {
        let d = DeclareStatus {
            room_id: f.room,
            agent_id: Some(agent_id.clone()),
            status,
            reason: reason.map(Into::into),
        };
        f.macp.declare_status(who, d).await.unwrap();
    }

    let dee = principal("dee@example.com");
    let ctx = f.macp.room_context(&dee, f.room).await.unwrap();
    let caps = f.macp.context_caps().clone();
    let size = serde_json::to_vec(&ctx).unwrap().len();
    assert!(size <= caps.budget_bytes, "context is {size} bytes, over the {} budget", caps.budget_bytes);
    assert!(ctx.room.objective.contains("502"), "the objective is there");
    assert_eq!(ctx.findings.total, 2_000, "finding total is exact");
    assert!(ctx.findings.shown >= 1 && ctx.findings.shown <= caps.findings);
    assert_eq!(ctx.findings.items.last().unwrap().seq, 2_000, "the newest finding is shown");
    for x in &ctx.findings.items {
        let i = (x.seq - 1) as usize;
        let (who, agent_id) = writers[i % 3];
        assert_eq!((&x.agent_id, &x.user_id), (agent_id, &who.user_id), "#{i} is attributed");
        assert_eq!(x.tags[0], tags[i % tags.len()], "#{i} shows its tags");
    }
    assert_eq!(ctx.tag_counts, want_tags, "per-tag counts are exact");
    assert_eq!(ctx.tag_counts.get("dead-end"), Some(&333), "dead ends are countable");
    assert_eq!((ctx.entities.total, ctx.entities.relationship_total), (25, 24), "entity totals are exact");
    let top = &ctx.entities.items[0];
    assert_eq!((top.entity_id, top.degree), (db, 24), "the hub comes first");
    assert_eq!(top.identifiers[0].value, "orders-db-primary.prod.internal", "with its identifiers");
    assert!(ctx.entities.shown <= caps.entities);
    let counts = &ctx.agents.counts;
    assert_eq!((counts.total, counts.active, counts.idle, counts.blocked), (3, 1, 1, 1), "agents by status");
    let blocked = ctx.agents.items.iter().find(|s| s.agent_id == c).expect("the blocked agent is shown");
    assert_eq!(blocked.status_reason.as_deref(), Some("need read access to the RDS logs"));

    // Three writers keep posting; the newcomer polls from the context's cursor.
    let mut tasks = tokio::task::JoinSet::new();
    for (w, (who, agent_id)) in writers.iter().enumerate() {
        let (macp, room, who, agent_id) = (f.macp.clone(), f.room, (*who).clone(), (*agent_id).clone());
        tasks.spawn(async move {
            let mut ids = Vec::new();
            for k in 0..12 {
                let p =
                    PostFinding::new(room, agent_id.clone(), format!("after context: writer {w} post {k}"));
                ids.push(macp.post_finding(&who, p).await.unwrap().finding.finding_id);
            }
            ids
        });
    }
    let mut posted: Vec<FindingId> = tasks.join_all().await.into_iter().flatten().collect();
    let mut seen = Vec::new();
    let mut cursor = Some(ctx.cursor.clone());
    loop {
        let u = f.macp.updates(&dee, UpdatesQuery::new(f.room).cursor(cursor.take())).await.unwrap();
        assert!(u.findings.iter().all(|x| x.seq > 2_000), "nothing the context already covered");
        seen.extend(u.findings.iter().map(|x| (x.seq, x.finding_id)));
        cursor = Some(u.cursor);
        if !u.has_more {
            break;
        }
    }
    assert!(seen.windows(2).all(|w| w[0].0 + 1 == w[1].0), "in commit order, no gaps: {seen:?}");
    let mut got: Vec<FindingId> = seen.into_iter().map(|(_, id)| id).collect();
    got.sort();
    posted.sort();
    assert_eq!(got, posted, "exactly the 36 findings posted after the context, each once");
}

/// Polling get_updates from the context's cursor returns exactly the findings posted after it.
pub async fn room_context_cursor_polls_exactly_what_came_after(backend: Backend) {
    let f = Fixture::new(&backend).await;
    for i in 0..30 {
        f.post(&format!("before {i}"), &[]).await;
    }
    let ctx = f.macp.room_context(&f.bob, f.room).await.unwrap();
    let mut after = Vec::new();
    for i in 0..5 {
        after.push(f.post(&format!("after {i}"), &[]).await.finding_id);
    }
    let u = f.macp.updates(&f.bob, UpdatesQuery::new(f.room).cursor(ctx.cursor)).await.unwrap();
    assert_eq!(u.findings.iter().map(|x| x.finding_id).collect::<Vec<_>>(), after);
    let empty = f
        .macp
        .room_context(&f.bob, f.macp.create_room(&f.bob, CreateRoom::new("e")).await.unwrap().room_id)
        .await
        .unwrap();
    assert_eq!(empty.findings.total, 0);
}
