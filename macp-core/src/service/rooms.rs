//! Rooms and agent presence: create, join, close, list, summary, declared status.

use crate::redact::Written;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::digest::{RoomDigest, SummaryQuery};
use super::{Macp, Principal};
use crate::cursor;
use crate::error::{Error, Result};
use crate::ids::{AgentId, FindingId, RoomId, Timestamp, UserId};
use crate::model::{
    AgentSession, AgentStatus, Author, Channel, Event, EventKind, Marker, ObjectiveChange, Resolution, Room,
    RoomStatus, VisibilityMode,
};
use crate::store::{AgentUpdate, Insert, RoomKey};
use crate::validate;

/// `create_room`: start an investigation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateRoom {
    /// Optional short human-readable label, e.g. "checkout-502s".
    #[serde(default)]
    pub name: Option<String>,
    /// The goal of the investigation, in markdown. Every agent reads it to decide what to do.
    pub objective: String,
    /// Optional labels for the room, e.g. ["sev-2", "payments"].
    #[serde(default)]
    pub tags: Vec<String>,
    /// Only "full" exists: every member sees every finding (the default).
    #[serde(default)]
    pub visibility_mode: Option<VisibilityMode>,
    /// Days to keep it once closed, then purge it (0: for good).
    #[serde(default)]
    pub retention_days: Option<u32>,
    /// Only these people (user ids) may see it; you are one. Default: everyone.
    #[serde(default)]
    pub members: Vec<String>,
}

impl CreateRoom {
    /// A room with this objective.
    pub fn new(objective: impl Into<String>) -> Self {
        Self { objective: objective.into(), ..Self::default() }
    }

    /// With a name.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// With room labels.
    pub fn tags<I: IntoIterator<Item = S>, S: Into<String>>(mut self, tags: I) -> Self {
        self.tags = tags.into_iter().map(Into::into).collect();
        self
    }
}

/// `join_room`: become a member of a room, as a named agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct JoinRoom {
    /// The room to join.
    pub room_id: RoomId,
    /// A name for your agent in this room (letters, digits, . _ -); generated when omitted.
    /// Rejoining with the same id is safe.
    #[serde(default)]
    pub agent_id: Option<AgentId>,
    /// What kind of client you are, e.g. "claude-code" or "kiro".
    #[serde(default)]
    pub agent_type: Option<String>,
}

impl JoinRoom {
    /// Join `room_id` with a generated agent id.
    pub fn new(room_id: RoomId) -> Self {
        Self { room_id, agent_id: None, agent_type: None }
    }

    /// Join as `agent_id`.
    pub fn agent(mut self, agent_id: AgentId) -> Self {
        self.agent_id = Some(agent_id);
        self
    }

    /// The kind of client.
    pub fn agent_type(mut self, agent_type: impl Into<String>) -> Self {
        self.agent_type = Some(agent_type.into());
        self
    }
}

/// How often a room's objective may change (its history is kept in the room record).
pub const MAX_OBJECTIVE_CHANGES: usize = 20;

/// The most people a members-only room names.
pub const MAX_MEMBERS: usize = 200;

