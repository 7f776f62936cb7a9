//! The writer: one thread that owns the write connection and commits concurrent writes together
//! (group commit).
//!
//! Why: with `synchronous = FULL` every commit waits for an fsync of the WAL, and one writer
//! connection commits one transaction at a time. Posts from eight agents would queue behind
//! eight fsyncs. Instead the thread takes every write waiting when it starts a transaction (up to
//! [`MAX_BATCH`]), runs each in its own savepoint, commits once, and only then answers each of
//! them. Nothing of a write's contract is weakened:
//! - each write sees the writes before it in the batch, exactly as if it ran alone after them
//!   (its idempotency check, its sequence number);
//! - a write that fails is rolled back to its savepoint and gets its own error; the others go on;
//! - a write is acknowledged only after the commit that holds it returned (for a durable write:
//!   after the fsync); if the commit fails, every write of the batch gets that failure;
//! - in-memory effects (index updates, caches) are applied in commit order, after the commit.
//!
//! Writes that only derive data the store can rebuild (a finding's vector and its `indexed`
//! status, an agent's `last_active`) are [`Sync::Lazy`]: a batch made only of them is committed
//! without an fsync. If the machine loses power before a later fsync, they are lost and the
//! finding is `pending` again, which the reconciler repairs. In WAL mode a later synced commit
//! makes every earlier frame durable too, so a lazy write never survives a crash that a durable
//! write before it did not.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender};
use std::time::Duration;

use macp_core::{Error, Result};
use rusqlite::Connection;

use crate::db::{Caches, Durability, exec, sql_err};

/// Most writes committed in one transaction.
pub(crate) const MAX_BATCH: usize = 128;

/// How a write must reach the disk before it is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sync {
    /// On disk as the store's [`Durability`] says (fsynced with `Full`).
    Durable,
    /// Derived data the store can rebuild: committed, not necessarily synced (see the module doc).
    Lazy,
}

/// Changes to the in-memory caches that a write makes, applied after its commit, in commit order.
#[derive(Default)]
pub(crate) struct Effects(Vec<Effect>);

/// One cache change.
type Effect = Box<dyn FnOnce(&Caches) + Send>;

/// A write's work: given the connection (inside the transaction), it runs; given none, it only
/// answers its caller with the error passed to the reply.
type Run = Box<dyn FnOnce(Option<&Connection>) -> Done + Send>;

impl Effects {
    /// Runs `f` on the caches once the write is committed (never if it is not).
    pub(crate) fn then(&mut self, f: impl FnOnce(&Caches) + Send + 'static) {
        self.0.push(Box::new(f));
    }
}

/// A write as queued: how it must be synced, and the work to do inside the transaction. Called
/// with no connection, it does not run and answers its caller with the error it is given.
pub(crate) struct Job {
    pub(crate) sync: Sync,
    pub(crate) run: Run,
    /// The store's last write (see [`Job::last`]).
    pub(crate) last: bool,
}

/// A write that ran: whether it succeeded, its effects, and how to answer its caller (with
/// `Some(error)` when the batch's commit failed after the write itself succeeded).
pub(crate) struct Done {
    pub(crate) ok: bool,
    pub(crate) effects: Effects,
    pub(crate) reply: Box<dyn FnOnce(Option<Error>) + Send>,
}

impl Job {
    /// Wraps `f` (run inside the batch's transaction) and the channel its result goes back on.
    pub(crate) fn new<T, F>(sync: Sync, f: F, tx: tokio::sync::oneshot::Sender<Result<T>>) -> Self
    where
        T: Send + 'static,
        F: FnOnce(&Connection, &mut Effects) -> Result<T> + Send + 'static,
    {
        Job {
            sync,
            last: false,
            run: Box::new(move |c| match c {
                Some(c) => {
                    let mut effects = Effects::default();
                    let r = f(c, &mut effects);
                    Done {
                        ok: r.is_ok(),
                        effects,
                        reply: Box::new(move |failed| {
                            let out = match (failed, r) {
                                (Some(e), Ok(_)) => Err(e),
                                (_, r) => r,
                            };
                            // The caller may have gone away (its request was cancelled).
                            let _ = tx.send(out);
                        }),
                    }
                }
                None => Done {
                    ok: false,
                    effects: Effects::default(),
                    reply: Box::new(move |failed| {
                        let e = failed
                            .unwrap_or_else(|| Error::backend("sqlite", true, "the write was not run", None));
                        let _ = tx.send(Err(e));
                    }),
                },
            }),
        }
    }
}

