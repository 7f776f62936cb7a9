//! Entities, the identifiers they hold, and relationships.

use async_trait::async_trait;
use serde_json::{Map, Value};

use super::*;
use crate::error::Result;
use crate::ids::{EntityId, RoomId};
use crate::model::{Entity, Event, Identifier, Relationship};

/// The outcome of [`EntityStore::create_entity`].
#[derive(Debug, Clone, PartialEq)]
pub enum CreateOutcome {
    /// The entity was written, holding all its identifiers.
    Created(Entity),
    /// At least one identifier is held already: nothing was written. Lists every requested
    /// identifier that is held, with the entity id holding it (which may have been
    /// merged away since).
    IdentifiersTaken(Vec<(Identifier, EntityId)>),
    /// The idempotency key was already used: nothing was written.
    Replayed(IdempotencyRecord),
}

/// The outcome of [`EntityStore::attach_to_entity`].
#[derive(Debug, Clone, PartialEq)]
pub enum AttachOutcome {
    /// The entity after the attach.
    Attached {
        /// The entity, with the identifiers it newly holds added.
        entity: Entity,
        /// Requested identifiers that another entity holds, and so not added.
        held_elsewhere: Vec<(Identifier, EntityId)>,
    },
    /// The idempotency key was already used: nothing was written.
    Replayed(IdempotencyRecord),
}

/// Aggregate counts over a room's entity graph.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EntityStats {
    /// Entities that have not been merged away.
    pub canonical: u64,
    /// Entities that were merged into another.
    pub merged: u64,
    /// Stored relationships (before merge aliases are folded together).
    pub relationships: u64,
}

/// Entities, the identifiers they hold, and relationships.
#[async_trait]
pub trait EntityStore: Send + Sync {
    /// Creates an entity holding each of its identifiers (an identifier is held by one entity
    /// of a room at most).
    ///
    /// Contract: atomic. If any identifier is already held in the room, nothing is written
    /// and every taken identifier is reported ([`CreateOutcome::IdentifiersTaken`]). Of several
    /// concurrent creates sharing an identifier, exactly one succeeds. The idempotency idempotency,
    /// if any, is part of the same atomic write, and so is `event` (appended to the room's
    /// feed iff the entity is created).
    async fn create_entity(
        &self,
        entity: &Entity,
        idempotency: Option<&IdempotencyKey>,
        event: &Event,
    ) -> Result<CreateOutcome>;

    /// Adds identifiers and properties to an existing entity.
    ///
    /// Contract: atomic. Each identifier not yet held in the room becomes held by
    /// `entity_id` and added to its `identifiers` (kept sorted by `(type, value)`, without
    /// duplicates); identifiers another entity holds are reported and not added. Each
    /// property key absent from the entity is added; existing keys are kept. The idempotency
    /// idempotency, if any, is part of the same atomic write. `not_found` if the entity is absent.
    /// `event` is appended to the room's feed in the same write iff the entity changed (an
    /// identifier or a property was added).
    async fn attach_to_entity(
        &self,
        room_id: RoomId,
        entity_id: EntityId,
        identifiers: &[Identifier],
        properties: &Map<String, Value>,
        idempotency: Option<&IdempotencyKey>,
        event: &Event,
    ) -> Result<AttachOutcome>;

    /// Fetches entities by id, merged or not (any order; unknown ids omitted).
    async fn get_entities(&self, room_id: RoomId, ids: &[EntityId]) -> Result<Vec<Entity>>;

    /// Lists a room's entities, merged or not, ordered by `entity_id`, strictly after `after`,
    /// at most `limit`.
    async fn list_entities(
        &self,
        room_id: RoomId,
        after: Option<EntityId>,
        limit: usize,
    ) -> Result<Vec<Entity>>;

    /// Every `(entity_id, merged_into)` pair of the room: the alias map.
    async fn entity_aliases(&self, room_id: RoomId) -> Result<Vec<(EntityId, EntityId)>>;

    /// Which of `identifiers` are held, and by which entity.
    async fn find_identifiers(
        &self,
        room_id: RoomId,
        identifiers: &[Identifier],
    ) -> Result<Vec<(Identifier, EntityId)>>;

    /// Merges `loser` into `winner`: sets `loser.merged_into = winner` and sets the winner's
    /// identifiers to the sorted union of both. Returns the winner after the merge.
    ///
    /// Contract: atomic and conditional on both entities existing and neither being merged
    /// already; otherwise nothing is written and the result is `conflict` (or `not_found` if
    /// one is absent). Identifiers stay held where they are: readers resolve
    /// them through `merged_into`. `event` is appended to the room's feed in the same write.
    async fn merge_entities(
        &self,
        room_id: RoomId,
        winner: EntityId,
        loser: EntityId,
        event: &Event,
    ) -> Result<Entity>;

    /// Stores a relationship, or adds to the one with the same `(source, type, target)`.
    ///
    /// Contract: atomic. If no edge with that key exists, `rel` is stored as given. If one
    /// exists, each evidence item of `rel` not already present (by equality) is appended, and
    /// its description is set if it had none; the rest is kept. The idempotency idempotency, if any,
    /// is part of the same write, and so is `event`, appended to the room's feed iff the edge
    /// was created or changed. Returns the stored edge and whether it was created.
    async fn put_relationship(
        &self,
        rel: &Relationship,
        idempotency: Option<&IdempotencyKey>,
        event: &Event,
    ) -> Result<Write<(Relationship, bool)>>;

    /// Fetches one relationship by key, or `None`.
    async fn get_relationship(&self, room_id: RoomId, key: &RelationshipKey) -> Result<Option<Relationship>>;

    /// Every relationship whose source or target is one of `ids`, ordered by
    /// `(source, type, target)`.
    async fn relationships_touching(&self, room_id: RoomId, ids: &[EntityId]) -> Result<Vec<Relationship>>;

    /// Lists relationships ordered by key, strictly after `after`, at most `limit`.
    async fn list_relationships(
        &self,
        room_id: RoomId,
        after: Option<&RelationshipKey>,
        limit: usize,
    ) -> Result<Vec<Relationship>>;

    /// For every entity id that appears in a relationship, how many relationships it appears
    /// in (as source or target; a self-loop counts once). Raw ids, before alias resolution.
    async fn relationship_degrees(&self, room_id: RoomId) -> Result<Vec<(EntityId, u64)>>;

    /// Exact counts.
    async fn entity_stats(&self, room_id: RoomId) -> Result<EntityStats>;
}

/// The key of a relationship: `(source, type, target)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RelationshipKey {
    /// Source entity.
    pub source: EntityId,
    /// Relationship type.
    pub relationship_type: String,
    /// Target entity.
    pub target: EntityId,
}

impl RelationshipKey {
    /// The key of `rel`.
    pub fn of(rel: &Relationship) -> Self {
        Self {
            source: rel.source_entity_id,
            relationship_type: rel.relationship_type.clone(),
            target: rel.target_entity_id,
        }
    }

    /// `source/type/target`, as stored in idempotency records.
    pub fn encode(&self) -> String {
        format!("{}/{}/{}", self.source, self.relationship_type, self.target)
    }

    /// Parses [`RelationshipKey::encode`].
    pub fn decode(s: &str) -> Option<Self> {
        let mut parts = s.splitn(3, '/');
        let source = parts.next()?.parse().ok()?;
        let relationship_type = parts.next()?.to_owned();
        let target = parts.next()?.parse().ok()?;
        Some(Self { source, relationship_type, target })
    }
}
