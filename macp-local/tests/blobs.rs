//! Local artifact storage: the signing key is private, an interrupted upload leaves nothing,
//! and the first complete upload of a key wins.

use macp_core::Timestamp;
use macp_core::blob::{BlobStore, UrlRefusal};
use macp_local::blobs::LocalBlobStore;

#[tokio::test]
async fn the_signing_key_is_created_once_and_private() {
    let dir = tempfile::tempdir().unwrap();
    let a = LocalBlobStore::open(dir.path(), "http://127.0.0.1:1").unwrap();
    let key = std::fs::read(dir.path().join("artifact-signing.key")).unwrap();
    assert_eq!(key.len(), 32);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("artifact-signing.key")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    // Reopening keeps the key: URLs issued before a restart still verify after it.
    let exp = Timestamp::now().plus_millis(60_000);
    let url = a.presign_put("rooms/r/artifacts/1/x.log", "text/plain", 3, exp).await.unwrap().url;
    let b = LocalBlobStore::open(dir.path(), "http://127.0.0.1:1").unwrap();
    let (key, query) = b.parse_url(&url).unwrap();
    assert!(b.handle_put(&key, &query, "text/plain", Some(3), &b"abc"[..]).await.is_ok());
}

#[tokio::test]
async fn an_interrupted_upload_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let s = LocalBlobStore::open(dir.path(), "http://127.0.0.1:1").unwrap();
    let key = "rooms/r/artifacts/2/big.log";
    let url = s.presign_put(key, "text/plain", 1000, Timestamp::now().plus_millis(60_000)).await.unwrap().url;
    let (k, q) = s.parse_url(&url).unwrap();
    let mut up = s.begin_upload(&k, &q, "text/plain", Some(1000)).await.unwrap();
    up.write(&[b'x'; 400]).await.unwrap();
    drop(up); // the connection died mid-body
    assert!(s.head(key).await.unwrap().is_none());
    let incoming: Vec<_> = std::fs::read_dir(dir.path().join("artifacts/.incoming")).unwrap().collect();
    assert!(incoming.is_empty(), "no partial file is left: {incoming:?}");
    // A short body is refused at the end, also leaving nothing.
    assert_eq!(
        s.handle_put(&k, &q, "text/plain", Some(1000), &[b'y'; 999][..]).await,
        Err(UrlRefusal::WrongLength)
    );
    assert!(s.head(key).await.unwrap().is_none());
    // The complete upload then succeeds, once.
    assert!(s.handle_put(&k, &q, "text/plain", Some(1000), &[b'z'; 1000][..]).await.is_ok());
    assert_eq!(s.head(key).await.unwrap().map(|m| m.size), Some(1000));
    assert_eq!(
        s.handle_put(&k, &q, "text/plain", Some(1000), &[b'w'; 1000][..]).await,
        Err(UrlRefusal::Exists)
    );
}

#[tokio::test]
async fn paths_that_escape_the_artifact_directory_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let s = LocalBlobStore::open(dir.path(), "http://127.0.0.1:1").unwrap();
    for key in ["../escape", "rooms/../../etc/passwd", "rooms/r/./x", "/etc/passwd", "rooms/r/a\\b"] {
        assert_eq!(
            s.begin_upload(key, "exp=99999999999&sig=x", "text/plain", Some(1)).await.map(|_| ()),
            Err(UrlRefusal::BadSignature),
            "{key}"
        );
        assert!(s.head(key).await.unwrap().is_none());
    }
}