/// People named as members: valid user ids, sorted, each once.
fn members(field: &str, names: &[String]) -> Result<Vec<UserId>> {
    let mut out = names
        .iter()
        .map(|n| {
            UserId::new(n.trim()).map_err(|e| Error::invalid(field, format!("`{n}` is not a user id: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    out.sort();
    out.dedup();
    Ok(out)
}

/// The longest retention a room can be given: ten years.
pub const MAX_RETENTION_DAYS: u32 = 3650;

/// A room's retention in days, checked.
pub(super) fn retention(days: u32) -> Result<u32> {
    if days > MAX_RETENTION_DAYS {
        return Err(Error::InvalidInput {
            field: "retention_days".into(),
            message: format!(
                "{days} days is longer than the longest retention, {MAX_RETENTION_DAYS} days; give 0 to keep the \
                 room for good"
            ),
            limit: Some(u64::from(MAX_RETENTION_DAYS)),
        });
    }
    Ok(days)
}

fn markers_full(max: usize) -> Error {
    Error::CapacityExceeded {
        what: "section markers",
        limit: max as u64,
        message: "the room has as many phases as it may hold; open a new room to continue".into(),
    }
}

fn objectives_full() -> Error {
    Error::CapacityExceeded {
        what: "objective changes",
        limit: MAX_OBJECTIVE_CHANGES as u64,
        message: "the room has changed objective too often to keep its history; open a new room for the new objective"
            .into(),
    }
}

/// Compare-and-set attempts on a room record before giving up with a retryable error.
const ROOM_UPDATE_ATTEMPTS: usize = 8;

/// `close_room`: end the investigation, saying how it ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CloseRoom {
    /// The room.
    pub room_id: RoomId,
    /// What happened and what was done (markdown): the postmortem's first paragraph.
    #[serde(default)]
    pub resolution: Option<String>,
    /// The findings that establish the root cause (needs `resolution`).
    #[serde(default)]
    pub root_cause: Vec<FindingId>,
    /// Which of your agents closes it; defaults to the one you joined with.
    #[serde(default)]
    pub agent_id: Option<AgentId>,
}

impl CloseRoom {
    /// Closing `room_id` without a resolution.
    pub fn new(room_id: RoomId) -> Self {
        Self { room_id, resolution: None, root_cause: Vec::new(), agent_id: None }
    }

    /// With a resolution and the findings that establish the root cause.
    pub fn resolution(
        mut self,
        summary: impl Into<String>,
        root_cause: impl IntoIterator<Item = FindingId>,
    ) -> Self {
        self.resolution = Some(summary.into());
        self.root_cause = root_cause.into_iter().collect();
        self
    }
}

/// `steer_room`: change what the room is about or where it stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct SteerRoom {
    /// The room.
    pub room_id: RoomId,
    /// A new objective, when the investigation's goal has changed (the old one is kept in the
    /// room's objective_history).
    #[serde(default)]
    pub objective: Option<String>,
    /// Start a new phase with this label (at most 120 characters, e.g. "mitigation done, root
    /// cause next"): a section marker in the timeline. Secrets in it are redacted.
    #[serde(default)]
    pub marker: Option<String>,
    /// True to reopen a closed room.
    #[serde(default)]
    pub reopen: bool,
    /// Days to keep the room once closed (0: for good).
    #[serde(default)]
    pub retention_days: Option<u32>,
    /// People to add to a members-only room (or to make an open room members-only, with you).
    #[serde(default)]
    pub add_members: Vec<String>,
    /// People to remove from a members-only room.
    #[serde(default)]
    pub remove_members: Vec<String>,
    /// Which of your agents acts; defaults to the one you joined with.
    #[serde(default)]
    pub agent_id: Option<AgentId>,
}

impl SteerRoom {
    /// Nothing yet: set a field.
    pub fn new(room_id: RoomId) -> Self {
        Self {
            room_id,
            objective: None,
            marker: None,
            reopen: false,
            retention_days: None,
            add_members: Vec::new(),
            remove_members: Vec::new(),
            agent_id: None,
        }
    }
}

/// Which rooms `list_rooms` returns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum RoomFilter {
    /// Open rooms (the default).
    #[default]
    Active,
    /// Closed rooms.
    Closed,
    /// Both.
    All,
}

impl RoomFilter {
    /// The room status this filter keeps, `None` for both.
    pub fn status(self) -> Option<RoomStatus> {
        match self {
            RoomFilter::Active => Some(RoomStatus::Active),
            RoomFilter::Closed => Some(RoomStatus::Closed),
            RoomFilter::All => None,
        }
    }
}

/// `list_rooms`: rooms, newest first, a page at a time.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ListRooms {
    /// "active" (default), "closed" or "all".
    #[serde(default)]
    pub status: RoomFilter,
    /// Page size (default 50, at most 200).
    #[serde(default)]
    pub limit: Option<usize>,
    /// `next_cursor` from the previous page.
    #[serde(default)]
    pub cursor: Option<String>,
}

impl ListRooms {
    /// The first page of active rooms.
    pub fn new() -> Self {
        Self::default()
    }

    /// Which rooms.
    pub fn status(mut self, status: RoomFilter) -> Self {
        self.status = status;
        self
    }

    /// Page size.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }

    /// The page after `cursor`.
    pub fn cursor(mut self, cursor: impl Into<String>) -> Self {
        self.cursor = Some(cursor.into());
        self
    }
}

/// A page of rooms, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct RoomPage {
    /// The rooms.
    pub rooms: Vec<Room>,
    /// Pass back as `cursor` for the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// `declare_status`: say what your agent is doing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct DeclareStatus {
    /// The room.
    pub room_id: RoomId,
    /// "active" (working on it), "idle" (not working right now) or "blocked" (stuck: say why).
    pub status: AgentStatus,
    /// Why; when blocked, what would unblock you, so a human can help.
    #[serde(default)]
    pub reason: Option<String>,
    /// Which of your agents; defaults to the one you joined with.
    #[serde(default)]
    pub agent_id: Option<AgentId>,
}

