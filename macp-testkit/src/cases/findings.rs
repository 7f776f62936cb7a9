//! Findings: posting, idempotency, limits, the timeline and the updates feed.

use std::collections::HashSet;
use std::sync::Arc;

use macp_core::model::{EntityType, Evidence, EvidenceKind, IndexStatus};
use macp_core::service::{
    AddEntity, AddRelationship, CreateRoom, GraphQuery, JoinRoom, PostFinding, TimelineQuery, UpdatesQuery,
};
use macp_core::{EntityId, FindingId, Limits, RoomId};

use crate::Backend;

use super::*;

// ---------------------------------------------------------------------------------------------
// Findings

/// Posted findings are `pending`, numbered 1, 2, 3 in commit order, and attributed to agent and
/// user.
pub async fn post_finding_commits_pending_in_sequence_with_attribution(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let one = f.post("first", &["Triage"]).await;
    let two =
        f.macp.post_finding(&f.bob, PostFinding::new(f.room, f.b.clone(), "second")).await.unwrap().finding;
    assert_eq!((one.seq, two.seq), (1, 2));
    assert_eq!(one.index_status, IndexStatus::Pending);
    assert_eq!(one.tags, vec!["triage"]);
    assert_eq!((one.agent_id.clone(), one.user_id.as_str()), (f.a.clone(), "alice@example.com"));
    assert_eq!((two.agent_id.clone(), two.user_id.as_str()), (f.b.clone(), "bob@example.com"));
    let stored = f.all_findings(&f.alice).await;
    assert_eq!(stored, vec![one, two], "the timeline returns exactly what was stored");
}

/// A write repeated with the same idempotency key returns the first result and writes nothing.
pub async fn idempotent_post_returns_first_result_and_writes_nothing(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let req = PostFinding::new(f.room, f.a.clone(), "DNS for db-1 changed at 09:41")
        .tags(["evidence"])
        .idempotency_key("k-1");
    let first = f.macp.post_finding(&f.alice, req.clone()).await.unwrap();
    assert!(!first.replayed);
    f.clock.advance_ms(1000);
    let second = f.macp.post_finding(&f.alice, req).await.unwrap();
    assert!(second.replayed);
    assert_eq!(second.finding, first.finding, "the retry returns the first result");
    assert_eq!(f.all_findings(&f.alice).await.len(), 1, "the retry wrote nothing");
    let next = f.post("after", &[]).await;
    assert_eq!(next.seq, 2, "the retry consumed no sequence number");
}

/// Reusing a key with a different payload (or for another operation) is a `conflict`.
pub async fn idempotency_key_reused_with_other_payload_conflicts(backend: Backend) {
    let f = Fixture::new(&backend).await;
    f.macp
        .post_finding(&f.alice, PostFinding::new(f.room, f.a.clone(), "one").idempotency_key("k"))
        .await
        .unwrap();
    expect_code(
        f.macp
            .post_finding(&f.alice, PostFinding::new(f.room, f.a.clone(), "two").idempotency_key("k"))
            .await,
        "conflict",
    );
    expect_code(
        f.macp
            .add_entity(
                &f.alice,
                AddEntity::new(f.room, f.a.clone(), "svc", EntityType::Service).idempotency_key("k"),
            )
            .await,
        "conflict",
    );
    assert_eq!(f.all_findings(&f.alice).await.len(), 1);
    let summary = f.macp.room_summary(&f.alice, f.room).await.unwrap();
    assert_eq!(summary.entity_count, 0, "the conflicting add_entity wrote nothing");
    // Keys are scoped to a room: the same key in another room is a different key.
    let other = f.macp.create_room(&f.alice, CreateRoom::new("other")).await.unwrap().room_id;
    let a2 = f.macp.join_room(&f.alice, JoinRoom::new(other)).await.unwrap().agent_id;
    let p =
        f.macp.post_finding(&f.alice, PostFinding::new(other, a2, "two").idempotency_key("k")).await.unwrap();
    assert!(!p.replayed);
}

