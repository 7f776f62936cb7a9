//! Artifact files on the local disk, behind HMAC-signed URLs that `macp serve` answers.
//!
//! Layout under the data directory: `artifacts/<key>` holds each complete file,
//! `artifact-meta/<key>.json` its content type, `artifacts/.incoming/` uploads in progress, and
//! `artifact-signing.key` the 32-byte HMAC key, created once with mode 0600.
//!
//! An upload URL is bound to the method, the key, the content type, the exact length and an
//! expiry (see [`macp_core::blob::UrlSigner`]). The body is streamed into a temporary file,
//! counted, synced, and only then renamed into place, so an interrupted or oversized upload
//! leaves nothing behind, and a key is never overwritten. A refused request writes nothing.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use macp_core::blob::{
    BlobStore, ByteStream, ObjectMeta, PresignedRequest, SignedTarget, UrlEndpoint, UrlRefusal, UrlSigner,
    encode_query, parse_signed_query,
};
use macp_core::{Error, Result, Timestamp};
use tokio::io::AsyncWriteExt;

const KEY_FILE: &str = "artifact-signing.key";

/// Local artifact storage; cheap to clone.
#[derive(Debug, Clone)]
pub struct LocalBlobStore {
    root: PathBuf,
    meta: PathBuf,
    incoming: PathBuf,
    signer: UrlSigner,
    base_url: String,
}

fn io_err(what: &str, e: std::io::Error) -> Error {
    Error::backend("local-blobs", false, format!("{what}: {e}"), Some(Box::new(e)))
}

/// Refuses keys that could escape the artifacts directory (the service only generates safe
/// ones; this guards the HTTP path, which anyone can type).
fn safe_key(key: &str) -> Option<&str> {
    let ok = key.starts_with("rooms/")
        && !key.contains('\\')
        && key.split('/').all(|s| !s.is_empty() && s != "." && s != "..")
        && !key.chars().any(char::is_control);
    ok.then_some(key)
}

