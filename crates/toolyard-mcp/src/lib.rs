//! # toolyard-mcp
//!
//! Toolyard's MCP front door: every tool of a [`Dispatcher`] served over the Model Context
//! Protocol, on stdio ([`serve_stdio`]) or streamable HTTP ([`serve_http`]), built on `rmcp`.
//!
//! The server knows nothing of tools itself. `tools/list` is the dispatcher's definitions
//! (sorted, with annotations and output schemas); `tools/call` is [`Dispatcher::call`], so every
//! call passes the same dialect, profile, lanes, sandbox, read ledger and journal as the CLI.
//!
//! - **Sessions**: each MCP connection is its own read-tracking session (a fresh uuid per stdio
//!   connection and per HTTP session), so a read in one client never licenses an edit in another.
//! - **Results**: one result, the same in every client. The model-facing text is one text
//!   content block, and `structuredContent` carries that same text as `output` beside the
//!   metadata (`{output, success, files_changed, data, error, error_kind}`), because Claude Code
//!   and Codex show the model `structuredContent` *instead of* the text when it is present, while
//!   Gemini CLI and OpenCode show the text. A tool whose result *is* JSON (the `loom` dialect's)
//!   has that JSON as `structuredContent` and as the text. Every tool's `outputSchema` says
//!   which. A tool failure is a result with `isError: true`, never a JSON-RPC error.
//! - **Progress and cancellation**: with a `progressToken`, the dispatcher's progress reports
//!   become `notifications/progress`; `notifications/cancelled` cancels the call's token, which
//!   kills the command's process tree in its runner.
//! - **Protocol eras**: both the `initialize` era (2024-11-05 … 2025-11-25) and the
//!   per-request-metadata era (2026-07-28) that rmcp speaks.
//!
//! ```no_run
//! # async fn demo() -> Result<(), toolyard_mcp::ServeError> {
//! use std::sync::Arc;
//! use toolyard_dispatch::{Dispatcher, DispatcherConfig};
//!
//! let dispatcher = Dispatcher::new(DispatcherConfig::new(".")).expect("workspace");
//! toolyard_mcp::serve_stdio(Arc::new(dispatcher)).await?;
//! # Ok(()) }
//! ```

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientJsonRpcMessage, ClientRequest,
    ContentBlock, GetMeta, Implementation, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ProgressToken, ProtocolVersion, ServerCapabilities, ServerConfig,
    ServerJsonRpcMessage, ServerResult, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use toolyard_core::{Progress, ProgressSink, ToolDefinition, ToolResult};
use toolyard_dispatch::{CallRequest, Dispatcher};

mod approve;
#[cfg(feature = "conformance")]
mod fixtures;
mod gate;
mod idle;
mod stdio;

pub use gate::{ClientSession, Gate, McpSessionKey, SESSION_COOKIE};

/// The protocol versions this server speaks, oldest first (every one rmcp knows).
pub const PROTOCOL_VERSIONS: &[ProtocolVersion] = ProtocolVersion::KNOWN_VERSIONS;

/// Why the server could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The transport failed (binding the address, reading stdin, ...).
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The MCP handshake over stdio failed.
    #[error("the MCP session could not start: {0}")]
    Init(String),
    /// The server task ended by panicking.
    #[error("the MCP server task failed: {0}")]
    Task(String),
    /// A non-loopback address without a token.
    #[error(
        "refusing to serve {0} without authentication: anyone who can reach it could run commands. \
         Set a bearer token with TOOLYARD_HTTP_TOKEN_FILE=PATH (or TOOLYARD_HTTP_TOKEN), or serve \
         on 127.0.0.1"
    )]
    Unprotected(String),
}

/// The prefix of a session keyed by an HTTP client's cookie.
const COOKIE_SESSION: &str = "mcp-http-client-";

/// What every connection of one server shares: the dispatcher and the tool list, built once.
struct Shared {
    dispatcher: Arc<Dispatcher>,
    /// `tools/list`, in the dispatcher's (sorted) order; built once so it is deterministic and cheap.
    tools: Arc<Vec<Tool>>,
    /// What each tool's `outputSchema` promises as `structuredContent`.
    forms: HashMap<String, Structured>,
    /// Whether this server is reached over HTTP (sessions are then keyed by the HTTP session).
    http: bool,
    /// HTTP clients' cookie sessions, which end after the catalog's idle time.
    cookies: Arc<idle::CookieSessions>,
    /// Serve the conformance suite's fixtures too (only with the `conformance` feature).
    #[cfg_attr(not(feature = "conformance"), allow(dead_code))]
    fixtures: bool,
    /// Network requests asked of 2026-07-28 clients and not answered yet.
    open_asks: approve::Open,
}

