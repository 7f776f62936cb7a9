//! Claims on work: an agent says what it is doing before doing it, so nobody repeats it.

use serde::{Deserialize, Serialize};

use super::{Macp, Principal};
use crate::error::{Error, Result};
use crate::ids::{AgentId, EntityId, RoomId};
use crate::model::{Claim, Event, EventKind};
use crate::store::ClaimOutcome;
use crate::validate;

/// How long a claim lasts when the request does not say, in minutes.
pub const DEFAULT_CLAIM_MINUTES: u32 = 30;

/// The longest a claim may be held before it must be renewed, in minutes.
pub const MAX_CLAIM_MINUTES: u32 = 240;

/// `claim_work`: claim a piece of work before doing it (or renew, or release, your claim).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ClaimWork {
    /// The room.
    pub room_id: RoomId,
    /// The work, e.g. "checking the orders-db failover". The same words (case and spacing
    /// aside) name the same work.
    pub subject: String,
    /// Entities the work is about.
    #[serde(default)]
    pub entity_ids: Vec<EntityId>,
    /// How long to hold it, in minutes (default 30, at most 240). Claim again to renew.
    #[serde(default)]
    pub minutes: Option<u32>,
    /// Release your claim instead: the work is done or you gave it up.
    #[serde(default)]
    pub release: bool,
    /// Which of your agents; defaults to the one you joined with.
    #[serde(default)]
    pub agent_id: Option<AgentId>,
}

impl ClaimWork {
    /// `agent_id` claims `subject` for the default time.
    pub fn new(room_id: RoomId, agent_id: AgentId, subject: impl Into<String>) -> Self {
        Self {
            room_id,
            subject: subject.into(),
            entity_ids: Vec::new(),
            minutes: None,
            release: false,
            agent_id: Some(agent_id),
        }
    }

    /// For this many minutes.
    pub fn minutes(mut self, minutes: u32) -> Self {
        self.minutes = Some(minutes);
        self
    }

    /// About these entities.
    pub fn entities(mut self, ids: impl IntoIterator<Item = EntityId>) -> Self {
        self.entity_ids = ids.into_iter().collect();
        self
    }

    /// Releasing it instead.
    pub fn release(mut self) -> Self {
        self.release = true;
        self
    }
}

/// The result of `claim_work`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct ClaimResult {
    /// The claim as stored.
    pub claim: Claim,
    /// It was yours already and now lasts longer.
    pub renewed: bool,
    /// It was released by this call.
    pub released: bool,
    /// Secrets redacted from this write, by kind.
    #[serde(default, skip_serializing_if = "crate::redact::Redactions::is_empty")]
    pub redacted: crate::redact::Redactions,
}

