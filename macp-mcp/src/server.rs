//! The MCP server: each tool maps its arguments to one `macp_core::Macp` call and its result (or
//! error) back. No domain rule lives here.
// rmcp marks the logging types deprecated (SEP-2577); we still answer setLevel.
#![allow(deprecated)]
// A tool's error is its `CallToolResult`, built once per failed call and returned as is; it grows
// past clippy's threshold when serde_json's `preserve_order` is unified in (the AWS SDKs turn it
// on), and boxing it would only add an allocation on the error path.
#![allow(clippy::result_large_err)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::http::request::Parts;
use macp_core::model::{AgentSession, Channel, Decision, Room};
use macp_core::redact::Written;
use macp_core::service::{
    AddEntity, AddRelationship, AnswerDecision, ArtifactOutcome, ArtifactPage, AskDecision, ClaimResult,
    ClaimWork, CloseRoom, ContextQuery, CreateRoom, DeclareStatus, EntityGraph, EntityOutcome, Erase, Erased,
    FindingPage, GraphQuery, JoinRoom, ListArtifacts, ListRooms, MergeEntities, MergeOutcome, PostFinding,
    PostedFinding, RegisterArtifact, RelationshipOutcome, RequestUpload, RoomContext, RoomPage, RoomSummary,
    SearchFindings, SearchResults, SteerRoom, SummaryQuery, TimelineQuery, Updates, UpdatesQuery,
    UploadTicket,
};
use macp_core::{AgentId, Error, Macp, Principal, RoomId};
use rmcp::handler::server::router::prompt::PromptRouter;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::handler::server::wrapper::{Json, Parameters};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, JsonObject,
    ListResourceTemplatesResult, ListResourcesResult, LoggingLevel, PaginatedRequestParams, PromptMessage,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource, ResourceContents,
    ResourceTemplate, ResourceUpdatedNotificationParam, Role, ServerCapabilities, ServerConfig,
    SetLevelRequestParams, SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams,
};
use rmcp::service::RequestContext;
use rmcp::service::SubscriptionContext;
use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler, prompt, prompt_handler, prompt_router, tool,
    tool_handler, tool_router,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::access;
use crate::docs;
use crate::push;
use crate::sessions::StoredSession;
use macp_core::service::SessionJoin;

/// What a tool returns: structured content on success, a structured tool error otherwise.
/// (Tool signatures spell the type out: rmcp derives output schemas from the written type.)
type ToolResult<T> = Result<Json<T>, CallToolResult>;

/// The authenticated person behind an HTTP request, put into the request's extensions by the
/// auth layer. Absent when auth is off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticated {
    /// Who.
    pub principal: Principal,
    /// May call write tools.
    pub can_write: bool,
}

/// Maps a core error to a tool error: `isError: true`, text `code: message`, and the structured
/// body `{"error": {code, message, retryable, limit?, field?}}`.
pub fn tool_error(e: &Error) -> CallToolResult {
    let body = e.body();
    let mut r = CallToolResult::error(vec![ContentBlock::text(format!("{}: {}", body.code, body.message))]);
    r.structured_content = Some(serde_json::json!({ "error": body }));
    r
}

/// A core error on a resource request, as a protocol error (resources have no tool-error form),
/// naming the URI as the 2026-07-28 revision asks (`data.uri`).
fn resource_error(uri: &str, e: &Error) -> McpError {
    let data = Some(serde_json::json!({ "uri": uri, "error": e.body() }));
    match e {
        Error::NotFound { .. } => McpError::resource_not_found(format!("`{uri}`: {e}"), data),
        _ => McpError::internal_error(format!("`{uri}`: {e}"), data),
    }
}

/// A tool's arguments as its request type (the same type the SDK takes, so the input schema
/// published for the tool is that type's).
///
/// Tools take raw JSON and parse it here rather than through rmcp's `Parameters<T>`: a bad
/// argument must come back as a tool error (`isError: true`, `invalid_input` naming the field)
/// that the model reads and corrects, not as a JSON-RPC protocol error that most clients show
/// to the person, or drop.
fn parse<T: DeserializeOwned>(args: JsonObject) -> Result<T, CallToolResult> {
    serde_json::from_value(serde_json::Value::Object(args)).map_err(|e| {
        tool_error(&Error::invalid(
            "arguments",
            format!("{e}; see the tool's input schema for the accepted fields"),
        ))
    })
}

