//! Protocol sessions, one row each; the rooms a session joined as a JSON object.

use std::collections::BTreeMap;

use async_trait::async_trait;
use macp_core::store::{SessionRecord, SessionStore};
use macp_core::{AgentId, Result, RoomId, Timestamp};
use rusqlite::{OptionalExtension, params};

use crate::db::*;
use crate::writer::Sync;

#[async_trait]
impl SessionStore for SqliteStore {
    async fn put_session(&self, record: &SessionRecord) -> Result<bool> {
        let r = record.clone();
        // Durable: a client told its session is open must find it after a crash.
        self.write(Sync::Durable, move |tx, _| {
            let n = exec(
                tx,
                "INSERT INTO protocol_sessions (key, opening, joined, expires_at, keep_until, ended)
                 VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING",
                params![
                    r.key,
                    r.opening,
                    to_json(&r.joined),
                    r.expires_at.as_millis(),
                    r.keep_until.as_millis(),
                    r.ended
                ],
            )
            .map_err(sql_err)?;
            Ok(n == 1)
        })
        .await
    }

    async fn get_session(&self, key: &str) -> Result<Option<SessionRecord>> {
        let key = key.to_owned();
        self.read_small(move |c| {
            let found = row(
                c,
                "SELECT opening, joined, expires_at, keep_until, ended FROM protocol_sessions WHERE key = ?",
                [&key],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, i64>(2)?,
                        r.get::<_, i64>(3)?,
                        r.get::<_, bool>(4)?,
                    ))
                },
            )
            .optional()
            .map_err(sql_err)?;
            let Some((opening, joined, expires_at, keep_until, ended)) = found else { return Ok(None) };
            let joined: BTreeMap<RoomId, AgentId> = from_json("session", &joined)?;
            let (expires_at, keep_until) =
                (Timestamp::from_millis(expires_at), Timestamp::from_millis(keep_until));
            Ok(Some(SessionRecord { key, opening, joined, expires_at, keep_until, ended }))
        })
        .await
    }

    async fn extend_session(
        &self,
        key: &str,
        join: Option<(RoomId, &AgentId)>,
        now: Timestamp,
        expires_at: Timestamp,
        keep_until: Timestamp,
    ) -> Result<bool> {
        let key = key.to_owned();
        let join = join.map(|(room, agent)| (room.to_string(), agent.as_str().to_owned()));
        // A join is durable (the client was told it joined); keeping a session alive is not
        // worth an fsync: after a crash it ends up to a quarter of the idle time early at worst.
        let sync = if join.is_some() { Sync::Durable } else { Sync::Lazy };
        self.write(sync, move |tx, _| {
            let (now, expires_at, keep_until) = (now.as_millis(), expires_at.as_millis(), keep_until.as_millis());
            let n = match &join {
                Some((room, agent)) => exec(
                    tx,
                    "UPDATE protocol_sessions SET joined = json_set(joined, '$.' || json_quote(?), ?), expires_at = ?,
                         keep_until = ?
                     WHERE key = ? AND ended = 0 AND expires_at > ?",
                    params![room, agent, expires_at, keep_until, key, now],
                ),
                None => exec(
                    tx,
                    "UPDATE protocol_sessions SET expires_at = ?, keep_until = ?
                     WHERE key = ? AND ended = 0 AND expires_at > ?",
                    params![expires_at, keep_until, key, now],
                ),
            }
            .map_err(sql_err)?;
            Ok(n == 1)
        })
        .await
    }

    async fn end_session(&self, key: &str, now: Timestamp, keep_until: Timestamp) -> Result<()> {
        let key = key.to_owned();
        // Durable: a session ended must stay ended after a crash.
        self.write(Sync::Durable, move |tx, _| {
            exec(
                tx,
                "UPDATE protocol_sessions SET ended = 1, expires_at = min(expires_at, ?), keep_until = ?
                 WHERE key = ?",
                params![now.as_millis(), keep_until.as_millis(), key],
            )
            .map_err(sql_err)?;
            Ok(())
        })
        .await
    }

    async fn purge_sessions(&self, now: Timestamp, limit: usize) -> Result<usize> {
        self.write(Sync::Lazy, move |tx, _| {
            exec(
                tx,
                "DELETE FROM protocol_sessions WHERE key IN
                     (SELECT key FROM protocol_sessions WHERE keep_until <= ? LIMIT ?)",
                params![now.as_millis(), limit as i64],
            )
            .map_err(sql_err)
        })
        .await
    }
}
