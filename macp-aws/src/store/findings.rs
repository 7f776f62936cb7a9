//! Findings and their per-room commit sequence.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
use macp_core::model::{Erasure, Event, Finding, IndexStatus};
use macp_core::search::keyword::KeywordIndex;
use macp_core::store::{FindingQuery, FindingStats, FindingStore, IdempotencyKey, KeywordSearch, Write};
use macp_core::{Error, FindingId, Result, RoomId, Timestamp};

use crate::AwsBackend;
use crate::ddb::*;
use crate::ddb::{Item, aws_err, code_of, doc, get_n, get_s, json, n, opt_n, s};

// ---------------------------------------------------------------------------------------------

/// A finding's item as posted, committed at `seq`.
pub(crate) fn finding_item(f: &Finding, seq: u64) -> Item {
    let mut stored = f.clone();
    stored.seq = seq;
    let mut m = HashMap::from([
        ("room_id".to_owned(), s(f.room_id.to_string())),
        ("finding_id".to_owned(), s(f.finding_id.to_string())),
        ("seq".to_owned(), n(seq)),
        ("created_at".to_owned(), n(f.created_at.as_millis())),
        ("agent_id".to_owned(), s(f.agent_id.as_str())),
        ("index_status".to_owned(), s(f.index_status.as_str())),
        ("doc".to_owned(), json(&stored)),
    ]);
    if !f.tags.is_empty() {
        m.insert("tags".into(), AttributeValue::Ss(f.tags.clone()));
    }
    if f.index_status == IndexStatus::Pending {
        m.insert("pending".into(), s("1"));
    }
    m
}

/// A finding's item as a restore writes it: as posted, at its own `seq`, with the standing
/// later verdicts gave it in the `standing` attribute, where `append_finding` writes a
/// verdict's standing and `finding_of` looks first.
pub(crate) fn restored_finding_item(f: &Finding) -> Item {
    let mut posted = f.clone();
    // Only an erasure rewrites the document after the post (whole, standing and all).
    if f.erased.is_none() {
        posted.standing = None;
    }
    let mut m = finding_item(&posted, f.seq);
    if let Some(st) = &f.standing {
        m.insert("standing".into(), json(st));
    }
    m
}

fn finding_of(item: &Item) -> Result<Finding> {
    let mut f: Finding = doc(item)?;
    f.index_status = IndexStatus::parse(get_s(item, "index_status")?)?;
    f.seq = get_n(item, "seq")? as u64;
    // A verdict passed later is written to its own attribute, not into the posted document.
    if let Some(st) = item.get("standing").and_then(|v| v.as_s().ok()) {
        f.standing = Some(
            serde_json::from_str(st)
                .map_err(|e| Error::backend("dynamodb", false, format!("finding standing: {e}"), None))?,
        );
    }
    Ok(f)
}

