//! The room's event feed: every change once, in commit order, under one cursor; read positions;
//! unread counts; waiting until something happens.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use macp_core::model::{AgentStatus, Channel, EntityType, Event, EventKind};
use macp_core::service::{
    AddEntity, CloseRoom, ContextQuery, DeclareStatus, JoinRoom, MergeEntities, PostFinding, Updates,
    UpdatesQuery,
};
use macp_core::{Macp, Principal, RoomId};

use super::*;
use crate::Backend;

/// Reads the whole feed from `cursor` as `who`, page by page (of `limit`), and returns the
/// events (findings included as their `finding_posted` events, rebuilt from the findings) in
/// order, and the final cursor.
async fn read_all(
    macp: &Macp,
    who: &Principal,
    q: UpdatesQuery,
    limit: usize,
) -> (Vec<(u64, EventKind, String)>, Vec<Updates>, String) {
    let mut out = Vec::new();
    let mut pages = Vec::new();
    let mut q = q.limit(limit);
    loop {
        let u = macp.updates(who, q.clone()).await.expect("get_updates");
        for e in &u.events {
            out.push((e.seq, e.kind, e.summary.clone()));
        }
        for f in &u.findings {
            out.push((0, EventKind::FindingPosted, f.content.clone()));
        }
        let more = u.has_more;
        q = q.cursor(u.cursor.clone());
        pages.push(u);
        if !more {
            let c = q.cursor.clone().unwrap_or_default();
            return (out, pages, c);
        }
    }
}

fn kinds_of(pages: &[Updates]) -> Vec<EventKind> {
    let mut k: Vec<EventKind> = Vec::new();
    for p in pages {
        k.extend(p.events.iter().map(|e| e.kind));
        k.extend(p.findings.iter().map(|_| EventKind::FindingPosted));
    }
    k
}

/// The scenario of the feed's issue, through the service: every kind of change, by several
/// agents. An agent that reads the feed from the start sees each change exactly once, as its
/// kind, in commit order, with who made it.
pub async fn every_change_appears_once_in_commit_order(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let carol = principal("carol@example.com");
    let c = f.macp.join_room(&carol, JoinRoom::new(f.room).agent(agent("carol-codex"))).await.unwrap();
    f.macp
        .declare_status(
            &f.bob,
            DeclareStatus {
                reason: Some("need prod DB access".into()),
                ..DeclareStatus::new(f.room, f.b.clone(), AgentStatus::Blocked)
            },
        )
        .await
        .unwrap();
    f.post("checkout p99 up since 09:40", &["latency"]).await;
    let api = f
        .macp
        .add_entity(
            &carol,
            AddEntity::new(f.room, c.agent_id.clone(), "checkout-api", EntityType::Service)
                .identifier("service", "checkout-api"),
        )
        .await
        .unwrap()
        .entity
        .entity_id;
    let host = f.entity("web-1", "hostname", "web-1.prod").await;
    f.macp
        .add_entity(
            &f.alice,
            AddEntity::new(f.room, f.a.clone(), "web-1", EntityType::Resource)
                .identifier("hostname", "web-1.prod")
                .identifier("ip", "10.0.0.7"),
        )
        .await
        .unwrap();
    let dup = f.entity("web one", "instance_id", "i-0abc").await;
    f.link(api, "runs_on", host).await;
    f.macp.merge_entities(&f.alice, MergeEntities::new(f.room, f.a.clone(), host, dup)).await.unwrap();
    f.macp.close_room(&f.bob, CloseRoom::new(f.room), Channel::Person).await.unwrap();

    let (all, pages, _) = read_all(&f.macp, &f.bob, UpdatesQuery::new(f.room), 100).await;
    let kinds = kinds_of(&pages);
    let want = [
        EventKind::AgentJoined,         // alice's agent (fixture)
        EventKind::AgentJoined,         // bob's agent (fixture)
        EventKind::AgentJoined,         // carol's
        EventKind::StatusDeclared,      // bob blocked
        EventKind::EntityAdded,         // checkout-api
        EventKind::EntityAdded,         // web-1
        EventKind::IdentifiersAttached, // web-1 gains an ip
        EventKind::EntityAdded,         // web one
        EventKind::RelationshipAdded,
        EventKind::EntitiesMerged,
        EventKind::RoomClosed,
    ];
    let events: Vec<&Event> = pages.iter().flat_map(|p| p.events.iter()).collect();
    assert_eq!(
        events.iter().map(|e| e.kind).collect::<Vec<_>>(),
        want,
        "every change but the finding, once each, in commit order"
    );
    assert_eq!(kinds.iter().filter(|k| **k == EventKind::FindingPosted).count(), 1, "the finding, once");
    assert_eq!(all.len(), want.len() + 1);
    // Sequence numbers: strictly increasing, gap-free from 1 across the feed (the finding's
    // event is the one missing from `events`, between the status and the first entity).
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    let mut expected: Vec<u64> = (1..=12).collect();
    expected.remove(4);
    assert_eq!(seqs, expected, "event seqs are gap-free and ordered; the finding took seq 5");
    let blocked = events[3];
    assert_eq!(blocked.agent_id.as_ref(), Some(&f.b), "the status names its agent");
    assert_eq!(blocked.user_id.as_str(), "bob@example.com");
    assert!(
        blocked.summary.contains("blocked") && blocked.summary.contains("need prod DB access"),
        "{}",
        blocked.summary
    );
    assert_eq!(events[4].entity_ids, vec![api], "an entity event names the entity");
    assert_eq!(events[9].entity_ids, vec![host, dup], "a merge names the winner, then the merged one");
    assert!(events[10].agent_id.is_none() && events[10].user_id.as_str() == "bob@example.com");
    for e in &events {
        assert!(e.summary.chars().count() <= Event::SUMMARY_CHARS, "a summary is short: {}", e.summary);
    }
}

