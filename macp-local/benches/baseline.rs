//! Baseline throughput and latency of the SQLite backend, through the service.
//!
//! ```text
//! cargo bench -p macp-local --bench baseline
//! ```
//!
//! For each durability setting (and the in-memory reference, side by side in the same run):
//! post 10,000 findings into one room from one writer, then from 4 concurrent writers into a
//! second room, then time 1,000 `get_updates` calls (page 100) from random cursors. Prints
//! findings/s and the median and p99 `get_updates` latency.

use std::sync::Arc;
use std::time::{Duration, Instant};

use macp_core::service::{CreateRoom, JoinRoom, PostFinding, UpdatesQuery};
use macp_core::{AgentId, Macp, Principal, Store};
use macp_local::{Durability, SqliteStore};

const N: usize = 10_000;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

async fn run(label: &str, store: Arc<dyn Store>) {
    let macp = Macp::builder().store(store).build().unwrap();
    let me = Principal::new("bench").unwrap();
    let body = "Observed elevated 502s from the checkout ALB; correlating with deploy events and DB pool saturation.";

    // One writer.
    let room = macp.create_room(&me, CreateRoom::new("bench")).await.unwrap().room_id;
    let agent = macp.join_room(&me, JoinRoom::new(room)).await.unwrap().agent_id;
    let t = Instant::now();
    for i in 0..N {
        macp.post_finding(&me, PostFinding::new(room, agent.clone(), format!("{i} {body}")).tags(["triage"]))
            .await
            .unwrap();
    }
    let one = N as f64 / t.elapsed().as_secs_f64();

    // Four concurrent writers.
    let room2 = macp.create_room(&me, CreateRoom::new("bench-4")).await.unwrap().room_id;
    let t = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..4 {
        let (macp, me) = (macp.clone(), me.clone());
        tasks.push(tokio::spawn(async move {
            let agent = AgentId::new(format!("w{w}")).unwrap();
            macp.join_room(&me, JoinRoom::new(room2).agent(agent.clone())).await.unwrap();
            for i in 0..N / 4 {
                macp.post_finding(&me, PostFinding::new(room2, agent.clone(), format!("{i} {body}")))
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let four = N as f64 / t.elapsed().as_secs_f64();

    // get_updates from cursors spread over the room: walk it once to collect cursors.
    let mut cursors = vec![None];
    let mut c = None;
    loop {
        let u = macp
            .updates(&me, UpdatesQuery { limit: Some(100), ..UpdatesQuery::new(room).cursor(c) })
            .await
            .unwrap();
        cursors.push(Some(u.cursor.clone()));
        c = Some(u.cursor);
        if !u.has_more {
            break;
        }
    }
    let mut lat = Vec::with_capacity(1000);
    for i in 0..1000 {
        let cursor = cursors[(i * 7919) % cursors.len()].clone();
        let t = Instant::now();
        let u = macp
            .updates(&me, UpdatesQuery { limit: Some(100), ..UpdatesQuery::new(room).cursor(cursor) })
            .await
            .unwrap();
        lat.push(t.elapsed());
        std::hint::black_box(u);
    }
    lat.sort();
    println!(
        "{label:<16} post_finding {one:>8.0}/s (1 writer) {four:>8.0}/s (4 writers)   get_updates(page 100) median {:>7.3} ms  p99 {:>7.3} ms",
        percentile(&lat, 0.5).as_secs_f64() * 1e3,
        percentile(&lat, 0.99).as_secs_f64() * 1e3,
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        println!(
            "{N} findings per room, release build, this machine: {} cores",
            std::thread::available_parallelism().map_or(0, |n| n.get())
        );
        run("memory", Arc::new(macp_core::memory::MemoryStore::new())).await;
        for (label, d) in [("sqlite FULL", Durability::Full), ("sqlite NORMAL", Durability::Normal)] {
            let dir = tempfile::tempdir().unwrap();
            let store = SqliteStore::builder().data_dir(dir.path()).durability(d).open().unwrap();
            run(label, Arc::new(store)).await;
        }
    });
}
