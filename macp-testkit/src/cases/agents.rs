//! Agents: joining, ownership, capacity and advisory status.

use macp_core::model::{AgentStatus, EntityType};
use macp_core::service::{AddEntity, CreateRoom, DeclareStatus, JoinRoom, PostFinding, UpdatesQuery};
use macp_core::{Limits, Macp, RoomId};

use crate::Backend;

use super::*;

// ---------------------------------------------------------------------------------------------
// Agents

/// Rejoining with the same agent id by the same user returns the same session, refreshed.
pub async fn join_room_is_idempotent_for_the_same_user(backend: Backend) {
    let f = Fixture::new(&backend).await;
    f.clock.advance_ms(1000);
    let again = f
        .macp
        .join_room(
            &f.alice,
            JoinRoom { agent_type: Some("claude-code".into()), ..JoinRoom::new(f.room).agent(f.a.clone()) },
        )
        .await
        .unwrap();
    assert_eq!(again.agent_id, f.a);
    assert!(again.last_active > again.joined_at, "rejoin refreshes last_active");
    assert_eq!(again.agent_type.as_deref(), Some("claude-code"));
    let summary = f.macp.room_summary(&f.alice, f.room).await.unwrap();
    assert_eq!(summary.agents.total, 2, "no duplicate session");
    let generated = f.macp.join_room(&f.alice, JoinRoom::new(f.room)).await.unwrap();
    assert!(generated.agent_id.as_str().starts_with("agent-"), "omitted agent ids are generated");
    expect_code(f.macp.join_room(&f.alice, JoinRoom::new(RoomId::generate())).await, "not_found");
}

/// An agent belongs to the user who joined it: nobody else may join as it or act through it.
pub async fn agents_belong_to_the_user_who_joined_them(backend: Backend) {
    let f = Fixture::new(&backend).await;
    expect_code(
        f.macp.join_room(&f.bob, JoinRoom::new(f.room).agent(f.a.clone())).await,
        "permission_denied",
    );
    expect_code(
        f.macp.post_finding(&f.bob, PostFinding::new(f.room, f.a.clone(), "as alice")).await,
        "permission_denied",
    );
    expect_code(
        f.macp
            .declare_status(
                &f.bob,
                DeclareStatus {
                    room_id: f.room,
                    agent_id: Some(f.a.clone()),
                    status: AgentStatus::Blocked,
                    reason: None,
                },
            )
            .await,
        "permission_denied",
    );
    assert!(f.all_findings(&f.alice).await.is_empty());
}

/// Writes through an agent that has not joined the room answer `not_joined`.
pub async fn writes_require_a_joined_agent(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let ghost = agent("ghost");
    let e = expect_code(
        f.macp.post_finding(&f.alice, PostFinding::new(f.room, ghost.clone(), "hi")).await,
        "not_joined",
    );
    assert!(e.to_string().contains("join_room"), "the message says what to do: {e}");
    expect_code(
        f.macp.add_entity(&f.alice, AddEntity::new(f.room, ghost.clone(), "x", EntityType::Event)).await,
        "not_joined",
    );
    // An agent joined to another room is not joined to this one.
    let other = f.macp.create_room(&f.alice, CreateRoom::new("other")).await.unwrap().room_id;
    let there = f.macp.join_room(&f.alice, JoinRoom::new(other).agent(agent("elsewhere"))).await.unwrap();
    expect_code(
        f.macp.post_finding(&f.alice, PostFinding::new(f.room, there.agent_id.clone(), "hi")).await,
        "not_joined",
    );
}

/// Joining a full room is refused with `capacity_exceeded` and the limit.
pub async fn agents_per_room_capacity_is_refused_with_its_limit(backend: Backend) {
    let mut limits = Limits::default();
    limits.max_agents_per_room = 3;
    let macp = Macp::builder().store(backend.store.clone()).limits(limits).build().unwrap();
    let alice = principal("alice");
    let room = macp.create_room(&alice, CreateRoom::new("cap")).await.unwrap().room_id;
    for i in 0..3 {
        macp.join_room(&alice, JoinRoom::new(room).agent(agent(&format!("a{i}")))).await.unwrap();
    }
    let e = expect_code(
        macp.join_room(&alice, JoinRoom::new(room).agent(agent("a3"))).await,
        "capacity_exceeded",
    );
    assert_eq!(e.limit(), Some(3));
    // Rejoining an existing agent is not a new seat.
    macp.join_room(&alice, JoinRoom::new(room).agent(agent("a0"))).await.unwrap();
}

