//! People steer a room: its objective (with history), phases (section markers), a resolution
//! when it closes, reopening; and agents cannot loop on each other unattended.

use macp_core::model::{Channel, EventKind, RoomStatus, VerdictKind};
use macp_core::service::{
    CloseRoom, CreateRoom, JoinRoom, PostFinding, SteerRoom, TimelineQuery, UpdatesQuery,
};
use macp_core::{FindingId, Limits, Macp};

use super::*;
use crate::Backend;

/// A new objective keeps the old one in the history with who replaced it; a marker starts a
/// phase: its label redacted then capped, its author and channel recorded, the current phase
/// in the context, and the timeline readable from it.
pub async fn objective_history_and_phase_markers_are_kept(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let before = f.post("502s began at 14:02 on checkout", &["triage"]).await;
    let r = f
        .macp
        .steer_room(
            &f.alice,
            SteerRoom {
                objective: Some("Restore checkout, then find the root cause".into()),
                ..SteerRoom::new(f.room)
            },
            Channel::Person,
        )
        .await
        .unwrap();
    assert_eq!(r.objective, "Restore checkout, then find the root cause");
    assert_eq!(r.objective_history.len(), 1);
    assert_eq!(r.objective_history[0].objective, "Find why checkout returns 502s");
    assert_eq!(r.objective_history[0].replaced_by.channel, Channel::Person);
    assert_eq!(r.objective_history[0].replaced_by.agent_id, None);

    // An agent's marker carrying a secret: stored redacted, whole.
    let r = f
        .macp
        .steer_room(
            &f.bob,
            SteerRoom {
                marker: Some("mitigation done (key AKIA2E0A8F3B244C9986 revoked), root cause next".into()),
                agent_id: Some(f.b.clone()),
                ..SteerRoom::new(f.room)
            },
            Channel::Agent,
        )
        .await
        .unwrap();
    let m = r.phase().expect("a current phase").clone();
    assert_eq!(m.marker_id, "m1");
    assert_eq!(m.label, "mitigation done (key [redacted:aws-access-key] revoked), root cause next");
    assert_eq!(m.by.channel, Channel::Agent);
    assert_eq!(m.by.agent_id.as_ref(), Some(&f.b));
    assert_eq!(m.after_seq, before.seq);
    // Within 120 characters as written, over them once redacted: refused, never cut (a cut
    // before redaction could leave half the key; one after would drop the label's end).
    let label = format!("{} AKIA2E0A8F3B244C9986", "x".repeat(99));
    assert_eq!(label.chars().count(), 120);
    let e = expect_code(
        f.macp
            .steer_room(
                &f.bob,
                SteerRoom { marker: Some(label), agent_id: Some(f.b.clone()), ..SteerRoom::new(f.room) },
                Channel::Agent,
            )
            .await,
        "invalid_input",
    );
    assert_eq!(e.limit(), Some(120));
    assert!(e.to_string().contains("redacted") && !e.to_string().contains("AKIA"), "{e}");

    let too_long = "x".repeat(121);
    let e = expect_code(
        f.macp
            .steer_room(
                &f.bob,
                SteerRoom { marker: Some(too_long), agent_id: Some(f.b.clone()), ..SteerRoom::new(f.room) },
                Channel::Agent,
            )
            .await,
        "invalid_input",
    );
    assert_eq!(e.limit(), Some(120));
    // An agent never acts as nobody: an MCP steer without an agent is refused.
    expect_code(
        f.macp
            .steer_room(
                &f.bob,
                SteerRoom { marker: Some("x".into()), ..SteerRoom::new(f.room) },
                Channel::Agent,
            )
            .await,
        "not_joined",
    );

    let after = f.post("orders-db connection pool exhausted at 14:01", &["evidence"]).await;
    let ctx = f.macp.room_context(&f.alice, f.room).await.unwrap();
    assert_eq!(ctx.phase.as_ref().map(|p| p.marker_id.as_str()), Some("m1"));
    assert_eq!(ctx.markers_total, 1);
    let from = f.macp.timeline(&f.alice, TimelineQuery::new(f.room).after_marker("m1")).await.unwrap();
    assert_eq!(from.findings.iter().map(|x| x.finding_id).collect::<Vec<_>>(), vec![after.finding_id]);
    expect_code(f.macp.timeline(&f.alice, TimelineQuery::new(f.room).after_marker("m9")).await, "not_found");

    let kinds: Vec<EventKind> = f
        .macp
        .updates(&f.alice, UpdatesQuery::new(f.room))
        .await
        .unwrap()
        .events
        .iter()
        .map(|e| e.kind)
        .collect();
    assert!(
        kinds.contains(&EventKind::ObjectiveChanged) && kinds.contains(&EventKind::PhaseMarked),
        "{kinds:?}"
    );
}

