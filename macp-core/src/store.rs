//! The storage seam: what a backend must store and fetch, and with which guarantees.
//!
//! A backend implements the five traits below and the umbrella [`Store`]. It holds no domain
//! rules: validation, normalisation, alias resolution, idempotency fingerprints, caps and
//! cursors all live in [`crate::Macp`]. What a backend *does* owe is precise storage semantics,
//! written as a contract on each method: which writes are atomic, what order reads return, and
//! what a lost race returns. The conformance suite in `macp-testkit` checks every contract
//! through the service, so a backend that passes it behaves like the reference
//! [`MemoryStore`](crate::memory::MemoryStore).
//!
//! # Common contract
//! - Every method is scoped to one room; nothing may leak across rooms.
//! - "Atomic" means all-or-nothing and isolated: a concurrent reader sees all of the write or
//!   none of it, and two concurrent atomic writes behave as if run one after the other.
//! - An acknowledged write is durable to the degree [`Capabilities::durable`] claims.
//! - Transient failures (busy, throttled, 5xx) are `Error::Backend { retryable: true, .. }`;
//!   the store must not have applied a partial write when it returns one.
//! - Idempotency claims ([`IdempotencyClaim`]) are unique per `(room_id, key)` across all
//!   write operations. A write that carries a claim either applies *and* records the claim
//!   atomically, or applies nothing and returns [`Write::Replayed`] with the record that holds
//!   the key. The store does not compare fingerprints; the service does.

use std::collections::BTreeMap;
use std::fmt::Debug;

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::error::Result;
use crate::ids::{AgentId, ArtifactId, EntityId, FindingId, RoomId, Timestamp, UserId};
use crate::model::{
    AgentSession, AgentStatus, Artifact, Entity, Finding, Identifier, IndexStatus, Relationship, Room,
    RoomStatus,
};

/// What a backend supports. Conformance cases for optional behaviour run only where declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Capabilities {
    /// Acknowledged writes survive the process being killed and the store being reopened.
    pub durable: bool,
    /// Several processes (or hosts) may serve the same store at once with every guarantee
    /// intact.
    pub shared_across_processes: bool,
    /// [`FindingStore::keyword_search`] is implemented.
    pub keyword_search: bool,
}

impl Capabilities {
    /// Everything off.
    pub const fn none() -> Self {
        Self { durable: false, shared_across_processes: false, keyword_search: false }
    }

    /// With [`Capabilities::durable`] set.
    pub const fn with_durable(mut self, v: bool) -> Self {
        self.durable = v;
        self
    }

    /// With [`Capabilities::shared_across_processes`] set.
    pub const fn with_shared_across_processes(mut self, v: bool) -> Self {
        self.shared_across_processes = v;
        self
    }

    /// With [`Capabilities::keyword_search`] set.
    pub const fn with_keyword_search(mut self, v: bool) -> Self {
        self.keyword_search = v;
        self
    }
}

/// Which write an idempotency key was first used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WriteOperation {
    /// `post_finding`; `result_id` is the finding id.
    PostFinding,
    /// `add_entity`; `result_id` is the entity id created or attached to.
    AddEntity,
    /// `add_relationship`; `result_id` is [`RelationshipKey::encode`].
    AddRelationship,
    /// `register_artifact`; `result_id` is the artifact id.
    RegisterArtifact,
}

impl WriteOperation {
    /// Stable name, as stored.
    pub fn as_str(&self) -> &'static str {
        match self {
            WriteOperation::PostFinding => "post_finding",
            WriteOperation::AddEntity => "add_entity",
            WriteOperation::AddRelationship => "add_relationship",
            WriteOperation::RegisterArtifact => "register_artifact",
        }
    }

    /// Parses a stored name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "post_finding" => WriteOperation::PostFinding,
            "add_entity" => WriteOperation::AddEntity,
            "add_relationship" => WriteOperation::AddRelationship,
            "register_artifact" => WriteOperation::RegisterArtifact,
            _ => return None,
        })
    }
}

/// A key a write wants to claim, so that a retry with the same key writes nothing new.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyClaim {
    /// The client's key.
    pub key: String,
    /// The operation it is used for.
    pub operation: WriteOperation,
    /// A digest of the normalised request, computed by the service.
    pub fingerprint: String,
    /// The id of what this write produces (stored as the record's `result_id`).
    pub result_id: String,
    /// When the claim is made.
    pub created_at: Timestamp,
}

