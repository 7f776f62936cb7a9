//! The decision queue: agents ask the people; the first answer stands, and whether a person
//! answered directly or an agent relayed it is part of the record.

use macp_core::model::{Channel, EventKind, Urgency};
use macp_core::service::{AnswerDecision, AskDecision, UpdatesQuery};
use macp_core::{DecisionId, FindingId};

use super::*;
use crate::Backend;

/// An open decision heads the context and the summary until answered; the first answer wins
/// and says its channel: a relayed answer names its agent and never reads as a person's.
pub async fn decisions_wait_for_the_people_and_record_who_answered(backend: Backend) {
    let f = Fixture::new(&backend).await;
    let evidence = f.post("replica lag is 2 s and steady", &["evidence"]).await;
    let asked = f
        .macp
        .ask_decision(
            &f.alice,
            AskDecision {
                finding_ids: vec![evidence.finding_id],
                ..AskDecision::new(f.room, f.a.clone(), "Fail over orders-db to the replica now?")
                    .options(["yes, now", "wait for the 14:30 window"])
                    .urgency(Urgency::High)
            },
        )
        .await
        .unwrap();
    assert!(asked.answer.is_none());
    f.clock.advance_ms(1);
    let other = f
        .macp
        .ask_decision(&f.alice, AskDecision::new(f.room, f.a.clone(), "Page the DBA on call?"))
        .await
        .unwrap();
    assert_eq!(other.urgency, Urgency::Normal);
    let ctx = f.macp.room_context(&f.bob, f.room).await.unwrap();
    assert_eq!(
        ctx.open_decisions.iter().map(|d| d.decision_id).collect::<Vec<_>>(),
        vec![asked.decision_id, other.decision_id]
    );
    let json = serde_json::to_string(&ctx).unwrap();
    assert!(json.find("open_decisions").unwrap() < json.find("findings").unwrap(), "decisions come first");
    assert_eq!(f.macp.room_summary(&f.bob, f.room).await.unwrap().open_decisions.len(), 2);

    // Bob's agent relays Bob's answer: recorded as relayed, with the agent.
    let relayed = f
        .macp
        .answer_decision(
            &f.bob,
            AnswerDecision {
                room_id: f.room,
                decision_id: asked.decision_id,
                answer: "yes, now".into(),
                agent_id: Some(f.b.clone()),
            },
            Channel::Agent,
        )
        .await
        .unwrap();
    let a = relayed.into_inner().answer.expect("answered");
    assert_eq!(
        (a.channel, a.agent_id.as_ref(), a.user_id.as_str()),
        (Channel::Agent, Some(&f.b), "bob@example.com")
    );
    // A later answer, even a person's, does not replace it.
    let e = expect_code(
        f.macp
            .answer_decision(
                &f.alice,
                AnswerDecision {
                    room_id: f.room,
                    decision_id: asked.decision_id,
                    answer: "wait".into(),
                    agent_id: None,
                },
                Channel::Person,
            )
            .await,
        "conflict",
    );
    assert!(e.to_string().contains("yes, now"), "{e}");
    // Alice answers the other one herself.
    let direct = f
        .macp
        .answer_decision(
            &f.alice,
            AnswerDecision {
                room_id: f.room,
                decision_id: other.decision_id,
                answer: "no".into(),
                agent_id: None,
            },
            Channel::Person,
        )
        .await
        .unwrap()
        .into_inner()
        .answer
        .unwrap();
    assert_eq!((direct.channel, direct.agent_id), (Channel::Person, None));
    assert!(f.macp.room_context(&f.bob, f.room).await.unwrap().open_decisions.is_empty());
    assert_eq!(f.macp.list_decisions(&f.bob, f.room, false).await.unwrap().len(), 2);

    let kinds: Vec<EventKind> = f
        .macp
        .updates(
            &f.bob,
            UpdatesQuery::new(f.room).kinds([EventKind::DecisionAsked, EventKind::DecisionAnswered]),
        )
        .await
        .unwrap()
        .events
        .iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        kinds,
        vec![
            EventKind::DecisionAsked,
            EventKind::DecisionAsked,
            EventKind::DecisionAnswered,
            EventKind::DecisionAnswered
        ]
    );

    expect_code(
        f.macp
            .ask_decision(
                &f.alice,
                AskDecision {
                    finding_ids: vec![FindingId::generate()],
                    ..AskDecision::new(f.room, f.a.clone(), "?")
                },
            )
            .await,
        "not_found",
    );
    expect_code(
        f.macp
            .answer_decision(
                &f.alice,
                AnswerDecision {
                    room_id: f.room,
                    decision_id: DecisionId::generate(),
                    answer: "x".into(),
                    agent_id: None,
                },
                Channel::Person,
            )
            .await,
        "not_found",
    );
}
