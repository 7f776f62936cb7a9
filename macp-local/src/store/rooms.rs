//! Rooms.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use macp_core::model::{Event, Marker, ObjectiveChange, Resolution, Room, RoomStatus, VisibilityMode};
use macp_core::store::{RoomKey, RoomRecord, RoomStore};
use macp_core::{Error, Result, RoomId, Timestamp, UserId};
use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OptionalExtension, Row, params};
use serde::{Deserialize, Serialize};

use crate::db::*;
use crate::store::agents::insert_agent_row;
use crate::store::append_event;
use crate::store::artifacts::insert_artifact_row;
use crate::store::claims::store_claim;
use crate::store::decisions::insert_decision_row;
use crate::store::entities::{insert_entity_row, insert_holder_row, insert_relationship_row};
use crate::store::events::insert_event_row;
use crate::store::findings::insert_finding_rows;
use crate::writer::Sync;

/// How long a room read from the database is served from memory. This store's own writes
/// update the cache as they commit; the TTL bounds how long a change made by another process
/// (a person's `macp steer` / `macp close` on the same database while a server runs) takes to
/// be seen: a post racing such a close is like one racing a close through the server.
const ROOM_CACHE_TTL: Duration = Duration::from_secs(1);

// ---------------------------------------------------------------------------------------------
// Row mapping. Each SELECT list below matches one `*_from_row` function.

const ROOM_COLS: &str = "room_id, name, objective, visibility_mode, created_at, created_by, tags, status, closed_at, \
     closed_by, record, version";

/// The room's steering record, stored as JSON in `rooms.record`.
#[derive(Default, Serialize, Deserialize)]
struct Record {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    resolution: Option<Resolution>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    past_resolutions: Vec<Resolution>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    objective_history: Vec<ObjectiveChange>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    markers: Vec<Marker>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    retention_days: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    members: Vec<UserId>,
}

fn record_of(room: &Room) -> String {
    to_json(&Record {
        resolution: room.resolution.clone(),
        past_resolutions: room.past_resolutions.clone(),
        objective_history: room.objective_history.clone(),
        markers: room.markers.clone(),
        retention_days: room.retention_days,
        members: room.members.clone(),
    })
}

fn room_from_row(r: &Row<'_>) -> Result<Room> {
    let g = |e: rusqlite::Error| sql_err(e);
    let record: Record = from_json("room record", &r.get::<_, String>(10).map_err(g)?)?;
    Ok(Room {
        room_id: parse(&r.get::<_, String>(0).map_err(g)?)?,
        name: r.get(1).map_err(g)?,
        objective: r.get(2).map_err(g)?,
        visibility_mode: VisibilityMode::parse(&r.get::<_, String>(3).map_err(g)?)?,
        created_at: Timestamp::from_millis(r.get(4).map_err(g)?),
        created_by: UserId::new(r.get::<_, String>(5).map_err(g)?)?,
        tags: from_json("room tags", &r.get::<_, String>(6).map_err(g)?)?,
        status: RoomStatus::parse(&r.get::<_, String>(7).map_err(g)?)?,
        closed_at: r.get::<_, Option<i64>>(8).map_err(g)?.map(Timestamp::from_millis),
        closed_by: r.get::<_, Option<String>>(9).map_err(g)?.map(UserId::new).transpose()?,
        resolution: record.resolution,
        past_resolutions: record.past_resolutions,
        objective_history: record.objective_history,
        markers: record.markers,
        version: r.get::<_, i64>(11).map_err(g)? as u64,
        retention_days: record.retention_days,
        members: record.members,
    })
}

/// The tables holding a room's records, the room's own last.
pub(crate) const PURGED_TABLES: &[&str] = &[
    "finding_vectors",
    "finding_tags",
    "finding_entities",
    "room_tags",
    "findings",
    "identifier_holders",
    "relationships",
    "entities",
    "artifacts",
    "idempotency",
    "events",
    "read_positions",
    "claims",
    "decisions",
    "agent_sessions",
    "rooms",
];

