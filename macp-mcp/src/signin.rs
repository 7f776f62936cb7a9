//! Browser sign-in for the web view when auth is on: the OAuth authorization-code flow with PKCE
//! (S256) against the same issuer as the agents' tokens, as a public client (`--web-client-id`;
//! no client secret exists anywhere), ending in a server-side session named by an `HttpOnly`,
//! `SameSite=Strict` cookie.
//!
//! - The page never holds a token: the server exchanges the code, keeps the access token (and
//!   the refresh token, when the issuer gives one) in its memory, and checks the access token
//!   with the same [`Verifier`] on every request, so the person has exactly the scopes and the
//!   attribution their token gives an agent. An expired token is refreshed once; when that
//!   fails the session ends and the page offers the sign-in again.
//! - Login CSRF: the `state` sent to the issuer must come back in the same browser (a `Lax`
//!   cookie set when the flow started), and is good for one use within [`LOGIN_TTL`].
//! - Request forgery: besides the web view's own guards (a JSON `POST` with `X-MACP-Web`, and a
//!   matching `Origin`), a change made with a session cookie must carry the session's CSRF token
//!   in `X-MACP-CSRF`; the page reads it from `/api/me`, which no other origin can read.
//! - Sessions live in this process (a restart asks people to sign in again) and are bounded:
//!   [`MAX_SESSIONS`] at once, [`MAX_PENDING`] unfinished sign-ins, each session at most
//!   [`SESSION_TTL`]. Endpoints come from the issuer's OpenID configuration (or its RFC 8414
//!   metadata).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
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

/// The session cookie.
pub const SESSION_COOKIE: &str = "macp_session";
/// The cookie binding a sign-in in flight to the browser that started it.
const LOGIN_COOKIE: &str = "macp_login";
/// The header carrying the session's CSRF token on changes.
pub const CSRF_TOKEN_HEADER: &str = "x-macp-csrf";
/// How long a person has to finish signing in at the issuer.
pub const LOGIN_TTL: Duration = Duration::from_secs(600);
/// The longest a session lasts, refreshed tokens or not.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// Sessions held at once; a sign-in beyond it is refused (503, retry) until one ends.
pub const MAX_SESSIONS: usize = 10_000;
/// Sign-ins in flight at once (unauthenticated requests create them, so they are bounded).
pub const MAX_PENDING: usize = 1_000;

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

struct Pending {
    code_verifier: String,
    /// The page to return to: a fragment of `/` (`#/room/…`), never another URL.
    next: String,
    at: Instant,
}

struct Session {
    access: String,
    refresh: Option<String>,
    csrf: String,
    at: Instant,
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
    pending: Mutex<HashMap<String, Pending>>,
    sessions: Mutex<HashMap<String, Session>>,
}

