//! Every tool in-process, client and server over `tokio::io::duplex`: schemas, success,
//! idempotency and error paths.

use std::sync::Arc;

use macp_core::search::builtin::BuiltinEmbedder;
use macp_core::search::memory_index::MemoryVectorIndex;
use macp_core::{Macp, Principal, memory::MemoryStore};
use macp_mcp::MacpMcp;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, GetPromptRequestParams, ReadResourceRequestParams,
    ResourceContents,
};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

type Client = RunningService<RoleClient, ()>;

fn service() -> Macp {
    Macp::builder()
        .store(Arc::new(MemoryStore::new()))
        .embedder(Arc::new(BuiltinEmbedder::load().unwrap()))
        .vector_index(Arc::new(MemoryVectorIndex::new()))
        .build()
        .unwrap()
}

/// A client connected to a fresh server acting for `user`.
async fn connect(macp: &Macp, user: &str) -> Client {
    let (server_io, client_io) = tokio::io::duplex(1 << 20);
    let server = MacpMcp::new(macp.clone(), Some(Principal::new(user).unwrap()));
    tokio::spawn(async move {
        if let Ok(s) = server.serve(server_io).await {
            let _ = s.waiting().await;
        }
    });
    ().serve(client_io).await.unwrap()
}

async fn call(c: &Client, tool: &str, args: Value) -> CallToolResult {
    let req = CallToolRequestParams::new(tool.to_owned())
        .with_arguments(args.as_object().cloned().unwrap_or_default());
    c.call_tool(req).await.unwrap_or_else(|e| panic!("{tool}: protocol error {e}"))
}

/// Calls a tool that must succeed; returns its structured content.
async fn ok(c: &Client, tool: &str, args: Value) -> Value {
    let r = call(c, tool, args).await;
    assert_ne!(r.is_error, Some(true), "{tool} failed: {:?}", r.content);
    let v = r.structured_content.clone().expect("structured content");
    // The same JSON is also given as text, for clients that ignore structured content.
    let text = r.content[0].as_text().expect("text content").text.clone();
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), v);
    v
}

/// Calls a tool that must fail with `code`; returns the error body.
async fn err(c: &Client, tool: &str, args: Value, code: &str) -> Value {
    let r = call(c, tool, args).await;
    assert_eq!(r.is_error, Some(true), "{tool} should fail with {code}, got {:?}", r.structured_content);
    let body = r.structured_content.clone().expect("structured error")["error"].clone();
    assert_eq!(body["code"], code, "{tool}: {body}");
    let text = &r.content[0].as_text().unwrap().text;
    assert!(text.starts_with(&format!("{code}: ")), "text carries the code: {text}");
    body
}

const TOOLS: [&str; 20] = [
    "create_room",
    "join_room",
    "close_room",
    "list_rooms",
    "get_room_summary",
    "get_room_context",
    "declare_status",
    "post_finding",
    "search_findings",
    "get_timeline",
    "get_updates",
    "add_entity",
    "add_relationship",
    "merge_entities",
    "get_entity_graph",
    "claim_work",
    "ask_decision",
    "answer_decision",
    "steer_room",
    "erase",
];

#[tokio::test]
async fn every_tool_is_listed_with_a_description_and_input_and_output_schemas() {
    let c = connect(&service(), "alice").await;
    let tools = c.list_all_tools().await.unwrap();
    let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    names.sort();
    let mut want = TOOLS.to_vec();
    want.sort();
    assert_eq!(names, want, "exactly the design's tools (artifact tools arrive with artifacts)");
    for t in &tools {
        assert!(t.description.as_ref().is_some_and(|d| d.len() > 60), "{} needs a real description", t.name);
        assert_eq!(t.input_schema.get("type"), Some(&json!("object")), "{}", t.name);
        let out = t.output_schema.as_ref().unwrap_or_else(|| panic!("{} has no output schema", t.name));
        assert_eq!(out.get("type"), Some(&json!("object")), "{}", t.name);
    }
    let info = c.peer_info().unwrap();
    let instructions = info.instructions.clone().unwrap();
    for step in ["get_room_context", "get_updates", "search_findings", "post_finding", "declare_status"] {
        assert!(instructions.contains(step), "instructions mention {step}");
    }
}

