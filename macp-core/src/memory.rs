//! The in-memory reference backend.
//!
//! Every store contract is met in the most obvious way: one mutex around the whole state, so
//! every method is atomic and isolated by construction. It is the reference the conformance
//! suite was written against, the quickest way to try the SDK, and useless for anything that
//! must survive a restart ([`Capabilities::durable`] is false).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::ids::{AgentId, ArtifactId, DecisionId, EntityId, FindingId, RoomId, Timestamp};
use crate::model::{
    AgentSession, Answer, Artifact, Claim, Decision, Entity, Erasure, Event, EventKind, Finding, Identifier,
    IndexStatus, Relationship, Room, RoomStatus,
};
use crate::search::keyword::KeywordIndex;
use crate::store::{
    AgentStore, AgentUpdate, ArtifactQuery, ArtifactStore, AttachOutcome, Capabilities, ClaimOutcome,
    ClaimStore, CreateOutcome, DecisionStore, EntityStats, EntityStore, EventStore, FindingQuery,
    FindingStats, FindingStore, IdempotencyKey, IdempotencyRecord, Insert, KeywordSearch, RelationshipKey,
    RoomKey, RoomRecord, RoomStore, SessionRecord, SessionStore, Store, Write,
};

/// An in-memory [`Store`].
#[derive(Debug, Default)]
pub struct MemoryStore {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    rooms: HashMap<RoomId, Room>,
    agents: BTreeMap<(RoomId, AgentId), AgentSession>,
    /// Per room, findings in `seq` order: index `i` holds `seq = i + 1`.
    findings: HashMap<RoomId, Vec<Finding>>,
    entities: BTreeMap<(RoomId, EntityId), Entity>,
    /// Which entity holds each identifier.
    holders: HashMap<(RoomId, Identifier), EntityId>,
    relationships: BTreeMap<(RoomId, RelationshipKey), Relationship>,
    artifacts: BTreeMap<(RoomId, ArtifactId), Artifact>,
    idempotency: HashMap<(RoomId, String), IdempotencyRecord>,
    keywords: HashMap<RoomId, KeywordIndex>,
    /// Per room, the feed in `seq` order: index `i` holds `seq = i + 1`.
    events: HashMap<RoomId, Vec<Event>>,
    read_positions: HashMap<(RoomId, AgentId), u64>,
    claims: BTreeMap<(RoomId, String), Claim>,
    decisions: BTreeMap<(RoomId, DecisionId), Decision>,
    sessions: HashMap<String, SessionRecord>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a half-applied write: every method
        // validates before it mutates. So a poisoned lock is safe to keep using.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Yields to the scheduler once, as a call to a networked store would. Without it every call
/// would run to completion without a suspension point, and races the service must handle
/// (two creates between a lookup and a write) would never happen in tests.
async fn interleave() {
    tokio::task::yield_now().await;
}

impl State {
    fn replay(&self, room_id: RoomId, idempotency: Option<&IdempotencyKey>) -> Option<IdempotencyRecord> {
        idempotency.and_then(|c| self.idempotency.get(&(room_id, c.key.clone())).cloned())
    }

    fn push_event(&mut self, room_id: RoomId, event: &Event) {
        let feed = self.events.entry(room_id).or_default();
        let seq = feed.len() as u64 + 1;
        feed.push(event.at_seq(seq));
    }

    /// Gives every event of the room about `what` the erasure notice as its summary.
    fn renotice(&mut self, room_id: RoomId, what: impl Fn(&Event) -> bool, notice: &str) {
        for e in self.events.entry(room_id).or_default().iter_mut().filter(|e| what(e)) {
            e.summary = Event::summary_of(notice);
        }
    }

    fn record(&mut self, room_id: RoomId, idempotency: Option<&IdempotencyKey>) {
        if let Some(c) = idempotency {
            self.idempotency.insert((room_id, c.key.clone()), c.to_record());
        }
    }
}

impl Store for MemoryStore {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::none()
    }
}

