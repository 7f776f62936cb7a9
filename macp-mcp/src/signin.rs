//! Browser sign-in for the web view when auth is on: the OAuth authorization-code flow with PKCE
//! (S256) against the same issuer as the agents' tokens, as a public client (`--web-client-id`;
//! no client secret exists anywhere), ending in a server-side session named by an `HttpOnly`,
//! `SameSite=Strict` cookie.
//!
//! - The page never holds a token: the server exchanges the code, keeps the access token (and
//!   the refresh token, when the issuer gives one) in its memory, and checks the access token
//!   with the same [`Verifier`] on every request, so the person has exactly the scopes and the
//!   attribution their token gives an agent. An expired token is refreshed, once per session
//!   however many requests notice it; when the issuer refuses, the session ends and the page
//!   offers the sign-in again.
//! - Login CSRF: the `state` sent to the issuer must come back in the same browser: it is kept,
//!   with the PKCE verifier, in an `HttpOnly` `Lax` cookie set when the flow started and good for
//!   [`LOGIN_TTL`]. The server keeps nothing for a sign-in in flight, so unauthenticated
//!   requests cannot fill its memory or lock others out. On https the cookies carry the
//!   `__Host-` prefix (no sibling domain can plant them).
//! - Request forgery: besides the web view's own guards (a JSON `POST` with `X-MACP-Web`, and a
//!   matching `Origin`), a change made with a session cookie must carry the session's CSRF token
//!   in `X-MACP-CSRF`; the page reads it from `/api/me`, which no other origin can read.
//! - Sessions live in this process (a restart asks people to sign in again) and are bounded:
//!   [`MAX_SESSIONS`] at once, [`MAX_SESSIONS_PER_USER`] per person (their oldest gives way),
//!   each at most [`SESSION_TTL`]. Endpoints come from the issuer's OpenID configuration (or its
//!   RFC 8414 metadata), whose `issuer` must be the configured one.
//! - The issuer being unreachable is not a refusal: the answer is 503 with `Retry-After`, and a
//!   session whose refresh failed that way is kept.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::Digest;
use tokio::sync::Mutex;

use crate::auth::{Denied, Verifier};
use crate::server::Authenticated;

/// The session cookie (`__Host-macp_session` on https).
pub const SESSION_COOKIE: &str = "macp_session";
/// The cookie carrying a sign-in in flight (state, PKCE verifier, place to return to).
const LOGIN_COOKIE: &str = "macp_login";
/// The header carrying the session's CSRF token on changes.
pub const CSRF_TOKEN_HEADER: &str = "x-macp-csrf";
/// How long a person has to finish signing in at the issuer.
pub const LOGIN_TTL: Duration = Duration::from_secs(600);
/// The longest a session lasts, refreshed tokens or not.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// Sessions held at once; a sign-in beyond it is refused (503, retry) until one ends.
pub const MAX_SESSIONS: usize = 10_000;
/// Sessions one person may hold at once; a new sign-in ends their oldest beyond it.
pub const MAX_SESSIONS_PER_USER: usize = 20;

/// A signed-in person's session, as the API handlers see it.
#[derive(Debug, Clone)]
pub struct WebSession {
    /// The token a change must carry in [`CSRF_TOKEN_HEADER`].
    pub csrf: String,
}

#[derive(Debug, Clone)]
struct Endpoints {
    authorize: String,
    token: String,
}

struct Session {
    user: String,
    access: String,
    refresh: Option<String>,
    csrf: String,
    at: Instant,
    /// Held while this session's token is refreshed: the concurrent requests of one page wait
    /// for one refresh instead of each spending the (often single-use) refresh token.
    refreshing: Arc<Mutex<()>>,
}

/// Why the token endpoint gave no token.
enum TokenError {
    /// The grant is refused (`invalid_grant`, …): sign in again.
    Refused(String),
    /// The issuer could not be reached or failed: retry later, the grant may be fine.
    Unavailable(String),
}

/// Browser sign-in: its routes and the layer that authenticates `/api/` by bearer token or by
/// session cookie.
#[derive(Clone)]
pub struct SignIn {
    inner: Arc<Inner>,
}

struct Inner {
    verifier: Verifier,
    client_id: String,
    redirect_uri: String,
    secure: bool,
    scope: String,
    http: reqwest::Client,
    endpoints: Mutex<Option<Endpoints>>,
    sessions: Mutex<HashMap<String, Session>>,
}

