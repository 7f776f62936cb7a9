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
            Err(e)
                if matches!(code_of(&e), Some("NotFound" | "NoSuchKey"))
                    || e.raw_response().is_some_and(|r| r.status().as_u16() == 404) =>
            {
                Ok(None)
            }
            Err(e) => Err(aws_err("s3", "HeadObject", e)),
        }
    }

    async fn delete(&self, key: &str) -> Result<()> {
        // Every version, not only the current one: on a versioned bucket a plain delete would
        // leave the bytes behind a delete marker.
        let bucket = &self.names.artifact_bucket;
        let listed = self
            .s3
            .list_object_versions()
            .bucket(bucket)
            .prefix(key)
            .send()
            .await
            .map_err(|e| aws_err("s3", "ListObjectVersions", e))?;
        let versions = listed.versions().iter().filter(|v| v.key() == Some(key)).map(|v| v.version_id());
        let markers = listed.delete_markers().iter().filter(|m| m.key() == Some(key)).map(|m| m.version_id());
        for version in versions.chain(markers) {
            self.s3
                .delete_object()
                .bucket(bucket)
                .key(key)
                .set_version_id(version.map(str::to_owned))
                .send()
                .await
                .map_err(|e| aws_err("s3", "DeleteObject", e))?;
        }
        // An unversioned bucket, or an emulator that lists no versions.
        self.s3
            .delete_object()
            .bucket(bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| aws_err("s3", "DeleteObject", e))?;
        Ok(())
    }
}
