//! Why the SQLite backend scans its own vectors instead of using sqlite-vec: both, side by side,
//! on the same vectors.
//!
//! ```text
//! cargo bench -p macp-local --bench vector_choice
//! ```
//!
//! For 10,000 and 100,000 built-in-model embeddings of varied incident texts: the top-200 query
//! latency (median, p99 over 300 queries) of macp-local's index (durable f32 in SQLite, int8 scan
//! in process) and of sqlite-vec 0.1.9's `vec0` table (cosine, brute force in SQLite), and the
//! recall@200 of each against an exact f32 ranking.
#![allow(unsafe_code)] // registering the sqlite-vec extension is an FFI call

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use macp_core::search::builtin::BuiltinEmbedder;
use macp_core::search::{Embedder, IndexModel, VectorFilter, VectorIndex, VectorRecord, dot};
use macp_core::{AgentId, FindingId, RoomId};
use macp_local::{Durability, SqliteStore};
use rusqlite::params;

const WORDS: [&str; 24] = [
    "database",
    "connection",
    "pool",
    "timeout",
    "deploy",
    "rollback",
    "latency",
    "cache",
    "queue",
    "kafka",
    "certificate",
    "disk",
    "memory",
    "cpu",
    "dns",
    "retry",
    "error",
    "checkout",
    "payments",
    "iam",
    "role",
    "s3",
    "throttling",
    "outage",
];

fn text(i: usize) -> String {
    let mut x = i as u64 * 2_654_435_761 + 12_345;
    let mut out = Vec::new();
    for _ in 0..12 {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        out.push(WORDS[(x >> 33) as usize % WORDS.len()]);
    }
    format!("{} on host-{}", out.join(" "), i % 977)
}

fn median_p99(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let at = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize].as_secs_f64() * 1e3;
    (at(0.5), at(0.99))
}

fn main() {
    // SAFETY: sqlite3_vec_init is the extension's entry point with the signature SQLite expects
    // of an auto extension; this is how sqlite-vec documents registering itself.
    unsafe {
        rusqlite::ffi::sqlite3_auto_extension(Some(std::mem::transmute::<
            *const (),
            unsafe extern "C" fn(
                *mut rusqlite::ffi::sqlite3,
                *mut *mut std::os::raw::c_char,
                *const rusqlite::ffi::sqlite3_api_routines,
            ) -> std::os::raw::c_int,
        >(sqlite_vec::sqlite3_vec_init as *const ())));
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let e = BuiltinEmbedder::load().unwrap();
        for n in [10_000usize, 100_000] {
            let texts: Vec<String> = (0..n).map(text).collect();
            let vectors = e.embed(&texts).await.unwrap();
            let queries: Vec<Vec<f32>> = e.embed(&(0..300).map(|i| text(n + i)).collect::<Vec<_>>()).await.unwrap();
            let ids: Vec<FindingId> = (0..n).map(|_| FindingId::generate()).collect();
            let room = RoomId::generate();

            // macp-local
            let dir = tempfile::tempdir().unwrap();
            let store = Arc::new(SqliteStore::builder().data_dir(dir.path()).durability(Durability::Normal).open().unwrap());
            store.bind(&IndexModel { model_id: e.model_id().into(), dimension: e.dimension() }).await.unwrap();
            let agent = AgentId::new("a").unwrap();
            for chunk in (0..n).collect::<Vec<_>>().chunks(2000) {
                let recs: Vec<VectorRecord> = chunk
                    .iter()
                    .map(|&i| VectorRecord { room_id: room, finding_id: ids[i], tags: vec![], agent_id: agent.clone(), vector: vectors[i].clone() })
                    .collect();
                store.upsert(&recs).await.unwrap();
            }
            store.query(room, &queries[0], 200, &VectorFilter::default()).await.unwrap(); // load
            // sqlite-vec
            let vdir = tempfile::tempdir().unwrap();
            let conn = rusqlite::Connection::open(vdir.path().join("vec.db")).unwrap();
            conn.execute_batch("CREATE VIRTUAL TABLE v USING vec0(embedding float[256] distance_metric=cosine)").unwrap();
            {
                let tx = conn.unchecked_transaction().unwrap();
                let mut ins = tx.prepare("INSERT INTO v (rowid, embedding) VALUES (?, ?)").unwrap();
                for (i, v) in vectors.iter().enumerate() {
                    let blob: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                    ins.execute(params![i as i64, blob]).unwrap();
                }
                drop(ins);
                tx.commit().unwrap();
            }
            let mut knn = conn.prepare("SELECT rowid FROM v WHERE embedding MATCH ? AND k = 200").unwrap();

            let (mut ours, mut theirs) = (Vec::new(), Vec::new());
            let (mut recall_ours, mut recall_theirs) = (0.0, 0.0);
            for q in &queries {
                let mut exact: Vec<(f32, usize)> = vectors.iter().enumerate().map(|(i, v)| (dot(v, q), i)).collect();
                exact.sort_by(|a, b| b.0.total_cmp(&a.0));
                let truth: HashSet<FindingId> = exact[..200].iter().map(|x| ids[x.1]).collect();

                let t = Instant::now();
                let hits = store.query(room, q, 200, &VectorFilter::default()).await.unwrap();
                ours.push(t.elapsed());
                recall_ours += hits.iter().filter(|h| truth.contains(&h.finding_id)).count() as f64 / 200.0;

                let blob: Vec<u8> = q.iter().flat_map(|x| x.to_le_bytes()).collect();
                let t = Instant::now();
                let rows: Vec<i64> = knn.query_map([blob], |r| r.get(0)).unwrap().map(|r| r.unwrap()).collect();
                theirs.push(t.elapsed());
                recall_theirs += rows.iter().filter(|r| truth.contains(&ids[**r as usize])).count() as f64 / 200.0;
            }
            let (om, op) = median_p99(ours);
            let (tm, tp) = median_p99(theirs);
            let k = queries.len() as f64;
            println!(
                "{n:>7} vectors  macp-local scan median {om:>6.2} ms p99 {op:>6.2} ms recall@200 {:.3}   sqlite-vec 0.1.9 median {tm:>6.2} ms p99 {tp:>6.2} ms recall@200 {:.3}   ratio {:.1}x",
                recall_ours / k,
                recall_theirs / k,
                tm / om
            );
        }
    });
}