impl Job {
    /// Makes this the store's last write: once it is committed (and its effects applied), the
    /// writer refuses every later write with a retryable error, so nothing can change the
    /// database after what this write's effects saw (see [`crate::snapshot`]). Writes queued
    /// in its batch after it are refused too.
    pub(crate) fn last(mut self) -> Self {
        self.last = true;
        self
    }
}

/// The refusal of a write that reaches a store whose last write was committed.
fn closed() -> Error {
    Error::backend(
        "sqlite",
        true,
        "the store is shutting down and takes no more writes; retry on the next server",
        None,
    )
}

/// How often the checkpointer copies the WAL into the database file.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(200);

/// WAL pages at which the writer checkpoints itself, should the checkpointer fall behind (the
/// default is 1,000).
const WAL_LIMIT_PAGES: i64 = 20_000;

/// Starts the writer thread over `conn`, and a checkpointer thread over `checkpoints` (a
/// connection of its own). Both stop when every sender is dropped.
///
/// Why a checkpointer: SQLite checkpoints on the committing connection by default, so every
/// thousand pages one commit would also copy the WAL into the database file and fsync it. A
/// passive checkpoint from another connection does that work beside the writer, which never
/// waits for it.
pub(crate) fn start(
    conn: Connection,
    checkpoints: Connection,
    caches: Arc<Caches>,
    durability: Durability,
) -> Result<Sender<Job>> {
    let spawn_failed = |e: std::io::Error| {
        Error::backend("sqlite", false, format!("cannot start a store thread: {e}"), None)
    };
    conn.pragma_update(None, "wal_autocheckpoint", WAL_LIMIT_PAGES).map_err(sql_err)?;
    let (tx, rx) = std::sync::mpsc::channel::<Job>();
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    std::thread::Builder::new()
        .name("macp-sqlite-writer".into())
        .spawn(move || {
            Writer { conn, caches, durability, synced: None, closed: false }.run(rx);
            drop(stop);
        })
        .map_err(spawn_failed)?;
    std::thread::Builder::new()
        .name("macp-sqlite-checkpoint".into())
        .spawn(move || {
            // Until the writer has stopped; a failed checkpoint is retried on the next turn.
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(CHECKPOINT_EVERY)
            {
                let _ = checkpoints.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
            }
        })
        .map_err(spawn_failed)?;
    Ok(tx)
}

struct Writer {
    conn: Connection,
    caches: Arc<Caches>,
    durability: Durability,
    /// The `synchronous` setting last applied to the connection.
    synced: Option<bool>,
    /// The store's last write was committed: every write from now on is refused.
    closed: bool,
}

