//! The web view: a page at `/` for the people in an investigation, and the JSON API under
//! `/api/` it (and the `macp` commands, with a token) reads and acts through.
//!
//! Every route maps to one core call, as the MCP tools do; a person's acts are recorded with
//! [`Channel::Web`], which no MCP client can produce. The page is three files compiled into the
//! binary (no network beyond this server, no build step): `web/index.html`, `web/app.js`,
//! `web/app.css`. It renders room content as text only (DOM `textContent`, never HTML), and
//! every response carries a Content-Security-Policy that allows scripts from this server alone.
//!
//! # Requests a browser must not be tricked into
//! - **DNS rebinding**: the `Host` header must name this server (loopback, or an allowed host),
//!   as on `/mcp`.
//! - **Cross-site requests**: a state-changing request must be a JSON `POST` carrying the
//!   `X-MACP-Web` header, which a page of another origin cannot send without a CORS preflight
//!   this server never grants; and its `Origin`, when the browser sends one, must be this
//!   server's.
//! - **Authentication**: with an OAuth issuer configured, `/api/` takes the same bearer tokens
//!   as `/mcp` (same scopes, same attribution) or, with `--web-client-id`, the session cookie of
//!   a person who signed in in the browser ([`crate::signin`]: code + PKCE, `HttpOnly`,
//!   `SameSite=Strict`, a CSRF token on changes). Without a session the page shows the sign-in
//!   and nothing of the rooms.

use std::sync::Arc;

use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use macp_core::model::Channel;
use macp_core::service::{
    AnswerDecision, CloseRoom, Erase, GraphQuery, ListArtifacts, ListRooms, RoomFilter, SearchFindings,
    SteerRoom, SummaryQuery, TimelineQuery, UpdatesQuery,
};
use macp_core::{ArtifactId, DecisionId, EntityId, Error, FindingId, Macp, Principal, RoomId, Timestamp};
use serde::Deserialize;

use crate::server::Authenticated;

const INDEX_HTML: &str = include_str!("../web/index.html");
const APP_JS: &str = include_str!("../web/app.js");
const APP_CSS: &str = include_str!("../web/app.css");

/// The policy every web response carries: scripts, styles and connections to this server only;
/// images also from `https:` (artifacts on S3 are shown inline through their presigned URLs);
/// nothing may frame the page.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: https:; \
                       connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The header a state-changing request must carry (see the module docs).
pub const CSRF_HEADER: &str = "x-macp-web";

#[derive(Clone)]
struct Web {
    macp: Macp,
    /// The local user when auth is off.
    local: Option<Principal>,
    hosts: Arc<Vec<String>>,
}

/// The page and `/api/` routes. `local` is the user everything is done as when auth is off
/// (`None`: auth is on, and an [`Authenticated`] is expected in the request's extensions, put
/// there by the token layer wrapping `/api/`). `hosts` are the names accepted in `Host`.
/// `signin`: the browser sign-in's routes, served under the same guards as the page. `auth`
/// wraps `/api/` inside the guards (so that a refusal carries the security headers too, and
/// nothing is authenticated for a request the guards refuse).
pub fn routes(
    macp: Macp,
    local: Option<Principal>,
    hosts: Vec<String>,
    signin: Option<Router>,
    auth: impl FnOnce(Router) -> Router,
) -> (Router, Router) {
    let state = Web { macp, local, hosts: Arc::new(hosts) };
    let page = Router::new()
        .route("/", get(index))
        .route("/app.js", get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }))
        .route("/app.css", get(|| async { asset("text/css; charset=utf-8", APP_CSS) }))
        .with_state(state.clone())
        .merge(signin.unwrap_or_default())
        .layer(axum::middleware::from_fn_with_state(state.clone(), guard));
    let api = Router::new()
        .route("/api/me", get(me))
        .route("/api/rooms", get(rooms))
        .route("/api/rooms/{room}/summary", get(summary))
        .route("/api/rooms/{room}/context", get(context))
        .route("/api/rooms/{room}/feed", get(feed))
        .route("/api/rooms/{room}/updates", get(updates))
        .route("/api/rooms/{room}/timeline", get(timeline))
        .route("/api/rooms/{room}/search", get(search))
        .route("/api/rooms/{room}/graph", get(graph))
        .route("/api/rooms/{room}/artifacts", get(artifacts))
        .route("/api/rooms/{room}/decisions", get(decisions))
        .route("/api/rooms/{room}/decisions/{decision}", post(answer))
        .route("/api/rooms/{room}/steer", post(steer))
        .route("/api/rooms/{room}/close", post(close))
        .route("/api/rooms/{room}/release", post(release))
        .route("/api/rooms/{room}/erase", post(erase))
        .with_state(state.clone());
    let api = auth(api).layer(axum::middleware::from_fn_with_state(state, guard));
    (page, api)
}

