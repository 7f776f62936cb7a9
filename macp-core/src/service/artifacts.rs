//! Artifact metadata: registering uploaded files against a room, and listing them.

use serde::{Deserialize, Serialize};

use super::{Macp, Principal, check_replay, fingerprint, idempotency_key};
use crate::blob::BlobStore;
use crate::cursor;
use crate::error::{Error, Result};
use crate::ids::{AgentId, ArtifactId, EntityId, FindingId, RoomId, Timestamp};
use crate::model::{Artifact, Event, EventKind};
use crate::store::{ArtifactQuery, Write, WriteOperation};
use crate::validate;

/// Longest accepted artifact key, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;

/// The key prefix under which every object of a room lives.
pub fn room_prefix(room_id: RoomId) -> String {
    format!("rooms/{room_id}/")
}

/// `register_artifact`: record an uploaded file in the room.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RegisterArtifact {
    /// The room.
    pub room_id: RoomId,
    /// The `key` returned by request_artifact_upload, after the upload succeeded.
    pub key: String,
    /// What the file shows.
    #[serde(default)]
    pub description: Option<String>,
    /// Findings this file supports.
    #[serde(default)]
    pub linked_finding_ids: Vec<FindingId>,
    /// Entities this file concerns.
    #[serde(default)]
    pub linked_entity_ids: Vec<EntityId>,
    /// Any unique string; retrying with the same key never registers twice.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// Which of your agents registers; defaults to the one you joined with.
    #[serde(default)]
    pub agent_id: Option<AgentId>,
}

impl RegisterArtifact {
    /// `agent_id` registers the object at `key`.
    pub fn new(room_id: RoomId, agent_id: AgentId, key: impl Into<String>) -> Self {
        Self {
            room_id,
            key: key.into(),
            description: None,
            linked_finding_ids: Vec::new(),
            linked_entity_ids: Vec::new(),
            idempotency_key: None,
            agent_id: Some(agent_id),
        }
    }

    /// With a description.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Linked to these findings.
    pub fn findings(mut self, ids: impl IntoIterator<Item = FindingId>) -> Self {
        self.linked_finding_ids = ids.into_iter().collect();
        self
    }

    /// Linked to these entities.
    pub fn entities(mut self, ids: impl IntoIterator<Item = EntityId>) -> Self {
        self.linked_entity_ids = ids.into_iter().collect();
        self
    }

    /// With an idempotency key.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }
}

/// The result of `register_artifact`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct ArtifactOutcome {
    /// The stored metadata.
    pub artifact: Artifact,
    /// True when this was a retry with the same idempotency key.
    pub replayed: bool,
    /// Secrets redacted from this write, by kind.
    #[serde(default, skip_serializing_if = "crate::redact::Redactions::is_empty")]
    pub redacted: crate::redact::Redactions,
}

/// `list_artifacts`: the room's files, with download URLs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ListArtifacts {
    /// The room.
    pub room_id: RoomId,
    /// Only files linked to this finding.
    #[serde(default)]
    pub finding_id: Option<FindingId>,
    /// Only files linked to this entity (or an entity merged with it).
    #[serde(default)]
    pub entity_id: Option<EntityId>,
    /// Page size (default 50, at most 200).
    #[serde(default)]
    pub limit: Option<usize>,
    /// `next_cursor` from the previous page.
    #[serde(default)]
    pub cursor: Option<String>,
}

impl ListArtifacts {
    /// The room's artifacts, first page.
    pub fn new(room_id: RoomId) -> Self {
        Self { room_id, finding_id: None, entity_id: None, limit: None, cursor: None }
    }

    /// Only those linked to this finding.
    pub fn finding(mut self, finding_id: FindingId) -> Self {
        self.finding_id = Some(finding_id);
        self
    }

    /// Only those linked to this entity or its aliases.
    pub fn entity(mut self, entity_id: EntityId) -> Self {
        self.entity_id = Some(entity_id);
        self
    }

    /// The page after this cursor.
    pub fn cursor(mut self, cursor: impl Into<Option<String>>) -> Self {
        self.cursor = cursor.into();
        self
    }
}