/// The input schema of `T`, for `#[tool(input_schema = ...)]`.
fn input<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    let mut s = rmcp::handler::server::tool::schema_for_input::<T>()
        .unwrap_or_else(|e| panic!("tool input schema must be an object: {e}"));
    let o = Arc::make_mut(&mut s);
    strip_numeric_formats(o);
    // Every input schema is a 2020-12 object schema (MCP's default dialect): saying so in each
    // costs every prompt bytes and tells no one anything.
    o.remove("$schema");
    s
}

/// The output schema of a tool returning `T`: `T`'s fields, or (for tool errors, which carry a
/// structured body too) `{"error": {code, message, retryable, limit?, field?}}`. Clients that
/// validate every structured result against the schema (the TypeScript SDK does) accept both.
fn output<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    let base = rmcp::handler::server::tool::schema_for_output::<T>();
    let mut s: JsonObject = (*base).clone();
    let required = s.remove("required").unwrap_or_else(|| serde_json::json!([]));
    let props = s.entry("properties").or_insert_with(|| serde_json::json!({}));
    if let Some(p) = props.as_object_mut() {
        p.insert(
            "error".into(),
            serde_json::json!({
                "type": "object",
                "description": "Instead of the result, on failure (isError).",
                "properties": {
                    "code": {"type": "string", "description": "Stable: not_found, invalid_input, room_closed…"},
                    "message": {"type": "string", "description": "What went wrong, what to do."},
                    "retryable": {"type": "boolean"},
                    "limit": {"type": "integer"},
                    "field": {"type": "string"}
                },
                "required": ["code", "message", "retryable"]
            }),
        );
    }
    s.insert("anyOf".into(), serde_json::json!([{"required": required}, {"required": ["error"]}]));
    strip_numeric_formats(&mut s);
    slim_output(&mut s);
    Arc::new(s)
}

/// Output schemas describe what the server returns, not what a caller must send: validation
/// keywords (patterns, lengths, bounds, formats) tell a reader nothing, and an enum's values
/// are listed plainly instead of one described `const` each. Every tool schema is in every
/// agent prompt (BENCHMARKS.md, "What agents pay per prompt"); field descriptions stay.
fn slim_output(o: &mut JsonObject) {
    for k in ["$schema", "pattern", "maxLength", "minLength", "minimum", "maximum", "format"] {
        // A property may be *named* like a keyword (a finding's `format`…): only drop values
        // that are keywords, which are never objects.
        if o.get(k).is_some_and(|v| !v.is_object()) {
            o.remove(k);
        }
    }
    let plain_enum = o.get("oneOf").and_then(|v| v.as_array()).and_then(|alts| {
        alts.iter()
            .map(|a| a.get("const").and_then(|c| c.as_str()).map(str::to_owned))
            .collect::<Option<Vec<_>>>()
    });
    if let Some(values) = plain_enum {
        o.remove("oneOf");
        o.insert("type".into(), serde_json::json!("string"));
        o.insert("enum".into(), serde_json::json!(values));
    }
    for v in o.values_mut() {
        match v {
            serde_json::Value::Object(m) => slim_output(m),
            serde_json::Value::Array(a) => {
                for x in a.iter_mut().filter_map(|x| x.as_object_mut()) {
                    slim_output(x);
                }
            }
            _ => {}
        }
    }
}

/// Drops schemars' `uint64`-style formats: they are not JSON Schema formats, and validating
/// clients warn about every one of them.
fn strip_numeric_formats(o: &mut JsonObject) {
    let numeric = |f: &serde_json::Value| {
        f.as_str()
            .is_some_and(|f| f.starts_with("uint") || f.starts_with("int") || f == "double" || f == "float")
    };
    if o.get("format").is_some_and(numeric) {
        o.remove("format");
    }
    for v in o.values_mut() {
        match v {
            serde_json::Value::Object(m) => strip_numeric_formats(m),
            serde_json::Value::Array(a) => {
                a.iter_mut().filter_map(|x| x.as_object_mut()).for_each(strip_numeric_formats)
            }
            _ => {}
        }
    }
}

/// Per-connection state: the agent this MCP session joined each room with.
///
/// Over HTTP with sessions the store's copy of the session is the truth, read for each request
/// ([`crate::sessions::StoredSession`]); `joined` serves stdio, and a session the store lacks.
#[derive(Debug, Default)]
struct SessionState {
    joined: HashMap<RoomId, AgentId>,
    /// Legacy `resources/subscribe` registrations: the task forwarding each URI's changes.
    subscriptions: HashMap<String, tokio::task::AbortHandle>,
}

impl Drop for SessionState {
    fn drop(&mut self) {
        for (_, task) in self.subscriptions.drain() {
            task.abort();
        }
    }
}

