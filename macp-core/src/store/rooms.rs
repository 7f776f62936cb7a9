//! Rooms.

use async_trait::async_trait;

use crate::error::Result;
use crate::ids::{RoomId, Timestamp};
use crate::model::{Event, Room, RoomStatus};

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

    /// Lists rooms ordered by `(created_at, room_id)` descending, starting strictly after
    /// `after` when given, filtered by `status` when given, at most `limit`.
    async fn list_rooms(
        &self,
        status: Option<RoomStatus>,
        after: Option<RoomKey>,
        limit: usize,
    ) -> Result<Vec<Room>>;
}
