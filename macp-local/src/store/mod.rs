//! The store traits of `macp_core::store`, one file per domain, on [`SqliteStore`].

mod agents;
mod artifacts;
mod claims;
mod decisions;
mod entities;
mod events;
mod findings;
mod rooms;
pub(crate) mod search;
mod sessions;

use macp_core::store::{Capabilities, Store};

use crate::db::SqliteStore;

pub(crate) use events::append_event;
pub(crate) use findings::RoomKeywords;
pub(crate) use search::{RoomVectors, read_model};

impl Store for SqliteStore {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    fn capabilities(&self) -> Capabilities {
        // One writer connection orders commits within this process; another process opening
        // the same file would serialise through SQLite's locks too, but the reader pool and
        // blocking-task model are tuned for one serving process, so we do not declare it.
        Capabilities::none().with_durable(true)
    }
}
