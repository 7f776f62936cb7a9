//! [`BlobStore`] on S3: a private bucket, keys under each room's prefix, presigned PUT (content
//! type and length signed) and GET, verification with HeadObject.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_s3::presigning::PresigningConfig;
use macp_core::blob::{BlobStore, ObjectMeta, PresignedRequest};
use macp_core::{Error, Result, Timestamp};

use crate::AwsBackend;
use crate::ddb::{aws_err, code_of};

fn ttl(expires_at: Timestamp) -> Result<PresigningConfig> {
    let ms = (expires_at.as_millis() - Timestamp::now().as_millis()).max(1_000) as u64;
    PresigningConfig::expires_in(Duration::from_millis(ms))
        .map_err(|e| Error::invalid("expires_at", format!("cannot presign for that long: {e}")))
}

/// Whether S3 answered with one of `codes`, or with `status` where it sends no code (a HEAD's
/// 404 has no body).
fn answered<E: aws_sdk_s3::error::ProvideErrorMetadata>(
    e: &aws_sdk_s3::error::SdkError<E, aws_smithy_runtime_api::client::orchestrator::HttpResponse>,
    codes: &[&str],
    status: u16,
) -> bool {
    code_of(e).is_some_and(|c| codes.contains(&c))
        || e.raw_response().is_some_and(|r| r.status().as_u16() == status)
}

#[async_trait]
impl BlobStore for AwsBackend {
    fn name(&self) -> &'static str {
        "s3"
    }

    fn enforces_presigned_bounds(&self) -> bool {
        // S3 checks the signature; an emulator at a custom endpoint (moto) does not.
        !self.emulated
    }

    async fn presign_put(
        &self,
        key: &str,
        content_type: &str,
        size: u64,
        expires_at: Timestamp,
    ) -> Result<PresignedRequest> {
        let req = self
            .s3
            .put_object()
            .bucket(&self.names.artifact_bucket)
            .key(key)
            .content_type(content_type)
            .content_length(size as i64)
            // Signed, so the uploader must send it: S3 then refuses (412) a second PUT to a key
            // that exists, and a registered artifact cannot be replaced through its URL.
            .if_none_match("*")
            .presigned(ttl(expires_at)?)
            .await
            .map_err(|e| aws_err("s3", "PutObject (presign)", e))?;
        // Every signed header must be sent as signed; type and length in their usual spelling.
        let mut headers: BTreeMap<String, String> = req
            .headers()
            .filter(|(k, _)| {
                !k.eq_ignore_ascii_case("content-type") && !k.eq_ignore_ascii_case("content-length")
            })
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        headers.insert("Content-Type".into(), content_type.to_owned());
        headers.insert("Content-Length".into(), size.to_string());
        Ok(PresignedRequest { url: req.uri().to_owned(), method: "PUT".into(), headers, expires_at })
    }

    async fn presign_get(&self, key: &str, expires_at: Timestamp) -> Result<PresignedRequest> {
        let req = self
            .s3
            .get_object()
            .bucket(&self.names.artifact_bucket)
            .key(key)
            .presigned(ttl(expires_at)?)
            .await
            .map_err(|e| aws_err("s3", "GetObject (presign)", e))?;
        Ok(PresignedRequest {
            url: req.uri().to_owned(),
            method: "GET".into(),
            headers: BTreeMap::new(),
            expires_at,
        })
    }

    async fn head(&self, key: &str) -> Result<Option<ObjectMeta>> {
        match self.s3.head_object().bucket(&self.names.artifact_bucket).key(key).send().await {
            Ok(o) => Ok(Some(ObjectMeta {
                size: o.content_length().unwrap_or(0).max(0) as u64,
                content_type: o.content_type().unwrap_or_default().to_owned(),
            })),
            Err(e) if answered(&e, &["NotFound", "NoSuchKey"], 404) => Ok(None),
            Err(e) => Err(aws_err("s3", "HeadObject", e)),
        }
    }

    async fn delete(&self, key: &str) -> Result<()> {
        self.delete_versions(key, true).await.map(|_| ())
    }

    async fn delete_prefix(&self, prefix: &str) -> Result<u64> {
        self.delete_versions(prefix, false).await
    }

    async fn read_object(&self, key: &str) -> Result<Option<(ObjectMeta, Vec<u8>)>> {
        let got = match self.s3.get_object().bucket(&self.names.artifact_bucket).key(key).send().await {
            Ok(o) => o,
            Err(e) if answered(&e, &["NotFound", "NoSuchKey"], 404) => {
                return Ok(None);
            }
            Err(e) => return Err(aws_err("s3", "GetObject", e)),
        };
        let content_type = got.content_type().unwrap_or_default().to_owned();
        let bytes = got
            .body
            .collect()
            .await
            .map_err(|e| Error::backend("s3", true, format!("GetObject body: {e}"), None))?
            .to_vec();
        Ok(Some((ObjectMeta { size: bytes.len() as u64, content_type }, bytes)))
    }

    async fn write_object(&self, key: &str, content_type: &str, bytes: Vec<u8>) -> Result<()> {
        let put = self
            .s3
            .put_object()
            .bucket(&self.names.artifact_bucket)
            .key(key)
            .content_type(content_type)
            // As for uploads: never over an object that exists.
            .if_none_match("*")
            .body(bytes.into())
            .send()
            .await;
        match put {
            Ok(_) => Ok(()),
            Err(e) if answered(&e, &["PreconditionFailed"], 412) => {
                Err(Error::AlreadyExists { what: "object", id: key.to_owned() })
            }
            Err(e) => Err(aws_err("s3", "PutObject", e)),
        }
    }
}

