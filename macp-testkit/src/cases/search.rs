//! Search and the indexing write protocol. These cases run with the built-in embedder over the
//! backend's own vector index ([`Backend::with_vector_index`]); a backend without one skips the
//! semantic cases and still runs the keyword ones.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use macp_core::model::IndexStatus;
use macp_core::search::builtin::BuiltinEmbedder;
use macp_core::search::{Embedder, IndexModel, VectorFilter, VectorHit, VectorIndex, VectorRecord};
use macp_core::service::{CreateRoom, JoinRoom, PostFinding, SearchFindings, TimelineQuery};
use macp_core::{AgentId, Error, FindingId, Macp, Principal, Result, RoomId};

use crate::Backend;
use crate::cases::expect_code;

/// An embedder that fails while `failing` is set, counting calls.
#[derive(Debug)]
pub struct FlakyEmbedder {
    inner: BuiltinEmbedder,
    /// While true, every call fails with a retryable backend error.
    pub failing: AtomicBool,
    /// Calls made.
    pub calls: AtomicUsize,
}

impl FlakyEmbedder {
    /// The built-in embedder, initially healthy.
    pub fn new() -> Self {
        Self {
            inner: BuiltinEmbedder::load().expect("built-in model"),
            failing: AtomicBool::new(false),
            calls: AtomicUsize::new(0),
        }
    }
}

impl Default for FlakyEmbedder {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Embedder for FlakyEmbedder {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }
    fn dimension(&self) -> usize {
        self.inner.dimension()
    }
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.failing.load(Ordering::SeqCst) {
            return Err(Error::backend("embedder", true, "injected embedder failure", None));
        }
        self.inner.embed(texts).await
    }
}

/// A vector index wrapper that can fail upserts and counts upserts per finding.
#[derive(Debug)]
pub struct CountingIndex {
    inner: Arc<dyn VectorIndex>,
    /// While true, upserts fail.
    pub failing: AtomicBool,
    /// While true, upserts are written and then reported as failed (a response lost after the
    /// write landed).
    pub fail_after_write: AtomicBool,
    /// Successful upserts per finding.
    pub upserts: Mutex<HashMap<FindingId, usize>>,
}

impl CountingIndex {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn VectorIndex>) -> Self {
        Self {
            inner,
            failing: AtomicBool::new(false),
            fail_after_write: AtomicBool::new(false),
            upserts: Mutex::new(HashMap::new()),
        }
    }
}

#[async_trait]
impl VectorIndex for CountingIndex {
    fn name(&self) -> &'static str {
        "counting"
    }
    async fn model(&self) -> Result<Option<IndexModel>> {
        self.inner.model().await
    }
    async fn bind(&self, model: &IndexModel) -> Result<()> {
        self.inner.bind(model).await
    }
    async fn reset(&self, model: &IndexModel) -> Result<()> {
        self.inner.reset(model).await
    }
    async fn upsert(&self, records: &[VectorRecord]) -> Result<()> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(Error::backend("index", true, "injected index failure", None));
        }
        self.inner.upsert(records).await?;
        {
            let mut u = self.upserts.lock().unwrap_or_else(|p| p.into_inner());
            for r in records {
                *u.entry(r.finding_id).or_default() += 1;
            }
        }
        if self.fail_after_write.load(Ordering::SeqCst) {
            return Err(Error::backend("index", true, "injected failure after the write", None));
        }
        Ok(())
    }
    async fn delete(&self, room_id: RoomId, ids: &[FindingId]) -> Result<()> {
        self.inner.delete(room_id, ids).await
    }
    async fn query(
        &self,
        room_id: RoomId,
        vector: &[f32],
        k: usize,
        filter: &VectorFilter,
    ) -> Result<Vec<VectorHit>> {
        self.inner.query(room_id, vector, k, filter).await
    }
    async fn scores(&self, room_id: RoomId, vector: &[f32], ids: &[FindingId]) -> Result<Vec<VectorHit>> {
        self.inner.scores(room_id, vector, ids).await
    }
    async fn count(&self, room_id: RoomId) -> Result<u64> {
        self.inner.count(room_id).await
    }
}

fn searching(backend: &Backend, embedder: Arc<dyn Embedder>, index: Arc<dyn VectorIndex>) -> Macp {
    let mut cfg = macp_core::service::SearchConfig::default();
    cfg.reconcile_grace = std::time::Duration::ZERO;
    Macp::builder()
        .store(backend.store.clone())
        .embedder(embedder)
        .vector_index(index)
        .search_config(cfg)
        .build()
        .expect("service")
}

