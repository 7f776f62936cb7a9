//! Protocol sessions kept in the store, so that a client's session outlives the server process
//! that opened it: after a restart, or behind a load balancer that sends each request to any
//! server of the store, the session carries on with the agents it joined, and nobody re-joins.
//!
//! Rules kept here, whatever the store:
//! - A session is stored under a digest of its id, never the id: the id is what a client
//!   presents to continue the session, and a copy of the store must not give it away.
//! - The store is the session's truth: every request of a session reads it
//!   ([`Macp::use_session`]), so a join made through one server is what the next request acts
//!   as on any other, and a session ended anywhere is ended everywhere.
//! - A session ends when it has not been used for the session idle time (default
//!   [`DEFAULT_SESSION_IDLE`]), as a live one does in a server's memory; using it moves its end,
//!   written at most once per quarter of the idle time. An ended session is kept, ended, for
//!   another idle time (so a server still holding it in memory learns that it ended, rather
//!   than finding nothing and serving it), then purged.
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

/// What [`Macp::use_session`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionLookup {
    /// The session is live (and now kept alive).
    Live(Session),
    /// The session ended (unused for the idle time, or ended by its client): refuse it.
    Ended,
    /// The store has no such session: one it never stored (its opening could not be), or
    /// purged long after it ended.
    Unknown,
}

/// What [`Macp::session_joined`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionJoin {
    /// The join is stored.
    Joined,
    /// The session ended: nothing was written.
    Ended,
    /// The store has no such session: nothing was written.
    Unknown,
}

/// A live session, as [`Macp::session`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// What the transport stored when the session opened.
    pub opening: String,
    /// The agent the session acts as in each room it joined.
    pub joined: std::collections::BTreeMap<RoomId, AgentId>,
}

/// A stored session as of `now`: live only if its client has not ended it and it has not
/// gone unused for the idle time.
fn lookup_of(record: Option<SessionRecord>, now: Timestamp) -> SessionLookup {
    match record {
        None => SessionLookup::Unknown,
        Some(r) if r.ended || r.expires_at <= now => SessionLookup::Ended,
        Some(r) => SessionLookup::Live(Session { opening: r.opening, joined: r.joined }),
    }
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
    /// A session's end if used now, and until when its record is kept: an idle time after
    /// that, so that a server still holding the session in memory (which forgets it after an
    /// idle time unused) learns that it ended rather than finding nothing.
    fn session_times(&self, ends: Timestamp) -> (Timestamp, Timestamp) {
        (ends, ends.plus_millis(self.inner.session_idle_ms))
    }

    fn session_expiry(&self) -> (Timestamp, Timestamp) {
        self.session_times(self.now().plus_millis(self.inner.session_idle_ms))
    }

    /// Remembers a session that just opened, with what its transport needs to open it again
    /// on another server (`opening`). `false` if a session (live or ended) has that id
    /// already: it is left as it is, so an ended session is never opened again.
    pub async fn open_session(&self, session_id: &str, opening: String) -> Result<bool> {
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
        let (expires_at, keep_until) = self.session_expiry();
        let record =
            SessionRecord { key, opening, joined: Default::default(), expires_at, keep_until, ended: false };
        self.inner.store.put_session(&record).await
    }

    /// What the store holds for `key` at `now`.
    async fn lookup(&self, key: &str, now: Timestamp) -> Result<SessionLookup> {
        Ok(lookup_of(self.inner.store.get_session(key).await?, now))
    }

    /// The live session with `session_id`; `None` if there is none or it has ended.
    pub async fn session(&self, session_id: &str) -> Result<Option<Session>> {
        Ok(match self.lookup(&session_key(session_id)?, self.now()).await? {
            SessionLookup::Live(s) => Some(s),
            _ => None,
        })
    }

    /// The session a request names, read from the store as the request's truth, and kept
    /// alive: its end moves to an idle time from now when a quarter of the idle time has passed
    /// since it last moved (so a busy session costs one write per quarter idle time, whatever
    /// the number of servers).
    pub async fn use_session(&self, session_id: &str) -> Result<SessionLookup> {
        let key = session_key(session_id)?;
        let now = self.now();
        let record = self.inner.store.get_session(&key).await?;
        let idle = self.inner.session_idle_ms;
        let due =
            record.as_ref().is_some_and(|r| r.expires_at.as_millis() - now.as_millis() < idle - idle / 4);
        let found = lookup_of(record, now);
        if due && matches!(found, SessionLookup::Live(_)) {
            let (expires_at, keep_until) = self.session_expiry();
            // Conditional: a session ended since the read stays ended.
            if !self.inner.store.extend_session(&key, None, now, expires_at, keep_until).await? {
                return self.lookup(&key, now).await;
            }
        }
        Ok(found)
    }

    /// How long a session may go unused before it ends.
    pub fn session_idle(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.inner.session_idle_ms.max(0) as u64)
    }

    /// Records that the session joined `room_id` as `agent_id` (the latest join of a room
    /// wins) and keeps it alive, if it is live; otherwise writes nothing and says why.
    pub async fn session_joined(
        &self,
        session_id: &str,
        room_id: RoomId,
        agent_id: &AgentId,
    ) -> Result<SessionJoin> {
        let key = session_key(session_id)?;
        let now = self.now();
        let (expires_at, keep_until) = self.session_expiry();
        let join = Some((room_id, agent_id));
        if self.inner.store.extend_session(&key, join, now, expires_at, keep_until).await? {
            return Ok(SessionJoin::Joined);
        }
        Ok(match self.lookup(&key, now).await? {
            SessionLookup::Ended => SessionJoin::Ended,
            // Absent when the join was tried (it may have been opened since).
            SessionLookup::Unknown | SessionLookup::Live(_) => SessionJoin::Unknown,
        })
    }

    /// Ends the session now, for good: no server carries it on after this (one that holds it
    /// in memory learns it on its next request, through [`Macp::use_session`]).
    pub async fn end_session(&self, session_id: &str) -> Result<()> {
        let (now, keep_until) = self.session_times(self.now());
        self.inner.store.end_session(&session_key(session_id)?, now, keep_until).await
    }

    /// Deletes the sessions that ended more than an idle time ago (part of
    /// [`Macp::purge_expired`]); until then an ended session is kept to say that it ended.
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
