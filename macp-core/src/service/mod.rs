//! The domain service: one entry point, [`Macp`], that implements every operation behind the
//! MCP tools and holds every domain rule.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> macp_core::Result<()> {
//! use std::sync::Arc;
//! use macp_core::{Macp, Principal, memory::MemoryStore};
//! use macp_core::service::{CreateRoom, JoinRoom, PostFinding};
//!
//! let macp = Macp::builder().store(Arc::new(MemoryStore::new())).build()?;
//! let alice = Principal::new("alice@example.com")?;
//! let room = macp.create_room(&alice, CreateRoom::new("Find why checkout 5xx spiked")).await?;
//! let me = macp.join_room(&alice, JoinRoom::new(room.room_id)).await?;
//! let posted = macp
//!     .post_finding(&alice, PostFinding::new(room.room_id, me.agent_id.clone(), "p99 up since 09:40"))
//!     .await?;
//! assert_eq!(posted.finding.seq, 1);
//! # Ok(()) }
//! ```

mod artifacts;
mod claims;
mod context;
mod decisions;
mod digest;
mod entities;
mod erase;
mod events;
mod findings;
mod portable;
mod retention;
mod rooms;
mod search;
mod sessions;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use serde::Serialize;
use sha2::{Digest, Sha256};

pub use crate::model::Unread;
pub use artifacts::{
    ArtifactConfig, ArtifactOutcome, ArtifactPage, ListArtifacts, ListedArtifact, RegisterArtifact,
    RequestUpload, UploadTicket,
};
pub use claims::{ClaimResult, ClaimWork, DEFAULT_CLAIM_MINUTES, MAX_CLAIM_MINUTES};
pub use context::{
    ContextAgents, ContextEntities, ContextEntity, ContextFinding, ContextFindings, ContextQuery, RoomContext,
};
pub use decisions::{AnswerDecision, AskDecision, MAX_DECISION_OPTIONS};
pub use digest::{
    AgentDigest, DIGEST_ITEMS, DigestEvents, DigestFinding, MAX_DIGEST_FINDINGS, RoomDigest, SummaryQuery,
};
pub use entities::{
    AddEntity, AddRelationship, EntityGraph, EntityOutcome, GraphEntity, GraphQuery, MergeEntities,
    MergeOutcome, RelationshipOutcome,
};
pub use erase::{Erase, Erased};
pub use events::{FeedPage, MAX_FEED_PAGE, RoomWatch, SHARED_POLL, Updates, UpdatesQuery};
pub use findings::{FindingPage, PostFinding, PostedFinding, TimelineQuery};
pub use portable::{BUNDLE_FORMAT, BUNDLE_VERSION, EXPORT_PAGE, ImportReport, RoomBundle, StoredObject};
pub use retention::PurgeReport;
pub use rooms::{
    AgentCounts, CloseRoom, CreateRoom, DeclareStatus, JoinRoom, ListRooms, MAX_OBJECTIVE_CHANGES,
    MAX_RETENTION_DAYS, RoomFilter, RoomPage, RoomSummary, SteerRoom,
};
pub use search::{
    MAX_ROOMS_SEARCHED, ReconcileReport, ReconcilerHandle, RoomLabel, SearchConfig, SearchFindings,
    SearchHit, SearchResults,
};
pub use sessions::{
    DEFAULT_SESSION_IDLE, MAX_SESSION_ID_BYTES, MAX_SESSION_OPENING_BYTES, Session, SessionJoin,
    SessionLookup,
};

use crate::blob::BlobStore;
use crate::error::{Error, Result};
use crate::ids::{AgentId, EntityId, RoomId, Timestamp, UserId};
use crate::limits::{ContextCaps, Limits};
use crate::model::{AgentSession, Room, RoomStatus};
use crate::search::{Embedder, VectorIndex};
use crate::store::{IdempotencyKey, IdempotencyRecord, Store, WriteOperation};

/// How stale an agent's `last_active` may get before a write refreshes it.
pub const LAST_ACTIVE_RESOLUTION_MS: i64 = 1000;

/// Who is calling: the authenticated person (or the single local user when auth is off).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The person; recorded on every write.
    pub user_id: UserId,
}

impl Principal {
    /// A principal for `user_id`.
    pub fn new(user_id: impl Into<String>) -> Result<Self> {
        Ok(Self { user_id: UserId::new(user_id)? })
    }
}

/// Source of the current time, injectable for tests.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Now.
    fn now(&self) -> Timestamp;
}