/// A stored idempotency claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyRecord {
    /// The client's key.
    pub key: String,
    /// The operation that first used it.
    pub operation: WriteOperation,
    /// The digest of that first request.
    pub fingerprint: String,
    /// What the first request produced.
    pub result_id: String,
    /// When.
    pub created_at: Timestamp,
}

impl IdempotencyClaim {
    /// The record this claim becomes once stored.
    pub fn to_record(&self) -> IdempotencyRecord {
        IdempotencyRecord {
            key: self.key.clone(),
            operation: self.operation,
            fingerprint: self.fingerprint.clone(),
            result_id: self.result_id.clone(),
            created_at: self.created_at,
        }
    }
}

/// The outcome of a write that may carry an idempotency claim.
#[derive(Debug, Clone, PartialEq)]
pub enum Write<T> {
    /// The write was applied (and the claim, if any, recorded with it).
    Applied(T),
    /// The key was already claimed: nothing was written.
    Replayed(IdempotencyRecord),
}

/// The outcome of an insert that does not overwrite.
#[derive(Debug, Clone, PartialEq)]
pub enum Insert<T> {
    /// The record was new and is now stored.
    Inserted(T),
    /// A record with the same key already existed; it is returned unchanged.
    Existing(T),
}

/// Position in the room listing (newest first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoomKey {
    /// The room's creation time.
    pub created_at: Timestamp,
    /// Tie-breaker.
    pub room_id: RoomId,
}

/// Rooms, newest first.
#[async_trait]
pub trait RoomStore: Send + Sync {
    /// Stores a new room.
    ///
    /// Contract: fails with `already_exists` if `room.room_id` is taken; never overwrites.
    async fn insert_room(&self, room: &Room) -> Result<()>;

    /// Fetches a room, or `None`.
    async fn get_room(&self, room_id: RoomId) -> Result<Option<Room>>;

    /// Marks a room closed (`status = closed`, `closed_at`, `closed_by`) if it is active, and
    /// returns it. A room that is already closed is returned unchanged (first close wins).
    ///
    /// Contract: atomic conditional update; `None` if the room does not exist.
    async fn close_room(&self, room_id: RoomId, at: Timestamp, by: &UserId) -> Result<Option<Room>>;

    /// Lists rooms ordered by `(created_at, room_id)` descending, starting strictly after
    /// `after` when given, filtered by `status` when given, at most `limit`.
    async fn list_rooms(
        &self,
        status: Option<RoomStatus>,
        after: Option<RoomKey>,
        limit: usize,
    ) -> Result<Vec<Room>>;
}

/// A change to an agent session. `None` fields are left as they are.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentUpdate {
    /// New `last_active`; only moves forward (a later value than stored wins).
    pub last_active: Option<Timestamp>,
    /// New `agent_type`.
    pub agent_type: Option<String>,
    /// New declared status, reason (None clears it) and `status_updated_at`.
    pub status: Option<(AgentStatus, Option<String>, Timestamp)>,
}

/// Agents present in a room.
#[async_trait]
pub trait AgentStore: Send + Sync {
    /// Inserts the session unless `(room_id, agent_id)` exists.
    ///
    /// Contract: atomic insert-if-absent. Returns [`Insert::Existing`] with the stored session
    /// (whoever owns it) when the agent id is taken, writing nothing.
    async fn insert_agent(&self, session: &AgentSession) -> Result<Insert<AgentSession>>;

    /// Fetches one session, or `None`.
    async fn get_agent(&self, room_id: RoomId, agent_id: &AgentId) -> Result<Option<AgentSession>>;

    /// All sessions of a room, ordered by `(joined_at, agent_id)`.
    async fn list_agents(&self, room_id: RoomId) -> Result<Vec<AgentSession>>;

    /// Applies `update` atomically and returns the session after it, or `None` if absent.
    async fn update_agent(
        &self,
        room_id: RoomId,
        agent_id: &AgentId,
        update: &AgentUpdate,
    ) -> Result<Option<AgentSession>>;
}

/// Which findings to read. All filters combine with AND; `tags_any` matches a finding carrying
/// at least one of the tags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FindingQuery {
    /// Only findings with `seq > after_seq` (ascending) or `seq < before_seq` (descending).
    pub after_seq: u64,
    /// Upper bound, exclusive; `None` means no bound.
    pub before_seq: Option<u64>,
    /// Only findings carrying at least one of these tags (already normalised).
    pub tags_any: Vec<String>,
    /// Only findings posted by this agent.
    pub agent_id: Option<AgentId>,
    /// Only findings with `created_at >= since`.
    pub since: Option<Timestamp>,
    /// Only findings with `created_at < until`.
    pub until: Option<Timestamp>,
    /// At most this many.
    pub limit: usize,
    /// Newest first instead of oldest first.
    pub descending: bool,
}

