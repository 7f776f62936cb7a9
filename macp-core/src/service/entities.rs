//! The entity graph: identifier-based creation and attachment, relationships, lazy merges, and
//! graph reads that resolve merge aliases.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{Aliases, Macp, Principal, check_replay, fingerprint, idempotency_key};
use crate::error::{Error, Result};
use crate::ids::{AgentId, EntityId, RoomId};
use crate::model::{
    Entity, EntityType, Event, EventKind, Evidence, Identifier, Relationship, identifier_union,
};
use crate::store::{AttachOutcome, CreateOutcome, RelationshipKey, Write, WriteOperation};
use crate::validate;

/// `add_entity`: create an entity, or attach to the one that already holds one of its
/// identifiers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct AddEntity {
    /// The room.
    pub room_id: RoomId,
    /// Display name, e.g. "orders-db primary".
    pub name: String,
    /// "service", "person", "event" or "resource".
    #[serde(rename = "type")]
    pub entity_type: EntityType,
    /// Typed identifiers, e.g. [{type: "hostname", value: "db-1.prod"}, {type: "arn", value: "arn:aws:…"}].
    /// If another agent already added an entity with one of them, you get that entity.
    #[serde(default)]
    pub identifiers: Vec<Identifier>,
    /// Free-form facts about the entity (a JSON object). On an existing entity, keys it lacks
    /// are added and existing ones kept.
    #[serde(default)]
    pub properties: Map<String, Value>,
    /// Any unique string; retrying with the same key never writes twice.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// Which of your agents acts; defaults to the one you joined with.
    #[serde(default)]
    pub agent_id: Option<AgentId>,
}

impl AddEntity {
    /// An entity with a name and type.
    pub fn new(room_id: RoomId, agent_id: AgentId, name: impl Into<String>, entity_type: EntityType) -> Self {
        Self {
            room_id,
            agent_id: Some(agent_id),
            name: name.into(),
            entity_type,
            identifiers: Vec::new(),
            properties: Map::new(),
            idempotency_key: None,
        }
    }

    /// With an identifier.
    pub fn identifier(mut self, id_type: impl Into<String>, value: impl Into<String>) -> Self {
        self.identifiers.push(Identifier { id_type: id_type.into(), value: value.into() });
        self
    }

    /// With a property.
    pub fn property(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.properties.insert(key.into(), value.into());
        self
    }

    /// With an idempotency key.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }
}

/// The result of `add_entity`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct EntityOutcome {
    /// The canonical entity, as it is now.
    pub entity: Entity,
    /// True if this call created it; false if it attached to an existing entity.
    pub created: bool,
    /// True when this was a retry with the same idempotency key: nothing new was written.
    pub replayed: bool,
    /// Requested identifiers another entity already held (why it attached).
    pub matched_identifiers: Vec<Identifier>,
    /// Other entities that also hold some of the requested identifiers: candidates for
    /// `merge_entities`.
    pub other_matches: Vec<EntityId>,
    /// Requested identifiers not added because another entity holds them.
    pub identifiers_held_elsewhere: Vec<Identifier>,
    /// Secrets redacted from this write, by kind.
    #[serde(default, skip_serializing_if = "crate::redact::Redactions::is_empty")]
    pub redacted: crate::redact::Redactions,
}

/// `add_relationship`: assert an edge between two entities.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct AddRelationship {
    /// The room.
    pub room_id: RoomId,
    /// The entity the edge starts from.
    pub source_entity_id: EntityId,
    /// The entity the edge points to.
    pub target_entity_id: EntityId,
    /// e.g. "depends_on", "caused_by", "changed_by", "same_as".
    pub relationship_type: String,
    /// What the edge means here.
    #[serde(default)]
    pub description: Option<String>,
    /// Proof for the edge (same shape as post_finding's evidence).
    #[serde(default)]
    pub evidence: Vec<Evidence>,
    /// Any unique string; retrying with the same key never writes twice.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// Which of your agents acts; defaults to the one you joined with.
    #[serde(default)]
    pub agent_id: Option<AgentId>,
}