impl DeclareStatus {
    /// `agent_id` declares `status`.
    pub fn new(room_id: RoomId, agent_id: AgentId, status: AgentStatus) -> Self {
        Self { room_id, status, reason: None, agent_id: Some(agent_id) }
    }

    /// With a reason.
    pub fn reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }
}

/// Agents by declared status.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct AgentCounts {
    /// All agents that joined.
    pub total: u64,
    /// Declared active.
    pub active: u64,
    /// Declared idle.
    pub idle: u64,
    /// Declared blocked.
    pub blocked: u64,
    /// Declared done: nothing more to contribute.
    pub done: u64,
    /// Left the room.
    pub left: u64,
    /// Of the agents that did not leave or finish, those not active for longer than the
    /// server's stale time, whatever they last declared: do not count on them.
    pub stale: u64,
}

impl AgentCounts {
    pub(crate) fn of(agents: &[AgentSession], now: Timestamp, stale_after_ms: i64) -> Self {
        let mut c = AgentCounts { total: agents.len() as u64, ..Default::default() };
        for a in agents {
            match a.agent_status {
                AgentStatus::Active => c.active += 1,
                AgentStatus::Idle => c.idle += 1,
                AgentStatus::Blocked => c.blocked += 1,
                AgentStatus::Done => c.done += 1,
                AgentStatus::Left => c.left += 1,
            }
            if is_stale(a, now, stale_after_ms) {
                c.stale += 1;
            }
        }
        c
    }
}

/// An agent that still counts as working (not done, not left) but has not been active for
/// longer than `stale_after_ms`.
pub(crate) fn is_stale(a: &AgentSession, now: Timestamp, stale_after_ms: i64) -> bool {
    !matches!(a.agent_status, AgentStatus::Done | AgentStatus::Left)
        && now.as_millis() - a.last_active.as_millis() > stale_after_ms
}

/// `get_room_summary`: aggregate status of a room.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct RoomSummary {
    /// The room.
    pub room: Room,
    /// Questions to the people not answered yet, oldest first.
    pub open_decisions: Vec<crate::model::Decision>,
    /// Agents by declared status.
    pub agents: AgentCounts,
    /// Number of findings.
    pub finding_count: u64,
    /// Number of entities (merged-away aliases not counted).
    pub entity_count: u64,
    /// Number of relationships.
    pub relationship_count: u64,
    /// Number of artifacts.
    pub artifact_count: u64,
    /// Findings per tag.
    pub tag_counts: BTreeMap<String, u64>,
    /// The latest of: last finding, last agent activity, room creation or closing.
    pub latest_activity: Timestamp,
    /// What happened since `since` or `since_marker`, when asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<RoomDigest>,
}

impl Macp {
    /// Creates a room with a stated objective. Anyone authenticated may create rooms.
    pub async fn create_room(&self, who: &Principal, mut req: CreateRoom) -> Result<Written<Room>> {
        let redacted = self.redact(&mut req)?;
        let value = self.create_room_redacted(who, req).await?;
        Ok(Written { value, redacted })
    }

    /// [`Self::create_room`] once its texts are redacted.
    async fn create_room_redacted(&self, who: &Principal, req: CreateRoom) -> Result<Room> {
        let l = &self.inner.limits;
        let room = Room {
            room_id: RoomId::generate(),
            name: validate::optional_text("name", req.name.as_deref(), l.max_name_bytes)?,
            objective: validate::required_text("objective", &req.objective, l.max_objective_bytes)?,
            visibility_mode: req.visibility_mode.unwrap_or(VisibilityMode::Full),
            created_at: self.now(),
            created_by: who.user_id.clone(),
            tags: validate::tags("tags", &req.tags, l)?,
            status: RoomStatus::Active,
            closed_at: None,
            closed_by: None,
            resolution: None,
            past_resolutions: Vec::new(),
            objective_history: Vec::new(),
            markers: Vec::new(),
            version: 0,
            retention_days: req.retention_days.map(retention).transpose()?,
            members: {
                let mut m = members("members", &req.members)?;
                if !m.is_empty() && !m.contains(&who.user_id) {
                    m.push(who.user_id.clone());
                    m.sort();
                }
                if m.len() > MAX_MEMBERS {
                    return Err(Error::too_many("members", MAX_MEMBERS, m.len()));
                }
                m
            },
        };
        self.inner.store.insert_room(&room).await?;
        Ok(room)
    }

