//! The bounded room context: what a fresh agent needs to orient, within fixed caps.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::events::feed_cursor;
use super::findings::resolve_refs;
use super::rooms::AgentCounts;
use super::{Macp, Principal};
use crate::error::Result;
use crate::ids::{AgentId, EntityId, FindingId, RoomId, Timestamp, UserId};
use crate::limits::ContextCaps;
use crate::model::{
    AgentSession, Claim, Decision, EntityType, EventKind, Finding, Identifier, Marker, Room, Unread,
    VerdictKind,
};
use crate::store::FindingQuery;

/// A finding as shown in the context: content shortened to the preview cap, with an explicit
/// marker when it was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct ContextFinding {
    /// Id (read it whole with get_timeline).
    pub finding_id: FindingId,
    /// Commit sequence number.
    pub seq: u64,
    /// Author agent.
    pub agent_id: AgentId,
    /// Author person.
    pub user_id: UserId,
    /// Tags.
    pub tags: Vec<String>,
    /// Canonical entity refs.
    pub entity_refs: Vec<EntityId>,
    /// Content, or its first `content_preview_chars` characters when `content_truncated`.
    pub content: String,
    /// True when `content` is a preview of a longer finding.
    pub content_truncated: bool,
    /// Length of the full content in characters.
    pub content_chars: usize,
    /// Number of evidence items.
    pub evidence_count: usize,
    /// The finding it answers, if it is in a thread.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<FindingId>,
    /// True when offered as a hypothesis.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub hypothesis: bool,
    /// Its verdict on `reply_to`, when it passes one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<VerdictKind>,
    /// The latest verdict passed on it (`refutes`: do not build on it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub standing: Option<VerdictKind>,
    /// When it was posted.
    pub created_at: Timestamp,
}

/// A thread with recent answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct ActiveThread {
    /// The finding answered (read the thread with get_timeline `thread`).
    pub finding_id: FindingId,
    /// Answers to it among the findings shown.
    pub recent_replies: usize,
    /// When the latest of them was posted.
    pub last_reply_at: Timestamp,
}

/// The most recent findings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct ContextFindings {
    /// Findings in the room.
    pub total: u64,
    /// Findings shown here.
    pub shown: usize,
    /// The most recent findings, oldest first.
    pub items: Vec<ContextFinding>,
}

/// An entity as shown in the context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct ContextEntity {
    /// Canonical id.
    pub entity_id: EntityId,
    /// Name.
    pub name: String,
    /// Kind.
    #[serde(rename = "type")]
    pub entity_type: EntityType,
    /// Identifiers: reuse them in add_entity to converge on this entity.
    pub identifiers: Vec<Identifier>,
    /// Relationship degree.
    pub degree: u64,
}

/// The best-connected entities.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct ContextEntities {
    /// Entities in the room (merged aliases not counted).
    pub total: u64,
    /// Entities shown here.
    pub shown: usize,
    /// Relationships in the room.
    pub relationship_total: u64,
    /// Highest degree first.
    pub items: Vec<ContextEntity>,
}

/// Who is in the room and what they declared.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct ContextAgents {
    /// Counts by declared status.
    pub counts: AgentCounts,
    /// Agents shown here.
    pub shown: usize,
    /// Most recently active first.
    pub items: Vec<AgentSession>,
    /// Agents (of all, not only those shown) that have not been active for longer than the
    /// server's stale time, whatever they last declared.
    pub stale: Vec<AgentId>,
}

/// `get_room_context`: which room, and as which agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ContextQuery {
    /// The room.
    pub room_id: RoomId,
    /// Which of your agents to count unread changes for; defaults to the one you joined with.
    #[serde(default)]
    pub agent_id: Option<AgentId>,
}

impl From<RoomId> for ContextQuery {
    fn from(room_id: RoomId) -> Self {
        Self { room_id, agent_id: None }
    }
}

impl ContextQuery {
    /// The context of `room_id` as `agent_id` (with its unread counts).
    pub fn agent(room_id: RoomId, agent_id: AgentId) -> Self {
        Self { room_id, agent_id: Some(agent_id) }
    }
}

