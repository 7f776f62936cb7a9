//! `macp`: the MACP server and human-facing commands over the same core.
//!
//! ```text
//! macp serve                      # MCP over HTTP on 127.0.0.1:8765/mcp, SQLite in the data dir
//! macp serve --bind 127.0.0.1:0   # any free port; prints "listening on http://…/mcp"
//! macp serve --stdio              # one local user over stdio
//! macp rooms | timeline ROOM | search ROOM QUERY | reconcile | reindex | backup DIR | setup
//! ```

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use macp_core::model::Channel;
use macp_core::search::{Embedder, VectorIndex};
use macp_core::service::{ListRooms, RoomFilter, SearchFindings, TimelineQuery};
use macp_core::{Macp, Principal, RoomId};
use macp_local::SqliteStore;
use macp_local::blobs::LocalBlobStore;
use macp_mcp::MacpMcp;
use macp_mcp::auth::{AuthConfig, Verifier};
use macp_mcp::config::{BackendKind, CommonArgs, EmbedderKind, Resolved, ServeArgs};
use macp_mcp::http::{HttpOptions, router, router_with_auth};
use rmcp::ServiceExt;
use tokio_util::sync::CancellationToken;

/// The server allocates and frees many small buffers per request (JSON values, messages,
/// rows); mimalloc does that with less contention and copying than glibc's allocator (measured
/// side by side in BENCHMARKS.md, "Through the binary").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(name = "macp", version, about = "MACP: several people's agents, one investigation.")]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the MCP server (Streamable HTTP on /mcp, or --stdio).
    Serve(Box<ServeArgs>),
    /// List rooms, newest first.
    Rooms {
        /// Include closed rooms.
        #[arg(long)]
        all: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a room's findings in order.
    Timeline {
        /// The room id.
        room: RoomId,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: macp_mcp::remote::RemoteArgs,
    },
    /// Search a room's findings.
    Search {
        /// The room id.
        room: RoomId,
        /// What to look for.
        query: String,
        /// Most results.
        #[arg(long, default_value_t = 10)]
        limit: usize,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: macp_mcp::remote::RemoteArgs,
    },
    /// List a room's decisions: the questions agents asked the people (open ones unless --all).
    Decisions {
        /// The room id.
        room: RoomId,
        /// Include answered ones.
        #[arg(long)]
        all: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: macp_mcp::remote::RemoteArgs,
    },
    /// Answer a decision as yourself (the local user, or --local-user): recorded as a person's
    /// own answer, which no agent can give.
    Decide {
        /// The room id.
        room: RoomId,
        /// The decision id (from `macp decisions`).
        decision: macp_core::DecisionId,
        /// What you decided.
        answer: String,
        /// Who you are (default: the local user).
        #[arg(long, env = "MACP_LOCAL_USER")]
        local_user: Option<String>,
        #[command(flatten)]
        remote: macp_mcp::remote::RemoteArgs,
    },
    /// Steer a room as yourself (recorded as a person's act): start a phase, change the
    /// objective, or reopen it.
    Steer {
        /// The room id.
        room: RoomId,
        /// Start a new phase with this label (a section marker in the timeline).
        #[arg(long)]
        marker: Option<String>,
        /// Replace the objective (the old one is kept in the room's history).
        #[arg(long)]
        objective: Option<String>,
        /// Reopen a closed room.
        #[arg(long)]
        reopen: bool,
        /// Who you are (default: the local user).
        #[arg(long, env = "MACP_LOCAL_USER")]
        local_user: Option<String>,
    },
    /// Close a room as yourself, with its resolution.
    Close {
        /// The room id.
        room: RoomId,
        /// What happened and what was done.
        #[arg(long)]
        resolution: Option<String>,
        /// A finding that establishes the root cause (repeatable).
        #[arg(long = "root-cause")]
        root_cause: Vec<macp_core::FindingId>,
        /// Who you are (default: the local user).
        #[arg(long, env = "MACP_LOCAL_USER")]
        local_user: Option<String>,
    },
    /// Release an agent's claim on a piece of work as yourself (e.g. its agent went stale).
    Release {
        /// The room id.
        room: RoomId,
        /// The work, as claimed (case and spacing aside).
        subject: String,
        /// Who you are (default: the local user).
        #[arg(long, env = "MACP_LOCAL_USER")]
        local_user: Option<String>,
    },
    /// Index every finding still pending (a reconciler pass to completion).
    Reconcile,
    /// Rebuild the vector index with the configured embedder.
    Reindex,
    /// Copy the local data directory (database snapshot, artifacts, signing key) into a new
    /// directory, safely while a server is running on it. Restore: stop the server, then serve
    /// with `--data-dir` pointing at the copy.
    Backup {
        /// The backup directory (must not exist or be empty).
        dest: std::path::PathBuf,
    },
    /// Write a room's whole record (findings, feed, entities and identifiers, decisions, claims,
    /// read positions, artifacts with their bytes) as a portable bundle: to move the room to
    /// another backend with `macp import`, or to keep as its postmortem archive. An operator's
    /// act, like a backup: it reads members-only rooms too.
    Export {
        /// The room id.
        room: RoomId,
        /// Write the bundle here, readable by you alone (default: standard output).
        #[arg(long, short)]
        out: Option<std::path::PathBuf>,
        /// Pass every text (and text artifact) through the redactor on the way out, with this
        /// server's configured patterns.
        #[arg(long)]
        scrub: bool,
    },
    /// Restore a room from a bundle written by `macp export`, on this backend, with its ids,
    /// authors, times and order intact, and index its findings for search. The room must not
    /// exist here.
    Import {
        /// The bundle (`-` for standard input).
        bundle: std::path::PathBuf,
        /// Replace the room's retention (days kept once closed; 0: for good). Without it a
        /// closed room keeps its own, and is purged here when that has run out.
        #[arg(long)]
        retention_days: Option<u32>,
    },
    /// Create the backend's storage if missing, idempotently: the SQLite database, or (with
    /// `--backend aws`) the tables, buckets and vector bucket, for development and tests.
    /// Production AWS deployments create them with the OpenTofu module in deploy/tofu.
    Setup,
    /// For a coding agent's hooks (Claude Code, Kiro): print what is new in a room for one
    /// agent since its read position, in the client's hook output format, or nothing. Reads the
    /// hook's JSON event on stdin; never fails the hook (problems go to stderr, exit 0).
    Hook {
        /// The calling client: its output format.
        #[arg(long, value_enum, default_value = "claude-code")]
        client: macp_mcp::hook::HookClient,
        /// The server's MCP endpoint.
        #[arg(long, env = "MACP_URL", default_value = "http://127.0.0.1:8765/mcp")]
        url: String,
        /// The room.
        #[arg(long, env = "MACP_ROOM")]
        room: String,
        /// Your agent in the room (its read position decides what is new).
        #[arg(long, env = "MACP_AGENT")]
        agent: String,
        /// A bearer token, when the server has auth on.
        #[arg(long, env = "MACP_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// Give up after this many milliseconds (a hook must not hold the prompt up).
        #[arg(long, default_value_t = 3000)]
        timeout_ms: u64,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("macp: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("macp: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The service as configured, and (local backend, serving HTTP) the artifact store whose signed
/// URLs this server answers itself. On AWS, S3 answers presigned URLs and the field is `None`.
struct Opened {
    macp: Macp,
    local_artifacts: Option<LocalBlobStore>,
    /// The local store, whose search indexes a server loads as it starts.
    local_store: Option<SqliteStore>,
}

/// Rooms whose search indexes a server loads as it starts, most recently written first.
const WARM_ROOMS: usize = 8;

/// Loads the search indexes of the busiest rooms in the background, so the first search after
/// a restart does not wait for its room to load.
fn warm_up(store: Option<SqliteStore>) {
    if let Some(store) = store {
        let resumed = store.resumed_indexes();
        if resumed.rooms > 0 {
            tracing::info!(rooms = resumed.rooms, "search indexes kept at the last clean stop read back");
        }
        if let Some(why) = &resumed.ignored {
            tracing::info!(reason = %why, "search indexes kept at the last stop not used; rooms load from the database");
        }
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            match store.warm_up(WARM_ROOMS).await {
                Ok(rooms) => {
                    tracing::info!(rooms, ms = started.elapsed().as_millis() as u64, "search indexes loaded")
                }
                Err(e) => {
                    tracing::warn!(error = %e, "loading search indexes at start failed; rooms load on first search")
                }
            }
        });
    }
}

/// How often a server purges the closed rooms whose retention ran out.
const PURGE_EVERY: Duration = Duration::from_secs(10 * 60);

/// Purges expired rooms now and every [`PURGE_EVERY`], for as long as the server runs. Every
/// instance may run it: a purge is idempotent.
fn start_purger(macp: Macp) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(PURGE_EVERY);
        loop {
            every.tick().await;
            match macp.purge_expired().await {
                Ok(r) if r.rooms.is_empty() => {}
                Ok(r) => {
                    tracing::info!(rooms = ?r.rooms, findings = r.findings, objects = r.objects, "purged expired rooms")
                }
                Err(e) => tracing::warn!(error = %e, "purging expired rooms failed; trying again next time"),
            }
        }
    })
}