    /// Registers an agent in a room, or refreshes it if the same user rejoins with the same
    /// agent id. An agent id already joined by another user is `permission_denied`. The answer
    /// says how much of the room the agent has not acknowledged yet.
    pub async fn join_room(&self, who: &Principal, mut req: JoinRoom) -> Result<AgentSession> {
        self.redact(&mut req)?;
        let mut session = self.join(who, req).await?;
        session.unread = Some(self.unread(session.room_id, &session.agent_id).await?);
        Ok(session)
    }

    async fn join(&self, who: &Principal, req: JoinRoom) -> Result<AgentSession> {
        let l = &self.inner.limits;
        self.writable_room(who, req.room_id).await?;
        let agent_type = validate::optional_text("agent_type", req.agent_type.as_deref(), l.max_label_bytes)?;
        let agent_id = req.agent_id.unwrap_or_else(AgentId::generate);
        let store = &self.inner.store;

        if store.get_agent(req.room_id, &agent_id).await?.is_none() {
            let count = store.list_agents(req.room_id).await?.len();
            if count >= l.max_agents_per_room {
                return Err(Error::CapacityExceeded {
                    what: "agents per room",
                    limit: l.max_agents_per_room as u64,
                    message: "rejoin with one of the room's existing agent ids, or ask the operator to raise max_agents_per_room".into(),
                });
            }
        }
        let now = self.now();
        let session = AgentSession {
            room_id: req.room_id,
            agent_id: agent_id.clone(),
            user_id: who.user_id.clone(),
            joined_at: now,
            last_active: now,
            agent_type: agent_type.clone(),
            agent_status: AgentStatus::Active,
            status_reason: None,
            status_updated_at: now,
            unread: None,
        };
        let what = agent_type.as_deref().map_or_else(|| "joined".to_owned(), |t| format!("joined ({t})"));
        let event = Event::new(EventKind::AgentJoined, now, who.user_id.clone(), &what).agent(&agent_id);
        match store.insert_agent(&session, &event).await? {
            Insert::Inserted(s) => {
                self.changed(req.room_id);
                Ok(s)
            }
            Insert::Existing(s) if s.user_id != who.user_id => Err(Error::PermissionDenied {
                message: format!(
                    "agent id `{agent_id}` in this room was joined by another user; join with a different agent_id"
                ),
            }),
            Insert::Existing(existing) => {
                // Coming back after leaving (or finishing) is working again.
                let status = matches!(existing.agent_status, AgentStatus::Left | AgentStatus::Done)
                    .then(|| (AgentStatus::Active, None, now));
                let update = AgentUpdate { last_active: Some(now), agent_type, status };
                store
                    .update_agent(req.room_id, &agent_id, &update, None)
                    .await?
                    .ok_or_else(|| Error::not_found("agent", &agent_id))
            }
        }
    }

    /// Closes a room, with how it was resolved if given. It stays fully readable; later
    /// writes return `room_closed` until it is reopened. Closing a closed room returns it
    /// unchanged (the first close and its resolution stand).
    pub async fn close_room(
        &self,
        who: &Principal,
        mut req: CloseRoom,
        via: Channel,
    ) -> Result<Written<Room>> {
        let redacted = self.redact(&mut req)?;
        let value = self.close_room_redacted(who, req, via).await?;
        Ok(Written { value, redacted })
    }