#[async_trait]
impl RoomStore for MemoryStore {
    async fn purge_room(&self, room_id: RoomId) -> Result<()> {
        interleave().await;
        let mut s = self.lock();
        let r = room_id;
        s.agents.retain(|(x, _), _| *x != r);
        s.findings.remove(&r);
        s.entities.retain(|(x, _), _| *x != r);
        s.holders.retain(|(x, _), _| *x != r);
        s.relationships.retain(|(x, _), _| *x != r);
        s.artifacts.retain(|(x, _), _| *x != r);
        s.idempotency.retain(|(x, _), _| *x != r);
        s.keywords.remove(&r);
        s.events.remove(&r);
        s.read_positions.retain(|(x, _), _| *x != r);
        s.claims.retain(|(x, _), _| *x != r);
        s.decisions.retain(|(x, _), _| *x != r);
        s.rooms.remove(&r);
        Ok(())
    }

    async fn restore_room(&self, record: &RoomRecord) -> Result<()> {
        interleave().await;
        let mut s = self.lock();
        let r = record.room.room_id;
        if s.rooms.contains_key(&r) {
            return Err(Error::AlreadyExists { what: "room", id: r.to_string() });
        }
        for a in &record.agents {
            s.agents.insert((r, a.agent_id.clone()), a.clone());
        }
        for p in &record.read_positions {
            s.read_positions.insert((r, p.agent_id.clone()), p.seq);
        }
        let mut keywords = KeywordIndex::default();
        for f in &record.findings {
            keywords.add_stored(f.finding_id, &f.content, f.erased.is_some());
        }
        s.keywords.insert(r, keywords);
        s.findings.insert(r, record.findings.clone());
        for e in &record.entities {
            s.entities.insert((r, e.entity_id), e.clone());
        }
        for h in &record.identifiers {
            s.holders.insert((r, h.identifier.clone()), h.entity_id);
        }
        for x in &record.relationships {
            s.relationships.insert((r, RelationshipKey::of(x)), x.clone());
        }
        for a in &record.artifacts {
            s.artifacts.insert((r, a.artifact_id), a.clone());
        }
        for c in &record.claims {
            s.claims.insert((r, c.key.clone()), c.clone());
        }
        for d in &record.decisions {
            s.decisions.insert((r, d.decision_id), d.clone());
        }
        s.events.insert(r, record.events.clone());
        s.rooms.insert(r, record.room.clone());
        Ok(())
    }

    async fn insert_room(&self, room: &Room) -> Result<()> {
        interleave().await;
        let mut s = self.lock();
        if s.rooms.contains_key(&room.room_id) {
            return Err(Error::AlreadyExists { what: "room", id: room.room_id.to_string() });
        }
        s.rooms.insert(room.room_id, room.clone());
        Ok(())
    }

    async fn get_room(&self, room_id: RoomId) -> Result<Option<Room>> {
        interleave().await;
        Ok(self.lock().rooms.get(&room_id).cloned())
    }

    async fn update_room(&self, room: &Room, event: &Event) -> Result<bool> {
        interleave().await;
        let mut s = self.lock();
        let Some(stored) = s.rooms.get_mut(&room.room_id) else {
            return Err(Error::not_found("room", room.room_id));
        };
        if stored.version + 1 != room.version {
            return Ok(false);
        }
        *stored = room.clone();
        s.push_event(room.room_id, event);
        Ok(true)
    }

    async fn list_rooms(
        &self,
        status: Option<RoomStatus>,
        after: Option<RoomKey>,
        limit: usize,
    ) -> Result<Vec<Room>> {
        interleave().await;
        let s = self.lock();
        let mut rooms: Vec<&Room> = s
            .rooms
            .values()
            .filter(|r| status.is_none_or(|st| r.status == st))
            .filter(|r| after.is_none_or(|k| (r.created_at, r.room_id) < (k.created_at, k.room_id)))
            .collect();
        rooms.sort_by_key(|r| std::cmp::Reverse((r.created_at, r.room_id)));
        Ok(rooms.into_iter().take(limit).cloned().collect())
    }
}

