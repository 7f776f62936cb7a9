//! # macp-mcp
//!
//! The MCP server of MACP: a thin adapter that maps each of the design's tools to one call on
//! [`macp_core::Macp`], over Streamable HTTP (`/mcp`, [`http`]) or stdio. Tool names, argument
//! names and result fields are a contract; each tool's input is the
//! `macp_core::service` request type it names, and its result is the matching `macp_core` type.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use macp_core::{Macp, Principal, memory::MemoryStore};
//! use macp_mcp::MacpMcp;
//! use rmcp::ServiceExt;
//! use rmcp::model::CallToolRequestParams;
//!
//! let macp = Macp::builder().store(Arc::new(MemoryStore::new())).build()?;
//! let server = MacpMcp::new(macp, Some(Principal::new("me")?)); // one local user, auth off
//!
//! // Serve over any byte stream: `rmcp::transport::stdio()` for `macp serve --stdio`, an
//! // in-memory pipe here, with an rmcp client on the other end.
//! let (server_io, client_io) = tokio::io::duplex(1 << 16);
//! tokio::spawn(async move {
//!     if let Ok(running) = server.serve(server_io).await {
//!         let _ = running.waiting().await;
//!     }
//! });
//! let client = ().serve(client_io).await?;
//! let args = serde_json::json!({"objective": "Find why checkout returns 502s"});
//! let room = client
//!     .call_tool(CallToolRequestParams::new("create_room").with_arguments(args.as_object().unwrap().clone()))
//!     .await?;
//! assert!(room.structured_content.unwrap()["room_id"].is_string());
//! # Ok(()) }
//! ```

pub mod access;
pub mod auth;
/// The `macp` binary's configuration: flags, environment and TOML, resolved. It names the local
/// backend's data directory, so it comes with the `local` feature; the adapter modules need no
/// backend.
#[cfg(feature = "local")]
pub mod config;
pub mod docs;
pub mod hook;
pub mod http;
pub mod push;
pub mod remote;
pub mod serve;
pub mod server;
pub mod sessions;
pub mod signin;
pub mod web;

pub use server::{Authenticated, MacpMcp, tool_error};
