//! Creates the tables, the artifact bucket and the vector bucket, idempotently, from
//! `schema.json` — the same file `tests/aws/check_tofu.py` holds the OpenTofu module to.
//! For development and tests; production infrastructure comes from `deploy/tofu`.

use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, LocalSecondaryIndex,
    Projection, ProjectionType, ScalarAttributeType, TableStatus, TimeToLiveSpecification, TimeToLiveStatus,
};
use macp_core::{Error, Result};
use serde::Deserialize;

use crate::AwsBackend;
use crate::ddb::{aws_err, code_of};

/// The resource contract shared with the OpenTofu module.
pub const SCHEMA_JSON: &str = include_str!("../schema.json");

#[derive(Deserialize)]
struct Schema {
    tables: std::collections::BTreeMap<String, Table>,
}

#[derive(Deserialize)]
struct Table {
    hash_key: String,
    range_key: Option<String>,
    attributes: std::collections::BTreeMap<String, String>,
    local_secondary_indexes: Vec<Lsi>,
    global_secondary_indexes: Vec<Gsi>,
    /// The attribute (epoch seconds) DynamoDB's TTL deletes expired items by, if any.
    #[serde(default)]
    ttl_attribute: Option<String>,
}

#[derive(Deserialize)]
struct Lsi {
    name: String,
    range_key: String,
}

#[derive(Deserialize)]
struct Gsi {
    name: String,
    hash_key: String,
    range_key: Option<String>,
}

fn bad(e: impl std::fmt::Display) -> Error {
    Error::backend("dynamodb", false, format!("invalid table definition: {e}"), None)
}

fn key(name: &str, t: KeyType) -> Result<KeySchemaElement> {
    KeySchemaElement::builder().attribute_name(name).key_type(t).build().map_err(bad)
}

fn keys(hash: &str, range: Option<&str>) -> Result<Vec<KeySchemaElement>> {
    let mut k = vec![key(hash, KeyType::Hash)?];
    if let Some(r) = range {
        k.push(key(r, KeyType::Range)?);
    }
    Ok(k)
}

fn all() -> Projection {
    Projection::builder().projection_type(ProjectionType::All).build()
}

impl AwsBackend {
    /// Turns on the table's TTL on `attr` unless it is on (or turning on) already: asking twice
    /// is an error in DynamoDB.
    async fn enable_ttl(&self, table: &str, attr: &str) -> Result<()> {
        let d = self
            .ddb
            .describe_time_to_live()
            .table_name(table)
            .send()
            .await
            .map_err(|e| aws_err("dynamodb", "DescribeTimeToLive", e))?;
        let on = d.time_to_live_description().is_some_and(|t| {
            t.attribute_name() == Some(attr)
                && matches!(
                    t.time_to_live_status(),
                    Some(TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling)
                )
        });
        if on {
            return Ok(());
        }
        let spec =
            TimeToLiveSpecification::builder().attribute_name(attr).enabled(true).build().map_err(bad)?;
        self.ddb
            .update_time_to_live()
            .table_name(table)
            .time_to_live_specification(spec)
            .send()
            .await
            .map_err(|e| aws_err("dynamodb", "UpdateTimeToLive", e))?;
        Ok(())
    }

    fn table_name(&self, logical: &str) -> &str {
        match logical {
            "rooms" => &self.names.rooms,
            "findings" => &self.names.findings,
            "entities" => &self.names.entities,
            "relationships" => &self.names.relationships,
            "agent_sessions" => &self.names.agents,
            "events" => &self.names.events,
            "claims" => &self.names.claims,
            "decisions" => &self.names.decisions,
            "protocol_sessions" => &self.names.sessions,
            _ => &self.names.artifacts,
        }
    }

    /// Creates whatever of the tables and buckets does not exist yet, and waits until the
    /// tables are active. Safe to run again.
    pub async fn setup(&self) -> Result<()> {
        let schema: Schema = serde_json::from_str(SCHEMA_JSON).map_err(bad)?;
        for (logical, t) in &schema.tables {
            let name = self.table_name(logical).to_owned();
            match self.ddb.describe_table().table_name(&name).send().await {
                Ok(_) => {}
                Err(e) if code_of(&e) == Some("ResourceNotFoundException") => {
                    let attrs = t
                        .attributes
                        .iter()
                        .map(|(n, ty)| {
                            let ty = if ty == "N" { ScalarAttributeType::N } else { ScalarAttributeType::S };
                            AttributeDefinition::builder()
                                .attribute_name(n)
                                .attribute_type(ty)
                                .build()
                                .map_err(bad)
                        })
                        .collect::<Result<Vec<_>>>()?;
                    let mut req = self
                        .ddb
                        .create_table()
                        .table_name(&name)
                        .billing_mode(BillingMode::PayPerRequest)
                        .set_attribute_definitions(Some(attrs))
                        .set_key_schema(Some(keys(&t.hash_key, t.range_key.as_deref())?));
                    for l in &t.local_secondary_indexes {
                        req = req.local_secondary_indexes(
                            LocalSecondaryIndex::builder()
                                .index_name(&l.name)
                                .set_key_schema(Some(keys(&t.hash_key, Some(&l.range_key))?))
                                .projection(all())
                                .build()
                                .map_err(bad)?,
                        );
                    }
                    for g in &t.global_secondary_indexes {
                        req = req.global_secondary_indexes(
                            GlobalSecondaryIndex::builder()
                                .index_name(&g.name)
                                .set_key_schema(Some(keys(&g.hash_key, g.range_key.as_deref())?))
                                .projection(all())
                                .build()
                                .map_err(bad)?,
                        );
                    }
                    match req.send().await {
                        Ok(_) => {}
                        Err(e) if code_of(&e) == Some("ResourceInUseException") => {}
                        Err(e) => return Err(aws_err("dynamodb", "CreateTable", e)),
                    }
                }
                Err(e) => return Err(aws_err("dynamodb", "DescribeTable", e)),
            }
            for _ in 0..120 {
                let d = self
                    .ddb
                    .describe_table()
                    .table_name(&name)
                    .send()
                    .await
                    .map_err(|e| aws_err("dynamodb", "DescribeTable", e))?;
                if d.table().and_then(|t| t.table_status()) == Some(&TableStatus::Active) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            if let Some(attr) = &t.ttl_attribute {
                self.enable_ttl(&name, attr).await?;
            }
        }
        let mut bucket = self.s3.create_bucket().bucket(&self.names.artifact_bucket);
        if let Some(region) = self.s3.config().region().map(|r| r.as_ref().to_owned())
            && region != "us-east-1"
        {
            bucket = bucket.create_bucket_configuration(
                aws_sdk_s3::types::CreateBucketConfiguration::builder()
                    .location_constraint(aws_sdk_s3::types::BucketLocationConstraint::from(region.as_str()))
                    .build(),
            );
        }
        match bucket.send().await {
            Ok(_) => {}
            Err(e) if matches!(code_of(&e), Some("BucketAlreadyOwnedByYou" | "BucketAlreadyExists")) => {}
            Err(e) => return Err(aws_err("s3", "CreateBucket", e)),
        }
        match self.s3v.create_vector_bucket().vector_bucket_name(&self.names.vector_bucket).send().await {
            Ok(_) => Ok(()),
            Err(e) if code_of(&e) == Some("ConflictException") => Ok(()),
            Err(e) => Err(aws_err("s3vectors", "CreateVectorBucket", e)),
        }
    }
}
