//! The decision queue: one item per `(room_id, decision_id)` in the `decisions` table. The first
//! answer is written on condition that there is none yet, in the same transaction as its event.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{Put, TransactWriteItem};
use macp_core::model::{Answer, Decision, Event};
use macp_core::store::DecisionStore;
use macp_core::{DecisionId, Error, Result, RoomId};

use crate::AwsBackend;
use crate::ddb::*;

/// A decision's item; `answered` marks it once it has its answer.
pub(crate) fn decision_item(d: &Decision) -> Item {
    let mut m = HashMap::from([
        ("room_id".to_owned(), s(d.room_id.to_string())),
        ("decision_id".to_owned(), s(d.decision_id.to_string())),
        ("doc".to_owned(), json(d)),
    ]);
    if d.answer.is_some() {
        m.insert("answered".into(), s("1"));
    }
    m
}

impl AwsBackend {
    /// Writes `d` on `condition` with `event`: `Ok(true)` done, `Ok(false)` the condition failed.
    async fn put_decision_if(&self, d: &Decision, condition: &str, event: &Event) -> Result<bool> {
        for attempt in 0..ATTEMPTS {
            let head = self.event_head(d.room_id).await?;
            let put = Put::builder()
                .table_name(&self.names.decisions)
                .set_item(Some(decision_item(d)))
                .condition_expression(condition)
                .build()
                .map_err(|e| Error::backend("dynamodb", false, e.to_string(), None))?;
            let mut items = vec![TransactWriteItem::builder().put(put).build()];
            items.extend(self.event_items(d.room_id, &head, event)?);
            match self.transact(items, "TransactWriteItems (decision)").await? {
                Tx::Done => return Ok(true),
                Tx::Cancelled(reasons) if check_failed(&reasons, 0) => return Ok(false),
                // Another write took the feed head: read it again.
                Tx::Cancelled(_) => backoff(attempt).await,
            }
        }
        Err(gave_up("decision"))
    }

    async fn decision(&self, room: RoomId, id: DecisionId) -> Result<Option<Decision>> {
        self.get_item(
            &self.names.decisions,
            key2("room_id", room.to_string(), "decision_id", id.to_string()),
            "GetItem (decision)",
        )
        .await?
        .map(|i| doc(&i))
        .transpose()
    }
}

#[async_trait]
impl DecisionStore for AwsBackend {
    async fn insert_decision(&self, d: &Decision, event: &Event) -> Result<()> {
        if self.put_decision_if(d, "attribute_not_exists(decision_id)", event).await? {
            Ok(())
        } else {
            Err(Error::AlreadyExists { what: "decision", id: d.decision_id.to_string() })
        }
    }

    async fn answer_decision(
        &self,
        room_id: RoomId,
        decision_id: DecisionId,
        answer: &Answer,
        event: &Event,
    ) -> Result<Option<Decision>> {
        let Some(mut d) = self.decision(room_id, decision_id).await? else { return Ok(None) };
        if d.answer.is_some() {
            return Ok(Some(d));
        }
        d.answer = Some(answer.clone());
        if self
            .put_decision_if(&d, "attribute_exists(decision_id) AND attribute_not_exists(answered)", event)
            .await?
        {
            return Ok(Some(d));
        }
        // Answered meanwhile: the first answer stands.
        self.decision(room_id, decision_id).await
    }

    async fn list_decisions(&self, room_id: RoomId, open_only: bool) -> Result<Vec<Decision>> {
        let items = self
            .query_all(
                &self.names.decisions,
                None,
                "room_id = :r",
                open_only.then_some("attribute_not_exists(answered)"),
                HashMap::new(),
                HashMap::from([(":r".to_owned(), s(room_id.to_string()))]),
                true,
                true,
                |_| true,
                usize::MAX,
            )
            .await?;
        items.iter().map(doc::<Decision>).collect()
    }
}
