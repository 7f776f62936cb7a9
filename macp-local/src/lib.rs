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
mod schema;
mod vectors;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use macp_core::model::{
    AgentSession, AgentStatus, Artifact, Entity, EntityType, Finding, Identifier, IndexStatus, Relationship,
    Room, RoomStatus, VisibilityMode,
};
use macp_core::search::keyword::KeywordIndex;
use macp_core::store::{
    AgentStore, AgentUpdate, ArtifactQuery, ArtifactStore, AttachEntity, Capabilities, CreateEntity,
    EntityStats, EntityStore, FindingQuery, FindingStats, FindingStore, IdempotencyClaim, IdempotencyRecord,
    Insert, KeywordSearch, RelationshipKey, RoomKey, RoomStore, Store, Write, WriteOperation,
};
use macp_core::{AgentId, ArtifactId, EntityId, Error, FindingId, Result, RoomId, Timestamp, UserId};
use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OptionalExtension, Row, TransactionBehavior, params};
use serde_json::{Map, Value};

/// The database file inside the data directory.
pub const DB_FILE: &str = "macp.db";

/// How hard SQLite pushes commits to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Durability {
    /// `synchronous = FULL`: the WAL is fsynced at every commit. Survives process kill and
    /// power loss. The default.
    #[default]
    Full,
    /// `synchronous = NORMAL`: survives process kill (the WAL is in the OS page cache), may
    /// lose the last commits on power loss. Faster; fine for tests and scratch rooms.
    Normal,
}

/// Builds a [`SqliteStore`].
#[derive(Debug, Clone)]
pub struct SqliteStoreBuilder {
    data_dir: Option<PathBuf>,
    durability: Durability,
    readers: usize,
    busy_timeout: Duration,
}

impl Default for SqliteStoreBuilder {
    fn default() -> Self {
        Self {
            data_dir: None,
            durability: Durability::Full,
            readers: 4,
            busy_timeout: Duration::from_secs(5),
        }
    }
}

impl SqliteStoreBuilder {
    /// Defaults: durability `Full`, 4 readers, 5 s busy timeout, no data directory.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads `MACP_DATA_DIR` (else the platform data directory, see [`default_data_dir`]).
    pub fn from_env() -> Self {
        let dir = std::env::var_os("MACP_DATA_DIR").map(PathBuf::from).unwrap_or_else(default_data_dir);
        Self::new().data_dir(dir)
    }

    /// The directory holding `macp.db` (created if missing).
    pub fn data_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.data_dir = Some(dir.into());
        self
    }

    /// Commit durability (default [`Durability::Full`]).
    pub fn durability(mut self, d: Durability) -> Self {
        self.durability = d;
        self
    }

    /// Reader connections kept open (default 4, at least 1).
    pub fn readers(mut self, n: usize) -> Self {
        self.readers = n.max(1);
        self
    }

    /// How long a statement waits on a lock held by another process before failing with a
    /// retryable error (default 5 s).
    pub fn busy_timeout(mut self, t: Duration) -> Self {
        self.busy_timeout = t;
        self
    }

    /// Opens (creating and migrating as needed) the database.
    pub fn open(self) -> Result<SqliteStore> {
        let dir = self.data_dir.clone().ok_or_else(|| {
            Error::invalid(
                "data_dir",
                "SqliteStore needs a data directory: call .data_dir(path) or set MACP_DATA_DIR",
            )
        })?;
        create_private_dir(&dir).map_err(|e| {
            Error::backend(
                "sqlite",
                false,
                format!("cannot create data directory {}: {e}", dir.display()),
                Some(Box::new(e)),
            )
        })?;
        let path = dir.join(DB_FILE);
        let mut writer = self.connect(&path)?;
        schema::migrate(&mut writer).map_err(|e| match e {
            schema::MigrateError::Sqlite(e) => sql_err(e),
            schema::MigrateError::TooNew { found, supported } => Error::backend(
                "sqlite",
                false,
                format!(
                    "{} has schema version {found}, newer than this build supports ({supported}); upgrade macp",
                    path.display()
                ),
                None,
            ),
        })?;
        let readers = (0..self.readers).map(|_| self.connect(&path)).collect::<Result<Vec<_>>>()?;
        Ok(SqliteStore {
            inner: Arc::new(Shared {
                writer: Mutex::new(writer),
                vectors: Mutex::new(vectors::VectorCache::default()),
                keywords: Mutex::new(KeywordCache::default()),
                readers: Mutex::new(readers),
                path,
                builder: self,
            }),
        })
    }

    fn connect(&self, path: &Path) -> Result<Connection> {
        let conn = Connection::open(path).map_err(sql_err)?;
        conn.busy_timeout(self.busy_timeout).map_err(sql_err)?;
        conn.pragma_update(None, "journal_mode", "WAL").map_err(sql_err)?;
        let sync = match self.durability {
            Durability::Full => "FULL",
            Durability::Normal => "NORMAL",
        };
        conn.pragma_update(None, "synchronous", sync).map_err(sql_err)?;
        conn.pragma_update(None, "foreign_keys", "ON").map_err(sql_err)?;
        Ok(conn)
    }
}

/// The platform's per-user data directory for MACP: `$XDG_DATA_HOME/macp`, else
/// `$HOME/.local/share/macp`, else `./macp-data`.
pub fn default_data_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("macp");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(h).join(".local/share/macp");
    }
    PathBuf::from("macp-data")
}

/// A [`Store`] on one SQLite database file. Cheap to clone.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Shared>,
}

struct Shared {
    writer: Mutex<Connection>,
    vectors: Mutex<vectors::VectorCache>,
    keywords: Mutex<KeywordCache>,
    readers: Mutex<Vec<Connection>>,
    path: PathBuf,
    builder: SqliteStoreBuilder,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").field("path", &self.inner.path).finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Transactions roll back when dropped during a panic, so the connection is consistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl SqliteStore {
    /// Starts a builder.
    pub fn builder() -> SqliteStoreBuilder {
        SqliteStoreBuilder::new()
    }

    /// Opens the store in `data_dir` with default settings.
    pub fn open(data_dir: impl Into<PathBuf>) -> Result<Self> {
        Self::builder().data_dir(data_dir).open()
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Writes a consistent snapshot of the database to `dest` (a new file; an existing one is
    /// refused, never overwritten) while the store keeps serving: SQLite's `VACUUM INTO` reads
    /// one committed snapshot, so the copy holds every write acknowledged before the call and
    /// none half-done. Returns the copy's size in bytes. See [`backup`] for the whole data
    /// directory.
    pub async fn backup_database(&self, dest: &Path) -> Result<u64> {
        if dest.exists() {
            return Err(Error::invalid(
                "dest",
                format!("{} exists; a backup never overwrites, pick a new path", dest.display()),
            ));
        }
        let target = dest
            .to_str()
            .ok_or_else(|| Error::invalid("dest", "the backup path must be valid UTF-8"))?
            .to_owned();
        self.read(move |c| c.execute("VACUUM INTO ?1", [&target]).map(|_| ()).map_err(sql_err)).await?;
        std::fs::metadata(dest)
            .map(|m| m.len())
            .map_err(|e| Error::backend("sqlite", false, format!("backup written but unreadable: {e}"), None))
    }

    /// Runs `f` with the writer connection on the blocking pool.
    async fn write<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || f(&mut lock(&inner.writer)))
            .await
            .map_err(|e| Error::backend("sqlite", true, format!("blocking task failed: {e}"), None))?
    }

