//! `soak`: many agents working rooms at once through a real `macp serve`, then a check that
//! nothing acknowledged was lost or written twice.
//!
//! ```text
//! cargo run --release -p macp-examples --bin soak -- --macp target/release/macp --agents 32 --seconds 600
//! cargo run -p macp-examples --bin soak -- --macp target/debug/macp --agents 12 --seconds 40   # the test command's short run
//! ```
//!
//! It starts the server itself (a fresh data directory; `--server-arg` passes more, e.g. the
//! AWS backend), and each agent is its own MCP client and session (the rmcp client over
//! Streamable HTTP) in one of a few rooms, repeating a mix of what agents do: post findings
//! (some naming entities, all with idempotency keys), poll updates with their cursor, search,
//! read the context, add entities and merge their own, declare status, and upload, register and
//! list artifacts. Every acknowledged write is recorded.
//!
//! Afterwards it reads every room's timeline back: each acknowledged finding must be there
//! exactly once, and nothing else; every agent's update stream must never have repeated a
//! finding; entities and artifacts acknowledged must be readable. It prints, per tool, the calls
//! and the p50/p99 latency of the first and the last minute (or fifth of a shorter run), the
//! server's resident memory over time, and exits non-zero if any call failed, any check failed,
//! or memory grew by more than the data explains (64 MB plus 8 KB per finding written).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

type Client = RunningService<rmcp::RoleClient, ()>;

struct Args {
    macp: String,
    agents: usize,
    rooms: usize,
    seconds: u64,
    server_args: Vec<String>,
}

fn args() -> Result<Args, String> {
    let mut a = Args { macp: String::new(), agents: 32, rooms: 4, seconds: 600, server_args: Vec::new() };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().ok_or_else(|| format!("{k} needs a value"));
        match k.as_str() {
            "--macp" => a.macp = v()?,
            "--agents" => a.agents = v()?.parse().map_err(|e| format!("--agents: {e}"))?,
            "--rooms" => a.rooms = v()?.parse().map_err(|e| format!("--rooms: {e}"))?,
            "--seconds" => a.seconds = v()?.parse().map_err(|e| format!("--seconds: {e}"))?,
            "--server-arg" => a.server_args.push(v()?),
            _ => return Err(format!("unknown argument {k}")),
        }
    }
    if a.macp.is_empty() {
        return Err(
            "usage: soak --macp PATH [--agents N] [--rooms N] [--seconds N] [--server-arg ARG]...".into()
        );
    }
    Ok(a)
}

/// What every agent recorded, shared.
#[derive(Default)]
struct Record {
    /// Per (tool, time bucket): latencies in microseconds.
    latency: HashMap<(String, usize), Vec<u64>>,
    /// Calls that failed: tool, and what happened.
    errors: Vec<(String, String)>,
    /// Acknowledged findings per room.
    findings: HashMap<String, HashSet<String>>,
    /// Acknowledged entities per room.
    entities: HashMap<String, HashSet<String>>,
    /// Acknowledged artifacts per room.
    artifacts: HashMap<String, HashSet<String>>,
    /// Findings an agent's update stream returned twice.
    repeated: usize,
    /// Findings written before the run's end (posts answered with `replayed`).
    replays: usize,
}

struct Agent {
    client: Client,
    room: String,
    agent_id: String,
    n: u64,
    cursor: Option<String>,
    seen: HashSet<String>,
    own_entities: Vec<String>,
    rng: u64,
}

const SERVICES: &[&str] = &[
    "payments-api",
    "auth-gateway",
    "search-indexer",
    "orders-db",
    "edge-proxy",
    "billing-worker",
    "inventory-svc",
    "notif-queue",
];
const SYMPTOMS: &[&str] = &[
    "p99 latency spiked",
    "error rate climbed",
    "connection pool exhausted",
    "OOM kills on pods",
    "replication lag grew",
    "TLS handshakes failing",
    "queue depth backing up",
];
const TAGS: &[&str] = &["triage", "hypothesis", "evidence", "remediation", "dead-end", "root-cause"];