/// The wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// Builds a [`Macp`] service.
#[derive(Debug, Default)]
pub struct MacpBuilder {
    store: Option<Arc<dyn Store>>,
    limits: Limits,
    context_caps: ContextCaps,
    clock: Option<Arc<dyn Clock>>,
    embedder: Option<Arc<dyn Embedder>>,
    index: Option<Arc<dyn VectorIndex>>,
    search: SearchConfig,
    blobs: Option<Arc<dyn BlobStore>>,
    artifacts: ArtifactConfig,
    stale_after: Option<std::time::Duration>,
    redactor: crate::redact::Redactor,
    retention_days: u32,
    session_idle: Option<std::time::Duration>,
}

/// How long an agent may go without activity before it shows as stale, by default.
pub const DEFAULT_STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(15 * 60);

impl MacpBuilder {
    /// A builder with default limits and caps and no store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The backend (required).
    pub fn store(mut self, store: Arc<dyn Store>) -> Self {
        self.store = Some(store);
        self
    }

    /// Input limits (default: [`Limits::default`]).
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Room-context caps (default: [`ContextCaps::default`]).
    pub fn context_caps(mut self, caps: ContextCaps) -> Self {
        self.context_caps = caps;
        self
    }

    /// The clock (default: [`SystemClock`]).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The embedder for semantic search (needs [`vector_index`](Self::vector_index) too).
    /// Without both, search is keyword-only and findings stay `pending`.
    pub fn embedder(mut self, embedder: Arc<dyn Embedder>) -> Self {
        self.embedder = Some(embedder);
        self
    }

    /// The vector index for semantic search (needs [`embedder`](Self::embedder) too).
    pub fn vector_index(mut self, index: Arc<dyn VectorIndex>) -> Self {
        self.index = Some(index);
        self
    }

    /// Where artifact files live (without one, the artifact operations are unavailable).
    pub fn blob_store(mut self, blobs: Arc<dyn BlobStore>) -> Self {
        self.blobs = Some(blobs);
        self
    }

    /// Artifact limits and URL lifetimes (default: [`ArtifactConfig::default`]).
    pub fn artifact_config(mut self, config: ArtifactConfig) -> Self {
        self.artifacts = config;
        self
    }

    /// How long an agent may go without activity (a write or a join) before the context and
    /// summary show it as stale, whatever it declared (default [`DEFAULT_STALE_AFTER`]).
    pub fn stale_after(mut self, after: std::time::Duration) -> Self {
        self.stale_after = Some(after);
        self
    }

    /// The redactor every write's texts pass (default: every built-in kind on; see
    /// [`crate::redact`]).
    pub fn redactor(mut self, redactor: crate::redact::Redactor) -> Self {
        self.redactor = redactor;
        self
    }

    /// Days a closed room is kept before it is purged, for rooms that do not set their own
    /// (default 0: kept for good). See [`Macp::purge_expired`].
    pub fn default_retention_days(mut self, days: u32) -> Self {
        self.retention_days = days;
        self
    }

    /// How long a protocol session may go unused before it ends (default
    /// [`DEFAULT_SESSION_IDLE`]). See [`Macp::session`].
    pub fn session_idle(mut self, idle: std::time::Duration) -> Self {
        self.session_idle = Some(idle);
        self
    }

    /// Search settings (default: [`SearchConfig::default`]).
    pub fn search_config(mut self, config: SearchConfig) -> Self {
        self.search = config;
        self
    }

    /// Builds the service.
    pub fn build(self) -> Result<Macp> {
        let store = self.store.ok_or_else(|| {
            Error::invalid("store", "MacpBuilder needs a store: call .store(Arc::new(...)) before .build()")
        })?;
        // The room is always shown whole: the budget must hold the largest room the limits
        // admit (two bytes per byte for JSON escaping) plus the totals, caps and cursor.
        let l = &self.limits;
        let min_budget =
            2 * (l.max_objective_bytes + l.max_name_bytes) + l.max_tags * (2 * l.max_tag_bytes + 3) + 2048;
        if self.context_caps.budget_bytes < min_budget {
            return Err(Error::InvalidInput {
                field: "context_caps.budget_bytes".into(),
                message: format!(
                    "the room-context budget must be at least {min_budget} bytes to hold a room at the \
                     input limits (objective, name, tags) and the totals; raise it or lower those limits"
                ),
                limit: Some(min_budget as u64),
            });
        }
        let search = match (self.embedder, self.index) {
            (Some(e), Some(i)) => {
                // The same object: a post's vector can be written with the post.
                let colocated = std::ptr::addr_eq(Arc::as_ptr(&store), Arc::as_ptr(&i));
                Some(search::Search::new(e, i, colocated))
            }
            (None, None) => None,
            _ => {
                return Err(Error::invalid(
                    "vector_index",
                    "semantic search needs both an embedder and a vector index; configure both or neither",
                ));
            }
        };
        Ok(Macp {
            inner: Arc::new(Inner {
                search,
                search_config: self.search,
                blobs: self.blobs,
                artifacts: self.artifacts,
                store,
                caps: self.context_caps,
                clock: self.clock.unwrap_or_else(|| Arc::new(SystemClock)),
                feed: Arc::default(),
                redactor: self.redactor.max_input(self.limits.max_unredacted_bytes()),
                retention_days: self.retention_days,
                limits: self.limits,
                session_idle_ms: millis(self.session_idle.unwrap_or(DEFAULT_SESSION_IDLE)),
                stale_after_ms: millis(self.stale_after.unwrap_or(DEFAULT_STALE_AFTER)),
            }),
        })
    }
}