impl FindingQuery {
    /// Every finding after `after_seq`, oldest first, at most `limit`.
    pub fn after(after_seq: u64, limit: usize) -> Self {
        Self {
            after_seq,
            before_seq: None,
            tags_any: Vec::new(),
            agent_id: None,
            since: None,
            until: None,
            limit,
            descending: false,
        }
    }

    /// The `limit` most recent findings, newest first.
    pub fn latest(limit: usize) -> Self {
        Self { descending: true, ..Self::after(0, limit) }
    }
}

/// Counts over a room's findings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FindingStats {
    /// Number of findings.
    pub total: u64,
    /// The highest `seq` (0 when empty).
    pub last_seq: u64,
    /// `created_at` of the finding with the highest `seq`.
    pub last_created_at: Option<Timestamp>,
    /// Findings per tag.
    pub tag_counts: BTreeMap<String, u64>,
}

/// A keyword match from [`FindingStore::keyword_search`].
#[derive(Debug, Clone, PartialEq)]
pub struct KeywordHit {
    /// The finding.
    pub finding_id: FindingId,
    /// Okapi BM25 (k1 = 1.2, b = 0.75) of the finding's content for the query; higher is better.
    pub score: f64,
}

/// The result of [`FindingStore::keyword_search`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeywordSearch {
    /// Best first.
    pub hits: Vec<KeywordHit>,
    /// The sum of the distinct query terms' idf ([`crate::search::bm25_idf`]), with the same
    /// statistics as the scores: `score / ideal` is the finding's keyword coverage.
    pub ideal: f64,
}

/// Findings: the room's record and its commit order.
#[async_trait]
pub trait FindingStore: Send + Sync {
    /// Appends a finding to its room. The `seq` field of `finding` is ignored.
    ///
    /// Contract: atomic. The store assigns `seq` = the room's previous highest `seq` + 1, so
    /// sequence numbers are gap-free and follow *commit* order: once a reader can see the
    /// finding with `seq = n`, it can see every finding with `seq < n`. This is what makes the
    /// updates cursor safe (see [`crate::cursor`]). The idempotency claim, if any, is recorded
    /// in the same atomic write; if the key is taken, nothing is written and
    /// [`Write::Replayed`] is returned. Returns the stored finding with its `seq`.
    async fn append_finding(
        &self,
        finding: &Finding,
        claim: Option<&IdempotencyClaim>,
    ) -> Result<Write<Finding>>;

    /// Fetches findings by id (any order; unknown ids are omitted).
    async fn get_findings(&self, room_id: RoomId, ids: &[FindingId]) -> Result<Vec<Finding>>;

    /// Reads findings matching `query`, ordered by `seq` (ascending, or descending when
    /// `query.descending`).
    async fn list_findings(&self, room_id: RoomId, query: &FindingQuery) -> Result<Vec<Finding>>;

    /// Sets a finding's `index_status`. Contract: `not_found` if the finding does not exist.
    async fn set_index_status(
        &self,
        room_id: RoomId,
        finding_id: FindingId,
        status: IndexStatus,
    ) -> Result<()>;

    /// Findings of any room still `pending` and created before `created_before`, oldest
    /// first, at most `limit`: the reconciler's work list.
    async fn pending_findings(&self, created_before: Timestamp, limit: usize) -> Result<Vec<Finding>>;

    /// Sets every finding of every room to `pending` (the reindex path). Returns how many.
    async fn mark_all_pending(&self) -> Result<u64>;

    /// Counts over the room's findings: exact, not estimates.
    async fn finding_stats(&self, room_id: RoomId) -> Result<FindingStats>;

    /// Keyword search over findings' content in one room: the findings containing at least one
    /// of the query's terms ([`crate::search::keyword_terms`]), best first by Okapi BM25
    /// (k1 = 1.2, b = 0.75, idf as [`crate::search::bm25_idf`]), at most `limit`. Document
    /// statistics (row count, average length, document frequencies) may be per store rather than
    /// per room, but `ideal` must use the same ones. Only called when
    /// [`Capabilities::keyword_search`] is declared.
    async fn keyword_search(&self, room_id: RoomId, query: &str, limit: usize) -> Result<KeywordSearch>;
}