impl LocalBlobStore {
    /// Opens (creating as needed) artifact storage in `data_dir`; URLs start with `base_url`
    /// (the public URL of `macp serve`, without `/mcp`).
    pub fn open(data_dir: &Path, base_url: &str) -> Result<Self> {
        let root = data_dir.join("artifacts");
        let meta = data_dir.join("artifact-meta");
        let incoming = root.join(".incoming");
        for d in [&root, &meta, &incoming] {
            std::fs::create_dir_all(d).map_err(|e| io_err(&format!("cannot create {}", d.display()), e))?;
        }
        let key_path = data_dir.join(KEY_FILE);
        let key = match std::fs::read(&key_path) {
            Ok(k) => k,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut k = vec![0u8; 32];
                getrandom::fill(&mut k)
                    .map_err(|e| Error::backend("local-blobs", false, format!("no randomness: {e}"), None))?;
                write_private(&key_path, &k)?;
                k
            }
            Err(e) => return Err(io_err(&format!("cannot read {}", key_path.display()), e)),
        };
        Ok(Self {
            root,
            meta,
            incoming,
            signer: UrlSigner::new(key)?,
            base_url: base_url.trim_end_matches('/').to_owned(),
        })
    }

    fn url(&self, key: &str, query: &str) -> String {
        let path: Vec<String> = key.split('/').map(encode_query).collect();
        format!("{}/artifacts/{}?{query}", self.base_url, path.join("/"))
    }

    fn now_secs() -> i64 {
        Timestamp::now().as_millis() / 1000
    }

    /// Starts an upload: checks the URL against the request's content type and declared
    /// length, and that the key is free. The returned [`Upload`] takes the body.
    pub async fn begin_upload(
        &self,
        key: &str,
        query: &str,
        content_type: &str,
        content_length: Option<u64>,
    ) -> std::result::Result<Upload, UrlRefusal> {
        let key = safe_key(key).ok_or(UrlRefusal::BadSignature)?;
        let (expires, _, bound_len, sig) = parse_signed_query(query).ok_or(UrlRefusal::BadSignature)?;
        // The request's own type and length must be the ones signed.
        let length = content_length.ok_or(UrlRefusal::WrongLength)?;
        let t = SignedTarget { method: "PUT", key, content_type, length, expires };
        self.signer.verify(&t, &sig, Self::now_secs())?;
        if length != bound_len {
            return Err(UrlRefusal::WrongLength);
        }
        if tokio::fs::try_exists(self.root.join(key)).await.unwrap_or(false) {
            return Err(UrlRefusal::Exists);
        }
        let tmp = self.incoming.join(ulid::Ulid::generate().to_string());
        let file = tokio::fs::File::create(&tmp).await.map_err(|_| UrlRefusal::Exists)?;
        Ok(Upload {
            store: self.clone(),
            key: key.to_owned(),
            content_type: content_type.to_owned(),
            expected: length,
            written: 0,
            tmp,
            file: Some(file),
        })
    }

    /// Handles a PUT to a signed URL: checks it, streams `body` into place, or refuses and
    /// writes nothing. What `macp serve` runs for `PUT /artifacts/<key>?<query>`.
    pub async fn handle_put(
        &self,
        key: &str,
        query: &str,
        content_type: &str,
        content_length: Option<u64>,
        mut body: impl tokio::io::AsyncRead + Unpin,
    ) -> std::result::Result<ObjectMeta, UrlRefusal> {
        use tokio::io::AsyncReadExt;
        let mut up = self.begin_upload(key, query, content_type, content_length).await?;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = body.read(&mut buf).await.map_err(|_| UrlRefusal::WrongLength)?;
            if n == 0 {
                break;
            }
            up.write(&buf[..n]).await?;
        }
        up.finish().await
    }

    /// Splits a URL this store issued into its key and query (for callers that hold a URL rather
    /// than an HTTP request, such as tests).
    pub fn parse_url(&self, url: &str) -> Option<(String, String)> {
        let rest = url.strip_prefix(&self.base_url)?.strip_prefix("/artifacts/")?;
        let (path, query) = rest.split_once('?')?;
        let key: Option<Vec<String>> = path.split('/').map(macp_core::blob::decode_query).collect();
        Some((key?.join("/"), query.to_owned()))
    }

    /// Checks a download URL; returns the file and its metadata.
    pub async fn authorize_download(
        &self,
        key: &str,
        query: &str,
    ) -> std::result::Result<Option<(PathBuf, ObjectMeta)>, UrlRefusal> {
        let key = safe_key(key).ok_or(UrlRefusal::BadSignature)?;
        let (expires, _, _, sig) = parse_signed_query(query).ok_or(UrlRefusal::BadSignature)?;
        let t = SignedTarget { method: "GET", key, content_type: "", length: 0, expires };
        self.signer.verify(&t, &sig, Self::now_secs())?;
        Ok(self.head(key).await.ok().flatten().map(|m| (self.root.join(key), m)))
    }
}

#[async_trait]
impl UrlEndpoint for LocalBlobStore {
    async fn put(
        &self,
        key: &str,
        query: &str,
        content_type: &str,
        content_length: Option<u64>,
        body: ByteStream,
    ) -> std::result::Result<ObjectMeta, UrlRefusal> {
        self.handle_put(key, query, content_type, content_length, body).await
    }

    async fn get(
        &self,
        key: &str,
        query: &str,
    ) -> std::result::Result<Option<(ByteStream, ObjectMeta)>, UrlRefusal> {
        let Some((path, meta)) = self.authorize_download(key, query).await? else { return Ok(None) };
        // Found a moment ago and never deleted: a file that cannot be opened now is absent.
        Ok(tokio::fs::File::open(&path).await.ok().map(|f| (Box::pin(f) as ByteStream, meta)))
    }
}