impl Agent {
    fn next(&mut self, n: u64) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng % n
    }

    fn pick<'a>(&mut self, from: &'a [&'a str]) -> &'a str {
        from[self.next(from.len() as u64) as usize]
    }
}

async fn call(client: &Client, tool: &str, args: Value) -> Result<Value, String> {
    let p = CallToolRequestParams::new(tool.to_owned())
        .with_arguments(args.as_object().cloned().unwrap_or_default());
    let r: CallToolResult = tokio::time::timeout(Duration::from_secs(60), client.call_tool(p))
        .await
        .map_err(|_| "no answer within 60 s".to_owned())?
        .map_err(|e| e.to_string())?;
    let doc = r.structured_content.clone().unwrap_or(Value::Null);
    if r.is_error == Some(true) {
        return Err(doc["error"].to_string());
    }
    Ok(doc)
}

/// One step of an agent's loop. Returns the tool called and its outcome.
async fn step(a: &mut Agent, rec: &Mutex<Record>, http: &reqwest::Client) -> (String, Result<(), String>) {
    let roll = a.next(100);
    let room = a.room.clone();
    let r: (&str, Result<(), String>) = if roll < 45 {
        a.n += 1;
        let (svc, sym, ms, suspect, next) =
            (a.pick(SERVICES), a.pick(SYMPTOMS), 100 + a.next(4900), a.pick(SERVICES), a.pick(SERVICES));
        let text = format!(
            "[{}-{}] {svc}: {sym} at {ms} ms; suspect {suspect}; next: check {next}",
            a.agent_id, a.n
        );
        let mut args = json!({"room_id": room, "content": text, "tags": [a.pick(TAGS)],
            "idempotency_key": format!("{}-{}", a.agent_id, a.n)});
        if !a.own_entities.is_empty() && a.next(3) == 0 {
            let i = a.next(a.own_entities.len() as u64) as usize;
            let e = a.own_entities[i].clone();
            args["entity_refs"] = json!([e]);
        }
        let out = call(&a.client, "post_finding", args).await.map(|d| {
            let mut r = rec.lock().unwrap();
            if d["replayed"] == true {
                r.replays += 1;
            }
            let id = d["finding"]["finding_id"].as_str().unwrap_or_default().to_owned();
            r.findings.entry(room.clone()).or_default().insert(id);
        });
        ("post_finding", out)
    } else if roll < 65 {
        let mut args = json!({"room_id": room});
        if let Some(c) = &a.cursor {
            args["cursor"] = json!(c);
        }
        let out = call(&a.client, "get_updates", args).await.map(|d| {
            for f in d["findings"].as_array().into_iter().flatten() {
                let id = f["finding_id"].as_str().unwrap_or_default().to_owned();
                if !a.seen.insert(id) {
                    rec.lock().unwrap().repeated += 1;
                }
            }
            a.cursor = d["cursor"].as_str().map(str::to_owned);
        });
        ("get_updates", out)
    } else if roll < 75 {
        let (svc, sym) = (a.pick(SERVICES), a.pick(SYMPTOMS));
        let q = format!("{svc} {sym}");
        (
            "search_findings",
            call(&a.client, "search_findings", json!({"room_id": room, "query": q})).await.map(|_| ()),
        )
    } else if roll < 85 {
        ("get_room_context", call(&a.client, "get_room_context", json!({"room_id": room})).await.map(|_| ()))
    } else if roll < 92 {
        // Hostnames shared across agents converge; each agent also keeps entities of its own.
        let shared = a.next(2) == 0;
        let host = if shared {
            let (svc, n) = (a.pick(SERVICES), a.next(4));
            format!("{svc}-{n}.prod")
        } else {
            let n = a.next(1000);
            format!("{}-own-{n}.prod", a.agent_id)
        };
        let key = a.next(u64::MAX);
        let args = json!({"room_id": room, "name": host, "type": "resource",
            "identifiers": [{"type": "hostname", "value": host}],
            "idempotency_key": format!("{}-e-{key}", a.agent_id)});
        let out = call(&a.client, "add_entity", args).await.map(|d| {
            let id = d["entity"]["entity_id"].as_str().unwrap_or_default().to_owned();
            if !shared && d["created"] == true {
                a.own_entities.push(id.clone());
            }
            rec.lock().unwrap().entities.entry(room.clone()).or_default().insert(id);
        });
        ("add_entity", out)
    } else if roll < 93 && a.own_entities.len() >= 2 {
        // Two entities only this agent made: the merge cannot race another agent's.
        let i = a.next(a.own_entities.len() as u64) as usize;
        let loser = a.own_entities.remove(i);
        let j = a.next(a.own_entities.len() as u64) as usize;
        let winner = a.own_entities[j].clone();
        let args = json!({"room_id": room, "winner_entity_id": winner, "loser_entity_id": loser});
        ("merge_entities", call(&a.client, "merge_entities", args).await.map(|_| ()))
    } else if roll < 97 {
        let status = ["active", "idle", "blocked"][a.next(3) as usize];
        let args = json!({"room_id": room, "status": status, "reason": "soak"});
        ("declare_status", call(&a.client, "declare_status", args).await.map(|_| ()))
    } else {
        ("artifact", upload(a, rec, http).await)
    };
    (r.0.to_owned(), r.1)
}

