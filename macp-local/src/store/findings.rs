//! Findings, their commit sequence and the keyword index.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use macp_core::model::{Erasure, Event, Finding, IndexStatus, VerdictKind};
use macp_core::search::VectorRecord;
use macp_core::search::image::{ImageReader, ImageWriter};
use macp_core::search::keyword::KeywordIndex;
use macp_core::store::{FindingQuery, FindingStats, FindingStore, IdempotencyKey, KeywordSearch, Write};
use macp_core::{AgentId, Error, FindingId, Result, RoomId, Timestamp, UserId};
use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::db::*;
use crate::indexes::RoomIndex;
use crate::store::append_event;
use crate::store::search::put_vectors;
use crate::writer::{Effects, Sync};

const FINDING_COLS: &str = "room_id, finding_id, seq, content, agent_id, user_id, tags, entity_refs, evidence, \
     index_status, idempotency_key, created_at, reply_to, mentions, hypothesis, verdict, standing, erased";

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
        reply_to: r.get::<_, Option<String>>(12).map_err(g)?.map(|s| parse(&s)).transpose()?,
        mentions: from_json("mentions", &r.get::<_, String>(13).map_err(g)?)?,
        hypothesis: r.get::<_, i64>(14).map_err(g)? != 0,
        verdict: r.get::<_, Option<String>>(15).map_err(g)?.map(|v| VerdictKind::parse(&v)).transpose()?,
        standing: r
            .get::<_, Option<String>>(16)
            .map_err(g)?
            .map(|j| from_json("standing", &j))
            .transpose()?,
        erased: r.get::<_, Option<String>>(17).map_err(g)?.map(|j| from_json("erased", &j)).transpose()?,
    })
}

#[async_trait]
impl FindingStore for SqliteStore {
    async fn append_finding(
        &self,
        f: &Finding,
        idempotency: Option<&IdempotencyKey>,
        event: &Event,
    ) -> Result<Write<Finding>> {
        let (f, idempotency, event) = (f.clone(), idempotency.cloned(), event.clone());
        self.write(Sync::Durable, move |tx, fx| append(tx, f, idempotency.as_ref(), &event, fx)).await
    }

    async fn append_finding_with_vector(
        &self,
        f: &Finding,
        idempotency: Option<&IdempotencyKey>,
        vector: &VectorRecord,
        event: &Event,
    ) -> Result<Option<Write<Finding>>> {
        let (f, idempotency, vector, event) =
            (f.clone(), idempotency.cloned(), vector.clone(), event.clone());
        self.write(Sync::Durable, move |tx, fx| {
            let out = append(tx, f, idempotency.as_ref(), &event, fx)?;
            if let Write::Applied(_) = out {
                put_vectors(tx, vec![vector], fx)?;
            }
            Ok(Some(out))
        })
        .await
    }

    async fn erase_finding(
        &self,
        room_id: RoomId,
        finding_id: FindingId,
        erasure: &Erasure,
        event: &Event,
    ) -> Result<Option<Finding>> {
        let (erasure, event) = (erasure.clone(), event.clone());
        let out = self
            .write(Sync::Durable, move |tx, fx| {
                let (room, id) = (room_id.to_string(), finding_id.to_string());
                let found = tx
                    .prepare_cached(&format!(
                        "SELECT {FINDING_COLS} FROM findings WHERE room_id = ? AND finding_id = ?"
                    ))
                    .and_then(|mut st| {
                        st.query_row(params![room, id], |r| Ok(finding_from_row(r))).optional()
                    })
                    .map_err(sql_err)?
                    .transpose()?;
                let Some(mut f) = found else { return Ok(None) };
                if !f.erase(&erasure) {
                    return Ok(Some((f, false)));
                }
                exec(
                    tx,
                    "UPDATE findings SET content = ?, evidence = ?, erased = ?, index_status = ?
                     WHERE room_id = ? AND finding_id = ?",
                    params![
                        f.content,
                        to_json(&f.evidence),
                        to_json(&erasure),
                        f.index_status.as_str(),
                        room,
                        id
                    ],
                )
                .map_err(sql_err)?;
                exec(
                    tx,
                    "UPDATE events SET summary = ? WHERE room_id = ? AND finding_id = ?",
                    params![Event::summary_of(&f.content), room, id],
                )
                .map_err(sql_err)?;
                append_event(tx, room_id, &event)?;
                fx.then(move |caches| caches.keywords.apply(room_id, KeywordOp::Remove(finding_id)));
                Ok(Some((f, true)))
            })
            .await?;
        let Some((f, _)) = out else { return Ok(None) };
        // Again for one erased before: finishes an erasure whose scrub was cut short.
        self.scrub().await?;
        Ok(Some(f))
    }