    /// [`Self::close_room`] once its texts are redacted.
    async fn close_room_redacted(&self, who: &Principal, req: CloseRoom, via: Channel) -> Result<Room> {
        let l = &self.inner.limits;
        let summary = validate::optional_text("resolution", req.resolution.as_deref(), l.max_content_bytes)?;
        if summary.is_none() && !req.root_cause.is_empty() {
            return Err(Error::invalid(
                "root_cause",
                "root_cause names the findings behind a resolution: give the resolution summary too",
            ));
        }
        let mut root_cause = Vec::new();
        for f in &req.root_cause {
            if !root_cause.contains(f) {
                root_cause.push(*f);
            }
        }
        if root_cause.len() > l.max_entity_refs {
            return Err(Error::too_many("root_cause", l.max_entity_refs, root_cause.len()));
        }
        // The room before anything about it is looked at (findings, agents).
        self.room(who, req.room_id).await?;
        self.require_findings(req.room_id, &root_cause, "root_cause").await?;
        // Closing never needed an agent in the room: a person's MCP client may close it unjoined.
        let author = match (via, &req.agent_id) {
            (Channel::Agent, None) => {
                Author { user_id: who.user_id.clone(), agent_id: None, channel: via, at: self.now() }
            }
            _ => self.author(who, req.room_id, req.agent_id.as_ref(), via).await?,
        };
        self.update_room(who, req.room_id, |room| {
            if room.status == RoomStatus::Closed {
                return Ok(None);
            }
            room.status = RoomStatus::Closed;
            room.closed_at = Some(author.at);
            room.closed_by = Some(author.user_id.clone());
            room.resolution = summary.clone().map(|summary| Resolution {
                summary,
                finding_ids: root_cause.clone(),
                by: author.clone(),
            });
            let what = match &room.resolution {
                Some(r) => format!("closed by {}: {}", author.user_id, r.summary),
                None => format!("closed by {}", author.user_id),
            };
            Ok(Some(author.event(EventKind::RoomClosed, &what)))
        })
        .await
    }

    /// Steers a room: reopens it, changes its objective (the old one kept in
    /// `objective_history`), or sets a section marker (a new phase), in that order when a call
    /// asks for several. Each change is recorded with who made it and through which channel:
    /// [`Channel::Person`] or [`Channel::Web`] only from a person's own tool (`macp` on the command line, the web
    /// view); the MCP server passes [`Channel::Agent`] for every call.
    pub async fn steer_room(
        &self,
        who: &Principal,
        mut req: SteerRoom,
        via: Channel,
    ) -> Result<Written<Room>> {
        let redacted = self.redact(&mut req)?;
        let value = self.steer_room_redacted(who, req, via).await?;
        Ok(Written { value, redacted })
    }

