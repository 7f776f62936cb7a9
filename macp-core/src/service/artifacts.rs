//! Artifact metadata: registering uploaded files against a room, and listing them.

use serde::{Deserialize, Serialize};

use super::{Macp, Principal, check_replay, claim, fingerprint};
use crate::cursor;
use crate::error::{Error, Result};
use crate::ids::{AgentId, ArtifactId, EntityId, FindingId, RoomId};
use crate::model::Artifact;
use crate::store::{ArtifactQuery, Write, WriteOperation};
use crate::validate;

/// Longest accepted artifact key, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;
/// Longest accepted content type, in bytes.
pub const MAX_CONTENT_TYPE_BYTES: usize = 255;

/// The key prefix under which every object of a room lives.
pub fn room_prefix(room_id: RoomId) -> String {
    format!("rooms/{room_id}/")
}

/// `register_artifact`: records metadata of an uploaded object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct RegisterArtifact {
    /// The room.
    pub room_id: RoomId,
    /// The registering agent.
    pub agent_id: AgentId,
    /// Object key; must be under the room's prefix (`rooms/<room_id>/`).
    pub key: String,
    /// MIME type of the object.
    pub content_type: String,
    /// Size in bytes.
    pub size: u64,
    /// What it is.
    #[serde(default)]
    pub description: Option<String>,
    /// Findings it supports (must exist in the room).
    #[serde(default)]
    pub linked_finding_ids: Vec<FindingId>,
    /// Entities it concerns (must exist in the room; merged ids resolve).
    #[serde(default)]
    pub linked_entity_ids: Vec<EntityId>,
    /// Retry key.
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

/// The result of `register_artifact`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct ArtifactOutcome {
    /// The stored metadata.
    pub artifact: Artifact,
    /// True when this was a retry with the same idempotency key.
    pub replayed: bool,
}

/// `list_artifacts`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct ListArtifacts {
    /// The room.
    pub room_id: RoomId,
    /// Only artifacts linked to this finding.
    #[serde(default)]
    pub finding_id: Option<FindingId>,
    /// Only artifacts linked to this entity (or any entity merged with it).
    #[serde(default)]
    pub entity_id: Option<EntityId>,
    /// Page size.
    #[serde(default)]
    pub limit: Option<usize>,
    /// `next_cursor` of the previous page.
    #[serde(default)]
    pub cursor: Option<String>,
}

/// A page of artifacts, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct ArtifactPage {
    /// The artifacts.
    pub artifacts: Vec<Artifact>,
    /// Pass back for the next page; absent on the last.
    pub next_cursor: Option<String>,
}

#[derive(Serialize)]
struct ArtifactFingerprint<'a> {
    agent_id: &'a AgentId,
    key: &'a str,
    content_type: &'a str,
    size: u64,
    description: Option<&'a str>,
    linked_finding_ids: &'a [FindingId],
    linked_entity_ids: &'a [EntityId],
}

/// Checks that `key` is a plain object key under the room's prefix.
pub(crate) fn check_key(room_id: RoomId, key: &str) -> Result<()> {
    let prefix = room_prefix(room_id);
    if key.len() > MAX_KEY_BYTES {
        return Err(Error::too_long("key", MAX_KEY_BYTES, key.len()));
    }
    let rest = key.strip_prefix(&prefix).ok_or_else(|| {
        Error::invalid("key", format!("artifact keys of this room start with `{prefix}`; use the key request_artifact_upload returned"))
    })?;
    if rest.is_empty()
        || rest.split('/').any(|seg| seg.is_empty() || seg == "." || seg == "..")
        || key.chars().any(|c| c.is_control() || c == '\\')
    {
        return Err(Error::invalid(
            "key",
            "the key is not a plain object key (empty, `.` or `..` segments, or control characters)",
        ));
    }
    Ok(())
}