/// What the service is opened for.
#[derive(Clone, Copy)]
enum Use<'a> {
    /// A one-shot command (no artifact storage).
    Command,
    /// `macp serve`: artifact storage too, with local URLs under `public` when there is one.
    Serve { public: Option<&'a str> },
    /// `macp reindex`: an embedder is required and the index's model is not checked, because
    /// reindexing is the way out of a model mismatch.
    Reindex,
    /// `macp export` and `macp import`: artifact storage read and written directly, no URLs;
    /// an embedder only where findings get indexed (an export reads, whatever the model).
    Records { index: bool },
}

#[cfg(not(feature = "aws"))]
const NO_AWS: &str = "this macp was built without the `aws` cargo feature; rebuild with \
                      `cargo build --release -p macp-mcp --features aws` to use --backend aws or --embedder titan";

/// The local data directory, locked for a process that indexes (serve, reconcile, reindex);
/// `None` on AWS, where the indexes live in the service, not in the process.
fn lock_data(cfg: &Resolved) -> Result<Option<macp_local::DataDirLock>, String> {
    match cfg.backend {
        BackendKind::Local => macp_local::lock_data_dir(&cfg.data_dir).map(Some).map_err(|e| e.to_string()),
        BackendKind::Aws => Ok(None),
    }
}

/// The service and the person at the keyboard, for the commands through which a person acts
/// directly (recorded with [`Channel::Person`]).
async fn as_person(common: &CommonArgs, local_user: Option<String>) -> Result<(Macp, Principal), String> {
    let serve = ServeArgs { local_user, ..ServeArgs::default() };
    let cfg = Resolved::new(common, &serve)?;
    let macp = open(&cfg, Use::Command).await?.macp;
    let who = Principal::new(cfg.local_user).map_err(|e| e.to_string())?;
    Ok((macp, who))
}