impl AwsBackend {
    /// Deletes every version (and delete marker) of the objects under `prefix` (only the one
    /// named `prefix` when `exact`): on a versioned bucket a plain delete would leave the bytes
    /// behind a delete marker. Returns how many objects had a version.
    async fn delete_versions(&self, prefix: &str, exact: bool) -> Result<u64> {
        let bucket = &self.names.artifact_bucket;
        let mut objects = std::collections::BTreeSet::new();
        let (mut key_marker, mut version_marker) = (None, None);
        loop {
            let listed = self
                .s3
                .list_object_versions()
                .bucket(bucket)
                .prefix(prefix)
                .set_key_marker(key_marker.take())
                .set_version_id_marker(version_marker.take())
                .send()
                .await
                .map_err(|e| aws_err("s3", "ListObjectVersions", e))?;
            let versions = listed.versions().iter().map(|v| (v.key(), v.version_id()));
            let markers = listed.delete_markers().iter().map(|m| (m.key(), m.version_id()));
            for (key, version) in versions.chain(markers) {
                let Some(key) = key.filter(|k| !exact || *k == prefix) else { continue };
                self.s3
                    .delete_object()
                    .bucket(bucket)
                    .key(key)
                    .set_version_id(version.map(str::to_owned))
                    .send()
                    .await
                    .map_err(|e| aws_err("s3", "DeleteObject", e))?;
                objects.insert(key.to_owned());
            }
            if listed.is_truncated() != Some(true) {
                break;
            }
            key_marker = listed.next_key_marker().map(str::to_owned);
            version_marker = listed.next_version_id_marker().map(str::to_owned);
        }
        // An unversioned bucket, or an emulator that lists no versions: the current objects.
        let mut token = None;
        loop {
            let listed = self
                .s3
                .list_objects_v2()
                .bucket(bucket)
                .prefix(prefix)
                .set_continuation_token(token.take())
                .send()
                .await
                .map_err(|e| aws_err("s3", "ListObjectsV2", e))?;
            for key in listed.contents().iter().filter_map(|o| o.key()) {
                if exact && key != prefix {
                    continue;
                }
                self.s3
                    .delete_object()
                    .bucket(bucket)
                    .key(key)
                    .send()
                    .await
                    .map_err(|e| aws_err("s3", "DeleteObject", e))?;
                objects.insert(key.to_owned());
            }
            match listed.next_continuation_token() {
                Some(t) if listed.is_truncated() == Some(true) => token = Some(t.to_owned()),
                _ => break,
            }
        }
        Ok(objects.len() as u64)
    }
}
