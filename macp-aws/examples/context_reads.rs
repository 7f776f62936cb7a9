//! The reads behind `get_room_context`, one after another (as the service made them before) and
//! at once (as it makes them now), side by side on the same room: on SQLite and on the AWS
//! backend (against moto, or any endpoint).
//!
//! ```text
//! MACP_AWS_TEST_ENDPOINT=http://127.0.0.1:5000 cargo run --release -p macp-aws --example context_reads
//! ```
//!
//! Without the variable only SQLite is measured. Each row: median and p99 over `CALLS` calls,
//! in a room of `FINDINGS` findings, 20 entities, 4 agents.

use std::sync::Arc;
use std::time::Instant;

use macp_core::model::EntityType;
use macp_core::service::{AddEntity, CreateRoom, JoinRoom, PostFinding};
use macp_core::store::{FindingQuery, Store};
use macp_core::{AgentId, Macp, Principal, RoomId};

const FINDINGS: usize = 2000;
const CALLS: usize = 100;

async fn fill(macp: &Macp) -> RoomId {
    let who = Principal::new("bench@example.com").unwrap();
    let room = macp.create_room(&who, CreateRoom::new("context reads")).await.unwrap().room_id;
    let mut agents = Vec::new();
    for i in 0..4 {
        let a = AgentId::new(format!("agent-{i}")).unwrap();
        macp.join_room(&who, JoinRoom::new(room).agent(a.clone())).await.unwrap();
        agents.push(a);
    }
    for i in 0..20 {
        macp.add_entity(
            &who,
            AddEntity::new(room, agents[0].clone(), format!("host-{i}"), EntityType::Resource)
                .identifier("hostname", format!("host-{i}.prod")),
        )
        .await
        .unwrap();
    }
    for i in 0..FINDINGS {
        let tags = [format!("t{}", i % 7)];
        macp.post_finding(
            &who,
            PostFinding::new(room, agents[i % 4].clone(), format!("finding {i}: latency on host-{}", i % 20))
                .tags(tags),
        )
        .await
        .unwrap();
    }
    room
}

fn stats(mut v: Vec<f64>) -> String {
    v.sort_by(|a, b| a.total_cmp(b));
    format!("median {:.2} ms, p99 {:.2} ms", v[v.len() / 2], v[(v.len() - 1) * 99 / 100])
}

async fn measure(name: &str, store: Arc<dyn Store>) {
    let macp = Macp::builder().store(store.clone()).build().unwrap();
    let room = fill(&macp).await;
    let who = Principal::new("bench@example.com").unwrap();
    let latest = FindingQuery::latest(20);
    let (mut seq, mut par, mut whole) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..CALLS {
        // Alternate so that drift on a shared machine hits both sides alike.
        let t = Instant::now();
        store.get_room(room).await.unwrap();
        store.entity_aliases(room).await.unwrap();
        store.finding_stats(room).await.unwrap();
        store.list_findings(room, &latest).await.unwrap();
        store.entity_stats(room).await.unwrap();
        store.list_agents(room).await.unwrap();
        store.count_artifacts(room).await.unwrap();
        seq.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        tokio::try_join!(
            store.get_room(room),
            store.entity_aliases(room),
            store.finding_stats(room),
            store.list_findings(room, &latest),
            store.entity_stats(room),
            store.list_agents(room),
            store.count_artifacts(room),
        )
        .unwrap();
        par.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        macp.room_context(&who, room).await.unwrap();
        whole.push(t.elapsed().as_secs_f64() * 1e3);
    }
    println!("{name}, {FINDINGS} findings, {CALLS} calls each:");
    println!("  the seven independent reads one after another: {}", stats(seq));
    println!("  the same seven at once (try_join!):             {}", stats(par));
    println!("  the whole room_context call:                    {}", stats(whole));
}

#[tokio::main]
async fn main() {
    let dir = tempfile_dir();
    let sqlite = macp_local::SqliteStore::open(dir.clone()).unwrap();
    measure("SQLite (synchronous=FULL)", Arc::new(sqlite)).await;
    if let Ok(endpoint) = std::env::var("MACP_AWS_TEST_ENDPOINT") {
        let b = macp_aws::AwsBackend::builder()
            .endpoint_url(endpoint.clone())
            .region(std::env::var("AWS_REGION").unwrap_or_else(|_| "us-west-2".into()))
            .table_prefix(format!("ctx{}-", std::process::id()));
        let backend = b.connect().await.unwrap();
        backend.setup().await.unwrap();
        measure(&format!("AWS backend on {endpoint}"), Arc::new(backend)).await;
    }
    let _ = std::fs::remove_dir_all(dir);
}

fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("macp-context-reads-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}