#[tokio::test]
async fn artifact_tools_exist_only_with_an_artifact_store() {
    let with = Macp::builder()
        .store(Arc::new(MemoryStore::new()))
        .blob_store(Arc::new(macp_core::blob::MemoryBlobStore::new()))
        .build()
        .unwrap();
    let c = connect(&with, "alice").await;
    let tools = c.list_all_tools().await.unwrap();
    assert_eq!(
        tools.len(),
        23,
        "all of the design's tools, claim_work, the decision queue, steer_room and erase"
    );
    for name in ["request_artifact_upload", "register_artifact", "list_artifacts"] {
        let t = tools.iter().find(|t| t.name == name).unwrap_or_else(|| panic!("{name} listed"));
        assert!(t.output_schema.is_some());
    }
    let room =
        ok(&c, "create_room", json!({"objective": "files"})).await["room_id"].as_str().unwrap().to_owned();
    ok(&c, "join_room", json!({"room_id": room})).await;
    let ticket = ok(
        &c,
        "request_artifact_upload",
        json!({"room_id": room, "filename": "a.log", "content_type": "text/plain", "size": 3}),
    )
    .await;
    assert_eq!(ticket["method"], "PUT");
    err(&c, "register_artifact", json!({"room_id": room, "key": ticket["key"]}), "not_found").await;
    err(
        &c,
        "request_artifact_upload",
        json!({"room_id": room, "filename": "../a.log", "content_type": "text/plain", "size": 3}),
        "invalid_input",
    )
    .await;
}

