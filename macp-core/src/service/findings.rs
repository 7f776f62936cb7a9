//! Findings: posting, the timeline and the updates feed.

use serde::{Deserialize, Serialize};

use super::{Aliases, Macp, Principal, check_replay, digest, fingerprint, idempotency_key};
use crate::cursor;
use crate::error::{Error, Result};
use crate::ids::{AgentId, EntityId, FindingId, RoomId, Timestamp};
use crate::model::{Event, EventKind, Evidence, Finding, IndexStatus};
use crate::store::{FindingQuery, Write, WriteOperation};
use crate::validate;

/// `post_finding`: add one fact or conclusion to the room's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct PostFinding {
    /// The room.
    pub room_id: RoomId,
    /// What you found, in markdown: one fact or conclusion, with the specifics (times, hosts, ids).
    pub content: String,
    /// Labels, e.g. "triage", "hypothesis", "evidence", "root-cause", "remediation", "dead-end".
    #[serde(default)]
    pub tags: Vec<String>,
    /// Ids of entities (from add_entity) this finding is about.
    #[serde(default)]
    pub entity_refs: Vec<EntityId>,
    /// Proof: [{kind: artifact|url|cloudtrail|datadog|metric|log, ref, description?, captured_at?}].
    #[serde(default)]
    pub evidence: Vec<Evidence>,
    /// The finding of this room you are answering (a thread): a reply to a question, a
    /// confirmation or a correction.
    #[serde(default)]
    pub reply_to: Option<FindingId>,
    /// Agent ids in this room the finding is for (a handoff or a question): they are told in
    /// their feed. An id not in the room is refused with the list of those who are.
    #[serde(default)]
    pub mentions: Vec<AgentId>,
    /// Any unique string (e.g. a UUID); retrying with the same key never posts twice.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// Which of your agents posts; defaults to the one you joined with.
    #[serde(default)]
    pub agent_id: Option<AgentId>,
}

impl PostFinding {
    /// A finding with content only.
    pub fn new(room_id: RoomId, agent_id: AgentId, content: impl Into<String>) -> Self {
        Self {
            room_id,
            agent_id: Some(agent_id),
            content: content.into(),
            tags: Vec::new(),
            entity_refs: Vec::new(),
            evidence: Vec::new(),
            reply_to: None,
            mentions: Vec::new(),
            idempotency_key: None,
        }
    }

    /// Answering this finding.
    pub fn reply_to(mut self, finding_id: FindingId) -> Self {
        self.reply_to = Some(finding_id);
        self
    }

    /// Mentioning these agents.
    pub fn mentions(mut self, agents: impl IntoIterator<Item = AgentId>) -> Self {
        self.mentions = agents.into_iter().collect();
        self
    }

    /// With tags.
    pub fn tags<I: IntoIterator<Item = S>, S: Into<String>>(mut self, tags: I) -> Self {
        self.tags = tags.into_iter().map(Into::into).collect();
        self
    }

    /// With entity refs.
    pub fn entity_refs(mut self, refs: impl IntoIterator<Item = EntityId>) -> Self {
        self.entity_refs = refs.into_iter().collect();
        self
    }

    /// With evidence.
    pub fn evidence(mut self, evidence: impl IntoIterator<Item = Evidence>) -> Self {
        self.evidence = evidence.into_iter().collect();
        self
    }

    /// With an idempotency key.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }
}

/// The result of `post_finding`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct PostedFinding {
    /// The stored finding (entity refs resolved to canonical ids).
    pub finding: Finding,
    /// True when this was a retry of an earlier post with the same idempotency key: nothing
    /// new was written.
    pub replayed: bool,
}

/// `get_timeline`: the record in order, filtered, a page at a time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct TimelineQuery {
    /// The room.
    pub room_id: RoomId,
    /// Only findings with at least one of these tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Only findings posted by this agent.
    #[serde(default)]
    pub agent_id: Option<AgentId>,
    /// Only the answers to this finding (its thread).
    #[serde(default)]
    pub reply_to: Option<FindingId>,
    /// Only findings posted at or after this time (RFC 3339).
    #[serde(default)]
    pub since: Option<Timestamp>,
    /// Only findings posted before this time (RFC 3339).
    #[serde(default)]
    pub until: Option<Timestamp>,
    /// Page size (default 50, at most 200).
    #[serde(default)]
    pub limit: Option<usize>,
    /// `next_cursor` from the previous page (same filters).
    #[serde(default)]
    pub cursor: Option<String>,
}

impl TimelineQuery {
    /// The whole timeline of a room, first page.
    pub fn new(room_id: RoomId) -> Self {
        Self {
            room_id,
            tags: Vec::new(),
            agent_id: None,
            reply_to: None,
            since: None,
            until: None,
            limit: None,
            cursor: None,
        }
    }

    /// Only the answers to `finding_id`.
    pub fn replies_to(mut self, finding_id: FindingId) -> Self {
        self.reply_to = Some(finding_id);
        self
    }

