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
use macp_core::blob::{UrlEndpoint, UrlRefusal};

use crate::auth::{self, Verifier};
use crate::server::MacpMcp;

/// Binds `addr` for serving with [`crate::serve::serve`] (or [`axum::serve()`]), with
/// `TCP_NODELAY` on every accepted socket.
///
/// Why: rmcp writes a response in several pieces (headers with the SSE priming event, then the
/// message, then the end of the stream). With Nagle's algorithm on, the second piece waits for
/// the client's acknowledgement of the first, which a client on a kept-alive connection delays
/// by up to 40 ms: every call then takes ~44 ms, while a fresh connection (curl) looks fine.
/// Every listener the server opens goes through here.
pub async fn bind(addr: std::net::SocketAddr) -> std::io::Result<Listener> {
    Ok(Listener(tokio::net::TcpListener::bind(addr).await?))
}

/// A bound listener whose accepted sockets get `TCP_NODELAY` (see [`bind`]).
#[derive(Debug)]
pub struct Listener(tokio::net::TcpListener);

impl Listener {
    /// Wraps an already bound listener (see [`bind`]).
    pub fn new(l: tokio::net::TcpListener) -> Self {
        Self(l)
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.0.local_addr()
    }

    /// The listener itself; sockets accepted from it need [`set_nodelay`].
    pub(crate) fn into_inner(self) -> tokio::net::TcpListener {
        self.0
    }
}

impl axum::serve::Listener for Listener {
    type Io = tokio::net::TcpStream;
    type Addr = std::net::SocketAddr;

    /// Waits out errors as axum's own listener does (a second after running out of file
    /// descriptors).
    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (io, addr) = axum::serve::Listener::accept(&mut self.0).await;
        set_nodelay(&io);
        (io, addr)
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

pub(crate) fn set_nodelay(s: &tokio::net::TcpStream) {
    if let Err(e) = s.set_nodelay(true) {
        tracing::warn!(error = %e, "cannot set TCP_NODELAY on an accepted connection");
    }
}

/// How the HTTP endpoint is exposed.
#[derive(Debug, Clone, Default)]
pub struct HttpOptions {
    /// The store whose signed URLs this server answers at `/artifacts/…` (the local one; S3
    /// answers its own).
    pub artifacts: Option<Arc<dyn UrlEndpoint>>,
    /// Host names (optionally `host:port`) accepted in the `Host` header, in addition to
    /// `localhost`, `127.0.0.1` and `::1`.
    pub allowed_hosts: Vec<String>,
}

const LOOPBACK: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// The `/mcp` service. Browsers send `Origin`: only the allowed hosts' origins pass (over http or
/// https, any port); clients that send none (CLI agents) are unaffected.
///
/// Sessions live in the store too (see [`crate::sessions`]): any server of it carries them on.
/// Returns the service and its sessions held in memory.
pub fn mcp_service(
    macp: Macp,
    local_user: Option<Principal>,
    opts: &HttpOptions,
    ct: CancellationToken,
) -> (StreamableHttpService<MacpMcp, LocalSessionManager>, Arc<LocalSessionManager>) {
    let hosts = hosts(opts);
    let origins: Vec<String> = hosts
        .iter()
        .flat_map(|h| {
            let bare = h.split(':').next().unwrap_or(h);
            let host = if bare.is_empty() || h == "::1" { "[::1]".to_owned() } else { bare.to_owned() };
            [format!("http://{host}:*"), format!("https://{host}:*")]
        })
        .collect();
    let mut sessions = LocalSessionManager::default();
    // A session held in memory ends after the same idle time as the stored one.
    sessions.session_config.keep_alive = Some(macp.session_idle());
    let sessions = Arc::new(sessions);
    let mut config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_allowed_origins(origins)
        .with_cancellation_token(ct);
    config.session_store = Some(Arc::new(crate::sessions::StoredSessions::new(macp.clone())));
    let service = StreamableHttpService::new(
        {
            let server = MacpMcp::new(macp, local_user);
            move || Ok(server.new_session())
        },
        sessions.clone(),
        config,
    );
    (service, sessions)
}

/// An axum router with the MCP endpoint at `/mcp`.
pub fn router(
    macp: Macp,
    local_user: Option<Principal>,
    opts: &HttpOptions,
    ct: CancellationToken,
) -> axum::Router {
    let (page, api) = crate::web::routes(macp.clone(), local_user.clone(), hosts(opts), None, |api| api);
    with_artifacts(mcp_routes(macp.clone(), mcp_service(macp, local_user, opts, ct), None), opts)
        .merge(page)
        .merge(api)
}

/// The names this server answers to in `Host`: loopback, and the allowed hosts.
fn hosts(opts: &HttpOptions) -> Vec<String> {
    LOOPBACK.iter().map(|h| h.to_string()).chain(opts.allowed_hosts.iter().cloned()).collect()
}

/// `/mcp` in a router of its own, so that layers (auth) wrap exactly the MCP endpoint. The
/// outermost layer reads every POST whole before anything can refuse it ([`whole_message`]).
fn mcp_routes(
    macp: Macp,
    (service, sessions): (StreamableHttpService<MacpMcp, LocalSessionManager>, Arc<LocalSessionManager>),
    verifier: Option<Verifier>,
) -> axum::Router {
    // Inside the auth layer: a request is authenticated before its session is looked up.
    let mut r = axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state((macp, sessions), crate::sessions::stored_session))
        .layer(axum::middleware::from_fn(session_end_is_no_content));
    if let Some(v) = verifier {
        r = r.layer(axum::middleware::from_fn_with_state(v, auth::require_token));
    }
    r.layer(axum::middleware::from_fn(whole_message))
}