impl AddRelationship {
    /// An edge `source -[relationship_type]-> target`.
    pub fn new(
        room_id: RoomId,
        agent_id: AgentId,
        source: EntityId,
        relationship_type: impl Into<String>,
        target: EntityId,
    ) -> Self {
        Self {
            room_id,
            agent_id: Some(agent_id),
            source_entity_id: source,
            target_entity_id: target,
            relationship_type: relationship_type.into(),
            description: None,
            evidence: Vec::new(),
            idempotency_key: None,
        }
    }

    /// With a description.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// With evidence.
    pub fn evidence(mut self, evidence: impl IntoIterator<Item = Evidence>) -> Self {
        self.evidence = evidence.into_iter().collect();
        self
    }

    /// With an idempotency key.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }
}

/// The result of `add_relationship`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct RelationshipOutcome {
    /// The edge as stored, endpoints resolved to canonical ids.
    pub relationship: Relationship,
    /// False when the same edge already existed and this call added to its evidence.
    pub created: bool,
    /// True when this was a retry with the same idempotency key.
    pub replayed: bool,
    /// Secrets redacted from this write, by kind.
    #[serde(default, skip_serializing_if = "crate::redact::Redactions::is_empty")]
    pub redacted: crate::redact::Redactions,
}

/// `merge_entities`: declare two entities the same thing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct MergeEntities {
    /// The room.
    pub room_id: RoomId,
    /// The entity that remains.
    pub winner_entity_id: EntityId,
    /// The entity that becomes an alias of the winner.
    pub loser_entity_id: EntityId,
    /// Which of your agents acts; defaults to the one you joined with.
    #[serde(default)]
    pub agent_id: Option<AgentId>,
}

impl MergeEntities {
    /// `agent_id` merges `loser` into `winner`.
    pub fn new(room_id: RoomId, agent_id: AgentId, winner: EntityId, loser: EntityId) -> Self {
        Self { room_id, winner_entity_id: winner, loser_entity_id: loser, agent_id: Some(agent_id) }
    }
}

/// The result of `merge_entities`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct MergeOutcome {
    /// The canonical entity after the merge, with its aliases.
    pub entity: GraphEntity,
    /// True if the two ids already resolved to the same entity: nothing was written.
    pub already_merged: bool,
}

/// `get_entity_graph`: entities and their relationships, merges resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct GraphQuery {
    /// The room.
    pub room_id: RoomId,
    /// Start from this entity; omit for the best-connected entities of the whole room.
    #[serde(default)]
    pub entity_id: Option<EntityId>,
    /// Or start from the entity holding this identifier ({type, value}): the way to look an
    /// entity up without creating it (`not_found` if the room has none).
    #[serde(default)]
    pub identifier: Option<Identifier>,
    /// Hops from the start (default 1, at most 3; 0 for the entity alone).
    #[serde(default)]
    pub depth: Option<u32>,
}

impl GraphQuery {
    /// The best-connected entities of the room.
    pub fn new(room_id: RoomId) -> Self {
        Self { room_id, entity_id: None, identifier: None, depth: None }
    }

    /// The entity holding `identifier` and its neighbours, `depth` hops out.
    pub fn by_identifier(mut self, id_type: impl Into<String>, value: impl Into<String>, depth: u32) -> Self {
        self.identifier = Some(Identifier { id_type: id_type.into(), value: value.into() });
        self.depth = Some(depth);
        self
    }

    /// The neighbourhood of `entity_id`, `depth` hops out.
    pub fn around(mut self, entity_id: EntityId, depth: u32) -> Self {
        self.entity_id = Some(entity_id);
        self.depth = Some(depth);
        self
    }
}

/// An entity in a graph read: canonical, with the ids merged into it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct GraphEntity {
    /// The entity.
    #[serde(flatten)]
    pub entity: Entity,
    /// Ids merged into this entity; they resolve here.
    pub aliases: Vec<EntityId>,
    /// Relationships touching this entity or its aliases.
    pub degree: u64,
}

