//! Search indexes kept at a clean stop (`SqliteStore::keep_indexes`) and read back by the next
//! open that resumes them: searches answer exactly as before the restart and as indexes
//! rebuilt from the database do, and a snapshot (or a room in it) that could be stale or
//! damaged is never used.

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

/// A room of `n` findings, searched (so both indexes are loaded), then, when `n` > 500, one
/// finding erased: the erasure reaches the loaded indexes.
async fn room_of(macp: &Macp, me: &Principal, n: usize) -> (RoomId, AgentId) {
    let room = macp.create_room(me, CreateRoom::new("kept indexes")).await.unwrap().room_id;
    let agent =
        macp.join_room(me, JoinRoom::new(room).agent(AgentId::new("ana").unwrap())).await.unwrap().agent_id;
    let services = ["orders-db", "checkout", "cache", "payments", "auth"];
    let symptoms = ["connection pool exhausted", "latency after deploy", "5xx spike", "OOM kills"];
    let mut erased = None;
    for i in 0..n {
        let text = format!("finding {i}: {} {}", services[i % 5], symptoms[(i / 5) % 4]);
        let p = macp.post_finding(me, PostFinding::new(room, agent.clone(), text)).await.unwrap();
        if i == 500 {
            erased = Some(p.finding.finding_id);
        }
    }
    macp.search_findings(me, SearchFindings::new(room, "cache")).await.unwrap();
    if let Some(f) = erased {
        macp.erase(me, Erase::finding(room, agent.clone(), f, "test")).await.unwrap();
    }
    (room, agent)
}

async fn room_with_findings(macp: &Macp, me: &Principal) -> (RoomId, AgentId) {
    room_of(macp, me, 1100).await
}

/// The answers of indexes rebuilt from the database: a second store on the same directory,
/// which does not resume (the snapshot, if any, is gone by now).
async fn rebuilt(dir: &Path, me: &Principal, room: RoomId) -> Vec<Vec<String>> {
    answers(&service(open(dir, false)), me, room).await
}

/// A store that kept the indexes of one room of findings and was dropped: the directory, the
/// room and the room's answers before the stop.
async fn kept_room() -> (tempfile::TempDir, Principal, RoomId, Vec<Vec<String>>) {
    let dir = tempfile::tempdir().unwrap();
    let me = Principal::new("ana").unwrap();
    let store = open(dir.path(), true);
    let macp = service(store.clone());
    let (room, _) = room_with_findings(&macp, &me).await;
    let before = answers(&macp, &me, room).await;
    store.keep_indexes().await.unwrap();
    (dir, me, room, before)
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
    assert_eq!(rebuilt(dir.path(), &me, room).await, before, "a rebuild scores as the kept indexes do");
    // The resumed indexes take new findings like loaded ones.
    let p = macp.post_finding(&me, PostFinding::new(room, agent, "zebra crossing flaps")).await.unwrap();
    let r = macp.search_findings(&me, SearchFindings::new(room, "zebra crossing")).await.unwrap();
    assert_eq!(r.results[0].finding.finding_id, p.finding.finding_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_is_never_used_once_another_open_may_have_changed_the_database() {
    let (dir, me, room, before) = kept_room().await;
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
    let (dir, me, room, before) = kept_room().await;
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

/// Rooms of every shape come back: empty (no vectors, the model's dimension only), an exact
/// number of keyword segments (512) and of vector segments (1024), several in one file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_room_comes_back_whatever_its_size() {
    let dir = tempfile::tempdir().unwrap();
    let me = Principal::new("ana").unwrap();
    let store = open(dir.path(), true);
    let macp = service(store.clone());
    let mut rooms = Vec::new();
    for n in [0, 512, 1024, 7] {
        rooms.push(room_of(&macp, &me, n).await.0);
    }
    let mut before = Vec::new();
    for r in &rooms {
        before.push(answers(&macp, &me, *r).await);
    }
    assert_eq!(store.keep_indexes().await.unwrap().0, 4);
    drop(macp);
    drop(store);
    let store = open(dir.path(), true);
    assert_eq!(store.resumed_indexes().rooms, 4, "{:?}", store.resumed_indexes());
    assert_eq!(store.resumed_indexes().ignored, None);
    let macp = service(store);
    for (r, b) in rooms.iter().zip(&before) {
        assert_eq!(&answers(&macp, &me, *r).await, b);
    }
}

/// A `macp` of an older build knows nothing of the token: what it writes to a room (here, an
/// erasure's event and a post's number) makes that room load from the database, while the
/// rooms it did not touch come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_room_changed_behind_the_snapshot_loads_from_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let me = Principal::new("ana").unwrap();
    let store = open(dir.path(), true);
    let macp = service(store.clone());
    let (changed, _) = room_of(&macp, &me, 30).await;
    let (kept, _) = room_of(&macp, &me, 30).await;
    store.keep_indexes().await.unwrap();
    drop(macp);
    drop(store);
    for column in ["last_event", "last_seq"] {
        let db = rusqlite::Connection::open(dir.path().join("macp.db")).unwrap();
        // The token stays: an older build would not have taken it out.
        let sql = format!("UPDATE rooms SET {column} = {column} + 1 WHERE room_id = ?1");
        db.execute(&sql, [changed.to_string()]).unwrap();
        drop(db);
        let store = open(dir.path(), true);
        assert_eq!(store.resumed_indexes().rooms, 1, "{column}: {:?}", store.resumed_indexes());
        let why = store.resumed_indexes().ignored.clone().unwrap();
        assert!(why.contains(&changed.to_string()) && !why.contains(&kept.to_string()), "{why}");
        let macp = service(store.clone());
        answers(&macp, &me, kept).await;
        answers(&macp, &me, changed).await;
        store.keep_indexes().await.unwrap();
    }
}