/// Largest JSON-RPC message accepted on `/mcp` (rmcp's own transport limit).
pub const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

/// How long a client may take to send a request body.
const BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// What [`whole_message`] read of a POSTed JSON-RPC message, for the layers inside it.
#[derive(Debug, Clone, PartialEq)]
pub struct Rpc {
    /// The JSON-RPC method, absent for a response.
    pub method: Option<String>,
    /// The request id (`null` for a notification).
    pub id: serde_json::Value,
    /// For `tools/call`, the tool's name.
    pub tool: Option<String>,
    /// Carries its protocol version in `_meta` (2026-07-28 and later): a stateless request,
    /// whatever its headers say (rmcp routes it so).
    pub stateless: bool,
}

/// The outermost layer of `/mcp`: reads a POST's body whole (bounded in size and time) before any
/// layer may refuse the request, answers what is not one JSON-RPC message with the status the MCP
/// transport specifies, and sends each answer in one piece.
///
/// - **Reading first.** A request refused before its body is read (401 for a bad token, 403 for a
///   host) would leave the body on the socket; hyper then closes the connection without saying so
///   and a client reusing it fails its next request with "server disconnected". With the body read
///   there is nothing left on the socket. A body over [`MAX_MESSAGE_BYTES`] (413) or slower than 30 s
///   (408) cannot be read, so that answer says `Connection: close`.
/// - **What it is.** Broken JSON and an empty body are a JSON-RPC parse error (`400`, code
///   -32700); a JSON array (a batch: removed from MCP in 2025-06-18) or a value that is not a
///   message object is an invalid request (`400`, -32600). rmcp would answer all of them
///   `415 Unsupported Media Type`, which tells a client its content type is wrong when it is not.
/// - **One piece.** rmcp answers a POST in session mode as an SSE stream: a priming event, then
///   the message, then the end of the stream, each flushed as it comes. A client that stops
///   reading after the message leaves the end unread and cannot reuse the connection, so each
///   call would open a new one. The stream is collected here and sent whole: as `application/json`
///   when it carries one message (the MCP transport lets a server answer either way), else as the
///   same SSE events in one body. `subscriptions/listen`, whose stream stays open, passes through.
pub async fn whole_message(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    if req.method() != axum::http::Method::POST {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let bytes = match tokio::time::timeout(BODY_TIMEOUT, axum::body::to_bytes(body, MAX_MESSAGE_BYTES)).await
    {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => {
            let too_big =
                std::error::Error::source(&e).is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            return if too_big {
                closing(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("a JSON-RPC message may be at most {MAX_MESSAGE_BYTES} bytes"),
                )
            } else {
                closing(StatusCode::BAD_REQUEST, format!("the request body could not be read: {e}"))
            };
        }
        Err(_) => {
            return closing(
                StatusCode::REQUEST_TIMEOUT,
                format!("the request body did not arrive within {} s", BODY_TIMEOUT.as_secs()),
            );
        }
    };
    let rpc = match shape(&bytes) {
        Ok(rpc) => rpc,
        Err((code, message)) => return rpc_error(code, message),
    };
    let streams = rpc.method.as_deref() == Some("subscriptions/listen");
    // Counted until its answer is whole, for a graceful shutdown; a listening stream never is.
    let _in_flight = (!streams).then(InFlight::enter);
    let mut req = axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes));
    req.extensions_mut().insert(rpc);
    let resp = next.run(req).await;
    if streams || !is_event_stream(&resp) {
        return resp;
    }
    one_piece(resp).await
}

