//! Protocol sessions: one item per session in the `protocol_sessions` table, keyed by the
//! digest of the session's id; the rooms it joined in a map attribute, so that joins of
//! different rooms from different servers each update their own entry. `expires_epoch`
//! (`keep_until` in seconds) is the table's TTL attribute: DynamoDB deletes items after it
//! itself, usually within a few days, and the service never trusts an ended session meanwhile.

use std::collections::{BTreeMap, HashMap};

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use macp_core::store::{SessionRecord, SessionStore};
use macp_core::{AgentId, Result, RoomId, Timestamp};

use crate::AwsBackend;
use crate::ddb::*;

fn key_of(key: &str) -> HashMap<String, AttributeValue> {
    HashMap::from([("session_key".to_owned(), s(key))])
}

/// `expires_at` and `keep_until` in milliseconds, and `expires_epoch` (the TTL attribute) as
/// `keep_until` in whole seconds, rounded up so that DynamoDB never deletes a record early.
fn expiry(expires_at: Timestamp, keep_until: Timestamp) -> [(String, AttributeValue); 3] {
    [
        ("expires_at".to_owned(), n(expires_at.as_millis())),
        ("keep_until".to_owned(), n(keep_until.as_millis())),
        ("expires_epoch".to_owned(), n(keep_until.as_millis().div_euclid(1000) + 1)),
    ]
}

fn record(item: &Item) -> Result<SessionRecord> {
    let mut joined = BTreeMap::new();
    if let Some(AttributeValue::M(m)) = item.get("joined") {
        for (room, agent) in m {
            if let AttributeValue::S(agent) = agent {
                joined.insert(room.parse::<RoomId>()?, agent.parse::<AgentId>()?);
            }
        }
    }
    Ok(SessionRecord {
        key: get_s(item, "session_key")?.to_owned(),
        opening: get_s(item, "opening")?.to_owned(),
        joined,
        expires_at: Timestamp::from_millis(get_n(item, "expires_at")?),
        keep_until: Timestamp::from_millis(get_n(item, "keep_until")?),
        ended: matches!(item.get("ended"), Some(AttributeValue::Bool(true))),
    })
}

#[async_trait]
impl SessionStore for AwsBackend {
    async fn put_session(&self, r: &SessionRecord) -> Result<bool> {
        let joined = r.joined.iter().map(|(room, agent)| (room.to_string(), s(agent.as_str()))).collect();
        let mut item = HashMap::from([
            ("session_key".to_owned(), s(&r.key)),
            ("opening".to_owned(), s(&r.opening)),
            ("joined".to_owned(), AttributeValue::M(joined)),
            ("ended".to_owned(), AttributeValue::Bool(r.ended)),
        ]);
        item.extend(expiry(r.expires_at, r.keep_until));
        let put = self
            .ddb
            .put_item()
            .table_name(&self.names.sessions)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(session_key)")
            .send()
            .await;
        match put {
            Ok(_) => Ok(true),
            Err(e) if code_of(&e) == Some("ConditionalCheckFailedException") => Ok(false),
            Err(e) => Err(aws_err("dynamodb", "PutItem (session)", e)),
        }
    }

    async fn get_session(&self, key: &str) -> Result<Option<SessionRecord>> {
        self.get_item(&self.names.sessions, key_of(key), "GetItem (session)")
            .await?
            .map(|i| record(&i))
            .transpose()
    }

    async fn extend_session(
        &self,
        key: &str,
        join: Option<(RoomId, &AgentId)>,
        now: Timestamp,
        expires_at: Timestamp,
        keep_until: Timestamp,
    ) -> Result<bool> {
        let mut values: HashMap<String, AttributeValue> =
            expiry(expires_at, keep_until).into_iter().map(|(k, v)| (format!(":{k}"), v)).collect();
        values.insert(":now".into(), n(now.as_millis()));
        values.insert(":no".into(), AttributeValue::Bool(false));
        let mut names = HashMap::new();
        let mut expr =
            "SET expires_at = :expires_at, keep_until = :keep_until, expires_epoch = :expires_epoch"
                .to_owned();
        if let Some((room, agent)) = join {
            // One map entry: a join of another room from another server is left alone.
            expr.push_str(", joined.#room = :agent");
            names.insert("#room".to_owned(), room.to_string());
            values.insert(":agent".into(), s(agent.as_str()));
        }
        let r = self
            .ddb
            .update_item()
            .table_name(&self.names.sessions)
            .set_key(Some(key_of(key)))
            .update_expression(expr)
            // Live only: a session ended (or expired) since it was read stays so.
            .condition_expression("attribute_exists(session_key) AND ended = :no AND expires_at > :now")
            .set_expression_attribute_names((!names.is_empty()).then_some(names))
            .set_expression_attribute_values(Some(values))
            .send()
            .await;
        match r {
            Ok(_) => Ok(true),
            Err(e) if code_of(&e) == Some("ConditionalCheckFailedException") => Ok(false),
            Err(e) => Err(aws_err("dynamodb", "UpdateItem (session)", e)),
        }
    }

    async fn end_session(&self, key: &str, now: Timestamp, keep_until: Timestamp) -> Result<()> {
        let mut values: HashMap<String, AttributeValue> =
            expiry(now, keep_until).into_iter().map(|(k, v)| (format!(":{k}"), v)).collect();
        values.insert(":yes".into(), AttributeValue::Bool(true));
        let r = self
            .ddb
            .update_item()
            .table_name(&self.names.sessions)
            .set_key(Some(key_of(key)))
            .update_expression(
                "SET ended = :yes, expires_at = :expires_at, keep_until = :keep_until, expires_epoch = :expires_epoch",
            )
            .condition_expression("attribute_exists(session_key)")
            .set_expression_attribute_values(Some(values))
            .send()
            .await;
        match r {
            Ok(_) => Ok(()),
            Err(e) if code_of(&e) == Some("ConditionalCheckFailedException") => Ok(()),
            Err(e) => Err(aws_err("dynamodb", "UpdateItem (end session)", e)),
        }
    }

    async fn purge_sessions(&self, _now: Timestamp, _limit: usize) -> Result<usize> {
        // The table's TTL deletes them: scanning the table from every server would cost more
        // than the items do, and an expired one is never trusted meanwhile.
        Ok(0)
    }
}