async fn open(cfg: &Resolved, usage: Use<'_>) -> Result<Opened, String> {
    let mut b = Macp::builder()
        .artifact_config(cfg.artifacts.clone())
        .context_caps(cfg.context_caps.clone())
        .limits({
            let mut l = macp_core::Limits::default();
            l.max_exchanges = cfg.max_exchanges;
            l
        })
        .stale_after(cfg.stale_after)
        .default_retention_days(cfg.retention_days)
        .redactor(cfg.redactor.clone());
    let mut local_artifacts = None;
    let (vectors, local_store): (Arc<dyn VectorIndex>, _) = match cfg.backend {
        BackendKind::Local => {
            // A server reads back the indexes its predecessor kept at a clean stop; any other
            // use of the store discards them (see `SqliteStore::keep_indexes`).
            let serving = matches!(usage, Use::Serve { .. });
            let store = Arc::new(
                SqliteStore::builder()
                    .data_dir(&cfg.data_dir)
                    .resume_indexes(serving)
                    .open()
                    .map_err(|e| e.to_string())?,
            );
            if let Use::Serve { public: Some(public) } = usage {
                let blobs = LocalBlobStore::open(&cfg.data_dir, public).map_err(|e| e.to_string())?;
                b = b.blob_store(Arc::new(blobs.clone()));
                local_artifacts = Some(blobs);
            }
            if let Use::Records { .. } = usage {
                // Export and import issue no URL: the base is never shown to anyone.
                let blobs =
                    LocalBlobStore::open(&cfg.data_dir, "http://127.0.0.1").map_err(|e| e.to_string())?;
                b = b.blob_store(Arc::new(blobs));
            }
            b = b.store(store.clone());
            let local = Some((*store).clone());
            (store, local)
        }
        BackendKind::Aws => {
            #[cfg(feature = "aws")]
            {
                let aws = Arc::new(
                    macp_aws::AwsBackend::builder_from_env().connect().await.map_err(|e| e.to_string())?,
                );
                if let Use::Serve { .. } | Use::Records { .. } = usage {
                    b = b.blob_store(aws.clone());
                }
                b = b.store(aws.clone());
                (aws, None)
            }
            #[cfg(not(feature = "aws"))]
            return Err(NO_AWS.into());
        }
    };
    let wanted = if let Use::Records { index: false } = usage { None } else { embedder(cfg).await? };
    match (wanted, usage) {
        (None, Use::Reindex) => {
            return Err("reindex needs an embedder (--embedder builtin, openai or titan)".into());
        }
        (None, _) => {}
        (Some(e), _) => b = b.embedder(e).vector_index(vectors),
    }
    let macp = b.build().map_err(|e| e.to_string())?;
    if !matches!(usage, Use::Reindex) {
        macp.verify_index().await.map_err(|e| e.to_string())?;
    }
    Ok(Opened { macp, local_artifacts, local_store })
}

async fn embedder(cfg: &Resolved) -> Result<Option<Arc<dyn Embedder>>, String> {
    Ok(match cfg.embedder {
        EmbedderKind::None => None,
        EmbedderKind::Builtin => {
            let e = macp_core::search::builtin::BuiltinEmbedder::load().map_err(|e| e.to_string())?;
            if let Some(d) = cfg.embeddings_dimensions.filter(|d| *d != e.dimension()) {
                return Err(format!(
                    "--embeddings-dimensions {d}: the built-in model has {} dimensions; the setting \
                     applies to --embedder openai and titan",
                    e.dimension()
                ));
            }
            Some(Arc::new(e))
        }
        EmbedderKind::Openai => {
            let (Some(url), Some(model)) = (&cfg.embeddings_url, &cfg.embeddings_model) else {
                return Err("--embedder openai needs --embeddings-url and --embeddings-model (or MACP_EMBEDDINGS_URL / MACP_EMBEDDINGS_MODEL)".into());
            };
            let mut ob = macp_core::search::openai::OpenAiEmbedder::builder(url, model);
            if let Ok(k) = std::env::var("MACP_EMBEDDINGS_API_KEY") {
                ob = ob.api_key(k);
            }
            if let Some(d) = cfg.embeddings_dimensions {
                ob = ob.dimensions(d);
            }
            Some(Arc::new(ob.connect().await.map_err(|e| e.to_string())?))
        }
        EmbedderKind::Titan => {
            #[cfg(feature = "aws")]
            {
                Some(Arc::new(
                    macp_aws::TitanEmbedder::from_env(cfg.embeddings_dimensions.unwrap_or(256))
                        .await
                        .map_err(|e| e.to_string())?,
                ))
            }
            #[cfg(not(feature = "aws"))]
            return Err(NO_AWS.into());
        }
    })
}

