//! The store traits of `macp_core::store` on DynamoDB, one file per domain.

mod agents;
mod artifacts;
mod claims;
mod decisions;
mod entities;
mod events;
mod findings;
mod restore;
mod rooms;
mod search;
mod sessions;

use macp_core::store::{Capabilities, Store};

use crate::AwsBackend;

impl Store for AwsBackend {
    fn name(&self) -> &'static str {
        "aws"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::none().with_durable(true).with_shared_across_processes(true)
    }
}
