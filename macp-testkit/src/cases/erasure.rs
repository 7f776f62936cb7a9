//! Erasing a mistake: what an agent or a person erases is replaced by a notice saying who, when
//! and why, and leaves every read path, the keyword and vector indexes and blob storage.

use macp_core::model::{EventKind, Evidence, EvidenceKind};
use macp_core::service::{CloseRoom, Erase, PostFinding, SearchFindings, UpdatesQuery};
use macp_core::store::FindingQuery;
use macp_core::{ArtifactId, FindingId};

use super::*;
use crate::Backend;

/// A word that appears nowhere else: found before the erasure, never after.
const MARK: &str = "zebracanary7781";

/// Everything a member can read of the room, as text.
async fn everything(f: &Fixture) -> String {
    let m = &f.macp;
    format!(
        "{:?}{:?}{:?}{:?}{:?}",
        f.all_findings(&f.bob).await,
        m.search_findings(&f.bob, SearchFindings::new(f.room, MARK)).await.unwrap(),
        m.updates(&f.bob, UpdatesQuery::new(f.room)).await.unwrap(),
        m.feed_page(&f.bob, f.room, None, Some(500)).await.unwrap(),
        m.room_context(&f.bob, f.room).await.unwrap(),
    )
}

/// The agent that wrote a finding erases it: the content becomes a notice naming who, when and
/// why, the evidence goes, the feed says so and its earlier event carries the notice, and no
/// read (timeline, search, updates, feed, context) or the keyword index gives the text back.
/// Another agent may not erase it; a person may erase anything; erasing twice writes nothing
/// more; a closed room's findings can still be erased.
pub async fn an_erased_finding_leaves_only_a_notice(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let m = &f.macp;
    let evidence = vec![Evidence {
        kind: EvidenceKind::Log,
        reference: format!("s3://logs/{MARK}.txt"),
        description: Some(format!("customer record {MARK}")),
        captured_at: None,
    }];
    let leak = m
        .post_finding(
            &f.alice,
            PostFinding::new(f.room, f.a.clone(), format!("customer {MARK} sees 502 on checkout"))
                .evidence(evidence),
        )
        .await
        .unwrap()
        .finding;
    let kept = f.post("checkout 502s started 09:41 after deploy v7", &["triage"]).await;
    assert!(everything(&f).await.contains(MARK), "the mark is readable before the erasure");
    if let Some(hits) = backend.store.keyword_search(f.room, MARK, 10).await.unwrap() {
        assert_eq!(hits.hits.len(), 1, "and found by the keyword index");
    }
    if let Some(scan) = &backend.leftovers {
        assert!(!scan.find(MARK).await.is_empty(), "the raw scan sees the mark before the erasure");
    }

    // Another agent may not; nothing changes.
    let err = expect_code(
        m.erase(&f.bob, Erase::finding(f.room, f.b.clone(), leak.finding_id, "has customer data")).await,
        "permission_denied",
    );
    assert!(err.to_string().contains("person"), "the refusal says who can: {err}");
    assert!(everything(&f).await.contains(MARK));
    // Exactly one thing to erase.
    let both = Erase {
        artifact_id: Some(ArtifactId::generate()),
        ..Erase::finding(f.room, f.a.clone(), leak.finding_id, "x")
    };
    expect_code(m.erase(&f.alice, both).await, "invalid_input");
    expect_code(
        m.erase(&f.alice, Erase::finding(f.room, f.a.clone(), FindingId::generate(), "x")).await,
        "not_found",
    );
    expect_code(
        m.erase(&f.alice, Erase::finding(f.room, f.a.clone(), leak.finding_id, "  ")).await,
        "invalid_input",
    );

    let head = m.feed_page(&f.bob, f.room, None, Some(1)).await.unwrap().events[0].seq;
    let out = m
        .erase(&f.alice, Erase::finding(f.room, f.a.clone(), leak.finding_id, "pasted a customer record"))
        .await
        .unwrap();
    assert!(!out.already);
    assert_eq!(out.finding_id, Some(leak.finding_id));
    let erased = backend.store.get_findings(f.room, &[leak.finding_id]).await.unwrap().remove(0);
    let by = erased.erased.clone().expect("the erasure is recorded");
    assert_eq!((&by, &out.notice), (&out.erasure, &erased.content), "the answer is what is stored");
    assert_eq!((by.by.as_str(), by.agent_id.as_ref()), ("alice@example.com", Some(&f.a)));
    assert_eq!(by.reason, "pasted a customer record");
    assert_eq!(erased.content, by.notice());
    assert!(
        erased.content.starts_with("[erased by alice@example.com (agent alice-claude) at "),
        "{}",
        erased.content
    );
    assert!(erased.evidence.is_empty());
    // Who wrote it and where it stood stay on the record.
    assert_eq!((erased.seq, &erased.agent_id), (leak.seq, &leak.agent_id));

    let all = everything(&f).await;
    assert!(!all.contains(MARK), "the erased text came back from a read");
    if let Some(scan) = &backend.leftovers {
        let left = scan.find(MARK).await;
        assert!(left.is_empty(), "the erased text is still in the backend's storage: {left:?}");
    }
    let found =
        m.search_findings(&f.bob, SearchFindings::new(f.room, format!("customer {MARK} 502"))).await.unwrap();
    assert!(!found.results.iter().any(|h| h.finding.finding_id == leak.finding_id), "search still finds it");
    assert!(all.contains(&kept.content), "the rest of the room is intact");
    if let Some(hits) = backend.store.keyword_search(f.room, MARK, 10).await.unwrap() {
        assert!(hits.hits.is_empty(), "the keyword index still finds the erased finding");
    }
    let stored = backend.store.list_findings(f.room, &FindingQuery::after(0, 10)).await.unwrap();
    assert_eq!(stored.iter().filter(|x| x.erased.is_some()).count(), 1);
    let feed = m.feed_page(&f.bob, f.room, None, Some(500)).await.unwrap().events;
    let news: Vec<_> = feed.iter().filter(|e| e.seq > head).collect();
    assert_eq!(news.len(), 1, "one event: {news:?}");
    assert_eq!((news[0].kind, news[0].finding_id), (EventKind::Erased, Some(leak.finding_id)));
    assert!(news[0].summary.contains("pasted a customer record"));
    let posted =
        feed.iter().find(|e| e.kind == EventKind::FindingPosted && e.finding_id == Some(leak.finding_id));
    assert!(posted.expect("the post's event stays").summary.starts_with("[erased by"), "{posted:?}");

    // Again: nothing more is written, the first reason stands.
    let again =
        m.erase(&f.alice, Erase::finding(f.room, f.a.clone(), leak.finding_id, "twice")).await.unwrap();
    assert!(again.already);
    assert_eq!(again.erasure.reason, "pasted a customer record");
    assert_eq!(m.feed_page(&f.bob, f.room, None, Some(1)).await.unwrap().events[0].seq, head + 1);

    // A person erases anyone's finding, in a closed room too.
    m.close_room(&f.alice, CloseRoom::new(f.room), macp_core::model::Channel::Person).await.unwrap();
    let by_person = m
        .erase_as_person(&f.bob, Erase::finding(f.room, f.a.clone(), kept.finding_id, "wrong incident"))
        .await
        .unwrap();
    let e = by_person.erasure;
    assert_eq!((e.by.as_str(), e.agent_id), ("bob@example.com", None));
    assert!(by_person.notice.starts_with("[erased by bob@example.com at "));
}