/// An artifact as listed: its metadata and a short-lived download URL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct ListedArtifact {
    /// The metadata.
    #[serde(flatten)]
    pub artifact: Artifact,
    /// GET this URL (no other credentials needed) to download the file. Absent once erased.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub download_url: Option<String>,
    /// When `download_url` stops working; list again for a fresh one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub download_expires_at: Option<Timestamp>,
}

/// A page of artifacts, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct ArtifactPage {
    /// The artifacts.
    pub artifacts: Vec<ListedArtifact>,
    /// Pass back for the next page; absent on the last.
    pub next_cursor: Option<String>,
}

/// Limits and lifetimes of artifact uploads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ArtifactConfig {
    /// Largest file accepted, in bytes.
    pub max_bytes: u64,
    /// MIME types accepted (exact, lowercase).
    pub allowed_content_types: Vec<String>,
    /// How long an upload URL works.
    pub upload_ttl: std::time::Duration,
    /// How long a download URL works.
    pub download_ttl: std::time::Duration,
}

/// A content type as compared with the allowed list: trimmed, lowercase.
fn normalize_content_type(t: &str) -> String {
    t.trim().to_ascii_lowercase()
}

impl ArtifactConfig {
    /// Replaces the allowed content types: normalised (trimmed, lowercase), deduplicated, each
    /// `type/subtype`; `invalid_input` names the first that is not.
    pub fn with_content_types<S: AsRef<str>>(mut self, types: impl IntoIterator<Item = S>) -> Result<Self> {
        let mut t: Vec<String> = types.into_iter().map(|t| normalize_content_type(t.as_ref())).collect();
        if let Some(bad) =
            t.iter().find(|t| t.split_once('/').is_none_or(|(a, b)| a.is_empty() || b.is_empty()))
        {
            return Err(Error::invalid(
                "allowed_content_types",
                format!("`{bad}` is not a content type like text/plain"),
            ));
        }
        t.sort();
        t.dedup();
        self.allowed_content_types = t;
        Ok(self)
    }
}

impl Default for ArtifactConfig {
    fn default() -> Self {
        Self {
            max_bytes: 25 * 1024 * 1024,
            allowed_content_types: [
                "text/plain",
                "text/csv",
                "text/markdown",
                "application/json",
                "application/x-ndjson",
                "application/pdf",
                "image/png",
                "image/jpeg",
                "image/gif",
                "image/webp",
                "application/gzip",
                "application/zip",
            ]
            .map(str::to_owned)
            .to_vec(),
            upload_ttl: std::time::Duration::from_secs(15 * 60),
            download_ttl: std::time::Duration::from_secs(10 * 60),
        }
    }
}

/// `request_artifact_upload`: a URL to upload a file to, before registering it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RequestUpload {
    /// The room.
    pub room_id: RoomId,
    /// The file's name, e.g. "checkout-5xx.png" (a plain name, not a path).
    pub filename: String,
    /// Its MIME type, e.g. "text/plain", "image/png", "application/json".
    pub content_type: String,
    /// Its exact size in bytes.
    pub size: u64,
    /// Which of your agents uploads; defaults to the one you joined with.
    #[serde(default)]
    pub agent_id: Option<AgentId>,
}

impl RequestUpload {
    /// `agent_id` uploads `size` bytes of `content_type` as `filename`.
    pub fn new(
        room_id: RoomId,
        agent_id: AgentId,
        filename: impl Into<String>,
        content_type: impl Into<String>,
        size: u64,
    ) -> Self {
        Self {
            room_id,
            filename: filename.into(),
            content_type: content_type.into(),
            size,
            agent_id: Some(agent_id),
        }
    }
}

/// Where and how to upload: PUT the file's bytes to `upload_url` with `headers`, before
/// `expires_at`, then call register_artifact with `key`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct UploadTicket {
    /// The room.
    pub room_id: RoomId,
    /// The object key the file will have (pass it to register_artifact).
    pub key: String,
    /// The presigned URL.
    pub upload_url: String,
    /// Always `PUT`.
    pub method: String,
    /// Headers the upload must carry, exactly (content type and length are bound).
    pub headers: std::collections::BTreeMap<String, String>,
    /// When the URL stops working.
    pub expires_at: Timestamp,
}

