//! [`VectorIndex`] on S3 Vectors: one vector bucket, one index per embedding model.
//!
//! Each finding is one vector keyed by its finding id, with filterable metadata `room_id`,
//! `tags` and `agent_id` (small: S3 Vectors caps filterable metadata at 2 KB, and DynamoDB holds
//! everything else). Queries always filter on `room_id`. The model an index serves is recorded
//! in the rooms table (`CONFIG#vector-model`), written conditionally so two instances cannot
//! bind different models.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_s3vectors::types::{DataType, DistanceMetric, PutInputVector, VectorData};
use aws_smithy_types::Document;
use macp_core::search::{
    IndexModel, VectorFilter, VectorHit, VectorIndex, VectorRecord, dot, model_mismatch,
};
use macp_core::{Error, FindingId, Result, RoomId};
use sha2::{Digest, Sha256};

use crate::AwsBackend;
use crate::ddb::{aws_err, code_of, get_n, get_s, n, s};

const CONFIG_KEY: &str = "CONFIG#vector-model";
/// S3 Vectors returns at most this many results per query.
const MAX_TOP_K: usize = 100;
/// Vectors per PutVectors call.
const PUT_BATCH: usize = 500;
/// Keys per DeleteVectors call (the API refuses more).
pub(crate) const DELETE_BATCH: usize = 500;

/// The index serving `m`: stable, valid as an S3 Vectors index name.
pub(crate) fn index_name(m: &IndexModel) -> String {
    let h = Sha256::digest(m.model_id.as_bytes());
    let short: String = h.iter().take(6).map(|b| format!("{b:02x}")).collect();
    format!("macp-{short}-{}", m.dimension)
}

fn text(d: &Document) -> Option<&str> {
    match d {
        Document::String(s) => Some(s),
        _ => None,
    }
}

impl AwsBackend {
    /// The names of every index of the vector bucket (one per embedding model used).
    pub(crate) async fn vector_indexes(&self) -> Result<Vec<String>> {
        let mut names = Vec::new();
        let mut token = None;
        loop {
            let out = self
                .s3v
                .list_indexes()
                .vector_bucket_name(&self.names.vector_bucket)
                .set_next_token(token.take())
                .send()
                .await
                .map_err(|e| aws_err("s3vectors", "ListIndexes", e))?;
            names.extend(out.indexes().iter().map(|i| i.index_name().to_owned()));
            match out.next_token() {
                Some(t) if !t.is_empty() => token = Some(t.to_owned()),
                _ => return Ok(names),
            }
        }
    }

    async fn bound(&self) -> Result<IndexModel> {
        VectorIndex::model(self).await?.ok_or_else(|| {
            Error::backend("s3vectors", false, "the vector index is not bound to a model yet", None)
        })
    }

    async fn ensure_index(&self, m: &IndexModel) -> Result<()> {
        let r = self
            .s3v
            .create_index()
            .vector_bucket_name(&self.names.vector_bucket)
            .index_name(index_name(m))
            .data_type(DataType::Float32)
            .dimension(m.dimension as i32)
            .distance_metric(DistanceMetric::Cosine)
            .send()
            .await;
        match r {
            Ok(_) => Ok(()),
            Err(e) if code_of(&e) == Some("ConflictException") => Ok(()),
            Err(e) => Err(aws_err("s3vectors", "CreateIndex", e)),
        }
    }

    fn record_model(
        &self,
        m: &IndexModel,
        only_if_absent: bool,
    ) -> aws_sdk_dynamodb::operation::put_item::builders::PutItemFluentBuilder {
        let mut p = self
            .ddb
            .put_item()
            .table_name(&self.names.rooms)
            .item("room_id", s(CONFIG_KEY))
            .item("model_id", s(m.model_id.clone()))
            .item("dimension", n(m.dimension))
            .item("index_name", s(index_name(m)));
        if only_if_absent {
            p = p.condition_expression("attribute_not_exists(room_id)");
        }
        p
    }
}

