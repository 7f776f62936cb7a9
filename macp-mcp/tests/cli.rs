//! The `macp` binary refuses unsafe or incomplete configurations at start, with a message that
//! says what to do, and prints the URL it listens on.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn macp() -> Command {
    Command::new(env!("CARGO_BIN_EXE_macp"))
}

/// Runs `macp ARGS --data-dir <fresh dir>`, which must fail; its stderr.
fn refused_at_start(args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let out = macp().args(args).arg("--data-dir").arg(dir.path()).output().unwrap();
    assert!(!out.status.success(), "{args:?} should be refused");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Starts `macp serve` on a free loopback port over `dir`; the child and its first stdout line.
fn serving(dir: &std::path::Path) -> (std::process::Child, String) {
    let mut child = macp()
        .args(["serve", "--bind", "127.0.0.1:0", "--embedder", "none"])
        .arg("--data-dir")
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    (child, first)
}

#[test]
fn a_non_loopback_bind_without_auth_is_refused() {
    let err = refused_at_start(&["serve", "--bind", "0.0.0.0:0", "--embedder", "none"]);
    assert!(err.contains("without authentication") && err.contains("--auth-issuer"), "{err}");
}

#[test]
fn an_issuer_without_an_audience_is_refused() {
    let err =
        refused_at_start(&["serve", "--bind", "127.0.0.1:0", "--auth-issuer", "https://idp.example.test"]);
    assert!(err.contains("--auth-audience"), "{err}");
}

#[test]
fn a_web_client_without_an_issuer_is_refused() {
    let err = refused_at_start(&["serve", "--bind", "127.0.0.1:0", "--web-client-id", "macp-web"]);
    assert!(err.contains("--web-client-id needs --auth-issuer"), "{err}");
}

#[test]
fn auth_on_an_unspecified_address_needs_a_public_url() {
    let err = refused_at_start(&[
        "serve",
        "--bind",
        "0.0.0.0:0",
        "--embedder",
        "none",
        "--auth-issuer",
        "https://idp.example.test",
        "--auth-audience",
        "macp",
    ]);
    assert!(err.contains("--public-url"), "{err}");
}

/// A second process that would index the same data directory is refused while a server holds
/// it (each keeps its indexes in memory); read-only commands still work.
#[test]
fn a_data_directory_is_indexed_by_one_process_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, line) = serving(dir.path());
    assert!(line.contains("listening on"), "{line}");
    for cmd in [&["reconcile"][..], &["serve", "--bind", "127.0.0.1:0"][..]] {
        let out = macp().args(cmd).arg("--data-dir").arg(dir.path()).output().unwrap();
        assert!(!out.status.success(), "{cmd:?} must be refused");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("another macp process"), "{cmd:?}: {err}");
    }
    let rooms = macp().args(["rooms"]).arg("--data-dir").arg(dir.path()).output().unwrap();
    assert!(rooms.status.success(), "{}", String::from_utf8_lossy(&rooms.stderr));
    server.kill().unwrap();
    server.wait().unwrap();
    let out =
        macp().args(["reconcile", "--embedder", "none"]).arg("--data-dir").arg(dir.path()).output().unwrap();
    assert!(
        out.status.success(),
        "free again once the server is gone: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_builtin_model_refuses_another_dimension_instead_of_ignoring_it() {
    let err = refused_at_start(&["serve", "--bind", "127.0.0.1:0", "--embeddings-dimensions", "384"]);
    assert!(err.contains("384") && err.contains("256 dimensions"), "{err}");
}

#[test]
fn port_zero_prints_the_full_url_then_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, first) = serving(dir.path());
    assert!(
        first.starts_with("listening on http://127.0.0.1:") && first.trim_end().ends_with("/mcp"),
        "{first}"
    );
    let port: u16 = first.trim_end().trim_end_matches("/mcp").rsplit(':').next().unwrap().parse().unwrap();
    assert_ne!(port, 0);
    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let status = child.wait().unwrap();
    assert!(status.success(), "graceful exit on SIGTERM: {status}");
}

/// The served binary answers many calls on one kept-alive connection without the 40 ms stall of
/// Nagle's algorithm meeting a delayed acknowledgement (which a fresh connection per request,
/// as curl makes, never shows).
#[test]
fn serve_answers_calls_on_one_kept_alive_connection_without_stalling() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, first) = serving(dir.path());
    let addr = first.trim().trim_start_matches("listening on http://").trim_end_matches("/mcp").to_owned();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let per_call = rt.block_on(async {
        let mut raw = common::Raw::connect(&addr).await;
        let session = common::open_session(&mut raw).await;
        let calls = 40u32;
        let started = Instant::now();
        for i in 0..calls {
            let call = serde_json::json!({"jsonrpc": "2.0", "id": 10 + i, "method": "tools/call",
                "params": {"name": "list_rooms", "arguments": {}}});
            let a = raw
                .request("POST", "/mcp", &common::mcp_headers(Some(&session)), call.to_string().as_bytes())
                .await
                .unwrap();
            assert_eq!(a.status, 200);
            assert_eq!(common::message(&a)["id"], 10 + i);
        }
        started.elapsed() / calls
    });
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(per_call < Duration::from_millis(15), "{per_call:?} per call on a kept-alive connection");
}

