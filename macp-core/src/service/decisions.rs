//! The decision queue: agents ask the people; people answer. Who answered, and whether a person
//! answered directly or an agent relayed it, is part of the record.

use crate::redact::Written;
use serde::{Deserialize, Serialize};

use super::{Macp, Principal};
use crate::error::{Error, Result};
use crate::ids::{AgentId, DecisionId, FindingId, RoomId};
use crate::model::{Answer, Channel, Decision, Event, EventKind, Urgency};
use crate::validate;

/// The most options a decision may offer.
pub const MAX_DECISION_OPTIONS: usize = 8;

/// `ask_decision`: ask the people to decide something you should not decide alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct AskDecision {
    /// The room.
    pub room_id: RoomId,
    /// The question, e.g. "Fail over orders-db to the replica now?".
    pub question: String,
    /// Choices to pick from, if there are clear ones (at most 8).
    #[serde(default)]
    pub options: Vec<String>,
    /// Findings that bear on it.
    #[serde(default)]
    pub finding_ids: Vec<FindingId>,
    /// "low", "normal" (default) or "high" (work waits on it).
    #[serde(default)]
    pub urgency: Option<Urgency>,
    /// Which of your agents asks; defaults to the one you joined with.
    #[serde(default)]
    pub agent_id: Option<AgentId>,
}

impl AskDecision {
    /// `agent_id` asks `question`.
    pub fn new(room_id: RoomId, agent_id: AgentId, question: impl Into<String>) -> Self {
        Self {
            room_id,
            question: question.into(),
            options: Vec::new(),
            finding_ids: Vec::new(),
            urgency: None,
            agent_id: Some(agent_id),
        }
    }

    /// With these options.
    pub fn options<I: IntoIterator<Item = S>, S: Into<String>>(mut self, options: I) -> Self {
        self.options = options.into_iter().map(Into::into).collect();
        self
    }

    /// With this urgency.
    pub fn urgency(mut self, urgency: Urgency) -> Self {
        self.urgency = Some(urgency);
        self
    }
}

/// An answer to a decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct AnswerDecision {
    /// The room.
    pub room_id: RoomId,
    /// The decision.
    pub decision_id: DecisionId,
    /// What was decided: one of the options, or free text.
    pub answer: String,
    /// The agent relaying a person's answer; defaults to the one you joined with. (Answers
    /// through MCP are always recorded as relayed by this agent.)
    #[serde(default)]
    pub agent_id: Option<AgentId>,
}

impl Macp {
    /// Asks the people of the room a question. It stays at the top of the context and the
    /// summary until answered.
    pub async fn ask_decision(&self, who: &Principal, mut req: AskDecision) -> Result<Written<Decision>> {
        let redacted = self.redact(&mut req)?;
        let value = self.ask_decision_redacted(who, req).await?;
        Ok(Written { value, redacted })
    }

    /// [`Self::ask_decision`] once its texts are redacted.
    async fn ask_decision_redacted(&self, who: &Principal, req: AskDecision) -> Result<Decision> {
        let l = &self.inner.limits;
        self.writable_room(who, req.room_id).await?;
        let session = self.agent_session(who, req.room_id, req.agent_id.as_ref()).await?;
        let question = validate::required_text("question", &req.question, l.max_reason_bytes)?;
        if req.options.len() > MAX_DECISION_OPTIONS {
            return Err(Error::too_many("options", MAX_DECISION_OPTIONS, req.options.len()));
        }
        let mut options = Vec::with_capacity(req.options.len());
        for o in &req.options {
            options.push(validate::required_text("options", o, l.max_name_bytes)?);
        }
        self.require_findings(req.room_id, &req.finding_ids, "finding_ids").await?;
        let now = self.now();
        let d = Decision {
            room_id: req.room_id,
            decision_id: DecisionId::generate(),
            question,
            options,
            finding_ids: req.finding_ids.clone(),
            urgency: req.urgency.unwrap_or(Urgency::Normal),
            asked_by: session.agent_id.clone(),
            asked_by_user: who.user_id.clone(),
            asked_at: now,
            answer: None,
        };
        let event = Event::new(
            EventKind::DecisionAsked,
            now,
            who.user_id.clone(),
            &format!("{}: {}", d.urgency, d.question),
        )
        .agent(&session.agent_id);
        self.inner.store.insert_decision(&d, &event).await?;
        self.changed(req.room_id);
        self.touch(&session).await;
        Ok(d)
    }

    /// Answers a decision. The first answer wins; a later one is a `conflict` that shows it.
    /// `via` says whether the principal answers as a person or an agent relays: adapters that
    /// serve agents always pass [`Channel::Agent`].
    pub async fn answer_decision(
        &self,
        who: &Principal,
        mut req: AnswerDecision,
        via: Channel,
    ) -> Result<Written<Decision>> {
        let redacted = self.redact(&mut req)?;
        let value = self.answer_decision_redacted(who, req, via).await?;
        Ok(Written { value, redacted })
    }

    /// [`Self::answer_decision`] once its texts are redacted.
    async fn answer_decision_redacted(
        &self,
        who: &Principal,
        req: AnswerDecision,
        via: Channel,
    ) -> Result<Decision> {
        let l = &self.inner.limits;
        self.writable_room(who, req.room_id).await?;
        let text = validate::required_text("answer", &req.answer, l.max_reason_bytes)?;
        let agent = if via.is_person() {
            None
        } else {
            Some(self.agent_session(who, req.room_id, req.agent_id.as_ref()).await?.agent_id)
        };
        let now = self.now();
        let answer = Answer {
            text: text.clone(),
            user_id: who.user_id.clone(),
            channel: via,
            agent_id: agent.clone(),
            at: now,
        };
        let said = match &agent {
            Some(a) => format!("{text} (relayed by {a} for {})", who.user_id),
            None => format!("{text} (by {})", who.user_id),
        };
        let mut event = Event::new(EventKind::DecisionAnswered, now, who.user_id.clone(), &said);
        if let Some(a) = &agent {
            event = event.agent(a);
        }
        let d = self
            .inner
            .store
            .answer_decision(req.room_id, req.decision_id, &answer, &event)
            .await?
            .ok_or_else(|| {
                Error::not_found_hint(
                    "decision",
                    req.decision_id,
                    "see the open decisions in get_room_context",
                )
            })?;
        if d.answer.as_ref() != Some(&answer) {
            let first = d
                .answer
                .as_ref()
                .map(|a| format!("\"{}\" by {} ({})", a.text, a.user_id, a.channel))
                .unwrap_or_default();
            return Err(Error::conflict(format!(
                "decision `{}` was already answered: {first}",
                req.decision_id
            )));
        }
        self.changed(req.room_id);
        Ok(d)
    }

    /// The room's decisions, oldest first; only the open ones when `open_only`.
    pub async fn list_decisions(
        &self,
        who: &Principal,
        room_id: RoomId,
        open_only: bool,
    ) -> Result<Vec<Decision>> {
        self.room(who, room_id).await?;
        self.decisions(room_id, open_only).await
    }

    /// Decisions oldest first: by when they were asked, then by id.
    pub(crate) async fn decisions(&self, room_id: RoomId, open_only: bool) -> Result<Vec<Decision>> {
        let mut d = self.inner.store.list_decisions(room_id, open_only).await?;
        d.sort_by_key(|a| (a.asked_at, a.decision_id));
        Ok(d)
    }
}
