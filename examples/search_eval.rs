//! Search quality on a labelled relevance set, through the public API.
//!
//! ```text
//! cargo run --release -p macp-examples --bin search-eval -- ../shared/eval/search-relevance.json
//! cargo run --release -p macp-examples --bin search-eval -- FILE --check   # exit 1 below the goal
//! ```
//!
//! `--check` fails unless the default search reaches MRR 0.62 overall and hit@1 0.95 on
//! keyword queries (the quality goal); the test command runs it.
//!
//! Loads every room of the file into a fresh SQLite store (one `post_finding` per finding, by
//! its agent, in file order), runs every query with `search_findings` ranking the whole room,
//! and prints hit@1, recall@5 and MRR overall and per query kind, for the default hybrid search
//! and, side by side, for keyword-only and semantic-only search over the same data.
//!
//! File shape: `{"rooms": [{key, name, objective}], "findings": [{key, room, agent, tags,
//! content}], "queries": [{key, room, text, relevant: [finding keys], kind}]}`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use macp_core::search::builtin::BuiltinEmbedder;
use macp_core::search::fusion::FusionConfig;
use macp_core::search::{Embedder, VectorIndex};
use macp_core::service::{CreateRoom, JoinRoom, PostFinding, SearchConfig, SearchFindings};
use macp_core::{AgentId, FindingId, Macp, Principal, RoomId};
use macp_local::{Durability, SqliteStore};
use serde::Deserialize;

#[derive(Deserialize)]
struct File {
    rooms: Vec<RoomIn>,
    findings: Vec<FindingIn>,
    queries: Vec<QueryIn>,
}

#[derive(Deserialize)]
struct RoomIn {
    key: String,
    name: String,
    objective: String,
}

#[derive(Deserialize)]
struct FindingIn {
    key: String,
    room: String,
    agent: String,
    #[serde(default)]
    tags: Vec<String>,
    content: String,
}

#[derive(Deserialize)]
struct QueryIn {
    room: String,
    text: String,
    relevant: Vec<String>,
    kind: String,
}

#[derive(Default, Clone, Copy)]
struct Score {
    n: usize,
    hit1: f64,
    recall5: f64,
    mrr: f64,
}

impl Score {
    fn add(&mut self, ranked: &[FindingId], relevant: &[FindingId]) {
        self.n += 1;
        if ranked.first().is_some_and(|f| relevant.contains(f)) {
            self.hit1 += 1.0;
        }
        let top5 = ranked.iter().take(5).filter(|f| relevant.contains(f)).count();
        self.recall5 += top5 as f64 / relevant.len() as f64;
        if let Some(pos) = ranked.iter().position(|f| relevant.contains(f)) {
            self.mrr += 1.0 / (pos + 1) as f64;
        }
    }

    fn line(&self) -> String {
        let n = self.n.max(1) as f64;
        format!(
            "hit@1 {:.3}  recall@5 {:.3}  MRR {:.3}  (n={})",
            self.hit1 / n,
            self.recall5 / n,
            self.mrr / n,
            self.n
        )
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Hybrid,
    Keyword,
    Semantic,
}

async fn evaluate(
    file: &File,
    mode: Mode,
) -> Result<(Score, BTreeMap<String, Score>), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let store = Arc::new(SqliteStore::builder().data_dir(dir.path()).durability(Durability::Normal).open()?);
    let mut config = SearchConfig::default();
    // Rank the whole room, as the reference figures do.
    config.max_results = 10_000;
    config.candidates = 10_000;
    if mode == Mode::Semantic {
        let mut f = FusionConfig::default();
        f.keyword_weight = 0.0;
        config.fusion = f;
    }
    let mut b = Macp::builder().store(store.clone()).search_config(config);
    if mode != Mode::Keyword {
        let e: Arc<dyn Embedder> = Arc::new(BuiltinEmbedder::load()?);
        b = b.embedder(e).vector_index(store.clone() as Arc<dyn VectorIndex>);
    }
    let macp = b.build()?;
    let who = Principal::new("eval")?;
    let mut rooms: HashMap<&str, RoomId> = HashMap::new();
    for r in &file.rooms {
        let room = macp.create_room(&who, CreateRoom::new(&r.objective).name(&r.name)).await?;
        rooms.insert(&r.key, room.room_id);
    }
    let mut ids: HashMap<&str, FindingId> = HashMap::new();
    let mut joined: HashMap<(RoomId, &str), AgentId> = HashMap::new();
    for f in &file.findings {
        let room = rooms[f.room.as_str()];
        let agent = match joined.get(&(room, f.agent.as_str())) {
            Some(a) => a.clone(),
            None => {
                let a =
                    macp.join_room(&who, JoinRoom::new(room).agent(AgentId::new(&f.agent)?)).await?.agent_id;
                joined.insert((room, &f.agent), a.clone());
                a
            }
        };
        let posted =
            macp.post_finding(&who, PostFinding::new(room, agent, &f.content).tags(f.tags.clone())).await?;
        ids.insert(&f.key, posted.finding.finding_id);
    }
    let mut overall = Score::default();
    let mut by_kind: BTreeMap<String, Score> = BTreeMap::new();
    for q in &file.queries {
        let room = rooms[q.room.as_str()];
        let res = macp
            .search_findings(
                &who,
                SearchFindings { limit: Some(10_000), ..SearchFindings::new(room, &q.text) },
            )
            .await?;
        let ranked: Vec<FindingId> = res.results.iter().map(|h| h.finding.finding_id).collect();
        let relevant: Vec<FindingId> = q.relevant.iter().map(|k| ids[k.as_str()]).collect();
        overall.add(&ranked, &relevant);
        by_kind.entry(q.kind.clone()).or_default().add(&ranked, &relevant);
    }
    Ok((overall, by_kind))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .ok_or("usage: search-eval RELEVANCE.json [--check]")?
        .clone();
    let check = args.iter().any(|a| a == "--check");
    let file: File = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
    println!(
        "{}: {} rooms, {} findings, {} queries; every query ranks its whole room\n",
        path,
        file.rooms.len(),
        file.findings.len(),
        file.queries.len()
    );
    let mut verdict = Ok(());
    for (label, mode) in [
        ("default (hybrid: built-in model + BM25)", Mode::Hybrid),
        ("keyword only (BM25)", Mode::Keyword),
        ("semantic only (built-in model)", Mode::Semantic),
    ] {
        let (overall, by_kind) = evaluate(&file, mode).await?;
        if mode == Mode::Hybrid {
            let mrr = overall.mrr / overall.n.max(1) as f64;
            let kw = by_kind.get("keyword").map_or(1.0, |s| s.hit1 / s.n.max(1) as f64);
            if mrr < 0.62 || kw < 0.95 {
                verdict = Err(format!(
                    "below the goal: MRR {mrr:.3} (goal 0.62), keyword hit@1 {kw:.3} (goal 0.95)"
                ));
            }
        }
        println!("{label}\n  overall     {}", overall.line());
        for (kind, s) in &by_kind {
            println!("  {kind:<11} {}", s.line());
        }
        println!();
        if check && mode == Mode::Hybrid {
            break;
        }
    }
    if check {
        verdict?;
        println!("quality goal met: MRR >= 0.62 overall and keyword hit@1 >= 0.95");
    }
    Ok(())
}
