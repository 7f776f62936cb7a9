//! The room's event feed and read positions.
//!
//! Events live in the `events` table under `(room_id, seq)`. The item at `seq = 0` is the
//! room's feed head: `last` is the highest `seq` appended. Every write that changes a room adds
//! two items to its own transaction ([`AwsBackend::event_items`]): the head moving from `h` to
//! `h + 1` on condition that it is still `h`, and the event at `h + 1`. A writer that lost the
//! race sees its transaction cancelled on the head and retries with the new head. Because event
//! `h + 1` can only commit after event `h` did, once a reader sees event `n` it sees every
//! event before it: sequence numbers are gap-free and in commit order across any number of
//! servers, as the feed's contract requires.
//!
//! The head and every event also carry the room's running count of events per kind
//! (`totals`, JSON) up to and including them, so an agent's unread counts are two reads,
//! whatever the length of the feed: the head's totals minus those of the event at its read
//! position.
//!
//! Read positions are the `read_seq` attribute of the agent's session item.

use std::collections::{BTreeMap, HashMap};

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
use macp_core::model::{Event, EventKind};
use macp_core::store::EventStore;
use macp_core::{AgentId, Error, Result, RoomId};

use crate::AwsBackend;
use crate::ddb::*;

/// The room's feed head: the last `seq` and the running counts per kind.
#[derive(Debug, Clone, Default)]
pub(crate) struct Head {
    pub(crate) last: u64,
    totals: BTreeMap<EventKind, u64>,
}

impl Head {
    /// The head once an event of `kind` is appended after this one.
    pub(crate) fn after(&self, kind: EventKind) -> Head {
        let mut totals = self.totals.clone();
        *totals.entry(kind).or_insert(0) += 1;
        Head { last: self.last + 1, totals }
    }

    fn totals_json(&self) -> String {
        serde_json::to_string(&self.totals).unwrap_or_default()
    }
}

/// The item of `event` appended as `head.last`, `head` being the head that appending it made
/// (its totals include the event).
pub(crate) fn event_item(room: RoomId, head: &Head, event: &Event) -> Item {
    let stored = event.at_seq(head.last);
    HashMap::from([
        ("room_id".to_owned(), s(room.to_string())),
        ("seq".to_owned(), n(head.last)),
        ("kind".to_owned(), s(stored.kind.as_str())),
        ("totals".to_owned(), s(head.totals_json())),
        ("doc".to_owned(), json(&stored)),
    ])
}

/// The feed head's own item (`seq` 0), as appends leave it.
pub(crate) fn head_item(room: RoomId, head: &Head) -> Item {
    let mut m = head_key(room);
    m.insert("last".into(), n(head.last));
    m.insert("totals".into(), s(head.totals_json()));
    m
}

fn totals_of(item: &Item) -> Result<BTreeMap<EventKind, u64>> {
    match opt_s(item, "totals") {
        Some(t) => serde_json::from_str(t)
            .map_err(|e| Error::backend("dynamodb", false, format!("bad feed totals: {e}"), None)),
        None => Ok(BTreeMap::new()),
    }
}

fn event_of(item: &Item) -> Result<Event> {
    let mut e: Event = doc(item)?;
    e.seq = get_n(item, "seq")? as u64;
    Ok(e)
}

impl AwsBackend {
    /// The room's feed head (`last` 0 when it has no events), read strongly.
    pub(crate) async fn event_head(&self, room: RoomId) -> Result<Head> {
        let Some(item) = self.get_item(&self.names.events, head_key(room), "GetItem (feed head)").await?
        else {
            return Ok(Head::default());
        };
        Ok(Head { last: opt_n(&item, "last").unwrap_or(0) as u64, totals: totals_of(&item)? })
    }