/// Requests to `/mcp` being answered in this process, which a graceful shutdown lets finish
/// before it cancels MCP sessions.
static IN_FLIGHT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How many requests to `/mcp` this process is answering now (their answers not yet whole, or
/// for a stream not yet started), and, when served by [`crate::serve::serve`], how many
/// connections have not yet sent their first request (see there).
pub fn requests_in_flight() -> usize {
    IN_FLIGHT.load(std::sync::atomic::Ordering::Acquire)
}

/// Counts one request in [`IN_FLIGHT`] for as long as it lives (a cancelled one too).
pub(crate) struct InFlight;

impl InFlight {
    pub(crate) fn enter() -> Self {
        IN_FLIGHT.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Self
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        IN_FLIGHT.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// An error answer after which the connection is closed, saying so.
fn closing(status: StatusCode, message: String) -> Response {
    let mut resp = (status, axum::Json(serde_json::json!({"error": message}))).into_response();
    resp.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
    resp
}

/// A JSON-RPC error answered with HTTP 400, as the MCP transport specifies for a body that is not
/// a JSON-RPC message.
fn rpc_error(code: i64, message: String) -> Response {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}});
    (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
}

/// Checks that `bytes` is one JSON-RPC message and reads what the inner layers need of it; else
/// the JSON-RPC error code and message to answer with.
fn shape(bytes: &[u8]) -> Result<Rpc, (i64, String)> {
    #[derive(serde::Deserialize)]
    struct Message<'a> {
        #[serde(borrow, default)]
        method: Option<std::borrow::Cow<'a, str>>,
        #[serde(default)]
        id: serde_json::Value,
        #[serde(borrow, default)]
        params: Option<Params<'a>>,
    }
    #[derive(serde::Deserialize)]
    struct Params<'a> {
        #[serde(borrow, default)]
        name: Option<std::borrow::Cow<'a, str>>,
        #[serde(rename = "_meta", default)]
        meta: Option<Meta>,
    }
    #[derive(serde::Deserialize)]
    struct Meta {
        #[serde(rename = "io.modelcontextprotocol/protocolVersion", default)]
        version: Option<serde::de::IgnoredAny>,
    }
    match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        None => {
            return Err((-32700, "Parse error: the request body is empty; send one JSON-RPC message".into()));
        }
        Some(b'[') => {
            return Err((
                -32600,
                "Invalid Request: JSON-RPC batches are not supported (MCP removed them in 2025-06-18); send one message per request".into(),
            ));
        }
        Some(b'{') => {}
        Some(_) => {
            return Err((-32600, "Invalid Request: a JSON-RPC message is a JSON object".into()));
        }
    }
    match serde_json::from_slice::<Message<'_>>(bytes) {
        Ok(m) => {
            let stateless =
                m.params.as_ref().and_then(|p| p.meta.as_ref()).is_some_and(|m| m.version.is_some());
            let tool = match (&m.method, m.params) {
                (Some(method), Some(p)) if method == "tools/call" => p.name.map(|n| n.into_owned()),
                _ => None,
            };
            Ok(Rpc { method: m.method.map(|m| m.into_owned()), id: m.id, tool, stateless })
        }
        Err(e) if e.is_data() => Err((-32600, format!("Invalid Request: {e}"))),
        Err(e) => Err((-32700, format!("Parse error: {e}"))),
    }
}

