//! The room's feed: `get_updates` (findings and every other change, under one cursor), each
//! agent's read position, unread counts, and waiting until something happens.
//!
//! # Waking waiters
//! Every write that appends an event bumps the room's [`watch`] channel in this process after
//! it commits; a waiting `get_updates` (and an MCP subscription) re-reads the store when it
//! moves. On a store shared by several processes ([`Capabilities::shared_across_processes`]),
//! writes made elsewhere are seen by one poller per room that has waiters, reading the room's
//! last event `seq` every [`SHARED_POLL`]: the read cost is per room, not per waiter, and a
//! room nobody waits on costs nothing.
//!
//! [`Capabilities::shared_across_processes`]: crate::store::Capabilities::shared_across_processes

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::findings::resolve_refs;
use super::{Macp, Principal};
use crate::cursor;
use crate::error::{Error, Result};
use crate::ids::{AgentId, RoomId};
use crate::model::{Event, EventKind, Finding, Unread};
use crate::store::Store;
use crate::validate;

/// How often a room with waiters is polled for writes made by other processes, on a shared
/// store.
pub const SHARED_POLL: Duration = Duration::from_millis(500);

/// `get_updates`: what changed in the room since your cursor (or since your read position).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct UpdatesQuery {
    /// The room.
    pub room_id: RoomId,
    /// The `cursor` from your previous get_updates or get_room_context. Omit it to continue
    /// from your read position (what you last acknowledged; the start of the room if nothing).
    #[serde(default)]
    pub cursor: Option<String>,
    /// Only these kinds of change, e.g. ["finding_posted"] for findings only; all kinds when
    /// omitted.
    #[serde(default)]
    pub kinds: Vec<EventKind>,
    /// Page size (default 100, at most 500).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Only what concerns your agent: findings that mention it or answer one of its findings
    /// (no other changes). The cursor still moves past everything else.
    #[serde(default)]
    pub about_me: bool,
    /// Acknowledge everything before `cursor` (you have processed it): your read position moves
    /// there, never back. Nothing is consumed by reading; only this moves the position.
    #[serde(default)]
    pub ack: bool,
    /// When nothing is new, wait up to this many seconds (at most 25) for something to happen,
    /// and answer as soon as it does. Use it instead of sleeping between polls.
    #[serde(default)]
    pub wait_seconds: Option<u64>,
    /// Which of your agents (its read position); defaults to the one you joined with.
    #[serde(default)]
    pub agent_id: Option<AgentId>,
}

impl UpdatesQuery {
    /// Updates of `room_id` from the start (or from `agent`'s read position, see
    /// [`UpdatesQuery::agent`]).
    pub fn new(room_id: RoomId) -> Self {
        Self {
            room_id,
            cursor: None,
            kinds: Vec::new(),
            limit: None,
            about_me: false,
            ack: false,
            wait_seconds: None,
            agent_id: None,
        }
    }

    /// From this cursor (a `String`, or an `Option` of one: `None` is the read position).
    pub fn cursor(mut self, cursor: impl Into<Option<String>>) -> Self {
        self.cursor = cursor.into();
        self
    }

    /// Page size.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Only these kinds.
    pub fn kinds(mut self, kinds: impl IntoIterator<Item = EventKind>) -> Self {
        self.kinds = kinds.into_iter().collect();
        self
    }

    /// As this agent (whose read position is used and acknowledged).
    pub fn agent(mut self, agent_id: AgentId) -> Self {
        self.agent_id = Some(agent_id);
        self
    }

    /// Only what concerns the agent.
    pub fn about_me(mut self) -> Self {
        self.about_me = true;
        self
    }

    /// Acknowledging everything before the cursor.
    pub fn ack(mut self) -> Self {
        self.ack = true;
        self
    }

    /// Waiting up to `seconds` when nothing is new.
    pub fn wait(mut self, seconds: u64) -> Self {
        self.wait_seconds = Some(seconds);
        self
    }
}

/// What changed since a cursor, and the cursor to continue from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct Updates {
    /// Findings posted, whole, in commit order.
    pub findings: Vec<Finding>,
    /// Every other change (agents joining, statuses, entities, merges, relationships,
    /// artifacts, the room closing), in commit order. Read the objects by id when you need them.
    pub events: Vec<Event>,
    /// Pass to the next get_updates. Never moves past a change that was not returned.
    pub cursor: String,
    /// More is already waiting: call again right away.
    pub has_more: bool,
    /// Your read position after this call, when the call was made as an agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_position: Option<String>,
}