/// Sixteen concurrent retries with one key write exactly one finding, and all return it.
pub async fn concurrent_retries_with_one_key_write_once(backend: Backend) {
    let f = Arc::new(Fixture::new(&backend).await);
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let f = f.clone();
        tasks.push(tokio::spawn(async move {
            f.macp
                .post_finding(
                    &f.alice,
                    PostFinding::new(f.room, f.a.clone(), "once").idempotency_key("retry-storm"),
                )
                .await
                .unwrap()
        }));
    }
    let mut ids = HashSet::new();
    let mut applied = 0;
    for t in tasks {
        let p = t.await.unwrap();
        ids.insert(p.finding.finding_id);
        applied += usize::from(!p.replayed);
    }
    assert_eq!(ids.len(), 1, "every retry returned the same finding");
    assert_eq!(applied, 1, "exactly one call applied the write");
    assert_eq!(f.all_findings(&f.alice).await.len(), 1);
}

/// Over-limit input is refused with the limit and nothing is written; nothing is ever cut short.
pub async fn input_limits_refuse_and_never_truncate(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let l = Limits::default();
    let (m, r, a) = (&f.macp, f.room, f.a.clone());
    let e = expect_code(
        m.post_finding(&f.alice, PostFinding::new(r, a.clone(), "x".repeat(l.max_content_bytes + 1))).await,
        "invalid_input",
    );
    assert_eq!(e.limit(), Some(l.max_content_bytes as u64));
    // Exactly at the limit is accepted, whole.
    let full = "y".repeat(l.max_content_bytes);
    let p = m.post_finding(&f.alice, PostFinding::new(r, a.clone(), full.clone())).await.unwrap();
    assert_eq!(p.finding.content, full);
    expect_code(m.post_finding(&f.alice, PostFinding::new(r, a.clone(), "")).await, "invalid_input");
    let tags: Vec<String> = (0..=l.max_tags).map(|i| format!("t{i}")).collect();
    expect_code(
        m.post_finding(&f.alice, PostFinding::new(r, a.clone(), "c").tags(tags)).await,
        "invalid_input",
    );
    expect_code(
        m.post_finding(&f.alice, PostFinding::new(r, a.clone(), "c").tags(["t".repeat(l.max_tag_bytes + 1)]))
            .await,
        "invalid_input",
    );
    let ev = Evidence {
        kind: EvidenceKind::Url,
        reference: "https://x".into(),
        description: None,
        captured_at: None,
    };
    expect_code(
        m.post_finding(&f.alice, PostFinding::new(r, a.clone(), "c").evidence(vec![ev; l.max_evidence + 1]))
            .await,
        "invalid_input",
    );
    let long_ref = Evidence {
        kind: EvidenceKind::Log,
        reference: "z".repeat(l.max_evidence_ref_bytes + 1),
        description: None,
        captured_at: None,
    };
    expect_code(
        m.post_finding(&f.alice, PostFinding::new(r, a.clone(), "c").evidence([long_ref])).await,
        "invalid_input",
    );
    expect_code(
        m.post_finding(&f.alice, PostFinding::new(r, a.clone(), "c").idempotency_key("has space")).await,
        "invalid_input",
    );
    let e = expect_code(
        m.updates(&f.alice, UpdatesQuery { limit: Some(l.max_updates_page + 1), ..UpdatesQuery::new(r) })
            .await,
        "invalid_input",
    );
    assert_eq!(e.limit(), Some(l.max_updates_page as u64));
    assert_eq!(f.all_findings(&f.alice).await.len(), 1, "only the in-limit post was written");
}

/// Entity refs must name entities of the same room.
pub async fn entity_refs_must_exist_in_the_room(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let e = f.entity("web-1", "hostname", "web-1").await;
    let other_room = f.macp.create_room(&f.alice, CreateRoom::new("other")).await.unwrap().room_id;
    let oa = f.macp.join_room(&f.alice, JoinRoom::new(other_room)).await.unwrap().agent_id;
    let foreign = f
        .macp
        .add_entity(&f.alice, AddEntity::new(other_room, oa, "db", EntityType::Resource))
        .await
        .unwrap()
        .entity
        .entity_id;
    expect_code(
        f.macp
            .post_finding(&f.alice, PostFinding::new(f.room, f.a.clone(), "x").entity_refs([foreign]))
            .await,
        "not_found",
    );
    expect_code(
        f.macp
            .post_finding(
                &f.alice,
                PostFinding::new(f.room, f.a.clone(), "x").entity_refs([EntityId::generate()]),
            )
            .await,
        "not_found",
    );
    let ok = f
        .macp
        .post_finding(&f.alice, PostFinding::new(f.room, f.a.clone(), "x").entity_refs([e, e]))
        .await
        .unwrap();
    assert_eq!(ok.finding.entity_refs, vec![e], "duplicate refs collapse");
}