impl SignIn {
    /// Sign-in for the server whose public base URL is `public` (`https://…` makes the cookies
    /// `Secure`), as OAuth public client `client_id`.
    pub fn new(verifier: Verifier, client_id: String, public: &str) -> Result<Self, String> {
        let cfg = verifier.config();
        let scope = std::iter::once("openid")
            .chain(cfg.read_scope.as_deref())
            .chain(cfg.write_scope.as_deref())
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
                pending: Mutex::default(),
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

    /// The issuer's endpoints, discovered once.
    async fn endpoints(&self) -> Result<Endpoints, String> {
        let mut held = self.inner.endpoints.lock().await;
        if let Some(e) = held.as_ref() {
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
            match got {
                Ok(v) => match (v["authorization_endpoint"].as_str(), v["token_endpoint"].as_str()) {
                    (Some(a), Some(t)) => {
                        let e = Endpoints { authorize: a.to_owned(), token: t.to_owned() };
                        *held = Some(e.clone());
                        return Ok(e);
                    }
                    _ => last = format!("{url} names no authorization_endpoint and token_endpoint"),
                },
                Err(e) => last = format!("{url}: {e}"),
            }
        }
        Err(format!("the issuer's sign-in endpoints could not be found ({last})"))
    }

    /// Exchanges `form` at the token endpoint: the access token and the refresh token.
    async fn token(&self, form: &[(&str, &str)]) -> Result<(String, Option<String>), String> {
        let ep = self.endpoints().await?;
        let r = self.inner.http.post(&ep.token).form(form).send().await.map_err(|e| e.to_string())?;
        let status = r.status();
        let body: Value = r.json().await.map_err(|e| format!("the token endpoint answered {status}: {e}"))?;
        if !status.is_success() {
            return Err(format!(
                "the token endpoint refused: {} {}",
                body["error"].as_str().unwrap_or("?"),
                body["error_description"].as_str().unwrap_or("")
            ));
        }
        let access =
            body["access_token"].as_str().ok_or("the token endpoint gave no access_token")?.to_owned();
        Ok((access, body["refresh_token"].as_str().map(str::to_owned)))
    }

    fn cookie(&self, name: &str, value: &str, same_site: &str, max_age: Duration) -> HeaderValue {
        let secure = if self.inner.secure { "; Secure" } else { "" };
        let v = format!(
            "{name}={value}; Path=/; HttpOnly; SameSite={same_site}; Max-Age={}{secure}",
            max_age.as_secs()
        );
        HeaderValue::from_str(&v).expect("cookie values are base64url")
    }
}

/// A value of 32 random bytes, base64url.
fn random() -> String {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).expect("the operating system's random source");
    URL_SAFE_NO_PAD.encode(b)
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

fn refuse(status: StatusCode, code: &str, message: String, retryable: bool) -> Response {
    let body = json!({"error": {"code": code, "message": message, "retryable": retryable, "sign_in": "/auth/login"}});
    (status, Json(body)).into_response()
}

fn redirect(to: &str) -> Response {
    (StatusCode::SEE_OTHER, [(header::LOCATION, to.to_owned())]).into_response()
}

#[derive(Deserialize)]
struct LoginQuery {
    #[serde(default)]
    next: String,
}

/// Starts a sign-in: remembers a PKCE verifier under a fresh `state` and sends the browser to
/// the issuer.
async fn login(State(s): State<SignIn>, Query(q): Query<LoginQuery>) -> Response {
    let ep = match s.endpoints().await {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!(error = %e, "sign-in unavailable");
            return refuse(StatusCode::SERVICE_UNAVAILABLE, "backend", e, true);
        }
    };
    // Only a place in this page: anything else would make the sign-in an open redirect.
    let next = if q.next.starts_with("#/") && q.next.len() <= 200 { q.next } else { String::new() };
    let state = random();
    let code_verifier = random();
    let challenge = URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(code_verifier.as_bytes()));
    {
        let mut pending = s.inner.pending.lock().await;
        pending.retain(|_, p| p.at.elapsed() < LOGIN_TTL);
        if pending.len() >= MAX_PENDING {
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "capacity_exceeded",
                format!("{MAX_PENDING} sign-ins are in flight; retry in a minute"),
                true,
            );
        }
        pending.insert(state.clone(), Pending { code_verifier, next, at: Instant::now() });
    }
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
        Err(e) => {
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "backend",
                format!("the issuer's authorization endpoint is not a URL: {e}"),
                false,
            );
        }
    };
    let mut resp = redirect(url.as_str());
    // Lax: it must come back on the issuer's redirect, a cross-site navigation.
    resp.headers_mut().append(header::SET_COOKIE, s.cookie(LOGIN_COOKIE, &state, "Lax", LOGIN_TTL));
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
    let Some(state) = q.state.filter(|st| cookie_value(&headers, LOGIN_COOKIE) == Some(st.as_str())) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "invalid_input",
            "this sign-in was not started in this browser (state mismatch); start again".into(),
            false,
        );
    };
    let Some(p) = s.inner.pending.lock().await.remove(&state).filter(|p| p.at.elapsed() < LOGIN_TTL) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "invalid_input",
            "this sign-in has expired or was already used; start again".into(),
            false,
        );
    };
    if let Some(e) = q.error {
        let why = q.error_description.unwrap_or_default();
        return refuse(
            StatusCode::FORBIDDEN,
            "unauthenticated",
            format!("the issuer refused: {e} {why}"),
            false,
        );
    }
    let Some(code) = q.code else {
        return refuse(StatusCode::BAD_REQUEST, "invalid_input", "the issuer sent no code".into(), false);
    };
    let (access, refresh) = match s
        .token(&[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("redirect_uri", &s.inner.redirect_uri),
            ("client_id", &s.inner.client_id),
            ("code_verifier", &p.code_verifier),
        ])
        .await
    {
        Ok(t) => t,
        Err(e) => {
            tracing::info!(reason = %e, "sign-in refused");
            return refuse(StatusCode::FORBIDDEN, "unauthenticated", e, false);
        }
    };
    let who = match s.inner.verifier.verify(&access).await {
        Ok(w) => w,
        Err(Denied::Token(r)) => {
            tracing::info!(reason = %r.0, "sign-in refused");
            return refuse(StatusCode::FORBIDDEN, "unauthenticated", r.0, false);
        }
        Err(Denied::KeysUnavailable(e)) => {
            return refuse(StatusCode::SERVICE_UNAVAILABLE, "backend", e, true);
        }
    };
    let id = random();
    {
        let mut sessions = s.inner.sessions.lock().await;
        if sessions.len() >= MAX_SESSIONS {
            sessions.retain(|_, x| x.at.elapsed() < SESSION_TTL);
        }
        if sessions.len() >= MAX_SESSIONS {
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "capacity_exceeded",
                format!("{MAX_SESSIONS} sessions are open; retry later"),
                true,
            );
        }
        sessions.insert(id.clone(), Session { access, refresh, csrf: random(), at: Instant::now() });
    }
    tracing::info!(user = %who.principal.user_id, "signed in to the web view");
    let mut resp = redirect(&format!("/{}", p.next));
    let h = resp.headers_mut();
    h.append(header::SET_COOKIE, s.cookie(SESSION_COOKIE, &id, "Strict", SESSION_TTL));
    h.append(header::SET_COOKIE, s.cookie(LOGIN_COOKIE, "", "Lax", Duration::ZERO));
    resp
}

