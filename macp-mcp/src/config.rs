//! Configuration of `macp`: command-line flags, their `MACP_*` environment equivalents, and an
//! optional TOML file (`--config FILE` / `MACP_CONFIG`). A flag beats its environment variable,
//! which beats the file, which beats the default.
//!
//! | flag | environment | TOML key | default |
//! |---|---|---|---|
//! | `--config FILE` | `MACP_CONFIG` | — | none |
//! | `--backend local\|aws` | `MACP_BACKEND` | `backend` | `local` (`aws` needs the `aws` cargo feature) |
//! | `--data-dir DIR` | `MACP_DATA_DIR` | `data_dir` | `$XDG_DATA_HOME/macp` or `~/.local/share/macp` |
//! | `--bind ADDR` | `MACP_BIND` | `bind` | `127.0.0.1:8765` |
//! | `--allowed-host HOST` (repeatable) | `MACP_ALLOWED_HOSTS` (comma-separated) | `allowed_hosts` | none beyond loopback |
//! | `--public-url URL` | `MACP_PUBLIC_URL` | `public_url` | from the bound address |
//! | `--local-user NAME` | `MACP_LOCAL_USER` | `local_user` | `$USER`, else `local` |
//! | `--embedder builtin\|openai\|titan\|none` | `MACP_EMBEDDER` | `embedder` | `builtin` |
//! | `--embeddings-url URL` | `MACP_EMBEDDINGS_URL` | `embeddings_url` | — (openai) |
//! | `--embeddings-model NAME` | `MACP_EMBEDDINGS_MODEL` | `embeddings_model` | — (openai) |
//! | `--embeddings-dimensions N` | `MACP_EMBEDDINGS_DIMENSIONS` | `embeddings_dimensions` | titan: 256 (or 512, 1024); openai: the model's own; builtin: 256 only |
//! | `--reconcile-interval SECS` | `MACP_RECONCILE_INTERVAL` | `reconcile_interval` | 30 |
//! | `--artifact-max-bytes N` | `MACP_ARTIFACT_MAX_BYTES` | `artifact_max_bytes` | 26214400 (25 MiB) |
//! | `--artifact-type TYPE` (repeatable) | `MACP_ARTIFACT_TYPES` (comma-separated) | `artifact_types` | text, CSV, Markdown, JSON, NDJSON, PDF, PNG, JPEG, GIF, WebP, gzip, zip |
//! | `--context-findings N` | `MACP_CONTEXT_FINDINGS` | `context_findings` | 20: latest findings in `get_room_context` |
//! | `--context-entities N` | `MACP_CONTEXT_ENTITIES` | `context_entities` | 15: top entities in it |
//! | `--context-tags N` | `MACP_CONTEXT_TAGS` | `context_tags` | 40: most used tags in it |
//! | `--context-budget-bytes N` | `MACP_CONTEXT_BUDGET_BYTES` | `context_budget_bytes` | 16384: its size as JSON |
//! | `--stale-after-minutes N` | `MACP_STALE_AFTER_MINUTES` | `stale_after_minutes` | 15: an agent inactive longer shows as stale |
//! | `--redact-off KIND` (repeatable) | `MACP_REDACT_OFF` (comma-separated) | `redact_off` | none: every kind of secret is redacted on write (kinds: `macp_core::redact::KINDS`) |
//! | `--redact-pattern KIND=REGEX` (repeatable) | — | `redact_patterns` (a table `kind = "regex"`) | none: extra patterns whose matches become `[redacted:KIND]` |
//! | `--max-exchanges N` | `MACP_MAX_EXCHANGES` | `max_exchanges` | 10: findings two agents may address to each other with no person acting in between (0: no limit) |
//! | `--retention-days N` | `MACP_RETENTION_DAYS` | `retention_days` | 0 (kept for good): days a closed room is kept, then purged, unless it sets its own |
//! | `--auth-issuer URL` | `MACP_AUTH_ISSUER` | `auth_issuer` | none: auth off (loopback only) |
//! | `--auth-jwks-url URL` | `MACP_AUTH_JWKS_URL` | `auth_jwks_url` | `jwks_uri` from `<issuer>/.well-known/openid-configuration`, else `<issuer>/.well-known/jwks.json` |
//! | `--auth-audience VALUE` | `MACP_AUTH_AUDIENCE` | `auth_audience` | required with an issuer |
//! | `--auth-audience-claim NAME` | `MACP_AUTH_AUDIENCE_CLAIM` | `auth_audience_claim` | `aud` (`client_id` for Cognito access tokens) |
//! | `--auth-user-claim NAME` | `MACP_AUTH_USER_CLAIM` | `auth_user_claim` | `sub` |
//! | `--auth-read-scope NAME` | `MACP_AUTH_READ_SCOPE` | `auth_read_scope` | not enforced |
//! | `--auth-write-scope NAME` | `MACP_AUTH_WRITE_SCOPE` | `auth_write_scope` | not enforced |
//! | `--auth-leeway SECS` | `MACP_AUTH_LEEWAY` | `auth_leeway` | 30 |
//! | `--web-client-id ID` | `MACP_WEB_CLIENT_ID` | `web_client_id` | none: the web view cannot sign people in (bearer tokens only) |
//!
//! With `--backend aws`, the AWS resources come from the environment only (the names the
//! OpenTofu module in `deploy/tofu` outputs): `MACP_AWS_REGION` (else `AWS_REGION`),
//! `MACP_AWS_TABLE_PREFIX` (default `macp-`), `MACP_AWS_ARTIFACT_BUCKET`, `MACP_AWS_VECTOR_BUCKET`,
//! `MACP_AWS_ENDPOINT_URL` (emulators only), and credentials from the standard AWS chain.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use serde::Deserialize;