    /// [`Self::steer_room`] once its texts are redacted.
    async fn steer_room_redacted(&self, who: &Principal, req: SteerRoom, via: Channel) -> Result<Room> {
        let l = &self.inner.limits;
        // Every argument is checked before anything is applied.
        let (add, remove) =
            (members("add_members", &req.add_members)?, members("remove_members", &req.remove_members)?);
        let retention_days = req.retention_days.map(retention).transpose()?;
        if !req.reopen
            && req.objective.is_none()
            && req.marker.is_none()
            && req.retention_days.is_none()
            && add.is_empty()
            && remove.is_empty()
        {
            return Err(Error::invalid(
                "objective",
                "give at least one of objective, marker, reopen, retention_days, add_members or remove_members",
            ));
        }
        let objective = match &req.objective {
            Some(o) => Some(validate::required_text("objective", o, l.max_objective_bytes)?),
            None => None,
        };
        let label = match &req.marker {
            Some(m) => Some(self.marker_label(m)?),
            None => None,
        };
        let mut room = self.room(who, req.room_id).await?;
        // A closed room's retention and members may change (a hold on its record, who may read
        // it); nothing else without reopening it.
        let record_only = req.objective.is_none() && req.marker.is_none();
        if room.status == RoomStatus::Closed && !req.reopen && !record_only {
            return Err(Error::RoomClosed { room_id: req.room_id.to_string() });
        }
        if let Some(both) = add.iter().find(|m| remove.contains(m)) {
            return Err(Error::invalid(
                "remove_members",
                format!("`{both}` is both added and removed; choose one"),
            ));
        }
        if !remove.is_empty() && room.members.is_empty() && add.is_empty() {
            return Err(Error::invalid(
                "remove_members",
                "this room is open to everyone; it has no members to remove (add_members makes it members-only)",
            ));
        }
        if remove.contains(&room.created_by) {
            return Err(Error::invalid(
                "remove_members",
                format!("{} created the room and stays a member of it", room.created_by),
            ));
        }
        // Refused before anything is applied, so a call asking for several changes does not
        // stop halfway on a full history (a concurrent change can still fill it in between).
        if label.is_some() && room.markers.len() >= l.max_markers {
            return Err(markers_full(l.max_markers));
        }
        if objective.as_ref().is_some_and(|o| *o != room.objective)
            && room.objective_history.len() >= MAX_OBJECTIVE_CHANGES
        {
            return Err(objectives_full());
        }
        let author = self.author(who, req.room_id, req.agent_id.as_ref(), via).await?;
        if req.reopen {
            room = self
                .update_room(who, req.room_id, |room| {
                    if room.status == RoomStatus::Active {
                        return Ok(None);
                    }
                    room.status = RoomStatus::Active;
                    room.closed_at = None;
                    room.closed_by = None;
                    // The last close's resolution no longer describes the room: kept, as past.
                    room.past_resolutions.extend(room.resolution.take());
                    Ok(Some(
                        author.event(EventKind::RoomReopened, &format!("reopened by {}", author.user_id)),
                    ))
                })
                .await?;
        }
        if let Some(objective) = objective {
            let max = MAX_OBJECTIVE_CHANGES;
            room = self
                .update_room(who, req.room_id, |room| {
                    if room.status == RoomStatus::Closed {
                        return Err(Error::RoomClosed { room_id: room.room_id.to_string() });
                    }
                    if room.objective == objective {
                        return Ok(None);
                    }
                    if room.objective_history.len() >= max {
                        return Err(objectives_full());
                    }
                    let old = std::mem::replace(&mut room.objective, objective.clone());
                    room.objective_history
                        .push(ObjectiveChange { objective: old, replaced_by: author.clone() });
                    Ok(Some(author.event(EventKind::ObjectiveChanged, &objective)))
                })
                .await?;
        }
        if let Some(days) = retention_days {
            // Closed rooms too: holding a closed room's record longer (or for good) is the point.
            room = self
                .update_room(who, req.room_id, |room| {
                    if room.retention_days == Some(days) {
                        return Ok(None);
                    }
                    room.retention_days = Some(days);
                    let what = match days {
                        0 => "kept for good once closed".to_owned(),
                        d => format!("kept {d} days once closed, then purged"),
                    };
                    Ok(Some(author.event(EventKind::RetentionSet, &what)))
                })
                .await?;
        }
        if let Some(label) = label {
            let after_seq = self.inner.store.finding_stats(req.room_id).await?.last_seq;
            let max = l.max_markers;
            room = self
                .update_room(who, req.room_id, |room| {
                    if room.status == RoomStatus::Closed {
                        return Err(Error::RoomClosed { room_id: room.room_id.to_string() });
                    }
                    if room.markers.len() >= max {
                        return Err(markers_full(max));
                    }
                    let marker_id = format!("m{}", room.markers.len() + 1);
                    let what = format!("{marker_id}: {label}");
                    room.markers.push(Marker {
                        marker_id,
                        label: label.clone(),
                        after_seq,
                        by: author.clone(),
                    });
                    Ok(Some(author.event(EventKind::PhaseMarked, &what)))
                })
                .await?;
        }
        if !add.is_empty() || !remove.is_empty() {
            // Last, so that removing oneself does not stop the rest of the call. Closed rooms
            // too, like retention: who may read a record is the record's business.
            let creator = room.created_by.clone();
            room = self
                .update_room(who, req.room_id, |room| {
                    let mut next = room.members.clone();
                    if !add.is_empty() && next.is_empty() {
                        // Restricting an open room takes it away from everyone else: only the
                        // person who created it may, and they stay a member.
                        if author.user_id != creator {
                            return Err(Error::PermissionDenied {
                                message: format!(
                                    "only the room's creator, {creator}, can make it members-only; ask them"
                                ),
                            });
                        }
                        next.push(creator.clone());
                    }
                    next.extend(add.iter().cloned());
                    next.retain(|m| !remove.contains(m));
                    next.sort();
                    next.dedup();
                    if next.len() > MAX_MEMBERS {
                        return Err(Error::too_many("members", MAX_MEMBERS, next.len()));
                    }
                    if next == room.members {
                        return Ok(None);
                    }
                    let added: Vec<&str> =
                        next.iter().filter(|m| !room.members.contains(m)).map(|m| m.as_str()).collect();
                    let gone: Vec<&str> =
                        room.members.iter().filter(|m| !next.contains(m)).map(|m| m.as_str()).collect();
                    let what = match (added.is_empty(), gone.is_empty()) {
                        (false, true) => format!("members added: {}", added.join(", ")),
                        (true, false) => format!("members removed: {}", gone.join(", ")),
                        _ => format!("members added: {}; removed: {}", added.join(", "), gone.join(", ")),
                    };
                    room.members = next;
                    Ok(Some(author.event(EventKind::MembersChanged, &what)))
                })
                .await?;
        }
        Ok(room)
    }