/// Closing can carry a resolution naming the root-cause findings (which must exist); the first
/// close stands; a closed room can be reopened and written to again.
pub async fn close_with_resolution_then_reopen(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let cause = f.post("a deploy at 13:58 halved the pool size", &["root-cause"]).await;
    expect_code(
        f.macp
            .close_room(
                &f.alice,
                CloseRoom::new(f.room).resolution("pool size restored", [FindingId::generate()]),
                Channel::Person,
            )
            .await,
        "not_found",
    );
    assert_eq!(f.macp.room_summary(&f.alice, f.room).await.unwrap().room.status, RoomStatus::Active);
    let closed = f
        .macp
        .close_room(
            &f.alice,
            CloseRoom::new(f.room).resolution("Pool size restored; deploy reverted", [cause.finding_id]),
            Channel::Person,
        )
        .await
        .unwrap();
    assert_eq!(closed.status, RoomStatus::Closed);
    let res = closed.resolution.clone().expect("resolution");
    assert_eq!(res.finding_ids, vec![cause.finding_id]);
    assert_eq!(res.by.channel, Channel::Person);
    let again = f
        .macp
        .close_room(&f.bob, CloseRoom::new(f.room).resolution("other", []), Channel::Person)
        .await
        .unwrap();
    assert_eq!(again.resolution, closed.resolution, "the first close stands");
    expect_code(
        f.macp.post_finding(&f.alice, PostFinding::new(f.room, f.a.clone(), "late")).await,
        "room_closed",
    );
    expect_code(
        f.macp
            .steer_room(
                &f.alice,
                SteerRoom { marker: Some("x".into()), ..SteerRoom::new(f.room) },
                Channel::Person,
            )
            .await,
        "room_closed",
    );

    let reopened = f
        .macp
        .steer_room(&f.alice, SteerRoom { reopen: true, ..SteerRoom::new(f.room) }, Channel::Person)
        .await
        .unwrap();
    assert_eq!(reopened.status, RoomStatus::Active);
    assert_eq!(reopened.closed_at, None);
    assert_eq!(reopened.resolution, None, "an open room shows no resolution");
    assert_eq!(reopened.past_resolutions, vec![res.clone()], "the earlier one is kept");
    f.post("the 502s are back after the 16:00 deploy", &["triage"]).await;
    let listed = f.macp.room_summary(&f.bob, f.room).await.unwrap();
    assert_eq!(listed.room.status, RoomStatus::Active);
    let again = f.macp.close_room(&f.alice, CloseRoom::new(f.room), Channel::Person).await.unwrap();
    assert_eq!(
        (again.resolution.clone(), again.past_resolutions.clone()),
        (None, vec![res]),
        "closing again loses nothing"
    );
}