    /// Runs `f` with a reader connection on the blocking pool.
    async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let conn = lock(&inner.readers).pop();
            let conn = match conn {
                Some(c) => c,
                None => inner.builder.connect(&inner.path)?,
            };
            let out = f(&conn);
            let mut pool = lock(&inner.readers);
            if pool.len() < inner.builder.readers {
                pool.push(conn);
            }
            out
        })
        .await
        .map_err(|e| Error::backend("sqlite", true, format!("blocking task failed: {e}"), None))?
    }
}

/// An exclusive claim on a data directory, held while it lives (an advisory lock on
/// `<dir>/macp.lock`, released when dropped or when the process exits, however it exits).
///
/// Why: a [`SqliteStore`] keeps each room's keyword and vector indexes in memory and updates
/// them only on its own writes, so two processes writing one directory would each miss the
/// other's indexing (`macp reconcile` or `macp reindex` next to a running `macp serve`).
/// Processes that index take this lock; readers (`macp rooms`, `macp timeline`, `macp backup`)
/// need not.
#[derive(Debug)]
pub struct DataDirLock {
    _file: std::fs::File,
}

/// Claims `dir` for this process; refuses with `conflict` if another process holds it.
pub fn lock_data_dir(dir: &Path) -> Result<DataDirLock> {
    create_private_dir(dir).map_err(|e| {
        Error::backend("sqlite", false, format!("cannot create {}: {e}", dir.display()), None)
    })?;
    let path = dir.join("macp.lock");
    let file =
        std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path).map_err(|e| {
            Error::backend("sqlite", false, format!("cannot open {}: {e}", path.display()), None)
        })?;
    match file.try_lock() {
        Ok(()) => Ok(DataDirLock { _file: file }),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::conflict(format!(
            "another macp process (a running `macp serve`?) is using {}; stop it first — a running \
             server already reconciles pending findings itself",
            dir.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(Error::backend("sqlite", false, format!("cannot lock {}: {e}", path.display()), None))
        }
    }
}

/// Creates `dir` (and missing parents). A directory this creates is readable by its owner only
/// (0700 on Unix): it holds the whole record, artifacts and the URL signing key. An existing
/// directory keeps its permissions.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    let mut b = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    match b.create(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        r => r,
    }
}

/// What [`backup`] copied.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackupReport {
    /// Bytes of the database snapshot.
    pub database_bytes: u64,
    /// Artifact files copied (with their metadata).
    pub artifacts: u64,
    /// Bytes of artifact files copied.
    pub artifact_bytes: u64,
}

/// Backs up a data directory while `store` (opened on it) keeps serving: the database as one
/// consistent snapshot ([`SqliteStore::backup_database`]), then the artifact files, their
/// metadata and the URL signing key ([`blobs::copy_files`]). `dest` must not exist or be empty.
/// Artifact files never change once stored, so copying them after the snapshot captures every
/// artifact the snapshot knows. Restore by stopping the server and pointing `--data-dir` at
/// the copy (or moving it into place).
pub async fn backup(store: &SqliteStore, dest: &Path) -> Result<BackupReport> {
    let data_dir = store.path().parent().map(Path::to_path_buf).unwrap_or_default();
    if dest.read_dir().is_ok_and(|mut d| d.next().is_some()) {
        return Err(Error::invalid(
            "dest",
            format!("{} is not empty; a backup never overwrites, pick a new directory", dest.display()),
        ));
    }
    create_private_dir(dest).map_err(|e| {
        Error::backend("sqlite", false, format!("cannot create {}: {e}", dest.display()), None)
    })?;
    let database_bytes = store.backup_database(&dest.join(DB_FILE)).await?;
    let (artifacts, artifact_bytes) = blobs::copy_files(&data_dir, dest)?;
    Ok(BackupReport { database_bytes, artifacts, artifact_bytes })
}

/// Maps a SQLite error: busy and locked are retryable, the rest are not.
fn sql_err(e: rusqlite::Error) -> Error {
    use rusqlite::ErrorCode;
    let retryable =
        matches!(e.sqlite_error_code(), Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked));
    Error::backend("sqlite", retryable, e.to_string(), Some(Box::new(e)))
}

fn is_unique_violation(e: &rusqlite::Error) -> bool {
    matches!(e.sqlite_error_code(), Some(rusqlite::ErrorCode::ConstraintViolation))
}

fn corrupt(what: &str, detail: impl std::fmt::Display) -> Error {
    Error::backend("sqlite", false, format!("stored {what} is unreadable: {detail}"), None)
}

fn to_json<T: serde::Serialize>(v: &T) -> String {
    // Serialising plain domain values to JSON cannot fail.
    serde_json::to_string(v).unwrap_or_else(|_| "null".to_owned())
}

fn from_json<T: serde::de::DeserializeOwned>(what: &str, s: &str) -> Result<T> {
    serde_json::from_str(s).map_err(|e| corrupt(what, e))
}

fn parse<T: std::str::FromStr<Err = Error>>(s: &str) -> Result<T> {
    s.parse()
}

// ---------------------------------------------------------------------------------------------
// Row mapping. Each SELECT list below matches one `*_from_row` function.

const ROOM_COLS: &str =
    "room_id, name, objective, visibility_mode, created_at, created_by, tags, status, closed_at, closed_by";

fn room_from_row(r: &Row<'_>) -> Result<Room> {
    let g = |e: rusqlite::Error| sql_err(e);
    Ok(Room {
        room_id: parse(&r.get::<_, String>(0).map_err(g)?)?,
        name: r.get(1).map_err(g)?,
        objective: r.get(2).map_err(g)?,
        visibility_mode: VisibilityMode::parse(&r.get::<_, String>(3).map_err(g)?)?,
        created_at: Timestamp::from_millis(r.get(4).map_err(g)?),
        created_by: UserId::new(r.get::<_, String>(5).map_err(g)?)?,
        tags: from_json("room tags", &r.get::<_, String>(6).map_err(g)?)?,
        status: RoomStatus::parse(&r.get::<_, String>(7).map_err(g)?)?,
        closed_at: r.get::<_, Option<i64>>(8).map_err(g)?.map(Timestamp::from_millis),
        closed_by: r.get::<_, Option<String>>(9).map_err(g)?.map(UserId::new).transpose()?,
    })
}