fn millis(d: std::time::Duration) -> i64 {
    d.as_millis().min(i64::MAX as u128) as i64
}

/// The MACP service. Cheap to clone; share one per process.
#[derive(Clone)]
pub struct Macp {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn Store>,
    search: Option<search::Search>,
    search_config: SearchConfig,
    blobs: Option<Arc<dyn BlobStore>>,
    artifacts: ArtifactConfig,
    limits: Limits,
    caps: ContextCaps,
    clock: Arc<dyn Clock>,
    feed: Arc<events::Feed>,
    stale_after_ms: i64,
    session_idle_ms: i64,
    redactor: crate::redact::Redactor,
    retention_days: u32,
}

impl fmt::Debug for Macp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Macp").field("store", &self.inner.store.name()).finish_non_exhaustive()
    }
}

impl Macp {
    /// A write's texts as they will be stored: through the redactor, before any validation or
    /// length check (see [`crate::redact`]). What was redacted goes back in the answer.
    fn redact<T: crate::redact::Redact>(&self, req: &mut T) -> Result<crate::redact::Redactions> {
        let mut found = crate::redact::Redactions::default();
        req.redact(&self.inner.redactor, &mut found)?;
        Ok(found)
    }

    /// Starts building a service.
    pub fn builder() -> MacpBuilder {
        MacpBuilder::new()
    }

    /// The input limits in force.
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// The room-context caps in force.
    pub fn context_caps(&self) -> &ContextCaps {
        &self.inner.caps
    }

    fn now(&self) -> Timestamp {
        self.inner.clock.now()
    }

    /// The room, if `who` may see it; otherwise `not_found` with advice, as if it did not exist
    /// (a members-only room leaks nothing to others, not even that it exists).
    async fn room(&self, who: &Principal, room_id: RoomId) -> Result<Room> {
        self.inner.store.get_room(room_id).await?.filter(|r| r.admits(&who.user_id)).ok_or_else(|| {
            Error::not_found_hint("room", room_id, "check the room_id, or call list_rooms to see rooms")
        })
    }

    /// The room, which `who` may see and which must be active (writes).
    async fn writable_room(&self, who: &Principal, room_id: RoomId) -> Result<Room> {
        let room = self.room(who, room_id).await?;
        if room.status == RoomStatus::Closed {
            return Err(Error::RoomClosed { room_id: room_id.to_string() });
        }
        Ok(room)
    }

    /// The session of the agent acting in a write: named (the MCP server names the agent its
    /// session joined with when a call does not), joined to the room, and the caller's.
    async fn agent_session(
        &self,
        who: &Principal,
        room_id: RoomId,
        agent_id: Option<&AgentId>,
    ) -> Result<AgentSession> {
        let agent_id = agent_id.ok_or_else(|| Error::NotJoined {
            message: format!(
                "no agent named for this write in room `{room_id}`: join the room with join_room, then \
                 pass that agent_id (an MCP session uses the agent it joined with)"
            ),
        })?;
        let session =
            self.inner.store.get_agent(room_id, agent_id).await?.ok_or_else(|| Error::NotJoined {
                message: format!(
                    "agent `{agent_id}` has not joined room `{room_id}`; call join_room first, then retry"
                ),
            })?;
        if session.user_id != who.user_id {
            return Err(Error::PermissionDenied {
                message: format!(
                    "agent `{agent_id}` in room `{room_id}` belongs to another user; act through an agent you joined"
                ),
            });
        }
        Ok(session)
    }

    /// Records activity after a successful write. `last_active` is advisory and kept to
    /// [`LAST_ACTIVE_RESOLUTION_MS`]: refreshing it on every write would double the commits of
    /// a busy agent. A failure here must not turn an applied write into an error the client
    /// would retry, so it is ignored.
    async fn touch(&self, session: &AgentSession) {
        let now = self.now();
        if now.as_millis() - session.last_active.as_millis() < LAST_ACTIVE_RESOLUTION_MS {
            return;
        }
        let update = crate::store::AgentUpdate { last_active: Some(now), ..Default::default() };
        let _ = self.inner.store.update_agent(session.room_id, &session.agent_id, &update, None).await;
    }

