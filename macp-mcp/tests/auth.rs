//! OAuth protected resource, against keys generated here (RSA and EC) and a JWKS served over
//! loopback by this test: the negative matrix (each a 401 with its challenge), rotation, the
//! refresh floor, scopes, Cognito-style tokens, the metadata documents, attribution of writes
//! to the token's user, and logs that never contain a token.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lc_rs::encoding::AsDer;
use aws_lc_rs::rsa::{KeyPair as RsaKeyPair, KeySize, PublicKeyComponents};
use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use axum::response::IntoResponse;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use macp_core::{Macp, memory::MemoryStore};
use macp_mcp::auth::{AuthConfig, Verifier};
use macp_mcp::http::{HttpOptions, router_with_auth};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const ISSUER: &str = "https://issuer.example.test";
const AUDIENCE: &str = "macp-test";

/// A signing key and its public JWK.
struct Key {
    kid: String,
    alg: Algorithm,
    encoding: EncodingKey,
    jwk: Value,
    public_der: Vec<u8>,
}

/// The PKCS#1 `RSAPrivateKey` inside a PKCS#8 `PrivateKeyInfo` (the OCTET STRING's contents).
fn pkcs1_of(pkcs8: &[u8]) -> Vec<u8> {
    fn header(b: &[u8], at: usize) -> (usize, usize) {
        let first = b[at + 1] as usize;
        if first < 0x80 {
            return (at + 2, first);
        }
        let n = first & 0x7f;
        let len = b[at + 2..at + 2 + n].iter().fold(0usize, |a, x| (a << 8) | *x as usize);
        (at + 2 + n, len)
    }
    let (body, _) = header(pkcs8, 0); // SEQUENCE
    let (v, vl) = header(pkcs8, body); // version INTEGER
    let (a, al) = header(pkcs8, v + vl); // AlgorithmIdentifier SEQUENCE
    let (k, kl) = header(pkcs8, a + al); // OCTET STRING
    pkcs8[k..k + kl].to_vec()
}

fn rsa_key(kid: &str) -> Key {
    let kp = RsaKeyPair::generate(KeySize::Rsa2048).unwrap();
    let pkcs8 = AsDer::<aws_lc_rs::encoding::Pkcs8V1Der<'_>>::as_der(&kp).unwrap();
    let encoding = EncodingKey::from_rsa_der(&pkcs1_of(pkcs8.as_ref()));
    let public: PublicKeyComponents<Vec<u8>> = kp.public_key().into();
    let public_der = AsDer::<aws_lc_rs::encoding::PublicKeyX509Der<'_>>::as_der(kp.public_key())
        .unwrap()
        .as_ref()
        .to_vec();
    let jwk = json!({"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256", "n": B64.encode(&public.n), "e": B64.encode(&public.e)});
    Key { kid: kid.into(), alg: Algorithm::RS256, encoding, jwk, public_der }
}

fn ec_key(kid: &str) -> Key {
    let rng = aws_lc_rs::rand::SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
    let kp = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref()).unwrap();
    let point = kp.public_key().as_ref().to_vec(); // 0x04 || X || Y
    let jwk = json!({"kty": "EC", "kid": kid, "use": "sig", "alg": "ES256", "crv": "P-256",
        "x": B64.encode(&point[1..33]), "y": B64.encode(&point[33..65])});
    Key {
        kid: kid.into(),
        alg: Algorithm::ES256,
        encoding: EncodingKey::from_ec_der(pkcs8.as_ref()),
        jwk,
        public_der: point,
    }
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

fn claims(sub: &str) -> Value {
    json!({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "iat": now(), "exp": now() + 600, "scope": "macp:read macp:write"})
}

fn sign(key: &Key, claims: &Value) -> String {
    let mut h = Header::new(key.alg);
    h.kid = Some(key.kid.clone());
    jsonwebtoken::encode(&h, claims, &key.encoding).unwrap()
}

/// An issuer: a JWKS endpoint whose key set the test can replace or take down (503), counting
/// fetches, and an OpenID discovery document pointing at it.
struct Jwks {
    url: String,
    base: String,
    keys: Arc<Mutex<Value>>,
    fetches: Arc<AtomicUsize>,
    down: Arc<AtomicBool>,
}

