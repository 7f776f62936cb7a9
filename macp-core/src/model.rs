//! The domain records, as stored and as returned to clients.
//!
//! Field names are the design's (`room_id`, `finding_id`, `agent_id`, `user_id`, `tags`,
//! `entity_refs`, `evidence`, `index_status`, `entity_id`, `identifiers`, `merged_into`, …): the
//! MCP adapter serialises these types as they are.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::ids::{AgentId, ArtifactId, DecisionId, EntityId, FindingId, RoomId, Timestamp, UserId};

macro_rules! wire_enum {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = $text:literal),+ $(,)? }, $field:literal) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
        // After the derives: a `schemars(description)` among them must follow its derive.
        $(#[$doc])*
        #[serde(rename_all = "snake_case")]
        pub enum $name {
            $($(#[$vdoc])* $variant),+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The wire name.
            pub fn as_str(&self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            /// Parses the wire name, with an error listing the accepted values.
            pub fn parse(s: &str) -> Result<Self> {
                match s.trim() {
                    $($text => Ok($name::$variant),)+
                    other => Err(Error::invalid(
                        $field,
                        format!(
                            "`{}` is not accepted; use one of: {}",
                            crate::ids::clip(other),
                            [$($text),+].join(", ")
                        ),
                    )),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = Error;
            fn from_str(s: &str) -> Result<Self> {
                Self::parse(s)
            }
        }
    };
}

wire_enum!(
    /// Who sees what in a room. Only `full` exists in phase 1: every member sees every finding.
    /// The field is reserved so other modes can be added without a schema change. Visibility is
    /// a coordination mechanism, never access control.
    #[cfg_attr(feature = "schemars", schemars(description = "Only `full` exists."))]
    VisibilityMode {
        /// Every member sees every finding.
        Full = "full"
    },
    "visibility_mode"
);

wire_enum!(
    /// Whether a room accepts writes.
    RoomStatus {
        /// Open for writes.
        Active = "active",
        /// Read-only; kept for the record.
        Closed = "closed"
    },
    "status"
);

wire_enum!(
    /// An agent's self-declared status. Advisory only: nothing in MACP acts on it.
    AgentStatus {
        /// Working on the objective.
        Active = "active",
        /// Not working right now (the operator may have stepped away).
        Idle = "idle",
        /// Stuck; the reason says on what, so a human can help.
        Blocked = "blocked",
        /// Finished: nothing more to contribute (unlike idle, it is not coming back to work).
        Done = "done",
        /// Left the room. Joining again makes it active.
        Left = "left"
    },
    "status"
);

wire_enum!(
    /// Where the finding is in the write protocol: committed first as `pending`, then embedded
    /// and indexed for semantic search, then `indexed`.
    #[cfg_attr(feature = "schemars", schemars(description = "`pending` until embedded and indexed, then `indexed`."))]
    IndexStatus {
        /// Stored, findable by its words, not yet in the vector index.
        Pending = "pending",
        /// In the vector index.
        Indexed = "indexed"
    },
    "index_status"
);

wire_enum!(
    /// What kind of proof an evidence item points at.
    EvidenceKind {
        /// An artifact registered in the room (its key or id).
        Artifact = "artifact",
        /// Any URL.
        Url = "url",
        /// A CloudTrail event id.
        Cloudtrail = "cloudtrail",
        /// A Datadog link or query.
        Datadog = "datadog",
        /// A metric name or query.
        Metric = "metric",
        /// A log line, query or location.
        Log = "log"
    },
    "evidence.kind"
);

wire_enum!(
    /// What an entity is.
    EntityType {
        /// A service or system component.
        Service = "service",
        /// A person.
        Person = "person",
        /// Something that happened (a deploy, an alarm, an outage).
        Event = "event",
        /// A concrete resource (host, bucket, key, commit, table).
        Resource = "resource"
    },
    "type"
);

/// A collaboration room: one investigation with a stated objective.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct Room {
    /// Primary key.
    pub room_id: RoomId,
    /// Optional human-readable label.
    pub name: Option<String>,
    /// The stated goal agents self-organise around (markdown).
    pub objective: String,
    /// Always `full` in phase 1.
    pub visibility_mode: VisibilityMode,
    /// When the room was created.
    pub created_at: Timestamp,
    /// Who created it.
    pub created_by: UserId,
    /// Labels for the room.
    pub tags: Vec<String>,
    /// `active` or `closed`.
    pub status: RoomStatus,
    /// When it was closed, if it is.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub closed_at: Option<Timestamp>,
    /// Who closed it, if it is.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub closed_by: Option<UserId>,
    /// How the investigation ended, when it was closed with a resolution.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub resolution: Option<Resolution>,
    /// Resolutions of earlier closes, oldest first, when the room was reopened since.
    #[cfg_attr(feature = "schemars", schemars(description = "Earlier closes' resolutions, oldest first."))]
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub past_resolutions: Vec<Resolution>,
    /// The objectives this room had before the current one, oldest first, each with who
    /// replaced it and when.
    #[cfg_attr(
        feature = "schemars",
        schemars(description = "Earlier objectives, oldest first, with who replaced each.")
    )]
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub objective_history: Vec<ObjectiveChange>,
    /// Section markers dividing the timeline, oldest first; the last is the current phase.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub markers: Vec<Marker>,
    /// Moves by one with every change to the fields above or to the status: what a store's
    /// compare-and-set on the room compares (see `RoomStore::update_room`).
    #[cfg_attr(feature = "schemars", schemars(description = "Moves by one with every change."))]
    #[serde(default)]
    pub version: u64,
    /// Days the room is kept once closed, then purged everywhere (0: kept for good; absent: the
    /// server's default).
    #[cfg_attr(
        feature = "schemars",
        schemars(description = "Days kept once closed, then purged (0: for good).")
    )]
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub retention_days: Option<u32>,
    /// The people who may see the room, when it is restricted to them; empty: everyone in the
    /// organisation (the default). To anyone else a restricted room does not exist.
    #[cfg_attr(feature = "schemars", schemars(description = "Only these people see it (empty: everyone)."))]
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub members: Vec<UserId>,
}

