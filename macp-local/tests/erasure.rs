//! Erasure on the embedded store reaches the bytes: once `erase` returns, the erased text is in
//! no file of the data directory (database, WAL, shared memory, artifact files), and the
//! search indexes (keyword and vector) no longer hold it, after a restart too.

use std::path::Path;
use std::sync::Arc;

use macp_core::blob::BlobStore;
use macp_core::model::{Evidence, EvidenceKind};
use macp_core::search::builtin::BuiltinEmbedder;
use macp_core::service::{CreateRoom, Erase, JoinRoom, PostFinding, RegisterArtifact, SearchFindings};
use macp_core::{AgentId, Macp, Principal, Timestamp};
use macp_local::SqliteStore;
use macp_local::blobs::LocalBlobStore;

mod common;

const MARK: &str = "zebracanary7781";

/// The files under `dir` holding `MARK` (see [`common::holding`]).
fn holding_mark(dir: &Path) -> Vec<String> {
    common::holding(dir, MARK)
}

fn service(store: Arc<SqliteStore>, blobs: LocalBlobStore) -> Macp {
    Macp::builder()
        .store(store.clone())
        .embedder(Arc::new(BuiltinEmbedder::load().unwrap()))
        .vector_index(store)
        .blob_store(Arc::new(blobs))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erased_text_is_in_no_file_of_the_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path()).unwrap());
    let blobs = LocalBlobStore::open(dir.path(), "http://127.0.0.1:1").unwrap();
    let macp = service(store.clone(), blobs.clone());
    let me = Principal::new("ana").unwrap();
    let room = macp.create_room(&me, CreateRoom::new("erasure on disk")).await.unwrap().room_id;
    let agent =
        macp.join_room(&me, JoinRoom::new(room).agent(AgentId::new("ana").unwrap())).await.unwrap().agent_id;
    let mark = MARK;

    // A short finding (in a page with others), a long one (overflow pages), evidence, and an
    // artifact whose bytes and description carry the mark; findings around them stay.
    for i in 0..20 {
        macp.post_finding(&me, PostFinding::new(room, agent.clone(), format!("before {i}"))).await.unwrap();
    }
    let short = macp
        .post_finding(
            &me,
            PostFinding::new(room, agent.clone(), format!("customer {mark} sees 502")).evidence(vec![
                Evidence {
                    kind: EvidenceKind::Log,
                    reference: format!("s3://logs/{mark}"),
                    description: None,
                    captured_at: None,
                },
            ]),
        )
        .await
        .unwrap()
        .finding;
    let long = macp
        .post_finding(&me, PostFinding::new(room, agent.clone(), format!("{mark} session dump ").repeat(400)))
        .await
        .unwrap()
        .finding;
    for i in 0..20 {
        macp.post_finding(&me, PostFinding::new(room, agent.clone(), format!("after {i}"))).await.unwrap();
    }
    let key = format!("rooms/{room}/artifacts/01J0000000000000000000000/dump.txt");
    let body = format!("{mark}\n").repeat(100);
    let url = blobs
        .presign_put(&key, "text/plain", body.len() as u64, Timestamp::now().plus_millis(60_000))
        .await
        .unwrap()
        .url;
    let (k, q) = blobs.parse_url(&url).unwrap();
    blobs.handle_put(&k, &q, "text/plain", Some(body.len() as u64), body.as_bytes()).await.unwrap();
    let artifact = macp
        .register_artifact(
            &me,
            RegisterArtifact {
                room_id: room,
                agent_id: Some(agent.clone()),
                key: key.clone(),
                description: Some(format!("dump of {mark}")),
                linked_finding_ids: vec![],
                linked_entity_ids: vec![],
                idempotency_key: None,
            },
        )
        .await
        .unwrap()
        .artifact;
    // The test can fail: the mark is on disk now.
    assert!(!holding_mark(dir.path()).is_empty(), "the mark should be on disk before the erasure");

    // Load both search indexes while they hold the mark, so the erasure must take it out of them.
    let before =
        macp.search_findings(&me, SearchFindings::new(room, format!("customer {mark}"))).await.unwrap();
    assert!(before.results.iter().any(|h| h.finding.finding_id == short.finding_id));

    for f in [short.finding_id, long.finding_id] {
        macp.erase(&me, Erase::finding(room, agent.clone(), f, "customer data")).await.unwrap();
    }
    macp.erase(&me, Erase::artifact(room, agent.clone(), artifact.artifact_id, "customer data"))
        .await
        .unwrap();

    assert_eq!(holding_mark(dir.path()), Vec::<String>::new(), "erased bytes are still on disk");
    assert!(blobs.head(&key).await.unwrap().is_none());
    // Searched while the indexes are loaded: neither comes back.
    let found = macp
        .search_findings(&me, SearchFindings::new(room, format!("customer {mark} session dump")))
        .await
        .unwrap();
    let erased = [short.finding_id, long.finding_id];
    assert!(!found.results.iter().any(|h| erased.contains(&h.finding.finding_id)), "{:?}", found.results);
    {
        use macp_core::store::FindingStore;
        assert!(store.keyword_search(room, mark, 10).await.unwrap().unwrap().hits.is_empty());
    }

    // Kept at a clean stop (the indexes were loaded before the erasure, and it took the
    // finding out of them), the kept file holds nothing of it either.
    store.keep_indexes().await.unwrap();
    assert!(dir.path().join("indexes.snapshot").exists());
    assert_eq!(holding_mark(dir.path()), Vec::<String>::new(), "the kept indexes hold erased text");

    // After a restart: the indexes read back hold nothing of it, the rest is intact.
    drop(macp);
    drop(store);
    let store = Arc::new(SqliteStore::builder().data_dir(dir.path()).resume_indexes(true).open().unwrap());
    assert_eq!(store.resumed_indexes().rooms, 1, "{:?}", store.resumed_indexes());
    let macp = service(store.clone(), LocalBlobStore::open(dir.path(), "http://127.0.0.1:1").unwrap());
    use macp_core::store::FindingStore;
    let hits = store.keyword_search(room, mark, 10).await.unwrap().unwrap();
    assert!(hits.hits.is_empty(), "the reloaded keyword index finds the erased text");
    let kept = macp.search_findings(&me, SearchFindings::new(room, "after 7")).await.unwrap();
    assert!(kept.results.iter().any(|h| h.finding.content == "after 7"));
    assert_eq!(holding_mark(dir.path()), Vec::<String>::new());
}