async fn jwks(keys: &[&Key]) -> Jwks {
    let set = Arc::new(Mutex::new(json!({"keys": keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>()})));
    let fetches = Arc::new(AtomicUsize::new(0));
    let down = Arc::new(AtomicBool::new(false));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (s, f, d) = (set.clone(), fetches.clone(), down.clone());
    let discovery = json!({"issuer": base.clone(), "jwks_uri": format!("{base}/oauth2/keys")});
    let app = axum::Router::new()
        .route(
            "/oauth2/keys",
            axum::routing::get(move || {
                let (s, f, d) = (s.clone(), f.clone(), d.clone());
                async move {
                    f.fetch_add(1, Ordering::SeqCst);
                    if d.load(Ordering::SeqCst) {
                        return axum::http::StatusCode::SERVICE_UNAVAILABLE.into_response();
                    }
                    axum::Json(s.lock().unwrap().clone()).into_response()
                }
            }),
        )
        .route(
            "/.well-known/openid-configuration",
            axum::routing::get(move || async move { axum::Json(discovery) }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Jwks { url: format!("{base}/oauth2/keys"), base, keys: set, fetches, down }
}

struct Server {
    base: String,
    macp: Macp,
}

fn config(jwks_url: &str, base: &str) -> AuthConfig {
    AuthConfig {
        issuer: ISSUER.into(),
        jwks_url: Some(jwks_url.into()),
        audience: AUDIENCE.into(),
        audience_claim: "aud".into(),
        user_claim: "sub".into(),
        read_scope: Some("macp:read".into()),
        write_scope: Some("macp:write".into()),
        leeway: Duration::from_secs(30),
        min_refresh: Duration::from_secs(30),
        max_age: Duration::from_secs(3600),
        resource: format!("{base}/mcp"),
        web_client_id: None,
    }
}

async fn serve(make: impl FnOnce(String) -> AuthConfig) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let macp = Macp::builder().store(Arc::new(MemoryStore::new())).build().unwrap();
    let verifier = Verifier::new(make(base.clone())).unwrap();
    let app =
        router_with_auth(macp.clone(), verifier, &HttpOptions::default(), CancellationToken::new()).unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Server { base, macp }
}

/// An MCP `initialize` POST with an optional bearer token: (status, WWW-Authenticate, body).
async fn initialize(base: &str, token: Option<&str>) -> (u16, String, String) {
    let mut req = reqwest::Client::new()
        .post(format!("{base}/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "auth-test", "version": "1"}}})
        .to_string());
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let challenge =
        resp.headers().get("www-authenticate").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    (status, challenge, resp.text().await.unwrap())
}

/// Calls one tool in a fresh MCP session: (HTTP status of the call, WWW-Authenticate, the
/// JSON-RPC result or error).
async fn call_tool(base: &str, token: &str, tool: &str, args: Value) -> (u16, String, Value) {
    call_rpc(base, token, json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": tool, "arguments": args}}))
        .await
}

/// Sends one JSON-RPC request in a fresh MCP session: (HTTP status, WWW-Authenticate, answer).
async fn call_rpc(base: &str, token: &str, request: Value) -> (u16, String, Value) {
    let client = reqwest::Client::new();
    let post = |body: Value, session: Option<&str>| {
        let mut r = client
            .post(format!("{base}/mcp"))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .body(body.to_string());
        if let Some(s) = session {
            r = r.header("mcp-session-id", s);
        }
        r.send()
    };
    let init = post(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
        None,
    )
    .await
    .unwrap();
    assert_eq!(init.status(), 200, "initialize with a valid token");
    let session = init.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    init.text().await.unwrap();
    post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}), Some(&session)).await.unwrap();
    let resp = post(request, Some(&session)).await.unwrap();
    let status = resp.status().as_u16();
    let challenge =
        resp.headers().get("www-authenticate").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    let text = resp.text().await.unwrap();
    let data =
        text.lines().filter_map(|l| l.strip_prefix("data: ")).rfind(|l| !l.is_empty()).unwrap_or(&text);
    (status, challenge, serde_json::from_str(data).unwrap_or(Value::Null))
}

