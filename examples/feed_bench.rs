//! `feed-bench`: the room feed's wake-up figures, measured through a real `macp serve` over
//! Streamable HTTP with the rmcp client.
//!
//! ```text
//! cargo build --release -p macp-mcp --bin macp -p macp-examples --bin feed-bench
//! target/release/feed-bench --macp target/release/macp                       # embedded default
//! target/release/feed-bench --macp target/release/macp --servers 2 --waiters 50 \
//!     --server-arg --backend --server-arg aws                                  # two servers, one store
//! ```
//!
//! 1. **Wake latency**: one reader waits (`get_updates` with `wait_seconds`) while a writer
//!    posts; per post, the time from sending the post to the waiter's answer, and from the
//!    post's acknowledgement (its commit is between the two) to the answer. With
//!    `--servers 2` the reader waits on the second server and the writer posts to the first.
//! 2. **Idle cost**: `--waiters` readers, each its own MCP session, wait at once while nothing
//!    happens for `--idle-seconds`: the server's CPU time and resident memory over that window.
//!    Then one post wakes them all: the time until each answered.
//! 3. **Event size**: the JSON size of each kind of event, as `get_updates` returns it.

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

type Client = RunningService<rmcp::RoleClient, ()>;

struct Args {
    macp: String,
    servers: usize,
    waiters: usize,
    wakes: usize,
    idle_seconds: u64,
    server_args: Vec<String>,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        macp: String::new(),
        servers: 1,
        waiters: 500,
        wakes: 200,
        idle_seconds: 20,
        server_args: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().ok_or_else(|| format!("{k} needs a value"));
        let num = |s: String| s.parse::<u64>().map_err(|e| format!("{k}: {e}"));
        match k.as_str() {
            "--macp" => a.macp = v()?,
            "--servers" => a.servers = num(v()?)? as usize,
            "--waiters" => a.waiters = num(v()?)? as usize,
            "--wakes" => a.wakes = num(v()?)? as usize,
            "--idle-seconds" => a.idle_seconds = num(v()?)?,
            "--server-arg" => a.server_args.push(v()?),
            _ => return Err(format!("unknown argument {k}")),
        }
    }
    if a.macp.is_empty() {
        return Err("usage: feed-bench --macp PATH [--servers 1|2] [--waiters N] [--wakes N] [--idle-seconds S] [--server-arg A]...".into());
    }
    Ok(a)
}

async fn call(c: &Client, tool: &str, args: Value) -> Result<Value, String> {
    let p = CallToolRequestParams::new(tool.to_owned())
        .with_arguments(args.as_object().cloned().unwrap_or_default());
    let r = c.call_tool(p).await.map_err(|e| format!("{tool}: {e}"))?;
    let doc = r.structured_content.unwrap_or(Value::Null);
    if r.is_error == Some(true) {
        return Err(format!("{tool}: {}", doc["error"]));
    }
    Ok(doc)
}

async fn connect(url: &str) -> Result<Client, String> {
    ().serve(StreamableHttpClientTransport::from_uri(url.to_owned())).await.map_err(|e| e.to_string())
}

/// `/proc/<pid>/stat` user + system CPU time, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0);
    // Fields 14 and 15 of stat (utime, stime), counted from the state field at index 0 here.
    (ticks(11) + ticks(12)) / 100.0
}

fn rss_mb(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() - 1) as f64 * p).round() as usize]
}

async fn start(a: &Args, dir: &std::path::Path) -> Result<(tokio::process::Child, String), String> {
    let mut server = tokio::process::Command::new(&a.macp)
        .args(["serve", "--bind", "127.0.0.1:0", "--embedder", "none", "--data-dir"])
        .arg(dir)
        .args(&a.server_args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", a.macp))?;
    let mut lines = BufReader::new(server.stdout.take().ok_or("no stdout")?).lines();
    let first = lines.next_line().await.map_err(|e| e.to_string())?.unwrap_or_default();
    let url = first.strip_prefix("listening on ").ok_or_else(|| format!("server said: {first}"))?.to_owned();
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok((server, url))
}

#[tokio::main]
async fn main() {
    match run(args().unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2)
    }))
    .await
    {
        Ok(()) => {}
        Err(e) => {
            eprintln!("feed-bench: {e}");
            std::process::exit(1);
        }
    }
}

