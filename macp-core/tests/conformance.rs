//! The conformance suite against the in-memory reference backend.

async fn memory() -> Option<macp_testkit::Backend> {
    Some(macp_testkit::Backend::new(std::sync::Arc::new(macp_core::memory::MemoryStore::new())))
}

macp_testkit::conformance_tests!(memory);
