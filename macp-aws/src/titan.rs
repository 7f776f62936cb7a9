//! Amazon Titan Text Embeddings V2 on Bedrock as an [`Embedder`].

use async_trait::async_trait;
use aws_sdk_bedrockruntime::primitives::Blob;
use macp_core::search::{Embedder, normalize};
use macp_core::{Error, Result};
use serde::Deserialize;

use crate::AwsBackend;
use crate::ddb::aws_err;

/// The Bedrock model id of Titan Text Embeddings V2.
pub const TITAN_V2: &str = "amazon.titan-embed-text-v2:0";

/// Titan Text Embeddings V2: 256, 512 or 1024 dimensions, normalised. One InvokeModel call per
/// text (the model takes one input per request).
#[derive(Debug, Clone)]
pub struct TitanEmbedder {
    client: aws_sdk_bedrockruntime::Client,
    dimensions: usize,
    model_id: String,
}

#[derive(Deserialize)]
struct Response {
    embedding: Vec<f32>,
}

impl TitanEmbedder {
    /// An embedder on `client` producing `dimensions`-long vectors (256, 512 or 1024).
    pub fn new(client: aws_sdk_bedrockruntime::Client, dimensions: usize) -> Result<Self> {
        if ![256, 512, 1024].contains(&dimensions) {
            return Err(Error::InvalidInput {
                field: "dimensions".into(),
                message: format!(
                    "Titan Text Embeddings V2 produces 256, 512 or 1024 dimensions, not {dimensions}"
                ),
                limit: None,
            });
        }
        Ok(Self { client, dimensions, model_id: format!("{TITAN_V2}@{dimensions}") })
    }

    /// An embedder with its own Bedrock client, configured from the environment as
    /// [`AwsBuilder::from_env`](crate::AwsBuilder::from_env) describes (region, endpoint,
    /// standard credential chain). No AWS call is made until the first embedding.
    pub async fn from_env(dimensions: usize) -> Result<Self> {
        let aws = crate::AwsBuilder::from_env().connect().await?;
        Self::from_backend(&aws, dimensions)
    }

    /// An embedder using the backend's Bedrock client.
    pub fn from_backend(b: &AwsBackend, dimensions: usize) -> Result<Self> {
        Self::new(b.bedrock().clone(), dimensions)
    }
}

#[async_trait]
impl Embedder for TitanEmbedder {
    fn model_id(&self) -> &str {
        &self.model_id
    }

    fn dimension(&self) -> usize {
        self.dimensions
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        let mut out = Vec::with_capacity(texts.len());
        for t in texts {
            let body = serde_json::json!({"inputText": t, "dimensions": self.dimensions, "normalize": true});
            let resp = self
                .client
                .invoke_model()
                .model_id(TITAN_V2)
                .content_type("application/json")
                .accept("application/json")
                .body(Blob::new(body.to_string()))
                .send()
                .await
                .map_err(|e| aws_err("bedrock", "InvokeModel", e))?;
            let parsed: Response = serde_json::from_slice(resp.body().as_ref()).map_err(|e| {
                Error::backend("bedrock", false, format!("unexpected Titan response: {e}"), None)
            })?;
            if parsed.embedding.len() != self.dimensions {
                return Err(Error::backend(
                    "bedrock",
                    false,
                    format!(
                        "Titan returned {} dimensions, asked for {}",
                        parsed.embedding.len(),
                        self.dimensions
                    ),
                    None,
                ));
            }
            let mut v = parsed.embedding;
            normalize(&mut v);
            out.push(v);
        }
        Ok(out)
    }
}
