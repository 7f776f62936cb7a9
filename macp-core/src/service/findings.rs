//! Findings: posting, the timeline and the updates feed.

use serde::{Deserialize, Serialize};

use super::{Aliases, Macp, Principal, check_replay, digest, fingerprint, idempotency_key};
use crate::cursor;
use crate::error::{Error, Result};
use crate::ids::{AgentId, EntityId, FindingId, RoomId, Timestamp};
use crate::model::{Event, EventKind, Evidence, Finding, IndexStatus, VerdictKind};
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
    /// Secrets are redacted; `<private>…</private>` spans are dropped.
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
    /// True to offer this as a theory to test rather than an established fact (the tag
    /// "hypothesis" does the same). Teammates then confirm or refute it with a verdict.
    #[serde(default)]
    pub hypothesis: bool,
    /// Your judgement of the finding in `reply_to`, once you have tested it: `confirms` or
    /// `refutes` (both need evidence), or `supersedes` (a better account replaces it). It sets
    /// that finding's `standing`, which every read shows, so nobody builds on a refuted theory.
    #[serde(default)]
    pub verdict: Option<VerdictKind>,
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
            hypothesis: false,
            verdict: None,
            idempotency_key: None,
        }
    }

    /// Offered as a hypothesis.
    pub fn hypothesis(mut self) -> Self {
        self.hypothesis = true;
        self
    }

    /// Passing this verdict on `finding_id` (which it answers).
    pub fn verdict(mut self, verdict: VerdictKind, finding_id: FindingId) -> Self {
        self.verdict = Some(verdict);
        self.reply_to = Some(finding_id);
        self
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
    /// Secrets redacted from this write, by kind.
    #[serde(default, skip_serializing_if = "crate::redact::Redactions::is_empty")]
    pub redacted: crate::redact::Redactions,
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
    /// One finding and its thread: that finding (with its standing) first, then the findings
    /// that answer it. The way to read a finding by id.
    #[serde(default)]
    pub thread: Option<FindingId>,
    /// Only findings about this entity (its `entity_refs` name it, or an entity merged into it).
    #[serde(default)]
    pub entity_id: Option<EntityId>,
    /// Only findings after this section marker (`m1`, `m2`, … from the room's `markers`): the
    /// phase it opened and those since.
    #[serde(default)]
    pub after_marker: Option<String>,
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
            thread: None,
            entity_id: None,
            after_marker: None,
            since: None,
            until: None,
            limit: None,
            cursor: None,
        }
    }

    /// `finding_id` and the findings that answer it.
    pub fn thread(mut self, finding_id: FindingId) -> Self {
        self.thread = Some(finding_id);
        self
    }

    /// Only findings about this entity.
    pub fn entity(mut self, entity_id: EntityId) -> Self {
        self.entity_id = Some(entity_id);
        self
    }

    /// Only findings after this marker.
    pub fn after_marker(mut self, marker_id: impl Into<String>) -> Self {
        self.after_marker = Some(marker_id.into());
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
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    hypothesis: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    verdict: Option<VerdictKind>,
}

impl Macp {
    /// Posts a finding. It is committed as `pending`; indexing for semantic search follows.
    pub async fn post_finding(&self, who: &Principal, mut req: PostFinding) -> Result<PostedFinding> {
        let redacted = self.redact(&mut req)?;
        let l = &self.inner.limits;
        self.writable_room(who, req.room_id).await?;
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
        if let Some(v) = req.verdict {
            if req.reply_to.is_none() {
                return Err(Error::invalid(
                    "verdict",
                    "a verdict judges the finding it answers: set reply_to to the finding you confirm, refute or supersede",
                ));
            }
            if v.needs_evidence() && evidence.is_empty() {
                return Err(Error::invalid(
                    "evidence",
                    format!(
                        "a verdict that {v} a finding must carry its evidence (at least one item: the log, metric, \
                         query or artifact that shows it); without proof, post it as a reply without a verdict"
                    ),
                ));
            }
        }
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
        self.check_exchange_budget(req.room_id, &session.agent_id, &mentions, key.as_deref()).await?;
        let hypothesis = req.hypothesis || tags.iter().any(|t| t == "hypothesis");

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
                hypothesis,
                verdict: req.verdict,
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
            hypothesis,
            verdict: req.verdict,
            standing: None,
            index_status: IndexStatus::Pending,
            idempotency_key: key.clone(),
            created_at: now,
            erased: None,
        };
        let keyed = idempotency_key(
            key.as_ref(),
            WriteOperation::PostFinding,
            &print,
            finding.finding_id.to_string(),
            now,
        );
        let event = Event::new(EventKind::FindingPosted, now, who.user_id.clone(), &finding.post_summary())
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
        Ok(PostedFinding { finding, replayed, redacted })
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

