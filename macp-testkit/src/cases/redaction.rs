//! Secrets never reach the store: every text of a write passes the redactor first, the answer
//! says what it took, and what the author marked private is gone.

use macp_core::model::{AgentStatus, EntityType, Evidence, EvidenceKind};
use macp_core::service::{
    AddEntity, AddRelationship, AskDecision, ClaimWork, DeclareStatus, GraphQuery, PostFinding,
    SearchFindings, UpdatesQuery,
};

use super::*;
use crate::Backend;

const KEY: &str = "AKIA2E0A8F3B244C9986";
const TOKEN: &str = "ghp_abcdefghijklmnopqrstuvwxyz0123456789";

/// Stored and every read of it (timeline, search, feed, graph, decisions, context): the secret
/// is not there, its typed placeholder is; the answer counts it by kind; a `<private>` span is
/// removed; an unclosed one is refused and writes nothing.
pub async fn secrets_are_redacted_before_anything_is_stored(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let m = &f.macp;
    let evidence = vec![Evidence {
        kind: EvidenceKind::Log,
        reference: format!("https://logs.internal/q?token={TOKEN}&since=1h"),
        description: Some(format!("the deploy step echoed {KEY}")),
        captured_at: None,
    }];
    let posted = m
        .post_finding(
            &f.alice,
            PostFinding::new(
                f.room,
                f.a.clone(),
                format!("the job used {KEY} and password=hunter2 <private>customer 4411 Jane Roe</private>to call S3"),
            )
            .evidence(evidence),
        )
        .await
        .unwrap();
    let fd = &posted.finding;
    assert_eq!(
        fd.content,
        "the job used [redacted:aws-access-key] and password=[redacted:secret] to call S3"
    );
    assert_eq!(fd.evidence[0].reference, "https://logs.internal/q?token=[redacted:github-token]&since=1h");
    assert_eq!(
        fd.evidence[0].description.as_deref(),
        Some("the deploy step echoed [redacted:aws-access-key]")
    );
    let counts: Vec<(&str, u32)> = posted.redacted.0.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(
        counts,
        [("aws-access-key", 2), ("github-token", 1), ("private", 1), ("secret", 1)],
        "the answer says what was taken"
    );

    // A clean post says nothing about redaction.
    let clean =
        m.post_finding(&f.alice, PostFinding::new(f.room, f.a.clone(), "p99 up since 14:02")).await.unwrap();
    assert!(clean.redacted.is_empty());

    // Entities: name, identifiers (fingerprinted, so two keys stay two entities) and properties.
    let e1 = m
        .add_entity(
            &f.alice,
            AddEntity::new(f.room, f.a.clone(), format!("leaked key {KEY}"), EntityType::Resource)
                .identifier("access-key", KEY)
                .property("note", format!("rotated; old token {TOKEN}"))
                .property("db_password", "hunter2"),
        )
        .await
        .unwrap();
    let e = &e1.entity;
    assert_eq!(e.name, "leaked key [redacted:aws-access-key]");
    let id = &e.identifiers[0].value;
    assert!(id.starts_with("[redacted:aws-access-key]#") && !id.contains(KEY), "identifier: {id}");
    assert_eq!(e.properties["note"], "rotated; old token [redacted:github-token]");
    assert_eq!(e.properties["db_password"], "[redacted:secret]");
    let other = "AKIA5X7RQ2LM9PZT0KDW";
    let e2 = m
        .add_entity(
            &f.alice,
            AddEntity::new(f.room, f.a.clone(), "another key", EntityType::Resource)
                .identifier("access-key", other),
        )
        .await
        .unwrap();
    assert!(e2.created, "a different redacted key is a different entity");
    let again = m
        .add_entity(
            &f.bob,
            AddEntity::new(f.room, f.b.clone(), "same key", EntityType::Resource)
                .identifier("access-key", KEY),
        )
        .await
        .unwrap();
    assert_eq!(again.entity.entity_id, e.entity_id, "the same key found twice is one entity");
    let rel = m
        .add_relationship(
            &f.alice,
            AddRelationship::new(f.room, f.a.clone(), e.entity_id, "used_by", e2.entity.entity_id)
                .description(format!("both in the CI env, Authorization: Bearer {TOKEN}")),
        )
        .await
        .unwrap();
    assert_eq!(
        rel.relationship.description.as_deref(),
        Some("both in the CI env, Authorization: Bearer [redacted:github-token]")
    );
    assert_eq!(rel.redacted.total(), 1);

    // Decisions, statuses, claims.
    let d = m
        .ask_decision(
            &f.bob,
            AskDecision::new(f.room, f.b.clone(), format!("revoke {KEY} now?")).options(["yes", TOKEN]),
        )
        .await
        .unwrap();
    assert_eq!(d.question, "revoke [redacted:aws-access-key] now?");
    assert_eq!(d.options[1], "[redacted:github-token]");
    assert_eq!(d.redacted.total(), 2, "a decision's answer counts what was taken");
    let s = m
        .declare_status(
            &f.bob,
            DeclareStatus::new(f.room, f.b.clone(), AgentStatus::Blocked)
                .reason(format!("need {TOKEN} revoked")),
        )
        .await
        .unwrap();
    assert_eq!(s.status_reason.as_deref(), Some("need [redacted:github-token] revoked"));
    assert_eq!(s.redacted.0.get("github-token"), Some(&1));
    let c =
        m.claim_work(&f.alice, ClaimWork::new(f.room, f.a.clone(), format!("rotate {KEY}"))).await.unwrap();
    assert_eq!(c.claim.subject, "rotate [redacted:aws-access-key]");
    assert_eq!(c.redacted.total(), 1);

    // No read path gives the secret back.
    let everything = format!(
        "{:?}{:?}{:?}{:?}{:?}",
        f.all_findings(&f.bob).await,
        m.search_findings(&f.bob, SearchFindings::new(f.room, KEY)).await.unwrap(),
        m.updates(&f.bob, UpdatesQuery::new(f.room)).await.unwrap(),
        m.entity_graph(&f.bob, GraphQuery::new(f.room)).await.unwrap(),
        m.room_context(&f.bob, f.room).await.unwrap(),
    );
    for secret in [KEY, TOKEN, "hunter2", "Jane Roe", "4411"] {
        assert!(!everything.contains(secret), "`{secret}` came back from a read");
    }
    assert!(m.search_findings(&f.bob, SearchFindings::new(f.room, "Jane")).await.unwrap().results.is_empty());

    // Names matched as written cannot take a placeholder: refused, with the kind.
    let err = expect_code(
        m.post_finding(&f.alice, PostFinding::new(f.room, f.a.clone(), "tagged").tags([TOKEN])).await,
        "invalid_input",
    );
    assert!(err.to_string().contains("github-token") && !err.to_string().contains(TOKEN), "{err}");
    expect_code(
        m.join_room(&f.bob, macp_core::service::JoinRoom::new(f.room).agent(agent(KEY))).await,
        "invalid_input",
    );
    // A claim and an identifier that held a secret are found by what was given.
    let released = m.release_claim_as_person(&f.bob, f.room, &format!("rotate {KEY}")).await.unwrap();
    assert_eq!(released.subject, "rotate [redacted:aws-access-key]");
    let found = m
        .entity_graph(
            &f.bob,
            GraphQuery {
                identifier: Some(macp_core::model::Identifier {
                    id_type: "access-key".into(),
                    value: KEY.into(),
                }),
                ..GraphQuery::new(f.room)
            },
        )
        .await
        .unwrap();
    assert_eq!(found.entities[0].entity.entity_id, e1.entity.entity_id, "looked up by the key itself");

    // An unclosed private span: refused, nothing written.
    let before = f.all_findings(&f.bob).await.len();
    let e = expect_code(
        m.post_finding(
            &f.alice,
            PostFinding::new(f.room, f.a.clone(), "customer <private>Jane Roe, card 4111"),
        )
        .await,
        "invalid_input",
    );
    assert!(e.to_string().contains("</private>"), "{e}");
    assert_eq!(f.all_findings(&f.bob).await.len(), before);
}

