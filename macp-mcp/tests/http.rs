//! The Streamable HTTP endpoint at the protocol level, with plain HTTP clients: what a session's
//! end looks like on the wire, calls on one kept-alive connection, and what answers a request that
//! is not one JSON-RPC message or is refused.

mod common;

use std::sync::Arc;

use std::time::{Duration, Instant};

use common::{Raw, mcp_headers, message, open_session};
use macp_core::{Macp, Principal, memory::MemoryStore};
use macp_mcp::auth::{AuthConfig, Verifier};
use macp_mcp::http::{HttpOptions, router, router_with_auth};
use serde_json::json;
use tokio_util::sync::CancellationToken;

async fn serve() -> (String, CancellationToken) {
    let macp = Macp::builder().store(Arc::new(MemoryStore::new())).build().unwrap();
    let ct = CancellationToken::new();
    let app = router(macp, Some(Principal::new("local").unwrap()), &HttpOptions::default(), ct.child_token());
    (spawn(app).await, ct)
}

/// Serves `app` on a free loopback port the way `macp serve` does; the base URL.
async fn spawn(app: axum::Router) -> String {
    let listener = macp_mcp::http::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(macp_mcp::serve::serve(listener, app, std::future::pending(), || {}));
    base
}

/// An auth-on server whose issuer is never asked (requests without a token are refused before).
async fn serve_with_auth() -> String {
    let macp = Macp::builder().store(Arc::new(MemoryStore::new())).build().unwrap();
    let cfg = AuthConfig {
        issuer: "https://issuer.example.test".into(),
        jwks_url: Some("http://127.0.0.1:9/keys".into()),
        audience: "macp".into(),
        audience_claim: "aud".into(),
        user_claim: "sub".into(),
        read_scope: None,
        write_scope: None,
        leeway: Duration::from_secs(30),
        min_refresh: Duration::from_secs(30),
        max_age: Duration::from_secs(3600),
        resource: "http://127.0.0.1/mcp".into(),
        web_client_id: None,
    };
    let app = router_with_auth(
        macp,
        Verifier::new(cfg).unwrap(),
        &HttpOptions::default(),
        CancellationToken::new(),
    )
    .unwrap();
    spawn(app).await
}

fn addr(base: &str) -> &str {
    base.trim_start_matches("http://")
}

