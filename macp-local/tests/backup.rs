//! Backing up a data directory while it serves: the copy is one consistent snapshot holding
//! every acknowledged write, artifacts included, and a backup never overwrites anything.

use std::sync::Arc;

use macp_core::blob::BlobStore;
use macp_core::service::{CreateRoom, JoinRoom, PostFinding, TimelineQuery};
use macp_core::{AgentId, Macp, Principal, Timestamp};
use macp_local::SqliteStore;
use macp_local::blobs::LocalBlobStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_taken_under_writes_holds_every_acknowledged_write_and_no_gap() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path()).unwrap());
    let blobs = LocalBlobStore::open(dir.path(), "http://127.0.0.1:1").unwrap();
    let macp = Macp::builder().store(store.clone()).blob_store(Arc::new(blobs.clone())).build().unwrap();
    let me = Principal::new("ana").unwrap();
    let room = macp.create_room(&me, CreateRoom::new("backup under load")).await.unwrap().room_id;
    let agent =
        macp.join_room(&me, JoinRoom::new(room).agent(AgentId::new("ana").unwrap())).await.unwrap().agent_id;
    // An artifact file on disk, as an upload leaves it.
    let key = format!("rooms/{room}/artifacts/01J0000000000000000000000/dump.txt");
    let url =
        blobs.presign_put(&key, "text/plain", 5, Timestamp::now().plus_millis(60_000)).await.unwrap().url;
    let (k, q) = blobs.parse_url(&url).unwrap();
    blobs.handle_put(&k, &q, "text/plain", Some(5), &b"hello"[..]).await.unwrap();

    // Writers keep posting while the backup runs.
    let writer = {
        let (macp, me, agent) = (macp.clone(), me.clone(), agent.clone());
        tokio::spawn(async move {
            for i in 0..400 {
                macp.post_finding(&me, PostFinding::new(room, agent.clone(), format!("finding {i}")))
                    .await
                    .unwrap();
            }
        })
    };
    while macp.room_context(&me, room).await.unwrap().findings.total < 50 {
        tokio::task::yield_now().await;
    }
    let acked = macp.room_context(&me, room).await.unwrap().findings.total;
    let dest = dir.path().join("backup-1");
    let report = macp_local::backup(&store, &dest).await.unwrap();
    writer.await.unwrap();
    assert_eq!((report.artifacts, report.artifact_bytes), (1, 5));
    assert!(report.database_bytes > 0);

    let copy = Macp::builder().store(Arc::new(SqliteStore::open(&dest).unwrap())).build().unwrap();
    let (mut seqs, mut cursor) = (Vec::new(), None);
    loop {
        let q = TimelineQuery { limit: Some(200), cursor: cursor.take(), ..TimelineQuery::new(room) };
        let page = copy.timeline(&me, q).await.unwrap();
        seqs.extend(page.findings.iter().map(|f| f.seq));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert!(
        seqs.len() as u64 >= acked,
        "the copy has {} findings, {acked} were acknowledged before it",
        seqs.len()
    );
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "one snapshot: a gap-free prefix");
    // The artifact and the signing key came along: URLs signed by the original verify on the copy.
    let restored = LocalBlobStore::open(&dest, "http://127.0.0.1:1").unwrap();
    assert_eq!(restored.head(&key).await.unwrap().map(|m| m.size), Some(5));
    let get = blobs.presign_get(&key, Timestamp::now().plus_millis(60_000)).await.unwrap();
    let (k, q) = restored.parse_url(&get.url).unwrap();
    let (path, meta) =
        restored.authorize_download(&k, &q).await.expect("same signing key").expect("the file");
    assert_eq!(
        (std::fs::read(path).unwrap(), meta.content_type),
        (b"hello".to_vec(), "text/plain".to_owned())
    );
}

#[tokio::test]
async fn a_backup_never_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let dest = dir.path().join("b");
    std::fs::create_dir_all(&dest).unwrap();
    std::fs::write(dest.join("keep.txt"), b"mine").unwrap();
    let e = macp_local::backup(&store, &dest).await.unwrap_err();
    assert_eq!(e.code(), "invalid_input");
    assert!(e.to_string().contains("not empty"), "{e}");
    assert_eq!(std::fs::read(dest.join("keep.txt")).unwrap(), b"mine");
    let e = store.backup_database(&dest.join("keep.txt")).await.unwrap_err();
    assert_eq!(e.code(), "invalid_input");
}

/// A data directory or backup the store creates is its owner's only: it holds the whole record,
/// the artifacts and the URL signing key.
#[cfg(unix)]
#[tokio::test]
async fn directories_it_creates_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("nested").join("data");
    let store = SqliteStore::open(&data).unwrap();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&data), 0o700);
    let dest = root.path().join("backup-1");
    macp_local::backup(&store, &dest).await.unwrap();
    assert_eq!(mode(&dest), 0o700);
}
