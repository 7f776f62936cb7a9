//! Input limits and read caps.
//!
//! Every limit is a refusal, never a truncation: a request over a limit fails with
//! `invalid_input` (or `capacity_exceeded` for aggregate capacities) naming the limit, and
//! writes nothing. Read caps (page sizes, context caps) bound what one response carries; the
//! response says what was left out (totals, `has_more`, cursors).
//!
//! | limit | default | applies to |
//! |---|---|---|
//! | `max_content_bytes` | 16 KiB | finding content |
//! | `max_objective_bytes` | 4 KiB | room objective |
//! | `max_name_bytes` | 200 | room and entity names |
//! | `max_tags` / `max_tag_bytes` | 16 / 64 | tags on rooms and findings |
//! | `max_entity_refs` | 32 | entity refs per finding |
//! | `max_evidence` | 16 | evidence items per finding or relationship |
//! | `max_evidence_ref_bytes` | 2 KiB | evidence `ref` |
//! | `max_description_bytes` | 2 KiB | evidence, relationship and artifact descriptions |
//! | `max_identifiers` | 32 | identifiers per entity (including after a merge) |
//! | `max_identifier_type_bytes` / `max_identifier_value_bytes` | 64 / 512 | each identifier |
//! | `max_properties_bytes` | 8 KiB | an entity's properties, as JSON (after upserts) |
//! | `max_label_bytes` | 64 | agent_type, relationship_type |
//! | `max_reason_bytes` | 1 KiB | status reasons |
//! | `max_idempotency_key_bytes` | 128 | idempotency keys |
//! | `max_agents_per_room` | 64 | capacity: agents that may join one room |
//! | `max_mentions` | 8 | agents one finding mentions |
//! | `default_page` / `max_page` | 50 / 200 | get_timeline, list_rooms, list_artifacts |
//! | `default_updates_page` / `max_updates_page` | 100 / 500 | get_updates |
//! | `max_wait_seconds` | 25 | get_updates `wait_seconds` |
//! | `max_graph_depth` | 3 | get_entity_graph depth |
//! | `max_graph_entities` / `max_graph_relationships` | 200 / 500 | get_entity_graph result caps |
//! | `max_exchanges` | 10 | findings two agents may address to each other with no person acting in between (0: off) |
//! | `max_marker_chars` / `max_markers` | 120 / 100 | a section marker's label (after redaction); markers per room |
//!
//! Text limits apply after redaction, which can shrink a text (a pasted private key becomes one
//! placeholder). So that the redactor's work stays bounded, a text longer than four times the
//! largest text limit ([`Limits::max_unredacted_bytes`], 64 KiB by default) is refused before
//! it is read, even one that redaction would have brought within its limit (a 100 KB paste of
//! keys): paste less at once. The bound is per text; a request's texts together are bounded by
//! the server's request size.

use serde::Serialize;

/// Input limits and page sizes. Construct with [`Limits::default`] and adjust fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct Limits {
    /// Finding content, in UTF-8 bytes.
    pub max_content_bytes: usize,
    /// Room objective, in UTF-8 bytes.
    pub max_objective_bytes: usize,
    /// Room and entity names.
    pub max_name_bytes: usize,
    /// Tags per room or finding.
    pub max_tags: usize,
    /// Bytes per tag.
    pub max_tag_bytes: usize,
    /// Entity refs per finding.
    pub max_entity_refs: usize,
    /// Evidence items per finding or relationship (after repeated assertions are combined).
    pub max_evidence: usize,
    /// Bytes of an evidence `ref`.
    pub max_evidence_ref_bytes: usize,
    /// Bytes of any description.
    pub max_description_bytes: usize,
    /// Identifiers per entity.
    pub max_identifiers: usize,
    /// Bytes of an identifier type.
    pub max_identifier_type_bytes: usize,
    /// Bytes of an identifier value.
    pub max_identifier_value_bytes: usize,
    /// Bytes of an entity's properties serialised as JSON.
    pub max_properties_bytes: usize,
    /// Bytes of short labels (agent_type, relationship_type).
    pub max_label_bytes: usize,
    /// Bytes of a status reason.
    pub max_reason_bytes: usize,
    /// Bytes of an idempotency key.
    pub max_idempotency_key_bytes: usize,
    /// Agents that may join one room.
    pub max_agents_per_room: usize,
    /// Agents one finding may mention.
    pub max_mentions: usize,
    /// The directed exchange budget: how many findings two agents may address to each other
    /// (one mentioning the other) with no person acting in the room in between, before the
    /// next is refused with `capacity_exceeded`. It stops two agents from looping on each other
    /// unattended. 0 turns it off.
    pub max_exchanges: usize,
    /// The longest section-marker label, in characters (after secrets are redacted).
    pub max_marker_chars: usize,
    /// Most section markers one room may have.
    pub max_markers: usize,
    /// Default page size for paged reads.
    pub default_page: usize,
    /// Largest page size a caller may ask for.
    pub max_page: usize,
    /// Default page size of get_updates.
    pub default_updates_page: usize,
    /// Largest get_updates page.
    pub max_updates_page: usize,
    /// Longest a get_updates call may wait for something new, in seconds. Short enough that
    /// proxies and clients with a 30-second request limit never cut a waiting call.
    pub max_wait_seconds: u64,
    /// Deepest get_entity_graph traversal.
    pub max_graph_depth: u32,
    /// Most entities one get_entity_graph returns.
    pub max_graph_entities: usize,
    /// Most relationships one get_entity_graph returns.
    pub max_graph_relationships: usize,
}

