//! The database connections: the builder, the writer and the reader pool, and the helpers
//! every store file uses (error mapping, row helpers, idempotency keys inside a transaction).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use macp_core::model::{AgentSession, Room};
use macp_core::store::{IdempotencyKey, IdempotencyRecord, WriteOperation};
use macp_core::{AgentId, Error, Result, RoomId, Timestamp};
use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::data_dir::create_private_dir;
use crate::indexes::RoomIndexes;
use crate::schema;
use crate::snapshot::{self, IndexesResumed, RoomImage};
use crate::store::{RoomKeywords, RoomVectors};
use crate::writer::{self, Effects, Job, Sync};

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
    resume_indexes: bool,
}

impl Default for SqliteStoreBuilder {
    fn default() -> Self {
        Self {
            data_dir: None,
            durability: Durability::Full,
            readers: 4,
            busy_timeout: Duration::from_secs(5),
            resume_indexes: false,
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

    /// Reads back the search indexes a store kept at its last clean stop
    /// ([`SqliteStore::keep_indexes`]), when the database has not changed since (default: off,
    /// and the kept indexes are discarded). For a process that serves searches. A kept index is
    /// used only if no other process opened the database since, and only for the rooms whose
    /// finding and event counters have not moved; see OPERATIONS.md.
    pub fn resume_indexes(mut self, on: bool) -> Self {
        self.resume_indexes = on;
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
        let version = |c: &Connection| c.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0));
        let before = version(&writer).map_err(sql_err)?;
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
        let migrated = version(&writer).map_err(sql_err)? != before;
        let (rooms, resumed) = snapshot::take(&writer, &dir, self.resume_indexes, migrated)?;
        let readers = (0..self.readers).map(|_| self.connect(&path)).collect::<Result<Vec<_>>>()?;
        let caches = Arc::new(Caches::default());
        for r in rooms {
            if let Some(k) = r.keywords {
                caches.keywords.insert_ready(r.room, k);
            }
            if let Some(v) = r.vectors {
                caches.vectors.insert_ready(r.room, v);
            }
        }
        let writer = writer::start(writer, self.connect(&path)?, caches.clone(), self.durability)?;
        Ok(SqliteStore {
            inner: Arc::new(Shared {
                writer,
                caches,
                readers: Mutex::new(readers),
                path,
                builder: self,
                resumed,
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
        // Deleted and overwritten content is zeroed in the file, so an erasure leaves nothing
        // behind (see `SqliteStore::scrub`).
        conn.pragma_update(None, "secure_delete", "ON").map_err(sql_err)?;
        // Every statement the store runs stays prepared (rusqlite keeps 16 by default).
        conn.set_prepared_statement_cache_capacity(256);
        // A plan fixed when the statement is prepared, not re-chosen for each bound value.
        // Without it SQLite marks some statements (a key prefix bound, then an `ORDER BY` on a
        // `WITHOUT ROWID` table: the room's agents, its decisions) to be parsed and planned again
        // on every bind, which cost a summary more than its reads. The store's queries name
        // their indexes' conditions literally, so no plan depends on a bound value.
        conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true).map_err(sql_err)?;
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

/// TRUNCATE checkpoints tried, 20 ms apart, before an erasure or purge reports that readers
/// still hold old pages.
const SCRUB_ATTEMPTS: usize = 50;

/// A [`Store`](macp_core::Store) on one SQLite database file. Cheap to clone.
#[derive(Clone)]
pub struct SqliteStore {
    pub(crate) inner: Arc<Shared>,
}

pub(crate) struct Shared {
    /// The writer thread's queue (see [`crate::writer`]).
    pub(crate) writer: Sender<Job>,
    pub(crate) caches: Arc<Caches>,
    pub(crate) readers: Mutex<Vec<Connection>>,
    pub(crate) path: PathBuf,
    pub(crate) builder: SqliteStoreBuilder,
    /// What the open did with the indexes kept at the last clean stop.
    pub(crate) resumed: IndexesResumed,
}

/// What the store keeps in memory, kept current by the writer after each commit (in commit
/// order). A [`SqliteStore`] serving agents is the only writer of what these hold (the data
/// directory lock sees to it between servers); the one exception, a person's `macp` command
/// changing a room directly, is why rooms are re-read after a short time.
#[derive(Default)]
pub(crate) struct Caches {
    /// Rooms read or written, and when: every call reads its room, every write checks it is
    /// active.
    pub(crate) rooms: Mutex<HashMap<RoomId, (Room, std::time::Instant)>>,
    /// Agent sessions read or written: every write checks its agent.
    pub(crate) agents: Mutex<HashMap<(RoomId, AgentId), AgentSession>>,
    /// Keyword indexes of the rooms searched.
    pub(crate) keywords: RoomIndexes<RoomKeywords>,
    /// Vector indexes of the rooms searched.
    pub(crate) vectors: RoomIndexes<RoomVectors>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").field("path", &self.inner.path).finish_non_exhaustive()
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
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
    /// none half-done. Returns the copy's size in bytes. See [`backup`](crate::backup) for the whole data
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

    /// Makes what an erasure overwrote unrecoverable from the files: the erasing write zeroed
    /// the old bytes in its new page images (`secure_delete`), but older images of those pages
    /// may still sit in the WAL. A `TRUNCATE` checkpoint copies the WAL into the database file
    /// and empties it. It waits (up to the busy timeout) for readers that still see the older
    /// pages; if they outlast it, the erasure is committed but its old bytes are not yet gone,
    /// and the caller is told to retry (erasing again only repeats this step).
    pub(crate) async fn scrub(&self) -> Result<()> {
        let busy = self
            .read(|c| {
                // The checkpointer thread's own pass, or a reader finishing, can make one
                // attempt come back busy: a few more before giving up.
                for _ in 0..SCRUB_ATTEMPTS {
                    let busy: i64 =
                        c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0)).map_err(sql_err)?;
                    if busy == 0 {
                        return Ok(0);
                    }
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Ok(1)
            })
            .await?;
        if busy != 0 {
            return Err(Error::backend(
                "sqlite",
                true,
                "erased, but long-running readers still hold older copies of the pages in the write-ahead \
                 log; erase again to finish removing them",
                None,
            ));
        }
        Ok(())
    }

    /// Runs `f` inside a write transaction on the writer thread, possibly together with other
    /// writes (see [`crate::writer`]), and returns once it is committed with `sync`. `f` must
    /// not commit; it records cache changes in its [`Effects`], applied after the commit.
    pub(crate) async fn write<T, F>(&self, sync: Sync, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, &mut Effects) -> Result<T> + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.inner
            .writer
            .send(Job::new(sync, f, tx))
            .map_err(|_| Error::backend("sqlite", false, "the store's writer thread has stopped", None))?;
        rx.await.map_err(|_| {
            Error::backend(
                "sqlite",
                true,
                "the write failed before it was committed; nothing was written, retry",
                None,
            )
        })?
    }

    /// What this store's open did with the search indexes kept at the last clean stop: how many
    /// rooms it read back, or why a kept snapshot was not used.
    pub fn resumed_indexes(&self) -> &IndexesResumed {
        &self.inner.resumed
    }

    /// Ends the store's writes and keeps its search indexes for the next open that resumes
    /// them ([`SqliteStoreBuilder::resume_indexes`]), so the first search after a restart does
    /// not wait for its room to load. Call it last, as the process stops: every write after it
    /// is refused (retryable: another server takes it). Returns the rooms kept and the file's
    /// size in bytes.
    pub async fn keep_indexes(&self) -> Result<(usize, u64)> {
        let token = snapshot::token()?;
        let (tx, rx) = tokio::sync::oneshot::channel::<Vec<RoomImage>>();
        let t = token.clone();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        self.inner
            .writer
            .send(
                Job::new(
                    Sync::Durable,
                    move |c, fx: &mut Effects| {
                        snapshot::put_token(c, &t)?;
                        let marks = snapshot::marks(c)?;
                        // After the commit, with every earlier write's changes applied.
                        fx.then(move |caches| {
                            let _ = tx.send(snapshot::images(caches, &marks));
                        });
                        Ok(())
                    },
                    done_tx,
                )
                .last(),
            )
            .map_err(|_| Error::backend("sqlite", false, "the store's writer thread has stopped", None))?;
        done_rx.await.map_err(|_| {
            Error::backend("sqlite", true, "keeping the indexes failed before it was committed", None)
        })??;
        let rooms = rx
            .await
            .map_err(|_| Error::backend("sqlite", false, "the indexes were not handed over", None))?;
        let dir = self.inner.path.parent().map(Path::to_path_buf).unwrap_or_default();
        let n = rooms.len();
        let bytes =
            tokio::task::spawn_blocking(move || snapshot::write(&dir, &token, &rooms)).await.map_err(
                |e| Error::backend("sqlite", false, format!("writing the indexes failed: {e}"), None),
            )??;
        Ok((n, bytes))
    }

    /// Runs `f` with a reader connection on the blocking pool.
    pub(crate) async fn read<T, F>(&self, f: F) -> Result<T>
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

    /// Runs `f` with a reader connection on the calling thread, for reads bounded by a few rows
    /// (a room, an agent, counters, a page read through an index). Handing such a read to the
    /// blocking pool costs two thread switches, several times the read itself; scans that grow
    /// with a room stay on [`read`](Self::read).
    pub(crate) async fn read_small<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let conn = lock(&self.inner.readers).pop();
        let conn = match conn {
            Some(c) => c,
            None => self.inner.builder.connect(&self.inner.path)?,
        };
        let out = f(&conn);
        let mut pool = lock(&self.inner.readers);
        if pool.len() < self.inner.builder.readers {
            pool.push(conn);
        }
        out
    }
}

/// Maps a SQLite error: busy, locked and a full disk are retryable (the same write can succeed
/// later), the rest are not.
pub(crate) fn sql_err(e: rusqlite::Error) -> Error {
    use rusqlite::ErrorCode;
    match e.sqlite_error_code() {
        Some(ErrorCode::DiskFull) => Error::backend(
            "sqlite",
            true,
            format!(
                "the disk holding the data directory is full ({e}); nothing of this write was stored: \
                 free space on it, then retry"
            ),
            Some(Box::new(e)),
        ),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            Error::backend("sqlite", true, e.to_string(), Some(Box::new(e)))
        }
        _ => Error::backend("sqlite", false, e.to_string(), Some(Box::new(e))),
    }
}

pub(crate) fn is_unique_violation(e: &rusqlite::Error) -> bool {
    matches!(e.sqlite_error_code(), Some(rusqlite::ErrorCode::ConstraintViolation))
}

fn corrupt(what: &str, detail: impl std::fmt::Display) -> Error {
    Error::backend("sqlite", false, format!("stored {what} is unreadable: {detail}"), None)
}

pub(crate) fn to_json<T: serde::Serialize>(v: &T) -> String {
    // Serialising plain domain values to JSON cannot fail.
    serde_json::to_string(v).unwrap_or_else(|_| "null".to_owned())
}

pub(crate) fn from_json<T: serde::de::DeserializeOwned>(what: &str, s: &str) -> Result<T> {
    serde_json::from_str(s).map_err(|e| corrupt(what, e))
}

pub(crate) fn parse<T: std::str::FromStr<Err = Error>>(s: &str) -> Result<T> {
    s.parse()
}

/// `execute` through the connection's statement cache: the same statements run over and over,
/// and parsing one costs more than running it.
pub(crate) fn exec(c: &Connection, sql: &str, p: impl rusqlite::Params) -> rusqlite::Result<usize> {
    c.prepare_cached(sql)?.execute(p)
}

/// `query_row` through the connection's statement cache (see [`exec`]).
pub(crate) fn row<T>(
    c: &Connection,
    sql: &str,
    p: impl rusqlite::Params,
    f: impl FnOnce(&Row<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    c.prepare_cached(sql)?.query_row(p, f)
}

/// Runs a query and maps every row.
pub(crate) fn query_all<T>(
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

pub(crate) fn text(s: impl ToString) -> SqlValue {
    SqlValue::Text(s.to_string())
}

/// `(?, ?, …)` with `n` placeholders.
pub(crate) fn placeholders(n: usize) -> String {
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
// Idempotency keys, inside the caller's transaction.

pub(crate) fn existing_key(
    tx: &Connection,
    room: &str,
    idempotency: Option<&IdempotencyKey>,
) -> Result<Option<IdempotencyRecord>> {
    let Some(c) = idempotency else { return Ok(None) };
    row(tx,
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

pub(crate) fn record_key(tx: &Connection, room: &str, idempotency: Option<&IdempotencyKey>) -> Result<()> {
    if let Some(c) = idempotency {
        exec(tx,
            "INSERT INTO idempotency (room_id, key, operation, fingerprint, result_id, created_at) VALUES (?, ?, ?, ?, ?, ?)",
            params![room, c.key, c.operation.as_str(), c.fingerprint, c.result_id, c.created_at.as_millis()],
        )
        .map_err(sql_err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::StatementStatus;

    #[tokio::test]
    async fn a_cached_statement_is_not_prepared_again_for_each_bound_value() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path()).unwrap();
        // The shape that SQLite re-plans on every bind unless the plan is held: a bound key
        // prefix, then an order the key does not give.
        let sql = "SELECT agent_id FROM agent_sessions WHERE room_id = ? ORDER BY joined_at, agent_id";
        let reprepared = store
            .read_small(|c| {
                for room in ["a", "b", "c"] {
                    let mut st = c.prepare_cached(sql).map_err(sql_err)?;
                    let mut rows = st.query([room]).map_err(sql_err)?;
                    while rows.next().map_err(sql_err)?.is_some() {}
                }
                Ok(c.prepare_cached(sql).map_err(sql_err)?.get_status(StatementStatus::RePrepare))
            })
            .await
            .unwrap();
        assert_eq!(reprepared, 0, "the statement was parsed and planned again on a bind");
    }
}