    /// The two items that append `event` as `head + 1` (see the module doc): the head update
    /// (which fails its condition if another writer moved the head) and the event.
    pub(crate) fn event_items(
        &self,
        room: RoomId,
        head: &Head,
        event: &Event,
    ) -> Result<Vec<TransactWriteItem>> {
        let next = head.after(event.kind);
        let mut upd = Update::builder()
            .table_name(&self.names.events)
            .set_key(Some(head_key(room)))
            .update_expression("SET #last = :next, totals = :totals")
            .expression_attribute_names("#last", "last")
            .expression_attribute_values(":next", n(next.last))
            .expression_attribute_values(":totals", s(next.totals_json()));
        upd = if head.last == 0 {
            upd.condition_expression("attribute_not_exists(#last)")
        } else {
            upd.condition_expression("#last = :head").expression_attribute_values(":head", n(head.last))
        };
        let upd = upd.build().map_err(|e| Error::backend("dynamodb", false, e.to_string(), None))?;
        Ok(vec![
            TransactWriteItem::builder().update(upd).build(),
            put(&self.names.events, event_item(room, &next, event), Some("attribute_not_exists(seq)")),
        ])
    }
}

impl AwsBackend {
    /// Updates that give every event of the room for which `names` holds the erasure `notice`
    /// as its summary. The events are found by the erased id in their stored text (erasure is
    /// rare; a room's feed is read once for it).
    pub(crate) async fn renotice_items(
        &self,
        room: RoomId,
        id: &str,
        names: impl Fn(&Event) -> bool + Send + 'static,
        notice: &str,
    ) -> Result<Vec<TransactWriteItem>> {
        let items = self
            .query_all(
                &self.names.events,
                None,
                "room_id = :r AND seq > :z",
                Some("contains(doc, :id)"),
                HashMap::new(),
                HashMap::from([
                    (":r".to_owned(), s(room.to_string())),
                    (":z".to_owned(), n(0)),
                    (":id".to_owned(), s(id)),
                ]),
                true,
                true,
                move |i| event_of(i).is_ok_and(|e| names(&e)),
                usize::MAX,
            )
            .await?;
        items
            .iter()
            .map(|item| {
                let mut e = event_of(item)?;
                e.summary = Event::summary_of(notice);
                let upd = Update::builder()
                    .table_name(&self.names.events)
                    .set_key(Some(HashMap::from([
                        ("room_id".to_owned(), s(room.to_string())),
                        ("seq".to_owned(), n(e.seq)),
                    ])))
                    .update_expression("SET doc = :d")
                    .expression_attribute_values(":d", json(&e))
                    .build()
                    .map_err(|e| Error::backend("dynamodb", false, e.to_string(), None))?;
                Ok(TransactWriteItem::builder().update(upd).build())
            })
            .collect()
    }

    /// The update that stores `erased` (a finding or an artifact) under `key` in `table`, on
    /// condition that its stored document is still `old`; `expression` is what it sets
    /// (`SET #d = :d` and more), with `values` for the more.
    pub(crate) fn erased_item<T: serde::Serialize>(
        &self,
        table: &str,
        key: HashMap<String, AttributeValue>,
        erased: &T,
        old: &str,
        expression: &str,
        values: &[(&str, AttributeValue)],
    ) -> Result<TransactWriteItem> {
        let mut upd = Update::builder()
            .table_name(table)
            .set_key(Some(key))
            .update_expression(expression)
            .condition_expression("#d = :old")
            .expression_attribute_names("#d", "doc")
            .expression_attribute_values(":d", json(erased))
            .expression_attribute_values(":old", s(old));
        for (name, value) in values {
            upd = upd.expression_attribute_values(*name, value.clone());
        }
        let upd = upd.build().map_err(|e| Error::backend("dynamodb", false, e.to_string(), None))?;
        Ok(TransactWriteItem::builder().update(upd).build())
    }

    /// The update that counts an erasure in the room's item: every server's keyword index of
    /// the room sees the count move and rebuilds without the erased finding.
    pub(crate) fn count_erasure(&self, room: RoomId) -> Result<TransactWriteItem> {
        let upd = Update::builder()
            .table_name(&self.names.rooms)
            .set_key(Some(HashMap::from([("room_id".to_owned(), s(room.to_string()))])))
            .update_expression("SET erasures = if_not_exists(erasures, :z) + :one")
            .expression_attribute_values(":z", n(0))
            .expression_attribute_values(":one", n(1))
            .build()
            .map_err(|e| Error::backend("dynamodb", false, e.to_string(), None))?;
        Ok(TransactWriteItem::builder().update(upd).build())
    }
}