/// `get_room_context`: a bounded snapshot for a fresh agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct RoomContext {
    /// The room, with its objective. Its `markers` and `objective_history` are left out here
    /// (see `phase` and `markers_total`; get_room_summary has them all).
    pub room: Room,
    /// The current phase: the latest section marker, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<Marker>,
    /// Section markers in the room.
    pub markers_total: usize,
    /// Questions agents asked the people that are not answered yet, oldest first: read them
    /// first.
    pub open_decisions: Vec<Decision>,
    /// Latest findings and the total.
    pub findings: ContextFindings,
    /// Threads answered among the latest findings, most recently answered first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub active_threads: Vec<ActiveThread>,
    /// Findings per tag over the whole room (which lines of inquiry exist or are closed): the
    /// most used tags, up to the `tags` cap.
    pub tag_counts: BTreeMap<String, u64>,
    /// Distinct tags on the room's findings.
    pub tags_total: usize,
    /// Tags listed in `tag_counts`.
    pub tags_shown: usize,
    /// Top entities and the totals.
    pub entities: ContextEntities,
    /// Agents and their declared statuses.
    pub agents: ContextAgents,
    /// Artifacts in the room.
    pub artifact_count: u64,
    /// Work agents have claimed and hold now, oldest first: do not repeat it.
    pub claims: Vec<Claim>,
    /// Claims held in the room (more than `claims` lists if the budget ran out).
    pub claims_total: usize,
    /// The caps this snapshot was cut to.
    pub caps: ContextCaps,
    /// Poll get_updates from here: it returns exactly the changes committed after this
    /// snapshot (no finding shown here is returned again).
    pub cursor: String,
    /// What your agent has not acknowledged yet (when the context is read as an agent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unread: Option<Unread>,
}

impl Macp {
    /// A bounded snapshot of a room: the objective, the N most recent findings, the top-K
    /// entities by relationship degree, agents and their statuses, totals, the caps used, and a
    /// cursor to poll updates from. The serialised snapshot never exceeds the byte budget.
    pub async fn room_context(&self, who: &Principal, q: impl Into<ContextQuery>) -> Result<RoomContext> {
        let ContextQuery { room_id, agent_id } = q.into();
        let caps = self.inner.caps.clone();
        let store = &self.inner.store;
        // The room first, alone: an agent named by a non-member, or the room's size in the time
        // taken, would otherwise tell that a members-only room exists.
        let room = self.room(who, room_id).await?;
        let unread = match &agent_id {
            Some(a) => {
                let agent = self.agent_session(who, room_id, Some(a)).await?.agent_id;
                Some(self.unread(room_id, &agent).await?)
            }
            None => None,
        };
        // The feed's head before the snapshot: the cursor. Findings posted after it are left
        // out below, so get_updates from the cursor neither repeats nor skips one.
        let head = store.last_event_seq(room_id).await?;
        // Independent reads, at once: on a networked store (DynamoDB) each is a round trip.
        let latest_query = FindingQuery::latest(caps.findings);
        let (aliases, stats, mut latest, entity_stats, mut agents, artifact_count, claims, open_decisions) =
            tokio::try_join!(
                self.aliases(room_id),
                store.finding_stats(room_id),
                store.list_findings(room_id, &latest_query),
                store.entity_stats(room_id),
                store.list_agents(room_id),
                store.count_artifacts(room_id),
                store.list_claims(room_id, self.now()),
                self.decisions(room_id, true),
            )?;
        let later = store.list_events(room_id, head, &[EventKind::FindingPosted], 10_000).await?;
        latest.retain(|f| !later.iter().any(|e| e.finding_id == Some(f.finding_id)));
        resolve_refs(&aliases, &mut latest)?;
        latest.reverse();
        // Sequence numbers are gap-free from 1, so the newest finding read names the total
        // consistently with what is shown, even while others are posting.
        let newest_seq = latest.last().map_or(0, |f| f.seq);
        let total = newest_seq.max(stats.total.saturating_sub(later.len() as u64));
        let top = self.top_entities(room_id, &aliases, caps.entities).await?;
        let now = self.now();
        let counts = AgentCounts::of(&agents, now, self.inner.stale_after_ms);
        let stale: Vec<AgentId> = agents
            .iter()
            .filter(|a| super::rooms::is_stale(a, now, self.inner.stale_after_ms))
            .map(|a| a.agent_id.clone())
            .collect();
        agents.sort_by(|a, b| b.last_active.cmp(&a.last_active).then(a.agent_id.cmp(&b.agent_id)));
        agents.truncate(caps.agents);

        let items: Vec<ContextFinding> =
            latest.iter().map(|f| preview(f, caps.content_preview_chars)).collect();
        let tags_total = stats.tag_counts.len();
        let tag_counts = most_used(stats.tag_counts, caps.tags);
        let mut active_threads: Vec<ActiveThread> = Vec::new();
        for f in latest.iter().rev() {
            let Some(root) = f.reply_to else { continue };
            match active_threads.iter_mut().find(|t| t.finding_id == root) {
                Some(t) => t.recent_replies += 1,
                None => active_threads.push(ActiveThread {
                    finding_id: root,
                    recent_replies: 1,
                    last_reply_at: f.created_at,
                }),
            }
        }
        let mut room = room;
        let phase = room.markers.pop();
        let markers_total = room.markers.len() + usize::from(phase.is_some());
        room.markers.clear();
        room.objective_history.clear();
        let mut ctx = RoomContext {
            room,
            phase,
            markers_total,
            active_threads,
            open_decisions,
            findings: ContextFindings { total, shown: items.len(), items },
            tags_shown: tag_counts.len(),
            tag_counts,
            tags_total,
            entities: ContextEntities {
                total: entity_stats.canonical,
                shown: top.len(),
                relationship_total: entity_stats.relationships,
                items: top
                    .into_iter()
                    .map(|g| ContextEntity {
                        entity_id: g.entity.entity_id,
                        name: g.entity.name,
                        entity_type: g.entity.entity_type,
                        identifiers: g.entity.identifiers,
                        degree: g.degree,
                    })
                    .collect(),
            },
            agents: ContextAgents { counts, shown: agents.len(), items: agents, stale },
            artifact_count,
            claims_total: claims.len(),
            claims,
            caps,
            cursor: feed_cursor(room_id, head),
            unread,
        };
        fit_budget(&mut ctx);
        Ok(ctx)
    }
}

