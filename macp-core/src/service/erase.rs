//! Erasing a mistake: a finding or an artifact that should never have been written (a secret the
//! redactor missed, customer data) is replaced by a notice saying who erased it, when and why,
//! and its original text, vector and bytes leave every store.
//!
//! Who may erase: the agent that wrote it (through [`Macp::erase`], the MCP tool), or any person
//! of the organisation (through [`Macp::erase_as_person`], the web view): every
//! person can read every room, so every person can take out what must not be read. The erasure
//! is on the record, with their name.

use serde::{Deserialize, Serialize};

use super::*;
use crate::ids::{ArtifactId, FindingId};
use crate::model::{Erasure, Event, EventKind};
use crate::validate;

/// `erase`: take a finding or an artifact of yours out of the record for good.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Erase {
    /// The room.
    pub room_id: RoomId,
    /// The finding to erase (or give `artifact_id`).
    #[serde(default)]
    pub finding_id: Option<FindingId>,
    /// The artifact to erase.
    #[serde(default)]
    pub artifact_id: Option<ArtifactId>,
    /// Why, for the record (never repeat the secret).
    pub reason: String,
    /// Your agent, which must have written it; defaults to the one you joined with.
    #[serde(default)]
    pub agent_id: Option<AgentId>,
}

impl Erase {
    /// `agent_id` erases its finding `finding_id` because of `reason`.
    pub fn finding(
        room_id: RoomId,
        agent_id: AgentId,
        finding_id: FindingId,
        reason: impl Into<String>,
    ) -> Self {
        Self {
            room_id,
            finding_id: Some(finding_id),
            artifact_id: None,
            reason: reason.into(),
            agent_id: Some(agent_id),
        }
    }

    /// `agent_id` erases its artifact `artifact_id` because of `reason`.
    pub fn artifact(
        room_id: RoomId,
        agent_id: AgentId,
        artifact_id: ArtifactId,
        reason: impl Into<String>,
    ) -> Self {
        Self {
            room_id,
            finding_id: None,
            artifact_id: Some(artifact_id),
            reason: reason.into(),
            agent_id: Some(agent_id),
        }
    }
}

/// The result of `erase`: what now stands in the record. (Small on purpose: the erased object
/// is the notice now, and reads show it.)
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct Erased {
    /// The erased finding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finding_id: Option<FindingId>,
    /// The erased artifact (its bytes are deleted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_id: Option<ArtifactId>,
    /// Who erased it, when and why (the first erasure's, when it was erased before).
    pub erasure: Erasure,
    /// The text that now stands in for its content (a finding) or description (an artifact).
    pub notice: String,
    /// True when it had been erased before: nothing new was written (the first reason stands).
    pub already: bool,
    /// Secrets redacted from the reason, by kind.
    #[serde(default, skip_serializing_if = "crate::redact::Redactions::is_empty")]
    pub redacted: crate::redact::Redactions,
}

impl Macp {
    /// An agent erases a finding or an artifact it wrote. Works in closed rooms too: a secret
    /// found during the postmortem must still go.
    pub async fn erase(&self, who: &Principal, mut req: Erase) -> Result<Erased> {
        let redacted = self.redact(&mut req)?;
        self.room(who, req.room_id).await?;
        let session = self.agent_session(who, req.room_id, req.agent_id.as_ref()).await?;
        let by = Some(&session.agent_id);
        let mut out =
            self.erase_item(who, by, req.room_id, req.finding_id, req.artifact_id, &req.reason).await?;
        out.redacted = redacted;
        Ok(out)
    }

    /// A person erases any finding or artifact of a room. Only for adapters that face a person
    /// (the web view); the MCP server never calls it.
    pub async fn erase_as_person(&self, who: &Principal, mut req: Erase) -> Result<Erased> {
        req.agent_id = None;
        let redacted = self.redact(&mut req)?;
        self.room(who, req.room_id).await?;
        let mut out =
            self.erase_item(who, None, req.room_id, req.finding_id, req.artifact_id, &req.reason).await?;
        out.redacted = redacted;
        Ok(out)
    }