/// A page of the room's feed read backwards: the latest changes first, older ones on demand
/// (a person's view of a large room never loads it whole).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct FeedPage {
    /// The changes, oldest first (every kind, findings' events included).
    pub events: Vec<Event>,
    /// The findings those events posted, whole (entity refs resolved).
    pub findings: Vec<Finding>,
    /// Pass as `before` for the page before this one; absent at the start of the feed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub older: Option<u64>,
    /// On the first page: the cursor to poll the changes after it (get_updates).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

/// The largest [`FeedPage`].
pub const MAX_FEED_PAGE: usize = 500;

/// Waits for changes to one room; see [`Macp::watch`].
#[derive(Debug)]
pub struct RoomWatch {
    rx: watch::Receiver<u64>,
}

impl RoomWatch {
    /// Resolves when something changed in the room since the watch was made or this last
    /// resolved. Read the room's updates after it; a change may be reported more than once,
    /// never missed.
    pub async fn changed(&mut self) {
        if self.rx.changed().await.is_err() {
            // The service is gone: nothing will change again.
            std::future::pending::<()>().await;
        }
    }
}

/// The per-process wake-up channels, one per room with a watcher.
#[derive(Debug, Default)]
pub(crate) struct Feed {
    rooms: Mutex<HashMap<RoomId, watch::Sender<u64>>>,
}

impl Feed {
    fn rooms(&self) -> std::sync::MutexGuard<'_, HashMap<RoomId, watch::Sender<u64>>> {
        self.rooms.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Something committed in `room_id`: wake its watchers.
    pub(crate) fn notify(&self, room_id: RoomId) {
        let mut rooms = self.rooms();
        if let Some(tx) = rooms.get(&room_id) {
            if tx.receiver_count() == 0 {
                rooms.remove(&room_id);
            } else {
                tx.send_modify(|v| *v += 1);
            }
        }
    }

    /// A receiver for `room_id`, and whether it is the room's first (the caller starts the
    /// shared-store poller then).
    fn subscribe(&self, room_id: RoomId) -> (watch::Receiver<u64>, bool) {
        let mut rooms = self.rooms();
        // Forget rooms nobody watches any more, so the map stays as small as the set of
        // watched rooms.
        rooms.retain(|_, tx| tx.receiver_count() > 0);
        match rooms.get(&room_id) {
            Some(tx) => (tx.subscribe(), false),
            None => {
                let (tx, rx) = watch::channel(0);
                rooms.insert(room_id, tx);
                (rx, true)
            }
        }
    }

    fn sender(&self, room_id: RoomId) -> Option<watch::Sender<u64>> {
        self.rooms().get(&room_id).cloned()
    }
}

/// Polls a shared store for `room_id`'s last event while anyone watches it here.
fn spawn_poller(feed: Arc<Feed>, store: Arc<dyn Store>, room_id: RoomId) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
    rt.spawn(async move {
        let mut last = store.last_event_seq(room_id).await.unwrap_or(0);
        loop {
            tokio::time::sleep(SHARED_POLL).await;
            let Some(tx) = feed.sender(room_id) else { return };
            if tx.receiver_count() == 0 {
                return;
            }
            // A failed read is retried at the next tick; waiters still time out on their own.
            if let Ok(seq) = store.last_event_seq(room_id).await
                && seq > last
            {
                last = seq;
                tx.send_modify(|v| *v += 1);
            }
        }
    });
}

/// The feed cursor positioned after event `seq`.
pub(crate) fn feed_cursor(room_id: RoomId, seq: u64) -> String {
    cursor::encode("e1", &[&room_id.to_string(), &seq.to_string()])
}

fn decode_feed_cursor(room_id: RoomId, c: &str) -> Result<u64> {
    if cursor::decode("cursor", "u1", c, 2).is_ok() {
        return Err(Error::invalid(
            "cursor",
            "this cursor was issued before rooms had an event feed and counts findings, not changes; \
             omit it once to continue from your read position (or from the start if you never \
             acknowledged), then use the cursor returned",
        ));
    }
    let p = cursor::decode("cursor", "e1", c, 2)?;
    if p[0] != room_id.to_string() {
        return Err(Error::invalid(
            "cursor",
            "this cursor belongs to another room; use the cursor returned for this room, or omit it",
        ));
    }
    p[1].parse().map_err(|_| Error::invalid("cursor", "malformed cursor"))
}