#[async_trait]
impl FindingStore for AwsBackend {
    async fn append_finding(
        &self,
        f: &Finding,
        idempotency: Option<&IdempotencyKey>,
        event: &Event,
    ) -> Result<Write<Finding>> {
        let room_key = HashMap::from([("room_id".to_owned(), s(f.room_id.to_string()))]);
        for attempt in 0..ATTEMPTS {
            if let Some(rec) = self.replayed(f.room_id, idempotency).await? {
                return Ok(Write::Replayed(rec));
            }
            let (room, head) = tokio::try_join!(
                self.get_item(&self.names.rooms, room_key.clone(), "GetItem"),
                self.event_head(f.room_id),
            )?;
            let room =
                room.filter(|i| i.contains_key("doc")).ok_or_else(|| Error::not_found("room", f.room_id))?;
            let last = get_n(&room, "last_seq")? as u64;
            let seq = last + 1;
            // The room's counter moves from `last` to `seq` only if nobody else moved it.
            let mut expr = String::from("SET last_seq = :next, last_created_at = :at");
            let mut names = HashMap::new();
            let mut values = HashMap::from([
                (":next".to_owned(), n(seq)),
                (":last".to_owned(), n(last)),
                (":at".to_owned(), n(f.created_at.as_millis())),
            ]);
            if !f.tags.is_empty() {
                values.insert(":zero".into(), n(0));
                values.insert(":one".into(), n(1));
            }
            for (i, t) in f.tags.iter().enumerate() {
                expr.push_str(&format!(", tag_counts.#t{i} = if_not_exists(tag_counts.#t{i}, :zero) + :one"));
                names.insert(format!("#t{i}"), t.clone());
            }
            let mut upd = Update::builder()
                .table_name(&self.names.rooms)
                .set_key(Some(room_key.clone()))
                .update_expression(expr)
                .condition_expression("last_seq = :last")
                .set_expression_attribute_values(Some(values));
            if !names.is_empty() {
                upd = upd.set_expression_attribute_names(Some(names));
            }
            let mut items = vec![
                TransactWriteItem::builder()
                    .update(upd.build().map_err(|e| Error::backend("dynamodb", false, e.to_string(), None))?)
                    .build(),
                put(&self.names.findings, finding_item(f, seq), Some("attribute_not_exists(finding_id)")),
            ];
            if let Some(c) = idempotency {
                items.push(self.key_put(f.room_id, c));
            }
            items.extend(self.event_items(f.room_id, &head, event)?);
            if let Some((on, standing)) = f.standing_given() {
                let judged = Update::builder()
                    .table_name(&self.names.findings)
                    .set_key(Some(key2("room_id", f.room_id.to_string(), "finding_id", on.to_string())))
                    .update_expression("SET standing = :st")
                    .condition_expression("attribute_exists(finding_id)")
                    .expression_attribute_values(":st", json(&standing))
                    .build()
                    .map_err(|e| Error::backend("dynamodb", false, e.to_string(), None))?;
                items.push(TransactWriteItem::builder().update(judged).build());
            }
            match self.transact(items, "TransactWriteItems (append finding)").await? {
                Tx::Done => {
                    let mut stored = f.clone();
                    stored.seq = seq;
                    return Ok(Write::Applied(stored));
                }
                Tx::Cancelled(reasons) => {
                    if idempotency.is_some() && check_failed(&reasons, 2) {
                        return Ok(Write::Replayed(self.require_key(f.room_id, idempotency).await?));
                    }
                    // Another writer took `seq` (or a transaction conflicted): read again.
                    backoff(attempt).await;
                }
            }
        }
        Err(gave_up("append finding"))
    }

    async fn erase_finding(
        &self,
        room_id: RoomId,
        finding_id: FindingId,
        erasure: &Erasure,
        event: &Event,
    ) -> Result<Option<Finding>> {
        let key = key2("room_id", room_id.to_string(), "finding_id", finding_id.to_string());
        // The events naming it, read once: events about an item are all written after it,
        // and each attempt below only needs the feed head again.
        let notice = erasure.notice();
        let id = finding_id.to_string();
        let renotice =
            self.renotice_items(room_id, &id, move |e| e.finding_id == Some(finding_id), &notice).await?;
        for attempt in 0..ATTEMPTS {
            let Some(item) = self
                .get_item(&self.names.findings, key.clone(), "GetItem")
                .await?
                .filter(|i| i.contains_key("doc"))
            else {
                return Ok(None);
            };
            let mut f = finding_of(&item)?;
            if !f.erase(erasure) {
                return Ok(Some(f));
            }
            let head = self.event_head(room_id).await?;
            let mut items = renotice.clone();
            // Rewritten only if its document is unchanged meanwhile; out of the pending index.
            let indexed = [(":ix", s(f.index_status.as_str()))];
            let set = "SET #d = :d, index_status = :ix REMOVE pending";
            items.push(self.erased_item(
                &self.names.findings,
                key.clone(),
                &f,
                get_s(&item, "doc")?,
                set,
                &indexed,
            )?);
            items.push(self.count_erasure(room_id)?);
            items.extend(self.event_items(room_id, &head, event)?);
            match self.transact(items, "TransactWriteItems (erase finding)").await? {
                Tx::Done => return Ok(Some(f)),
                // The head moved, the finding changed or the room's counter conflicted: again.
                Tx::Cancelled(_) => backoff(attempt).await,
            }
        }
        Err(gave_up("erase finding"))
    }

