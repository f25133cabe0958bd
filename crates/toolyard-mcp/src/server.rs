//! The one rmcp handler ([`ToolyardServer`]) and [`answer_call`], the one path of a
//! `tools/call`, which the stdio front door takes too.

use std::borrow::Cow;
use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ProgressToken, ProtocolVersion,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use toolyard_core::{Progress, ProgressSink, ToolResult};
use toolyard_dispatch::{CallRequest, Dispatcher};

#[cfg(feature = "conformance")]
use crate::fixtures;
use crate::result::to_call_result;
use crate::{COOKIE_SESSION, ClientSession, McpSessionKey, PROTOCOL_VERSIONS, Shared, approve};

/// One MCP connection (stdio) or HTTP session: the server state plus its own session id.
#[derive(Clone)]
pub struct ToolyardServer {
    pub(crate) shared: Arc<Shared>,
    /// The read-tracking session of this connection.
    session: String,
    /// Per-connection state (the conformance fixtures' log level and subscriptions).
    pub(crate) state: Arc<ConnState>,
}

/// Per-connection state: the HTTP sessions it served (their processes end with it) and what
/// the conformance fixtures need (log level, subscriptions).
#[derive(Default)]
pub(crate) struct ConnState {
    /// The protocol version negotiated by `initialize`, once the client said `initialized`.
    pub(crate) negotiated: std::sync::OnceLock<ProtocolVersion>,
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

    pub(crate) fn with_shared(shared: Arc<Shared>) -> Self {
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

    /// rmcp's door to [`answer_call`]: the call's session from its context, its progress
    /// sent through rmcp's peer, its network request asked through the client.
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
        // A network request is asked of the user through this client (see `approve`).
        let approver = approve::McpApprover::new(
            &ctx,
            &self.shared.open_asks,
            &request.name,
            request.arguments.as_ref().unwrap_or(&Default::default()),
            (
                request.request_state.as_deref(),
                request.input_responses.as_ref(),
            ),
        );
        let progress = ctx.meta.get_progress_token().map(|token| {
            let peer = ctx.peer.clone();
            let send = move |param: ProgressNotificationParam| {
                let peer = peer.clone();
                async move {
                    if let Err(e) = peer.notify_progress(param).await {
                        tracing::debug!(error = %e, "progress notification not delivered");
                    }
                }
            };
            (token, send)
        });
        let (shared, tool) = (self.shared.clone(), request.name.to_string());
        // rmcp cancels `ctx.ct` on `notifications/cancelled` and when the connection closes.
        let cancel = ctx.ct.clone();
        // A task of its own: the call finishes (and its cancellation reaches the runner) even if
        // this future were dropped.
        let call = tokio::spawn(async move {
            answer_call(
                &shared,
                session,
                request,
                cancel,
                progress,
                Some(Arc::new(approver)),
            )
            .await
        });
        call.await.unwrap_or_else(|e| {
            let failed =
                ToolResult::failure("internal", format!("the call of `{tool}` failed: {e}"));
            to_call_result(failed, self.shared.form(&tool)).into()
        })
    }
}

/// Answer one `tools/call` in `session`: the dispatcher's [`Dispatcher::call`] under `cancel`,
/// its progress reports sent with the request's token by `progress` (in order, all before the
/// answer), its result in the form the tool's definition promises, or the question
/// `approver` left open (the client then retries with the user's answer). rmcp's handler and
/// the stdio front door both answer calls with it; what differs between them (how progress is
/// sent, what cancels the call, whether the client can be asked) is what they pass in.
pub(crate) async fn answer_call<S, F>(
    shared: &Shared,
    session: String,
    request: CallToolRequestParams,
    cancel: CancellationToken,
    progress: Option<(ProgressToken, S)>,
    approver: Option<Arc<approve::McpApprover>>,
) -> CallToolResponse
where
    S: Fn(ProgressNotificationParam) -> F,
    F: Future<Output = ()>,
{
    let tool = request.name.to_string();
    let arguments = request.arguments.unwrap_or_default();
    // What an approver's question is asked about, kept only when there is one.
    let asked_about = approver.as_ref().map(|_| arguments.clone());
    let (reports, mut rx) = match &progress {
        Some(_) => {
            let (tx, rx) = mpsc::unbounded_channel::<Progress>();
            let sink: ProgressSink = Arc::new(move |p| {
                // The receiver lives until the call's result is sent; a late report is moot.
                let _ = tx.send(p);
            });
            (Some(sink), Some(rx))
        }
        None => (None, None),
    };
    let call = CallRequest {
        session,
        tool: tool.clone(),
        args: Value::Object(arguments),
        cancel,
        progress: reports,
        approver: approver.as_ref().map(approve::shared),
    };
    let run = shared.dispatcher.call(call);
    let result = match (&progress, rx.as_mut()) {
        (Some((token, send)), Some(rx)) => {
            tokio::pin!(run);
            let result = loop {
                tokio::select! {
                    biased;
                    result = &mut run => break result,
                    Some(p) = rx.recv() => send(progress_param(token, p)).await,
                }
            };
            // Reports queued just before the result go out before it, in order.
            while let Ok(p) = rx.try_recv() {
                send(progress_param(token, p)).await;
            }
            result
        }
        _ => run.await,
    };
    if let (Some(approver), Some(args)) = (approver, asked_about)
        && let Some(ask) = approver.input_required(&shared.open_asks, &tool, &args)
    {
        return ask.into();
    }
    to_call_result(result, shared.form(&tool)).into()
}

/// A progress report as the notification's parameters, with the request's token.
fn progress_param(token: &ProgressToken, p: Progress) -> ProgressNotificationParam {
    let mut param = ProgressNotificationParam::new(token.clone(), p.progress);
    param.total = p.total;
    param.message = p.message;
    param
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
