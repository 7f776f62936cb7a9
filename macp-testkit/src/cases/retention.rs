//! Retention: a closed room is kept for its retention, then purged everywhere; open, reopened
//! and held rooms are kept.

use std::sync::Arc;

use macp_core::model::{Channel, EntityType, Identifier};
use macp_core::search::builtin::BuiltinEmbedder;
use macp_core::service::{
    AddEntity, AddRelationship, AskDecision, ClaimWork, CloseRoom, PostFinding, SteerRoom,
};
use macp_core::store::FindingQuery;

use super::*;
use crate::{Backend, ManualClock};

const DAY_MS: i64 = 24 * 60 * 60 * 1000;

/// A service over everything the backend has (vectors, artifacts), with a clock to move and a
/// server default retention of `default_days`.
pub(crate) fn service(backend: &Backend, clock: Arc<ManualClock>, default_days: u32) -> Macp {
    let mut b =
        Macp::builder().store(backend.store.clone()).clock(clock).default_retention_days(default_days);
    if let Some(index) = &backend.vector_index {
        b = b
            .embedder(Arc::new(BuiltinEmbedder::load().expect("built-in model")))
            .vector_index(index.clone());
    }
    if let Some((blobs, _)) = &backend.blobs {
        b = b.blob_store(blobs.clone());
    }
    b.build().expect("service")
}

/// A room with something of every kind in it: findings (keyed, tagged, a reply, entity refs),
/// an entity with an identifier, a relationship, a claim, a decision, an artifact where the
/// backend stores them, and the agent's read position.
pub(crate) async fn fill(
    m: &Macp,
    backend: &Backend,
    who: &Principal,
    retention_days: Option<u32>,
    word: &str,
) -> (RoomId, Option<String>) {
    let room = m
        .create_room(
            who,
            CreateRoom { retention_days, ..CreateRoom::new("retention: find why checkout fails") },
        )
        .await
        .unwrap()
        .room_id;
    let a = m.join_room(who, JoinRoom::new(room).agent(agent("ret-agent"))).await.unwrap().agent_id;
    let db = m
        .add_entity(
            who,
            AddEntity::new(room, a.clone(), "orders-db", EntityType::Resource)
                .identifier("hostname", "orders-db-1"),
        )
        .await
        .unwrap()
        .entity
        .entity_id;
    let api = m
        .add_entity(who, AddEntity::new(room, a.clone(), "checkout-api", EntityType::Service))
        .await
        .unwrap();
    m.add_relationship(who, AddRelationship::new(room, a.clone(), api.entity.entity_id, "depends_on", db))
        .await
        .unwrap();
    let first = m
        .post_finding(
            who,
            PostFinding::new(
                room,
                a.clone(),
                format!("orders-db-1 refuses connections at max_connections=500 ({word})"),
            )
            .tags(["triage"])
            .entity_refs([db])
            .idempotency_key("ret-1"),
        )
        .await
        .unwrap()
        .finding;
    m.post_finding(
        who,
        PostFinding {
            reply_to: Some(first.finding_id),
            ..PostFinding::new(room, a.clone(), "the pool is 500 wide")
        },
    )
    .await
    .unwrap();
    m.claim_work(who, ClaimWork::new(room, a.clone(), "check the pool")).await.unwrap();
    m.ask_decision(who, AskDecision::new(room, a.clone(), "fail over orders-db?")).await.unwrap();
    let q = macp_core::service::UpdatesQuery {
        agent_id: Some(a.clone()),
        ..macp_core::service::UpdatesQuery::new(room)
    };
    let seen = m.updates(who, q.clone()).await.unwrap().cursor;
    m.updates(who, macp_core::service::UpdatesQuery { ack: true, cursor: Some(seen), ..q }).await.unwrap();
    let key = match &backend.blobs {
        Some((_, t)) => {
            let ticket = m
                .request_artifact_upload(
                    who,
                    macp_core::service::RequestUpload {
                        room_id: room,
                        agent_id: Some(a.clone()),
                        filename: "dump.txt".into(),
                        content_type: "text/plain".into(),
                        size: 5,
                    },
                )
                .await
                .unwrap();
            assert_eq!(t.put(&presigned(&ticket), "text/plain", b"hello".to_vec()).await, 200);
            m.register_artifact(
                who,
                macp_core::service::RegisterArtifact {
                    room_id: room,
                    agent_id: Some(a.clone()),
                    key: ticket.key.clone(),
                    description: Some("pool dump".into()),
                    linked_finding_ids: vec![first.finding_id],
                    linked_entity_ids: vec![db],
                    idempotency_key: None,
                },
            )
            .await
            .unwrap();
            // And an upload never registered: the room's files go whole.
            let orphan = m
                .request_artifact_upload(
                    who,
                    macp_core::service::RequestUpload {
                        room_id: room,
                        agent_id: Some(a.clone()),
                        filename: "half.txt".into(),
                        content_type: "text/plain".into(),
                        size: 4,
                    },
                )
                .await
                .unwrap();
            assert_eq!(t.put(&presigned(&orphan), "text/plain", b"half".to_vec()).await, 200);
            Some(ticket.key)
        }
        None => None,
    };
    (room, key)
}

