//! Agents present in a room.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{TransactWriteItem, Update};
use macp_core::model::{AgentSession, AgentStatus, Event};
use macp_core::store::{AgentStore, AgentUpdate, Insert};
use macp_core::{AgentId, Error, Result, RoomId, Timestamp, UserId};

use crate::AwsBackend;
use crate::ddb::*;
use crate::ddb::{Item, aws_err, code_of, get_n, get_s, n, opt_s, s};

// ---------------------------------------------------------------------------------------------

/// An agent's item as it joins (no read position yet).
pub(crate) fn agent_item(a: &AgentSession) -> Item {
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
        unread: None,
    })
}

#[async_trait]
impl AgentStore for AwsBackend {
    async fn insert_agent(&self, session: &AgentSession, event: &Event) -> Result<Insert<AgentSession>> {
        let room = session.room_id;
        for attempt in 0..ATTEMPTS {
            let head = self.event_head(room).await?;
            let mut items =
                vec![put(&self.names.agents, agent_item(session), Some("attribute_not_exists(agent_id)"))];
            items.extend(self.event_items(room, &head, event)?);
            match self.transact(items, "TransactWriteItems (join)").await? {
                Tx::Done => return Ok(Insert::Inserted(session.clone())),
                Tx::Cancelled(reasons) if check_failed(&reasons, 0) => {
                    return self
                        .get_agent(room, &session.agent_id)
                        .await?
                        .map(Insert::Existing)
                        .ok_or_else(|| Error::backend("dynamodb", true, "agent vanished; retry", None));
                }
                // Another write took the feed head: read it again.
                Tx::Cancelled(_) => backoff(attempt).await,
            }
        }
        Err(gave_up("join room"))
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
        event: Option<&Event>,
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
                .update_expression(expr.clone())
                .condition_expression("attribute_exists(agent_id)");
            if let Some(event) = event {
                // With its event, in one transaction (see `store::events`).
                let mut upd = Update::builder()
                    .table_name(&self.names.agents)
                    .set_key(Some(key.clone()))
                    .update_expression(expr)
                    .condition_expression("attribute_exists(agent_id)");
                if !values.is_empty() {
                    upd = upd.set_expression_attribute_values(Some(values));
                }
                let upd = upd.build().map_err(|e| Error::backend("dynamodb", false, e.to_string(), None))?;
                let mut done = false;
                for attempt in 0..ATTEMPTS {
                    let head = self.event_head(room_id).await?;
                    let mut items = vec![TransactWriteItem::builder().update(upd.clone()).build()];
                    items.extend(self.event_items(room_id, &head, event)?);
                    match self.transact(items, "TransactWriteItems (agent update)").await? {
                        Tx::Done => {
                            done = true;
                            break;
                        }
                        Tx::Cancelled(reasons) if check_failed(&reasons, 0) => return Ok(None),
                        Tx::Cancelled(_) => backoff(attempt).await,
                    }
                }
                if !done {
                    return Err(gave_up("update agent"));
                }
            } else {
                if !values.is_empty() {
                    req = req.set_expression_attribute_values(Some(values));
                }
                match req.send().await {
                    Ok(_) => {}
                    Err(e) if code_of(&e) == Some("ConditionalCheckFailedException") => return Ok(None),
                    Err(e) => return Err(aws_err("dynamodb", "UpdateItem", e)),
                }
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
