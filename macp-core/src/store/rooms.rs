//! Rooms.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::ids::{AgentId, EntityId, RoomId, Timestamp};
use crate::model::{
    AgentSession, Artifact, Claim, Decision, Entity, Event, Finding, Identifier, Relationship, Room,
    RoomStatus,
};

/// Position in the room listing (newest first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoomKey {
    /// The room's creation time.
    pub created_at: Timestamp,
    /// Tie-breaker.
    pub room_id: RoomId,
}

/// A room's whole record as a store keeps it: what [`RoomStore::restore_room`] writes and
/// [`Macp::export_room`](crate::Macp::export_room) reads. Every list is in a fixed order (given
/// on each field), so that two stores holding the same room give the same record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoomRecord {
    /// The room, with its steering record, version, retention and members.
    pub room: Room,
    /// Its agents, by `agent_id`.
    pub agents: Vec<AgentSession>,
    /// Agents' read positions in the feed (those past 0), by `agent_id`.
    pub read_positions: Vec<ReadPosition>,
    /// Its findings, by `seq` (1, 2, 3, …: gap-free), erased ones as notices.
    pub findings: Vec<Finding>,
    /// Its entities, merged ones too, by `entity_id`.
    pub entities: Vec<Entity>,
    /// Which entity holds each identifier (merges leave identifiers where they are), by
    /// identifier.
    pub identifiers: Vec<HeldIdentifier>,
    /// Its relationships, by `(source, type, target)`.
    pub relationships: Vec<Relationship>,
    /// Its artifacts' records, by `artifact_id` (the bytes travel beside the record).
    pub artifacts: Vec<Artifact>,
    /// The claims on work held when the record was read, oldest first (released and lapsed
    /// ones are in the feed).
    pub claims: Vec<Claim>,
    /// Its decisions, by `decision_id`.
    pub decisions: Vec<Decision>,
    /// Its feed, by `seq` (1, 2, 3, …: gap-free).
    pub events: Vec<Event>,
}

/// An agent's read position (see [`EventStore::read_position`](crate::store::EventStore::read_position)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadPosition {
    /// The agent.
    pub agent_id: AgentId,
    /// The highest event `seq` it acknowledged.
    pub seq: u64,
}

/// An identifier and the entity holding it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldIdentifier {
    /// The identifier.
    #[serde(flatten)]
    pub identifier: Identifier,
    /// The entity that holds it (possibly merged into another since).
    pub entity_id: EntityId,
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

    /// Replaces the room's record with `room` (its objective, status, closing, resolution,
    /// objective history and markers; never its id, creation or counters) if the stored record's
    /// `version` is `room.version - 1`, and appends `event` to the room's feed in the same write.
    ///
    /// Contract: atomic compare-and-set. Returns `Ok(true)` when applied; `Ok(false)`, having
    /// written nothing, when the stored version is another (a concurrent change won: the caller
    /// reads again and retries); `not_found` if the room does not exist.
    async fn update_room(&self, room: &Room, event: &Event) -> Result<bool>;

    /// Purges the room: every record of it in every table (the room, agents, findings and their
    /// tags, entities and their identifiers, relationships, artifact records, claims, decisions,
    /// events, read positions, idempotency keys, and vectors if the store holds them).
    ///
    /// Contract: afterwards `get_room` answers `None` and no read finds anything of the room;
    /// as for [`FindingStore::erase_finding`](crate::store::FindingStore::erase_finding), nothing
    /// of it can be read back from the store's storage. Idempotent: purging a room that is
    /// gone (or never was) succeeds. Need not be atomic: a purge cut short is finished by the
    /// next one, so the room record goes last.
    async fn purge_room(&self, room_id: RoomId) -> Result<()>;

    /// Writes a whole room recorded elsewhere (an imported bundle) as given: every record with
    /// its ids, authors, timestamps, `seq`s and versions, the identifiers held as
    /// `record.identifiers` says, read positions, and counters such that the next finding gets
    /// `seq` = the last finding's + 1 and the next event the last event's + 1. Findings enter the
    /// store's keyword search (erased ones excepted); vectors are the service's to write.
    ///
    /// Contract: `already_exists`, having written nothing, if the room exists. Need not be
    /// atomic, but the room's own record goes last, so that until the call returns the room
    /// does not exist for readers; records left by an earlier restore of the same room that was
    /// cut short are replaced.
    async fn restore_room(&self, record: &RoomRecord) -> Result<()>;

    /// Lists rooms ordered by `(created_at, room_id)` descending, starting strictly after
    /// `after` when given, filtered by `status` when given, at most `limit`.
    async fn list_rooms(
        &self,
        status: Option<RoomStatus>,
        after: Option<RoomKey>,
        limit: usize,
    ) -> Result<Vec<Room>>;
}