impl Room {
    /// Whether `user` may see the room: anyone, unless it is restricted to its members.
    pub fn admits(&self, user: &UserId) -> bool {
        self.members.is_empty() || self.members.contains(user)
    }

    /// The current phase: the latest marker.
    pub fn phase(&self) -> Option<&Marker> {
        self.markers.last()
    }

    /// The marker with this id.
    pub fn marker(&self, marker_id: &str) -> Option<&Marker> {
        self.markers.iter().find(|m| m.marker_id == marker_id)
    }
}

/// Who did something to a room, and through which channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct Author {
    /// The person (or the person behind the agent).
    pub user_id: UserId,
    /// The agent, when an agent did it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<AgentId>,
    /// `person` (on the command line or a web view) or `agent` (through MCP).
    #[cfg_attr(feature = "schemars", schemars(description = "`person`, `web` or `agent`."))]
    pub channel: Channel,
    /// When.
    pub at: Timestamp,
}

impl Author {
    /// An event of `kind` by this author.
    pub fn event(&self, kind: EventKind, summary: &str) -> Event {
        let e = Event::new(kind, self.at, self.user_id.clone(), summary);
        match &self.agent_id {
            Some(a) => e.agent(a),
            None => e,
        }
    }
}

/// A section marker: a line dividing the room's timeline into phases ("mitigation done, root
/// cause next").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(
    feature = "schemars",
    schemars(description = "A section marker dividing the timeline into phases.")
)]
pub struct Marker {
    /// `m1`, `m2`, … in the order they were set: pass it to get_timeline's `after_marker`.
    pub marker_id: String,
    /// The phase's name: secrets redacted, then at most 120 characters.
    pub label: String,
    /// The room's last finding `seq` when the marker was set: the phase starts after it.
    pub after_seq: u64,
    /// Who set it.
    pub by: Author,
}

/// A replaced objective.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct ObjectiveChange {
    /// The objective as it was.
    pub objective: String,
    /// Who replaced it, and when.
    pub replaced_by: Author,
}

/// How an investigation ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct Resolution {
    /// What happened and what was done (markdown).
    pub summary: String,
    /// The findings that establish the root cause.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub finding_ids: Vec<FindingId>,
    /// Who resolved it.
    pub by: Author,
}