/// The MACP MCP server. One value per MCP session (or per request for stateless clients).
#[derive(Clone)]
pub struct MacpMcp {
    macp: Macp,
    /// Who acts when a request carries no authenticated identity (auth off: the local user).
    local_user: Option<Principal>,
    session: Arc<Mutex<SessionState>>,
    log_level: Arc<Mutex<Option<LoggingLevel>>>,
    /// Built once per service (each tool's schemas are generated there) and shared by every
    /// session: a session costs its own state, not a copy of the tool list.
    tool_router: Arc<ToolRouter<Self>>,
    prompt_router: Arc<PromptRouter<Self>>,
}

impl std::fmt::Debug for MacpMcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MacpMcp").field("local_user", &self.local_user).finish_non_exhaustive()
    }
}

impl MacpMcp {
    /// The room a subscription names, which must exist and be readable by the caller.
    async fn subscribable(&self, uri: &str, ctx: &RequestContext<RoleServer>) -> Result<RoomId, McpError> {
        let who = self.who(ctx).map_err(|_| McpError::invalid_request("not authenticated", None))?;
        let room = push::room_of(uri).ok_or_else(|| {
            McpError::resource_not_found(
                format!("`{uri}` is not a room; subscribe to macp://rooms/{{room_id}}"),
                Some(serde_json::json!({ "uri": uri })),
            )
        })?;
        self.macp.room_summary(&who, room).await.map_err(|e| resource_error(uri, &e))?;
        Ok(room)
    }

    /// A server over `macp`. With `local_user`, unauthenticated requests act as that user (auth
    /// off); without it, every request must carry an [`Authenticated`] extension.
    pub fn new(macp: Macp, local_user: Option<Principal>) -> Self {
        Self {
            local_user,
            session: Arc::default(),
            log_level: Arc::default(),
            tool_router: Arc::new({
                let mut r = Self::tool_router();
                // Artifact tools exist only where an artifact store is configured.
                if !macp.artifacts_enabled() {
                    for t in ["request_artifact_upload", "register_artifact", "list_artifacts"] {
                        r.remove_route(t);
                    }
                }
                for (name, route) in r.map.iter_mut() {
                    route.attr.annotations = access::access(name).map(access::Access::annotations);
                }
                r
            }),
            prompt_router: Arc::new(Self::prompt_router()),
            macp,
        }
    }

    /// A new MCP session on the same service: its own state (the agents it joined, its
    /// subscriptions), the tools shared. What a transport's session factory calls.
    pub fn new_session(&self) -> Self {
        Self { session: Arc::default(), log_level: Arc::default(), ..self.clone() }
    }

    fn auth(&self, ctx: &RequestContext<RoleServer>) -> Result<Authenticated, CallToolResult> {
        if let Some(a) = ctx.extensions.get::<Parts>().and_then(|p| p.extensions.get::<Authenticated>()) {
            return Ok(a.clone());
        }
        match &self.local_user {
            Some(p) => Ok(Authenticated { principal: p.clone(), can_write: true }),
            None => Err(tool_error(&Error::Unauthenticated {
                message: "no authenticated identity on this request".into(),
            })),
        }
    }

    /// Who calls. Whether they may (a write needs a token that can write) was checked for every
    /// tool in `call_tool`, from [`access::TOOLS`].
    fn who(&self, ctx: &RequestContext<RoleServer>) -> Result<Principal, CallToolResult> {
        self.auth(ctx).map(|a| a.principal)
    }

    /// The agent a write acts as: the one named, else the one this MCP session joined the room
    /// with. Never guessed from the caller's other sessions: with auth off every client is the
    /// same local user, and a fresh client must not post as another client's agent.
    /// The agent a read is made as (for its read position and unread counts): the one named,
    /// else the one this session joined with, else none (the read is then made as nobody).
    fn reading_agent(
        &self,
        room_id: RoomId,
        named: Option<AgentId>,
        ctx: &RequestContext<RoleServer>,
    ) -> Option<AgentId> {
        named.or_else(|| self.joined(room_id, ctx))
    }

