//! Semantic and keyword search over findings.
//!
//! Two seams, each a small trait with a contract:
//! - [`Embedder`]: text to vectors (batch), with a stable model id and dimension. The built-in
//!   static model ([`builtin`], feature `builtin-embedder`) works offline with no setup; any
//!   OpenAI-compatible `/v1/embeddings` endpoint ([`openai`], feature `openai-embedder`) and
//!   Bedrock Titan (in `macp-aws`) plug in the same way.
//! - [`VectorIndex`]: the design's S3 Vectors seam — upsert, delete, top-k query filtered by
//!   room and tags. It records which model built it; the service refuses to mix models.
//!
//! The service ([`crate::Macp::search_findings`]) fuses semantic evidence from the index with
//! keyword (BM25) evidence from the store, then hydrates every hit from the store, which stays
//! the single source of truth. See [`fusion`] for how the two rankings are combined.

#[cfg(feature = "builtin-embedder")]
pub mod builtin;
pub mod fusion;
pub mod image;
pub mod keyword;
#[cfg(feature = "memory")]
pub mod memory_index;
#[cfg(feature = "openai-embedder")]
pub mod openai;

use std::fmt::Debug;

use async_trait::async_trait;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::ids::{AgentId, FindingId, RoomId};

/// Turns text into vectors.
///
/// # Contract
/// - `embed` returns exactly one vector per input, in input order, each of length
///   [`dimension`](Embedder::dimension), L2-normalised (so cosine similarity is a dot product).
/// - The same text embeds to the same vector for the same [`model_id`](Embedder::model_id).
///   A change that alters vectors must change the model id: indexes are bound to it.
/// - Failures are `Error::Backend` (retryable for transient transport errors); a failed call
///   returns no partial result.
#[async_trait]
pub trait Embedder: Send + Sync + Debug {
    /// Stable id of the model (and its configuration) that produced the vectors.
    fn model_id(&self) -> &str;

    /// Length of every vector.
    fn dimension(&self) -> usize;

    /// Embeds a batch of texts.
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>>;
}

/// The model an index was built with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct IndexModel {
    /// [`Embedder::model_id`].
    pub model_id: String,
    /// [`Embedder::dimension`].
    pub dimension: usize,
}

/// A finding's vector and the attributes it can be filtered by.
#[derive(Debug, Clone, PartialEq)]
pub struct VectorRecord {
    /// The room (queries never cross rooms).
    pub room_id: RoomId,
    /// The key.
    pub finding_id: FindingId,
    /// Filterable tags.
    pub tags: Vec<String>,
    /// Filterable author.
    pub agent_id: AgentId,
    /// The embedding.
    pub vector: Vec<f32>,
}

/// Which records a query may return. Filters combine with AND; `tags_any` matches a record
/// with at least one of the tags.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VectorFilter {
    /// Only records carrying one of these tags.
    pub tags_any: Vec<String>,
    /// Only records by this agent.
    pub agent_id: Option<AgentId>,
}

impl VectorFilter {
    /// Whether every record passes.
    pub fn is_empty(&self) -> bool {
        self.tags_any.is_empty() && self.agent_id.is_none()
    }

    /// Whether a record with `tags` by `agent` passes.
    pub fn matches(&self, tags: &[String], agent: &AgentId) -> bool {
        (self.tags_any.is_empty() || tags.iter().any(|t| self.tags_any.contains(t)))
            && self.agent_id.as_ref().is_none_or(|a| a == agent)
    }
}

/// One query result.
#[derive(Debug, Clone, PartialEq)]
pub struct VectorHit {
    /// The finding.
    pub finding_id: FindingId,
    /// Cosine similarity, higher is closer.
    pub score: f32,
}

impl VectorHit {
    /// Result order: higher score first, ties by finding id (so equal scores rank stably).
    pub fn rank(a: &Self, b: &Self) -> std::cmp::Ordering {
        b.score.total_cmp(&a.score).then(a.finding_id.cmp(&b.finding_id))
    }
}

/// Stores finding vectors and answers nearest-neighbour queries within a room.
///
/// # Contract
/// - [`upsert`](VectorIndex::upsert) is idempotent per `(room_id, finding_id)`: writing the same
///   finding twice leaves one record (the last write). A batch is applied whole or not at all.
/// - [`query`](VectorIndex::query) returns at most `k` records of `room_id` matching the filter,
///   best first by cosine similarity (ties by finding id), and never a record of another room.
///   Reads see every upsert that returned before the read began.
/// - The index is bound to one [`IndexModel`]: [`model`](VectorIndex::model) returns it (or
///   `None` for a fresh index), [`bind`](VectorIndex::bind) sets it on a fresh index and fails
///   with `conflict` if another model is bound, and [`reset`](VectorIndex::reset) drops every
///   vector and rebinds (the `reindex` path).
#[async_trait]
pub trait VectorIndex: Send + Sync + Debug {
    /// Short name for errors and logs.
    fn name(&self) -> &'static str;

    /// The model the index is bound to, if any.
    async fn model(&self) -> Result<Option<IndexModel>>;