const AGENT_COLS: &str = "room_id, agent_id, user_id, joined_at, last_active, agent_type, agent_status, status_reason, status_updated_at";

fn agent_from_row(r: &Row<'_>) -> Result<AgentSession> {
    let g = |e: rusqlite::Error| sql_err(e);
    Ok(AgentSession {
        room_id: parse(&r.get::<_, String>(0).map_err(g)?)?,
        agent_id: AgentId::new(r.get::<_, String>(1).map_err(g)?)?,
        user_id: UserId::new(r.get::<_, String>(2).map_err(g)?)?,
        joined_at: Timestamp::from_millis(r.get(3).map_err(g)?),
        last_active: Timestamp::from_millis(r.get(4).map_err(g)?),
        agent_type: r.get(5).map_err(g)?,
        agent_status: AgentStatus::parse(&r.get::<_, String>(6).map_err(g)?)?,
        status_reason: r.get(7).map_err(g)?,
        status_updated_at: Timestamp::from_millis(r.get(8).map_err(g)?),
    })
}

const FINDING_COLS: &str = "room_id, finding_id, seq, content, agent_id, user_id, tags, entity_refs, evidence, index_status, idempotency_key, created_at";

fn finding_from_row(r: &Row<'_>) -> Result<Finding> {
    let g = |e: rusqlite::Error| sql_err(e);
    Ok(Finding {
        room_id: parse(&r.get::<_, String>(0).map_err(g)?)?,
        finding_id: parse(&r.get::<_, String>(1).map_err(g)?)?,
        seq: r.get::<_, i64>(2).map_err(g)? as u64,
        content: r.get(3).map_err(g)?,
        agent_id: AgentId::new(r.get::<_, String>(4).map_err(g)?)?,
        user_id: UserId::new(r.get::<_, String>(5).map_err(g)?)?,
        tags: from_json("finding tags", &r.get::<_, String>(6).map_err(g)?)?,
        entity_refs: from_json("entity_refs", &r.get::<_, String>(7).map_err(g)?)?,
        evidence: from_json("evidence", &r.get::<_, String>(8).map_err(g)?)?,
        index_status: IndexStatus::parse(&r.get::<_, String>(9).map_err(g)?)?,
        idempotency_key: r.get(10).map_err(g)?,
        created_at: Timestamp::from_millis(r.get(11).map_err(g)?),
    })
}

const ENTITY_COLS: &str = "room_id, entity_id, name, entity_type, identifiers, properties, created_by, agent_id, created_at, merged_into";

fn entity_from_row(r: &Row<'_>) -> Result<Entity> {
    let g = |e: rusqlite::Error| sql_err(e);
    Ok(Entity {
        room_id: parse(&r.get::<_, String>(0).map_err(g)?)?,
        entity_id: parse(&r.get::<_, String>(1).map_err(g)?)?,
        name: r.get(2).map_err(g)?,
        entity_type: EntityType::parse(&r.get::<_, String>(3).map_err(g)?)?,
        identifiers: from_json("identifiers", &r.get::<_, String>(4).map_err(g)?)?,
        properties: from_json("properties", &r.get::<_, String>(5).map_err(g)?)?,
        created_by: UserId::new(r.get::<_, String>(6).map_err(g)?)?,
        agent_id: AgentId::new(r.get::<_, String>(7).map_err(g)?)?,
        created_at: Timestamp::from_millis(r.get(8).map_err(g)?),
        merged_into: r.get::<_, Option<String>>(9).map_err(g)?.map(|s| parse(&s)).transpose()?,
    })
}

const REL_COLS: &str = "room_id, source_entity_id, relationship_type, target_entity_id, description, evidence, created_at, agent_id, user_id, idempotency_key";

fn rel_from_row(r: &Row<'_>) -> Result<Relationship> {
    let g = |e: rusqlite::Error| sql_err(e);
    Ok(Relationship {
        room_id: parse(&r.get::<_, String>(0).map_err(g)?)?,
        source_entity_id: parse(&r.get::<_, String>(1).map_err(g)?)?,
        relationship_type: r.get(2).map_err(g)?,
        target_entity_id: parse(&r.get::<_, String>(3).map_err(g)?)?,
        description: r.get(4).map_err(g)?,
        evidence: from_json("evidence", &r.get::<_, String>(5).map_err(g)?)?,
        created_at: Timestamp::from_millis(r.get(6).map_err(g)?),
        agent_id: AgentId::new(r.get::<_, String>(7).map_err(g)?)?,
        user_id: UserId::new(r.get::<_, String>(8).map_err(g)?)?,
        idempotency_key: r.get(9).map_err(g)?,
    })
}

const ARTIFACT_COLS: &str = "room_id, artifact_id, key, content_type, size, uploaded_by, agent_id, uploaded_at, description, linked_finding_ids, linked_entity_ids, idempotency_key";

fn artifact_from_row(r: &Row<'_>) -> Result<Artifact> {
    let g = |e: rusqlite::Error| sql_err(e);
    Ok(Artifact {
        room_id: parse(&r.get::<_, String>(0).map_err(g)?)?,
        artifact_id: parse(&r.get::<_, String>(1).map_err(g)?)?,
        key: r.get(2).map_err(g)?,
        content_type: r.get(3).map_err(g)?,
        size: r.get::<_, i64>(4).map_err(g)? as u64,
        uploaded_by: UserId::new(r.get::<_, String>(5).map_err(g)?)?,
        agent_id: AgentId::new(r.get::<_, String>(6).map_err(g)?)?,
        uploaded_at: Timestamp::from_millis(r.get(7).map_err(g)?),
        description: r.get(8).map_err(g)?,
        linked_finding_ids: from_json("linked_finding_ids", &r.get::<_, String>(9).map_err(g)?)?,
        linked_entity_ids: from_json("linked_entity_ids", &r.get::<_, String>(10).map_err(g)?)?,
        idempotency_key: r.get(11).map_err(g)?,
    })
}

/// Runs a query and maps every row.
fn query_all<T>(
    conn: &Connection,
    sql: &str,
    params: &[SqlValue],
    map: impl Fn(&Row<'_>) -> Result<T>,
) -> Result<Vec<T>> {
    let mut stmt = conn.prepare_cached(sql).map_err(sql_err)?;
    let mut rows = stmt.query(rusqlite::params_from_iter(params.iter())).map_err(sql_err)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(sql_err)? {
        out.push(map(row)?);
    }
    Ok(out)
}

fn text(s: impl ToString) -> SqlValue {
    SqlValue::Text(s.to_string())
}

/// `(?, ?, …)` with `n` placeholders.
fn placeholders(n: usize) -> String {
    let mut s = String::from("(");
    for i in 0..n {
        if i > 0 {
            s.push_str(", ");
        }
        s.push('?');
    }
    s.push(')');
    s
}

// ---------------------------------------------------------------------------------------------
// Idempotency claims, inside the caller's transaction.

fn existing_claim(
    tx: &Connection,
    room: &str,
    claim: Option<&IdempotencyClaim>,
) -> Result<Option<IdempotencyRecord>> {
    let Some(c) = claim else { return Ok(None) };
    tx.query_row(
        "SELECT key, operation, fingerprint, result_id, created_at FROM idempotency WHERE room_id = ? AND key = ?",
        params![room, c.key],
        |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, i64>(4)?,
            ))
        },
    )
    .optional()
    .map_err(sql_err)?
    .map(|(key, op, fingerprint, result_id, at)| {
        Ok(IdempotencyRecord {
            key,
            operation: WriteOperation::parse(&op).ok_or_else(|| corrupt("idempotency operation", &op))?,
            fingerprint,
            result_id,
            created_at: Timestamp::from_millis(at),
        })
    })
    .transpose()
}

