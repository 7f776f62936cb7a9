//! Artifact metadata.

use std::collections::HashMap;

use async_trait::async_trait;
use macp_core::model::{Artifact, Erasure, Event};
use macp_core::store::{ArtifactQuery, ArtifactStore, IdempotencyKey, Write};
use macp_core::{ArtifactId, Error, Result, RoomId};

use crate::AwsBackend;
use crate::ddb::*;
use crate::ddb::{doc, json, s};
use crate::store::events::lost_head;

// ---------------------------------------------------------------------------------------------

/// An artifact's two items: its record, and `KEY#<key>` naming it as the holder of its storage
/// key (no two artifacts of a room share one; an erased artifact keeps its key).
pub(crate) fn artifact_items(a: &Artifact) -> [Item; 2] {
    let room = a.room_id.to_string();
    [
        HashMap::from([
            ("room_id".to_owned(), s(room.clone())),
            ("artifact_id".to_owned(), s(a.artifact_id.to_string())),
            ("doc".to_owned(), json(a)),
        ]),
        HashMap::from([
            ("room_id".to_owned(), s(room)),
            ("artifact_id".to_owned(), s(format!("KEY#{}", a.key))),
            ("holder".to_owned(), s(a.artifact_id.to_string())),
        ]),
    ]
}

impl AwsBackend {
    /// One attempt at [`ArtifactStore::insert_artifact`]; `None` when another write took the
    /// room's feed head first (read it again and retry).
    async fn insert_artifact_once(
        &self,
        a: &Artifact,
        idempotency: Option<&IdempotencyKey>,
        event: &Event,
    ) -> Result<Option<Write<Artifact>>> {
        let room = a.room_id;
        let head = self.event_head(room).await?;
        let [item, key_item] = artifact_items(a);
        let mut items = vec![
            put(&self.names.artifacts, item, Some("attribute_not_exists(artifact_id)")),
            put(&self.names.artifacts, key_item, Some("attribute_not_exists(artifact_id)")),
        ];
        if let Some(c) = idempotency {
            items.push(self.key_put(room, c));
        }
        let head_at = items.len();
        items.extend(self.event_items(room, &head, event)?);
        match self.transact(items, "TransactWriteItems (artifact)").await? {
            Tx::Done => Ok(Some(Write::Applied(a.clone()))),
            Tx::Cancelled(reasons) => {
                let failed = |i: usize| check_failed(&reasons, i);
                if idempotency.is_some() && failed(2) {
                    return Ok(Some(Write::Replayed(self.require_key(room, idempotency).await?)));
                }
                if failed(1) {
                    return Err(Error::AlreadyExists { what: "artifact with key", id: a.key.clone() });
                }
                if lost_head(&reasons, head_at) {
                    return Ok(None);
                }
                Err(Error::backend("dynamodb", true, "artifact registration conflicted; retry", None))
            }
        }
    }
}

#[async_trait]
impl ArtifactStore for AwsBackend {
    async fn insert_artifact(
        &self,
        a: &Artifact,
        idempotency: Option<&IdempotencyKey>,
        event: &Event,
    ) -> Result<Write<Artifact>> {
        let room = a.room_id;
        for attempt in 0..ATTEMPTS {
            if let Some(rec) = self.replayed(room, idempotency).await? {
                return Ok(Write::Replayed(rec));
            }
            match self.insert_artifact_once(a, idempotency, event).await? {
                Some(w) => return Ok(w),
                None => backoff(attempt).await,
            }
        }
        Err(gave_up("register artifact"))
    }

    async fn erase_artifact(
        &self,
        room_id: RoomId,
        artifact_id: ArtifactId,
        erasure: &Erasure,
        event: &Event,
    ) -> Result<Option<Artifact>> {
        let key = key2("room_id", room_id.to_string(), "artifact_id", artifact_id.to_string());
        // The events naming it, read once: events about an item are all written after it,
        // and each attempt below only needs the feed head again.
        let notice = erasure.notice();
        let id = artifact_id.to_string();
        let renotice =
            self.renotice_items(room_id, &id, move |e| e.artifact_id == Some(artifact_id), &notice).await?;
        for attempt in 0..ATTEMPTS {
            let Some(item) = self
                .get_item(&self.names.artifacts, key.clone(), "GetItem")
                .await?
                .filter(|i| i.contains_key("doc"))
            else {
                return Ok(None);
            };
            let mut a: Artifact = doc(&item)?;
            if !a.erase(erasure) {
                return Ok(Some(a));
            }
            let head = self.event_head(room_id).await?;
            let mut items = renotice.clone();
            items.push(self.erased_item(
                &self.names.artifacts,
                key.clone(),
                &a,
                get_s(&item, "doc")?,
                "SET #d = :d",
                &[],
            )?);
            items.extend(self.event_items(room_id, &head, event)?);
            match self.transact(items, "TransactWriteItems (erase artifact)").await? {
                Tx::Done => return Ok(Some(a)),
                Tx::Cancelled(_) => backoff(attempt).await,
            }
        }
        Err(gave_up("erase artifact"))
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