/// An erased finding's vector leaves the index: the index holds one less, and the original
/// text's meaning no longer finds it.
pub async fn an_erased_findings_vector_is_deleted(backend: Backend) {
    let index = backend.vector_index.clone().expect("the backend declares vectors but gave no vector index");
    let macp = Macp::builder()
        .store(backend.store.clone())
        .embedder(std::sync::Arc::new(
            macp_core::search::builtin::BuiltinEmbedder::load().expect("built-in model"),
        ))
        .vector_index(index.clone())
        .build()
        .expect("service");
    let who = Principal::new("alice@example.com").unwrap();
    let room = macp.create_room(&who, CreateRoom::new("erasure")).await.unwrap().room_id;
    let agent = macp.join_room(&who, JoinRoom::new(room)).await.unwrap().agent_id;
    let text = "The nightly backup job silently skipped the billing schema.";
    let leak = macp.post_finding(&who, PostFinding::new(room, agent.clone(), text)).await.unwrap().finding;
    macp.post_finding(&who, PostFinding::new(room, agent.clone(), "Disk on ip-10-0-3-17 is 95% full."))
        .await
        .unwrap();
    assert_eq!(index.count(room).await.unwrap(), 2);
    let query = "missing data in last night's copy of invoices";
    let hits = |r: macp_core::service::SearchResults| {
        r.results.iter().map(|h| h.finding.finding_id).collect::<Vec<_>>()
    };
    let before = hits(macp.search_findings(&who, SearchFindings::new(room, query)).await.unwrap());
    assert_eq!(before.first(), Some(&leak.finding_id), "found by meaning before");
    macp.erase(&who, Erase::finding(room, agent, leak.finding_id, "wrong room")).await.unwrap();
    assert_eq!(index.count(room).await.unwrap(), 1, "the vector is deleted");
    let after = hits(macp.search_findings(&who, SearchFindings::new(room, query)).await.unwrap());
    assert!(!after.contains(&leak.finding_id), "the erased finding is still found by meaning: {after:?}");
    // Rebuilding the index does not embed it again (neither its text nor the notice).
    macp.reindex().await.unwrap();
    assert_eq!(index.count(room).await.unwrap(), 1, "reindexing brought the erased finding back");
}