fn record_claim(tx: &Connection, room: &str, claim: Option<&IdempotencyClaim>) -> Result<()> {
    if let Some(c) = claim {
        tx.execute(
            "INSERT INTO idempotency (room_id, key, operation, fingerprint, result_id, created_at) VALUES (?, ?, ?, ?, ?, ?)",
            params![room, c.key, c.operation.as_str(), c.fingerprint, c.result_id, c.created_at.as_millis()],
        )
        .map_err(sql_err)?;
    }
    Ok(())
}

impl Store for SqliteStore {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    fn capabilities(&self) -> Capabilities {
        // One writer connection orders commits within this process; another process opening
        // the same file would serialise through SQLite's locks too, but the reader pool and
        // blocking-task model are tuned for one serving process, so we do not claim it.
        Capabilities::none().with_durable(true).with_keyword_search(true)
    }
}

#[async_trait]
impl RoomStore for SqliteStore {
    async fn insert_room(&self, room: &Room) -> Result<()> {
        let room = room.clone();
        self.write(move |c| {
            c.execute(
                &format!("INSERT INTO rooms ({ROOM_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
                params![
                    room.room_id.to_string(),
                    room.name,
                    room.objective,
                    room.visibility_mode.as_str(),
                    room.created_at.as_millis(),
                    room.created_by.as_str(),
                    to_json(&room.tags),
                    room.status.as_str(),
                    room.closed_at.map(|t| t.as_millis()),
                    room.closed_by.as_ref().map(|u| u.as_str().to_owned()),
                ],
            )
            .map_err(|e| {
                if is_unique_violation(&e) {
                    Error::AlreadyExists { what: "room", id: room.room_id.to_string() }
                } else {
                    sql_err(e)
                }
            })?;
            Ok(())
        })
        .await
    }

    async fn get_room(&self, room_id: RoomId) -> Result<Option<Room>> {
        self.read(move |c| {
            let sql = format!("SELECT {ROOM_COLS} FROM rooms WHERE room_id = ?");
            Ok(query_all(c, &sql, &[text(room_id)], room_from_row)?.pop())
        })
        .await
    }

    async fn close_room(&self, room_id: RoomId, at: Timestamp, by: &UserId) -> Result<Option<Room>> {
        let by = by.clone();
        self.write(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql_err)?;
            tx.execute(
                "UPDATE rooms SET status = 'closed', closed_at = ?, closed_by = ? WHERE room_id = ? AND status = 'active'",
                params![at.as_millis(), by.as_str(), room_id.to_string()],
            )
            .map_err(sql_err)?;
            let sql = format!("SELECT {ROOM_COLS} FROM rooms WHERE room_id = ?");
            let room = query_all(&tx, &sql, &[text(room_id)], room_from_row)?.pop();
            tx.commit().map_err(sql_err)?;
            Ok(room)
        })
        .await
    }

    async fn list_rooms(
        &self,
        status: Option<RoomStatus>,
        after: Option<RoomKey>,
        limit: usize,
    ) -> Result<Vec<Room>> {
        self.read(move |c| {
            let mut sql = format!("SELECT {ROOM_COLS} FROM rooms WHERE 1 = 1");
            let mut p = Vec::new();
            if let Some(s) = status {
                sql.push_str(" AND status = ?");
                p.push(text(s.as_str()));
            }
            if let Some(k) = after {
                sql.push_str(" AND (created_at < ? OR (created_at = ? AND room_id < ?))");
                p.push(SqlValue::Integer(k.created_at.as_millis()));
                p.push(SqlValue::Integer(k.created_at.as_millis()));
                p.push(text(k.room_id));
            }
            sql.push_str(" ORDER BY created_at DESC, room_id DESC LIMIT ?");
            p.push(SqlValue::Integer(limit as i64));
            query_all(c, &sql, &p, room_from_row)
        })
        .await
    }
}

#[async_trait]
impl AgentStore for SqliteStore {
    async fn insert_agent(&self, s: &AgentSession) -> Result<Insert<AgentSession>> {
        let s = s.clone();
        self.write(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql_err)?;
            let sql = format!("SELECT {AGENT_COLS} FROM agent_sessions WHERE room_id = ? AND agent_id = ?");
            if let Some(existing) =
                query_all(&tx, &sql, &[text(s.room_id), text(&s.agent_id)], agent_from_row)?.pop()
            {
                return Ok(Insert::Existing(existing));
            }
            tx.execute(
                &format!("INSERT INTO agent_sessions ({AGENT_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"),
                params![
                    s.room_id.to_string(),
                    s.agent_id.as_str(),
                    s.user_id.as_str(),
                    s.joined_at.as_millis(),
                    s.last_active.as_millis(),
                    s.agent_type,
                    s.agent_status.as_str(),
                    s.status_reason,
                    s.status_updated_at.as_millis(),
                ],
            )
            .map_err(sql_err)?;
            tx.commit().map_err(sql_err)?;
            Ok(Insert::Inserted(s))
        })
        .await
    }

    async fn get_agent(&self, room_id: RoomId, agent_id: &AgentId) -> Result<Option<AgentSession>> {
        let agent_id = agent_id.clone();
        self.read(move |c| {
            let sql = format!("SELECT {AGENT_COLS} FROM agent_sessions WHERE room_id = ? AND agent_id = ?");
            Ok(query_all(c, &sql, &[text(room_id), text(agent_id)], agent_from_row)?.pop())
        })
        .await
    }

    async fn list_agents(&self, room_id: RoomId) -> Result<Vec<AgentSession>> {
        self.read(move |c| {
            let sql = format!(
                "SELECT {AGENT_COLS} FROM agent_sessions WHERE room_id = ? ORDER BY joined_at, agent_id"
            );
            query_all(c, &sql, &[text(room_id)], agent_from_row)
        })
        .await
    }

    async fn update_agent(
        &self,
        room_id: RoomId,
        agent_id: &AgentId,
        u: &AgentUpdate,
    ) -> Result<Option<AgentSession>> {
        let (agent_id, u) = (agent_id.clone(), u.clone());
        self.write(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql_err)?;
            let (r, a) = (room_id.to_string(), agent_id.to_string());
            if let Some(t) = u.last_active {
                tx.execute(
                    "UPDATE agent_sessions SET last_active = max(last_active, ?) WHERE room_id = ? AND agent_id = ?",
                    params![t.as_millis(), r, a],
                )
                .map_err(sql_err)?;
            }
            if let Some(t) = &u.agent_type {
                tx.execute(
                    "UPDATE agent_sessions SET agent_type = ? WHERE room_id = ? AND agent_id = ?",
                    params![t, r, a],
                )
                .map_err(sql_err)?;
            }
            if let Some((status, reason, at)) = &u.status {
                tx.execute(
                    "UPDATE agent_sessions SET agent_status = ?, status_reason = ?, status_updated_at = ? WHERE room_id = ? AND agent_id = ?",
                    params![status.as_str(), reason, at.as_millis(), r, a],
                )
                .map_err(sql_err)?;
            }
            let sql = format!("SELECT {AGENT_COLS} FROM agent_sessions WHERE room_id = ? AND agent_id = ?");
            let out = query_all(&tx, &sql, &[text(&r), text(&a)], agent_from_row)?.pop();
            tx.commit().map_err(sql_err)?;
            Ok(out)
        })
        .await
    }
}