    /// Only findings with one of these tags.
    pub fn tags<I: IntoIterator<Item = S>, S: Into<String>>(mut self, tags: I) -> Self {
        self.tags = tags.into_iter().map(Into::into).collect();
        self
    }

    /// Only findings by this agent.
    pub fn agent(mut self, agent_id: AgentId) -> Self {
        self.agent_id = Some(agent_id);
        self
    }

    /// Only findings posted in `[since, until)` (either end open when `None`).
    pub fn between(mut self, since: Option<Timestamp>, until: Option<Timestamp>) -> Self {
        self.since = since;
        self.until = until;
        self
    }

    /// Page size.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }

    /// The page after this cursor (a `String`, or an `Option` of one).
    pub fn cursor(mut self, cursor: impl Into<Option<String>>) -> Self {
        self.cursor = cursor.into();
        self
    }
}

/// A page of findings in commit order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct FindingPage {
    /// The findings, oldest first.
    pub findings: Vec<Finding>,
    /// Pass back as `cursor` (with the same filters) for the next page; absent on the last.
    pub next_cursor: Option<String>,
}

#[derive(Serialize)]
struct FindingFingerprint<'a> {
    agent_id: &'a AgentId,
    content: &'a str,
    tags: &'a [String],
    entity_refs: &'a [EntityId],
    evidence: &'a [Evidence],
    // Absent when empty, so that a post without them hashes as it did before they existed.
    #[serde(skip_serializing_if = "Option::is_none")]
    reply_to: Option<FindingId>,
    #[serde(skip_serializing_if = "<[AgentId]>::is_empty")]
    mentions: &'a [AgentId],
}

impl Macp {
    /// Posts a finding. It is committed as `pending`; indexing for semantic search follows.
    pub async fn post_finding(&self, who: &Principal, req: PostFinding) -> Result<PostedFinding> {
        let l = &self.inner.limits;
        self.writable_room(req.room_id).await?;
        let session = self.agent_session(who, req.room_id, req.agent_id.as_ref()).await?;
        let content = validate::required_text("content", &req.content, l.max_content_bytes)?;
        let tags = validate::tags("tags", &req.tags, l)?;
        let evidence = validate::evidence(&req.evidence, l)?;
        let key = validate::idempotency_key(req.idempotency_key.as_deref(), l)?;
        let mut refs = Vec::with_capacity(req.entity_refs.len());
        for r in &req.entity_refs {
            if !refs.contains(r) {
                refs.push(*r);
            }
        }
        if refs.len() > l.max_entity_refs {
            return Err(Error::too_many("entity_refs", l.max_entity_refs, refs.len()));
        }
        // Most posts name no entities: skip the alias read for them.
        let aliases = if refs.is_empty() { Aliases::default() } else { self.aliases(req.room_id).await? };
        self.require_entities(req.room_id, &refs, "entity_refs").await?;
        if let Some(r) = req.reply_to
            && self.inner.store.get_findings(req.room_id, &[r]).await?.is_empty()
        {
            return Err(Error::not_found_hint(
                "finding",
                r,
                "reply_to must be a finding of this room; find it with get_timeline or search_findings",
            ));
        }
        let mentions = self.mentioned(req.room_id, &req.mentions).await?;

        let print = fingerprint(
            WriteOperation::PostFinding,
            &FindingFingerprint {
                agent_id: &session.agent_id,
                content: &content,
                tags: &tags,
                entity_refs: &refs,
                evidence: &evidence,
                reply_to: req.reply_to,
                mentions: &mentions,
            },
        );
        let now = self.now();
        let finding = Finding {
            room_id: req.room_id,
            finding_id: FindingId::generate(),
            seq: 0,
            content,
            agent_id: session.agent_id.clone(),
            user_id: who.user_id.clone(),
            tags,
            entity_refs: aliases.resolve_all(&refs)?,
            evidence,
            reply_to: req.reply_to,
            mentions,
            index_status: IndexStatus::Pending,
            idempotency_key: key.clone(),
            created_at: now,
        };
        let keyed = idempotency_key(
            key.as_ref(),
            WriteOperation::PostFinding,
            &print,
            finding.finding_id.to_string(),
            now,
        );
        let event = Event::new(EventKind::FindingPosted, now, who.user_id.clone(), &finding.content)
            .agent(&session.agent_id)
            .finding(finding.finding_id);
        // Where the index is the store itself, the vector is written with the post, which is
        // then never pending; otherwise (or if the store declines) the post is committed pending
        // and indexed after (see `service::search`).
        let with_vector = match self.vector_for_post(&finding).await {
            Some(v) => {
                let indexed = Finding { index_status: IndexStatus::Indexed, ..finding.clone() };
                self.inner.store.append_finding_with_vector(&indexed, keyed.as_ref(), &v, &event).await?
            }
            None => None,
        };
        let (outcome, indexed) = match with_vector {
            Some(w) => (w, true),
            None => (self.inner.store.append_finding(&finding, keyed.as_ref(), &event).await?, false),
        };
        let (stored, replayed) = match outcome {
            Write::Applied(mut f) => {
                self.changed(req.room_id);
                if !indexed {
                    self.index_after_post(&mut f).await;
                }
                (f, false)
            }
            Write::Replayed(rec) => {
                check_replay(&rec, WriteOperation::PostFinding, &print)?;
                let id: FindingId = rec.result_id.parse()?;
                let found = self.inner.store.get_findings(req.room_id, &[id]).await?;
                let f = found.into_iter().next().ok_or_else(|| Error::not_found("finding", id))?;
                (f, true)
            }
        };
        self.touch(&session).await;
        let mut out = vec![stored];
        resolve_refs(&aliases, &mut out)?;
        let finding = out.pop().ok_or_else(|| Error::not_found("finding", finding.finding_id))?;
        Ok(PostedFinding { finding, replayed })
    }

