//! Rooms.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
use macp_core::model::{Event, Room, RoomStatus};
use macp_core::store::{RoomKey, RoomRecord, RoomStore};
use macp_core::{Error, Result, RoomId, Timestamp, UserId};

use crate::AwsBackend;
use crate::ddb::*;

// ---------------------------------------------------------------------------------------------

/// A new room's item: its record, with every counter at zero.
pub(crate) fn room_item(r: &Room) -> Item {
    HashMap::from([
        ("room_id".to_owned(), s(r.room_id.to_string())),
        ("doc".to_owned(), json(r)),
        ("status".to_owned(), s(r.status.as_str())),
        ("created_at".to_owned(), n(r.created_at.as_millis())),
        ("last_seq".to_owned(), n(0)),
        ("rel_count".to_owned(), n(0)),
        ("tag_counts".to_owned(), AttributeValue::M(HashMap::new())),
    ])
}

/// The attributes `room_of` reads beside the document, as `update_room` keeps them: status,
/// version, and `closed_at` with `closed_by` while the room is closed.
pub(crate) fn room_state(r: &Room) -> Item {
    let mut m =
        HashMap::from([("status".to_owned(), s(r.status.as_str())), ("version".to_owned(), n(r.version))]);
    if let (Some(at), Some(by)) = (r.closed_at, &r.closed_by) {
        m.insert("closed_at".into(), n(at.as_millis()));
        m.insert("closed_by".into(), s(by.as_str()));
    }
    m
}

fn room_of(item: &Item) -> Result<Room> {
    let mut r: Room = doc(item)?;
    r.status = RoomStatus::parse(get_s(item, "status")?)?;
    r.closed_at = opt_n(item, "closed_at").map(Timestamp::from_millis);
    r.closed_by = opt_s(item, "closed_by").map(UserId::new).transpose()?;
    r.version = opt_n(item, "version").unwrap_or(0) as u64;
    Ok(r)
}

impl AwsBackend {
    /// Deletes every item of `room` in `table` (found through `index` when given), by the
    /// item keys `keys`: a query by room, 25 deletes per batch, unprocessed ones sent again.
    async fn delete_room_items(
        &self,
        table: &str,
        index: Option<&str>,
        keys: &[&str],
        room: RoomId,
    ) -> Result<()> {
        let names: HashMap<String, String> =
            keys.iter().enumerate().map(|(i, k)| (format!("#k{i}"), (*k).to_owned())).collect();
        let projection = (0..keys.len()).map(|i| format!("#k{i}")).collect::<Vec<_>>().join(", ");
        let mut start = None;
        loop {
            let resp = self
                .ddb
                .query()
                .table_name(table)
                .set_index_name(index.map(str::to_owned))
                .key_condition_expression("room_id = :r")
                .expression_attribute_values(":r", s(room.to_string()))
                .projection_expression(&projection)
                .set_expression_attribute_names(Some(names.clone()))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| aws_err("dynamodb", "Query (purge)", e))?;
            let found: Vec<HashMap<String, AttributeValue>> = resp
                .items()
                .iter()
                .map(|i| {
                    keys.iter().filter_map(|k| i.get(*k).map(|v| ((*k).to_owned(), v.clone()))).collect()
                })
                .collect();
            for chunk in found.chunks(25) {
                self.batch_delete(table, chunk).await?;
            }
            match resp.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => return Ok(()),
            }
        }
    }

    /// Deletes the vectors of the room's findings from every index of the vector bucket.
    async fn delete_room_vectors(&self, room: RoomId) -> Result<()> {
        let mut ids = Vec::new();
        let mut start = None;
        loop {
            let resp = self
                .ddb
                .query()
                .table_name(&self.names.findings)
                .key_condition_expression("room_id = :r")
                .expression_attribute_values(":r", s(room.to_string()))
                .projection_expression("finding_id")
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| aws_err("dynamodb", "Query (purge)", e))?;
            ids.extend(resp.items().iter().filter_map(|i| i.get("finding_id")?.as_s().ok().cloned()));
            match resp.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        if ids.is_empty() {
            return Ok(());
        }
        for index in self.vector_indexes().await? {
            // An id that is not a vector is ignored.
            for chunk in ids.chunks(super::search::DELETE_BATCH) {
                self.s3v
                    .delete_vectors()
                    .vector_bucket_name(&self.names.vector_bucket)
                    .index_name(&index)
                    .set_keys(Some(chunk.to_vec()))
                    .send()
                    .await
                    .map_err(|e| aws_err("s3vectors", "DeleteVectors (purge)", e))?;
            }
        }
        Ok(())
    }

    /// One BatchWriteItem of deletes (at most 25), until nothing is left unprocessed.
    async fn batch_delete(&self, table: &str, keys: &[HashMap<String, AttributeValue>]) -> Result<()> {
        use aws_sdk_dynamodb::types::{DeleteRequest, WriteRequest};
        let requests = keys
            .iter()
            .map(|k| {
                DeleteRequest::builder()
                    .set_key(Some(k.clone()))
                    .build()
                    .map(|d| WriteRequest::builder().delete_request(d).build())
                    .map_err(|e| Error::backend("dynamodb", false, e.to_string(), None))
            })
            .collect::<Result<Vec<_>>>()?;
        self.batch_write(table, requests, "purge a room").await
    }

    /// Puts the room's own `item` on `condition`: `already_exists` if the condition fails.
    pub(crate) async fn put_room(&self, room_id: RoomId, item: Item, condition: &str) -> Result<()> {
        let r = self
            .ddb
            .put_item()
            .table_name(&self.names.rooms)
            .set_item(Some(item))
            .condition_expression(condition)
            .send()
            .await;
        match r {
            Ok(_) => Ok(()),
            Err(e) if code_of(&e) == Some("ConditionalCheckFailedException") => {
                Err(Error::AlreadyExists { what: "room", id: room_id.to_string() })
            }
            Err(e) => Err(aws_err("dynamodb", "PutItem", e)),
        }
    }
}

