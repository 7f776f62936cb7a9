//! Findings, their commit sequence and the keyword index.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use macp_core::model::{Finding, IndexStatus};
use macp_core::search::keyword::KeywordIndex;
use macp_core::store::{FindingQuery, FindingStats, FindingStore, IdempotencyClaim, KeywordSearch, Write};
use macp_core::{AgentId, Error, FindingId, Result, RoomId, Timestamp, UserId};
use rusqlite::types::Value as SqlValue;
use rusqlite::{OptionalExtension, Row, TransactionBehavior, params};

use crate::db::*;

const FINDING_COLS: &str = "room_id, finding_id, seq, content, agent_id, user_id, tags, entity_refs, evidence, index_status, idempotency_key, created_at";

fn finding_from_row(r: &Row<'_>) -> Result<Finding> {
    let g = |e: rusqlite::Error| sql_err(e);
    Ok(Finding {
        room_id: parse(&r.get::<_, String>(0).map_err(g)?)?,
        finding_id: parse(&r.get::<_, String>(1).map_err(g)?)?,
        seq: r.get::<_, i64>(2).map_err(g)? as u64,
        content: r.get(3).map_err(g)?,
        agent_id: AgentId::new(r.get::<_, String>(4).map_err(g)?)?,
        user_id: UserId::new(r.get::<_, String>(5).map_err(g)?)?,
        tags: from_json("finding tags", &r.get::<_, String>(6).map_err(g)?)?,
        entity_refs: from_json("entity_refs", &r.get::<_, String>(7).map_err(g)?)?,
        evidence: from_json("evidence", &r.get::<_, String>(8).map_err(g)?)?,
        index_status: IndexStatus::parse(&r.get::<_, String>(9).map_err(g)?)?,
        idempotency_key: r.get(10).map_err(g)?,
        created_at: Timestamp::from_millis(r.get(11).map_err(g)?),
    })
}