/// A closed room whose retention ran out is purged everywhere by `purge_expired`: the room, its
/// findings, feed, entities and identifiers, relationships, claims, decisions, agents, keyword
/// and vector indexes and artifact files; where the backend can be read beneath its API, no
/// table, bucket or index holds the room's id any more. Another room is untouched, and the
/// purge is not a day early.
pub async fn an_expired_room_is_purged_everywhere(backend: Backend) {
    let clock = Arc::new(ManualClock::new());
    let m = service(&backend, clock.clone(), 0);
    let who = principal("ret@example.com");
    let (room, key) = fill(&m, &backend, &who, Some(2), "quokkapurged41").await;
    let (kept, _) = fill(&m, &backend, &who, None, "wombatkept41").await;
    // Searched before the purge, so that the indexes in memory hold the room.
    let hits = m
        .search_findings(&who, macp_core::service::SearchFindings::new(room, "quokkapurged41"))
        .await
        .unwrap();
    assert!(hits.results.iter().any(|h| h.finding.content.contains("quokkapurged41")));
    m.close_room(&who, CloseRoom::new(room), Channel::Person).await.unwrap();
    m.close_room(&who, CloseRoom::new(kept), Channel::Person).await.unwrap();
    let closed = m.room_summary(&who, room).await.unwrap();
    let expires = m.expires_at(&closed.room).expect("a closed room with a retention expires");
    assert_eq!(expires.as_millis() - closed.room.closed_at.unwrap().as_millis(), 2 * DAY_MS);

    clock.advance_ms(2 * DAY_MS - 1_000);
    assert!(m.purge_expired().await.unwrap().rooms.is_empty(), "purged before its time");
    clock.advance_ms(1_000);
    let report = m.purge_expired().await.unwrap();
    assert_eq!(report.rooms, vec![room], "exactly the expired room");
    assert_eq!(report.findings, if backend.vector_index.is_some() { 2 } else { 0 });
    assert_eq!(report.objects, if backend.blobs.is_some() { 2 } else { 0 });

    let s = &backend.store;
    assert!(s.get_room(room).await.unwrap().is_none());
    expect_code(m.room_summary(&who, room).await, "not_found");
    assert!(s.list_findings(room, &FindingQuery::after(0, 100)).await.unwrap().is_empty());
    assert!(s.list_events(room, 0, &[], 100).await.unwrap().is_empty());
    assert!(s.list_agents(room).await.unwrap().is_empty());
    assert!(s.list_claims(room, macp_core::Clock::now(&*clock)).await.unwrap().is_empty());
    assert!(s.list_decisions(room, false).await.unwrap().is_empty());
    let id = Identifier { id_type: "hostname".into(), value: "orders-db-1".into() };
    assert!(s.find_identifiers(room, &[id]).await.unwrap().is_empty(), "the identifier is still claimed");
    if let Some(hits) = s.keyword_search(room, "quokkapurged41", 10).await.unwrap() {
        assert!(hits.hits.is_empty(), "the keyword index still holds the purged room");
    }
    if let Some(index) = &backend.vector_index {
        assert_eq!(index.count(room).await.unwrap(), 0, "vectors left");
    }
    if let (Some((blobs, _)), Some(key)) = (&backend.blobs, &key) {
        assert!(blobs.head(key).await.unwrap().is_none(), "the artifact's file is left");
    }
    if let Some(scan) = &backend.leftovers {
        for needle in [room.to_string(), "quokkapurged41".into()] {
            let left = scan.find(&needle).await;
            assert!(
                left.is_empty(),
                "the purged room's `{needle}` is still in the backend's storage: {left:?}"
            );
        }
        // The scan sees what is there: the kept room's id and its findings' text.
        for needle in [kept.to_string(), "wombatkept41".into()] {
            assert!(!scan.find(&needle).await.is_empty(), "the scan misses `{needle}`, which is stored");
        }
    }
    // The other room is whole, and purging again finds nothing more.
    let other = m.room_summary(&who, kept).await.unwrap();
    assert_eq!(other.finding_count, 2);
    assert!(m.purge_expired().await.unwrap().rooms.is_empty());
}

