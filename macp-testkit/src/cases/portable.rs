//! The portable record: a room exported, purged and imported again is the same room, byte for
//! byte, and carries on where it stopped; a bundle that does not hold together is refused.

use std::sync::Arc;

use macp_core::FindingId;
use macp_core::model::{Channel, EntityType, Identifier};
use macp_core::redact::Redactor;
use macp_core::service::{
    AddEntity, AddRelationship, AnswerDecision, AskDecision, CloseRoom, EXPORT_PAGE, Erase, MergeEntities,
    PostFinding, RoomBundle, SearchFindings, SteerRoom,
};

use super::retention::{fill, service};
use super::*;
use crate::{Backend, ManualClock};

/// Everything of the bundle but when and where it was exported.
fn body(b: &RoomBundle) -> String {
    let record = serde_json::to_string(&b.record).expect("record as JSON");
    let objects = serde_json::to_string(&b.objects).expect("objects as JSON");
    format!("{record}\n{objects}")
}

/// What clients read of the room (summary, context, timeline, feed) and the counters its
/// store keeps (finding and tag counts, graph counts, events per kind): a moved room must
/// read the same, not only export the same.
async fn reads(m: &Macp, store: &Arc<dyn macp_core::Store>, who: &Principal, room: RoomId) -> String {
    let json = |v: serde_json::Result<String>| v.expect("as JSON");
    let summary = json(serde_json::to_string(&m.room_summary(who, room).await.unwrap()));
    let context = json(serde_json::to_string(&m.room_context(who, room).await.unwrap()));
    let timeline =
        m.timeline(who, TimelineQuery { limit: Some(200), ..TimelineQuery::new(room) }).await.unwrap();
    let feed = m.feed_page(who, room, None, Some(500)).await.unwrap();
    let (findings, graph, events) = (
        store.finding_stats(room).await.unwrap(),
        store.entity_stats(room).await.unwrap(),
        store.count_events(room, 0).await.unwrap(),
    );
    format!(
        "{summary}\n{context}\n{}\n{}\n{findings:?}\n{graph:?}\n{events:?}",
        json(serde_json::to_string(&timeline)),
        json(serde_json::to_string(&feed))
    )
}

/// What the moving cases move: a room with every kind of record ([`fill`]), plus a merge, an
/// erased finding, a phase, an answered decision and a resolution (closed). Returns the room,
/// its artifact's key (where the backend stores artifacts), the merged-away entity, the entity
/// it went into, and the erased finding.
async fn history(
    m: &Macp,
    backend: &Backend,
    who: &Principal,
) -> (RoomId, Option<String>, EntityId, EntityId, FindingId) {
    let (room, key) = fill(m, backend, who, Some(30), "numbatported17").await;
    let a = agent("ret-agent");
    let alias = m
        .add_entity(
            who,
            AddEntity::new(room, a.clone(), "orders db primary", EntityType::Resource)
                .identifier("ip", "10.0.1.7")
                .property("engine", "postgres 16"),
        )
        .await
        .unwrap()
        .entity
        .entity_id;
    let host = Identifier { id_type: "hostname".into(), value: "orders-db-1".into() };
    let winner = backend.store.find_identifiers(room, &[host]).await.unwrap()[0].1;
    m.merge_entities(who, MergeEntities::new(room, a.clone(), winner, alias)).await.unwrap();
    let oops = m
        .post_finding(who, PostFinding::new(room, a.clone(), "pasted the wrong log: INC-4711 notes"))
        .await
        .unwrap()
        .finding
        .finding_id;
    m.erase(who, Erase::finding(room, a.clone(), oops, "wrong incident")).await.unwrap();
    let theory = m
        .post_finding(
            who,
            PostFinding::new(room, a.clone(), "theory: the pool leaks on retries")
                .hypothesis()
                .mentions([a.clone()]),
        )
        .await
        .unwrap()
        .finding
        .finding_id;
    m.post_finding(
        who,
        PostFinding::new(room, a.clone(), "superseded: the pool is simply too small")
            .verdict(macp_core::model::VerdictKind::Supersedes, theory),
    )
    .await
    .unwrap();
    m.post_finding(who, PostFinding::new(room, a.clone(), "ticket INC-4711 tracks the failover"))
        .await
        .unwrap();
    m.declare_status(
        who,
        macp_core::service::DeclareStatus::new(room, a.clone(), macp_core::model::AgentStatus::Blocked)
            .reason("waiting for the DBA"),
    )
    .await
    .unwrap();
    m.steer_room(
        who,
        SteerRoom { marker: Some("mitigation".into()), ..SteerRoom::new(room) },
        Channel::Person,
    )
    .await
    .unwrap();
    let asked = m.ask_decision(who, AskDecision::new(room, a.clone(), "restart the pool?")).await.unwrap();
    m.answer_decision(
        who,
        AnswerDecision {
            room_id: room,
            decision_id: asked.decision_id,
            answer: "yes".into(),
            agent_id: None,
        },
        Channel::Person,
    )
    .await
    .unwrap();
    m.close_room(
        who,
        CloseRoom { resolution: Some("pool exhausted; raised".into()), ..CloseRoom::new(room) },
        Channel::Person,
    )
    .await
    .unwrap();

    (room, key, alias, winner, oops)
}

