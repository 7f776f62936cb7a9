//! The artifact storage seam: where files live, and the presigned URLs agents upload to and
//! download from directly. The service never handles file bytes.
//!
//! A [`BlobStore`] issues URLs and reports what is stored; `macp-local` keeps files in the data
//! directory behind HMAC-signed URLs served by `macp serve`, `macp-aws` uses S3 presigned URLs,
//! and [`MemoryBlobStore`] is the in-process reference. [`UrlSigner`] is the signing scheme the
//! local stores share.

use std::collections::BTreeMap;
use std::fmt::Debug;

use async_trait::async_trait;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use serde::Serialize;
use sha2::Sha256;

use crate::error::{Error, Result};
use crate::ids::Timestamp;

/// An HTTP request an agent makes on its own: a URL with the method and headers it must use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct PresignedRequest {
    /// The URL, signature included.
    pub url: String,
    /// `PUT` for uploads, `GET` for downloads.
    pub method: String,
    /// Headers the request must carry, exactly.
    pub headers: BTreeMap<String, String>,
    /// When the URL stops working.
    pub expires_at: Timestamp,
}

/// What is stored under a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    /// Bytes stored.
    pub size: u64,
    /// MIME type the object was uploaded with.
    pub content_type: String,
}

/// Object storage behind presigned URLs.
///
/// # Contract
/// - [`presign_put`](BlobStore::presign_put) returns a URL that accepts one upload to exactly
///   `key`, with exactly `content_type` and exactly `size` bytes, until `expires_at`; anything
///   else is refused (an enforcing store answers 403) and stores nothing. An upload is all or
///   nothing: an interrupted one leaves no object behind.
/// - [`presign_get`](BlobStore::presign_get) returns a URL serving the object at `key` until
///   `expires_at`.
/// - [`head`](BlobStore::head) reports a complete object, or `None`.
/// - Keys are opaque to the store; the service generates them and keeps them under each room's
///   prefix.
#[async_trait]
pub trait BlobStore: Send + Sync + Debug {
    /// Short name for errors and logs.
    fn name(&self) -> &'static str;

    /// Whether the store itself refuses uploads that break the URL's bounds (expiry, key, type,
    /// size). S3 does; an emulator that skips signature checks does not.
    fn enforces_presigned_bounds(&self) -> bool;

    /// A URL for one upload.
    async fn presign_put(
        &self,
        key: &str,
        content_type: &str,
        size: u64,
        expires_at: Timestamp,
    ) -> Result<PresignedRequest>;

    /// A URL for downloads.
    async fn presign_get(&self, key: &str, expires_at: Timestamp) -> Result<PresignedRequest>;

    /// The stored object's size and type, or `None`.
    async fn head(&self, key: &str) -> Result<Option<ObjectMeta>>;

    /// Deletes the object at `key` for good (erasure): afterwards `head` answers `None` and
    /// download URLs answer nothing. Deleting a missing object succeeds.
    async fn delete(&self, key: &str) -> Result<()>;

    /// Deletes every object whose key starts with `prefix` (a purged room's files, uploads
    /// never registered included), as [`delete`](BlobStore::delete) would. Returns how many.
    async fn delete_prefix(&self, prefix: &str) -> Result<u64>;

    /// The stored object's bytes and metadata, or `None`: what `macp export` copies into a
    /// bundle. (Agents never get bytes through the service: they download from URLs.)
    async fn read_object(&self, key: &str) -> Result<Option<(ObjectMeta, Vec<u8>)>>;

    /// Stores `bytes` at `key` with `content_type`, whole or not at all: what `macp import`
    /// restores. Never replaces an object: `already_exists` if `key` holds one.
    async fn write_object(&self, key: &str, content_type: &str, bytes: Vec<u8>) -> Result<()>;
}

/// Bytes in flight: a request body, or a stored object being read.
pub type ByteStream = std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>;

