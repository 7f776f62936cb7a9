//! Claims on work.

use async_trait::async_trait;
use macp_core::model::{Claim, Event};
use macp_core::store::{ClaimOutcome, ClaimStore};
use macp_core::{AgentId, Result, RoomId, Timestamp};
use rusqlite::{Connection, params};

use crate::db::*;
use crate::store::append_event;
use crate::writer::Sync;

fn claim_in(tx: &Connection, room: &str, key: &str) -> Result<Option<Claim>> {
    let docs = query_all(
        tx,
        "SELECT doc FROM claims WHERE room_id = ? AND key = ?",
        &[text(room), text(key)],
        |r| from_json("claim", &r.get::<_, String>(0).map_err(sql_err)?),
    )?;
    Ok(docs.into_iter().next())
}

pub(crate) fn store_claim(tx: &Connection, c: &Claim) -> Result<()> {
    exec(
        tx,
        "INSERT INTO claims (room_id, key, agent_id, expires_at, released_at, claimed_at, doc) VALUES (?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (room_id, key) DO UPDATE SET agent_id = excluded.agent_id, expires_at = excluded.expires_at,
             released_at = excluded.released_at, claimed_at = excluded.claimed_at, doc = excluded.doc",
        params![
            c.room_id.to_string(),
            c.key,
            c.agent_id.as_str(),
            c.expires_at.as_millis(),
            c.released_at.map(|t| t.as_millis()),
            c.claimed_at.as_millis(),
            to_json(c),
        ],
    )
    .map_err(sql_err)?;
    Ok(())
}

#[async_trait]
impl ClaimStore for SqliteStore {
    async fn put_claim(&self, claim: &Claim, now: Timestamp, event: &Event) -> Result<ClaimOutcome> {
        let (claim, event) = (claim.clone(), event.clone());
        self.write(Sync::Durable, move |tx, _| {
            let room = claim.room_id.to_string();
            if let Some(held) = claim_in(tx, &room, &claim.key)?
                && held.blocks(&claim.agent_id, now)
            {
                return Ok(ClaimOutcome::Held(held));
            }
            store_claim(tx, &claim)?;
            append_event(tx, claim.room_id, &event)?;
            Ok(ClaimOutcome::Claimed(claim))
        })
        .await
    }

    async fn release_claim(
        &self,
        room_id: RoomId,
        key: &str,
        agent_id: &AgentId,
        now: Timestamp,
        event: &Event,
    ) -> Result<Option<Claim>> {
        let (key, agent_id, event) = (key.to_owned(), agent_id.clone(), event.clone());
        self.write(Sync::Durable, move |tx, _| {
            let Some(mut c) = claim_in(tx, &room_id.to_string(), &key)? else { return Ok(None) };
            if !c.is_held_by(&agent_id, now) {
                return Ok(None);
            }
            c.released_at = Some(now);
            store_claim(tx, &c)?;
            append_event(tx, room_id, &event)?;
            Ok(Some(c))
        })
        .await
    }

    async fn list_claims(&self, room_id: RoomId, now: Timestamp) -> Result<Vec<Claim>> {
        self.read_small(move |c| {
            query_all(
                c,
                "SELECT doc FROM claims WHERE room_id = ? AND released_at IS NULL AND expires_at > ?
                 ORDER BY claimed_at, key",
                &[text(room_id), rusqlite::types::Value::Integer(now.as_millis())],
                |r| from_json("claim", &r.get::<_, String>(0).map_err(sql_err)?),
            )
        })
        .await
    }
}