/// Two agents that keep addressing each other are stopped after the configured number of
/// exchanges with `capacity_exceeded` naming the limit; a person acting in the room (here a
/// marker set on the command line) resets the budget; other agents are not affected.
pub async fn the_directed_exchange_budget_stops_a_loop_until_a_person_acts(backend: Backend) {
    let mut limits = Limits::default();
    limits.max_exchanges = 3;
    let macp = Macp::builder().store(backend.store.clone()).limits(limits).build().unwrap();
    let (alice, bob) = (principal("alice"), principal("bob"));
    let room = macp.create_room(&alice, CreateRoom::new("loop")).await.unwrap().room_id;
    let (a, b, c) = (agent("a"), agent("b"), agent("c"));
    macp.join_room(&alice, JoinRoom::new(room).agent(a.clone())).await.unwrap();
    macp.join_room(&bob, JoinRoom::new(room).agent(b.clone())).await.unwrap();
    macp.join_room(&bob, JoinRoom::new(room).agent(c.clone())).await.unwrap();
    async fn say(
        macp: &Macp,
        room: macp_core::RoomId,
        who: &Principal,
        from: &AgentId,
        to: &AgentId,
        n: usize,
    ) -> macp_core::Result<macp_core::service::PostedFinding> {
        let req = PostFinding::new(room, from.clone(), format!("over to you #{n}")).mentions([to.clone()]);
        macp.post_finding(who, req).await
    }
    say(&macp, room, &alice, &a, &b, 1).await.unwrap();
    say(&macp, room, &bob, &b, &a, 2).await.unwrap();
    let third =
        PostFinding::new(room, a.clone(), "over to you #3").mentions([b.clone()]).idempotency_key("k3");
    macp.post_finding(&alice, third.clone()).await.unwrap();
    // A retry of the post that filled the budget is answered with the first result.
    assert!(macp.post_finding(&alice, third).await.unwrap().replayed);
    let e = expect_code(say(&macp, room, &bob, &b, &a, 4).await, "capacity_exceeded");
    assert_eq!(e.limit(), Some(3));
    assert!(e.to_string().contains("person"), "{e}");
    // Posting without addressing the other, and other pairs, go on.
    macp.post_finding(&bob, PostFinding::new(room, b.clone(), "still digging")).await.unwrap();
    say(&macp, room, &bob, &c, &a, 5).await.unwrap();
    // An agent's own marker is not a person acting.
    macp.steer_room(
        &bob,
        SteerRoom { marker: Some("agents".into()), agent_id: Some(b.clone()), ..SteerRoom::new(room) },
        Channel::Agent,
    )
    .await
    .unwrap();
    expect_code(say(&macp, room, &bob, &b, &a, 6).await, "capacity_exceeded");
    macp.steer_room(
        &alice,
        SteerRoom { marker: Some("people looked".into()), ..SteerRoom::new(room) },
        Channel::Person,
    )
    .await
    .unwrap();
    say(&macp, room, &bob, &b, &a, 7).await.unwrap();
}

/// A later finding confirms, refutes or supersedes an earlier one, with its evidence; the
/// judged finding's standing (the latest verdict) shows in the timeline, its thread and the
/// context, so a newcomer is not misled by a refuted theory.
pub async fn verdicts_give_a_finding_its_standing_everywhere(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let theory = f.post("the 502s come from a bad TLS certificate on the ALB", &["hypothesis"]).await;
    assert!(theory.hypothesis, "the hypothesis tag marks a hypothesis");
    let evidence = vec![macp_core::model::Evidence {
        kind: macp_core::model::EvidenceKind::Log,
        reference: "alb access log 14:02: 502 from target, TLS fine".into(),
        description: None,
        captured_at: None,
    }];
    // A verdict needs the finding it judges, and proof when it confirms or refutes.
    expect_code(
        f.macp
            .post_finding(
                &f.bob,
                PostFinding {
                    verdict: Some(VerdictKind::Refutes),
                    ..PostFinding::new(f.room, f.b.clone(), "no")
                },
            )
            .await,
        "invalid_input",
    );
    let e = expect_code(
        f.macp
            .post_finding(
                &f.bob,
                PostFinding::new(f.room, f.b.clone(), "no").verdict(VerdictKind::Refutes, theory.finding_id),
            )
            .await,
        "invalid_input",
    );
    assert!(e.to_string().contains("evidence"), "{e}");
    expect_code(
        f.macp
            .post_finding(
                &f.bob,
                PostFinding::new(f.room, f.b.clone(), "no")
                    .verdict(VerdictKind::Refutes, FindingId::generate())
                    .evidence(evidence.clone()),
            )
            .await,
        "not_found",
    );
    let refutation = f
        .macp
        .post_finding(
            &f.bob,
            PostFinding::new(f.room, f.b.clone(), "TLS is fine: the targets themselves return 502")
                .verdict(VerdictKind::Refutes, theory.finding_id)
                .evidence(evidence.clone()),
        )
        .await
        .unwrap()
        .finding;
    assert_eq!(refutation.verdict, Some(VerdictKind::Refutes));
    assert_eq!(refutation.reply_to, Some(theory.finding_id));

    let thread =
        f.macp.timeline(&f.alice, TimelineQuery::new(f.room).thread(theory.finding_id)).await.unwrap();
    assert_eq!(thread.findings[0].finding_id, theory.finding_id);
    let standing = thread.findings[0].standing.clone().expect("the refuted finding has a standing");
    assert_eq!((standing.verdict, standing.by), (VerdictKind::Refutes, refutation.finding_id));
    assert_eq!(thread.findings[1].finding_id, refutation.finding_id);
    let all = f.all_findings(&f.alice).await;
    assert_eq!(all[0].standing.as_ref().map(|s| s.verdict), Some(VerdictKind::Refutes));
    let ctx = f.macp.room_context(&f.alice, f.room).await.unwrap();
    let shown = ctx.findings.items.iter().find(|x| x.finding_id == theory.finding_id).unwrap();
    assert!(shown.hypothesis);
    assert_eq!(shown.standing, Some(VerdictKind::Refutes));
    assert_eq!(ctx.active_threads.first().map(|t| t.finding_id), Some(theory.finding_id));

    // The latest verdict is the standing.
    f.clock.advance_ms(1);
    let better = f
        .macp
        .post_finding(
            &f.alice,
            PostFinding::new(f.room, f.a.clone(), "superseded: the pool exhaustion explains it all")
                .verdict(VerdictKind::Supersedes, theory.finding_id),
        )
        .await
        .unwrap()
        .finding;
    let now = f
        .macp
        .timeline(&f.alice, TimelineQuery::new(f.room).thread(theory.finding_id).limit(1))
        .await
        .unwrap();
    let s = now.findings[0].standing.clone().unwrap();
    assert_eq!((s.verdict, s.by), (VerdictKind::Supersedes, better.finding_id));
}