/// Which embedder serves semantic search.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum EmbedderKind {
    /// The static model compiled into the binary: offline, no setup.
    #[default]
    Builtin,
    /// An OpenAI-compatible `/v1/embeddings` endpoint.
    Openai,
    /// Amazon Titan Text Embeddings V2 on Bedrock (the `aws` cargo feature).
    Titan,
    /// No semantic search: keyword only.
    None,
}

/// Where the record is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// SQLite in the data directory (the embedded default).
    #[default]
    Local,
    /// DynamoDB, S3 Vectors and S3 (the `aws` cargo feature).
    Aws,
}

/// Flags shared by every subcommand (storage and search).
#[derive(Debug, Clone, Args, Default)]
pub struct CommonArgs {
    /// TOML configuration file.
    #[arg(long, env = "MACP_CONFIG", global = true)]
    pub config: Option<PathBuf>,
    /// Where the record is kept.
    #[arg(long, env = "MACP_BACKEND", global = true, value_enum)]
    pub backend: Option<BackendKind>,
    /// Directory holding the SQLite database.
    #[arg(long, env = "MACP_DATA_DIR", global = true)]
    pub data_dir: Option<PathBuf>,
    /// Embedder for semantic search.
    #[arg(long, env = "MACP_EMBEDDER", global = true, value_enum)]
    pub embedder: Option<EmbedderKind>,
    /// Base URL of the OpenAI-compatible endpoint (with `--embedder openai`).
    #[arg(long, env = "MACP_EMBEDDINGS_URL", global = true)]
    pub embeddings_url: Option<String>,
    /// Model name at that endpoint (with `--embedder openai`).
    #[arg(long, env = "MACP_EMBEDDINGS_MODEL", global = true)]
    pub embeddings_model: Option<String>,
    /// Vector size to request (with `--embedder titan`: 256, 512 or 1024).
    #[arg(long, env = "MACP_EMBEDDINGS_DIMENSIONS", global = true)]
    pub embeddings_dimensions: Option<usize>,
    /// A kind of secret not to redact on write (repeatable); every command that writes uses
    /// the same redactor as the server.
    #[arg(long = "redact-off", env = "MACP_REDACT_OFF", value_delimiter = ',', global = true)]
    pub redact_off: Vec<String>,
    /// An extra pattern to redact, `KIND=REGEX` (repeatable).
    #[arg(long = "redact-pattern", global = true)]
    pub redact_patterns: Vec<String>,
}

