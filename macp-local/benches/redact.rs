//! What redaction on write costs, next to what a post costs.
//!
//! ```text
//! cargo bench -p macp-local --bench redact
//! ```
//!
//! In one run, side by side: the redactor alone over the corpus texts
//! (`macp-core/tests/redaction-corpus.jsonl`), over a typical finding (200 bytes, no secret)
//! and over the largest content a post accepts (16 KiB of log lines with secrets); then
//! `post_finding` of the typical finding on SQLite on disk (durable, the default), with the
//! built-in redactor and with every built-in kind turned off. Prints medians and p99.

use std::sync::Arc;
use std::time::{Duration, Instant};

use macp_core::redact::{KINDS, Redactions, Redactor};
use macp_core::service::{CreateRoom, JoinRoom, PostFinding};
use macp_core::{Macp, Principal};
use macp_local::SqliteStore;

fn stats(mut d: Vec<Duration>) -> (Duration, Duration) {
    d.sort();
    (d[d.len() / 2], d[((d.len() - 1) as f64 * 0.99) as usize])
}

fn time_redactor(r: &Redactor, texts: &[String], rounds: usize) -> (Duration, Duration) {
    let mut d = Vec::with_capacity(texts.len() * rounds);
    for _ in 0..rounds {
        for t in texts {
            let s = Instant::now();
            let out = r.text(t, "content", &mut Redactions::default()).unwrap();
            d.push(s.elapsed());
            std::hint::black_box(out);
        }
    }
    stats(d)
}

async fn time_posts(r: Redactor, body: &str, n: usize) -> (Duration, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::builder().data_dir(dir.path()).open().unwrap());
    let macp = Macp::builder().store(store).redactor(r).build().unwrap();
    let me = Principal::new("bench").unwrap();
    let room = macp.create_room(&me, CreateRoom::new("bench")).await.unwrap().room_id;
    let agent = macp.join_room(&me, JoinRoom::new(room)).await.unwrap().agent_id;
    let mut d = Vec::with_capacity(n);
    for i in 0..n {
        let s = Instant::now();
        macp.post_finding(&me, PostFinding::new(room, agent.clone(), format!("{i} {body}"))).await.unwrap();
        d.push(s.elapsed());
    }
    stats(d)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let corpus: Vec<String> = include_str!("../../macp-core/tests/redaction-corpus.jsonl")
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["text"].as_str().unwrap().to_owned())
        .collect();
    let typical =
        "Observed elevated 502s from the checkout ALB since 14:02Z; correlating with the deploy of \
                   orders-api 7f3c2e1 and DB pool saturation on orders-db (max 100, 100 in use)."
            .to_owned();
    let line = "2026-12-01T14:02:11Z ERROR orders-api pod=orders-7d9f8b6c5-x2x9z req=5f1e9a2c conn refused \
                postgres://app:pa55w0rd@orders-db:5432/orders token=ghp_abcdefghijklmnopqrstuvwxyz0123456789\n";
    let big: String = line.repeat(16 * 1024 / line.len());
    let r = Redactor::new();
    let (m, p) = time_redactor(&r, &corpus, 20);
    println!("redactor, corpus texts ({} texts x 20): median {m:?}, p99 {p:?}", corpus.len());
    let (m, p) = time_redactor(&r, std::slice::from_ref(&typical), 20_000);
    println!("redactor, typical finding ({} bytes): median {m:?}, p99 {p:?}", typical.len());
    let (m, p) = time_redactor(&r, std::slice::from_ref(&big), 500);
    println!("redactor, {} bytes of log lines with secrets: median {m:?}, p99 {p:?}", big.len());
    let off = KINDS.iter().fold(Redactor::new(), |r, k| r.disable(k).unwrap());
    let n = 2_000;
    let (m_off, p_off) = time_posts(off, &typical, n).await;
    let (m_on, p_on) = time_posts(Redactor::new(), &typical, n).await;
    println!("post_finding on SQLite (durable), every kind off: median {m_off:?}, p99 {p_off:?}");
    println!("post_finding on SQLite (durable), redactor on:   median {m_on:?}, p99 {p_on:?}");
}
