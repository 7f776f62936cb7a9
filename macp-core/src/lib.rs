//! # macp-core
//!
//! The domain core of MACP, the Multi-Agent Collaboration Platform: several people, each
//! driving their own AI agent, work one investigation together in a shared *room* — a stated
//! objective, findings with tags, evidence and entity references, a timeline with cursor-based
//! updates, an entity graph with identifier-based resolution and lazy merges, artifact metadata,
//! and advisory agent status.
//!
//! This crate holds every domain rule once:
//! - [`model`]: the records (rooms, agent sessions, findings, entities, relationships,
//!   artifacts), with the design's field names.
//! - [`store`]: the storage seam — small `#[async_trait]` traits with a written contract per
//!   method — and [`Capabilities`].
//! - [`Macp`]: the service an SDK user builds with [`Macp::builder`]; one method per MCP tool.
//! - [`Error`]: one error type with stable codes and a retryable flag.
//! - [`memory::MemoryStore`] (feature `memory`): the in-memory reference backend.
//!
//! Backends (`macp-local` for SQLite, `macp-aws`) only store and fetch; `macp-testkit` proves
//! they do it right.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> macp_core::Result<()> {
//! use std::sync::Arc;
//! use macp_core::{Macp, Principal, memory::MemoryStore};
//! use macp_core::model::EntityType;
//! use macp_core::service::{AddEntity, CreateRoom, JoinRoom, UpdatesQuery};
//!
//! let macp = Macp::builder().store(Arc::new(MemoryStore::new())).build()?;
//! let (alice, bob) = (Principal::new("alice")?, Principal::new("bob")?);
//! let room = macp.create_room(&alice, CreateRoom::new("Why did checkout fail at 09:40?")).await?;
//! let a = macp.join_room(&alice, JoinRoom::new(room.room_id)).await?;
//! let b = macp.join_room(&bob, JoinRoom::new(room.room_id)).await?;
//!
//! // Two agents name the same host: they converge on one entity.
//! let one = macp.add_entity(&alice, AddEntity::new(room.room_id, a.agent_id.clone(), "web-1", EntityType::Resource)
//!     .identifier("hostname", "web-1.prod")).await?;
//! let two = macp.add_entity(&bob, AddEntity::new(room.room_id, b.agent_id.clone(), "Web 1", EntityType::Resource)
//!     .identifier("hostname", "WEB-1.prod.")).await?;
//! assert_eq!(one.entity.entity_id, two.entity.entity_id);
//! assert!(!two.created);
//!
//! let updates = macp.updates(&bob, UpdatesQuery::new(room.room_id)).await?;
//! assert!(updates.findings.is_empty());
//! # Ok(()) }
//! ```

pub mod blob;
pub mod cursor;
pub mod error;
pub mod ids;
pub mod limits;
#[cfg(feature = "memory")]
pub mod memory;
pub mod model;
pub mod redact;
pub mod search;
pub mod service;
pub mod store;
pub mod validate;

pub use error::{Error, ErrorBody, Result};
pub use ids::{AgentId, ArtifactId, DecisionId, EntityId, FindingId, RoomId, Timestamp, UserId};
pub use limits::{ContextCaps, Limits};
pub use service::{Clock, Macp, MacpBuilder, Principal, SystemClock};
pub use store::{Capabilities, Store};
