//! Members-only rooms: to anyone but its members a restricted room does not exist, through any
//! call; members add and remove members, and each change is an event.

use macp_core::model::{AgentStatus, Channel, EntityType, EventKind};
use macp_core::service::{
    AddEntity, AskDecision, ClaimWork, CloseRoom, DeclareStatus, Erase, GraphQuery, ListArtifacts, ListRooms,
    PostFinding, SearchFindings, SteerRoom, TimelineQuery, UpdatesQuery,
};
use macp_core::{FindingId, RoomId};

use super::*;
use crate::Backend;

/// Every call a non-member could make about `room`, each expected to answer `not_found`.
async fn all_not_found(
    m: &Macp,
    who: &Principal,
    agent: &AgentId,
    room: RoomId,
    finding: FindingId,
    blobs: bool,
) {
    let a = || agent.clone();
    macro_rules! hidden {
        ($what:expr, $call:expr) => {
            let got = $call.await;
            assert!(
                matches!(&got, Err(e) if e.code() == "not_found"),
                "{} shows a members-only room to a non-member: {:?}",
                $what,
                got.map(|_| ())
            );
        };
    }
    hidden!("room_summary", m.room_summary(who, room));
    hidden!("room_context", m.room_context(who, room));
    hidden!("join_room", m.join_room(who, JoinRoom::new(room).agent(a())));
    hidden!("timeline", m.timeline(who, TimelineQuery::new(room)));
    hidden!("updates", m.updates(who, UpdatesQuery::new(room)));
    hidden!("feed_page", m.feed_page(who, room, None, None));
    hidden!("search_findings", m.search_findings(who, SearchFindings::new(room, "pool")));
    hidden!("entity_graph", m.entity_graph(who, GraphQuery::new(room)));
    hidden!("list_agents", m.list_agents(who, room));
    hidden!("list_claims", m.list_claims(who, room));
    hidden!("list_decisions", m.list_decisions(who, room, false));
    hidden!("post_finding", m.post_finding(who, PostFinding::new(room, a(), "hello")));
    hidden!("add_entity", m.add_entity(who, AddEntity::new(room, a(), "x", EntityType::Service)));
    hidden!("claim_work", m.claim_work(who, ClaimWork::new(room, a(), "x")));
    hidden!("ask_decision", m.ask_decision(who, AskDecision::new(room, a(), "x?")));
    hidden!("declare_status", m.declare_status(who, DeclareStatus::new(room, a(), AgentStatus::Active)));
    hidden!(
        "steer_room",
        m.steer_room(
            who,
            SteerRoom { add_members: vec![who.user_id.to_string()], ..SteerRoom::new(room) },
            Channel::Person
        )
    );
    hidden!("close_room", m.close_room(who, CloseRoom::new(room), Channel::Person));
    hidden!("release_claim_as_person", m.release_claim_as_person(who, room, "check the pool"));
    hidden!("erase_as_person", m.erase_as_person(who, Erase::finding(room, a(), finding, "x")));
    if blobs {
        let q = ListArtifacts { room_id: room, finding_id: None, entity_id: None, limit: None, cursor: None };
        hidden!("list_artifacts", m.list_artifacts(who, q));
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
    // A finding in an open room shares the word, so a cross-room search has something to find.
    f.post("the connection pool is exhausted", &["triage"]).await;

    all_not_found(m, &f.bob, &f.b, room, posted.finding_id, backend.blobs.is_some()).await;
    let listed = m.list_rooms(&f.bob, ListRooms::default()).await.unwrap();
    assert!(listed.rooms.iter().all(|r| r.room_id != room), "list_rooms shows it");
    assert!(listed.rooms.iter().any(|r| r.room_id == f.room), "but the open room is listed");
    let everywhere =
        m.search_findings(&f.bob, SearchFindings::new(f.room, "pool").all_rooms()).await.unwrap();
    assert!(everywhere.results.iter().all(|h| h.finding.room_id != room), "cross-room search finds it");
    assert!(!everywhere.results.is_empty());

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

    // Bob removes alice and carol; then he cannot remove himself, the last member.
    let remove = |people: &[&str]| SteerRoom {
        remove_members: people.iter().map(|s| s.to_string()).collect(),
        ..SteerRoom::new(room)
    };
    m.steer_room(&f.bob, remove(&["alice@example.com", "carol@example.com"]), Channel::Person).await.unwrap();
    expect_code(m.steer_room(&f.bob, remove(&["bob@example.com"]), Channel::Person).await, "invalid_input");
    all_not_found(m, &f.alice, &a, room, posted.finding_id, backend.blobs.is_some()).await;
    assert_eq!(m.room_summary(&f.bob, room).await.unwrap().finding_count, 1);
}
