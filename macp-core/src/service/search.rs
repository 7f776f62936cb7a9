//! Hybrid search and the indexing write protocol.
//!
//! # Write protocol
//! `post_finding` commits the finding as `pending` first (the store is the source of truth),
//! then embeds it, upserts its vector and flips it to `indexed`. If embedding or indexing fails
//! the post still succeeds and the finding stays `pending`: it is findable by its words at once,
//! and the reconciler ([`Macp::reconcile`], run periodically by [`Macp::start_reconciler`])
//! indexes it later. An in-process set of findings being indexed keeps the inline path and the
//! reconciler from indexing the same finding twice; the upsert is idempotent besides, so even
//! two processes racing leave exactly one vector per finding.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};
use tokio::sync::OnceCell;

use super::findings::resolve_refs;
use super::{Macp, Principal};
use crate::error::{Error, Result};
use crate::ids::{AgentId, FindingId, RoomId};
use crate::model::{Finding, IndexStatus, RoomStatus};
use crate::search::fusion::{FusionConfig, fuse};
use crate::search::{Embedder, IndexModel, VectorFilter, VectorIndex, VectorRecord, model_mismatch};
use crate::store::RoomKey;
use crate::validate;

/// Search settings.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct SearchConfig {
    /// Results returned when the caller gives no limit.
    pub default_results: usize,
    /// Most results a caller may ask for.
    pub max_results: usize,
    /// Candidates taken from each of the semantic and keyword rankings before fusion.
    pub candidates: usize,
    /// Longest query, in bytes.
    pub max_query_bytes: usize,
    /// How the rankings are fused.
    pub fusion: FusionConfig,
    /// A pending finding younger than this is left to the inline indexing path.
    pub reconcile_grace: Duration,
    /// Findings embedded per reconciler batch.
    pub reconcile_batch: usize,
}

impl Default for SearchConfig {
    fn default() -> Self {
        Self {
            default_results: 10,
            max_results: 50,
            candidates: 200,
            max_query_bytes: 1024,
            fusion: FusionConfig::default(),
            reconcile_grace: Duration::from_secs(5),
            reconcile_batch: 64,
        }
    }
}

/// The search parts of a service: embedder, index, settings, and bookkeeping.
pub(crate) struct Search {
    pub(crate) embedder: Arc<dyn Embedder>,
    pub(crate) index: Arc<dyn VectorIndex>,
    /// The index is the store itself: a post can store its vector in the same write
    /// ([`crate::store::FindingStore::append_finding_with_vector`]).
    pub(crate) colocated: bool,
    verified: OnceCell<()>,
    in_flight: Mutex<HashSet<FindingId>>,
}

impl Search {
    pub(crate) fn new(embedder: Arc<dyn Embedder>, index: Arc<dyn VectorIndex>, colocated: bool) -> Self {
        Self { embedder, index, colocated, verified: OnceCell::new(), in_flight: Mutex::new(HashSet::new()) }
    }

    fn model(&self) -> IndexModel {
        IndexModel { model_id: self.embedder.model_id().to_owned(), dimension: self.embedder.dimension() }
    }

    /// Reserves findings for indexing; returns those not already in flight.
    fn reserve(&self, ids: impl IntoIterator<Item = FindingId>) -> Vec<FindingId> {
        let mut set = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        ids.into_iter().filter(|id| set.insert(*id)).collect()
    }

    fn release(&self, ids: &[FindingId]) {
        let mut set = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        for id in ids {
            set.remove(id);
        }
    }
}

/// `search_findings`: findings by meaning and by words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct SearchFindings {
    /// The room.
    pub room_id: RoomId,
    /// What you are looking for, in your own words; exact identifiers work too.
    pub query: String,
    /// Most results (default 10, at most 50).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Only findings with at least one of these tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Only findings posted by this agent.
    #[serde(default)]
    pub agent_id: Option<AgentId>,
    /// True to search every room you may see too, closed ones included ("have we seen this
    /// before?"): each result names its room.
    #[serde(default)]
    pub all_rooms: bool,
}

impl SearchFindings {
    /// A search of `room_id` for `query`.
    pub fn new(room_id: RoomId, query: impl Into<String>) -> Self {
        Self { room_id, query: query.into(), limit: None, tags: Vec::new(), agent_id: None, all_rooms: false }
    }

