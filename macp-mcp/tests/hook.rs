//! `macp hook`, driven the way Claude Code and Kiro call a hook command: the event as JSON on
//! stdin, the answer read from stdout, against a real `macp serve`.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceExt, service::RunningService};
use serde_json::{Value, json};

fn macp() -> Command {
    Command::new(env!("CARGO_BIN_EXE_macp"))
}

struct Server {
    child: std::process::Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let mut child = macp()
        .args(["serve", "--bind", "127.0.0.1:0", "--embedder", "none", "--data-dir"])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    let url = first.trim().strip_prefix("listening on ").expect("listening line").to_owned();
    Server { child, url, _dir: dir }
}

async fn call(c: &RunningService<RoleClient, ()>, tool: &str, args: Value) -> Value {
    let p = CallToolRequestParams::new(tool.to_owned()).with_arguments(args.as_object().cloned().unwrap());
    let r = c.call_tool(p).await.unwrap();
    assert_ne!(r.is_error, Some(true), "{tool}: {:?}", r.structured_content);
    r.structured_content.unwrap()
}

/// Runs `macp hook` as a client would: `stdin` in, (stdout, stderr, success) out.
fn hook(url: &str, room: &str, agent: &str, client: &str, stdin: &str) -> (String, String, bool) {
    let mut child = macp()
        .args(["hook", "--client", client, "--url", url, "--room", room, "--agent", agent])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    (String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap(), out.status.success())
}

const PROMPT: &str = r#"{"session_id":"s1","transcript_path":"/tmp/t.jsonl","cwd":"/w","hook_event_name":"UserPromptSubmit","prompt":"go on"}"#;
const POST_TOOL: &str = r#"{"session_id":"s1","cwd":"/w","hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{},"tool_response":{}}"#;
const STOP: &str = r#"{"session_id":"s1","cwd":"/w","hook_event_name":"Stop","stop_hook_active":false}"#;
const STOP_AGAIN: &str = r#"{"session_id":"s1","cwd":"/w","hook_event_name":"Stop","stop_hook_active":true}"#;
const KIRO_PROMPT: &str = r#"{"hook_event_name":"userPromptSubmit","cwd":"/w","prompt":"go on"}"#;

#[tokio::test(flavor = "multi_thread")]
async fn the_hook_tells_each_client_what_is_new_in_its_format_and_nothing_otherwise() {
    let server = serve();
    let alice = ().serve(StreamableHttpClientTransport::from_uri(server.url.clone())).await.unwrap();
    let bob = ().serve(StreamableHttpClientTransport::from_uri(server.url.clone())).await.unwrap();
    let room = call(&alice, "create_room", json!({"name": "checkout-502", "objective": "why 502s"})).await;
    let room = room["room_id"].as_str().unwrap().to_owned();
    call(&alice, "join_room", json!({"room_id": room, "agent_id": "alice-claude"})).await;
    call(&bob, "join_room", json!({"room_id": room, "agent_id": "bob-kiro"})).await;

    // Alice's agent acknowledges everything so far: nothing is new for it.
    let u = call(&alice, "get_updates", json!({"room_id": room})).await;
    call(&alice, "get_updates", json!({"room_id": room, "cursor": u["cursor"], "ack": true})).await;
    let (out, err, ok) = hook(&server.url, &room, "alice-claude", "claude-code", PROMPT);
    assert!(ok && out.is_empty(), "nothing new prints nothing: {out:?} {err:?}");

    // Bob's agent is blocked and posts; a long finding too, so the digest must stay in budget.
    call(
        &bob,
        "declare_status",
        json!({"room_id": room, "status": "blocked", "reason": "need prod DB access"}),
    )
    .await;
    call(
        &bob,
        "post_finding",
        json!({"room_id": room, "content": "502s come from the payments upstream timing out"}),
    )
    .await;
    for i in 0..40 {
        call(
            &bob,
            "post_finding",
            json!({"room_id": room, "content": format!("{i}: {}", "log line evidence ".repeat(30))}),
        )
        .await;
    }

    let (out, _, ok) = hook(&server.url, &room, "alice-claude", "claude-code", PROMPT);
    assert!(ok);
    let v: Value = serde_json::from_str(out.trim()).expect("one JSON object");
    assert_eq!(v["hookSpecificOutput"]["hookEventName"], "UserPromptSubmit");
    let text = v["hookSpecificOutput"]["additionalContext"].as_str().unwrap();
    assert!(text.len() <= macp_mcp::hook::BUDGET, "{} bytes", text.len());
    assert!(
        text.contains("\"checkout-502\"")
            && text.contains("41 new findings")
            && text.contains("1 blocked agent"),
        "{text}"
    );
    assert!(text.contains("BLOCKED bob-kiro: blocked: need prod DB access"), "{text}");
    assert!(text.contains("payments upstream") && text.contains("…and "), "{text}");
    assert!(text.contains("ack: true"), "{text}");

    let (out, _, _) = hook(&server.url, &room, "alice-claude", "claude-code", POST_TOOL);
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["hookSpecificOutput"]["hookEventName"], "PostToolUse");

    let (out, _, _) = hook(&server.url, &room, "alice-claude", "claude-code", STOP);
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["decision"], "block", "the agent takes one more turn to read its teammates' work");
    assert!(v["reason"].as_str().unwrap().contains("new findings"));
    let (out, _, _) = hook(&server.url, &room, "alice-claude", "claude-code", STOP_AGAIN);
    assert!(out.is_empty(), "never blocks a stop twice in a row: {out:?}");

    let (out, _, _) = hook(&server.url, &room, "alice-claude", "kiro", KIRO_PROMPT);
    assert!(out.starts_with("MACP room \"checkout-502\": 41 new findings"), "plain text for Kiro: {out}");
    assert!(out.len() <= macp_mcp::hook::BUDGET + 1);

    // The hook only reads: asking again says the same.
    let (again, _, _) = hook(&server.url, &room, "alice-claude", "kiro", KIRO_PROMPT);
    assert_eq!(out, again);

    // A server that is down: no output, exit 0, the reason on stderr.
    drop(server);
    let (out, err, ok) = hook("http://127.0.0.1:9/mcp", &room, "alice-claude", "claude-code", PROMPT);
    assert!(ok && out.is_empty(), "{out:?}");
    assert!(err.contains("macp hook:"), "{err}");
}