/// An agent's presence in a room.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct AgentSession {
    /// The room.
    pub room_id: RoomId,
    /// The agent, unique within the room.
    pub agent_id: AgentId,
    /// The person who joined it; only they may act as this agent.
    pub user_id: UserId,
    /// First join.
    pub joined_at: Timestamp,
    /// Last write or join by this agent.
    pub last_active: Timestamp,
    /// Free-form client kind (`claude-code`, `kiro`, …).
    pub agent_type: Option<String>,
    /// Declared status (advisory).
    pub agent_status: AgentStatus,
    /// Why, especially when blocked.
    pub status_reason: Option<String>,
    /// When the status was last declared.
    pub status_updated_at: Timestamp,
    /// What this agent has not acknowledged yet. Only in `join_room`'s answer (not stored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unread: Option<Unread>,
}

/// Changes an agent has not acknowledged yet.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct Unread {
    /// How many changes in all.
    pub total: u64,
    /// How many of each kind (kinds with none omitted).
    pub by_kind: std::collections::BTreeMap<EventKind, u64>,
}

impl Unread {
    /// The counts, with their total.
    pub fn of(by_kind: std::collections::BTreeMap<EventKind, u64>) -> Self {
        Self { total: by_kind.values().sum(), by_kind }
    }
}

/// A typed, free-form pointer to proof. Artifact linkage is not enforced, by design.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schemars", schemars(description = "A typed pointer to proof."))]
pub struct Evidence {
    /// What kind of proof.
    pub kind: EvidenceKind,
    /// The pointer itself (URL, event id, artifact key, query).
    #[serde(rename = "ref")]
    pub reference: String,
    /// What it shows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// When the evidence was captured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub captured_at: Option<Timestamp>,
}

/// One thing an agent learned, posted to the room.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct Finding {
    /// The room.
    pub room_id: RoomId,
    /// ULID, minted when posted.
    pub finding_id: FindingId,
    /// The room's commit sequence number: 1, 2, 3, … in the order findings were committed.
    /// Gap-free within a room. This, not the ULID, orders the timeline and updates.
    pub seq: u64,
    /// The finding (markdown).
    pub content: String,
    /// The agent that posted it.
    pub agent_id: AgentId,
    /// The person behind that agent.
    pub user_id: UserId,
    /// Labels such as `triage`, `root-cause`, `remediation`, `dead-end`.
    pub tags: Vec<String>,
    /// Entities this finding is about. Read paths return canonical ids (merges resolved).
    pub entity_refs: Vec<EntityId>,
    /// Proof.
    pub evidence: Vec<Evidence>,
    /// The finding of the same room this one answers (its thread).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<FindingId>,
    /// Agents of the room this finding is addressed to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mentions: Vec<AgentId>,
    /// Offered as a theory to test, not as an established fact.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hypothesis: bool,
    /// This finding's judgement of the one it answers (`reply_to`): it confirms, refutes or
    /// supersedes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<VerdictKind>,
    /// How the room now judges this finding: the latest verdict passed on it, if any. Read it
    /// before relying on a finding: a refuted or superseded one is kept for the record only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standing: Option<Standing>,
    /// `pending` until embedded and indexed.
    pub index_status: IndexStatus,
    /// The client's retry key, if it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// When it was posted.
    pub created_at: Timestamp,
    /// Set once erased: `content` is the notice, `evidence` empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub erased: Option<Erasure>,
}

/// Who erased it, when, why.
// What was erased is gone from the store; this record and the notice that replaced it stay for
// the postmortem.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct Erasure {
    /// The person (or whose agent).
    pub by: UserId,
    /// The agent, if an agent did it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<AgentId>,
    /// When.
    pub at: Timestamp,
    /// Why.
    pub reason: String,
}

impl Erasure {
    /// The text that stands in for erased content.
    pub fn notice(&self) -> String {
        let who = match &self.agent_id {
            Some(a) => format!("{} (agent {a})", self.by),
            None => self.by.to_string(),
        };
        format!("[erased by {who} at {}: {}]", self.at, self.reason)
    }
}

wire_enum!(
    /// What a later finding says of an earlier one.
    VerdictKind {
        /// The evidence bears it out.
        Confirms = "confirms",
        /// The evidence shows it is wrong.
        Refutes = "refutes",
        /// A better account replaces it (it was not wrong so much as incomplete or outdated).
        Supersedes = "supersedes"
    },
    "verdict"
);

