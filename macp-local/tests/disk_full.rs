//! A full disk: writes fail with a retryable `backend` error that says so, nothing acknowledged
//! is lost, the database stays consistent, and writes succeed again once there is room.
//!
//! The data directory is a size-limited tmpfs the test mounts, which needs root, so the test is
//! ignored by a plain `cargo test`; `scripts/test.sh` runs it with `--ignored` when it runs as
//! root (as CI does) and says so when it cannot.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use macp_core::service::{CreateRoom, JoinRoom, PostFinding, TimelineQuery};
use macp_core::{AgentId, Macp, Principal};
use macp_local::SqliteStore;

/// Unmounts on drop, whatever happens in the test.
struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn mount(dir: &Path, size: &str) -> Mounted {
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700"), "tmpfs"])
        .arg(dir)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "cannot mount a tmpfs on {} (this test needs root)", dir.display());
    Mounted(dir.to_owned())
}

fn remount(dir: &Path, size: &str) {
    let ok = Command::new("mount")
        .args(["-o", &format!("remount,size={size}")])
        .arg(dir)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "cannot grow the tmpfs on {}", dir.display());
}

async fn timeline_ids(macp: &Macp, who: &Principal, room: macp_core::RoomId) -> Vec<String> {
    let mut ids = Vec::new();
    let mut cursor = None;
    loop {
        let page = macp
            .timeline(who, TimelineQuery { limit: Some(200), cursor, ..TimelineQuery::new(room) })
            .await
            .unwrap();
        ids.extend(page.findings.iter().map(|f| f.finding_id.to_string()));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => return ids,
        }
    }
}

#[test]
#[ignore = "needs root to mount a size-limited tmpfs; scripts/test.sh runs it with --ignored as root"]
fn a_full_disk_fails_writes_retryably_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let _mounted = mount(dir.path(), "6m");
    let data = dir.path().join("data");
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let who = Principal::new("ana").unwrap();
        let (room, acked) = {
            let macp = Macp::builder().store(Arc::new(SqliteStore::open(&data).unwrap())).build().unwrap();
            let room = macp.create_room(&who, CreateRoom::new("fill the disk")).await.unwrap().room_id;
            let agent = AgentId::new("filler").unwrap();
            macp.join_room(&who, JoinRoom::new(room).agent(agent.clone())).await.unwrap();
            let mut acked = Vec::new();
            let mut failure = None;
            for i in 0..100_000 {
                let content = format!("finding {i}: {}", "x".repeat(4000));
                match macp.post_finding(&who, PostFinding::new(room, agent.clone(), content)).await {
                    Ok(p) => acked.push(p.finding.finding_id.to_string()),
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                }
            }
            let e = failure.expect("a 6 MiB disk fills up");
            assert_eq!(e.code(), "backend", "{e}");
            assert!(e.is_retryable(), "a full disk is retryable: {e}");
            assert!(e.to_string().contains("disk") && e.to_string().contains("full"), "{e}");
            // Still full: the next write fails the same way, and the reads still work.
            let again =
                macp.post_finding(&who, PostFinding::new(room, agent.clone(), "x".repeat(4000))).await;
            assert!(again.as_ref().is_err_and(|e| e.is_retryable()), "{again:?}");
            assert_eq!(timeline_ids(&macp, &who, room).await, acked, "every acknowledged finding, in order");
            (room, acked)
        };
        assert!(acked.len() > 100, "the disk held {} findings before it filled", acked.len());

        // Consistent on disk: a fresh connection finds an intact database with exactly what was
        // acknowledged.
        let check = rusqlite::Connection::open(data.join(macp_local::DB_FILE)).unwrap();
        let integrity: String = check.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
        assert_eq!(integrity, "ok");
        drop(check);

        // Room again: writes succeed, and nothing before was lost.
        remount(dir.path(), "64m");
        let macp = Macp::builder().store(Arc::new(SqliteStore::open(&data).unwrap())).build().unwrap();
        let agent = AgentId::new("filler").unwrap();
        let after =
            macp.post_finding(&who, PostFinding::new(room, agent, "written once there is room")).await;
        let after = after.unwrap_or_else(|e| panic!("writes succeed again once space returns: {e}"));
        let mut want = acked.clone();
        want.push(after.finding.finding_id.to_string());
        assert_eq!(timeline_ids(&macp, &who, room).await, want);
    });
}