fn head_key(room: RoomId) -> HashMap<String, AttributeValue> {
    HashMap::from([("room_id".to_owned(), s(room.to_string())), ("seq".to_owned(), n(0))])
}

/// Whether a cancelled transaction lost the race for the feed head at item `at`.
pub(crate) fn lost_head(reasons: &[Option<String>], at: usize) -> bool {
    check_failed(reasons, at) || reasons.iter().any(|r| r.as_deref() == Some("TransactionConflict"))
}

#[async_trait]
impl EventStore for AwsBackend {
    async fn list_events(
        &self,
        room_id: RoomId,
        after_seq: u64,
        kinds: &[EventKind],
        limit: usize,
    ) -> Result<Vec<Event>> {
        let mut values =
            HashMap::from([(":r".to_owned(), s(room_id.to_string())), (":a".to_owned(), n(after_seq))]);
        let mut names = HashMap::new();
        let filter = if kinds.is_empty() {
            None
        } else {
            names.insert("#k".to_owned(), "kind".to_owned());
            let mut ors = Vec::new();
            for (i, k) in kinds.iter().enumerate() {
                values.insert(format!(":k{i}"), s(k.as_str()));
                ors.push(format!("#k = :k{i}"));
            }
            Some(ors.join(" OR "))
        };
        let items = self
            .query_all(
                &self.names.events,
                None,
                "room_id = :r AND seq > :a",
                filter.as_deref(),
                names,
                values,
                true,
                true,
                |_| true,
                limit,
            )
            .await?;
        items.iter().map(event_of).collect()
    }

    async fn last_event_seq(&self, room_id: RoomId) -> Result<u64> {
        Ok(self.event_head(room_id).await?.last)
    }

    async fn count_events(&self, room_id: RoomId, after_seq: u64) -> Result<BTreeMap<EventKind, u64>> {
        let head = self.event_head(room_id).await?;
        if after_seq >= head.last {
            return Ok(BTreeMap::new());
        }
        let before = if after_seq == 0 {
            BTreeMap::new()
        } else {
            let key = HashMap::from([
                ("room_id".to_owned(), s(room_id.to_string())),
                ("seq".to_owned(), n(after_seq)),
            ]);
            match self.get_item(&self.names.events, key, "GetItem (event)").await? {
                Some(item) => totals_of(&item)?,
                None => {
                    return Err(Error::backend(
                        "dynamodb",
                        false,
                        format!("event {after_seq} is missing from the feed"),
                        None,
                    ));
                }
            }
        };
        Ok(head
            .totals
            .into_iter()
            .map(|(k, n)| (k, n - before.get(&k).copied().unwrap_or(0)))
            .filter(|(_, n)| *n > 0)
            .collect())
    }

    async fn read_position(&self, room_id: RoomId, agent_id: &AgentId) -> Result<u64> {
        let item = self
            .get_item(
                &self.names.agents,
                key2("room_id", room_id.to_string(), "agent_id", agent_id.to_string()),
                "GetItem (read position)",
            )
            .await?;
        Ok(item.and_then(|i| opt_n(&i, "read_seq")).unwrap_or(0) as u64)
    }

    async fn advance_read_position(&self, room_id: RoomId, agent_id: &AgentId, seq: u64) -> Result<u64> {
        let r = self
            .ddb
            .update_item()
            .table_name(&self.names.agents)
            .set_key(Some(key2("room_id", room_id.to_string(), "agent_id", agent_id.to_string())))
            .update_expression("SET read_seq = :s")
            .condition_expression(
                "attribute_exists(agent_id) AND (attribute_not_exists(read_seq) OR read_seq < :s)",
            )
            .expression_attribute_values(":s", n(seq))
            .send()
            .await;
        match r {
            Ok(_) => Ok(seq),
            Err(e) if code_of(&e) == Some("ConditionalCheckFailedException") => {
                // Already there or further (or the agent is unknown): report where it is.
                self.read_position(room_id, agent_id).await
            }
            Err(e) => Err(aws_err("dynamodb", "UpdateItem (read position)", e)),
        }
    }
}