#[async_trait]
impl RoomStore for AwsBackend {
    async fn purge_room(&self, room_id: RoomId) -> Result<()> {
        let n = &self.names;
        // Every table is keyed by room (relationships through their `by_room` index); the
        // findings table holds idempotency keys, the entities table identifier claims, the
        // events table the feed head. The room's item goes last.
        let tables: [(&str, Option<&str>, &[&str]); 8] = [
            (&n.findings, None, &["room_id", "finding_id"]),
            (&n.entities, None, &["room_id", "entity_id"]),
            (&n.relationships, Some("by_room"), &["pk", "sk"]),
            (&n.artifacts, None, &["room_id", "artifact_id"]),
            (&n.events, None, &["room_id", "seq"]),
            (&n.claims, None, &["room_id", "key"]),
            (&n.decisions, None, &["room_id", "decision_id"]),
            (&n.agents, None, &["room_id", "agent_id"]),
        ];
        // The vectors first, whatever the serving process's embedder: keyed by finding id in
        // every index of the vector bucket (an index per embedding model).
        self.delete_room_vectors(room_id).await?;
        for (table, index, keys) in tables {
            self.delete_room_items(table, index, keys, room_id).await?;
        }
        self.delete_room_items(&n.rooms, None, &["room_id"], room_id).await?;
        self.keywords.lock().unwrap_or_else(|p| p.into_inner()).remove(&room_id);
        Ok(())
    }

    async fn insert_room(&self, room: &Room) -> Result<()> {
        self.put_room(room.room_id, room_item(room), "attribute_not_exists(room_id)").await
    }

    async fn restore_room(&self, record: &RoomRecord) -> Result<()> {
        self.restore(record).await
    }

    async fn get_room(&self, room_id: RoomId) -> Result<Option<Room>> {
        let key = HashMap::from([("room_id".to_owned(), s(room_id.to_string()))]);
        match self.get_item(&self.names.rooms, key, "GetItem").await? {
            Some(item) if item.contains_key("doc") => room_of(&item).map(Some),
            _ => Ok(None),
        }
    }

    async fn update_room(&self, room: &Room, event: &Event) -> Result<bool> {
        let room_id = room.room_id;
        let old = room.version.saturating_sub(1);
        // Rooms written before versions existed have no `version`: they are at 0.
        let condition = if old == 0 {
            "attribute_exists(room_id) AND (attribute_not_exists(version) OR version = :old)"
        } else {
            "attribute_exists(room_id) AND version = :old"
        };
        let state = room_state(room);
        let mut upd = Update::builder()
            .table_name(&self.names.rooms)
            .key("room_id", s(room_id.to_string()))
            .condition_expression(condition)
            .expression_attribute_values(":doc", json(room))
            .expression_attribute_values(":old", n(old));
        let mut sets = vec!["doc = :doc".to_owned()];
        for (k, v) in &state {
            sets.push(format!("#{k} = :{k}"));
            upd = upd
                .expression_attribute_names(format!("#{k}"), k)
                .expression_attribute_values(format!(":{k}"), v.clone());
        }
        let mut expr = format!("SET {}", sets.join(", "));
        if !state.contains_key("closed_at") {
            expr.push_str(" REMOVE closed_at, closed_by");
        }
        let upd = upd
            .update_expression(expr)
            .build()
            .map_err(|e| Error::backend("dynamodb", false, e.to_string(), None))?;
        for attempt in 0..ATTEMPTS {
            let head = self.event_head(room_id).await?;
            let mut items = vec![TransactWriteItem::builder().update(upd.clone()).build()];
            items.extend(self.event_items(room_id, &head, event)?);
            match self.transact(items, "TransactWriteItems (update room)").await? {
                Tx::Done => return Ok(true),
                Tx::Cancelled(reasons) if check_failed(&reasons, 0) => {
                    return match self.get_room(room_id).await? {
                        Some(_) => Ok(false),
                        None => Err(Error::not_found("room", room_id)),
                    };
                }
                // The feed's head moved (or a transaction conflicted): read it again.
                Tx::Cancelled(_) => backoff(attempt).await,
            }
        }
        Err(gave_up("update room"))
    }

    async fn list_rooms(
        &self,
        status: Option<RoomStatus>,
        after: Option<RoomKey>,
        limit: usize,
    ) -> Result<Vec<Room>> {
        // Rooms are few (one per investigation): a consistent scan, sorted here.
        let mut rooms = Vec::new();
        let mut start = None;
        loop {
            let resp = self
                .ddb
                .scan()
                .table_name(&self.names.rooms)
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| aws_err("dynamodb", "Scan", e))?;
            for item in resp.items.unwrap_or_default() {
                if item.contains_key("doc") {
                    rooms.push(room_of(&item)?);
                }
            }
            match resp.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        rooms.retain(|r| status.is_none_or(|s| r.status == s));
        rooms.retain(|r| after.is_none_or(|k| (r.created_at, r.room_id) < (k.created_at, k.room_id)));
        rooms.sort_by_key(|r| std::cmp::Reverse((r.created_at, r.room_id)));
        rooms.truncate(limit);
        Ok(rooms)
    }
}