/// Request an upload URL, PUT a small log to it, register it, then list the room's artifacts.
async fn upload(a: &mut Agent, rec: &Mutex<Record>, http: &reqwest::Client) -> Result<(), String> {
    a.n += 1;
    let body = format!("log of {} step {}\n", a.agent_id, a.n).repeat(40).into_bytes();
    let ticket = call(
        &a.client,
        "request_artifact_upload",
        json!({"room_id": a.room, "filename": format!("{}-{}.log", a.agent_id, a.n),
               "content_type": "text/plain", "size": body.len()}),
    )
    .await?;
    let mut put = http.put(ticket["upload_url"].as_str().unwrap_or_default());
    for (k, v) in ticket["headers"].as_object().into_iter().flatten() {
        put = put.header(k.as_str(), v.as_str().unwrap_or_default());
    }
    let status = put.body(body).send().await.map_err(|e| e.to_string())?.status();
    if !status.is_success() {
        return Err(format!("artifact PUT answered {status}"));
    }
    let key = ticket["key"].as_str().unwrap_or_default();
    let reg = call(&a.client, "register_artifact", json!({"room_id": a.room, "key": key})).await?;
    let id = reg["artifact"]["artifact_id"].as_str().unwrap_or_default().to_owned();
    rec.lock().unwrap().artifacts.entry(a.room.clone()).or_default().insert(id);
    call(&a.client, "list_artifacts", json!({"room_id": a.room})).await.map(|_| ())
}

fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn pct(v: &mut [u64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_unstable();
    v[((v.len() - 1) as f64 * p).round() as usize] as f64 / 1e3
}

#[tokio::main]
async fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    std::process::exit(match run(a).await {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            eprintln!("soak: {e}");
            2
        }
    });
}

