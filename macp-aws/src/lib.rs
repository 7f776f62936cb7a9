//! # macp-aws
//!
//! MACP on managed AWS services, as the design lays it out: DynamoDB for the record, S3 Vectors
//! for semantic search, S3 for artifacts, Bedrock Titan Text Embeddings V2 for embeddings.
//! [`AwsBackend`] implements every `macp_core` store trait plus [`VectorIndex`](macp_core::search::VectorIndex) and
//! [`BlobStore`](macp_core::blob::BlobStore); it passes the same conformance suite as the SQLite backend, and several
//! `macp serve --backend aws` processes can serve one room at once.
//!
//! ```no_run
//! # async fn f() -> macp_core::Result<()> {
//! use std::sync::Arc;
//! use macp_aws::{AwsBackend, TitanEmbedder};
//!
//! let aws = Arc::new(AwsBackend::builder_from_env().connect().await?);
//! aws.setup().await?; // development and tests; production uses deploy/tofu
//! let macp = macp_core::Macp::builder()
//!     .store(aws.clone())
//!     .vector_index(aws.clone())
//!     .blob_store(aws.clone())
//!     .embedder(Arc::new(TitanEmbedder::from_backend(&aws, 256)?))
//!     .build()?;
//! # let _ = macp; Ok(()) }
//! ```
//!
//! ## Tables (multi-table, on-demand; `deploy/tofu` and `schema.json` declare the same)
//!
//! | table | key | what |
//! |---|---|---|
//! | `rooms` | `room_id` | rooms; the room's finding counter `last_seq` and tag counts; `CONFIG#…` items |
//! | `findings` | `room_id`, `finding_id` (ULID) | findings; LSI `by_seq` (`seq`); sparse GSI `pending` (`pending`, `created_at`); idempotency keys `IDEMP#<key>` |
//! | `entities` | `room_id`, `entity_id` | entities; identifiers held `IDENT#<type>#<value>` |
//! | `relationships` | `pk` = `room_id#source`, `sk` = `type#target` | edges; GSIs `by_target` and `by_room` |
//! | `agent_sessions` | `room_id`, `agent_id` | agents |
//! | `artifacts` | `room_id`, `artifact_id` | artifact metadata; artifact keys `KEY#<key>` |
//!
//! ## How the guarantees hold across processes
//!
//! - **Updates never skip or repeat.** ULIDs minted on different hosts are not a commit order,
//!   so every finding gets a per-room `seq`: `append_finding` reads the room's `last_seq` and
//!   commits, in one `TransactWriteItems`, the room update `last_seq = n + 1` *conditioned on
//!   `last_seq = n`* together with the finding (`seq = n + 1`). Two writers can never commit the
//!   same `n`; the loser retries with the new value. So sequence numbers are gap-free and a
//!   finding with `seq = n` commits after every smaller one; readers page the `by_seq` LSI with
//!   strongly consistent reads, and a cursor at `n` never misses a later commit below it. The
//!   price is one serialisation point per room, which at the design's 4–8 agents per room is
//!   far from DynamoDB's per-item limits.
//! - **Idempotency** is a conditional put of `IDEMP#<key>` (in `findings`, one namespace per
//!   room for every write tool) in the same transaction as the write: the key is taken with
//!   the write or not at all. A cancelled one is read back and replayed.
//! - **Identifiers held** by an entity are conditional puts of `IDENT#<type>#<value>` items in the entity's
//!   creation transaction; a cancellation names the taken identifiers, and the service attaches
//!   to their holder. Attaching, merging and appending relationship evidence are conditional on
//!   a `version` attribute (optimistic concurrency), retried on conflict.
//! - **Search** queries S3 Vectors with a `room_id` filter and hydrates hits from DynamoDB with
//!   `BatchGetItem`, retrying unprocessed keys: DynamoDB stays the source of truth. Keywords are
//!   ranked in process with the same BM25 as the local backend, from a per-room index kept
//!   current by reading findings past the last `seq` it has seen.
//!
//! Departures from the design, with reasons: the `by_seq` LSI and the `pending` GSI (above);
//! idempotency keys live in the `findings` table so that one key cannot be reused across
//! write tools; `list_rooms` scans the rooms table (rooms are few; a GSI would be the next step).