/// `macp backup` while eight agents write through the server: the backup opens, passes an
/// integrity check, and holds every finding acknowledged before the backup began.
#[test]
fn backup_while_eight_agents_write_holds_everything_acknowledged_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, first) = serving(dir.path());
    let addr = first.trim().trim_start_matches("listening on http://").trim_end_matches("/mcp").to_owned();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let acked = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let room = rt.block_on(async {
        let mut raw = common::Raw::connect(&addr).await;
        let session = common::open_session(&mut raw).await;
        let call = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "create_room", "arguments": {"objective": "backup under load"}}});
        let a = raw
            .request("POST", "/mcp", &common::mcp_headers(Some(&session)), call.to_string().as_bytes())
            .await
            .unwrap();
        common::message(&a)["result"]["structuredContent"]["room_id"].as_str().unwrap().to_owned()
    });
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let (addr, room, acked, stop) = (addr.clone(), room.clone(), acked.clone(), stop.clone());
            rt.spawn(async move {
                let mut raw = common::Raw::connect(&addr).await;
                let session = common::open_session(&mut raw).await;
                let h = common::mcp_headers(Some(&session));
                let join = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                    "params": {"name": "join_room", "arguments": {"room_id": room, "agent_id": format!("writer-{w}")}}});
                raw.request("POST", "/mcp", &h, join.to_string().as_bytes()).await.unwrap();
                let mut i = 0u64;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    i += 1;
                    let post = serde_json::json!({"jsonrpc": "2.0", "id": 10 + i, "method": "tools/call",
                        "params": {"name": "post_finding", "arguments": {"room_id": room,
                            "content": format!("writer {w} finding {i}: orders-db pool at {i}%")}}});
                    let a = raw.request("POST", "/mcp", &h, post.to_string().as_bytes()).await.unwrap();
                    let m = common::message(&a);
                    let id = m["result"]["structuredContent"]["finding"]["finding_id"].as_str().unwrap().to_owned();
                    acked.lock().unwrap().push(id);
                }
            })
        })
        .collect();
    // Let the writers get going, then back up while they keep writing.
    while acked.lock().unwrap().len() < 400 {
        std::thread::sleep(Duration::from_millis(20));
    }
    let before: Vec<String> = acked.lock().unwrap().clone();
    let dest = tempfile::tempdir().unwrap();
    let backup = dest.path().join("copy");
    let out = macp().arg("backup").arg(&backup).arg("--data-dir").arg(dir.path()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for w in writers {
        rt.block_on(w).unwrap();
    }
    let after = acked.lock().unwrap().len();
    assert!(after > before.len(), "the agents kept writing during the backup");
    server.kill().unwrap();
    server.wait().unwrap();

    let db = rusqlite::Connection::open(backup.join("macp.db")).unwrap();
    let integrity: String = db.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
    assert_eq!(integrity, "ok");
    let mut stmt = db.prepare("SELECT finding_id FROM findings").unwrap();
    let held: std::collections::HashSet<String> =
        stmt.query_map([], |r| r.get::<_, String>(0)).unwrap().map(|r| r.unwrap()).collect();
    let missing = before.iter().filter(|id| !held.contains(*id)).count();
    assert_eq!(
        missing,
        0,
        "{missing} of {} findings acknowledged before the backup are not in it",
        before.len()
    );
}

/// A room-context budget too small to hold a room at the input limits is refused at start,
/// with the smallest that works.
#[test]
fn a_context_budget_that_cannot_hold_a_room_is_refused() {
    let err = refused_at_start(&[
        "serve",
        "--bind",
        "127.0.0.1:0",
        "--embedder",
        "none",
        "--context-budget-bytes",
        "100",
    ]);
    assert!(err.contains("budget must be at least"), "{err}");
}

/// The bundle's record and bytes, without when and where it was written.
/// `macp import -` into `dir`, given `input` on standard input.
fn import_from_stdin(dir: &std::path::Path, input: &[u8]) -> std::process::Output {
    let mut import = macp()
        .args(["import", "-", "--data-dir"])
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // It may stop reading at the first thing it cannot parse: a broken pipe here is fine.
    let _ = std::io::Write::write_all(&mut import.stdin.take().unwrap(), input);
    import.wait_with_output().unwrap()
}

