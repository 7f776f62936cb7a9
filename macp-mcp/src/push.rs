//! Push: every room is an MCP resource, `macp://rooms/{room_id}`, and a client subscribed to it
//! gets `notifications/resources/updated` for that URI once per change to the room, in feed
//! order, through either protocol generation rmcp serves: `resources/subscribe` on 2025-11-25
//! sessions, `subscriptions/listen` on 2026-07-28. Reading the resource gives the bounded room
//! context; `get_updates` gives what changed.

use std::future::Future;

use macp_core::{Error, Macp, Principal, RoomId};

/// The URI template of a room resource.
pub const ROOM_URI_TEMPLATE: &str = "macp://rooms/{room_id}";

const ROOM_URI_PREFIX: &str = "macp://rooms/";

/// The resource URI of `room`.
pub fn room_uri(room: RoomId) -> String {
    format!("{ROOM_URI_PREFIX}{room}")
}

/// The room a resource URI names, if it names one.
pub fn room_of(uri: &str) -> Option<RoomId> {
    uri.strip_prefix(ROOM_URI_PREFIX)?.parse().ok()
}

/// Calls `send` once per change committed to `room` from now on, in feed order, until `send`
/// reports that the subscriber is gone (returns `false`), or `who` may no longer see the room
/// (removed from its members, or the room purged). Changes that commit while a notification is
/// being sent are sent after it: none is dropped, none is sent twice.
pub async fn forward<F, Fut>(macp: Macp, who: Principal, room: RoomId, mut send: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    // Watch first, then read where the feed is: a change between the two is seen by the watch.
    let mut watch = macp.watch(room);
    let Ok(mut sent) = macp.last_event_seq(&who, room).await else { return };
    loop {
        watch.changed().await;
        let head = match macp.last_event_seq(&who, room).await {
            Ok(h) => h,
            Err(Error::NotFound { .. }) => return,
            // A failed read is retried at the next change.
            Err(_) => continue,
        };
        while sent < head {
            if !send().await {
                return;
            }
            sent += 1;
        }
    }
}