    async fn get_findings(&self, room_id: RoomId, ids: &[FindingId]) -> Result<Vec<Finding>> {
        let keys =
            ids.iter().map(|id| key2("room_id", room_id.to_string(), "finding_id", id.to_string())).collect();
        self.batch_get(&self.names.findings, keys)
            .await?
            .iter()
            .filter(|i| i.contains_key("doc"))
            .map(finding_of)
            .collect()
    }

    async fn list_findings(&self, room_id: RoomId, q: &FindingQuery) -> Result<Vec<Finding>> {
        let mut values =
            HashMap::from([(":r".to_owned(), s(room_id.to_string())), (":a".to_owned(), n(q.after_seq))]);
        let key_condition = match q.before_seq {
            Some(b) => {
                values.insert(":b".into(), n(b.saturating_sub(1)));
                values.insert(":a1".into(), n(q.after_seq + 1));
                values.remove(":a");
                "room_id = :r AND seq BETWEEN :a1 AND :b"
            }
            None => "room_id = :r AND seq > :a",
        };
        let filter = q.clone();
        let items = self
            .query_all(
                &self.names.findings,
                Some("by_seq"),
                key_condition,
                None,
                HashMap::new(),
                values,
                !q.descending,
                true,
                // The filters are core's (FindingQuery::matches), on the decoded finding; an item
                // that does not decode is kept, so that reading it reports the corruption.
                move |item| finding_of(item).map_or(true, |f| filter.matches(&f)),
                q.limit,
            )
            .await?;
        items.iter().map(finding_of).collect()
    }

    async fn set_index_status(
        &self,
        room_id: RoomId,
        finding_id: FindingId,
        status: IndexStatus,
    ) -> Result<()> {
        let expr = match status {
            IndexStatus::Indexed => "SET index_status = :s REMOVE pending",
            IndexStatus::Pending => "SET index_status = :s, pending = :p",
        };
        let mut req = self
            .ddb
            .update_item()
            .table_name(&self.names.findings)
            .set_key(Some(key2("room_id", room_id.to_string(), "finding_id", finding_id.to_string())))
            .update_expression(expr)
            .condition_expression("attribute_exists(finding_id)")
            .expression_attribute_values(":s", s(status.as_str()));
        if status == IndexStatus::Pending {
            req = req.expression_attribute_values(":p", s("1"));
        }
        match req.send().await {
            Ok(_) => Ok(()),
            Err(e) if code_of(&e) == Some("ConditionalCheckFailedException") => {
                Err(Error::not_found("finding", finding_id))
            }
            Err(e) => Err(aws_err("dynamodb", "UpdateItem", e)),
        }
    }

    async fn pending_findings(&self, created_before: Timestamp, limit: usize) -> Result<Vec<Finding>> {
        let items = self
            .query_all(
                &self.names.findings,
                Some("pending"),
                "pending = :p AND created_at < :t",
                None,
                HashMap::new(),
                HashMap::from([(":p".to_owned(), s("1")), (":t".to_owned(), n(created_before.as_millis()))]),
                true,
                false,
                |_| true,
                limit,
            )
            .await?;
        items.iter().map(finding_of).collect()
    }

