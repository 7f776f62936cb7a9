//! Titan Text Embeddings V2 request and response shapes, against the SDK's own mock layer
//! (aws-smithy-mocks): no emulator runs Bedrock. Responses are raw HTTP, so the SDK's real
//! deserializer and error parsing run; requests are checked as the SDK serialised them.

use aws_sdk_bedrockruntime::config::retry::RetryConfig;
use aws_sdk_bedrockruntime::operation::invoke_model::InvokeModelInput;
use aws_sdk_bedrockruntime::{Client, Config};
use aws_smithy_mocks::{MockResponse, RuleMode, mock, mock_client};
use aws_smithy_runtime_api::http::{Response as HttpResponse, StatusCode};
use aws_smithy_types::body::SdkBody;
use macp_aws::{TITAN_V2, TitanEmbedder};
use macp_core::search::Embedder;
use serde_json::{Value, json};

fn http(status: u16, error_type: Option<&str>, body: Value) -> HttpResponse {
    let mut r = HttpResponse::new(StatusCode::try_from(status).unwrap(), SdkBody::from(body.to_string()));
    r.headers_mut().insert("content-type", "application/json");
    if let Some(t) = error_type {
        r.headers_mut()
            .insert("x-amzn-ErrorType", format!("{t}:http://internal.amazon.com/coral/com.amazon.bedrock/"));
    }
    r
}

fn request(req: &InvokeModelInput) -> Value {
    serde_json::from_slice(req.body().expect("a request body").as_ref()).expect("the body is JSON")
}

/// Titan's answer for `text`: a vector that is not unit length (so normalising shows), whose
/// largest component sits at an index derived from the text (so order mistakes show).
fn titan_answer(text: &str, dims: usize) -> HttpResponse {
    let mut v = vec![0.5f32; dims];
    v[text.len() % dims] = 9.0;
    http(200, None, json!({"embedding": v, "embeddingsByType": {"float": v}, "inputTextTokenCount": 3}))
}

fn client_with(rule: &aws_smithy_mocks::Rule) -> Client {
    mock_client!(
        aws_sdk_bedrockruntime,
        RuleMode::MatchAny,
        [rule],
        |c: aws_sdk_bedrockruntime::config::Builder| c.retry_config(RetryConfig::disabled())
    )
}

#[tokio::test]
async fn titan_sends_one_request_per_text_with_model_dimensions_and_normalize() {
    let rule = mock!(Client::invoke_model)
        .match_requests(|req| {
            let body = request(req);
            req.model_id() == Some(TITAN_V2)
                && req.content_type() == Some("application/json")
                && req.accept() == Some("application/json")
                && body.as_object().is_some_and(|o| o.len() == 3)
                && body["dimensions"] == json!(512)
                && body["normalize"] == json!(true)
                && body["inputText"].is_string()
        })
        .then_compute_response(|req| {
            MockResponse::Http(titan_answer(request(req)["inputText"].as_str().unwrap(), 512))
        });
    let titan = TitanEmbedder::new(client_with(&rule), 512).unwrap();
    let texts = vec!["a".to_owned(), "checkout 502s after deploy".to_owned(), "db pool".to_owned()];
    let out = titan.embed(&texts).await.unwrap();
    assert_eq!(rule.num_calls(), 3, "Titan takes one input per request");
    assert_eq!(out.len(), 3);
    for (t, v) in texts.iter().zip(&out) {
        assert_eq!(v.len(), 512);
        let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "vectors are unit length, got {norm}");
        let argmax = v.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0;
        assert_eq!(argmax, t.len() % 512, "the vector for {t:?} is in its place");
    }
}

#[tokio::test]
async fn titan_accepts_only_its_three_dimensions_and_names_them_in_the_model_id() {
    let client = Client::from_conf(Config::builder().behavior_version_latest().build());
    for d in [256, 512, 1024] {
        let t = TitanEmbedder::new(client.clone(), d).unwrap();
        assert_eq!(t.dimension(), d);
        // The index records the model id; 256- and 1024-dimension vectors must never share one.
        assert_eq!(t.model_id(), format!("{TITAN_V2}@{d}"));
    }
    for d in [0, 128, 300, 1536] {
        let e = TitanEmbedder::new(client.clone(), d).unwrap_err();
        assert_eq!(e.code(), "invalid_input");
        assert!(e.to_string().contains("256, 512 or 1024"), "{e}");
    }
}

#[tokio::test]
async fn titan_refuses_a_response_of_the_wrong_length() {
    let rule = mock!(Client::invoke_model).then_http_response(|| titan_answer("x", 1024));
    let titan = TitanEmbedder::new(client_with(&rule), 256).unwrap();
    let e = titan.embed(&["x".to_owned()]).await.unwrap_err();
    assert_eq!(e.code(), "backend");
    assert!(!e.is_retryable());
    assert!(e.to_string().contains("1024") && e.to_string().contains("256"), "{e}");
}

#[tokio::test]
async fn titan_throttling_and_server_errors_are_retryable_validation_is_not() {
    let cases = [
        (429, "ThrottlingException", "Too many requests, please wait before trying again.", true),
        (500, "InternalServerException", "An internal server error occurred.", true),
        (503, "ServiceUnavailableException", "Service unavailable.", true),
        (400, "ValidationException", "400 Bad Request: Too many input tokens. Max input tokens: 8192", false),
        (
            403,
            "AccessDeniedException",
            "You don't have access to the model with the specified model ID.",
            false,
        ),
    ];
    for (status, code, message, retryable) in cases {
        let rule = mock!(Client::invoke_model)
            .then_http_response(move || http(status, Some(code), json!({"message": message})));
        let titan = TitanEmbedder::new(client_with(&rule), 256).unwrap();
        let e = titan.embed(&["text".to_owned()]).await.unwrap_err();
        assert_eq!(e.code(), "backend", "{code}");
        assert_eq!(e.is_retryable(), retryable, "{code}: {e}");
        let shown = e.to_string();
        assert!(
            shown.contains(code) && shown.contains(message),
            "the AWS code and message are kept: {shown}"
        );
    }
}

#[tokio::test]
async fn titan_rejects_an_unreadable_body() {
    let rule =
        mock!(Client::invoke_model).then_http_response(|| http(200, None, json!({"embeddings": [[0.1]]})));
    let titan = TitanEmbedder::new(client_with(&rule), 256).unwrap();
    let e = titan.embed(&["text".to_owned()]).await.unwrap_err();
    assert_eq!(e.code(), "backend");
    assert!(e.to_string().contains("unexpected Titan response"), "{e}");
}