/// Ends the session (the web view's guard has already checked the change headers).
async fn logout(State(s): State<SignIn>, headers: HeaderMap) -> Response {
    if let Some(id) = cookie_value(&headers, SESSION_COOKIE) {
        let mut sessions = s.inner.sessions.lock().await;
        let ok = sessions.get(id).is_some_and(|x| {
            headers.get(CSRF_TOKEN_HEADER).and_then(|v| v.to_str().ok()) == Some(x.csrf.as_str())
        });
        if !ok {
            return refuse(
                StatusCode::FORBIDDEN,
                "csrf",
                format!("signing out needs `{CSRF_TOKEN_HEADER}`"),
                false,
            );
        }
        sessions.remove(id);
    }
    let mut resp = Json(json!({"signed_out": true})).into_response();
    resp.headers_mut().append(header::SET_COOKIE, s.cookie(SESSION_COOKIE, "", "Strict", Duration::ZERO));
    resp
}

/// The layer on `/api/`: a bearer token is checked as on `/mcp`; otherwise the session cookie
/// names a session whose token is checked (refreshed once if it has expired), and a change must
/// carry the session's CSRF token.
pub async fn authenticate(State(s): State<SignIn>, mut req: Request, next: Next) -> Response {
    if req.headers().contains_key(header::AUTHORIZATION) {
        return crate::auth::require_token(State(s.inner.verifier.clone()), req, next).await;
    }
    let Some(id) = cookie_value(req.headers(), SESSION_COOKIE).map(str::to_owned) else {
        return refuse(StatusCode::UNAUTHORIZED, "unauthenticated", "sign in first".into(), false);
    };
    let held = {
        let sessions = s.inner.sessions.lock().await;
        sessions
            .get(&id)
            .filter(|x| x.at.elapsed() < SESSION_TTL)
            .map(|x| (x.access.clone(), x.refresh.clone(), x.csrf.clone()))
    };
    let Some((access, refresh, csrf)) = held else {
        s.inner.sessions.lock().await.remove(&id);
        return refuse(
            StatusCode::UNAUTHORIZED,
            "unauthenticated",
            "your session has ended; sign in again".into(),
            false,
        );
    };
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let sent = req.headers().get(CSRF_TOKEN_HEADER).and_then(|v| v.to_str().ok());
        if sent != Some(csrf.as_str()) {
            return refuse(
                StatusCode::FORBIDDEN,
                "csrf",
                format!("a change needs this session's `{CSRF_TOKEN_HEADER}` token (from /api/me)"),
                false,
            );
        }
    }
    let who = match s.inner.verifier.verify(&access).await {
        Ok(w) => w,
        Err(Denied::KeysUnavailable(e)) => {
            return refuse(StatusCode::SERVICE_UNAVAILABLE, "backend", e, true);
        }
        Err(Denied::Token(first)) => {
            // Expired, most likely: one refresh, and the session goes on with the new tokens.
            let renewed = match &refresh {
                None => Err(first.0),
                Some(r) => match s
                    .token(&[
                        ("grant_type", "refresh_token"),
                        ("refresh_token", r),
                        ("client_id", &s.inner.client_id),
                    ])
                    .await
                {
                    Err(e) => Err(e),
                    Ok((access, new_refresh)) => match s.inner.verifier.verify(&access).await {
                        Ok(w) => {
                            if let Some(x) = s.inner.sessions.lock().await.get_mut(&id) {
                                x.access = access;
                                x.refresh = new_refresh.or(refresh);
                            }
                            Ok(w)
                        }
                        Err(Denied::Token(r)) => Err(r.0),
                        Err(Denied::KeysUnavailable(e)) => Err(e),
                    },
                },
            };
            match renewed {
                Ok(w) => w,
                Err(why) => {
                    tracing::info!(reason = %why, "web session ended");
                    s.inner.sessions.lock().await.remove(&id);
                    return refuse(
                        StatusCode::UNAUTHORIZED,
                        "unauthenticated",
                        format!("your session has ended ({why}); sign in again"),
                        false,
                    );
                }
            }
        }
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
    fn random_values_are_256_bits_and_differ() {
        let (a, b) = (random(), random());
        assert_eq!(URL_SAFE_NO_PAD.decode(&a).unwrap().len(), 32);
        assert_ne!(a, b);
    }
}
