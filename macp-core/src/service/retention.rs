//! Retention: a closed room is kept for its `retention_days` (or the server's default), then
//! purged everywhere — records, keyword and vector indexes, artifact files, claims, identifiers.
//!
//! Why from closing: an open room is an investigation in progress, and must not vanish under the
//! people working it; once it is closed, its record is a postmortem archive whose lifetime the
//! organisation chooses. Reopening a room stops its clock; closing it again starts it anew.
//! A retention of 0 keeps a room for good (a hold), whatever the server's default.

use serde::Serialize;

use super::*;
use crate::model::{Room, RoomStatus};
use crate::store::{FindingQuery, RoomKey};

/// What [`Macp::purge_expired`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PurgeReport {
    /// Rooms purged.
    pub rooms: Vec<RoomId>,
    /// Findings whose vectors were deleted.
    pub findings: u64,
    /// Artifact objects deleted.
    pub objects: u64,
    /// Rooms whose purge failed, with why: tried again on the next run.
    pub failed: Vec<(RoomId, String)>,
    /// Expired protocol sessions deleted (see [`Macp::session`]).
    pub sessions: u64,
}

const MS_PER_DAY: i64 = 24 * 60 * 60 * 1000;

impl Macp {
    /// When `room` is purged: `retention_days` (or the server's default) after it was closed;
    /// `None` while it is open or when it is kept for good.
    pub fn expires_at(&self, room: &Room) -> Option<Timestamp> {
        let days = room.retention_days.unwrap_or(self.inner.retention_days);
        match (room.status, room.closed_at) {
            (RoomStatus::Closed, Some(closed)) if days > 0 => {
                Some(closed.plus_millis(i64::from(days) * MS_PER_DAY))
            }
            _ => None,
        }
    }

    /// Purges every closed room whose retention has run out (see [`Macp::expires_at`]). A server
    /// runs it periodically; it is safe to run from several servers at once. Expired protocol
    /// sessions go too.
    pub async fn purge_expired(&self) -> Result<PurgeReport> {
        let now = self.now();
        let mut report = PurgeReport { sessions: self.purge_sessions().await?, ..Default::default() };
        let mut after: Option<RoomKey> = None;
        loop {
            let page = self.inner.store.list_rooms(Some(RoomStatus::Closed), after, 200).await?;
            let Some(last) = page.last() else { break };
            after = Some(RoomKey { created_at: last.created_at, room_id: last.room_id });
            let done = page.len() < 200;
            for room in page {
                if self.expires_at(&room).is_none_or(|t| t > now) {
                    continue;
                }
                // Read again just before: a hold or a reopen placed since the listing wins.
                let fresh = self.inner.store.get_room(room.room_id).await?;
                if fresh.is_none_or(|r| self.expires_at(&r).is_none_or(|t| t > now)) {
                    continue;
                }
                // One room's failure does not keep the others.
                match self.purge_room(room.room_id).await {
                    Ok((findings, objects)) => {
                        report.rooms.push(room.room_id);
                        report.findings += findings;
                        report.objects += objects;
                    }
                    Err(e) => report.failed.push((room.room_id, e.to_string())),
                }
            }
            if done {
                break;
            }
        }
        Ok(report)
    }

    /// Purges one room everywhere: its vectors, its artifact files, then every record. Returns
    /// how many findings' vectors and how many objects went.
    async fn purge_room(&self, room_id: RoomId) -> Result<(u64, u64)> {
        let mut findings = 0;
        if let Some(s) = &self.inner.search {
            let mut after = 0;
            loop {
                let page = self.inner.store.list_findings(room_id, &FindingQuery::after(after, 500)).await?;
                let Some(last) = page.last() else { break };
                after = last.seq;
                let ids: Vec<_> = page.iter().map(|f| f.finding_id).collect();
                s.index.delete(room_id, &ids).await?;
                findings += ids.len() as u64;
            }
        }
        let objects = match &self.inner.blobs {
            Some(b) => b.delete_prefix(&super::artifacts::room_prefix(room_id)).await?,
            None => 0,
        };
        self.inner.store.purge_room(room_id).await?;
        self.changed(room_id);
        Ok((findings, objects))
    }
}