/// Copies the artifact files, their metadata and the signing key from `data_dir` into `dest`
/// (for [`crate::backup`]); uploads still in progress are left out. Returns how many artifact
/// files and bytes were copied. Nothing is overwritten: an existing target is an error.
pub fn copy_files(data_dir: &Path, dest: &Path) -> Result<(u64, u64)> {
    fn walk(src: &Path, dst: &Path, skip: &Path, count: &mut (u64, u64)) -> Result<()> {
        let entries = match std::fs::read_dir(src) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_err(&format!("cannot read {}", src.display()), e)),
        };
        std::fs::create_dir_all(dst).map_err(|e| io_err(&format!("cannot create {}", dst.display()), e))?;
        for entry in entries {
            let entry = entry.map_err(|e| io_err(&format!("cannot read {}", src.display()), e))?;
            let (from, to) = (entry.path(), dst.join(entry.file_name()));
            if from == skip {
                continue;
            }
            if entry.file_type().map_err(|e| io_err("cannot stat", e))?.is_dir() {
                walk(&from, &to, skip, count)?;
            } else {
                if to.exists() {
                    return Err(io_err(
                        &format!("{} exists", to.display()),
                        std::io::ErrorKind::AlreadyExists.into(),
                    ));
                }
                count.1 += std::fs::copy(&from, &to)
                    .map_err(|e| io_err(&format!("cannot copy {}", from.display()), e))?;
                count.0 += 1;
            }
        }
        Ok(())
    }
    let mut files = (0, 0);
    let incoming = data_dir.join("artifacts").join(".incoming");
    walk(&data_dir.join("artifacts"), &dest.join("artifacts"), &incoming, &mut files)?;
    walk(&data_dir.join("artifact-meta"), &dest.join("artifact-meta"), &incoming, &mut (0, 0))?;
    match std::fs::read(data_dir.join(KEY_FILE)) {
        Ok(k) => write_private(&dest.join(KEY_FILE), &k)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err("cannot read the signing key", e)),
    }
    Ok(files)
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    let mut f = o.open(path).map_err(|e| io_err(&format!("cannot create {}", path.display()), e))?;
    f.write_all(bytes).and_then(|_| f.sync_all()).map_err(|e| io_err("cannot write the signing key", e))
}

/// An upload in progress: write the body with [`Upload::write`], then [`Upload::finish`].
/// Dropping it unfinished removes the partial file.
#[derive(Debug)]
pub struct Upload {
    store: LocalBlobStore,
    key: String,
    content_type: String,
    expected: u64,
    written: u64,
    tmp: PathBuf,
    file: Option<tokio::fs::File>,
}

impl Upload {
    /// Appends a chunk; refuses bytes beyond the bound length.
    pub async fn write(&mut self, chunk: &[u8]) -> std::result::Result<(), UrlRefusal> {
        self.written += chunk.len() as u64;
        if self.written > self.expected {
            return Err(UrlRefusal::WrongLength);
        }
        let f = self.file.as_mut().ok_or(UrlRefusal::WrongLength)?;
        f.write_all(chunk).await.map_err(|_| UrlRefusal::WrongLength)
    }

    /// Completes the upload if exactly the bound length arrived: sync, record the type, rename
    /// into place. Fails with `Exists` if another upload won the key meanwhile.
    pub async fn finish(mut self) -> std::result::Result<ObjectMeta, UrlRefusal> {
        if self.written != self.expected {
            return Err(UrlRefusal::WrongLength);
        }
        let f = self.file.take().ok_or(UrlRefusal::WrongLength)?;
        f.sync_all().await.map_err(|_| UrlRefusal::WrongLength)?;
        drop(f);
        let meta = ObjectMeta { size: self.written, content_type: self.content_type.clone() };
        let meta_path = self.store.meta.join(format!("{}.json", self.key));
        let dest = self.store.root.join(&self.key);
        let json = serde_json::json!({"content_type": meta.content_type, "size": meta.size}).to_string();
        let done = async {
            if let Some(d) = meta_path.parent() {
                tokio::fs::create_dir_all(d).await?;
            }
            if let Some(d) = dest.parent() {
                tokio::fs::create_dir_all(d).await?;
            }
            tokio::fs::write(&meta_path, json).await?;
            // hard_link fails if the destination exists: the first complete upload wins.
            tokio::fs::hard_link(&self.tmp, &dest).await?;
            tokio::fs::remove_file(&self.tmp).await
        }
        .await;
        match done {
            Ok(()) => Ok(meta),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(UrlRefusal::Exists),
            Err(_) => Err(UrlRefusal::WrongLength),
        }
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        if self.file.is_some() || std::fs::metadata(&self.tmp).is_ok() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

#[async_trait]
impl BlobStore for LocalBlobStore {
    fn name(&self) -> &'static str {
        "local"
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
        Ok(self.signer.presign_put(key, content_type, size, expires_at, |q| self.url(key, q)))
    }

    async fn presign_get(&self, key: &str, expires_at: Timestamp) -> Result<PresignedRequest> {
        Ok(self.signer.presign_get(key, expires_at, |q| self.url(key, q)))
    }

    async fn head(&self, key: &str) -> Result<Option<ObjectMeta>> {
        let Some(key) = safe_key(key) else { return Ok(None) };
        let data = match tokio::fs::metadata(self.root.join(key)).await {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err("cannot stat an artifact", e)),
        };
        let meta = tokio::fs::read_to_string(self.meta.join(format!("{key}.json")))
            .await
            .map_err(|e| io_err("cannot read an artifact's metadata", e))?;
        let v: serde_json::Value = serde_json::from_str(&meta)
            .map_err(|e| Error::backend("local-blobs", false, format!("bad artifact metadata: {e}"), None))?;
        Ok(Some(ObjectMeta {
            size: data.len(),
            content_type: v["content_type"].as_str().unwrap_or_default().to_owned(),
        }))
    }

