//! Rooms.

use async_trait::async_trait;

use crate::error::Result;
use crate::ids::{RoomId, Timestamp, UserId};
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

    /// Marks a room closed (`status = closed`, `closed_at`, `closed_by`) if it is active, and
    /// returns it. A room that is already closed is returned unchanged (first close wins).
    ///
    /// Contract: atomic conditional update; `None` if the room does not exist. `event` is
    /// appended to the room's feed in the same write iff this call closes the room.
    async fn close_room(
        &self,
        room_id: RoomId,
        at: Timestamp,
        by: &UserId,
        event: &Event,
    ) -> Result<Option<Room>>;

    /// Lists rooms ordered by `(created_at, room_id)` descending, starting strictly after
    /// `after` when given, filtered by `status` when given, at most `limit`.
    async fn list_rooms(
        &self,
        status: Option<RoomStatus>,
        after: Option<RoomKey>,
        limit: usize,
    ) -> Result<Vec<Room>>;
}
