//! Entities, the identifiers they hold, and relationships.

use async_trait::async_trait;
use macp_core::model::{Entity, EntityType, Event, Identifier, Relationship};
use macp_core::store::{
    AttachOutcome, CreateOutcome, EntityStats, EntityStore, IdempotencyKey, RelationshipKey, Write,
};
use macp_core::{AgentId, EntityId, Error, Result, RoomId, Timestamp, UserId};
use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OptionalExtension, Row, params};
use serde_json::{Map, Value};

use crate::db::*;
use crate::store::append_event;
use crate::writer::Sync;

const ENTITY_COLS: &str = "room_id, entity_id, name, entity_type, identifiers, properties, created_by, agent_id, created_at, merged_into";

fn entity_from_row(r: &Row<'_>) -> Result<Entity> {
    let g = |e: rusqlite::Error| sql_err(e);
    Ok(Entity {
        room_id: parse(&r.get::<_, String>(0).map_err(g)?)?,
        entity_id: parse(&r.get::<_, String>(1).map_err(g)?)?,
        name: r.get(2).map_err(g)?,
        entity_type: EntityType::parse(&r.get::<_, String>(3).map_err(g)?)?,
        identifiers: from_json("identifiers", &r.get::<_, String>(4).map_err(g)?)?,
        properties: from_json("properties", &r.get::<_, String>(5).map_err(g)?)?,
        created_by: UserId::new(r.get::<_, String>(6).map_err(g)?)?,
        agent_id: AgentId::new(r.get::<_, String>(7).map_err(g)?)?,
        created_at: Timestamp::from_millis(r.get(8).map_err(g)?),
        merged_into: r.get::<_, Option<String>>(9).map_err(g)?.map(|s| parse(&s)).transpose()?,
    })
}

const REL_COLS: &str = "room_id, source_entity_id, relationship_type, target_entity_id, description, evidence, created_at, agent_id, user_id, idempotency_key";

fn rel_from_row(r: &Row<'_>) -> Result<Relationship> {
    let g = |e: rusqlite::Error| sql_err(e);
    Ok(Relationship {
        room_id: parse(&r.get::<_, String>(0).map_err(g)?)?,
        source_entity_id: parse(&r.get::<_, String>(1).map_err(g)?)?,
        relationship_type: r.get(2).map_err(g)?,
        target_entity_id: parse(&r.get::<_, String>(3).map_err(g)?)?,
        description: r.get(4).map_err(g)?,
        evidence: from_json("evidence", &r.get::<_, String>(5).map_err(g)?)?,
        created_at: Timestamp::from_millis(r.get(6).map_err(g)?),
        agent_id: AgentId::new(r.get::<_, String>(7).map_err(g)?)?,
        user_id: UserId::new(r.get::<_, String>(8).map_err(g)?)?,
        idempotency_key: r.get(9).map_err(g)?,
    })
}

fn holders_of(tx: &Connection, room: &str, ids: &[Identifier]) -> Result<Vec<(Identifier, EntityId)>> {
    let mut out = Vec::new();
    let mut stmt = tx
        .prepare_cached(
            "SELECT entity_id FROM identifier_holders WHERE room_id = ? AND id_type = ? AND id_value = ?",
        )
        .map_err(sql_err)?;
    for i in ids {
        let holder: Option<String> =
            stmt.query_row(params![room, i.id_type, i.value], |r| r.get(0)).optional().map_err(sql_err)?;
        if let Some(h) = holder {
            out.push((i.clone(), parse(&h)?));
        }
    }
    Ok(out)
}

fn entity_in(tx: &Connection, room: &str, id: EntityId) -> Result<Option<Entity>> {
    let sql = format!("SELECT {ENTITY_COLS} FROM entities WHERE room_id = ? AND entity_id = ?");
    Ok(query_all(tx, &sql, &[text(room), text(id)], entity_from_row)?.pop())
}

