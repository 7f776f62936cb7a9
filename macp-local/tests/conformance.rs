//! The conformance suite against SQLite on disk: a fresh database directory per case.

use std::sync::Arc;

use macp_core::Store;
use macp_local::{Durability, SqliteStore};

async fn sqlite() -> Option<macp_testkit::Backend> {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().to_owned();
    // `Normal` keeps the suite fast; the default `Full` is exercised by tests/durability.rs.
    let open = move || -> Arc<dyn Store> {
        Arc::new(
            SqliteStore::builder()
                .data_dir(&path)
                .durability(Durability::Normal)
                .open()
                .expect("open sqlite"),
        )
    };
    Some(macp_testkit::Backend::new(open()).with_reopen(open).with_guard(dir))
}

macp_testkit::conformance_tests!(sqlite);