impl Shared {
    fn new(dispatcher: Arc<Dispatcher>, http: bool) -> Self {
        let defs = dispatcher.definitions();
        let forms = defs
            .iter()
            .map(|d| (d.name.clone(), Structured::of(d)))
            .collect();
        let tools = defs.iter().filter_map(mcp_tool).collect();
        let idle = dispatcher.sections().idle_timeout();
        Self {
            cookies: idle::CookieSessions::new(idle),
            dispatcher,
            tools: Arc::new(tools),
            forms,
            http,
            fixtures: fixtures_enabled(),
            open_asks: approve::Open::default(),
        }
    }
}

#[cfg(feature = "conformance")]
fn fixtures_enabled() -> bool {
    std::env::var("TOOLYARD_MCP_CONFORMANCE").is_ok_and(|v| v == "1")
}

#[cfg(not(feature = "conformance"))]
fn fixtures_enabled() -> bool {
    false
}

/// A definition in rmcp's form (via the MCP JSON core already exports, so the two cannot drift).
fn mcp_tool(def: &ToolDefinition) -> Option<Tool> {
    match serde_json::from_value::<Tool>(def.to_mcp()) {
        Ok(tool) => Some(tool),
        Err(e) => {
            // A definition that does not fit MCP is a bug in that tool; serve the others.
            tracing::error!(tool = %def.name, error = %e, "tool definition is not valid MCP; not served");
            None
        }
    }
}

/// One MCP connection (stdio) or HTTP session: the server state plus its own session id.
#[derive(Clone)]
pub struct ToolyardServer {
    shared: Arc<Shared>,
    /// The read-tracking session of this connection.
    session: String,
    /// Per-connection state (the conformance fixtures' log level and subscriptions).
    #[cfg_attr(not(feature = "conformance"), allow(dead_code))]
    state: Arc<ConnState>,
}

/// Per-connection state: the HTTP sessions it served (their processes end with it) and what
/// the conformance fixtures need (log level, subscriptions).
#[derive(Default)]
struct ConnState {
    /// The protocol version negotiated by `initialize`, once the client said `initialized`.
    negotiated: std::sync::OnceLock<ProtocolVersion>,
    /// The dispatcher and the `Mcp-Session-Id` sessions this connection served.
    ended: std::sync::Mutex<Option<(Arc<Dispatcher>, HashSet<String>)>>,
    #[cfg(feature = "conformance")]
    fixtures: fixtures::FixtureState,
}

impl Drop for ConnState {
    /// An HTTP session (2025-11-25 and older) ends when its service is dropped (DELETE, or the
    /// session expired): so do the processes it started.
    fn drop(&mut self) {
        let taken = self.ended.lock().ok().and_then(|mut e| e.take());
        let (Some((dispatcher, sessions)), Ok(rt)) = (taken, tokio::runtime::Handle::try_current())
        else {
            return;
        };
        rt.spawn(async move {
            for s in sessions {
                dispatcher.end_session(&s).await;
            }
        });
    }
}

impl ToolyardServer {
    /// A server for one stdio connection over `dispatcher`.
    pub fn new(dispatcher: Arc<Dispatcher>) -> Self {
        Self::with_shared(Arc::new(Shared::new(dispatcher, false)))
    }

    fn with_shared(shared: Arc<Shared>) -> Self {
        Self {
            shared,
            session: format!("mcp-{}", uuid::Uuid::new_v4()),
            state: Arc::default(),
        }
    }

    /// A server for one stdio connection whose read-tracking session is `session`, not a
    /// fresh one: connections of the same name share reads and undo history.
    pub fn with_session(dispatcher: Arc<Dispatcher>, session: String) -> Self {
        Self {
            session,
            ..Self::new(dispatcher)
        }
    }

    /// The read-tracking session id of this connection.
    pub fn session(&self) -> &str {
        &self.session
    }

