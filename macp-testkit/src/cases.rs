//! One `pub async fn` per rule. Each takes a fresh [`Backend`] and panics with a message naming
//! what broke.

use std::collections::HashSet;
use std::sync::Arc;

use macp_core::blob::PresignedRequest;
use macp_core::model::{
    AgentStatus, EntityType, Evidence, EvidenceKind, Identifier, IndexStatus, RoomStatus, VisibilityMode,
};
use macp_core::service::{
    AddEntity, AddRelationship, CreateRoom, DeclareStatus, GraphQuery, JoinRoom, ListArtifacts, ListRooms,
    MergeEntities, PostFinding, RegisterArtifact, RequestUpload, TimelineQuery, UpdatesQuery, UploadTicket,
};
use macp_core::{AgentId, EntityId, Error, FindingId, Limits, Macp, Principal, Result, RoomId};

use crate::{Backend, ManualClock};

pub use crate::artifact_cases::*;
pub use crate::search_cases::*;

/// Asserts that `r` failed with `code`, returning the error.
#[track_caller]
pub fn expect_code<T: std::fmt::Debug>(r: Result<T>, code: &str) -> Error {
    match r {
        Ok(v) => panic!("expected error `{code}`, got Ok({v:?})"),
        Err(e) => {
            assert_eq!(e.code(), code, "expected `{code}`, got `{}`: {e}", e.code());
            e
        }
    }
}

fn principal(name: &str) -> Principal {
    Principal::new(name).expect("valid principal")
}

fn agent(name: &str) -> AgentId {
    AgentId::new(name).expect("valid agent id")
}

/// A room with two users, each with one joined agent.
pub struct Fixture {
    /// The service.
    pub macp: Macp,
    /// Its clock.
    pub clock: Arc<ManualClock>,
    /// The room.
    pub room: RoomId,
    /// First user.
    pub alice: Principal,
    /// Second user.
    pub bob: Principal,
    /// Alice's agent.
    pub a: AgentId,
    /// Bob's agent.
    pub b: AgentId,
    /// How to use the backend's presigned URLs, if it stores artifacts.
    pub transfer: Option<Arc<dyn crate::Transfer>>,
}

impl Fixture {
    /// Builds the fixture on `backend`.
    pub async fn new(backend: &Backend) -> Self {
        let (macp, clock) = backend.service();
        let (alice, bob) = (principal("alice@example.com"), principal("bob@example.com"));
        let room = macp
            .create_room(&alice, CreateRoom::new("Find why checkout returns 502s").name("checkout-502"))
            .await
            .expect("create room")
            .room_id;
        let a = macp
            .join_room(&alice, JoinRoom::new(room).agent(agent("alice-claude")))
            .await
            .expect("join a")
            .agent_id;
        let b = macp
            .join_room(&bob, JoinRoom::new(room).agent(agent("bob-kiro")))
            .await
            .expect("join b")
            .agent_id;
        let transfer = backend.blobs.as_ref().map(|(_, t)| t.clone());
        Self { macp, clock, room, alice, bob, a, b, transfer }
    }

    /// Uploads `body` as `filename` through a presigned URL (as Alice's agent) and returns the
    /// key, or `None` if the backend stores no artifacts.
    pub async fn upload(&self, filename: &str, body: &[u8]) -> Option<String> {
        let t = self.transfer.as_ref()?;
        let ticket = self
            .macp
            .request_artifact_upload(
                &self.alice,
                RequestUpload {
                    room_id: self.room,
                    agent_id: self.a.clone(),
                    filename: filename.into(),
                    content_type: "text/plain".into(),
                    size: body.len() as u64,
                },
            )
            .await
            .expect("request an upload");
        let status = t.put(&presigned(&ticket), "text/plain", body.to_vec()).await;
        assert_eq!(status, 200, "upload to the presigned URL");
        Some(ticket.key)
    }

    /// Alice's agent posts `content` with `tags`.
    pub async fn post(&self, content: &str, tags: &[&str]) -> macp_core::model::Finding {
        self.macp
            .post_finding(
                &self.alice,
                PostFinding::new(self.room, self.a.clone(), content).tags(tags.iter().copied()),
            )
            .await
            .expect("post finding")
            .finding
    }

    /// Alice's agent adds a resource entity with one identifier.
    pub async fn entity(&self, name: &str, id_type: &str, value: &str) -> EntityId {
        self.macp
            .add_entity(
                &self.alice,
                AddEntity::new(self.room, self.a.clone(), name, EntityType::Resource)
                    .identifier(id_type, value),
            )
            .await
            .expect("add entity")
            .entity
            .entity_id
    }