#[track_caller]
fn assert_invalid(res: (u16, String, String), why: &str, base: &str) {
    let (status, challenge, body) = res;
    assert_eq!(status, 401, "{why}: {body}");
    let meta = format!("resource_metadata=\"{base}/.well-known/oauth-protected-resource/mcp\"");
    assert!(challenge.starts_with("Bearer ") && challenge.contains(&meta), "{why}: challenge {challenge}");
    assert!(challenge.contains("error=\"invalid_token\""), "{why}: challenge {challenge}");
    assert!(challenge.contains("error_description="), "{why}: challenge {challenge}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["error"], "invalid_token", "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_token_is_a_401_with_its_challenge() {
    let (rsa, ec, stranger) = (rsa_key("rsa-1"), ec_key("ec-1"), rsa_key("rsa-1"));
    let keys = jwks(&[&rsa, &ec]).await;
    let s = serve(|base| config(&keys.url, &base)).await;
    let b = s.base.as_str();

    // No token: the challenge points at the metadata and names no error (RFC 6750 §3.1).
    let (status, challenge, _) = initialize(b, None).await;
    assert_eq!(status, 401);
    assert_eq!(
        challenge,
        format!("Bearer resource_metadata=\"{b}/.well-known/oauth-protected-resource/mcp\"")
    );

    assert_invalid(initialize(b, Some("not-a-jwt")).await, "malformed", b);
    assert_invalid(
        initialize(b, Some(&sign(&rsa, &json!({"exp": now() + 600, "iss": ISSUER})))).await,
        "no audience",
        b,
    );
    let mut c = claims("alice");
    c["exp"] = json!(now() - 300);
    assert_invalid(initialize(b, Some(&sign(&rsa, &c))).await, "expired", b);
    let mut c = claims("alice");
    c["nbf"] = json!(now() + 600);
    assert_invalid(initialize(b, Some(&sign(&rsa, &c))).await, "not yet valid", b);
    let mut c = claims("alice");
    c["iss"] = json!("https://evil.example.test");
    assert_invalid(initialize(b, Some(&sign(&rsa, &c))).await, "wrong issuer", b);
    let mut c = claims("alice");
    c["aud"] = json!("another-service");
    assert_invalid(initialize(b, Some(&sign(&rsa, &c))).await, "wrong audience", b);
    // Signed by another key that claims the published kid.
    assert_invalid(initialize(b, Some(&sign(&stranger, &claims("alice")))).await, "bad signature", b);
    let unknown = rsa_key("rsa-unknown");
    assert_invalid(initialize(b, Some(&sign(&unknown, &claims("alice")))).await, "unknown kid", b);
    // alg none, with an empty signature.
    let none = format!(
        "{}.{}.",
        B64.encode(json!({"alg": "none", "typ": "JWT", "kid": "rsa-1"}).to_string()),
        B64.encode(claims("alice").to_string())
    );
    assert_invalid(initialize(b, Some(&none)).await, "alg none", b);
    // HS256 keyed with the RSA public key (the classic algorithm confusion).
    let mut h = Header::new(Algorithm::HS256);
    h.kid = Some("rsa-1".into());
    let hs = jsonwebtoken::encode(&h, &claims("alice"), &EncodingKey::from_secret(&rsa.public_der).unwrap())
        .unwrap();
    assert_invalid(initialize(b, Some(&hs)).await, "HS256 with the public key", b);
    // An EC key cannot back an RS256 header.
    let mut h = Header::new(Algorithm::RS256);
    h.kid = Some("ec-1".into());
    let mixed = jsonwebtoken::encode(&h, &claims("alice"), &rsa.encoding).unwrap();
    assert_invalid(initialize(b, Some(&mixed)).await, "key type mismatch", b);
    // A token with neither scope.
    let mut c = claims("alice");
    c["scope"] = json!("openid");
    assert_invalid(initialize(b, Some(&sign(&rsa, &c))).await, "no scope", b);

    // The valid ones pass, RS256 and ES256, with leeway on a just-expired token.
    assert_eq!(initialize(b, Some(&sign(&rsa, &claims("alice")))).await.0, 200);
    assert_eq!(initialize(b, Some(&sign(&ec, &claims("alice")))).await.0, 200);
    let mut c = claims("alice");
    c["exp"] = json!(now() - 5);
    assert_eq!(initialize(b, Some(&sign(&ec, &c))).await.0, 200, "within the 30 s leeway");
    drop(s.macp);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_retires_old_keys_and_unknown_kids_cannot_hammer_the_issuer() {
    let (old, new) = (rsa_key("k-old"), rsa_key("k-new"));
    let keys = jwks(&[&old]).await;
    let s = serve(|base| config(&keys.url, &base)).await;
    assert_eq!(initialize(&s.base, Some(&sign(&old, &claims("alice")))).await.0, 200);
    let before = keys.fetches.load(Ordering::SeqCst);
    // A flood of made-up kids triggers at most one refetch inside the refresh floor.
    for i in 0..30 {
        let mut h = Header::new(Algorithm::RS256);
        h.kid = Some(format!("bogus-{i}"));
        let t = jsonwebtoken::encode(&h, &claims("alice"), &old.encoding).unwrap();
        assert_eq!(initialize(&s.base, Some(&t)).await.0, 401);
    }
    let after = keys.fetches.load(Ordering::SeqCst);
    assert!(after - before <= 1, "{} JWKS fetches for 30 unknown kids", after - before);

    // Rotate: the issuer now publishes only the new key.
    *keys.keys.lock().unwrap() = json!({"keys": [new.jwk.clone()]});
    let s2 = serve(|base| {
        let mut c = config(&keys.url, &base);
        c.min_refresh = Duration::from_millis(0);
        c
    })
    .await;
    assert_eq!(initialize(&s2.base, Some(&sign(&new, &claims("alice")))).await.0, 200, "new key accepted");
    assert_invalid(
        initialize(&s2.base, Some(&sign(&old, &claims("alice")))).await,
        "rotated-away key",
        &s2.base,
    );
    // The first server learns of the rotation from the first token with the new kid, after
    // which the old key is refused there too.
    tokio::time::sleep(Duration::from_millis(10)).await;
    let s3 = serve(|base| {
        let mut c = config(&keys.url, &base);
        c.min_refresh = Duration::from_millis(0);
        c
    })
    .await;
    *keys.keys.lock().unwrap() = json!({"keys": [old.jwk.clone()]});
    assert_eq!(initialize(&s3.base, Some(&sign(&old, &claims("alice")))).await.0, 200);
    *keys.keys.lock().unwrap() = json!({"keys": [new.jwk.clone()]});
    assert_eq!(
        initialize(&s3.base, Some(&sign(&new, &claims("alice")))).await.0,
        200,
        "unknown kid refreshes"
    );
    assert_invalid(
        initialize(&s3.base, Some(&sign(&old, &claims("alice")))).await,
        "old key after rotation",
        &s3.base,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_are_attributed_to_the_token_user_and_scopes_are_enforced() {
    let key = ec_key("ec-1");
    let keys = jwks(&[&key]).await;
    let s = serve(|base| config(&keys.url, &base)).await;
    let alice = sign(&key, &claims("alice@example.com"));
    let (status, _, res) = call_tool(&s.base, &alice, "create_room", json!({"objective": "scoped"})).await;
    assert_eq!(status, 200);
    let room = res["result"]["structuredContent"]["room_id"].as_str().unwrap().to_owned();
    assert_eq!(res["result"]["structuredContent"]["created_by"], "alice@example.com");
    let (_, _, joined) =
        call_tool(&s.base, &alice, "join_room", json!({"room_id": room, "agent_id": "a1"})).await;
    assert_eq!(joined["result"]["structuredContent"]["user_id"], "alice@example.com");

    // A read-only token may read, and is refused writes with 403 insufficient_scope.
    let mut c = claims("reader@example.com");
    c["scope"] = json!("macp:read");
    let reader = sign(&key, &c);
    let (status, _, res) = call_tool(&s.base, &reader, "get_room_summary", json!({"room_id": room})).await;
    assert_eq!(status, 200);
    assert_eq!(res["result"]["isError"], false);
    let (status, challenge, _) =
        call_tool(&s.base, &reader, "post_finding", json!({"room_id": room, "content": "x"})).await;
    assert_eq!(status, 403);
    assert!(
        challenge.contains("error=\"insufficient_scope\"") && challenge.contains("scope=\"macp:write\""),
        "{challenge}"
    );
    // Acting as another user's agent is refused.
    let bob = sign(&key, &claims("bob@example.com"));
    let (_, _, res) =
        call_tool(&s.base, &bob, "post_finding", json!({"room_id": room, "content": "x", "agent_id": "a1"}))
            .await;
    assert_eq!(res["result"]["structuredContent"]["error"]["code"], "permission_denied");
}

/// What the tools say about themselves and what the server enforces agree, tool by tool: every
/// tool published as not read-only refuses a read-only token (403 insufficient_scope), every
/// read-only one lets it through, and none reaches outside its own record (openWorldHint false).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotations_and_enforcement_agree_for_every_tool() {
    let key = ec_key("ec-1");
    let keys = jwks(&[&key]).await;
    let s = serve(|base| config(&keys.url, &base)).await;
    let writer = sign(&key, &claims("alice@example.com"));
    let (_, _, list) = call_tool_method(&s.base, &writer, "tools/list", json!({})).await;
    let tools = list["result"]["tools"].as_array().unwrap().clone();
    assert!(tools.len() >= 15, "{list}");
    let mut c = claims("reader@example.com");
    c["scope"] = json!("macp:read");
    let reader = sign(&key, &c);
    for t in &tools {
        let name = t["name"].as_str().unwrap();
        let a = &t["annotations"];
        let read_only =
            a["readOnlyHint"].as_bool().unwrap_or_else(|| panic!("{name} says whether it writes"));
        assert_eq!(a["openWorldHint"], false, "{name}");
        if !read_only {
            assert!(a["destructiveHint"].is_boolean() && a["idempotentHint"].is_boolean(), "{name}: {a}");
        }
        let (status, challenge, _) = call_tool(&s.base, &reader, name, json!({})).await;
        if read_only {
            assert_eq!(status, 200, "{name} is read-only, so a read-only token may call it");
        } else {
            assert_eq!(status, 403, "{name} writes, so a read-only token is refused");
            assert!(challenge.contains("insufficient_scope"), "{name}: {challenge}");
        }
    }
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "tools/list is in a stable order");
}

/// Any JSON-RPC method in a fresh session: (HTTP status, WWW-Authenticate, the JSON-RPC answer).
async fn call_tool_method(base: &str, token: &str, method: &str, params: Value) -> (u16, String, Value) {
    call_rpc(base, token, json!({"jsonrpc": "2.0", "id": 2, "method": method, "params": params})).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cognito_access_tokens_validate_audience_from_client_id() {
    let key = rsa_key("cognito-1");
    let keys = jwks(&[&key]).await;
    let s = serve(|base| {
        let mut c = config(&keys.url, &base);
        c.audience_claim = "client_id".into();
        c.user_claim = "username".into();
        c.read_scope = None;
        c.write_scope = None;
        c
    })
    .await;
    // Cognito access tokens: no `aud`, `client_id` instead, `token_use: access`.
    let access = json!({"iss": ISSUER, "client_id": AUDIENCE, "token_use": "access", "username": "carol",
        "sub": "3f1c-uuid", "exp": now() + 600, "iat": now()});
    assert_eq!(initialize(&s.base, Some(&sign(&key, &access))).await.0, 200);
    let mut id_token = access.clone();
    id_token["token_use"] = json!("id");
    assert_invalid(initialize(&s.base, Some(&sign(&key, &id_token))).await, "ID token", &s.base);
    let mut other_client = access;
    other_client["client_id"] = json!("someone-else");
    assert_invalid(initialize(&s.base, Some(&sign(&key, &other_client))).await, "other client", &s.base);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_documents_describe_the_protected_resource() {
    let key = ec_key("ec-1");
    let keys = jwks(&[&key]).await;
    let s = serve(|base| config(&keys.url, &base)).await;
    for path in ["/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"] {
        let doc: Value = reqwest::get(format!("{}{path}", s.base)).await.unwrap().json().await.unwrap();
        assert_eq!(doc["resource"], format!("{}/mcp", s.base), "{path}");
        assert_eq!(doc["authorization_servers"], json!([ISSUER]));
        assert_eq!(doc["scopes_supported"], json!(["macp:read", "macp:write"]));
        assert_eq!(doc["bearer_methods_supported"], json!(["header"]));
    }
}

/// A log sink for the test below.
#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Sink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_logged_with_the_reason_and_never_the_token() {
    let sink = Sink::default();
    let s2 = sink.clone();
    let subscriber = tracing_subscriber::fmt().json().with_writer(move || s2.clone()).finish();
    // Global: the server logs from other worker threads. Other tests in this binary log here too.
    let _ = tracing::subscriber::set_global_default(subscriber);
    let key = rsa_key("k1");
    let keys = jwks(&[&key]).await;
    let s = serve(|base| config(&keys.url, &base)).await;
    let mut c = claims("alice");
    c["exp"] = json!(now() - 3600);
    let expired = sign(&key, &c);
    let good = sign(&key, &claims("alice"));
    assert_eq!(initialize(&s.base, Some(&expired)).await.0, 401);
    assert_eq!(initialize(&s.base, Some("garbage-token-value")).await.0, 401);
    assert_eq!(call_tool(&s.base, &good, "list_rooms", json!({})).await.0, 200);
    let logs = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("request refused") && logs.contains("expired"),
        "refusals are logged with a reason:\n{logs}"
    );
    for secret in [expired.as_str(), good.as_str(), "garbage-token-value"] {
        let sig = secret.rsplit('.').next().unwrap();
        assert!(!logs.contains(sig), "a token leaked into the logs");
    }
}

/// The issuer exactly as configured (a trailing `/` included, as Auth0 writes it), and the JWKS
/// found through its OpenID discovery document when no JWKS URL is configured (Keycloak and
/// Okta do not publish at `<issuer>/.well-known/jwks.json`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_jwks_is_discovered_and_the_issuer_matches_exactly() {
    let key = rsa_key("disc-1");
    let keys = jwks(&[&key]).await;
    let issuer = format!("{}/", keys.base);
    let s = serve(|base| {
        let mut c = config(&keys.url, &base);
        c.jwks_url = None;
        c.issuer = issuer.clone();
        c
    })
    .await;
    let mut c = claims("alice");
    c["iss"] = json!(issuer);
    assert_eq!(initialize(&s.base, Some(&sign(&key, &c))).await.0, 200, "discovered keys validate");
    c["iss"] = json!(keys.base);
    assert_invalid(
        initialize(&s.base, Some(&sign(&key, &c))).await,
        "issuer without its trailing slash",
        &s.base,
    );
}

/// While the issuer is down, the keys already fetched keep working and fetches are attempted at
/// most once per refresh floor; with no keys at all the answer is 503 with Retry-After (the
/// token was not judged), never a 401 that would make clients throw valid tokens away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_issuer_outage_keeps_cached_keys_and_never_floods_it() {
    let key = rsa_key("out-1");
    let keys = jwks(&[&key]).await;
    let token = sign(&key, &claims("alice"));
    let s = serve(|base| {
        let mut c = config(&keys.url, &base);
        c.max_age = Duration::from_millis(0); // every request finds the keys stale
        c
    })
    .await;
    assert_eq!(initialize(&s.base, Some(&token)).await.0, 200);
    keys.down.store(true, Ordering::SeqCst);
    let before = keys.fetches.load(Ordering::SeqCst);
    for _ in 0..20 {
        assert_eq!(initialize(&s.base, Some(&token)).await.0, 200, "cached keys still serve");
    }
    assert_eq!(keys.fetches.load(Ordering::SeqCst) - before, 0, "no refetch inside the refresh floor");

    // A server that never got the keys: 503, and one fetch for twenty requests.
    let cold = serve(|base| config(&keys.url, &base)).await;
    let before = keys.fetches.load(Ordering::SeqCst);
    for _ in 0..20 {
        let resp = reqwest::Client::new()
            .post(format!("{}/mcp", cold.base))
            .bearer_auth(&token)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 503);
        assert_eq!(resp.headers()["retry-after"], "30");
        assert!(resp.headers().get("www-authenticate").is_none());
    }
    assert_eq!(keys.fetches.load(Ordering::SeqCst) - before, 1, "one attempt per refresh floor");
    keys.down.store(false, Ordering::SeqCst);
}

/// The scheme is case-insensitive, and a `kid` that cannot go into a header still yields the
/// challenge (the description quotes it in printable ASCII).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_schemes_and_kids_still_get_a_proper_answer() {
    let key = rsa_key("k-1");
    let keys = jwks(&[&key]).await;
    let s = serve(|base| config(&keys.url, &base)).await;
    let resp = reqwest::Client::new()
        .post(format!("{}/mcp", s.base))
        .header("authorization", format!("BEARER {}", sign(&key, &claims("alice"))))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
        .to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "BEARER is Bearer");
    let mut h = Header::new(Algorithm::RS256);
    h.kid = Some("ключ\u{7}\n".into());
    let t = jsonwebtoken::encode(&h, &claims("alice"), &key.encoding).unwrap();
    assert_invalid(initialize(&s.base, Some(&t)).await, "non-ASCII kid", &s.base);
}