    /// The session a call belongs to: over stdio this connection's own id; over HTTP the
    /// `Mcp-Session-Id` of a legacy (initialize-era) session, else the client's session cookie
    /// (protocol 2026-07-28 has no sessions, and keying by the client's name let two clients
    /// share reads and undo history).
    fn session_for(&self, ctx: &RequestContext<RoleServer>) -> String {
        if !self.shared.http {
            return self.session.clone();
        }
        let parts = ctx.extensions.get::<axum::http::request::Parts>();
        // Through the gate, the id's keyed hash: the id itself is stored nowhere.
        let header = parts
            .and_then(|p| p.extensions.get::<McpSessionKey>().map(|k| k.0.as_str()))
            .or_else(|| {
                parts
                    .and_then(|p| p.headers.get("mcp-session-id"))
                    .and_then(|v| v.to_str().ok())
            });
        if let Some(id) = header {
            let session = format!("mcp-http-{id}");
            if let Ok(mut ended) = self.state.ended.lock() {
                ended
                    .get_or_insert_with(|| (self.shared.dispatcher.clone(), HashSet::new()))
                    .1
                    .insert(session.clone());
            }
            return session;
        }
        match parts.and_then(|p| p.extensions.get::<ClientSession>()) {
            Some(ClientSession(id)) => format!("{COOKIE_SESSION}{id}"),
            // Not through the gate (an embedder's own router): this request stands alone.
            None => format!("mcp-http-request-{}", uuid::Uuid::new_v4().simple()),
        }
    }

    async fn call_dispatcher(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResponse {
        let session = self.session_for(&ctx);
        // A cookie session lives while its client calls; the reaper ends it when idle.
        let _in_flight = session
            .starts_with(COOKIE_SESSION)
            .then(|| self.shared.cookies.begin(&session));
        let tool = request.name.to_string();
        let arguments = request.arguments.unwrap_or_default();
        // A network request is asked of the user through this client (see `approve`).
        let retry = (
            request.request_state.as_deref(),
            request.input_responses.as_ref(),
        );
        let approver = Arc::new(approve::McpApprover::new(
            &ctx,
            &self.shared.open_asks,
            &tool,
            &arguments,
            retry,
        ));
        let args = Value::Object(arguments.clone());
        let token = ctx.meta.get_progress_token();
        let (tx, mut rx) = mpsc::unbounded_channel::<Progress>();
        let progress: Option<ProgressSink> = token.as_ref().map(|_| {
            let sink: ProgressSink = Arc::new(move |p| {
                // The receiver lives until the call's result is sent; a late report is moot.
                let _ = tx.send(p);
            });
            sink
        });
        let call = CallRequest {
            session,
            tool: tool.clone(),
            args,
            // rmcp cancels this token on `notifications/cancelled` and when the connection closes.
            cancel: ctx.ct.clone(),
            progress,
            approver: Some(approve::shared(&approver)),
        };
        let dispatcher = self.shared.dispatcher.clone();
        // A task of its own: the call finishes (and its cancellation reaches the runner) even if
        // this future were dropped.
        let mut handle = tokio::spawn(async move { dispatcher.call(call).await });
        let result = loop {
            tokio::select! {
                biased;
                joined = &mut handle => break joined,
                Some(p) = rx.recv(), if token.is_some() => {
                    if let Some(t) = &token {
                        send_progress(&ctx, t, p).await;
                    }
                }
            }
        };
        // Reports queued just before the result go out before it, in order.
        if let Some(t) = &token {
            while let Ok(p) = rx.try_recv() {
                send_progress(&ctx, t, p).await;
            }
        }
        if let Some(ask) = approver.input_required(&self.shared.open_asks, &tool, &arguments) {
            return ask.into();
        }
        let result = result.unwrap_or_else(|e| {
            ToolResult::failure("internal", format!("the call of `{tool}` failed: {e}"))
        });
        to_call_result(result, self.shared.form(&tool)).into()
    }
}

async fn send_progress(ctx: &RequestContext<RoleServer>, token: &ProgressToken, p: Progress) {
    let mut param = ProgressNotificationParam::new(token.clone(), p.progress);
    param.total = p.total;
    param.message = p.message;
    if let Err(e) = ctx.peer.notify_progress(param).await {
        tracing::debug!(error = %e, "progress notification not delivered");
    }
}

impl Shared {
    /// What `tool`'s results carry as `structuredContent` (an unknown tool's failure: the
    /// envelope).
    fn form(&self, tool: &str) -> Structured {
        self.forms
            .get(tool)
            .copied()
            .unwrap_or(Structured::ENVELOPE)
    }
}

/// What a tool's definition promises its results carry as `structuredContent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Structured {
    /// The structured form is the tool's `data` itself (else the envelope `{output, success,
    /// files_changed, data, error, error_kind}`).
    pub data: bool,
    /// The tool declares an `outputSchema`, which clients check every success against. A tool
    /// that may answer with an image declares none: an image goes without
    /// `structuredContent` (clients that prefer it, like Codex, would show it instead).
    pub declared: bool,
}

