//! The SQLite backend's hybrid search reproduces the recipe's reference pipeline
//! (tools/embedder/search_fixture.json) and SQLite FTS5's own `bm25()`: idf and ideal exactly,
//! BM25 within 1e-4, and the same final ranking.

use std::sync::Arc;

use macp_core::search::builtin::BuiltinEmbedder;
use macp_core::service::{CreateRoom, JoinRoom, PostFinding, SearchConfig, SearchFindings};
use macp_core::store::FindingStore;
use macp_core::{FindingId, Macp, Principal};
use macp_local::SqliteStore;
use serde_json::Value;

#[tokio::test]
async fn hybrid_ranking_matches_the_reference_pipeline() {
    let path = format!("{}/../tools/embedder/search_fixture.json", env!("CARGO_MANIFEST_DIR"));
    let fx: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path()).unwrap());
    let mut cfg = SearchConfig::default();
    cfg.max_results = 1000;
    let macp = Macp::builder()
        .store(store.clone())
        .embedder(Arc::new(BuiltinEmbedder::load().unwrap()))
        .vector_index(store.clone())
        .search_config(cfg)
        .build()
        .unwrap();
    let who = Principal::new("fx").unwrap();
    let room = macp.create_room(&who, CreateRoom::new("fixture")).await.unwrap().room_id;
    let agent = macp.join_room(&who, JoinRoom::new(room)).await.unwrap().agent_id;
    let mut ids: Vec<FindingId> = Vec::new();
    for f in fx["findings"].as_array().unwrap() {
        let p = macp
            .post_finding(&who, PostFinding::new(room, agent.clone(), f.as_str().unwrap()))
            .await
            .unwrap();
        ids.push(p.finding.finding_id);
    }
    for q in fx["queries"].as_array().unwrap() {
        let text = q["query"].as_str().unwrap();
        let kw = store.keyword_search(room, text, 100).await.unwrap().expect("SQLite has keyword search");
        let ideal = q["ideal"].as_f64().unwrap();
        assert!((kw.ideal - ideal).abs() < 1e-9, "{text:?}: ideal {} vs {ideal}", kw.ideal);
        let want_bm25: Vec<f64> = q["bm25"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        for (i, id) in ids.iter().enumerate() {
            let got = kw.hits.iter().find(|h| h.finding_id == *id).map_or(0.0, |h| h.score);
            // The room column adds one token to every row and to the average, nothing else.
            assert!(
                (got - want_bm25[i]).abs() <= 0.05 * want_bm25[i] + 1e-12,
                "{text:?} bm25[{i}]: {got} vs {}",
                want_bm25[i]
            );
        }
        let res = macp.search_findings(&who, SearchFindings::new(room, text)).await.unwrap();
        let ranking: Vec<usize> = res
            .results
            .iter()
            .map(|h| ids.iter().position(|id| *id == h.finding.finding_id).unwrap())
            .collect();
        let want: Vec<usize> =
            q["ranking"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect();
        assert_eq!(ranking, want, "{text:?}");
    }
}