/// The backend's vector index (the cases that call this are registered for `vectors` only).
fn index_of(backend: &Backend) -> Arc<dyn VectorIndex> {
    backend.vector_index.clone().expect("the backend declares vectors but gave no vector index")
}

/// A service searching with everything the backend has: words, and meaning too where it has a
/// vector index (the cases that call this hold either way).
fn hybrid(backend: &Backend) -> Macp {
    match backend.vector_index.clone() {
        Some(index) => searching(backend, Arc::new(BuiltinEmbedder::load().expect("built-in model")), index),
        None => Macp::builder().store(backend.store.clone()).build().expect("service"),
    }
}

/// A service with the built-in embedder on the backend's index.
fn semantic(backend: &Backend) -> Macp {
    searching(backend, Arc::new(BuiltinEmbedder::load().expect("built-in model")), index_of(backend))
}

struct Room {
    id: RoomId,
    agent: AgentId,
    who: Principal,
}

async fn room(macp: &Macp) -> Room {
    let who = Principal::new("searcher").unwrap();
    let id = macp.create_room(&who, CreateRoom::new("search")).await.unwrap().room_id;
    let agent = macp.join_room(&who, JoinRoom::new(id)).await.unwrap().agent_id;
    Room { id, agent, who }
}

const CORPUS: [&str; 8] = [
    "orders-db-1 reports max_connections=500 reached; new connections are refused.",
    "Checkout 502 rate rose from 0.1% to 14% at 09:41 UTC, right after deploy checkout-v7.",
    "Disk usage on the logging volume of ip-10-0-3-17 crossed 95% overnight.",
    "The TLS certificate for api.example.com expires in 3 days and auto-renewal is failing.",
    "IAM role arn:aws:iam::123456789012:role/deployer was assumed from an unknown IP at 03:12.",
    "Kafka consumer lag on the payments topic grows by 20k messages a minute.",
    "Commit 4f2a9c1 changed the retry policy of payments-worker to retry three times.",
    "p99 latency of the search service doubled when the cache hit rate fell to 40%.",
];

async fn seed(macp: &Macp, r: &Room) -> Vec<FindingId> {
    let mut ids = Vec::new();
    for (i, c) in CORPUS.iter().enumerate() {
        let tag = if i % 2 == 0 { "evidence" } else { "triage" };
        ids.push(
            macp.post_finding(&r.who, PostFinding::new(r.id, r.agent.clone(), *c).tags([tag]))
                .await
                .unwrap()
                .finding
                .finding_id,
        );
    }
    ids
}

async fn top(macp: &Macp, r: &Room, query: &str) -> Vec<FindingId> {
    let res = macp.search_findings(&r.who, SearchFindings::new(r.id, query)).await.unwrap();
    res.results.iter().map(|h| h.finding.finding_id).collect()
}

/// A paraphrase that shares no word with its finding finds it first.
pub async fn search_finds_a_paraphrase_without_shared_words(backend: Backend) {
    let macp = semantic(&backend);
    let r = room(&macp).await;
    let ids = seed(&macp, &r).await;
    for (query, want) in [
        ("the database is refusing new clients because its limit is hit", 0),
        ("web storage volume almost full", 2),
        ("security credential for our website will lapse soon", 3),
    ] {
        let found = top(&macp, &r, query).await;
        assert_eq!(found.first(), Some(&ids[want]), "{query:?} should find {:?} first", CORPUS[want]);
    }
}

/// A keyword query naming an exact identifier finds the finding that contains it first.
pub async fn search_finds_an_exact_identifier_first(backend: Backend) {
    let macp = hybrid(&backend);
    let r = room(&macp).await;
    let ids = seed(&macp, &r).await;
    assert_eq!(top(&macp, &r, "4f2a9c1").await.first(), Some(&ids[6]));
    assert_eq!(top(&macp, &r, "arn:aws:iam::123456789012:role/deployer").await.first(), Some(&ids[4]));
    assert_eq!(top(&macp, &r, "ip-10-0-3-17").await.first(), Some(&ids[2]));
}