impl SignIn {
    /// Sign-in for the server whose public base URL is `public` (`https://…` makes the cookies
    /// `Secure` and `__Host-`), as OAuth public client `client_id`, asking for `openid` and the
    /// configured read and write scopes.
    pub fn new(verifier: Verifier, client_id: String, public: &str) -> Result<Self, String> {
        let scope = std::iter::once("openid".to_owned())
            .chain(verifier.config().scopes())
            .collect::<Vec<_>>()
            .join(" ");
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("cannot build the HTTP client for sign-in: {e}"))?;
        let public = public.trim_end_matches('/');
        Ok(Self {
            inner: Arc::new(Inner {
                verifier,
                client_id,
                redirect_uri: format!("{public}/auth/callback"),
                secure: public.starts_with("https://"),
                scope,
                http,
                endpoints: Mutex::default(),
                sessions: Mutex::default(),
            }),
        })
    }

    /// `/auth/login`, `/auth/callback`, `/auth/logout`.
    pub fn routes(&self) -> Router {
        Router::new()
            .route("/auth/login", get(login))
            .route("/auth/callback", get(callback))
            .route("/auth/logout", post(logout))
            .with_state(self.clone())
    }

    /// The issuer's endpoints, discovered once (a failure is not kept: the next sign-in tries
    /// again).
    async fn endpoints(&self) -> Result<Endpoints, String> {
        if let Some(e) = self.inner.endpoints.lock().await.as_ref() {
            return Ok(e.clone());
        }
        let issuer = self.inner.verifier.config().issuer.trim_end_matches('/').to_owned();
        let mut last = String::new();
        for doc in ["openid-configuration", "oauth-authorization-server"] {
            let url = format!("{issuer}/.well-known/{doc}");
            let got = async {
                let r = self.inner.http.get(&url).send().await.map_err(|e| e.to_string())?;
                let r = r.error_for_status().map_err(|e| e.to_string())?;
                r.json::<Value>().await.map_err(|e| e.to_string())
            }
            .await;
            let v = match got {
                Ok(v) => v,
                Err(e) => {
                    last = format!("{url}: {e}");
                    continue;
                }
            };
            // Mix-up defence (RFC 8414, 3.3): the document must speak for this issuer.
            if v["issuer"].as_str().map(|i| i.trim_end_matches('/')) != Some(issuer.as_str()) {
                last = format!("{url} speaks for issuer {}, not {issuer}", v["issuer"]);
                continue;
            }
            if let (Some(a), Some(t)) = (v["authorization_endpoint"].as_str(), v["token_endpoint"].as_str()) {
                let e = Endpoints { authorize: a.to_owned(), token: t.to_owned() };
                *self.inner.endpoints.lock().await = Some(e.clone());
                return Ok(e);
            }
            last = format!("{url} names no authorization_endpoint and token_endpoint");
        }
        Err(format!("its sign-in endpoints could not be found ({last})"))
    }

    /// Exchanges `form` at the token endpoint: the access token and the refresh token.
    async fn token(&self, form: &[(&str, &str)]) -> Result<(String, Option<String>), TokenError> {
        let ep = self.endpoints().await.map_err(TokenError::Unavailable)?;
        let r = self
            .inner
            .http
            .post(&ep.token)
            .form(form)
            .send()
            .await
            .map_err(|e| TokenError::Unavailable(format!("its token endpoint cannot be reached: {e}")))?;
        let status = r.status();
        if status.is_server_error() {
            return Err(TokenError::Unavailable(format!("its token endpoint answered {status}")));
        }
        let body: Value = r
            .json()
            .await
            .map_err(|e| TokenError::Unavailable(format!("its token endpoint answered {status}: {e}")))?;
        if !status.is_success() {
            return Err(TokenError::Refused(format!(
                "the issuer refused the grant: {} {}",
                body["error"].as_str().unwrap_or("?"),
                body["error_description"].as_str().unwrap_or("")
            )));
        }
        let access = body["access_token"]
            .as_str()
            .ok_or_else(|| TokenError::Refused("the token endpoint gave no access_token".into()))?
            .to_owned();
        Ok((access, body["refresh_token"].as_str().map(str::to_owned)))
    }

    /// A cookie's name as set and read: `__Host-` on https.
    fn name(&self, base: &str) -> String {
        if self.inner.secure { format!("__Host-{base}") } else { base.to_owned() }
    }

    fn cookie(&self, base: &str, value: &str, same_site: &str, max_age: Duration) -> HeaderValue {
        let secure = if self.inner.secure { "; Secure" } else { "" };
        let v = format!(
            "{}={value}; Path=/; HttpOnly; SameSite={same_site}; Max-Age={}{secure}",
            self.name(base),
            max_age.as_secs()
        );
        HeaderValue::from_str(&v).expect("cookie values are base64url")
    }

    fn session_id<'a>(&self, headers: &'a HeaderMap) -> Option<&'a str> {
        cookie_value(headers, &self.name(SESSION_COOKIE))
    }

    /// Renews session `id`, whose access token `stale` was refused (expired, most likely):
    /// one refresh at a time per session, and a request that waited uses the token the other
    /// got. The session ends only when the issuer refuses the grant, never because the issuer
    /// is unreachable.
    async fn refresh(
        &self,
        id: &str,
        stale: &str,
        refreshing: &Mutex<()>,
        why: String,
    ) -> Result<Authenticated, Response> {
        let _one = refreshing.lock().await;
        let held = self.inner.sessions.lock().await.get(id).map(|x| (x.access.clone(), x.refresh.clone()));
        let Some((access, refresh)) = held else {
            return Err(signed_out("your session has ended; sign in again".into()));
        };
        if access != stale {
            return match self.inner.verifier.verify(&access).await {
                Ok(w) => Ok(w),
                Err(Denied::KeysUnavailable(e)) => Err(unavailable(e)),
                Err(Denied::Token(t)) => Err(self.end(id, t.0).await),
            };
        }
        let Some(r) = refresh else { return Err(self.end(id, why).await) };
        let grant = [
            ("grant_type", "refresh_token"),
            ("refresh_token", r.as_str()),
            ("client_id", &self.inner.client_id),
        ];
        let (access, new_refresh) = match self.token(&grant).await {
            Ok(t) => t,
            Err(TokenError::Unavailable(e)) => return Err(unavailable(e)),
            Err(TokenError::Refused(e)) => return Err(self.end(id, e).await),
        };
        match self.inner.verifier.verify(&access).await {
            Ok(w) => {
                if let Some(x) = self.inner.sessions.lock().await.get_mut(id) {
                    x.access = access;
                    x.refresh = new_refresh.or(Some(r));
                }
                Ok(w)
            }
            Err(Denied::KeysUnavailable(e)) => Err(unavailable(e)),
            Err(Denied::Token(t)) => Err(self.end(id, t.0).await),
        }
    }

    /// Ends session `id`, whose token cannot be renewed: the answer that says so.
    async fn end(&self, id: &str, why: String) -> Response {
        tracing::info!(reason = %why, "web session ended");
        self.inner.sessions.lock().await.remove(id);
        signed_out(format!("your session has ended ({why}); sign in again"))
    }
}

