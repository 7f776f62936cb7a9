//! Combining the semantic and keyword rankings into one.

use std::collections::HashMap;

use serde::Serialize;

use crate::ids::FindingId;

/// How the two rankings are fused.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct FusionConfig {
    /// Reciprocal-rank constant.
    pub rrf_k: f64,
    /// Weight of the semantic ranking.
    pub semantic_weight: f64,
    /// Weight of the keyword ranking.
    pub keyword_weight: f64,
}

impl Default for FusionConfig {
    fn default() -> Self {
        Self { rrf_k: 60.0, semantic_weight: 1.0, keyword_weight: 1.0 }
    }
}

/// A fused result: the finding, its fused score, and its rank (1-based) in each input.
#[derive(Debug, Clone, PartialEq)]
pub struct Fused {
    /// The finding.
    pub finding_id: FindingId,
    /// Fused score, higher is better.
    pub score: f64,
    /// Rank in the semantic list, if present.
    pub semantic_rank: Option<usize>,
    /// Rank in the keyword list, if present.
    pub keyword_rank: Option<usize>,
}

/// Fuses two best-first rankings. Ties break by finding id, so the order is deterministic.
pub fn fuse(semantic: &[(FindingId, f32)], keyword: &[(FindingId, f64)], cfg: &FusionConfig) -> Vec<Fused> {
    let mut acc: HashMap<FindingId, Fused> = HashMap::new();
    for (i, (id, _)) in semantic.iter().enumerate() {
        let e = acc.entry(*id).or_insert(Fused {
            finding_id: *id,
            score: 0.0,
            semantic_rank: None,
            keyword_rank: None,
        });
        e.semantic_rank = Some(i + 1);
        e.score += cfg.semantic_weight / (cfg.rrf_k + (i + 1) as f64);
    }
    for (i, (id, _)) in keyword.iter().enumerate() {
        let e = acc.entry(*id).or_insert(Fused {
            finding_id: *id,
            score: 0.0,
            semantic_rank: None,
            keyword_rank: None,
        });
        e.keyword_rank = Some(i + 1);
        e.score += cfg.keyword_weight / (cfg.rrf_k + (i + 1) as f64);
    }
    let mut out: Vec<Fused> = acc.into_values().collect();
    out.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.finding_id.cmp(&b.finding_id)));
    out
}
