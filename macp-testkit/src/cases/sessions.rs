//! Protocol sessions kept in the store: any server of the store carries a session on.

use macp_core::service::{DEFAULT_SESSION_IDLE, MAX_SESSION_OPENING_BYTES, SessionJoin, SessionLookup};

use crate::Backend;

use super::*;

const OPENING: &str = r#"{"protocolVersion":"2025-11-25","clientInfo":{"name":"kit","version":"1"}}"#;

/// A session opened through one service is read, joined and ended through another over the
/// same store, as two servers behind a load balancer would: each room keeps the agent it was
/// last joined as, joins of two rooms at once both persist, and an ended or unknown session is
/// nothing (ending one twice is harmless). The id itself is not what the store keys it by.
pub async fn a_session_carries_its_joins_to_every_server_of_the_store(backend: Backend) {
    let f = Fixture::new(&backend).await;
    // Another server of the store, on the same clock (servers' clocks agree).
    let other =
        macp_core::Macp::builder().store(backend.store.clone()).clock(f.clock.clone()).build().unwrap();
    let second = f
        .macp
        .create_room(&f.alice, macp_core::service::CreateRoom::new("Second room"))
        .await
        .unwrap()
        .room_id;
    let id = "0b9c1c8e-5d4f-4d0a-9a57-6f1f2d7c9e11";
    f.macp.open_session(id, OPENING.into()).await.unwrap();
    let s = other.session(id).await.unwrap().expect("the other server finds the session");
    assert_eq!((s.opening.as_str(), s.joined.len()), (OPENING, 0));

    let (x, y) =
        tokio::join!(other.session_joined(id, f.room, &f.a), f.macp.session_joined(id, second, &f.b));
    assert_eq!(
        (x.unwrap(), y.unwrap()),
        (SessionJoin::Joined, SessionJoin::Joined),
        "both joins found the session"
    );
    let s = f.macp.session(id).await.unwrap().unwrap();
    assert_eq!(s.joined.get(&f.room), Some(&f.a), "a concurrent join of another room was lost");
    assert_eq!(s.joined.get(&second), Some(&f.b));
    assert_eq!(other.session_joined(id, f.room, &f.b).await.unwrap(), SessionJoin::Joined);
    assert_eq!(
        f.macp.session(id).await.unwrap().unwrap().joined.get(&f.room),
        Some(&f.b),
        "the last join wins"
    );

    assert!(
        backend.store.get_session(id).await.unwrap().is_none(),
        "the store keys sessions by the id itself"
    );
    assert!(f.macp.session("another-id").await.unwrap().is_none());
    assert_eq!(
        f.macp.session_joined("another-id", f.room, &f.a).await.unwrap(),
        SessionJoin::Unknown,
        "joined a session that is not there"
    );
    assert!(f.macp.session("another-id").await.unwrap().is_none(), "a join created a session");

    other.end_session(id).await.unwrap();
    assert!(f.macp.session(id).await.unwrap().is_none(), "an ended session carries on");
    assert_eq!(f.macp.use_session(id).await.unwrap(), SessionLookup::Ended);
    other.end_session(id).await.unwrap();
}

/// A session ends when it has gone unused for the idle time, as one in a server's memory does:
/// each use (`use_session`, which every request of a session makes) moves its end, a join too;
/// an ended session is never trusted and is kept, ended, for another idle time, so servers still
/// holding it learn that it ended; then `purge_expired` deletes it (where the store does not
/// delete by time itself). A session ended by its client is ended for every server. Refusals:
/// an empty or overlong id and an opening over its limit, with the limit.
pub async fn a_session_ends_when_idle_and_is_purged(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let idle = DEFAULT_SESSION_IDLE.as_millis() as i64;
    let (id, quiet) = ("session-kept-alive", "session-left-idle");
    f.macp.open_session(id, OPENING.into()).await.unwrap();
    f.macp.open_session(quiet, OPENING.into()).await.unwrap();
    f.clock.advance_ms(idle / 2);
    assert!(matches!(f.macp.use_session(id).await.unwrap(), SessionLookup::Live(_)));
    f.clock.advance_ms(idle * 3 / 4);
    assert_eq!(f.macp.use_session(quiet).await.unwrap(), SessionLookup::Ended, "an idle session carried on");
    assert!(f.macp.session(quiet).await.unwrap().is_none());
    assert_eq!(
        f.macp.session_joined(quiet, f.room, &f.a).await.unwrap(),
        SessionJoin::Ended,
        "an ended session joined"
    );
    match f.macp.use_session(id).await.unwrap() {
        SessionLookup::Live(s) => assert_eq!(s.opening, OPENING),
        other => panic!("a session in use ended after its first idle time: {other:?}"),
    }
    assert_eq!(f.macp.use_session("never-opened").await.unwrap(), SessionLookup::Unknown);

    let report = f.macp.purge_expired().await.unwrap();
    assert_eq!(
        report.sessions, 0,
        "an ended session was purged before servers holding it could learn it ended"
    );
    assert_eq!(f.macp.use_session(quiet).await.unwrap(), SessionLookup::Ended);
    f.clock.advance_ms(idle * 4 / 5);
    let report = f.macp.purge_expired().await.unwrap();
    // DynamoDB's TTL deletes by time itself, so the AWS store purges nothing.
    if backend.store.name() != "aws" {
        assert_eq!(report.sessions, 1, "exactly the session ended an idle time ago is purged");
        assert_eq!(f.macp.use_session(quiet).await.unwrap(), SessionLookup::Unknown);
    }
    assert!(
        matches!(f.macp.use_session(id).await.unwrap(), SessionLookup::Live(_)),
        "the purge took a live session"
    );

    f.macp.end_session(id).await.unwrap();
    assert_eq!(
        f.macp.use_session(id).await.unwrap(),
        SessionLookup::Ended,
        "a session its client ended carries on"
    );
    // Nothing makes an ended session live again: a join, a use, opening it again.
    assert_eq!(f.macp.session_joined(id, f.room, &f.b).await.unwrap(), SessionJoin::Ended);
    assert!(!f.macp.open_session(id, OPENING.into()).await.unwrap(), "an ended session was opened again");
    assert_eq!(f.macp.use_session(id).await.unwrap(), SessionLookup::Ended, "an ended session came back");
    assert!(f.macp.session(id).await.unwrap().is_none());

    expect_code(f.macp.open_session("", OPENING.into()).await, "invalid_input");
    let e = expect_code(f.macp.open_session(&"x".repeat(257), OPENING.into()).await, "invalid_input");
    assert_eq!(e.limit(), Some(256));
    let e = expect_code(
        f.macp.open_session("big", "x".repeat(MAX_SESSION_OPENING_BYTES + 1)).await,
        "invalid_input",
    );
    assert_eq!(e.limit(), Some(MAX_SESSION_OPENING_BYTES as u64));
    assert_eq!(
        f.macp.use_session("big").await.unwrap(),
        SessionLookup::Unknown,
        "a refused opening was stored"
    );
}