impl VerdictKind {
    /// Whether a verdict of this kind must carry evidence: a confirmation or a refutation
    /// without proof is an opinion, and the record must not present it as a judgement.
    pub fn needs_evidence(&self) -> bool {
        matches!(self, VerdictKind::Confirms | VerdictKind::Refutes)
    }
}

/// The standing of a judged finding: the latest verdict passed on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct Standing {
    /// `confirms`, `refutes` or `supersedes`: what the latest verdict said of this finding.
    pub verdict: VerdictKind,
    /// The finding that passed it (read it for the evidence).
    pub by: FindingId,
    /// Its agent.
    pub agent_id: AgentId,
    /// When.
    pub at: Timestamp,
}

impl Finding {
    /// What the feed says of its post: the content, after the verdict it passes and on which
    /// finding (`refutes <id>: …`). [`Event::new`] then makes it one line of at most
    /// [`Event::SUMMARY_CHARS`].
    pub fn post_summary(&self) -> String {
        match self.verdict {
            Some(v) => {
                format!("{v} {}: {}", self.reply_to.map(|r| r.to_string()).unwrap_or_default(), self.content)
            }
            None => self.content.clone(),
        }
    }

    /// Erases the finding as every store must (see
    /// [`FindingStore::erase_finding`](crate::store::FindingStore::erase_finding)): the
    /// content becomes the erasure's notice, the evidence goes, the erasure is recorded, and it is
    /// no longer `pending` (an erased finding is never embedded). Returns `false`, changing
    /// nothing, when it was erased before: the first erasure stands.
    pub fn erase(&mut self, erasure: &Erasure) -> bool {
        if self.erased.is_some() {
            return false;
        }
        self.content = erasure.notice();
        self.evidence.clear();
        self.erased = Some(erasure.clone());
        self.index_status = IndexStatus::Indexed;
        true
    }

    /// The standing a verdict in `self` gives the finding it judges, if `self` is a verdict.
    pub fn standing_given(&self) -> Option<(FindingId, Standing)> {
        let (on, verdict) = (self.reply_to?, self.verdict?);
        Some((
            on,
            Standing { verdict, by: self.finding_id, agent_id: self.agent_id.clone(), at: self.created_at },
        ))
    }
}

/// A typed identifier such as `{type: hostname, value: ip-10-0-1-7}`. Entities sharing an
/// identifier are the same entity.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(
    feature = "schemars",
    schemars(description = "A typed identifier; entities sharing one are the same entity.")
)]
pub struct Identifier {
    /// Identifier type, normalised to lowercase `[a-z0-9_]` (`hostname`, `arn`, `ad_guid`).
    #[serde(rename = "type")]
    pub id_type: String,
    /// Value, normalised per type (see [`crate::validate::normalize_identifier`]).
    #[cfg_attr(feature = "schemars", schemars(description = "Value, normalised per type."))]
    pub value: String,
}

/// Something in the investigation: a service, person, event or resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct Entity {
    /// The room.
    pub room_id: RoomId,
    /// ULID, minted on first creation.
    pub entity_id: EntityId,
    /// Display name.
    pub name: String,
    /// Kind of entity.
    #[serde(rename = "type")]
    pub entity_type: EntityType,
    /// Typed identifiers, sorted; for a merge winner, the union of the merged entities'.
    pub identifiers: Vec<Identifier>,
    /// Free-form properties (a JSON object).
    pub properties: Map<String, Value>,
    /// Who created it.
    pub created_by: UserId,
    /// Which agent created it.
    pub agent_id: AgentId,
    /// When.
    pub created_at: Timestamp,
    /// Set when this entity was merged into another; reads follow it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merged_into: Option<EntityId>,
}

impl Entity {
    /// Adds identifiers. An entity's identifiers are a set kept sorted by `(type, value)`: this
    /// is the one place that order and uniqueness are decided, for every store.
    pub fn add_identifiers(&mut self, identifiers: impl IntoIterator<Item = Identifier>) {
        self.identifiers = identifier_union(&self.identifiers, identifiers);
    }