    /// The alias map of a room's merged entities.
    async fn aliases(&self, room_id: RoomId) -> Result<Aliases> {
        Ok(Aliases::new(self.inner.store.entity_aliases(room_id).await?))
    }
}

/// A room's merge aliases: resolves any entity id to its canonical one through `merged_into`
/// chains, and lists the ids merged into a canonical entity.
#[derive(Debug, Clone, Default)]
pub(crate) struct Aliases {
    merged_into: HashMap<EntityId, EntityId>,
}

impl Aliases {
    pub(crate) fn new(pairs: Vec<(EntityId, EntityId)>) -> Self {
        Self { merged_into: pairs.into_iter().collect() }
    }

    /// Follows `merged_into` to the end. The store's merge precondition (neither side merged)
    /// makes cycles impossible; the step bound turns a corrupted store into an error instead of
    /// a hang.
    pub(crate) fn resolve(&self, id: EntityId) -> Result<EntityId> {
        let mut cur = id;
        for _ in 0..=self.merged_into.len() {
            match self.merged_into.get(&cur) {
                Some(next) => cur = *next,
                None => return Ok(cur),
            }
        }
        Err(Error::backend(
            "core",
            false,
            format!("entity alias chain from `{id}` loops; the store is inconsistent"),
            None,
        ))
    }

    /// Every id (including `canonical` itself) that resolves to `canonical`.
    pub(crate) fn members(&self, canonical: EntityId) -> Vec<EntityId> {
        let mut out = vec![canonical];
        for k in self.merged_into.keys() {
            if *k != canonical && self.resolve(*k).ok() == Some(canonical) {
                out.push(*k);
            }
        }
        out.sort();
        out
    }

    /// Every id that resolves to `canonical`: itself and the entities merged into it, directly
    /// or through others.
    pub(crate) fn known_as(&self, canonical: EntityId) -> Vec<EntityId> {
        let mut out = vec![canonical];
        out.extend(
            self.merged_into.keys().filter(|k| self.resolve(**k).is_ok_and(|r| r == canonical)).copied(),
        );
        out
    }

    /// Resolves each id, deduplicating while keeping the first occurrence's position.
    pub(crate) fn resolve_all(&self, ids: &[EntityId]) -> Result<Vec<EntityId>> {
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let r = self.resolve(*id)?;
            if !out.contains(&r) {
                out.push(r);
            }
        }
        Ok(out)
    }
}

/// A digest of a normalised request, used to tell a retry (same payload) from a reused key
/// (different payload).
pub(crate) fn fingerprint<T: Serialize>(operation: WriteOperation, payload: &T) -> String {
    digest(operation.as_str(), payload)
}

/// Hex SHA-256 of a tag and the JSON of `payload`.
pub(crate) fn digest<T: Serialize>(tag: &str, payload: &T) -> String {
    let mut h = Sha256::new();
    h.update(tag.as_bytes());
    h.update([0]);
    // Serialising our own plain structs cannot fail; an empty payload would only make two
    // requests compare equal if both failed, which the types rule out.
    h.update(serde_json::to_vec(payload).unwrap_or_default());
    let digest = h.finalize();
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// The idempotency key of a write, bound to its operation and payload, if the request carries one.
pub(crate) fn idempotency_key(
    key: Option<&String>,
    operation: WriteOperation,
    fingerprint: &str,
    result_id: String,
    at: Timestamp,
) -> Option<IdempotencyKey> {
    key.map(|k| IdempotencyKey {
        key: k.clone(),
        operation,
        fingerprint: fingerprint.to_owned(),
        result_id,
        created_at: at,
    })
}

/// Checks that a replayed key was first used for the same operation with the same payload.
pub(crate) fn check_replay(
    record: &IdempotencyRecord,
    operation: WriteOperation,
    fingerprint: &str,
) -> Result<()> {
    if record.operation != operation {
        return Err(Error::conflict(format!(
            "idempotency_key `{}` was already used for {} in this room; use a fresh key for each distinct write",
            record.key,
            record.operation.as_str()
        )));
    }
    if record.fingerprint != fingerprint {
        return Err(Error::conflict(format!(
            "idempotency_key `{}` was already used with a different payload; a retry must repeat the \
             request exactly, and a new write needs a fresh key",
            record.key
        )));
    }
    Ok(())
}