fn post(
    client: &reqwest::Client,
    base: &str,
    session: Option<&str>,
    body: serde_json::Value,
) -> reqwest::RequestBuilder {
    let mut r = client
        .post(format!("{base}/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .body(body.to_string());
    if let Some(s) = session {
        r = r.header("mcp-session-id", s);
    }
    r
}

/// Clients end a session with `DELETE /mcp`; the answer is `204 No Content` (the Python client
/// warns on anything but 200 or 204), and the session id is unknown from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ending_a_session_answers_204_and_forgets_it() {
    let (base, ct) = serve().await;
    let client = reqwest::Client::new();
    let init = post(
        &client,
        &base,
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(init.status(), 200);
    let session = init.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    init.text().await.unwrap();
    let ack = post(
        &client,
        &base,
        Some(&session),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(ack.status(), 202, "a notification is still acknowledged with 202");

    let end = client
        .delete(format!("{base}/mcp"))
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert_eq!(end.status(), 204);
    assert!(end.bytes().await.unwrap().is_empty());

    let after =
        post(&client, &base, Some(&session), json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
            .send()
            .await
            .unwrap();
    assert_eq!(after.status(), 404, "the ended session is unknown");
    ct.cancel();
}

/// Every socket the server accepts has `TCP_NODELAY`: rmcp writes an answer in pieces, and with
/// Nagle's algorithm each piece after the first waits for the client's delayed acknowledgement.
#[tokio::test]
async fn accepted_sockets_have_tcp_nodelay() {
    let mut listener = macp_mcp::http::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = axum::serve::Listener::local_addr(&listener).unwrap();
    let client = tokio::spawn(async move { tokio::net::TcpStream::connect(addr).await.unwrap() });
    let (accepted, _) = axum::serve::Listener::accept(&mut listener).await;
    assert!(accepted.nodelay().unwrap(), "TCP_NODELAY must be set on accepted sockets");
    drop(client.await.unwrap());
}

/// Many calls on one kept-alive connection each answer at once, as one JSON message. A 40 ms
/// stall per call (Nagle meeting delayed ACK) only shows on a reused connection: a fresh one
/// per request (curl) never sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_on_one_kept_alive_connection_never_stall() {
    let (base, ct) = serve().await;
    let mut raw = Raw::connect(addr(&base)).await;
    let session = open_session(&mut raw).await;
    let calls = 40;
    let started = Instant::now();
    for i in 0..calls {
        let call = json!({"jsonrpc": "2.0", "id": 10 + i, "method": "tools/call",
            "params": {"name": "list_rooms", "arguments": {}}});
        let a = raw
            .request("POST", "/mcp", &mcp_headers(Some(&session)), call.to_string().as_bytes())
            .await
            .unwrap();
        assert_eq!(a.status, 200);
        assert_eq!(a.header("content-type"), Some("application/json"), "one message, sent whole as JSON");
        assert_eq!(message(&a)["id"], 10 + i);
    }
    let per_call = started.elapsed() / calls as u32;
    // Unstalled, a call takes well under a millisecond here; stalled, about 40 ms.
    assert!(per_call < Duration::from_millis(15), "{per_call:?} per call on a kept-alive connection");
    ct.cancel();
}

/// A request refused before anything reads its body (here a 401: no token) must not leave the
/// body on the socket: the body is read first, so the same connection serves the next request.
/// The body arrives 100 ms after the headers, as from a client that streams it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_request_leaves_its_connection_usable() {
    let base = serve_with_auth().await;
    let mut raw = Raw::connect(addr(&base)).await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    .to_string();
    for round in 0..3 {
        let head = raw.head("POST", "/mcp", &mcp_headers(None), body.len());
        raw.send(head.as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        raw.send(body.as_bytes()).await.unwrap();
        let a = raw.answer().await.unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_eq!(a.status, 401, "round {round}");
        assert_ne!(a.header("connection"), Some("close"), "round {round}: nothing left unread, so keep it");
    }
}

/// What is not one JSON-RPC message is answered `400` with a JSON-RPC error saying what it is:
/// a parse error (-32700) for broken JSON and an empty body, an invalid request (-32600) for a
/// batch or a value that is not an object. Never `415`: the content type is right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_is_not_one_message_gets_400_with_a_json_rpc_error() {
    let (base, ct) = serve().await;
    let mut raw = Raw::connect(addr(&base)).await;
    let session = open_session(&mut raw).await;
    let batch = json!([{"jsonrpc": "2.0", "id": 2, "method": "tools/list"}]).to_string();
    for (body, code, says) in [
        ("{\"jsonrpc\": \"2.0\", \"id\":", -32700, "Parse error"),
        ("", -32700, "empty"),
        ("   ", -32700, "empty"),
        (batch.as_str(), -32600, "batches are not supported"),
        ("42", -32600, "JSON object"),
        ("{\"jsonrpc\": \"2.0\", \"id\": 3, \"method\": 7}", -32600, "Invalid Request"),
    ] {
        let a = raw.request("POST", "/mcp", &mcp_headers(Some(&session)), body.as_bytes()).await.unwrap();
        assert_eq!(a.status, 400, "{body:?}");
        let e = a.json();
        assert_eq!(e["error"]["code"], code, "{body:?}: {e}");
        assert!(e["error"]["message"].as_str().unwrap().contains(says), "{body:?}: {e}");
    }
    // The connection and the session still work.
    let call = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"});
    let a =
        raw.request("POST", "/mcp", &mcp_headers(Some(&session)), call.to_string().as_bytes()).await.unwrap();
    assert_eq!(a.status, 200);
    assert!(message(&a)["result"]["tools"].is_array());
    ct.cancel();
}

/// A body over the message limit cannot be read to its end, so its 413 says `Connection: close`
/// (a client must not reuse a connection with unread bytes on it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversize_body_gets_413_and_says_the_connection_closes() {
    let (base, ct) = serve().await;
    let mut raw = Raw::connect(addr(&base)).await;
    let big = vec![b' '; macp_mcp::http::MAX_MESSAGE_BYTES + 1];
    let head = raw.head("POST", "/mcp", &mcp_headers(None), big.len());
    raw.send(head.as_bytes()).await.unwrap();
    // The server may answer and close before the whole body is sent.
    let _ = raw.send(&big).await;
    let a = raw.answer().await.unwrap();
    assert_eq!(a.status, 413);
    assert_eq!(a.header("connection"), Some("close"));
    ct.cancel();
}

/// A tool call over raw HTTP on `raw`'s server, in the session `session`; its result.
async fn call_tool(
    raw: &mut Raw,
    session: &str,
    id: u64,
    name: &str,
    args: serde_json::Value,
) -> serde_json::Value {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": args}});
    let a =
        raw.request("POST", "/mcp", &mcp_headers(Some(session)), body.to_string().as_bytes()).await.unwrap();
    assert_eq!(a.status, 200, "{name}: {}", String::from_utf8_lossy(&a.body));
    message(&a)["result"].clone()
}

/// Two servers of one store, as behind a load balancer that sends each request anywhere (or
/// one server and its replacement after a restart): a session opened and joined on the first
/// carries on at the second, whose writes act as the joined agent without naming it and without
/// joining again; a join made at either is what both act as; a stateless request naming the
/// session is no part of it; ending the session at one ends it at every server, one holding it
/// in memory included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_carries_on_at_another_server_of_the_store_without_joining_again() {
    let macp = Macp::builder().store(Arc::new(MemoryStore::new())).build().unwrap();
    let local = Some(Principal::new("local").unwrap());
    let ct = CancellationToken::new();
    let mut servers = Vec::new();
    for _ in 0..3 {
        let app = router(macp.clone(), local.clone(), &HttpOptions::default(), ct.child_token());
        servers.push(spawn(app).await);
    }
    let mut a = Raw::connect(addr(&servers[0])).await;
    let session = open_session(&mut a).await;
    let room = call_tool(&mut a, &session, 2, "create_room", json!({"objective": "Find the 502s"})).await;
    let room = room["structuredContent"]["room_id"].as_str().unwrap().to_owned();
    let joined =
        call_tool(&mut a, &session, 3, "join_room", json!({"room_id": room, "agent_id": "claude-1"})).await;
    assert_eq!(joined["isError"], json!(false), "{joined}");

    let mut b = Raw::connect(addr(&servers[1])).await;
    let posted = call_tool(
        &mut b,
        &session,
        4,
        "post_finding",
        json!({"room_id": room, "content": "502s began at 09:41"}),
    )
    .await;
    assert_eq!(posted["isError"], json!(false), "the second server did not carry the session on: {posted}");
    assert_eq!(posted["structuredContent"]["finding"]["agent_id"], json!("claude-1"));

    // Joining again as another agent through the second server: the first, which still holds
    // its own copy of the session, acts as the new agent too.
    let again =
        call_tool(&mut b, &session, 5, "join_room", json!({"room_id": room, "agent_id": "claude-2"})).await;
    assert_eq!(again["isError"], json!(false), "{again}");
    let posted =
        call_tool(&mut a, &session, 6, "post_finding", json!({"room_id": room, "content": "pool exhausted"}))
            .await;
    assert_eq!(
        posted["structuredContent"]["finding"]["agent_id"],
        json!("claude-2"),
        "a server acted on a stale join"
    );

    // A stateless (2026-07-28) request is no part of any session, whatever headers it carries:
    // it must name its agent.
    let body = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {
        "name": "post_finding", "arguments": {"room_id": room, "content": "no session here"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}}}});
    let stateless = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "post_finding"),
        ("mcp-session-id", session.as_str()),
    ];
    let a2 = b.request("POST", "/mcp", &stateless, body.to_string().as_bytes()).await.unwrap();
    assert_eq!(a2.status, 200, "{}", String::from_utf8_lossy(&a2.body));
    let r = &message(&a2)["result"];
    assert_eq!(
        r["structuredContent"]["error"]["code"],
        json!("not_joined"),
        "a stateless request used a session: {r}"
    );

    let end = b.request("DELETE", "/mcp", &mcp_headers(Some(&session)), b"").await.unwrap();
    assert_eq!(end.status, 204);
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list"}).to_string();
    let mut c = Raw::connect(addr(&servers[2])).await;
    let after = c.request("POST", "/mcp", &mcp_headers(Some(&session)), body.as_bytes()).await.unwrap();
    assert_eq!(after.status, 404, "an ended session carried on at another server");
    let after = a.request("POST", "/mcp", &mcp_headers(Some(&session)), body.as_bytes()).await.unwrap();
    assert_eq!(after.status, 404, "an ended session carried on at a server holding it in memory");
    ct.cancel();
}