impl Writer {
    fn run(mut self, rx: Receiver<Job>) {
        let mut queue: VecDeque<Job> = VecDeque::new();
        loop {
            if queue.is_empty() {
                match rx.recv() {
                    Ok(j) => queue.push_back(j),
                    Err(_) => return,
                }
            }
            while queue.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(j) => queue.push_back(j),
                    Err(_) => break,
                }
            }
            if self.closed {
                for j in queue.drain(..) {
                    ((j.run)(None).reply)(Some(closed()));
                }
                continue;
            }
            let n = queue.len().min(MAX_BATCH);
            let batch: Vec<Job> = queue.drain(..n).collect();
            let rest = self.commit(batch);
            // Writes the batch did not reach (its transaction was rolled back under it) go first
            // in the next one.
            for j in rest.into_iter().rev() {
                queue.push_front(j);
            }
        }
    }

    /// Sets `synchronous` for a batch: FULL when the store is durable and a write needs it.
    fn sync_for(&mut self, batch: &[Job]) -> std::result::Result<(), rusqlite::Error> {
        let full = self.durability == Durability::Full && batch.iter().any(|j| j.sync == Sync::Durable);
        if self.synced != Some(full) {
            self.conn.pragma_update(None, "synchronous", if full { "FULL" } else { "NORMAL" })?;
            self.synced = Some(full);
        }
        Ok(())
    }

    /// Runs and commits one batch; returns the writes it could not run.
    fn commit(&mut self, batch: Vec<Job>) -> Vec<Job> {
        if let Err(e) =
            self.sync_for(&batch).and_then(|_| exec(&self.conn, "BEGIN IMMEDIATE", []).map(|_| ()))
        {
            let e = sql_err(e);
            for j in batch {
                ((j.run)(None).reply)(Some(copy(&e)));
            }
            return Vec::new();
        }
        let single = batch.len() == 1;
        let mut done: Vec<Done> = Vec::with_capacity(batch.len());
        let mut jobs = batch.into_iter();
        let mut aborted: Option<Error> = None;
        let mut last = false;
        for job in jobs.by_ref() {
            last = job.last;
            let d = self.run_one(job, single);
            let ok = d.ok;
            done.push(d);
            if self.conn.is_autocommit() {
                // SQLite rolled the whole transaction back (disk full, I/O error): nothing of
                // the batch is applied.
                aborted = Some(Error::backend(
                    "sqlite",
                    true,
                    "the write's transaction was rolled back by SQLite (see the error of the write that \
                     caused it); nothing was written, retry",
                    None,
                ));
                break;
            }
            if single && !ok {
                let _ = self.conn.execute_batch("ROLLBACK");
                for d in done {
                    (d.reply)(None);
                }
                return Vec::new();
            }
            if last && ok {
                // Nothing after the last write shares its commit.
                break;
            }
        }
        let mut rest: Vec<Job> = jobs.collect();
        if let Some(e) = aborted {
            for d in done {
                let failed = if d.ok { Some(copy(&e)) } else { None };
                (d.reply)(failed);
            }
            return rest;
        }
        match exec(&self.conn, "COMMIT", []).map(|_| ()) {
            Ok(()) => {
                if last && done.last().is_some_and(|d| d.ok) {
                    self.closed = true;
                    for j in rest.drain(..) {
                        ((j.run)(None).reply)(Some(closed()));
                    }
                }
                for d in done {
                    if d.ok {
                        for effect in d.effects.0 {
                            effect(&self.caches);
                        }
                    }
                    (d.reply)(None);
                }
            }
            Err(e) => {
                let e = sql_err(e);
                if !self.conn.is_autocommit() {
                    let _ = self.conn.execute_batch("ROLLBACK");
                }
                for d in done {
                    (d.reply)(Some(copy(&e)));
                }
            }
        }
        rest
    }

    /// Runs one write in its own savepoint (none needed when it is alone in its transaction),
    /// rolling back to it if the write fails or panics.
    fn run_one(&mut self, job: Job, single: bool) -> Done {
        if !single && let Err(e) = exec(&self.conn, "SAVEPOINT w", []) {
            let d = (job.run)(None);
            let reply = d.reply;
            return Done {
                ok: false,
                effects: Effects::default(),
                reply: Box::new(move |_| reply(Some(sql_err(e)))),
            };
        }
        let conn = &self.conn;
        let mut d = match std::panic::catch_unwind(AssertUnwindSafe(|| (job.run)(Some(conn)))) {
            Ok(d) => d,
            Err(_) => Done {
                ok: false,
                effects: Effects::default(),
                // The job (and its reply channel) was consumed by the panic: its caller sees the
                // channel closed, which `SqliteStore::write` reports as a failed write.
                reply: Box::new(|_| {}),
            },
        };
        if !single && !self.conn.is_autocommit() {
            if !d.ok {
                let _ = exec(&self.conn, "ROLLBACK TO w", []);
            }
            if let Err(e) = exec(&self.conn, "RELEASE w", []) {
                d.ok = false;
                let e = sql_err(e);
                let reply = d.reply;
                d.reply = Box::new(move |_| reply(Some(e)));
            }
        }
        d
    }
}

/// A second error with the same classification and message, for each write of a failed batch.
fn copy(e: &Error) -> Error {
    Error::backend("sqlite", e.is_retryable(), e.to_string(), None)
}