/// Flags of `macp serve`.
#[derive(Debug, Clone, Args, Default)]
pub struct ServeArgs {
    /// Address to listen on; port 0 picks a free port (the URL is printed).
    #[arg(long, env = "MACP_BIND")]
    pub bind: Option<SocketAddr>,
    /// Extra host names accepted in the Host header (repeatable).
    #[arg(long = "allowed-host", env = "MACP_ALLOWED_HOSTS", value_delimiter = ',')]
    pub allowed_hosts: Vec<String>,
    /// The server's canonical public URL.
    #[arg(long, env = "MACP_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// The user every request acts as while auth is off.
    #[arg(long, env = "MACP_LOCAL_USER")]
    pub local_user: Option<String>,
    /// Seconds between reconciler passes that index findings left pending.
    #[arg(long, env = "MACP_RECONCILE_INTERVAL")]
    pub reconcile_interval: Option<u64>,
    /// Largest artifact upload accepted, in bytes.
    #[arg(long, env = "MACP_ARTIFACT_MAX_BYTES")]
    pub artifact_max_bytes: Option<u64>,
    /// Content types artifacts may have (repeatable; replaces the default list).
    #[arg(long = "artifact-type", env = "MACP_ARTIFACT_TYPES", value_delimiter = ',')]
    pub artifact_types: Vec<String>,
    /// Latest findings in the room context.
    #[arg(long, env = "MACP_CONTEXT_FINDINGS")]
    pub context_findings: Option<usize>,
    /// Best-connected entities in the room context.
    #[arg(long, env = "MACP_CONTEXT_ENTITIES")]
    pub context_entities: Option<usize>,
    /// Most used tags in the room context.
    #[arg(long, env = "MACP_CONTEXT_TAGS")]
    pub context_tags: Option<usize>,
    /// Largest room context, in bytes of JSON.
    #[arg(long, env = "MACP_CONTEXT_BUDGET_BYTES")]
    pub context_budget_bytes: Option<usize>,
    /// Minutes without activity after which an agent shows as stale.
    #[arg(long, env = "MACP_STALE_AFTER_MINUTES")]
    pub stale_after_minutes: Option<u64>,
    /// Findings two agents may address to each other (mentions) with no person acting in the
    /// room in between; 0 for no limit.
    #[arg(long, env = "MACP_MAX_EXCHANGES")]
    pub max_exchanges: Option<usize>,
    /// Days a closed room is kept before it is purged everywhere, for rooms that set no
    /// retention of their own; 0 keeps rooms for good.
    #[arg(long, env = "MACP_RETENTION_DAYS")]
    pub retention_days: Option<u32>,
    /// Serve one local user over stdio instead of HTTP.
    #[arg(long)]
    pub stdio: bool,
    /// OAuth authorization server issuer; turns authentication on.
    #[arg(long, env = "MACP_AUTH_ISSUER")]
    pub auth_issuer: Option<String>,
    /// JWKS URL of the issuer.
    #[arg(long, env = "MACP_AUTH_JWKS_URL")]
    pub auth_jwks_url: Option<String>,
    /// Audience the tokens must carry.
    #[arg(long, env = "MACP_AUTH_AUDIENCE")]
    pub auth_audience: Option<String>,
    /// Claim holding the audience.
    #[arg(long, env = "MACP_AUTH_AUDIENCE_CLAIM")]
    pub auth_audience_claim: Option<String>,
    /// Claim holding the user id recorded on writes.
    #[arg(long, env = "MACP_AUTH_USER_CLAIM")]
    pub auth_user_claim: Option<String>,
    /// Scope allowing read tools.
    #[arg(long, env = "MACP_AUTH_READ_SCOPE")]
    pub auth_read_scope: Option<String>,
    /// Scope allowing write tools.
    #[arg(long, env = "MACP_AUTH_WRITE_SCOPE")]
    pub auth_write_scope: Option<String>,
    /// Seconds of clock skew tolerated on exp / nbf.
    #[arg(long, env = "MACP_AUTH_LEEWAY")]
    pub auth_leeway: Option<u64>,
    /// OAuth public client id the web view signs people in with (code + PKCE, no secret); its
    /// redirect URI is `<public URL>/auth/callback`.
    #[arg(long, env = "MACP_WEB_CLIENT_ID")]
    pub web_client_id: Option<String>,
}

