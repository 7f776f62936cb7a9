//! Decisions the people are asked to make.

use async_trait::async_trait;

use crate::error::Result;
use crate::ids::{DecisionId, RoomId};
use crate::model::{Answer, Decision, Event};

/// Decisions, one per `(room_id, decision_id)`.
#[async_trait]
pub trait DecisionStore: Send + Sync {
    /// Stores a new decision (unanswered) and appends `event` in the same write.
    async fn insert_decision(&self, decision: &Decision, event: &Event) -> Result<()>;

    /// Records `answer` if the decision has none yet, with `event` in the same write, and
    /// returns the decision after the call (with the first answer, whoever gave it); `None` if
    /// there is no such decision.
    ///
    /// Contract: atomic and conditional: of two concurrent answers exactly one is recorded.
    async fn answer_decision(
        &self,
        room_id: RoomId,
        decision_id: DecisionId,
        answer: &Answer,
        event: &Event,
    ) -> Result<Option<Decision>>;

    /// The room's decisions, in any order (the service orders them); only unanswered ones
    /// when `open_only`.
    async fn list_decisions(&self, room_id: RoomId, open_only: bool) -> Result<Vec<Decision>>;
}