    async fn mark_all_pending(&self) -> Result<u64> {
        let mut count = 0;
        let mut start = None;
        loop {
            let resp = self
                .ddb
                .scan()
                .table_name(&self.names.findings)
                .filter_expression("attribute_exists(doc)")
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| aws_err("dynamodb", "Scan", e))?;
            for item in resp.items.unwrap_or_default() {
                let f = finding_of(&item)?;
                if f.erased.is_some() {
                    continue;
                }
                self.set_index_status(f.room_id, f.finding_id, IndexStatus::Pending).await?;
                count += 1;
            }
            match resp.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => return Ok(count),
            }
        }
    }

    async fn finding_stats(&self, room_id: RoomId) -> Result<FindingStats> {
        let key = HashMap::from([("room_id".to_owned(), s(room_id.to_string()))]);
        let Some(item) = self.get_item(&self.names.rooms, key, "GetItem").await? else {
            return Ok(FindingStats::default());
        };
        let last = opt_n(&item, "last_seq").unwrap_or(0) as u64;
        let mut tag_counts = BTreeMap::new();
        if let Some(m) = item.get("tag_counts").and_then(|v| v.as_m().ok()) {
            for (t, c) in m {
                if let Some(c) = c.as_n().ok().and_then(|c| c.parse::<u64>().ok())
                    && c > 0
                {
                    tag_counts.insert(t.clone(), c);
                }
            }
        }
        Ok(FindingStats {
            total: last,
            last_seq: last,
            last_created_at: opt_n(&item, "last_created_at").map(Timestamp::from_millis),
            tag_counts,
        })
    }

    async fn keyword_search(
        &self,
        room_id: RoomId,
        query: &str,
        limit: usize,
    ) -> Result<Option<KeywordSearch>> {
        let room_key = HashMap::from([("room_id".to_owned(), s(room_id.to_string()))]);
        let cached = {
            let cache = self.keywords.lock().unwrap_or_else(|p| p.into_inner());
            cache.get(&room_id).cloned()
        };
        let (seen, built_at, index) = cached.unwrap_or_else(|| (0, (0, 0), Arc::new(KeywordIndex::new())));
        // Catch up with findings committed since this process last looked (any instance), and
        // see whether any was erased meanwhile (then the room's index is built again).
        let after = FindingQuery::after(seen, usize::MAX);
        let (room, fresh) = tokio::try_join!(
            self.get_item(&self.names.rooms, room_key, "GetItem"),
            self.list_findings(room_id, &after),
        )?;
        if room.as_ref().is_none_or(|r| !r.contains_key("doc")) {
            // Purged (by any server), or never was: nothing of it stays in memory.
            self.keywords.lock().unwrap_or_else(|p| p.into_inner()).remove(&room_id);
            return Ok(Some(KeywordSearch::default()));
        }
        // A room restored (`macp import`, by any process) or with a finding erased since the
        // index was built: its findings changed in place, so the index is built again.
        let stamp = room.as_ref().map_or((0, 0), |r| {
            (opt_n(r, "restored_at").unwrap_or(0) as u64, opt_n(r, "erasures").unwrap_or(0) as u64)
        });
        let (seen, mut index, fresh) = if stamp == built_at {
            (seen, index, fresh)
        } else {
            let all = self.list_findings(room_id, &FindingQuery::after(0, usize::MAX)).await?;
            (0, Arc::new(KeywordIndex::new()), all)
        };
        let mut last = seen;
        if !fresh.is_empty() || stamp != built_at {
            let ix = Arc::make_mut(&mut index);
            for f in &fresh {
                ix.add_stored(f.finding_id, &f.content, f.erased.is_some());
                last = f.seq;
            }
            let mut cache = self.keywords.lock().unwrap_or_else(|p| p.into_inner());
            if cache.get(&room_id).is_none_or(|(s, e, _)| *e < stamp || (*e == stamp && *s < last)) {
                cache.insert(room_id, (last, stamp, index.clone()));
            }
        }
        let query = query.to_owned();
        tokio::task::spawn_blocking(move || Some(index.search(&query, limit)))
            .await
            .map_err(|e| Error::backend("dynamodb", true, format!("keyword task failed: {e}"), None))
    }
}
