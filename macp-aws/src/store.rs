//! The store traits on DynamoDB.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes, Put, Select, TransactWriteItem, Update};
use macp_core::model::{
    AgentSession, AgentStatus, Artifact, Entity, Finding, Identifier, IndexStatus, Relationship, Room,
    RoomStatus,
};
use macp_core::search::keyword::KeywordIndex;
use macp_core::store::{
    AgentStore, AgentUpdate, ArtifactQuery, ArtifactStore, AttachEntity, Capabilities, CreateEntity,
    EntityStats, EntityStore, FindingQuery, FindingStats, FindingStore, IdempotencyClaim, IdempotencyRecord,
    Insert, KeywordSearch, RelationshipKey, RoomKey, RoomStore, Store, Write, WriteOperation,
};
use macp_core::{AgentId, ArtifactId, EntityId, Error, FindingId, Result, RoomId, Timestamp, UserId};
use serde_json::{Map, Value};

use crate::AwsBackend;
use crate::ddb::{Item, aws_err, code_of, doc, get_n, get_s, json, n, opt_n, opt_s, s};

/// Attempts of an optimistic write before giving up with a retryable error.
const ATTEMPTS: usize = 64;

fn key2(hk: &str, hv: impl Into<String>, rk: &str, rv: impl Into<String>) -> HashMap<String, AttributeValue> {
    HashMap::from([(hk.to_owned(), s(hv)), (rk.to_owned(), s(rv))])
}

fn idem_sk(key: &str) -> String {
    format!("IDEMP#{key}")
}

fn ident_sk(i: &Identifier) -> String {
    format!("IDENT#{}#{}", i.id_type, i.value)
}

async fn backoff(attempt: usize) {
    // Jitter from the clock's low bits keeps racing writers from retrying in lockstep.
    let jitter = (Timestamp::now().as_millis() % 7) as u64;
    tokio::time::sleep(Duration::from_millis((attempt as u64).min(20) * 3 + jitter)).await;
}

/// A partition query that resumes after `after` (with `paged`, which compares the range key to
/// `:a`). DynamoDB rejects empty strings as key values, so "from the start" drops the range
/// condition instead of comparing with `""`.
fn range_after(
    room_id: RoomId,
    paged: &'static str,
    after: Option<String>,
) -> (&'static str, HashMap<String, AttributeValue>) {
    let mut values = HashMap::from([(":r".to_owned(), s(room_id.to_string()))]);
    match after.filter(|a| !a.is_empty()) {
        Some(after) => {
            values.insert(":a".into(), s(after));
            (paged, values)
        }
        None => ("room_id = :r", values),
    }
}

fn gave_up(what: &str) -> Error {
    Error::backend(
        "dynamodb",
        true,
        format!("{what}: too much contention, gave up after {ATTEMPTS} attempts; retry"),
        None,
    )
}

/// What a cancelled transaction says per item: `Some(code)` for items that failed.
fn cancellation(
    e: &aws_sdk_dynamodb::error::SdkError<
        TransactWriteItemsError,
        aws_smithy_runtime_api::client::orchestrator::HttpResponse,
    >,
) -> Option<Vec<Option<String>>> {
    match e {
        aws_sdk_dynamodb::error::SdkError::ServiceError(ctx) => match ctx.err() {
            TransactWriteItemsError::TransactionCanceledException(t) => Some(
                t.cancellation_reasons()
                    .iter()
                    .map(|r| r.code().filter(|c| *c != "None").map(str::to_owned))
                    .collect(),
            ),
            _ => None,
        },
        _ => None,
    }
}

fn put(table: &str, item: Item, condition: Option<&str>) -> TransactWriteItem {
    let mut p = Put::builder().table_name(table).set_item(Some(item));
    if let Some(c) = condition {
        p = p.condition_expression(c);
    }
    TransactWriteItem::builder()
        .put(p.build().unwrap_or_else(|_| unreachable!("table and item are set")))
        .build()
}

/// The outcome of a transaction: committed, or cancelled with per-item codes.
enum Tx {
    Done,
    Cancelled(Vec<Option<String>>),
}

/// Whether item `i` of a cancelled transaction failed its condition.
fn check_failed(reasons: &[Option<String>], i: usize) -> bool {
    reasons.get(i).is_some_and(|r| r.as_deref() == Some("ConditionalCheckFailed"))
}

