//! Tool arguments: the MCP contract. Field names are the design's; every struct refuses unknown
//! fields, so a misspelt argument is an `invalid_input` error rather than silently ignored.

use macp_core::model::{AgentStatus, EntityType, Evidence, Identifier, RoomStatus, VisibilityMode};
use macp_core::{AgentId, EntityId, FindingId, RoomId, Timestamp};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

/// `create_room`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateRoomArgs {
    /// Optional short human-readable label, e.g. "checkout-502s".
    #[serde(default)]
    pub name: Option<String>,
    /// The goal of the investigation, in markdown. Every agent reads it to decide what to do.
    pub objective: String,
    /// Optional labels for the room, e.g. ["sev-2", "payments"].
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// Only "full" exists: every member sees every finding (the default).
    #[serde(default)]
    pub visibility_mode: Option<VisibilityMode>,
}

/// `join_room`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JoinRoomArgs {
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

/// Tools that take only a room.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RoomArgs {
    /// The room.
    pub room_id: RoomId,
}

/// Which rooms `list_rooms` returns.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, Default, PartialEq, Eq)]
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

/// `list_rooms`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListRoomsArgs {
    /// "active" (default), "closed" or "all".
    #[serde(default)]
    pub status: Option<RoomFilter>,
    /// Page size (default 50, at most 200).
    #[serde(default)]
    pub limit: Option<usize>,
    /// `next_cursor` from the previous page.
    #[serde(default)]
    pub cursor: Option<String>,
}

impl RoomFilter {
    /// The core filter.
    pub fn status(self) -> Option<RoomStatus> {
        match self {
            RoomFilter::Active => Some(RoomStatus::Active),
            RoomFilter::Closed => Some(RoomStatus::Closed),
            RoomFilter::All => None,
        }
    }
}

/// `declare_status`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeclareStatusArgs {
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

/// `post_finding`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PostFindingArgs {
    /// The room.
    pub room_id: RoomId,
    /// What you found, in markdown: one fact or conclusion, with the specifics (times, hosts, ids).
    pub content: String,
    /// Labels, e.g. "triage", "hypothesis", "evidence", "root-cause", "remediation", "dead-end".
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// Ids of entities (from add_entity) this finding is about.
    #[serde(default)]
    pub entity_refs: Option<Vec<EntityId>>,
    /// Proof: [{kind: artifact|url|cloudtrail|datadog|metric|log, ref, description?, captured_at?}].
    #[serde(default)]
    pub evidence: Option<Vec<Evidence>>,
    /// Any unique string (e.g. a UUID); retrying with the same key never posts twice.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// Which of your agents posts; defaults to the one you joined with.
    #[serde(default)]
    pub agent_id: Option<AgentId>,
}

/// `search_findings`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchFindingsArgs {
    /// The room.
    pub room_id: RoomId,
    /// What you are looking for, in your own words; exact identifiers work too.
    pub query: String,
    /// Most results (default 10, at most 50).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Only findings with at least one of these tags.
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// Only findings posted by this agent.
    #[serde(default)]
    pub agent_id: Option<AgentId>,
}

/// `get_timeline`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TimelineArgs {
    /// The room.
    pub room_id: RoomId,
    /// Only findings with at least one of these tags.
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// Only findings posted by this agent.
    #[serde(default)]
    pub agent_id: Option<AgentId>,
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

/// `get_updates`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdatesArgs {
    /// The room.
    pub room_id: RoomId,
    /// The `cursor` from your previous get_updates or get_room_context; omit to start at the
    /// first finding.
    #[serde(default)]
    pub cursor: Option<String>,
}

/// `add_entity`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AddEntityArgs {
    /// The room.
    pub room_id: RoomId,
    /// Display name, e.g. "orders-db primary".
    pub name: String,
    /// "service", "person", "event" or "resource".
    #[serde(rename = "type")]
    pub entity_type: EntityType,
    /// Typed identifiers, e.g. [{type: "hostname", value: "db-1.prod"}, {type: "arn", value: "arn:aws:…"}].
    /// If another agent already added an entity with one of them, you get that entity.
    #[serde(default)]
    pub identifiers: Option<Vec<Identifier>>,
    /// Free-form facts about the entity (a JSON object).
    #[serde(default)]
    pub properties: Option<Map<String, Value>>,
    /// Any unique string; retrying with the same key never writes twice.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// Which of your agents acts; defaults to the one you joined with.
    #[serde(default)]
    pub agent_id: Option<AgentId>,
}

/// `add_relationship`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AddRelationshipArgs {
    /// The room.
    pub room_id: RoomId,
    /// The entity the edge starts from.
    pub source_entity_id: EntityId,
    /// The entity the edge points to.
    pub target_entity_id: EntityId,
    /// e.g. "depends_on", "caused_by", "changed_by", "same_as".
    pub relationship_type: String,
    /// What the edge means here.
    #[serde(default)]
    pub description: Option<String>,
    /// Proof for the edge (same shape as post_finding's evidence).
    #[serde(default)]
    pub evidence: Option<Vec<Evidence>>,
    /// Any unique string; retrying with the same key never writes twice.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// Which of your agents acts; defaults to the one you joined with.
    #[serde(default)]
    pub agent_id: Option<AgentId>,
}

/// `merge_entities`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MergeEntitiesArgs {
    /// The room.
    pub room_id: RoomId,
    /// The entity that remains.
    pub winner_entity_id: EntityId,
    /// The entity that becomes an alias of the winner.
    pub loser_entity_id: EntityId,
    /// Which of your agents acts; defaults to the one you joined with.
    #[serde(default)]
    pub agent_id: Option<AgentId>,
}

/// `get_entity_graph`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EntityGraphArgs {
    /// The room.
    pub room_id: RoomId,
    /// Start from this entity; omit for the best-connected entities of the whole room.
    #[serde(default)]
    pub entity_id: Option<EntityId>,
    /// Hops from entity_id (default 1, at most 3).
    #[serde(default)]
    pub depth: Option<u32>,
}

/// `request_artifact_upload`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RequestUploadArgs {
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

/// `register_artifact`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RegisterArtifactArgs {
    /// The room.
    pub room_id: RoomId,
    /// The `key` returned by request_artifact_upload, after the upload succeeded.
    pub key: String,
    /// What the file shows.
    #[serde(default)]
    pub description: Option<String>,
    /// Findings this file supports.
    #[serde(default)]
    pub linked_finding_ids: Option<Vec<FindingId>>,
    /// Entities this file concerns.
    #[serde(default)]
    pub linked_entity_ids: Option<Vec<EntityId>>,
    /// Any unique string; retrying with the same key never registers twice.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// Which of your agents registers; defaults to the one you joined with.
    #[serde(default)]
    pub agent_id: Option<AgentId>,
}

/// `list_artifacts`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArtifactsArgs {
    /// The room.
    pub room_id: RoomId,
    /// Only files linked to this finding.
    #[serde(default)]
    pub finding_id: Option<FindingId>,
    /// Only files linked to this entity (or an entity merged with it).
    #[serde(default)]
    pub entity_id: Option<EntityId>,
    /// `next_cursor` from the previous page (50 artifacts per page).
    #[serde(default)]
    pub cursor: Option<String>,
}