/// Longest accepted filename, in bytes.
pub const MAX_FILENAME_BYTES: usize = 200;

/// A filename must be a plain name: it becomes the last segment of a server-generated key, never
/// a path.
fn check_filename(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid("filename", "filename must not be empty"));
    }
    if name.len() > MAX_FILENAME_BYTES {
        return Err(Error::too_long("filename", MAX_FILENAME_BYTES, name.len()));
    }
    let plain = name.chars().all(|c| c.is_ascii_alphanumeric() || " ._()+-".contains(c));
    if !plain || name == "." || name == ".." || name.starts_with(' ') || name.ends_with(' ') {
        return Err(Error::invalid(
            "filename",
            format!(
                "`{}` is not a plain file name: use letters, digits, spaces and `. _ ( ) + -` (no `/`, `\\` or `..`)",
                crate::ids::clip(name)
            ),
        ));
    }
    Ok(())
}

#[derive(Serialize)]
struct ArtifactFingerprint<'a> {
    agent_id: &'a AgentId,
    key: &'a str,
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
    /// Whether an artifact store is configured (the artifact operations work).
    pub fn artifacts_enabled(&self) -> bool {
        self.inner.blobs.is_some()
    }

    /// The artifact limits in force.
    pub fn artifact_config(&self) -> &ArtifactConfig {
        &self.inner.artifacts
    }

    pub(super) fn blobs(&self) -> Result<&std::sync::Arc<dyn BlobStore>> {
        self.inner.blobs.as_ref().ok_or_else(|| {
            Error::invalid(
                "artifacts",
                "this server has no artifact store configured; artifacts are unavailable",
            )
        })
    }

    /// Issues a presigned upload URL bound to a fresh key under the room's prefix, the content
    /// type and the exact size.
    pub async fn request_artifact_upload(
        &self,
        who: &Principal,
        mut req: RequestUpload,
    ) -> Result<UploadTicket> {
        self.redact(&mut req)?;
        let cfg = &self.inner.artifacts;
        self.writable_room(who, req.room_id).await?;
        let session = self.agent_session(who, req.room_id, req.agent_id.as_ref()).await?;
        let blobs = self.blobs()?;
        check_filename(&req.filename)?;
        let content_type = normalize_content_type(&req.content_type);
        if !cfg.allowed_content_types.contains(&content_type) {
            return Err(Error::invalid(
                "content_type",
                format!(
                    "`{}` is not accepted; allowed: {}",
                    crate::ids::clip(&req.content_type),
                    cfg.allowed_content_types.join(", ")
                ),
            ));
        }
        if req.size == 0 {
            return Err(Error::invalid("size", "size must be at least 1 byte"));
        }
        if req.size > cfg.max_bytes {
            return Err(Error::InvalidInput {
                field: "size".into(),
                message: format!(
                    "the file is {} bytes; the largest artifact is {} bytes",
                    req.size, cfg.max_bytes
                ),
                limit: Some(cfg.max_bytes),
            });
        }
        let key =
            format!("{}artifacts/{}/{}", room_prefix(req.room_id), ulid::Ulid::generate(), req.filename);
        let expires_at = self.now().plus_millis(cfg.upload_ttl.as_millis() as i64);
        let url = blobs.presign_put(&key, &content_type, req.size, expires_at).await?;
        self.touch(&session).await;
        Ok(UploadTicket {
            room_id: req.room_id,
            key,
            upload_url: url.url,
            method: url.method,
            headers: url.headers,
            expires_at,
        })
    }

    /// Records metadata of an uploaded artifact and links it to findings and entities.
    pub async fn register_artifact(
        &self,
        who: &Principal,
        mut req: RegisterArtifact,
    ) -> Result<ArtifactOutcome> {
        let redacted = self.redact(&mut req)?;
        let l = &self.inner.limits;
        let store = &self.inner.store;
        self.writable_room(who, req.room_id).await?;
        let session = self.agent_session(who, req.room_id, req.agent_id.as_ref()).await?;
        check_key(req.room_id, &req.key)?;
        let blobs = self.blobs()?;
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
                agent_id: &session.agent_id,
                key: &req.key,
                description: description.as_deref(),
                linked_finding_ids: &finding_ids,
                linked_entity_ids: &req.linked_entity_ids,
            },
        );
        // The object must be there, complete; its size and type are what was uploaded.
        let object = blobs.head(&req.key).await?.ok_or_else(|| {
            Error::not_found_hint(
                "uploaded object",
                &req.key,
                "upload the file to the upload_url from request_artifact_upload first, then register it",
            )
        })?;
        // The presigned URL bound type and length; a store that cannot enforce that (an
        // emulator) must not let an object outside the limits into the record.
        let cfg = &self.inner.artifacts;
        let uploaded_type = normalize_content_type(&object.content_type);
        if object.size > cfg.max_bytes || !cfg.allowed_content_types.contains(&uploaded_type) {
            return Err(Error::InvalidInput {
                field: "key".into(),
                message: format!(
                    "the uploaded object is {} bytes of `{}`, outside the artifact limits ({} bytes; {}); \
                     it was not registered",
                    object.size,
                    object.content_type,
                    cfg.max_bytes,
                    cfg.allowed_content_types.join(", ")
                ),
                limit: Some(cfg.max_bytes),
            });
        }
        let now = self.now();
        let artifact = Artifact {
            room_id: req.room_id,
            artifact_id: ArtifactId::generate(),
            key: req.key.clone(),
            content_type: object.content_type,
            size: object.size,
            uploaded_by: who.user_id.clone(),
            agent_id: session.agent_id.clone(),
            uploaded_at: now,
            description,
            linked_finding_ids: finding_ids,
            linked_entity_ids: aliases.resolve_all(&req.linked_entity_ids)?,
            idempotency_key: key.clone(),
            erased: None,
        };
        let keyed = idempotency_key(
            key.as_ref(),
            WriteOperation::RegisterArtifact,
            &print,
            artifact.artifact_id.to_string(),
            now,
        );
        let said = match &artifact.description {
            Some(d) => format!("{} ({}, {} bytes): {d}", artifact.key, artifact.content_type, artifact.size),
            None => format!("{} ({}, {} bytes)", artifact.key, artifact.content_type, artifact.size),
        };
        let event = Event::new(EventKind::ArtifactRegistered, now, who.user_id.clone(), &said)
            .agent(&session.agent_id)
            .artifact(artifact.artifact_id);
        let (mut stored, replayed) = match store.insert_artifact(&artifact, keyed.as_ref(), &event).await? {
            Write::Applied(a) => {
                self.changed(req.room_id);
                (a, false)
            }
            Write::Replayed(rec) => {
                check_replay(&rec, WriteOperation::RegisterArtifact, &print)?;
                let id: ArtifactId = rec.result_id.parse()?;
                let a = store.get_artifacts(req.room_id, &[id]).await?.into_iter().next();
                (a.ok_or_else(|| Error::not_found("artifact", id))?, true)
            }
        };
        self.touch(&session).await;
        stored.linked_entity_ids = aliases.resolve_all(&stored.linked_entity_ids)?;
        Ok(ArtifactOutcome { artifact: stored, replayed, redacted })
    }

    /// Lists a room's artifacts, optionally those linked to a finding or an entity.
    pub async fn list_artifacts(&self, who: &Principal, q: ListArtifacts) -> Result<ArtifactPage> {
        let l = &self.inner.limits;
        self.room(who, q.room_id).await?;
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
        let blobs = self.blobs()?;
        let expires_at = self.now().plus_millis(self.inner.artifacts.download_ttl.as_millis() as i64);
        let mut listed = Vec::with_capacity(artifacts.len());
        for mut a in artifacts {
            a.linked_entity_ids = aliases.resolve_all(&a.linked_entity_ids)?;
            // An erased artifact's bytes are gone: no URL to nothing.
            let url = match a.erased {
                None => Some(blobs.presign_get(&a.key, expires_at).await?.url),
                Some(_) => None,
            };
            let download_expires_at = url.as_ref().map(|_| expires_at);
            listed.push(ListedArtifact { artifact: a, download_url: url, download_expires_at });
        }
        Ok(ArtifactPage { artifacts: listed, next_cursor })
    }
}
