//! Protocol sessions, stored so that any server of the store can carry on a client's session
//! (after a restart, or behind a load balancer that sends each request anywhere).

use std::collections::BTreeMap;

use async_trait::async_trait;

use crate::error::Result;
use crate::ids::{AgentId, RoomId, Timestamp};

/// A protocol session as stored.
///
/// Its key is a digest of the session's id, never the id itself: the id is what a client
/// presents to continue the session, so a copy of the store must not hand it out (see
/// [`crate::Macp::session`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    /// The digest of the session's id (lowercase hex SHA-256).
    pub key: String,
    /// What the transport needs to open the session again elsewhere (for MCP, the
    /// `initialize` request's parameters as JSON). Opaque to the store and the service.
    pub opening: String,
    /// The agent the session acts as in each room it joined.
    pub joined: BTreeMap<RoomId, AgentId>,
    /// When the session ends unless it is used again.
    pub expires_at: Timestamp,
    /// Until when the record is kept (after it ended, to tell servers still holding the
    /// session that it did); a store may delete it any time after.
    pub keep_until: Timestamp,
    /// Ended by its client: nothing makes it live again.
    pub ended: bool,
}

/// Protocol sessions, one per key. Unlike the other stores, not scoped to a room: a session
/// spans the rooms it joined.
#[async_trait]
pub trait SessionStore: Send + Sync {
    /// Stores `record` unless a session (live or ended) has its key; `false` if one has, which
    /// is left as it is.
    async fn put_session(&self, record: &SessionRecord) -> Result<bool>;

    /// The session with `key`, expired or not (the service decides what an expiry means);
    /// `None` if there is none.
    async fn get_session(&self, key: &str) -> Result<Option<SessionRecord>>;

    /// Sets the session's `expires_at` and `keep_until` and, with `join`, the agent it acts as
    /// in that room, keeping its other rooms, if the session is live at `now` (not ended, and
    /// `expires_at` after `now`). Returns `false`, writing nothing, otherwise (or if there is no
    /// such session).
    ///
    /// Contract: atomic and conditional per key, so an end and an extension racing never leave
    /// an ended session live. Two concurrent calls joining different rooms both persist; of two
    /// joining the same room, one wins whole.
    async fn extend_session(
        &self,
        key: &str,
        join: Option<(RoomId, &AgentId)>,
        now: Timestamp,
        expires_at: Timestamp,
        keep_until: Timestamp,
    ) -> Result<bool>;

    /// Marks the session ended (`ended`, `expires_at` no later than `now`) and keeps its record
    /// until `keep_until`; nothing happens if there is none. Durable where the store is.
    async fn end_session(&self, key: &str, now: Timestamp, keep_until: Timestamp) -> Result<()>;

    /// Deletes up to `limit` sessions whose `keep_until` is at or before `now`, returning how
    /// many went. A store whose database deletes items by a time itself (DynamoDB's TTL, on
    /// `keep_until`) may return 0.
    async fn purge_sessions(&self, now: Timestamp, limit: usize) -> Result<usize>;
}
