//! One `pub async fn` per rule. Each takes a fresh [`Backend`] and panics with a message naming
//! what broke.
use std::sync::Arc;

use macp_core::blob::PresignedRequest;
use macp_core::model::EntityType;
use macp_core::service::{
    AddEntity, AddRelationship, CreateRoom, JoinRoom, PostFinding, RequestUpload, TimelineQuery, UploadTicket,
};
use macp_core::{AgentId, EntityId, Error, Macp, Principal, Result, RoomId};

use crate::{Backend, ManualClock};

mod agents;
mod artifacts;
mod claims;
mod decisions;
mod durability;
mod entities;
mod erasure;
mod events;
mod findings;
mod members;
mod portable;
mod redaction;
mod retention;
mod rooms;
mod search;
mod sessions;
mod steering;

pub use agents::*;
pub use artifacts::*;
pub use claims::*;
pub use decisions::*;
pub use durability::*;
pub use entities::*;
pub use erasure::*;
pub use events::*;
pub use findings::*;
pub use members::*;
pub use portable::*;
pub use redaction::*;
pub use retention::*;
pub use rooms::*;
pub use search::*;
pub use sessions::*;
pub use steering::*;

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

pub(crate) fn principal(name: &str) -> Principal {
    Principal::new(name).expect("valid principal")
}

pub(crate) fn agent(name: &str) -> AgentId {
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
    pub async fn upload(&self, filename: &str, body: &[u8]) -> String {
        let t = self.transfer.as_ref().expect("the backend declares blobs but gave no artifact storage");
        let ticket = self
            .macp
            .request_artifact_upload(
                &self.alice,
                RequestUpload {
                    room_id: self.room,
                    agent_id: Some(self.a.clone()),
                    filename: filename.into(),
                    content_type: "text/plain".into(),
                    size: body.len() as u64,
                },
            )
            .await
            .expect("request an upload");
        let status = t.put(&presigned(&ticket), "text/plain", body.to_vec()).await;
        assert_eq!(status, 200, "upload to the presigned URL");
        ticket.key
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

impl Fixture {
    pub(crate) fn clock_now(&self) -> macp_core::Timestamp {
        use macp_core::Clock;
        self.clock.now()
    }
}

/// The features a backend declares to `conformance_tests!` are exactly what it has: a feature
/// left out would hide its cases as ignored, one claimed would fail them.
pub async fn declared_features_match_the_backend(backend: Backend, declared: &[&str]) {
    for d in declared {
        assert!(crate::FEATURES.contains(d), "unknown feature `{d}`; the features are {:?}", crate::FEATURES);
    }
    let has = |f: &str| declared.contains(&f);
    let caps = backend.store.capabilities();
    assert_eq!(has("durable"), caps.durable, "`durable` declared vs the store's Capabilities::durable");
    assert_eq!(
        has("shared"),
        caps.shared_across_processes,
        "`shared` declared vs the store's Capabilities::shared_across_processes"
    );
    if has("durable") || has("shared") {
        assert!(backend.reopen.is_some(), "`durable` and `shared` need Backend::with_reopen");
    }
    assert_eq!(
        has("vectors"),
        backend.vector_index.is_some(),
        "`vectors` declared vs Backend::with_vector_index"
    );
    assert_eq!(has("blobs"), backend.blobs.is_some(), "`blobs` declared vs Backend::with_blobs");
    let bounded = backend.blobs.as_ref().is_some_and(|(b, _)| b.enforces_presigned_bounds());
    assert_eq!(
        has("bounded_urls"),
        bounded,
        "`bounded_urls` declared vs BlobStore::enforces_presigned_bounds"
    );
    let keywords =
        backend.store.keyword_search(RoomId::generate(), "anything", 10).await.expect("keyword search");
    assert_eq!(has("keywords"), keywords.is_some(), "`keywords` declared vs what keyword_search answers");
}
