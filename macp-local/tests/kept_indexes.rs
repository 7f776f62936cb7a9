//! Search indexes kept at a clean stop (`SqliteStore::keep_indexes`) and read back by the next
//! open that resumes them: searches answer exactly as before the restart, and a snapshot that
//! could be stale or damaged is never used.

use std::path::Path;
use std::sync::Arc;

use macp_core::search::builtin::BuiltinEmbedder;
use macp_core::service::{CreateRoom, Erase, JoinRoom, PostFinding, SearchFindings};
use macp_core::{AgentId, Macp, Principal, RoomId};
use macp_local::{Durability, SqliteStore};

const SNAPSHOT: &str = "indexes.snapshot";

fn open(dir: &Path, resume: bool) -> Arc<SqliteStore> {
    Arc::new(
        SqliteStore::builder()
            .data_dir(dir)
            .durability(Durability::Normal)
            .resume_indexes(resume)
            .open()
            .unwrap(),
    )
}

fn service(store: Arc<SqliteStore>) -> Macp {
    Macp::builder()
        .store(store.clone())
        .embedder(Arc::new(BuiltinEmbedder::load().unwrap()))
        .vector_index(store)
        .build()
        .unwrap()
}

const QUERIES: [&str; 4] =
    ["orders-db connection pool exhausted", "finding 1033", "checkout latency after deploy", "cache"];

/// Every query's results: ids, fused scores and both ranks.
async fn answers(macp: &Macp, me: &Principal, room: RoomId) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for q in QUERIES {
        let r = macp.search_findings(me, SearchFindings::new(room, q)).await.unwrap();
        assert!(r.semantic, "semantic search ran");
        out.push(
            r.results
                .iter()
                .map(|h| {
                    format!(
                        "{} {:.9} {:?} {:?}",
                        h.finding.finding_id, h.score, h.semantic_rank, h.keyword_rank
                    )
                })
                .collect(),
        );
    }
    out
}

/// A room of more findings than one segment of either index holds, one of them erased, and
/// searched (so both indexes are loaded).
async fn room_with_findings(macp: &Macp, me: &Principal) -> (RoomId, AgentId) {
    let room = macp.create_room(me, CreateRoom::new("kept indexes")).await.unwrap().room_id;
    let agent =
        macp.join_room(me, JoinRoom::new(room).agent(AgentId::new("ana").unwrap())).await.unwrap().agent_id;
    let services = ["orders-db", "checkout", "cache", "payments", "auth"];
    let symptoms = ["connection pool exhausted", "latency after deploy", "5xx spike", "OOM kills"];
    let mut erased = None;
    for i in 0..1100 {
        let text = format!("finding {i}: {} {}", services[i % 5], symptoms[(i / 5) % 4]);
        let p = macp.post_finding(me, PostFinding::new(room, agent.clone(), text)).await.unwrap();
        if i == 500 {
            erased = Some(p.finding.finding_id);
        }
    }
    macp.erase(me, Erase::finding(room, agent.clone(), erased.unwrap(), "test")).await.unwrap();
    (room, agent)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indexes_kept_at_a_clean_stop_search_as_before_after_the_restart() {
    let dir = tempfile::tempdir().unwrap();
    let me = Principal::new("ana").unwrap();
    let store = open(dir.path(), true);
    let macp = service(store.clone());
    let (room, agent) = room_with_findings(&macp, &me).await;
    let before = answers(&macp, &me, room).await;
    assert!(before.iter().all(|a| !a.is_empty()));

    let (rooms, bytes) = store.keep_indexes().await.unwrap();
    assert_eq!(rooms, 1);
    assert!(bytes > 0 && dir.path().join(SNAPSHOT).exists());
    // Nothing changes the database after the snapshot: a later write is refused, retryably.
    let late = macp.post_finding(&me, PostFinding::new(room, agent.clone(), "too late")).await.unwrap_err();
    assert_eq!(late.code(), "backend");
    assert!(late.is_retryable(), "{late}");
    drop(macp);
    drop(store);

    let store = open(dir.path(), true);
    assert_eq!(store.resumed_indexes().rooms, 1, "{:?}", store.resumed_indexes());
    assert!(!dir.path().join(SNAPSHOT).exists(), "the snapshot is used once");
    let macp = service(store.clone());
    assert_eq!(answers(&macp, &me, room).await, before);
    // The resumed indexes take new findings like loaded ones.
    let p = macp.post_finding(&me, PostFinding::new(room, agent, "zebra crossing flaps")).await.unwrap();
    let r = macp.search_findings(&me, SearchFindings::new(room, "zebra crossing")).await.unwrap();
    assert_eq!(r.results[0].finding.finding_id, p.finding.finding_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_is_never_used_once_another_open_may_have_changed_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let me = Principal::new("ana").unwrap();
    let store = open(dir.path(), true);
    let macp = service(store.clone());
    let (room, _) = room_with_findings(&macp, &me).await;
    let before = answers(&macp, &me, room).await;
    store.keep_indexes().await.unwrap();
    drop(macp);
    drop(store);
    let first = std::fs::read(dir.path().join(SNAPSHOT)).unwrap();

    // A process that does not resume (a `macp` command) drops it.
    let other = open(dir.path(), false);
    assert_eq!(other.resumed_indexes().rooms, 0);
    assert!(other.resumed_indexes().ignored.is_some());
    assert!(!dir.path().join(SNAPSHOT).exists());
    drop(other);
    let store = open(dir.path(), true);
    assert_eq!(store.resumed_indexes().rooms, 0);
    assert_eq!(store.resumed_indexes().ignored, None, "no snapshot was there");
    // The rooms load from the database as before.
    let macp = service(store.clone());
    assert_eq!(answers(&macp, &me, room).await, before);

    // An older snapshot put back beside a database that moved on (a newer snapshot's token) is
    // refused.
    store.keep_indexes().await.unwrap();
    drop(macp);
    drop(store);
    std::fs::write(dir.path().join(SNAPSHOT), &first).unwrap();
    let store = open(dir.path(), true);
    assert_eq!(store.resumed_indexes().rooms, 0);
    let why = store.resumed_indexes().ignored.clone().unwrap();
    assert!(why.contains("changed"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_snapshot_is_ignored_and_the_rooms_load_from_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let me = Principal::new("ana").unwrap();
    let store = open(dir.path(), true);
    let macp = service(store.clone());
    let (room, _) = room_with_findings(&macp, &me).await;
    let before = answers(&macp, &me, room).await;
    store.keep_indexes().await.unwrap();
    drop(macp);
    drop(store);
    let path = dir.path().join(SNAPSHOT);
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x5a;
    std::fs::write(&path, &bytes).unwrap();

    let store = open(dir.path(), true);
    assert_eq!(store.resumed_indexes().rooms, 0);
    let why = store.resumed_indexes().ignored.clone().unwrap();
    assert!(why.contains("damaged"), "{why}");
    let macp = service(store);
    assert_eq!(answers(&macp, &me, room).await, before);
}