fn is_event_stream(resp: &Response) -> bool {
    resp.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

/// Collects an SSE answer and sends it whole (see [`whole_message`]).
async fn one_piece(resp: Response) -> Response {
    let (mut parts, body) = resp.into_parts();
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(b) => b,
        // The stream broke off (the session ended meanwhile): nothing whole to send.
        Err(e) => return closing(StatusCode::SERVICE_UNAVAILABLE, format!("the answer was cut off: {e}")),
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.remove(header::TRANSFER_ENCODING);
    if let Some(json) = only_message(&bytes) {
        parts.headers.insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
        return Response::from_parts(parts, axum::body::Body::from(json));
    }
    Response::from_parts(parts, axum::body::Body::from(bytes))
}

/// The data of the one SSE event that carries any, when there is exactly one and it is on one
/// line (rmcp writes each message as one line of JSON), as a slice of the stream (no copy).
/// Priming events and keep-alive comments carry no data.
fn only_message(stream: &axum::body::Bytes) -> Option<axum::body::Bytes> {
    let mut found = None;
    let mut start = 0;
    for line in stream.split(|b| *b == b'\n') {
        let line_start = start;
        start += line.len() + 1;
        let Some(data) = line.strip_prefix(b"data:") else { continue };
        let skip = usize::from(data.first() == Some(&b' '));
        let data = &data[skip..];
        let data = data.strip_suffix(b"\r").unwrap_or(data);
        if data.is_empty() {
            continue;
        }
        if found.is_some() {
            return None;
        }
        let from = line_start + "data:".len() + skip;
        found = Some(stream.slice(from..from + data.len()));
    }
    found
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
    State(blobs): State<Arc<dyn UrlEndpoint>>,
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
    match blobs
        .put(&key, &query, &content_type, length, Box::pin(tokio_util::io::StreamReader::new(body)))
        .await
    {
        Ok(meta) => {
            tracing::info!(key, size = meta.size, "artifact uploaded");
            (StatusCode::OK, axum::Json(serde_json::json!({"key": key, "size": meta.size}))).into_response()
        }
        Err(r) => refused(r),
    }
}

async fn download(
    State(blobs): State<Arc<dyn UrlEndpoint>>,
    Path(key): Path<String>,
    uri: axum::http::Uri,
) -> Response {
    match blobs.get(&key, uri.query().unwrap_or_default()).await {
        Err(r) => refused(r),
        Ok(None) => (StatusCode::NOT_FOUND, "no such artifact").into_response(),
        Ok(Some((stream, meta))) => {
            let body = axum::body::Body::from_stream(tokio_util::io::ReaderStream::new(stream));
            let mut resp = body.into_response();
            let h = resp.headers_mut();
            if let Ok(v) = header::HeaderValue::from_str(&meta.content_type) {
                h.insert(header::CONTENT_TYPE, v);
            }
            h.insert(header::CONTENT_LENGTH, meta.size.into());
            resp
        }
    }
}

/// An axum router whose `/mcp` requires a bearer token validated by `verifier`, with the
/// protected-resource metadata at `/.well-known/oauth-protected-resource/mcp` and at
/// `/.well-known/oauth-protected-resource`; with [`crate::auth::AuthConfig::web_client_id`], the
/// web view's sign-in at `/auth/`. Fails only when the sign-in's HTTP client cannot be built.
pub fn router_with_auth(
    macp: Macp,
    verifier: Verifier,
    opts: &HttpOptions,
    ct: CancellationToken,
) -> Result<axum::Router, String> {
    let signin = match verifier.config().web_client_id.clone() {
        Some(id) => Some(crate::signin::SignIn::new(verifier.clone(), id, verifier.config().base_url())?),
        None => None,
    };
    let (page, api) = match signin {
        Some(s) => crate::web::routes(macp.clone(), None, hosts(opts), Some(s.routes()), |api| {
            api.layer(axum::middleware::from_fn_with_state(s, crate::signin::authenticate))
        }),
        None => crate::web::routes(macp.clone(), None, hosts(opts), None, |api| {
            api.layer(axum::middleware::from_fn_with_state(verifier.clone(), auth::require_token))
        }),
    };
    let mcp = mcp_routes(macp.clone(), mcp_service(macp, None, opts, ct), Some(verifier.clone()));
    let app = axum::Router::new()
        .route("/.well-known/oauth-protected-resource/mcp", axum::routing::get(auth::metadata))
        .route("/.well-known/oauth-protected-resource", axum::routing::get(auth::metadata))
        .with_state(verifier)
        .merge(mcp)
        .merge(page)
        .merge(api);
    Ok(with_artifacts(app, opts))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_message_is_cut_out_of_its_stream_and_two_are_left_whole() {
        let stream =
            axum::body::Bytes::from_static(b"data: \nid: 0/1\nretry: 3000\n\ndata: {\"id\":2}\nid: 1/1\n\n");
        assert_eq!(only_message(&stream).as_deref(), Some(&b"{\"id\":2}"[..]));
        let crlf = axum::body::Bytes::from_static(b":\r\n\r\ndata:{\"id\":3}\r\n\r\n");
        assert_eq!(only_message(&crlf).as_deref(), Some(&b"{\"id\":3}"[..]));
        let two = axum::body::Bytes::from_static(b"data: {\"a\":1}\n\ndata: {\"b\":2}\n\n");
        assert_eq!(only_message(&two), None);
        assert_eq!(only_message(&axum::body::Bytes::from_static(b"data: \n\n")), None);
    }
}