/// The TOML file: every key optional.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// See `--backend`.
    pub backend: Option<BackendKind>,
    /// See `--data-dir`.
    pub data_dir: Option<PathBuf>,
    /// See `--bind`.
    pub bind: Option<SocketAddr>,
    /// See `--allowed-host`.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// See `--public-url`.
    pub public_url: Option<String>,
    /// See `--local-user`.
    pub local_user: Option<String>,
    /// See `--embedder`.
    pub embedder: Option<EmbedderKind>,
    /// See `--embeddings-url`.
    pub embeddings_url: Option<String>,
    /// See `--embeddings-model`.
    pub embeddings_model: Option<String>,
    /// See `--embeddings-dimensions`.
    pub embeddings_dimensions: Option<usize>,
    /// See `--reconcile-interval`.
    pub reconcile_interval: Option<u64>,
    /// See `--artifact-max-bytes`.
    pub artifact_max_bytes: Option<u64>,
    /// See `--artifact-type`.
    #[serde(default)]
    pub artifact_types: Vec<String>,
    /// See `--context-findings`.
    pub context_findings: Option<usize>,
    /// See `--context-entities`.
    pub context_entities: Option<usize>,
    /// See `--context-tags`.
    pub context_tags: Option<usize>,
    /// See `--context-budget-bytes`.
    pub context_budget_bytes: Option<usize>,
    /// See `--stale-after-minutes`.
    pub stale_after_minutes: Option<u64>,
    /// See `--max-exchanges`.
    pub max_exchanges: Option<usize>,
    /// See `--retention-days`.
    pub retention_days: Option<u32>,
    /// See `--redact-off`.
    #[serde(default)]
    pub redact_off: Vec<String>,
    /// See `--redact-pattern`: kind to regular expression.
    #[serde(default)]
    pub redact_patterns: std::collections::BTreeMap<String, String>,
    /// See `--auth-issuer`.
    pub auth_issuer: Option<String>,
    /// See `--auth-jwks-url`.
    pub auth_jwks_url: Option<String>,
    /// See `--auth-audience`.
    pub auth_audience: Option<String>,
    /// See `--auth-audience-claim`.
    pub auth_audience_claim: Option<String>,
    /// See `--auth-user-claim`.
    pub auth_user_claim: Option<String>,
    /// See `--auth-read-scope`.
    pub auth_read_scope: Option<String>,
    /// See `--auth-write-scope`.
    pub auth_write_scope: Option<String>,
    /// See `--auth-leeway`.
    pub auth_leeway: Option<u64>,
    /// See `--web-client-id`.
    pub web_client_id: Option<String>,
}

impl FileConfig {
    /// Reads the file, or the default when `path` is `None`.
    pub fn load(path: Option<&Path>) -> Result<Self, String> {
        let Some(p) = path else { return Ok(Self::default()) };
        let text = std::fs::read_to_string(p)
            .map_err(|e| format!("cannot read config file {}: {e}", p.display()))?;
        toml::from_str(&text).map_err(|e| format!("invalid config file {}: {e}", p.display()))
    }
}

