//! The Streamable HTTP transport: `/mcp` in an axum router, with Host and Origin checks against
//! DNS rebinding.

use std::sync::Arc;
use std::time::Duration;

use macp_core::{Macp, Principal};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::TryStreamExt;
use macp_core::blob::UrlRefusal;
use macp_local::blobs::LocalBlobStore;

use crate::auth::{self, Verifier};
use crate::server::MacpMcp;

/// How the HTTP endpoint is exposed.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Local artifact storage whose signed URLs this server answers at `/artifacts/…`.
    pub artifacts: Option<LocalBlobStore>,
    /// Host names (optionally `host:port`) accepted in the `Host` header, in addition to
    /// `localhost`, `127.0.0.1` and `::1`.
    pub allowed_hosts: Vec<String>,
    /// How long an idle MCP session is kept.
    pub session_idle: Duration,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self { artifacts: None, allowed_hosts: Vec::new(), session_idle: Duration::from_secs(8 * 3600) }
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
    with_artifacts(mcp_routes(mcp_service(macp, local_user, opts, ct)), opts)
}

/// `/mcp` in a router of its own, so that layers (auth) wrap exactly the MCP endpoint.
fn mcp_routes(service: StreamableHttpService<MacpMcp, LocalSessionManager>) -> axum::Router {
    axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn(session_end_is_no_content))
}

/// rmcp acknowledges the `DELETE` that ends a session with `202 Accepted`, which the Python
/// `mcp` client reports as "Session termination failed: 202" on every exit (it accepts 200 and
/// 204). The session is already gone when rmcp answers, so `204 No Content` is the accurate
/// reply; every other response passes through untouched.
async fn session_end_is_no_content(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let delete = req.method() == axum::http::Method::DELETE;
    let resp = next.run(req).await;
    if delete && resp.status() == StatusCode::ACCEPTED {
        return StatusCode::NO_CONTENT.into_response();
    }
    resp
}

/// Adds `/artifacts/{key}` (PUT uploads, GET downloads, authorised by the URL's signature
/// alone) when local artifact storage is configured.
fn with_artifacts(app: axum::Router, opts: &HttpOptions) -> axum::Router {
    match &opts.artifacts {
        None => app,
        Some(blobs) => app.merge(
            axum::Router::new()
                .route("/artifacts/{*key}", axum::routing::put(upload).get(download))
                .with_state(blobs.clone()),
        ),
    }
}

fn refused(r: UrlRefusal) -> Response {
    let status = if r == UrlRefusal::Exists { StatusCode::CONFLICT } else { StatusCode::FORBIDDEN };
    tracing::info!(reason = %r, "artifact request refused");
    (status, axum::Json(serde_json::json!({"error": r.to_string()}))).into_response()
}

async fn upload(
    State(blobs): State<LocalBlobStore>,
    Path(key): Path<String>,
    req: axum::extract::Request,
) -> Response {
    let query = req.uri().query().unwrap_or_default().to_owned();
    let (content_type, length) = {
        let h = req.headers();
        let get = |n: header::HeaderName| h.get(n).and_then(|v| v.to_str().ok()).map(str::to_owned);
        (
            get(header::CONTENT_TYPE).unwrap_or_default(),
            get(header::CONTENT_LENGTH).and_then(|v| v.parse::<u64>().ok()),
        )
    };
    let body = req.into_body().into_data_stream().map_err(std::io::Error::other);
    match blobs.handle_put(&key, &query, &content_type, length, tokio_util::io::StreamReader::new(body)).await
    {
        Ok(meta) => {
            tracing::info!(key, size = meta.size, "artifact uploaded");
            (StatusCode::OK, axum::Json(serde_json::json!({"key": key, "size": meta.size}))).into_response()
        }
        Err(r) => refused(r),
    }
}

async fn download(
    State(blobs): State<LocalBlobStore>,
    Path(key): Path<String>,
    uri: axum::http::Uri,
) -> Response {
    match blobs.authorize_download(&key, uri.query().unwrap_or_default()).await {
        Err(r) => refused(r),
        Ok(None) => (StatusCode::NOT_FOUND, "no such artifact").into_response(),
        Ok(Some((path, meta))) => match tokio::fs::File::open(&path).await {
            Err(_) => (StatusCode::NOT_FOUND, "no such artifact").into_response(),
            Ok(f) => {
                let body = axum::body::Body::from_stream(tokio_util::io::ReaderStream::new(f));
                let mut resp = body.into_response();
                let h = resp.headers_mut();
                if let Ok(v) = header::HeaderValue::from_str(&meta.content_type) {
                    h.insert(header::CONTENT_TYPE, v);
                }
                h.insert(header::CONTENT_LENGTH, meta.size.into());
                resp
            }
        },
    }
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
    let mcp = mcp_routes(mcp_service(macp, None, opts, ct))
        .layer(axum::middleware::from_fn_with_state(verifier.clone(), auth::require_token));
    let app = axum::Router::new()
        .route("/.well-known/oauth-protected-resource/mcp", axum::routing::get(auth::metadata))
        .route("/.well-known/oauth-protected-resource", axum::routing::get(auth::metadata))
        .with_state(verifier)
        .merge(mcp);
    with_artifacts(app, opts)
}
