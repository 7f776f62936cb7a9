//! The decision queue.

use async_trait::async_trait;
use macp_core::model::{Answer, Decision, Event};
use macp_core::store::DecisionStore;
use macp_core::{DecisionId, Result, RoomId};
use rusqlite::{Connection, params};

use crate::db::*;
use crate::store::append_event;
use crate::writer::Sync;

/// Writes a decision's row (a question, or a restore of one answered or not).
pub(crate) fn insert_decision_row(tx: &Connection, d: &Decision) -> Result<()> {
    exec(
        tx,
        "INSERT INTO decisions (room_id, decision_id, answered, doc) VALUES (?, ?, ?, ?)",
        params![d.room_id.to_string(), d.decision_id.to_string(), d.answer.is_some() as i64, to_json(d)],
    )
    .map_err(sql_err)?;
    Ok(())
}

#[async_trait]
impl DecisionStore for SqliteStore {
    async fn insert_decision(&self, d: &Decision, event: &Event) -> Result<()> {
        let (d, event) = (d.clone(), event.clone());
        self.write(Sync::Durable, move |tx, _| {
            insert_decision_row(tx, &d)?;
            append_event(tx, d.room_id, &event)
        })
        .await
        .map(|_| ())
    }

    async fn answer_decision(
        &self,
        room_id: RoomId,
        decision_id: DecisionId,
        answer: &Answer,
        event: &Event,
    ) -> Result<Option<Decision>> {
        let (answer, event) = (answer.clone(), event.clone());
        self.write(Sync::Durable, move |tx, _| {
            let docs = query_all(
                tx,
                "SELECT doc FROM decisions WHERE room_id = ? AND decision_id = ?",
                &[text(room_id), text(decision_id)],
                |r| from_json::<Decision>("decision", &r.get::<_, String>(0).map_err(sql_err)?),
            )?;
            let Some(mut d) = docs.into_iter().next() else { return Ok(None) };
            if d.answer.is_some() {
                return Ok(Some(d));
            }
            d.answer = Some(answer);
            exec(
                tx,
                "UPDATE decisions SET answered = 1, doc = ? WHERE room_id = ? AND decision_id = ? AND answered = 0",
                params![to_json(&d), room_id.to_string(), decision_id.to_string()],
            )
            .map_err(sql_err)?;
            append_event(tx, room_id, &event)?;
            Ok(Some(d))
        })
        .await
    }

    async fn list_decisions(&self, room_id: RoomId, open_only: bool) -> Result<Vec<Decision>> {
        self.read_small(move |c| {
            let sql = if open_only {
                "SELECT doc FROM decisions WHERE room_id = ? AND answered = 0 ORDER BY decision_id"
            } else {
                "SELECT doc FROM decisions WHERE room_id = ? ORDER BY decision_id"
            };
            query_all(c, sql, &[text(room_id)], |r| {
                from_json("decision", &r.get::<_, String>(0).map_err(sql_err)?)
            })
        })
        .await
    }
}