/// A registered artifact is an event naming it.
pub async fn a_registered_artifact_is_an_event(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let start = f.macp.updates(&f.alice, UpdatesQuery::new(f.room)).await.unwrap().cursor;
    let key = f.upload("heap.hprof", b"heap").await;
    let a = f
        .macp
        .register_artifact(&f.alice, super::artifacts::artifact_req(f.room, f.a.clone(), &key, vec![]))
        .await
        .unwrap()
        .artifact;
    let u = f.macp.updates(&f.bob, UpdatesQuery::new(f.room).cursor(start)).await.unwrap();
    assert_eq!(u.events.len(), 1, "{:?}", u.events);
    assert_eq!(
        (u.events[0].kind, u.events[0].artifact_id),
        (EventKind::ArtifactRegistered, Some(a.artifact_id))
    );
    assert!(u.events[0].summary.contains("heap.hprof"), "{}", u.events[0].summary);
}

/// Writes that change nothing (replays, a rejoin, closing a closed room, an attach that adds
/// nothing) add no event.
pub async fn writes_that_change_nothing_add_no_event(backend: Backend) {
    let f = Fixture::new(&backend).await;
    f.entity("db", "hostname", "db-1").await;
    let post = PostFinding::new(f.room, f.a.clone(), "once").idempotency_key("k1");
    f.macp.post_finding(&f.alice, post.clone()).await.unwrap();
    let head = f.macp.updates(&f.alice, UpdatesQuery::new(f.room)).await.unwrap().cursor;
    assert!(f.macp.post_finding(&f.alice, post).await.unwrap().replayed);
    f.macp.join_room(&f.alice, JoinRoom::new(f.room).agent(f.a.clone())).await.unwrap();
    f.macp
        .add_entity(
            &f.alice,
            AddEntity::new(f.room, f.a.clone(), "db", EntityType::Resource).identifier("hostname", "db-1"),
        )
        .await
        .unwrap();
    f.macp.close_room(&f.alice, CloseRoom::new(f.room), Channel::Person).await.unwrap();
    f.macp.close_room(&f.bob, CloseRoom::new(f.room), Channel::Person).await.unwrap();
    let u = f.macp.updates(&f.alice, UpdatesQuery::new(f.room).cursor(head)).await.unwrap();
    assert!(u.findings.is_empty(), "a replayed post is not posted again");
    assert_eq!(
        u.events.iter().map(|e| e.kind).collect::<Vec<_>>(),
        vec![EventKind::RoomClosed],
        "only the first close changed anything"
    );
}