    /// Searching every room the caller may see.
    pub fn all_rooms(mut self) -> Self {
        self.all_rooms = true;
        self
    }

    /// Most results.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Only findings with one of these tags.
    pub fn tags<I: IntoIterator<Item = S>, S: Into<String>>(mut self, tags: I) -> Self {
        self.tags = tags.into_iter().map(Into::into).collect();
        self
    }

    /// Only findings by this agent.
    pub fn agent(mut self, agent_id: AgentId) -> Self {
        self.agent_id = Some(agent_id);
        self
    }
}

/// One search result: the finding as stored, its fused score, and what matched.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct SearchHit {
    /// The finding (from the store, refs resolved).
    pub finding: Finding,
    /// Fused relevance, higher is better (comparable within one response only).
    pub score: f64,
    /// Rank among semantic matches, if it was one.
    pub semantic_rank: Option<usize>,
    /// Rank among keyword matches, if it was one.
    pub keyword_rank: Option<usize>,
    /// The finding's room, in an `all_rooms` search.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub room: Option<RoomLabel>,
}

/// Which room a result of an `all_rooms` search comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct RoomLabel {
    /// Its name, if it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its objective.
    pub objective: String,
    /// `active` or `closed`.
    pub status: RoomStatus,
    /// How it ended, if it was closed with a resolution.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolution: Option<String>,
}

/// The result of `search_findings`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct SearchResults {
    /// Best first.
    pub results: Vec<SearchHit>,
    /// False when semantic search was unavailable for this query (no embedder configured, or it
    /// failed): results then come from keyword matching alone.
    pub semantic: bool,
    /// In an `all_rooms` search: how many rooms were searched (newest first), and how many
    /// older ones were not because the search covers at most [`MAX_ROOMS_SEARCHED`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rooms_searched: Option<usize>,
    /// See `rooms_searched`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rooms_not_searched: Option<usize>,
}

/// The most rooms one `all_rooms` search covers, newest first.
pub const MAX_ROOMS_SEARCHED: usize = 200;

/// Rooms searched concurrently in an `all_rooms` search.
const ROOMS_AT_ONCE: usize = 8;

/// What one reconciler pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct ReconcileReport {
    /// Findings indexed by this pass.
    pub indexed: u64,
    /// Findings that failed to index (left pending for the next pass).
    pub failed: u64,
    /// The last error, if any failed.
    pub last_error: Option<String>,
}

/// A running background reconciler; stops when dropped.
#[derive(Debug)]
pub struct ReconcilerHandle {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ReconcilerHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Macp {
    pub(super) fn search_parts(&self) -> Option<&Search> {
        self.inner.search.as_ref()
    }

    /// Checks that the vector index was built with this service's embedder, binding a fresh
    /// index to it. A mismatch is a `conflict` naming both models and the `reindex` way out.
    /// Called lazily before the first indexing or search; servers call it at start-up to fail
    /// fast.
    pub async fn verify_index(&self) -> Result<()> {
        let Some(s) = self.search_parts() else { return Ok(()) };
        s.verified
            .get_or_try_init(|| async {
                let wanted = s.model();
                match s.index.model().await? {
                    Some(bound) if bound != wanted => Err(model_mismatch(&bound, &wanted)),
                    Some(_) => Ok(()),
                    None => s.index.bind(&wanted).await,
                }
            })
            .await
            .map(|_| ())
    }