fn preview(f: &Finding, max_chars: usize) -> ContextFinding {
    let chars = f.content.chars().count();
    let (content, truncated) = if chars <= max_chars {
        (f.content.clone(), false)
    } else {
        (f.content.chars().take(max_chars).collect(), true)
    };
    ContextFinding {
        finding_id: f.finding_id,
        seq: f.seq,
        agent_id: f.agent_id.clone(),
        user_id: f.user_id.clone(),
        tags: f.tags.clone(),
        entity_refs: f.entity_refs.clone(),
        content,
        content_truncated: truncated,
        content_chars: chars,
        evidence_count: f.evidence.len(),
        reply_to: f.reply_to,
        hypothesis: f.hypothesis,
        verdict: f.verdict,
        standing: f.standing.as_ref().map(|s| s.verdict),
        created_at: f.created_at,
    }
}

/// The `n` most used tags (ties by name).
fn most_used(counts: BTreeMap<String, u64>, n: usize) -> BTreeMap<String, u64> {
    if counts.len() <= n {
        return counts;
    }
    let mut all: Vec<(String, u64)> = counts.into_iter().collect();
    all.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    all.truncate(n);
    all.into_iter().collect()
}

/// The least used of the listed tags (the last one `most_used` would keep).
fn least_used(counts: &BTreeMap<String, u64>) -> Option<String> {
    counts.iter().min_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0))).map(|(t, _)| t.clone())
}

fn size(ctx: &RoomContext) -> usize {
    serde_json::to_vec(ctx).map(|v| v.len()).unwrap_or(usize::MAX)
}

/// Drops items until the serialised context fits its budget: first the oldest findings, the
/// lowest-degree entities, the least recently active agents and the least used tags down to a
/// floor of five each, then below it. The `shown` counts say what remains, next to the totals.
fn fit_budget(ctx: &mut RoomContext) {
    let budget = ctx.caps.budget_bytes;
    for floor in [5usize, 0] {
        while size(ctx) > budget && ctx.findings.items.len() > floor {
            ctx.findings.items.remove(0);
            ctx.findings.shown = ctx.findings.items.len();
        }
        while size(ctx) > budget && ctx.entities.items.len() > floor {
            ctx.entities.items.pop();
            ctx.entities.shown = ctx.entities.items.len();
        }
        while size(ctx) > budget && ctx.agents.items.len() > floor {
            ctx.agents.items.pop();
            ctx.agents.shown = ctx.agents.items.len();
        }
        while size(ctx) > budget && ctx.claims.len() > floor {
            ctx.claims.pop();
        }
        while size(ctx) > budget && ctx.tag_counts.len() > floor {
            if let Some(t) = least_used(&ctx.tag_counts) {
                ctx.tag_counts.remove(&t);
            }
            ctx.tags_shown = ctx.tag_counts.len();
        }
    }
}