/// One cursor pages the whole feed; `kinds` narrows it; a page boundary never skips or repeats,
/// and a filtered reader's cursor still moves past what it did not ask for.
pub async fn updates_filter_by_kind_under_one_cursor(backend: Backend) {
    let f = Fixture::new(&backend).await;
    for i in 0..7 {
        f.post(&format!("finding {i}"), &[]).await;
        f.macp
            .declare_status(&f.bob, DeclareStatus::new(f.room, f.b.clone(), AgentStatus::Active))
            .await
            .unwrap();
    }
    let (_, whole, _) = read_all(&f.macp, &f.bob, UpdatesQuery::new(f.room), 500).await;
    let (_, paged, end) = read_all(&f.macp, &f.bob, UpdatesQuery::new(f.room), 3).await;
    let events =
        |p: &[Updates]| p.iter().flat_map(|u| u.events.iter().map(|e| (e.seq, e.kind))).collect::<Vec<_>>();
    let findings =
        |p: &[Updates]| p.iter().flat_map(|u| u.findings.iter().map(|x| x.seq)).collect::<Vec<_>>();
    assert_eq!(events(&whole), events(&paged), "pages of 3 give the same changes as one page");
    assert_eq!(findings(&whole), findings(&paged), "and the same findings");
    assert_eq!(findings(&whole), (1..=7).collect::<Vec<u64>>());
    assert_eq!(kinds_of(&whole).len(), 2 + 14);
    let only = UpdatesQuery::new(f.room).kinds([EventKind::FindingPosted]);
    let (_, findings_only, end_filtered) = read_all(&f.macp, &f.bob, only, 2).await;
    let contents: Vec<String> =
        findings_only.iter().flat_map(|p| p.findings.iter().map(|x| x.content.clone())).collect();
    assert_eq!(contents, (0..7).map(|i| format!("finding {i}")).collect::<Vec<_>>());
    assert!(findings_only.iter().all(|p| p.events.is_empty()), "no other kinds when filtered");
    assert_eq!(end, end_filtered, "a filtered reader ends at the same place as a full one");
    let u = f.macp.updates(&f.bob, UpdatesQuery::new(f.room).cursor(end).wait(0)).await.unwrap();
    assert!(u.findings.is_empty() && u.events.is_empty() && !u.has_more, "nothing after the end");
}

/// Reading consumes nothing; an acknowledgement moves the agent's read position forward only;
/// a reader without a cursor continues from it; join_room and get_room_context count what is
/// unread, by kind.
pub async fn read_positions_move_forward_only_on_ack(backend: Backend) {
    let f = Fixture::new(&backend).await;
    f.post("one", &[]).await;
    f.post("two", &[]).await;
    let as_b = || UpdatesQuery::new(f.room).agent(f.b.clone());
    let first = f.macp.updates(&f.bob, as_b()).await.unwrap();
    let again = f.macp.updates(&f.bob, as_b()).await.unwrap();
    assert_eq!(first, again, "reading twice without acknowledging gives the same answer");
    assert_eq!(first.findings.len(), 2);

    let joined = f.macp.join_room(&f.bob, JoinRoom::new(f.room).agent(f.b.clone())).await.unwrap();
    let unread = joined.unread.expect("join_room says what is unread");
    assert_eq!(unread.total, 4, "two joins and two findings unread: {unread:?}");
    assert_eq!(unread.by_kind.get(&EventKind::FindingPosted), Some(&2));

    let acked = f.macp.updates(&f.bob, as_b().cursor(first.cursor.clone()).ack()).await.unwrap();
    assert_eq!(
        acked.read_position.as_deref(),
        Some(first.cursor.as_str()),
        "the position moved to the cursor"
    );
    let ctx = f.macp.room_context(&f.bob, ContextQuery::agent(f.room, f.b.clone())).await.unwrap();
    assert_eq!(ctx.unread.as_ref().map(|u| u.total), Some(0), "nothing unread after the ack");

    f.post("three", &[]).await;
    let ctx = f.macp.room_context(&f.bob, ContextQuery::agent(f.room, f.b.clone())).await.unwrap();
    let unread = ctx.unread.expect("unread counts for an agent");
    assert_eq!((unread.total, unread.by_kind.clone()), (1, BTreeMap::from([(EventKind::FindingPosted, 1)])));

    // A restarted client that lost its cursor continues from the read position.
    let resumed = f.macp.updates(&f.bob, as_b()).await.unwrap();
    assert_eq!(resumed.findings.iter().map(|x| x.content.as_str()).collect::<Vec<_>>(), vec!["three"]);
    // Acknowledging an older cursor never moves the position back.
    let start = f.macp.updates(&f.bob, UpdatesQuery::new(f.room).limit(1)).await.unwrap().cursor;
    let back = f.macp.updates(&f.bob, as_b().cursor(start).ack()).await.unwrap();
    assert_eq!(
        back.read_position.as_deref(),
        Some(first.cursor.as_str()),
        "an older ack leaves the position"
    );
    // A cursor past the feed's head (hand-made: cursors are not signed) moves the position to
    // the head, not beyond it, where it would hide what comes next.
    let beyond = {
        use base64::Engine as _;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("e1\u{1f}{}\u{1f}999999", f.room))
    };
    let capped = f.macp.updates(&f.bob, as_b().cursor(beyond).ack()).await.unwrap();
    let head = f.macp.updates(&f.bob, UpdatesQuery::new(f.room)).await.unwrap().cursor;
    assert_eq!(capped.read_position.as_deref(), Some(head.as_str()), "a read position past the head");
    // Positions are per agent: Alice's agent has acknowledged nothing.
    let a = f.macp.updates(&f.alice, UpdatesQuery::new(f.room).agent(f.a.clone())).await.unwrap();
    assert_eq!(a.findings.len(), 3);
    // Acknowledging needs a cursor and one's own agent.
    expect_code(f.macp.updates(&f.bob, as_b().ack()).await, "invalid_input");
    expect_code(
        f.macp.updates(&f.alice, as_b().cursor(first.cursor.clone()).ack()).await,
        "permission_denied",
    );
}

