//! An acknowledged write survives the process being killed.
//!
//! The parent test re-runs this test binary as a child that posts findings on the default
//! (`Full`) durability and prints each acknowledgement; the parent SIGKILLs it mid-stream,
//! reopens the database and checks that every acknowledged finding is there, in an unbroken
//! sequence.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;

use macp_core::service::{CreateRoom, JoinRoom, PostFinding, TimelineQuery};
use macp_core::{Macp, Principal, RoomId};
use macp_local::SqliteStore;

const CHILD_ENV: &str = "MACP_DURABILITY_CHILD_DIR";

/// In the child: post findings forever, printing `ACK <room> <finding_id>` after each.
#[tokio::test]
async fn child_writer() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else { return };
    let macp = Macp::builder().store(Arc::new(SqliteStore::open(dir).unwrap())).build().unwrap();
    let me = Principal::new("child").unwrap();
    let room = macp.create_room(&me, CreateRoom::new("durability")).await.unwrap().room_id;
    let agent = macp.join_room(&me, JoinRoom::new(room)).await.unwrap().agent_id;
    for i in 0u64.. {
        let p = macp
            .post_finding(&me, PostFinding::new(room, agent.clone(), format!("finding {i}")))
            .await
            .unwrap();
        println!("ACK {room} {}", p.finding.finding_id);
    }
}

#[tokio::test]
async fn acknowledged_findings_survive_sigkill() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_writer", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut acked = Vec::new();
    let mut room = None;
    while acked.len() < 60 {
        let line = lines.next().expect("child ended early").unwrap();
        if let Some(rest) = line.strip_prefix("ACK ") {
            let (r, id) = rest.split_once(' ').unwrap();
            room = Some(r.parse::<RoomId>().unwrap());
            acked.push(id.to_owned());
        }
    }
    child.kill().unwrap(); // SIGKILL: no destructors, no checkpoint, no graceful close
    child.wait().unwrap();

    let room = room.unwrap();
    let macp = Macp::builder().store(Arc::new(SqliteStore::open(dir.path()).unwrap())).build().unwrap();
    let me = Principal::new("parent").unwrap();
    let mut stored = Vec::new();
    let mut cursor = None;
    loop {
        let page = macp
            .timeline(&me, TimelineQuery { limit: Some(200), cursor, ..TimelineQuery::new(room) })
            .await
            .unwrap();
        stored.extend(page.findings);
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    let ids: Vec<String> = stored.iter().map(|f| f.finding_id.to_string()).collect();
    for id in &acked {
        assert!(ids.contains(id), "acknowledged finding {id} was lost");
    }
    assert!(stored.iter().enumerate().all(|(i, f)| f.seq == i as u64 + 1), "sequence has no holes");
}
