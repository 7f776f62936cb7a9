//! OAuth 2.1 protected resource: every request to `/mcp` carries a bearer JWT issued by the
//! configured authorization server (Amazon Cognito, or any OIDC issuer), validated here, and
//! mapped to the person whose actions are recorded.
//!
//! - 401 with `WWW-Authenticate: Bearer resource_metadata="…"` (RFC 9728) and, when a token was
//!   presented, `error="invalid_token"` and a description (RFC 6750); a JSON body says the same.
//! - Protected-resource metadata at `/.well-known/oauth-protected-resource/mcp` and
//!   `/.well-known/oauth-protected-resource`.
//! - Signatures checked against the issuer's JWKS (its URL configured, or discovered from
//!   `<issuer>/.well-known/openid-configuration`): fetched over HTTP, cached, refreshed when a
//!   token names an unknown `kid` and every [`AuthConfig::max_age`], but never attempted more
//!   than once per [`AuthConfig::min_refresh`], so neither made-up kids nor an issuer outage make
//!   every request a fetch. While the issuer is down the last keys stay in use; with no keys at
//!   all, requests get 503 (retry later), not 401 (which tells clients to drop their token).
//! - Algorithms: RS256 and ES256 only, and only with a key of the matching type (never `none`,
//!   never an HMAC algorithm against a public key).
//! - `iss` exact; audience from a configurable claim (`aud`, or `client_id` for Cognito access
//!   tokens, which carry no `aud`); `exp`/`nbf` with a small leeway; a `token_use` claim, when
//!   present, must be `access` (Cognito ID tokens are refused).
//! - Scopes (`scope` string or `scp` list): when configured, write tools need the write scope
//!   (else 403 `insufficient_scope` with the RFC 6750 challenge) and every call needs the read
//!   or the write scope.
//! - Tokens never reach the logs: a refusal is logged with its reason only.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use macp_core::Principal;
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::http::Rpc;
use crate::server::Authenticated;

/// How tokens are validated.
#[derive(Debug, Clone)]
pub struct AuthConfig {
    /// Expected `iss`.
    pub issuer: String,
    /// Where the issuer publishes its keys; `None`: the `jwks_uri` of the issuer's OpenID
    /// discovery document, else `<issuer>/.well-known/jwks.json` (Cognito's location).
    pub jwks_url: Option<String>,
    /// Expected audience value.
    pub audience: String,
    /// Claim holding the audience (`aud`; `client_id` for Cognito access tokens).
    pub audience_claim: String,
    /// Claim holding the user id (`sub`, `email`, `username`, …).
    pub user_claim: String,
    /// Scope that allows read tools (enforced only when set).
    pub read_scope: Option<String>,
    /// Scope that allows write tools (enforced only when set).
    pub write_scope: Option<String>,
    /// Clock skew tolerated on `exp` and `nbf`.
    pub leeway: Duration,
    /// Shortest interval between two JWKS fetches triggered by unknown kids.
    pub min_refresh: Duration,
    /// Longest time keys are cached before a refetch.
    pub max_age: Duration,
    /// The MCP endpoint's canonical URL (the `resource`).
    pub resource: String,
    /// The OAuth public client the web view signs people in as (authorization code + PKCE);
    /// `None`: the page cannot sign in, and `/api/` takes bearer tokens only.
    pub web_client_id: Option<String>,
}

impl AuthConfig {
    /// The URL of the protected-resource metadata, as advertised in challenges.
    pub fn metadata_url(&self) -> String {
        format!("{}/.well-known/oauth-protected-resource/mcp", self.base_url())
    }

    /// The server's public base URL: the resource without `/mcp`.
    pub fn base_url(&self) -> &str {
        self.resource.trim_end_matches("/mcp").trim_end_matches('/')
    }

    /// The configured scopes, read then write.
    pub fn scopes(&self) -> impl Iterator<Item = String> + '_ {
        self.read_scope.iter().chain(self.write_scope.iter()).cloned()
    }

    /// The metadata document (RFC 9728).
    pub fn metadata(&self) -> Value {
        let scopes: Vec<String> = self.scopes().collect();
        json!({
            "resource": self.resource,
            "authorization_servers": [self.issuer],
            "scopes_supported": scopes,
            "bearer_methods_supported": ["header"],
            "resource_name": "MACP",
        })
    }
}

/// Why a token was refused: the `error_description` and the log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal(pub String);