#[async_trait]
impl FindingStore for SqliteStore {
    async fn append_finding(&self, f: &Finding, claim: Option<&IdempotencyClaim>) -> Result<Write<Finding>> {
        let (f, claim) = (f.clone(), claim.cloned());
        let inner = self.inner.clone();
        self.write(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql_err)?;
            let room = f.room_id.to_string();
            if let Some(rec) = existing_claim(&tx, &room, claim.as_ref())? {
                return Ok(Write::Replayed(rec));
            }
            // The sequence is bumped inside the write transaction, so seq order is commit order.
            let seq: i64 = tx
                .query_row(
                    "UPDATE rooms SET last_seq = last_seq + 1 WHERE room_id = ? RETURNING last_seq",
                    params![room],
                    |r| r.get(0),
                )
                .optional()
                .map_err(sql_err)?
                .ok_or_else(|| Error::not_found("room", &room))?;
            tx.execute(
                &format!("INSERT INTO findings ({FINDING_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
                params![
                    room,
                    f.finding_id.to_string(),
                    seq,
                    f.content,
                    f.agent_id.as_str(),
                    f.user_id.as_str(),
                    to_json(&f.tags),
                    to_json(&f.entity_refs),
                    to_json(&f.evidence),
                    f.index_status.as_str(),
                    f.idempotency_key,
                    f.created_at.as_millis(),
                ],
            )
            .map_err(sql_err)?;
            let rowid = tx.last_insert_rowid();
            for t in &f.tags {
                tx.execute(
                    "INSERT INTO finding_tags (room_id, tag, seq) VALUES (?, ?, ?)",
                    params![room, t, seq],
                )
                .map_err(sql_err)?;
            }
            tx.execute("INSERT INTO findings_fts (rowid, content) VALUES (?, ?)", params![rowid, f.content])
                .map_err(sql_err)?;
            record_claim(&tx, &room, claim.as_ref())?;
            tx.commit().map_err(sql_err)?;
            // Still under the writer lock: cache updates apply in commit order.
            let mut cache = lock(&inner.keywords);
            cache.generation += 1;
            if let Some(ix) = cache.rooms.get_mut(&f.room_id) {
                Arc::make_mut(ix).add(f.finding_id, &f.content);
            }
            drop(cache);
            let mut stored = f;
            stored.seq = seq as u64;
            Ok(Write::Applied(stored))
        })
        .await
    }

    async fn get_findings(&self, room_id: RoomId, ids: &[FindingId]) -> Result<Vec<Finding>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<SqlValue> = ids.iter().map(text).collect();
        self.read(move |c| {
            // `+room_id` keeps the planner on the finding_id index: a lookup of a few ids must not
            // become a scan of the room through the (room_id, seq) index.
            let sql = format!(
                "SELECT {FINDING_COLS} FROM findings WHERE +room_id = ? AND finding_id IN {}",
                placeholders(ids.len())
            );
            let mut p = vec![text(room_id)];
            p.extend(ids);
            query_all(c, &sql, &p, finding_from_row)
        })
        .await
    }

    async fn list_findings(&self, room_id: RoomId, q: &FindingQuery) -> Result<Vec<Finding>> {
        let q = q.clone();
        self.read(move |c| {
            let mut sql = format!("SELECT {FINDING_COLS} FROM findings WHERE room_id = ? AND seq > ?");
            let mut p = vec![text(room_id), SqlValue::Integer(q.after_seq as i64)];
            if let Some(b) = q.before_seq {
                sql.push_str(" AND seq < ?");
                p.push(SqlValue::Integer(b as i64));
            }
            if !q.tags_any.is_empty() {
                sql.push_str(&format!(
                    " AND seq IN (SELECT seq FROM finding_tags WHERE room_id = ? AND tag IN {})",
                    placeholders(q.tags_any.len())
                ));
                p.push(text(room_id));
                p.extend(q.tags_any.iter().map(text));
            }
            if let Some(a) = &q.agent_id {
                sql.push_str(" AND agent_id = ?");
                p.push(text(a));
            }
            if let Some(t) = q.since {
                sql.push_str(" AND created_at >= ?");
                p.push(SqlValue::Integer(t.as_millis()));
            }
            if let Some(t) = q.until {
                sql.push_str(" AND created_at < ?");
                p.push(SqlValue::Integer(t.as_millis()));
            }
            sql.push_str(if q.descending {
                " ORDER BY seq DESC LIMIT ?"
            } else {
                " ORDER BY seq ASC LIMIT ?"
            });
            p.push(SqlValue::Integer(q.limit as i64));
            query_all(c, &sql, &p, finding_from_row)
        })
        .await
    }

    async fn set_index_status(
        &self,
        room_id: RoomId,
        finding_id: FindingId,
        status: IndexStatus,
    ) -> Result<()> {
        self.write(move |c| {
            let n = c
                .execute(
                    "UPDATE findings SET index_status = ? WHERE room_id = ? AND finding_id = ?",
                    params![status.as_str(), room_id.to_string(), finding_id.to_string()],
                )
                .map_err(sql_err)?;
            if n == 0 {
                return Err(Error::not_found("finding", finding_id));
            }
            Ok(())
        })
        .await
    }

    async fn pending_findings(&self, created_before: Timestamp, limit: usize) -> Result<Vec<Finding>> {
        self.read(move |c| {
            let sql = format!(
                "SELECT {FINDING_COLS} FROM findings WHERE index_status = 'pending' AND created_at < ?
                 ORDER BY created_at, finding_id LIMIT ?"
            );
            query_all(
                c,
                &sql,
                &[SqlValue::Integer(created_before.as_millis()), SqlValue::Integer(limit as i64)],
                finding_from_row,
            )
        })
        .await
    }

    async fn mark_all_pending(&self) -> Result<u64> {
        self.write(|c| {
            c.execute("UPDATE findings SET index_status = 'pending' WHERE index_status <> 'pending'", [])
                .map(|n| n as u64)
                .map_err(sql_err)
        })
        .await
    }

    async fn finding_stats(&self, room_id: RoomId) -> Result<FindingStats> {
        self.read(move |c| {
            let room = room_id.to_string();
            let (total, last_seq, last_at): (i64, Option<i64>, Option<i64>) = c
                .query_row(
                    "SELECT count(*), max(seq), (SELECT created_at FROM findings WHERE room_id = ?1 ORDER BY seq DESC LIMIT 1)
                     FROM findings WHERE room_id = ?1",
                    params![room],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .map_err(sql_err)?;
            let mut tag_counts = BTreeMap::new();
            let mut stmt = c
                .prepare_cached("SELECT tag, count(*) FROM finding_tags WHERE room_id = ? GROUP BY tag")
                .map_err(sql_err)?;
            let rows = stmt
                .query_map(params![room], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
                .map_err(sql_err)?;
            for row in rows {
                let (t, n) = row.map_err(sql_err)?;
                tag_counts.insert(t, n as u64);
            }
            Ok(FindingStats {
                total: total as u64,
                last_seq: last_seq.unwrap_or(0) as u64,
                last_created_at: last_at.map(Timestamp::from_millis),
                tag_counts,
            })
        })
        .await
    }

    async fn keyword_search(&self, room_id: RoomId, query: &str, limit: usize) -> Result<KeywordSearch> {
        let index = self.room_keywords(room_id).await?;
        let query = query.to_owned();
        tokio::task::spawn_blocking(move || index.search(&query, limit))
            .await
            .map_err(|e| Error::backend("sqlite", true, format!("keyword task failed: {e}"), None))
    }
}

/// Per-room in-memory keyword indexes (see [`macp_core::search::keyword`]), loaded from the
/// findings table on first use and kept current by appends. The generation counter tells a
/// loader whether an append raced its read; its snapshot is then used once and not cached.
#[derive(Debug, Default)]
struct KeywordCache {
    rooms: std::collections::HashMap<RoomId, Arc<KeywordIndex>>,
    generation: u64,
}

impl SqliteStore {
    async fn room_keywords(&self, room_id: RoomId) -> Result<Arc<KeywordIndex>> {
        let generation = {
            let cache = lock(&self.inner.keywords);
            if let Some(ix) = cache.rooms.get(&room_id) {
                return Ok(ix.clone());
            }
            cache.generation
        };
        let loaded = self
            .read(move |c| {
                let mut ix = KeywordIndex::new();
                let mut stmt = c
                    .prepare_cached("SELECT finding_id, content FROM findings WHERE room_id = ? ORDER BY seq")
                    .map_err(sql_err)?;
                let mut rows = stmt.query(params![room_id.to_string()]).map_err(sql_err)?;
                while let Some(r) = rows.next().map_err(sql_err)? {
                    let id: FindingId = parse(&r.get::<_, String>(0).map_err(sql_err)?)?;
                    ix.add(id, &r.get::<_, String>(1).map_err(sql_err)?);
                }
                Ok(Arc::new(ix))
            })
            .await?;
        let mut cache = lock(&self.inner.keywords);
        if cache.generation == generation {
            cache.rooms.insert(room_id, loaded.clone());
        }
        Ok(loaded)
    }
}

fn claims_of(tx: &Connection, room: &str, ids: &[Identifier]) -> Result<Vec<(Identifier, EntityId)>> {
    let mut out = Vec::new();
    let mut stmt = tx
        .prepare_cached(
            "SELECT entity_id FROM identifier_claims WHERE room_id = ? AND id_type = ? AND id_value = ?",
        )
        .map_err(sql_err)?;
    for i in ids {
        let holder: Option<String> =
            stmt.query_row(params![room, i.id_type, i.value], |r| r.get(0)).optional().map_err(sql_err)?;
        if let Some(h) = holder {
            out.push((i.clone(), parse(&h)?));
        }
    }
    Ok(out)
}

fn entity_in(tx: &Connection, room: &str, id: EntityId) -> Result<Option<Entity>> {
    let sql = format!("SELECT {ENTITY_COLS} FROM entities WHERE room_id = ? AND entity_id = ?");
    Ok(query_all(tx, &sql, &[text(room), text(id)], entity_from_row)?.pop())
}

#[async_trait]
impl EntityStore for SqliteStore {
    async fn create_entity(&self, e: &Entity, claim: Option<&IdempotencyClaim>) -> Result<CreateEntity> {
        let (e, claim) = (e.clone(), claim.cloned());
        self.write(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql_err)?;
            let room = e.room_id.to_string();
            if let Some(rec) = existing_claim(&tx, &room, claim.as_ref())? {
                return Ok(CreateEntity::Replayed(rec));
            }
            let taken = claims_of(&tx, &room, &e.identifiers)?;
            if !taken.is_empty() {
                return Ok(CreateEntity::IdentifiersTaken(taken));
            }
            tx.execute(
                &format!("INSERT INTO entities ({ENTITY_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
                params![
                    room,
                    e.entity_id.to_string(),
                    e.name,
                    e.entity_type.as_str(),
                    to_json(&e.identifiers),
                    to_json(&e.properties),
                    e.created_by.as_str(),
                    e.agent_id.as_str(),
                    e.created_at.as_millis(),
                    e.merged_into.map(|m| m.to_string()),
                ],
            )
            .map_err(sql_err)?;
            for i in &e.identifiers {
                tx.execute(
                    "INSERT INTO identifier_claims (room_id, id_type, id_value, entity_id) VALUES (?, ?, ?, ?)",
                    params![room, i.id_type, i.value, e.entity_id.to_string()],
                )
                .map_err(sql_err)?;
            }
            record_claim(&tx, &room, claim.as_ref())?;
            tx.commit().map_err(sql_err)?;
            Ok(CreateEntity::Created(e))
        })
        .await
    }

    async fn attach_to_entity(
        &self,
        room_id: RoomId,
        entity_id: EntityId,
        identifiers: &[Identifier],
        properties: &Map<String, Value>,
        claim: Option<&IdempotencyClaim>,
    ) -> Result<AttachEntity> {
        let (identifiers, properties, claim) = (identifiers.to_vec(), properties.clone(), claim.cloned());
        self.write(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql_err)?;
            let room = room_id.to_string();
            if let Some(rec) = existing_claim(&tx, &room, claim.as_ref())? {
                return Ok(AttachEntity::Replayed(rec));
            }
            let mut entity = entity_in(&tx, &room, entity_id)?.ok_or_else(|| Error::not_found("entity", entity_id))?;
            let taken = claims_of(&tx, &room, &identifiers)?;
            let mut claimed_elsewhere = Vec::new();
            for i in &identifiers {
                match taken.iter().find(|(t, _)| t == i) {
                    Some((_, holder)) if *holder != entity_id => claimed_elsewhere.push((i.clone(), *holder)),
                    Some(_) => {}
                    None => {
                        tx.execute(
                            "INSERT INTO identifier_claims (room_id, id_type, id_value, entity_id) VALUES (?, ?, ?, ?)",
                            params![room, i.id_type, i.value, entity_id.to_string()],
                        )
                        .map_err(sql_err)?;
                        entity.identifiers.push(i.clone());
                    }
                }
            }
            entity.identifiers.sort();
            entity.identifiers.dedup();
            for (k, v) in properties {
                entity.properties.entry(k).or_insert(v);
            }
            tx.execute(
                "UPDATE entities SET identifiers = ?, properties = ? WHERE room_id = ? AND entity_id = ?",
                params![to_json(&entity.identifiers), to_json(&entity.properties), room, entity_id.to_string()],
            )
            .map_err(sql_err)?;
            record_claim(&tx, &room, claim.as_ref())?;
            tx.commit().map_err(sql_err)?;
            Ok(AttachEntity::Attached { entity, claimed_elsewhere })
        })
        .await
    }

    async fn get_entities(&self, room_id: RoomId, ids: &[EntityId]) -> Result<Vec<Entity>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<SqlValue> = ids.iter().map(text).collect();
        self.read(move |c| {
            let sql = format!(
                "SELECT {ENTITY_COLS} FROM entities WHERE room_id = ? AND entity_id IN {}",
                placeholders(ids.len())
            );
            let mut p = vec![text(room_id)];
            p.extend(ids);
            query_all(c, &sql, &p, entity_from_row)
        })
        .await
    }

    async fn list_entities(
        &self,
        room_id: RoomId,
        after: Option<EntityId>,
        limit: usize,
    ) -> Result<Vec<Entity>> {
        self.read(move |c| {
            let sql = format!(
                "SELECT {ENTITY_COLS} FROM entities WHERE room_id = ? AND entity_id > ? ORDER BY entity_id LIMIT ?"
            );
            let after = after.map(|a| a.to_string()).unwrap_or_default();
            query_all(c, &sql, &[text(room_id), text(after), SqlValue::Integer(limit as i64)], entity_from_row)
        })
        .await
    }

    async fn entity_aliases(&self, room_id: RoomId) -> Result<Vec<(EntityId, EntityId)>> {
        self.read(move |c| {
            query_all(
                c,
                "SELECT entity_id, merged_into FROM entities WHERE room_id = ? AND merged_into IS NOT NULL",
                &[text(room_id)],
                |r| {
                    Ok((
                        parse(&r.get::<_, String>(0).map_err(sql_err)?)?,
                        parse(&r.get::<_, String>(1).map_err(sql_err)?)?,
                    ))
                },
            )
        })
        .await
    }

    async fn find_identifiers(
        &self,
        room_id: RoomId,
        identifiers: &[Identifier],
    ) -> Result<Vec<(Identifier, EntityId)>> {
        let identifiers = identifiers.to_vec();
        self.read(move |c| claims_of(c, &room_id.to_string(), &identifiers)).await
    }

    async fn merge_entities(&self, room_id: RoomId, winner: EntityId, loser: EntityId) -> Result<Entity> {
        self.write(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql_err)?;
            let room = room_id.to_string();
            let mut w = entity_in(&tx, &room, winner)?.ok_or_else(|| Error::not_found("entity", winner))?;
            let l = entity_in(&tx, &room, loser)?.ok_or_else(|| Error::not_found("entity", loser))?;
            if winner == loser || w.merged_into.is_some() || l.merged_into.is_some() {
                return Err(Error::conflict("one of the entities was merged concurrently"));
            }
            w.identifiers.extend(l.identifiers);
            w.identifiers.sort();
            w.identifiers.dedup();
            tx.execute(
                "UPDATE entities SET merged_into = ? WHERE room_id = ? AND entity_id = ?",
                params![winner.to_string(), room, loser.to_string()],
            )
            .map_err(sql_err)?;
            tx.execute(
                "UPDATE entities SET identifiers = ? WHERE room_id = ? AND entity_id = ?",
                params![to_json(&w.identifiers), room, winner.to_string()],
            )
            .map_err(sql_err)?;
            tx.commit().map_err(sql_err)?;
            Ok(w)
        })
        .await
    }

    async fn put_relationship(
        &self,
        rel: &Relationship,
        claim: Option<&IdempotencyClaim>,
    ) -> Result<Write<(Relationship, bool)>> {
        let (rel, claim) = (rel.clone(), claim.cloned());
        self.write(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql_err)?;
            let room = rel.room_id.to_string();
            if let Some(rec) = existing_claim(&tx, &room, claim.as_ref())? {
                return Ok(Write::Replayed(rec));
            }
            let key = [
                text(&room),
                text(rel.source_entity_id),
                text(&rel.relationship_type),
                text(rel.target_entity_id),
            ];
            let sql = format!(
                "SELECT {REL_COLS} FROM relationships WHERE room_id = ? AND source_entity_id = ? AND relationship_type = ? AND target_entity_id = ?"
            );
            let out = match query_all(&tx, &sql, &key, rel_from_row)?.pop() {
                Some(mut existing) => {
                    for ev in &rel.evidence {
                        if !existing.evidence.contains(ev) {
                            existing.evidence.push(ev.clone());
                        }
                    }
                    if existing.description.is_none() {
                        existing.description = rel.description.clone();
                    }
                    tx.execute(
                        "UPDATE relationships SET evidence = ?, description = ? WHERE room_id = ? AND source_entity_id = ? AND relationship_type = ? AND target_entity_id = ?",
                        params![
                            to_json(&existing.evidence),
                            existing.description,
                            room,
                            rel.source_entity_id.to_string(),
                            rel.relationship_type,
                            rel.target_entity_id.to_string()
                        ],
                    )
                    .map_err(sql_err)?;
                    (existing, false)
                }
                None => {
                    tx.execute(
                        &format!("INSERT INTO relationships ({REL_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
                        params![
                            room,
                            rel.source_entity_id.to_string(),
                            rel.relationship_type,
                            rel.target_entity_id.to_string(),
                            rel.description,
                            to_json(&rel.evidence),
                            rel.created_at.as_millis(),
                            rel.agent_id.as_str(),
                            rel.user_id.as_str(),
                            rel.idempotency_key,
                        ],
                    )
                    .map_err(sql_err)?;
                    (rel, true)
                }
            };
            record_claim(&tx, &room, claim.as_ref())?;
            tx.commit().map_err(sql_err)?;
            Ok(Write::Applied(out))
        })
        .await
    }

    async fn get_relationship(&self, room_id: RoomId, key: &RelationshipKey) -> Result<Option<Relationship>> {
        let key = key.clone();
        self.read(move |c| {
            let sql = format!(
                "SELECT {REL_COLS} FROM relationships WHERE room_id = ? AND source_entity_id = ? AND relationship_type = ? AND target_entity_id = ?"
            );
            let p = [text(room_id), text(key.source), text(&key.relationship_type), text(key.target)];
            Ok(query_all(c, &sql, &p, rel_from_row)?.pop())
        })
        .await
    }

    async fn relationships_touching(&self, room_id: RoomId, ids: &[EntityId]) -> Result<Vec<Relationship>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<SqlValue> = ids.iter().map(text).collect();
        self.read(move |c| {
            let ph = placeholders(ids.len());
            let sql = format!(
                "SELECT {REL_COLS} FROM relationships WHERE room_id = ? AND (source_entity_id IN {ph} OR target_entity_id IN {ph})
                 ORDER BY source_entity_id, relationship_type, target_entity_id"
            );
            let mut p = vec![text(room_id)];
            p.extend(ids.iter().cloned());
            p.extend(ids);
            query_all(c, &sql, &p, rel_from_row)
        })
        .await
    }

    async fn list_relationships(
        &self,
        room_id: RoomId,
        after: Option<&RelationshipKey>,
        limit: usize,
    ) -> Result<Vec<Relationship>> {
        let after = after.cloned();
        self.read(move |c| {
            let mut sql = format!("SELECT {REL_COLS} FROM relationships WHERE room_id = ?");
            let mut p = vec![text(room_id)];
            if let Some(k) = after {
                sql.push_str(" AND (source_entity_id, relationship_type, target_entity_id) > (?, ?, ?)");
                p.extend([text(k.source), text(k.relationship_type), text(k.target)]);
            }
            sql.push_str(" ORDER BY source_entity_id, relationship_type, target_entity_id LIMIT ?");
            p.push(SqlValue::Integer(limit as i64));
            query_all(c, &sql, &p, rel_from_row)
        })
        .await
    }

    async fn relationship_degrees(&self, room_id: RoomId) -> Result<Vec<(EntityId, u64)>> {
        self.read(move |c| {
            query_all(
                c,
                "SELECT id, count(*) FROM (
                     SELECT source_entity_id AS id FROM relationships WHERE room_id = ?1
                     UNION ALL
                     SELECT target_entity_id FROM relationships WHERE room_id = ?1 AND target_entity_id <> source_entity_id
                 ) GROUP BY id ORDER BY id",
                &[text(room_id)],
                |r| Ok((parse(&r.get::<_, String>(0).map_err(sql_err)?)?, r.get::<_, i64>(1).map_err(sql_err)? as u64)),
            )
        })
        .await
    }

    async fn entity_stats(&self, room_id: RoomId) -> Result<EntityStats> {
        self.read(move |c| {
            c.query_row(
                "SELECT
                    (SELECT count(*) FROM entities WHERE room_id = ?1 AND merged_into IS NULL),
                    (SELECT count(*) FROM entities WHERE room_id = ?1 AND merged_into IS NOT NULL),
                    (SELECT count(*) FROM relationships WHERE room_id = ?1)",
                params![room_id.to_string()],
                |r| {
                    Ok(EntityStats {
                        canonical: r.get::<_, i64>(0)? as u64,
                        merged: r.get::<_, i64>(1)? as u64,
                        relationships: r.get::<_, i64>(2)? as u64,
                    })
                },
            )
            .map_err(sql_err)
        })
        .await
    }
}