/// The timeline filters by tags (any of), agent and time range, and pages in commit order.
pub async fn timeline_filters_by_tag_agent_and_time_and_pages(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let start = f.clock_now();
    let mut posted = Vec::new();
    for i in 0..10 {
        f.clock.advance_ms(60_000);
        let (who, ag) = if i % 2 == 0 { (&f.alice, f.a.clone()) } else { (&f.bob, f.b.clone()) };
        let tag = if i % 3 == 0 { "root-cause" } else { "triage" };
        posted.push(
            f.macp
                .post_finding(who, PostFinding::new(f.room, ag, format!("finding {i}")).tags([tag]))
                .await
                .unwrap()
                .finding,
        );
    }
    let q = |tq: TimelineQuery| async { f.macp.timeline(&f.alice, tq).await.unwrap().findings };
    let by_tag = q(TimelineQuery { tags: vec!["root-cause".into()], ..TimelineQuery::new(f.room) }).await;
    assert_eq!(by_tag.iter().map(|x| x.seq).collect::<Vec<_>>(), vec![1, 4, 7, 10]);
    let by_agent = q(TimelineQuery { agent_id: Some(f.b.clone()), ..TimelineQuery::new(f.room) }).await;
    assert_eq!(by_agent.iter().map(|x| x.seq).collect::<Vec<_>>(), vec![2, 4, 6, 8, 10]);
    let since = start.plus_millis(3 * 60_000);
    let until = start.plus_millis(6 * 60_000);
    let window =
        q(TimelineQuery { since: Some(since), until: Some(until), ..TimelineQuery::new(f.room) }).await;
    assert_eq!(
        window.iter().map(|x| x.seq).collect::<Vec<_>>(),
        vec![3, 4, 5],
        "since inclusive, until exclusive"
    );
    let both = q(TimelineQuery {
        tags: vec!["triage".into()],
        agent_id: Some(f.a.clone()),
        ..TimelineQuery::new(f.room)
    })
    .await;
    assert_eq!(both.iter().map(|x| x.seq).collect::<Vec<_>>(), vec![3, 5, 9]);
    // Paging visits every match once, in order.
    let mut seqs = Vec::new();
    let mut cursor = None;
    loop {
        let page = f
            .macp
            .timeline(
                &f.alice,
                TimelineQuery {
                    limit: Some(3),
                    cursor,
                    tags: vec!["triage".into()],
                    ..TimelineQuery::new(f.room)
                },
            )
            .await
            .unwrap();
        seqs.extend(page.findings.iter().map(|x| x.seq));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(seqs, vec![2, 3, 5, 6, 8, 9]);
    expect_code(
        f.macp
            .timeline(
                &f.alice,
                TimelineQuery { since: Some(until), until: Some(since), ..TimelineQuery::new(f.room) },
            )
            .await,
        "invalid_input",
    );
}

/// A timeline cursor is refused with other filters or in another room.
pub async fn timeline_cursor_is_bound_to_room_and_filters(backend: Backend) {
    let f = Fixture::new(&backend).await;
    for i in 0..3 {
        f.post(&format!("f{i}"), &["triage"]).await;
    }
    let page = f
        .macp
        .timeline(&f.alice, TimelineQuery { limit: Some(1), ..TimelineQuery::new(f.room) })
        .await
        .unwrap();
    let c = page.next_cursor.expect("more pages");
    expect_code(
        f.macp
            .timeline(
                &f.alice,
                TimelineQuery {
                    cursor: Some(c.clone()),
                    tags: vec!["triage".into()],
                    ..TimelineQuery::new(f.room)
                },
            )
            .await,
        "invalid_input",
    );
    let other = f.macp.create_room(&f.alice, CreateRoom::new("other")).await.unwrap().room_id;
    expect_code(
        f.macp.timeline(&f.alice, TimelineQuery { cursor: Some(c), ..TimelineQuery::new(other) }).await,
        "invalid_input",
    );
    expect_code(
        f.macp
            .timeline(
                &f.alice,
                TimelineQuery { cursor: Some("garbage".into()), ..TimelineQuery::new(f.room) },
            )
            .await,
        "invalid_input",
    );
}

/// Sequential polling returns every finding exactly once, in commit order, and the cursor stays
/// put when nothing is new.
pub async fn updates_return_every_finding_once_in_commit_order(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let empty = f.macp.updates(&f.bob, UpdatesQuery::new(f.room)).await.unwrap();
    assert!(empty.findings.is_empty() && !empty.has_more);
    let mut cursor = Some(empty.cursor);
    let mut got = Vec::new();
    for round in 0..4 {
        for i in 0..5 {
            f.post(&format!("round {round} item {i}"), &[]).await;
        }
        let mut first = true;
        loop {
            let u = f
                .macp
                .updates(
                    &f.bob,
                    UpdatesQuery { limit: Some(2), ..UpdatesQuery::new(f.room).cursor(cursor.clone()) },
                )
                .await
                .unwrap();
            if !first {
                assert!(u.findings.len() <= 2);
            }
            first = false;
            got.extend(u.findings.iter().map(|x| x.seq));
            cursor = Some(u.cursor);
            if !u.has_more {
                break;
            }
        }
    }
    assert_eq!(got, (1..=20).collect::<Vec<u64>>());
    let idle = f.macp.updates(&f.bob, UpdatesQuery::new(f.room).cursor(cursor.clone())).await.unwrap();
    assert!(idle.findings.is_empty());
    assert_eq!(Some(idle.cursor), cursor, "the cursor does not move when nothing is new");
}

/// With several writers committing concurrently and a reader polling all along, the reader sees
/// every finding exactly once, in commit order.
pub async fn updates_never_skip_or_repeat_with_concurrent_writers(backend: Backend) {
    let f = Arc::new(Fixture::new(&backend).await);
    let writers = 6;
    let per_writer = 40;
    let mut agents = Vec::new();
    for w in 0..writers {
        agents.push(
            f.macp
                .join_room(&f.alice, JoinRoom::new(f.room).agent(agent(&format!("w{w}"))))
                .await
                .unwrap()
                .agent_id,
        );
    }
    let mut handles = Vec::new();
    for ag in agents {
        let f = f.clone();
        handles.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for i in 0..per_writer {
                let p = f
                    .macp
                    .post_finding(&f.alice, PostFinding::new(f.room, ag.clone(), format!("{ag} {i}")))
                    .await
                    .unwrap();
                ids.push(p.finding.finding_id);
                if i % 7 == 0 {
                    tokio::task::yield_now().await;
                }
            }
            ids
        }));
    }
    let reader = {
        let f = f.clone();
        tokio::spawn(async move {
            let mut seen: Vec<(u64, FindingId)> = Vec::new();
            let mut cursor = None;
            let total = writers * per_writer;
            for _ in 0..100_000 {
                let u = f
                    .macp
                    .updates(
                        &f.bob,
                        UpdatesQuery { limit: Some(7), ..UpdatesQuery::new(f.room).cursor(cursor.clone()) },
                    )
                    .await
                    .unwrap();
                seen.extend(u.findings.iter().map(|x| (x.seq, x.finding_id)));
                cursor = Some(u.cursor);
                if seen.len() >= total {
                    break;
                }
                tokio::task::yield_now().await;
            }
            seen
        })
    };
    let mut posted = HashSet::new();
    for h in handles {
        posted.extend(h.await.unwrap());
    }
    let seen = reader.await.unwrap();
    let seqs: Vec<u64> = seen.iter().map(|x| x.0).collect();
    assert_eq!(seqs, (1..=(writers * per_writer) as u64).collect::<Vec<_>>(), "every seq once, in order");
    let seen_ids: HashSet<FindingId> = seen.iter().map(|x| x.1).collect();
    assert_eq!(seen_ids, posted, "the reader saw exactly the posted findings");
}

