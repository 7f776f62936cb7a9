//! Artifact metadata.

use async_trait::async_trait;
use macp_core::model::{Artifact, Erasure, Event};
use macp_core::store::{ArtifactQuery, ArtifactStore, IdempotencyKey, Write};
use macp_core::{AgentId, ArtifactId, Error, Result, RoomId, Timestamp, UserId};
use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::db::*;
use crate::store::append_event;
use crate::writer::Sync;

const ARTIFACT_COLS: &str = "room_id, artifact_id, key, content_type, size, uploaded_by, agent_id, uploaded_at, description, linked_finding_ids, linked_entity_ids, idempotency_key, erased";

fn artifact_from_row(r: &Row<'_>) -> Result<Artifact> {
    let g = |e: rusqlite::Error| sql_err(e);
    Ok(Artifact {
        room_id: parse(&r.get::<_, String>(0).map_err(g)?)?,
        artifact_id: parse(&r.get::<_, String>(1).map_err(g)?)?,
        key: r.get(2).map_err(g)?,
        content_type: r.get(3).map_err(g)?,
        size: r.get::<_, i64>(4).map_err(g)? as u64,
        uploaded_by: UserId::new(r.get::<_, String>(5).map_err(g)?)?,
        agent_id: AgentId::new(r.get::<_, String>(6).map_err(g)?)?,
        uploaded_at: Timestamp::from_millis(r.get(7).map_err(g)?),
        description: r.get(8).map_err(g)?,
        linked_finding_ids: from_json("linked_finding_ids", &r.get::<_, String>(9).map_err(g)?)?,
        linked_entity_ids: from_json("linked_entity_ids", &r.get::<_, String>(10).map_err(g)?)?,
        idempotency_key: r.get(11).map_err(g)?,
        erased: r.get::<_, Option<String>>(12).map_err(g)?.map(|j| from_json("erased", &j)).transpose()?,
    })
}

/// Writes an artifact's row (a registration, or a restore); `already_exists` if the room has
/// one with the same key.
pub(crate) fn insert_artifact_row(tx: &Connection, a: &Artifact) -> Result<()> {
    exec(
        tx,
        &format!("INSERT INTO artifacts ({ARTIFACT_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
        params![
            a.room_id.to_string(),
            a.artifact_id.to_string(),
            a.key,
            a.content_type,
            a.size as i64,
            a.uploaded_by.as_str(),
            a.agent_id.as_str(),
            a.uploaded_at.as_millis(),
            a.description,
            to_json(&a.linked_finding_ids),
            to_json(&a.linked_entity_ids),
            a.idempotency_key,
            a.erased.as_ref().map(to_json),
        ],
    )
    .map_err(|e| {
        if is_unique_violation(&e) {
            Error::AlreadyExists { what: "artifact with key", id: a.key.clone() }
        } else {
            sql_err(e)
        }
    })?;
    Ok(())
}

#[async_trait]
impl ArtifactStore for SqliteStore {
    async fn insert_artifact(
        &self,
        a: &Artifact,
        idempotency: Option<&IdempotencyKey>,
        event: &Event,
    ) -> Result<Write<Artifact>> {
        let (a, idempotency, event) = (a.clone(), idempotency.cloned(), event.clone());
        self.write(Sync::Durable, move |tx, _| {
            let room = a.room_id.to_string();
            if let Some(rec) = existing_key(tx, &room, idempotency.as_ref())? {
                return Ok(Write::Replayed(rec));
            }
            insert_artifact_row(tx, &a)?;
            append_event(tx, a.room_id, &event)?;
            record_key(tx, &room, idempotency.as_ref())?;
            Ok(Write::Applied(a))
        })
        .await
    }

    async fn erase_artifact(
        &self,
        room_id: RoomId,
        artifact_id: ArtifactId,
        erasure: &Erasure,
        event: &Event,
    ) -> Result<Option<Artifact>> {
        let (erasure, event) = (erasure.clone(), event.clone());
        let out = self
            .write(Sync::Durable, move |tx, _| {
                let (room, id) = (room_id.to_string(), artifact_id.to_string());
                let found = tx
                    .prepare_cached(&format!(
                        "SELECT {ARTIFACT_COLS} FROM artifacts WHERE room_id = ? AND artifact_id = ?"
                    ))
                    .and_then(|mut st| {
                        st.query_row(params![room, id], |r| Ok(artifact_from_row(r))).optional()
                    })
                    .map_err(sql_err)?
                    .transpose()?;
                let Some(mut a) = found else { return Ok(None) };
                if !a.erase(&erasure) {
                    return Ok(Some(a));
                }
                exec(
                    tx,
                    "UPDATE artifacts SET description = ?, erased = ? WHERE room_id = ? AND artifact_id = ?",
                    params![a.description, to_json(&erasure), room, id],
                )
                .map_err(sql_err)?;
                exec(
                    tx,
                    "UPDATE events SET summary = ? WHERE room_id = ? AND artifact_id = ?",
                    params![Event::summary_of(&erasure.notice()), room, id],
                )
                .map_err(sql_err)?;
                append_event(tx, room_id, &event)?;
                Ok(Some(a))
            })
            .await?;
        if out.is_some() {
            self.scrub().await?;
        }
        Ok(out)
    }

    async fn get_artifacts(&self, room_id: RoomId, ids: &[ArtifactId]) -> Result<Vec<Artifact>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<SqlValue> = ids.iter().map(text).collect();
        self.read_small(move |c| {
            let sql = format!(
                "SELECT {ARTIFACT_COLS} FROM artifacts WHERE room_id = ? AND artifact_id IN {}",
                placeholders(ids.len())
            );
            let mut p = vec![text(room_id)];
            p.extend(ids);
            query_all(c, &sql, &p, artifact_from_row)
        })
        .await
    }

    async fn list_artifacts(&self, room_id: RoomId, q: &ArtifactQuery) -> Result<Vec<Artifact>> {
        let q = q.clone();
        self.read(move |c| {
            let mut sql = format!("SELECT {ARTIFACT_COLS} FROM artifacts WHERE room_id = ?");
            let mut p = vec![text(room_id)];
            if let Some(a) = q.after {
                sql.push_str(" AND artifact_id > ?");
                p.push(text(a));
            }
            if let Some(f) = q.finding_id {
                sql.push_str(" AND EXISTS (SELECT 1 FROM json_each(linked_finding_ids) WHERE value = ?)");
                p.push(text(f));
            }
            if !q.entity_ids.is_empty() {
                sql.push_str(&format!(
                    " AND EXISTS (SELECT 1 FROM json_each(linked_entity_ids) WHERE value IN {})",
                    placeholders(q.entity_ids.len())
                ));
                p.extend(q.entity_ids.iter().map(text));
            }
            sql.push_str(" ORDER BY artifact_id LIMIT ?");
            p.push(SqlValue::Integer(q.limit as i64));
            query_all(c, &sql, &p, artifact_from_row)
        })
        .await
    }

    async fn count_artifacts(&self, room_id: RoomId) -> Result<u64> {
        self.read_small(move |c| {
            row(c, "SELECT count(*) FROM artifacts WHERE room_id = ?", params![room_id.to_string()], |r| {
                r.get::<_, i64>(0)
            })
            .map(|n| n as u64)
            .map_err(sql_err)
        })
        .await
    }
}
