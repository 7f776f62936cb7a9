//! The OpenAI-compatible embedder against a small HTTP server on loopback that speaks the
//! `/v1/embeddings` protocol.
#![cfg(feature = "openai-embedder")]

use std::sync::{Arc, Mutex};

use macp_core::search::Embedder;
use macp_core::search::openai::OpenAiEmbedder;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// What the fake server saw and how it should answer.
#[derive(Default)]
struct Fake {
    requests: Vec<(Option<String>, Value)>,
    fail_with: Option<u16>,
}

/// A 4-dimension "embedding": letter statistics, so equal texts get equal vectors.
fn embed(text: &str) -> Vec<f32> {
    let b = text.as_bytes();
    vec![b.len() as f32, b.iter().filter(|c| b"aeiou".contains(c)).count() as f32 + 1.0, 3.0, 4.0]
}

async fn serve(state: Arc<Mutex<Fake>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = listener.accept().await else { return };
            let state = state.clone();
            tokio::spawn(async move {
                let mut r = BufReader::new(sock);
                let (mut len, mut auth) = (0usize, None);
                let mut line = String::new();
                r.read_line(&mut line).await.unwrap();
                assert!(line.starts_with("POST /v1/embeddings "), "unexpected request line {line:?}");
                loop {
                    line.clear();
                    r.read_line(&mut line).await.unwrap();
                    let l = line.trim_end();
                    if l.is_empty() {
                        break;
                    }
                    let (k, v) = l.split_once(": ").unwrap();
                    match k.to_ascii_lowercase().as_str() {
                        "content-length" => len = v.parse().unwrap(),
                        "authorization" => auth = Some(v.to_owned()),
                        _ => {}
                    }
                }
                let mut body = vec![0; len];
                r.read_exact(&mut body).await.unwrap();
                let req: Value = serde_json::from_slice(&body).unwrap();
                let fail = {
                    let mut s = state.lock().unwrap();
                    s.requests.push((auth, req.clone()));
                    s.fail_with
                };
                let (status, payload) = match fail {
                    Some(code) => (code, json!({"error": {"message": "nope"}}).to_string()),
                    None => {
                        let inputs = req["input"].as_array().unwrap();
                        // Answer out of order: the client must sort by `index`.
                        let data: Vec<Value> = inputs
                            .iter()
                            .enumerate()
                            .rev()
                            .map(|(i, t)| json!({"object": "embedding", "index": i, "embedding": embed(t.as_str().unwrap())}))
                            .collect();
                        (200, json!({"object": "list", "data": data, "model": req["model"]}).to_string())
                    }
                };
                let resp = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{payload}",
                    payload.len()
                );
                r.get_mut().write_all(resp.as_bytes()).await.unwrap();
            });
        }
    });
    format!("http://{addr}/v1")
}

#[tokio::test]
async fn embeds_in_order_normalised_with_auth_and_batches() {
    let state = Arc::new(Mutex::new(Fake::default()));
    let url = serve(state.clone()).await;
    let e = OpenAiEmbedder::builder(&url, "nomic-embed-text")
        .api_key("sk-test")
        .batch(2)
        .connect()
        .await
        .unwrap();
    assert_eq!(e.dimension(), 4);
    assert_eq!(e.model_id(), "openai-compatible:nomic-embed-text:4");
    let texts: Vec<String> = ["a", "bbbb", "aeiou", "zz", "q"].iter().map(|s| s.to_string()).collect();
    let vs = e.embed(&texts).await.unwrap();
    assert_eq!(vs.len(), 5);
    for (t, v) in texts.iter().zip(&vs) {
        let mut want = embed(t);
        macp_core::search::normalize(&mut want);
        assert_eq!(v, &want, "vector for {t:?} in input order, normalised");
    }
    let s = state.lock().unwrap();
    // one probe at connect, then ceil(5 / 2) = 3 batches
    assert_eq!(s.requests.len(), 4);
    assert!(
        s.requests
            .iter()
            .all(|(a, r)| a.as_deref() == Some("Bearer sk-test") && r["model"] == "nomic-embed-text")
    );
    assert_eq!(s.requests[1].1["input"], json!(["a", "bbbb"]));
    assert_eq!(s.requests[1].1["encoding_format"], "float");
}

#[tokio::test]
async fn rate_limits_and_server_errors_are_retryable_client_errors_are_not() {
    let state = Arc::new(Mutex::new(Fake::default()));
    let url = serve(state.clone()).await;
    let e = OpenAiEmbedder::builder(&url, "m").connect().await.unwrap();
    for (code, retryable) in [(429, true), (503, true), (400, false), (401, false)] {
        state.lock().unwrap().fail_with = Some(code);
        let err = e.embed(&["x".to_owned()]).await.unwrap_err();
        assert_eq!(err.code(), "backend");
        assert_eq!(err.is_retryable(), retryable, "{code}: {err}");
        assert!(err.to_string().contains(&code.to_string()), "{err}");
    }
}

#[tokio::test]
async fn a_dimension_the_model_ignores_is_refused_at_connect() {
    let state = Arc::new(Mutex::new(Fake::default()));
    let url = serve(state.clone()).await;
    let err = OpenAiEmbedder::builder(&url, "m").dimensions(256).connect().await.unwrap_err();
    assert!(err.to_string().contains("256"), "{err}");
}

#[tokio::test]
async fn an_unreachable_endpoint_is_a_retryable_error() {
    let err = OpenAiEmbedder::builder("http://127.0.0.1:9/v1", "m").connect().await.unwrap_err();
    assert!(err.is_retryable(), "{err}");
}
