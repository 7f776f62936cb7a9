//! Findings: the room's record and its commit order.

use std::collections::BTreeMap;

use async_trait::async_trait;

use super::*;
use crate::error::Result;
use crate::ids::{AgentId, EntityId, FindingId, RoomId, Timestamp};
use crate::model::{Erasure, Event, Finding, IndexStatus};
use crate::search::VectorRecord;

/// Which findings to read. All filters combine with AND; `tags_any` matches a finding carrying
/// at least one of the tags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FindingQuery {
    /// Only findings with `seq > after_seq` (ascending) or `seq < before_seq` (descending).
    pub after_seq: u64,
    /// Upper bound, exclusive; `None` means no bound.
    pub before_seq: Option<u64>,
    /// Only findings carrying at least one of these tags (already normalised).
    pub tags_any: Vec<String>,
    /// Only findings posted by this agent.
    pub agent_id: Option<AgentId>,
    /// Only findings that answer this one (`reply_to`).
    pub reply_to: Option<FindingId>,
    /// Only findings whose `entity_refs` (as stored, not resolved through merges) hold at least
    /// one of these.
    pub entity_refs_any: Vec<EntityId>,
    /// Only findings with `created_at >= since`.
    pub since: Option<Timestamp>,
    /// Only findings with `created_at < until`.
    pub until: Option<Timestamp>,
    /// At most this many.
    pub limit: usize,
    /// Newest first instead of oldest first.
    pub descending: bool,
}

impl FindingQuery {
    /// Every finding after `after_seq`, oldest first, at most `limit`.
    pub fn after(after_seq: u64, limit: usize) -> Self {
        Self {
            after_seq,
            before_seq: None,
            tags_any: Vec::new(),
            agent_id: None,
            reply_to: None,
            entity_refs_any: Vec::new(),
            since: None,
            until: None,
            limit,
            descending: false,
        }
    }

    /// The `limit` most recent findings, newest first.
    pub fn latest(limit: usize) -> Self {
        Self { descending: true, ..Self::after(0, limit) }
    }

    /// Whether `f` passes the filters (tags, agent, time range; not the sequence bounds, which
    /// stores read by). A store that cannot filter in its query language filters with this.
    pub fn matches(&self, f: &Finding) -> bool {
        (self.tags_any.is_empty() || f.tags.iter().any(|t| self.tags_any.contains(t)))
            && self.agent_id.as_ref().is_none_or(|a| &f.agent_id == a)
            && self.reply_to.is_none_or(|r| f.reply_to == Some(r))
            && (self.entity_refs_any.is_empty()
                || f.entity_refs.iter().any(|e| self.entity_refs_any.contains(e)))
            && self.since.is_none_or(|t| f.created_at >= t)
            && self.until.is_none_or(|t| f.created_at < t)
    }
}

/// Counts over a room's findings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FindingStats {
    /// Number of findings.
    pub total: u64,
    /// The highest `seq` (0 when empty).
    pub last_seq: u64,
    /// `created_at` of the finding with the highest `seq`.
    pub last_created_at: Option<Timestamp>,
    /// Findings per tag.
    pub tag_counts: BTreeMap<String, u64>,
}

/// A keyword match from [`FindingStore::keyword_search`].
#[derive(Debug, Clone, PartialEq)]
pub struct KeywordHit {
    /// The finding.
    pub finding_id: FindingId,
    /// Okapi BM25 (k1 = 1.2, b = 0.75) of the finding's content for the query; higher is better.
    pub score: f64,
}

/// The result of [`FindingStore::keyword_search`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeywordSearch {
    /// Best first.
    pub hits: Vec<KeywordHit>,
    /// The sum of the distinct query terms' idf ([`crate::search::bm25_idf`]), with the same
    /// statistics as the scores: `score / ideal` is the finding's keyword coverage.
    pub ideal: f64,
}

/// Findings: the room's record and its commit order.
#[async_trait]
pub trait FindingStore: Send + Sync {
    /// Appends a finding to its room. The `seq` field of `finding` is ignored.
    ///
    /// Contract: atomic. The store assigns `seq` = the room's previous highest `seq` + 1, so
    /// sequence numbers are gap-free and follow *commit* order: once a reader can see the
    /// finding with `seq = n`, it can see every finding with `seq < n`. This is what makes the
    /// updates cursor safe (see [`crate::cursor`]). The idempotency idempotency, if any, is recorded
    /// in the same atomic write; if the key is taken, nothing is written and
    /// [`Write::Replayed`] is returned. `event` is appended to the room's feed in the same
    /// write (see [`EventStore`]). When the finding is a verdict
    /// ([`Finding::standing_given`] is `Some((on, standing))`), the finding `on` of the same
    /// room gets that `standing` in the same write, replacing any earlier one (the service has
    /// checked that `on` exists). Returns the stored finding with its `seq`.
    async fn append_finding(
        &self,
        finding: &Finding,
        idempotency: Option<&IdempotencyKey>,
        event: &Event,
    ) -> Result<Write<Finding>>;

