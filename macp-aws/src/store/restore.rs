//! Restoring a room from its record
//! ([`RoomStore::restore_room`](macp_core::store::RoomStore::restore_room)): the items the write
//! paths would have left for the same history, built by the same item builders, put in batches,
//! and the room's own item last.
//!
//! What the record does not carry is started afresh: the `version` of entities and
//! relationships (only compared by the next attach, merge or repeated assertion, so any start
//! will do) and idempotency keys (the bundle leaves them out).

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::types::AttributeValue;
use macp_core::store::{RoomRecord, RoomStore};
use macp_core::{Error, Result};

use crate::AwsBackend;
use crate::ddb::{Item, n, s};
use crate::store::agents::agent_item;
use crate::store::artifacts::artifact_items;
use crate::store::claims::claim_item;
use crate::store::decisions::decision_item;
use crate::store::entities::{entity_item, ident_item, rel_item};
use crate::store::events::{Head, event_item, head_item};
use crate::store::findings::restored_finding_item;
use crate::store::rooms::{room_item, room_state};

impl AwsBackend {
    /// Writes the room of `record` as given (see
    /// [`RoomStore::restore_room`](macp_core::store::RoomStore::restore_room)): `already_exists`,
    /// having written nothing, if the room exists.
    pub(crate) async fn restore(&self, record: &RoomRecord) -> Result<()> {
        let room = &record.room;
        let room_id = room.room_id;
        let key = HashMap::from([("room_id".to_owned(), s(room_id.to_string()))]);
        // A room item without a document is no room (an unconditional counter update that
        // landed after a purge): readers ignore it, and the restore replaces it.
        let exists =
            self.get_item(&self.names.rooms, key, "GetItem").await?.is_some_and(|i| i.contains_key("doc"));
        if exists {
            return Err(Error::AlreadyExists { what: "room", id: room_id.to_string() });
        }
        // What an earlier restore of this room left when it was cut short goes first: the puts
        // below replace only the items of this record, and a leftover (an identifier, a claim,
        // events past this feed's head) would otherwise outlive it.
        self.purge_room(room_id).await?;

        // Read positions are an attribute of the agent's item (see `store::events`); the
        // agent must be there for the position to be, as `advance_read_position` requires.
        let read: HashMap<_, _> = record.read_positions.iter().map(|p| (&p.agent_id, p.seq)).collect();
        let agents = record
            .agents
            .iter()
            .map(|a| {
                let mut item = agent_item(a);
                if let Some(seq) = read.get(&a.agent_id) {
                    item.insert("read_seq".into(), n(seq));
                }
                item
            })
            .collect();
        let findings = record.findings.iter().map(restored_finding_item).collect();
        // Identifiers stay with the entity that first held them, merges or not: the record
        // says which, where an entity's own list may name its merged losers' too.
        let entities = record
            .entities
            .iter()
            .map(|e| entity_item(e, 0))
            .chain(record.identifiers.iter().map(|h| ident_item(room_id, &h.identifier, h.entity_id)))
            .collect();
        let relationships = record.relationships.iter().map(|r| rel_item(r, 0)).collect();
        let artifacts = record.artifacts.iter().flat_map(artifact_items).collect();
        let claims = record.claims.iter().map(claim_item).collect();
        let decisions = record.decisions.iter().map(decision_item).collect();
        let mut head = Head::default();
        let mut events: Vec<Item> = Vec::with_capacity(record.events.len() + 1);
        for e in &record.events {
            head = head.after(e.kind);
            head.last = e.seq;
            events.push(event_item(room_id, &head, e));
        }
        // The head is what the next event's append continues from.
        if !record.events.is_empty() {
            events.push(head_item(room_id, &head));
        }

        let t = &self.names;
        let tables: [(&str, Vec<Item>); 8] = [
            (&t.agents, agents),
            (&t.findings, findings),
            (&t.entities, entities),
            (&t.relationships, relationships),
            (&t.artifacts, artifacts),
            (&t.claims, claims),
            (&t.decisions, decisions),
            (&t.events, events),
        ];
        for (table, items) in tables {
            self.batch_put(table, items, "restore a room").await?;
        }
        // Last, so that the room exists for readers only once all of it is there.
        self.put_room(room_id, restored_room_item(record), "attribute_not_exists(doc)").await?;
        // Built from the findings this process saw before (if any): searches build it anew.
        self.keywords.lock().unwrap_or_else(|p| p.into_inner()).remove(&room_id);
        Ok(())
    }
}

/// The room's item with the counters its history left: those `append_finding` keeps
/// (`last_seq`, `last_created_at`, `tag_counts`), the new relationships `put_relationship`
/// counts (`rel_count`), the finding erasures `erase_finding` counts (`erasures`, which keyword
/// indexes compare), and the record's state as `update_room` stores it.
fn restored_room_item(record: &RoomRecord) -> Item {
    let mut item = room_item(&record.room);
    item.extend(room_state(&record.room));
    // Other servers' keyword indexes of an earlier room under this id are built again.
    item.insert("restored_at".into(), n(macp_core::Timestamp::now().as_millis()));
    if let Some(last) = record.findings.last() {
        item.insert("last_seq".into(), n(last.seq));
        item.insert("last_created_at".into(), n(last.created_at.as_millis()));
    }
    // Erasing a finding keeps its tags, and their counts with them.
    let mut tags: BTreeMap<&str, u64> = BTreeMap::new();
    for t in record.findings.iter().flat_map(|f| &f.tags) {
        *tags.entry(t).or_default() += 1;
    }
    let tags = tags.into_iter().map(|(t, c)| (t.to_owned(), n(c))).collect();
    item.insert("tag_counts".into(), AttributeValue::M(tags));
    item.insert("rel_count".into(), n(record.relationships.len()));
    let erased = record.findings.iter().filter(|f| f.erased.is_some()).count();
    if erased > 0 {
        item.insert("erasures".into(), n(erased));
    }
    item
}