/// Entities and relationships, all ids canonical.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct EntityGraph {
    /// The starting entity (canonical), when one was given.
    pub root: Option<EntityId>,
    /// Entities (highest degree first for a whole-room read; walk order from the root).
    pub entities: Vec<GraphEntity>,
    /// Relationships among and around them; edges that became identical through a merge are
    /// combined (evidence united).
    pub relationships: Vec<Relationship>,
    /// Entities in the room (merged aliases not counted).
    pub total_entities: u64,
    /// Relationships stored in the room.
    pub total_relationships: u64,
    /// True if a cap stopped the read before everything reachable was returned.
    pub truncated: bool,
}

#[derive(Serialize)]
struct EntityFingerprint<'a> {
    agent_id: &'a AgentId,
    name: &'a str,
    entity_type: EntityType,
    identifiers: &'a [Identifier],
    properties: &'a Map<String, Value>,
}

#[derive(Serialize)]
struct RelationshipFingerprint<'a> {
    agent_id: &'a AgentId,
    source: EntityId,
    relationship_type: &'a str,
    target: EntityId,
    description: Option<&'a str>,
    evidence: &'a [Evidence],
}

impl Macp {
    /// Creates an entity, or attaches to the existing entity that holds one of its identifiers
    /// (race-safe: concurrent adds sharing an identifier converge on one entity).
    pub async fn add_entity(&self, who: &Principal, mut req: AddEntity) -> Result<EntityOutcome> {
        let redacted = self.redact(&mut req)?;
        let l = &self.inner.limits;
        let store = &self.inner.store;
        self.writable_room(who, req.room_id).await?;
        let session = self.agent_session(who, req.room_id, req.agent_id.as_ref()).await?;
        let name = validate::required_text("name", &req.name, l.max_name_bytes)?;
        let identifiers = validate::identifiers(&req.identifiers, l)?;
        validate::properties(&req.properties, l)?;
        let key = validate::idempotency_key(req.idempotency_key.as_deref(), l)?;
        let print = fingerprint(
            WriteOperation::AddEntity,
            &EntityFingerprint {
                agent_id: &session.agent_id,
                name: &name,
                entity_type: req.entity_type,
                identifiers: &identifiers,
                properties: &req.properties,
            },
        );
        let now = self.now();

        let mut taken = if identifiers.is_empty() {
            Vec::new()
        } else {
            store.find_identifiers(req.room_id, &identifiers).await?
        };
        if taken.is_empty() {
            let entity = Entity {
                room_id: req.room_id,
                entity_id: EntityId::generate(),
                name,
                entity_type: req.entity_type,
                identifiers: identifiers.clone(),
                properties: req.properties.clone(),
                created_by: who.user_id.clone(),
                agent_id: session.agent_id.clone(),
                created_at: now,
                merged_into: None,
            };
            let keyed = idempotency_key(
                key.as_ref(),
                WriteOperation::AddEntity,
                &print,
                format!("created:{}", entity.entity_id),
                now,
            );
            let event = Event::new(
                EventKind::EntityAdded,
                now,
                who.user_id.clone(),
                &format!("{} {}", entity.entity_type, entity.name),
            )
            .agent(&session.agent_id)
            .entities([entity.entity_id]);
            match store.create_entity(&entity, keyed.as_ref(), &event).await? {
                CreateOutcome::Created(e) => {
                    self.changed(req.room_id);
                    self.touch(&session).await;
                    return Ok(EntityOutcome {
                        entity: e,
                        created: true,
                        replayed: false,
                        matched_identifiers: Vec::new(),
                        other_matches: Vec::new(),
                        identifiers_held_elsewhere: Vec::new(),
                        redacted: redacted.clone(),
                    });
                }
                CreateOutcome::Replayed(rec) => {
                    check_replay(&rec, WriteOperation::AddEntity, &print)?;
                    return self.replay_entity(req.room_id, &rec.result_id, redacted.clone()).await;
                }
                // Lost a race with a concurrent create: attach to the winner below.
                CreateOutcome::IdentifiersTaken(t) => taken = t,
            }
        }

        // Attach: the entity holding the first matched identifier (in normalised order) wins;
        // any other entities holding the rest are reported as merge candidates.
        taken.sort();
        let aliases = self.aliases(req.room_id).await?;
        let mut holders: Vec<EntityId> = Vec::new();
        for (_, holder) in &taken {
            let c = aliases.resolve(*holder)?;
            if !holders.contains(&c) {
                holders.push(c);
            }
        }
        let target = holders[0];
        let existing = self.canonical_entity(req.room_id, target).await?;
        let union = identifier_union(&existing.identifiers, identifiers.iter().cloned());
        // Only identifiers it does not hold yet count: attaching by ones it has is always fine.
        if union.len() > existing.identifiers.len() && union.len() > l.max_identifiers {
            return Err(Error::InvalidInput {
                field: "identifiers".into(),
                message: format!(
                    "entity `{target}` already holds {} identifiers and this would bring it to {}; the limit is {}",
                    existing.identifiers.len(),
                    union.len(),
                    l.max_identifiers
                ),
                limit: Some(l.max_identifiers as u64),
            });
        }
        let mut after = existing.clone();
        after.add_missing_properties(&req.properties);
        validate::properties(&after.properties, l)?;

        let keyed = idempotency_key(
            key.as_ref(),
            WriteOperation::AddEntity,
            &print,
            format!("attached:{target}"),
            now,
        );
        let new: Vec<String> = identifiers
            .iter()
            .filter(|i| !existing.identifiers.contains(i))
            .map(|i| format!("{}:{}", i.id_type, i.value))
            .collect();
        let said = if new.is_empty() {
            format!("{}: new properties", existing.name)
        } else {
            format!("{}: + {}", existing.name, new.join(", "))
        };
        let event = Event::new(EventKind::IdentifiersAttached, now, who.user_id.clone(), &said)
            .agent(&session.agent_id)
            .entities([target]);
        match store
            .attach_to_entity(req.room_id, target, &identifiers, &req.properties, keyed.as_ref(), &event)
            .await?
        {
            AttachOutcome::Attached { entity, held_elsewhere } => {
                if entity != existing {
                    self.changed(req.room_id);
                }
                self.touch(&session).await;
                let matched: Vec<Identifier> = taken.iter().map(|(i, _)| i.clone()).collect();
                let elsewhere = held_elsewhere
                    .into_iter()
                    .filter(|(_, holder)| aliases.resolve(*holder).ok() != Some(target))
                    .map(|(i, _)| i)
                    .collect();
                Ok(EntityOutcome {
                    entity,
                    created: false,
                    replayed: false,
                    matched_identifiers: matched,
                    other_matches: holders[1..].to_vec(),
                    identifiers_held_elsewhere: elsewhere,
                    redacted: redacted.clone(),
                })
            }
            AttachOutcome::Replayed(rec) => {
                check_replay(&rec, WriteOperation::AddEntity, &print)?;
                self.replay_entity(req.room_id, &rec.result_id, redacted.clone()).await
            }
        }
    }