/// Open rooms never expire; reopening stops the clock; a retention of 0 holds a room whatever
/// the server's default; retention can be set on a closed room, and is an event; too long is
/// refused with the limit.
pub async fn a_room_is_kept_while_open_reopened_or_held(backend: Backend) {
    let clock = Arc::new(ManualClock::new());
    let m = service(&backend, clock.clone(), 1);
    let who = principal("ret@example.com");
    let open = m.create_room(&who, CreateRoom::new("stays open")).await.unwrap().room_id;
    let reopened = m.create_room(&who, CreateRoom::new("reopened")).await.unwrap().room_id;
    let held = m.create_room(&who, CreateRoom::new("held")).await.unwrap().room_id;
    let default = m.create_room(&who, CreateRoom::new("server default")).await.unwrap().room_id;
    for r in [reopened, held, default] {
        m.close_room(&who, CloseRoom::new(r), Channel::Person).await.unwrap();
    }
    m.steer_room(&who, SteerRoom { reopen: true, ..SteerRoom::new(reopened) }, Channel::Person)
        .await
        .unwrap();
    let set = m
        .steer_room(&who, SteerRoom { retention_days: Some(0), ..SteerRoom::new(held) }, Channel::Person)
        .await
        .expect("retention can be set on a closed room");
    assert_eq!(set.retention_days, Some(0));
    let feed = m.feed_page(&who, held, None, Some(1)).await.unwrap().events;
    assert_eq!(feed[0].kind, macp_core::model::EventKind::RetentionSet);
    assert!(m.expires_at(&set).is_none(), "held for good");
    let err = expect_code(
        m.steer_room(
            &who,
            SteerRoom { retention_days: Some(100_000), ..SteerRoom::new(held) },
            Channel::Person,
        )
        .await,
        "invalid_input",
    );
    assert_eq!(err.limit(), Some(u64::from(macp_core::service::MAX_RETENTION_DAYS)));
    expect_code(
        m.create_room(&who, CreateRoom { retention_days: Some(4000), ..CreateRoom::new("too long") }).await,
        "invalid_input",
    );

    clock.advance_ms(10 * DAY_MS);
    let report = m.purge_expired().await.unwrap();
    assert_eq!(report.rooms, vec![default], "only the room kept by the server's default of one day");
    for r in [open, reopened, held] {
        assert!(backend.store.get_room(r).await.unwrap().is_some(), "{r} was purged");
    }
}
