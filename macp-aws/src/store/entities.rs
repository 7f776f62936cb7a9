//! Entities, the identifiers they hold, and relationships.

use std::collections::{BTreeMap, HashMap};

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{AttributeValue, Select, TransactWriteItem, Update};
use macp_core::model::{Entity, Event, Identifier, Relationship};
use macp_core::store::{
    AttachOutcome, CreateOutcome, EntityStats, EntityStore, IdempotencyKey, RelationshipKey, Write,
};
use macp_core::{EntityId, Error, Result, RoomId};
use serde_json::{Map, Value};

use crate::AwsBackend;
use crate::ddb::*;
use crate::ddb::{Item, aws_err, doc, get_s, json, n, opt_n, opt_s, s};
use crate::store::events::lost_head;

// ---------------------------------------------------------------------------------------------

/// An entity's item at `version` (attaches and merges move it by one).
pub(crate) fn entity_item(e: &Entity, version: i64) -> Item {
    let mut m = HashMap::from([
        ("room_id".to_owned(), s(e.room_id.to_string())),
        ("entity_id".to_owned(), s(e.entity_id.to_string())),
        ("doc".to_owned(), json(e)),
        ("version".to_owned(), n(version)),
    ]);
    if let Some(w) = e.merged_into {
        m.insert("merged_into".into(), s(w.to_string()));
    }
    m
}

fn entity_of(item: &Item) -> Result<(Entity, i64)> {
    let mut e: Entity = doc(item)?;
    e.merged_into = opt_s(item, "merged_into").map(str::parse).transpose()?;
    Ok((e, opt_n(item, "version").unwrap_or(0)))
}

fn rel_key(room: RoomId, k: &RelationshipKey) -> HashMap<String, AttributeValue> {
    key2("pk", format!("{room}#{}", k.source), "sk", format!("{}#{}", k.relationship_type, k.target))
}

/// A relationship's item at `version` (each repeated assertion moves it by one), with the keys
/// of its `by_target` and `by_room` indexes.
pub(crate) fn rel_item(r: &Relationship, version: i64) -> Item {
    let room = r.room_id;
    let mut m = rel_key(room, &RelationshipKey::of(r));
    m.insert("target_pk".into(), s(format!("{room}#{}", r.target_entity_id)));
    m.insert("target_sk".into(), s(format!("{}#{}", r.relationship_type, r.source_entity_id)));
    m.insert("room_id".into(), s(room.to_string()));
    m.insert("edge".into(), s(RelationshipKey::of(r).encode()));
    m.insert("doc".into(), json(r));
    m.insert("version".into(), n(version));
    m
}

/// The item recording that `holder` holds identifier `i` in `room`.
pub(crate) fn ident_item(room: RoomId, i: &Identifier, holder: EntityId) -> Item {
    HashMap::from([
        ("room_id".to_owned(), s(room.to_string())),
        ("entity_id".to_owned(), s(ident_sk(i))),
        ("holder".to_owned(), s(holder.to_string())),
    ])
}

impl AwsBackend {
    async fn entity(&self, room: RoomId, id: EntityId) -> Result<Option<(Entity, i64)>> {
        let key = key2("room_id", room.to_string(), "entity_id", id.to_string());
        self.get_item(&self.names.entities, key, "GetItem")
            .await?
            .filter(|i| i.contains_key("doc"))
            .map(|i| entity_of(&i))
            .transpose()
    }

    fn cond_update(
        &self,
        table: &str,
        key: HashMap<String, AttributeValue>,
        set_doc: Value,
        version: i64,
        extra_cond: &str,
        extra_set: Option<(&str, AttributeValue)>,
    ) -> Result<TransactWriteItem> {
        let mut expr = "SET doc = :doc, version = :v1".to_owned();
        let mut values = HashMap::from([
            (":doc".to_owned(), s(set_doc.to_string())),
            (":v0".to_owned(), n(version)),
            (":v1".to_owned(), n(version + 1)),
        ]);
        if let Some((attr, v)) = extra_set {
            expr.push_str(&format!(", {attr} = :x"));
            values.insert(":x".into(), v);
        }
        let cond = format!("version = :v0{extra_cond}");
        let u = Update::builder()
            .table_name(table)
            .set_key(Some(key))
            .update_expression(expr)
            .condition_expression(cond)
            .set_expression_attribute_values(Some(values))
            .build()
            .map_err(|e| Error::backend("dynamodb", false, e.to_string(), None))?;
        Ok(TransactWriteItem::builder().update(u).build())
    }

