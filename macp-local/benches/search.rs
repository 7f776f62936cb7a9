//! Search speed on the SQLite backend with the built-in embedder.
//!
//! ```text
//! cargo bench -p macp-local --bench search            # 1k, 10k, 100k findings
//! MACP_BENCH_SIZES=1000,10000 cargo bench -p macp-local --bench search
//! ```
//!
//! Prints the built-in model's embedding throughput, then for each room size: the time to post
//! the findings (through `post_finding`, embedding and indexing inline), and the median and p99
//! latency of `search_findings` (limit 10) over 300 queries, split into the vector scan and the
//! whole call. Finding and query texts are the labelled set's, varied by a suffix so that no two
//! findings are identical.

use std::sync::Arc;
use std::time::{Duration, Instant};

use macp_core::search::builtin::BuiltinEmbedder;
use macp_core::search::{Embedder, VectorFilter, VectorIndex};
use macp_core::service::{CreateRoom, JoinRoom, PostFinding, SearchFindings};
use macp_core::{AgentId, Macp, Principal};
use macp_local::{Durability, SqliteStore};
use serde_json::Value;

fn pct(sorted: &[Duration], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize].as_secs_f64() * 1e3
}

fn texts() -> (Vec<String>, Vec<String>) {
    let path = format!("{}/../../shared/eval/search-relevance.json", env!("CARGO_MANIFEST_DIR"));
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("the labelled set beside the repo"))
            .unwrap();
    let f =
        v["findings"].as_array().unwrap().iter().map(|x| x["content"].as_str().unwrap().to_owned()).collect();
    let q = v["queries"].as_array().unwrap().iter().map(|x| x["text"].as_str().unwrap().to_owned()).collect();
    (f, q)
}

const HOSTS: [&str; 8] = ["web", "api", "db", "cache", "queue", "worker", "edge", "auth"];

fn finding_text(base: &[String], i: usize) -> String {
    format!("{} (seen on {}-{} at t+{}s)", base[i % base.len()], HOSTS[i % 8], i / 8 % 97, i % 3600)
}

async fn room_of(n: usize, findings: &[String], queries: &[String]) {
    let dir = tempfile::tempdir().unwrap();
    let store =
        Arc::new(SqliteStore::builder().data_dir(dir.path()).durability(Durability::Normal).open().unwrap());
    let embedder = Arc::new(BuiltinEmbedder::load().unwrap());
    let macp = Macp::builder()
        .store(store.clone())
        .embedder(embedder.clone())
        .vector_index(store.clone())
        .build()
        .unwrap();
    let who = Principal::new("bench").unwrap();
    let room = macp.create_room(&who, CreateRoom::new("bench")).await.unwrap().room_id;
    let t = Instant::now();
    let writers = 4;
    let mut tasks = Vec::new();
    for w in 0..writers {
        let (macp, who, findings) = (macp.clone(), who.clone(), findings.to_vec());
        tasks.push(tokio::spawn(async move {
            let agent = AgentId::new(format!("w{w}")).unwrap();
            macp.join_room(&who, JoinRoom::new(room).agent(agent.clone())).await.unwrap();
            for i in (w..n).step_by(writers) {
                macp.post_finding(&who, PostFinding::new(room, agent.clone(), finding_text(&findings, i)))
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let load = t.elapsed();
    // Warm the in-memory copy, as a serving process has it.
    macp.search_findings(&who, SearchFindings::new(room, "warm up")).await.unwrap();
    let (mut scan, mut full, mut kw) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..300 {
        let q = &queries[i % queries.len()];
        let v = embedder.embed(std::slice::from_ref(q)).await.unwrap().pop().unwrap();
        let t = Instant::now();
        std::hint::black_box(store.query(room, &v, 200, &VectorFilter::default()).await.unwrap());
        scan.push(t.elapsed());
        let t = Instant::now();
        std::hint::black_box(
            macp_core::store::FindingStore::keyword_search(&*store, room, q, 200).await.unwrap().unwrap(),
        );
        kw.push(t.elapsed());
        let t = Instant::now();
        let r = macp.search_findings(&who, SearchFindings::new(room, q.clone())).await.unwrap();
        full.push(t.elapsed());
        assert!(!r.results.is_empty());
    }
    scan.sort();
    full.sort();
    kw.sort();
    println!(
        "{n:>7} findings  load {:>6.0}/s   vector scan median {:>6.2} ms p99 {:>6.2} ms   keyword median {:>6.2} ms p99 {:>6.2} ms   search_findings median {:>6.2} ms p99 {:>6.2} ms",
        n as f64 / load.as_secs_f64(),
        pct(&scan, 0.5),
        pct(&scan, 0.99),
        pct(&kw, 0.5),
        pct(&kw, 0.99),
        pct(&full, 0.5),
        pct(&full, 0.99),
    );
}

fn main() {
    let (findings, queries) = texts();
    let sizes: Vec<usize> = std::env::var("MACP_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1_000, 10_000, 100_000]);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let e = BuiltinEmbedder::load().unwrap();
        let batch: Vec<String> = (0..20_000).map(|i| finding_text(&findings, i)).collect();
        let t = Instant::now();
        for chunk in batch.chunks(64) {
            std::hint::black_box(e.embed(chunk).await.unwrap());
        }
        println!(
            "built-in embedder: {:.0} findings/s on one core (avg {:.0} chars)",
            batch.len() as f64 / t.elapsed().as_secs_f64(),
            batch.iter().map(String::len).sum::<usize>() as f64 / batch.len() as f64
        );
        for n in sizes {
            room_of(n, &findings, &queries).await;
        }
    });
}