#[async_trait]
impl VectorIndex for AwsBackend {
    fn name(&self) -> &'static str {
        "s3vectors"
    }

    async fn model(&self) -> Result<Option<IndexModel>> {
        let out = self
            .ddb
            .get_item()
            .table_name(&self.names.rooms)
            .key("room_id", s(CONFIG_KEY))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| aws_err("dynamodb", "GetItem", e))?;
        out.item
            .map(|i| {
                Ok(IndexModel {
                    model_id: get_s(&i, "model_id")?.to_owned(),
                    dimension: get_n(&i, "dimension")? as usize,
                })
            })
            .transpose()
    }

    async fn bind(&self, model: &IndexModel) -> Result<()> {
        match self.record_model(model, true).send().await {
            Ok(_) => self.ensure_index(model).await,
            Err(e) if code_of(&e) == Some("ConditionalCheckFailedException") => match self.model().await? {
                Some(m) if &m == model => self.ensure_index(model).await,
                Some(m) => Err(model_mismatch(&m, model)),
                None => Err(Error::backend("s3vectors", true, "the model binding vanished; retry", None)),
            },
            Err(e) => Err(aws_err("dynamodb", "PutItem", e)),
        }
    }

    async fn reset(&self, model: &IndexModel) -> Result<()> {
        if let Some(old) = self.model().await? {
            let r = self
                .s3v
                .delete_index()
                .vector_bucket_name(&self.names.vector_bucket)
                .index_name(index_name(&old))
                .send()
                .await;
            if let Err(e) = r
                && code_of(&e) != Some("NotFoundException")
            {
                return Err(aws_err("s3vectors", "DeleteIndex", e));
            }
        }
        self.ensure_index(model).await?;
        self.record_model(model, false).send().await.map_err(|e| aws_err("dynamodb", "PutItem", e))?;
        Ok(())
    }

    async fn upsert(&self, records: &[VectorRecord]) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let m = self.bound().await?;
        if let Some(bad) = records.iter().find(|r| r.vector.len() != m.dimension) {
            return Err(Error::invalid(
                "vector",
                format!("vector of length {} for an index of dimension {}", bad.vector.len(), m.dimension),
            ));
        }
        for chunk in records.chunks(PUT_BATCH) {
            let vectors = chunk
                .iter()
                .map(|r| {
                    let meta = Document::Object(HashMap::from([
                        ("room_id".to_owned(), Document::String(r.room_id.to_string())),
                        ("agent_id".to_owned(), Document::String(r.agent_id.to_string())),
                        (
                            "tags".to_owned(),
                            Document::Array(r.tags.iter().cloned().map(Document::String).collect()),
                        ),
                    ]));
                    PutInputVector::builder()
                        .key(r.finding_id.to_string())
                        .data(VectorData::Float32(r.vector.clone()))
                        .metadata(meta)
                        .build()
                        .map_err(|e| Error::backend("s3vectors", false, e.to_string(), None))
                })
                .collect::<Result<Vec<_>>>()?;
            self.s3v
                .put_vectors()
                .vector_bucket_name(&self.names.vector_bucket)
                .index_name(index_name(&m))
                .set_vectors(Some(vectors))
                .send()
                .await
                .map_err(|e| aws_err("s3vectors", "PutVectors", e))?;
        }
        Ok(())
    }

    async fn delete(&self, _room_id: RoomId, ids: &[FindingId]) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let m = self.bound().await?;
        // Any number of ids, as the trait's contract says: the API takes a batch at a time.
        for chunk in ids.chunks(DELETE_BATCH) {
            self.s3v
                .delete_vectors()
                .vector_bucket_name(&self.names.vector_bucket)
                .index_name(index_name(&m))
                .set_keys(Some(chunk.iter().map(ToString::to_string).collect()))
                .send()
                .await
                .map_err(|e| aws_err("s3vectors", "DeleteVectors", e))?;
        }
        Ok(())
    }

    async fn query(
        &self,
        room_id: RoomId,
        vector: &[f32],
        k: usize,
        filter: &VectorFilter,
    ) -> Result<Vec<VectorHit>> {
        let m = self.bound().await?;
        let mut all = vec![Document::Object(HashMap::from([(
            "room_id".to_owned(),
            Document::Object(HashMap::from([("$eq".to_owned(), Document::String(room_id.to_string()))])),
        )]))];
        if !filter.tags_any.is_empty() {
            all.push(Document::Object(HashMap::from([(
                "tags".to_owned(),
                Document::Object(HashMap::from([(
                    "$in".to_owned(),
                    Document::Array(filter.tags_any.iter().cloned().map(Document::String).collect()),
                )])),
            )])));
        }
        if let Some(a) = &filter.agent_id {
            all.push(Document::Object(HashMap::from([(
                "agent_id".to_owned(),
                Document::Object(HashMap::from([("$eq".to_owned(), Document::String(a.to_string()))])),
            )])));
        }
        let out = self
            .s3v
            .query_vectors()
            .vector_bucket_name(&self.names.vector_bucket)
            .index_name(index_name(&m))
            .top_k(k.clamp(1, MAX_TOP_K) as i32)
            .query_vector(VectorData::Float32(vector.to_vec()))
            .filter(Document::Object(HashMap::from([("$and".to_owned(), Document::Array(all))])))
            .return_distance(true)
            .send()
            .await
            .map_err(|e| aws_err("s3vectors", "QueryVectors", e))?;
        let mut hits = out
            .vectors()
            .iter()
            .map(|v| Ok(VectorHit { finding_id: v.key().parse()?, score: 1.0 - v.distance().unwrap_or(1.0) }))
            .collect::<Result<Vec<_>>>()?;
        hits.sort_by(VectorHit::rank);
        Ok(hits)
    }

    async fn scores(&self, room_id: RoomId, vector: &[f32], ids: &[FindingId]) -> Result<Vec<VectorHit>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let m = self.bound().await?;
        let mut hits = Vec::new();
        for chunk in ids.chunks(100) {
            let out = self
                .s3v
                .get_vectors()
                .vector_bucket_name(&self.names.vector_bucket)
                .index_name(index_name(&m))
                .set_keys(Some(chunk.iter().map(ToString::to_string).collect()))
                .return_data(true)
                .return_metadata(true)
                .send()
                .await
                .map_err(|e| aws_err("s3vectors", "GetVectors", e))?;
            for v in out.vectors() {
                let room = v.metadata().and_then(|md| match md {
                    Document::Object(o) => o.get("room_id").and_then(text).map(str::to_owned),
                    _ => None,
                });
                if room.as_deref() != Some(room_id.to_string().as_str()) {
                    continue;
                }
                if let Some(Ok(data)) = v.data().map(VectorData::as_float32) {
                    hits.push(VectorHit { finding_id: v.key().parse()?, score: dot(data, vector) });
                }
            }
        }
        Ok(hits)
    }

    async fn count(&self, room_id: RoomId) -> Result<u64> {
        let m = self.bound().await?;
        let room = room_id.to_string();
        let mut total = 0;
        let mut token = None;
        loop {
            let out = self
                .s3v
                .list_vectors()
                .vector_bucket_name(&self.names.vector_bucket)
                .index_name(index_name(&m))
                .return_metadata(true)
                .set_next_token(token.take())
                .send()
                .await
                .map_err(|e| aws_err("s3vectors", "ListVectors", e))?;
            total += out
                .vectors()
                .iter()
                .filter(|v| match v.metadata() {
                    Some(Document::Object(o)) => o.get("room_id").and_then(text) == Some(room.as_str()),
                    _ => false,
                })
                .count() as u64;
            match out.next_token() {
                Some(t) if !t.is_empty() => token = Some(t.to_owned()),
                _ => return Ok(total),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `deploy/tofu` creates the index under the name this code looks for; both are held to the
    /// names listed in schema.json (tests/aws/check_tofu.py checks the module's side).
    #[test]
    fn index_names_match_the_schema_the_tofu_module_is_checked_against() {
        let schema: serde_json::Value = serde_json::from_str(crate::setup::SCHEMA_JSON).unwrap();
        let names = schema["vectors"]["index_names"].as_object().expect("vectors.index_names in schema.json");
        assert_eq!(names.len(), 3);
        for (model_id, want) in names {
            let dimension = model_id.rsplit('@').next().unwrap().parse().unwrap();
            let m = IndexModel { model_id: model_id.clone(), dimension };
            assert_eq!(index_name(&m), want.as_str().unwrap(), "{model_id}");
        }
    }
}