/// Results never come from another room, and tag and agent filters hold.
pub async fn search_stays_in_its_room_and_honours_filters(backend: Backend) {
    let macp = hybrid(&backend);
    let a = room(&macp).await;
    let b = room(&macp).await;
    let in_a = seed(&macp, &a).await;
    let in_b = seed(&macp, &b).await;
    let found = macp
        .search_findings(
            &a.who,
            SearchFindings { limit: Some(50), ..SearchFindings::new(a.id, "connections refused database") },
        )
        .await
        .unwrap();
    assert!(!found.results.is_empty());
    assert!(
        found
            .results
            .iter()
            .all(|h| in_a.contains(&h.finding.finding_id) && !in_b.contains(&h.finding.finding_id))
    );
    let tagged = macp
        .search_findings(
            &a.who,
            SearchFindings {
                tags: vec!["triage".into()],
                ..SearchFindings::new(a.id, "database connections")
            },
        )
        .await
        .unwrap();
    assert!(tagged.results.iter().all(|h| h.finding.tags == vec!["triage"]), "tag filter holds");
    let other = macp
        .join_room(&a.who, JoinRoom::new(a.id).agent(AgentId::new("other").unwrap()))
        .await
        .unwrap()
        .agent_id;
    macp.post_finding(
        &a.who,
        PostFinding::new(a.id, other.clone(), "database connections from the other agent"),
    )
    .await
    .unwrap();
    let by_agent = macp
        .search_findings(
            &a.who,
            SearchFindings {
                agent_id: Some(other.clone()),
                ..SearchFindings::new(a.id, "database connections")
            },
        )
        .await
        .unwrap();
    assert_eq!(by_agent.results.len(), 1);
    assert_eq!(by_agent.results[0].finding.agent_id, other);
    expect_code(macp.search_findings(&a.who, SearchFindings::new(a.id, "   ")).await, "invalid_input");
    expect_code(
        macp.search_findings(&a.who, SearchFindings { limit: Some(51), ..SearchFindings::new(a.id, "x") })
            .await,
        "invalid_input",
    );
    expect_code(
        macp.search_findings(&a.who, SearchFindings::new(RoomId::generate(), "x")).await,
        "not_found",
    );
}

/// With a healthy embedder and index, a post comes back `indexed` and is found by meaning at once.
pub async fn posts_are_indexed_inline_and_searchable_at_once(backend: Backend) {
    let macp = semantic(&backend);
    let r = room(&macp).await;
    let p = macp
        .post_finding(
            &r.who,
            PostFinding::new(
                r.id,
                r.agent.clone(),
                "The nightly backup job silently skipped the billing schema.",
            ),
        )
        .await
        .unwrap();
    assert_eq!(p.finding.index_status, IndexStatus::Indexed);
    let stored = macp.timeline(&r.who, TimelineQuery::new(r.id)).await.unwrap();
    assert_eq!(stored.findings[0].index_status, IndexStatus::Indexed, "the flip is stored");
    assert_eq!(
        top(&macp, &r, "missing data in last night's copy of invoices").await.first(),
        Some(&p.finding.finding_id)
    );
}

/// Embedder and index failures never fail a post or lose a finding: posts succeed as
/// `pending`, and the reconciler later indexes every one of them exactly once.
pub async fn failed_indexing_loses_nothing_and_reconciles_exactly_once(backend: Backend) {
    let inner = index_of(&backend);
    let embedder = Arc::new(FlakyEmbedder::new());
    let index = Arc::new(CountingIndex::new(inner));
    let macp = searching(&backend, embedder.clone(), index.clone());
    let r = room(&macp).await;
    let mut ids = Vec::new();
    for (i, c) in CORPUS.iter().enumerate() {
        // Alternate failure modes: embedder down, index down, both healthy.
        embedder.failing.store(i % 3 == 0, Ordering::SeqCst);
        index.failing.store(i % 3 == 1, Ordering::SeqCst);
        let p = macp
            .post_finding(&r.who, PostFinding::new(r.id, r.agent.clone(), *c))
            .await
            .expect("a post never fails on indexing");
        let want = if i % 3 == 2 { IndexStatus::Indexed } else { IndexStatus::Pending };
        assert_eq!(p.finding.index_status, want, "post {i}");
        ids.push(p.finding.finding_id);
    }
    // While both are down, a reconciler pass fails softly and leaves everything pending.
    embedder.failing.store(true, Ordering::SeqCst);
    let report = macp.reconcile(100).await.unwrap();
    assert_eq!(report.indexed, 0);
    assert!(report.failed > 0 && report.last_error.is_some());
    // Pending findings are still found by their words meanwhile.
    let words =
        macp.search_findings(&r.who, SearchFindings::new(r.id, "max_connections refused")).await.unwrap();
    assert_eq!(words.results.first().map(|h| h.finding.finding_id), Some(ids[0]));
    assert!(!words.semantic, "the response says semantic search was unavailable");
    // Recovery: one pass indexes the rest; a second finds nothing to do.
    embedder.failing.store(false, Ordering::SeqCst);
    index.failing.store(false, Ordering::SeqCst);
    let report = macp.reconcile(100).await.unwrap();
    let pending = (0..CORPUS.len()).filter(|i| i % 3 != 2).count() as u64;
    assert_eq!(report.indexed, pending, "every pending finding");
    assert_eq!(macp.reconcile(100).await.unwrap().indexed, 0);
    let all = macp.timeline(&r.who, TimelineQuery::new(r.id)).await.unwrap();
    assert!(all.findings.iter().all(|f| f.index_status == IndexStatus::Indexed));
    let upserts = index.upserts.lock().unwrap().clone();
    for id in &ids {
        assert_eq!(upserts.get(id), Some(&1), "finding {id} indexed exactly once");
    }
    assert_eq!(index.count(r.id).await.unwrap(), CORPUS.len() as u64);
}

