//! This backend as the conformance suite takes it (feature `testkit`): a
//! [`macp_testkit::Backend`] over a data directory, for this crate's suite and for tests that
//! move rooms between backends.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use macp_core::Store;
use macp_core::blob::{PresignedRequest, UrlRefusal};
use macp_testkit::{Backend, Transfer};

use crate::blobs::LocalBlobStore;
use crate::{Durability, SqliteStore};

/// Uses the local store's signed URLs the way `macp serve`'s `/artifacts/…` handlers do (they
/// call the same `handle_put` / `authorize_download`); the HTTP path itself is covered end to
/// end by macp-mcp's tests.
pub struct LocalTransfer(pub LocalBlobStore);

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
            Ok(Some((path, _))) => match tokio::fs::read(path).await {
                Ok(bytes) => (200, bytes),
                Err(_) => (500, Vec::new()),
            },
            Ok(None) => (404, Vec::new()),
            Err(_) => (403, Vec::new()),
        }
    }
}

/// SQLite in `dir` with `durability`, its vectors, and artifact files in the same directory;
/// reopening opens the same directory again. The caller keeps `dir` alive (see
/// [`Backend::with_guard`]).
pub fn backend(dir: &Path, durability: Durability) -> Backend {
    let path = dir.to_owned();
    let open = move || {
        Arc::new(SqliteStore::builder().data_dir(&path).durability(durability).open().expect("open sqlite"))
    };
    let store = open();
    let blobs = LocalBlobStore::open(dir, "http://127.0.0.1:9").expect("open artifact storage");
    Backend::new(store.clone())
        .with_vector_index(store)
        .with_blobs(Arc::new(blobs.clone()), Arc::new(LocalTransfer(blobs)))
        .with_reopen(move || -> Arc<dyn Store> { open() })
}