    async fn erase_item(
        &self,
        who: &Principal,
        agent: Option<&AgentId>,
        room_id: RoomId,
        finding_id: Option<FindingId>,
        artifact_id: Option<ArtifactId>,
        reason: &str,
    ) -> Result<Erased> {
        let reason = validate::required_text("reason", reason, self.inner.limits.max_reason_bytes)?;
        let erasure = Erasure { by: who.user_id.clone(), agent_id: agent.cloned(), at: self.now(), reason };
        let event = |what: String| {
            let e = Event::new(EventKind::Erased, erasure.at, who.user_id.clone(), &what);
            match agent {
                Some(a) => e.agent(a),
                None => e,
            }
        };
        let store = &self.inner.store;
        let out = match (finding_id, artifact_id) {
            (Some(id), None) => {
                let found = store.get_findings(room_id, &[id]).await?.pop().ok_or_else(|| {
                    Error::not_found_hint(
                        "finding",
                        id,
                        "check the finding_id (get_timeline lists the room's findings)",
                    )
                })?;
                check_author(agent, &found.agent_id, &found.user_id, who, "finding", id)?;
                // The vector first: an erasure that fails after it is retried whole, and one
                // that fails before leaves nothing half done.
                if let Some(s) = &self.inner.search {
                    s.index.delete(room_id, &[id]).await?;
                }
                let event = event(format!("finding {id} erased: {}", erasure.reason)).finding(id);
                let erased = store
                    .erase_finding(room_id, id, &erasure, &event)
                    .await?
                    .ok_or_else(|| Error::not_found("finding", id))?;
                Erased::of(&erasure, erased.erased, erased.content, Some(id), None)?
            }
            (None, Some(id)) => {
                let found = store.get_artifacts(room_id, &[id]).await?.pop().ok_or_else(|| {
                    Error::not_found_hint("artifact", id, "check the artifact_id (list_artifacts lists them)")
                })?;
                check_author(agent, &found.agent_id, &found.uploaded_by, who, "artifact", id)?;
                // The bytes first, for the same reason as a finding's vector.
                self.blobs()?.delete(&found.key).await?;
                let event = event(format!("artifact {id} erased: {}", erasure.reason)).artifact(id);
                let erased = store
                    .erase_artifact(room_id, id, &erasure, &event)
                    .await?
                    .ok_or_else(|| Error::not_found("artifact", id))?;
                // Again: an upload URL still valid when the erasure began could have put bytes
                // back under the key meanwhile.
                self.blobs()?.delete(&found.key).await?;
                Erased::of(&erasure, erased.erased, erased.description.unwrap_or_default(), None, Some(id))?
            }
            _ => {
                return Err(Error::invalid(
                    "finding_id",
                    "name exactly one thing to erase: a finding_id or an artifact_id",
                ));
            }
        };
        // Also when erased before: a retry after a failed scrub must still wake readers.
        self.changed(room_id);
        Ok(out)
    }
}

impl Erased {
    /// The answer, given the erasure asked for and the one the store holds.
    fn of(
        asked: &Erasure,
        stored: Option<Erasure>,
        notice: String,
        finding_id: Option<FindingId>,
        artifact_id: Option<ArtifactId>,
    ) -> Result<Self> {
        let erasure = stored.ok_or_else(|| {
            Error::backend("store", false, "the store answered an erasure without recording it", None)
        })?;
        let already = erasure != *asked;
        Ok(Erased { finding_id, artifact_id, erasure, notice, already, redacted: Default::default() })
    }
}

/// An agent erases only what it wrote; a person (no agent) erases anything.
fn check_author(
    agent: Option<&AgentId>,
    author: &AgentId,
    author_user: &UserId,
    who: &Principal,
    what: &str,
    id: impl std::fmt::Display,
) -> Result<()> {
    match agent {
        Some(a) if a != author || *author_user != who.user_id => Err(Error::PermissionDenied {
            message: format!(
                "{what} {id} was written by agent `{author}` ({author_user}); an agent erases only its own. \
                 Ask a person of the room to erase it (web view), or ask its author with a finding that \
                 mentions them"
            ),
        }),
        _ => Ok(()),
    }
}