/// An index write that landed but reported failure leaves the finding pending; the reconciler
/// writes it again, and the index still holds it once (upserts are keyed by finding).
pub async fn an_index_write_reported_as_failed_is_not_duplicated(backend: Backend) {
    let inner = index_of(&backend);
    let index = Arc::new(CountingIndex::new(inner));
    let macp = searching(&backend, Arc::new(FlakyEmbedder::new()), index.clone());
    let r = room(&macp).await;
    index.fail_after_write.store(true, Ordering::SeqCst);
    let mut ids = Vec::new();
    for c in &CORPUS[..3] {
        let p = macp.post_finding(&r.who, PostFinding::new(r.id, r.agent.clone(), *c)).await.unwrap();
        assert_eq!(p.finding.index_status, IndexStatus::Pending, "the post cannot know the write landed");
        ids.push(p.finding.finding_id);
    }
    index.fail_after_write.store(false, Ordering::SeqCst);
    assert_eq!(macp.reconcile(100).await.unwrap().indexed, 3);
    let upserts = index.upserts.lock().unwrap().clone();
    assert!(ids.iter().all(|id| upserts.get(id) == Some(&2)), "each was written twice: {upserts:?}");
    assert_eq!(index.count(r.id).await.unwrap(), 3, "and is held once");
    let res = macp.search_findings(&r.who, SearchFindings::new(r.id, CORPUS[0])).await.unwrap();
    let mut seen: Vec<FindingId> = res.results.iter().map(|h| h.finding.finding_id).collect();
    let n = seen.len();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), n, "no finding appears twice in results");
    assert_eq!(res.results.first().map(|h| h.finding.finding_id), Some(ids[0]));
}

/// Without semantic search, findings are still found by their words.
pub async fn pending_findings_are_found_by_their_words(backend: Backend) {
    let macp = Macp::builder().store(backend.store.clone()).build().unwrap();
    let r = room(&macp).await;
    let ids = seed(&macp, &r).await;
    let res = macp.search_findings(&r.who, SearchFindings::new(r.id, "kafka consumer lag")).await.unwrap();
    assert!(!res.semantic);
    assert_eq!(res.results.first().map(|h| h.finding.finding_id), Some(ids[5]));
    assert!(res.results.iter().all(|h| h.finding.index_status == IndexStatus::Pending));
}

/// The first findings of a new room are found by their words: with one or two findings every
/// term is in at least half the room (BM25's idf is floored), and an identifier must still match.
pub async fn a_rooms_first_findings_are_found_by_their_words(backend: Backend) {
    let macp = Macp::builder().store(backend.store.clone()).build().unwrap();
    let r = room(&macp).await;
    let post = |content: &'static str| {
        let (macp, r) = (macp.clone(), &r);
        async move {
            macp.post_finding(&r.who, PostFinding::new(r.id, r.agent.clone(), content))
                .await
                .unwrap()
                .finding
                .finding_id
        }
    };
    let found = |query: &'static str| {
        let (macp, r) = (macp.clone(), &r);
        async move {
            let res = macp.search_findings(&r.who, SearchFindings::new(r.id, query)).await.unwrap();
            res.results.iter().map(|h| h.finding.finding_id).collect::<Vec<_>>()
        }
    };
    let first = post("Deploy d-7f3a2 shrank the orders-db connection pool to 5").await;
    assert_eq!(found("d-7f3a2").await, [first], "the only finding, by its identifier");
    let second = post("Checkout p99 latency rose to 4.1 s at 09:41").await;
    assert_eq!(found("orders-db").await, [first], "only the finding that names it");
    assert_eq!(found("latency").await, [second]);
}