#[async_trait]
impl AgentStore for MemoryStore {
    async fn insert_agent(&self, session: &AgentSession, event: &Event) -> Result<Insert<AgentSession>> {
        interleave().await;
        let mut s = self.lock();
        let key = (session.room_id, session.agent_id.clone());
        if let Some(existing) = s.agents.get(&key) {
            return Ok(Insert::Existing(existing.clone()));
        }
        s.agents.insert(key, session.clone());
        s.push_event(session.room_id, event);
        Ok(Insert::Inserted(session.clone()))
    }

    async fn get_agent(&self, room_id: RoomId, agent_id: &AgentId) -> Result<Option<AgentSession>> {
        interleave().await;
        Ok(self.lock().agents.get(&(room_id, agent_id.clone())).cloned())
    }

    async fn list_agents(&self, room_id: RoomId) -> Result<Vec<AgentSession>> {
        interleave().await;
        let s = self.lock();
        let mut out: Vec<AgentSession> =
            s.agents.iter().filter(|((r, _), _)| *r == room_id).map(|(_, a)| a.clone()).collect();
        out.sort_by(|a, b| (a.joined_at, &a.agent_id).cmp(&(b.joined_at, &b.agent_id)));
        Ok(out)
    }

    async fn update_agent(
        &self,
        room_id: RoomId,
        agent_id: &AgentId,
        update: &AgentUpdate,
        event: Option<&Event>,
    ) -> Result<Option<AgentSession>> {
        interleave().await;
        let mut s = self.lock();
        if !s.agents.contains_key(&(room_id, agent_id.clone())) {
            return Ok(None);
        }
        if let Some(e) = event {
            s.push_event(room_id, e);
        }
        let Some(a) = s.agents.get_mut(&(room_id, agent_id.clone())) else { return Ok(None) };
        if let Some(t) = update.last_active {
            a.last_active = a.last_active.max(t);
        }
        if let Some(t) = &update.agent_type {
            a.agent_type = Some(t.clone());
        }
        if let Some((status, reason, at)) = &update.status {
            a.agent_status = *status;
            a.status_reason = reason.clone();
            a.status_updated_at = *at;
        }
        Ok(Some(a.clone()))
    }
}

#[async_trait]
impl FindingStore for MemoryStore {
    async fn append_finding(
        &self,
        finding: &Finding,
        idempotency: Option<&IdempotencyKey>,
        event: &Event,
    ) -> Result<Write<Finding>> {
        interleave().await;
        let mut s = self.lock();
        if let Some(rec) = s.replay(finding.room_id, idempotency) {
            return Ok(Write::Replayed(rec));
        }
        let list = s.findings.entry(finding.room_id).or_default();
        let mut stored = finding.clone();
        stored.seq = list.len() as u64 + 1;
        if let Some((on, standing)) = stored.standing_given()
            && let Some(judged) = list.iter_mut().find(|f| f.finding_id == on)
        {
            judged.standing = Some(standing);
        }
        list.push(stored.clone());
        s.keywords.entry(finding.room_id).or_default().add(stored.finding_id, &stored.content);
        s.push_event(finding.room_id, event);
        s.record(finding.room_id, idempotency);
        Ok(Write::Applied(stored))
    }

    async fn erase_finding(
        &self,
        room_id: RoomId,
        finding_id: FindingId,
        erasure: &Erasure,
        event: &Event,
    ) -> Result<Option<Finding>> {
        interleave().await;
        let mut s = self.lock();
        let Some(f) =
            s.findings.get_mut(&room_id).and_then(|l| l.iter_mut().find(|f| f.finding_id == finding_id))
        else {
            return Ok(None);
        };
        if !f.erase(erasure) {
            return Ok(Some(f.clone()));
        }
        let (erased, notice) = (f.clone(), f.content.clone());
        if let Some(ix) = s.keywords.get_mut(&room_id) {
            ix.remove(finding_id);
        }
        s.renotice(room_id, |e| e.finding_id == Some(finding_id), &notice);
        s.push_event(room_id, event);
        Ok(Some(erased))
    }