    fn session_agent(
        &self,
        room_id: RoomId,
        named: Option<AgentId>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Option<AgentId>, CallToolResult> {
        if named.is_some() {
            return Ok(named);
        }
        if let Some(a) = self.joined(room_id, ctx) {
            return Ok(Some(a));
        }
        Err(tool_error(&Error::NotJoined {
            message: format!(
                "this MCP session has not joined room `{room_id}`: call join_room with this room_id \
                 first (pass your agent_id to continue as an agent you joined with before), or name \
                 the acting agent with agent_id"
            ),
        }))
    }

    /// The agent this session joined `room_id` as: the store's answer for this request when the
    /// session is stored (wherever the join was made), else this connection's own.
    fn joined(&self, room_id: RoomId, ctx: &RequestContext<RoleServer>) -> Option<AgentId> {
        if let Some(stored) = stored_session(ctx) {
            return stored.session.joined.get(&room_id).cloned();
        }
        self.session.lock().unwrap_or_else(|p| p.into_inner()).joined.get(&room_id).cloned()
    }

    /// Stores the session's join of `room_id` as `agent_id`, so the next request finds it on
    /// any server. A session the store lacks (its opening could not be stored) is stored now,
    /// from what its client's `initialize` said.
    async fn store_join(
        &self,
        room_id: RoomId,
        agent_id: &AgentId,
        ctx: &RequestContext<RoleServer>,
    ) -> macp_core::Result<()> {
        let Some(id) = ctx.extensions.get::<Parts>().and_then(crate::sessions::session_id) else {
            return Ok(());
        };
        let ended = || {
            Error::not_found_hint("session", "of this request", "this MCP session has ended; open a new one")
        };
        match self.macp.session_joined(&id, room_id, agent_id).await? {
            SessionJoin::Joined => return Ok(()),
            SessionJoin::Ended => return Err(ended()),
            SessionJoin::Unknown => {}
        }
        let Some(info) = ctx.peer.peer_info() else { return Ok(()) };
        let state =
            rmcp::transport::streamable_http_server::session::store::SessionState::new((*info).clone());
        // Only if still absent: an ended session is never opened again.
        crate::sessions::open_session(&self.macp, &id, &state).await?;
        match self.macp.session_joined(&id, room_id, agent_id).await? {
            SessionJoin::Joined => Ok(()),
            _ => Err(ended()),
        }
    }
}

/// The session this request names, as the store has it (see [`crate::sessions`]).
fn stored_session(ctx: &RequestContext<RoleServer>) -> Option<&StoredSession> {
    ctx.extensions.get::<Parts>()?.extensions.get::<StoredSession>()
}

fn done<T>(r: macp_core::Result<T>) -> ToolResult<T> {
    r.map(Json).map_err(|e| tool_error(&e))
}

/// Each tool: its request type (input schema), its result type (output schema), one call into
/// core. Write tools fill in the acting agent from the session when the call names none.
#[tool_router]
impl MacpMcp {
    #[tool(description = docs::CREATE_ROOM, output_schema = output::<Written<Room>>(), input_schema = input::<CreateRoom>())]
    async fn create_room(
        &self,
        args: JsonObject,
        ctx: RequestContext<RoleServer>,
    ) -> ToolResult<Written<Room>> {
        let who = self.who(&ctx)?;
        done(self.macp.create_room(&who, parse(args)?).await)
    }

    #[tool(description = docs::JOIN_ROOM, output_schema = output::<AgentSession>(), input_schema = input::<JoinRoom>())]
    async fn join_room(&self, args: JsonObject, ctx: RequestContext<RoleServer>) -> ToolResult<AgentSession> {
        let who = self.who(&ctx)?;
        let s = self.macp.join_room(&who, parse(args)?).await.map_err(|e| tool_error(&e))?;
        // Stored before the answer, so that the next request finds the join on any server; if
        // that fails the client is told, and joining again is harmless.
        self.store_join(s.room_id, &s.agent_id, &ctx).await.map_err(|e| tool_error(&e))?;
        self.session.lock().unwrap_or_else(|p| p.into_inner()).joined.insert(s.room_id, s.agent_id.clone());
        Ok(Json(s))
    }

    /// Recorded as an agent's act when the session has joined (or names an agent), else as the
    /// caller's without an agent; never as a person's own (that is `macp close`).
    #[tool(description = docs::CLOSE_ROOM, output_schema = output::<Written<Room>>(), input_schema = input::<CloseRoom>())]
    async fn close_room(
        &self,
        args: JsonObject,
        ctx: RequestContext<RoleServer>,
    ) -> ToolResult<Written<Room>> {
        let who = self.who(&ctx)?;
        let mut req: CloseRoom = parse(args)?;
        req.agent_id = self.session_agent(req.room_id, req.agent_id, &ctx).ok().flatten();
        done(self.macp.close_room(&who, req, Channel::Agent).await)
    }