    async fn holders(&self, room: RoomId, ids: &[Identifier]) -> Result<Vec<(Identifier, EntityId)>> {
        let keys = ids.iter().map(|i| key2("room_id", room.to_string(), "entity_id", ident_sk(i))).collect();
        let items = self.batch_get(&self.names.entities, keys).await?;
        let mut out = Vec::new();
        for i in ids {
            if let Some(item) = items.iter().find(|it| opt_s(it, "entity_id") == Some(ident_sk(i).as_str())) {
                out.push((i.clone(), get_s(item, "holder")?.parse()?));
            }
        }
        Ok(out)
    }

    fn ident_put(&self, room: RoomId, i: &Identifier, holder: EntityId) -> TransactWriteItem {
        put(&self.names.entities, ident_item(room, i, holder), Some("attribute_not_exists(entity_id)"))
    }
}

impl AwsBackend {
    /// One attempt at [`EntityStore::merge_entities`]; `None` when another write took the
    /// room's feed head first (read it again and retry).
    async fn merge_once(
        &self,
        room_id: RoomId,
        winner: EntityId,
        loser: EntityId,
        event: &Event,
    ) -> Result<Option<Entity>> {
        let head = self.event_head(room_id).await?;
        let (mut w, wv) =
            self.entity(room_id, winner).await?.ok_or_else(|| Error::not_found("entity", winner))?;
        let (mut l, lv) =
            self.entity(room_id, loser).await?.ok_or_else(|| Error::not_found("entity", loser))?;
        if winner == loser || w.merged_into.is_some() || l.merged_into.is_some() {
            return Err(Error::conflict("one of the entities was merged concurrently"));
        }
        w.absorb(&l);
        l.merged_into = Some(winner);
        let mut items = vec![
            self.cond_update(
                &self.names.entities,
                key2("room_id", room_id.to_string(), "entity_id", loser.to_string()),
                serde_json::to_value(&l).unwrap_or_default(),
                lv,
                " AND attribute_not_exists(merged_into)",
                Some(("merged_into", s(winner.to_string()))),
            )?,
            self.cond_update(
                &self.names.entities,
                key2("room_id", room_id.to_string(), "entity_id", winner.to_string()),
                serde_json::to_value(&w).unwrap_or_default(),
                wv,
                " AND attribute_not_exists(merged_into)",
                None,
            )?,
        ];
        let head_at = items.len();
        items.extend(self.event_items(room_id, &head, event)?);
        match self.transact(items, "TransactWriteItems (merge)").await? {
            Tx::Done => Ok(Some(w)),
            Tx::Cancelled(reasons) if check_failed(&reasons, 0) || check_failed(&reasons, 1) => {
                Err(Error::conflict("one of the entities changed concurrently"))
            }
            Tx::Cancelled(reasons) if lost_head(&reasons, head_at) => Ok(None),
            Tx::Cancelled(_) => Err(Error::conflict("one of the entities changed concurrently")),
        }
    }

