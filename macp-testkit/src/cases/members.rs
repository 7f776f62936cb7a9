//! Members-only rooms: to anyone but its members a restricted room does not exist, through any
//! call; members add and remove members, and each change is an event.

use macp_core::model::{AgentStatus, Channel, EntityType, EventKind};
use macp_core::service::{
    AddEntity, AddRelationship, AnswerDecision, AskDecision, ClaimWork, CloseRoom, ContextQuery,
    DeclareStatus, Erase, GraphQuery, ListArtifacts, ListRooms, MergeEntities, PostFinding, RegisterArtifact,
    RequestUpload, SearchFindings, SteerRoom, SummaryQuery, TimelineQuery, UpdatesQuery,
};
use macp_core::{FindingId, RoomId};

use super::*;
use crate::Backend;

/// What a non-member may try to name in a members-only room.
struct Probe {
    room: RoomId,
    /// An agent of the room (a member's): naming it must not tell that it exists.
    agent: AgentId,
    finding: FindingId,
    decision: macp_core::DecisionId,
    entities: (macp_core::EntityId, macp_core::EntityId),
    blobs: bool,
}

/// The error a call makes about `room`, with the room's id taken out: compared with the same
/// call about a room that never existed, so not even the wording differs.
fn shape<T: std::fmt::Debug>(got: macp_core::Result<T>, room: RoomId) -> String {
    match got {
        Ok(v) => format!("answered: {v:?}"),
        Err(e) => format!("{}: {}", e.code(), e.to_string().replace(&room.to_string(), "<room>")),
    }
}

/// Every call a non-member could make about the room, each expected to answer exactly what it
/// answers about a room that does not exist.
async fn all_not_found(m: &Macp, who: &Principal, mine: &AgentId, p: &Probe) {
    let ghost = RoomId::generate();
    macro_rules! hidden {
        ($what:expr, |$r:ident| $call:expr) => {
            let seen = {
                let $r = p.room;
                shape($call.await, p.room)
            };
            let none = {
                let $r = ghost;
                shape($call.await, ghost)
            };
            assert!(
                seen.starts_with("not_found"),
                "{} shows a members-only room to a non-member: {seen}",
                $what
            );
            assert_eq!(seen, none, "{} answers differently for a hidden room and a missing one", $what);
        };
    }
    let a = || mine.clone();
    hidden!("room_summary", |r| m.room_summary(who, r));
    hidden!("room_summary since", |r| m
        .room_summary(who, SummaryQuery::since(r, macp_core::Timestamp::from_millis(0))));
    hidden!("room_context", |r| m.room_context(who, r));
    hidden!("room_context naming its agent", |r| m
        .room_context(who, ContextQuery { room_id: r, agent_id: Some(p.agent.clone()) }));
    hidden!("join_room", |r| m.join_room(who, JoinRoom::new(r).agent(a())));
    hidden!("timeline", |r| m.timeline(who, TimelineQuery::new(r)));
    hidden!("updates", |r| m.updates(who, UpdatesQuery::new(r)));
    hidden!("updates waiting", |r| m
        .updates(who, UpdatesQuery { wait_seconds: Some(1), ..UpdatesQuery::new(r) }));
    hidden!("feed_page", |r| m.feed_page(who, r, None, None));
    hidden!("last_event_seq", |r| m.last_event_seq(who, r));
    hidden!("search_findings", |r| m.search_findings(who, SearchFindings::new(r, "pool")));
    hidden!("entity_graph", |r| m.entity_graph(who, GraphQuery::new(r)));
    hidden!("list_agents", |r| m.list_agents(who, r));
    hidden!("list_claims", |r| m.list_claims(who, r));
    hidden!("list_decisions", |r| m.list_decisions(who, r, false));
    hidden!("post_finding", |r| m.post_finding(who, PostFinding::new(r, a(), "hello")));
    hidden!("add_entity", |r| m.add_entity(who, AddEntity::new(r, a(), "x", EntityType::Service)));
    hidden!("add_relationship", |r| m
        .add_relationship(who, AddRelationship::new(r, a(), p.entities.0, "calls", p.entities.1)));
    hidden!("merge_entities", |r| m
        .merge_entities(who, MergeEntities::new(r, a(), p.entities.0, p.entities.1)));
    hidden!("claim_work", |r| m.claim_work(who, ClaimWork::new(r, a(), "x")));
    hidden!("ask_decision", |r| m.ask_decision(who, AskDecision::new(r, a(), "x?")));
    hidden!("answer_decision", |r| m.answer_decision(
        who,
        AnswerDecision { room_id: r, decision_id: p.decision, answer: "yes".into(), agent_id: None },
        Channel::Person
    ));
    hidden!("declare_status", |r| m.declare_status(who, DeclareStatus::new(r, a(), AgentStatus::Active)));
    hidden!("steer_room", |r| m.steer_room(
        who,
        SteerRoom { add_members: vec![who.user_id.to_string()], ..SteerRoom::new(r) },
        Channel::Person
    ));
    hidden!("close_room", |r| m.close_room(
        who,
        CloseRoom::new(r).resolution("done", [p.finding]),
        Channel::Agent
    ));
    hidden!("close_room as its agent", |r| m.close_room(
        who,
        CloseRoom { agent_id: Some(p.agent.clone()), ..CloseRoom::new(r) },
        Channel::Agent
    ));
    hidden!("release_claim_as_person", |r| m.release_claim_as_person(who, r, "check the pool"));
    hidden!("erase", |r| m.erase(who, Erase::finding(r, a(), p.finding, "x")));
    hidden!("erase_as_person", |r| m.erase_as_person(who, Erase::finding(r, a(), p.finding, "x")));
    if p.blobs {
        hidden!("list_artifacts", |r| m.list_artifacts(
            who,
            ListArtifacts { room_id: r, finding_id: None, entity_id: None, limit: None, cursor: None }
        ));
        hidden!("request_artifact_upload", |r| m.request_artifact_upload(
            who,
            RequestUpload {
                room_id: r,
                agent_id: Some(a()),
                filename: "x.txt".into(),
                content_type: "text/plain".into(),
                size: 1,
            }
        ));
        hidden!("register_artifact", |r| m.register_artifact(
            who,
            RegisterArtifact {
                room_id: r,
                agent_id: Some(a()),
                key: format!("rooms/{r}/artifacts/01J0000000000000000000000/x.txt"),
                description: None,
                linked_finding_ids: vec![],
                linked_entity_ids: vec![],
                idempotency_key: None,
            }
        ));
    }
}