    /// Binds a fresh index to `model`; `conflict` if bound to another; no-op if the same.
    async fn bind(&self, model: &IndexModel) -> Result<()>;

    /// Drops every vector and binds the index to `model`.
    async fn reset(&self, model: &IndexModel) -> Result<()>;

    /// Inserts or replaces records.
    async fn upsert(&self, records: &[VectorRecord]) -> Result<()>;

    /// Removes records, any number of them (absent ids are ignored).
    async fn delete(&self, room_id: RoomId, ids: &[FindingId]) -> Result<()>;

    /// The `k` nearest records of a room.
    async fn query(
        &self,
        room_id: RoomId,
        vector: &[f32],
        k: usize,
        filter: &VectorFilter,
    ) -> Result<Vec<VectorHit>>;

    /// Cosine similarity of `vector` with each of `ids` that has a record in the room (ids
    /// without one are omitted). Lets fusion score keyword matches that fell outside the top k.
    async fn scores(&self, room_id: RoomId, vector: &[f32], ids: &[FindingId]) -> Result<Vec<VectorHit>>;

    /// Number of records stored for a room.
    async fn count(&self, room_id: RoomId) -> Result<u64>;
}

/// The terms a keyword index sees in `text`, as SQLite FTS5's default `unicode61` tokenizer
/// produces them: split on every character that is not a letter or digit, lowercased, with
/// diacritics removed; distinct, in first-occurrence order.
pub fn keyword_terms(text: &str) -> Vec<String> {
    use unicode_normalization::UnicodeNormalization;
    use unicode_normalization::char::is_combining_mark;
    let mut out: Vec<String> = Vec::new();
    for word in text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
        // Most words are ASCII, where decomposition changes nothing.
        let t: String = if word.is_ascii() {
            word.to_ascii_lowercase()
        } else {
            word.nfd().filter(|c| !is_combining_mark(*c)).flat_map(char::to_lowercase).collect()
        };
        if !t.is_empty() && !out.contains(&t) {
            out.push(t);
        }
    }
    out
}

/// BM25's inverse document frequency as FTS5 computes it: `ln((N - n + 0.5) / (n + 0.5))`,
/// floored at 1e-6, for a term found in `n` of `total` rows.
pub fn bm25_idf(total: u64, n: u64) -> f64 {
    let idf = ((total as f64 - n as f64 + 0.5) / (n as f64 + 0.5)).ln();
    if idf <= 0.0 { 1e-6 } else { idf }
}

/// Scales `v` to unit length in place (a zero vector stays zero).
pub fn normalize(v: &mut [f32]) {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if n > 0.0 {
        for x in v {
            *x /= n;
        }
    }
}

/// Keeps the `k` best of `items` under `better` (an ordering, best first), sorted: a partial
/// selection, then a sort of only what is kept.
pub fn top_k<T>(items: &mut Vec<T>, k: usize, better: impl Fn(&T, &T) -> std::cmp::Ordering) {
    if items.len() > k && k > 0 {
        items.select_nth_unstable_by(k - 1, &better);
    }
    items.truncate(k);
    items.sort_by(better);
}

/// The `k` best of a stream of scored items, keeping memory and work proportional to `k`: an
/// item scoring below the current k-th best is dropped with one comparison, and the kept ones
/// are cut back to `k` whenever they reach `2k`. [`into_sorted`](Best::into_sorted) orders them
/// best first by score, then by `tie` (ascending). For scans over a whole room, where collecting
/// every score and selecting afterwards costs more than the scoring.
#[derive(Debug)]
pub struct Best<T> {
    k: usize,
    items: Vec<(f64, T)>,
    floor: f64,
}

impl<T: Ord> Best<T> {
    /// Keeps at most `k`.
    pub fn new(k: usize) -> Self {
        Self { k, items: Vec::with_capacity(2 * k.max(1)), floor: f64::NEG_INFINITY }
    }

    /// Offers an item.
    #[inline]
    pub fn push(&mut self, score: f64, item: T) {
        if score < self.floor || self.k == 0 {
            return;
        }
        self.items.push((score, item));
        if self.items.len() >= 2 * self.k {
            self.compact();
        }
    }

    fn compact(&mut self) {
        top_k(&mut self.items, self.k, |a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        if self.items.len() == self.k {
            self.floor = self.items[self.k - 1].0;
        }
    }

    /// Merges another selection into this one.
    pub fn extend(&mut self, other: Best<T>) {
        for (s, t) in other.items {
            self.push(s, t);
        }
    }

    /// The kept items, best first.
    pub fn into_sorted(mut self) -> Vec<(f64, T)> {
        self.compact();
        self.items
    }
}

/// Dot product.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// `conflict` naming both models, with the way out.
pub fn model_mismatch(bound: &IndexModel, wanted: &IndexModel) -> Error {
    Error::conflict(format!(
        "the vector index was built with model `{}` (dimension {}), but this server embeds with `{}` \
         (dimension {}); run `macp reindex` to rebuild the index with the current model, or configure \
         the original embedder",
        bound.model_id, bound.dimension, wanted.model_id, wanted.dimension
    ))
}
