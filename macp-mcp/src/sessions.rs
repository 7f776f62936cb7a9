//! MCP sessions (2025-11-25) kept in MACP's store through rmcp's session store seam, so that
//! any server of the store can carry a client's session on: after a restart or a rolling
//! replacement, or when a load balancer sends the next request to another instance.
//!
//! rmcp stores what `initialize` said when a session opens, and on a request naming a session
//! it does not hold, loads it and replays `initialize` into a fresh handler. The rooms the
//! session joined are MACP's own part of the session ([`Macp::session_joined`]); the handler
//! reads them from the store on first use (see `MacpMcp::joined`).

use macp_core::Macp;
use rmcp::transport::streamable_http_server::session::store::{
    SessionState, SessionStore, SessionStoreError,
};

/// rmcp's [`SessionStore`] over [`Macp`]'s sessions.
#[derive(Debug, Clone)]
pub struct StoredSessions {
    macp: Macp,
}

impl StoredSessions {
    /// Sessions kept in `macp`'s store.
    pub fn new(macp: Macp) -> Self {
        Self { macp }
    }
}

#[async_trait::async_trait]
impl SessionStore for StoredSessions {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        match self.macp.session(session_id).await {
            Ok(Some(s)) => Ok(Some(serde_json::from_str(&s.opening)?)),
            Ok(None) => Ok(None),
            // An id no session could have (empty, overlong) is simply unknown: 404, not 500.
            Err(e) if e.code() == "invalid_input" => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        Ok(self.macp.open_session(session_id, serde_json::to_string(state)?).await?)
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        Ok(self.macp.end_session(session_id).await?)
    }
}