/// Redaction comes before the length limit: a text within it as written but over it once
/// redacted is refused (never cut), and one over it as written whose redaction brings it
/// within is accepted whole.
pub async fn redaction_comes_before_the_length_limit(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let max = macp_core::Limits::default().max_content_bytes;
    // A PEM key of 3,000 bytes in a text just over the limit: once replaced, well within it.
    let body = "A".repeat(64);
    let pem =
        format!("-----BEGIN PRIVATE KEY-----\n{}-----END PRIVATE KEY-----", format!("{body}\n").repeat(47));
    let text = format!("{}{pem}", "x".repeat(max - pem.len() + 10));
    assert!(text.len() > max);
    let p = f.macp.post_finding(&f.alice, PostFinding::new(f.room, f.a.clone(), text)).await.unwrap();
    assert!(p.finding.content.ends_with("x[redacted:private-key]"));
    // Within the limit as written, over it once redacted (a key becomes a longer placeholder).
    let keys = format!("{KEY} ").repeat(max / 21);
    assert!(keys.len() <= max);
    let e = expect_code(
        f.macp.post_finding(&f.alice, PostFinding::new(f.room, f.a.clone(), keys)).await,
        "invalid_input",
    );
    assert!(e.to_string().contains("content"), "{e}");
}

/// A text far over every limit is refused before the redactor reads it: four times the largest
/// text limit, named in the error with the field, and nothing is written. Just under it, the
/// text is read, and refused (or kept) by what redaction leaves of it.
pub async fn a_text_far_over_every_limit_is_refused_unread(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let before = f.all_findings(&f.bob).await.len();
    let max = macp_core::Limits::default().max_unredacted_bytes();
    assert_eq!(max, 64 * 1024);
    let e = expect_code(
        f.macp.post_finding(&f.alice, PostFinding::new(f.room, f.a.clone(), "x".repeat(max + 1))).await,
        "invalid_input",
    );
    let text = e.to_string();
    assert!(text.contains("content") && text.contains(&max.to_string()) && text.contains("before"), "{e}");
    assert_eq!(e.limit(), Some(max as u64), "{e}");
    // Every text of a write, not only the content: an evidence ref.
    let mut post = PostFinding::new(f.room, f.a.clone(), "short");
    post.evidence.push(Evidence {
        kind: EvidenceKind::Log,
        reference: "y".repeat(max + 1),
        description: None,
        captured_at: None,
    });
    let e = expect_code(f.macp.post_finding(&f.alice, post).await, "invalid_input");
    assert!(e.to_string().contains("evidence.reference"), "{e}");
    assert_eq!(f.all_findings(&f.bob).await.len(), before, "nothing is written");
    // At the bound the text is read: this one is over the content limit once redacted.
    let e = expect_code(
        f.macp.post_finding(&f.alice, PostFinding::new(f.room, f.a.clone(), "x".repeat(max))).await,
        "invalid_input",
    );
    assert_eq!(e.limit(), Some(macp_core::Limits::default().max_content_bytes as u64), "{e}");
}