async fn run(a: Args) -> Result<bool, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut server = tokio::process::Command::new(&a.macp)
        .args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .args(&a.server_args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", a.macp))?;
    let pid = server.id().unwrap_or(0);
    let mut lines = BufReader::new(server.stdout.take().ok_or("no stdout")?).lines();
    let first = lines.next_line().await.map_err(|e| e.to_string())?.unwrap_or_default();
    let url = first.strip_prefix("listening on ").ok_or_else(|| format!("server said: {first}"))?.to_owned();
    // Keep draining the server's log so it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

    let setup =
        ().serve(StreamableHttpClientTransport::from_uri(url.clone())).await.map_err(|e| e.to_string())?;
    let mut rooms = Vec::new();
    for r in 0..a.rooms {
        let d = call(
            &setup,
            "create_room",
            json!({"name": format!("soak-{r}"), "objective": "soak: agents at work"}),
        )
        .await?;
        rooms.push(d["room_id"].as_str().unwrap_or_default().to_owned());
    }
    let rec = Arc::new(Mutex::new(Record::default()));
    let http = reqwest::Client::new();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(a.seconds);
    // Buckets of one minute, or of a fifth of a shorter run.
    let bucket = Duration::from_secs((a.seconds / 5).clamp(1, 60));
    let rss = Arc::new(Mutex::new(vec![(0u64, rss_kb(pid))]));
    let sampler = {
        let rss = rss.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                rss.lock().unwrap().push((started.elapsed().as_secs(), rss_kb(pid)));
            }
        })
    };
    let mut tasks = Vec::new();
    for i in 0..a.agents {
        let (url, room, rec, http) = (url.clone(), rooms[i % rooms.len()].clone(), rec.clone(), http.clone());
        tasks.push(tokio::spawn(async move {
            let client = match ().serve(StreamableHttpClientTransport::from_uri(url)).await {
                Ok(c) => c,
                Err(e) => {
                    rec.lock().unwrap().errors.push(("connect".into(), e.to_string()));
                    return;
                }
            };
            let agent_id = format!("soak-{i}");
            if let Err(e) = call(&client, "join_room", json!({"room_id": room, "agent_id": agent_id})).await {
                rec.lock().unwrap().errors.push(("join_room".into(), e));
                return;
            }
            let mut ag = Agent {
                client,
                room,
                agent_id,
                n: 0,
                cursor: None,
                seen: HashSet::new(),
                own_entities: Vec::new(),
                rng: 0x9E37_79B9_7F4A_7C15 ^ (i as u64 + 1).wrapping_mul(0xD6E8_FEB8_6659_FD93),
            };
            while Instant::now() < deadline {
                let t = Instant::now();
                let (tool, out) = step(&mut ag, &rec, &http).await;
                let us = t.elapsed().as_micros() as u64;
                let b = (t - started).as_secs() as usize / bucket.as_secs() as usize;
                let mut r = rec.lock().unwrap();
                r.latency.entry((tool.clone(), b)).or_default().push(us);
                if let Err(e) = out {
                    r.errors.push((tool, e));
                }
            }
            let _ = ag.client.cancel().await;
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let elapsed = started.elapsed();
    sampler.abort();
    let rss_end = rss_kb(pid);

    // The record, read back.
    let mut ok = true;
    let mut rec =
        Arc::try_unwrap(rec).map_err(|_| "agents still running")?.into_inner().map_err(|e| e.to_string())?;
    let (mut lost, mut duplicated, mut extra, mut written) = (0usize, 0usize, 0usize, 0usize);
    for room in &rooms {
        let mut seen: HashMap<String, usize> = HashMap::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut args = json!({"room_id": room, "limit": 200});
            if let Some(c) = &cursor {
                args["cursor"] = json!(c);
            }
            let page = call(&setup, "get_timeline", args).await?;
            for f in page["findings"].as_array().into_iter().flatten() {
                *seen.entry(f["finding_id"].as_str().unwrap_or_default().to_owned()).or_default() += 1;
            }
            match page["next_cursor"].as_str() {
                Some(c) => cursor = Some(c.to_owned()),
                None => break,
            }
        }
        let acked = rec.findings.remove(room).unwrap_or_default();
        written += seen.len();
        lost += acked.iter().filter(|id| !seen.contains_key(*id)).count();
        duplicated += seen.values().filter(|n| **n > 1).count();
        extra += seen.keys().filter(|id| !acked.contains(*id)).count();
        // Every acknowledged entity is readable (a merged one resolves to its winner).
        let mut missing_entities = 0;
        for id in rec.entities.remove(room).unwrap_or_default().iter().take(500) {
            if call(&setup, "get_entity_graph", json!({"room_id": room, "entity_id": id, "depth": 1}))
                .await
                .is_err()
            {
                missing_entities += 1;
            }
        }
        let mut listed: HashSet<String> = HashSet::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut args = json!({"room_id": room});
            if let Some(c) = &cursor {
                args["cursor"] = json!(c);
            }
            let page = call(&setup, "list_artifacts", args).await?;
            listed.extend(
                page["artifacts"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|x| x["artifact_id"].as_str().map(str::to_owned)),
            );
            match page["next_cursor"].as_str() {
                Some(c) => cursor = Some(c.to_owned()),
                None => break,
            }
        }
        let missing_artifacts =
            rec.artifacts.remove(room).unwrap_or_default().iter().filter(|id| !listed.contains(*id)).count();
        if missing_entities + missing_artifacts > 0 {
            println!(
                "room {room}: {missing_entities} acknowledged entities and {missing_artifacts} artifacts not readable"
            );
            ok = false;
        }
    }

    println!(
        "soak: {} agents, {} rooms, {:.0} s against {} ({})",
        a.agents,
        rooms.len(),
        elapsed.as_secs_f64(),
        a.macp,
        if a.server_args.is_empty() { "embedded default".to_owned() } else { a.server_args.join(" ") }
    );
    // The last bucket that lies wholly inside the run (calls still in flight at the deadline
    // finish after it).
    let last = (a.seconds as usize).saturating_sub(1) / bucket.as_secs() as usize;
    let tools: BTreeMap<String, ()> = rec.latency.keys().map(|(t, _)| (t.clone(), ())).collect();
    let total: usize = rec.latency.values().map(Vec::len).sum();
    println!("{total} calls, {:.0} calls/s", total as f64 / elapsed.as_secs_f64());
    println!(
        "{:<22} {:>8} {:>8}   first {}s: p50 / p99 ms   last {}s: p50 / p99 ms",
        "tool",
        "calls",
        "errors",
        bucket.as_secs(),
        bucket.as_secs()
    );
    for tool in tools.keys() {
        let calls: usize = rec.latency.iter().filter(|((t, _), _)| t == tool).map(|(_, v)| v.len()).sum();
        let errors = rec.errors.iter().filter(|(t, _)| t == tool).count();
        let mut first = rec.latency.get(&(tool.clone(), 0)).cloned().unwrap_or_default();
        let mut lastv = rec.latency.get(&(tool.clone(), last)).cloned().unwrap_or_default();
        println!(
            "{tool:<22} {calls:>8} {errors:>8}   {:>8.2} / {:>8.2}            {:>8.2} / {:>8.2}",
            pct(&mut first, 0.5),
            pct(&mut first, 0.99),
            pct(&mut lastv, 0.5),
            pct(&mut lastv, 0.99)
        );
    }
    let samples = rss.lock().unwrap().clone();
    let rss_start = samples.first().map_or(0, |s| s.1);
    let rss_max = samples.iter().map(|s| s.1).max().unwrap_or(0).max(rss_end);
    println!(
        "memory (RSS): start {} MB, end {} MB, max {} MB; over time: {}",
        rss_start / 1024,
        rss_end / 1024,
        rss_max / 1024,
        samples
            .iter()
            .step_by((samples.len() / 10).max(1))
            .map(|(t, kb)| format!("{t}s {}MB", kb / 1024))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "findings written {written}, acknowledged lost {lost}, duplicated {duplicated}, unacknowledged {extra}, \
         retries answered as replays {}, repeated in an update stream {}",
        rec.replays, rec.repeated
    );
    for (tool, e) in rec.errors.iter().take(10) {
        println!("error in {tool}: {e}");
    }
    let budget_kb = 64 * 1024 + 8 * written as u64;
    if !rec.errors.is_empty() || lost + duplicated + extra + rec.repeated > 0 {
        ok = false;
    }
    if rss_end.saturating_sub(rss_start) > budget_kb {
        println!(
            "memory grew {} MB, more than the {} MB the data explains",
            (rss_end - rss_start) / 1024,
            budget_kb / 1024
        );
        ok = false;
    }
    let _ = server.kill().await;
    println!("{}", if ok { "soak: passed" } else { "soak: FAILED" });
    Ok(ok)
}