/// An erased artifact's bytes are deleted from blob storage (an old download URL gets nothing),
/// its description is the notice, and it is listed without a download URL.
pub async fn an_erased_artifact_loses_its_bytes(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let (blobs, t) = backend.blobs.clone().expect("the backend declares blobs but gave no artifact storage");
    let body = format!("session dump {MARK}\n").repeat(200).into_bytes();
    let key = f.upload("dump.txt", &body).await;
    let reg = f
        .macp
        .register_artifact(
            &f.alice,
            macp_core::service::RegisterArtifact {
                room_id: f.room,
                agent_id: Some(f.a.clone()),
                key: key.clone(),
                description: Some(format!("dump of {MARK}")),
                linked_finding_ids: vec![],
                linked_entity_ids: vec![],
                idempotency_key: None,
            },
        )
        .await
        .unwrap()
        .artifact;
    let list = |f: &Fixture| {
        let q = macp_core::service::ListArtifacts {
            room_id: f.room,
            finding_id: None,
            entity_id: None,
            limit: None,
            cursor: None,
        };
        let m = f.macp.clone();
        let who = f.bob.clone();
        async move { m.list_artifacts(&who, q).await.unwrap().artifacts }
    };
    let url = list(&f).await[0].download_url.clone().expect("a download URL");
    assert_eq!(t.get(&url).await, (200, body.clone()));
    if let Some(scan) = &backend.leftovers {
        assert!(!scan.find(MARK).await.is_empty(), "the raw scan sees the mark before the erasure");
    }

    expect_code(
        f.macp.erase(&f.bob, Erase::artifact(f.room, f.b.clone(), reg.artifact_id, "not yours")).await,
        "permission_denied",
    );
    let out = f
        .macp
        .erase(&f.alice, Erase::artifact(f.room, f.a.clone(), reg.artifact_id, "holds a session"))
        .await
        .unwrap();
    assert_eq!(out.artifact_id, Some(reg.artifact_id));
    assert!(out.notice.starts_with("[erased by alice@example.com"));
    assert!(blobs.head(&key).await.unwrap().is_none(), "the bytes are still stored");
    let (status, got) = t.get(&url).await;
    let served = got.windows(MARK.len()).any(|w| w == MARK.as_bytes());
    assert!(status != 200 && !served, "an old URL still serves the bytes: {status}");
    let listed = list(&f).await;
    assert!(listed[0].download_url.is_none() && listed[0].artifact.erased.is_some());
    assert_eq!(listed[0].artifact.description.as_deref(), Some(out.notice.as_str()));
    assert!(!everything(&f).await.contains(MARK));
    assert!(!format!("{listed:?}").contains(MARK));
    if let Some(scan) = &backend.leftovers {
        let left = scan.find(MARK).await;
        assert!(left.is_empty(), "the erased artifact is still in the backend's storage: {left:?}");
    }
}
