//! Helpers shared by the binary's tests: a raw HTTP/1.1 client on one kept-alive socket, so a
//! test sees exactly what crosses the wire (status, headers, whether the connection survives),
//! which a pooling client such as reqwest hides; and a room with artifacts in a data directory,
//! for the commands that move rooms.
#![allow(dead_code)] // each test file uses a different part

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One HTTP answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
}

/// A client holding one TCP connection.
pub struct Raw {
    stream: TcpStream,
    buf: Vec<u8>,
    host: String,
}

impl Raw {
    pub async fn connect(addr: &str) -> Self {
        let stream = TcpStream::connect(addr).await.unwrap();
        // As every HTTP client library does: otherwise the client's own second write (the body
        // after the head) waits for the server's delayed acknowledgement.
        stream.set_nodelay(true).unwrap();
        Self { stream, buf: Vec::new(), host: addr.to_owned() }
    }

    /// The request's head, for `path` with `headers` and a body of `len` bytes.
    pub fn head(&self, method: &str, path: &str, headers: &[(&str, &str)], len: usize) -> String {
        let mut h = format!("{method} {path} HTTP/1.1\r\nhost: {}\r\ncontent-length: {len}\r\n", self.host);
        for (k, v) in headers {
            h.push_str(&format!("{k}: {v}\r\n"));
        }
        h.push_str("\r\n");
        h
    }

    pub async fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes).await
    }

    /// Sends a whole request and reads its answer.
    pub async fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<Answer> {
        let mut bytes = self.head(method, path, headers, body.len()).into_bytes();
        bytes.extend_from_slice(body);
        self.send(&bytes).await?;
        self.answer().await
    }

    /// Reads one answer (content-length or chunked body).
    pub async fn answer(&mut self) -> std::io::Result<Answer> {
        let end = loop {
            if let Some(i) = find(&self.buf, b"\r\n\r\n") {
                break i;
            }
            self.fill().await?;
        };
        let head = String::from_utf8_lossy(&self.buf[..end]).into_owned();
        self.buf.drain(..end + 4);
        let mut lines = head.split("\r\n");
        let status: u16 =
            lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|s| s.parse().ok()).unwrap();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let get = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        let body = if get("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
            let mut body = Vec::new();
            loop {
                let line_end = loop {
                    if let Some(i) = find(&self.buf, b"\r\n") {
                        break i;
                    }
                    self.fill().await?;
                };
                let size =
                    usize::from_str_radix(String::from_utf8_lossy(&self.buf[..line_end]).trim(), 16).unwrap();
                self.buf.drain(..line_end + 2);
                while self.buf.len() < size + 2 {
                    self.fill().await?;
                }
                body.extend_from_slice(&self.buf[..size]);
                self.buf.drain(..size + 2);
                if size == 0 {
                    break body;
                }
            }
        } else {
            let len: usize = get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
            while self.buf.len() < len {
                self.fill().await?;
            }
            self.buf.drain(..len).collect()
        };
        Ok(Answer { status, headers, body })
    }

    async fn fill(&mut self) -> std::io::Result<()> {
        let mut chunk = [0u8; 16384];
        let n = tokio::time::timeout(Duration::from_secs(10), self.stream.read(&mut chunk))
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer within 10 s"))??;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the server closed the connection",
            ));
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(())
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The headers of an MCP POST, with the session when there is one.
pub fn mcp_headers(session: Option<&str>) -> Vec<(&str, &str)> {
    let mut h = vec![
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    if let Some(s) = session {
        h.push(("mcp-session-id", s));
    }
    h
}

/// The JSON-RPC message of an MCP answer, whether sent as JSON or as an SSE stream.
pub fn message(a: &Answer) -> serde_json::Value {
    if a.header("content-type").is_some_and(|c| c.starts_with("application/json")) {
        return a.json();
    }
    let text = String::from_utf8_lossy(&a.body);
    let data = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .find(|d| !d.is_empty())
        .unwrap_or_else(|| panic!("no message in {text}"));
    serde_json::from_str(data).unwrap()
}

/// Opens an MCP session on `raw`: initialize, then the initialized notification. The session id.
pub async fn open_session(raw: &mut Raw) -> String {
    let init = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}});
    let a = raw.request("POST", "/mcp", &mcp_headers(None), init.to_string().as_bytes()).await.unwrap();
    assert_eq!(a.status, 200, "{}", String::from_utf8_lossy(&a.body));
    let session = a.header("mcp-session-id").unwrap().to_owned();
    let note = serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let a =
        raw.request("POST", "/mcp", &mcp_headers(Some(&session)), note.to_string().as_bytes()).await.unwrap();
    assert_eq!(a.status, 202);
    session
}

/// An artifact for [`local_room`] to upload.
pub struct Upload {
    pub filename: String,
    pub content_type: &'static str,
    pub bytes: Vec<u8>,
    pub description: Option<String>,
}

/// A room in the SQLite data directory `dir`, where the agent `ana-claude` posted `finding` and
/// uploaded `uploads`: the room's id.
pub fn local_room(dir: &std::path::Path, objective: &str, finding: &str, uploads: Vec<Upload>) -> String {
    use std::sync::Arc;

    use macp_core::blob::BlobStore as _;
    use macp_core::service::{CreateRoom, JoinRoom, PostFinding, RegisterArtifact, RequestUpload};

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let store = Arc::new(macp_local::SqliteStore::builder().data_dir(dir).open().unwrap());
        let blobs = Arc::new(macp_local::blobs::LocalBlobStore::open(dir, "http://127.0.0.1:9").unwrap());
        let m = macp_core::Macp::builder().store(store).blob_store(blobs.clone()).build().unwrap();
        let who = macp_core::Principal::new("ana").unwrap();
        let room = m.create_room(&who, CreateRoom::new(objective)).await.unwrap().room_id;
        let agent = macp_core::AgentId::new("ana-claude").unwrap();
        m.join_room(&who, JoinRoom::new(room).agent(agent.clone())).await.unwrap();
        m.post_finding(&who, PostFinding::new(room, agent.clone(), finding)).await.unwrap();
        for u in uploads {
            let ticket = m
                .request_artifact_upload(
                    &who,
                    RequestUpload {
                        room_id: room,
                        agent_id: Some(agent.clone()),
                        filename: u.filename,
                        content_type: u.content_type.into(),
                        size: u.bytes.len() as u64,
                    },
                )
                .await
                .unwrap();
            blobs.write_object(&ticket.key, u.content_type, u.bytes).await.unwrap();
            m.register_artifact(
                &who,
                RegisterArtifact {
                    room_id: room,
                    agent_id: Some(agent.clone()),
                    key: ticket.key,
                    description: u.description,
                    linked_finding_ids: vec![],
                    linked_entity_ids: vec![],
                    idempotency_key: None,
                },
            )
            .await
            .unwrap();
        }
        room.to_string()
    })
}