/// A room restricted to named people is `not_found` for everyone else through every call,
/// absent from their `list_rooms` and cross-room search, and the same as any room for its
/// members; members add and remove members (events), a non-member cannot, and the last member
/// cannot be removed.
pub async fn a_members_only_room_does_not_exist_for_others(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let m = &f.macp;
    let carol = principal("carol@example.com");
    let secret = m
        .create_room(
            &f.alice,
            CreateRoom {
                members: vec!["carol@example.com".into()],
                ..CreateRoom::new("payroll data exposure")
            },
        )
        .await
        .unwrap();
    assert_eq!(
        secret.members.iter().map(|u| u.as_str()).collect::<Vec<_>>(),
        ["alice@example.com", "carol@example.com"]
    );
    let room = secret.room_id;
    let a = m.join_room(&f.alice, JoinRoom::new(room).agent(agent("alice-secret"))).await.unwrap().agent_id;
    let posted = m
        .post_finding(
            &f.alice,
            PostFinding::new(room, a.clone(), "pool of payroll exports is world-readable"),
        )
        .await
        .unwrap()
        .finding;
    m.claim_work(&f.alice, ClaimWork::new(room, a.clone(), "check the pool")).await.unwrap();
    let decision =
        m.ask_decision(&f.alice, AskDecision::new(room, a.clone(), "rotate the exports key?")).await.unwrap();
    let e1 = m
        .add_entity(&f.alice, AddEntity::new(room, a.clone(), "exports", EntityType::Resource))
        .await
        .unwrap();
    let e2 = m
        .add_entity(&f.alice, AddEntity::new(room, a.clone(), "payroll", EntityType::Service))
        .await
        .unwrap();
    // A finding in an open room shares the word, so a cross-room search has something to find.
    f.post("the connection pool is exhausted", &["triage"]).await;
    let probe = Probe {
        room,
        agent: a.clone(),
        finding: posted.finding_id,
        decision: decision.decision_id,
        entities: (e1.entity.entity_id, e2.entity.entity_id),
        blobs: backend.blobs.is_some(),
    };

    all_not_found(m, &f.bob, &f.b, &probe).await;
    let listed = m.list_rooms(&f.bob, ListRooms::default()).await.unwrap();
    assert!(listed.rooms.iter().all(|r| r.room_id != room), "list_rooms shows it");
    assert!(listed.rooms.iter().any(|r| r.room_id == f.room), "but the open room is listed");
    let everywhere =
        m.search_findings(&f.bob, SearchFindings::new(f.room, "pool").all_rooms()).await.unwrap();
    assert!(everywhere.results.iter().all(|h| h.finding.room_id != room), "cross-room search finds it");
    assert!(!everywhere.results.is_empty());

    // Nobody but its creator makes an open room members-only: bob cannot take the open room.
    let take = SteerRoom { add_members: vec!["bob@example.com".into()], ..SteerRoom::new(f.room) };
    expect_code(m.steer_room(&f.bob, take, Channel::Person).await, "permission_denied");
    assert!(
        m.room_summary(&f.alice, f.room).await.unwrap().room.members.is_empty(),
        "the open room stays open"
    );

    // Members see it as any room; carol, a member, adds bob; the change is an event.
    assert!(
        m.list_rooms(&carol, ListRooms::default()).await.unwrap().rooms.iter().any(|r| r.room_id == room)
    );
    let r = m
        .steer_room(
            &carol,
            SteerRoom { add_members: vec!["bob@example.com".into()], ..SteerRoom::new(room) },
            Channel::Person,
        )
        .await
        .unwrap();
    assert_eq!(r.members.len(), 3);
    let last = m.feed_page(&carol, room, None, Some(1)).await.unwrap().events.remove(0);
    assert_eq!(last.kind, EventKind::MembersChanged);
    assert!(last.summary.contains("bob@example.com"), "{}", last.summary);
    m.timeline(&f.bob, TimelineQuery::new(room)).await.expect("bob is a member now");

    // Bob removes carol; the creator cannot be removed; nor can one id be added and removed.
    let remove = |people: &[&str]| SteerRoom {
        remove_members: people.iter().map(|s| s.to_string()).collect(),
        ..SteerRoom::new(room)
    };
    m.steer_room(&f.bob, remove(&["carol@example.com"]), Channel::Person).await.unwrap();
    expect_code(m.steer_room(&f.bob, remove(&["alice@example.com"]), Channel::Person).await, "invalid_input");
    let both = SteerRoom { add_members: vec!["dan@example.com".into()], ..remove(&["dan@example.com"]) };
    expect_code(m.steer_room(&f.bob, both, Channel::Person).await, "invalid_input");
    let carols =
        m.join_room(&carol, JoinRoom::new(f.room).agent(agent("carol-agent"))).await.unwrap().agent_id;
    all_not_found(m, &carol, &carols, &probe).await;
    assert_eq!(m.room_summary(&f.bob, room).await.unwrap().finding_count, 1);
}
