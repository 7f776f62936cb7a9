//! The Streamable HTTP transport: `/mcp` in an axum router, with Host and Origin checks against
//! DNS rebinding.

use std::sync::Arc;
use std::time::Duration;

use macp_core::{Macp, Principal};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::auth::{self, Verifier};
use crate::server::MacpMcp;

/// How the HTTP endpoint is exposed.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Host names (optionally `host:port`) accepted in the `Host` header, in addition to
    /// `localhost`, `127.0.0.1` and `::1`.
    pub allowed_hosts: Vec<String>,
    /// How long an idle MCP session is kept.
    pub session_idle: Duration,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self { allowed_hosts: Vec::new(), session_idle: Duration::from_secs(8 * 3600) }
    }
}

const LOOPBACK: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// The `/mcp` service. Browsers send `Origin`: only the allowed hosts' origins pass (over http or
/// https, any port); clients that send none (CLI agents) are unaffected.
pub fn mcp_service(
    macp: Macp,
    local_user: Option<Principal>,
    opts: &HttpOptions,
    ct: CancellationToken,
) -> StreamableHttpService<MacpMcp, LocalSessionManager> {
    let hosts: Vec<String> =
        LOOPBACK.iter().map(|h| h.to_string()).chain(opts.allowed_hosts.iter().cloned()).collect();
    let origins: Vec<String> = hosts
        .iter()
        .flat_map(|h| {
            let bare = h.split(':').next().unwrap_or(h);
            let host = if bare.is_empty() || h == "::1" { "[::1]".to_owned() } else { bare.to_owned() };
            [format!("http://{host}:*"), format!("https://{host}:*")]
        })
        .collect();
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(opts.session_idle);
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_allowed_origins(origins)
        .with_cancellation_token(ct);
    StreamableHttpService::new(
        move || Ok(MacpMcp::new(macp.clone(), local_user.clone())),
        Arc::new(sessions),
        config,
    )
}

/// An axum router with the MCP endpoint at `/mcp`.
pub fn router(
    macp: Macp,
    local_user: Option<Principal>,
    opts: &HttpOptions,
    ct: CancellationToken,
) -> axum::Router {
    axum::Router::new().nest_service("/mcp", mcp_service(macp, local_user, opts, ct))
}

/// An axum router whose `/mcp` requires a bearer token validated by `verifier`, with the
/// protected-resource metadata at `/.well-known/oauth-protected-resource/mcp` and at
/// `/.well-known/oauth-protected-resource`.
pub fn router_with_auth(
    macp: Macp,
    verifier: Verifier,
    opts: &HttpOptions,
    ct: CancellationToken,
) -> axum::Router {
    let mcp = axum::Router::new()
        .nest_service("/mcp", mcp_service(macp, None, opts, ct))
        .layer(axum::middleware::from_fn_with_state(verifier.clone(), auth::require_token));
    axum::Router::new()
        .route("/.well-known/oauth-protected-resource/mcp", axum::routing::get(auth::metadata))
        .route("/.well-known/oauth-protected-resource", axum::routing::get(auth::metadata))
        .with_state(verifier)
        .merge(mcp)
}
