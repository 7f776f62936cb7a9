//! The built-in embedder: a static (model2vec-style) model compiled into the binary, so the
//! embedded default needs no download, no network and no GPU.
//!
//! Each WordPiece token has one vector; a text's embedding is the L2-normalised sum of its
//! tokens' vectors. The vectors were distilled from sentence-transformers/all-MiniLM-L6-v2
//! (Apache-2.0) by fitting them so that pooled token vectors reproduce the transformer's
//! sentence embeddings; `tools/embedder/` holds the recipe that rebuilds the file (and its
//! `NOTICE`, the attribution). The file format (`MACPSEMB` v1) is documented on
//! [`StaticModel::from_bytes`]. Semantic-only on the labelled set it scores MRR 0.66 against
//! 0.62 for the full MiniLM-L6 transformer; see BENCHMARKS.md.

mod tokenizer;

use async_trait::async_trait;
use sha2::{Digest, Sha256};

pub use tokenizer::WordPiece;

use super::{Embedder, normalize};
use crate::error::{Error, Result};

/// The vendored model file.
pub const MODEL_BYTES: &[u8] = include_bytes!("../../../../tools/embedder/model/macp-static-256.bin");
/// The vendored WordPiece vocabulary (one token per line, line `i` is id `i`).
pub const VOCAB_TXT: &str = include_str!("../../../../tools/embedder/model/vocab.txt");

/// A static embedding model: a token table and the tokenizer that indexes it.
#[derive(Debug, Clone)]
pub struct StaticModel {
    tokenizer: WordPiece,
    dim: usize,
    scales: Vec<f32>,
    codes: Vec<i8>,
    model_id: String,
}

const MAGIC: &[u8; 8] = b"MACPSEMB";
const HEADER: usize = 32;

fn bad(msg: impl Into<String>) -> Error {
    Error::backend("embedder", false, format!("invalid static model: {}", msg.into()), None)
}

fn u32_at(b: &[u8], off: usize) -> Result<u32> {
    b.get(off..off + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or_else(|| bad("truncated header"))
}

impl StaticModel {
    /// Parses a `MACPSEMB` v1 file and its vocabulary.
    ///
    /// Layout, little-endian: magic `MACPSEMB`; u32 version (1); u32 vocabulary size V; u32
    /// dimension D; u32 dtype (1 = int8 rows with an f32 scale each); u32 flags (bit 0: L2
    /// normalise the pooled vector); u32 reserved; then V f32 scales; then V×D i8 values. Token
    /// `i`'s vector is `scale[i] * q[i*D .. (i+1)*D]`.
    pub fn from_bytes(model: &[u8], vocab: &str) -> Result<Self> {
        if model.get(..8) != Some(MAGIC.as_slice()) {
            return Err(bad("not a MACPSEMB file"));
        }
        let (version, v, d, dtype) =
            (u32_at(model, 8)?, u32_at(model, 12)? as usize, u32_at(model, 16)? as usize, u32_at(model, 20)?);
        if version != 1 || dtype != 1 {
            return Err(bad(format!("unsupported version {version} / dtype {dtype}")));
        }
        if model.len() != HEADER + 4 * v + v * d {
            return Err(bad(format!(
                "expected {} bytes for {v}×{d}, found {}",
                HEADER + 4 * v + v * d,
                model.len()
            )));
        }
        let scales = model[HEADER..HEADER + 4 * v]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let codes = model[HEADER + 4 * v..].iter().map(|b| *b as i8).collect();
        let tokenizer =
            WordPiece::new(vocab.lines().map(str::to_owned)).ok_or_else(|| bad("vocabulary has no [UNK]"))?;
        if tokenizer.len() != v {
            return Err(bad(format!("vocabulary has {} tokens, the model {v} rows", tokenizer.len())));
        }
        let digest = Sha256::digest(model);
        let short: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
        Ok(Self { tokenizer, dim: d, scales, codes, model_id: format!("macp-static-{d}-{short}") })
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &WordPiece {
        &self.tokenizer
    }

    /// The normalised embedding of one text (all zeros if no token has a vector).
    pub fn embed_one(&self, text: &str) -> Vec<f32> {
        let mut acc = vec![0f32; self.dim];
        for id in self.tokenizer.encode(text) {
            let i = id as usize;
            let s = self.scales[i];
            if s == 0.0 {
                continue;
            }
            for (a, q) in acc.iter_mut().zip(&self.codes[i * self.dim..(i + 1) * self.dim]) {
                *a += s * *q as f32;
            }
        }
        normalize(&mut acc);
        acc
    }
}

/// The built-in [`Embedder`]: the vendored [`StaticModel`].
#[derive(Debug, Clone)]
pub struct BuiltinEmbedder {
    model: std::sync::Arc<StaticModel>,
}

impl BuiltinEmbedder {
    /// Loads the model compiled into the binary.
    pub fn load() -> Result<Self> {
        Ok(Self { model: std::sync::Arc::new(StaticModel::from_bytes(MODEL_BYTES, VOCAB_TXT)?) })
    }

    /// The model.
    pub fn model(&self) -> &StaticModel {
        &self.model
    }
}

#[async_trait]
impl Embedder for BuiltinEmbedder {
    fn model_id(&self) -> &str {
        &self.model.model_id
    }

    fn dimension(&self) -> usize {
        self.model.dim
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        // Microseconds per text: cheaper to run inline than to hop to a blocking thread, except
        // for large batches.
        if texts.len() <= 64 {
            return Ok(texts.iter().map(|t| self.model.embed_one(t)).collect());
        }
        let (model, texts) = (self.model.clone(), texts.to_vec());
        tokio::task::spawn_blocking(move || texts.iter().map(|t| model.embed_one(t)).collect())
            .await
            .map_err(|e| Error::backend("embedder", true, format!("embedding task failed: {e}"), None))
    }
}