/// An index built with one model refuses another, naming both; reindex rebuilds it.
pub async fn an_index_built_by_another_model_is_refused_until_reindexed(backend: Backend) {
    let index = index_of(&backend);
    let other = IndexModel { model_id: "some-other-model".into(), dimension: 256 };
    index.bind(&other).await.expect("bind a fresh index");
    let macp = searching(&backend, Arc::new(BuiltinEmbedder::load().unwrap()), index.clone());
    let e = expect_code(macp.verify_index().await, "conflict");
    let msg = e.to_string();
    assert!(
        msg.contains("some-other-model") && msg.contains("macp-static-256") && msg.contains("reindex"),
        "{msg}"
    );
    let report = macp.reindex().await.unwrap();
    assert_eq!(report.failed, 0);
    let fresh = searching(&backend, Arc::new(BuiltinEmbedder::load().unwrap()), index.clone());
    fresh.verify_index().await.expect("bound to the current model after reindex");
    let r = room(&fresh).await;
    let ids = seed(&fresh, &r).await;
    assert_eq!(top(&fresh, &r, "kafka consumer lag on payments").await.first(), Some(&ids[5]));
}

/// "Have we seen this before?": `all_rooms` searches every room the caller may see, closed
/// ones included, and each result names its room (objective, status, resolution); without it
/// a search stays in its room.
pub async fn search_across_rooms_finds_past_incidents_and_names_them(backend: Backend) {
    use macp_core::model::{Channel, RoomStatus};
    use macp_core::service::CloseRoom;
    let macp = hybrid(&backend);
    let old = room(&macp).await;
    let past = macp
        .post_finding(
            &old.who,
            PostFinding::new(
                old.id,
                old.agent.clone(),
                "HikariPool-1 connection timeout after deploy 4471 halved maxPoolSize",
            )
            .tags(["root-cause"]),
        )
        .await
        .unwrap()
        .finding;
    macp.close_room(
        &old.who,
        CloseRoom::new(old.id).resolution("reverted deploy 4471", [past.finding_id]),
        Channel::Person,
    )
    .await
    .unwrap();
    let now = room(&macp).await;
    macp.post_finding(
        &now.who,
        PostFinding::new(now.id, now.agent.clone(), "checkout p99 is up since 10:00"),
    )
    .await
    .unwrap();

    let here = macp
        .search_findings(&now.who, SearchFindings::new(now.id, "HikariPool connection timeout"))
        .await
        .unwrap();
    assert!(here.results.iter().all(|h| h.finding.room_id == now.id), "a plain search stays in its room");
    assert_eq!(here.rooms_searched, None);

    let everywhere = macp
        .search_findings(&now.who, SearchFindings::new(now.id, "HikariPool connection timeout").all_rooms())
        .await
        .unwrap();
    let hit = everywhere
        .results
        .iter()
        .find(|h| h.finding.finding_id == past.finding_id)
        .expect("the closed room's finding is found");
    assert_eq!(hit.finding.room_id, old.id);
    let label = hit.room.as_ref().expect("each result names its room");
    assert_eq!(label.status, RoomStatus::Closed);
    assert_eq!(label.resolution.as_deref(), Some("reverted deploy 4471"));
    assert!(everywhere.results.iter().all(|h| h.room.is_some()));
    assert!(everywhere.rooms_searched.unwrap() >= 2);
    assert_eq!(everywhere.rooms_not_searched, Some(0));
    let tagged = macp
        .search_findings(
            &now.who,
            SearchFindings {
                tags: vec!["triage".into()],
                ..SearchFindings::new(now.id, "HikariPool connection timeout").all_rooms()
            },
        )
        .await
        .unwrap();
    assert!(
        tagged.results.iter().all(|h| h.finding.finding_id != past.finding_id),
        "filters hold across rooms"
    );
}