    async fn get_findings(&self, room_id: RoomId, ids: &[FindingId]) -> Result<Vec<Finding>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<SqlValue> = ids.iter().map(text).collect();
        self.read_small(move |c| {
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
        // A page read along the sequence is bounded by its limit; a filtered one may scan far.
        let plain = q.tags_any.is_empty()
            && q.agent_id.is_none()
            && q.reply_to.is_none()
            && q.entity_refs_any.is_empty()
            && q.since.is_none()
            && q.until.is_none()
            && q.limit <= 1000;
        let q = q.clone();
        let read = move |c: &Connection| {
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
            if let Some(r) = q.reply_to {
                sql.push_str(" AND reply_to = ?");
                p.push(text(r));
            }
            if !q.entity_refs_any.is_empty() {
                sql.push_str(&format!(
                    " AND seq IN (SELECT seq FROM finding_entities WHERE room_id = ? AND entity_id IN {})",
                    placeholders(q.entity_refs_any.len())
                ));
                p.push(text(room_id));
                p.extend(q.entity_refs_any.iter().map(text));
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
        };
        if plain { self.read_small(read).await } else { self.read(read).await }
    }

    async fn set_index_status(
        &self,
        room_id: RoomId,
        finding_id: FindingId,
        status: IndexStatus,
    ) -> Result<()> {
        // Marking a finding indexed is derived state: lost in a crash, the finding is pending
        // again and the reconciler indexes it once more. Marking it pending must last.
        let sync = if status == IndexStatus::Indexed { Sync::Lazy } else { Sync::Durable };
        self.write(sync, move |c, _| {
            let n = c
                .prepare_cached("UPDATE findings SET index_status = ? WHERE room_id = ? AND finding_id = ?")
                .and_then(|mut st| {
                    st.execute(params![status.as_str(), room_id.to_string(), finding_id.to_string()])
                })
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
        self.write(Sync::Durable, |c, _| {
            exec(c, "UPDATE findings SET index_status = 'pending' WHERE index_status <> 'pending' AND erased IS NULL", [])
                .map(|n| n as u64)
                .map_err(sql_err)
        })
        .await
    }

    async fn finding_stats(&self, room_id: RoomId) -> Result<FindingStats> {
        // Counters kept by each append: no scan of the room's findings. Findings are never
        // deleted one by one, so the gap-free sequence's last number is also their count.
        self.read_small(move |c| {
            let room = room_id.to_string();
            let (last_seq, last_at): (i64, Option<i64>) = c
                .prepare_cached("SELECT last_seq, last_finding_at FROM rooms WHERE room_id = ?")
                .and_then(|mut st| st.query_row(params![room], |r| Ok((r.get(0)?, r.get(1)?))).optional())
                .map_err(sql_err)?
                .unwrap_or((0, None));
            let mut tag_counts = BTreeMap::new();
            let mut stmt =
                c.prepare_cached("SELECT tag, findings FROM room_tags WHERE room_id = ?").map_err(sql_err)?;
            let rows = stmt
                .query_map(params![room], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
                .map_err(sql_err)?;
            for row in rows {
                let (t, n) = row.map_err(sql_err)?;
                tag_counts.insert(t, n as u64);
            }
            Ok(FindingStats {
                total: last_seq as u64,
                last_seq: last_seq as u64,
                last_created_at: last_at.map(Timestamp::from_millis),
                tag_counts,
            })
        })
        .await
    }

    async fn keyword_search(
        &self,
        room_id: RoomId,
        query: &str,
        limit: usize,
    ) -> Result<Option<KeywordSearch>> {
        let index = self.room_keywords(room_id).await?;
        // A small room is scored at once; a large one off the async workers.
        if index.index.len() < 20_000 {
            return Ok(Some(index.index.search(query, limit)));
        }
        let query = query.to_owned();
        tokio::task::spawn_blocking(move || Some(index.index.search(&query, limit)))
            .await
            .map_err(|e| Error::backend("sqlite", true, format!("keyword task failed: {e}"), None))
    }
}

/// Writes a finding's rows at `seq` (its own `seq` is ignored): the finding, its tags with the
/// room's tag counts, and which entities it names. The room's counters are the caller's.
pub(crate) fn insert_finding_rows(tx: &Connection, f: &Finding, seq: i64) -> Result<()> {
    let room = f.room_id.to_string();
    tx.prepare_cached(&format!(
        "INSERT INTO findings ({FINDING_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    ))
    .and_then(|mut st| {
        st.execute(params![
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
            f.reply_to.map(|r| r.to_string()),
            to_json(&f.mentions),
            f.hypothesis as i64,
            f.verdict.map(|v| v.as_str()),
            f.standing.as_ref().map(to_json),
            f.erased.as_ref().map(to_json),
        ])
    })
    .map_err(sql_err)?;
    for t in &f.tags {
        tx.prepare_cached("INSERT INTO finding_tags (room_id, tag, seq) VALUES (?, ?, ?)")
            .and_then(|mut st| st.execute(params![room, t, seq]))
            .map_err(sql_err)?;
        tx.prepare_cached(
            "INSERT INTO room_tags (room_id, tag, findings) VALUES (?, ?, 1)
             ON CONFLICT (room_id, tag) DO UPDATE SET findings = findings + 1",
        )
        .and_then(|mut st| st.execute(params![room, t]))
        .map_err(sql_err)?;
    }
    for e in &f.entity_refs {
        tx.prepare_cached(
            "INSERT OR IGNORE INTO finding_entities (room_id, entity_id, seq) VALUES (?, ?, ?)",
        )
        .and_then(|mut st| st.execute(params![room, e.to_string(), seq]))
        .map_err(sql_err)?;
    }
    Ok(())
}

/// Appends a finding inside the caller's transaction (see [`FindingStore::append_finding`]).
fn append(
    tx: &Connection,
    f: Finding,
    idempotency: Option<&IdempotencyKey>,
    event: &Event,
    fx: &mut Effects,
) -> Result<Write<Finding>> {
    let room = f.room_id.to_string();
    if let Some(rec) = existing_key(tx, &room, idempotency)? {
        return Ok(Write::Replayed(rec));
    }
    // The sequence is bumped inside the write transaction, so seq order is commit order.
    let seq: i64 = tx
        .prepare_cached(
            "UPDATE rooms SET last_seq = last_seq + 1, last_finding_at = ? WHERE room_id = ? RETURNING last_seq",
        )
        .and_then(|mut st| st.query_row(params![f.created_at.as_millis(), room], |r| r.get(0)).optional())
        .map_err(sql_err)?
        .ok_or_else(|| Error::not_found("room", &room))?;
    insert_finding_rows(tx, &f, seq)?;
    if let Some((on, standing)) = f.standing_given() {
        tx.prepare_cached("UPDATE findings SET standing = ? WHERE room_id = ? AND finding_id = ?")
            .and_then(|mut st| st.execute(params![to_json(&standing), room, on.to_string()]))
            .map_err(sql_err)?;
    }
    append_event(tx, f.room_id, event)?;
    record_key(tx, &room, idempotency)?;
    let mut stored = f;
    stored.seq = seq as u64;
    let added = KeywordOp::Add(stored.seq, stored.finding_id, stored.content.clone());
    let room_id = stored.room_id;
    fx.then(move |caches| caches.keywords.apply(room_id, added));
    Ok(Write::Applied(stored))
}

/// A room's keyword index (see [`macp_core::search::keyword`]) and the last finding it holds.
#[derive(Debug, Clone, Default)]
pub(crate) struct RoomKeywords {
    index: KeywordIndex,
    last_seq: u64,
}

/// A committed change to a room's findings, as the keyword index sees it.
pub(crate) enum KeywordOp {
    /// A finding: `(seq, id, content)`.
    Add(u64, FindingId, String),
    /// An erased finding.
    Remove(FindingId),
}

impl RoomKeywords {
    /// Writes the index and the last finding it holds (see [`crate::snapshot`]).
    pub(crate) fn write_image(&self, w: &mut ImageWriter) {
        w.u64(self.last_seq);
        self.index.write_image(w);
    }

    /// What [`write_image`](Self::write_image) wrote, or `None` for anything else.
    pub(crate) fn read_image(r: &mut ImageReader<'_>) -> Option<Self> {
        let last_seq = r.u64()?;
        Some(Self { last_seq, index: KeywordIndex::read_image(r)? })
    }
}

impl RoomIndex for RoomKeywords {
    type Op = KeywordOp;

    fn apply(&mut self, op: KeywordOp) {
        match op {
            // Findings arrive in commit order; one the load already read is skipped.
            KeywordOp::Add(seq, id, content) if seq > self.last_seq => {
                self.index.add(id, &content);
                self.last_seq = seq;
            }
            KeywordOp::Add(..) => {}
            KeywordOp::Remove(id) => {
                self.index.remove(id);
            }
        }
    }
}

impl SqliteStore {
    /// The room's keyword index, loaded from the findings table on first use.
    pub(crate) async fn room_keywords(&self, room_id: RoomId) -> Result<Arc<RoomKeywords>> {
        let store = self.clone();
        self.inner
            .caches
            .keywords
            .get(room_id, move || async move { store.load_keywords(room_id).await })
            .await
    }

    async fn load_keywords(&self, room_id: RoomId) -> Result<RoomKeywords> {
        self.read(move |c| {
            let mut ix = RoomKeywords::default();
            let mut stmt = c
                .prepare_cached(
                    "SELECT seq, finding_id, content, erased IS NOT NULL FROM findings WHERE room_id = ? ORDER BY seq",
                )
                .map_err(sql_err)?;
            let mut rows = stmt.query(params![room_id.to_string()]).map_err(sql_err)?;
            while let Some(r) = rows.next().map_err(sql_err)? {
                let seq = r.get::<_, i64>(0).map_err(sql_err)? as u64;
                let id: FindingId =
                    parse(r.get_ref(1).map_err(sql_err)?.as_str().map_err(|e| sql_err(e.into()))?)?;
                let content = r.get_ref(2).map_err(sql_err)?.as_str().map_err(|e| sql_err(e.into()))?;
                let erased = r.get::<_, bool>(3).map_err(sql_err)?;
                ix.index.add_stored(id, content, erased);
                ix.last_seq = seq;
            }
            Ok(ix)
        })
        .await
    }
}