impl Limits {
    /// The longest text a write may carry before redaction: four times the largest text limit.
    /// A longer text is refused before the redactor reads it, even when redaction would have
    /// brought it within its limit, so that the redactor's work on one text stays bounded.
    pub fn max_unredacted_bytes(&self) -> usize {
        [
            self.max_content_bytes,
            self.max_objective_bytes,
            self.max_name_bytes,
            self.max_tag_bytes,
            self.max_evidence_ref_bytes,
            self.max_description_bytes,
            self.max_identifier_type_bytes,
            self.max_identifier_value_bytes,
            self.max_properties_bytes,
            self.max_label_bytes,
            self.max_reason_bytes,
            // A character is at most four bytes.
            self.max_marker_chars.saturating_mul(4),
        ]
        .into_iter()
        .max()
        .unwrap_or(0)
        .saturating_mul(4)
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_content_bytes: 16 * 1024,
            max_objective_bytes: 4 * 1024,
            max_name_bytes: 200,
            max_tags: 16,
            max_tag_bytes: 64,
            max_entity_refs: 32,
            max_evidence: 16,
            max_evidence_ref_bytes: 2 * 1024,
            max_description_bytes: 2 * 1024,
            max_identifiers: 32,
            max_identifier_type_bytes: 64,
            max_identifier_value_bytes: 512,
            max_properties_bytes: 8 * 1024,
            max_label_bytes: 64,
            max_reason_bytes: 1024,
            max_idempotency_key_bytes: 128,
            max_agents_per_room: 64,
            max_mentions: 8,
            max_exchanges: 10,
            max_marker_chars: 120,
            max_markers: 100,
            default_page: 50,
            max_page: 200,
            default_updates_page: 100,
            max_updates_page: 500,
            max_wait_seconds: 25,
            max_graph_depth: 3,
            max_graph_entities: 200,
            max_graph_relationships: 500,
        }
    }
}

/// Caps of the bounded room context (`get_room_context`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct ContextCaps {
    /// The N most recent findings.
    pub findings: usize,
    /// The top-K entities by relationship degree.
    pub entities: usize,
    /// Agents listed (most recently active first).
    pub agents: usize,
    /// Tags listed in `tag_counts` (most used first).
    pub tags: usize,
    /// Characters of each finding's content shown; longer content is marked as shortened and
    /// can be read whole through get_timeline.
    pub content_preview_chars: usize,
    /// Upper bound of the whole context serialised as JSON, in bytes. Items are dropped (oldest
    /// findings, lowest-degree entities, least active agents, least used tags first) until it
    /// fits; the response says how many were shown of how many. The room itself is always
    /// shown, so the service refuses a budget that could not hold a room at the input limits.
    pub budget_bytes: usize,
}

impl Default for ContextCaps {
    fn default() -> Self {
        Self {
            findings: 20,
            entities: 15,
            agents: 32,
            tags: 40,
            content_preview_chars: 480,
            budget_bytes: 16 * 1024,
        }
    }
}