/// Two stores on the same data (two server instances) posting into one room at once keep one
/// gap-free sequence: a reader on either sees every finding exactly once, in commit order.
pub async fn two_stores_on_the_same_data_keep_one_sequence(backend: Backend) {
    let reopen = backend.reopen.clone().expect("`shared` needs Backend::with_reopen");
    let f = Fixture::new(&backend).await;
    let other = Macp::builder().store(reopen()).build().unwrap();
    let (writers, per) = (4usize, 25usize);
    let mut tasks = Vec::new();
    for w in 0..writers {
        let (m, who, agent) = if w % 2 == 0 {
            (f.macp.clone(), f.alice.clone(), f.a.clone())
        } else {
            (other.clone(), f.bob.clone(), f.b.clone())
        };
        let room = f.room;
        tasks.push(tokio::spawn(async move {
            for i in 0..per {
                m.post_finding(&who, PostFinding::new(room, agent.clone(), format!("writer {w} post {i}")))
                    .await
                    .expect("post through either store");
            }
        }));
    }
    let mut seen: Vec<u64> = Vec::new();
    let mut cursor: Option<String> = None;
    let poll = |m: Macp, c: Option<String>| {
        let who = f.bob.clone();
        let room = f.room;
        async move { m.updates(&who, UpdatesQuery::new(room).cursor(c)).await.expect("poll") }
    };
    let mut turn = 0usize;
    loop {
        let done = tasks.iter().all(|t| t.is_finished());
        let reader = if turn.is_multiple_of(2) { f.macp.clone() } else { other.clone() };
        turn += 1;
        let u = poll(reader, cursor.clone()).await;
        seen.extend(u.findings.iter().map(|x| x.seq));
        cursor = Some(u.cursor);
        if done && !u.has_more && u.findings.is_empty() {
            break;
        }
        tokio::task::yield_now().await;
    }
    for t in tasks {
        t.await.unwrap();
    }
    let want: Vec<u64> = (1..=(writers * per) as u64).collect();
    assert_eq!(seen, want, "every finding once, in sequence order, whichever store wrote or read it");
}