async fn run(cli: Cli) -> Result<(), String> {
    match cli.command {
        Command::Hook { client, url, room, agent, token, timeout_ms } => {
            use std::io::Read as _;
            let mut stdin = String::new();
            // A client that sends nothing (or a person at a terminal with stdin closed) is fine.
            let _ = std::io::stdin().read_to_string(&mut stdin);
            let target = macp_mcp::hook::HookTarget { url, room_id: room.clone(), agent_id: agent, token };
            let fetched =
                tokio::time::timeout(Duration::from_millis(timeout_ms), macp_mcp::hook::fetch(&target, 50))
                    .await;
            match fetched {
                Ok(Ok((label, updates))) => {
                    if let Some(out) = macp_mcp::hook::render(client, &stdin, &label, &room, &updates) {
                        println!("{out}");
                    }
                }
                Ok(Err(e)) => eprintln!("macp hook: {e}"),
                Err(_) => eprintln!("macp hook: no answer from {} within {timeout_ms} ms", target.url),
            }
            Ok(())
        }
        Command::Serve(serve) => serve_cmd(&cli.common, &serve).await,
        Command::Rooms { all, json } => {
            let cfg = Resolved::new(&cli.common, &ServeArgs::default())?;
            let macp = open(&cfg, Use::Command).await?.macp;
            let who = Principal::new(cfg.local_user).map_err(|e| e.to_string())?;
            let mut cursor = None;
            loop {
                let status = if all { RoomFilter::All } else { RoomFilter::Active };
                let page = macp
                    .list_rooms(&who, ListRooms { status, limit: Some(200), cursor })
                    .await
                    .map_err(|e| e.to_string())?;
                for r in &page.rooms {
                    if json {
                        println!("{}", serde_json::to_string(r).unwrap_or_default());
                    } else {
                        println!(
                            "{}  {:<6}  {}  {}",
                            r.room_id,
                            r.status,
                            r.created_at,
                            r.name.as_deref().unwrap_or("-")
                        );
                        println!("    {}", r.objective.lines().next().unwrap_or(""));
                    }
                }
                match page.next_cursor {
                    Some(c) => cursor = Some(c),
                    None => return Ok(()),
                }
            }
        }
        Command::Decisions { room, all, json, remote } => {
            if let Some(r) = macp_mcp::remote::Remote::from_args(&remote) {
                let list = r.get(&format!("rooms/{room}/decisions"), &[]).await?;
                for d in list.as_array().into_iter().flatten().filter(|d| all || d["answer"].is_null()) {
                    println!(
                        "{}",
                        if json { d.to_string() } else { format!("{} {}", d["decision_id"], d["question"]) }
                    );
                }
                return Ok(());
            }
            let cfg = Resolved::new(&cli.common, &ServeArgs::default())?;
            let macp = open(&cfg, Use::Command).await?.macp;
            let who = Principal::new(cfg.local_user).map_err(|e| e.to_string())?;
            for d in macp.list_decisions(&who, room, !all).await.map_err(|e| e.to_string())? {
                if json {
                    println!("{}", serde_json::to_string(&d).unwrap_or_default());
                    continue;
                }
                println!(
                    "{} [{}] asked by {} ({}) at {}",
                    d.decision_id, d.urgency, d.asked_by, d.asked_by_user, d.asked_at
                );
                println!("    {}", d.question);
                if !d.options.is_empty() {
                    println!("    options: {}", d.options.join(" | "));
                }
                if let Some(a) = &d.answer {
                    println!("    answered \"{}\" by {} ({}) at {}", a.text, a.user_id, a.channel, a.at);
                }
            }
            Ok(())
        }
        Command::Decide { room, decision, answer, local_user, remote } => {
            if let Some(r) = macp_mcp::remote::Remote::from_args(&remote) {
                let d = r
                    .post(
                        &format!("rooms/{room}/decisions/{decision}"),
                        &serde_json::json!({ "answer": answer }),
                    )
                    .await?;
                println!("answered: {} (as {})", d["answer"]["text"], d["answer"]["user_id"]);
                return Ok(());
            }
            let (macp, who) = as_person(&cli.common, local_user).await?;
            let req = macp_core::service::AnswerDecision {
                room_id: room,
                decision_id: decision,
                answer,
                agent_id: None,
            };
            let d = macp.answer_decision(&who, req, Channel::Person).await.map_err(|e| e.to_string())?;
            println!("answered: {}", d.answer.as_ref().map(|a| a.text.clone()).unwrap_or_default());
            Ok(())
        }
        Command::Steer { room, marker, objective, reopen, local_user } => {
            let (macp, who) = as_person(&cli.common, local_user).await?;
            let req = macp_core::service::SteerRoom {
                objective,
                marker,
                reopen,
                ..macp_core::service::SteerRoom::new(room)
            };
            let r = macp.steer_room(&who, req, Channel::Person).await.map_err(|e| e.to_string())?;
            let phase =
                r.phase().map(|m| format!("{}: {}", m.marker_id, m.label)).unwrap_or_else(|| "-".into());
            println!("{} ({}) phase {phase}\nobjective: {}", r.room_id, r.status, r.objective);
            Ok(())
        }
        Command::Close { room, resolution, root_cause, local_user } => {
            let (macp, who) = as_person(&cli.common, local_user).await?;
            let req = macp_core::service::CloseRoom {
                resolution,
                root_cause,
                ..macp_core::service::CloseRoom::new(room)
            };
            let r = macp.close_room(&who, req, Channel::Person).await.map_err(|e| e.to_string())?;
            println!("{} {}", r.room_id, r.status);
            Ok(())
        }
        Command::Release { room, subject, local_user } => {
            let (macp, who) = as_person(&cli.common, local_user).await?;
            let c = macp.release_claim_as_person(&who, room, &subject).await.map_err(|e| e.to_string())?;
            println!("released {}'s claim: {}", c.agent_id, c.subject);
            Ok(())
        }
        Command::Timeline { room, json, remote } => {
            if let Some(r) = macp_mcp::remote::Remote::from_args(&remote) {
                let mut cursor: Option<String> = None;
                loop {
                    let mut q = vec![("limit", "200")];
                    q.extend(cursor.as_deref().map(|c| ("cursor", c)));
                    let page = r.get(&format!("rooms/{room}/timeline"), &q).await?;
                    for f in page["findings"].as_array().into_iter().flatten() {
                        if json {
                            println!("{f}");
                        } else {
                            println!(
                                "#{} {} {} ({})",
                                f["seq"], f["created_at"], f["agent_id"], f["user_id"]
                            );
                            for l in f["content"].as_str().unwrap_or("").lines() {
                                println!("    {l}");
                            }
                        }
                    }
                    match page["next_cursor"].as_str() {
                        Some(c) => cursor = Some(c.to_owned()),
                        None => return Ok(()),
                    }
                }
            }
            let cfg = Resolved::new(&cli.common, &ServeArgs::default())?;
            let macp = open(&cfg, Use::Command).await?.macp;
            let who = Principal::new(cfg.local_user).map_err(|e| e.to_string())?;
            let mut cursor = None;
            loop {
                let page = macp
                    .timeline(&who, TimelineQuery { limit: Some(200), cursor, ..TimelineQuery::new(room) })
                    .await
                    .map_err(|e| e.to_string())?;
                for f in &page.findings {
                    if json {
                        println!("{}", serde_json::to_string(f).unwrap_or_default());
                    } else {
                        println!(
                            "#{} {} {} ({}) [{}]",
                            f.seq,
                            f.created_at,
                            f.agent_id,
                            f.user_id,
                            f.tags.join(", ")
                        );
                        for l in f.content.lines() {
                            println!("    {l}");
                        }
                    }
                }
                match page.next_cursor {
                    Some(c) => cursor = Some(c),
                    None => return Ok(()),
                }
            }
        }
        Command::Search { room, query, limit, json, remote } => {
            if let Some(r) = macp_mcp::remote::Remote::from_args(&remote) {
                let limit = limit.to_string();
                let res = r.get(&format!("rooms/{room}/search"), &[("q", &query), ("limit", &limit)]).await?;
                for h in res["results"].as_array().into_iter().flatten() {
                    if json {
                        println!("{h}");
                    } else {
                        println!(
                            "{:.4}  #{} {}",
                            h["score"].as_f64().unwrap_or(0.0),
                            h["finding"]["seq"],
                            h["finding"]["agent_id"]
                        );
                        println!(
                            "    {}",
                            h["finding"]["content"].as_str().unwrap_or("").lines().next().unwrap_or("")
                        );
                    }
                }
                return Ok(());
            }
            let cfg = Resolved::new(&cli.common, &ServeArgs::default())?;
            let macp = open(&cfg, Use::Command).await?.macp;
            let who = Principal::new(cfg.local_user).map_err(|e| e.to_string())?;
            let res = macp
                .search_findings(
                    &who,
                    SearchFindings { limit: Some(limit), ..SearchFindings::new(room, query) },
                )
                .await
                .map_err(|e| e.to_string())?;
            if json {
                println!("{}", serde_json::to_string_pretty(&res).unwrap_or_default());
            } else {
                if !res.semantic {
                    println!("(semantic search unavailable: keyword matches only)");
                }
                for h in &res.results {
                    println!(
                        "{:.4}  #{} {} [{}]",
                        h.score,
                        h.finding.seq,
                        h.finding.agent_id,
                        h.finding.tags.join(", ")
                    );
                    println!("    {}", h.finding.content.lines().next().unwrap_or(""));
                }
            }
            Ok(())
        }
        Command::Reconcile => {
            let cfg = Resolved::new(&cli.common, &ServeArgs::default())?;
            let _lock = lock_data(&cfg)?;
            let macp = open(&cfg, Use::Command).await?.macp;
            let mut total = 0;
            loop {
                let r = macp.reconcile(usize::MAX).await.map_err(|e| e.to_string())?;
                total += r.indexed;
                if let Some(e) = r.last_error {
                    return Err(format!("indexed {total}; {} failed: {e}", r.failed));
                }
                if r.indexed == 0 {
                    break;
                }
            }
            println!("indexed {total} pending findings");
            Ok(())
        }
        Command::Backup { dest } => {
            let cfg = Resolved::new(&cli.common, &ServeArgs::default())?;
            if cfg.backend != BackendKind::Local {
                return Err(
                    "macp backup copies the local data directory; on AWS use DynamoDB point-in-time \
                            recovery and S3 versioning (see deploy/tofu/README.md)"
                        .into(),
                );
            }
            let store = SqliteStore::builder().data_dir(&cfg.data_dir).open().map_err(|e| e.to_string())?;
            let r = macp_local::backup(&store, &dest).await.map_err(|e| e.to_string())?;
            println!(
                "backed up {} to {}: database {} bytes, {} artifact files ({} bytes)",
                cfg.data_dir.display(),
                dest.display(),
                r.database_bytes,
                r.artifacts,
                r.artifact_bytes
            );
            Ok(())
        }
        Command::Setup => {
            let cfg = Resolved::new(&cli.common, &ServeArgs::default())?;
            match cfg.backend {
                BackendKind::Local => {
                    SqliteStore::builder().data_dir(&cfg.data_dir).open().map_err(|e| e.to_string())?;
                    println!("SQLite database ready in {}", cfg.data_dir.display());
                }
                BackendKind::Aws => {
                    #[cfg(feature = "aws")]
                    {
                        let aws = macp_aws::AwsBackend::builder_from_env()
                            .connect()
                            .await
                            .map_err(|e| e.to_string())?;
                        aws.setup().await.map_err(|e| e.to_string())?;
                        println!("AWS resources ready: {:?}", aws.names());
                    }
                    #[cfg(not(feature = "aws"))]
                    return Err(NO_AWS.into());
                }
            }
            Ok(())
        }
        Command::Export { room, out, scrub } => {
            let cfg = Resolved::new(&cli.common, &ServeArgs::default())?;
            let macp = open(&cfg, Use::Records { index: false }).await?.macp;
            let bundle = macp.export_room(room, scrub).await.map_err(|e| e.to_string())?;
            // Written as it is serialised: a second copy of the artifacts' bytes, as JSON, would
            // double what an export holds.
            let write = |w: &mut dyn std::io::Write| {
                let mut w = std::io::BufWriter::with_capacity(1 << 16, w);
                serde_json::to_writer(&mut w, &bundle)?;
                std::io::Write::flush(&mut w)
            };
            match out.as_deref().filter(|p| p.as_os_str() != "-") {
                Some(path) => write_private_file(path, write)?,
                None => write(&mut std::io::stdout().lock()).map_err(|e| e.to_string())?,
            }
            let r = &bundle.record;
            eprintln!(
                "exported room {room}: {} findings, {} events, {} entities, {} artifacts ({} with bytes){}",
                r.findings.len(),
                r.events.len(),
                r.entities.len(),
                r.artifacts.len(),
                bundle.objects.len(),
                match &bundle.scrubbed {
                    Some(s) if bundle.unscrubbed.is_empty() => format!("; scrubbed {} secrets", s.total()),
                    Some(s) => format!(
                        "; scrubbed {} secrets; {} artifacts are not text and were not scrubbed: {}",
                        s.total(),
                        bundle.unscrubbed.len(),
                        bundle.unscrubbed.join(", ")
                    ),
                    None => String::new(),
                }
            );
            Ok(())
        }
        Command::Import { bundle, retention_days } => {
            let cfg = Resolved::new(&cli.common, &ServeArgs::default())?;
            // It indexes the findings, as a server would: one process per local data directory.
            let _lock = lock_data(&cfg)?;
            // Read as it is parsed, rather than held whole beside the bundle.
            let parsed = parse_bundle(Some(bundle.as_path()).filter(|p| p.as_os_str() != "-"))?;
            let macp = open(&cfg, Use::Records { index: true }).await?.macp;
            let r = macp.import_room(parsed, retention_days).await.map_err(|e| e.to_string())?;
            println!(
                "imported room {}: {} findings ({} indexed), {} events, {} entities, {} artifact objects; {}",
                r.room_id,
                r.findings,
                r.indexed,
                r.events,
                r.entities,
                r.objects,
                match r.expires_at {
                    Some(t) => format!("purged from {t} (its retention; --retention-days 0 keeps it)"),
                    None => "not expiring by its own retention (a room without one follows the \
                             server's --retention-days once closed)"
                        .into(),
                }
            );
            if let Some(e) = r.index_error {
                eprintln!("some findings stay pending for the reconciler (macp reconcile): {e}");
            }
            Ok(())
        }
        Command::Reindex => {
            let cfg = Resolved::new(&cli.common, &ServeArgs::default())?;
            let _lock = lock_data(&cfg)?;
            let macp = open(&cfg, Use::Reindex).await?.macp;
            let r = macp.reindex().await.map_err(|e| e.to_string())?;
            println!("reindexed {} findings", r.indexed);
            Ok(())
        }
    }
}