    async fn put_relationship_with(
        &self,
        rel: &Relationship,
        idempotency: Option<&IdempotencyKey>,
        event: &Event,
    ) -> Result<Write<(Relationship, bool)>> {
        let room = rel.room_id;
        let key = RelationshipKey::of(rel);
        for attempt in 0..ATTEMPTS {
            if let Some(rec) = self.replayed(room, idempotency).await? {
                return Ok(Write::Replayed(rec));
            }
            let existing = self.get_item(&self.names.relationships, rel_key(room, &key), "GetItem").await?;
            let head = self.event_head(room).await?;
            let mut changed = true;
            let (stored, created, mut items) = match existing {
                None => {
                    let rooms_bump = Update::builder()
                        .table_name(&self.names.rooms)
                        .key("room_id", s(room.to_string()))
                        .update_expression("ADD rel_count :one")
                        .expression_attribute_values(":one", n(1))
                        .build()
                        .map_err(|e| Error::backend("dynamodb", false, e.to_string(), None))?;
                    let items = vec![
                        put(&self.names.relationships, rel_item(rel, 0), Some("attribute_not_exists(pk)")),
                        TransactWriteItem::builder().update(rooms_bump).build(),
                    ];
                    (rel.clone(), true, items)
                }
                Some(item) => {
                    let mut r: Relationship = doc(&item)?;
                    let version = opt_n(&item, "version").unwrap_or(0);
                    let before = r.clone();
                    r.absorb(rel);
                    changed = r != before;
                    let u = self.cond_update(
                        &self.names.relationships,
                        rel_key(room, &key),
                        serde_json::to_value(&r).unwrap_or_default(),
                        version,
                        "",
                        None,
                    )?;
                    (r, false, vec![u])
                }
            };
            if let Some(c) = idempotency {
                items.push(self.key_put(room, c));
            }
            let key_at = items.len().saturating_sub(1);
            if changed {
                items.extend(self.event_items(room, &head, event)?);
            }
            match self.transact(items, "TransactWriteItems (relationship)").await? {
                Tx::Done => return Ok(Write::Applied((stored, created))),
                Tx::Cancelled(reasons) => {
                    if idempotency.is_some() && check_failed(&reasons, key_at) {
                        return Ok(Write::Replayed(self.require_key(room, idempotency).await?));
                    }
                    backoff(attempt).await;
                }
            }
        }
        Err(gave_up("put relationship"))
    }
}

#[async_trait]
impl EntityStore for AwsBackend {
    async fn create_entity(
        &self,
        entity: &Entity,
        idempotency: Option<&IdempotencyKey>,
        event: &Event,
    ) -> Result<CreateOutcome> {
        let room = entity.room_id;
        for attempt in 0..ATTEMPTS {
            if let Some(rec) = self.replayed(room, idempotency).await? {
                return Ok(CreateOutcome::Replayed(rec));
            }
            let head = self.event_head(room).await?;
            let mut items = vec![put(
                &self.names.entities,
                entity_item(entity, 0),
                Some("attribute_not_exists(entity_id)"),
            )];
            items.extend(entity.identifiers.iter().map(|i| self.ident_put(room, i, entity.entity_id)));
            if let Some(c) = idempotency {
                items.push(self.key_put(room, c));
            }
            let head_at = items.len();
            items.extend(self.event_items(room, &head, event)?);
            match self.transact(items, "TransactWriteItems (create entity)").await? {
                Tx::Done => return Ok(CreateOutcome::Created(entity.clone())),
                Tx::Cancelled(reasons) => {
                    let failed = |i: usize| check_failed(&reasons, i);
                    let n_ids = entity.identifiers.len();
                    if idempotency.is_some() && failed(1 + n_ids) {
                        return Ok(CreateOutcome::Replayed(self.require_key(room, idempotency).await?));
                    }
                    let taken = self.holders(room, &entity.identifiers).await?;
                    if !taken.is_empty() {
                        return Ok(CreateOutcome::IdentifiersTaken(taken));
                    }
                    if !lost_head(&reasons, head_at) {
                        return Err(Error::backend(
                            "dynamodb",
                            true,
                            "entity creation conflicted; retry",
                            None,
                        ));
                    }
                    backoff(attempt).await;
                }
            }
        }
        Err(gave_up("create entity"))
    }