/// Writes a room's row; `already_exists` if the id is taken.
fn insert_room_row(c: &Connection, room: &Room) -> Result<()> {
    exec(
        c,
        &format!("INSERT INTO rooms ({ROOM_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
        params![
            room.room_id.to_string(),
            room.name,
            room.objective,
            room.visibility_mode.as_str(),
            room.created_at.as_millis(),
            room.created_by.as_str(),
            to_json(&room.tags),
            room.status.as_str(),
            room.closed_at.map(|t| t.as_millis()),
            room.closed_by.as_ref().map(|u| u.as_str().to_owned()),
            record_of(room),
            room.version as i64,
        ],
    )
    .map_err(|e| {
        if is_unique_violation(&e) {
            Error::AlreadyExists { what: "room", id: room.room_id.to_string() }
        } else {
            sql_err(e)
        }
    })?;
    Ok(())
}

#[async_trait]
impl RoomStore for SqliteStore {
    async fn purge_room(&self, room_id: RoomId) -> Result<()> {
        self.write(Sync::Durable, move |tx, fx| {
            let room = room_id.to_string();
            // Every table but `meta` (the store's own settings) is keyed by room; the room's
            // row goes last (see the contract).
            for table in PURGED_TABLES {
                exec(tx, &format!("DELETE FROM {table} WHERE room_id = ?"), params![room])
                    .map_err(sql_err)?;
            }
            fx.then(move |caches| {
                lock(&caches.rooms).remove(&room_id);
                lock(&caches.agents).retain(|(r, _), _| *r != room_id);
                caches.keywords.forget(room_id);
                caches.vectors.forget(room_id);
            });
            Ok(())
        })
        .await?;
        // The deleted rows are zeroed in the pages written; older images leave with the WAL.
        self.scrub().await
    }

    async fn restore_room(&self, record: &RoomRecord) -> Result<()> {
        let record = record.clone();
        // One transaction: all of the room or none of it.
        self.write(Sync::Durable, move |tx, fx| {
            let r = &record;
            let room_id = r.room.room_id;
            insert_room_row(tx, &r.room)?;
            for a in &r.agents {
                insert_agent_row(tx, a)?;
            }
            for p in &r.read_positions {
                exec(
                    tx,
                    "INSERT INTO read_positions (room_id, agent_id, seq) VALUES (?, ?, ?)",
                    params![room_id.to_string(), p.agent_id.as_str(), p.seq as i64],
                )
                .map_err(sql_err)?;
            }
            for f in &r.findings {
                insert_finding_rows(tx, f, f.seq as i64)?;
            }
            for e in &r.entities {
                insert_entity_row(tx, e)?;
            }
            for h in &r.identifiers {
                insert_holder_row(tx, room_id, &h.identifier, h.entity_id)?;
            }
            for x in &r.relationships {
                insert_relationship_row(tx, x)?;
            }
            for a in &r.artifacts {
                insert_artifact_row(tx, a)?;
            }
            for c in &r.claims {
                store_claim(tx, c)?;
            }
            for d in &r.decisions {
                insert_decision_row(tx, d)?;
            }
            for e in &r.events {
                insert_event_row(tx, room_id, e.seq, e)?;
            }
            // The counters the next append continues from.
            exec(
                tx,
                "UPDATE rooms SET last_seq = ?, last_finding_at = ?, last_event = ? WHERE room_id = ?",
                params![
                    r.findings.len() as i64,
                    r.findings.last().map(|f| f.created_at.as_millis()),
                    r.events.len() as i64,
                    room_id.to_string()
                ],
            )
            .map_err(sql_err)?;
            let room = r.room.clone();
            fx.then(move |caches| {
                caches.keywords.forget(room_id);
                caches.vectors.forget(room_id);
                lock(&caches.rooms).insert(room_id, (room, Instant::now()));
            });
            Ok(())
        })
        .await
    }

    async fn insert_room(&self, room: &Room) -> Result<()> {
        let room = room.clone();
        self.write(Sync::Durable, move |c, fx| {
            insert_room_row(c, &room)?;
            fx.then(move |caches| {
                lock(&caches.rooms).insert(room.room_id, (room, Instant::now()));
            });
            Ok(())
        })
        .await
    }

    async fn get_room(&self, room_id: RoomId) -> Result<Option<Room>> {
        if let Some((r, at)) = lock(&self.inner.caches.rooms).get(&room_id)
            && at.elapsed() < ROOM_CACHE_TTL
        {
            return Ok(Some(r.clone()));
        }
        let room = self
            .read_small(move |c| {
                let sql = format!("SELECT {ROOM_COLS} FROM rooms WHERE room_id = ?");
                Ok(query_all(c, &sql, &[text(room_id)], room_from_row)?.pop())
            })
            .await?;
        if let Some(r) = &room {
            // Never over a newer record a write put there meanwhile (the writer inserts after
            // commit): versions only move forward.
            let mut rooms = lock(&self.inner.caches.rooms);
            if rooms.get(&room_id).is_none_or(|(cached, _)| cached.version <= r.version) {
                rooms.insert(room_id, (r.clone(), Instant::now()));
            }
        }
        Ok(room)
    }

    async fn update_room(&self, room: &Room, event: &Event) -> Result<bool> {
        let (room, event) = (room.clone(), event.clone());
        self.write(Sync::Durable, move |c, fx| {
            let id = room.room_id.to_string();
            let changed = exec(
                c,
                "UPDATE rooms SET objective = ?, status = ?, closed_at = ?, closed_by = ?, record = ?, version = ?
                 WHERE room_id = ? AND version = ?",
                params![
                    room.objective,
                    room.status.as_str(),
                    room.closed_at.map(|t| t.as_millis()),
                    room.closed_by.as_ref().map(|u| u.as_str().to_owned()),
                    record_of(&room),
                    room.version as i64,
                    id,
                    room.version as i64 - 1,
                ],
            )
            .map_err(sql_err)?;
            if changed == 0 {
                // Changed by someone else (a person's `macp` command on the same database):
                // the retry must read it afresh.
                let stale = room.room_id;
                fx.then(move |caches| {
                    lock(&caches.rooms).remove(&stale);
                });
                let exists = row(c, "SELECT 1 FROM rooms WHERE room_id = ?", params![id], |r| r.get::<_, i64>(0))
                    .optional()
                    .map_err(sql_err)?;
                return match exists {
                    Some(_) => Ok(false),
                    None => Err(Error::not_found("room", &id)),
                };
            }
            append_event(c, room.room_id, &event)?;
            fx.then(move |caches| {
                lock(&caches.rooms).insert(room.room_id, (room, Instant::now()));
            });
            Ok(true)
        })
        .await
    }

    async fn list_rooms(
        &self,
        status: Option<RoomStatus>,
        after: Option<RoomKey>,
        limit: usize,
    ) -> Result<Vec<Room>> {
        self.read(move |c| {
            let mut sql = format!("SELECT {ROOM_COLS} FROM rooms WHERE 1 = 1");
            let mut p = Vec::new();
            if let Some(s) = status {
                sql.push_str(" AND status = ?");
                p.push(text(s.as_str()));
            }
            if let Some(k) = after {
                sql.push_str(" AND (created_at < ? OR (created_at = ? AND room_id < ?))");
                p.push(SqlValue::Integer(k.created_at.as_millis()));
                p.push(SqlValue::Integer(k.created_at.as_millis()));
                p.push(text(k.room_id));
            }
            sql.push_str(" ORDER BY created_at DESC, room_id DESC LIMIT ?");
            p.push(SqlValue::Integer(limit as i64));
            query_all(c, &sql, &p, room_from_row)
        })
        .await
    }
}
