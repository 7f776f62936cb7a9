//! Artifacts through presigned URLs: the contract every backend's [`BlobStore`] meets with the
//! service. These cases run where the backend declares artifact storage
//! ([`Backend::with_blobs`]).
//!
//! [`BlobStore`]: macp_core::blob::BlobStore

use macp_core::service::*;
use macp_core::{AgentId, EntityId, FindingId, RoomId};

use super::*;
use crate::Backend;

fn request(f: &Fixture, filename: &str, content_type: &str, size: u64) -> RequestUpload {
    RequestUpload {
        room_id: f.room,
        agent_id: Some(f.a.clone()),
        filename: filename.into(),
        content_type: content_type.into(),
        size,
    }
}

fn register(f: &Fixture, key: &str) -> RegisterArtifact {
    RegisterArtifact {
        room_id: f.room,
        agent_id: Some(f.a.clone()),
        key: key.into(),
        description: None,
        linked_finding_ids: vec![],
        linked_entity_ids: vec![],
        idempotency_key: None,
    }
}

/// One agent uploads through the URL it was given and registers the file linked to a finding;
/// another lists the room's artifacts and downloads the same bytes.
pub async fn artifacts_round_trip_through_presigned_urls(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let t = f.transfer.clone().expect("the backend declares blobs but gave no artifact storage");
    let finding = f.post("checkout pods restarted 14 times; log attached", &["evidence"]).await;
    let body: Vec<u8> = (0..70_000u32).flat_map(|i| format!("{i} pod restart\n").into_bytes()).collect();
    let ticket = f
        .macp
        .request_artifact_upload(&f.alice, request(&f, "pod restarts.log", "text/plain", body.len() as u64))
        .await
        .unwrap();
    assert!(
        ticket.key.starts_with(&format!("rooms/{}/", f.room)),
        "keys live under the room's prefix: {}",
        ticket.key
    );
    assert!(ticket.key.ends_with("/pod restarts.log"));
    assert_eq!(ticket.method, "PUT");
    assert_eq!(ticket.headers.get("Content-Type").map(String::as_str), Some("text/plain"));
    assert_eq!(ticket.headers.get("Content-Length"), Some(&body.len().to_string()));
    assert_eq!(t.put(&presigned(&ticket), "text/plain", body.clone()).await, 200);
    let reg = f
        .macp
        .register_artifact(
            &f.alice,
            RegisterArtifact {
                description: Some("kubectl logs of the restarts".into()),
                linked_finding_ids: vec![finding.finding_id],
                ..register(&f, &ticket.key)
            },
        )
        .await
        .unwrap();
    assert_eq!((reg.artifact.size, reg.artifact.content_type.as_str()), (body.len() as u64, "text/plain"));
    let listed = f
        .macp
        .list_artifacts(
            &f.bob,
            ListArtifacts {
                room_id: f.room,
                finding_id: Some(finding.finding_id),
                entity_id: None,
                limit: None,
                cursor: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(listed.artifacts.len(), 1);
    let a = &listed.artifacts[0];
    assert_eq!(a.artifact.artifact_id, reg.artifact.artifact_id);
    let (status, got) = t.get(a.download_url.as_deref().unwrap()).await;
    assert_eq!(status, 200);
    assert_eq!(got, body, "the second agent downloads the same bytes");
    // A second upload to the same URL does not overwrite the object.
    if backend.blobs.as_ref().is_some_and(|(b, _)| b.enforces_presigned_bounds()) {
        let other: Vec<u8> = vec![b'x'; body.len()];
        assert_ne!(t.put(&presigned(&ticket), "text/plain", other).await, 200, "keys are never overwritten");
        assert_eq!(t.get(a.download_url.as_deref().unwrap()).await.1, body);
    }
}

/// Registration checks the stored object against the artifact limits itself, so an object
/// that got past the URL's bounds (an emulator does not enforce them; the limits were lowered
/// meanwhile) never enters the record.
pub async fn registration_refuses_an_object_outside_the_limits(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let t = f.transfer.clone().expect("the backend declares blobs but gave no artifact storage");
    let body = vec![b'a'; 4096];
    let ticket =
        f.macp.request_artifact_upload(&f.alice, request(&f, "big.log", "text/plain", 4096)).await.unwrap();
    assert_eq!(t.put(&presigned(&ticket), "text/plain", body).await, 200);
    let (blobs, _) = backend.blobs.clone().expect("blobs");
    let mut cfg = macp_core::service::ArtifactConfig::default();
    cfg.max_bytes = 1024;
    let strict = macp_core::Macp::builder()
        .store(backend.store.clone())
        .blob_store(blobs)
        .artifact_config(cfg)
        .build()
        .unwrap();
    let e = expect_code(strict.register_artifact(&f.alice, register(&f, &ticket.key)).await, "invalid_input");
    assert_eq!(e.limit(), Some(1024));
    let listed = strict
        .list_artifacts(
            &f.bob,
            ListArtifacts { room_id: f.room, finding_id: None, entity_id: None, limit: None, cursor: None },
        )
        .await
        .unwrap();
    assert!(listed.artifacts.is_empty(), "nothing was registered");
}

/// Registering a key that was requested but never uploaded is `not_found`, and writes nothing.
pub async fn registering_a_key_never_uploaded_is_not_found(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let ticket =
        f.macp.request_artifact_upload(&f.alice, request(&f, "later.log", "text/plain", 5)).await.unwrap();
    let e = expect_code(f.macp.register_artifact(&f.alice, register(&f, &ticket.key)).await, "not_found");
    assert!(e.to_string().contains("request_artifact_upload"), "{e}");
    assert_eq!(f.macp.room_summary(&f.alice, f.room).await.unwrap().artifact_count, 0);
}

/// An upload URL accepts only its size, its content type, its signature and its time; refused
/// uploads store nothing. (For stores that enforce presigned bounds: feature `bounded_urls`.)
pub async fn upload_urls_accept_only_their_key_type_size_and_time(backend: Backend) {
    let (blobs, t) = backend.blobs.clone().expect("the backend declares blobs but gave no artifact storage");
    assert!(
        blobs.enforces_presigned_bounds(),
        "the backend declares bounded_urls; {} must enforce them",
        blobs.name()
    );
    let f = Fixture::new(&backend).await;
    let ticket = f
        .macp
        .request_artifact_upload(&f.alice, request(&f, "bound.json", "application/json", 10))
        .await
        .unwrap();
    let up = presigned(&ticket);
    assert_eq!(t.put(&up, "application/json", b"0123456789a".to_vec()).await, 403, "one byte too many");
    assert_eq!(t.put(&up, "application/json", b"012345678".to_vec()).await, 403, "one byte too few");
    assert_eq!(t.put(&up, "text/plain", b"0123456789".to_vec()).await, 403, "another content type");
    let mut tampered = up.clone();
    let last = tampered.url.pop().unwrap();
    tampered.url.push(if last == 'A' { 'B' } else { 'A' });
    assert_eq!(t.put(&tampered, "application/json", b"0123456789".to_vec()).await, 403, "tampered signature");
    // Re-targeting the URL at another key (another room's prefix) breaks the signature.
    let other = macp_core::RoomId::generate();
    let mut retargeted = up.clone();
    retargeted.url = retargeted.url.replacen(&f.room.to_string(), &other.to_string(), 1);
    assert_eq!(t.put(&retargeted, "application/json", b"0123456789".to_vec()).await, 403, "re-targeted key");
    assert!(blobs.head(&ticket.key).await.unwrap().is_none(), "refused uploads store nothing");
    expect_code(f.macp.register_artifact(&f.alice, register(&f, &ticket.key)).await, "not_found");
    // An expired URL: issued by a service whose clock says it is an hour ago.
    f.clock.advance_ms(-3_600_000);
    let old = f
        .macp
        .request_artifact_upload(&f.alice, request(&f, "late.json", "application/json", 2))
        .await
        .unwrap();
    assert_eq!(t.put(&presigned(&old), "application/json", b"{}".to_vec()).await, 403, "expired URL");
    assert!(blobs.head(&old.key).await.unwrap().is_none());
    // The original URL, used correctly, still works.
    assert_eq!(t.put(&up, "application/json", b"0123456789".to_vec()).await, 200);
}

/// Upload requests over the limits, with a type outside the allowed list, or with a filename
/// that is a path are refused with `invalid_input`.
pub async fn upload_requests_refuse_limits_and_path_like_names(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let max = f.macp.artifact_config().max_bytes;
    let e = expect_code(
        f.macp.request_artifact_upload(&f.alice, request(&f, "big.log", "text/plain", max + 1)).await,
        "invalid_input",
    );
    assert_eq!(e.limit(), Some(max));
    expect_code(
        f.macp.request_artifact_upload(&f.alice, request(&f, "empty.log", "text/plain", 0)).await,
        "invalid_input",
    );
    expect_code(
        f.macp.request_artifact_upload(&f.alice, request(&f, "page.html", "text/html", 10)).await,
        "invalid_input",
    );
    for name in ["../../etc/passwd", "a/b.log", "..", "c:\\\\x.log", "", " lead.log", "x\\n.log"] {
        let e = expect_code(
            f.macp.request_artifact_upload(&f.alice, request(&f, name, "text/plain", 10)).await,
            "invalid_input",
        );
        assert_eq!(e.body().field.as_deref(), Some("filename"), "{name:?}");
    }
    let ok = f
        .macp
        .request_artifact_upload(&f.alice, request(&f, "Grafana (p99) 09-41.png", "image/png", 10))
        .await
        .unwrap();
    assert!(ok.key.ends_with("/Grafana (p99) 09-41.png"));
}

// ---------------------------------------------------------------------------------------------
// Registration and listing

pub(crate) fn artifact_req(
    room: RoomId,
    agent_id: AgentId,
    key: &str,
    findings: Vec<FindingId>,
) -> RegisterArtifact {
    RegisterArtifact {
        room_id: room,
        agent_id: Some(agent_id),
        key: key.to_owned(),
        description: Some("log excerpt".into()),
        linked_finding_ids: findings,
        linked_entity_ids: Vec::new(),
        idempotency_key: None,
    }
}

/// Keys must be plain keys under the room's own prefix, and links must exist in the room.
pub async fn register_artifact_checks_prefix_and_links(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let finding = f.post("see attached", &[]).await;
    let key = f.upload("trace.log", b"0123456789").await;
    let ok = f
        .macp
        .register_artifact(&f.alice, artifact_req(f.room, f.a.clone(), &key, vec![finding.finding_id]))
        .await
        .unwrap();
    assert_eq!(ok.artifact.uploaded_by.as_str(), "alice@example.com");
    assert_eq!(
        (ok.artifact.size, ok.artifact.content_type.as_str()),
        (10, "text/plain"),
        "size and type are what was stored"
    );
    let other = RoomId::generate();
    let ulid = key.rsplit('/').nth(1).unwrap().to_owned();
    for bad in [
        format!("rooms/{other}/artifacts/{ulid}/trace.log"),
        format!("rooms/{}/../{other}/x.log", f.room),
        format!("rooms/{}/", f.room),
        "x.log".to_owned(),
    ] {
        expect_code(
            f.macp.register_artifact(&f.alice, artifact_req(f.room, f.a.clone(), &bad, vec![])).await,
            "invalid_input",
        );
    }
    let second = f.upload("y.log", b"y").await;
    expect_code(
        f.macp
            .register_artifact(
                &f.alice,
                artifact_req(f.room, f.a.clone(), &second, vec![FindingId::generate()]),
            )
            .await,
        "not_found",
    );
    expect_code(
        f.macp
            .register_artifact(
                &f.alice,
                RegisterArtifact {
                    linked_entity_ids: vec![EntityId::generate()],
                    ..artifact_req(f.room, f.a.clone(), &second, vec![])
                },
            )
            .await,
        "not_found",
    );
    expect_code(
        f.macp.register_artifact(&f.alice, artifact_req(f.room, f.a.clone(), &key, vec![])).await,
        "already_exists",
    );
    assert_eq!(f.macp.room_summary(&f.alice, f.room).await.unwrap().artifact_count, 1);
}

/// Artifacts list by finding and by entity, where any alias of a merged entity matches.
pub async fn list_artifacts_filters_by_finding_and_entity_alias(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let f1 = f.post("one", &[]).await.finding_id;
    let f2 = f.post("two", &[]).await.finding_id;
    let e = f.entity("e", "host", "e").await;
    let e2 = f.entity("e2", "host", "e2").await;
    let k1 = f.upload("1.log", b"one").await;
    let k2 = f.upload("2.log", b"two").await;
    f.macp.register_artifact(&f.alice, artifact_req(f.room, f.a.clone(), &k1, vec![f1])).await.unwrap();
    f.macp
        .register_artifact(
            &f.alice,
            RegisterArtifact {
                linked_entity_ids: vec![e2],
                ..artifact_req(f.room, f.a.clone(), &k2, vec![f2])
            },
        )
        .await
        .unwrap();
    f.macp
        .merge_entities(
            &f.alice,
            MergeEntities {
                room_id: f.room,
                agent_id: Some(f.a.clone()),
                winner_entity_id: e,
                loser_entity_id: e2,
            },
        )
        .await
        .unwrap();
    let list = |finding_id, entity_id, limit, cursor| {
        f.macp
            .list_artifacts(&f.alice, ListArtifacts { room_id: f.room, finding_id, entity_id, limit, cursor })
    };
    assert_eq!(list(None, None, None, None).await.unwrap().artifacts.len(), 2);
    let by_f1 = list(Some(f1), None, None, None).await.unwrap().artifacts;
    assert_eq!(by_f1.len(), 1);
    assert_eq!(by_f1[0].artifact.key, k1);
    let by_e = list(None, Some(e), None, None).await.unwrap().artifacts;
    assert_eq!(by_e.len(), 1, "linked to the alias, listed under the winner");
    assert_eq!(by_e[0].artifact.linked_entity_ids, vec![e]);
    let page = list(None, None, Some(1), None).await.unwrap();
    let next = list(None, None, Some(1), page.next_cursor.clone()).await.unwrap();
    assert_ne!(page.artifacts[0].artifact.artifact_id, next.artifacts[0].artifact.artifact_id);
    assert!(next.next_cursor.is_none());
}

/// `register_artifact` with a key replays.
pub async fn idempotent_register_artifact_replays(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let key = f.upload("x.png.txt", b"x").await;
    let req = RegisterArtifact {
        idempotency_key: Some("a1".into()),
        ..artifact_req(f.room, f.a.clone(), &key, vec![])
    };
    let first = f.macp.register_artifact(&f.alice, req.clone()).await.unwrap();
    let again = f.macp.register_artifact(&f.alice, req).await.unwrap();
    assert!(again.replayed);
    assert_eq!(again.artifact, first.artifact);
}

/// Artifacts linked to an entity that is later merged away list under the winner, and their
/// links read as the winner.
pub async fn merged_entities_keep_their_artifacts(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let winner = f.entity("payments", "k8s_service", "payments").await;
    let loser = f.entity("payments-v2", "k8s_deployment", "payments-v2").await;
    let key = f.upload("trace.txt", b"trace of the timeout").await;
    f.macp
        .register_artifact(
            &f.alice,
            RegisterArtifact {
                linked_entity_ids: vec![loser],
                ..artifact_req(f.room, f.a.clone(), &key, vec![])
            },
        )
        .await
        .unwrap();
    f.macp.merge_entities(&f.alice, MergeEntities::new(f.room, f.a.clone(), winner, loser)).await.unwrap();
    let arts = f.macp.list_artifacts(&f.alice, ListArtifacts::new(f.room).entity(winner)).await.unwrap();
    assert_eq!(arts.artifacts.len(), 1);
    assert_eq!(arts.artifacts[0].artifact.linked_entity_ids, vec![winner]);
    let by_old = f.macp.list_artifacts(&f.alice, ListArtifacts::new(f.room).entity(loser)).await.unwrap();
    assert_eq!(by_old.artifacts.len(), 1, "the old id resolves to the winner too");
}
