//! The cost of the MCP adapter: `post_finding` and `get_updates` over loopback Streamable HTTP
//! with the rmcp client, next to the same calls on the SDK directly, in one run.
//!
//! ```text
//! cargo bench -p macp-mcp --bench mcp_http
//! ```
//!
//! Each side gets its own fresh SQLite store (`synchronous=NORMAL`, built-in embedder, so posts
//! embed and index inline) and a room pre-seeded with 2,000 findings. For 1, 8 and 32 concurrent
//! clients (each its own MCP session and agent), 1,600 calls of each operation are split over the
//! clients; `get_updates` reads from cursors spread over the room (full pages of 100 findings),
//! and "poll (tail)" is the steady-state call of an agent's loop: `get_updates` at the head of
//! the room, nothing new.
//! Prints calls/s, median and p99 latency per call, and the MCP/SDK ratio and difference.

use std::sync::Arc;
use std::time::{Duration, Instant};

use macp_core::search::builtin::BuiltinEmbedder;
use macp_core::service::{CreateRoom, JoinRoom, PostFinding, UpdatesQuery};
use macp_core::{AgentId, Macp, Principal, RoomId};
use macp_local::{Durability, SqliteStore};
use macp_mcp::http::{HttpOptions, router};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const CALLS: usize = 1_600;

struct Stats {
    rate: f64,
    median: f64,
    p99: f64,
}

fn stats(mut lat: Vec<Duration>, wall: Duration) -> Stats {
    lat.sort();
    let at = |p: f64| lat[((lat.len() - 1) as f64 * p).round() as usize].as_secs_f64() * 1e3;
    Stats { rate: lat.len() as f64 / wall.as_secs_f64(), median: at(0.5), p99: at(0.99) }
}

async fn service() -> (Macp, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store =
        Arc::new(SqliteStore::builder().data_dir(dir.path()).durability(Durability::Normal).open().unwrap());
    let macp = Macp::builder()
        .store(store.clone())
        .embedder(Arc::new(BuiltinEmbedder::load().unwrap()))
        .vector_index(store)
        .build()
        .unwrap();
    (macp, dir)
}

async fn seeded(macp: &Macp, who: &Principal) -> (RoomId, Vec<String>) {
    let room = macp.create_room(who, CreateRoom::new("bench")).await.unwrap().room_id;
    let agent =
        macp.join_room(who, JoinRoom::new(room).agent(AgentId::new("seed").unwrap())).await.unwrap().agent_id;
    for i in 0..2_000 {
        macp.post_finding(
            who,
            PostFinding::new(room, agent.clone(), format!("seed finding {i} about db-{}", i % 13)),
        )
        .await
        .unwrap();
    }
    let mut cursors = vec![String::new()];
    let mut c = None;
    loop {
        let u = macp
            .updates(who, UpdatesQuery { limit: Some(100), ..UpdatesQuery::new(room).cursor(c) })
            .await
            .unwrap();
        cursors.push(u.cursor.clone());
        c = Some(u.cursor);
        if !u.has_more {
            break;
        }
    }
    (room, cursors)
}

/// The cursor at the head of the room: polling from it returns nothing until something is posted.
async fn head(macp: &Macp, who: &Principal, room: RoomId) -> String {
    let mut c = None;
    loop {
        let u = macp
            .updates(who, UpdatesQuery { limit: Some(500), ..UpdatesQuery::new(room).cursor(c) })
            .await
            .unwrap();
        if !u.has_more {
            return u.cursor;
        }
        c = Some(u.cursor);
    }
}

