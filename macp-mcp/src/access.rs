//! What each tool does to a room, decided once: the tool annotations clients see, the scope a
//! token needs (auth), and the check the server makes before a call all read [`TOOLS`].

use rmcp::model::ToolAnnotations;

/// What a tool does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// Changes the record (needs the write scope when one is configured).
    pub writes: bool,
    /// Can change or hide what is there (not only add): closing a room, merging entities.
    pub destructive: bool,
    /// Repeating the same call has no further effect (for the writes that take an
    /// `idempotency_key`, when the key is given).
    pub idempotent: bool,
}

const READ: Access = Access { writes: false, destructive: false, idempotent: true };
const ADD: Access = Access { writes: true, destructive: false, idempotent: false };
const ADD_KEYED: Access = Access { writes: true, destructive: false, idempotent: true };
const CHANGE: Access = Access { writes: true, destructive: true, idempotent: true };

/// Every tool and what it does, by name.
pub const TOOLS: &[(&str, Access)] = &[
    ("add_entity", ADD_KEYED),
    ("add_relationship", ADD_KEYED),
    // The first answer stands; a second is refused.
    ("answer_decision", Access { writes: true, destructive: false, idempotent: true }),
    ("ask_decision", ADD),
    // Claiming again renews (same holder, later expiry); releasing twice finds nothing to release.
    ("claim_work", Access { writes: true, destructive: false, idempotent: false }),
    ("close_room", CHANGE),
    ("create_room", ADD),
    ("declare_status", Access { writes: true, destructive: false, idempotent: true }),
    // Erasing again changes nothing (the first reason stands).
    ("erase", CHANGE),
    ("get_entity_graph", READ),
    ("get_room_context", READ),
    ("get_room_summary", READ),
    ("get_timeline", READ),
    ("get_updates", READ),
    ("join_room", Access { writes: true, destructive: false, idempotent: true }),
    ("list_artifacts", READ),
    ("list_rooms", READ),
    ("merge_entities", CHANGE),
    ("post_finding", ADD_KEYED),
    ("register_artifact", ADD_KEYED),
    ("request_artifact_upload", ADD),
    ("search_findings", READ),
    // Reopening or marking again changes nothing more; a new objective replaces the last.
    ("steer_room", Access { writes: true, destructive: false, idempotent: false }),
];

/// What `tool` does; `None` for a name that is not a tool.
pub fn access(tool: &str) -> Option<Access> {
    TOOLS.iter().find(|(n, _)| *n == tool).map(|(_, a)| *a)
}

/// Whether `tool` writes. Unknown names count as writes, so a token without the write scope is
/// never let through by a name the table does not know.
pub fn writes(tool: &str) -> bool {
    access(tool).is_none_or(|a| a.writes)
}

impl Access {
    /// The MCP annotations that say the same (MACP never reaches outside its own record).
    pub fn annotations(self) -> ToolAnnotations {
        let a = ToolAnnotations::new().read_only(!self.writes).open_world(false);
        if self.writes { a.destructive(self.destructive).idempotent(self.idempotent) } else { a }
    }
}