    /// Alice's agent links two entities.
    pub async fn link(&self, source: EntityId, rel: &str, target: EntityId) {
        self.macp
            .add_relationship(
                &self.alice,
                AddRelationship::new(self.room, self.a.clone(), source, rel, target),
            )
            .await
            .expect("add relationship");
    }

    /// Every finding of the room via the timeline, following cursors.
    pub async fn all_findings(&self, who: &Principal) -> Vec<macp_core::model::Finding> {
        let mut out = Vec::new();
        let mut cursor = None;
        loop {
            let page = self
                .macp
                .timeline(who, TimelineQuery { limit: Some(200), cursor, ..TimelineQuery::new(self.room) })
                .await
                .expect("timeline");
            out.extend(page.findings);
            match page.next_cursor {
                Some(c) => cursor = Some(c),
                None => return out,
            }
        }
    }
}

/// The upload request an [`UploadTicket`] describes.
pub fn presigned(t: &UploadTicket) -> PresignedRequest {
    PresignedRequest {
        url: t.upload_url.clone(),
        method: t.method.clone(),
        headers: t.headers.clone(),
        expires_at: t.expires_at,
    }
}

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
    assert_eq!(again, room, "the stored room reads back identically");
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
    macp.close_room(&alice, ids[1]).await.unwrap();
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = macp.list_rooms(&alice, ListRooms { status: None, limit: Some(2), cursor }).await.unwrap();
        assert!(page.rooms.len() <= 2);
        seen.extend(page.rooms.iter().map(|r| r.room_id));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    let newest_first: Vec<RoomId> = ids.iter().rev().copied().collect();
    assert_eq!(seen, newest_first, "all rooms, newest first, each once");
    let closed = macp
        .list_rooms(&alice, ListRooms { status: Some(RoomStatus::Closed), ..Default::default() })
        .await
        .unwrap();
    assert_eq!(closed.rooms.iter().map(|r| r.room_id).collect::<Vec<_>>(), vec![ids[1]]);
    let active = macp
        .list_rooms(&alice, ListRooms { status: Some(RoomStatus::Active), ..Default::default() })
        .await
        .unwrap();
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
    let closed = f.macp.close_room(&f.bob, f.room).await.unwrap();
    assert_eq!(closed.status, RoomStatus::Closed);
    assert_eq!(closed.closed_by.as_ref().map(|u| u.as_str()), Some("bob@example.com"));

    let (m, r, a) = (&f.macp, f.room, f.a.clone());
    expect_code(m.post_finding(&f.alice, PostFinding::new(r, a.clone(), "late")).await, "room_closed");
    expect_code(m.join_room(&f.alice, JoinRoom::new(r)).await, "room_closed");
    expect_code(
        m.declare_status(
            &f.alice,
            DeclareStatus { room_id: r, agent_id: a.clone(), status: AgentStatus::Idle, reason: None },
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
            MergeEntities { room_id: r, agent_id: a.clone(), winner_entity_id: e1, loser_entity_id: e2 },
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
    let updates = m.updates(&f.bob, UpdatesQuery::new(r, None)).await.unwrap();
    assert_eq!(updates.findings.len(), 1);
    let ctx = m.room_context(&f.bob, r).await.unwrap();
    assert_eq!(ctx.room.status, RoomStatus::Closed);
    assert_eq!(ctx.findings.total, 1);
    let summary = m.room_summary(&f.bob, r).await.unwrap();
    assert_eq!((summary.finding_count, summary.entity_count, summary.relationship_count), (1, 2, 1));
    let graph =
        m.entity_graph(&f.bob, GraphQuery { room_id: r, entity_id: Some(e1), depth: None }).await.unwrap();
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
    let first = f.macp.close_room(&f.alice, f.room).await.unwrap();
    f.clock.advance_ms(5000);
    let second = f.macp.close_room(&f.bob, f.room).await.unwrap();
    assert_eq!(first, second, "the second close changes nothing");
    expect_code(f.macp.close_room(&f.alice, RoomId::generate()).await, "not_found");
}

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
                    agent_id: f.a.clone(),
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
        f.macp.post_finding(&f.alice, PostFinding::new(f.room, there.agent_id, "hi")).await,
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
                agent_id: f.a.clone(),
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
            DeclareStatus { room_id: f.room, agent_id: f.b.clone(), status: AgentStatus::Idle, reason: None },
        )
        .await
        .unwrap();
    let summary = f.macp.room_summary(&f.alice, f.room).await.unwrap();
    assert_eq!((summary.agents.blocked, summary.agents.idle, summary.agents.active), (1, 1, 0));
    let posted = f.post("still posting while blocked", &[]).await;
    let updates = f.macp.updates(&f.bob, UpdatesQuery::new(f.room, None)).await.unwrap();
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
                    agent_id: f.a.clone(),
                    status: AgentStatus::Idle,
                    reason: Some(too_long),
                },
            )
            .await,
        "invalid_input",
    );
}

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
        m.updates(
            &f.alice,
            UpdatesQuery { limit: Some(l.max_updates_page + 1), ..UpdatesQuery::new(r, None) },
        )
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