impl Structured {
    /// The envelope, declared (most tools).
    pub const ENVELOPE: Structured = Structured {
        data: false,
        declared: true,
    };

    /// The form `def` declares.
    pub fn of(def: &ToolDefinition) -> Self {
        Structured {
            data: def.result_is_data,
            declared: def.output_schema.is_some(),
        }
    }
}

/// The MCP form of a ToolResult (see the crate docs for the `structuredContent` rule), as the
/// tool's declared `form` promises it.
pub fn to_call_result(result: ToolResult, form: Structured) -> CallToolResult {
    // Images go to the model as image blocks, never into structuredContent (base64 there
    // would cost its size again); the text `output` says an image was returned. The image
    // comes first: it is what the call was for, and a client that keeps only the first block
    // (smolagents, through mcpadapt) must not lose it.
    let mut blocks: Vec<ContentBlock> = result
        .images
        .iter()
        .map(|image| ContentBlock::image(image.data.clone(), image.mime_type.clone()))
        .collect();
    blocks.push(ContentBlock::text(result.output.clone()));
    let mut out = CallToolResult::success(blocks);
    out.is_error = Some(!result.success);
    out.structured_content = if !result.images.is_empty() && !form.declared {
        // Clients that prefer structuredContent (Codex) would show it instead of the image;
        // tools that return images declare no output schema, so none is owed.
        None
    } else if form.data {
        // The text is this JSON already. A failure has no data: its text is the whole story,
        // and clients fall back to the text when structured content is absent (they check
        // the schema of successes only).
        result.data.filter(|_| result.success)
    } else {
        if !result.images.is_empty() {
            // A declared schema is a promise clients check (the Python SDK fails the call
            // without it): keep it, even if a client may then show the text, not the image.
            tracing::warn!(
                "a tool that declares an output schema returned an image; it should not declare one"
            );
        }
        Some(envelope(result))
    };
    out
}

/// The ToolResult's JSON form: `output` (the model's text) beside the metadata programs read.
fn envelope(result: ToolResult) -> Value {
    let mut map = Map::new();
    map.insert("output".into(), Value::String(result.output));
    map.insert("success".into(), Value::Bool(result.success));
    if let Some(data) = result.data {
        map.insert("data".into(), data);
    }
    map.insert(
        "files_changed".into(),
        Value::Array(
            result
                .files_changed
                .into_iter()
                .map(Value::String)
                .collect(),
        ),
    );
    if let Some(e) = result.error {
        map.insert("error".into(), Value::String(e));
    }
    if let Some(k) = result.error_kind {
        map.insert("error_kind".into(), Value::String(k));
    }
    Value::Object(map)
}