    async fn get_findings(&self, room_id: RoomId, ids: &[FindingId]) -> Result<Vec<Finding>> {
        interleave().await;
        let s = self.lock();
        let Some(list) = s.findings.get(&room_id) else { return Ok(Vec::new()) };
        Ok(list.iter().filter(|f| ids.contains(&f.finding_id)).cloned().collect())
    }

    async fn list_findings(&self, room_id: RoomId, q: &FindingQuery) -> Result<Vec<Finding>> {
        interleave().await;
        let s = self.lock();
        let Some(list) = s.findings.get(&room_id) else { return Ok(Vec::new()) };
        let in_range = |f: &&Finding| f.seq > q.after_seq && q.before_seq.is_none_or(|b| f.seq < b);
        let it = list.iter().filter(in_range).filter(|f| q.matches(f));
        Ok(if q.descending {
            it.rev().take(q.limit).cloned().collect()
        } else {
            it.take(q.limit).cloned().collect()
        })
    }

    async fn set_index_status(
        &self,
        room_id: RoomId,
        finding_id: FindingId,
        status: IndexStatus,
    ) -> Result<()> {
        interleave().await;
        let mut s = self.lock();
        let f = s
            .findings
            .get_mut(&room_id)
            .and_then(|l| l.iter_mut().find(|f| f.finding_id == finding_id))
            .ok_or_else(|| Error::not_found("finding", finding_id))?;
        f.index_status = status;
        Ok(())
    }

    async fn pending_findings(&self, created_before: Timestamp, limit: usize) -> Result<Vec<Finding>> {
        interleave().await;
        let s = self.lock();
        let mut out: Vec<&Finding> = s
            .findings
            .values()
            .flatten()
            .filter(|f| f.index_status == IndexStatus::Pending && f.created_at < created_before)
            .collect();
        out.sort_by_key(|f| (f.created_at, f.finding_id));
        Ok(out.into_iter().take(limit).cloned().collect())
    }

    async fn mark_all_pending(&self) -> Result<u64> {
        interleave().await;
        let mut s = self.lock();
        let mut n = 0;
        for f in s.findings.values_mut().flatten().filter(|f| f.erased.is_none()) {
            f.index_status = IndexStatus::Pending;
            n += 1;
        }
        Ok(n)
    }

    async fn finding_stats(&self, room_id: RoomId) -> Result<FindingStats> {
        interleave().await;
        let s = self.lock();
        let Some(list) = s.findings.get(&room_id) else { return Ok(FindingStats::default()) };
        let mut tag_counts = BTreeMap::new();
        for f in list {
            for t in &f.tags {
                *tag_counts.entry(t.clone()).or_insert(0) += 1;
            }
        }
        Ok(FindingStats {
            total: list.len() as u64,
            last_seq: list.len() as u64,
            last_created_at: list.last().map(|f| f.created_at),
            tag_counts,
        })
    }

    async fn keyword_search(
        &self,
        room_id: RoomId,
        query: &str,
        limit: usize,
    ) -> Result<Option<KeywordSearch>> {
        interleave().await;
        let s = self.lock();
        Ok(Some(
            s.keywords
                .get(&room_id)
                .map_or_else(|| KeywordIndex::new().search(query, limit), |ix| ix.search(query, limit)),
        ))
    }
}