/// Everything `macp` needs to open the service, resolved.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// Backend.
    pub backend: BackendKind,
    /// Data directory.
    pub data_dir: PathBuf,
    /// Embedder choice.
    pub embedder: EmbedderKind,
    /// OpenAI-compatible endpoint.
    pub embeddings_url: Option<String>,
    /// Model at that endpoint.
    pub embeddings_model: Option<String>,
    /// Vector size requested from embedders that offer several (Titan: 256 when unset; an
    /// OpenAI-compatible model: its own size when unset); the built-in model accepts only 256.
    pub embeddings_dimensions: Option<usize>,
    /// Listen address.
    pub bind: SocketAddr,
    /// Extra allowed hosts.
    pub allowed_hosts: Vec<String>,
    /// Public URL, if configured.
    pub public_url: Option<String>,
    /// Local user while auth is off.
    pub local_user: String,
    /// Reconciler period in seconds.
    pub reconcile_interval: u64,
    /// Artifact limits.
    pub artifacts: macp_core::service::ArtifactConfig,
    /// The room context's caps.
    pub context_caps: macp_core::ContextCaps,
    /// When an agent shows as stale.
    pub stale_after: std::time::Duration,
    /// The directed exchange budget (see [`macp_core::Limits::max_exchanges`]).
    pub max_exchanges: usize,
    /// Days a closed room is kept (0: for good), for rooms without their own.
    pub retention_days: u32,
    /// The redactor every write passes (see [`macp_core::redact`]).
    pub redactor: macp_core::redact::Redactor,
    /// OAuth settings when an issuer is configured; `resource` is empty until `macp serve`
    /// knows its public URL.
    pub auth: Option<crate::auth::AuthConfig>,
}