impl AwsBackend {
    async fn transact(&self, items: Vec<TransactWriteItem>, what: &str) -> Result<Tx> {
        match self.ddb.transact_write_items().set_transact_items(Some(items)).send().await {
            Ok(_) => Ok(Tx::Done),
            Err(e) => match cancellation(&e) {
                Some(reasons) => Ok(Tx::Cancelled(reasons)),
                None => Err(aws_err("dynamodb", what, e)),
            },
        }
    }

    async fn get_item(
        &self,
        table: &str,
        key: HashMap<String, AttributeValue>,
        what: &str,
    ) -> Result<Option<Item>> {
        let out = self
            .ddb
            .get_item()
            .table_name(table)
            .set_key(Some(key))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| aws_err("dynamodb", what, e))?;
        Ok(out.item)
    }

    /// BatchGetItem over any number of keys, retrying unprocessed keys.
    async fn batch_get(&self, table: &str, keys: Vec<HashMap<String, AttributeValue>>) -> Result<Vec<Item>> {
        let mut out = Vec::new();
        for chunk in keys.chunks(100) {
            let mut pending = chunk.to_vec();
            let mut attempt = 0;
            while !pending.is_empty() {
                let ka = KeysAndAttributes::builder()
                    .set_keys(Some(pending.clone()))
                    .consistent_read(true)
                    .build()
                    .map_err(|e| Error::backend("dynamodb", false, e.to_string(), None))?;
                let resp = self
                    .ddb
                    .batch_get_item()
                    .request_items(table, ka)
                    .send()
                    .await
                    .map_err(|e| aws_err("dynamodb", "BatchGetItem", e))?;
                if let Some(mut r) = resp.responses {
                    out.extend(r.remove(table).unwrap_or_default());
                }
                pending = resp
                    .unprocessed_keys
                    .and_then(|mut u| u.remove(table))
                    .map(|k| k.keys)
                    .unwrap_or_default();
                if !pending.is_empty() {
                    attempt += 1;
                    if attempt > ATTEMPTS {
                        return Err(gave_up("BatchGetItem"));
                    }
                    backoff(attempt).await;
                }
            }
        }
        Ok(out)
    }

    /// Queries a partition (optionally an index), following pages until `stop` says enough.
    #[allow(clippy::too_many_arguments)]
    async fn query_all(
        &self,
        table: &str,
        index: Option<&str>,
        key_condition: &str,
        filter: Option<&str>,
        names: HashMap<String, String>,
        values: HashMap<String, AttributeValue>,
        forward: bool,
        consistent: bool,
        mut keep: impl FnMut(&Item) -> bool,
        limit: usize,
    ) -> Result<Vec<Item>> {
        let mut out = Vec::new();
        let mut start = None;
        loop {
            let mut q = self
                .ddb
                .query()
                .table_name(table)
                .key_condition_expression(key_condition)
                .set_expression_attribute_values(Some(values.clone()))
                .scan_index_forward(forward)
                .consistent_read(consistent)
                .set_exclusive_start_key(start.take());
            if !names.is_empty() {
                q = q.set_expression_attribute_names(Some(names.clone()));
            }
            if let Some(i) = index {
                q = q.index_name(i);
            }
            if let Some(f) = filter {
                q = q.filter_expression(f);
            }
            let resp = q.send().await.map_err(|e| aws_err("dynamodb", "Query", e))?;
            for item in resp.items.unwrap_or_default() {
                if keep(&item) {
                    out.push(item);
                    if out.len() >= limit {
                        return Ok(out);
                    }
                }
            }
            match resp.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => return Ok(out),
            }
        }
    }

    async fn claim_record(&self, room: RoomId, key: &str) -> Result<Option<IdempotencyRecord>> {
        let Some(item) = self
            .get_item(
                &self.names.findings,
                key2("room_id", room.to_string(), "finding_id", idem_sk(key)),
                "GetItem",
            )
            .await?
        else {
            return Ok(None);
        };
        Ok(Some(IdempotencyRecord {
            key: key.to_owned(),
            operation: WriteOperation::parse(get_s(&item, "operation")?)
                .ok_or_else(|| Error::backend("dynamodb", false, "unknown idempotency operation", None))?,
            fingerprint: get_s(&item, "fingerprint")?.to_owned(),
            result_id: get_s(&item, "result_id")?.to_owned(),
            created_at: Timestamp::from_millis(get_n(&item, "created_at")?),
        }))
    }

    fn claim_put(&self, room: RoomId, c: &IdempotencyClaim) -> TransactWriteItem {
        let item = HashMap::from([
            ("room_id".to_owned(), s(room.to_string())),
            ("finding_id".to_owned(), s(idem_sk(&c.key))),
            ("operation".to_owned(), s(c.operation.as_str())),
            ("fingerprint".to_owned(), s(c.fingerprint.clone())),
            ("result_id".to_owned(), s(c.result_id.clone())),
            ("created_at".to_owned(), n(c.created_at.as_millis())),
        ]);
        put(&self.names.findings, item, Some("attribute_not_exists(finding_id)"))
    }

    /// The replay record if `claim` is already taken (a cheap check before a transaction).
    async fn replayed(
        &self,
        room: RoomId,
        claim: Option<&IdempotencyClaim>,
    ) -> Result<Option<IdempotencyRecord>> {
        match claim {
            Some(c) => self.claim_record(room, &c.key).await,
            None => Ok(None),
        }
    }

    async fn require_claim(
        &self,
        room: RoomId,
        claim: Option<&IdempotencyClaim>,
    ) -> Result<IdempotencyRecord> {
        self.replayed(room, claim)
            .await?
            .ok_or_else(|| Error::backend("dynamodb", true, "idempotency claim vanished; retry", None))
    }
}

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

    async fn close_room(&self, room_id: RoomId, at: Timestamp, by: &UserId) -> Result<Option<Room>> {
        let r = self
            .ddb
            .update_item()
            .table_name(&self.names.rooms)
            .key("room_id", s(room_id.to_string()))
            .update_expression("SET #st = :closed, closed_at = :at, closed_by = :by")
            .condition_expression("attribute_exists(room_id) AND #st = :active")
            .expression_attribute_names("#st", "status")
            .expression_attribute_values(":closed", s("closed"))
            .expression_attribute_values(":active", s("active"))
            .expression_attribute_values(":at", n(at.as_millis()))
            .expression_attribute_values(":by", s(by.as_str()))
            .send()
            .await;
        match r {
            Ok(_) => {}
            Err(e) if code_of(&e) == Some("ConditionalCheckFailedException") => {}
            Err(e) => return Err(aws_err("dynamodb", "UpdateItem", e)),
        }
        self.get_room(room_id).await
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

// ---------------------------------------------------------------------------------------------

fn agent_item(a: &AgentSession) -> Item {
    let mut m = HashMap::from([
        ("room_id".to_owned(), s(a.room_id.to_string())),
        ("agent_id".to_owned(), s(a.agent_id.as_str())),
        ("user_id".to_owned(), s(a.user_id.as_str())),
        ("joined_at".to_owned(), n(a.joined_at.as_millis())),
        ("last_active".to_owned(), n(a.last_active.as_millis())),
        ("agent_status".to_owned(), s(a.agent_status.as_str())),
        ("status_updated_at".to_owned(), n(a.status_updated_at.as_millis())),
    ]);
    if let Some(t) = &a.agent_type {
        m.insert("agent_type".into(), s(t.clone()));
    }
    if let Some(r) = &a.status_reason {
        m.insert("status_reason".into(), s(r.clone()));
    }
    m
}

fn agent_of(item: &Item) -> Result<AgentSession> {
    Ok(AgentSession {
        room_id: get_s(item, "room_id")?.parse()?,
        agent_id: AgentId::new(get_s(item, "agent_id")?)?,
        user_id: UserId::new(get_s(item, "user_id")?)?,
        joined_at: Timestamp::from_millis(get_n(item, "joined_at")?),
        last_active: Timestamp::from_millis(get_n(item, "last_active")?),
        agent_type: opt_s(item, "agent_type").map(str::to_owned),
        agent_status: AgentStatus::parse(get_s(item, "agent_status")?)?,
        status_reason: opt_s(item, "status_reason").map(str::to_owned),
        status_updated_at: Timestamp::from_millis(get_n(item, "status_updated_at")?),
    })
}

#[async_trait]
impl AgentStore for AwsBackend {
    async fn insert_agent(&self, session: &AgentSession) -> Result<Insert<AgentSession>> {
        let r = self
            .ddb
            .put_item()
            .table_name(&self.names.agents)
            .set_item(Some(agent_item(session)))
            .condition_expression("attribute_not_exists(agent_id)")
            .send()
            .await;
        match r {
            Ok(_) => Ok(Insert::Inserted(session.clone())),
            Err(e) if code_of(&e) == Some("ConditionalCheckFailedException") => self
                .get_agent(session.room_id, &session.agent_id)
                .await?
                .map(Insert::Existing)
                .ok_or_else(|| Error::backend("dynamodb", true, "agent vanished; retry", None)),
            Err(e) => Err(aws_err("dynamodb", "PutItem", e)),
        }
    }

    async fn get_agent(&self, room_id: RoomId, agent_id: &AgentId) -> Result<Option<AgentSession>> {
        let key = key2("room_id", room_id.to_string(), "agent_id", agent_id.as_str());
        self.get_item(&self.names.agents, key, "GetItem").await?.map(|i| agent_of(&i)).transpose()
    }

    async fn list_agents(&self, room_id: RoomId) -> Result<Vec<AgentSession>> {
        let items = self
            .query_all(
                &self.names.agents,
                None,
                "room_id = :r",
                None,
                HashMap::new(),
                HashMap::from([(":r".to_owned(), s(room_id.to_string()))]),
                true,
                true,
                |_| true,
                usize::MAX,
            )
            .await?;
        let mut out = items.iter().map(agent_of).collect::<Result<Vec<_>>>()?;
        out.sort_by(|a, b| (a.joined_at, &a.agent_id).cmp(&(b.joined_at, &b.agent_id)));
        Ok(out)
    }

    async fn update_agent(
        &self,
        room_id: RoomId,
        agent_id: &AgentId,
        u: &AgentUpdate,
    ) -> Result<Option<AgentSession>> {
        let key = key2("room_id", room_id.to_string(), "agent_id", agent_id.as_str());
        let mut sets = Vec::new();
        let mut removes = Vec::new();
        let mut values = HashMap::new();
        if let Some(t) = &u.agent_type {
            sets.push("agent_type = :t");
            values.insert(":t".to_owned(), s(t.clone()));
        }
        if let Some((st, reason, at)) = &u.status {
            sets.push("agent_status = :st");
            sets.push("status_updated_at = :sat");
            values.insert(":st".to_owned(), s(st.as_str()));
            values.insert(":sat".to_owned(), n(at.as_millis()));
            match reason {
                Some(r) => {
                    sets.push("status_reason = :sr");
                    values.insert(":sr".to_owned(), s(r.clone()));
                }
                None => removes.push("status_reason"),
            }
        }
        if !sets.is_empty() || !removes.is_empty() {
            let mut expr = String::new();
            if !sets.is_empty() {
                expr.push_str(&format!("SET {}", sets.join(", ")));
            }
            if !removes.is_empty() {
                expr.push_str(&format!(" REMOVE {}", removes.join(", ")));
            }
            let mut req = self
                .ddb
                .update_item()
                .table_name(&self.names.agents)
                .set_key(Some(key.clone()))
                .update_expression(expr)
                .condition_expression("attribute_exists(agent_id)");
            if !values.is_empty() {
                req = req.set_expression_attribute_values(Some(values));
            }
            match req.send().await {
                Ok(_) => {}
                Err(e) if code_of(&e) == Some("ConditionalCheckFailedException") => return Ok(None),
                Err(e) => return Err(aws_err("dynamodb", "UpdateItem", e)),
            }
        }
        if let Some(t) = u.last_active {
            // Only ever forward: a failed condition means a later value is stored already.
            let r = self
                .ddb
                .update_item()
                .table_name(&self.names.agents)
                .set_key(Some(key))
                .update_expression("SET last_active = :la")
                .condition_expression("attribute_exists(agent_id) AND last_active < :la")
                .expression_attribute_values(":la", n(t.as_millis()))
                .send()
                .await;
            match r {
                Ok(_) => {}
                Err(e) if code_of(&e) == Some("ConditionalCheckFailedException") => {}
                Err(e) => return Err(aws_err("dynamodb", "UpdateItem", e)),
            }
        }
        self.get_agent(room_id, agent_id).await
    }
}

// ---------------------------------------------------------------------------------------------

fn finding_item(f: &Finding, seq: u64) -> Item {
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

fn finding_of(item: &Item) -> Result<Finding> {
    let mut f: Finding = doc(item)?;
    f.index_status = IndexStatus::parse(get_s(item, "index_status")?)?;
    f.seq = get_n(item, "seq")? as u64;
    Ok(f)
}

#[async_trait]
impl FindingStore for AwsBackend {
    async fn append_finding(&self, f: &Finding, claim: Option<&IdempotencyClaim>) -> Result<Write<Finding>> {
        let room_key = HashMap::from([("room_id".to_owned(), s(f.room_id.to_string()))]);
        for attempt in 0..ATTEMPTS {
            if let Some(rec) = self.replayed(f.room_id, claim).await? {
                return Ok(Write::Replayed(rec));
            }
            let room = self
                .get_item(&self.names.rooms, room_key.clone(), "GetItem")
                .await?
                .filter(|i| i.contains_key("doc"))
                .ok_or_else(|| Error::not_found("room", f.room_id))?;
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
            if let Some(c) = claim {
                items.push(self.claim_put(f.room_id, c));
            }
            match self.transact(items, "TransactWriteItems (append finding)").await? {
                Tx::Done => {
                    let mut stored = f.clone();
                    stored.seq = seq;
                    return Ok(Write::Applied(stored));
                }
                Tx::Cancelled(reasons) => {
                    if claim.is_some() && check_failed(&reasons, 2) {
                        return Ok(Write::Replayed(self.require_claim(f.room_id, claim).await?));
                    }
                    // Another writer took `seq` (or a transaction conflicted): read again.
                    backoff(attempt).await;
                }
            }
        }
        Err(gave_up("append finding"))
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
        let tags = q.tags_any.clone();
        let agent = q.agent_id.clone();
        let (since, until) = (q.since, q.until);
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
                move |item| {
                    let ok_tags = tags.is_empty()
                        || item
                            .get("tags")
                            .and_then(|t| t.as_ss().ok())
                            .is_some_and(|have| have.iter().any(|t| tags.contains(t)));
                    let ok_agent = agent.as_ref().is_none_or(|a| opt_s(item, "agent_id") == Some(a.as_str()));
                    let at = opt_n(item, "created_at").unwrap_or(0);
                    ok_tags
                        && ok_agent
                        && since.is_none_or(|t| at >= t.as_millis())
                        && until.is_none_or(|t| at < t.as_millis())
                },
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

    async fn keyword_search(&self, room_id: RoomId, query: &str, limit: usize) -> Result<KeywordSearch> {
        let (seen, mut index) = {
            let cache = self.keywords.lock().unwrap_or_else(|p| p.into_inner());
            cache.get(&room_id).cloned().unwrap_or_else(|| (0, Arc::new(KeywordIndex::new())))
        };
        // Catch up with findings committed since this process last looked (any instance).
        let fresh = self.list_findings(room_id, &FindingQuery::after(seen, usize::MAX)).await?;
        let mut last = seen;
        if !fresh.is_empty() {
            let ix = Arc::make_mut(&mut index);
            for f in &fresh {
                ix.add(f.finding_id, &f.content);
                last = f.seq;
            }
            let mut cache = self.keywords.lock().unwrap_or_else(|p| p.into_inner());
            if cache.get(&room_id).is_none_or(|(s, _)| *s < last) {
                cache.insert(room_id, (last, index.clone()));
            }
        }
        let query = query.to_owned();
        tokio::task::spawn_blocking(move || index.search(&query, limit))
            .await
            .map_err(|e| Error::backend("dynamodb", true, format!("keyword task failed: {e}"), None))
    }
}

// ---------------------------------------------------------------------------------------------

fn entity_item(e: &Entity, version: i64) -> Item {
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

fn rel_item(r: &Relationship, version: i64) -> Item {
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

    async fn claims(&self, room: RoomId, ids: &[Identifier]) -> Result<Vec<(Identifier, EntityId)>> {
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
        let item = HashMap::from([
            ("room_id".to_owned(), s(room.to_string())),
            ("entity_id".to_owned(), s(ident_sk(i))),
            ("holder".to_owned(), s(holder.to_string())),
        ]);
        put(&self.names.entities, item, Some("attribute_not_exists(entity_id)"))
    }
}

#[async_trait]
impl EntityStore for AwsBackend {
    async fn create_entity(&self, entity: &Entity, claim: Option<&IdempotencyClaim>) -> Result<CreateEntity> {
        let room = entity.room_id;
        if let Some(rec) = self.replayed(room, claim).await? {
            return Ok(CreateEntity::Replayed(rec));
        }
        let mut items =
            vec![put(&self.names.entities, entity_item(entity, 0), Some("attribute_not_exists(entity_id)"))];
        items.extend(entity.identifiers.iter().map(|i| self.ident_put(room, i, entity.entity_id)));
        if let Some(c) = claim {
            items.push(self.claim_put(room, c));
        }
        match self.transact(items, "TransactWriteItems (create entity)").await? {
            Tx::Done => Ok(CreateEntity::Created(entity.clone())),
            Tx::Cancelled(reasons) => {
                let failed = |i: usize| check_failed(&reasons, i);
                let n_ids = entity.identifiers.len();
                if claim.is_some() && failed(1 + n_ids) {
                    return Ok(CreateEntity::Replayed(self.require_claim(room, claim).await?));
                }
                let taken = self.claims(room, &entity.identifiers).await?;
                if taken.is_empty() {
                    return Err(Error::backend("dynamodb", true, "entity creation conflicted; retry", None));
                }
                Ok(CreateEntity::IdentifiersTaken(taken))
            }
        }
    }

    async fn attach_to_entity(
        &self,
        room_id: RoomId,
        entity_id: EntityId,
        identifiers: &[Identifier],
        properties: &Map<String, Value>,
        claim: Option<&IdempotencyClaim>,
    ) -> Result<AttachEntity> {
        for attempt in 0..ATTEMPTS {
            if let Some(rec) = self.replayed(room_id, claim).await? {
                return Ok(AttachEntity::Replayed(rec));
            }
            let (mut e, version) = self
                .entity(room_id, entity_id)
                .await?
                .ok_or_else(|| Error::not_found("entity", entity_id))?;
            let taken = self.claims(room_id, identifiers).await?;
            let mut claimed_elsewhere = Vec::new();
            let mut added = Vec::new();
            for i in identifiers {
                match taken.iter().find(|(t, _)| t == i) {
                    Some((_, h)) if *h != entity_id => claimed_elsewhere.push((i.clone(), *h)),
                    Some(_) => {}
                    None => added.push(i.clone()),
                }
            }
            e.identifiers.extend(added.iter().cloned());
            e.identifiers.sort();
            e.identifiers.dedup();
            for (k, v) in properties {
                e.properties.entry(k.clone()).or_insert_with(|| v.clone());
            }
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
            if let Some(c) = claim {
                items.push(self.claim_put(room_id, c));
            }
            match self.transact(items, "TransactWriteItems (attach)").await? {
                Tx::Done => return Ok(AttachEntity::Attached { entity: e, claimed_elsewhere }),
                Tx::Cancelled(reasons) => {
                    if claim.is_some() && check_failed(&reasons, reasons.len().saturating_sub(1)) {
                        return Ok(AttachEntity::Replayed(self.require_claim(room_id, claim).await?));
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
        self.claims(room_id, identifiers).await
    }

    async fn merge_entities(&self, room_id: RoomId, winner: EntityId, loser: EntityId) -> Result<Entity> {
        let (mut w, wv) =
            self.entity(room_id, winner).await?.ok_or_else(|| Error::not_found("entity", winner))?;
        let (mut l, lv) =
            self.entity(room_id, loser).await?.ok_or_else(|| Error::not_found("entity", loser))?;
        if winner == loser || w.merged_into.is_some() || l.merged_into.is_some() {
            return Err(Error::conflict("one of the entities was merged concurrently"));
        }
        w.identifiers.extend(l.identifiers.iter().cloned());
        w.identifiers.sort();
        w.identifiers.dedup();
        l.merged_into = Some(winner);
        let items = vec![
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
        match self.transact(items, "TransactWriteItems (merge)").await? {
            Tx::Done => Ok(w),
            Tx::Cancelled(_) => Err(Error::conflict("one of the entities changed concurrently")),
        }
    }

    async fn put_relationship(
        &self,
        rel: &Relationship,
        claim: Option<&IdempotencyClaim>,
    ) -> Result<Write<(Relationship, bool)>> {
        let room = rel.room_id;
        let key = RelationshipKey::of(rel);
        for attempt in 0..ATTEMPTS {
            if let Some(rec) = self.replayed(room, claim).await? {
                return Ok(Write::Replayed(rec));
            }
            let existing = self.get_item(&self.names.relationships, rel_key(room, &key), "GetItem").await?;
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
                    for ev in &rel.evidence {
                        if !r.evidence.contains(ev) {
                            r.evidence.push(ev.clone());
                        }
                    }
                    if r.description.is_none() {
                        r.description = rel.description.clone();
                    }
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
            if let Some(c) = claim {
                items.push(self.claim_put(room, c));
            }
            match self.transact(items, "TransactWriteItems (relationship)").await? {
                Tx::Done => return Ok(Write::Applied((stored, created))),
                Tx::Cancelled(reasons) => {
                    if claim.is_some() && check_failed(&reasons, reasons.len().saturating_sub(1)) {
                        return Ok(Write::Replayed(self.require_claim(room, claim).await?));
                    }
                    backoff(attempt).await;
                }
            }
        }
        Err(gave_up("put relationship"))
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

// ---------------------------------------------------------------------------------------------

#[async_trait]
impl ArtifactStore for AwsBackend {
    async fn insert_artifact(
        &self,
        a: &Artifact,
        claim: Option<&IdempotencyClaim>,
    ) -> Result<Write<Artifact>> {
        let room = a.room_id;
        if let Some(rec) = self.replayed(room, claim).await? {
            return Ok(Write::Replayed(rec));
        }
        let item = HashMap::from([
            ("room_id".to_owned(), s(room.to_string())),
            ("artifact_id".to_owned(), s(a.artifact_id.to_string())),
            ("doc".to_owned(), json(a)),
        ]);
        let key_claim = HashMap::from([
            ("room_id".to_owned(), s(room.to_string())),
            ("artifact_id".to_owned(), s(format!("KEY#{}", a.key))),
            ("holder".to_owned(), s(a.artifact_id.to_string())),
        ]);
        let mut items = vec![
            put(&self.names.artifacts, item, Some("attribute_not_exists(artifact_id)")),
            put(&self.names.artifacts, key_claim, Some("attribute_not_exists(artifact_id)")),
        ];
        if let Some(c) = claim {
            items.push(self.claim_put(room, c));
        }
        match self.transact(items, "TransactWriteItems (artifact)").await? {
            Tx::Done => Ok(Write::Applied(a.clone())),
            Tx::Cancelled(reasons) => {
                let failed = |i: usize| check_failed(&reasons, i);
                if claim.is_some() && failed(2) {
                    return Ok(Write::Replayed(self.require_claim(room, claim).await?));
                }
                if failed(1) {
                    return Err(Error::AlreadyExists { what: "artifact with key", id: a.key.clone() });
                }
                Err(Error::backend("dynamodb", true, "artifact registration conflicted; retry", None))
            }
        }
    }

    async fn get_artifacts(&self, room_id: RoomId, ids: &[ArtifactId]) -> Result<Vec<Artifact>> {
        let keys = ids
            .iter()
            .map(|id| key2("room_id", room_id.to_string(), "artifact_id", id.to_string()))
            .collect();
        self.batch_get(&self.names.artifacts, keys)
            .await?
            .iter()
            .filter(|i| i.contains_key("doc"))
            .map(doc)
            .collect()
    }

    async fn list_artifacts(&self, room_id: RoomId, q: &ArtifactQuery) -> Result<Vec<Artifact>> {
        let (cond, values) =
            range_after(room_id, "room_id = :r AND artifact_id > :a", q.after.map(|a| a.to_string()));
        let (finding, entities) = (q.finding_id, q.entity_ids.clone());
        let items = self
            .query_all(
                &self.names.artifacts,
                None,
                cond,
                None,
                HashMap::new(),
                values,
                true,
                true,
                move |i| {
                    let Ok(a) = doc::<Artifact>(i) else { return false };
                    finding.is_none_or(|f| a.linked_finding_ids.contains(&f))
                        && (entities.is_empty() || a.linked_entity_ids.iter().any(|e| entities.contains(e)))
                },
                q.limit,
            )
            .await?;
        items.iter().map(doc).collect()
    }

    async fn count_artifacts(&self, room_id: RoomId) -> Result<u64> {
        let items = self
            .query_all(
                &self.names.artifacts,
                None,
                "room_id = :r",
                Some("attribute_exists(doc)"),
                HashMap::new(),
                HashMap::from([(":r".to_owned(), s(room_id.to_string()))]),
                true,
                true,
                |_| true,
                usize::MAX,
            )
            .await?;
        Ok(items.len() as u64)
    }
}

impl Store for AwsBackend {
    fn name(&self) -> &'static str {
        "aws"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::none().with_durable(true).with_shared_across_processes(true).with_keyword_search(true)
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::Client;
    use aws_sdk_dynamodb::operation::batch_get_item::BatchGetItemOutput;
    use aws_smithy_mocks::{RuleMode, mock, mock_client};

    use super::*;

    fn backend(ddb: aws_sdk_dynamodb::Client) -> AwsBackend {
        let conf =
            aws_config::SdkConfig::builder().behavior_version(aws_config::BehaviorVersion::latest()).build();
        AwsBackend {
            ddb,
            s3: aws_sdk_s3::Client::new(&conf),
            s3v: aws_sdk_s3vectors::Client::new(&conf),
            bedrock: aws_sdk_bedrockruntime::Client::new(&conf),
            names: crate::AwsBuilder::new().names(),
            emulated: false,
            keywords: Default::default(),
        }
    }

    fn keys(n: usize) -> Vec<Item> {
        (0..n).map(|i| key2("room_id", "r", "finding_id", format!("f{i:03}"))).collect()
    }

    /// Search hydrates hits with BatchGetItem; DynamoDB may answer part of a batch and hand the
    /// rest back as UnprocessedKeys (throttling, 16 MB responses), which must be asked again.
    #[tokio::test]
    async fn batch_get_asks_again_for_unprocessed_keys_and_chunks_by_100() {
        let table = "macp-findings";
        let first = mock!(Client::batch_get_item)
            .match_requests(move |r| {
                r.request_items().and_then(|m| m.get(table)).is_some_and(|k| k.keys().len() == 100)
            })
            .then_output(move || {
                let answered = keys(100)[..60].to_vec();
                let rest =
                    KeysAndAttributes::builder().set_keys(Some(keys(100)[60..].to_vec())).build().unwrap();
                BatchGetItemOutput::builder().responses(table, answered).unprocessed_keys(table, rest).build()
            });
        let retry = mock!(Client::batch_get_item)
            .match_requests(move |r| {
                r.request_items().and_then(|m| m.get(table)).is_some_and(|k| k.keys() == &keys(100)[60..])
            })
            .then_output(move || {
                BatchGetItemOutput::builder().responses(table, keys(100)[60..].to_vec()).build()
            });
        let tail = mock!(Client::batch_get_item)
            .match_requests(move |r| {
                r.request_items().and_then(|m| m.get(table)).is_some_and(|k| k.keys().len() == 20)
            })
            .then_output(move || {
                BatchGetItemOutput::builder().responses(table, keys(120)[100..].to_vec()).build()
            });
        let ddb = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&first, &retry, &tail]);
        let got = backend(ddb).batch_get(table, keys(120)).await.unwrap();
        assert_eq!((first.num_calls(), retry.num_calls(), tail.num_calls()), (1, 1, 1));
        let mut ids: Vec<String> = got.iter().map(|i| get_s(i, "finding_id").unwrap().to_owned()).collect();
        ids.sort();
        assert_eq!(ids, (0..120).map(|i| format!("f{i:03}")).collect::<Vec<_>>(), "every key once");
    }
}