#[async_trait]
impl EntityStore for MemoryStore {
    async fn create_entity(
        &self,
        entity: &Entity,
        idempotency: Option<&IdempotencyKey>,
        event: &Event,
    ) -> Result<CreateOutcome> {
        interleave().await;
        let mut s = self.lock();
        let room = entity.room_id;
        if let Some(rec) = s.replay(room, idempotency) {
            return Ok(CreateOutcome::Replayed(rec));
        }
        let taken: Vec<(Identifier, EntityId)> = entity
            .identifiers
            .iter()
            .filter_map(|i| s.holders.get(&(room, i.clone())).map(|e| (i.clone(), *e)))
            .collect();
        if !taken.is_empty() {
            return Ok(CreateOutcome::IdentifiersTaken(taken));
        }
        for i in &entity.identifiers {
            s.holders.insert((room, i.clone()), entity.entity_id);
        }
        s.entities.insert((room, entity.entity_id), entity.clone());
        s.push_event(room, event);
        s.record(room, idempotency);
        Ok(CreateOutcome::Created(entity.clone()))
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
        interleave().await;
        let mut s = self.lock();
        if let Some(rec) = s.replay(room_id, idempotency) {
            return Ok(AttachOutcome::Replayed(rec));
        }
        if !s.entities.contains_key(&(room_id, entity_id)) {
            return Err(Error::not_found("entity", entity_id));
        }
        let mut held_elsewhere = Vec::new();
        let mut added = Vec::new();
        for i in identifiers {
            match s.holders.get(&(room_id, i.clone())) {
                Some(holder) if *holder != entity_id => held_elsewhere.push((i.clone(), *holder)),
                Some(_) => {}
                None => added.push(i.clone()),
            }
        }
        for i in &added {
            s.holders.insert((room_id, i.clone()), entity_id);
        }
        let e =
            s.entities.get_mut(&(room_id, entity_id)).ok_or_else(|| Error::not_found("entity", entity_id))?;
        let before = e.clone();
        e.add_identifiers(added);
        e.add_missing_properties(properties);
        let entity = e.clone();
        if entity != before {
            s.push_event(room_id, event);
        }
        s.record(room_id, idempotency);
        Ok(AttachOutcome::Attached { entity, held_elsewhere })
    }

    async fn get_entities(&self, room_id: RoomId, ids: &[EntityId]) -> Result<Vec<Entity>> {
        interleave().await;
        let s = self.lock();
        Ok(ids.iter().filter_map(|id| s.entities.get(&(room_id, *id)).cloned()).collect())
    }

    async fn list_entities(
        &self,
        room_id: RoomId,
        after: Option<EntityId>,
        limit: usize,
    ) -> Result<Vec<Entity>> {
        interleave().await;
        let s = self.lock();
        Ok(s.entities
            .iter()
            .filter(|((r, id), _)| *r == room_id && after.is_none_or(|a| *id > a))
            .take(limit)
            .map(|(_, e)| e.clone())
            .collect())
    }

    async fn entity_aliases(&self, room_id: RoomId) -> Result<Vec<(EntityId, EntityId)>> {
        interleave().await;
        let s = self.lock();
        Ok(s.entities
            .iter()
            .filter(|((r, _), _)| *r == room_id)
            .filter_map(|((_, id), e)| e.merged_into.map(|w| (*id, w)))
            .collect())
    }

    async fn find_identifiers(
        &self,
        room_id: RoomId,
        identifiers: &[Identifier],
    ) -> Result<Vec<(Identifier, EntityId)>> {
        interleave().await;
        let s = self.lock();
        Ok(identifiers
            .iter()
            .filter_map(|i| s.holders.get(&(room_id, i.clone())).map(|e| (i.clone(), *e)))
            .collect())
    }

    async fn merge_entities(
        &self,
        room_id: RoomId,
        winner: EntityId,
        loser: EntityId,
        event: &Event,
    ) -> Result<Entity> {
        interleave().await;
        let mut s = self.lock();
        let w = s.entities.get(&(room_id, winner)).ok_or_else(|| Error::not_found("entity", winner))?;
        let l = s.entities.get(&(room_id, loser)).ok_or_else(|| Error::not_found("entity", loser))?;
        if winner == loser || w.merged_into.is_some() || l.merged_into.is_some() {
            return Err(Error::conflict("one of the entities was merged concurrently"));
        }
        let l = l.clone();
        if let Some(l) = s.entities.get_mut(&(room_id, loser)) {
            l.merged_into = Some(winner);
        }
        let w = s.entities.get_mut(&(room_id, winner)).ok_or_else(|| Error::not_found("entity", winner))?;
        w.absorb(&l);
        let w = w.clone();
        s.push_event(room_id, event);
        Ok(w)
    }

