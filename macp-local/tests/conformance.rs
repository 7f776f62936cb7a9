//! The conformance suite against SQLite on disk, with artifact files in the same data directory:
//! a fresh directory per case.

use std::sync::Arc;

use async_trait::async_trait;
use macp_core::Store;
use macp_core::blob::{PresignedRequest, UrlRefusal};
use macp_local::blobs::LocalBlobStore;
use macp_local::{Durability, SqliteStore};
use macp_testkit::Transfer;

mod common;

/// Uses the local store's signed URLs the way `macp serve`'s `/artifacts/…` handlers do (they
/// call the same `handle_put` / `authorize_download`); the HTTP path itself is covered end to end.
struct LocalTransfer(LocalBlobStore);

#[async_trait]
impl Transfer for LocalTransfer {
    async fn put(&self, upload: &PresignedRequest, content_type: &str, body: Vec<u8>) -> u16 {
        let Some((key, query)) = self.0.parse_url(&upload.url) else { return 404 };
        match self.0.handle_put(&key, &query, content_type, Some(body.len() as u64), body.as_slice()).await {
            Ok(_) => 200,
            Err(UrlRefusal::Exists) => 409,
            Err(_) => 403,
        }
    }

    async fn get(&self, url: &str) -> (u16, Vec<u8>) {
        let Some((key, query)) = self.0.parse_url(url) else { return (404, Vec::new()) };
        match self.0.authorize_download(&key, &query).await {
            Ok(Some((path, _))) => (200, std::fs::read(path).unwrap()),
            Ok(None) => (404, Vec::new()),
            Err(_) => (403, Vec::new()),
        }
    }
}

/// Reads every file of the data directory, database and WAL bytes included, and every path.
struct DataDir(std::path::PathBuf);

#[async_trait]
impl macp_testkit::Leftovers for DataDir {
    async fn find(&self, needle: &str) -> Vec<String> {
        common::holding(&self.0, needle)
    }
}

async fn sqlite() -> Option<macp_testkit::Backend> {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().to_owned();
    // `Normal` keeps the suite fast; the default `Full` is exercised by tests/durability.rs.
    let open = move || {
        Arc::new(
            SqliteStore::builder()
                .data_dir(&path)
                .durability(Durability::Normal)
                .open()
                .expect("open sqlite"),
        )
    };
    let store = open();
    let blobs = LocalBlobStore::open(dir.path(), "http://127.0.0.1:9").expect("open artifact storage");
    Some(
        macp_testkit::Backend::new(store.clone())
            .with_vector_index(store)
            .with_blobs(Arc::new(blobs.clone()), Arc::new(LocalTransfer(blobs)))
            .with_reopen(move || -> Arc<dyn Store> { open() })
            .with_leftovers(Arc::new(DataDir(dir.path().to_owned())))
            .with_guard(dir),
    )
}

macp_testkit::conformance_tests!(sqlite, features = [durable, keywords, vectors, blobs, bounded_urls]);