    async fn attach_to_entity(
        &self,
        room_id: RoomId,
        entity_id: EntityId,
        identifiers: &[Identifier],
        properties: &Map<String, Value>,
        idempotency: Option<&IdempotencyKey>,
        event: &Event,
    ) -> Result<AttachOutcome> {
        for attempt in 0..ATTEMPTS {
            if let Some(rec) = self.replayed(room_id, idempotency).await? {
                return Ok(AttachOutcome::Replayed(rec));
            }
            let (mut e, version) = self
                .entity(room_id, entity_id)
                .await?
                .ok_or_else(|| Error::not_found("entity", entity_id))?;
            let taken = self.holders(room_id, identifiers).await?;
            let mut held_elsewhere = Vec::new();
            let mut added = Vec::new();
            for i in identifiers {
                match taken.iter().find(|(t, _)| t == i) {
                    Some((_, h)) if *h != entity_id => held_elsewhere.push((i.clone(), *h)),
                    Some(_) => {}
                    None => added.push(i.clone()),
                }
            }
            let before = e.clone();
            e.add_identifiers(added.iter().cloned());
            e.add_missing_properties(properties);
            let changed = e != before;
            let head = if changed { self.event_head(room_id).await? } else { Default::default() };
            let key = key2("room_id", room_id.to_string(), "entity_id", entity_id.to_string());
            let mut items = vec![self.cond_update(
                &self.names.entities,
                key,
                serde_json::to_value(&e).unwrap_or_default(),
                version,
                "",
                None,
            )?];
            items.extend(added.iter().map(|i| self.ident_put(room_id, i, entity_id)));
            if let Some(c) = idempotency {
                items.push(self.key_put(room_id, c));
            }
            let key_at = items.len().saturating_sub(1);
            if changed {
                items.extend(self.event_items(room_id, &head, event)?);
            }
            match self.transact(items, "TransactWriteItems (attach)").await? {
                Tx::Done => return Ok(AttachOutcome::Attached { entity: e, held_elsewhere }),
                Tx::Cancelled(reasons) => {
                    if idempotency.is_some() && check_failed(&reasons, key_at) {
                        return Ok(AttachOutcome::Replayed(self.require_key(room_id, idempotency).await?));
                    }
                    backoff(attempt).await;
                }
            }
        }
        Err(gave_up("attach to entity"))
    }

    async fn get_entities(&self, room_id: RoomId, ids: &[EntityId]) -> Result<Vec<Entity>> {
        let keys =
            ids.iter().map(|id| key2("room_id", room_id.to_string(), "entity_id", id.to_string())).collect();
        self.batch_get(&self.names.entities, keys)
            .await?
            .iter()
            .filter(|i| i.contains_key("doc"))
            .map(|i| entity_of(i).map(|x| x.0))
            .collect()
    }

    async fn list_entities(
        &self,
        room_id: RoomId,
        after: Option<EntityId>,
        limit: usize,
    ) -> Result<Vec<Entity>> {
        let (cond, values) =
            range_after(room_id, "room_id = :r AND entity_id > :a", after.map(|a| a.to_string()));
        let items = self
            .query_all(
                &self.names.entities,
                None,
                cond,
                None,
                HashMap::new(),
                values,
                true,
                true,
                |i| i.contains_key("doc"),
                limit,
            )
            .await?;
        items.iter().map(|i| entity_of(i).map(|x| x.0)).collect()
    }

    async fn entity_aliases(&self, room_id: RoomId) -> Result<Vec<(EntityId, EntityId)>> {
        let items = self
            .query_all(
                &self.names.entities,
                None,
                "room_id = :r",
                Some("attribute_exists(merged_into)"),
                HashMap::new(),
                HashMap::from([(":r".to_owned(), s(room_id.to_string()))]),
                true,
                true,
                |_| true,
                usize::MAX,
            )
            .await?;
        items
            .iter()
            .map(|i| Ok((get_s(i, "entity_id")?.parse()?, get_s(i, "merged_into")?.parse()?)))
            .collect()
    }

    async fn find_identifiers(
        &self,
        room_id: RoomId,
        identifiers: &[Identifier],
    ) -> Result<Vec<(Identifier, EntityId)>> {
        self.holders(room_id, identifiers).await
    }

    async fn merge_entities(
        &self,
        room_id: RoomId,
        winner: EntityId,
        loser: EntityId,
        event: &Event,
    ) -> Result<Entity> {
        for attempt in 0..ATTEMPTS {
            match self.merge_once(room_id, winner, loser, event).await? {
                Some(w) => return Ok(w),
                None => backoff(attempt).await,
            }
        }
        Err(gave_up("merge entities"))
    }

