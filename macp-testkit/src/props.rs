//! Property tests of the invariants, run with proptest against a backend factory.
//!
//! Each property runs 256 cases by default (set `MACP_PROPTEST_CASES` to change it); every case
//! gets a fresh backend from the factory.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;

use macp_core::model::{AgentStatus, EntityType, EventKind};
use macp_core::service::{
    AddEntity, DeclareStatus, GraphQuery, JoinRoom, MergeEntities, PostFinding, UpdatesQuery,
};
use macp_core::{AgentId, EntityId, FindingId};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use crate::Backend;
use crate::cases::Fixture;

/// Cases per property: `MACP_PROPTEST_CASES`, default 256.
pub fn cases() -> u32 {
    std::env::var("MACP_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256)
}

fn run<S, F, Fut, T>(name: &str, factory: F, strategy: S, test: T)
where
    S: Strategy,
    S::Value: Clone + std::fmt::Debug,
    F: Fn() -> Fut,
    Fut: Future<Output = Option<Backend>>,
    T: Fn(Backend, S::Value) -> std::pin::Pin<Box<dyn Future<Output = Result<(), TestCaseError>> + Send>>,
{
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().expect("runtime");
    assert!(rt.block_on(factory()).is_some(), "{name}: backend not configured (the factory returned None)");
    let mut runner =
        TestRunner::new(Config { cases: cases(), failure_persistence: None, ..Config::default() });
    let result = runner.run(&strategy, |value| {
        rt.block_on(async {
            let backend =
                factory().await.ok_or_else(|| TestCaseError::fail("factory stopped returning a backend"))?;
            test(backend, value).await
        })
    });
    if let Err(e) = result {
        panic!("{name}: {e}");
    }
}

/// Concurrent writers (1–4, each posting 0–8 findings and declaring a status after every
/// second one) and a reader polling the whole feed with small pages the whole time: the reader
/// ends with every finding exactly once, in `seq` order 1..=n, and every other change exactly
/// once, in feed order.
pub fn prop_updates_never_skip_or_repeat<F, Fut>(factory: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Option<Backend>>,
{
    let strategy = (prop::collection::vec(0usize..=8, 1..=4), 1usize..=5);
    run("prop_updates_never_skip_or_repeat", factory, strategy, |backend, (posts, page)| {
        Box::pin(async move {
            let f = Arc::new(Fixture::new(&backend).await);
            let mut writers = Vec::new();
            for (w, n) in posts.iter().copied().enumerate() {
                let ag = f
                    .macp
                    .join_room(&f.alice, JoinRoom::new(f.room).agent(AgentId::new(format!("w{w}")).unwrap()))
                    .await
                    .unwrap()
                    .agent_id;
                let f = f.clone();
                writers.push(tokio::spawn(async move {
                    let mut ids = Vec::new();
                    for i in 0..n {
                        let p = f
                            .macp
                            .post_finding(&f.alice, PostFinding::new(f.room, ag.clone(), format!("{i}")))
                            .await
                            .unwrap();
                        ids.push(p.finding.finding_id);
                        if i % 2 == 1 {
                            f.macp
                                .declare_status(
                                    &f.alice,
                                    DeclareStatus::new(f.room, ag.clone(), AgentStatus::Active),
                                )
                                .await
                                .unwrap();
                        }
                        tokio::task::yield_now().await;
                    }
                    ids
                }));
            }
            let total: usize = posts.iter().sum();
            let poll = |cursor: Option<String>| {
                let f = f.clone();
                async move {
                    f.macp
                        .updates(
                            &f.bob,
                            UpdatesQuery { limit: Some(page), ..UpdatesQuery::new(f.room).cursor(cursor) },
                        )
                        .await
                        .unwrap()
                }
            };
            let mut seen: Vec<(u64, FindingId)> = Vec::new();
            let mut events: Vec<(u64, EventKind)> = Vec::new();
            let mut cursor = None;
            // Poll while writers run…
            while writers.iter().any(|w| !w.is_finished()) {
                let u = poll(cursor.clone()).await;
                seen.extend(u.findings.iter().map(|x| (x.seq, x.finding_id)));
                events.extend(u.events.iter().map(|e| (e.seq, e.kind)));
                cursor = Some(u.cursor);
                tokio::task::yield_now().await;
            }
            let mut posted = HashSet::new();
            for w in writers {
                posted.extend(w.await.unwrap());
            }
            // …then drain.
            loop {
                let u = poll(cursor.clone()).await;
                seen.extend(u.findings.iter().map(|x| (x.seq, x.finding_id)));
                events.extend(u.events.iter().map(|e| (e.seq, e.kind)));
                cursor = Some(u.cursor);
                if !u.has_more && u.findings.is_empty() && u.events.is_empty() {
                    break;
                }
            }
            let seqs: Vec<u64> = seen.iter().map(|s| s.0).collect();
            prop_assert_eq!(seqs, (1..=total as u64).collect::<Vec<_>>());
            prop_assert_eq!(seen.iter().map(|s| s.1).collect::<HashSet<_>>(), posted);
            // Other changes: strictly increasing feed positions (never repeated, never out of
            // order), and exactly the joins and statuses that were made.
            prop_assert!(events.windows(2).all(|w| w[0].0 < w[1].0), "feed order: {:?}", events);
            let statuses: usize = posts.iter().map(|n| n / 2).sum();
            let count = |k: EventKind| events.iter().filter(|e| e.1 == k).count();
            prop_assert_eq!(count(EventKind::StatusDeclared), statuses);
            prop_assert_eq!(count(EventKind::AgentJoined), 2 + posts.len());
            prop_assert_eq!(events.len() + total, statuses + 2 + posts.len() + total);
            Ok(())
        })
    });
}

/// A random sequence of posts drawing keys from a small pool and payloads from another: the
/// first use of a key writes; a repeat with the same payload replays the same finding; a
/// repeat with another payload is a conflict; nothing else is written.
pub fn prop_idempotent_writes_write_once<F, Fut>(factory: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Option<Backend>>,
{
    let op = (prop::option::of(0u8..3), 0u8..2);
    let strategy = prop::collection::vec(op, 1..=12);
    run("prop_idempotent_writes_write_once", factory, strategy, |backend, ops| {
        Box::pin(async move {
            let f = Fixture::new(&backend).await;
            let mut first: HashMap<u8, (u8, FindingId)> = HashMap::new();
            let mut expected_writes = 0usize;
            for (key, payload) in ops {
                let mut req = PostFinding::new(f.room, f.a.clone(), format!("payload {payload}"));
                if let Some(k) = key {
                    req = req.idempotency_key(format!("key-{k}"));
                }
                let out = f.macp.post_finding(&f.alice, req).await;
                match key.and_then(|k| first.get(&k).copied()) {
                    None => {
                        let p = out.map_err(|e| TestCaseError::fail(format!("first use failed: {e}")))?;
                        prop_assert!(!p.replayed);
                        expected_writes += 1;
                        if let Some(k) = key {
                            first.insert(k, (payload, p.finding.finding_id));
                        }
                    }
                    Some((p0, id)) if p0 == payload => {
                        let p = out.map_err(|e| TestCaseError::fail(format!("replay failed: {e}")))?;
                        prop_assert!(p.replayed);
                        prop_assert_eq!(p.finding.finding_id, id);
                    }
                    Some(_) => {
                        let e = out.expect_err("a reused key with another payload must fail");
                        prop_assert_eq!(e.code(), "conflict");
                    }
                }
            }
            prop_assert_eq!(f.all_findings(&f.alice).await.len(), expected_writes);
            Ok(())
        })
    });
}

/// Random merges over 2–7 entities: every id resolves to the same canonical entity as a
/// union-find model of the merges predicts, the canonical count matches, no read loops, and the
/// canonical entity holds every identifier of its class.
pub fn prop_merges_resolve_from_any_alias<F, Fut>(factory: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Option<Backend>>,
{
    let strategy = (2usize..=7).prop_flat_map(|n| (Just(n), prop::collection::vec((0..n, 0..n), 0..=10)));
    run("prop_merges_resolve_from_any_alias", factory, strategy, |backend, (n, merges)| {
        Box::pin(async move {
            let f = Fixture::new(&backend).await;
            let mut ids: Vec<EntityId> = Vec::new();
            for i in 0..n {
                let e = f
                    .macp
                    .add_entity(
                        &f.alice,
                        AddEntity::new(f.room, f.a.clone(), format!("e{i}"), EntityType::Resource)
                            .identifier("host", format!("h{i}")),
                    )
                    .await
                    .unwrap();
                ids.push(e.entity.entity_id);
            }
            let mut parent: Vec<usize> = (0..n).collect();
            fn root(p: &[usize], mut i: usize) -> usize {
                while p[i] != i {
                    i = p[i];
                }
                i
            }
            for (w, l) in merges {
                let out = f
                    .macp
                    .merge_entities(
                        &f.alice,
                        MergeEntities {
                            room_id: f.room,
                            agent_id: Some(f.a.clone()),
                            winner_entity_id: ids[w],
                            loser_entity_id: ids[l],
                        },
                    )
                    .await
                    .map_err(|e| TestCaseError::fail(format!("merge failed: {e}")))?;
                let (rw, rl) = (root(&parent, w), root(&parent, l));
                prop_assert_eq!(out.already_merged, rw == rl);
                if rw != rl {
                    parent[rl] = rw;
                }
                prop_assert_eq!(out.entity.entity.entity_id, ids[root(&parent, w)]);
            }
            let mut classes: HashSet<usize> = HashSet::new();
            for i in 0..n {
                let r = root(&parent, i);
                classes.insert(r);
                let g = f
                    .macp
                    .entity_graph(
                        &f.alice,
                        GraphQuery {
                            room_id: f.room,
                            entity_id: Some(ids[i]),
                            identifier: None,
                            depth: Some(0),
                        },
                    )
                    .await
                    .map_err(|e| TestCaseError::fail(format!("graph failed: {e}")))?;
                prop_assert_eq!(g.root, Some(ids[r]));
                let held: HashSet<String> =
                    g.entities[0].entity.identifiers.iter().map(|x| x.value.clone()).collect();
                prop_assert!(
                    held.contains(&format!("h{i}")),
                    "canonical entity lacks member identifier h{}",
                    i
                );
            }
            let summary = f.macp.room_summary(&f.alice, f.room).await.unwrap();
            prop_assert_eq!(summary.entity_count as usize, classes.len());
            Ok(())
        })
    });
}