    /// A marker label as stored: on one line, secrets redacted first (by [`Macp::redact`]), then held to
    /// [`Limits::max_marker_chars`](crate::Limits::max_marker_chars) characters — by refusing,
    /// never by cutting (a cut made before redaction could split a secret so that it is no
    /// longer recognised; one made after would drop the end of what the person wrote). Redaction
    /// lengthens a text (`[redacted:aws-access-key]` for a 20-character key), so a label within
    /// the limit as written can be refused once redacted: the error says so.
    fn marker_label(&self, raw: &str) -> Result<String> {
        let max = self.inner.limits.max_marker_chars;
        let one_line = raw.split_whitespace().collect::<Vec<_>>().join(" ");
        if one_line.is_empty() {
            return Err(Error::invalid(
                "marker",
                "a marker needs a label, e.g. \"mitigation done, root cause next\"",
            ));
        }
        // Already through the redactor, with every other text of the write (steer_room).
        let chars = one_line.chars().count();
        if chars > max {
            let redacted =
                if one_line.contains("[redacted:") { " once the secrets in it are redacted" } else { "" };
            return Err(Error::InvalidInput {
                field: "marker".into(),
                message: format!(
                    "the marker label has {chars} characters{redacted}; the limit is {max}: name the phase shortly \
                     (and leave secrets out of it)"
                ),
                limit: Some(max as u64),
            });
        }
        Ok(one_line)
    }

    /// Who is acting on a room: a person directly, or one of the principal's agents in it (an
    /// agent must be named: an act without one would read as a person's).
    async fn author(
        &self,
        who: &Principal,
        room_id: RoomId,
        agent_id: Option<&AgentId>,
        via: Channel,
    ) -> Result<Author> {
        let agent_id = if via.is_person() {
            None
        } else {
            let session = self.agent_session(who, room_id, agent_id).await?;
            self.touch(&session).await;
            Some(session.agent_id)
        };
        Ok(Author { user_id: who.user_id.clone(), agent_id, channel: via, at: self.now() })
    }

    /// Read-modify-write of a room record under the store's compare-and-set: `change` edits a
    /// fresh copy and returns the event to record, or `None` when there is nothing to change.
    async fn update_room(
        &self,
        who: &Principal,
        room_id: RoomId,
        change: impl Fn(&mut Room) -> Result<Option<Event>>,
    ) -> Result<Room> {
        for _ in 0..ROOM_UPDATE_ATTEMPTS {
            let current = self.room(who, room_id).await?;
            let mut next = current.clone();
            let Some(event) = change(&mut next)? else { return Ok(current) };
            next.version = current.version + 1;
            if self.inner.store.update_room(&next, &event).await? {
                self.changed(room_id);
                return Ok(next);
            }
        }
        Err(Error::backend(
            self.inner.store.name(),
            true,
            format!("the room changed under {ROOM_UPDATE_ATTEMPTS} attempts in a row; retry"),
            None,
        ))
    }