/// A value of 32 random bytes, base64url.
fn random() -> String {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).expect("the operating system's random source");
    URL_SAFE_NO_PAD.encode(b)
}

/// Equal, in a time that does not depend on where they differ (CSRF tokens, states).
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// The page to return to after signing in: a place in this page (`#/`, `#/room/<id>`), never
/// another URL, and nothing that could not stand in a `Location` header.
fn place(next: &str) -> &str {
    let ok = next.starts_with("#/")
        && next.len() <= 100
        && next[1..].chars().all(|c| c.is_ascii_alphanumeric() || c == '/' || c == '-');
    if ok { next } else { "" }
}

/// A cookie's value from the request's `Cookie` headers.
pub fn cookie_value<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

fn signed_out(message: String) -> Response {
    let body = json!({"error": {"code": "unauthenticated", "message": message, "retryable": false,
                                "sign_in": "/auth/login"}});
    (StatusCode::UNAUTHORIZED, Json(body)).into_response()
}

fn unavailable(why: String) -> Response {
    tracing::warn!(reason = %why, "the sign-in issuer is unavailable");
    let mut resp = crate::web::refuse(
        StatusCode::SERVICE_UNAVAILABLE,
        "backend",
        format!("the sign-in issuer is unavailable ({why}); retry shortly"),
    );
    let h = resp.headers_mut();
    h.insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    resp
}

fn redirect(to: &str) -> Response {
    (StatusCode::SEE_OTHER, [(header::LOCATION, to.to_owned())]).into_response()
}

#[derive(Deserialize)]
struct LoginQuery {
    #[serde(default)]
    next: String,
}

