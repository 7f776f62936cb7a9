//! The one public error type.
//!
//! Every failure a caller can see is an [`Error`]. Each variant has a stable string
//! [`code`](Error::code) that clients may match on (it is part of the MCP contract), a message
//! written for the person or agent who has to act on it, the limit that was exceeded where one
//! applies, and a [retryable](Error::is_retryable) flag. Backends keep their own private error
//! types and convert into [`Error::Backend`].

use serde::Serialize;

/// Shorthand for `Result<T, macp_core::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in MACP.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The room, finding, entity, agent or artifact does not exist.
    #[error("{what} `{id}` not found{}", hint_suffix(.hint))]
    NotFound {
        /// What kind of thing was looked up (`room`, `entity`, …).
        what: &'static str,
        /// The id that was looked up.
        id: String,
        /// What to do about it.
        hint: Option<String>,
    },

    /// A create collided with something that already exists under the same key.
    #[error("{what} `{id}` already exists")]
    AlreadyExists {
        /// What kind of thing collided.
        what: &'static str,
        /// Its id.
        id: String,
    },

    /// The request is malformed or breaks an input limit. Nothing was written.
    #[error("invalid {field}: {message}")]
    InvalidInput {
        /// The offending field, as named in the request.
        field: String,
        /// What is wrong and how to fix it.
        message: String,
        /// The limit that was exceeded, where the refusal is about a limit.
        limit: Option<u64>,
    },

    /// The write contradicts an earlier one: an idempotency key reused with a different payload,
    /// or a precondition that no longer holds (e.g. a concurrent merge). Nothing was written.
    #[error("conflict: {message}")]
    Conflict {
        /// What conflicted and what to do.
        message: String,
    },

    /// The room is closed: it stays readable, but writes are refused.
    #[error(
        "room `{room_id}` is closed: it can still be read (get_timeline, search_findings, \
         get_room_context) but no longer written to; create a new room to continue"
    )]
    RoomClosed {
        /// The closed room.
        room_id: String,
    },

    /// An aggregate capacity is full (e.g. agents per room). Retrying will not help until
    /// something is freed or the operator raises the limit.
    #[error("{what} is at capacity ({limit}): {message}")]
    CapacityExceeded {
        /// Which capacity.
        what: &'static str,
        /// The configured maximum.
        limit: u64,
        /// What to do.
        message: String,
    },

    /// The call names an agent that has not joined the room (or names none where one is needed).
    #[error("{message}")]
    NotJoined {
        /// What to do: usually "call join_room first".
        message: String,
    },

    /// The caller could not be authenticated.
    #[error("unauthenticated: {message}")]
    Unauthenticated {
        /// Why.
        message: String,
    },

    /// The caller is known but may not do this (e.g. act as another user's agent).
    #[error("permission denied: {message}")]
    PermissionDenied {
        /// Why, and what would be allowed.
        message: String,
    },

    /// The storage backend failed. `retryable` says whether the same call may succeed later
    /// (busy database, throttling, 5xx) or not (corruption, misconfiguration).
    #[error("{backend} backend error: {message}")]
    Backend {
        /// Which backend (`sqlite`, `memory`, `dynamodb`, …).
        backend: &'static str,
        /// What failed, with the backend's own error code where it has one.
        message: String,
        /// Whether retrying may help.
        retryable: bool,
        /// The underlying error.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    },
}

fn hint_suffix(hint: &Option<String>) -> String {
    match hint {
        Some(h) => format!(": {h}"),
        None => String::new(),
    }
}