/// Why a request could not be authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// The token is not acceptable (401 `invalid_token`).
    Token(Refusal),
    /// The issuer's keys cannot be had right now and none are cached (503: retry later, the
    /// token may be fine).
    KeysUnavailable(String),
}

impl From<Refusal> for Denied {
    fn from(r: Refusal) -> Self {
        Denied::Token(r)
    }
}

#[derive(Debug, Default)]
struct KeyCache {
    keys: HashMap<String, Jwk>,
    /// Last successful fetch.
    fetched: Option<Instant>,
    /// Last fetch attempt, successful or not.
    attempted: Option<Instant>,
    /// The JWKS URL found by discovery.
    discovered: Option<String>,
}

/// Validates bearer tokens against one issuer.
#[derive(Debug, Clone)]
pub struct Verifier {
    cfg: Arc<AuthConfig>,
    http: reqwest::Client,
    cache: Arc<Mutex<KeyCache>>,
}

impl Verifier {
    /// A verifier; keys are fetched on first use.
    pub fn new(cfg: AuthConfig) -> Result<Self, String> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("cannot build the HTTP client for JWKS: {e}"))?;
        Ok(Self { cfg: Arc::new(cfg), http, cache: Arc::default() })
    }

    /// The configuration.
    pub fn config(&self) -> &AuthConfig {
        &self.cfg
    }

    /// The JWKS URL: configured, else discovered once from the issuer's OpenID configuration,
    /// else Cognito's `<issuer>/.well-known/jwks.json`.
    async fn jwks_url(&self, c: &mut KeyCache) -> String {
        if let Some(u) = &self.cfg.jwks_url {
            return u.clone();
        }
        if let Some(u) = &c.discovered {
            return u.clone();
        }
        let base = self.cfg.issuer.trim_end_matches('/');
        let found = async {
            let doc: Value = self
                .http
                .get(format!("{base}/.well-known/openid-configuration"))
                .send()
                .await
                .ok()?
                .error_for_status()
                .ok()?
                .json()
                .await
                .ok()?;
            doc["jwks_uri"].as_str().map(str::to_owned)
        }
        .await;
        match found {
            Some(u) => {
                tracing::info!(jwks_url = %u, "JWKS location from the issuer's OpenID configuration");
                c.discovered = Some(u.clone());
                u
            }
            None => format!("{base}/.well-known/jwks.json"),
        }
    }

    async fn fetch(&self, c: &mut KeyCache) -> Result<HashMap<String, Jwk>, String> {
        let url = self.jwks_url(c).await;
        let set: JwkSet = self
            .http
            .get(&url)
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .map_err(|e| format!("the issuer's keys could not be fetched from {url}: {e}"))?
            .json()
            .await
            .map_err(|e| format!("the issuer's key set at {url} is not valid JWKS: {e}"))?;
        Ok(set.keys.into_iter().filter_map(|k| k.common.key_id.clone().map(|kid| (kid, k))).collect())
    }

    /// Refetches the keys unless the last attempt was under `min_refresh` ago. A failed fetch
    /// keeps the keys already held.
    async fn refresh(&self, c: &mut KeyCache) -> Result<(), String> {
        if c.attempted.is_some_and(|t| t.elapsed() < self.cfg.min_refresh) {
            return Ok(());
        }
        c.attempted = Some(Instant::now());
        match self.fetch(c).await {
            Ok(keys) => {
                c.keys = keys;
                c.fetched = Some(Instant::now());
                Ok(())
            }
            Err(e) => {
                tracing::warn!(error = %e, cached_keys = c.keys.len(), "JWKS refresh failed");
                Err(e)
            }
        }
    }

    /// The key for `kid`, refreshing the cache when it is stale or when the kid is unknown.
    async fn key(&self, kid: &str) -> Result<Jwk, Denied> {
        let mut c = self.cache.lock().await;
        if c.fetched.is_none_or(|t| t.elapsed() > self.cfg.max_age) {
            let r = self.refresh(&mut c).await;
            if c.keys.is_empty() {
                return Err(Denied::KeysUnavailable(
                    r.err()
                        .unwrap_or_else(|| "the issuer's keys are not available yet; retry shortly".into()),
                ));
            }
        }
        if let Some(k) = c.keys.get(kid) {
            return Ok(k.clone());
        }
        let _ = self.refresh(&mut c).await;
        if let Some(k) = c.keys.get(kid) {
            return Ok(k.clone());
        }
        Err(Refusal(format!(
            "the token is signed with a key (`kid`) the issuer does not publish: {}",
            printable(kid)
        ))
        .into())
    }

    /// Validates a bearer token: the person and whether they may write.
    pub async fn verify(&self, token: &str) -> Result<Authenticated, Denied> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| Refusal(format!("the token is not a valid JWT: {e}")))?;
        if !matches!(header.alg, Algorithm::RS256 | Algorithm::ES256) {
            return Err(
                Refusal(format!("algorithm {:?} is not accepted; use RS256 or ES256", header.alg)).into()
            );
        }
        let kid = header.kid.ok_or_else(|| Refusal("the token has no `kid` header".into()))?;
        let jwk = self.key(&kid).await?;
        self.validate(token, header.alg, &kid, &jwk).map_err(Denied::Token)
    }

    /// Signature and claims, against the issuer's key `jwk`.
    fn validate(&self, token: &str, alg: Algorithm, kid: &str, jwk: &Jwk) -> Result<Authenticated, Refusal> {
        let kid = printable(kid);
        let header = jsonwebtoken::Header { alg, ..Default::default() };
        let key_matches = matches!(
            (&jwk.algorithm, header.alg),
            (AlgorithmParameters::RSA(_), Algorithm::RS256)
                | (AlgorithmParameters::EllipticCurve(_), Algorithm::ES256)
        );
        if !key_matches {
            return Err(Refusal(format!("key `{kid}` does not fit algorithm {:?}", header.alg)));
        }
        let key = DecodingKey::from_jwk(jwk).map_err(|e| Refusal(format!("key `{kid}` is unusable: {e}")))?;
        let mut v = Validation::new(header.alg);
        v.algorithms = vec![header.alg];
        v.leeway = self.cfg.leeway.as_secs();
        v.validate_nbf = true;
        v.set_issuer(&[&self.cfg.issuer]);
        v.set_required_spec_claims(&["exp", "iss"]);
        v.validate_aud = false; // checked below, from the configured claim
        let data = jsonwebtoken::decode::<Value>(token, &key, &v).map_err(|e| {
            use jsonwebtoken::errors::ErrorKind;
            Refusal(match e.kind() {
                ErrorKind::ExpiredSignature => "the token has expired".into(),
                ErrorKind::ImmatureSignature => "the token is not valid yet (nbf)".into(),
                ErrorKind::InvalidIssuer => "the token was issued by another issuer".into(),
                ErrorKind::InvalidSignature => "the token's signature does not verify".into(),
                ErrorKind::MissingRequiredClaim(c) => format!("the token lacks the `{c}` claim"),
                _ => format!("the token is invalid: {e}"),
            })
        })?;
        let claims = data.claims;
        let aud_ok = match claims.get(&self.cfg.audience_claim) {
            Some(Value::String(s)) => *s == self.cfg.audience,
            Some(Value::Array(a)) => a.iter().any(|x| x.as_str() == Some(self.cfg.audience.as_str())),
            _ => false,
        };
        if !aud_ok {
            return Err(Refusal(format!(
                "the token is not for this server (claim `{}`)",
                self.cfg.audience_claim
            )));
        }
        if let Some(u) = claims.get("token_use")
            && u.as_str() != Some("access")
        {
            return Err(Refusal("only access tokens are accepted (token_use must be `access`)".into()));
        }
        let user = claims.get(&self.cfg.user_claim).and_then(Value::as_str).ok_or_else(|| {
            Refusal(format!("the token has no `{}` claim to identify the user", self.cfg.user_claim))
        })?;
        let principal =
            Principal::new(user).map_err(|e| Refusal(format!("the user claim is unusable: {e}")))?;
        let scopes: Vec<String> = match (claims.get("scope"), claims.get("scp")) {
            (Some(Value::String(s)), _) => s.split_whitespace().map(str::to_owned).collect(),
            (_, Some(Value::Array(a))) => a.iter().filter_map(|x| x.as_str().map(str::to_owned)).collect(),
            (_, Some(Value::String(s))) => s.split_whitespace().map(str::to_owned).collect(),
            _ => Vec::new(),
        };
        let has = |s: &Option<String>| s.as_ref().is_some_and(|s| scopes.contains(s));
        let can_write = self.cfg.write_scope.is_none() || has(&self.cfg.write_scope);
        let can_read =
            self.cfg.read_scope.is_none() || has(&self.cfg.read_scope) || has(&self.cfg.write_scope);
        if !can_read {
            return Err(Refusal("the token carries neither the read nor the write scope".into()));
        }
        Ok(Authenticated { principal, can_write })
    }
}