/// The findings about an entity, its merged aliases included; the entity must exist.
pub async fn findings_about_an_entity_include_merged_aliases(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let db = f.entity("orders-db", "hostname", "orders-db.prod").await;
    let alias = f.entity("orders primary", "arn", "arn:aws:rds:us-east-1:1:db:orders").await;
    let about_db = f
        .macp
        .post_finding(&f.alice, PostFinding::new(f.room, f.a.clone(), "pool exhausted").entity_refs([db]))
        .await
        .unwrap()
        .finding;
    f.post("unrelated", &[]).await;
    let about_alias = f
        .macp
        .post_finding(
            &f.alice,
            PostFinding::new(f.room, f.a.clone(), "failover at 14:05").entity_refs([alias]),
        )
        .await
        .unwrap()
        .finding;
    let ids =
        |p: macp_core::service::FindingPage| p.findings.into_iter().map(|x| x.finding_id).collect::<Vec<_>>();
    assert_eq!(
        ids(f.macp.timeline(&f.alice, TimelineQuery::new(f.room).entity(db)).await.unwrap()),
        vec![about_db.finding_id]
    );
    f.macp
        .merge_entities(&f.alice, macp_core::service::MergeEntities::new(f.room, f.a.clone(), db, alias))
        .await
        .unwrap();
    let want = vec![about_db.finding_id, about_alias.finding_id];
    assert_eq!(ids(f.macp.timeline(&f.alice, TimelineQuery::new(f.room).entity(db)).await.unwrap()), want);
    assert_eq!(ids(f.macp.timeline(&f.alice, TimelineQuery::new(f.room).entity(alias)).await.unwrap()), want);
    expect_code(
        f.macp.timeline(&f.alice, TimelineQuery::new(f.room).entity(EntityId::generate())).await,
        "not_found",
    );
}

