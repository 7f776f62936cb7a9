//! `macp hook`: what is new in a room for one agent, in the form a coding agent's hook expects.
//!
//! Most agents ignore MCP resource notifications; their hooks are what runs between turns. The
//! command is meant to be called from one: it reads the hook's event (JSON on stdin), asks the
//! server over MCP (`get_updates` from the agent's read position, which reading never moves)
//! what the agent has not acknowledged, and prints a digest of at most [`BUDGET`] bytes in the
//! output format of the calling client, or nothing at all when nothing is new.
//!
//! # The stdin/stdout contract
//! - stdin: the client's hook event, JSON. Only `hook_event_name` (Claude Code and Kiro both
//!   send it) and Claude Code's `stop_hook_active` are read; anything else, or nothing, is fine.
//! - `--client claude-code`:
//!   - `UserPromptSubmit`, `PostToolUse`, `SessionStart`: one JSON line,
//!     `{"hookSpecificOutput": {"hookEventName": <event>, "additionalContext": <digest>}}`,
//!     which Claude Code adds to the model's context.
//!   - `Stop`: `{"decision": "block", "reason": <digest>}`, so the agent takes one more turn to
//!     read what its teammates did, unless `stop_hook_active` is true (it already did once).
//! - `--client kiro` (and `plain`): the digest as plain text, which Kiro adds to the agent's
//!   context for `agentSpawn` and `userPromptSubmit` hooks.
//! - Nothing new, or the server unreachable: no output and exit status 0 (a hook must never
//!   block the person's prompt); the reason for a failure goes to stderr.

use std::fmt::Write as _;

use macp_core::model::{AgentStatus, EventKind};
use macp_core::service::Updates;
use serde_json::{Value, json};

/// The most bytes the digest (the text itself, before the client's JSON envelope) may take.
pub const BUDGET: usize = 2048;

/// Which client calls the hook: the output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum HookClient {
    /// Claude Code's hook JSON.
    ClaudeCode,
    /// Kiro: plain text on stdout.
    Kiro,
    /// Plain text (any other client, or a person).
    Plain,
}

/// What the hook prints for `updates` (read from the agent's read position) given the client's
/// event on stdin; `None` when there is nothing to say.
pub fn render(
    client: HookClient,
    stdin: &str,
    room_label: &str,
    room_id: &str,
    updates: &Updates,
) -> Option<String> {
    let event: Value = serde_json::from_str(stdin.trim()).unwrap_or(Value::Null);
    let name = event["hook_event_name"].as_str().unwrap_or("");
    if client == HookClient::ClaudeCode && name == "Stop" && event["stop_hook_active"].as_bool() == Some(true)
    {
        return None;
    }
    let digest = digest(room_label, room_id, updates)?;
    Some(match client {
        HookClient::ClaudeCode if name == "Stop" => {
            json!({"decision": "block", "reason": digest}).to_string()
        }
        HookClient::ClaudeCode => {
            let event_name = if name.is_empty() { "UserPromptSubmit" } else { name };
            json!({"hookSpecificOutput": {"hookEventName": event_name, "additionalContext": digest}})
                .to_string()
        }
        HookClient::Kiro | HookClient::Plain => digest,
    })
}