    async fn put_relationship(
        &self,
        rel: &Relationship,
        idempotency: Option<&IdempotencyKey>,
        event: &Event,
    ) -> Result<Write<(Relationship, bool)>> {
        interleave().await;
        let mut s = self.lock();
        if let Some(rec) = s.replay(rel.room_id, idempotency) {
            return Ok(Write::Replayed(rec));
        }
        let key = (rel.room_id, RelationshipKey::of(rel));
        let out = match s.relationships.get_mut(&key) {
            Some(existing) => {
                let before = existing.clone();
                existing.absorb(rel);
                let changed = *existing != before;
                (existing.clone(), false, changed)
            }
            None => {
                s.relationships.insert(key, rel.clone());
                (rel.clone(), true, true)
            }
        };
        if out.2 {
            s.push_event(rel.room_id, event);
        }
        let out = (out.0, out.1);
        s.record(rel.room_id, idempotency);
        Ok(Write::Applied(out))
    }

    async fn get_relationship(&self, room_id: RoomId, key: &RelationshipKey) -> Result<Option<Relationship>> {
        interleave().await;
        Ok(self.lock().relationships.get(&(room_id, key.clone())).cloned())
    }

    async fn relationships_touching(&self, room_id: RoomId, ids: &[EntityId]) -> Result<Vec<Relationship>> {
        interleave().await;
        let s = self.lock();
        Ok(s.relationships
            .iter()
            .filter(|((r, k), _)| *r == room_id && (ids.contains(&k.source) || ids.contains(&k.target)))
            .map(|(_, v)| v.clone())
            .collect())
    }

    async fn list_relationships(
        &self,
        room_id: RoomId,
        after: Option<&RelationshipKey>,
        limit: usize,
    ) -> Result<Vec<Relationship>> {
        interleave().await;
        let s = self.lock();
        Ok(s.relationships
            .iter()
            .filter(|((r, k), _)| *r == room_id && after.is_none_or(|a| k > a))
            .take(limit)
            .map(|(_, v)| v.clone())
            .collect())
    }

    async fn relationship_degrees(&self, room_id: RoomId) -> Result<Vec<(EntityId, u64)>> {
        interleave().await;
        let s = self.lock();
        let mut d: BTreeMap<EntityId, u64> = BTreeMap::new();
        for (r, k) in s.relationships.keys() {
            if *r != room_id {
                continue;
            }
            *d.entry(k.source).or_default() += 1;
            if k.target != k.source {
                *d.entry(k.target).or_default() += 1;
            }
        }
        Ok(d.into_iter().collect())
    }

    async fn entity_stats(&self, room_id: RoomId) -> Result<EntityStats> {
        interleave().await;
        let s = self.lock();
        let mut st = EntityStats::default();
        for ((r, _), e) in &s.entities {
            if *r == room_id {
                if e.merged_into.is_some() {
                    st.merged += 1;
                } else {
                    st.canonical += 1;
                }
            }
        }
        st.relationships = s.relationships.keys().filter(|(r, _)| *r == room_id).count() as u64;
        Ok(st)
    }
}

#[async_trait]
impl ArtifactStore for MemoryStore {
    async fn insert_artifact(
        &self,
        artifact: &Artifact,
        idempotency: Option<&IdempotencyKey>,
        event: &Event,
    ) -> Result<Write<Artifact>> {
        interleave().await;
        let mut s = self.lock();
        let room = artifact.room_id;
        if let Some(rec) = s.replay(room, idempotency) {
            return Ok(Write::Replayed(rec));
        }
        if s.artifacts.iter().any(|((r, _), a)| *r == room && a.key == artifact.key) {
            return Err(Error::AlreadyExists { what: "artifact with key", id: artifact.key.clone() });
        }
        s.artifacts.insert((room, artifact.artifact_id), artifact.clone());
        s.push_event(room, event);
        s.record(room, idempotency);
        Ok(Write::Applied(artifact.clone()))
    }

    async fn erase_artifact(
        &self,
        room_id: RoomId,
        artifact_id: ArtifactId,
        erasure: &Erasure,
        event: &Event,
    ) -> Result<Option<Artifact>> {
        interleave().await;
        let mut s = self.lock();
        let Some(a) = s.artifacts.get_mut(&(room_id, artifact_id)) else { return Ok(None) };
        if !a.erase(erasure) {
            return Ok(Some(a.clone()));
        }
        let (erased, notice) = (a.clone(), erasure.notice());
        s.renotice(room_id, |e| e.artifact_id == Some(artifact_id), &notice);
        s.push_event(room_id, event);
        Ok(Some(erased))
    }

