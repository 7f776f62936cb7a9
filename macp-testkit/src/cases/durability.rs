//! Durability: what a durable backend keeps across a reopen.

use macp_core::Macp;
use macp_core::model::{Channel, RoomStatus};
use macp_core::service::{CloseRoom, TimelineQuery};

use crate::Backend;

use super::*;

// ---------------------------------------------------------------------------------------------
// Durability

/// On a durable backend, everything acknowledged is there when the data is opened again,
/// protocol sessions and what they joined included.
pub async fn acknowledged_writes_survive_reopen(backend: Backend) {
    assert!(backend.store.capabilities().durable, "the backend declares durable; its store must say so");
    let reopen = backend.reopen.clone().expect("a durable backend provides reopen");
    let f = Fixture::new(&backend).await;
    let x = f.entity("x", "host", "x").await;
    let y = f.entity("y", "host", "y").await;
    f.link(x, "depends_on", y).await;
    let posted = f.post("remember me", &["root-cause"]).await;
    f.macp.open_session("durable-session", "{}".into()).await.unwrap();
    let joined = f.macp.session_joined("durable-session", f.room, &f.a).await.unwrap();
    assert_eq!(joined, macp_core::service::SessionJoin::Joined);
    f.macp.close_room(&f.alice, CloseRoom::new(f.room), Channel::Person).await.unwrap();
    let again = Macp::builder().store(reopen()).build().unwrap();
    let t = again.timeline(&f.bob, TimelineQuery::new(f.room)).await.unwrap();
    assert_eq!(t.findings, vec![posted]);
    let s = again.room_summary(&f.bob, f.room).await.unwrap();
    assert_eq!((s.room.status, s.entity_count, s.relationship_count), (RoomStatus::Closed, 2, 1));
    let session = again.session("durable-session").await.unwrap().expect("the session survives");
    assert_eq!(session.joined.get(&f.room), Some(&f.a));
}