    /// The directed exchange budget: `me` may not address a finding to an agent with whom it has
    /// already exchanged [`Limits::max_exchanges`](crate::Limits::max_exchanges) addressed
    /// findings (either way) since a person last acted in the room. Counted over the room's
    /// recent feed (eight events per unit of budget, at least 64): a loop that fast is what
    /// the budget is for; exchanges spread wider than that are a conversation. Advisory under
    /// concurrency: two posts checked at once may both pass. A retry of a post already made
    /// (same idempotency key) always passes: the store then answers it with the first result.
    async fn check_exchange_budget(
        &self,
        room_id: RoomId,
        me: &AgentId,
        mentions: &[AgentId],
        key: Option<&str>,
    ) -> Result<()> {
        let budget = self.inner.limits.max_exchanges;
        let others: Vec<&AgentId> = mentions.iter().filter(|m| *m != me).collect();
        if budget == 0 || others.is_empty() {
            return Ok(());
        }
        let store = &self.inner.store;
        let window = (budget * 8).max(64);
        let last = store.last_event_seq(room_id).await?;
        let events = store.list_events(room_id, last.saturating_sub(window as u64), &[], window).await?;
        let mut posts = Vec::new();
        for e in events.iter().rev() {
            if e.by_person() {
                break;
            }
            let by_pair = e.agent_id.as_ref().is_some_and(|a| a == me || others.contains(&a));
            if e.kind == EventKind::FindingPosted && by_pair {
                posts.extend(e.finding_id);
            }
        }
        if posts.len() < budget {
            return Ok(());
        }
        let findings = store.get_findings(room_id, &posts).await?;
        if key.is_some() && findings.iter().any(|f| &f.agent_id == me && f.idempotency_key.as_deref() == key)
        {
            return Ok(());
        }
        for other in others {
            let exchanged = findings
                .iter()
                .filter(|f| {
                    (&f.agent_id == me && f.mentions.contains(other))
                        || (&f.agent_id == other && f.mentions.contains(me))
                })
                .count();
            if exchanged >= budget {
                return Err(Error::CapacityExceeded {
                    what: "directed exchange budget",
                    limit: budget as u64,
                    message: format!(
                        "`{me}` and `{other}` have addressed {exchanged} findings to each other with no person acting \
                         in the room since. Nothing was posted. To go on: post without mentioning `{other}`, or ask the \
                         people (ask_decision) and wait: a person acting directly (answering in the web view or with \
                         `macp decide`, marking a phase, changing the objective, releasing a claim) resets the budget; \
                         an answer relayed by an agent does not"
                    ),
                });
            }
        }
        Ok(())
    }

    /// Every id in `ids` must name a finding of the room.
    pub(crate) async fn require_findings(
        &self,
        room_id: RoomId,
        ids: &[FindingId],
        field: &str,
    ) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let found = self.inner.store.get_findings(room_id, ids).await?;
        if let Some(missing) = ids.iter().find(|id| !found.iter().any(|f| f.finding_id == **id)) {
            return Err(Error::not_found_hint(
                "finding",
                missing,
                format!(
                    "every id in {field} must be a finding of this room; find it with get_timeline or search_findings"
                ),
            ));
        }
        Ok(())
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
    pub async fn timeline(&self, who: &Principal, q: TimelineQuery) -> Result<FindingPage> {
        let l = &self.inner.limits;
        let room = self.room(who, q.room_id).await?;
        let limit = validate::page_size("limit", q.limit, l.default_page, l.max_page)?;
        let tags = if q.tags.is_empty() { Vec::new() } else { validate::tags("tags", &q.tags, l)? };
        if let (Some(s), Some(u)) = (q.since, q.until)
            && s >= u
        {
            return Err(Error::invalid("until", "until must be later than since"));
        }
        let marker_seq = match &q.after_marker {
            None => 0,
            Some(m) => room.marker(m.trim()).map(|m| m.after_seq).ok_or_else(|| {
                Error::not_found_hint(
                    "marker",
                    m,
                    "after_marker takes a marker id (m1, m2, …) from the room's markers in get_room_context",
                )
            })?,
        };
        // Entities merged into the one asked about count as it: their findings are about it too.
        let aliases = self.aliases(q.room_id).await?;
        let entity_refs_any = match q.entity_id {
            None => Vec::new(),
            Some(e) => {
                self.require_entities(q.room_id, &[e], "entity_id").await?;
                let canonical = aliases.resolve(e)?;
                aliases.known_as(canonical)
            }
        };
        // The filters a cursor is bound to; the original four alone hash as they always did.
        let extra = (q.thread, q.entity_id, q.after_marker.as_deref());
        let filters = if extra == (None, None, None) {
            digest("timeline", &(&tags, &q.agent_id, q.since, q.until))
        } else {
            digest("timeline", &(&tags, &q.agent_id, q.since, q.until, extra))
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
        // A thread starts with the finding itself, on its first page.
        let mut head = Vec::new();
        if let Some(t) = q.thread {
            let found = self.inner.store.get_findings(q.room_id, &[t]).await?;
            if found.is_empty() {
                return Err(Error::not_found_hint(
                    "finding",
                    t,
                    "thread takes a finding id of this room; find it with get_timeline or search_findings",
                ));
            }
            if q.cursor.is_none() {
                head = found;
            }
        }
        let query = FindingQuery {
            after_seq: after_seq.max(marker_seq),
            before_seq: None,
            tags_any: tags,
            agent_id: q.agent_id,
            reply_to: q.thread,
            entity_refs_any,
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
        head.append(&mut findings);
        let mut findings = head;
        resolve_refs(&aliases, &mut findings)?;
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