/// The digest: counts first (blocked teammates called out), then one line per change, newest
/// last, as many as fit in [`BUDGET`] bytes with a line saying how many more there are.
pub fn digest(room_label: &str, room_id: &str, u: &Updates) -> Option<String> {
    if u.findings.is_empty() && u.events.is_empty() {
        return None;
    }
    let blocked: Vec<_> = u
        .events
        .iter()
        .filter(|e| {
            e.kind == EventKind::StatusDeclared && e.summary.starts_with(AgentStatus::Blocked.as_str())
        })
        .collect();
    let others = u.events.len() - blocked.len();
    let mut counts = Vec::new();
    let more = if u.has_more { "+" } else { "" };
    if !u.findings.is_empty() {
        counts.push(plural(u.findings.len(), "new finding", more));
    }
    if !blocked.is_empty() {
        counts.push(plural(blocked.len(), "blocked agent", ""));
    }
    if others > 0 {
        counts.push(plural(others, "other change", more));
    }
    let head = format!("MACP room {room_label}: {} since you last acknowledged.", counts.join(", "));
    let tail = format!(
        "Read them with get_updates (room_id {room_id}), then pass the cursor back with ack: true once processed."
    );
    let mut lines: Vec<String> = Vec::new();
    for e in &blocked {
        lines.push(format!(
            "- BLOCKED {}: {}",
            who(e.agent_id.as_ref().map(|a| a.as_str()), e.user_id.as_str()),
            e.summary
        ));
    }
    for f in &u.findings {
        lines.push(format!("- finding by {}: {}", f.agent_id, one_line(&f.content, 160)));
    }
    for e in u.events.iter().filter(|e| !blocked.iter().any(|b| b.seq == e.seq)) {
        lines.push(format!(
            "- {} by {}: {}",
            e.kind,
            who(e.agent_id.as_ref().map(|a| a.as_str()), e.user_id.as_str()),
            e.summary
        ));
    }
    let mut out = head;
    out.push('\n');
    let mut shown = 0;
    for (i, l) in lines.iter().enumerate() {
        let left = lines.len() - i - 1;
        // Room for this line, the "more" line that may follow, and the tail.
        let reserve = if left > 0 { 40 } else { 0 } + tail.len() + 2;
        if out.len() + l.len() + 1 + reserve > BUDGET {
            break;
        }
        out.push_str(l);
        out.push('\n');
        shown += 1;
    }
    if shown < lines.len() {
        let _ = writeln!(out, "- …and {} more", lines.len() - shown);
    }
    out.push_str(&tail);
    Some(out)
}

fn plural(n: usize, what: &str, more: &str) -> String {
    format!("{n}{more} {what}{}", if n == 1 && more.is_empty() { "" } else { "s" })
}

fn who(agent: Option<&str>, user: &str) -> String {
    agent.map_or_else(|| user.to_owned(), str::to_owned)
}

fn one_line(s: &str, max: usize) -> String {
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        flat
    } else {
        let mut t: String = flat.chars().take(max - 1).collect();
        t.push('…');
        t
    }
}

/// Where and as whom the hook asks.
#[derive(Debug, Clone)]
pub struct HookTarget {
    /// The server's MCP endpoint (`http://127.0.0.1:8765/mcp`).
    pub url: String,
    /// The room.
    pub room_id: String,
    /// The agent whose read position counts.
    pub agent_id: String,
    /// A bearer token, when the server has auth on.
    pub token: Option<String>,
}

/// Asks the server over MCP what `target.agent_id` has not acknowledged (at most `limit`
/// changes) and the room's name; reads nothing else and moves nothing.
pub async fn fetch(target: &HookTarget, limit: usize) -> Result<(String, Updates), String> {
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

    let mut config = StreamableHttpClientTransportConfig::with_uri(target.url.clone());
    if let Some(t) = &target.token {
        config = config.auth_header(t.clone());
    }
    let client =
        ().serve(StreamableHttpClientTransport::from_config(config))
            .await
            .map_err(|e| format!("cannot reach {}: {e}", target.url))?;
    let call = |tool: &'static str, args: Value| {
        let client = &client;
        async move {
            let p = CallToolRequestParams::new(tool)
                .with_arguments(args.as_object().cloned().unwrap_or_default());
            let r = client.call_tool(p).await.map_err(|e| format!("{tool}: {e}"))?;
            let doc = r.structured_content.unwrap_or(Value::Null);
            if r.is_error == Some(true) {
                return Err(format!("{tool}: {}", doc["error"]["message"].as_str().unwrap_or("failed")));
            }
            Ok::<Value, String>(doc)
        }
    };
    let u =
        call("get_updates", json!({"room_id": target.room_id, "agent_id": target.agent_id, "limit": limit}))
            .await?;
    let updates: Updates =
        serde_json::from_value(u).map_err(|e| format!("get_updates answered oddly: {e}"))?;
    let mut label = target.room_id.clone();
    if !updates.findings.is_empty() || !updates.events.is_empty() {
        let s = call("get_room_summary", json!({"room_id": target.room_id})).await?;
        if let Some(n) = s["room"]["name"].as_str() {
            label = format!("\"{n}\"");
        }
    }
    let _ = client.cancel().await;
    Ok((label, updates))
}
