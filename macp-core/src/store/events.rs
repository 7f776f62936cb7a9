//! The room's event feed: every change, in commit order, and where each agent has read to.

use std::collections::BTreeMap;

use async_trait::async_trait;

use crate::error::Result;
use crate::ids::{AgentId, RoomId};
use crate::model::{Event, EventKind};

/// The room's event feed.
///
/// Events are *written* by the other stores: every write method that changes a room takes the
/// [`Event`] describing the change and appends it in the same atomic write, so an event exists
/// if and only if its change does. The store assigns `seq` = the room's previous highest event
/// `seq` + 1 inside that write (the same guarantee as a finding's `seq`, see [`crate::cursor`]):
/// gap-free and in commit order, so that once a reader can see event `n` it can see every
/// event before it. A write that changes nothing (an idempotent replay, an existing agent, a
/// room already closed, an attach that adds nothing) appends no event.
///
/// This trait reads the feed and keeps each agent's read position.
#[async_trait]
pub trait EventStore: Send + Sync {
    /// Events with `seq > after_seq`, ascending, of the given kinds (all kinds when `kinds` is
    /// empty), at most `limit`.
    async fn list_events(
        &self,
        room_id: RoomId,
        after_seq: u64,
        kinds: &[EventKind],
        limit: usize,
    ) -> Result<Vec<Event>>;

    /// The highest event `seq` of the room (0 when it has none).
    async fn last_event_seq(&self, room_id: RoomId) -> Result<u64>;

    /// How many events with `seq > after_seq` the room has, per kind (kinds with none are
    /// omitted). Exact.
    async fn count_events(&self, room_id: RoomId, after_seq: u64) -> Result<BTreeMap<EventKind, u64>>;

    /// The agent's read position: the highest event `seq` it has acknowledged (0 when it has
    /// acknowledged nothing, or is unknown).
    async fn read_position(&self, room_id: RoomId, agent_id: &AgentId) -> Result<u64>;

    /// Moves the agent's read position to `seq` if that is further than where it is, and returns
    /// the position after the call.
    ///
    /// Contract: atomic and monotonic: two concurrent calls leave the larger of the two; a
    /// position never moves back.
    async fn advance_read_position(&self, room_id: RoomId, agent_id: &AgentId, seq: u64) -> Result<u64>;
}