/// A bundle read from `file` (standard input when `None`) as it is parsed. The format and
/// version are the core's to check (`import_room`); when the input does not parse as a bundle,
/// its head is read again for them, so that a bundle of a newer version says so rather than fail
/// on a field this build does not know: the whole file, opened again, or, from standard input,
/// which cannot be read twice, the first [`HEAD_BYTES`] kept as they were read.
fn parse_bundle(file: Option<&std::path::Path>) -> Result<macp_core::service::RoomBundle, String> {
    let name = file.map_or_else(|| "standard input".to_owned(), |p| p.display().to_string());
    let not = |e: &dyn std::fmt::Display| format!("{name} is not a MACP room bundle: {e}");
    let unread = |e: &dyn std::fmt::Display| format!("cannot read {name}: {e}");
    let open = |path: &std::path::Path| {
        std::fs::File::open(path)
            .map(|f| std::io::BufReader::with_capacity(1 << 16, f))
            .map_err(|e| unread(&e))
    };
    let input: Box<dyn std::io::Read> = match file {
        Some(path) => Box::new(open(path)?),
        None => Box::new(std::io::BufReader::with_capacity(1 << 16, std::io::stdin().lock())),
    };
    let mut input = KeepHead { inner: input, head: Vec::new() };
    let first = match serde_json::from_reader(&mut input) {
        Ok(bundle) => return Ok(bundle),
        Err(e) if e.classify() == serde_json::error::Category::Io => return Err(unread(&e)),
        // serde's message quotes the value it could not take, which can be a whole object's
        // base64: a few hundred characters say where and what.
        Err(e) => shortened(&e.to_string(), 300),
    };
    let (format, version) = match file {
        Some(path) => bundle_head(open(path)?),
        None => {
            let head = bundle_head(input.head.as_slice());
            if head.0.is_none() && input.head.len() == HEAD_BYTES {
                return Err(format!(
                    "{name} did not parse as a MACP room bundle ({first}), and its first {} KiB do not \
                     say its format and version (macp export writes them first): import it from a \
                     file to learn whether a newer macp reads it",
                    HEAD_BYTES >> 10
                ));
            }
            head
        }
    };
    if format.is_some_and(|f| f == macp_core::service::BUNDLE_FORMAT) {
        let version = version.and_then(|v| v.as_u64()).unwrap_or(0);
        if version > u64::from(macp_core::service::BUNDLE_VERSION) {
            return Err(format!(
                "{name} is a version {version} bundle; this macp reads versions up to {}: import it with a newer macp",
                macp_core::service::BUNDLE_VERSION
            ));
        }
        return Err(not(&first));
    }
    Err(not(&format!("no `format: {}` ({first})", macp_core::service::BUNDLE_FORMAT)))
}