/// A waiting get_updates answers as soon as a change commits, with it; one with nothing to
/// wake it answers empty at its deadline; a wait over the limit is refused with the limit.
pub async fn a_waiting_reader_wakes_on_a_commit(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let head = f.macp.updates(&f.bob, UpdatesQuery::new(f.room)).await.unwrap().cursor;
    let waiter = {
        let (m, who, q) =
            (f.macp.clone(), f.bob.clone(), UpdatesQuery::new(f.room).cursor(head.clone()).wait(20));
        tokio::spawn(async move {
            let t = Instant::now();
            (m.updates(&who, q).await, t)
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "the waiter waits while nothing happens");
    let posted = Instant::now();
    f.macp
        .declare_status(
            &f.alice,
            DeclareStatus {
                reason: Some("waiting on a deploy".into()),
                ..DeclareStatus::new(f.room, f.a.clone(), AgentStatus::Blocked)
            },
        )
        .await
        .unwrap();
    let (u, _) =
        tokio::time::timeout(Duration::from_secs(10), waiter).await.expect("woken within 10 s").unwrap();
    let woke = posted.elapsed();
    let u = u.unwrap();
    assert_eq!(u.events.iter().map(|e| e.kind).collect::<Vec<_>>(), vec![EventKind::StatusDeclared]);
    assert!(woke < Duration::from_secs(5), "woken {woke:?} after the commit");

    let t = Instant::now();
    let empty = f.macp.updates(&f.bob, UpdatesQuery::new(f.room).cursor(u.cursor).wait(1)).await.unwrap();
    assert!(empty.events.is_empty() && empty.findings.is_empty());
    assert!(
        t.elapsed() >= Duration::from_millis(950),
        "answered empty at its deadline, not before: {:?}",
        t.elapsed()
    );

    let e = expect_code(f.macp.updates(&f.bob, UpdatesQuery::new(f.room).wait(26)).await, "invalid_input");
    assert_eq!(e.body().limit, Some(25));
}

/// A cursor of the findings-only feed of earlier versions is refused with advice, never misread.
pub async fn an_old_findings_cursor_is_refused_with_advice(backend: Backend) {
    let f = Fixture::new(&backend).await;
    use base64::Engine;
    let old = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("u1\u{1f}{}\u{1f}3", f.room));
    let e = expect_code(f.macp.updates(&f.bob, UpdatesQuery::new(f.room).cursor(old)).await, "invalid_input");
    assert!(e.to_string().contains("omit it"), "{e}");
}

/// On a store shared by several processes, a write made through another service wakes a
/// reader waiting on this one.
pub async fn a_write_elsewhere_wakes_a_waiting_reader(backend: Backend) {
    let reopen = backend.reopen.clone().expect("`shared` needs Backend::with_reopen");
    let f = Fixture::new(&backend).await;
    let other = Macp::builder().store(reopen()).build().unwrap();
    let head = f.macp.updates(&f.bob, UpdatesQuery::new(f.room)).await.unwrap().cursor;
    let waiter = {
        let (m, who, q) = (f.macp.clone(), f.bob.clone(), UpdatesQuery::new(f.room).cursor(head).wait(20));
        tokio::spawn(async move { m.updates(&who, q).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let posted = Instant::now();
    other
        .post_finding(&f.alice, PostFinding::new(f.room, f.a.clone(), "from the other server"))
        .await
        .unwrap();
    let u = tokio::time::timeout(Duration::from_secs(10), waiter).await.expect("woken").unwrap().unwrap();
    let woke = posted.elapsed();
    assert_eq!(u.findings.len(), 1);
    assert!(woke < Duration::from_secs(5), "woken {woke:?} after a write elsewhere");
}

/// The feed of a room that does not exist is `not_found`, not an empty page.
pub async fn an_unknown_room_has_no_feed(backend: Backend) {
    let f = Fixture::new(&backend).await;
    expect_code(f.macp.updates(&f.alice, UpdatesQuery::new(RoomId::generate())).await, "not_found");
}