fn bundle_body(path: &std::path::Path) -> serde_json::Value {
    body_of(&std::fs::read(path).unwrap())
}

/// [`bundle_body`] of a bundle's bytes.
fn body_of(bytes: &[u8]) -> serde_json::Value {
    let mut v: serde_json::Value = serde_json::from_slice(bytes).unwrap();
    let o = v.as_object_mut().unwrap();
    o.remove("exported_at");
    o.remove("exported_from");
    v
}

/// `macp export` writes a room's bundle, readable by its owner alone; `macp import` restores it
/// in another data directory, indexed for search, where exporting again gives the same record
/// and bytes; importing it twice is refused, and so is a file that is not a bundle.
#[test]
fn export_then_import_moves_a_room_between_data_directories() {
    let (from, to) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let pool = common::Upload {
        filename: "pool.txt".into(),
        content_type: "text/plain",
        bytes: b"pool dump".to_vec(),
        description: Some("the pool".into()),
    };
    let room = common::local_room(
        from.path(),
        "moved by the command line",
        "orders-db-1 refuses connections at 500",
        vec![pool],
    );
    let files = tempfile::tempdir().unwrap();
    let (first, again) = (files.path().join("room.json"), files.path().join("again.json"));
    let out = macp()
        .args(["export", &room, "--out"])
        .arg(&first)
        .arg("--data-dir")
        .arg(from.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&first).unwrap().permissions().mode() & 0o777, 0o600);
    }
    let out = macp().arg("import").arg(&first).arg("--data-dir").arg(to.path()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("1 findings (1 indexed)") && said.contains("1 artifact objects"), "{said}");
    let out = macp()
        .args(["export", &room, "--out"])
        .arg(&again)
        .arg("--data-dir")
        .arg(to.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(bundle_body(&again), bundle_body(&first), "the room is not the same after the move");
    let out =
        macp().args(["search", &room, "connections"]).arg("--data-dir").arg(to.path()).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("orders-db-1"), "the moved room is not searchable");

    let out = macp().arg("import").arg(&first).arg("--data-dir").arg(to.path()).output().unwrap();
    assert!(!out.status.success(), "a second import of the same room is refused");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("already exists"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The same through standard output and standard input.
    let out =
        macp().args(["export", &room, "--out", "-"]).arg("--data-dir").arg(from.path()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(body_of(&out.stdout), bundle_body(&first), "an export to standard output differs");
    let third = tempfile::tempdir().unwrap();
    let done = import_from_stdin(third.path(), &out.stdout);
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    assert!(String::from_utf8_lossy(&done.stdout).contains("1 artifact objects"));

    // A bundle of a newer version names itself as such.
    let mut newer = body_of(&std::fs::read(&first).unwrap());
    newer["version"] = 2.into();
    let newer_file = files.path().join("newer.json");
    std::fs::write(&newer_file, serde_json::to_vec(&newer).unwrap()).unwrap();
    let fresh = tempfile::tempdir().unwrap();
    let out = macp().arg("import").arg(&newer_file).arg("--data-dir").arg(fresh.path()).output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("newer macp"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // One whose shape this build cannot parse says the same from its head: all of a file
    // (here the keys are sorted, so `version` comes after the whole record), and the first part
    // of standard input, which cannot be read twice (`macp export` writes the version first;
    // when its first 64 KiB do not say, the error says to import from a file).
    newer["record"] = serde_json::json!("a shape this build does not know");
    std::fs::write(&newer_file, serde_json::to_vec(&newer).unwrap()).unwrap();
    let out = macp().arg("import").arg(&newer_file).arg("--data-dir").arg(fresh.path()).output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("newer macp"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let record = format!(r#""record":"{}""#, "x".repeat(200_000));
    for (input, says) in [
        (format!(r#"{{"format":"macp-room-bundle","version":9,{record}}}"#), "version 9 bundle"),
        (format!(r#"{{{record},"format":"macp-room-bundle","version":9}}"#), "import it from a file"),
        (r#"{"hello": "world"}"#.to_owned(), "is not a MACP room bundle"),
    ] {
        let done = import_from_stdin(fresh.path(), input.as_bytes());
        assert!(!done.status.success());
        let err = String::from_utf8_lossy(&done.stderr);
        assert!(err.contains(says) && err.contains("standard input"), "{err}");
        assert!(err.len() < 2000, "the error quotes what it could not parse whole: {} bytes", err.len());
    }

    let not_bundle = files.path().join("notes.json");
    std::fs::write(&not_bundle, br#"{"hello": "world"}"#).unwrap();
    let out = macp().arg("import").arg(&not_bundle).arg("--data-dir").arg(to.path()).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a MACP room bundle"));
}
