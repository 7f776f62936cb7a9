//! # macp-mcp
//!
//! The MCP server of MACP: a thin adapter that maps each of the design's tools to one call on
//! [`macp_core::Macp`], over Streamable HTTP (`/mcp`, [`http`]) or stdio. Tool names, argument
//! names and result fields are a contract; see [`args`] and the `macp_core` result types.
//!
//! ```no_run
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use macp_core::{Macp, Principal, memory::MemoryStore};
//! use macp_mcp::MacpMcp;
//! use rmcp::ServiceExt;
//!
//! let macp = Macp::builder().store(Arc::new(MemoryStore::new())).build()?;
//! // One local user over stdio:
//! let server = MacpMcp::new(macp, Some(Principal::new("me")?));
//! server.serve(rmcp::transport::stdio()).await?.waiting().await?;
//! # Ok(()) }
//! ```

pub mod args;
pub mod auth;
pub mod config;
pub mod docs;
pub mod http;
pub mod server;

pub use server::{Authenticated, MacpMcp, tool_error};
