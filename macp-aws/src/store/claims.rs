//! Claims on work: one item per `(room_id, key)` in the `claims` table, written with a
//! condition that lets it through only when no other agent holds the work, in the same
//! transaction as its event.

use std::collections::HashMap;

use async_trait::async_trait;
use macp_core::model::{Claim, Event};
use macp_core::store::{ClaimOutcome, ClaimStore};
use macp_core::{AgentId, Error, Result, RoomId, Timestamp};

use crate::AwsBackend;
use crate::ddb::*;

/// A claim's item, held or released.
pub(crate) fn claim_item(c: &Claim) -> Item {
    let mut m = HashMap::from([
        ("room_id".to_owned(), s(c.room_id.to_string())),
        ("key".to_owned(), s(c.key.clone())),
        ("agent_id".to_owned(), s(c.agent_id.as_str())),
        ("expires_at".to_owned(), n(c.expires_at.as_millis())),
        ("claimed_at".to_owned(), n(c.claimed_at.as_millis())),
        ("doc".to_owned(), json(c)),
    ]);
    if let Some(r) = c.released_at {
        m.insert("released_at".into(), n(r.as_millis()));
    }
    m
}

impl AwsBackend {
    async fn claim(&self, room: RoomId, key: &str) -> Result<Option<Claim>> {
        self.get_item(&self.names.claims, key2("room_id", room.to_string(), "key", key), "GetItem (claim)")
            .await?
            .map(|i| doc(&i))
            .transpose()
    }

    /// Puts `c` on `condition` (with `values`) and `event` in one transaction: `Ok(true)` done,
    /// `Ok(false)` the condition failed, `Err` for anything else; a lost feed head is retried.
    async fn put_claim_if(
        &self,
        c: &Claim,
        condition: &str,
        values: HashMap<String, aws_sdk_dynamodb::types::AttributeValue>,
        event: &Event,
    ) -> Result<bool> {
        for attempt in 0..ATTEMPTS {
            let head = self.event_head(c.room_id).await?;
            let put = aws_sdk_dynamodb::types::Put::builder()
                .table_name(&self.names.claims)
                .set_item(Some(claim_item(c)))
                .condition_expression(condition)
                .set_expression_attribute_values(Some(values.clone()))
                .build()
                .map_err(|e| Error::backend("dynamodb", false, e.to_string(), None))?;
            let mut items = vec![aws_sdk_dynamodb::types::TransactWriteItem::builder().put(put).build()];
            items.extend(self.event_items(c.room_id, &head, event)?);
            match self.transact(items, "TransactWriteItems (claim)").await? {
                Tx::Done => return Ok(true),
                Tx::Cancelled(reasons) if check_failed(&reasons, 0) => return Ok(false),
                // Another write took the feed head (or the transaction conflicted): read again.
                Tx::Cancelled(_) => backoff(attempt).await,
            }
        }
        Err(gave_up("claim"))
    }
}

#[async_trait]
impl ClaimStore for AwsBackend {
    async fn put_claim(&self, claim: &Claim, now: Timestamp, event: &Event) -> Result<ClaimOutcome> {
        for attempt in 0..ATTEMPTS {
            let values = HashMap::from([
                (":me".to_owned(), s(claim.agent_id.as_str())),
                (":now".to_owned(), n(now.as_millis())),
            ]);
            let free = "attribute_not_exists(room_id) OR agent_id = :me OR expires_at <= :now OR attribute_exists(released_at)";
            if self.put_claim_if(claim, free, values, event).await? {
                return Ok(ClaimOutcome::Claimed(claim.clone()));
            }
            match self.claim(claim.room_id, &claim.key).await? {
                Some(held) if held.blocks(&claim.agent_id, now) => {
                    return Ok(ClaimOutcome::Held(held));
                }
                // Released or lapsed between the write and this read: try again.
                _ => backoff(attempt).await,
            }
        }
        Err(gave_up("claim"))
    }

    async fn release_claim(
        &self,
        room_id: RoomId,
        key: &str,
        agent_id: &AgentId,
        now: Timestamp,
        event: &Event,
    ) -> Result<Option<Claim>> {
        let Some(mut c) = self.claim(room_id, key).await? else { return Ok(None) };
        if !c.is_held_by(agent_id, now) {
            return Ok(None);
        }
        let values = HashMap::from([
            (":me".to_owned(), s(agent_id.as_str())),
            (":exp".to_owned(), n(c.expires_at.as_millis())),
        ]);
        c.released_at = Some(now);
        let held = "agent_id = :me AND expires_at = :exp AND attribute_not_exists(released_at)";
        Ok(self.put_claim_if(&c, held, values, event).await?.then_some(c))
    }

    async fn list_claims(&self, room_id: RoomId, now: Timestamp) -> Result<Vec<Claim>> {
        let items = self
            .query_all(
                &self.names.claims,
                None,
                "room_id = :r",
                Some("attribute_not_exists(released_at) AND expires_at > :now"),
                HashMap::new(),
                HashMap::from([
                    (":r".to_owned(), s(room_id.to_string())),
                    (":now".to_owned(), n(now.as_millis())),
                ]),
                true,
                true,
                |_| true,
                usize::MAX,
            )
            .await?;
        let mut out = items.iter().map(doc::<Claim>).collect::<Result<Vec<_>>>()?;
        out.sort_by(|a, b| (a.claimed_at, &a.key).cmp(&(b.claimed_at, &b.key)));
        Ok(out)
    }
}