impl Error {
    /// The stable machine-readable code of this error. Part of the public contract.
    pub fn code(&self) -> &'static str {
        match self {
            Error::NotFound { .. } => "not_found",
            Error::AlreadyExists { .. } => "already_exists",
            Error::InvalidInput { .. } => "invalid_input",
            Error::Conflict { .. } => "conflict",
            Error::RoomClosed { .. } => "room_closed",
            Error::CapacityExceeded { .. } => "capacity_exceeded",
            Error::NotJoined { .. } => "not_joined",
            Error::Unauthenticated { .. } => "unauthenticated",
            Error::PermissionDenied { .. } => "permission_denied",
            Error::Backend { .. } => "backend",
        }
    }

    /// Whether repeating the same call may succeed. Only transient backend failures are
    /// retryable; every other error will recur until the request changes.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Backend { retryable: true, .. })
    }

    /// The limit that was exceeded, where the error is about a limit.
    pub fn limit(&self) -> Option<u64> {
        match self {
            Error::InvalidInput { limit, .. } => *limit,
            Error::CapacityExceeded { limit, .. } => Some(*limit),
            _ => None,
        }
    }

    /// A serialisable view of the error: what MCP clients receive.
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            code: self.code(),
            message: self.to_string(),
            retryable: self.is_retryable(),
            limit: self.limit(),
            field: match self {
                Error::InvalidInput { field, .. } => Some(field.clone()),
                _ => None,
            },
        }
    }

    /// `invalid_input` for `field`, without a limit.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Error::InvalidInput { field: field.into(), message: message.into(), limit: None }
    }

    /// `invalid_input` for a value longer than `max` bytes.
    pub fn too_long(field: impl Into<String>, max: usize, got: usize) -> Self {
        let field = field.into();
        Error::InvalidInput {
            message: format!(
                "{field} is {got} bytes; the limit is {max} bytes. Shorten it (it is refused, never truncated)"
            ),
            field,
            limit: Some(max as u64),
        }
    }

    /// `invalid_input` for a list with more than `max` items.
    pub fn too_many(field: impl Into<String>, max: usize, got: usize) -> Self {
        let field = field.into();
        Error::InvalidInput {
            message: format!("{field} has {got} items; the limit is {max}"),
            field,
            limit: Some(max as u64),
        }
    }

    /// `not_found` for a thing of kind `what`.
    pub fn not_found(what: &'static str, id: impl ToString) -> Self {
        Error::NotFound { what, id: id.to_string(), hint: None }
    }

    /// `not_found` with advice on what to do.
    pub fn not_found_hint(what: &'static str, id: impl ToString, hint: impl Into<String>) -> Self {
        Error::NotFound { what, id: id.to_string(), hint: Some(hint.into()) }
    }

    /// `conflict` with a message.
    pub fn conflict(message: impl Into<String>) -> Self {
        Error::Conflict { message: message.into() }
    }

    /// A backend error.
    pub fn backend(
        backend: &'static str,
        retryable: bool,
        message: impl Into<String>,
        source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        Error::Backend { backend, message: message.into(), retryable, source }
    }
}

/// The wire shape of an error: `{code, message, retryable, limit?, field?}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct ErrorBody {
    /// Stable code, see [`Error::code`].
    pub code: &'static str,
    /// Human-readable message that says what to do.
    pub message: String,
    /// Whether the same call may succeed later.
    pub retryable: bool,
    /// The limit that was exceeded, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// The offending input field, for `invalid_input`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_transient_backend_errors_are_retryable() {
        assert!(Error::backend("sqlite", true, "busy", None).is_retryable());
        assert!(!Error::backend("sqlite", false, "corrupt", None).is_retryable());
        assert!(!Error::conflict("x").is_retryable());
        assert!(!Error::RoomClosed { room_id: "r".into() }.is_retryable());
    }

    #[test]
    fn limit_refusals_carry_the_limit_and_say_nothing_was_truncated() {
        let e = Error::too_long("content", 16384, 20000);
        assert_eq!(e.code(), "invalid_input");
        assert_eq!(e.limit(), Some(16384));
        assert!(e.to_string().contains("never truncated"));
        let body = serde_json::to_value(e.body()).unwrap();
        assert_eq!(body["limit"], 16384);
        assert_eq!(body["field"], "content");
    }
}