impl Macp {
    /// Claims, renews or releases a piece of work. Another agent's claim on the same work is a
    /// `conflict` naming the holder, since when and until when.
    pub async fn claim_work(&self, who: &Principal, mut req: ClaimWork) -> Result<ClaimResult> {
        let redacted = self.redact(&mut req)?;
        let l = &self.inner.limits;
        self.writable_room(who, req.room_id).await?;
        let session = self.agent_session(who, req.room_id, req.agent_id.as_ref()).await?;
        let subject = validate::required_text("subject", &req.subject, l.max_name_bytes)?;
        let key = Claim::key_of(&subject);
        let now = self.now();
        let store = &self.inner.store;
        if req.release {
            let event = Event::new(EventKind::ClaimReleased, now, who.user_id.clone(), &subject)
                .agent(&session.agent_id);
            let claim = store
                .release_claim(req.room_id, &key, &session.agent_id, now, &event)
                .await?
                .ok_or_else(|| {
                    Error::not_found_hint(
                        "claim",
                        &subject,
                        "your agent holds no claim on this work (it may have lapsed); nothing to release",
                    )
                })?;
            self.changed(req.room_id);
            return Ok(ClaimResult { claim, renewed: false, released: true, redacted });
        }
        let minutes = req.minutes.unwrap_or(DEFAULT_CLAIM_MINUTES);
        if minutes == 0 || minutes > MAX_CLAIM_MINUTES {
            return Err(Error::InvalidInput {
                field: "minutes".into(),
                message: format!("claim for 1 to {MAX_CLAIM_MINUTES} minutes, then claim again to renew"),
                limit: Some(MAX_CLAIM_MINUTES as u64),
            });
        }
        let mut entity_ids = Vec::new();
        for id in &req.entity_ids {
            if !entity_ids.contains(id) {
                entity_ids.push(*id);
            }
        }
        self.require_entities(req.room_id, &entity_ids, "entity_ids").await?;
        let aliases = self.aliases(req.room_id).await?;
        let held = store.list_claims(req.room_id, now).await?;
        let mine = held.iter().find(|c| c.key == key && c.is_held_by(&session.agent_id, now));
        let claim = Claim {
            room_id: req.room_id,
            subject: subject.clone(),
            key,
            entity_ids: aliases.resolve_all(&entity_ids)?,
            agent_id: session.agent_id.clone(),
            user_id: who.user_id.clone(),
            claimed_at: mine.map_or(now, |c| c.claimed_at),
            expires_at: crate::Timestamp::from_millis(now.as_millis() + i64::from(minutes) * 60_000),
            released_at: None,
        };
        let renewed = mine.is_some();
        let said = format!("{}{subject} (for {minutes} min)", if renewed { "renewed: " } else { "" });
        let event = Event::new(EventKind::WorkClaimed, now, who.user_id.clone(), &said)
            .agent(&session.agent_id)
            .entities(claim.entity_ids.iter().copied());
        match store.put_claim(&claim, now, &event).await? {
            ClaimOutcome::Claimed(c) => {
                self.changed(req.room_id);
                self.touch(&session).await;
                Ok(ClaimResult { claim: c, renewed, released: false, redacted })
            }
            ClaimOutcome::Held(h) => Err(Error::conflict(format!(
                "`{}` is claimed by agent `{}` ({}) since {} until {}; pick other work, or ask them with a \
                 finding that mentions them",
                h.subject, h.agent_id, h.user_id, h.claimed_at, h.expires_at
            ))),
        }
    }

    /// A person releases whatever agent holds a claim: the way to free work held by an agent
    /// that went stale or away. Only for adapters that face a person (`macp release`); the MCP
    /// server never calls it. Counts as a person acting in the room.
    pub async fn release_claim_as_person(
        &self,
        who: &Principal,
        room_id: RoomId,
        subject: &str,
    ) -> Result<Claim> {
        self.writable_room(who, room_id).await?;
        // As claims are stored: through the redactor, so a subject that held a secret matches.
        let subject = self.inner.redactor.text(subject, "subject", &mut Default::default())?;
        let subject = validate::required_text("subject", &subject, self.inner.limits.max_name_bytes)?;
        let key = Claim::key_of(&subject);
        let now = self.now();
        let store = &self.inner.store;
        let held = store.list_claims(room_id, now).await?;
        let claim = held.into_iter().find(|c| c.key == key).ok_or_else(|| {
            Error::not_found_hint(
                "claim",
                &subject,
                "no agent holds this work now (list the room's claims with get_room_context)",
            )
        })?;
        let said = format!("{} released by {}: {}", claim.agent_id, who.user_id, claim.subject);
        let event = Event::new(EventKind::ClaimReleased, now, who.user_id.clone(), &said);
        let released =
            store.release_claim(room_id, &key, &claim.agent_id, now, &event).await?.ok_or_else(|| {
                Error::not_found_hint("claim", &subject, "the claim was released or lapsed meanwhile")
            })?;
        self.changed(room_id);
        Ok(released)
    }

    /// The room's open claims, oldest first.
    pub async fn list_claims(&self, who: &Principal, room_id: RoomId) -> Result<Vec<Claim>> {
        self.room(who, room_id).await?;
        self.inner.store.list_claims(room_id, self.now()).await
    }
}