/// Declared status is recorded and counted, and nothing is gated on it: an idle or blocked
/// agent still posts and receives updates.
pub async fn status_is_advisory_and_gates_nothing(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let s = f
        .macp
        .declare_status(
            &f.alice,
            DeclareStatus {
                room_id: f.room,
                agent_id: Some(f.a.clone()),
                status: AgentStatus::Blocked,
                reason: Some("need prod DB access".into()),
            },
        )
        .await
        .unwrap();
    assert_eq!(s.agent_status, AgentStatus::Blocked);
    assert_eq!(s.status_reason.as_deref(), Some("need prod DB access"));
    f.macp
        .declare_status(
            &f.bob,
            DeclareStatus {
                room_id: f.room,
                agent_id: Some(f.b.clone()),
                status: AgentStatus::Idle,
                reason: None,
            },
        )
        .await
        .unwrap();
    let summary = f.macp.room_summary(&f.alice, f.room).await.unwrap();
    assert_eq!((summary.agents.blocked, summary.agents.idle, summary.agents.active), (1, 1, 0));
    let posted = f.post("still posting while blocked", &[]).await;
    let updates = f.macp.updates(&f.bob, UpdatesQuery::new(f.room)).await.unwrap();
    assert_eq!(updates.findings[0].finding_id, posted.finding_id, "an idle agent still receives updates");
    let bob_post =
        f.macp.post_finding(&f.bob, PostFinding::new(f.room, f.b.clone(), "idle but posting")).await.unwrap();
    assert_eq!(bob_post.finding.seq, 2);
    let too_long = "r".repeat(Limits::default().max_reason_bytes + 1);
    expect_code(
        f.macp
            .declare_status(
                &f.alice,
                DeclareStatus {
                    room_id: f.room,
                    agent_id: Some(f.a.clone()),
                    status: AgentStatus::Idle,
                    reason: Some(too_long),
                },
            )
            .await,
        "invalid_input",
    );
}

/// Presence does not lie: an agent can say it is done (not idle) or leave, and rejoining makes
/// it active; an agent not active for longer than the stale time shows as stale in the context
/// and the summary whatever it declared, and reading its feed as itself counts as activity.
pub async fn presence_says_done_left_and_stale(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let carol = agent("carol-codex");
    f.macp.join_room(&f.bob, JoinRoom::new(f.room).agent(carol.clone())).await.unwrap();
    f.macp.declare_status(&f.bob, DeclareStatus::new(f.room, f.b.clone(), AgentStatus::Done)).await.unwrap();
    f.macp
        .declare_status(&f.bob, DeclareStatus::new(f.room, carol.clone(), AgentStatus::Left))
        .await
        .unwrap();
    let s = f.macp.room_summary(&f.alice, f.room).await.unwrap();
    assert_eq!((s.agents.active, s.agents.done, s.agents.left, s.agents.stale), (1, 1, 1, 0));

    let back = f.macp.join_room(&f.bob, JoinRoom::new(f.room).agent(carol.clone())).await.unwrap();
    assert_eq!(back.agent_status, AgentStatus::Active, "joining again after leaving is working again");

    // 16 minutes without activity: alice's and carol's agents are stale (bob's is done).
    f.clock.advance_ms(16 * 60_000);
    let ctx = f.macp.room_context(&f.bob, f.room).await.unwrap();
    let mut stale = ctx.agents.stale.clone();
    stale.sort();
    assert_eq!(stale, vec![f.a.clone(), carol.clone()], "stale whatever they declared; a done agent is not");
    assert_eq!(ctx.agents.counts.stale, 2);
    // Alice's agent reads its feed and acknowledges: active again.
    let u = f.macp.updates(&f.alice, UpdatesQuery::new(f.room).agent(f.a.clone())).await.unwrap();
    f.macp
        .updates(&f.alice, UpdatesQuery::new(f.room).agent(f.a.clone()).cursor(u.cursor).ack())
        .await
        .unwrap();
    let s = f.macp.room_summary(&f.alice, f.room).await.unwrap();
    assert_eq!(s.agents.stale, 1, "only carol's agent is still stale");
}