    /// Always an agent's act: a person steers with `macp steer`.
    #[tool(description = docs::STEER_ROOM, output_schema = output::<Written<Room>>(), input_schema = input::<SteerRoom>())]
    async fn steer_room(
        &self,
        args: JsonObject,
        ctx: RequestContext<RoleServer>,
    ) -> ToolResult<Written<Room>> {
        let who = self.who(&ctx)?;
        let mut req: SteerRoom = parse(args)?;
        req.agent_id = self.session_agent(req.room_id, req.agent_id, &ctx)?;
        done(self.macp.steer_room(&who, req, Channel::Agent).await)
    }

    #[tool(description = docs::LIST_ROOMS, output_schema = output::<RoomPage>(), input_schema = input::<ListRooms>())]
    async fn list_rooms(&self, args: JsonObject, ctx: RequestContext<RoleServer>) -> ToolResult<RoomPage> {
        let who = self.who(&ctx)?;
        done(self.macp.list_rooms(&who, parse(args)?).await)
    }

    #[tool(description = docs::GET_ROOM_SUMMARY, output_schema = output::<RoomSummary>(), input_schema = input::<SummaryQuery>())]
    async fn get_room_summary(
        &self,
        args: JsonObject,
        ctx: RequestContext<RoleServer>,
    ) -> ToolResult<RoomSummary> {
        let who = self.who(&ctx)?;
        let q: SummaryQuery = parse(args)?;
        done(self.macp.room_summary(&who, q).await)
    }

    #[tool(description = docs::GET_ROOM_CONTEXT, output_schema = output::<RoomContext>(), input_schema = input::<ContextQuery>())]
    async fn get_room_context(
        &self,
        args: JsonObject,
        ctx: RequestContext<RoleServer>,
    ) -> ToolResult<RoomContext> {
        let who = self.who(&ctx)?;
        let mut req: ContextQuery = parse(args)?;
        req.agent_id = self.reading_agent(req.room_id, req.agent_id, &ctx);
        done(self.macp.room_context(&who, req).await)
    }

    #[tool(description = docs::CLAIM_WORK, output_schema = output::<ClaimResult>(), input_schema = input::<ClaimWork>())]
    async fn claim_work(&self, args: JsonObject, ctx: RequestContext<RoleServer>) -> ToolResult<ClaimResult> {
        let who = self.who(&ctx)?;
        let mut req: ClaimWork = parse(args)?;
        req.agent_id = self.session_agent(req.room_id, req.agent_id, &ctx)?;
        done(self.macp.claim_work(&who, req).await)
    }

    #[tool(description = docs::ASK_DECISION, output_schema = output::<Written<Decision>>(), input_schema = input::<AskDecision>())]
    async fn ask_decision(
        &self,
        args: JsonObject,
        ctx: RequestContext<RoleServer>,
    ) -> ToolResult<Written<Decision>> {
        let who = self.who(&ctx)?;
        let mut req: AskDecision = parse(args)?;
        req.agent_id = self.session_agent(req.room_id, req.agent_id, &ctx)?;
        done(self.macp.ask_decision(&who, req).await)
    }

    /// Always recorded as relayed by an agent: nothing an MCP client sends can make an answer
    /// read as a person's own.
    #[tool(description = docs::ANSWER_DECISION, output_schema = output::<Written<Decision>>(), input_schema = input::<AnswerDecision>())]
    async fn answer_decision(
        &self,
        args: JsonObject,
        ctx: RequestContext<RoleServer>,
    ) -> ToolResult<Written<Decision>> {
        let who = self.who(&ctx)?;
        let mut req: AnswerDecision = parse(args)?;
        req.agent_id = self.session_agent(req.room_id, req.agent_id, &ctx)?;
        done(self.macp.answer_decision(&who, req, Channel::Agent).await)
    }

    #[tool(description = docs::DECLARE_STATUS, output_schema = output::<Written<AgentSession>>(), input_schema = input::<DeclareStatus>())]
    async fn declare_status(
        &self,
        args: JsonObject,
        ctx: RequestContext<RoleServer>,
    ) -> ToolResult<Written<AgentSession>> {
        let who = self.who(&ctx)?;
        let mut req: DeclareStatus = parse(args)?;
        req.agent_id = self.session_agent(req.room_id, req.agent_id, &ctx)?;
        done(self.macp.declare_status(&who, req).await)
    }

    #[tool(description = docs::ERASE, output_schema = output::<Erased>(), input_schema = input::<Erase>())]
    async fn erase(&self, args: JsonObject, ctx: RequestContext<RoleServer>) -> ToolResult<Erased> {
        let who = self.who(&ctx)?;
        let mut req: Erase = parse(args)?;
        req.agent_id = self.session_agent(req.room_id, req.agent_id, &ctx)?;
        done(self.macp.erase(&who, req).await)
    }

