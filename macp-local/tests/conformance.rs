//! The conformance suite against SQLite on disk, with artifact files in the same data directory:
//! a fresh directory per case.

use std::sync::Arc;

use async_trait::async_trait;
use macp_local::Durability;

mod common;

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
    // `Normal` keeps the suite fast; the default `Full` is exercised by tests/durability.rs.
    let backend = macp_local::testkit::backend(dir.path(), Durability::Normal);
    Some(backend.with_leftovers(Arc::new(DataDir(dir.path().to_owned()))).with_guard(dir))
}

macp_testkit::conformance_tests!(sqlite, features = [durable, keywords, vectors, blobs, bounded_urls]);

/// A room moved from SQLite to the in-memory reference store and back to another data
/// directory is the same room at every step, byte for byte (AWS: macp-aws's suite).
#[tokio::test]
async fn a_room_moves_from_sqlite_to_memory_and_back_intact() {
    let (first, last) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let from = macp_local::testkit::backend(first.path(), Durability::Normal);
    let back = macp_local::testkit::backend(last.path(), Durability::Normal);
    let blobs = Arc::new(macp_core::blob::MemoryBlobStore::new());
    let memory = macp_testkit::Backend::new(Arc::new(macp_core::memory::MemoryStore::new()))
        .with_vector_index(Arc::new(macp_core::search::memory_index::MemoryVectorIndex::new()))
        .with_blobs(blobs.clone(), Arc::new(macp_testkit::MemoryTransfer(blobs)));
    macp_testkit::cases::a_room_moves_between_backends_intact(from, memory, back).await;
}