impl Fixture {
    fn clock_now(&self) -> macp_core::Timestamp {
        use macp_core::Clock;
        self.clock.now()
    }
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
    let empty = f.macp.updates(&f.bob, UpdatesQuery::new(f.room, None)).await.unwrap();
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
                .updates(&f.bob, UpdatesQuery { limit: Some(2), ..UpdatesQuery::new(f.room, cursor.clone()) })
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
    let idle = f.macp.updates(&f.bob, UpdatesQuery::new(f.room, cursor.clone())).await.unwrap();
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
                        UpdatesQuery { limit: Some(7), ..UpdatesQuery::new(f.room, cursor.clone()) },
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

/// A cursor from one room is refused in another.
pub async fn updates_cursor_belongs_to_its_room(backend: Backend) {
    let f = Fixture::new(&backend).await;
    f.post("x", &[]).await;
    let c = f.macp.updates(&f.alice, UpdatesQuery::new(f.room, None)).await.unwrap().cursor;
    let other = f.macp.create_room(&f.alice, CreateRoom::new("other")).await.unwrap().room_id;
    expect_code(f.macp.updates(&f.alice, UpdatesQuery::new(other, Some(c))).await, "invalid_input");
    expect_code(
        f.macp.updates(&f.alice, UpdatesQuery::new(f.room, Some("AAAA".into()))).await,
        "invalid_input",
    );
    expect_code(f.macp.updates(&f.alice, UpdatesQuery::new(RoomId::generate(), None)).await, "not_found");
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
    let ua = f.macp.updates(&f.alice, UpdatesQuery::new(f.room, None)).await.unwrap();
    let uc = f.macp.updates(&carol, UpdatesQuery::new(f.room, None)).await.unwrap();
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
        .entity_graph(&f.alice, GraphQuery { room_id: f.room, entity_id: None, depth: None })
        .await
        .unwrap();
    assert_eq!(graph.entities.iter().map(|e| e.entity.entity_id).collect::<Vec<_>>(), vec![ef]);
    expect_code(
        f.macp.entity_graph(&f.alice, GraphQuery { room_id: f.room, entity_id: Some(eg), depth: None }).await,
        "not_found",
    );
    expect_code(
        f.macp.add_relationship(&f.alice, AddRelationship::new(f.room, f.a.clone(), ef, "same_as", eg)).await,
        "not_found",
    );
}

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
        .entity_graph(&f.alice, GraphQuery { room_id: f.room, entity_id: None, depth: None })
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
                agent_id: f.b.clone(),
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
        .entity_graph(&f.alice, GraphQuery { room_id: f.room, entity_id: Some(loser), depth: None })
        .await
        .unwrap();
    assert_eq!(g.root, Some(winner));
    assert_eq!(g.relationships.len(), 1);
    assert_eq!((g.relationships[0].source_entity_id, g.relationships[0].target_entity_id), (winner, db));
    // The whole-room graph lists the winner with its alias, and not the loser.
    let all = f
        .macp
        .entity_graph(&f.alice, GraphQuery { room_id: f.room, entity_id: None, depth: None })
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
    // Artifacts linked to the old id list under the winner.
    let Some(key) = f.upload("trace.txt", b"trace of the timeout").await else { return };
    f.macp
        .register_artifact(
            &f.alice,
            RegisterArtifact {
                linked_entity_ids: vec![loser],
                ..artifact_req(f.room, f.a.clone(), &key, vec![])
            },
        )
        .await
        .unwrap();
    let arts = f
        .macp
        .list_artifacts(
            &f.alice,
            ListArtifacts {
                room_id: f.room,
                finding_id: None,
                entity_id: Some(winner),
                limit: None,
                cursor: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(arts.artifacts.len(), 1);
    assert_eq!(arts.artifacts[0].artifact.linked_entity_ids, vec![winner]);
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
            MergeEntities { room_id: f.room, agent_id: f.a.clone(), winner_entity_id: w, loser_entity_id: l },
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
            .entity_graph(&f.alice, GraphQuery { room_id: f.room, entity_id: Some(id), depth: None })
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
                            agent_id: f.a.clone(),
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
            .entity_graph(&f.alice, GraphQuery { room_id: f.room, entity_id: Some(x), depth: None })
            .await
            .unwrap();
        let gy = f
            .macp
            .entity_graph(&f.alice, GraphQuery { room_id: f.room, entity_id: Some(y), depth: None })
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
            MergeEntities { room_id: f.room, agent_id: f.a.clone(), winner_entity_id: x, loser_entity_id: y },
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
            GraphQuery { room_id: f.room, entity_id: Some(chain[0]), depth: Some(depth) },
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
        .entity_graph(&f.alice, GraphQuery { room_id: f.room, entity_id: None, depth: None })
        .await
        .unwrap();
    assert_eq!((whole.entities.len(), whole.relationships.len(), whole.truncated), (5, 4, false));
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
            MergeEntities { room_id: f.room, agent_id: f.a.clone(), winner_entity_id: x, loser_entity_id: z },
        )
        .await
        .unwrap();
    f.clock.advance_ms(10_000);
    let artifacts = match f.upload("1.log", b"log").await {
        Some(key) => {
            f.macp
                .register_artifact(&f.alice, artifact_req(f.room, f.a.clone(), &key, vec![]))
                .await
                .unwrap();
            1
        }
        None => 0,
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
        let req =
            MergeEntities { room_id: f.room, agent_id: f.a.clone(), winner_entity_id: w, loser_entity_id: l };
        let (macp, who) = (f.macp.clone(), f.alice.clone());
        async move { macp.merge_entities(&who, req).await }
    };
    let a = add("fleet-a", 0, max - 4).await;
    let b = add("fleet-b", 100, 8).await;
    let e = expect_code(merge(a, b).await, "invalid_input");
    assert_eq!(e.limit(), Some(max as u64), "{e}");
    let g = f
        .macp
        .entity_graph(&f.alice, GraphQuery { room_id: f.room, entity_id: None, depth: None })
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
            agent_id: agent_id.clone(),
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
        let u = f.macp.updates(&dee, UpdatesQuery::new(f.room, cursor.take())).await.unwrap();
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
    let u = f.macp.updates(&f.bob, UpdatesQuery::new(f.room, Some(ctx.cursor))).await.unwrap();
    assert_eq!(u.findings.iter().map(|x| x.finding_id).collect::<Vec<_>>(), after);
    let empty = f
        .macp
        .room_context(&f.bob, f.macp.create_room(&f.bob, CreateRoom::new("e")).await.unwrap().room_id)
        .await
        .unwrap();
    assert_eq!(empty.findings.total, 0);
}

// ---------------------------------------------------------------------------------------------
// Artifacts

fn artifact_req(room: RoomId, agent_id: AgentId, key: &str, findings: Vec<FindingId>) -> RegisterArtifact {
    RegisterArtifact {
        room_id: room,
        agent_id,
        key: key.to_owned(),
        description: Some("log excerpt".into()),
        linked_finding_ids: findings,
        linked_entity_ids: Vec::new(),
        idempotency_key: None,
    }
}

/// Keys must be plain keys under the room's own prefix, and links must exist in the room.
pub async fn register_artifact_checks_prefix_and_links(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let finding = f.post("see attached", &[]).await;
    let Some(key) = f.upload("trace.log", b"0123456789").await else {
        return eprintln!("skipped: no artifact store");
    };
    let ok = f
        .macp
        .register_artifact(&f.alice, artifact_req(f.room, f.a.clone(), &key, vec![finding.finding_id]))
        .await
        .unwrap();
    assert_eq!(ok.artifact.uploaded_by.as_str(), "alice@example.com");
    assert_eq!(
        (ok.artifact.size, ok.artifact.content_type.as_str()),
        (10, "text/plain"),
        "size and type are what was stored"
    );
    let other = RoomId::generate();
    let ulid = key.rsplit('/').nth(1).unwrap().to_owned();
    for bad in [
        format!("rooms/{other}/artifacts/{ulid}/trace.log"),
        format!("rooms/{}/../{other}/x.log", f.room),
        format!("rooms/{}/", f.room),
        "x.log".to_owned(),
    ] {
        expect_code(
            f.macp.register_artifact(&f.alice, artifact_req(f.room, f.a.clone(), &bad, vec![])).await,
            "invalid_input",
        );
    }
    let second = f.upload("y.log", b"y").await.unwrap();
    expect_code(
        f.macp
            .register_artifact(
                &f.alice,
                artifact_req(f.room, f.a.clone(), &second, vec![FindingId::generate()]),
            )
            .await,
        "not_found",
    );
    expect_code(
        f.macp
            .register_artifact(
                &f.alice,
                RegisterArtifact {
                    linked_entity_ids: vec![EntityId::generate()],
                    ..artifact_req(f.room, f.a.clone(), &second, vec![])
                },
            )
            .await,
        "not_found",
    );
    expect_code(
        f.macp.register_artifact(&f.alice, artifact_req(f.room, f.a.clone(), &key, vec![])).await,
        "already_exists",
    );
    assert_eq!(f.macp.room_summary(&f.alice, f.room).await.unwrap().artifact_count, 1);
}

/// Artifacts list by finding and by entity, where any alias of a merged entity matches.
pub async fn list_artifacts_filters_by_finding_and_entity_alias(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let f1 = f.post("one", &[]).await.finding_id;
    let f2 = f.post("two", &[]).await.finding_id;
    let e = f.entity("e", "host", "e").await;
    let e2 = f.entity("e2", "host", "e2").await;
    let Some(k1) = f.upload("1.log", b"one").await else { return eprintln!("skipped: no artifact store") };
    let k2 = f.upload("2.log", b"two").await.unwrap();
    f.macp.register_artifact(&f.alice, artifact_req(f.room, f.a.clone(), &k1, vec![f1])).await.unwrap();
    f.macp
        .register_artifact(
            &f.alice,
            RegisterArtifact {
                linked_entity_ids: vec![e2],
                ..artifact_req(f.room, f.a.clone(), &k2, vec![f2])
            },
        )
        .await
        .unwrap();
    f.macp
        .merge_entities(
            &f.alice,
            MergeEntities {
                room_id: f.room,
                agent_id: f.a.clone(),
                winner_entity_id: e,
                loser_entity_id: e2,
            },
        )
        .await
        .unwrap();
    let list = |finding_id, entity_id, limit, cursor| {
        f.macp
            .list_artifacts(&f.alice, ListArtifacts { room_id: f.room, finding_id, entity_id, limit, cursor })
    };
    assert_eq!(list(None, None, None, None).await.unwrap().artifacts.len(), 2);
    let by_f1 = list(Some(f1), None, None, None).await.unwrap().artifacts;
    assert_eq!(by_f1.len(), 1);
    assert_eq!(by_f1[0].artifact.key, k1);
    let by_e = list(None, Some(e), None, None).await.unwrap().artifacts;
    assert_eq!(by_e.len(), 1, "linked to the alias, listed under the winner");
    assert_eq!(by_e[0].artifact.linked_entity_ids, vec![e]);
    let page = list(None, None, Some(1), None).await.unwrap();
    let next = list(None, None, Some(1), page.next_cursor.clone()).await.unwrap();
    assert_ne!(page.artifacts[0].artifact.artifact_id, next.artifacts[0].artifact.artifact_id);
    assert!(next.next_cursor.is_none());
}

/// `register_artifact` with a key replays.
pub async fn idempotent_register_artifact_replays(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let Some(key) = f.upload("x.png.txt", b"x").await else { return eprintln!("skipped: no artifact store") };
    let req = RegisterArtifact {
        idempotency_key: Some("a1".into()),
        ..artifact_req(f.room, f.a.clone(), &key, vec![])
    };
    let first = f.macp.register_artifact(&f.alice, req.clone()).await.unwrap();
    let again = f.macp.register_artifact(&f.alice, req).await.unwrap();
    assert!(again.replayed);
    assert_eq!(again.artifact, first.artifact);
}

// ---------------------------------------------------------------------------------------------
// Durability

/// On a durable backend, everything acknowledged is there when the data is opened again.
pub async fn acknowledged_writes_survive_reopen(backend: Backend) {
    if !backend.store.capabilities().durable {
        eprintln!("skipped: backend does not declare durability");
        return;
    }
    let reopen = backend.reopen.clone().expect("a durable backend provides reopen");
    let f = Fixture::new(&backend).await;
    let x = f.entity("x", "host", "x").await;
    let y = f.entity("y", "host", "y").await;
    f.link(x, "depends_on", y).await;
    let posted = f.post("remember me", &["root-cause"]).await;
    f.macp.close_room(&f.alice, f.room).await.unwrap();
    let again = Macp::builder().store(reopen()).build().unwrap();
    let t = again.timeline(&f.bob, TimelineQuery::new(f.room)).await.unwrap();
    assert_eq!(t.findings, vec![posted]);
    let s = again.room_summary(&f.bob, f.room).await.unwrap();
    assert_eq!((s.room.status, s.entity_count, s.relationship_count), (RoomStatus::Closed, 2, 1));
}
