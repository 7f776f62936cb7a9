//! Claims on work: one holder per piece of work, bounded in time, renewable, releasable, in the
//! context and the feed.

use std::sync::Arc;

use macp_core::model::EventKind;
use macp_core::service::{ClaimWork, JoinRoom, UpdatesQuery};

use super::*;
use crate::Backend;

/// Sixteen agents racing for one free piece of work: exactly one holds it; the other fifteen
/// get a conflict naming the holder.
pub async fn one_of_sixteen_concurrent_claimers_holds_the_work(backend: Backend) {
    let f = Arc::new(Fixture::new(&backend).await);
    let mut agents = Vec::new();
    for i in 0..16 {
        let a = agent(&format!("claimer-{i}"));
        f.macp.join_room(&f.alice, JoinRoom::new(f.room).agent(a.clone())).await.unwrap();
        agents.push(a);
    }
    let mut tasks = Vec::new();
    for a in agents {
        let f = f.clone();
        tasks.push(tokio::spawn(async move {
            f.macp.claim_work(&f.alice, ClaimWork::new(f.room, a, "Checking the orders-db failover")).await
        }));
    }
    let mut won = Vec::new();
    let mut refused = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(r) => won.push(r.claim.agent_id),
            Err(e) => {
                assert_eq!(e.code(), "conflict", "{e}");
                refused += 1;
            }
        }
    }
    assert_eq!((won.len(), refused), (1, 15), "exactly one holder");
    let winner = &won[0];
    let e = expect_code(
        f.macp
            .claim_work(&f.bob, ClaimWork::new(f.room, f.b.clone(), "checking  the ORDERS-DB failover"))
            .await,
        "conflict",
    );
    let msg = e.to_string();
    assert!(msg.contains(winner.as_str()) && msg.contains("since") && msg.contains("until"), "{msg}");
    let held = f.macp.list_claims(&f.alice, f.room).await.unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(&held[0].agent_id, winner);
    let feed =
        f.macp.updates(&f.bob, UpdatesQuery::new(f.room).kinds([EventKind::WorkClaimed])).await.unwrap();
    assert_eq!(feed.events.len(), 1, "one claim event: refused claims wrote nothing");
}

/// A claim lasts its time: its holder renews it (keeping when it first claimed), releases it,
/// and once released or lapsed another agent may take the work. The context lists what is held.
pub async fn claims_renew_release_and_lapse(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let db = f.entity("orders-db", "hostname", "orders-db-1").await;
    let first = f
        .macp
        .claim_work(&f.alice, ClaimWork::new(f.room, f.a.clone(), "failover test").minutes(10).entities([db]))
        .await
        .unwrap();
    assert!(!first.renewed);
    assert_eq!(first.claim.entity_ids, vec![db]);
    let ctx = f.macp.room_context(&f.bob, f.room).await.unwrap();
    assert_eq!((ctx.claims.len(), ctx.claims_total), (1, 1), "the context lists the open claim");
    assert_eq!(ctx.claims[0].subject, "failover test");

    f.clock.advance_ms(5 * 60_000);
    let renewed = f
        .macp
        .claim_work(&f.alice, ClaimWork::new(f.room, f.a.clone(), "Failover test").minutes(10))
        .await
        .unwrap();
    assert!(renewed.renewed, "the holder claiming again renews");
    assert_eq!(renewed.claim.claimed_at, first.claim.claimed_at, "a renewal keeps when it was first claimed");
    assert!(renewed.claim.expires_at > first.claim.expires_at);

    f.clock.advance_ms(9 * 60_000);
    expect_code(
        f.macp.claim_work(&f.bob, ClaimWork::new(f.room, f.b.clone(), "failover test")).await,
        "conflict",
    );
    f.clock.advance_ms(2 * 60_000);
    let taken =
        f.macp.claim_work(&f.bob, ClaimWork::new(f.room, f.b.clone(), "failover test")).await.unwrap();
    assert_eq!(taken.claim.agent_id, f.b, "a lapsed claim is free to take");

    expect_code(
        f.macp.claim_work(&f.alice, ClaimWork::new(f.room, f.a.clone(), "failover test").release()).await,
        "not_found",
    );
    let released = f
        .macp
        .claim_work(&f.bob, ClaimWork::new(f.room, f.b.clone(), "failover test").release())
        .await
        .unwrap();
    assert!(released.released && released.claim.released_at.is_some());
    assert!(f.macp.list_claims(&f.bob, f.room).await.unwrap().is_empty(), "nothing held after the release");
    f.macp.claim_work(&f.alice, ClaimWork::new(f.room, f.a.clone(), "failover test")).await.unwrap();

    let e = expect_code(
        f.macp.claim_work(&f.alice, ClaimWork::new(f.room, f.a.clone(), "x").minutes(241)).await,
        "invalid_input",
    );
    assert_eq!(e.body().limit, Some(240));
    let kinds: Vec<EventKind> = f
        .macp
        .updates(&f.bob, UpdatesQuery::new(f.room).kinds([EventKind::WorkClaimed, EventKind::ClaimReleased]))
        .await
        .unwrap()
        .events
        .iter()
        .map(|e| e.kind)
        .collect();
    use EventKind::{ClaimReleased as R, WorkClaimed as C};
    assert_eq!(kinds, vec![C, C, C, R, C], "claim, renewal, takeover, release, claim");
}

/// A person releases a claim an agent holds and left (gone stale): the work is free for
/// another agent, and the release, made by no agent, counts as a person acting in the room.
pub async fn a_person_releases_an_agents_stale_claim(backend: Backend) {
    let f = Fixture::new(&backend).await;
    f.macp
        .claim_work(&f.alice, ClaimWork::new(f.room, f.a.clone(), "checking the orders-db failover"))
        .await
        .unwrap();
    expect_code(
        f.macp
            .claim_work(&f.bob, ClaimWork::new(f.room, f.b.clone(), "checking the orders-db failover"))
            .await,
        "conflict",
    );
    let released =
        f.macp.release_claim_as_person(&f.bob, f.room, "Checking the  orders-db failover").await.unwrap();
    assert_eq!(released.agent_id, f.a, "the holder's claim, released");
    assert!(released.released_at.is_some());
    let taken = f
        .macp
        .claim_work(&f.bob, ClaimWork::new(f.room, f.b.clone(), "checking the orders-db failover"))
        .await;
    assert_eq!(taken.unwrap().claim.agent_id, f.b, "the work is free again");
    let events = f
        .macp
        .updates(&f.alice, UpdatesQuery::new(f.room).kinds([EventKind::ClaimReleased]))
        .await
        .unwrap()
        .events;
    assert_eq!(events.len(), 1);
    assert!(events[0].agent_id.is_none() && events[0].by_person(), "released by a person: {:?}", events[0]);
    expect_code(f.macp.release_claim_as_person(&f.bob, f.room, "nothing like this").await, "not_found");
}