    async fn get_artifacts(&self, room_id: RoomId, ids: &[ArtifactId]) -> Result<Vec<Artifact>> {
        interleave().await;
        let s = self.lock();
        Ok(ids.iter().filter_map(|id| s.artifacts.get(&(room_id, *id)).cloned()).collect())
    }

    async fn list_artifacts(&self, room_id: RoomId, q: &ArtifactQuery) -> Result<Vec<Artifact>> {
        interleave().await;
        let s = self.lock();
        Ok(s.artifacts
            .iter()
            .filter(|((r, id), _)| *r == room_id && q.after.is_none_or(|a| *id > a))
            .map(|(_, a)| a)
            .filter(|a| q.finding_id.is_none_or(|f| a.linked_finding_ids.contains(&f)))
            .filter(|a| {
                q.entity_ids.is_empty() || a.linked_entity_ids.iter().any(|e| q.entity_ids.contains(e))
            })
            .take(q.limit)
            .cloned()
            .collect())
    }

    async fn count_artifacts(&self, room_id: RoomId) -> Result<u64> {
        interleave().await;
        Ok(self.lock().artifacts.keys().filter(|(r, _)| *r == room_id).count() as u64)
    }
}

#[async_trait]
impl EventStore for MemoryStore {
    async fn list_events(
        &self,
        room_id: RoomId,
        after_seq: u64,
        kinds: &[EventKind],
        limit: usize,
    ) -> Result<Vec<Event>> {
        interleave().await;
        let s = self.lock();
        let Some(feed) = s.events.get(&room_id) else { return Ok(Vec::new()) };
        let start = (after_seq as usize).min(feed.len());
        Ok(feed[start..]
            .iter()
            .filter(|e| kinds.is_empty() || kinds.contains(&e.kind))
            .take(limit)
            .cloned()
            .collect())
    }

    async fn last_event_seq(&self, room_id: RoomId) -> Result<u64> {
        interleave().await;
        Ok(self.lock().events.get(&room_id).map_or(0, |f| f.len() as u64))
    }

    async fn count_events(&self, room_id: RoomId, after_seq: u64) -> Result<BTreeMap<EventKind, u64>> {
        interleave().await;
        let s = self.lock();
        let mut out = BTreeMap::new();
        if let Some(feed) = s.events.get(&room_id) {
            for e in &feed[(after_seq as usize).min(feed.len())..] {
                *out.entry(e.kind).or_insert(0) += 1;
            }
        }
        Ok(out)
    }

    async fn read_position(&self, room_id: RoomId, agent_id: &AgentId) -> Result<u64> {
        interleave().await;
        Ok(self.lock().read_positions.get(&(room_id, agent_id.clone())).copied().unwrap_or(0))
    }

    async fn advance_read_position(&self, room_id: RoomId, agent_id: &AgentId, seq: u64) -> Result<u64> {
        interleave().await;
        let mut s = self.lock();
        let p = s.read_positions.entry((room_id, agent_id.clone())).or_insert(0);
        *p = (*p).max(seq);
        Ok(*p)
    }
}

#[async_trait]
impl ClaimStore for MemoryStore {
    async fn put_claim(&self, claim: &Claim, now: Timestamp, event: &Event) -> Result<ClaimOutcome> {
        interleave().await;
        let mut s = self.lock();
        let key = (claim.room_id, claim.key.clone());
        if let Some(held) = s.claims.get(&key).filter(|c| c.blocks(&claim.agent_id, now)) {
            return Ok(ClaimOutcome::Held(held.clone()));
        }
        s.claims.insert(key, claim.clone());
        s.push_event(claim.room_id, event);
        Ok(ClaimOutcome::Claimed(claim.clone()))
    }