/// Host, cross-site and security headers for every web route.
async fn guard(State(w): State<Web>, req: Request, next: Next) -> Response {
    let host = req.headers().get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
    if !host_allowed(host, &w.hosts) {
        return refuse(
            StatusCode::FORBIDDEN,
            "forbidden_host",
            format!("`{host}` is not a name of this server"),
        );
    }
    if changes(req.method()) {
        if !req.headers().contains_key(CSRF_HEADER) {
            return refuse(
                StatusCode::FORBIDDEN,
                "csrf",
                format!("a change needs the `{CSRF_HEADER}` header"),
            );
        }
        let json = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"));
        if !json {
            return refuse(StatusCode::UNSUPPORTED_MEDIA_TYPE, "invalid_input", "send JSON".into());
        }
        if let Some(origin) = req.headers().get(header::ORIGIN).and_then(|o| o.to_str().ok())
            && !origin_matches(origin, host)
        {
            return refuse(StatusCode::FORBIDDEN, "csrf", format!("a change from `{origin}` is refused"));
        }
    }
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let bare = |h: &str| -> String {
        if let Some(rest) = h.strip_prefix('[') {
            return rest.split(']').next().unwrap_or("").to_owned();
        }
        match h.rsplit_once(':') {
            Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) && !name.contains(':') => {
                name.to_owned()
            }
            _ => h.to_owned(),
        }
    };
    let name = bare(host);
    !name.is_empty() && allowed.iter().any(|a| a == host || bare(a) == name)
}

fn origin_matches(origin: &str, host: &str) -> bool {
    origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://")).is_some_and(|o| o == host)
}

/// Whether a request with this method may change something (and so is held to the CSRF rules).
pub(crate) fn changes(m: &Method) -> bool {
    !matches!(*m, Method::GET | Method::HEAD)
}

/// A refusal: `{"error": {code, message, retryable: false}}`.
pub(crate) fn refuse(status: StatusCode, code: &str, message: String) -> Response {
    (status, Json(serde_json::json!({"error": {"code": code, "message": message, "retryable": false}})))
        .into_response()
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

async fn index() -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], INDEX_HTML).into_response()
}