#[async_trait]
impl ArtifactStore for SqliteStore {
    async fn insert_artifact(
        &self,
        a: &Artifact,
        claim: Option<&IdempotencyClaim>,
    ) -> Result<Write<Artifact>> {
        let (a, claim) = (a.clone(), claim.cloned());
        self.write(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql_err)?;
            let room = a.room_id.to_string();
            if let Some(rec) = existing_claim(&tx, &room, claim.as_ref())? {
                return Ok(Write::Replayed(rec));
            }
            tx.execute(
                &format!(
                    "INSERT INTO artifacts ({ARTIFACT_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                ),
                params![
                    room,
                    a.artifact_id.to_string(),
                    a.key,
                    a.content_type,
                    a.size as i64,
                    a.uploaded_by.as_str(),
                    a.agent_id.as_str(),
                    a.uploaded_at.as_millis(),
                    a.description,
                    to_json(&a.linked_finding_ids),
                    to_json(&a.linked_entity_ids),
                    a.idempotency_key,
                ],
            )
            .map_err(|e| {
                if is_unique_violation(&e) {
                    Error::AlreadyExists { what: "artifact with key", id: a.key.clone() }
                } else {
                    sql_err(e)
                }
            })?;
            record_claim(&tx, &room, claim.as_ref())?;
            tx.commit().map_err(sql_err)?;
            Ok(Write::Applied(a))
        })
        .await
    }

    async fn get_artifacts(&self, room_id: RoomId, ids: &[ArtifactId]) -> Result<Vec<Artifact>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<SqlValue> = ids.iter().map(text).collect();
        self.read(move |c| {
            let sql = format!(
                "SELECT {ARTIFACT_COLS} FROM artifacts WHERE room_id = ? AND artifact_id IN {}",
                placeholders(ids.len())
            );
            let mut p = vec![text(room_id)];
            p.extend(ids);
            query_all(c, &sql, &p, artifact_from_row)
        })
        .await
    }

    async fn list_artifacts(&self, room_id: RoomId, q: &ArtifactQuery) -> Result<Vec<Artifact>> {
        let q = q.clone();
        self.read(move |c| {
            let mut sql = format!("SELECT {ARTIFACT_COLS} FROM artifacts WHERE room_id = ?");
            let mut p = vec![text(room_id)];
            if let Some(a) = q.after {
                sql.push_str(" AND artifact_id > ?");
                p.push(text(a));
            }
            if let Some(f) = q.finding_id {
                sql.push_str(" AND EXISTS (SELECT 1 FROM json_each(linked_finding_ids) WHERE value = ?)");
                p.push(text(f));
            }
            if !q.entity_ids.is_empty() {
                sql.push_str(&format!(
                    " AND EXISTS (SELECT 1 FROM json_each(linked_entity_ids) WHERE value IN {})",
                    placeholders(q.entity_ids.len())
                ));
                p.extend(q.entity_ids.iter().map(text));
            }
            sql.push_str(" ORDER BY artifact_id LIMIT ?");
            p.push(SqlValue::Integer(q.limit as i64));
            query_all(c, &sql, &p, artifact_from_row)
        })
        .await
    }

    async fn count_artifacts(&self, room_id: RoomId) -> Result<u64> {
        self.read(move |c| {
            c.query_row(
                "SELECT count(*) FROM artifacts WHERE room_id = ?",
                params![room_id.to_string()],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n as u64)
            .map_err(sql_err)
        })
        .await
    }
}