    #[tool(description = docs::POST_FINDING, output_schema = output::<PostedFinding>(), input_schema = input::<PostFinding>())]
    async fn post_finding(
        &self,
        args: JsonObject,
        ctx: RequestContext<RoleServer>,
    ) -> ToolResult<PostedFinding> {
        let who = self.who(&ctx)?;
        let mut req: PostFinding = parse(args)?;
        req.agent_id = self.session_agent(req.room_id, req.agent_id, &ctx)?;
        done(self.macp.post_finding(&who, req).await)
    }

    #[tool(description = docs::SEARCH_FINDINGS, output_schema = output::<SearchResults>(), input_schema = input::<SearchFindings>())]
    async fn search_findings(
        &self,
        args: JsonObject,
        ctx: RequestContext<RoleServer>,
    ) -> ToolResult<SearchResults> {
        let who = self.who(&ctx)?;
        done(self.macp.search_findings(&who, parse(args)?).await)
    }

    #[tool(description = docs::GET_TIMELINE, output_schema = output::<FindingPage>(), input_schema = input::<TimelineQuery>())]
    async fn get_timeline(
        &self,
        args: JsonObject,
        ctx: RequestContext<RoleServer>,
    ) -> ToolResult<FindingPage> {
        let who = self.who(&ctx)?;
        done(self.macp.timeline(&who, parse(args)?).await)
    }

    #[tool(description = docs::GET_UPDATES, output_schema = output::<Updates>(), input_schema = input::<UpdatesQuery>())]
    async fn get_updates(&self, args: JsonObject, ctx: RequestContext<RoleServer>) -> ToolResult<Updates> {
        let who = self.who(&ctx)?;
        let mut req: UpdatesQuery = parse(args)?;
        req.agent_id = self.reading_agent(req.room_id, req.agent_id, &ctx);
        done(self.macp.updates(&who, req).await)
    }

    #[tool(description = docs::ADD_ENTITY, output_schema = output::<EntityOutcome>(), input_schema = input::<AddEntity>())]
    async fn add_entity(
        &self,
        args: JsonObject,
        ctx: RequestContext<RoleServer>,
    ) -> ToolResult<EntityOutcome> {
        let who = self.who(&ctx)?;
        let mut req: AddEntity = parse(args)?;
        req.agent_id = self.session_agent(req.room_id, req.agent_id, &ctx)?;
        done(self.macp.add_entity(&who, req).await)
    }

    #[tool(description = docs::ADD_RELATIONSHIP, output_schema = output::<RelationshipOutcome>(), input_schema = input::<AddRelationship>())]
    async fn add_relationship(
        &self,
        args: JsonObject,
        ctx: RequestContext<RoleServer>,
    ) -> ToolResult<RelationshipOutcome> {
        let who = self.who(&ctx)?;
        let mut req: AddRelationship = parse(args)?;
        req.agent_id = self.session_agent(req.room_id, req.agent_id, &ctx)?;
        done(self.macp.add_relationship(&who, req).await)
    }

    #[tool(description = docs::MERGE_ENTITIES, output_schema = output::<MergeOutcome>(), input_schema = input::<MergeEntities>())]
    async fn merge_entities(
        &self,
        args: JsonObject,
        ctx: RequestContext<RoleServer>,
    ) -> ToolResult<MergeOutcome> {
        let who = self.who(&ctx)?;
        let mut req: MergeEntities = parse(args)?;
        req.agent_id = self.session_agent(req.room_id, req.agent_id, &ctx)?;
        done(self.macp.merge_entities(&who, req).await)
    }

    #[tool(description = docs::GET_ENTITY_GRAPH, output_schema = output::<EntityGraph>(), input_schema = input::<GraphQuery>())]
    async fn get_entity_graph(
        &self,
        args: JsonObject,
        ctx: RequestContext<RoleServer>,
    ) -> ToolResult<EntityGraph> {
        let who = self.who(&ctx)?;
        done(self.macp.entity_graph(&who, parse(args)?).await)
    }

    #[tool(description = docs::REQUEST_ARTIFACT_UPLOAD, output_schema = output::<UploadTicket>(), input_schema = input::<RequestUpload>())]
    async fn request_artifact_upload(
        &self,
        args: JsonObject,
        ctx: RequestContext<RoleServer>,
    ) -> ToolResult<UploadTicket> {
        let who = self.who(&ctx)?;
        let mut req: RequestUpload = parse(args)?;
        req.agent_id = self.session_agent(req.room_id, req.agent_id, &ctx)?;
        done(self.macp.request_artifact_upload(&who, req).await)
    }