/// A core error as an HTTP answer: the same `{"error": {code, message, retryable, limit?,
/// field?}}` body as a tool error, with a status that says the same.
fn failed(e: &Error) -> Response {
    let status = match e.code() {
        "not_found" => StatusCode::NOT_FOUND,
        "invalid_input" => StatusCode::BAD_REQUEST,
        "conflict" | "already_exists" | "room_closed" => StatusCode::CONFLICT,
        "capacity_exceeded" => StatusCode::TOO_MANY_REQUESTS,
        "unauthenticated" => StatusCode::UNAUTHORIZED,
        "permission_denied" | "not_joined" => StatusCode::FORBIDDEN,
        _ if e.is_retryable() => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    (status, Json(serde_json::json!({"error": e.body()}))).into_response()
}

fn reply<T: serde::Serialize>(r: macp_core::Result<T>) -> Response {
    match r {
        Ok(v) => Json(v).into_response(),
        Err(e) => failed(&e),
    }
}

/// Who is asking, and whether they may change things.
fn person(w: &Web, ext: &axum::http::Extensions) -> Result<(Principal, bool), Error> {
    if let Some(p) = &w.local {
        return Ok((p.clone(), true));
    }
    ext.get::<Authenticated>()
        .map(|a| (a.principal.clone(), a.can_write))
        .ok_or_else(|| Error::Unauthenticated { message: "sign in first: send your bearer token".into() })
}

fn writer(w: &Web, ext: &axum::http::Extensions) -> Result<Principal, Error> {
    let (p, can_write) = person(w, ext)?;
    if !can_write {
        return Err(Error::PermissionDenied {
            message: "your token may read but not change anything".into(),
        });
    }
    Ok(p)
}

macro_rules! who {
    ($w:expr, $req:expr) => {
        match person(&$w, $req.extensions()) {
            Ok((p, _)) => p,
            Err(e) => return failed(&e),
        }
    };
}

macro_rules! room {
    ($s:expr) => {
        match $s.parse::<RoomId>() {
            Ok(r) => r,
            Err(_) => return failed(&Error::invalid("room_id", "not a room id")),
        }
    };
}

async fn me(State(w): State<Web>, req: Request) -> Response {
    match person(&w, req.extensions()) {
        Ok((p, can_write)) => {
            // `csrf`: what a change made with a session cookie must carry (see crate::signin).
            let csrf = req.extensions().get::<crate::signin::WebSession>().map(|s| s.csrf.clone());
            Json(serde_json::json!({"user_id": p.user_id, "can_write": can_write, "auth": w.local.is_none(),
                                    "csrf": csrf}))
            .into_response()
        }
        Err(e) => failed(&e),
    }
}

/// Every room, active first, each with its summary (a room's summary is a few counter reads).
async fn rooms(State(w): State<Web>, req: Request) -> Response {
    let who = who!(w, req);
    let mut out = Vec::new();
    let mut cursor = None;
    loop {
        let page = match w
            .macp
            .list_rooms(&who, ListRooms { status: RoomFilter::All, limit: Some(200), cursor })
            .await
        {
            Ok(p) => p,
            Err(e) => return failed(&e),
        };
        for r in page.rooms {
            match w.macp.room_summary(&who, r.room_id).await {
                Ok(s) => out.push(s),
                // Purged, or the person removed from its members, since the listing.
                Err(Error::NotFound { .. }) => {}
                Err(e) => return failed(&e),
            }
        }
        match page.next_cursor {
            Some(c) if out.len() < 1000 => cursor = Some(c),
            _ => break,
        }
    }
    out.sort_by(|a, b| {
        (a.room.status != macp_core::model::RoomStatus::Active)
            .cmp(&(b.room.status != macp_core::model::RoomStatus::Active))
            .then(b.latest_activity.cmp(&a.latest_activity))
    });
    Json(out).into_response()
}

#[derive(Deserialize)]
struct SinceQ {
    since: Option<Timestamp>,
    since_marker: Option<String>,
}

async fn summary(
    State(w): State<Web>,
    Path(room): Path<String>,
    Query(q): Query<SinceQ>,
    req: Request,
) -> Response {
    let who = who!(w, req);
    let room_id = room!(room);
    reply(
        w.macp
            .room_summary(&who, SummaryQuery { room_id, since: q.since, since_marker: q.since_marker })
            .await,
    )
}

async fn context(State(w): State<Web>, Path(room): Path<String>, req: Request) -> Response {
    let who = who!(w, req);
    reply(w.macp.room_context(&who, room!(room)).await)
}

#[derive(Deserialize)]
struct FeedQ {
    before: Option<u64>,
    limit: Option<usize>,
}

async fn feed(
    State(w): State<Web>,
    Path(room): Path<String>,
    Query(q): Query<FeedQ>,
    req: Request,
) -> Response {
    let who = who!(w, req);
    reply(w.macp.feed_page(&who, room!(room), q.before, q.limit).await)
}

#[derive(Deserialize)]
struct UpdatesQ {
    cursor: String,
    wait: Option<u64>,
}

/// What happened after `cursor`, waiting up to `wait` seconds for something: the page's live
/// updates (a long poll; the answer comes the moment a change commits).
async fn updates(
    State(w): State<Web>,
    Path(room): Path<String>,
    Query(q): Query<UpdatesQ>,
    req: Request,
) -> Response {
    let who = who!(w, req);
    let mut u = UpdatesQuery::new(room!(room)).cursor(q.cursor);
    u.wait_seconds = q.wait;
    reply(w.macp.updates(&who, u).await)
}

#[derive(Deserialize)]
struct TimelineQ {
    tags: Option<String>,
    agent_id: Option<String>,
    thread: Option<FindingId>,
    entity_id: Option<EntityId>,
    after_marker: Option<String>,
    cursor: Option<String>,
    limit: Option<usize>,
}

async fn timeline(
    State(w): State<Web>,
    Path(room): Path<String>,
    Query(q): Query<TimelineQ>,
    req: Request,
) -> Response {
    let who = who!(w, req);
    let mut t = TimelineQuery::new(room!(room));
    t.tags = q
        .tags
        .map(|s| s.split(',').map(str::trim).filter(|t| !t.is_empty()).map(str::to_owned).collect())
        .unwrap_or_default();
    t.agent_id = match q.agent_id.filter(|a| !a.is_empty()).map(macp_core::AgentId::new).transpose() {
        Ok(a) => a,
        Err(e) => return failed(&e),
    };
    t.thread = q.thread;
    t.entity_id = q.entity_id;
    t.after_marker = q.after_marker.filter(|m| !m.is_empty());
    t.cursor = q.cursor;
    t.limit = q.limit;
    reply(w.macp.timeline(&who, t).await)
}

#[derive(Deserialize)]
struct SearchQ {
    q: String,
    limit: Option<usize>,
    #[serde(default)]
    all_rooms: bool,
}

async fn search(
    State(w): State<Web>,
    Path(room): Path<String>,
    Query(q): Query<SearchQ>,
    req: Request,
) -> Response {
    let who = who!(w, req);
    let mut s = SearchFindings::new(room!(room), q.q);
    s.limit = q.limit;
    s.all_rooms = q.all_rooms;
    reply(w.macp.search_findings(&who, s).await)
}

#[derive(Deserialize)]
struct GraphQ {
    entity_id: Option<EntityId>,
    depth: Option<u32>,
}

async fn graph(
    State(w): State<Web>,
    Path(room): Path<String>,
    Query(q): Query<GraphQ>,
    req: Request,
) -> Response {
    let who = who!(w, req);
    let mut g = GraphQuery::new(room!(room));
    g.entity_id = q.entity_id;
    g.depth = q.depth;
    reply(w.macp.entity_graph(&who, g).await)
}

async fn artifacts(State(w): State<Web>, Path(room): Path<String>, req: Request) -> Response {
    let who = who!(w, req);
    let q = ListArtifacts {
        room_id: room!(room),
        finding_id: None,
        entity_id: None,
        limit: Some(200),
        cursor: None,
    };
    reply(w.macp.list_artifacts(&who, q).await)
}

async fn decisions(State(w): State<Web>, Path(room): Path<String>, req: Request) -> Response {
    let who = who!(w, req);
    reply(w.macp.list_decisions(&who, room!(room), false).await)
}

/// Reads the JSON body of a state-changing request (after the guard checked its type).
async fn body<T: serde::de::DeserializeOwned>(req: Request) -> Result<(axum::http::Extensions, T), Error> {
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_BODY).await.map_err(|e| {
        Error::invalid("body", format!("the body could not be read (at most {MAX_BODY} bytes): {e}"))
    })?;
    let v = serde_json::from_slice(&bytes).map_err(|e| Error::invalid("body", e.to_string()))?;
    Ok((parts.extensions, v))
}

