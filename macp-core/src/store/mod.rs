//! The storage seam: what a backend must store and fetch, and with which guarantees.
//!
//! A backend implements the nine traits below and the umbrella [`Store`]. It holds no domain
//! rules: validation, normalisation, alias resolution, idempotency fingerprints, caps and
//! cursors all live in [`crate::Macp`]. What a backend *does* owe is precise storage semantics,
//! written as a contract on each method: which writes are atomic, what order reads return, and
//! what a lost race returns. The conformance suite in `macp-testkit` checks every contract
//! through the service, so a backend that passes it behaves like the reference
//! [`MemoryStore`](crate::memory::MemoryStore).
//!
//! # Common contract
//! - Every method is scoped to one room (but [`SessionStore`]'s, which span rooms); nothing may
//!   leak across rooms.
//! - "Atomic" means all-or-nothing and isolated: a concurrent reader sees all of the write or
//!   none of it, and two concurrent atomic writes behave as if run one after the other.
//! - An acknowledged write is durable to the degree [`Capabilities::durable`] says.
//! - Transient failures (busy, throttled, 5xx) are `Error::Backend { retryable: true, .. }`;
//!   the store must not have applied a partial write when it returns one.
//! - Idempotency keys ([`IdempotencyKey`]) are unique per `(room_id, key)` across all
//!   write operations. A write that carries a idempotency either applies *and* records the idempotency
//!   atomically, or applies nothing and returns [`Write::Replayed`] with the record that holds
//!   the key. The store does not compare fingerprints; the service does.

mod agents;
mod artifacts;
mod claims;
mod decisions;
mod entities;
mod events;
mod findings;
mod rooms;
mod sessions;

pub use agents::*;
pub use artifacts::*;
pub use claims::*;
pub use decisions::*;
pub use entities::*;
pub use events::*;
pub use findings::*;
pub use rooms::*;
pub use sessions::*;

use std::fmt::Debug;

use crate::ids::Timestamp;

/// What a backend guarantees beyond the contract every store meets. The conformance suite
/// checks what a backend declares (see `macp-testkit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Capabilities {
    /// Acknowledged writes survive the process being killed and the store being reopened.
    pub durable: bool,
    /// Several processes (or hosts) may serve the same store at once with every guarantee
    /// intact. A server on a store without it must be the data's only writer (`macp serve`
    /// locks a local data directory for that reason).
    pub shared_across_processes: bool,
}

impl Capabilities {
    /// Everything off.
    pub const fn none() -> Self {
        Self { durable: false, shared_across_processes: false }
    }

    /// With [`Capabilities::durable`] set.
    pub const fn with_durable(mut self, v: bool) -> Self {
        self.durable = v;
        self
    }

    /// With [`Capabilities::shared_across_processes`] set.
    pub const fn with_shared_across_processes(mut self, v: bool) -> Self {
        self.shared_across_processes = v;
        self
    }
}

/// Which write an idempotency key was first used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WriteOperation {
    /// `post_finding`; `result_id` is the finding id.
    PostFinding,
    /// `add_entity`; `result_id` is the entity id created or attached to.
    AddEntity,
    /// `add_relationship`; `result_id` is [`RelationshipKey::encode`].
    AddRelationship,
    /// `register_artifact`; `result_id` is the artifact id.
    RegisterArtifact,
}

impl WriteOperation {
    /// Stable name, as stored.
    pub fn as_str(&self) -> &'static str {
        match self {
            WriteOperation::PostFinding => "post_finding",
            WriteOperation::AddEntity => "add_entity",
            WriteOperation::AddRelationship => "add_relationship",
            WriteOperation::RegisterArtifact => "register_artifact",
        }
    }

    /// Parses a stored name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "post_finding" => WriteOperation::PostFinding,
            "add_entity" => WriteOperation::AddEntity,
            "add_relationship" => WriteOperation::AddRelationship,
            "register_artifact" => WriteOperation::RegisterArtifact,
            _ => return None,
        })
    }
}

/// A key a write wants to idempotency, so that a retry with the same key writes nothing new.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey {
    /// The client's key.
    pub key: String,
    /// The operation it is used for.
    pub operation: WriteOperation,
    /// A digest of the normalised request, computed by the service.
    pub fingerprint: String,
    /// The id of what this write produces (stored as the record's `result_id`).
    pub result_id: String,
    /// When the idempotency is made.
    pub created_at: Timestamp,
}

/// A stored idempotency idempotency.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyRecord {
    /// The client's key.
    pub key: String,
    /// The operation that first used it.
    pub operation: WriteOperation,
    /// The digest of that first request.
    pub fingerprint: String,
    /// What the first request produced.
    pub result_id: String,
    /// When.
    pub created_at: Timestamp,
}

impl IdempotencyKey {
    /// The record this idempotency becomes once stored.
    pub fn to_record(&self) -> IdempotencyRecord {
        IdempotencyRecord {
            key: self.key.clone(),
            operation: self.operation,
            fingerprint: self.fingerprint.clone(),
            result_id: self.result_id.clone(),
            created_at: self.created_at,
        }
    }
}

/// The outcome of a write that may carry an idempotency idempotency.
#[derive(Debug, Clone, PartialEq)]
pub enum Write<T> {
    /// The write was applied (and the idempotency, if any, recorded with it).
    Applied(T),
    /// The key was already used: nothing was written.
    Replayed(IdempotencyRecord),
}

/// The outcome of an insert that does not overwrite.
#[derive(Debug, Clone, PartialEq)]
pub enum Insert<T> {
    /// The record was new and is now stored.
    Inserted(T),
    /// A record with the same key already existed; it is returned unchanged.
    Existing(T),
}

/// A complete backend: every store trait, plus its name and capabilities.
///
/// The service holds it as `Arc<dyn Store>`.
pub trait Store:
    RoomStore
    + AgentStore
    + FindingStore
    + EntityStore
    + ArtifactStore
    + EventStore
    + ClaimStore
    + DecisionStore
    + SessionStore
    + Debug
    + Send
    + Sync
    + 'static
{
    /// Short name used in errors and logs (`memory`, `sqlite`, …).
    fn name(&self) -> &'static str;

    /// What this backend supports.
    fn capabilities(&self) -> Capabilities;
}
