//! Per-room in-memory indexes (keywords, vectors): loaded from the database on first use, kept
//! current by the writer, and read as snapshots.
//!
//! - A search takes a snapshot (`Arc<I>`) and scores it without holding any lock; the writer
//!   applies each committed change to the cached index with `Arc::make_mut`. The index types
//!   share all but their last segment between clones, so a write landing while a search holds a
//!   snapshot copies that segment only, never the room.
//! - A room is loaded once, by a task of its own, whoever asked first: later askers wait for
//!   it rather than loading again, and a caller that gives up (a cancelled request) does not
//!   abandon the load. Changes committed while the load reads the database are queued and
//!   applied to the loaded index before it is published: an index is never missing a write
//!   acknowledged before a search began. [`RoomIndex::apply`] must therefore accept a change the
//!   load already saw (keyword adds are ordered by sequence number; vector puts overwrite).

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use macp_core::{Error, Result, RoomId};

use crate::db::lock;

/// An in-memory index of one room.
pub(crate) trait RoomIndex: Clone + Send + Sync + 'static {
    /// A committed change.
    type Op: Send + 'static;

    /// Applies `op`. Applying a change the index already reflects must leave it unchanged.
    fn apply(&mut self, op: Self::Op);
}

enum Slot<I: RoomIndex> {
    Loading { token: u64, pending: Vec<I::Op>, done: tokio::sync::watch::Sender<bool> },
    Ready(Arc<I>),
}

/// The loaded indexes of every room a search has touched.
pub(crate) struct RoomIndexes<I: RoomIndex> {
    rooms: Mutex<HashMap<RoomId, Slot<I>>>,
    tokens: AtomicU64,
}

impl<I: RoomIndex> Default for RoomIndexes<I> {
    fn default() -> Self {
        Self { rooms: Mutex::new(HashMap::new()), tokens: AtomicU64::new(0) }
    }
}

impl<I: RoomIndex> RoomIndexes<I> {
    /// The room's index: the cached one, or the one being loaded, or a load started now with
    /// `load` (which runs as a task of its own and must read the room's committed state).
    pub(crate) async fn get<F, Fut>(&self, room: RoomId, load: F) -> Result<Arc<I>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<I>> + Send + 'static,
    {
        let token = loop {
            let mut wait = {
                let mut rooms = lock(&self.rooms);
                match rooms.get(&room) {
                    Some(Slot::Ready(ix)) => return Ok(ix.clone()),
                    Some(Slot::Loading { done, .. }) => done.subscribe(),
                    None => {
                        let token = self.tokens.fetch_add(1, Ordering::Relaxed);
                        let (done, _) = tokio::sync::watch::channel(false);
                        rooms.insert(room, Slot::Loading { token, pending: Vec::new(), done });
                        break token;
                    }
                }
            };
            // Loaded (or failed, then this caller loads): look again.
            let _ = wait.wait_for(|d| *d).await;
        };
        let loaded = match tokio::spawn(load()).await {
            Ok(r) => r,
            Err(e) => {
                Err(Error::backend("sqlite", true, format!("loading the room's index failed: {e}"), None))
            }
        };
        let mut rooms = lock(&self.rooms);
        match rooms.remove(&room) {
            Some(Slot::Loading { token: t, pending, done }) if t == token => {
                let out = loaded.map(|mut ix| {
                    for op in pending {
                        ix.apply(op);
                    }
                    let ix = Arc::new(ix);
                    rooms.insert(room, Slot::Ready(ix.clone()));
                    ix
                });
                let _ = done.send(true);
                out
            }
            // The cache was cleared meanwhile (a reindex): answer this caller, cache nothing.
            other => {
                if let Some(o) = other {
                    rooms.insert(room, o);
                }
                loaded.map(Arc::new)
            }
        }
    }

    /// Applies a committed change to the room's index, if it is cached or being loaded.
    pub(crate) fn apply(&self, room: RoomId, op: I::Op) {
        let mut rooms = lock(&self.rooms);
        match rooms.get_mut(&room) {
            Some(Slot::Ready(ix)) => Arc::make_mut(ix).apply(op),
            Some(Slot::Loading { pending, .. }) => pending.push(op),
            None => {}
        }
    }

    /// Every room's loaded index (rooms still loading are left out).
    pub(crate) fn ready(&self) -> Vec<(RoomId, Arc<I>)> {
        lock(&self.rooms)
            .iter()
            .filter_map(|(room, slot)| match slot {
                Slot::Ready(ix) => Some((*room, ix.clone())),
                Slot::Loading { .. } => None,
            })
            .collect()
    }

    /// Holds `ix` as the room's loaded index (read back from a snapshot, before any search).
    pub(crate) fn insert_ready(&self, room: RoomId, ix: Arc<I>) {
        lock(&self.rooms).insert(room, Slot::Ready(ix));
    }

    /// Drops the room's index (a purged room). A load in flight is answered but not kept.
    pub(crate) fn forget(&self, room: RoomId) {
        if let Some(Slot::Loading { done, .. }) = lock(&self.rooms).remove(&room) {
            let _ = done.send(true);
        }
    }

    /// Drops every room's index (they load again on next use).
    pub(crate) fn clear(&self) {
        let mut rooms = lock(&self.rooms);
        for (_, slot) in rooms.drain() {
            if let Slot::Loading { done, .. } = slot {
                let _ = done.send(true);
            }
        }
    }
}