    /// Adds each property whose key the entity does not have yet. Existing values win: the
    /// first agent to state a property keeps it.
    pub fn add_missing_properties(&mut self, properties: &Map<String, Value>) {
        for (k, v) in properties {
            self.properties.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }

    /// What a merge makes of the winner (`self`) and `loser`: the winner, holding the union of
    /// both entities' identifiers. (The loser keeps its own and points at the winner.)
    pub fn absorb(&mut self, loser: &Entity) {
        self.add_identifiers(loser.identifiers.iter().cloned());
    }
}

/// The sorted set of identifiers in `a` and `b`: what an entity holds after an attach or a
/// merge, and what the service checks against the identifier limit before either.
pub fn identifier_union(a: &[Identifier], b: impl IntoIterator<Item = Identifier>) -> Vec<Identifier> {
    let mut all: Vec<Identifier> = a.iter().cloned().chain(b).collect();
    all.sort();
    all.dedup();
    all
}

/// A directed, typed edge between two entities.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct Relationship {
    /// The room.
    pub room_id: RoomId,
    /// Edge source.
    pub source_entity_id: EntityId,
    /// Edge type, lowercase `[a-z0-9_]` (`depends_on`, `caused_by`, `changed_by`, `same_as`, …).
    pub relationship_type: String,
    /// Edge target.
    pub target_entity_id: EntityId,
    /// What the edge means here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Proof; repeated assertions of the same edge add to it.
    pub evidence: Vec<Evidence>,
    /// First asserted.
    pub created_at: Timestamp,
    /// Agent that first asserted it.
    pub agent_id: AgentId,
    /// Person behind that agent.
    pub user_id: UserId,
    /// The first assertion's retry key, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

impl Relationship {
    /// Adds a repeated assertion of the same edge: each of its evidence items not already held
    /// (by equality), in order, and its description if the edge has none. Everything else of
    /// the first assertion (author, time, key) is kept.
    pub fn absorb(&mut self, again: &Relationship) {
        for ev in &again.evidence {
            if !self.evidence.contains(ev) {
                self.evidence.push(ev.clone());
            }
        }
        if self.description.is_none() {
            self.description.clone_from(&again.description);
        }
    }
}

/// Metadata of a file attached to the room (the bytes live in the artifact store).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct Artifact {
    /// The room.
    pub room_id: RoomId,
    /// ULID, minted at registration.
    pub artifact_id: ArtifactId,
    /// Object key, always under the room's prefix.
    pub key: String,
    /// MIME type.
    pub content_type: String,
    /// Size in bytes.
    pub size: u64,
    /// Person who uploaded it.
    pub uploaded_by: UserId,
    /// Agent that registered it.
    pub agent_id: AgentId,
    /// Registration time.
    pub uploaded_at: Timestamp,
    /// What it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Findings it supports.
    pub linked_finding_ids: Vec<FindingId>,
    /// Entities it concerns (canonical ids on read).
    pub linked_entity_ids: Vec<EntityId>,
    /// The client's retry key, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// Set once erased: bytes deleted, `description` is the notice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub erased: Option<Erasure>,
}

impl Artifact {
    /// Erases the artifact's record as every store must (see
    /// [`ArtifactStore::erase_artifact`](crate::store::ArtifactStore::erase_artifact)): the
    /// description becomes the erasure's notice and the erasure is recorded. Returns `false`,
    /// changing nothing, when it was erased before.
    pub fn erase(&mut self, erasure: &Erasure) -> bool {
        if self.erased.is_some() {
            return false;
        }
        self.description = Some(erasure.notice());
        self.erased = Some(erasure.clone());
        true
    }
}

