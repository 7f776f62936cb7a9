//! Agents present in a room.

use async_trait::async_trait;

use super::*;
use crate::error::Result;
use crate::ids::{AgentId, RoomId, Timestamp};
use crate::model::{AgentSession, AgentStatus, Event};

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
    /// (whoever owns it) when the agent id is taken, writing nothing. `event` is appended to the
    /// room's feed in the same write iff the session is inserted.
    async fn insert_agent(&self, session: &AgentSession, event: &Event) -> Result<Insert<AgentSession>>;

    /// Fetches one session, or `None`.
    async fn get_agent(&self, room_id: RoomId, agent_id: &AgentId) -> Result<Option<AgentSession>>;

    /// All sessions of a room, ordered by `(joined_at, agent_id)`.
    async fn list_agents(&self, room_id: RoomId) -> Result<Vec<AgentSession>>;

    /// Applies `update` atomically and returns the session after it, or `None` if absent.
    /// `event`, when given, is appended to the room's feed in the same write (if the agent
    /// exists).
    async fn update_agent(
        &self,
        room_id: RoomId,
        agent_id: &AgentId,
        update: &AgentUpdate,
        event: Option<&Event>,
    ) -> Result<Option<AgentSession>>;
}