#[tokio::test]
async fn a_room_session_end_to_end_through_every_tool() {
    let macp = service();
    let alice = connect(&macp, "alice").await;
    let bob = connect(&macp, "bob").await;

    let room = ok(
        &alice,
        "create_room",
        json!({"objective": "Why does checkout 502?", "name": "checkout", "tags": ["sev-2"]}),
    )
    .await;
    let room_id = room["room_id"].as_str().unwrap().to_owned();
    assert_eq!(room["visibility_mode"], "full");
    let listed = ok(&bob, "list_rooms", json!({})).await;
    assert_eq!(listed["rooms"][0]["room_id"], room_id.as_str());

    let a = ok(
        &alice,
        "join_room",
        json!({"room_id": room_id, "agent_id": "alice-claude", "agent_type": "claude-code"}),
    )
    .await;
    assert_eq!((a["user_id"].as_str(), a["agent_id"].as_str()), (Some("alice"), Some("alice-claude")));
    ok(&bob, "join_room", json!({"room_id": room_id, "agent_id": "bob-kiro"})).await;

    // Writes without agent_id act as the agent this session joined with.
    let host = ok(
        &alice,
        "add_entity",
        json!({"room_id": room_id, "name": "db-1", "type": "resource",
        "identifiers": [{"type": "hostname", "value": "db-1.prod"}]}),
    )
    .await;
    let db = host["entity"]["entity_id"].as_str().unwrap().to_owned();
    assert_eq!(host["entity"]["agent_id"], "alice-claude");
    let same = ok(
        &bob,
        "add_entity",
        json!({"room_id": room_id, "name": "primary db", "type": "resource",
        "identifiers": [{"type": "hostname", "value": "DB-1.prod"}]}),
    )
    .await;
    assert_eq!(same["entity"]["entity_id"], db.as_str());
    assert_eq!(same["created"], false);
    let svc = ok(
        &bob,
        "add_entity",
        json!({"room_id": room_id, "name": "checkout", "type": "service",
        "identifiers": [{"type": "service", "value": "checkout"}]}),
    )
    .await["entity"]["entity_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let dup = ok(&bob, "add_entity", json!({"room_id": room_id, "name": "checkout-v7", "type": "service"}))
        .await["entity"]["entity_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let rel = ok(
        &bob,
        "add_relationship",
        json!({"room_id": room_id, "source_entity_id": dup, "target_entity_id": db,
        "relationship_type": "depends_on", "description": "connection pool"}),
    )
    .await;
    assert_eq!(rel["created"], true);
    let merged = ok(
        &alice,
        "merge_entities",
        json!({"room_id": room_id, "winner_entity_id": svc, "loser_entity_id": dup}),
    )
    .await;
    assert_eq!(merged["entity"]["aliases"], json!([dup]));

    let p = ok(
        &alice,
        "post_finding",
        json!({"room_id": room_id, "content": "Connection pool exhausted on the database at 09:41",
        "tags": ["root-cause"], "entity_refs": [db, dup],
        "evidence": [{"kind": "metric", "ref": "rds.connections", "description": "pinned at 500"}],
        "idempotency_key": "p-1"}),
    )
    .await;
    assert_eq!(p["finding"]["entity_refs"], json!([db, svc]), "merged refs read as the winner");
    assert_eq!(p["finding"]["index_status"], "indexed");
    let again = ok(
        &alice,
        "post_finding",
        json!({"room_id": room_id, "content": "Connection pool exhausted on the database at 09:41",
        "tags": ["root-cause"], "entity_refs": [db, dup],
        "evidence": [{"kind": "metric", "ref": "rds.connections", "description": "pinned at 500"}],
        "idempotency_key": "p-1"}),
    )
    .await;
    assert_eq!(again["replayed"], true);
    assert_eq!(again["finding"]["finding_id"], p["finding"]["finding_id"]);
    err(
        &alice,
        "post_finding",
        json!({"room_id": room_id, "content": "other", "idempotency_key": "p-1"}),
        "conflict",
    )
    .await;

    let u = ok(&bob, "get_updates", json!({"room_id": room_id})).await;
    assert_eq!(u["findings"].as_array().unwrap().len(), 1);
    let u2 = ok(&bob, "get_updates", json!({"room_id": room_id, "cursor": u["cursor"]})).await;
    assert!(u2["findings"].as_array().unwrap().is_empty());

    let found = ok(
        &bob,
        "search_findings",
        json!({"room_id": room_id, "query": "why did the database run out of connections"}),
    )
    .await;
    assert_eq!(found["results"][0]["finding"]["finding_id"], p["finding"]["finding_id"]);
    assert_eq!(found["semantic"], true);

    let t = ok(&bob, "get_timeline", json!({"room_id": room_id, "tags": ["root-cause"]})).await;
    assert_eq!(t["findings"].as_array().unwrap().len(), 1);
    let g = ok(&bob, "get_entity_graph", json!({"room_id": room_id, "entity_id": dup, "depth": 1})).await;
    assert_eq!(g["root"], svc.as_str());
    let st =
        ok(&bob, "declare_status", json!({"room_id": room_id, "status": "blocked", "reason": "need DBA"}))
            .await;
    assert_eq!((st["agent_id"].as_str(), st["agent_status"].as_str()), (Some("bob-kiro"), Some("blocked")));
    let s = ok(&alice, "get_room_summary", json!({"room_id": room_id})).await;
    assert_eq!(
        (s["finding_count"].as_u64(), s["entity_count"].as_u64(), s["agents"]["blocked"].as_u64()),
        (Some(1), Some(2), Some(1))
    );
    let ctx = ok(&alice, "get_room_context", json!({"room_id": room_id})).await;
    assert_eq!(ctx["room"]["objective"], "Why does checkout 502?");
    assert_eq!(ctx["agents"]["items"].as_array().unwrap().len(), 2);

    let closed = ok(&alice, "close_room", json!({"room_id": room_id})).await;
    assert_eq!(closed["status"], "closed");
    err(&bob, "post_finding", json!({"room_id": room_id, "content": "late"}), "room_closed").await;
    ok(&bob, "get_timeline", json!({"room_id": room_id})).await;
}

#[tokio::test]
async fn errors_are_tool_errors_with_stable_codes_and_never_panics() {
    let macp = service();
    let c = connect(&macp, "alice").await;
    let missing = "00000000-0000-4000-8000-000000000000";
    err(&c, "get_room_summary", json!({"room_id": missing}), "not_found").await;
    err(&c, "get_room_summary", json!({"room_id": "not-a-uuid"}), "invalid_input").await;
    err(&c, "get_room_summary", json!({}), "invalid_input").await;
    err(&c, "list_rooms", json!({"status": "sleeping"}), "invalid_input").await;
    err(&c, "list_rooms", json!({"stauts": "all"}), "invalid_input").await;
    let room = ok(&c, "create_room", json!({"objective": "o"})).await["room_id"].as_str().unwrap().to_owned();
    let e = err(&c, "post_finding", json!({"room_id": room, "content": "x"}), "not_joined").await;
    assert!(e["message"].as_str().unwrap().contains("join_room"));
    ok(&c, "join_room", json!({"room_id": room})).await;
    err(&c, "declare_status", json!({"room_id": room, "status": "sleeping"}), "invalid_input").await;
    let body = err(
        &c,
        "post_finding",
        json!({"room_id": room, "content": "x".repeat(16 * 1024 + 1)}),
        "invalid_input",
    )
    .await;
    assert_eq!(body["limit"], 16384);
    assert_eq!(body["field"], "content");
    err(
        &c,
        "post_finding",
        json!({"room_id": room, "content": "x", "entity_refs": ["01KB0000000000000000000000"]}),
        "not_found",
    )
    .await;
    err(
        &c,
        "add_relationship",
        json!({"room_id": room, "source_entity_id": "01KB0000000000000000000000",
        "target_entity_id": "01KB0000000000000000000001", "relationship_type": "depends_on"}),
        "not_found",
    )
    .await;
    err(&c, "add_entity", json!({"room_id": room, "name": "x", "type": "planet"}), "invalid_input").await;
    err(
        &c,
        "get_entity_graph",
        json!({"room_id": room, "entity_id": "01KB0000000000000000000000"}),
        "not_found",
    )
    .await;
    err(&c, "search_findings", json!({"room_id": room, "query": ""}), "invalid_input").await;
    err(&c, "get_updates", json!({"room_id": room, "cursor": "bogus"}), "invalid_input").await;
    err(&c, "close_room", json!({"room_id": missing}), "not_found").await;
    // Another user's agent cannot be used, and a user with several agents must pick one.
    let bob = connect(&macp, "bob").await;
    let alices = ok(&c, "join_room", json!({"room_id": room, "agent_id": "a2"})).await;
    assert_eq!(alices["agent_id"], "a2");
    err(
        &bob,
        "post_finding",
        json!({"room_id": room, "content": "x", "agent_id": "a2"}),
        "permission_denied",
    )
    .await;
    err(&bob, "join_room", json!({"room_id": room, "agent_id": "a2"}), "permission_denied").await;
    err(&bob, "post_finding", json!({"room_id": room, "content": "x", "agent_id": "nobody"}), "not_joined")
        .await;
}

/// Without agent_id a write acts as the agent this MCP session joined with, and nothing else:
/// with auth off every client is the same local user, so a fresh session that guessed would
/// post as another client's agent.
#[tokio::test]
async fn a_session_that_has_not_joined_must_join_or_name_its_agent() {
    let macp = service();
    let first = connect(&macp, "alice").await;
    let room =
        ok(&first, "create_room", json!({"objective": "o"})).await["room_id"].as_str().unwrap().to_owned();
    ok(&first, "join_room", json!({"room_id": room, "agent_id": "mine"})).await;
    let second = connect(&macp, "alice").await;
    let e = err(&second, "post_finding", json!({"room_id": room, "content": "whose?"}), "not_joined").await;
    let msg = e["message"].as_str().unwrap();
    assert!(msg.contains("join_room") && msg.contains("agent_id"), "{msg}");
    let p =
        ok(&second, "post_finding", json!({"room_id": room, "content": "named", "agent_id": "mine"})).await;
    assert_eq!(p["finding"]["agent_id"], "mine");
    ok(&second, "join_room", json!({"room_id": room, "agent_id": "mine"})).await;
    let p = ok(&second, "post_finding", json!({"room_id": room, "content": "joined again"})).await;
    assert_eq!(p["finding"]["agent_id"], "mine", "re-joining with an agent_id continues as that agent");
}

#[tokio::test]
async fn prompts_start_an_agent_in_a_room_and_describe_the_loop() {
    let c = connect(&service(), "alice").await;
    let prompts = c.list_all_prompts().await.unwrap();
    let names: Vec<&str> = prompts.iter().map(|p| p.name.as_ref()).collect();
    assert!(names.contains(&"start_in_room") && names.contains(&"iteration_loop"), "{names:?}");
    assert!(prompts.iter().all(|p| p.description.is_some()));
    let mut args = serde_json::Map::new();
    args.insert("room_id".into(), json!("1234"));
    let p = c.get_prompt(GetPromptRequestParams::new("start_in_room").with_arguments(args)).await.unwrap();
    let text = serde_json::to_string(&p.messages).unwrap();
    assert!(text.contains("1234") && text.contains("get_room_context"));
}

/// SKILL.md is also a resource, for clients that read resources rather than prompts.
#[tokio::test]
async fn skill_md_is_served_as_a_resource() {
    let c = connect(&service(), "alice").await;
    let listed = c.list_all_resources().await.unwrap();
    assert_eq!(listed.iter().map(|r| r.uri.as_str()).collect::<Vec<_>>(), ["macp://skill"]);
    let read = c.read_resource(ReadResourceRequestParams::new("macp://skill")).await.unwrap();
    let ResourceContents::TextResourceContents { text, mime_type, .. } = &read.contents[0] else {
        panic!("text contents expected")
    };
    assert_eq!(mime_type.as_deref(), Some("text/markdown"));
    assert_eq!(text, macp_mcp::docs::skill());
    assert!(c.read_resource(ReadResourceRequestParams::new("macp://nothing")).await.is_err());
}

/// Words that would name a tool: a verb the tools use, an underscore, a noun (`get_findings`,
/// `update_entity`). SKILL.md and the server's own texts may only name tools that exist.
fn tool_like_words(text: &str) -> std::collections::BTreeSet<String> {
    const VERBS: [&str; 17] = [
        "create", "join", "close", "list", "get", "declare", "post", "search", "add", "merge", "request",
        "register", "delete", "update", "read", "remove", "steer",
    ];
    text.split(|c: char| !(c.is_ascii_lowercase() || c == '_'))
        .filter(|w| w.split_once('_').is_some_and(|(verb, rest)| VERBS.contains(&verb) && !rest.is_empty()))
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn skill_md_and_the_server_name_exactly_the_same_tools() {
    let macp = Macp::builder()
        .store(Arc::new(MemoryStore::new()))
        .blob_store(Arc::new(macp_core::blob::MemoryBlobStore::new()))
        .build()
        .unwrap();
    let c = connect(&macp, "alice").await;
    let tools: std::collections::BTreeSet<String> =
        c.list_all_tools().await.unwrap().iter().map(|t| t.name.to_string()).collect();
    assert_eq!(tools.len(), 23);
    let skill = macp_mcp::docs::SKILL_FILE;

    // Every tool has a worked example: a line that starts with the tool's name in backticks.
    let examples: std::collections::BTreeSet<String> = skill
        .lines()
        .filter_map(|l| l.strip_prefix('`')?.split_once("` —").map(|(name, _)| name.to_owned()))
        .collect();
    assert_eq!(examples, tools, "SKILL.md has one worked example per tool, and no other");

    // Every tool SKILL.md names exists, and so does every tool the server's texts name.
    let unknown: Vec<_> = tool_like_words(skill).into_iter().filter(|w| !tools.contains(w)).collect();
    assert!(unknown.is_empty(), "SKILL.md names tools the server does not have: {unknown:?}");
    let mut texts = vec![c.peer_info().unwrap().instructions.clone().unwrap()];
    for t in c.list_all_tools().await.unwrap() {
        texts.push(t.description.unwrap_or_default().to_string());
    }
    let mut args = serde_json::Map::new();
    args.insert("room_id".into(), json!("r-1"));
    for p in ["start_in_room", "iteration_loop"] {
        let got = c.get_prompt(GetPromptRequestParams::new(p).with_arguments(args.clone())).await.unwrap();
        texts.push(serde_json::to_string(&got.messages).unwrap());
    }
    for text in &texts {
        let unknown: Vec<_> = tool_like_words(text).into_iter().filter(|w| !tools.contains(w)).collect();
        assert!(unknown.is_empty(), "the server names tools it does not have: {unknown:?} in {text:.80}");
    }
    // The loop the instructions teach is the loop SKILL.md teaches.
    let loop_tools = tool_like_words(macp_mcp::docs::skill_section("The loop"));
    for t in &loop_tools {
        assert!(texts[0].contains(t.as_str()), "the instructions' loop lacks {t}");
    }
    assert!(loop_tools.len() >= 5, "{loop_tools:?}");
}

#[tokio::test]
async fn skill_md_is_served_as_prompts() {
    let c = connect(&service(), "alice").await;
    let skill = c.get_prompt(GetPromptRequestParams::new("macp_skill")).await.unwrap();
    let text = serde_json::to_string(&skill.messages).unwrap();
    assert!(
        text.contains("one worked example each") && !text.contains("description: Work one"),
        "body, no front matter"
    );
    let mut args = serde_json::Map::new();
    args.insert("room_id".into(), json!("r-42"));
    for p in ["start_in_room", "iteration_loop"] {
        let got = c.get_prompt(GetPromptRequestParams::new(p).with_arguments(args.clone())).await.unwrap();
        let text = got.messages[0].content.as_text().map(|t| t.text.clone()).unwrap_or_default();
        assert!(text.contains("r-42"), "{p} names the room");
        assert!(text.contains(macp_mcp::docs::skill_section("The loop")), "{p} carries SKILL.md's loop");
        assert!(text.contains("Never paste secrets"), "{p} carries the rules");
        // When to claim, when to ask the people, how to pass a verdict.
        for lesson in [
            "**When to claim**",
            "**When to ask**",
            "**When to pass a verdict**",
            "\"verdict\": \"confirms\"",
        ] {
            assert!(text.contains(lesson), "{p} teaches {lesson}");
        }
    }
}

/// Agents pay for every tool schema in every prompt: `tools/list` may grow by at most half over
/// the 100,001 bytes it had before the coordination features (BENCHMARKS.md, "What agents pay
/// per prompt"). Counted as compact JSON of the listed tools, as a client receives them.
#[tokio::test]
async fn tools_list_stays_within_its_byte_budget() {
    let with_artifacts = Macp::builder()
        .store(Arc::new(MemoryStore::new()))
        .blob_store(Arc::new(macp_core::blob::MemoryBlobStore::new()))
        .build()
        .unwrap();
    let c = connect(&with_artifacts, "alice").await;
    let tools = c.list_all_tools().await.unwrap();
    let bytes = serde_json::to_vec(&tools).unwrap().len();
    println!("tools/list: {} tools, {bytes} bytes", tools.len());
    assert!(bytes <= 150_001, "tools/list is {bytes} bytes; the budget is 150,001 (100,001 + half)");
}

/// A members-only room is not a resource for anyone else: reading it and subscribing to it fail
/// as for a room that does not exist, and its tools answer `not_found`; its members read and
/// subscribe as to any room.
#[tokio::test]
// `resources/subscribe` is the 2025-11-25 generation's, which clients still speak.
#[allow(deprecated)]
async fn a_members_only_room_is_no_resource_for_others() {
    let macp = service();
    let ana = Principal::new("ana").unwrap();
    let room = macp
        .create_room(
            &ana,
            macp_core::service::CreateRoom {
                members: vec!["ana".into()],
                ..macp_core::service::CreateRoom::new("payroll")
            },
        )
        .await
        .unwrap()
        .room_id;
    let uri = macp_mcp::push::room_uri(room);
    let ghost = macp_mcp::push::room_uri(macp_core::RoomId::generate());
    let bob = connect(&macp, "bob").await;
    for u in [&uri, &ghost] {
        let read = bob.read_resource(rmcp::model::ReadResourceRequestParams::new(u.clone())).await;
        assert!(read.is_err(), "bob reads {u}");
        let sub = bob.subscribe(rmcp::model::SubscribeRequestParams::new(u.clone())).await;
        assert!(sub.is_err(), "bob subscribes to {u}");
    }
    let r = call(&bob, "get_room_summary", json!({"room_id": room})).await;
    assert_eq!(r.is_error, Some(true));
    assert_eq!(r.structured_content.unwrap()["error"]["code"], "not_found");
    let ana_c = connect(&macp, "ana").await;
    ana_c
        .read_resource(rmcp::model::ReadResourceRequestParams::new(uri.clone()))
        .await
        .expect("a member reads it");
    ana_c.subscribe(rmcp::model::SubscribeRequestParams::new(uri)).await.expect("a member subscribes");
}