/// `text` cut to `max` characters, saying so.
fn shortened(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}… ({} characters)", &text[..i], text.chars().count()),
        None => text.to_owned(),
    }
}

/// How much of an input that cannot be read twice is kept for [`bundle_head`]: `macp export`
/// writes the format and version first.
const HEAD_BYTES: usize = 64 * 1024;

/// A reader that keeps the first [`HEAD_BYTES`] it gives.
struct KeepHead<R> {
    inner: R,
    head: Vec<u8>,
}

impl<R: std::io::Read> std::io::Read for KeepHead<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let room = HEAD_BYTES.saturating_sub(self.head.len());
        self.head.extend_from_slice(&buf[..n.min(room)]);
        Ok(n)
    }
}

/// The `format` and `version` of a JSON object, read until both are found (everything else
/// skipped unread), or as far as the input goes: `None` for either not found.
fn bundle_head(input: impl std::io::Read) -> (Option<serde_json::Value>, Option<serde_json::Value>) {
    use serde::de::{Deserializer as _, Error as _, IgnoredAny, MapAccess, Visitor};

    struct Head<'a>(&'a mut (Option<serde_json::Value>, Option<serde_json::Value>));
    impl<'de> Visitor<'de> for Head<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<String>()? {
                match key.as_str() {
                    "format" => self.0.0 = Some(map.next_value()?),
                    "version" => self.0.1 = Some(map.next_value()?),
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                if self.0.0.is_some() && self.0.1.is_some() {
                    // Both found: the rest is not read (an error stops the deserializer).
                    return Err(A::Error::custom("head read"));
                }
            }
            Ok(())
        }
    }
    let mut found = (None, None);
    let _ = serde_json::Deserializer::from_reader(input).deserialize_map(Head(&mut found));
    found
}