    async fn put_relationship(
        &self,
        rel: &Relationship,
        idempotency: Option<&IdempotencyKey>,
        event: &Event,
    ) -> Result<Write<(Relationship, bool)>> {
        self.put_relationship_with(rel, idempotency, event).await
    }
    async fn get_relationship(&self, room_id: RoomId, key: &RelationshipKey) -> Result<Option<Relationship>> {
        self.get_item(&self.names.relationships, rel_key(room_id, key), "GetItem")
            .await?
            .map(|i| doc(&i))
            .transpose()
    }

    async fn relationships_touching(&self, room_id: RoomId, ids: &[EntityId]) -> Result<Vec<Relationship>> {
        let mut out: BTreeMap<RelationshipKey, Relationship> = BTreeMap::new();
        for id in ids {
            let pk = format!("{room_id}#{id}");
            let outgoing = self
                .query_all(
                    &self.names.relationships,
                    None,
                    "pk = :p",
                    None,
                    HashMap::new(),
                    HashMap::from([(":p".to_owned(), s(pk.clone()))]),
                    true,
                    true,
                    |_| true,
                    usize::MAX,
                )
                .await?;
            let incoming = self
                .query_all(
                    &self.names.relationships,
                    Some("by_target"),
                    "target_pk = :p",
                    None,
                    HashMap::new(),
                    HashMap::from([(":p".to_owned(), s(pk))]),
                    true,
                    false,
                    |_| true,
                    usize::MAX,
                )
                .await?;
            for item in outgoing.iter().chain(incoming.iter()) {
                let r: Relationship = doc(item)?;
                out.insert(RelationshipKey::of(&r), r);
            }
        }
        Ok(out.into_values().collect())
    }

    async fn list_relationships(
        &self,
        room_id: RoomId,
        after: Option<&RelationshipKey>,
        limit: usize,
    ) -> Result<Vec<Relationship>> {
        let (cond, values) =
            range_after(room_id, "room_id = :r AND edge > :a", after.map(RelationshipKey::encode));
        let items = self
            .query_all(
                &self.names.relationships,
                Some("by_room"),
                cond,
                None,
                HashMap::new(),
                values,
                true,
                false,
                |_| true,
                limit,
            )
            .await?;
        items.iter().map(doc).collect()
    }

    async fn relationship_degrees(&self, room_id: RoomId) -> Result<Vec<(EntityId, u64)>> {
        let mut d: BTreeMap<EntityId, u64> = BTreeMap::new();
        for r in self.list_relationships(room_id, None, usize::MAX).await? {
            *d.entry(r.source_entity_id).or_default() += 1;
            if r.target_entity_id != r.source_entity_id {
                *d.entry(r.target_entity_id).or_default() += 1;
            }
        }
        Ok(d.into_iter().collect())
    }

    async fn entity_stats(&self, room_id: RoomId) -> Result<EntityStats> {
        let count = |filter: &'static str| async move {
            let mut total = 0u64;
            let mut start = None;
            loop {
                let resp = self
                    .ddb
                    .query()
                    .table_name(&self.names.entities)
                    .key_condition_expression("room_id = :r")
                    .filter_expression(filter)
                    .expression_attribute_values(":r", s(room_id.to_string()))
                    .select(Select::Count)
                    .consistent_read(true)
                    .set_exclusive_start_key(start.take())
                    .send()
                    .await
                    .map_err(|e| aws_err("dynamodb", "Query", e))?;
                total += resp.count as u64;
                match resp.last_evaluated_key {
                    Some(k) if !k.is_empty() => start = Some(k),
                    _ => return Ok::<u64, Error>(total),
                }
            }
        };
        let canonical = count("attribute_exists(doc) AND attribute_not_exists(merged_into)").await?;
        let merged = count("attribute_exists(doc) AND attribute_exists(merged_into)").await?;
        let key = HashMap::from([("room_id".to_owned(), s(room_id.to_string()))]);
        let relationships = self
            .get_item(&self.names.rooms, key, "GetItem")
            .await?
            .and_then(|i| opt_n(&i, "rel_count"))
            .unwrap_or(0) as u64;
        Ok(EntityStats { canonical, merged, relationships })
    }
}