/// The receiving end of presigned URLs that point at the server itself (the local store's do;
/// S3 answers its own). The HTTP layer hands it every request to `/artifacts/<key>?<query>`,
/// so the transport needs no knowledge of any store.
///
/// # Contract
/// - [`put`](UrlEndpoint::put) checks the URL (signature, expiry, key, content type, length)
///   before storing anything, stores the body whole or not at all, and never replaces an
///   object ([`UrlRefusal::Exists`]).
/// - [`get`](UrlEndpoint::get) checks the URL, then serves the object, or `None` when there is
///   none.
#[async_trait]
pub trait UrlEndpoint: Send + Sync + Debug {
    /// A PUT to an upload URL.
    async fn put(
        &self,
        key: &str,
        query: &str,
        content_type: &str,
        content_length: Option<u64>,
        body: ByteStream,
    ) -> std::result::Result<ObjectMeta, UrlRefusal>;

    /// A GET of a download URL.
    async fn get(
        &self,
        key: &str,
        query: &str,
    ) -> std::result::Result<Option<(ByteStream, ObjectMeta)>, UrlRefusal>;
}

type HmacSha256 = Hmac<Sha256>;

/// HMAC-SHA256 signatures binding a URL to its method, key, content type, length and expiry.
#[derive(Clone)]
pub struct UrlSigner {
    key: Vec<u8>,
}

impl Debug for UrlSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UrlSigner(..)")
    }
}

/// What a signed URL authorises.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedTarget<'a> {
    /// `PUT` or `GET`.
    pub method: &'a str,
    /// The object key.
    pub key: &'a str,
    /// Bound content type (uploads), empty for downloads.
    pub content_type: &'a str,
    /// Bound length (uploads), 0 for downloads.
    pub length: u64,
    /// Expiry, seconds since the Unix epoch.
    pub expires: i64,
}

impl UrlSigner {
    /// A signer with `key` (at least 32 bytes of secret randomness).
    pub fn new(key: Vec<u8>) -> Result<Self> {
        if key.len() < 32 {
            return Err(Error::invalid("signing_key", "the URL signing key must be at least 32 bytes"));
        }
        Ok(Self { key })
    }

    fn mac(&self, t: &SignedTarget<'_>) -> HmacSha256 {
        // Keys and types cannot contain newlines (the service refuses control characters), so
        // the fields cannot be shifted into one another.
        let msg = format!("{}\n{}\n{}\n{}\n{}", t.method, t.key, t.content_type, t.length, t.expires);
        let mut m = <HmacSha256 as KeyInit>::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
        m.update(msg.as_bytes());
        m
    }

    /// The signature of `t`, base64url.
    pub fn sign(&self, t: &SignedTarget<'_>) -> String {
        URL_SAFE_NO_PAD.encode(self.mac(t).finalize().into_bytes())
    }

    /// A signed upload request for `key`, bound to `content_type` and exactly `size` bytes;
    /// `url` turns the signed query string into the store's URL.
    pub fn presign_put(
        &self,
        key: &str,
        content_type: &str,
        size: u64,
        expires_at: Timestamp,
        url: impl FnOnce(&str) -> String,
    ) -> PresignedRequest {
        let t = SignedTarget {
            method: "PUT",
            key,
            content_type,
            length: size,
            expires: expires_at.as_millis() / 1000,
        };
        PresignedRequest {
            url: url(&signed_query(self, &t)),
            method: "PUT".into(),
            headers: BTreeMap::from([
                ("Content-Type".to_owned(), content_type.to_owned()),
                ("Content-Length".to_owned(), size.to_string()),
            ]),
            expires_at,
        }
    }

    /// A signed download request for `key`; `url` as for [`presign_put`](Self::presign_put).
    pub fn presign_get(
        &self,
        key: &str,
        expires_at: Timestamp,
        url: impl FnOnce(&str) -> String,
    ) -> PresignedRequest {
        let t = SignedTarget {
            method: "GET",
            key,
            content_type: "",
            length: 0,
            expires: expires_at.as_millis() / 1000,
        };
        PresignedRequest {
            url: url(&signed_query(self, &t)),
            method: "GET".into(),
            headers: BTreeMap::new(),
            expires_at,
        }
    }

    /// Checks `sig` for `t` (constant time) and that `t` has not expired at `now_secs`.
    pub fn verify(
        &self,
        t: &SignedTarget<'_>,
        sig: &str,
        now_secs: i64,
    ) -> std::result::Result<(), UrlRefusal> {
        let raw = URL_SAFE_NO_PAD.decode(sig).map_err(|_| UrlRefusal::BadSignature)?;
        self.mac(t).verify_slice(&raw).map_err(|_| UrlRefusal::BadSignature)?;
        if now_secs > t.expires {
            return Err(UrlRefusal::Expired);
        }
        Ok(())
    }
}