impl ServerHandler for ToolyardServer {
    fn get_info(&self) -> ServerConfig {
        #[cfg(feature = "conformance")]
        if self.shared.fixtures {
            return fixtures::server_info();
        }
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("toolyard", env!("CARGO_PKG_VERSION")))
            .with_instructions(format!(
                "Toolyard: {} for the workspace {} (dialect {}, profile {}). \
                 Read a file before you edit or overwrite it.",
                if self.shared.dispatcher.is_inline() {
                    "coding tools running inline, NOT sandboxed (file paths are confined to the \
                     workspace; commands run with the user's full access to files and network)"
                } else {
                    "confined, sandboxed coding tools"
                },
                self.shared.dispatcher.env().workspace.root().display(),
                self.shared.dispatcher.config().dialect,
                self.shared.dispatcher.config().profile,
            ))
    }

    async fn on_initialized(&self, context: rmcp::service::NotificationContext<RoleServer>) {
        if let Some(info) = context.peer.peer_info() {
            let _ = self.state.negotiated.set(info.protocol_version.clone());
        }
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(PROTOCOL_VERSIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        #[cfg(feature = "conformance")]
        if self.shared.fixtures {
            let mut tools = self.shared.tools.as_ref().clone();
            tools.extend(fixtures::tools());
            return Ok(ListToolsResult::with_all_items(tools));
        }
        Ok(ListToolsResult::with_all_items(
            self.shared.tools.as_ref().clone(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        #[cfg(feature = "conformance")]
        if self.shared.fixtures && fixtures::is_fixture_tool(&request.name) {
            return fixtures::call_tool(&self.state.fixtures, request, ctx)
                .await
                .map(Into::into);
        }
        // An unknown tool is a result the model can read too (it lists the tools that exist):
        // the dispatcher answers it like any other failure.
        Ok(self.call_dispatcher(request, ctx).await)
    }

    #[cfg(feature = "conformance")]
    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourcesResult, McpError> {
        let _ = (request, ctx);
        Ok(fixtures::list_resources(self.shared.fixtures))
    }

    #[cfg(feature = "conformance")]
    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourceTemplatesResult, McpError> {
        let _ = (request, ctx);
        Ok(fixtures::list_resource_templates(self.shared.fixtures))
    }

    #[cfg(feature = "conformance")]
    async fn read_resource(
        &self,
        request: rmcp::model::ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, McpError> {
        let _ = ctx;
        fixtures::read_resource(self.shared.fixtures, request)
    }

    #[cfg(feature = "conformance")]
    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: rmcp::model::SubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let _ = ctx;
        fixtures::subscribe(&self.state.fixtures, request, true).await
    }

    #[cfg(feature = "conformance")]
    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: rmcp::model::UnsubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let _ = ctx;
        fixtures::subscribe(
            &self.state.fixtures,
            rmcp::model::SubscribeRequestParams::new(request.uri),
            false,
        )
        .await
    }

    #[cfg(feature = "conformance")]
    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListPromptsResult, McpError> {
        let _ = (request, ctx);
        Ok(fixtures::list_prompts(self.shared.fixtures))
    }

    #[cfg(feature = "conformance")]
    async fn get_prompt(
        &self,
        request: rmcp::model::GetPromptRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetPromptResponse, McpError> {
        let _ = ctx;
        fixtures::get_prompt(self.shared.fixtures, request)
    }

    #[cfg(feature = "conformance")]
    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let _ = ctx;
        fixtures::set_level(&self.state.fixtures, request).await
    }

    #[cfg(feature = "conformance")]
    async fn complete(
        &self,
        request: rmcp::model::CompleteRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CompleteResult, McpError> {
        let _ = ctx;
        fixtures::complete(request)
    }
}

/// Serve `dispatcher` over stdin/stdout until the client closes the connection.
///
/// stdout is the transport: nothing else may write to it while this runs.
pub async fn serve_stdio(dispatcher: Arc<Dispatcher>) -> Result<(), ServeError> {
    serve_stdio_as(dispatcher, None).await
}

/// [`serve_stdio`] under the read-tracking session `session` (a fresh one when `None`), so a
/// client that starts a server per call keeps one read ledger and undo history.
pub async fn serve_stdio_as(
    dispatcher: Arc<Dispatcher>,
    session: Option<String>,
) -> Result<(), ServeError> {
    let server = match session {
        Some(s) => ToolyardServer::with_session(dispatcher.clone(), s),
        None => ToolyardServer::new(dispatcher.clone()),
    };
    let session = server.session().to_string();
    tracing::info!(session = %session, "serving MCP over stdio");
    let runtime = tokio::runtime::Handle::current();
    let front = Arc::new(Prompt {
        server: server.clone(),
        runtime: runtime.clone(),
    });
    let (transport, writer) = stdio::Fd::dup(0)
        .and_then(|input| Ok((input, stdio::Fd::dup(1)?)))
        .and_then(|(input, output)| stdio::guarded(runtime, front, input, output))
        .map_err(|source| ServeError::Io {
            context: "starting the stdio transport".into(),
            source,
        })?;
    let served = match server.serve(transport).await {
        Ok(running) => running
            .waiting()
            .await
            .map(|_| ())
            .map_err(|e| ServeError::Task(e.to_string())),
        // A client that connects and leaves before its first request (a health probe, an
        // editor that changed its mind) is a normal end, not a failure.
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(why)) => {
            tracing::debug!(%why, "client closed the connection before its first request");
            Ok(())
        }
        Err(e) => Err(ServeError::Init(e.to_string())),
    };
    // The client is gone: so are the processes it started.
    dispatcher.end_session(&session).await;
    // The last replies reach stdout before we return.
    let _ = tokio::task::spawn_blocking(move || writer.join()).await;
    served
}

/// What the stdio transport's own threads answer without rmcp: a `ping` of a session opened by
/// `initialize`, and a call of a [prompt](Dispatcher::is_prompt) tool in either protocol era
/// (an `initialize` session, or a 2026-07-28 request whose metadata is complete). That is
/// exactly what rmcp would answer, shaped for the request's era, without its tasks and their
/// hand-offs between threads. A progress token changes nothing: prompt tools report no
/// progress. Anything rmcp would refuse (incomplete metadata, an unknown version) is left to
/// rmcp, whose errors are the reference.
struct Prompt {
    server: ToolyardServer,
    runtime: tokio::runtime::Handle,
}

/// The protocol era a request is answered in.
#[derive(PartialEq)]
enum Era {
    /// A session opened by `initialize`, before 2026-07-28.
    Initialized,
    /// A request carrying complete 2026-07-28 metadata.
    Inline,
}

impl Prompt {
    /// The era of a request with metadata `meta`, when it is one the front answers in.
    fn era(&self, meta: &rmcp::model::RequestMetaObject) -> Option<Era> {
        let inline = ProtocolVersion::V_2026_07_28;
        match meta.protocol_version() {
            None => {
                let negotiated = self.server.state.negotiated.get()?;
                (negotiated.as_str() < inline.as_str()).then_some(Era::Initialized)
            }
            Some(v) => (v.as_str() >= inline.as_str()
                && PROTOCOL_VERSIONS.contains(&v)
                && meta.missing_required_keys(&inline).is_empty())
            .then_some(Era::Inline),
        }
    }
}

impl stdio::Front for Prompt {
    fn takes(&self, message: &ClientJsonRpcMessage, alone: bool) -> bool {
        let ClientJsonRpcMessage::Request(request) = message else {
            return false;
        };
        let Some(era) = self.era(request.request.get_meta()) else {
            return false;
        };
        match &request.request {
            ClientRequest::PingRequest(_) => era == Era::Initialized,
            ClientRequest::CallToolRequest(call) => {
                #[cfg(feature = "conformance")]
                if self.server.shared.fixtures && fixtures::is_fixture_tool(&call.params.name) {
                    return false;
                }
                let args = call.params.arguments.as_ref();
                self.server
                    .shared
                    .dispatcher
                    .is_prompt(&call.params.name, args, alone)
            }
            _ => false,
        }
    }

    fn answer(&self, message: ClientJsonRpcMessage) -> ServerJsonRpcMessage {
        let Some((request, id)) = message.into_request() else {
            return ServerJsonRpcMessage::error(
                McpError::internal_error("not a request: nothing to answer", None),
                None,
            );
        };
        let era = self.era(request.get_meta());
        let mut result = match request {
            ClientRequest::CallToolRequest(call) => {
                let call = call.params;
                let tool = call.name.to_string();
                let args = Value::Object(call.arguments.unwrap_or_default());
                let request = CallRequest::new(self.server.session.clone(), tool.clone(), args);
                let shared = &self.server.shared;
                let result = shared.dispatcher.call_here(&self.runtime, request);
                ServerResult::CallToolResult(to_call_result(result, shared.form(&tool)))
            }
            _ => ServerResult::empty(()),
        };
        // What rmcp's handler does last, per era.
        if era == Some(Era::Inline) {
            result.fill_missing_cache_hints();
        } else {
            result.strip_result_type_for_legacy_peer();
        }
        ServerJsonRpcMessage::response(result, id)
    }
}

/// A streamable HTTP server bound to its address, not yet serving.
pub struct HttpServer {
    listener: tokio::net::TcpListener,
    router: axum::Router,
    shutdown: CancellationToken,
    /// What ends idle cookie sessions while the server runs.
    reaper: (Arc<idle::CookieSessions>, Arc<Dispatcher>),
}

impl HttpServer {
    /// Bind `addr` (port 0 picks a free port) and prepare the MCP endpoint at `/mcp`, with no
    /// token: only a loopback address is accepted.
    pub async fn bind(dispatcher: Arc<Dispatcher>, addr: &str) -> Result<Self, ServeError> {
        Self::bind_with(dispatcher, addr, Gate::default()).await
    }

    /// [`HttpServer::bind`] behind `gate`. An address that is not loopback is refused unless
    /// the gate requires a token: anyone who can reach the port could otherwise run commands.
    pub async fn bind_with(
        dispatcher: Arc<Dispatcher>,
        addr: &str,
        gate: Gate,
    ) -> Result<Self, ServeError> {
        use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
        use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};

        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| ServeError::Io {
                context: format!("cannot listen on {addr}"),
                source,
            })?;
        let bound = listener.local_addr().map_err(|source| ServeError::Io {
            context: format!("cannot read the address bound for {addr}"),
            source,
        })?;
        if !bound.ip().is_loopback() && !gate.requires_token() {
            return Err(ServeError::Unprotected(bound.to_string()));
        }
        let shutdown = CancellationToken::new();
        let shared = Arc::new(Shared::new(dispatcher.clone(), true));
        let reaper = (shared.cookies.clone(), dispatcher);
        let mut config =
            StreamableHttpServerConfig::default().with_cancellation_token(shutdown.child_token());
        if bound.ip().is_loopback() {
            // Host validation (loopback names only) is what stops DNS rebinding from a web page
            // reaching a local server that can run commands.
            let port = bound.port();
            let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1", "[::1]"]
                .iter()
                .map(|h| h.to_string())
                .collect();
            hosts.extend(hosts.clone().into_iter().map(|h| format!("{h}:{port}")));
            config = config.with_allowed_hosts(hosts);
        } else {
            // Reached from other hosts under whatever name they use; the token is the guard (a
            // rebinding page cannot know it).
            config = config.disable_allowed_hosts();
        }
        let service = StreamableHttpService::new(
            move || Ok(ToolyardServer::with_shared(shared.clone())),
            Arc::new(LocalSessionManager::default()),
            config,
        );
        let router = axum::Router::new().nest_service("/mcp", service).layer(
            axum::middleware::from_fn_with_state(Arc::new(gate), gate::admit),
        );
        Ok(Self {
            listener,
            router,
            shutdown,
            reaper,
        })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> Result<SocketAddr, ServeError> {
        self.listener.local_addr().map_err(|source| ServeError::Io {
            context: "cannot read the bound address".into(),
            source,
        })
    }

    /// A token that stops the server when cancelled.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Serve until the shutdown token is cancelled.
    pub async fn run(self) -> Result<(), ServeError> {
        let token = self.shutdown.clone();
        let (cookies, dispatcher) = self.reaper;
        tokio::spawn(idle::reap(cookies, dispatcher, token.child_token()));
        axum::serve(self.listener, self.router)
            .with_graceful_shutdown(async move { token.cancelled().await })
            .await
            .map_err(|source| ServeError::Io {
                context: "the HTTP server failed".into(),
                source,
            })
    }
}

/// Serve `dispatcher` over streamable HTTP at `http://ADDR/mcp` until `shutdown` is cancelled.
pub async fn serve_http(
    dispatcher: Arc<Dispatcher>,
    addr: &str,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    let server = HttpServer::bind(dispatcher, addr).await?;
    let token = server.shutdown_token();
    tokio::spawn(async move {
        shutdown.cancelled().await;
        token.cancel();
    });
    server.run().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn structured_content_carries_the_text_beside_the_data() {
        let r = ToolResult::ok("     1|hello")
            .with_data(json!({"n": 1}))
            .with_files_changed(vec!["a.txt".into()]);
        let out = to_call_result(r, Structured::ENVELOPE);
        assert_eq!(
            out.structured_content,
            Some(
                json!({"output": "     1|hello", "success": true, "data": {"n": 1}, "files_changed": ["a.txt"]})
            )
        );
        assert_eq!(out.is_error, Some(false));
    }

    #[test]
    fn an_image_becomes_an_image_block_and_the_result_has_no_structured_form() {
        let r = ToolResult::ok("PNG image, 1x1 pixels").with_image(toolyard_core::Image {
            data: "iVBORw0=".into(),
            mime_type: "image/png".into(),
        });
        let out = to_call_result(
            r.clone(),
            Structured {
                data: false,
                declared: false,
            },
        );
        let content = serde_json::to_value(&out.content).unwrap_or_default();
        // The image first (a client keeping only the first block keeps it), then the text.
        assert_eq!(content[0]["type"], json!("image"));
        assert_eq!(content[0]["data"], json!("iVBORw0="));
        assert_eq!(content[0]["mimeType"], json!("image/png"));
        assert_eq!(content[1]["type"], json!("text"));
        // Codex shows structuredContent instead of the blocks: with it the image would be lost.
        assert!(out.structured_content.is_none());
        // A tool that declared a schema anyway still gets its structured form: clients check
        // for it, and a result they refuse is worse than an image shown as text.
        let out = to_call_result(r, Structured::ENVELOPE);
        assert_eq!(
            out.structured_content.unwrap_or_default()["output"],
            json!("PNG image, 1x1 pixels")
        );
    }

    #[test]
    fn a_data_shaped_tool_that_may_return_images_keeps_its_data_for_text() {
        // loom's read_file: its result is its data, and it declares no schema (images).
        let form = Structured {
            data: true,
            declared: false,
        };
        let r = ToolResult::ok("{\"contents\": \"x\"}").with_data(json!({"contents": "x"}));
        assert_eq!(
            to_call_result(r, form).structured_content,
            Some(json!({"contents": "x"}))
        );
        let r = ToolResult::ok("{}")
            .with_data(json!({"contents": "PNG"}))
            .with_image(toolyard_core::Image {
                data: "iVBORw0=".into(),
                mime_type: "image/png".into(),
            });
        assert!(to_call_result(r, form).structured_content.is_none());
    }

    #[test]
    fn structured_content_is_the_data_when_the_result_is_its_data() {
        let r = ToolResult::ok("{\"contents\": \"x\"}").with_data(json!({"contents": "x"}));
        let out = to_call_result(
            r,
            Structured {
                data: true,
                declared: true,
            },
        );
        assert_eq!(out.structured_content, Some(json!({"contents": "x"})));
    }

    #[test]
    fn a_failure_is_an_error_result_whose_text_reaches_every_client() {
        let r = ToolResult::failure("path_outside_workspace", "nope");
        let out = to_call_result(r.clone(), Structured::ENVELOPE);
        assert_eq!(out.is_error, Some(true));
        let text = serde_json::to_value(&out.content).unwrap_or_default();
        assert_eq!(text[0]["text"], json!("Error: nope"));
        let structured = out.structured_content.unwrap_or_default();
        assert_eq!(structured["output"], json!("Error: nope"));
        assert_eq!(structured["error_kind"], json!("path_outside_workspace"));
        // A data-shaped tool's failure has no structured form: clients then show the text.
        assert!(
            to_call_result(
                r,
                Structured {
                    data: true,
                    declared: true,
                },
            )
            .structured_content
            .is_none()
        );
    }

    #[test]
    fn every_builtin_definition_converts_to_an_mcp_tool() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let mut config = toolyard_dispatch::DispatcherConfig::new(dir.path().join("ws"));
        std::fs::create_dir(&config.workspace).unwrap_or_else(|e| panic!("mkdir: {e}"));
        config.state_dir = Some(dir.path().join("state"));
        let d = Dispatcher::new(config).unwrap_or_else(|e| panic!("dispatcher: {e}"));
        let defs = d.definitions();
        let tools: Vec<Tool> = defs.iter().filter_map(mcp_tool).collect();
        assert_eq!(tools.len(), defs.len());
        let names: Vec<_> = tools.iter().map(|t| t.name.to_string()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted, "tools/list must be deterministic (sorted)");
        assert!(tools.iter().all(|t| t.annotations.is_some()));
        // Every result has a declared structured form, so a client knows `output` is in it,
        // except where a result may be an image (then it goes as content blocks only).
        for t in &tools {
            assert_eq!(
                t.output_schema.is_some(),
                t.name != "read_file",
                "{}: output schema",
                t.name
            );
        }
    }
}