/// Runs `per_client` calls on each of `clients` tasks; returns per-call latencies and wall time.
async fn drive<F, Fut>(clients: usize, call: F) -> (Vec<Duration>, Duration)
where
    F: Fn(usize, usize) -> Fut + Send + Sync + 'static + Clone,
    Fut: std::future::Future<Output = ()> + Send,
{
    let per = CALLS / clients;
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let call = call.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(per);
            for i in 0..per {
                let t = Instant::now();
                call(c, i).await;
                lat.push(t.elapsed());
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    (all, start.elapsed())
}

fn row(label: &str, clients: usize, sdk: &Stats, mcp: &Stats) {
    println!(
        "{label:<12} {clients:>2} clients   SDK {:>7.0}/s median {:>6.3} ms p99 {:>6.3} ms   MCP/HTTP {:>7.0}/s median {:>6.3} ms p99 {:>6.3} ms   median +{:.3} ms ({:.2}x)",
        sdk.rate,
        sdk.median,
        sdk.p99,
        mcp.rate,
        mcp.median,
        mcp.p99,
        mcp.median - sdk.median,
        mcp.median / sdk.median
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let who = Principal::new("bench").unwrap();
        let (sdk, _d1) = service().await;
        let (sdk_room, sdk_cursors) = seeded(&sdk, &who).await;
        let (served, _d2) = service().await;
        let (mcp_room, mcp_cursors) = seeded(&served, &who).await;
        let ct = CancellationToken::new();
        let app = router(served.clone(), Some(who.clone()), &HttpOptions::default(), ct.child_token());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        println!("{CALLS} calls per operation and concurrency; room of 2,000 findings; loopback {url}\n");

        for clients in [1usize, 8, 32] {
            // The SDK side: one agent per client.
            let mut agents = Vec::new();
            for c in 0..clients {
                let a = AgentId::new(format!("sdk-{clients}-{c}")).unwrap();
                sdk.join_room(&who, JoinRoom::new(sdk_room).agent(a.clone())).await.unwrap();
                agents.push(a);
            }
            let agents = Arc::new(agents);
            let (m, w, a) = (sdk.clone(), who.clone(), agents.clone());
            let (lat, wall) = drive(clients, move |c, i| {
                let (m, w, a) = (m.clone(), w.clone(), a.clone());
                async move {
                    m.post_finding(&w, PostFinding::new(sdk_room, a[c].clone(), format!("client {c} finding {i} on db-{}", i % 7)))
                        .await
                        .unwrap();
                }
            })
            .await;
            let sdk_post = stats(lat, wall);
            let (m, w, cur) = (sdk.clone(), who.clone(), Arc::new(sdk_cursors.clone()));
            let (lat, wall) = drive(clients, move |c, i| {
                let (m, w, cur) = (m.clone(), w.clone(), cur.clone());
                async move {
                    let k = &cur[(c * 31 + i * 7) % (cur.len() - 1)];
                    let cursor = (!k.is_empty()).then(|| k.clone());
                    m.updates(&w, UpdatesQuery::new(sdk_room).cursor(cursor)).await.unwrap();
                }
            })
            .await;
            let sdk_updates = stats(lat, wall);
            let tail = head(&sdk, &who, sdk_room).await;
            let (m, w, tail) = (sdk.clone(), who.clone(), Some(tail));
            let (lat, wall) = drive(clients, move |_, _| {
                let (m, w, tail) = (m.clone(), w.clone(), tail.clone());
                async move {
                    m.updates(&w, UpdatesQuery::new(sdk_room).cursor(tail)).await.unwrap();
                }
            })
            .await;
            let sdk_tail = stats(lat, wall);

            // The MCP side: one rmcp client (its own session) per agent.
            let mut peers = Vec::new();
            for c in 0..clients {
                let client = ().serve(StreamableHttpClientTransport::from_uri(url.clone())).await.unwrap();
                let args = json!({"room_id": mcp_room, "agent_id": format!("mcp-{clients}-{c}")});
                let r = client
                    .call_tool(CallToolRequestParams::new("join_room").with_arguments(args.as_object().cloned().unwrap()))
                    .await
                    .unwrap();
                assert_ne!(r.is_error, Some(true));
                peers.push(Arc::new(client));
            }
            let peers = Arc::new(peers);
            let p = peers.clone();
            let (lat, wall) = drive(clients, move |c, i| {
                let p = p.clone();
                async move {
                    let args = json!({"room_id": mcp_room, "content": format!("client {c} finding {i} on db-{}", i % 7)});
                    let r = p[c]
                        .call_tool(CallToolRequestParams::new("post_finding").with_arguments(args.as_object().cloned().unwrap()))
                        .await
                        .unwrap();
                    assert_ne!(r.is_error, Some(true));
                }
            })
            .await;
            let mcp_post = stats(lat, wall);
            let (p, cur) = (peers.clone(), Arc::new(mcp_cursors.clone()));
            let (lat, wall) = drive(clients, move |c, i| {
                let (p, cur) = (p.clone(), cur.clone());
                async move {
                    let k = &cur[(c * 31 + i * 7) % (cur.len() - 1)];
                    let args = if k.is_empty() { json!({"room_id": mcp_room}) } else { json!({"room_id": mcp_room, "cursor": k}) };
                    let r = p[c]
                        .call_tool(CallToolRequestParams::new("get_updates").with_arguments(args.as_object().cloned().unwrap()))
                        .await
                        .unwrap();
                    assert_ne!(r.is_error, Some(true));
                }
            })
            .await;
            let mcp_updates = stats(lat, wall);
            let tail = head(&served, &who, mcp_room).await;
            let p = peers.clone();
            let (lat, wall) = drive(clients, move |c, _| {
                let (p, tail) = (p.clone(), tail.clone());
                async move {
                    let args = json!({"room_id": mcp_room, "cursor": tail});
                    let r = p[c]
                        .call_tool(CallToolRequestParams::new("get_updates").with_arguments(args.as_object().cloned().unwrap()))
                        .await
                        .unwrap();
                    assert_ne!(r.is_error, Some(true));
                }
            })
            .await;
            let mcp_tail = stats(lat, wall);
            row("post_finding", clients, &sdk_post, &mcp_post);
            row("get_updates", clients, &sdk_updates, &mcp_updates);
            row("poll (tail)", clients, &sdk_tail, &mcp_tail);
        }
        ct.cancel();
    });
}
