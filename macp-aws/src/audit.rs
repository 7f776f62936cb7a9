//! Reading the deployment's raw storage for a text, beneath the store's API: every item of every
//! table, every object version of the artifact bucket, every vector of every index. Full scans,
//! slow on purpose: for checking that a purge or an erasure left nothing (the conformance suite
//! does, against moto) and for an audit.

use aws_sdk_dynamodb::types::AttributeValue;
use macp_core::Result;

use crate::AwsBackend;
use crate::ddb::aws_err;

fn holds(v: &AttributeValue, needle: &str) -> bool {
    match v {
        AttributeValue::S(s) | AttributeValue::N(s) => s.contains(needle),
        AttributeValue::Ss(l) | AttributeValue::Ns(l) => l.iter().any(|s| s.contains(needle)),
        AttributeValue::B(b) => b.as_ref().windows(needle.len()).any(|w| w == needle.as_bytes()),
        AttributeValue::L(l) => l.iter().any(|x| holds(x, needle)),
        AttributeValue::M(m) => m.iter().any(|(k, x)| k.contains(needle) || holds(x, needle)),
        _ => false,
    }
}

impl AwsBackend {
    /// Every place `needle` appears: `table <name>: <key attributes>`, `s3 <key>@<version>`,
    /// `vector <index>/<key>`. Empty when it appears nowhere.
    pub async fn find_anywhere(&self, needle: &str) -> Result<Vec<String>> {
        let n = &self.names;
        let mut found = Vec::new();
        for table in [
            &n.rooms,
            &n.findings,
            &n.entities,
            &n.relationships,
            &n.agents,
            &n.artifacts,
            &n.events,
            &n.claims,
            &n.decisions,
        ] {
            let mut start = None;
            loop {
                let page = self
                    .ddb
                    .scan()
                    .table_name(table)
                    .consistent_read(true)
                    .set_exclusive_start_key(start.take())
                    .send()
                    .await
                    .map_err(|e| aws_err("dynamodb", "Scan (audit)", e))?;
                for item in page.items() {
                    if item.iter().any(|(k, v)| k.contains(needle) || holds(v, needle)) {
                        let mut keys: Vec<_> = item.keys().cloned().collect();
                        keys.sort();
                        found.push(format!("table {table}: item with {}", keys.join(",")));
                    }
                }
                match page.last_evaluated_key {
                    Some(k) if !k.is_empty() => start = Some(k),
                    _ => break,
                }
            }
        }
        let (mut key_marker, mut version_marker) = (None, None);
        loop {
            let listed = self
                .s3
                .list_object_versions()
                .bucket(&n.artifact_bucket)
                .set_key_marker(key_marker.take())
                .set_version_id_marker(version_marker.take())
                .send()
                .await
                .map_err(|e| aws_err("s3", "ListObjectVersions (audit)", e))?;
            for v in listed.versions() {
                let key = v.key().unwrap_or_default();
                let body = self
                    .s3
                    .get_object()
                    .bucket(&n.artifact_bucket)
                    .key(key)
                    .set_version_id(v.version_id().map(str::to_owned))
                    .send()
                    .await;
                let bytes = match body {
                    Ok(o) => o.body.collect().await.map(|b| b.into_bytes().to_vec()).unwrap_or_default(),
                    Err(_) => Vec::new(),
                };
                if key.contains(needle) || bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                    found.push(format!("s3 {key}@{}", v.version_id().unwrap_or("null")));
                }
            }
            if listed.is_truncated() != Some(true) {
                break;
            }
            key_marker = listed.next_key_marker().map(str::to_owned);
            version_marker = listed.next_version_id_marker().map(str::to_owned);
        }
        for index in self.vector_indexes().await? {
            let mut token = None;
            loop {
                let out = self
                    .s3v
                    .list_vectors()
                    .vector_bucket_name(&n.vector_bucket)
                    .index_name(&index)
                    .return_metadata(true)
                    .set_next_token(token.take())
                    .send()
                    .await
                    .map_err(|e| aws_err("s3vectors", "ListVectors (audit)", e))?;
                for v in out.vectors() {
                    if v.key().contains(needle) || format!("{:?}", v.metadata()).contains(needle) {
                        found.push(format!("vector {index}/{}", v.key()));
                    }
                }
                match out.next_token() {
                    Some(t) if !t.is_empty() => token = Some(t.to_owned()),
                    _ => break,
                }
            }
        }
        Ok(found)
    }
}