impl Resolved {
    /// Applies flag > environment (both via clap) > file > default.
    pub fn new(common: &CommonArgs, serve: &ServeArgs) -> Result<Self, String> {
        let file = FileConfig::load(common.config.as_deref())?;
        let issuer = serve.auth_issuer.is_some() || file.auth_issuer.is_some();
        if !issuer && (serve.web_client_id.is_some() || file.web_client_id.is_some()) {
            return Err("--web-client-id needs --auth-issuer: people sign in at the agents' issuer".into());
        }
        Ok(Self {
            backend: common.backend.or(file.backend).unwrap_or_default(),
            data_dir: common.data_dir.clone().or(file.data_dir).unwrap_or_else(macp_local::default_data_dir),
            embedder: common.embedder.or(file.embedder).unwrap_or_default(),
            embeddings_url: common.embeddings_url.clone().or(file.embeddings_url),
            embeddings_model: common.embeddings_model.clone().or(file.embeddings_model),
            embeddings_dimensions: common.embeddings_dimensions.or(file.embeddings_dimensions),
            bind: serve.bind.or(file.bind).unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 8765))),
            allowed_hosts: if serve.allowed_hosts.is_empty() {
                file.allowed_hosts
            } else {
                serve.allowed_hosts.clone()
            },
            public_url: serve.public_url.clone().or(file.public_url),
            local_user: serve
                .local_user
                .clone()
                .or(file.local_user)
                .or_else(|| std::env::var("USER").ok().filter(|u| !u.is_empty()))
                .unwrap_or_else(|| "local".to_owned()),
            reconcile_interval: serve.reconcile_interval.or(file.reconcile_interval).unwrap_or(30).max(1),
            artifacts: {
                let mut a = macp_core::service::ArtifactConfig::default();
                if let Some(n) = serve.artifact_max_bytes.or(file.artifact_max_bytes) {
                    if n == 0 {
                        return Err("--artifact-max-bytes must be at least 1".into());
                    }
                    a.max_bytes = n;
                }
                let types = if serve.artifact_types.is_empty() {
                    file.artifact_types
                } else {
                    serve.artifact_types.clone()
                };
                if !types.is_empty() {
                    a = a.with_content_types(&types).map_err(|e| format!("--artifact-type: {e}"))?;
                }
                a
            },
            context_caps: {
                let mut c = macp_core::ContextCaps::default();
                let set = |flag: &str, v: Option<usize>, to: &mut usize| -> Result<(), String> {
                    match v {
                        Some(0) => Err(format!("--{flag} must be at least 1")),
                        Some(n) => {
                            *to = n;
                            Ok(())
                        }
                        None => Ok(()),
                    }
                };
                set("context-findings", serve.context_findings.or(file.context_findings), &mut c.findings)?;
                set("context-entities", serve.context_entities.or(file.context_entities), &mut c.entities)?;
                set("context-tags", serve.context_tags.or(file.context_tags), &mut c.tags)?;
                set(
                    "context-budget-bytes",
                    serve.context_budget_bytes.or(file.context_budget_bytes),
                    &mut c.budget_bytes,
                )?;
                c
            },
            stale_after: match serve.stale_after_minutes.or(file.stale_after_minutes) {
                Some(0) => return Err("--stale-after-minutes must be at least 1".into()),
                Some(m) => std::time::Duration::from_secs(m * 60),
                None => macp_core::service::DEFAULT_STALE_AFTER,
            },
            redactor: {
                let mut r = macp_core::redact::Redactor::new();
                let off =
                    if common.redact_off.is_empty() { file.redact_off } else { common.redact_off.clone() };
                for kind in off {
                    r = r.disable(kind.trim()).map_err(|e| format!("--redact-off: {e}"))?;
                }
                let mut patterns: Vec<(String, String)> = file.redact_patterns.into_iter().collect();
                for p in &common.redact_patterns {
                    let (kind, re) = p.split_once('=').ok_or_else(|| {
                        format!("--redact-pattern `{p}`: write KIND=REGEX, e.g. employee-id=E[0-9]{{6}}")
                    })?;
                    patterns.push((kind.to_owned(), re.to_owned()));
                }
                for (kind, re) in patterns {
                    r = r.pattern(&kind, &re).map_err(|e| format!("--redact-pattern: {e}"))?;
                }
                r
            },
            retention_days: match serve.retention_days.or(file.retention_days).unwrap_or(0) {
                d if d > macp_core::service::MAX_RETENTION_DAYS => {
                    return Err(format!(
                        "--retention-days {d} is longer than the longest retention, {} days",
                        macp_core::service::MAX_RETENTION_DAYS
                    ));
                }
                d => d,
            },
            max_exchanges: serve
                .max_exchanges
                .or(file.max_exchanges)
                .unwrap_or(macp_core::Limits::default().max_exchanges),
            auth: match serve.auth_issuer.clone().or(file.auth_issuer) {
                None => None,
                Some(issuer) => {
                    // Kept exactly as given: `iss` must match it character for character
                    // (Auth0's ends in `/`, Cognito's does not).
                    let audience = serve.auth_audience.clone().or(file.auth_audience).ok_or_else(|| {
                        "--auth-issuer needs --auth-audience (MACP_AUTH_AUDIENCE): the audience value this \
                         server's tokens carry, e.g. the Cognito app client id"
                            .to_owned()
                    })?;
                    Some(crate::auth::AuthConfig {
                        jwks_url: serve.auth_jwks_url.clone().or(file.auth_jwks_url),
                        issuer,
                        audience,
                        audience_claim: serve
                            .auth_audience_claim
                            .clone()
                            .or(file.auth_audience_claim)
                            .unwrap_or_else(|| "aud".into()),
                        user_claim: serve
                            .auth_user_claim
                            .clone()
                            .or(file.auth_user_claim)
                            .unwrap_or_else(|| "sub".into()),
                        read_scope: serve.auth_read_scope.clone().or(file.auth_read_scope),
                        write_scope: serve.auth_write_scope.clone().or(file.auth_write_scope),
                        leeway: std::time::Duration::from_secs(
                            serve.auth_leeway.or(file.auth_leeway).unwrap_or(30),
                        ),
                        min_refresh: std::time::Duration::from_secs(30),
                        max_age: std::time::Duration::from_secs(3600),
                        resource: String::new(),
                        web_client_id: serve.web_client_id.clone().or(file.web_client_id),
                    })
                }
            },
        })
    }
}