/// Writes an entity's row (a create, or a restore).
pub(crate) fn insert_entity_row(tx: &Connection, e: &Entity) -> Result<()> {
    exec(
        tx,
        &format!("INSERT INTO entities ({ENTITY_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
        params![
            e.room_id.to_string(),
            e.entity_id.to_string(),
            e.name,
            e.entity_type.as_str(),
            to_json(&e.identifiers),
            to_json(&e.properties),
            e.created_by.as_str(),
            e.agent_id.as_str(),
            e.created_at.as_millis(),
            e.merged_into.map(|m| m.to_string()),
        ],
    )
    .map_err(sql_err)?;
    Ok(())
}

/// Records that `entity_id` holds `i`.
pub(crate) fn insert_holder_row(
    tx: &Connection,
    room_id: RoomId,
    i: &Identifier,
    entity_id: EntityId,
) -> Result<()> {
    exec(
        tx,
        "INSERT INTO identifier_holders (room_id, id_type, id_value, entity_id) VALUES (?, ?, ?, ?)",
        params![room_id.to_string(), i.id_type, i.value, entity_id.to_string()],
    )
    .map_err(sql_err)?;
    Ok(())
}

/// Writes a relationship's row (a first assertion, or a restore).
pub(crate) fn insert_relationship_row(tx: &Connection, rel: &Relationship) -> Result<()> {
    exec(
        tx,
        &format!("INSERT INTO relationships ({REL_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
        params![
            rel.room_id.to_string(),
            rel.source_entity_id.to_string(),
            rel.relationship_type,
            rel.target_entity_id.to_string(),
            rel.description,
            to_json(&rel.evidence),
            rel.created_at.as_millis(),
            rel.agent_id.as_str(),
            rel.user_id.as_str(),
            rel.idempotency_key,
        ],
    )
    .map_err(sql_err)?;
    Ok(())
}

#[async_trait]
impl EntityStore for SqliteStore {
    async fn create_entity(
        &self,
        e: &Entity,
        idempotency: Option<&IdempotencyKey>,
        event: &Event,
    ) -> Result<CreateOutcome> {
        let (e, idempotency, event) = (e.clone(), idempotency.cloned(), event.clone());
        self.write(Sync::Durable, move |tx, _| {
            let room = e.room_id.to_string();
            if let Some(rec) = existing_key(tx, &room, idempotency.as_ref())? {
                return Ok(CreateOutcome::Replayed(rec));
            }
            let taken = holders_of(tx, &room, &e.identifiers)?;
            if !taken.is_empty() {
                return Ok(CreateOutcome::IdentifiersTaken(taken));
            }
            insert_entity_row(tx, &e)?;
            for i in &e.identifiers {
                insert_holder_row(tx, e.room_id, i, e.entity_id)?;
            }
            append_event(tx, e.room_id, &event)?;
            record_key(tx, &room, idempotency.as_ref())?;
            Ok(CreateOutcome::Created(e))
        })
        .await
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
        let (identifiers, properties, idempotency, event) =
            (identifiers.to_vec(), properties.clone(), idempotency.cloned(), event.clone());
        self.write(Sync::Durable, move |tx, _| {
            let room = room_id.to_string();
            if let Some(rec) = existing_key(tx, &room, idempotency.as_ref())? {
                return Ok(AttachOutcome::Replayed(rec));
            }
            let mut entity =
                entity_in(tx, &room, entity_id)?.ok_or_else(|| Error::not_found("entity", entity_id))?;
            let taken = holders_of(tx, &room, &identifiers)?;
            let mut held_elsewhere = Vec::new();
            let mut added = Vec::new();
            for i in &identifiers {
                match taken.iter().find(|(t, _)| t == i) {
                    Some((_, holder)) if *holder != entity_id => held_elsewhere.push((i.clone(), *holder)),
                    Some(_) => {}
                    None => {
                        insert_holder_row(tx, room_id, i, entity_id)?;
                        added.push(i.clone());
                    }
                }
            }
            let before = entity.clone();
            entity.add_identifiers(added);
            entity.add_missing_properties(&properties);
            if entity != before {
                append_event(tx, room_id, &event)?;
            }
            exec(
                tx,
                "UPDATE entities SET identifiers = ?, properties = ? WHERE room_id = ? AND entity_id = ?",
                params![
                    to_json(&entity.identifiers),
                    to_json(&entity.properties),
                    room,
                    entity_id.to_string()
                ],
            )
            .map_err(sql_err)?;
            record_key(tx, &room, idempotency.as_ref())?;
            Ok(AttachOutcome::Attached { entity, held_elsewhere })
        })
        .await
    }

    async fn get_entities(&self, room_id: RoomId, ids: &[EntityId]) -> Result<Vec<Entity>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<SqlValue> = ids.iter().map(text).collect();
        self.read_small(move |c| {
            let sql = format!(
                "SELECT {ENTITY_COLS} FROM entities WHERE room_id = ? AND entity_id IN {}",
                placeholders(ids.len())
            );
            let mut p = vec![text(room_id)];
            p.extend(ids);
            query_all(c, &sql, &p, entity_from_row)
        })
        .await
    }

    async fn list_entities(
        &self,
        room_id: RoomId,
        after: Option<EntityId>,
        limit: usize,
    ) -> Result<Vec<Entity>> {
        self.read_small(move |c| {
            let sql = format!(
                "SELECT {ENTITY_COLS} FROM entities WHERE room_id = ? AND entity_id > ? ORDER BY entity_id LIMIT ?"
            );
            let after = after.map(|a| a.to_string()).unwrap_or_default();
            query_all(c, &sql, &[text(room_id), text(after), SqlValue::Integer(limit as i64)], entity_from_row)
        })
        .await
    }

    async fn entity_aliases(&self, room_id: RoomId) -> Result<Vec<(EntityId, EntityId)>> {
        self.read_small(move |c| {
            query_all(
                c,
                "SELECT entity_id, merged_into FROM entities WHERE room_id = ? AND merged_into IS NOT NULL",
                &[text(room_id)],
                |r| {
                    Ok((
                        parse(&r.get::<_, String>(0).map_err(sql_err)?)?,
                        parse(&r.get::<_, String>(1).map_err(sql_err)?)?,
                    ))
                },
            )
        })
        .await
    }

    async fn find_identifiers(
        &self,
        room_id: RoomId,
        identifiers: &[Identifier],
    ) -> Result<Vec<(Identifier, EntityId)>> {
        let identifiers = identifiers.to_vec();
        self.read_small(move |c| holders_of(c, &room_id.to_string(), &identifiers)).await
    }

    async fn merge_entities(
        &self,
        room_id: RoomId,
        winner: EntityId,
        loser: EntityId,
        event: &Event,
    ) -> Result<Entity> {
        let event = event.clone();
        self.write(Sync::Durable, move |tx, _| {
            let room = room_id.to_string();
            let mut w = entity_in(tx, &room, winner)?.ok_or_else(|| Error::not_found("entity", winner))?;
            let l = entity_in(tx, &room, loser)?.ok_or_else(|| Error::not_found("entity", loser))?;
            if winner == loser || w.merged_into.is_some() || l.merged_into.is_some() {
                return Err(Error::conflict("one of the entities was merged concurrently"));
            }
            w.absorb(&l);
            exec(
                tx,
                "UPDATE entities SET merged_into = ? WHERE room_id = ? AND entity_id = ?",
                params![winner.to_string(), room, loser.to_string()],
            )
            .map_err(sql_err)?;
            exec(
                tx,
                "UPDATE entities SET identifiers = ? WHERE room_id = ? AND entity_id = ?",
                params![to_json(&w.identifiers), room, winner.to_string()],
            )
            .map_err(sql_err)?;
            append_event(tx, room_id, &event)?;
            Ok(w)
        })
        .await
    }

    async fn put_relationship(
        &self,
        rel: &Relationship,
        idempotency: Option<&IdempotencyKey>,
        event: &Event,
    ) -> Result<Write<(Relationship, bool)>> {
        let (rel, idempotency, event) = (rel.clone(), idempotency.cloned(), event.clone());
        self.write(Sync::Durable, move |tx, _| {
            let room = rel.room_id.to_string();
            if let Some(rec) = existing_key(tx, &room, idempotency.as_ref())? {
                return Ok(Write::Replayed(rec));
            }
            let key = [
                text(&room),
                text(rel.source_entity_id),
                text(&rel.relationship_type),
                text(rel.target_entity_id),
            ];
            let sql = format!(
                "SELECT {REL_COLS} FROM relationships WHERE room_id = ? AND source_entity_id = ? AND relationship_type = ? AND target_entity_id = ?"
            );
            let out = match query_all(tx, &sql, &key, rel_from_row)?.pop() {
                Some(mut existing) => {
                    let before = existing.clone();
                    existing.absorb(&rel);
                    if existing != before {
                        append_event(tx, rel.room_id, &event)?;
                    }
                    exec(tx,
                        "UPDATE relationships SET evidence = ?, description = ? WHERE room_id = ? AND source_entity_id = ? AND relationship_type = ? AND target_entity_id = ?",
                        params![
                            to_json(&existing.evidence),
                            existing.description,
                            room,
                            rel.source_entity_id.to_string(),
                            rel.relationship_type,
                            rel.target_entity_id.to_string()
                        ],
                    )
                    .map_err(sql_err)?;
                    (existing, false)
                }
                None => {
                    insert_relationship_row(tx, &rel)?;
                    append_event(tx, rel.room_id, &event)?;
                    (rel, true)
                }
            };
            record_key(tx, &room, idempotency.as_ref())?;
            Ok(Write::Applied(out))
        })
        .await
    }

    async fn get_relationship(&self, room_id: RoomId, key: &RelationshipKey) -> Result<Option<Relationship>> {
        let key = key.clone();
        self.read_small(move |c| {
            let sql = format!(
                "SELECT {REL_COLS} FROM relationships WHERE room_id = ? AND source_entity_id = ? AND relationship_type = ? AND target_entity_id = ?"
            );
            let p = [text(room_id), text(key.source), text(&key.relationship_type), text(key.target)];
            Ok(query_all(c, &sql, &p, rel_from_row)?.pop())
        })
        .await
    }

    async fn relationships_touching(&self, room_id: RoomId, ids: &[EntityId]) -> Result<Vec<Relationship>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<SqlValue> = ids.iter().map(text).collect();
        self.read_small(move |c| {
            let ph = placeholders(ids.len());
            let sql = format!(
                "SELECT {REL_COLS} FROM relationships WHERE room_id = ? AND (source_entity_id IN {ph} OR target_entity_id IN {ph})
                 ORDER BY source_entity_id, relationship_type, target_entity_id"
            );
            let mut p = vec![text(room_id)];
            p.extend(ids.iter().cloned());
            p.extend(ids);
            query_all(c, &sql, &p, rel_from_row)
        })
        .await
    }

    async fn list_relationships(
        &self,
        room_id: RoomId,
        after: Option<&RelationshipKey>,
        limit: usize,
    ) -> Result<Vec<Relationship>> {
        let after = after.cloned();
        self.read_small(move |c| {
            let mut sql = format!("SELECT {REL_COLS} FROM relationships WHERE room_id = ?");
            let mut p = vec![text(room_id)];
            if let Some(k) = after {
                sql.push_str(" AND (source_entity_id, relationship_type, target_entity_id) > (?, ?, ?)");
                p.extend([text(k.source), text(k.relationship_type), text(k.target)]);
            }
            sql.push_str(" ORDER BY source_entity_id, relationship_type, target_entity_id LIMIT ?");
            p.push(SqlValue::Integer(limit as i64));
            query_all(c, &sql, &p, rel_from_row)
        })
        .await
    }

    async fn relationship_degrees(&self, room_id: RoomId) -> Result<Vec<(EntityId, u64)>> {
        self.read_small(move |c| {
            query_all(
                c,
                "SELECT id, count(*) FROM (
                     SELECT source_entity_id AS id FROM relationships WHERE room_id = ?1
                     UNION ALL
                     SELECT target_entity_id FROM relationships WHERE room_id = ?1 AND target_entity_id <> source_entity_id
                 ) GROUP BY id ORDER BY id",
                &[text(room_id)],
                |r| Ok((parse(&r.get::<_, String>(0).map_err(sql_err)?)?, r.get::<_, i64>(1).map_err(sql_err)? as u64)),
            )
        })
        .await
    }

    async fn entity_stats(&self, room_id: RoomId) -> Result<EntityStats> {
        self.read_small(move |c| {
            row(
                c,
                "SELECT
                    (SELECT count(*) FROM entities WHERE room_id = ?1 AND merged_into IS NULL),
                    (SELECT count(*) FROM entities WHERE room_id = ?1 AND merged_into IS NOT NULL),
                    (SELECT count(*) FROM relationships WHERE room_id = ?1)",
                params![room_id.to_string()],
                |r| {
                    Ok(EntityStats {
                        canonical: r.get::<_, i64>(0)? as u64,
                        merged: r.get::<_, i64>(1)? as u64,
                        relationships: r.get::<_, i64>(2)? as u64,
                    })
                },
            )
            .map_err(sql_err)
        })
        .await
    }
}