/// A room with a merge, an erasure, a phase, an answered decision and a resolution, exported,
/// purged and imported on the same backend, exports again byte for byte as before (timeline,
/// graph, identifiers, feed, read positions, artifacts and their bytes); it is found by its
/// words; its sequences continue where they stopped; importing it again is refused; and a
/// bundle that is not whole is refused before anything is written.
pub async fn a_room_survives_export_and_import_intact(backend: Backend) {
    let clock = Arc::new(ManualClock::new());
    let m = service(&backend, clock.clone(), 0);
    let who = principal("port@example.com");
    let (room, key, alias, winner, oops) = history(&m, &backend, &who).await;
    let a = agent("ret-agent");
    let read_before = reads(&m, &backend.store, &who, room).await;
    let before = m.export_room(room, false).await.expect("export");
    assert_eq!((before.format.as_str(), before.version), ("macp-room-bundle", 1));
    assert_eq!(before.exported_from, backend.store.name());
    let r = &before.record;
    assert_eq!(r.findings.len(), 6);
    assert!(r.findings.iter().enumerate().all(|(i, f)| f.seq == i as u64 + 1));
    assert!(r.events.iter().enumerate().all(|(i, e)| e.seq == i as u64 + 1));
    assert!(r.findings.iter().any(|f| f.finding_id == oops && f.erased.is_some()));
    assert!(!serde_json::to_string(r).unwrap().contains("pasted the wrong log"), "an erased text travels");
    assert_eq!(r.entities.len(), 3);
    assert!(r.entities.iter().any(|e| e.entity_id == alias && e.merged_into == Some(winner)));
    let held =
        r.identifiers.iter().find(|h| h.identifier.value == "10.0.1.7").expect("the alias's identifier");
    assert_eq!(held.entity_id, alias, "identifiers stay held where they were through a merge");
    assert_eq!(r.relationships.len(), 1);
    assert_eq!(r.decisions.len(), 2);
    assert_eq!(r.claims.len(), 1);
    assert_eq!(r.read_positions.len(), 1);
    assert_eq!(r.room.markers.len(), 1);
    assert!(r.room.resolution.is_some());
    assert_eq!(r.room.retention_days, Some(30));
    assert_eq!(before.objects.len(), usize::from(key.is_some()));

    // The move: the room goes from this backend, and comes back from its bundle.
    backend.store.purge_room(room).await.unwrap();
    if let Some((blobs, _)) = &backend.blobs {
        blobs.delete_prefix(&format!("rooms/{room}/")).await.unwrap();
    }
    if let Some(index) = &backend.vector_index {
        let ids: Vec<_> = r.findings.iter().map(|f| f.finding_id).collect();
        index.delete(room, &ids).await.unwrap();
    }
    let json = serde_json::to_string(&before).unwrap();
    let report = m.import_room(serde_json::from_str(&json).unwrap(), None).await.expect("import");
    assert_eq!(report.findings, 6);
    assert_eq!(report.events, r.events.len() as u64);
    assert_eq!(report.objects, u64::from(key.is_some()));
    let closed = r.room.closed_at.expect("closed");
    assert_eq!(
        report.expires_at,
        Some(closed.plus_millis(30 * 24 * 60 * 60 * 1000)),
        "it keeps its retention"
    );
    if backend.vector_index.is_some() {
        assert_eq!(report.indexed, 5, "every finding but the erased one is embedded again");
    }
    let after = m.export_room(room, false).await.expect("export after import");
    assert_eq!(body(&after), body(&before), "the room came back different");
    assert_eq!(reads(&m, &backend.store, &who, room).await, read_before, "the room reads differently");

    // It is found, and resolves, as before.
    let hits = m.search_findings(&who, SearchFindings::new(room, "numbatported17")).await.unwrap();
    assert!(hits.results.iter().any(|h| h.finding.content.contains("numbatported17")));
    let ip = Identifier { id_type: "ip".into(), value: "10.0.1.7".into() };
    assert_eq!(
        backend.store.find_identifiers(room, &[ip]).await.unwrap(),
        vec![(Identifier { id_type: "ip".into(), value: "10.0.1.7".into() }, alias)]
    );
    if let (Some((blobs, _)), Some(key)) = (&backend.blobs, &key) {
        let (meta, bytes) = blobs.read_object(key).await.unwrap().expect("the artifact's bytes");
        assert_eq!((meta.content_type.as_str(), bytes.as_slice()), ("text/plain", b"hello".as_slice()));
    }
    // And carries on from where it stopped.
    m.steer_room(&who, SteerRoom { reopen: true, ..SteerRoom::new(room) }, Channel::Person).await.unwrap();
    let next = m.post_finding(&who, PostFinding::new(room, a.clone(), "after the move")).await.unwrap();
    assert_eq!(next.finding.seq, 7, "the timeline continues its sequence");
    let head = backend.store.last_event_seq(room).await.unwrap();
    assert_eq!(head, r.events.len() as u64 + 2, "the feed continues its sequence");

    // Importing a room that exists is refused; so is a bundle that is not whole, first.
    expect_code(m.import_room(before.clone(), None).await, "already_exists");
    let mut newer = before.clone();
    newer.version = 2;
    let e = expect_code(m.import_room(newer, None).await, "invalid_input");
    assert!(e.to_string().contains("newer macp"), "{e}");
    let e = expect_code(m.import_room(before.clone(), Some(100_000)).await, "invalid_input");
    assert_eq!(e.limit(), Some(u64::from(macp_core::service::MAX_RETENTION_DAYS)));
    let mut gap = before.clone();
    gap.record.events.remove(1);
    expect_code(m.import_room(gap, None).await, "invalid_input");
    if !before.objects.is_empty() {
        let mut garbled = before.clone();
        garbled.objects[0].base64 = "not base64!".into();
        expect_code(m.import_room(garbled, None).await, "invalid_input");
    }
    let mut foreign = before.clone();
    foreign.record.findings[0].room_id = RoomId::generate();
    expect_code(m.import_room(foreign, None).await, "invalid_input");
}