impl Macp {
    /// The `limit` changes (default 100, at most [`MAX_FEED_PAGE`]) before feed position
    /// `before` (exclusive), or the latest ones when `before` is `None`.
    pub async fn feed_page(
        &self,
        who: &Principal,
        room_id: RoomId,
        before: Option<u64>,
        limit: Option<usize>,
    ) -> Result<FeedPage> {
        let limit = validate::page_size("limit", limit, 100, MAX_FEED_PAGE)?;
        self.room(who, room_id).await?;
        let store = &self.inner.store;
        let head = store.last_event_seq(room_id).await?;
        let end = before.map_or(head, |b| b.saturating_sub(1).min(head));
        let from = end.saturating_sub(limit as u64);
        let events = store.list_events(room_id, from, &[], (end - from) as usize).await?;
        let ids: Vec<_> = events
            .iter()
            .filter(|e| e.kind == EventKind::FindingPosted)
            .filter_map(|e| e.finding_id)
            .collect();
        let mut findings = store.get_findings(room_id, &ids).await?;
        findings.sort_by_key(|f| f.seq);
        resolve_refs(&self.aliases(room_id).await?, &mut findings)?;
        Ok(FeedPage {
            events,
            findings,
            older: (from > 0).then_some(from + 1),
            cursor: before.is_none().then(|| feed_cursor(room_id, head)),
        })
    }

    /// What changed in a room after `cursor` (or after the agent's read position), in commit
    /// order: the findings posted, whole, and every other change as a small event. Never skips
    /// and never repeats a change across calls (see [`crate::cursor`]). With `wait_seconds`, an
    /// empty answer waits until something matching commits or the time is up. With `ack`, the
    /// agent's read position moves to `cursor` first.
    pub async fn updates(&self, who: &Principal, q: UpdatesQuery) -> Result<Updates> {
        let l = &self.inner.limits;
        self.room(who, q.room_id).await?;
        let limit = validate::page_size("limit", q.limit, l.default_updates_page, l.max_updates_page)?;
        let wait = match q.wait_seconds {
            Some(s) if s > l.max_wait_seconds => {
                return Err(Error::InvalidInput {
                    field: "wait_seconds".into(),
                    message: format!(
                        "wait at most {} seconds per call; call again to keep waiting",
                        l.max_wait_seconds
                    ),
                    limit: Some(l.max_wait_seconds),
                });
            }
            s => Duration::from_secs(s.unwrap_or(0)),
        };
        let given = q.cursor.as_deref().map(|c| decode_feed_cursor(q.room_id, c)).transpose()?;
        let store = &self.inner.store;
        // The agent is needed to acknowledge, and to start from its read position.
        let agent = if q.ack || q.about_me || (given.is_none() && q.agent_id.is_some()) {
            let session = self.agent_session(who, q.room_id, q.agent_id.as_ref()).await?;
            // Reading its feed as itself is activity: an agent that only listens is not stale.
            self.touch(&session).await;
            Some(session.agent_id)
        } else {
            None
        };
        let mut position = None;
        if let Some(a) = agent.as_ref().filter(|_| q.ack || given.is_none()) {
            if q.ack {
                let to = given.ok_or_else(|| {
                    Error::invalid(
                        "ack",
                        "ack acknowledges everything before `cursor`: pass the cursor you processed",
                    )
                })?;
                // An ack that moves nothing (the usual case in a loop that acks each page it
                // reads again) costs a read, not a write.
                let now = store.read_position(q.room_id, a).await?;
                position = Some(if to > now {
                    // Never past the feed's head, whatever a (hand-made) cursor says: a read
                    // position ahead of the feed would hide what comes next.
                    let to = to.min(store.last_event_seq(q.room_id).await?);
                    store.advance_read_position(q.room_id, a, to.max(now)).await?
                } else {
                    now
                });
            } else {
                position = Some(store.read_position(q.room_id, a).await?);
            }
        }
        let after = given.or(position).unwrap_or(0);

        // Subscribe before the first read, so a commit between the read and the wait still
        // wakes this call.
        let mut watch = (!wait.is_zero()).then(|| self.watch(q.room_id));
        let deadline = tokio::time::Instant::now() + wait;
        let mut after = after;
        loop {
            let mut page = self.page(q.room_id, after, &q.kinds, limit).await?;
            if q.about_me
                && let Some(me) = &agent
            {
                self.keep_about(q.room_id, me, &mut page).await?;
                if page.findings.is_empty() && page.has_more {
                    // Nothing for this agent in a full page: read on rather than answer empty.
                    after = decode_feed_cursor(q.room_id, &page.cursor)?;
                    continue;
                }
            }
            let empty = page.findings.is_empty() && page.events.is_empty();
            let Some(w) = watch.as_mut().filter(|_| empty) else {
                return Ok(Updates { read_position: position.map(|p| feed_cursor(q.room_id, p)), ..page });
            };
            // Nothing up to the page's cursor matched: wait from there.
            after = decode_feed_cursor(q.room_id, &page.cursor)?;
            if tokio::time::timeout_at(deadline, w.changed()).await.is_err() {
                return Ok(Updates { read_position: position.map(|p| feed_cursor(q.room_id, p)), ..page });
            }
            // Woken: still someone who may see the room (not removed from its members since)?
            self.room(who, q.room_id).await?;
        }
    }