/// Writes what `write` writes to a new file only its owner can read (a bundle holds the whole room), whole
/// or not at all: a fresh file beside it (never one that exists, whatever its mode or link),
/// synced, renamed into place, and the directory synced.
fn write_private_file(
    path: &std::path::Path,
    write: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> Result<(), String> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let tmp = dir.join(format!(".macp-export-{}-{nanos}.partial", std::process::id()));
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    let written = o.open(&tmp).and_then(|mut f| {
        #[cfg(unix)]
        {
            // The umask cannot widen 0600, but say it outright.
            use std::os::unix::fs::PermissionsExt;
            f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        }
        write(&mut f).and_then(|_| f.sync_all())
    });
    let done = written
        .and_then(|_| std::fs::rename(&tmp, path))
        .and_then(|_| std::fs::File::open(dir).and_then(|d| d.sync_all()));
    done.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("cannot write {}: {e}", path.display())
    })
}

fn init_logs(to_stderr: bool) {
    let filter =
        tracing_subscriber::EnvFilter::try_from_env("MACP_LOG").unwrap_or_else(|_| "info,rmcp=warn".into());
    let b = tracing_subscriber::fmt().json().with_env_filter(filter).with_current_span(false);
    if to_stderr {
        b.with_writer(std::io::stderr).init();
    } else {
        b.with_writer(std::io::stdout).init();
    }
}

