//! Agents present in a room.

use async_trait::async_trait;
use macp_core::model::{AgentSession, AgentStatus, Event};
use macp_core::store::{AgentStore, AgentUpdate, Insert};
use macp_core::{AgentId, Result, RoomId, Timestamp, UserId};
use rusqlite::{Connection, Row, params};

use crate::db::*;
use crate::store::append_event;
use crate::writer::Sync;

const AGENT_COLS: &str = "room_id, agent_id, user_id, joined_at, last_active, agent_type, agent_status, status_reason, status_updated_at";

fn agent_from_row(r: &Row<'_>) -> Result<AgentSession> {
    let g = |e: rusqlite::Error| sql_err(e);
    Ok(AgentSession {
        room_id: parse(&r.get::<_, String>(0).map_err(g)?)?,
        agent_id: AgentId::new(r.get::<_, String>(1).map_err(g)?)?,
        user_id: UserId::new(r.get::<_, String>(2).map_err(g)?)?,
        joined_at: Timestamp::from_millis(r.get(3).map_err(g)?),
        last_active: Timestamp::from_millis(r.get(4).map_err(g)?),
        agent_type: r.get(5).map_err(g)?,
        agent_status: AgentStatus::parse(&r.get::<_, String>(6).map_err(g)?)?,
        status_reason: r.get(7).map_err(g)?,
        status_updated_at: Timestamp::from_millis(r.get(8).map_err(g)?),
        unread: None,
    })
}

/// Writes an agent's row (a join, or a restore).
pub(crate) fn insert_agent_row(c: &Connection, s: &AgentSession) -> Result<()> {
    exec(
        c,
        &format!("INSERT INTO agent_sessions ({AGENT_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"),
        params![
            s.room_id.to_string(),
            s.agent_id.as_str(),
            s.user_id.as_str(),
            s.joined_at.as_millis(),
            s.last_active.as_millis(),
            s.agent_type,
            s.agent_status.as_str(),
            s.status_reason,
            s.status_updated_at.as_millis(),
        ],
    )
    .map_err(sql_err)?;
    Ok(())
}

#[async_trait]
impl AgentStore for SqliteStore {
    async fn insert_agent(&self, s: &AgentSession, event: &Event) -> Result<Insert<AgentSession>> {
        let (s, event) = (s.clone(), event.clone());
        self.write(Sync::Durable, move |c, fx| {
            let sql = format!("SELECT {AGENT_COLS} FROM agent_sessions WHERE room_id = ? AND agent_id = ?");
            if let Some(existing) =
                query_all(c, &sql, &[text(s.room_id), text(&s.agent_id)], agent_from_row)?.pop()
            {
                return Ok(Insert::Existing(existing));
            }
            insert_agent_row(c, &s)?;
            append_event(c, s.room_id, &event)?;
            let cached = s.clone();
            fx.then(move |caches| {
                lock(&caches.agents).insert((cached.room_id, cached.agent_id.clone()), cached);
            });
            Ok(Insert::Inserted(s))
        })
        .await
    }

    async fn get_agent(&self, room_id: RoomId, agent_id: &AgentId) -> Result<Option<AgentSession>> {
        let key = (room_id, agent_id.clone());
        if let Some(a) = lock(&self.inner.caches.agents).get(&key) {
            return Ok(Some(a.clone()));
        }
        let agent_id = agent_id.clone();
        let agent = self
            .read_small(move |c| {
                let sql =
                    format!("SELECT {AGENT_COLS} FROM agent_sessions WHERE room_id = ? AND agent_id = ?");
                Ok(query_all(c, &sql, &[text(room_id), text(agent_id)], agent_from_row)?.pop())
            })
            .await?;
        if let Some(a) = &agent {
            // Never over a newer row a write put there meanwhile (the writer inserts after commit).
            lock(&self.inner.caches.agents).entry(key).or_insert_with(|| a.clone());
        }
        Ok(agent)
    }

    async fn list_agents(&self, room_id: RoomId) -> Result<Vec<AgentSession>> {
        self.read_small(move |c| {
            let sql = format!(
                "SELECT {AGENT_COLS} FROM agent_sessions WHERE room_id = ? ORDER BY joined_at, agent_id"
            );
            query_all(c, &sql, &[text(room_id)], agent_from_row)
        })
        .await
    }

    async fn update_agent(
        &self,
        room_id: RoomId,
        agent_id: &AgentId,
        u: &AgentUpdate,
        event: Option<&Event>,
    ) -> Result<Option<AgentSession>> {
        let (agent_id, u, event) = (agent_id.clone(), u.clone(), event.cloned());
        // Refreshing `last_active` alone is advisory: it need not wait for an fsync.
        let sync = if u.agent_type.is_none() && u.status.is_none() && event.is_none() {
            Sync::Lazy
        } else {
            Sync::Durable
        };
        self.write(sync, move |tx, fx| {
            let (r, a) = (room_id.to_string(), agent_id.to_string());
            if let Some(t) = u.last_active {
                exec(tx,
                    "UPDATE agent_sessions SET last_active = max(last_active, ?) WHERE room_id = ? AND agent_id = ?",
                    params![t.as_millis(), r, a],
                )
                .map_err(sql_err)?;
            }
            if let Some(t) = &u.agent_type {
                exec(tx,
                    "UPDATE agent_sessions SET agent_type = ? WHERE room_id = ? AND agent_id = ?",
                    params![t, r, a],
                )
                .map_err(sql_err)?;
            }
            if let Some((status, reason, at)) = &u.status {
                exec(tx,
                    "UPDATE agent_sessions SET agent_status = ?, status_reason = ?, status_updated_at = ? WHERE room_id = ? AND agent_id = ?",
                    params![status.as_str(), reason, at.as_millis(), r, a],
                )
                .map_err(sql_err)?;
            }
            let sql = format!("SELECT {AGENT_COLS} FROM agent_sessions WHERE room_id = ? AND agent_id = ?");
            let out = query_all(tx, &sql, &[text(&r), text(&a)], agent_from_row)?.pop();
            if let (Some(_), Some(e)) = (&out, &event) {
                append_event(tx, room_id, e)?;
            }
            if let Some(s) = out.clone() {
                fx.then(move |caches| {
                    lock(&caches.agents).insert((s.room_id, s.agent_id.clone()), s);
                });
            }
            Ok(out)
        })
        .await
    }
}