wire_enum!(
    /// What changed in a room: the kind of an [`Event`] in the room's feed.
    EventKind {
        /// A finding was posted (`finding_id`).
        FindingPosted = "finding_posted",
        /// An agent joined the room for the first time (`agent_id`).
        AgentJoined = "agent_joined",
        /// An agent declared its status; the summary holds the status and reason. `blocked` is
        /// the one a teammate must not miss.
        StatusDeclared = "status_declared",
        /// An entity was created (`entity_ids`: the new entity).
        EntityAdded = "entity_added",
        /// An existing entity gained identifiers or properties (`entity_ids`: that entity).
        IdentifiersAttached = "identifiers_attached",
        /// Two entities were merged (`entity_ids`: the winner, then the one merged into it).
        EntitiesMerged = "entities_merged",
        /// A relationship was added, or new evidence appended to it (`entity_ids`: from, to).
        RelationshipAdded = "relationship_added",
        /// How long the room is kept once closed was set (the summary says).
        RetentionSet = "retention_set",
        /// People were added to or removed from a members-only room (the summary says who).
        MembersChanged = "members_changed",
        /// An artifact was registered (`artifact_id`).
        ArtifactRegistered = "artifact_registered",
        /// The room was closed (the summary carries the resolution's first line, if any).
        RoomClosed = "room_closed",
        /// A closed room was reopened.
        RoomReopened = "room_reopened",
        /// The objective was changed (the summary holds the new one; the old is in the room's
        /// `objective_history`).
        ObjectiveChanged = "objective_changed",
        /// A section marker was set: a new phase (the summary holds its id and label).
        PhaseMarked = "phase_marked",
        /// An agent claimed a piece of work, or renewed its claim (the summary says which).
        WorkClaimed = "work_claimed",
        /// An agent released its claim.
        ClaimReleased = "claim_released",
        /// An agent asked the people to decide something (`decision_id` in the summary's place:
        /// read it in get_room_context).
        DecisionAsked = "decision_asked",
        /// A decision was answered (the summary says by whom and through which channel).
        DecisionAnswered = "decision_answered",
        /// A finding (`finding_id`) or an artifact (`artifact_id`) was erased; the summary says
        /// by whom and why. Earlier events about it now carry the notice instead of its text.
        Erased = "erased"
    },
    "kinds"
);

/// One change to a room, in the room's feed. Small by design: it names what changed and who
/// did it; the objects themselves are read by id with the existing tools.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct Event {
    /// Position in the room's feed: gap-free, in commit order (assigned by the store).
    pub seq: u64,
    /// What changed.
    pub kind: EventKind,
    /// When.
    pub at: Timestamp,
    /// The person whose agent (or who) made the change.
    pub user_id: UserId,
    /// The agent that made the change (absent for a room closed by a person).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<AgentId>,
    /// The finding concerned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finding_id: Option<FindingId>,
    /// The entities concerned (see [`EventKind`] for their order).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entity_ids: Vec<EntityId>,
    /// The artifact concerned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_id: Option<ArtifactId>,
    /// One line for a human or an agent deciding whether to read more (at most
    /// [`Event::SUMMARY_CHARS`] characters; the object itself has the whole text).
    pub summary: String,
}

impl Event {
    /// The longest summary, in characters.
    pub const SUMMARY_CHARS: usize = 160;

    /// An event of `kind` by `user_id` at `at` with this summary (cut to
    /// [`Event::SUMMARY_CHARS`] characters on a character boundary, marked with `…`), before the
    /// store gives it its `seq`.
    pub fn new(kind: EventKind, at: Timestamp, user_id: UserId, summary: &str) -> Self {
        Self {
            seq: 0,
            kind,
            at,
            user_id,
            agent_id: None,
            finding_id: None,
            entity_ids: Vec::new(),
            artifact_id: None,
            summary: Self::summary_of(summary),
        }
    }

    /// `text` as an event's summary: one line, at most [`Event::SUMMARY_CHARS`] characters.
    pub fn summary_of(text: &str) -> String {
        let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
        if one_line.chars().count() > Self::SUMMARY_CHARS {
            let mut s: String = one_line.chars().take(Self::SUMMARY_CHARS - 1).collect();
            s.push('…');
            s
        } else {
            one_line
        }
    }

    /// By this agent.
    pub fn agent(mut self, agent_id: &AgentId) -> Self {
        self.agent_id = Some(agent_id.clone());
        self
    }

    /// Concerning this finding.
    pub fn finding(mut self, finding_id: FindingId) -> Self {
        self.finding_id = Some(finding_id);
        self
    }

    /// Concerning these entities.
    pub fn entities(mut self, ids: impl IntoIterator<Item = EntityId>) -> Self {
        self.entity_ids = ids.into_iter().collect();
        self
    }

    /// Concerning this artifact.
    pub fn artifact(mut self, artifact_id: ArtifactId) -> Self {
        self.artifact_id = Some(artifact_id);
        self
    }

    /// Whether this is a person steering the room: a decision answered, a marker set, the
    /// objective changed, the room reopened or a claim released, directly (no agent). What
    /// resets the directed exchange budget between agents ([`crate::Limits::max_exchanges`]).
    pub fn by_person(&self) -> bool {
        self.agent_id.is_none()
            && matches!(
                self.kind,
                EventKind::DecisionAnswered
                    | EventKind::PhaseMarked
                    | EventKind::ObjectiveChanged
                    | EventKind::RoomReopened
                    | EventKind::ClaimReleased
            )
    }