/// Starts a sign-in: a fresh `state` and PKCE verifier, kept in the browser's login cookie, and
/// the browser sent to the issuer.
async fn login(State(s): State<SignIn>, Query(q): Query<LoginQuery>) -> Response {
    let ep = match s.endpoints().await {
        Ok(e) => e,
        Err(e) => return unavailable(e),
    };
    let state = random();
    let code_verifier = random();
    let challenge = URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(code_verifier.as_bytes()));
    let url = match reqwest::Url::parse_with_params(
        &ep.authorize,
        &[
            ("response_type", "code"),
            ("client_id", s.inner.client_id.as_str()),
            ("redirect_uri", s.inner.redirect_uri.as_str()),
            ("scope", s.inner.scope.as_str()),
            ("state", state.as_str()),
            ("code_challenge", challenge.as_str()),
            ("code_challenge_method", "S256"),
        ],
    ) {
        Ok(u) => u,
        Err(e) => return unavailable(format!("its authorization endpoint is not a URL: {e}")),
    };
    let mut resp = redirect(url.as_str());
    // `state.verifier.place`, all base64url. Lax: it must come back on the issuer's redirect,
    // a cross-site navigation.
    let value = format!("{state}.{code_verifier}.{}", URL_SAFE_NO_PAD.encode(place(&q.next)));
    resp.headers_mut().append(header::SET_COOKIE, s.cookie(LOGIN_COOKIE, &value, "Lax", LOGIN_TTL));
    resp
}

#[derive(Deserialize)]
struct CallbackQuery {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

/// The issuer's redirect back: checks `state` against the browser's, exchanges the code with
/// its verifier, checks the token as an agent's would be, and opens a session.
async fn callback(State(s): State<SignIn>, headers: HeaderMap, Query(q): Query<CallbackQuery>) -> Response {
    let held = cookie_value(&headers, &s.name(LOGIN_COOKIE)).and_then(|v| {
        let mut p = v.splitn(3, '.');
        Some((p.next()?, p.next()?, p.next()?))
    });
    let Some((_, code_verifier, next)) =
        held.filter(|(st, _, _)| q.state.as_deref().is_some_and(|q| same(q, st)))
    else {
        return crate::web::refuse(
            StatusCode::BAD_REQUEST,
            "invalid_input",
            "this sign-in was not started in this browser, or took longer than 10 minutes; start again"
                .into(),
        );
    };
    let next = URL_SAFE_NO_PAD.decode(next).ok().and_then(|b| String::from_utf8(b).ok()).unwrap_or_default();
    if let Some(e) = q.error {
        let why = q.error_description.unwrap_or_default();
        return signed_out(format!("the issuer refused: {e} {why}"));
    }
    let Some(code) = q.code else {
        return crate::web::refuse(
            StatusCode::BAD_REQUEST,
            "invalid_input",
            "the issuer sent no code".into(),
        );
    };
    let grant = [
        ("grant_type", "authorization_code"),
        ("code", code.as_str()),
        ("redirect_uri", s.inner.redirect_uri.as_str()),
        ("client_id", s.inner.client_id.as_str()),
        ("code_verifier", code_verifier),
    ];
    let (access, refresh) = match s.token(&grant).await {
        Ok(t) => t,
        Err(TokenError::Unavailable(e)) => return unavailable(e),
        Err(TokenError::Refused(e)) => {
            tracing::info!(reason = %e, "sign-in refused");
            return signed_out(e);
        }
    };
    let who = match s.inner.verifier.verify(&access).await {
        Ok(w) => w,
        Err(Denied::Token(r)) => {
            tracing::info!(reason = %r.0, "sign-in refused");
            return signed_out(r.0);
        }
        Err(Denied::KeysUnavailable(e)) => return unavailable(e),
    };
    let id = random();
    {
        let user = who.principal.user_id.to_string();
        let mut sessions = s.inner.sessions.lock().await;
        // Signing in again replaces this browser's session; expired ones go; a person past
        // their share gives up their oldest.
        if let Some(old) = s.session_id(&headers) {
            sessions.remove(old);
        }
        sessions.retain(|_, x| x.at.elapsed() < SESSION_TTL);
        let mut mine: Vec<(Instant, String)> =
            sessions.iter().filter(|(_, x)| x.user == user).map(|(k, x)| (x.at, k.clone())).collect();
        if mine.len() >= MAX_SESSIONS_PER_USER {
            mine.sort();
            for (_, k) in &mine[..=mine.len() - MAX_SESSIONS_PER_USER] {
                sessions.remove(k);
            }
        }
        if sessions.len() >= MAX_SESSIONS {
            let mut resp = crate::web::refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "capacity_exceeded",
                format!("{MAX_SESSIONS} sessions are open; retry later"),
            );
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("60"));
            return resp;
        }
        let session =
            Session { user, access, refresh, csrf: random(), at: Instant::now(), refreshing: Arc::default() };
        sessions.insert(id.clone(), session);
    }
    tracing::info!(user = %who.principal.user_id, "signed in to the web view");
    let mut resp = redirect(&format!("/{}", place(&next)));
    let h = resp.headers_mut();
    h.append(header::SET_COOKIE, s.cookie(SESSION_COOKIE, &id, "Strict", SESSION_TTL));
    h.append(header::SET_COOKIE, s.cookie(LOGIN_COOKIE, "", "Lax", Duration::ZERO));
    resp
}