mod audit;
mod blobs;
mod ddb;
mod setup;
mod store;
mod titan;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use macp_core::search::keyword::KeywordIndex;
use macp_core::{Error, Result, RoomId};

pub use titan::{TITAN_V2, TitanEmbedder};

/// The resources' names, derived from a prefix.
#[derive(Debug, Clone)]
pub struct Names {
    /// `<prefix>rooms`.
    pub rooms: String,
    /// `<prefix>findings`.
    pub findings: String,
    /// `<prefix>entities`.
    pub entities: String,
    /// `<prefix>relationships`.
    pub relationships: String,
    /// `<prefix>agent_sessions`.
    pub agents: String,
    /// `<prefix>artifacts`.
    pub artifacts: String,
    /// `<prefix>events`.
    pub events: String,
    /// `<prefix>claims`.
    pub claims: String,
    /// `<prefix>decisions`.
    pub decisions: String,
    /// `<prefix>protocol_sessions`.
    pub sessions: String,
    /// The private artifact bucket.
    pub artifact_bucket: String,
    /// The S3 Vectors bucket.
    pub vector_bucket: String,
}

/// Builds an [`AwsBackend`].
#[derive(Debug, Clone)]
pub struct AwsBuilder {
    region: Option<String>,
    endpoint_url: Option<String>,
    table_prefix: String,
    artifact_bucket: Option<String>,
    vector_bucket: Option<String>,
}

impl Default for AwsBuilder {
    fn default() -> Self {
        Self {
            region: None,
            endpoint_url: None,
            table_prefix: "macp-".into(),
            artifact_bucket: None,
            vector_bucket: None,
        }
    }
}

impl AwsBuilder {
    /// Defaults: the standard region and credential chain, table prefix `macp-`.
    pub fn new() -> Self {
        Self::default()
    }