/// `s` as it may appear in a header value and a log line: printable ASCII, at most 64 chars.
fn printable(s: &str) -> String {
    let mut out: String = s.chars().filter(|c| c.is_ascii_graphic() || *c == ' ').take(64).collect();
    if out.len() < s.len() {
        out.push_str("...");
    }
    out
}

fn quote(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "'")
}

/// A 401 with the RFC 6750 / RFC 9728 challenge and a JSON body.
fn unauthorized(cfg: &AuthConfig, refusal: Option<&Refusal>) -> Response {
    let mut challenge = format!("Bearer resource_metadata=\"{}\"", cfg.metadata_url());
    let body = match refusal {
        Some(r) => {
            challenge.push_str(&format!(", error=\"invalid_token\", error_description=\"{}\"", quote(&r.0)));
            json!({"error": "invalid_token", "error_description": r.0})
        }
        None => {
            json!({"error": "unauthorized", "error_description": "this server needs a bearer token; see the resource metadata"})
        }
    };
    let mut resp = (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
    // A description that cannot be a header value still leaves the challenge itself.
    let fallback = || {
        let error = if refusal.is_some() { ", error=\"invalid_token\"" } else { "" };
        HeaderValue::from_str(&format!("Bearer resource_metadata=\"{}\"{error}", cfg.metadata_url()))
    };
    if let Ok(v) = HeaderValue::from_str(&challenge).or_else(|_| fallback()) {
        resp.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    resp
}

/// A 403 `insufficient_scope` naming the scope needed. The challenge is RFC 6750's; the body is a
/// JSON-RPC error for the refused call, so MCP clients show the reason to the agent.
fn insufficient_scope(cfg: &AuthConfig, scope: &str, tool: &str, id: Value) -> Response {
    let challenge = format!(
        "Bearer resource_metadata=\"{}\", error=\"insufficient_scope\", scope=\"{}\", error_description=\"{} needs the {} scope\"",
        cfg.metadata_url(),
        quote(scope),
        quote(tool),
        quote(scope)
    );
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {
        "code": -32001,
        "message": format!("insufficient_scope: {tool} needs the {scope} scope; this token may only call read tools"),
        "data": {"error": "insufficient_scope", "scope": scope, "tool": tool},
    }});
    let mut resp = (StatusCode::FORBIDDEN, axum::Json(body)).into_response();
    if let Ok(v) = HeaderValue::from_str(&challenge) {
        resp.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    resp
}

/// The axum middleware guarding `/mcp`. It runs inside [`crate::http::whole_message`], which has
/// read the body and says which tool a POST calls.
pub async fn require_token(State(v): State<Verifier>, mut req: Request, next: Next) -> Response {
    let cfg = v.config().clone();
    let token = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, t)| t.trim().to_owned());
    let Some(token) = token else {
        tracing::info!(reason = "no bearer token", "request refused");
        return unauthorized(&cfg, None);
    };
    let who = match v.verify(&token).await {
        Ok(a) => a,
        Err(Denied::Token(r)) => {
            tracing::info!(reason = %r.0, "request refused");
            return unauthorized(&cfg, Some(&r));
        }
        Err(Denied::KeysUnavailable(why)) => {
            tracing::warn!(reason = %why, "request refused: the issuer's keys are unavailable");
            let body = json!({"error": "temporarily_unavailable", "error_description": format!(
                "the authorization server's keys cannot be fetched ({why}); the token was not judged, retry later")});
            let mut resp = (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response();
            resp.headers_mut().insert(header::RETRY_AFTER, cfg.min_refresh.as_secs().max(1).into());
            return resp;
        }
    };
    if !who.can_write
        && let Some(scope) = &cfg.write_scope
        && let Some(rpc) = req.extensions().get::<Rpc>()
        && let Some(tool) = rpc.tool.as_deref().filter(|t| crate::access::writes(t))
    {
        tracing::info!(user = %who.principal.user_id, tool, reason = "insufficient_scope", "request refused");
        return insufficient_scope(&cfg, scope, tool, rpc.id.clone());
    }
    req.extensions_mut().insert(who);
    next.run(req).await
}

/// The protected-resource metadata handler.
pub async fn metadata(State(v): State<Verifier>) -> Response {
    axum::Json(v.config().metadata()).into_response()
}