#[async_trait]
impl FindingStore for SqliteStore {
    async fn append_finding(&self, f: &Finding, claim: Option<&IdempotencyClaim>) -> Result<Write<Finding>> {
        let (f, claim) = (f.clone(), claim.cloned());
        let inner = self.inner.clone();
        self.write(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql_err)?;
            let room = f.room_id.to_string();
            if let Some(rec) = existing_claim(&tx, &room, claim.as_ref())? {
                return Ok(Write::Replayed(rec));
            }
            // The sequence is bumped inside the write transaction, so seq order is commit order.
            let seq: i64 = tx
                .query_row(
                    "UPDATE rooms SET last_seq = last_seq + 1 WHERE room_id = ? RETURNING last_seq",
                    params![room],
                    |r| r.get(0),
                )
                .optional()
                .map_err(sql_err)?
                .ok_or_else(|| Error::not_found("room", &room))?;
            tx.execute(
                &format!("INSERT INTO findings ({FINDING_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
                params![
                    room,
                    f.finding_id.to_string(),
                    seq,
                    f.content,
                    f.agent_id.as_str(),
                    f.user_id.as_str(),
                    to_json(&f.tags),
                    to_json(&f.entity_refs),
                    to_json(&f.evidence),
                    f.index_status.as_str(),
                    f.idempotency_key,
                    f.created_at.as_millis(),
                ],
            )
            .map_err(sql_err)?;
            let rowid = tx.last_insert_rowid();
            for t in &f.tags {
                tx.execute(
                    "INSERT INTO finding_tags (room_id, tag, seq) VALUES (?, ?, ?)",
                    params![room, t, seq],
                )
                .map_err(sql_err)?;
            }
            tx.execute("INSERT INTO findings_fts (rowid, content) VALUES (?, ?)", params![rowid, f.content])
                .map_err(sql_err)?;
            record_claim(&tx, &room, claim.as_ref())?;
            tx.commit().map_err(sql_err)?;
            // Still under the writer lock: cache updates apply in commit order.
            let mut cache = lock(&inner.keywords);
            cache.generation += 1;
            if let Some(ix) = cache.rooms.get_mut(&f.room_id) {
                Arc::make_mut(ix).add(f.finding_id, &f.content);
            }
            drop(cache);
            let mut stored = f;
            stored.seq = seq as u64;
            Ok(Write::Applied(stored))
        })
        .await
    }

    async fn get_findings(&self, room_id: RoomId, ids: &[FindingId]) -> Result<Vec<Finding>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<SqlValue> = ids.iter().map(text).collect();
        self.read(move |c| {
            // `+room_id` keeps the planner on the finding_id index: a lookup of a few ids must not
            // become a scan of the room through the (room_id, seq) index.
            let sql = format!(
                "SELECT {FINDING_COLS} FROM findings WHERE +room_id = ? AND finding_id IN {}",
                placeholders(ids.len())
            );
            let mut p = vec![text(room_id)];
            p.extend(ids);
            query_all(c, &sql, &p, finding_from_row)
        })
        .await
    }

    async fn list_findings(&self, room_id: RoomId, q: &FindingQuery) -> Result<Vec<Finding>> {
        let q = q.clone();
        self.read(move |c| {
            let mut sql = format!("SELECT {FINDING_COLS} FROM findings WHERE room_id = ? AND seq > ?");
            let mut p = vec![text(room_id), SqlValue::Integer(q.after_seq as i64)];
            if let Some(b) = q.before_seq {
                sql.push_str(" AND seq < ?");
                p.push(SqlValue::Integer(b as i64));
            }
            if !q.tags_any.is_empty() {
                sql.push_str(&format!(
                    " AND seq IN (SELECT seq FROM finding_tags WHERE room_id = ? AND tag IN {})",
                    placeholders(q.tags_any.len())
                ));
                p.push(text(room_id));
                p.extend(q.tags_any.iter().map(text));
            }
            if let Some(a) = &q.agent_id {
                sql.push_str(" AND agent_id = ?");
                p.push(text(a));
            }
            if let Some(t) = q.since {
                sql.push_str(" AND created_at >= ?");
                p.push(SqlValue::Integer(t.as_millis()));
            }
            if let Some(t) = q.until {
                sql.push_str(" AND created_at < ?");
                p.push(SqlValue::Integer(t.as_millis()));
            }
            sql.push_str(if q.descending {
                " ORDER BY seq DESC LIMIT ?"
            } else {
                " ORDER BY seq ASC LIMIT ?"
            });
            p.push(SqlValue::Integer(q.limit as i64));
            query_all(c, &sql, &p, finding_from_row)
        })
        .await
    }

    async fn set_index_status(
        &self,
        room_id: RoomId,
        finding_id: FindingId,
        status: IndexStatus,
    ) -> Result<()> {
        self.write(move |c| {
            let n = c
                .execute(
                    "UPDATE findings SET index_status = ? WHERE room_id = ? AND finding_id = ?",
                    params![status.as_str(), room_id.to_string(), finding_id.to_string()],
                )
                .map_err(sql_err)?;
            if n == 0 {
                return Err(Error::not_found("finding", finding_id));
            }
            Ok(())
        })
        .await
    }

    async fn pending_findings(&self, created_before: Timestamp, limit: usize) -> Result<Vec<Finding>> {
        self.read(move |c| {
            let sql = format!(
                "SELECT {FINDING_COLS} FROM findings WHERE index_status = 'pending' AND created_at < ?
                 ORDER BY created_at, finding_id LIMIT ?"
            );
            query_all(
                c,
                &sql,
                &[SqlValue::Integer(created_before.as_millis()), SqlValue::Integer(limit as i64)],
                finding_from_row,
            )
        })
        .await
    }

    async fn mark_all_pending(&self) -> Result<u64> {
        self.write(|c| {
            c.execute("UPDATE findings SET index_status = 'pending' WHERE index_status <> 'pending'", [])
                .map(|n| n as u64)
                .map_err(sql_err)
        })
        .await
    }

    async fn finding_stats(&self, room_id: RoomId) -> Result<FindingStats> {
        self.read(move |c| {
            let room = room_id.to_string();
            let (total, last_seq, last_at): (i64, Option<i64>, Option<i64>) = c
                .query_row(
                    "SELECT count(*), max(seq), (SELECT created_at FROM findings WHERE room_id = ?1 ORDER BY seq DESC LIMIT 1)
                     FROM findings WHERE room_id = ?1",
                    params![room],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .map_err(sql_err)?;
            let mut tag_counts = BTreeMap::new();
            let mut stmt = c
                .prepare_cached("SELECT tag, count(*) FROM finding_tags WHERE room_id = ? GROUP BY tag")
                .map_err(sql_err)?;
            let rows = stmt
                .query_map(params![room], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
                .map_err(sql_err)?;
            for row in rows {
                let (t, n) = row.map_err(sql_err)?;
                tag_counts.insert(t, n as u64);
            }
            Ok(FindingStats {
                total: total as u64,
                last_seq: last_seq.unwrap_or(0) as u64,
                last_created_at: last_at.map(Timestamp::from_millis),
                tag_counts,
            })
        })
        .await
    }

    async fn keyword_search(&self, room_id: RoomId, query: &str, limit: usize) -> Result<KeywordSearch> {
        let index = self.room_keywords(room_id).await?;
        let query = query.to_owned();
        tokio::task::spawn_blocking(move || index.search(&query, limit))
            .await
            .map_err(|e| Error::backend("sqlite", true, format!("keyword task failed: {e}"), None))
    }
}

/// Per-room in-memory keyword indexes (see [`macp_core::search::keyword`]), loaded from the
/// findings table on first use and kept current by appends. The generation counter tells a
/// loader whether an append raced its read; its snapshot is then used once and not cached.
#[derive(Debug, Default)]
pub(crate) struct KeywordCache {
    rooms: std::collections::HashMap<RoomId, Arc<KeywordIndex>>,
    generation: u64,
}

impl SqliteStore {
    async fn room_keywords(&self, room_id: RoomId) -> Result<Arc<KeywordIndex>> {
        let generation = {
            let cache = lock(&self.inner.keywords);
            if let Some(ix) = cache.rooms.get(&room_id) {
                return Ok(ix.clone());
            }
            cache.generation
        };
        let loaded = self
            .read(move |c| {
                let mut ix = KeywordIndex::new();
                let mut stmt = c
                    .prepare_cached("SELECT finding_id, content FROM findings WHERE room_id = ? ORDER BY seq")
                    .map_err(sql_err)?;
                let mut rows = stmt.query(params![room_id.to_string()]).map_err(sql_err)?;
                while let Some(r) = rows.next().map_err(sql_err)? {
                    let id: FindingId = parse(&r.get::<_, String>(0).map_err(sql_err)?)?;
                    ix.add(id, &r.get::<_, String>(1).map_err(sql_err)?);
                }
                Ok(Arc::new(ix))
            })
            .await?;
        let mut cache = lock(&self.inner.keywords);
        if cache.generation == generation {
            cache.rooms.insert(room_id, loaded.clone());
        }
        Ok(loaded)
    }
}