/// Why a signed URL was refused (all answered 403, nothing written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UrlRefusal {
    /// The signature does not match the request (tampered, or another key / type / length).
    BadSignature,
    /// The URL is past its expiry.
    Expired,
    /// The body's length differs from the bound length.
    WrongLength,
    /// The object already exists (keys are never overwritten).
    Exists,
}

impl std::fmt::Display for UrlRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            UrlRefusal::BadSignature => {
                "the signature does not match this request (method, key, content type and length are bound)"
            }
            UrlRefusal::Expired => "the URL has expired; request a new one",
            UrlRefusal::WrongLength => "the body's length differs from the size the URL was issued for",
            UrlRefusal::Exists => "an object already exists under this key",
        })
    }
}

/// Percent-encodes a query value (RFC 3986 unreserved characters stay).
pub fn encode_query(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Decodes [`encode_query`] (and `+` as space); `None` if malformed.
pub fn decode_query(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// The query string of a signed URL for `t`.
pub fn signed_query(signer: &UrlSigner, t: &SignedTarget<'_>) -> String {
    let mut q = format!("exp={}", t.expires);
    if t.method == "PUT" {
        q.push_str(&format!("&ct={}&len={}", encode_query(t.content_type), t.length));
    }
    q.push_str(&format!("&sig={}", signer.sign(t)));
    q
}

/// The fields of a signed query string: `(expires, content type, length, signature)`.
pub fn parse_signed_query(q: &str) -> Option<(i64, String, u64, String)> {
    let mut exp = None;
    let (mut ct, mut len, mut sig) = (String::new(), 0u64, None);
    for pair in q.split('&') {
        let (k, v) = pair.split_once('=')?;
        match k {
            "exp" => exp = v.parse().ok(),
            "ct" => ct = decode_query(v)?,
            "len" => len = v.parse().ok()?,
            "sig" => sig = Some(v.to_owned()),
            _ => {}
        }
    }
    Some((exp?, ct, len, sig?))
}

#[cfg(feature = "memory")]
pub use memory::MemoryBlobStore;

#[cfg(feature = "memory")]
mod memory {
    use std::collections::HashMap;
    use std::sync::Mutex;

    use super::*;

    /// The in-process reference [`BlobStore`]: objects in memory, URLs of the form
    /// `memory://<key>?<signed query>` accepted by [`MemoryBlobStore::put`] and served by
    /// [`MemoryBlobStore::get`] with the same checks an HTTP endpoint makes.
    #[derive(Debug)]
    pub struct MemoryBlobStore {
        signer: UrlSigner,
        objects: Mutex<HashMap<String, (ObjectMeta, Vec<u8>)>>,
    }

    impl Default for MemoryBlobStore {
        fn default() -> Self {
            Self::new()
        }
    }

    impl MemoryBlobStore {
        /// An empty store with a random signing key.
        pub fn new() -> Self {
            let key: Vec<u8> = (0..2).flat_map(|_| uuid::Uuid::new_v4().into_bytes()).collect();
            Self {
                signer: UrlSigner::new(key).unwrap_or_else(|_| unreachable!("32 bytes")),
                objects: Mutex::default(),
            }
        }

        fn split(url: &str) -> std::result::Result<(String, String), UrlRefusal> {
            let rest = url.strip_prefix("memory://").ok_or(UrlRefusal::BadSignature)?;
            let (key, q) = rest.split_once('?').ok_or(UrlRefusal::BadSignature)?;
            Ok((decode_query(key).ok_or(UrlRefusal::BadSignature)?, q.to_owned()))
        }

        /// Performs an upload to a presigned URL, as an HTTP PUT with `content_type` would.
        pub fn put(
            &self,
            url: &str,
            content_type: &str,
            body: Vec<u8>,
        ) -> std::result::Result<(), UrlRefusal> {
            let (key, q) = Self::split(url)?;
            let (exp, _, len, sig) = parse_signed_query(&q).ok_or(UrlRefusal::BadSignature)?;
            let t = SignedTarget {
                method: "PUT",
                key: &key,
                content_type,
                length: body.len() as u64,
                expires: exp,
            };
            self.signer.verify(&t, &sig, Timestamp::now().as_millis() / 1000)?;
            if body.len() as u64 != len {
                return Err(UrlRefusal::WrongLength);
            }
            let mut objects = self.objects.lock().unwrap_or_else(|p| p.into_inner());
            if objects.contains_key(&key) {
                return Err(UrlRefusal::Exists);
            }
            let meta = ObjectMeta { size: len, content_type: content_type.to_owned() };
            objects.insert(key, (meta, body));
            Ok(())
        }

        /// Performs a download from a presigned URL.
        pub fn get(&self, url: &str) -> std::result::Result<Option<Vec<u8>>, UrlRefusal> {
            let (key, q) = Self::split(url)?;
            let (exp, _, _, sig) = parse_signed_query(&q).ok_or(UrlRefusal::BadSignature)?;
            let t = SignedTarget { method: "GET", key: &key, content_type: "", length: 0, expires: exp };
            self.signer.verify(&t, &sig, Timestamp::now().as_millis() / 1000)?;
            Ok(self.objects.lock().unwrap_or_else(|p| p.into_inner()).get(&key).map(|(_, b)| b.clone()))
        }
    }

    #[async_trait]
    impl BlobStore for MemoryBlobStore {
        fn name(&self) -> &'static str {
            "memory"
        }

        fn enforces_presigned_bounds(&self) -> bool {
            true
        }

        async fn presign_put(
            &self,
            key: &str,
            content_type: &str,
            size: u64,
            expires_at: Timestamp,
        ) -> Result<PresignedRequest> {
            Ok(self.signer.presign_put(key, content_type, size, expires_at, |q| {
                format!("memory://{}?{q}", encode_query(key))
            }))
        }

        async fn presign_get(&self, key: &str, expires_at: Timestamp) -> Result<PresignedRequest> {
            Ok(self.signer.presign_get(key, expires_at, |q| format!("memory://{}?{q}", encode_query(key))))
        }

        async fn head(&self, key: &str) -> Result<Option<ObjectMeta>> {
            Ok(self.objects.lock().unwrap_or_else(|p| p.into_inner()).get(key).map(|(m, _)| m.clone()))
        }

        async fn delete(&self, key: &str) -> Result<()> {
            self.objects.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
            Ok(())
        }

        async fn delete_prefix(&self, prefix: &str) -> Result<u64> {
            let mut objects = self.objects.lock().unwrap_or_else(|p| p.into_inner());
            let before = objects.len();
            objects.retain(|k, _| !k.starts_with(prefix));
            Ok((before - objects.len()) as u64)
        }

        async fn read_object(&self, key: &str) -> Result<Option<(ObjectMeta, Vec<u8>)>> {
            Ok(self.objects.lock().unwrap_or_else(|p| p.into_inner()).get(key).cloned())
        }

        async fn write_object(&self, key: &str, content_type: &str, bytes: Vec<u8>) -> Result<()> {
            let mut objects = self.objects.lock().unwrap_or_else(|p| p.into_inner());
            if objects.contains_key(key) {
                return Err(Error::AlreadyExists { what: "object", id: key.to_owned() });
            }
            let meta = ObjectMeta { size: bytes.len() as u64, content_type: content_type.to_owned() };
            objects.insert(key.to_owned(), (meta, bytes));
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_bind_every_field_and_expire() {
        let s = UrlSigner::new(vec![7; 32]).unwrap();
        let t = SignedTarget {
            method: "PUT",
            key: "rooms/r/a/1/x.log",
            content_type: "text/plain",
            length: 42,
            expires: 100,
        };
        let sig = s.sign(&t);
        assert_eq!(s.verify(&t, &sig, 100), Ok(()));
        assert_eq!(s.verify(&t, &sig, 101), Err(UrlRefusal::Expired));
        for other in [
            SignedTarget { method: "GET", ..t.clone() },
            SignedTarget { key: "rooms/other/a/1/x.log", ..t.clone() },
            SignedTarget { content_type: "text/html", ..t.clone() },
            SignedTarget { length: 43, ..t.clone() },
            SignedTarget { expires: 10_000, ..t.clone() },
        ] {
            assert_eq!(s.verify(&other, &sig, 50), Err(UrlRefusal::BadSignature), "{other:?}");
        }
        let q = signed_query(&s, &t);
        assert_eq!(parse_signed_query(&q), Some((100, "text/plain".into(), 42, sig)));
    }
}
