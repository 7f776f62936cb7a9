//! # macp-local
//!
//! MACP's embedded default backend: one SQLite database file in a data directory.
//!
//! - WAL mode, `synchronous = FULL` by default: an acknowledged write is in the WAL on disk and
//!   survives the process being killed (and, with `FULL`, power loss).
//! - The schema is created and migrated by version on open ([`SqliteStore::open`]); a database
//!   written by a newer build is refused rather than misread.
//! - Every write that the store contract makes atomic is one `BEGIN IMMEDIATE` transaction on
//!   the single writer connection, which is what gives findings their gap-free commit sequence.
//!   Reads use a small pool of reader connections and see committed snapshots.
//! - Blocking SQLite calls run on tokio's blocking pool, never on the async runtime's workers.
//! - A full-text index (FTS5) is written in the same transaction as each finding. Search ranks
//!   keywords with an in-memory BM25 index per room (the same formula, checked against FTS5's
//!   `bm25()`), and vectors with an in-memory scan: both are loaded from the
//!   database on first use and kept current by every write.
//!
//! Artifact files live beside the database, behind signed URLs: see [`blobs::LocalBlobStore`].
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use macp_core::service::{CreateRoom, JoinRoom, PostFinding};
//! use macp_core::{AgentId, Macp, Principal};
//! use macp_local::SqliteStore;
//!
//! let dir = tempfile::tempdir()?; // a server uses e.g. ~/.local/share/macp
//! let store = Arc::new(SqliteStore::builder().data_dir(dir.path()).open()?);
//! let macp = Macp::builder().store(store).build()?;
//! let me = Principal::new("ana")?;
//! let room = macp.create_room(&me, CreateRoom::new("Why does checkout return 502s?")).await?.room_id;
//! let agent = macp.join_room(&me, JoinRoom::new(room).agent(AgentId::new("ana-claude")?)).await?.agent_id;
//! macp.post_finding(&me, PostFinding::new(room, agent, "502s began at 09:41 UTC").tags(["triage"])).await?;
//!
//! // Reopened from disk, the record is there.
//! let again = Macp::builder().store(Arc::new(SqliteStore::builder().data_dir(dir.path()).open()?)).build()?;
//! assert_eq!(again.room_context(&me, room).await?.findings.total, 1);
//! # Ok(()) }
//! ```

pub mod blobs;
mod data_dir;
mod db;
mod indexes;
mod schema;
mod snapshot;
mod store;
mod writer;

pub use data_dir::{BackupReport, DataDirLock, backup, lock_data_dir};
pub use db::{DB_FILE, Durability, SqliteStore, SqliteStoreBuilder, default_data_dir};
pub use snapshot::IndexesResumed;
#[cfg(feature = "testkit")]
pub mod testkit;