/// The digest since a marker (or a time): per agent what it found by tag, statuses, claims,
/// decisions asked and answered, new entities and phases; each list bounded, every total exact,
/// and a cursor to read the rest of a cut list through the feed.
pub async fn a_digest_since_a_marker_is_bounded_with_exact_totals(backend: Backend) {
    use macp_core::model::{AgentStatus, EventKind};
    use macp_core::service::{
        AnswerDecision, AskDecision, ClaimWork, DIGEST_ITEMS, DeclareStatus, SummaryQuery,
    };
    let f = Fixture::new(&backend).await;
    f.post("before the phase", &["triage"]).await;
    f.clock.advance_ms(5);
    f.macp
        .steer_room(
            &f.alice,
            SteerRoom { marker: Some("root cause".into()), ..SteerRoom::new(f.room) },
            Channel::Person,
        )
        .await
        .unwrap();
    f.clock.advance_ms(5);
    for (c, t) in [
        ("pool at 10", "evidence"),
        ("pool at 20 before", "evidence"),
        ("deploy 4471 halved it", "root-cause"),
    ] {
        f.post(c, &[t]).await;
        f.clock.advance_ms(1);
    }
    let n_status = DIGEST_ITEMS + 6;
    for i in 0..n_status {
        let s = if i % 2 == 0 { AgentStatus::Idle } else { AgentStatus::Active };
        f.macp.declare_status(&f.bob, DeclareStatus::new(f.room, f.b.clone(), s)).await.unwrap();
        f.clock.advance_ms(1);
    }
    f.macp.claim_work(&f.bob, ClaimWork::new(f.room, f.b.clone(), "checking the deploy")).await.unwrap();
    f.entity("orders-db", "hostname", "orders-db.prod").await;
    let d = f
        .macp
        .ask_decision(&f.alice, AskDecision::new(f.room, f.a.clone(), "Revert deploy 4471?"))
        .await
        .unwrap();
    f.clock.advance_ms(1);
    f.macp
        .answer_decision(
            &f.bob,
            AnswerDecision {
                room_id: f.room,
                decision_id: d.decision_id,
                answer: "yes".into(),
                agent_id: None,
            },
            Channel::Person,
        )
        .await
        .unwrap();

    let summary = f.macp.room_summary(&f.alice, SummaryQuery::since_marker(f.room, "m1")).await.unwrap();
    let dg = summary.digest.expect("a digest when asked");
    assert_eq!(dg.since_marker.as_deref(), Some("m1"));
    assert_eq!(dg.agents.len(), 1, "only agents that posted in the window");
    assert_eq!(dg.agents[0].agent_id, f.a);
    assert_eq!(dg.agents[0].findings, 3, "the finding before the marker is not counted");
    assert_eq!(dg.agents[0].by_tag.get("evidence"), Some(&2));
    assert_eq!(dg.agents[0].by_tag.get("root-cause"), Some(&1));
    assert_eq!(dg.agents[0].latest[0].preview, "deploy 4471 halved it", "latest first");
    assert_eq!(dg.statuses.total, n_status as u64, "exact total");
    assert_eq!(dg.statuses.items.len(), DIGEST_ITEMS, "bounded list");
    let rest = f
        .macp
        .updates(
            &f.alice,
            UpdatesQuery::new(f.room)
                .cursor(dg.statuses.next_cursor.clone())
                .kinds([EventKind::StatusDeclared]),
        )
        .await
        .unwrap();
    assert_eq!(rest.events.len(), 6, "the feed continues the cut list exactly");
    assert_eq!(dg.claims.total, 1);
    assert_eq!(dg.entities.total, 1);
    assert_eq!(dg.decisions_asked.len(), 1);
    assert_eq!(dg.decisions_answered.len(), 1);
    assert_eq!(dg.phases.len(), 1);
    assert_eq!(dg.changes.get(&EventKind::FindingPosted), Some(&3));

    // A time works the same; a window after everything is empty; bad input is refused.
    f.clock.advance_ms(1);
    let later = f.clock_now();
    let empty =
        f.macp.room_summary(&f.alice, SummaryQuery::since(f.room, later)).await.unwrap().digest.unwrap();
    assert!(empty.agents.is_empty() && empty.changes.is_empty(), "{empty:?}");
    expect_code(f.macp.room_summary(&f.alice, SummaryQuery::since_marker(f.room, "m7")).await, "not_found");
    expect_code(
        f.macp
            .room_summary(
                &f.alice,
                SummaryQuery { since: Some(later), since_marker: Some("m1".into()), room_id: f.room },
            )
            .await,
        "invalid_input",
    );
    assert!(f.macp.room_summary(&f.alice, f.room).await.unwrap().digest.is_none());
}