    /// Embeds and indexes findings, then flips them to `indexed`. Returns the ids indexed.
    pub(super) async fn index_findings(&self, findings: &[Finding]) -> Result<Vec<FindingId>> {
        let Some(s) = self.search_parts() else { return Ok(Vec::new()) };
        self.verify_index().await?;
        let reserved = s.reserve(findings.iter().map(|f| f.finding_id));
        let batch: Vec<&Finding> = findings.iter().filter(|f| reserved.contains(&f.finding_id)).collect();
        let result = async {
            if batch.is_empty() {
                return Ok(Vec::new());
            }
            let texts: Vec<String> = batch.iter().map(|f| f.content.clone()).collect();
            let vectors = s.embedder.embed(&texts).await?;
            if vectors.len() != batch.len() {
                return Err(Error::backend(
                    "embedder",
                    false,
                    format!("embedder returned {} vectors for {} texts", vectors.len(), batch.len()),
                    None,
                ));
            }
            let records: Vec<VectorRecord> = batch
                .iter()
                .zip(vectors)
                .map(|(f, vector)| VectorRecord {
                    room_id: f.room_id,
                    finding_id: f.finding_id,
                    tags: f.tags.clone(),
                    agent_id: f.agent_id.clone(),
                    vector,
                })
                .collect();
            s.index.upsert(&records).await?;
            // A finding erased while its text was being embedded (its vector was deleted
            // before this one was written): the vector goes again, and it stays as erased.
            // One read per room of the batch, not per finding (posts are indexed here on a
            // store that is not its own index).
            let mut live = HashSet::new();
            let mut rooms: Vec<RoomId> = batch.iter().map(|f| f.room_id).collect();
            rooms.sort();
            rooms.dedup();
            for room in rooms {
                let ids: Vec<FindingId> =
                    batch.iter().filter(|f| f.room_id == room).map(|f| f.finding_id).collect();
                let now = self.inner.store.get_findings(room, &ids).await?;
                live.extend(now.iter().filter(|x| x.erased.is_none()).map(|x| x.finding_id));
            }
            let mut done = Vec::with_capacity(batch.len());
            for f in &batch {
                if !live.contains(&f.finding_id) {
                    s.index.delete(f.room_id, &[f.finding_id]).await?;
                    continue;
                }
                self.inner.store.set_index_status(f.room_id, f.finding_id, IndexStatus::Indexed).await?;
                done.push(f.finding_id);
            }
            Ok(done)
        }
        .await;
        s.release(&reserved);
        result
    }

    /// The vector of a finding about to be posted, when the index is the store itself (so both
    /// can be written at once); `None` when it is not, or embedding failed (the post then takes
    /// the general path and never fails for it).
    pub(crate) async fn vector_for_post(&self, finding: &Finding) -> Option<VectorRecord> {
        let s = self.search_parts().filter(|s| s.colocated)?;
        self.verify_index().await.ok()?;
        let mut v = s.embedder.embed(std::slice::from_ref(&finding.content)).await.ok()?;
        let vector = v.pop().filter(|v| v.len() == s.embedder.dimension())?;
        Some(VectorRecord {
            room_id: finding.room_id,
            finding_id: finding.finding_id,
            tags: finding.tags.clone(),
            agent_id: finding.agent_id.clone(),
            vector,
        })
    }

    /// The inline half of the write protocol: best effort, never fails the post.
    pub(crate) async fn index_after_post(&self, finding: &mut Finding) {
        if self.search_parts().is_none() {
            return;
        }
        if let Ok(done) = self.index_findings(std::slice::from_ref(finding)).await
            && done.contains(&finding.finding_id)
        {
            finding.index_status = IndexStatus::Indexed;
        }
    }

    /// One reconciler pass: indexes pending findings older than the grace period, in batches,
    /// until none are left or `max` were attempted. Failures leave findings pending for the
    /// next pass.
    pub async fn reconcile(&self, max: usize) -> Result<ReconcileReport> {
        if self.search_parts().is_none() {
            return Ok(ReconcileReport::default());
        }
        self.verify_index().await?;
        let mut report = ReconcileReport::default();
        let mut attempted = 0usize;
        let mut skip: HashSet<FindingId> = HashSet::new();
        while attempted < max {
            // Inclusive of findings exactly `grace` old.
            let before =
                self.now().plus_millis(1 - self.inner.search_config.reconcile_grace.as_millis() as i64);
            let want = self.inner.search_config.reconcile_batch.min(max - attempted);
            let pending: Vec<Finding> = self
                .inner
                .store
                .pending_findings(before, want + skip.len())
                .await?
                .into_iter()
                .filter(|f| !skip.contains(&f.finding_id))
                .take(want)
                .collect();
            if pending.is_empty() {
                break;
            }
            attempted += pending.len();
            match self.index_findings(&pending).await {
                Ok(done) => {
                    report.indexed += done.len() as u64;
                    // Findings another path holds in flight are skipped this pass.
                    skip.extend(pending.iter().map(|f| f.finding_id).filter(|id| !done.contains(id)));
                }
                Err(e) => {
                    report.failed += pending.len() as u64;
                    report.last_error = Some(e.to_string());
                    skip.extend(pending.iter().map(|f| f.finding_id));
                }
            }
        }
        Ok(report)
    }