/// Ends the session (the web view's guard has already checked the change headers). A session
/// the server no longer holds is ended already: the cookie is cleared all the same.
async fn logout(State(s): State<SignIn>, headers: HeaderMap) -> Response {
    if let Some(id) = s.session_id(&headers) {
        let mut sessions = s.inner.sessions.lock().await;
        if let Some(x) = sessions.get(id) {
            if !csrf_ok(&headers, &x.csrf) {
                return csrf_refused();
            }
            sessions.remove(id);
        }
    }
    let mut resp = Json(json!({"signed_out": true})).into_response();
    resp.headers_mut().append(header::SET_COOKIE, s.cookie(SESSION_COOKIE, "", "Strict", Duration::ZERO));
    resp
}

fn csrf_ok(headers: &HeaderMap, csrf: &str) -> bool {
    headers.get(CSRF_TOKEN_HEADER).and_then(|v| v.to_str().ok()).is_some_and(|v| same(v, csrf))
}

fn csrf_refused() -> Response {
    crate::web::refuse(
        StatusCode::FORBIDDEN,
        "csrf",
        format!("a change made with a browser session needs its `{CSRF_TOKEN_HEADER}` token (from /api/me)"),
    )
}

/// The layer on `/api/`: a bearer token is checked as on `/mcp`; otherwise the session cookie
/// names a session whose token is checked (renewed if it has expired), and a change must carry
/// the session's CSRF token. It runs inside the web view's guard.
pub async fn authenticate(State(s): State<SignIn>, mut req: Request, next: Next) -> Response {
    if req.headers().contains_key(header::AUTHORIZATION) {
        return crate::auth::require_token(State(s.inner.verifier.clone()), req, next).await;
    }
    let Some(id) = s.session_id(req.headers()).map(str::to_owned) else {
        return signed_out("sign in first".into());
    };
    let held = {
        let mut sessions = s.inner.sessions.lock().await;
        if sessions.get(&id).is_some_and(|x| x.at.elapsed() >= SESSION_TTL) {
            sessions.remove(&id);
        }
        sessions.get(&id).map(|x| (x.access.clone(), x.csrf.clone(), x.refreshing.clone()))
    };
    let Some((access, csrf, refreshing)) = held else {
        return signed_out("your session has ended; sign in again".into());
    };
    if crate::web::changes(req.method()) && !csrf_ok(req.headers(), &csrf) {
        return csrf_refused();
    }
    let who = match s.inner.verifier.verify(&access).await {
        Ok(w) => w,
        Err(Denied::KeysUnavailable(e)) => return unavailable(e),
        Err(Denied::Token(first)) => match s.refresh(&id, &access, &refreshing, first.0).await {
            Ok(w) => w,
            Err(r) => return r,
        },
    };
    req.extensions_mut().insert(who);
    req.extensions_mut().insert(WebSession { csrf });
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cookie_is_found_among_others_and_by_its_exact_name() {
        let mut h = HeaderMap::new();
        h.append(header::COOKIE, HeaderValue::from_static("a=1; macp_session_x=no; macp_session=yes"));
        h.append(header::COOKIE, HeaderValue::from_static("b=2"));
        assert_eq!(cookie_value(&h, SESSION_COOKIE), Some("yes"));
        assert_eq!(cookie_value(&h, "b"), Some("2"));
        assert_eq!(cookie_value(&h, "macp"), None);
    }

    #[test]
    fn only_a_place_in_the_page_is_returned_to() {
        assert_eq!(place("#/room/0b9f-aa"), "#/room/0b9f-aa");
        for bad in ["//evil.example", "https://evil.example", "#/x\r\nSet-Cookie:a=b", "/#/", "#/a?b", ""] {
            assert_eq!(place(bad), "", "{bad:?}");
        }
    }

    #[test]
    fn tokens_compare_equal_only_when_equal() {
        assert!(same("abc", "abc"));
        assert!(!same("abc", "abd") && !same("abc", "ab") && !same("", "a"));
    }

    #[test]
    fn random_values_are_256_bits_and_differ() {
        let (a, b) = (random(), random());
        assert_eq!(URL_SAFE_NO_PAD.decode(&a).unwrap().len(), 32);
        assert_ne!(a, b);
    }
}