    /// Lists rooms, newest first, optionally filtered by status.
    pub async fn list_rooms(&self, who: &Principal, req: ListRooms) -> Result<RoomPage> {
        let l = &self.inner.limits;
        let limit = validate::page_size("limit", req.limit, l.default_page, l.max_page)?;
        let status = req.status.status();
        let filter = status.map(|s| s.as_str()).unwrap_or("all");
        let after = match &req.cursor {
            None => None,
            Some(c) => {
                let p = cursor::decode("cursor", "r1", c, 3)?;
                if p[2] != filter {
                    return Err(Error::invalid("cursor", "this cursor was issued for another status filter"));
                }
                let created_at =
                    p[0].parse::<i64>().map_err(|_| Error::invalid("cursor", "malformed cursor"))?;
                Some(RoomKey { created_at: Timestamp::from_millis(created_at), room_id: p[1].parse()? })
            }
        };
        // Members-only rooms of which `who` is not a member are left out, as if absent: pages
        // are read until enough rooms `who` may see are found or the rooms run out.
        let mut rooms = Vec::with_capacity(limit + 1);
        let mut from = after;
        loop {
            let page = self.inner.store.list_rooms(status, from, limit + 1).await?;
            let exhausted = page.len() <= limit;
            from = page.last().map(|r| RoomKey { created_at: r.created_at, room_id: r.room_id });
            rooms.extend(page.into_iter().filter(|r| r.admits(&who.user_id)));
            if exhausted || rooms.len() > limit {
                break;
            }
        }
        let next_cursor = if rooms.len() > limit {
            rooms.truncate(limit);
            rooms.last().map(|r| {
                cursor::encode("r1", &[&r.created_at.as_millis().to_string(), &r.room_id.to_string(), filter])
            })
        } else {
            None
        };
        Ok(RoomPage { rooms, next_cursor })
    }

    /// Every agent of a room, in join order.
    pub async fn list_agents(&self, who: &Principal, room_id: RoomId) -> Result<Vec<AgentSession>> {
        self.room(who, room_id).await?;
        self.inner.store.list_agents(room_id).await
    }

    /// Aggregated status of a room: agents by declared status, counts, latest activity.
    pub async fn room_summary(&self, who: &Principal, q: impl Into<SummaryQuery>) -> Result<RoomSummary> {
        let q = q.into();
        let room_id = q.room_id;
        // The room first, alone: nothing about a room `who` may not see is read, not even in
        // parallel (its size would show in the time taken).
        let room = self.room(who, room_id).await?;
        let digest = match (q.since, &q.since_marker) {
            (None, None) => None,
            (since, marker) => Some(self.room_digest(who, room_id, since, marker.as_deref()).await?),
        };
        let store = &self.inner.store;
        // Independent reads, at once (each is a round trip on a networked store).
        let (agents, findings, entities, artifact_count, open_decisions) = tokio::try_join!(
            store.list_agents(room_id),
            store.finding_stats(room_id),
            store.entity_stats(room_id),
            store.count_artifacts(room_id),
            self.decisions(room_id, true),
        )?;
        let latest_activity = [Some(room.created_at), room.closed_at, findings.last_created_at]
            .into_iter()
            .flatten()
            .chain(agents.iter().map(|a| a.last_active))
            .max()
            .unwrap_or(room.created_at);
        Ok(RoomSummary {
            open_decisions,
            agents: AgentCounts::of(&agents, self.now(), self.inner.stale_after_ms),
            finding_count: findings.total,
            entity_count: entities.canonical,
            relationship_count: entities.relationships,
            artifact_count,
            tag_counts: findings.tag_counts,
            latest_activity,
            room,
            digest,
        })
    }

    /// Records an agent's declared status. Advisory only: nothing in MACP is gated on it.
    pub async fn declare_status(
        &self,
        who: &Principal,
        mut req: DeclareStatus,
    ) -> Result<Written<AgentSession>> {
        let redacted = self.redact(&mut req)?;
        let value = self.declare_status_redacted(who, req).await?;
        Ok(Written { value, redacted })
    }

    /// [`Self::declare_status`] once its texts are redacted.
    async fn declare_status_redacted(&self, who: &Principal, req: DeclareStatus) -> Result<AgentSession> {
        self.writable_room(who, req.room_id).await?;
        let session = self.agent_session(who, req.room_id, req.agent_id.as_ref()).await?;
        let reason =
            validate::optional_text("reason", req.reason.as_deref(), self.inner.limits.max_reason_bytes)?;
        let now = self.now();
        let said = match &reason {
            Some(r) => format!("{}: {r}", req.status),
            None => req.status.to_string(),
        };
        let event =
            Event::new(EventKind::StatusDeclared, now, who.user_id.clone(), &said).agent(&session.agent_id);
        let update =
            AgentUpdate { last_active: Some(now), agent_type: None, status: Some((req.status, reason, now)) };
        let out = self
            .inner
            .store
            .update_agent(req.room_id, &session.agent_id, &update, Some(&event))
            .await?
            .ok_or_else(|| Error::not_found("agent", &session.agent_id))?;
        self.changed(req.room_id);
        Ok(out)
    }
}
