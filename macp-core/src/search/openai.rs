//! An [`Embedder`] for any OpenAI-compatible `/v1/embeddings` endpoint: OpenAI itself, Ollama,
//! vLLM, llama.cpp's server, text-embeddings-inference, LiteLLM, …
//!
//! ```no_run
//! # async fn f() -> macp_core::Result<()> {
//! use macp_core::search::openai::OpenAiEmbedder;
//! let e = OpenAiEmbedder::builder("http://127.0.0.1:11434/v1", "nomic-embed-text").connect().await?;
//! # Ok(()) }
//! ```

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::{Embedder, normalize};
use crate::error::{Error, Result};
use crate::ids::clip;

/// Builds an [`OpenAiEmbedder`].
#[derive(Debug, Clone)]
pub struct OpenAiEmbedderBuilder {
    base_url: String,
    model: String,
    api_key: Option<String>,
    dimensions: Option<usize>,
    timeout: Duration,
    batch: usize,
}

impl OpenAiEmbedderBuilder {
    /// An embedder for `model` at `base_url` (the part before `/embeddings`, e.g.
    /// `https://api.openai.com/v1` or `http://127.0.0.1:11434/v1`).
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            model: model.into(),
            api_key: None,
            dimensions: None,
            timeout: Duration::from_secs(30),
            batch: 64,
        }
    }

    /// From `MACP_EMBEDDINGS_URL`, `MACP_EMBEDDINGS_MODEL` (both required),
    /// `MACP_EMBEDDINGS_API_KEY` and `MACP_EMBEDDINGS_DIMENSIONS` (optional).
    pub fn from_env() -> Result<Self> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let url = var("MACP_EMBEDDINGS_URL").ok_or_else(|| {
            Error::invalid(
                "MACP_EMBEDDINGS_URL",
                "set it to the endpoint's base URL, e.g. http://127.0.0.1:11434/v1",
            )
        })?;
        let model = var("MACP_EMBEDDINGS_MODEL")
            .ok_or_else(|| Error::invalid("MACP_EMBEDDINGS_MODEL", "set it to the embedding model's name"))?;
        let mut b = Self::new(url, model);
        b.api_key = var("MACP_EMBEDDINGS_API_KEY");
        if let Some(d) = var("MACP_EMBEDDINGS_DIMENSIONS") {
            b.dimensions =
                Some(d.parse().map_err(|_| {
                    Error::invalid("MACP_EMBEDDINGS_DIMENSIONS", "must be a positive integer")
                })?);
        }
        Ok(b)
    }

    /// Bearer token sent as `Authorization`.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Requests vectors of this size (the `dimensions` parameter; only models that support
    /// shortening honour it). Without it, the size is whatever the model returns.
    pub fn dimensions(mut self, d: usize) -> Self {
        self.dimensions = Some(d);
        self
    }

    /// Per-request timeout (default 30 s).
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    /// Texts per request (default 64).
    pub fn batch(mut self, n: usize) -> Self {
        self.batch = n.max(1);
        self
    }

    /// Connects: embeds one probe text to learn (or check) the vector size.
    pub async fn connect(self) -> Result<OpenAiEmbedder> {
        let client = reqwest::Client::builder()
            .timeout(self.timeout)
            .build()
            .map_err(|e| Error::backend("embedder", false, format!("cannot build HTTP client: {e}"), None))?;
        let mut e = OpenAiEmbedder { client, cfg: self, dimension: 0, model_id: String::new() };
        let probe = e.request(&["dimension probe".to_owned()]).await?;
        let got = probe.first().map_or(0, Vec::len);
        if got == 0 {
            return Err(Error::backend("embedder", false, "the endpoint returned an empty embedding", None));
        }
        if let Some(want) = e.cfg.dimensions
            && want != got
        {
            return Err(Error::backend(
                "embedder",
                false,
                format!(
                    "asked the endpoint for {want}-dimension vectors and got {got}; the model ignores `dimensions`"
                ),
                None,
            ));
        }
        e.dimension = got;
        e.model_id = format!("openai-compatible:{}:{got}", e.cfg.model);
        Ok(e)
    }
}

/// Embeds through an OpenAI-compatible HTTP endpoint.
#[derive(Debug, Clone)]
pub struct OpenAiEmbedder {
    client: reqwest::Client,
    cfg: OpenAiEmbedderBuilder,
    dimension: usize,
    model_id: String,
}

#[derive(Serialize)]
struct Request<'a> {
    model: &'a str,
    input: &'a [String],
    encoding_format: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    dimensions: Option<usize>,
}

#[derive(Deserialize)]
struct Response {
    data: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    index: usize,
    embedding: Vec<f32>,
}

impl OpenAiEmbedder {
    /// Starts a builder.
    pub fn builder(base_url: impl Into<String>, model: impl Into<String>) -> OpenAiEmbedderBuilder {
        OpenAiEmbedderBuilder::new(base_url, model)
    }

    async fn request(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        let url = format!("{}/embeddings", self.cfg.base_url);
        let body = Request {
            model: &self.cfg.model,
            input: texts,
            encoding_format: "float",
            dimensions: self.cfg.dimensions,
        };
        let mut req = self.client.post(&url).json(&body);
        if let Some(k) = &self.cfg.api_key {
            req = req.bearer_auth(k);
        }
        let resp = req.send().await.map_err(|e| {
            Error::backend("embedder", true, format!("POST {url} failed: {e}"), Some(Box::new(e)))
        })?;
        let status = resp.status();
        let text = resp.text().await.map_err(|e| {
            Error::backend(
                "embedder",
                true,
                format!("reading the response of {url} failed: {e}"),
                Some(Box::new(e)),
            )
        })?;
        if !status.is_success() {
            let retryable = status.as_u16() == 429 || status.is_server_error();
            return Err(Error::backend(
                "embedder",
                retryable,
                format!("POST {url} answered {status}: {}", clip(&text)),
                None,
            ));
        }
        let parsed: Response = serde_json::from_str(&text).map_err(|e| {
            Error::backend(
                "embedder",
                false,
                format!("unexpected response from {url}: {e}: {}", clip(&text)),
                None,
            )
        })?;
        if parsed.data.len() != texts.len() {
            return Err(Error::backend(
                "embedder",
                false,
                format!("{url} returned {} embeddings for {} inputs", parsed.data.len(), texts.len()),
                None,
            ));
        }
        let mut out = vec![Vec::new(); texts.len()];
        for item in parsed.data {
            let slot = out.get_mut(item.index).ok_or_else(|| {
                Error::backend(
                    "embedder",
                    false,
                    format!("{url} returned an embedding for index {}", item.index),
                    None,
                )
            })?;
            let mut v = item.embedding;
            normalize(&mut v);
            *slot = v;
        }
        Ok(out)
    }
}

#[async_trait]
impl Embedder for OpenAiEmbedder {
    fn model_id(&self) -> &str {
        &self.model_id
    }

    fn dimension(&self) -> usize {
        self.dimension
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(self.cfg.batch) {
            let vs = self.request(chunk).await?;
            if let Some(bad) = vs.iter().find(|v| v.len() != self.dimension) {
                return Err(Error::backend(
                    "embedder",
                    false,
                    format!(
                        "the endpoint switched from {}-dimension to {}-dimension vectors",
                        self.dimension,
                        bad.len()
                    ),
                    None,
                ));
            }
            out.extend(vs);
        }
        Ok(out)
    }
}
