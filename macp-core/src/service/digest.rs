//! The digest: what happened in a room since a time or a section marker, per agent, bounded,
//! with exact totals (the async team's standup).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::events::feed_cursor;
use super::{Macp, Principal};
use crate::error::{Error, Result};
use crate::ids::{AgentId, FindingId, RoomId, Timestamp};
use crate::model::{Decision, Event, EventKind, Marker, VerdictKind};
use crate::store::FindingQuery;

/// Findings a digest reads at most; a longer window is refused (a later `since` or marker
/// narrows it) rather than summarised from a part.
pub const MAX_DIGEST_FINDINGS: usize = 10_000;

/// Items a digest lists per section (totals stay exact).
pub const DIGEST_ITEMS: usize = 25;

/// Latest findings shown per agent.
const PER_AGENT_LATEST: usize = 3;

/// Characters of a finding shown in the digest.
const PREVIEW_CHARS: usize = 160;

/// `get_room_summary`: the room at a glance, and with `since` or `since_marker`, the digest of
/// what happened since.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct SummaryQuery {
    /// The room.
    pub room_id: RoomId,
    /// Add a digest of everything since this time (RFC 3339): per agent what it found, status
    /// changes, claims, decisions, new entities, phases. For a standup or a handover.
    #[serde(default)]
    pub since: Option<Timestamp>,
    /// Or since this section marker (`m1`, `m2`, … from the room's markers).
    #[serde(default)]
    pub since_marker: Option<String>,
}

impl From<RoomId> for SummaryQuery {
    fn from(room_id: RoomId) -> Self {
        Self { room_id, since: None, since_marker: None }
    }
}

impl SummaryQuery {
    /// The summary of `room_id` with a digest since `since`.
    pub fn since(room_id: RoomId, since: Timestamp) -> Self {
        Self { room_id, since: Some(since), since_marker: None }
    }

    /// The summary of `room_id` with a digest since the marker `marker_id`.
    pub fn since_marker(room_id: RoomId, marker_id: impl Into<String>) -> Self {
        Self { room_id, since: None, since_marker: Some(marker_id.into()) }
    }
}

/// A finding as the digest shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct DigestFinding {
    /// Read it whole with get_timeline `thread`.
    pub finding_id: FindingId,
    /// Its first characters.
    pub preview: String,
    /// True when `preview` is the start of a longer finding.
    pub preview_truncated: bool,
    /// Tags.
    pub tags: Vec<String>,
    /// Its verdict on another finding, if it passes one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<VerdictKind>,
    /// The latest verdict on it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub standing: Option<VerdictKind>,
}

/// One agent's part.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct AgentDigest {
    /// The agent.
    pub agent_id: AgentId,
    /// Findings it posted in the window (exact).
    pub findings: u64,
    /// Of those, per tag (exact; untagged ones are not counted here).
    pub by_tag: BTreeMap<String, u64>,
    /// Its latest findings in the window, newest first.
    pub latest: Vec<DigestFinding>,
}

/// A list of changes of some kinds: the first [`DIGEST_ITEMS`] in order, and the exact total.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct DigestEvents {
    /// How many there were.
    pub total: u64,
    /// The first of them, oldest first.
    pub items: Vec<Event>,
    /// When `items` does not hold them all: get_updates from here, with the same kinds,
    /// continues after the last one shown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// What happened in a room in a window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct RoomDigest {
    /// The window's start.
    pub since: Timestamp,
    /// The marker it starts at, if one was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since_marker: Option<String>,
    /// Changes of each kind in the window (exact).
    pub changes: BTreeMap<EventKind, u64>,
    /// Per agent that posted, most findings first.
    pub agents: Vec<AgentDigest>,
    /// Status declarations (who said blocked, done, left, and why).
    pub statuses: DigestEvents,
    /// Work claimed, renewed and released.
    pub claims: DigestEvents,
    /// Entities introduced.
    pub entities: DigestEvents,
    /// Decisions asked in the window, oldest first (at most [`DIGEST_ITEMS`]).
    pub decisions_asked: Vec<Decision>,
    /// How many were asked (exact).
    pub decisions_asked_total: usize,
    /// Decisions answered in the window, oldest answer first (at most [`DIGEST_ITEMS`]).
    pub decisions_answered: Vec<Decision>,
    /// How many were answered (exact).
    pub decisions_answered_total: usize,
    /// Phases started in the window.
    pub phases: Vec<Marker>,
    /// Objective changes, closing and reopening.
    pub room_changes: DigestEvents,
}

