//! Artifact metadata.

use async_trait::async_trait;

use super::*;
use crate::error::Result;
use crate::ids::{ArtifactId, EntityId, FindingId, RoomId};
use crate::model::{Artifact, Erasure, Event};

/// Which artifacts to list.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ArtifactQuery {
    /// Only artifacts linked to this finding.
    pub finding_id: Option<FindingId>,
    /// Only artifacts linked to one of these entity ids (an entity and its aliases).
    pub entity_ids: Vec<EntityId>,
    /// Strictly after this id (ascending).
    pub after: Option<ArtifactId>,
    /// At most this many.
    pub limit: usize,
}

/// Artifact metadata.
#[async_trait]
pub trait ArtifactStore: Send + Sync {
    /// Stores artifact metadata.
    ///
    /// Contract: atomic with the idempotency idempotency. `already_exists` if an artifact with the
    /// same `key` is registered in the room (and no idempotency replays). `event` is appended to
    /// the room's feed in the same write iff the artifact is stored.
    async fn insert_artifact(
        &self,
        artifact: &Artifact,
        idempotency: Option<&IdempotencyKey>,
        event: &Event,
    ) -> Result<Write<Artifact>>;

    /// Erases an artifact's record (the service deletes its bytes through the blob store).
    ///
    /// Contract: atomic. `Ok(None)` if the room has no such artifact (nothing written). One
    /// already erased is returned as stored, and nothing is written. Otherwise its `description`
    /// becomes [`Erasure::notice`] and `erased` is set; every event of the room naming the
    /// artifact gets the notice as its summary; `event` is appended to the feed. As for
    /// [`FindingStore::erase_finding`], the old description cannot be read back from storage.
    async fn erase_artifact(
        &self,
        room_id: RoomId,
        artifact_id: ArtifactId,
        erasure: &Erasure,
        event: &Event,
    ) -> Result<Option<Artifact>>;

    /// Fetches artifacts by id (any order; unknown ids omitted).
    async fn get_artifacts(&self, room_id: RoomId, ids: &[ArtifactId]) -> Result<Vec<Artifact>>;

    /// Lists artifacts ordered by `artifact_id`, filtered by `query`.
    async fn list_artifacts(&self, room_id: RoomId, query: &ArtifactQuery) -> Result<Vec<Artifact>>;

    /// Number of artifacts in the room.
    async fn count_artifacts(&self, room_id: RoomId) -> Result<u64>;
}