    /// Runs [`reconcile`](Macp::reconcile) every `every` in the background until the handle is
    /// dropped. Must be called inside a tokio runtime.
    pub fn start_reconciler(&self, every: Duration) -> ReconcilerHandle {
        let macp = self.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                // Errors are reported by the next explicit reconcile; the loop keeps going.
                let _ = macp.reconcile(10_000).await;
            }
        });
        ReconcilerHandle { task }
    }

    /// Rebuilds the vector index with this service's embedder: drops every vector, marks every
    /// finding pending, and reconciles until all are indexed. Returns the findings indexed.
    pub async fn reindex(&self) -> Result<ReconcileReport> {
        let Some(s) = self.search_parts() else {
            return Err(Error::invalid(
                "embedder",
                "reindex needs an embedder and a vector index configured",
            ));
        };
        s.index.reset(&s.model()).await?;
        self.inner.store.mark_all_pending().await?;
        let mut total = ReconcileReport::default();
        loop {
            let before = self.now().plus_millis(1);
            let pending =
                self.inner.store.pending_findings(before, self.inner.search_config.reconcile_batch).await?;
            if pending.is_empty() {
                break;
            }
            match self.index_findings(&pending).await {
                Ok(done) if !done.is_empty() => total.indexed += done.len() as u64,
                Ok(_) => break,
                Err(e) => {
                    total.failed += pending.len() as u64;
                    total.last_error = Some(e.to_string());
                    return Err(e);
                }
            }
        }
        Ok(total)
    }

    /// Finds findings by meaning and by words, fused, hydrated from the store, within one room.
    pub async fn search_findings(&self, who: &Principal, q: SearchFindings) -> Result<SearchResults> {
        let l = &self.inner.limits;
        self.room(who, q.room_id).await?;
        let cfg = &self.inner.search_config;
        let query = validate::required_text("query", &q.query, cfg.max_query_bytes)?;
        let limit = validate::page_size("limit", q.limit, cfg.default_results, cfg.max_results)?;
        let tags = if q.tags.is_empty() { Vec::new() } else { validate::tags("tags", &q.tags, l)? };

        // The query's vector, once for every room searched.
        let mut vector = None;
        if let Some(s) = self.search_parts() {
            let v = async {
                self.verify_index().await?;
                let mut v = s.embedder.embed(std::slice::from_ref(&query)).await?;
                v.pop().ok_or_else(|| Error::backend("embedder", true, "embedder returned no vector", None))
            }
            .await;
            // A failing embedder degrades search to keywords rather than failing it.
            vector = v.ok();
        }
        let semantic = vector.is_some();
        let agent = q.agent_id.as_ref();
        if !q.all_rooms {
            let results = self.search_room(q.room_id, &query, vector.as_deref(), limit, &tags, agent).await?;
            return Ok(SearchResults { results, semantic, rooms_searched: None, rooms_not_searched: None });
        }
        // Every room the caller may see (members-only rooms only to their members), newest first.
        let mut rooms = Vec::new();
        let mut after = None;
        loop {
            let page = self.inner.store.list_rooms(None, after, l.max_page).await?;
            let last = page.last().map(|r| RoomKey { created_at: r.created_at, room_id: r.room_id });
            let more = page.len() == l.max_page;
            rooms.extend(page.into_iter().filter(|r| r.admits(&who.user_id)));
            match last {
                Some(k) if more => after = Some(k),
                _ => break,
            }
        }
        let total = rooms.len();
        // The asking room first, then the newest others.
        rooms.sort_by_key(|r| r.room_id != q.room_id);
        rooms.truncate(MAX_ROOMS_SEARCHED);
        // Owned ids: a closure over `&Room` would make the futures' lifetime higher-ranked, which
        // the `Send` bound of the MCP handlers cannot prove.
        let ids: Vec<RoomId> = rooms.iter().map(|r| r.room_id).collect();
        let (query, vector, tags) = (&query, vector.as_deref(), &tags);
        let searches = ids.into_iter().map(|id| self.search_room(id, query, vector, limit, tags, agent));
        let per_room: Vec<Vec<SearchHit>> =
            futures_util::stream::iter(searches).buffered(ROOMS_AT_ONCE).try_collect().await?;
        let mut results: Vec<SearchHit> = Vec::new();
        for (room, hits) in rooms.iter().zip(per_room) {
            let label = RoomLabel {
                name: room.name.clone(),
                objective: room.objective.clone(),
                status: room.status,
                resolution: room.resolution.as_ref().map(|r| r.summary.clone()),
            };
            results.extend(hits.into_iter().map(|h| SearchHit { room: Some(label.clone()), ..h }));
        }
        results.sort_by(|a, b| b.score.total_cmp(&a.score));
        results.truncate(limit);
        Ok(SearchResults {
            results,
            semantic,
            rooms_searched: Some(rooms.len()),
            rooms_not_searched: Some(total - rooms.len()),
        })
    }

    /// One room's hybrid search, with the query's vector when there is one.
    async fn search_room(
        &self,
        room_id: RoomId,
        query: &str,
        vector: Option<&[f32]>,
        limit: usize,
        tags: &[String],
        agent: Option<&AgentId>,
    ) -> Result<Vec<SearchHit>> {
        let cfg = &self.inner.search_config;
        let filtered = !tags.is_empty() || agent.is_some();
        let filter = VectorFilter { tags_any: tags.to_vec(), agent_id: agent.cloned() };

        // Semantic evidence: the nearest findings, plus the cosine of every keyword match
        // outside them, so fusion sees both signals for every candidate.
        // Filters apply after hydration, so widen the keyword pool when filtering. A store
        // without keyword search answers None: meaning alone then.
        let k = if filtered { cfg.candidates * 4 } else { cfg.candidates };
        let keyword = self.inner.store.keyword_search(room_id, query, k).await?.unwrap_or_default();
        let mut cosines: Vec<(FindingId, f32)> = Vec::new();
        if let (Some(s), Some(v)) = (self.search_parts(), vector) {
            cosines = s
                .index
                .query(room_id, v, cfg.candidates, &filter)
                .await?
                .into_iter()
                .map(|h| (h.finding_id, h.score))
                .collect();
            let missing: Vec<FindingId> = keyword
                .hits
                .iter()
                .map(|h| h.finding_id)
                .filter(|id| !cosines.iter().any(|c| c.0 == *id))
                .collect();
            if !missing.is_empty() {
                cosines.extend(
                    s.index.scores(room_id, v, &missing).await?.into_iter().map(|h| (h.finding_id, h.score)),
                );
            }
        }
        let kw: Vec<(FindingId, f64)> = keyword.hits.iter().map(|h| (h.finding_id, h.score)).collect();
        let fused = fuse(&cosines, &kw, keyword.ideal, &cfg.fusion);

        let mut results = Vec::with_capacity(limit);
        let aliases = self.aliases(room_id).await?;
        for chunk in fused.chunks(limit.max(16)) {
            let ids: Vec<FindingId> = chunk.iter().map(|f| f.finding_id).collect();
            let mut found = self.inner.store.get_findings(room_id, &ids).await?;
            resolve_refs(&aliases, &mut found)?;
            for f in chunk {
                let Some(finding) = found.iter().find(|x| x.finding_id == f.finding_id) else { continue };
                // An index that has not caught up with an erasure yet (another server's) must
                // not surface it.
                if finding.erased.is_some() {
                    continue;
                }
                if !tags.is_empty() && !finding.tags.iter().any(|t| tags.contains(t)) {
                    continue;
                }
                if agent.is_some_and(|a| &finding.agent_id != a) {
                    continue;
                }
                results.push(SearchHit {
                    finding: finding.clone(),
                    score: f.score,
                    semantic_rank: f.semantic_rank,
                    keyword_rank: f.keyword_rank,
                    room: None,
                });
                if results.len() == limit {
                    break;
                }
            }
            if results.len() == limit {
                break;
            }
        }
        Ok(results)
    }
}