impl Macp {
    /// The digest of a room since `since`, or since the marker `since_marker`.
    pub(crate) async fn room_digest(
        &self,
        who: &Principal,
        room_id: RoomId,
        since: Option<Timestamp>,
        since_marker: Option<&str>,
    ) -> Result<RoomDigest> {
        let room = self.room(who, room_id).await?;
        // A marker's window holds the findings after its `after_seq`, as the timeline's
        // `after_marker` does, and the other changes from its time on.
        let (since, after_seq) = match (since, since_marker) {
            (Some(_), Some(_)) => {
                return Err(Error::invalid("since_marker", "give since or since_marker, not both"));
            }
            (Some(t), None) => (t, None),
            (None, Some(m)) => {
                room.marker(m.trim()).map(|m| (m.by.at, Some(m.after_seq))).ok_or_else(|| {
                    Error::not_found_hint(
                        "marker",
                        m,
                        "since_marker takes a marker id (m1, m2, …) from the room's markers",
                    )
                })?
            }
            (None, None) => return Err(Error::invalid("since", "a digest needs since or since_marker")),
        };
        let store = &self.inner.store;
        let start = self.first_event_at(room_id, since).await?;
        let first_seq = match after_seq {
            Some(s) => s,
            None => self.first_finding_at(room_id, since).await?,
        };
        let changes = store.count_events(room_id, start).await?;

        // Findings in the window, per agent and tag: exact, or refused.
        let mut agents: BTreeMap<AgentId, AgentDigest> = BTreeMap::new();
        let mut after = first_seq;
        let mut read = 0usize;
        loop {
            let page = store.list_findings(room_id, &FindingQuery::after(after, 1000)).await?;
            read += page.len();
            if read > MAX_DIGEST_FINDINGS {
                return Err(Error::CapacityExceeded {
                    what: "digest findings",
                    limit: MAX_DIGEST_FINDINGS as u64,
                    message: "more findings were posted in this window than a digest covers; give a later since or \
                              a later marker"
                        .into(),
                });
            }
            let done = page.len() < 1000;
            for f in page {
                after = f.seq;
                let a = agents.entry(f.agent_id.clone()).or_insert_with(|| AgentDigest {
                    agent_id: f.agent_id.clone(),
                    findings: 0,
                    by_tag: BTreeMap::new(),
                    latest: Vec::new(),
                });
                a.findings += 1;
                for t in &f.tags {
                    *a.by_tag.entry(t.clone()).or_default() += 1;
                }
                a.latest.insert(
                    0,
                    DigestFinding {
                        finding_id: f.finding_id,
                        preview: f.content.chars().take(PREVIEW_CHARS).collect(),
                        preview_truncated: f.content.chars().count() > PREVIEW_CHARS,
                        tags: f.tags.clone(),
                        verdict: f.verdict,
                        standing: f.standing.as_ref().map(|s| s.verdict),
                    },
                );
                a.latest.truncate(PER_AGENT_LATEST);
            }
            if done {
                break;
            }
        }
        let mut agents: Vec<AgentDigest> = agents.into_values().collect();
        agents.sort_by(|a, b| b.findings.cmp(&a.findings).then(a.agent_id.cmp(&b.agent_id)));

        let section = |kinds: &'static [EventKind]| {
            let total: u64 = kinds.iter().map(|k| changes.get(k).copied().unwrap_or(0)).sum();
            async move {
                let items = store.list_events(room_id, start, kinds, DIGEST_ITEMS).await?;
                let next_cursor = (total > items.len() as u64)
                    .then(|| items.last().map(|e| feed_cursor(room_id, e.seq)))
                    .flatten();
                Ok::<_, Error>(DigestEvents { total, items, next_cursor })
            }
        };
        let (statuses, claims, entities, room_changes, decisions) = tokio::try_join!(
            section(&[EventKind::StatusDeclared]),
            section(&[EventKind::WorkClaimed, EventKind::ClaimReleased]),
            section(&[EventKind::EntityAdded]),
            section(&[EventKind::ObjectiveChanged, EventKind::RoomClosed, EventKind::RoomReopened]),
            self.decisions(room_id, false),
        )?;
        let mut decisions_asked: Vec<Decision> =
            decisions.iter().filter(|d| d.asked_at >= since).cloned().collect();
        let decisions_asked_total = decisions_asked.len();
        decisions_asked.truncate(DIGEST_ITEMS);
        let mut decisions_answered: Vec<Decision> =
            decisions.into_iter().filter(|d| d.answer.as_ref().is_some_and(|a| a.at >= since)).collect();
        decisions_answered.sort_by_key(|d| d.answer.as_ref().map(|a| a.at));
        let decisions_answered_total = decisions_answered.len();
        decisions_answered.truncate(DIGEST_ITEMS);
        let phases = room.markers.iter().filter(|m| m.by.at >= since).cloned().collect();
        Ok(RoomDigest {
            since,
            since_marker: since_marker.map(|m| m.trim().to_owned()),
            changes,
            agents,
            statuses,
            claims,
            entities,
            decisions_asked,
            decisions_asked_total,
            decisions_answered,
            decisions_answered_total,
            phases,
            room_changes,
        })
    }

    /// The finding `seq` just before the room's first finding posted at or after `t`.
    async fn first_finding_at(&self, room_id: RoomId, t: Timestamp) -> Result<u64> {
        let store = &self.inner.store;
        let last = store.finding_stats(room_id).await?.last_seq;
        last_before(last, t, |seq| async move {
            Ok(store
                .list_findings(room_id, &FindingQuery::after(seq - 1, 1))
                .await?
                .first()
                .map(|f| f.created_at))
        })
        .await
    }

    /// The feed position just before the room's first event at or after `t`.
    async fn first_event_at(&self, room_id: RoomId, t: Timestamp) -> Result<u64> {
        let store = &self.inner.store;
        let last = store.last_event_seq(room_id).await?;
        last_before(last, t, |seq| async move {
            Ok(store.list_events(room_id, seq - 1, &[], 1).await?.first().map(|e| e.at))
        })
        .await
    }
}

/// The highest position in `1..=last` whose item is older than `t` (0 if none), by binary
/// search: `at(seq)` reads the time of the item at `seq` (`None` if absent). Findings and events
/// are appended in time order (up to clock skew between writers), so a window never scans a
/// room from its start.
async fn last_before<F, Fut>(last: u64, t: Timestamp, at: F) -> Result<u64>
where
    F: Fn(u64) -> Fut,
    Fut: std::future::Future<Output = Result<Option<Timestamp>>>,
{
    // Invariant: items <= lo are before `t`; the first at or after it is <= hi + 1.
    let (mut lo, mut hi) = (0u64, last);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        match at(mid).await? {
            Some(when) if when < t => lo = mid,
            _ => hi = mid - 1,
        }
    }
    Ok(lo)
}