async fn run(a: Args) -> Result<(), String> {
    let dirs: Vec<tempfile::TempDir> = (0..a.servers).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut servers = Vec::new();
    for d in &dirs {
        // On the embedded default each server has its own data (a second one could not lock
        // it); two servers are meant for a shared store (--server-arg --backend --server-arg aws).
        servers.push(start(&a, d.path()).await?);
    }
    let url_w = servers[0].1.clone();
    let url_r = servers[a.servers - 1].1.clone();
    let pid_r = servers[a.servers - 1].0.id().unwrap_or(0);
    println!(
        "feed-bench: {} server(s) {}, release binary {}",
        a.servers,
        if a.server_args.is_empty() { "(embedded default)".to_owned() } else { a.server_args.join(" ") },
        a.macp
    );

    let writer = connect(&url_w).await?;
    let room =
        call(&writer, "create_room", json!({"name": "feed-bench", "objective": "measure the feed"})).await?;
    let room = room["room_id"].as_str().unwrap_or_default().to_owned();
    call(&writer, "join_room", json!({"room_id": room, "agent_id": "writer"})).await?;

    // 1. Wake latency.
    let reader = Arc::new(connect(&url_r).await?);
    let mut cursor =
        call(&reader, "get_updates", json!({"room_id": room, "limit": 500})).await?["cursor"].clone();
    let (mut from_send, mut from_ack, mut post_ms) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..a.wakes {
        let (r, room2, c) = (reader.clone(), room.clone(), cursor.clone());
        let waiter = tokio::spawn(async move {
            let u = call(&r, "get_updates", json!({"room_id": room2, "cursor": c, "wait_seconds": 25})).await;
            (u, Instant::now())
        });
        tokio::time::sleep(Duration::from_millis(if a.servers > 1 { 700 } else { 30 })).await;
        let sent = Instant::now();
        call(&writer, "post_finding", json!({"room_id": room, "content": format!("wake {i}")})).await?;
        let acked = Instant::now();
        let (u, woke) = waiter.await.map_err(|e| e.to_string())?;
        let u = u?;
        if u["findings"].as_array().map_or(0, |f| f.len()) != 1 {
            return Err(format!("the waiter was not woken with the post: {u}"));
        }
        cursor = u["cursor"].clone();
        from_send.push(woke.duration_since(sent).as_secs_f64() * 1e3);
        from_ack.push(woke.saturating_duration_since(acked).as_secs_f64() * 1e3);
        post_ms.push(acked.duration_since(sent).as_secs_f64() * 1e3);
    }
    println!(
        "\n1. wake latency, {} posts, one waiter{}",
        a.wakes,
        if a.servers > 1 { " on the other server" } else { "" }
    );
    println!(
        "   post sent -> waiter answered: median {:.2} ms, p99 {:.2} ms",
        pct(&mut from_send, 0.5),
        pct(&mut from_send, 0.99)
    );
    println!(
        "   post acknowledged -> waiter answered: median {:.2} ms, p99 {:.2} ms",
        pct(&mut from_ack, 0.5),
        pct(&mut from_ack, 0.99)
    );
    println!(
        "   (the post call itself: median {:.2} ms, p99 {:.2} ms)",
        pct(&mut post_ms, 0.5),
        pct(&mut post_ms, 0.99)
    );

    // 2. Idle cost of many waiters, then one post waking them all.
    if a.waiters > 0 {
        let rss_before = rss_mb(pid_r);
        let mut clients = Vec::new();
        for _ in 0..a.waiters {
            clients.push(Arc::new(connect(&url_r).await?));
        }
        let start_at = cursor.clone();
        let woken = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for c in &clients {
            let (c, room, cur, woken) = (c.clone(), room.clone(), start_at.clone(), woken.clone());
            tasks.push(tokio::spawn(async move {
                loop {
                    let u =
                        call(&c, "get_updates", json!({"room_id": room, "cursor": cur, "wait_seconds": 25}))
                            .await;
                    match u {
                        Ok(u) if u["findings"].as_array().is_some_and(|f| !f.is_empty()) => {
                            woken.lock().unwrap().push(Instant::now());
                            return Ok(());
                        }
                        Ok(_) => continue, // the wait ended empty: wait again
                        Err(e) => return Err(e),
                    }
                }
            }));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (cpu0, rss0, t0) = (cpu_seconds(pid_r), rss_mb(pid_r), Instant::now());
        let mut samples = vec![rss0];
        while t0.elapsed() < Duration::from_secs(a.idle_seconds) {
            tokio::time::sleep(Duration::from_secs(1)).await;
            samples.push(rss_mb(pid_r));
        }
        let (cpu1, rss1) = (cpu_seconds(pid_r), rss_mb(pid_r));
        let sent = Instant::now();
        call(&writer, "post_finding", json!({"room_id": room, "content": "wake everyone"})).await?;
        for t in tasks {
            t.await.map_err(|e| e.to_string())??;
        }
        let mut lat: Vec<f64> =
            woken.lock().unwrap().iter().map(|w| w.duration_since(sent).as_secs_f64() * 1e3).collect();
        println!(
            "\n2. {} waiters, each its own MCP session, waiting {} s with nothing happening",
            a.waiters, a.idle_seconds
        );
        println!(
            "   server CPU while idle: {:.3} s over {:.1} s ({:.2}% of one core)",
            cpu1 - cpu0,
            t0.elapsed().as_secs_f64(),
            (cpu1 - cpu0) / t0.elapsed().as_secs_f64() * 100.0
        );
        let max = samples.iter().cloned().fold(0.0, f64::max);
        println!(
            "   server RSS: {rss_before:.0} MB before the sessions, {rss0:.0} MB with {} waiting, {rss1:.0} MB after {} s (max {max:.0} MB)",
            a.waiters, a.idle_seconds
        );
        println!(
            "   one post then woke all {}: median {:.1} ms, p99 {:.1} ms, last {:.1} ms after it was sent",
            lat.len(),
            pct(&mut lat, 0.5),
            pct(&mut lat, 0.99),
            pct(&mut lat, 1.0)
        );
        for c in clients {
            if let Ok(c) = Arc::try_unwrap(c) {
                let _ = c.cancel().await;
            }
        }
    }

    // 3. Event sizes, as get_updates returns them.
    let e1 = call(
        &writer,
        "add_entity",
        json!({"room_id": room, "name": "orders-db-primary", "type": "resource",
        "identifiers": [{"type": "hostname", "value": "orders-db-primary.prod.internal"}]}),
    )
    .await?;
    let e2 = call(
        &writer,
        "add_entity",
        json!({"room_id": room, "name": "checkout-api", "type": "service",
        "identifiers": [{"type": "service", "value": "checkout-api"}]}),
    )
    .await?;
    let (id1, id2) = (e1["entity"]["entity_id"].clone(), e2["entity"]["entity_id"].clone());
    call(&writer, "add_relationship", json!({"room_id": room, "source_entity_id": id2, "relationship_type": "depends_on", "target_entity_id": id1})).await?;
    call(&writer, "declare_status", json!({"room_id": room, "status": "blocked", "reason": "need read access to the orders-db-primary slow query log"})).await?;
    call(
        &writer,
        "merge_entities",
        json!({"room_id": room, "winner_entity_id": id1, "loser_entity_id": id2}),
    )
    .await
    .ok();
    let u = call(&reader, "get_updates", json!({"room_id": room, "cursor": cursor, "limit": 500})).await?;
    println!("\n3. event sizes (JSON, as get_updates returns them)");
    for e in u["events"].as_array().into_iter().flatten() {
        println!("   {:<22} {:>4} bytes", e["kind"].as_str().unwrap_or("?"), e.to_string().len());
    }
    Ok(())
}