/// A room with more findings, entities, identifiers, relationships, artifacts (where the backend
/// stores them) and events than an export reads at once ([`EXPORT_PAGE`]) is exported whole, in
/// order, and imported back the same, byte for byte: an incident room passes a page of anything
/// within hours.
pub async fn a_room_bigger_than_a_page_moves_whole(backend: Backend) {
    let m = service(&backend, Arc::new(ManualClock::new()), 0);
    let who = principal("port-big@example.com");
    let room = m.create_room(&who, CreateRoom::new("a long incident")).await.unwrap().room_id;
    let a = m.join_room(&who, JoinRoom::new(room).agent(agent("big-agent"))).await.unwrap().agent_id;
    let n = EXPORT_PAGE + 1;
    // One write at a time: eight at once were no faster on moto, which serves one request at a
    // time (207 s against 189 s for this case, on a busy machine).
    let mut entities = Vec::with_capacity(n);
    for i in 0..n {
        m.post_finding(&who, PostFinding::new(room, a.clone(), format!("pod web-{i} restarted")))
            .await
            .unwrap();
        let add = AddEntity::new(room, a.clone(), format!("web-{i}"), EntityType::Resource)
            .identifier("hostname", format!("web-{i}.internal"));
        entities.push(m.add_entity(&who, add).await.unwrap().entity.entity_id);
    }
    // A ring: as many relationships as entities.
    for i in 0..n {
        let (from, to) = (entities[i], entities[(i + 1) % n]);
        m.add_relationship(&who, AddRelationship::new(room, a.clone(), from, "calls", to)).await.unwrap();
    }
    let mut artifacts = 0;
    if let Some((_, t)) = &backend.blobs {
        for i in 0..n {
            let body = format!("heap dump {i}").into_bytes();
            let upload = macp_core::service::RequestUpload {
                room_id: room,
                agent_id: Some(a.clone()),
                filename: format!("dump-{i}.txt"),
                content_type: "text/plain".into(),
                size: body.len() as u64,
            };
            let ticket = m.request_artifact_upload(&who, upload).await.unwrap();
            assert_eq!(t.put(&presigned(&ticket), "text/plain", body).await, 200);
            let register = macp_core::service::RegisterArtifact {
                room_id: room,
                agent_id: Some(a.clone()),
                key: ticket.key,
                description: None,
                linked_finding_ids: vec![],
                linked_entity_ids: vec![],
                idempotency_key: None,
            };
            m.register_artifact(&who, register).await.unwrap();
            artifacts += 1;
        }
    }
    let before = m.export_room(room, false).await.expect("export");
    let r = &before.record;
    assert_eq!(r.findings.len(), n, "every finding, past the first page");
    assert!(r.findings.iter().enumerate().all(|(i, f)| f.seq == i as u64 + 1), "in order, once each");
    assert_eq!(r.entities.len(), n, "every entity, past the first page");
    assert_eq!(r.identifiers.len(), n, "every identifier");
    assert_eq!(r.relationships.len(), n, "every relationship, past the first page");
    assert_eq!(r.artifacts.len(), artifacts, "every artifact, past the first page");
    assert_eq!(before.objects.len(), artifacts, "every artifact's bytes");
    let head = backend.store.last_event_seq(room).await.unwrap();
    assert!(head > 3 * EXPORT_PAGE as u64, "the feed spans four pages ({head} events)");
    assert_eq!(r.events.len() as u64, head, "every event");
    assert!(r.events.iter().enumerate().all(|(i, e)| e.seq == i as u64 + 1), "in order, once each");

    backend.store.purge_room(room).await.unwrap();
    if let Some(index) = &backend.vector_index {
        let ids: Vec<_> = r.findings.iter().map(|f| f.finding_id).collect();
        index.delete(room, &ids).await.unwrap();
    }
    if let Some((blobs, _)) = &backend.blobs {
        blobs.delete_prefix(&format!("rooms/{room}/")).await.unwrap();
    }
    let report = m.import_room(before.clone(), None).await.expect("import");
    assert_eq!((report.findings, report.entities, report.events), (n as u64, n as u64, head));
    let after = m.export_room(room, false).await.expect("export after import");
    assert_eq!(body(&after), body(&before), "the room came back different");
}