    async fn release_claim(
        &self,
        room_id: RoomId,
        key: &str,
        agent_id: &AgentId,
        now: Timestamp,
        event: &Event,
    ) -> Result<Option<Claim>> {
        interleave().await;
        let mut s = self.lock();
        let Some(c) = s.claims.get_mut(&(room_id, key.to_owned())) else { return Ok(None) };
        if !c.is_held_by(agent_id, now) {
            return Ok(None);
        }
        c.released_at = Some(now);
        let out = c.clone();
        s.push_event(room_id, event);
        Ok(Some(out))
    }

    async fn list_claims(&self, room_id: RoomId, now: Timestamp) -> Result<Vec<Claim>> {
        interleave().await;
        let s = self.lock();
        let mut out: Vec<Claim> = s
            .claims
            .iter()
            .filter(|((r, _), c)| *r == room_id && c.is_held(now))
            .map(|(_, c)| c.clone())
            .collect();
        out.sort_by(|a, b| (a.claimed_at, &a.key).cmp(&(b.claimed_at, &b.key)));
        Ok(out)
    }
}

#[async_trait]
impl DecisionStore for MemoryStore {
    async fn insert_decision(&self, decision: &Decision, event: &Event) -> Result<()> {
        interleave().await;
        let mut s = self.lock();
        s.decisions.insert((decision.room_id, decision.decision_id), decision.clone());
        s.push_event(decision.room_id, event);
        Ok(())
    }

    async fn answer_decision(
        &self,
        room_id: RoomId,
        decision_id: DecisionId,
        answer: &Answer,
        event: &Event,
    ) -> Result<Option<Decision>> {
        interleave().await;
        let mut s = self.lock();
        let Some(d) = s.decisions.get_mut(&(room_id, decision_id)) else { return Ok(None) };
        if d.answer.is_some() {
            return Ok(Some(d.clone()));
        }
        d.answer = Some(answer.clone());
        let out = d.clone();
        s.push_event(room_id, event);
        Ok(Some(out))
    }

    async fn list_decisions(&self, room_id: RoomId, open_only: bool) -> Result<Vec<Decision>> {
        interleave().await;
        let s = self.lock();
        Ok(s.decisions
            .iter()
            .filter(|((r, _), d)| *r == room_id && (!open_only || d.answer.is_none()))
            .map(|(_, d)| d.clone())
            .collect())
    }
}

#[async_trait]
impl SessionStore for MemoryStore {
    async fn put_session(&self, record: &SessionRecord) -> Result<bool> {
        interleave().await;
        let mut st = self.lock();
        if st.sessions.contains_key(&record.key) {
            return Ok(false);
        }
        st.sessions.insert(record.key.clone(), record.clone());
        Ok(true)
    }

    async fn get_session(&self, key: &str) -> Result<Option<SessionRecord>> {
        interleave().await;
        Ok(self.lock().sessions.get(key).cloned())
    }

    async fn extend_session(
        &self,
        key: &str,
        join: Option<(RoomId, &AgentId)>,
        now: Timestamp,
        expires_at: Timestamp,
        keep_until: Timestamp,
    ) -> Result<bool> {
        interleave().await;
        let mut st = self.lock();
        let Some(s) = st.sessions.get_mut(key).filter(|s| !s.ended && s.expires_at > now) else {
            return Ok(false);
        };
        if let Some((room, agent)) = join {
            s.joined.insert(room, agent.clone());
        }
        (s.expires_at, s.keep_until) = (expires_at, keep_until);
        Ok(true)
    }

    async fn end_session(&self, key: &str, now: Timestamp, keep_until: Timestamp) -> Result<()> {
        interleave().await;
        if let Some(s) = self.lock().sessions.get_mut(key) {
            (s.ended, s.expires_at, s.keep_until) = (true, s.expires_at.min(now), keep_until);
        }
        Ok(())
    }

    async fn purge_sessions(&self, now: Timestamp, limit: usize) -> Result<usize> {
        interleave().await;
        let mut st = self.lock();
        let gone: Vec<String> =
            st.sessions.values().filter(|s| s.keep_until <= now).take(limit).map(|s| s.key.clone()).collect();
        for k in &gone {
            st.sessions.remove(k);
        }
        Ok(gone.len())
    }
}