/// A cursor from one room is refused in another.
pub async fn updates_cursor_belongs_to_its_room(backend: Backend) {
    let f = Fixture::new(&backend).await;
    f.post("x", &[]).await;
    let c = f.macp.updates(&f.alice, UpdatesQuery::new(f.room)).await.unwrap().cursor;
    let other = f.macp.create_room(&f.alice, CreateRoom::new("other")).await.unwrap().room_id;
    expect_code(f.macp.updates(&f.alice, UpdatesQuery::new(other).cursor(c)).await, "invalid_input");
    expect_code(
        f.macp.updates(&f.alice, UpdatesQuery::new(f.room).cursor("AAAA".to_owned())).await,
        "invalid_input",
    );
    expect_code(f.macp.updates(&f.alice, UpdatesQuery::new(RoomId::generate())).await, "not_found");
}

/// With `full` visibility every member — and any other authenticated user — reads the same
/// timeline and updates: visibility is not access control.
pub async fn full_visibility_shows_every_member_the_same_record(backend: Backend) {
    let f = Fixture::new(&backend).await;
    f.post("alice's", &["triage"]).await;
    f.macp.post_finding(&f.bob, PostFinding::new(f.room, f.b.clone(), "bob's")).await.unwrap();
    let carol = principal("carol");
    let a = f.all_findings(&f.alice).await;
    let b = f.all_findings(&f.bob).await;
    let c = f.all_findings(&carol).await;
    assert_eq!(a.len(), 2);
    assert_eq!(a, b);
    assert_eq!(a, c, "a user who never joined reads the same record");
    let ua = f.macp.updates(&f.alice, UpdatesQuery::new(f.room)).await.unwrap();
    let uc = f.macp.updates(&carol, UpdatesQuery::new(f.room)).await.unwrap();
    assert_eq!(ua.findings, uc.findings);
}

/// Nothing of one room appears in, or can be referenced from, another.
pub async fn rooms_are_isolated(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let g = Fixture::new(&backend).await;
    f.post("in f", &["triage"]).await;
    g.post("in g", &["triage"]).await;
    let ef = f.entity("host", "hostname", "shared-host").await;
    let eg = g.entity("host", "hostname", "shared-host").await;
    assert_ne!(ef, eg, "identifier claims are per room");
    assert_eq!(f.all_findings(&f.alice).await.len(), 1);
    assert_eq!(g.macp.room_summary(&g.alice, g.room).await.unwrap().finding_count, 1);
    let graph = f
        .macp
        .entity_graph(
            &f.alice,
            GraphQuery { room_id: f.room, entity_id: None, identifier: None, depth: None },
        )
        .await
        .unwrap();
    assert_eq!(graph.entities.iter().map(|e| e.entity.entity_id).collect::<Vec<_>>(), vec![ef]);
    expect_code(
        f.macp
            .entity_graph(
                &f.alice,
                GraphQuery { room_id: f.room, entity_id: Some(eg), identifier: None, depth: None },
            )
            .await,
        "not_found",
    );
    expect_code(
        f.macp.add_relationship(&f.alice, AddRelationship::new(f.room, f.a.clone(), ef, "same_as", eg)).await,
        "not_found",
    );
}