/// The largest body a change may send (a resolution is the longest text it carries).
const MAX_BODY: usize = 256 * 1024;

macro_rules! acting {
    ($w:expr, $req:expr, $t:ty) => {{
        let (ext, v) = match body::<$t>($req).await {
            Ok(x) => x,
            Err(e) => return failed(&e),
        };
        match writer(&$w, &ext) {
            Ok(p) => (p, v),
            Err(e) => return failed(&e),
        }
    }};
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AnswerB {
    answer: String,
}

/// A person answers a decision in the page: recorded with [`Channel::Web`].
async fn answer(
    State(w): State<Web>,
    Path((room, decision)): Path<(String, String)>,
    req: Request,
) -> Response {
    let room_id = room!(room);
    let decision_id: DecisionId = match decision.parse() {
        Ok(d) => d,
        Err(_) => return failed(&Error::invalid("decision_id", "not a decision id")),
    };
    let (who, b) = acting!(w, req, AnswerB);
    let req = AnswerDecision { room_id, decision_id, answer: b.answer, agent_id: None };
    reply(w.macp.answer_decision(&who, req, Channel::Web).await)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SteerB {
    objective: Option<String>,
    marker: Option<String>,
    #[serde(default)]
    reopen: bool,
    retention_days: Option<u32>,
    #[serde(default)]
    add_members: Vec<String>,
    #[serde(default)]
    remove_members: Vec<String>,
}

async fn steer(State(w): State<Web>, Path(room): Path<String>, req: Request) -> Response {
    let room_id = room!(room);
    let (who, b) = acting!(w, req, SteerB);
    let req = SteerRoom {
        objective: b.objective,
        marker: b.marker,
        reopen: b.reopen,
        retention_days: b.retention_days,
        add_members: b.add_members,
        remove_members: b.remove_members,
        ..SteerRoom::new(room_id)
    };
    reply(w.macp.steer_room(&who, req, Channel::Web).await)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CloseB {
    resolution: Option<String>,
    #[serde(default)]
    root_cause: Vec<FindingId>,
}

async fn close(State(w): State<Web>, Path(room): Path<String>, req: Request) -> Response {
    let room_id = room!(room);
    let (who, b) = acting!(w, req, CloseB);
    let req = CloseRoom { resolution: b.resolution, root_cause: b.root_cause, ..CloseRoom::new(room_id) };
    reply(w.macp.close_room(&who, req, Channel::Web).await)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReleaseB {
    subject: String,
}

async fn release(State(w): State<Web>, Path(room): Path<String>, req: Request) -> Response {
    let room_id = room!(room);
    let (who, b) = acting!(w, req, ReleaseB);
    reply(w.macp.release_claim_as_person(&who, room_id, &b.subject).await)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EraseB {
    finding_id: Option<FindingId>,
    artifact_id: Option<ArtifactId>,
    reason: String,
}

/// A person erases a finding or an artifact (anyone's: see `Macp::erase_as_person`). With auth
/// on, only from a signed-in browser: a bearer token is also what agents hold, and an agent
/// erases only its own, through the `erase` tool.
async fn erase(State(w): State<Web>, Path(room): Path<String>, req: Request) -> Response {
    let room_id = room!(room);
    if w.local.is_none() && req.extensions().get::<crate::signin::WebSession>().is_none() {
        return failed(&Error::PermissionDenied {
            message:
                "a person erases from the web view, signed in; an agent erases only what it wrote, with the \
                      erase tool"
                    .into(),
        });
    }
    let (who, b) = acting!(w, req, EraseB);
    let req = Erase {
        room_id,
        finding_id: b.finding_id,
        artifact_id: b.artifact_id,
        reason: b.reason,
        agent_id: None,
    };
    reply(w.macp.erase_as_person(&who, req).await)
}