impl Macp {
    /// Records metadata of an uploaded artifact and links it to findings and entities.
    pub async fn register_artifact(&self, who: &Principal, req: RegisterArtifact) -> Result<ArtifactOutcome> {
        let l = &self.inner.limits;
        let store = &self.inner.store;
        self.writable_room(req.room_id).await?;
        let session = self.acting_agent(who, req.room_id, &req.agent_id).await?;
        check_key(req.room_id, &req.key)?;
        let content_type =
            validate::required_text("content_type", &req.content_type, MAX_CONTENT_TYPE_BYTES)?;
        let description =
            validate::optional_text("description", req.description.as_deref(), l.max_description_bytes)?;
        let key = validate::idempotency_key(req.idempotency_key.as_deref(), l)?;
        let mut finding_ids: Vec<FindingId> = Vec::with_capacity(req.linked_finding_ids.len());
        for id in &req.linked_finding_ids {
            if !finding_ids.contains(id) {
                finding_ids.push(*id);
            }
        }
        if finding_ids.len() > l.max_entity_refs {
            return Err(Error::too_many("linked_finding_ids", l.max_entity_refs, finding_ids.len()));
        }
        if req.linked_entity_ids.len() > l.max_entity_refs {
            return Err(Error::too_many("linked_entity_ids", l.max_entity_refs, req.linked_entity_ids.len()));
        }
        let found = store.get_findings(req.room_id, &finding_ids).await?;
        if let Some(missing) = finding_ids.iter().find(|id| !found.iter().any(|f| f.finding_id == **id)) {
            return Err(Error::not_found_hint(
                "finding",
                missing,
                "linked_finding_ids must be findings of this room",
            ));
        }
        self.require_entities(req.room_id, &req.linked_entity_ids, "linked_entity_ids").await?;
        let aliases = self.aliases(req.room_id).await?;
        let print = fingerprint(
            WriteOperation::RegisterArtifact,
            &ArtifactFingerprint {
                agent_id: &req.agent_id,
                key: &req.key,
                content_type: &content_type,
                size: req.size,
                description: description.as_deref(),
                linked_finding_ids: &finding_ids,
                linked_entity_ids: &req.linked_entity_ids,
            },
        );
        let now = self.now();
        let artifact = Artifact {
            room_id: req.room_id,
            artifact_id: ArtifactId::generate(),
            key: req.key.clone(),
            content_type,
            size: req.size,
            uploaded_by: who.user_id.clone(),
            agent_id: req.agent_id.clone(),
            uploaded_at: now,
            description,
            linked_finding_ids: finding_ids,
            linked_entity_ids: aliases.resolve_all(&req.linked_entity_ids)?,
            idempotency_key: key.clone(),
        };
        let claim = claim(
            key.as_ref(),
            WriteOperation::RegisterArtifact,
            &print,
            artifact.artifact_id.to_string(),
            now,
        );
        let (mut stored, replayed) = match store.insert_artifact(&artifact, claim.as_ref()).await? {
            Write::Applied(a) => (a, false),
            Write::Replayed(rec) => {
                check_replay(&rec, WriteOperation::RegisterArtifact, &print)?;
                let id: ArtifactId = rec.result_id.parse()?;
                let a = store.get_artifacts(req.room_id, &[id]).await?.into_iter().next();
                (a.ok_or_else(|| Error::not_found("artifact", id))?, true)
            }
        };
        self.touch(&session).await;
        stored.linked_entity_ids = aliases.resolve_all(&stored.linked_entity_ids)?;
        Ok(ArtifactOutcome { artifact: stored, replayed })
    }

    /// Lists a room's artifacts, optionally those linked to a finding or an entity.
    pub async fn list_artifacts(&self, _who: &Principal, q: ListArtifacts) -> Result<ArtifactPage> {
        let l = &self.inner.limits;
        self.room(q.room_id).await?;
        let limit = validate::page_size("limit", q.limit, l.default_page, l.max_page)?;
        let aliases = self.aliases(q.room_id).await?;
        let entity_ids = match q.entity_id {
            None => Vec::new(),
            Some(id) => {
                self.require_entities(q.room_id, &[id], "entity_id").await?;
                aliases.members(aliases.resolve(id)?)
            }
        };
        let filter = super::digest("artifacts", &(&q.finding_id, &entity_ids));
        let room = q.room_id.to_string();
        let after = match &q.cursor {
            None => None,
            Some(c) => {
                let p = cursor::decode("cursor", "a1", c, 3)?;
                if p[0] != room || p[2] != filter[..16] {
                    return Err(Error::invalid("cursor", "this cursor belongs to another room or filter"));
                }
                Some(p[1].parse()?)
            }
        };
        let query = ArtifactQuery { finding_id: q.finding_id, entity_ids, after, limit: limit + 1 };
        let mut artifacts = self.inner.store.list_artifacts(q.room_id, &query).await?;
        let next_cursor = if artifacts.len() > limit {
            artifacts.truncate(limit);
            artifacts
                .last()
                .map(|a| cursor::encode("a1", &[&room, &a.artifact_id.to_string(), &filter[..16]]))
        } else {
            None
        };
        for a in &mut artifacts {
            a.linked_entity_ids = aliases.resolve_all(&a.linked_entity_ids)?;
        }
        Ok(ArtifactPage { artifacts, next_cursor })
    }
}
