//! The Streamable HTTP endpoint at the protocol level, with a plain HTTP client: what a session's
//! end looks like on the wire.

use std::sync::Arc;

use macp_core::{Macp, Principal, memory::MemoryStore};
use macp_mcp::http::{HttpOptions, router};
use serde_json::json;
use tokio_util::sync::CancellationToken;

async fn serve() -> (String, CancellationToken) {
    let macp = Macp::builder().store(Arc::new(MemoryStore::new())).build().unwrap();
    let ct = CancellationToken::new();
    let app = router(macp, Some(Principal::new("local").unwrap()), &HttpOptions::default(), ct.child_token());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, ct)
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