/// The outcome of [`EntityStore::create_entity`].
#[derive(Debug, Clone, PartialEq)]
pub enum CreateEntity {
    /// The entity and all its identifier claims were written.
    Created(Entity),
    /// At least one identifier is claimed already: nothing was written. Lists every requested
    /// identifier that is claimed, with the entity id holding the claim (which may have been
    /// merged away since).
    IdentifiersTaken(Vec<(Identifier, EntityId)>),
    /// The idempotency key was already claimed: nothing was written.
    Replayed(IdempotencyRecord),
}

/// The outcome of [`EntityStore::attach_to_entity`].
#[derive(Debug, Clone, PartialEq)]
pub enum AttachEntity {
    /// The entity after the attach.
    Attached {
        /// The entity, with the newly claimed identifiers added.
        entity: Entity,
        /// Requested identifiers that were claimed by another entity and so not added.
        claimed_elsewhere: Vec<(Identifier, EntityId)>,
    },
    /// The idempotency key was already claimed: nothing was written.
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

/// Entities, identifier claims and relationships.
#[async_trait]
pub trait EntityStore: Send + Sync {
    /// Creates an entity and claims each of its identifiers for it.
    ///
    /// Contract: atomic. If any identifier is already claimed in the room, nothing is written
    /// and every taken identifier is reported ([`CreateEntity::IdentifiersTaken`]). Of several
    /// concurrent creates sharing an identifier, exactly one succeeds. The idempotency claim,
    /// if any, is part of the same atomic write.
    async fn create_entity(&self, entity: &Entity, claim: Option<&IdempotencyClaim>) -> Result<CreateEntity>;

    /// Adds identifiers and properties to an existing entity.
    ///
    /// Contract: atomic. Each identifier not yet claimed in the room is claimed for
    /// `entity_id` and added to its `identifiers` (kept sorted by `(type, value)`, without
    /// duplicates); identifiers claimed by another entity are reported and not added. Each
    /// property key absent from the entity is added; existing keys are kept. The idempotency
    /// claim, if any, is part of the same atomic write. `not_found` if the entity is absent.
    async fn attach_to_entity(
        &self,
        room_id: RoomId,
        entity_id: EntityId,
        identifiers: &[Identifier],
        properties: &Map<String, Value>,
        claim: Option<&IdempotencyClaim>,
    ) -> Result<AttachEntity>;

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

    /// Which of `identifiers` are claimed, and by which entity.
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
    /// one is absent). Identifier claims are left pointing where they are: readers resolve
    /// them through `merged_into`.
    async fn merge_entities(&self, room_id: RoomId, winner: EntityId, loser: EntityId) -> Result<Entity>;

    /// Stores a relationship, or adds to the one with the same `(source, type, target)`.
    ///
    /// Contract: atomic. If no edge with that key exists, `rel` is stored as given. If one
    /// exists, each evidence item of `rel` not already present (by equality) is appended, and
    /// its description is set if it had none; the rest is kept. The idempotency claim, if any,
    /// is part of the same write. Returns the stored edge and whether it was created.
    async fn put_relationship(
        &self,
        rel: &Relationship,
        claim: Option<&IdempotencyClaim>,
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
    /// Contract: atomic with the idempotency claim. `already_exists` if an artifact with the
    /// same `key` is registered in the room (and no claim replays).
    async fn insert_artifact(
        &self,
        artifact: &Artifact,
        claim: Option<&IdempotencyClaim>,
    ) -> Result<Write<Artifact>>;

    /// Fetches artifacts by id (any order; unknown ids omitted).
    async fn get_artifacts(&self, room_id: RoomId, ids: &[ArtifactId]) -> Result<Vec<Artifact>>;

    /// Lists artifacts ordered by `artifact_id`, filtered by `query`.
    async fn list_artifacts(&self, room_id: RoomId, query: &ArtifactQuery) -> Result<Vec<Artifact>>;

    /// Number of artifacts in the room.
    async fn count_artifacts(&self, room_id: RoomId) -> Result<u64>;
}

/// A complete backend: every store trait, plus its name and capabilities.
///
/// The service holds it as `Arc<dyn Store>`.
pub trait Store:
    RoomStore + AgentStore + FindingStore + EntityStore + ArtifactStore + Debug + Send + Sync + 'static
{
    /// Short name used in errors and logs (`memory`, `sqlite`, …).
    fn name(&self) -> &'static str;

    /// What this backend supports.
    fn capabilities(&self) -> Capabilities;
}