    #[tool(description = docs::REGISTER_ARTIFACT, output_schema = output::<ArtifactOutcome>(), input_schema = input::<RegisterArtifact>())]
    async fn register_artifact(
        &self,
        args: JsonObject,
        ctx: RequestContext<RoleServer>,
    ) -> ToolResult<ArtifactOutcome> {
        let who = self.who(&ctx)?;
        let mut req: RegisterArtifact = parse(args)?;
        req.agent_id = self.session_agent(req.room_id, req.agent_id, &ctx)?;
        done(self.macp.register_artifact(&who, req).await)
    }

    #[tool(description = docs::LIST_ARTIFACTS, output_schema = output::<ArtifactPage>(), input_schema = input::<ListArtifacts>())]
    async fn list_artifacts(
        &self,
        args: JsonObject,
        ctx: RequestContext<RoleServer>,
    ) -> ToolResult<ArtifactPage> {
        let who = self.who(&ctx)?;
        done(self.macp.list_artifacts(&who, parse(args)?).await)
    }
}

/// Arguments of the prompts that take a room.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct RoomPromptArgs {
    /// The room to work in.
    pub room_id: String,
}

#[prompt_router]
#[allow(missing_docs)] // the prompt macro generates undocumented helpers
impl MacpMcp {
    /// Join a MACP room and orient: read its context, then start the collaboration loop.
    #[prompt(name = "start_in_room")]
    async fn start_in_room(&self, Parameters(a): Parameters<RoomPromptArgs>) -> Vec<PromptMessage> {
        vec![PromptMessage::new_text(Role::User, docs::start_prompt(&a.room_id))]
    }

    /// One iteration of the MACP collaboration loop for a room you have joined.
    #[prompt(name = "iteration_loop")]
    async fn iteration_loop(&self, Parameters(a): Parameters<RoomPromptArgs>) -> Vec<PromptMessage> {
        vec![PromptMessage::new_text(Role::User, docs::loop_prompt(&a.room_id))]
    }

    /// How to use MACP well: the loop, the rules, and a worked example of every tool (SKILL.md).
    #[prompt(name = "macp_skill")]
    async fn macp_skill(&self) -> Vec<PromptMessage> {
        vec![PromptMessage::new_text(Role::User, docs::skill())]
    }
}