/// A finding can answer another of the same room and mention the room's agents; a reply to
/// a finding elsewhere or to none, and a mention of an agent not in the room, are refused and
/// post nothing (the refusal lists who is in the room). The thread reads back with
/// `get_timeline`, and the feed gives an agent what concerns it.
pub async fn threads_and_mentions_reach_the_right_agent(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let question = f.post("Which deploy went out at 09:38?", &["question"]).await;
    let noise = f.post("unrelated: cache hit rate is normal", &[]).await;
    let reply = f
        .macp
        .post_finding(
            &f.bob,
            PostFinding::new(f.room, f.b.clone(), "checkout-api v7.3.1, by the release train")
                .reply_to(question.finding_id),
        )
        .await
        .unwrap()
        .finding;
    assert_eq!(reply.reply_to, Some(question.finding_id));
    let handoff = f
        .macp
        .post_finding(
            &f.bob,
            PostFinding::new(f.room, f.b.clone(), "can you check the canary?").mentions([f.a.clone()]),
        )
        .await
        .unwrap()
        .finding;
    assert_eq!(handoff.mentions, vec![f.a.clone()]);
    f.macp.post_finding(&f.bob, PostFinding::new(f.room, f.b.clone(), "bob's own note")).await.unwrap();

    let other_room = f.macp.create_room(&f.alice, CreateRoom::new("elsewhere")).await.unwrap().room_id;
    let oa = f.macp.join_room(&f.alice, JoinRoom::new(other_room)).await.unwrap().agent_id;
    let elsewhere =
        f.macp.post_finding(&f.alice, PostFinding::new(other_room, oa, "there")).await.unwrap().finding;
    let before = f.all_findings(&f.alice).await.len();
    expect_code(
        f.macp
            .post_finding(&f.bob, PostFinding::new(f.room, f.b.clone(), "x").reply_to(elsewhere.finding_id))
            .await,
        "not_found",
    );
    expect_code(
        f.macp
            .post_finding(&f.bob, PostFinding::new(f.room, f.b.clone(), "x").reply_to(FindingId::generate()))
            .await,
        "not_found",
    );
    let e = expect_code(
        f.macp
            .post_finding(&f.bob, PostFinding::new(f.room, f.b.clone(), "x").mentions([agent("alice-claud")]))
            .await,
        "invalid_input",
    );
    let msg = e.to_string();
    assert!(msg.contains("alice-claud") && msg.contains("alice-claude") && msg.contains("bob-kiro"), "{msg}");
    assert_eq!(f.all_findings(&f.alice).await.len(), before, "refused posts wrote nothing");

    let thread =
        f.macp.timeline(&f.alice, TimelineQuery::new(f.room).thread(question.finding_id)).await.unwrap();
    assert_eq!(
        thread.findings.iter().map(|x| x.finding_id).collect::<Vec<_>>(),
        vec![question.finding_id, reply.finding_id],
        "a thread reads as the finding, then its answers"
    );

    let mine =
        f.macp.updates(&f.alice, UpdatesQuery::new(f.room).agent(f.a.clone()).about_me()).await.unwrap();
    let ids: Vec<_> = mine.findings.iter().map(|x| x.finding_id).collect();
    assert_eq!(
        ids,
        vec![reply.finding_id, handoff.finding_id],
        "a reply to its finding and its mention, nothing else"
    );
    assert!(mine.events.is_empty());
    assert!(!ids.contains(&noise.finding_id));
    let all = f.macp.updates(&f.alice, UpdatesQuery::new(f.room)).await.unwrap();
    assert_eq!(mine.cursor, all.cursor, "the cursor moves past what did not concern the agent too");
}