    /// The agents a finding mentions, without repeats: each must be in the room. An unknown one
    /// is refused with the agents who are there, so a typo never silently drops a handoff.
    async fn mentioned(&self, room_id: RoomId, raw: &[AgentId]) -> Result<Vec<AgentId>> {
        let max = self.inner.limits.max_mentions;
        let mut out: Vec<AgentId> = Vec::new();
        for a in raw {
            if !out.contains(a) {
                out.push(a.clone());
            }
        }
        if out.len() > max {
            return Err(Error::too_many("mentions", max, out.len()));
        }
        if out.is_empty() {
            return Ok(out);
        }
        let agents = self.inner.store.list_agents(room_id).await?;
        let unknown: Vec<&AgentId> =
            out.iter().filter(|m| !agents.iter().any(|s| &s.agent_id == *m)).collect();
        if !unknown.is_empty() {
            let names: Vec<&str> = agents.iter().map(|s| s.agent_id.as_str()).collect();
            return Err(Error::invalid(
                "mentions",
                format!(
                    "{} not in this room; the room's agents are: {}. Nothing was posted",
                    unknown.iter().map(|a| format!("`{a}` is")).collect::<Vec<_>>().join(", "),
                    names.join(", ")
                ),
            ));
        }
        Ok(out)
    }

    /// Every id in `ids` must name an entity of the room (merged-away ids count: they resolve).
    pub(crate) async fn require_entities(
        &self,
        room_id: RoomId,
        ids: &[EntityId],
        field: &str,
    ) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let found = self.inner.store.get_entities(room_id, ids).await?;
        if let Some(missing) = ids.iter().find(|id| !found.iter().any(|e| e.entity_id == **id)) {
            return Err(Error::not_found_hint(
                "entity",
                missing,
                format!(
                    "every id in {field} must be an entity of this room; create it with add_entity first"
                ),
            ));
        }
        Ok(())
    }

    /// Chronological findings of a room, filtered by tags (any of), agent and time range.
    pub async fn timeline(&self, _who: &Principal, q: TimelineQuery) -> Result<FindingPage> {
        let l = &self.inner.limits;
        self.room(q.room_id).await?;
        let limit = validate::page_size("limit", q.limit, l.default_page, l.max_page)?;
        let tags = if q.tags.is_empty() { Vec::new() } else { validate::tags("tags", &q.tags, l)? };
        if let (Some(s), Some(u)) = (q.since, q.until)
            && s >= u
        {
            return Err(Error::invalid("until", "until must be later than since"));
        }
        let filters = match q.reply_to {
            None => digest("timeline", &(&tags, &q.agent_id, q.since, q.until)),
            Some(r) => digest("timeline", &(&tags, &q.agent_id, q.since, q.until, r)),
        };
        let room = q.room_id.to_string();
        let after_seq = match &q.cursor {
            None => 0,
            Some(c) => {
                let p = cursor::decode("cursor", "t1", c, 3)?;
                if p[0] != room || p[2] != filters[..16] {
                    return Err(Error::invalid(
                        "cursor",
                        "this cursor belongs to another room or other filters; repeat the same filters or omit the cursor",
                    ));
                }
                p[1].parse().map_err(|_| Error::invalid("cursor", "malformed cursor"))?
            }
        };
        let query = FindingQuery {
            after_seq,
            before_seq: None,
            tags_any: tags,
            agent_id: q.agent_id,
            reply_to: q.reply_to,
            since: q.since,
            until: q.until,
            limit: limit + 1,
            descending: false,
        };
        let mut findings = self.inner.store.list_findings(q.room_id, &query).await?;
        let next_cursor = if findings.len() > limit {
            findings.truncate(limit);
            findings.last().map(|f| cursor::encode("t1", &[&room, &f.seq.to_string(), &filters[..16]]))
        } else {
            None
        };
        resolve_refs(&self.aliases(q.room_id).await?, &mut findings)?;
        Ok(FindingPage { findings, next_cursor })
    }
}

/// Rewrites findings' entity refs to canonical ids (merged entities resolve to their winner).
pub(crate) fn resolve_refs(aliases: &Aliases, findings: &mut [Finding]) -> Result<()> {
    for f in findings {
        f.entity_refs = aliases.resolve_all(&f.entity_refs)?;
    }
    Ok(())
}
