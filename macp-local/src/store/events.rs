//! The room's event feed and read positions.
//!
//! Each write that changes a room calls [`append_event`] inside its own transaction: the room's
//! `last_event` counter is bumped there, so event sequence numbers are gap-free and in commit
//! order, exactly like findings' `seq`.

use std::collections::BTreeMap;

use async_trait::async_trait;
use macp_core::model::{Event, EventKind};
use macp_core::store::EventStore;
use macp_core::{AgentId, Error, Result, RoomId, Timestamp, UserId};
use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::db::*;

const EVENT_COLS: &str = "seq, kind, at, user_id, agent_id, finding_id, entity_ids, artifact_id, summary";

fn event_from_row(r: &Row<'_>) -> Result<Event> {
    let g = |e: rusqlite::Error| sql_err(e);
    let opt = |i: usize| -> Result<Option<String>> { r.get::<_, Option<String>>(i).map_err(g) };
    Ok(Event {
        seq: r.get::<_, i64>(0).map_err(g)? as u64,
        kind: EventKind::parse(&r.get::<_, String>(1).map_err(g)?)?,
        at: Timestamp::from_millis(r.get(2).map_err(g)?),
        user_id: UserId::new(r.get::<_, String>(3).map_err(g)?)?,
        agent_id: opt(4)?.map(AgentId::new).transpose()?,
        finding_id: opt(5)?.map(|s| parse(&s)).transpose()?,
        entity_ids: from_json("event entity_ids", &r.get::<_, String>(6).map_err(g)?)?,
        artifact_id: opt(7)?.map(|s| parse(&s)).transpose()?,
        summary: r.get(8).map_err(g)?,
    })
}

/// Appends `event` to `room_id`'s feed inside the caller's transaction, with the next `seq`.
pub(crate) fn append_event(tx: &Connection, room_id: RoomId, event: &Event) -> Result<u64> {
    let room = room_id.to_string();
    let seq: i64 = tx
        .prepare_cached("UPDATE rooms SET last_event = last_event + 1 WHERE room_id = ? RETURNING last_event")
        .and_then(|mut st| st.query_row(params![room], |r| r.get(0)).optional())
        .map_err(sql_err)?
        .ok_or_else(|| Error::not_found("room", &room))?;
    insert_event_row(tx, room_id, seq as u64, event)?;
    Ok(seq as u64)
}

/// Writes an event's row at `seq` (its own `seq` is ignored; the room's counter is the
/// caller's).
pub(crate) fn insert_event_row(tx: &Connection, room_id: RoomId, seq: u64, event: &Event) -> Result<()> {
    exec(
        tx,
        &format!("INSERT INTO events (room_id, {EVENT_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
        params![
            room_id.to_string(),
            seq as i64,
            event.kind.as_str(),
            event.at.as_millis(),
            event.user_id.as_str(),
            event.agent_id.as_ref().map(|a| a.as_str().to_owned()),
            event.finding_id.map(|f| f.to_string()),
            to_json(&event.entity_ids),
            event.artifact_id.map(|a| a.to_string()),
            event.summary,
        ],
    )
    .map_err(sql_err)?;
    Ok(())
}

#[async_trait]
impl EventStore for SqliteStore {
    async fn list_events(
        &self,
        room_id: RoomId,
        after_seq: u64,
        kinds: &[EventKind],
        limit: usize,
    ) -> Result<Vec<Event>> {
        let kinds: Vec<SqlValue> = kinds.iter().map(|k| text(k.as_str())).collect();
        self.read_small(move |c| {
            let mut sql = format!("SELECT {EVENT_COLS} FROM events WHERE room_id = ? AND seq > ?");
            let mut p = vec![text(room_id), SqlValue::Integer(after_seq as i64)];
            if !kinds.is_empty() {
                sql.push_str(&format!(" AND kind IN {}", placeholders(kinds.len())));
                p.extend(kinds);
            }
            sql.push_str(" ORDER BY seq LIMIT ?");
            p.push(SqlValue::Integer(limit.min(i64::MAX as usize) as i64));
            query_all(c, &sql, &p, event_from_row)
        })
        .await
    }

    async fn last_event_seq(&self, room_id: RoomId) -> Result<u64> {
        self.read_small(move |c| {
            let seq: Option<i64> =
                row(c, "SELECT last_event FROM rooms WHERE room_id = ?", params![room_id.to_string()], |r| {
                    r.get(0)
                })
                .optional()
                .map_err(sql_err)?;
            Ok(seq.unwrap_or(0) as u64)
        })
        .await
    }

    async fn count_events(&self, room_id: RoomId, after_seq: u64) -> Result<BTreeMap<EventKind, u64>> {
        self.read(move |c| {
            let rows = query_all(
                c,
                "SELECT kind, count(*) FROM events WHERE room_id = ? AND seq > ? GROUP BY kind",
                &[text(room_id), SqlValue::Integer(after_seq as i64)],
                |r| {
                    let kind: String = r.get(0).map_err(sql_err)?;
                    let n: i64 = r.get(1).map_err(sql_err)?;
                    Ok((EventKind::parse(&kind)?, n as u64))
                },
            )?;
            Ok(rows.into_iter().collect())
        })
        .await
    }

    async fn read_position(&self, room_id: RoomId, agent_id: &AgentId) -> Result<u64> {
        let agent_id = agent_id.clone();
        self.read_small(move |c| {
            let seq: Option<i64> = row(
                c,
                "SELECT seq FROM read_positions WHERE room_id = ? AND agent_id = ?",
                params![room_id.to_string(), agent_id.as_str()],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql_err)?;
            Ok(seq.unwrap_or(0) as u64)
        })
        .await
    }

    async fn advance_read_position(&self, room_id: RoomId, agent_id: &AgentId, seq: u64) -> Result<u64> {
        let agent_id = agent_id.clone();
        self.write(crate::writer::Sync::Durable, move |tx, _| {
            let now: i64 = row(
                tx,
                "INSERT INTO read_positions (room_id, agent_id, seq) VALUES (?, ?, ?)
                 ON CONFLICT (room_id, agent_id) DO UPDATE SET seq = max(seq, excluded.seq)
                 RETURNING seq",
                params![room_id.to_string(), agent_id.as_str(), seq as i64],
                |r| r.get(0),
            )
            .map_err(sql_err)?;
            Ok(now as u64)
        })
        .await
    }
}
