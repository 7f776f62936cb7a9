//! MCP sessions (2025-11-25) kept in MACP's store through rmcp's session store seam, so that
//! any server of the store can carry a client's session on: after a restart or a rolling
//! replacement, or when a load balancer sends the next request to another instance.
//!
//! rmcp stores what `initialize` said when a session opens, and on a request naming a session
//! it does not hold, loads it and replays `initialize` into a fresh handler. The rooms the
//! session joined are MACP's own part of the session ([`Macp::session_joined`]). Every request
//! of a session reads it from the store first ([`stored_session`], the store being the
//! session's truth): the handler acts as the agent the store says the session joined the room
//! as, wherever the join was made, and a session ended anywhere (or unused for the idle time)
//! is refused everywhere, even by a server that still holds it in memory.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use macp_core::Macp;
use macp_core::service::{Session, SessionLookup};
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
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
        // rmcp only logs a failure here; a session the store still lacks is stored by its first
        // join (see `MacpMcp::store_join`).
        Ok(open_session(&self.macp, session_id, state).await?)
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        Ok(self.macp.end_session(session_id).await?)
    }
}

/// Stores a session that opened with `state` (what its client's `initialize` said), unless one
/// has its id already; a passing failure (a throttle) is tried again.
pub async fn open_session(macp: &Macp, session_id: &str, state: &SessionState) -> macp_core::Result<()> {
    let opening = serde_json::to_string(state).map_err(|e| {
        macp_core::Error::backend("session", false, format!("encoding the session's opening: {e}"), None)
    })?;
    let mut attempt = 0;
    loop {
        match macp.open_session(session_id, opening.clone()).await {
            Ok(_) => return Ok(()),
            Err(e) if e.is_retryable() && attempt < 3 => {
                attempt += 1;
                tokio::time::sleep(std::time::Duration::from_millis(50 << attempt)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// The session a request names, as the store has it, for the handler (in the request's
/// extensions, which reach it through the HTTP `Parts`).
#[derive(Debug, Clone)]
pub struct StoredSession {
    /// The session as stored.
    pub session: Session,
}

/// The session id a request of the session generation (2025-11-25 and before) names. A request
/// of 2026-07-28 is stateless, whatever headers it carries: it says so in its header or, as
/// rmcp also reads it, in its `_meta` (see [`crate::http::Rpc::stateless`]).
pub fn session_id(parts: &axum::http::request::Parts) -> Option<String> {
    session_id_of(&parts.headers, &parts.extensions)
}

fn session_id_of(headers: &HeaderMap, extensions: &axum::http::Extensions) -> Option<String> {
    let stateless =
        headers.get("mcp-protocol-version").and_then(|v| v.to_str().ok()).is_some_and(|v| v >= "2026-07-28")
            || extensions.get::<crate::http::Rpc>().is_some_and(|r| r.stateless);
    if stateless {
        return None;
    }
    headers.get("mcp-session-id")?.to_str().ok().map(str::to_owned)
}

/// Reads the session a request names from the store before rmcp sees the request: a live one
/// goes to the handler as a [`StoredSession`] (and is kept alive); an ended one is refused with
/// 404, as rmcp refuses a session it does not know, and this server's copy of it is closed;
/// one the store does not know is left to rmcp (its own memory, or a restore). If the store
/// cannot be read, 503 (retryable): serving this server's copy could act on an ended session.
pub async fn stored_session(
    State((macp, local)): State<(Macp, Arc<LocalSessionManager>)>,
    mut req: Request,
    next: Next,
) -> Response {
    if let Some(id) = session_id_of(req.headers(), req.extensions()) {
        match macp.use_session(&id).await {
            Ok(SessionLookup::Live(session)) => {
                req.extensions_mut().insert(StoredSession { session });
            }
            Ok(SessionLookup::Ended) => {
                let _ = local.close_session(&Arc::from(id.as_str())).await;
                return (StatusCode::NOT_FOUND, "Not Found: Session not found").into_response();
            }
            Ok(SessionLookup::Unknown) => {}
            // An id no session can have: unknown, as rmcp will answer.
            Err(e) if e.code() == "invalid_input" => {}
            Err(e) => {
                tracing::warn!(error = %e, "reading the session from the store failed");
                let mut resp = (
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("the session could not be read from the store ({}); retry", e.code()),
                )
                    .into_response();
                resp.headers_mut()
                    .insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from_static("1"));
                return resp;
            }
        }
    }
    next.run(req).await
}