    /// Appends a finding and its vector in one atomic write: [`append_finding`]'s contract, and
    /// the vector stored as [`VectorIndex::upsert`] would, with `finding` already marked
    /// `indexed`. Either both are stored or neither.
    ///
    /// The service calls it only when this store is also its [`VectorIndex`] (the same object),
    /// so a post is indexed by the commit that stores it, with no window where it is pending.
    /// Return `Ok(None)` (the default) to have the service take the general path instead:
    /// append, then upsert, then mark indexed.
    ///
    /// [`append_finding`]: FindingStore::append_finding
    /// [`VectorIndex`]: crate::search::VectorIndex
    /// [`VectorIndex::upsert`]: crate::search::VectorIndex::upsert
    async fn append_finding_with_vector(
        &self,
        finding: &Finding,
        idempotency: Option<&IdempotencyKey>,
        vector: &VectorRecord,
        event: &Event,
    ) -> Result<Option<Write<Finding>>> {
        let _ = (finding, idempotency, vector, event);
        Ok(None)
    }

    /// Erases a finding (see [`Erasure`]).
    ///
    /// Contract: atomic. `Ok(None)` if the room has no such finding (nothing written). A finding
    /// already erased is returned as stored, and nothing is written. Otherwise its `content`
    /// becomes [`Erasure::notice`], its `evidence` is emptied, `erased` is set, and it is no
    /// longer `pending` (an erased finding is never embedded: `index_status` becomes
    /// `indexed`, and [`mark_all_pending`](FindingStore::mark_all_pending) skips it); every event of
    /// the room naming the finding (`finding_id`) gets the notice as its summary; `event` is
    /// appended to the feed; the finding leaves the store's keyword search. When the call returns,
    /// the old content and evidence cannot be read back from the store's storage by any means
    /// (not from its files, logs or caches; SQLite: deleted bytes are zeroed and the WAL is
    /// emptied). The vector is the service's to delete, through [`VectorIndex::delete`].
    ///
    /// [`VectorIndex::delete`]: crate::search::VectorIndex::delete
    async fn erase_finding(
        &self,
        room_id: RoomId,
        finding_id: FindingId,
        erasure: &Erasure,
        event: &Event,
    ) -> Result<Option<Finding>>;

    /// Fetches findings by id (any order; unknown ids are omitted).
    async fn get_findings(&self, room_id: RoomId, ids: &[FindingId]) -> Result<Vec<Finding>>;

    /// Reads findings matching `query`, ordered by `seq` (ascending, or descending when
    /// `query.descending`).
    async fn list_findings(&self, room_id: RoomId, query: &FindingQuery) -> Result<Vec<Finding>>;

    /// Sets a finding's `index_status`. Contract: `not_found` if the finding does not exist.
    async fn set_index_status(
        &self,
        room_id: RoomId,
        finding_id: FindingId,
        status: IndexStatus,
    ) -> Result<()>;

    /// Findings of any room still `pending` and created before `created_before`, oldest
    /// first, at most `limit`: the reconciler's work list.
    async fn pending_findings(&self, created_before: Timestamp, limit: usize) -> Result<Vec<Finding>>;

    /// Sets every finding of every room to `pending` (the reindex path), erased ones excepted.
    /// Returns how many.
    async fn mark_all_pending(&self) -> Result<u64>;

    /// Counts over the room's findings: exact, not estimates.
    async fn finding_stats(&self, room_id: RoomId) -> Result<FindingStats>;

    /// Keyword search over findings' content in one room: the findings containing at least one
    /// of the query's terms ([`crate::search::keyword_terms`]), best first by Okapi BM25
    /// (k1 = 1.2, b = 0.75, idf as [`crate::search::bm25_idf`]), at most `limit`. Document
    /// statistics (row count, average length, document frequencies) may be per store rather than
    /// per room, but `ideal` must use the same ones.
    ///
    /// Optional: the default answers `None` (the store has no keyword search), and the service
    /// then searches by meaning alone. [`crate::search::keyword::KeywordIndex`] does the work
    /// for a store that can list a room's findings.
    async fn keyword_search(
        &self,
        room_id: RoomId,
        query: &str,
        limit: usize,
    ) -> Result<Option<KeywordSearch>> {
        let _ = (room_id, query, limit);
        Ok(None)
    }
}
