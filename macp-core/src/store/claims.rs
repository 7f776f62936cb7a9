//! Claims on work.

use async_trait::async_trait;

use super::*;
use crate::error::Result;
use crate::ids::{AgentId, RoomId, Timestamp};
use crate::model::{Claim, Event};

/// The outcome of [`ClaimStore::put_claim`].
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimOutcome {
    /// The claim is stored: new, renewed by its holder, or taking over a released or lapsed one.
    Claimed(Claim),
    /// Another agent holds the work: nothing was written. The holder's claim.
    Held(Claim),
}

/// Claims on work, one per `(room_id, key)`.
#[async_trait]
pub trait ClaimStore: Send + Sync {
    /// Stores `claim` unless another agent holds the same work at `now`.
    ///
    /// Contract: atomic and conditional. If the stored claim with the same `(room_id, key)` is
    /// held at `now` ([`Claim::is_held`]) by another agent, nothing is written and
    /// [`ClaimOutcome::Held`] returns it. Otherwise `claim` replaces it (a renewal by the same
    /// agent, or a released or lapsed claim taken over) and `event` is appended to the room's
    /// feed in the same write. Of N concurrent claims of one free subject, exactly one succeeds.
    async fn put_claim(&self, claim: &Claim, now: Timestamp, event: &Event) -> Result<ClaimOutcome>;

    /// Releases the claim on `key` if `agent_id` holds it at `now` (sets `released_at`), with
    /// `event` in the same write, and returns it; `None` if that agent does not hold it.
    async fn release_claim(
        &self,
        room_id: RoomId,
        key: &str,
        agent_id: &AgentId,
        now: Timestamp,
        event: &Event,
    ) -> Result<Option<Claim>>;

    /// The room's claims held at `now`, oldest first.
    async fn list_claims(&self, room_id: RoomId, now: Timestamp) -> Result<Vec<Claim>>;
}