#[tool_handler(router = self.tool_router)]
#[prompt_handler(router = self.prompt_router)]
impl ServerHandler for MacpMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_prompts()
                .enable_resources()
                .enable_resources_subscribe()
                .enable_logging()
                .build(),
        )
        .with_server_info(Implementation::new("macp", env!("CARGO_PKG_VERSION")))
        .with_instructions(docs::INSTRUCTIONS)
    }

    /// Every tool call goes through here: one structured log line per call with the tool, the
    /// user, the outcome (`ok` or the error code) and the duration. Arguments and results are
    /// not logged: they may hold what people would rather keep in the room.
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let tool = request.name.to_string();
        let auth = self.auth(&context);
        let user = auth.as_ref().ok().map(|a| a.principal.user_id.to_string()).unwrap_or_default();
        let started = std::time::Instant::now();
        // A token that may only read is refused every tool that writes, by the one table that
        // also gives the tools their annotations (an HTTP request was refused earlier, with the
        // OAuth challenge; this covers every transport).
        let out = match auth {
            Ok(a) if !a.can_write && access::writes(&tool) => {
                Ok(CallToolResponse::Complete(tool_error(&Error::PermissionDenied {
                    message: format!(
                        "insufficient_scope: {tool} writes; this token may only call read tools"
                    ),
                })))
            }
            _ => self.tool_router.call(ToolCallContext::new(self, request, context)).await,
        };
        let ms = started.elapsed().as_secs_f64() * 1e3;
        let outcome = match &out {
            Ok(CallToolResponse::Complete(r)) if r.is_error == Some(true) => r
                .structured_content
                .as_ref()
                .and_then(|v| v["error"]["code"].as_str())
                .unwrap_or("tool_error")
                .to_owned(),
            Ok(_) => "ok".to_owned(),
            Err(e) => format!("protocol_error {}", e.code.0),
        };
        tracing::info!(tool, user, outcome, ms, "tool call");
        out
    }

    /// Every room is a resource, `macp://rooms/{room_id}` (see [`crate::push`]).
    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new(push::ROOM_URI_TEMPLATE, "macp_room")
                .with_title("An investigation room")
                .with_description(
                    "The room's bounded context (objective, latest findings, top entities, agents). \
                     Subscribe to be told of every change; read what changed with get_updates.",
                )
                .with_mime_type("application/json"),
        ]))
    }

    /// Legacy (2025-11-25 sessions) subscription to a room: one `notifications/resources/updated`
    /// per change, until unsubscribed or the session ends.
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let room = self.subscribable(&request.uri, &ctx).await?;
        let who = self.who(&ctx).map_err(|_| McpError::invalid_request("not authenticated", None))?;
        let peer = ctx.peer.clone();
        let uri = request.uri.clone();
        let task = tokio::spawn(push::forward(self.macp.clone(), who, room, move || {
            let (peer, uri) = (peer.clone(), uri.clone());
            async move { peer.notify_resource_updated(ResourceUpdatedNotificationParam::new(uri)).await.is_ok() }
        }));
        let old = self
            .session
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .subscriptions
            .insert(request.uri, task.abort_handle());
        if let Some(old) = old {
            old.abort();
        }
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if let Some(t) =
            self.session.lock().unwrap_or_else(|p| p.into_inner()).subscriptions.remove(&request.uri)
        {
            t.abort();
        }
        Ok(())
    }

    /// On 2026-07-28, `subscriptions/listen` may name room resources; nothing else is offered.
    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        let rooms: Vec<String> = requested
            .resource_subscriptions
            .iter()
            .flatten()
            .filter(|u| push::room_of(u).is_some())
            .cloned()
            .collect();
        let mut accepted = SubscriptionFilter::new();
        accepted.resource_subscriptions = Some(rooms);
        Some(accepted)
    }

    /// Forwards every change of each accepted room until the client closes the stream.
    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let who = self
            .who(context.request_context())
            .map_err(|_| McpError::invalid_request("no authenticated identity on this subscription", None))?;
        let mut tasks = Vec::new();
        for uri in context.accepted().resource_subscriptions.iter().flatten() {
            // A room the caller may not see is not listened to (a members-only room of others
            // must not even show that it changes).
            let Ok(room) = self.subscribable(uri, context.request_context()).await else { continue };
            let (sink, uri) = (context.sink().clone(), uri.clone());
            tasks.push(tokio::spawn(push::forward(self.macp.clone(), who.clone(), room, move || {
                let (sink, uri) = (sink.clone(), uri.clone());
                async move { sink.notify_resource_updated(uri).await.is_ok() }
            })));
        }
        context.cancelled().await;
        for t in tasks {
            t.abort();
        }
        Ok(())
    }

    /// One resource: SKILL.md at `macp://skill`, for clients that read resources rather than
    /// prompts. (Rooms are resources too, listed as a template.)
    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        Ok(ListResourcesResult::with_all_items(vec![
            Resource::new(docs::SKILL_URI, "macp_skill")
                .with_title("How to use MACP well (SKILL.md)")
                .with_description("The iteration loop, the rules, and a worked example of every tool.")
                .with_mime_type("text/markdown")
                .with_size(docs::skill().len() as u64),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        if let Some(room) = push::room_of(&request.uri) {
            let who = self.who(&ctx).map_err(|_| McpError::invalid_request("not authenticated", None))?;
            let agent = self.reading_agent(room, None, &ctx);
            let q = macp_core::service::ContextQuery { room_id: room, agent_id: agent };
            let c = self.macp.room_context(&who, q).await.map_err(|e| resource_error(&request.uri, &e))?;
            return Ok(ReadResourceResult::new(vec![ResourceContents::TextResourceContents {
                uri: request.uri.clone(),
                mime_type: Some("application/json".into()),
                text: serde_json::to_string(&c).unwrap_or_default(),
                meta: None,
            }])
            .into());
        }
        if request.uri != docs::SKILL_URI {
            return Err(McpError::resource_not_found(
                format!("no resource `{}`; this server has {}", request.uri, docs::SKILL_URI),
                Some(serde_json::json!({ "uri": request.uri })),
            ));
        }
        Ok(ReadResourceResult::new(vec![ResourceContents::TextResourceContents {
            uri: docs::SKILL_URI.into(),
            mime_type: Some("text/markdown".into()),
            text: docs::skill().into(),
            meta: None,
        }])
        .into())
    }

    /// Accepted and remembered, but the server sends no `notifications/message`: what it logs
    /// (one line per tool call) goes to the operator's JSON log, and MCP logging is deprecated
    /// (SEP-2577). Agents learn everything they need from tool results and errors.
    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        *self.log_level.lock().unwrap_or_else(|p| p.into_inner()) = Some(request.level);
        Ok(())
    }
}
