//! Protocol sessions kept in the store, so that a client's session outlives the server process
//! that opened it: after a restart, or behind a load balancer that sends each request to any
//! server of the store, the session carries on with the agents it joined, and nobody re-joins.
//!
//! Rules kept here, whatever the store:
//! - A session is stored under a digest of its id, never the id: the id is what a client
//!   presents to continue the session, and a copy of the store must not give it away.
//! - A session ends when it has not been used for the session idle time (default
//!   [`DEFAULT_SESSION_IDLE`]), as a live one does in a server's memory; an expired record is
//!   never trusted, whether or not the store has deleted it yet.
//! - What a session joined is only ever who it acts *as*; whether the caller may act as that
//!   agent is checked on every call, as for an agent named outright.

use sha2::{Digest, Sha256};

use super::*;
use crate::store::SessionRecord;

/// How long a session may go unused before it ends, by default.
pub const DEFAULT_SESSION_IDLE: std::time::Duration = std::time::Duration::from_secs(8 * 3600);

/// The longest session id accepted (transports issue UUIDs).
pub const MAX_SESSION_ID_BYTES: usize = 256;

/// The largest opening stored with a session (an MCP client's `initialize` parameters: its
/// name, version and capabilities).
pub const MAX_SESSION_OPENING_BYTES: usize = 64 * 1024;

/// A live session, as [`Macp::session`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// What the transport stored when the session opened.
    pub opening: String,
    /// The agent the session acts as in each room it joined.
    pub joined: std::collections::BTreeMap<RoomId, AgentId>,
}

fn session_key(session_id: &str) -> Result<String> {
    if session_id.is_empty() || session_id.len() > MAX_SESSION_ID_BYTES {
        return Err(Error::InvalidInput {
            field: "session_id".into(),
            message: format!("a session id is 1 to {MAX_SESSION_ID_BYTES} bytes; open a new session"),
            limit: Some(MAX_SESSION_ID_BYTES as u64),
        });
    }
    Ok(Sha256::digest(session_id.as_bytes()).iter().map(|b| format!("{b:02x}")).collect())
}

impl Macp {
    fn session_expiry(&self) -> Timestamp {
        self.now().plus_millis(self.inner.session_idle_ms)
    }

    /// Remembers a session that just opened, with what its transport needs to open it again
    /// on another server (`opening`). Opening a session with an id already stored replaces it.
    pub async fn open_session(&self, session_id: &str, opening: String) -> Result<()> {
        let key = session_key(session_id)?;
        if opening.len() > MAX_SESSION_OPENING_BYTES {
            return Err(Error::InvalidInput {
                field: "session_opening".into(),
                message: format!(
                    "a session's opening is at most {MAX_SESSION_OPENING_BYTES} bytes; send a smaller \
                     initialize request (client info and capabilities)"
                ),
                limit: Some(MAX_SESSION_OPENING_BYTES as u64),
            });
        }
        let record =
            SessionRecord { key, opening, joined: Default::default(), expires_at: self.session_expiry() };
        self.inner.store.put_session(&record).await
    }

    /// The live session with `session_id`; `None` if there is none or it has expired.
    pub async fn session(&self, session_id: &str) -> Result<Option<Session>> {
        let key = session_key(session_id)?;
        let now = self.now();
        Ok(self
            .inner
            .store
            .get_session(&key)
            .await?
            .filter(|r| r.expires_at > now)
            .map(|r| Session { opening: r.opening, joined: r.joined }))
    }

    /// Records that the session joined `room_id` as `agent_id` (the latest join of a room
    /// wins) and keeps it alive. `false` if no live session has that id (one opened before
    /// sessions were stored, or whose opening could not be stored): nothing is written.
    pub async fn session_joined(
        &self,
        session_id: &str,
        room_id: RoomId,
        agent_id: &AgentId,
    ) -> Result<bool> {
        let key = session_key(session_id)?;
        if self.session(session_id).await?.is_none() {
            return Ok(false);
        }
        self.inner.store.extend_session(&key, Some((room_id, agent_id)), self.session_expiry()).await
    }

    /// Keeps the session alive for another idle time from now. `false` if no live session has
    /// that id.
    pub async fn keep_session(&self, session_id: &str) -> Result<bool> {
        let key = session_key(session_id)?;
        if self.session(session_id).await?.is_none() {
            return Ok(false);
        }
        self.inner.store.extend_session(&key, None, self.session_expiry()).await
    }

    /// Ends the session: no server carries it on after this.
    pub async fn end_session(&self, session_id: &str) -> Result<()> {
        self.inner.store.delete_session(&session_key(session_id)?).await
    }

    /// Deletes the sessions that expired (part of [`Macp::purge_expired`]).
    pub(super) async fn purge_sessions(&self) -> Result<u64> {
        let now = self.now();
        let mut total = 0;
        loop {
            let n = self.inner.store.purge_sessions(now, 500).await?;
            total += n as u64;
            if n < 500 {
                return Ok(total);
            }
        }
    }
}