    /// This event with its feed position.
    pub fn at_seq(&self, seq: u64) -> Self {
        Self { seq, ..self.clone() }
    }
}

/// An agent's claim on a piece of work, so that teammates do not repeat it. Held for a bounded
/// time the agent can renew; released by the agent, or lapsed when `expires_at` passes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct Claim {
    /// The room.
    pub room_id: RoomId,
    /// The work, as its claimer described it.
    pub subject: String,
    /// What identifies the work: the subject folded to lower case with runs of whitespace as
    /// one space. Two claims with the same key are on the same work.
    pub key: String,
    /// Entities the work is about.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entity_ids: Vec<EntityId>,
    /// The agent holding it.
    pub agent_id: AgentId,
    /// Its person.
    pub user_id: UserId,
    /// When this holder first claimed it (kept across renewals).
    pub claimed_at: Timestamp,
    /// Until when it is held unless renewed.
    pub expires_at: Timestamp,
    /// When it was released, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub released_at: Option<Timestamp>,
}

impl Claim {
    /// The key of a subject: lower case, runs of whitespace as one space, trimmed.
    pub fn key_of(subject: &str) -> String {
        subject.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase()
    }

    /// Held at `now`: not released and not lapsed.
    pub fn is_held(&self, now: Timestamp) -> bool {
        self.released_at.is_none() && self.expires_at > now
    }

    /// Held at `now` by `agent_id`.
    pub fn is_held_by(&self, agent_id: &AgentId, now: Timestamp) -> bool {
        self.is_held(now) && &self.agent_id == agent_id
    }

    /// Held at `now` by an agent other than `agent_id`: a claim by `agent_id` on the same work
    /// must be refused. Backends call it inside their conditional write.
    pub fn blocks(&self, agent_id: &AgentId, now: Timestamp) -> bool {
        self.is_held(now) && &self.agent_id != agent_id
    }
}

wire_enum!(
    /// How soon the people should answer a decision.
    Urgency {
        /// When convenient.
        Low = "low",
        /// Soon (the default).
        Normal = "normal",
        /// Work is waiting on it.
        High = "high"
    },
    "urgency"
);

wire_enum!(
    /// Through which channel a person's act came (an answer, a marker, a new objective, a
    /// close or reopen). Only a person's own tool gives `person`: the MCP server records every
    /// act it takes as an agent's, whatever the agent says.
    #[cfg_attr(
        feature = "schemars",
        schemars(description = "How a person's act came: `person` (command line), `web` (web view) or `agent` (MCP).")
    )]
    Channel {
        /// A person acted directly on the command line (`macp decide`, `macp steer`, …).
        Person = "person",
        /// A person acted directly through the server's person-facing API: the web view `macp
        /// serve` serves at `/`, or a `macp` command given `--server`.
        Web = "web",
        /// An agent acted, or relayed a person's word (through MCP).
        Agent = "agent"
    },
    "channel"
);

impl Channel {
    /// Whether this is a person acting directly: no agent stands behind the act.
    pub fn is_person(self) -> bool {
        matches!(self, Channel::Person | Channel::Web)
    }
}

/// A question an agent put to the people of a room, and its answer once given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct Decision {
    /// The room.
    pub room_id: RoomId,
    /// ULID, minted when asked.
    pub decision_id: DecisionId,
    /// The question.
    pub question: String,
    /// The choices offered, if any (an answer may still be free text).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    /// Findings that bear on it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub finding_ids: Vec<FindingId>,
    /// How soon.
    pub urgency: Urgency,
    /// The agent that asked.
    pub asked_by: AgentId,
    /// Its person.
    pub asked_by_user: UserId,
    /// When.
    pub asked_at: Timestamp,
    /// The answer, once given (first answer wins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<Answer>,
}

/// The answer to a [`Decision`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct Answer {
    /// What was decided.
    pub text: String,
    /// The person who answered (or on whose behalf an agent relayed it).
    pub user_id: UserId,
    /// How it came: `person` directly, or `agent` relaying.
    pub channel: Channel,
    /// The relaying agent, for `agent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<AgentId>,
    /// When.
    pub at: Timestamp,
}