async fn serve_cmd(common: &CommonArgs, serve: &ServeArgs) -> Result<(), String> {
    let cfg = Resolved::new(common, serve)?;
    init_logs(serve.stdio);
    let _lock = lock_data(&cfg)?;
    let local = Principal::new(cfg.local_user.clone()).map_err(|e| e.to_string())?;

    if serve.stdio {
        // No HTTP server answers local signed URLs here: artifact tools only on AWS (S3 URLs).
        let Opened { macp, local_store, .. } = open(&cfg, Use::Serve { public: None }).await?;
        let kept = local_store.clone();
        warm_up(local_store);
        let reconciler = macp.start_reconciler(Duration::from_secs(cfg.reconcile_interval));
        // Locally, stdio opens no artifact storage, and a purge must take the room's files too:
        // the HTTP server (or an AWS one) purges.
        let purger = match cfg.backend {
            BackendKind::Local => None,
            _ => Some(start_purger(macp.clone())),
        };
        tracing::info!(user = %local.user_id, backend = ?cfg.backend, data_dir = %cfg.data_dir.display(), "serving MCP over stdio for one local user");
        let running = MacpMcp::new(macp, Some(local))
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| e.to_string())?;
        running.waiting().await.map_err(|e| e.to_string())?;
        drop(reconciler);
        if let Some(p) = purger {
            p.abort();
        }
        keep_indexes(kept).await;
        return Ok(());
    }

    if !cfg.bind.ip().is_loopback() && cfg.auth.is_none() {
        return Err(format!(
            "refusing to serve {} without authentication: bind a loopback address (127.0.0.1) for local use, \
             or configure OAuth with --auth-issuer and --auth-audience (see README, \"Authentication\")",
            cfg.bind
        ));
    }
    if cfg.auth.is_some() && cfg.bind.ip().is_unspecified() && cfg.public_url.is_none() {
        // The resource URL clients must present tokens for would be http://0.0.0.0:…/mcp.
        return Err(format!(
            "--bind {} with authentication needs --public-url (MACP_PUBLIC_URL): the URL agents reach \
             this server at, e.g. https://macp.example.com; it names the protected resource in the \
             OAuth metadata and in presigned artifact URLs",
            cfg.bind
        ));
    }
    let listener =
        macp_mcp::http::bind(cfg.bind).await.map_err(|e| format!("cannot listen on {}: {e}", cfg.bind))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let public =
        cfg.public_url.clone().unwrap_or_else(|| format!("http://{addr}")).trim_end_matches('/').to_owned();
    let url = format!("http://{addr}/mcp");
    let Opened { macp, local_artifacts, local_store } =
        open(&cfg, Use::Serve { public: Some(&public) }).await?;
    let reconciler = macp.start_reconciler(Duration::from_secs(cfg.reconcile_interval));
    let purger = start_purger(macp.clone());
    let ct = CancellationToken::new();
    let mut allowed_hosts = cfg.allowed_hosts.clone();
    if let Some(host) = public.split("://").nth(1).and_then(|r| r.split('/').next()) {
        allowed_hosts.push(host.to_owned());
    }
    let artifacts = local_artifacts.map(|b| Arc::new(b) as Arc<dyn macp_core::blob::UrlEndpoint>);
    let opts = HttpOptions { allowed_hosts, artifacts };
    let app = match &cfg.auth {
        None => router(macp, Some(local.clone()), &opts, ct.child_token()),
        Some(a) => {
            let verifier = Verifier::new(AuthConfig { resource: format!("{public}/mcp"), ..a.clone() })?;
            router_with_auth(macp, verifier, &opts, ct.child_token())?
        }
    };
    let signals = Shutdown::listen()?;
    println!("listening on {url}");
    // After the line above: it is the first thing a supervisor reads.
    let kept = local_store.clone();
    warm_up(local_store);
    match &cfg.auth {
        None => tracing::info!(
            url = %url,
            backend = ?cfg.backend,
            data_dir = %cfg.data_dir.display(),
            embedder = ?cfg.embedder,
            user = %local.user_id,
            "auth is off: serving loopback only, every request acts as the local user"
        ),
        Some(a) => tracing::info!(
            url = %url,
            resource = %format!("{public}/mcp"),
            issuer = %a.issuer,
            audience_claim = %a.audience_claim,
            user_claim = %a.user_claim,
            backend = ?cfg.backend,
            data_dir = %cfg.data_dir.display(),
            "auth is on: every request needs a bearer token from the issuer"
        ),
    }
    // On SIGTERM / Ctrl-C (a rolling replacement): stop accepting (after the connections already
    // queued, see macp_mcp::serve), let the requests in flight
    // finish and answer, then cancel MCP sessions (which ends their SSE streams, so their
    // connections close), and give up waiting after GRACE. Cancelling first would abort the
    // calls in flight: their clients would see a 500 for a write that may have been applied.
    const GRACE: Duration = Duration::from_secs(10);
    let (stopping_tx, stopping_rx) = tokio::sync::oneshot::channel::<()>();
    let shutdown = async move {
        signals.requested().await;
        tracing::info!(requests_in_flight = macp_mcp::http::requests_in_flight(), "shutting down");
    };
    // Called once the listener is closed, with every connection it accepted counted in flight.
    let closed = move || {
        let _ = stopping_tx.send(());
    };
    let server = macp_mcp::serve::serve(listener, app, shutdown, closed);
    let deadline = async {
        if stopping_rx.await.is_ok() {
            let until = tokio::time::Instant::now() + GRACE;
            while macp_mcp::http::requests_in_flight() > 0 && tokio::time::Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            // Every answer counted is whole by now; hyper writes it out before closing.
            ct.cancel();
            tokio::time::sleep_until(until.max(tokio::time::Instant::now() + Duration::from_secs(1))).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        () = server => {}
        () = deadline => tracing::warn!(grace_secs = GRACE.as_secs(), "connections still open after the grace period; exiting"),
    }
    drop(reconciler);
    purger.abort();
    keep_indexes(kept).await;
    Ok(())
}

/// At a clean stop, after the last request: keeps the search indexes for the next server on
/// this data directory (see `SqliteStore::keep_indexes`). A failure costs only the next
/// server's first searches their wait.
async fn keep_indexes(store: Option<SqliteStore>) {
    let Some(store) = store else { return };
    let started = std::time::Instant::now();
    match store.keep_indexes().await {
        Ok((rooms, bytes)) => {
            tracing::info!(
                rooms,
                bytes,
                ms = started.elapsed().as_millis() as u64,
                "search indexes kept for the next start"
            )
        }
        Err(e) => {
            tracing::warn!(error = %e, "could not keep the search indexes; the next start loads them from the database")
        }
    }
}

/// SIGTERM and SIGINT, listened for from the moment this is created. Created before the
/// server prints "listening on", so a signal sent as soon as that line appears shuts down
/// gracefully instead of killing the process with the default action.
struct Shutdown {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
}

impl Shutdown {
    fn listen() -> Result<Self, String> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let listen = |k| signal(k).map_err(|e| format!("cannot listen for signals: {e}"));
            Ok(Self { term: listen(SignalKind::terminate())?, int: listen(SignalKind::interrupt())? })
        }
        #[cfg(not(unix))]
        Ok(Self {})
    }

    async fn requested(mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
        #[cfg(not(unix))]
        {
            let _ = &mut self;
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