    /// One page of the feed after `after`.
    async fn page(&self, room_id: RoomId, after: u64, kinds: &[EventKind], limit: usize) -> Result<Updates> {
        let store = &self.inner.store;
        // Read the head first: every event up to it is visible to the list that follows, so
        // when the list ends before `limit` the cursor may move to the head even if the
        // filter matched nothing there.
        let head = store.last_event_seq(room_id).await?;
        let mut events = store.list_events(room_id, after, kinds, limit + 1).await?;
        let has_more = events.len() > limit;
        events.truncate(limit);
        let last = events.last().map_or(after, |e| e.seq);
        let next = if has_more { last } else { last.max(head).max(after) };
        let posted: Vec<_> = events
            .iter()
            .filter(|e| e.kind == EventKind::FindingPosted)
            .filter_map(|e| e.finding_id)
            .collect();
        let mut findings = Vec::new();
        if !posted.is_empty() {
            let mut by_id: HashMap<_, _> =
                store.get_findings(room_id, &posted).await?.into_iter().map(|f| (f.finding_id, f)).collect();
            findings = posted.iter().filter_map(|id| by_id.remove(id)).collect();
            resolve_refs(&self.aliases(room_id).await?, &mut findings)?;
        }
        events.retain(|e| e.kind != EventKind::FindingPosted);
        Ok(Updates { findings, events, cursor: feed_cursor(room_id, next), has_more, read_position: None })
    }

    /// Keeps in `page` only the findings that mention `me` or answer one of its findings.
    async fn keep_about(&self, room_id: RoomId, me: &AgentId, page: &mut Updates) -> Result<()> {
        page.events.clear();
        let targets: Vec<_> = page.findings.iter().filter_map(|f| f.reply_to).collect();
        let mine: Vec<_> = if targets.is_empty() {
            Vec::new()
        } else {
            let found = self.inner.store.get_findings(room_id, &targets).await?;
            found.into_iter().filter(|f| &f.agent_id == me).map(|f| f.finding_id).collect()
        };
        page.findings.retain(|f| f.mentions.contains(me) || f.reply_to.is_some_and(|r| mine.contains(&r)));
        Ok(())
    }

    /// What `agent_id` has not acknowledged in `room_id`.
    pub(crate) async fn unread(&self, room_id: RoomId, agent_id: &AgentId) -> Result<Unread> {
        let store = &self.inner.store;
        let position = store.read_position(room_id, agent_id).await?;
        Ok(Unread::of(store.count_events(room_id, position).await?))
    }

    /// A watch on a room: [`RoomWatch::changed`] resolves after each change committed to it
    /// (by this process, or by another process sharing the store, within [`SHARED_POLL`]).
    /// It carries no content and checks no one: read the room with a call that takes the
    /// caller (e.g. [`Macp::last_event_seq`]) before and after each wake.
    /// For adapters that push (MCP resource subscriptions); agents call `get_updates` with
    /// `wait_seconds` instead.
    pub fn watch(&self, room_id: RoomId) -> RoomWatch {
        let (rx, first) = self.inner.feed.subscribe(room_id);
        if first && self.inner.store.capabilities().shared_across_processes {
            spawn_poller(self.inner.feed.clone(), self.inner.store.clone(), room_id);
        }
        RoomWatch { rx }
    }

    /// The position of the room's newest change in its feed (0 when it has none): how
    /// far a [`RoomWatch`] has to go. Adapters that push per change count with it; it answers
    /// `not_found` once `who` may no longer see the room (removed from its members, purged),
    /// which is when a push must stop.
    pub async fn last_event_seq(&self, who: &Principal, room_id: RoomId) -> Result<u64> {
        self.room(who, room_id).await?;
        self.inner.store.last_event_seq(room_id).await
    }

    /// Wakes the room's watchers after a write committed.
    pub(crate) fn changed(&self, room_id: RoomId) {
        self.inner.feed.notify(room_id);
    }
}