    /// A retry's answer: the first write's entity; `redacted` is the retry's own (the same texts
    /// give the same redactions).
    async fn replay_entity(
        &self,
        room_id: RoomId,
        result_id: &str,
        redacted: crate::redact::Redactions,
    ) -> Result<EntityOutcome> {
        let (created, id) = match result_id.split_once(':') {
            Some(("created", id)) => (true, id),
            Some(("attached", id)) => (false, id),
            _ => {
                return Err(Error::backend(
                    "core",
                    false,
                    format!("bad idempotency result `{result_id}`"),
                    None,
                ));
            }
        };
        let id: EntityId = id.parse()?;
        let aliases = self.aliases(room_id).await?;
        let entity = self.canonical_entity(room_id, aliases.resolve(id)?).await?;
        Ok(EntityOutcome {
            entity,
            created,
            replayed: true,
            matched_identifiers: Vec::new(),
            other_matches: Vec::new(),
            identifiers_held_elsewhere: Vec::new(),
            redacted,
        })
    }

    async fn canonical_entity(&self, room_id: RoomId, id: EntityId) -> Result<Entity> {
        self.inner
            .store
            .get_entities(room_id, &[id])
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| Error::not_found("entity", id))
    }

    /// Resolves a client-given entity id to its canonical entity, or `not_found` naming the
    /// field.
    async fn resolve_entity(
        &self,
        room_id: RoomId,
        aliases: &Aliases,
        id: EntityId,
        field: &str,
    ) -> Result<Entity> {
        self.require_entities(room_id, &[id], field).await?;
        self.canonical_entity(room_id, aliases.resolve(id)?).await
    }

    /// Links two entities. Ids of merged entities resolve to their winner. Asserting an edge
    /// that exists adds this call's evidence to it.
    pub async fn add_relationship(
        &self,
        who: &Principal,
        mut req: AddRelationship,
    ) -> Result<RelationshipOutcome> {
        let redacted = self.redact(&mut req)?;
        let l = &self.inner.limits;
        let store = &self.inner.store;
        self.writable_room(who, req.room_id).await?;
        let session = self.agent_session(who, req.room_id, req.agent_id.as_ref()).await?;
        let relationship_type =
            validate::snake_label("relationship_type", &req.relationship_type, l.max_label_bytes)?;
        let description =
            validate::optional_text("description", req.description.as_deref(), l.max_description_bytes)?;
        let evidence = validate::evidence(&req.evidence, l)?;
        let key = validate::idempotency_key(req.idempotency_key.as_deref(), l)?;
        let aliases = self.aliases(req.room_id).await?;
        let source =
            self.resolve_entity(req.room_id, &aliases, req.source_entity_id, "source_entity_id").await?;
        let target =
            self.resolve_entity(req.room_id, &aliases, req.target_entity_id, "target_entity_id").await?;
        if source.entity_id == target.entity_id {
            return Err(Error::invalid(
                "target_entity_id",
                "source and target are the same entity (possibly through a merge); a relationship needs two entities",
            ));
        }
        let print = fingerprint(
            WriteOperation::AddRelationship,
            &RelationshipFingerprint {
                agent_id: &session.agent_id,
                source: req.source_entity_id,
                relationship_type: &relationship_type,
                target: req.target_entity_id,
                description: description.as_deref(),
                evidence: &evidence,
            },
        );
        let now = self.now();
        let rel = Relationship {
            room_id: req.room_id,
            source_entity_id: source.entity_id,
            relationship_type,
            target_entity_id: target.entity_id,
            description,
            evidence,
            created_at: now,
            agent_id: session.agent_id.clone(),
            user_id: who.user_id.clone(),
            idempotency_key: key.clone(),
        };
        let rkey = RelationshipKey::of(&rel);
        if let Some(existing) = store.get_relationship(req.room_id, &rkey).await? {
            let added = rel.evidence.iter().filter(|e| !existing.evidence.contains(e)).count();
            if existing.evidence.len() + added > l.max_evidence {
                return Err(Error::InvalidInput {
                    field: "evidence".into(),
                    message: format!(
                        "this relationship already carries {} evidence items; adding {added} would exceed the limit of {}",
                        existing.evidence.len(),
                        l.max_evidence
                    ),
                    limit: Some(l.max_evidence as u64),
                });
            }
        }
        let keyed =
            idempotency_key(key.as_ref(), WriteOperation::AddRelationship, &print, rkey.encode(), now);
        let event = Event::new(
            EventKind::RelationshipAdded,
            now,
            who.user_id.clone(),
            &format!("{} {} {}", source.name, rel.relationship_type, target.name),
        )
        .agent(&session.agent_id)
        .entities([source.entity_id, target.entity_id]);
        let (stored, created, replayed) = match store.put_relationship(&rel, keyed.as_ref(), &event).await? {
            Write::Applied((r, created)) => {
                self.changed(req.room_id);
                (r, created, false)
            }
            Write::Replayed(rec) => {
                check_replay(&rec, WriteOperation::AddRelationship, &print)?;
                let k = RelationshipKey::decode(&rec.result_id)
                    .ok_or_else(|| Error::backend("core", false, "bad idempotency result", None))?;
                let r = store
                    .get_relationship(req.room_id, &k)
                    .await?
                    .ok_or_else(|| Error::not_found("relationship", &rec.result_id))?;
                (r, false, true)
            }
        };
        self.touch(&session).await;
        let relationship = resolve_edge(&aliases, stored)?;
        Ok(RelationshipOutcome { relationship, created, replayed, redacted })
    }

    /// Merges `loser` into `winner` lazily: the loser gets `merged_into`, identifiers are united
    /// on the winner, and every read resolves the old id. Ids are resolved first, so merging
    /// into an entity that was itself merged away targets its winner; merging two ids that
    /// already resolve to one entity is a no-op (`already_merged`).
    pub async fn merge_entities(&self, who: &Principal, req: MergeEntities) -> Result<MergeOutcome> {
        self.writable_room(who, req.room_id).await?;
        let session = self.agent_session(who, req.room_id, req.agent_id.as_ref()).await?;
        self.require_entities(req.room_id, &[req.winner_entity_id], "winner_entity_id").await?;
        self.require_entities(req.room_id, &[req.loser_entity_id], "loser_entity_id").await?;
        // A concurrent merge can invalidate the resolution between our read and the store's
        // conditional write; re-resolve and retry a few times before giving up.
        for _ in 0..4 {
            let aliases = self.aliases(req.room_id).await?;
            let winner = aliases.resolve(req.winner_entity_id)?;
            let loser = aliases.resolve(req.loser_entity_id)?;
            if winner == loser {
                let entity = self.graph_entity(req.room_id, &aliases, winner).await?;
                return Ok(MergeOutcome { entity, already_merged: true });
            }
            let (w, lo) = self.check_merged_identifiers(req.room_id, winner, loser).await?;
            let event = Event::new(
                EventKind::EntitiesMerged,
                self.now(),
                who.user_id.clone(),
                &format!("{} merged into {}", lo.name, w.name),
            )
            .agent(&session.agent_id)
            .entities([winner, loser]);
            match self.inner.store.merge_entities(req.room_id, winner, loser, &event).await {
                Ok(_) => {
                    self.changed(req.room_id);
                    self.touch(&session).await;
                    let aliases = self.aliases(req.room_id).await?;
                    let entity = self.graph_entity(req.room_id, &aliases, winner).await?;
                    return Ok(MergeOutcome { entity, already_merged: false });
                }
                Err(Error::Conflict { .. }) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(Error::conflict(
            "the entities kept changing under concurrent merges; read the graph again and retry",
        ))
    }

    /// The winner of a merge takes the union of both entities' identifiers, which must stay
    /// within `max_identifiers`. (Checked before the store's write: an attach racing the merge
    /// can add its own identifiers on top.)
    async fn check_merged_identifiers(
        &self,
        room_id: RoomId,
        winner: EntityId,
        loser: EntityId,
    ) -> Result<(Entity, Entity)> {
        let max = self.inner.limits.max_identifiers;
        let w = self.canonical_entity(room_id, winner).await?;
        let lo = self.canonical_entity(room_id, loser).await?;
        let union = identifier_union(&w.identifiers, lo.identifiers.iter().cloned());
        if union.len() > max {
            return Err(Error::InvalidInput {
                field: "loser_entity_id".into(),
                message: format!(
                    "merging would give `{winner}` {} identifiers ({} + {}); the limit per entity is {max}. \
                     Nothing was merged: link the two with a `same_as` relationship instead",
                    union.len(),
                    w.identifiers.len(),
                    lo.identifiers.len()
                ),
                limit: Some(max as u64),
            });
        }
        Ok((w, lo))
    }

    async fn graph_entity(&self, room_id: RoomId, aliases: &Aliases, id: EntityId) -> Result<GraphEntity> {
        let entity = self.canonical_entity(room_id, id).await?;
        let members = aliases.members(id);
        let degree = self.canonical_degrees(room_id, aliases).await?.get(&id).copied().unwrap_or(0);
        Ok(GraphEntity { entity, aliases: members.into_iter().filter(|m| *m != id).collect(), degree })
    }

    /// Relationship degree per canonical entity.
    pub(crate) async fn canonical_degrees(
        &self,
        room_id: RoomId,
        aliases: &Aliases,
    ) -> Result<HashMap<EntityId, u64>> {
        let mut out: HashMap<EntityId, u64> = HashMap::new();
        for (id, d) in self.inner.store.relationship_degrees(room_id).await? {
            *out.entry(aliases.resolve(id)?).or_default() += d;
        }
        Ok(out)
    }

    /// The `k` canonical entities with the highest relationship degree (ties by id), topped
    /// up with entities without relationships when fewer than `k` have any.
    pub(crate) async fn top_entities(
        &self,
        room_id: RoomId,
        aliases: &Aliases,
        k: usize,
    ) -> Result<Vec<GraphEntity>> {
        let degrees = self.canonical_degrees(room_id, aliases).await?;
        let mut ranked: Vec<(EntityId, u64)> = degrees.into_iter().collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        ranked.truncate(k);
        let ids: Vec<EntityId> = ranked.iter().map(|(id, _)| *id).collect();
        let mut by_id: HashMap<EntityId, crate::model::Entity> = self
            .inner
            .store
            .get_entities(room_id, &ids)
            .await?
            .into_iter()
            .map(|e| (e.entity_id, e))
            .collect();
        let mut out = Vec::with_capacity(k);
        for (id, degree) in ranked {
            if let Some(entity) = by_id.remove(&id) {
                let aliases_of = aliases.members(id).into_iter().filter(|m| *m != id).collect();
                out.push(GraphEntity { entity, aliases: aliases_of, degree });
            }
        }
        let mut after = None;
        while out.len() < k {
            let page = self.inner.store.list_entities(room_id, after, 200).await?;
            let Some(last) = page.last() else { break };
            after = Some(last.entity_id);
            for e in page {
                if out.len() >= k {
                    break;
                }
                if e.merged_into.is_none() && !out.iter().any(|g| g.entity.entity_id == e.entity_id) {
                    let aliases_of =
                        aliases.members(e.entity_id).into_iter().filter(|m| *m != e.entity_id).collect();
                    out.push(GraphEntity { entity: e, aliases: aliases_of, degree: 0 });
                }
            }
        }
        Ok(out)
    }

    /// Entities and relationships of a room, or the neighbourhood of one entity. Every id is
    /// canonical; merged entities appear as `aliases` of their winner.
    pub async fn entity_graph(&self, who: &Principal, q: GraphQuery) -> Result<EntityGraph> {
        let l = &self.inner.limits;
        let store = &self.inner.store;
        self.room(who, q.room_id).await?;
        let aliases = self.aliases(q.room_id).await?;
        let stats = store.entity_stats(q.room_id).await?;
        let start = match (q.entity_id, &q.identifier) {
            (Some(_), Some(_)) => {
                return Err(Error::invalid("identifier", "give entity_id or identifier, not both"));
            }
            (None, Some(raw)) => {
                // As identifiers are stored: one that held a secret is found by its fingerprint.
                let mut raw = raw.clone();
                self.inner.redactor.identifier(&mut raw.value, "identifier", &mut Default::default())?;
                let wanted = validate::identifiers(std::slice::from_ref(&raw), l)?;
                let held = store.find_identifiers(q.room_id, &wanted).await?;
                let (_, id) = held.into_iter().next().ok_or_else(|| {
                    Error::not_found_hint(
                        "identifier",
                        format!("{}:{}", wanted[0].id_type, wanted[0].value),
                        "no entity of this room holds it; add_entity creates one",
                    )
                })?;
                Some(id)
            }
            (e, None) => e,
        };
        let Some(start) = start else {
            if q.depth.is_some() {
                return Err(Error::invalid("depth", "depth needs an entity_id to start from"));
            }
            let entities = self.top_entities(q.room_id, &aliases, l.max_graph_entities).await?;
            let raw = store.list_relationships(q.room_id, None, l.max_graph_relationships + 1).await?;
            let truncated =
                raw.len() > l.max_graph_relationships || (entities.len() as u64) < stats.canonical;
            let relationships = fold_edges(&aliases, raw.into_iter().take(l.max_graph_relationships))?;
            return Ok(EntityGraph {
                root: None,
                entities,
                relationships,
                total_entities: stats.canonical,
                total_relationships: stats.relationships,
                truncated,
            });
        };
        let depth = q.depth.unwrap_or(1);
        if depth > l.max_graph_depth {
            return Err(Error::InvalidInput {
                field: "depth".into(),
                message: format!("depth is {depth}; the deepest walk is {}", l.max_graph_depth),
                limit: Some(l.max_graph_depth as u64),
            });
        }
        let root = self.resolve_entity(q.room_id, &aliases, start, "entity_id").await?.entity_id;
        let degrees = self.canonical_degrees(q.room_id, &aliases).await?;
        let mut order = vec![root];
        let mut seen: HashSet<EntityId> = HashSet::from([root]);
        let mut edges: Vec<Relationship> = Vec::new();
        let mut seen_edges: HashSet<RelationshipKey> = HashSet::new();
        let mut frontier = vec![root];
        let mut truncated = false;
        for _ in 0..depth {
            if frontier.is_empty() {
                break;
            }
            let members: Vec<EntityId> = frontier.iter().flat_map(|c| aliases.members(*c)).collect();
            let mut next = Vec::new();
            for rel in store.relationships_touching(q.room_id, &members).await? {
                let rel = resolve_edge(&aliases, rel)?;
                if seen_edges.insert(RelationshipKey::of(&rel)) {
                    if edges.len() >= l.max_graph_relationships {
                        truncated = true;
                        continue;
                    }
                    edges.push(rel.clone());
                } else {
                    merge_into_existing(&mut edges, rel.clone());
                }
                for end in [rel.source_entity_id, rel.target_entity_id] {
                    if !seen.contains(&end) {
                        if seen.len() >= l.max_graph_entities {
                            truncated = true;
                            continue;
                        }
                        seen.insert(end);
                        order.push(end);
                        next.push(end);
                    }
                }
            }
            frontier = next;
        }
        let mut by_id: HashMap<EntityId, crate::model::Entity> =
            store.get_entities(q.room_id, &order).await?.into_iter().map(|e| (e.entity_id, e)).collect();
        let entities = order
            .iter()
            .filter_map(|id| {
                by_id.remove(id).map(|entity| GraphEntity {
                    entity,
                    aliases: aliases.members(*id).into_iter().filter(|m| m != id).collect(),
                    degree: degrees.get(id).copied().unwrap_or(0),
                })
            })
            .collect();
        edges.retain(|e| seen.contains(&e.source_entity_id) && seen.contains(&e.target_entity_id));
        Ok(EntityGraph {
            root: Some(root),
            entities,
            relationships: edges,
            total_entities: stats.canonical,
            total_relationships: stats.relationships,
            truncated,
        })
    }
}

/// Rewrites an edge's endpoints to canonical ids.
fn resolve_edge(aliases: &Aliases, mut rel: Relationship) -> Result<Relationship> {
    rel.source_entity_id = aliases.resolve(rel.source_entity_id)?;
    rel.target_entity_id = aliases.resolve(rel.target_entity_id)?;
    Ok(rel)
}

/// Combines an edge into an equal-keyed edge already collected (after merges two stored edges
/// can become the same edge): evidence united, the earliest assertion kept.
fn merge_into_existing(edges: &mut [Relationship], rel: Relationship) {
    let key = RelationshipKey::of(&rel);
    if let Some(e) = edges.iter_mut().find(|e| RelationshipKey::of(e) == key) {
        for ev in rel.evidence {
            if !e.evidence.contains(&ev) {
                e.evidence.push(ev);
            }
        }
        if rel.created_at < e.created_at {
            e.created_at = rel.created_at;
            e.agent_id = rel.agent_id;
            e.user_id = rel.user_id;
        }
        if e.description.is_none() {
            e.description = rel.description;
        }
    }
}

/// Resolves and combines a list of edges.
fn fold_edges(aliases: &Aliases, raw: impl IntoIterator<Item = Relationship>) -> Result<Vec<Relationship>> {
    let mut out: Vec<Relationship> = Vec::new();
    let mut index: BTreeMap<RelationshipKey, usize> = BTreeMap::new();
    for rel in raw {
        let rel = resolve_edge(aliases, rel)?;
        let key = RelationshipKey::of(&rel);
        match index.get(&key) {
            Some(&i) => merge_into_existing(&mut out[i..=i], rel),
            None => {
                index.insert(key, out.len());
                out.push(rel);
            }
        }
    }
    Ok(out)
}