    async fn delete(&self, key: &str) -> Result<()> {
        let Some(key) = safe_key(key) else { return Ok(()) };
        let (data, meta) = (self.root.join(key), self.meta.join(format!("{key}.json")));
        tokio::task::spawn_blocking(move || shred(&data).and_then(|_| shred(&meta)))
            .await
            .map_err(|e| Error::backend("local-blobs", true, format!("delete task failed: {e}"), None))?
            .map_err(|e| io_err("cannot delete an artifact", e))
    }

    async fn delete_prefix(&self, prefix: &str) -> Result<u64> {
        // A room's prefix is a directory (`rooms/<id>/`) under both trees.
        let Some(dir) = safe_key(prefix.trim_end_matches('/')) else { return Ok(0) };
        let (data, meta) = (self.root.join(dir), self.meta.join(dir));
        tokio::task::spawn_blocking(move || -> std::io::Result<u64> {
            let n = shred_tree(&data)?;
            shred_tree(&meta)?;
            Ok(n)
        })
        .await
        .map_err(|e| Error::backend("local-blobs", true, format!("delete task failed: {e}"), None))?
        .map_err(|e| io_err("cannot delete a room's artifacts", e))
    }

    async fn read_object(&self, key: &str) -> Result<Option<(ObjectMeta, Vec<u8>)>> {
        let Some(meta) = self.head(key).await? else { return Ok(None) };
        let Some(key) = safe_key(key) else { return Ok(None) };
        match tokio::fs::read(self.root.join(key)).await {
            Ok(bytes) => Ok(Some((meta, bytes))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err("cannot read an artifact", e)),
        }
    }

    async fn write_object(&self, key: &str, content_type: &str, bytes: Vec<u8>) -> Result<()> {
        let exists = || Error::AlreadyExists { what: "object", id: key.to_owned() };
        let safe = safe_key(key).ok_or_else(|| Error::invalid("key", "not a valid artifact key"))?;
        // The upload path, without the URL: written to `incoming`, synced, linked into place.
        let tmp = self.incoming.join(ulid::Ulid::generate().to_string());
        let file = tokio::fs::File::create(&tmp).await.map_err(|e| io_err("cannot create an artifact", e))?;
        let mut up = Upload {
            store: self.clone(),
            key: safe.to_owned(),
            content_type: content_type.to_owned(),
            expected: bytes.len() as u64,
            written: 0,
            tmp,
            file: Some(file),
        };
        let failed = |r: UrlRefusal| match r {
            UrlRefusal::Exists => exists(),
            _ => Error::backend("local-blobs", true, format!("cannot write the artifact {key}"), None),
        };
        up.write(&bytes).await.map_err(failed)?;
        up.finish().await.map(|_| ()).map_err(failed)
    }
}

/// Overwrites a file with zeros, syncs, then unlinks it, so the freed blocks do not hold its
/// bytes. A missing file is fine.
fn shred(path: &Path) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = match std::fs::OpenOptions::new().write(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let zeros = vec![0u8; 64 * 1024];
    let mut left = f.metadata()?.len();
    while left > 0 {
        let n = left.min(zeros.len() as u64) as usize;
        f.write_all(&zeros[..n])?;
        left -= n as u64;
    }
    f.sync_data()?;
    std::fs::remove_file(path)
}

/// Shreds every file under `dir` and removes the directories; returns how many files.
fn shred_tree(dir: &Path) -> std::io::Result<u64> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut n = 0;
    for e in entries {
        let p = e?.path();
        if p.is_dir() {
            n += shred_tree(&p)?;
        } else {
            shred(&p)?;
            n += 1;
        }
    }
    std::fs::remove_dir(dir)?;
    Ok(n)
}