    /// From the environment: `MACP_AWS_REGION` (else the standard chain: `AWS_REGION`, profile),
    /// `MACP_AWS_ENDPOINT_URL` (an emulator such as moto; applies to every service),
    /// `MACP_AWS_TABLE_PREFIX` (default `macp-`), `MACP_AWS_ARTIFACT_BUCKET`,
    /// `MACP_AWS_VECTOR_BUCKET` (defaults `<prefix>artifacts` and `<prefix>vectors`).
    /// Credentials come from the standard AWS chain.
    pub fn from_env() -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let mut b = Self::new();
        b.region = var("MACP_AWS_REGION");
        b.endpoint_url = var("MACP_AWS_ENDPOINT_URL");
        if let Some(p) = var("MACP_AWS_TABLE_PREFIX") {
            b.table_prefix = p;
        }
        b.artifact_bucket = var("MACP_AWS_ARTIFACT_BUCKET");
        b.vector_bucket = var("MACP_AWS_VECTOR_BUCKET");
        b
    }

    /// The region.
    pub fn region(mut self, r: impl Into<String>) -> Self {
        self.region = Some(r.into());
        self
    }

    /// A custom endpoint for every service (emulators).
    pub fn endpoint_url(mut self, url: impl Into<String>) -> Self {
        self.endpoint_url = Some(url.into());
        self
    }

    /// Prefix of every table name (and of the default bucket names).
    pub fn table_prefix(mut self, p: impl Into<String>) -> Self {
        self.table_prefix = p.into();
        self
    }

    /// The artifact bucket.
    pub fn artifact_bucket(mut self, b: impl Into<String>) -> Self {
        self.artifact_bucket = Some(b.into());
        self
    }

    /// The vector bucket.
    pub fn vector_bucket(mut self, b: impl Into<String>) -> Self {
        self.vector_bucket = Some(b.into());
        self
    }

    /// The resource names this configuration uses.
    pub fn names(&self) -> Names {
        let prefix = &self.table_prefix;
        let bucket_prefix: String = prefix
            .to_ascii_lowercase()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '-' })
            .collect();
        Names {
            rooms: format!("{prefix}rooms"),
            findings: format!("{prefix}findings"),
            entities: format!("{prefix}entities"),
            relationships: format!("{prefix}relationships"),
            agents: format!("{prefix}agent_sessions"),
            artifacts: format!("{prefix}artifacts"),
            events: format!("{prefix}events"),
            claims: format!("{prefix}claims"),
            decisions: format!("{prefix}decisions"),
            sessions: format!("{prefix}protocol_sessions"),
            artifact_bucket: self
                .artifact_bucket
                .clone()
                .unwrap_or_else(|| format!("{bucket_prefix}artifacts")),
            vector_bucket: self.vector_bucket.clone().unwrap_or_else(|| format!("{bucket_prefix}vectors")),
        }
    }

    /// Loads credentials and builds the clients (no AWS call is made yet).
    pub async fn connect(self) -> Result<AwsBackend> {
        let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
        if let Some(r) = &self.region {
            loader = loader.region(aws_config::Region::new(r.clone()));
        }
        if let Some(e) = &self.endpoint_url {
            loader = loader.endpoint_url(e.clone());
        }
        let conf = loader.load().await;
        if conf.region().is_none() {
            return Err(Error::invalid(
                "region",
                "no AWS region configured: set MACP_AWS_REGION or AWS_REGION (S3 Vectors regions, e.g. us-west-2)",
            ));
        }
        let names = self.names();
        let s3_conf =
            aws_sdk_s3::config::Builder::from(&conf).force_path_style(self.endpoint_url.is_some()).build();
        Ok(AwsBackend {
            ddb: aws_sdk_dynamodb::Client::new(&conf),
            s3: aws_sdk_s3::Client::from_conf(s3_conf),
            s3v: aws_sdk_s3vectors::Client::new(&conf),
            bedrock: aws_sdk_bedrockruntime::Client::new(&conf),
            names,
            emulated: self.endpoint_url.is_some(),
            keywords: Arc::new(Mutex::new(HashMap::new())),
        })
    }
}

/// Per-room keyword indexes: the last `seq` each has read, the room's stamp it was built at
/// (when it was last restored, its erasure count: either moving means findings changed in
/// place), and the index.
pub(crate) type KeywordCache = HashMap<RoomId, (u64, (u64, u64), Arc<KeywordIndex>)>;

/// MACP's AWS backend. Cheap to clone.
#[derive(Clone)]
pub struct AwsBackend {
    pub(crate) ddb: aws_sdk_dynamodb::Client,
    pub(crate) s3: aws_sdk_s3::Client,
    pub(crate) s3v: aws_sdk_s3vectors::Client,
    pub(crate) bedrock: aws_sdk_bedrockruntime::Client,
    pub(crate) names: Names,
    /// An emulator at a custom endpoint (which may not enforce presigned-URL bounds).
    pub(crate) emulated: bool,
    /// Per-room keyword indexes and the last `seq` each has read.
    pub(crate) keywords: Arc<Mutex<KeywordCache>>,
}

impl std::fmt::Debug for AwsBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsBackend").field("names", &self.names).finish_non_exhaustive()
    }
}

impl AwsBackend {
    /// Starts a builder.
    pub fn builder() -> AwsBuilder {
        AwsBuilder::new()
    }

    /// A builder configured from the environment ([`AwsBuilder::from_env`]).
    pub fn builder_from_env() -> AwsBuilder {
        AwsBuilder::from_env()
    }

    /// The resource names in use.
    pub fn names(&self) -> &Names {
        &self.names
    }

    /// The Bedrock runtime client (for [`TitanEmbedder`]).
    pub fn bedrock(&self) -> &aws_sdk_bedrockruntime::Client {
        &self.bedrock
    }
}
