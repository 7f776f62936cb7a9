//! The conformance suite against the in-memory reference backend.

use std::sync::Arc;

async fn memory() -> Option<macp_testkit::Backend> {
    let blobs = Arc::new(macp_core::blob::MemoryBlobStore::new());
    Some(
        macp_testkit::Backend::new(Arc::new(macp_core::memory::MemoryStore::new()))
            .with_vector_index(Arc::new(macp_core::search::memory_index::MemoryVectorIndex::new()))
            .with_blobs(blobs.clone(), Arc::new(macp_testkit::MemoryTransfer(blobs))),
    )
}

macp_testkit::conformance_tests!(memory, features = [keywords, vectors, blobs, bounded_urls]);