/// An artifact whose bytes are gone from storage (deleted from the bucket by hand, say) is not
/// a room changing under the export: the export is refused with `not_found`, naming the object
/// and what to do, not with a retryable `conflict` that retrying cannot cure.
pub async fn an_export_names_an_artifact_whose_bytes_are_lost(backend: Backend) {
    let Some((blobs, _)) = &backend.blobs else { return };
    let m = service(&backend, Arc::new(ManualClock::new()), 0);
    let who = principal("port-lost@example.com");
    let (room, key) = fill(&m, &backend, &who, None, "numbatlost17").await;
    let key = key.expect("an artifact where the backend stores them");
    blobs.delete(&key).await.unwrap();
    let e = expect_code(m.export_room(room, false).await, "not_found");
    assert!(!e.is_retryable(), "{e}");
    let msg = e.to_string();
    assert!(msg.contains(&key) && msg.contains("erase"), "names the object and what to do: {msg}");
}

/// An export can scrub with the server's redactor, so that a pattern added since the room was
/// written applies to the bundle: every text of the record, the feed included, and every text
/// artifact; the bundle says what it redacted.
pub async fn an_export_scrubs_with_the_redactor(backend: Backend) {
    let clock = Arc::new(ManualClock::new());
    let m = service(&backend, clock.clone(), 0);
    let who = principal("port@example.com");
    let (room, _) = fill(&m, &backend, &who, None, "quollscrub23").await;
    let a = agent("ret-agent");
    m.post_finding(&who, PostFinding::new(room, a.clone(), "customer ticket INC-4711 says so"))
        .await
        .unwrap();
    m.ask_decision(&who, AskDecision::new(room, a.clone(), "page the owner of INC-4711?")).await.unwrap();
    // A secret that the feed summary's 160-character cut splits: scrubbing the summary alone
    // would leave its first part.
    m.post_finding(
        &who,
        PostFinding::new(room, a.clone(), format!("{}BADGE-12345678 opened it", "word ".repeat(30))),
    )
    .await
    .unwrap();
    let dup = m
        .post_finding(&who, PostFinding::new(room, a.clone(), "a duplicate"))
        .await
        .unwrap()
        .finding
        .finding_id;
    m.erase(&who, Erase::finding(room, a.clone(), dup, "belongs to INC-4712")).await.unwrap();
    // Two claims whose subjects differ only in what the scrub replaces stay two claims.
    for subject in ["chase INC-4711", "chase INC-4712"] {
        m.claim_work(&who, macp_core::service::ClaimWork::new(room, a.clone(), subject)).await.unwrap();
    }
    let mut text_key = None;
    // Longer than any text a write may carry: the scrub reads it all the same.
    let filler = "a line of the dump, nothing secret in it\n".repeat(2000);
    assert!(filler.len() > macp_core::Limits::default().max_unredacted_bytes());
    if let Some((_, t)) = &backend.blobs {
        for (name, content_type, bytes) in [
            (
                "notes.txt",
                "text/plain",
                format!("the dump names INC-4711 twice: {filler}INC-4711").into_bytes(),
            ),
            ("graph.png", "image/png", vec![0x89, b'P', b'N', b'G', 0, 1, 2, 3]),
        ] {
            let ticket = m
                .request_artifact_upload(
                    &who,
                    macp_core::service::RequestUpload {
                        room_id: room,
                        agent_id: Some(a.clone()),
                        filename: name.into(),
                        content_type: content_type.into(),
                        size: bytes.len() as u64,
                    },
                )
                .await
                .unwrap();
            assert_eq!(t.put(&presigned(&ticket), content_type, bytes).await, 200);
            m.register_artifact(
                &who,
                macp_core::service::RegisterArtifact {
                    room_id: room,
                    agent_id: Some(a.clone()),
                    key: ticket.key.clone(),
                    description: None,
                    linked_finding_ids: vec![],
                    linked_entity_ids: vec![],
                    idempotency_key: None,
                },
            )
            .await
            .unwrap();
            if content_type == "text/plain" {
                text_key = Some(ticket.key);
            }
        }
    }
    let plain = m.export_room(room, false).await.unwrap();
    assert!(serde_json::to_string(&plain).unwrap().contains("INC-4711"));
    assert!(plain.scrubbed.is_none());

    // The same data, served with an operator's pattern added since.
    let redactor = || {
        Redactor::new()
            .pattern("ticket", r"[Ii][Nn][Cc]-[0-9]+")
            .unwrap()
            .pattern("badge", "BADGE-[0-9]{8}")
            .unwrap()
    };
    let mut b =
        macp_core::Macp::builder().store(backend.store.clone()).clock(clock.clone()).redactor(redactor());
    if let Some((blobs, _)) = &backend.blobs {
        b = b.blob_store(blobs.clone());
    }
    let scrubbing = b.build().unwrap();
    let scrubbed = scrubbing.export_room(room, true).await.unwrap();
    let bytes_of = |bundle: &RoomBundle| -> String {
        use base64::Engine as _;
        bundle
            .objects
            .iter()
            .map(|o| {
                String::from_utf8_lossy(&base64::engine::general_purpose::STANDARD.decode(&o.base64).unwrap())
                    .into_owned()
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let text = format!("{}\n{}", serde_json::to_string(&scrubbed).unwrap(), bytes_of(&scrubbed));
    assert!(
        !text.contains("INC-4711") && !text.contains("INC-4712"),
        "the scrub left a ticket in the bundle"
    );
    assert!(text.contains("[redacted:ticket]"));
    assert!(!text.contains("BADGE-1"), "the scrub left part of a badge in the bundle");
    let counts = scrubbed.scrubbed.as_ref().expect("a scrubbed bundle says so");
    assert!(counts.0.get("ticket").is_some_and(|n| *n >= 6), "{counts:?}");
    let claims: Vec<&str> =
        scrubbed.record.claims.iter().map(|c| c.key.as_str()).filter(|k| k.starts_with("chase")).collect();
    assert_eq!(claims.len(), 2, "{claims:?}");
    assert_ne!(claims[0], claims[1], "two claims became one");
    if let Some(key) = &text_key {
        let a = scrubbed.record.artifacts.iter().find(|a| &a.key == key).unwrap();
        assert!(bytes_of(&scrubbed).contains("the dump names [redacted:ticket] twice"));
        assert_eq!(
            a.size as usize,
            format!("the dump names [redacted:ticket] twice: {filler}[redacted:ticket]").len()
        );
        assert_eq!(scrubbed.unscrubbed.len(), 1, "the image travels as it is, and is listed");
        assert!(scrubbed.unscrubbed[0].ends_with("graph.png"));
    }
    // The room itself is untouched.
    assert_eq!(body(&m.export_room(room, false).await.unwrap()), body(&plain));

    // The scrubbed bundle is what an archive restores: whole, and without the tickets.
    backend.store.purge_room(room).await.unwrap();
    if let Some((blobs, _)) = &backend.blobs {
        blobs.delete_prefix(&format!("rooms/{room}/")).await.unwrap();
    }
    m.import_room(scrubbed.clone(), None).await.expect("import the scrubbed bundle");
    let again = m.export_room(room, false).await.unwrap();
    assert_eq!(body(&again), body(&scrubbed));

    // A name matched as written cannot take a placeholder: the scrub refuses it, naming it.
    m.steer_room(&who, SteerRoom { reopen: true, ..SteerRoom::new(room) }, Channel::Person).await.unwrap();
    m.post_finding(&who, PostFinding::new(room, a, "tagged by ticket").tags(["inc-4799"])).await.unwrap();
    let e = expect_code(scrubbing.export_room(room, true).await, "invalid_input");
    assert!(e.to_string().contains("finding tag"), "{e}");
}

/// A room moved from one backend to another and back (the embedded default to AWS and back,
/// say) is the same room at every step, byte for byte: timeline, graph, identifiers, feed, read
/// positions, artifacts and their bytes. Not in [`conformance_tests!`](crate::conformance_tests)
/// because it takes three backends (two of one kind): a crate that has two kinds calls it.
pub async fn a_room_moves_between_backends_intact(from: Backend, to: Backend, back: Backend) {
    let clock = Arc::new(ManualClock::new());
    let who = principal("port@example.com");
    let source = service(&from, clock.clone(), 0);
    let (room, key, ..) = history(&source, &from, &who).await;
    let read_first = reads(&source, &from.store, &who, room).await;
    let first = source.export_room(room, false).await.expect("export from the first backend");
    assert_eq!(first.objects.len(), usize::from(key.is_some()));
    let mut moved = first.clone();
    for (leg, backend) in [("there", &to), ("back", &back)] {
        let m = service(backend, clock.clone(), 0);
        let json = serde_json::to_vec(&moved).unwrap();
        m.import_room(serde_json::from_slice(&json).unwrap(), None)
            .await
            .unwrap_or_else(|e| panic!("import {leg}: {e}"));
        moved = m.export_room(room, false).await.unwrap_or_else(|e| panic!("export {leg}: {e}"));
        assert_eq!(moved.exported_from, backend.store.name());
        assert_eq!(
            body(&moved),
            body(&first),
            "the room moved {leg} ({} to {}) is not the same",
            from.store.name(),
            backend.store.name()
        );
        assert_eq!(
            reads(&m, &backend.store, &who, room).await,
            read_first,
            "the room moved {leg} reads differently"
        );
        let hits = m.search_findings(&who, SearchFindings::new(room, "numbatported17")).await.unwrap();
        assert!(hits.results.iter().any(|h| h.finding.content.contains("numbatported17")), "not found {leg}");
    }
}
