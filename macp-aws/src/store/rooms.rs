//! Rooms.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
use macp_core::model::{Event, Room, RoomStatus};
use macp_core::store::{RoomKey, RoomStore};
use macp_core::{Error, Result, RoomId, Timestamp, UserId};

use crate::AwsBackend;
use crate::ddb::*;

// ---------------------------------------------------------------------------------------------

fn room_item(r: &Room) -> Item {
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

fn room_of(item: &Item) -> Result<Room> {
    let mut r: Room = doc(item)?;
    r.status = RoomStatus::parse(get_s(item, "status")?)?;
    r.closed_at = opt_n(item, "closed_at").map(Timestamp::from_millis);
    r.closed_by = opt_s(item, "closed_by").map(UserId::new).transpose()?;
    r.version = opt_n(item, "version").unwrap_or(0) as u64;
    Ok(r)
}

#[async_trait]
impl RoomStore for AwsBackend {
    async fn insert_room(&self, room: &Room) -> Result<()> {
        let r = self
            .ddb
            .put_item()
            .table_name(&self.names.rooms)
            .set_item(Some(room_item(room)))
            .condition_expression("attribute_not_exists(room_id)")
            .send()
            .await;
        match r {
            Ok(_) => Ok(()),
            Err(e) if code_of(&e) == Some("ConditionalCheckFailedException") => {
                Err(Error::AlreadyExists { what: "room", id: room.room_id.to_string() })
            }
            Err(e) => Err(aws_err("dynamodb", "PutItem", e)),
        }
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
        let mut expr = String::from("SET doc = :doc, #st = :status, version = :v");
        let mut upd = Update::builder()
            .table_name(&self.names.rooms)
            .key("room_id", s(room_id.to_string()))
            .condition_expression(condition)
            .expression_attribute_names("#st", "status")
            .expression_attribute_values(":doc", json(room))
            .expression_attribute_values(":status", s(room.status.as_str()))
            .expression_attribute_values(":v", n(room.version))
            .expression_attribute_values(":old", n(old));
        match (room.closed_at, &room.closed_by) {
            (Some(at), Some(by)) => {
                expr.push_str(", closed_at = :at, closed_by = :by");
                upd = upd
                    .expression_attribute_values(":at", n(at.as_millis()))
                    .expression_attribute_values(":by", s(by.as_str()));
            }
            _ => expr.push_str(" REMOVE closed_at, closed_by"),
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
