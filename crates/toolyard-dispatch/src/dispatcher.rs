//! The dispatcher: one entry point for every call, from every front door.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolyard_core::{Catalog, Engine, Tool, ToolDefinition, ToolError, ToolResult, ToolSpec};
use toolyard_dialects::{Dialect, DialectTool};
use toolyard_policy::CommandPolicy;
use toolyard_runner::protocol::Job;
use toolyard_tools::ToolEnv;

use crate::execute::{InProcess, Lanes};
use crate::hooks::{HookCall, Hooks};
use crate::layers::{self, Admitted};
use crate::place::{Placement, Placer};
use crate::request::CallRequest;
use crate::router::Router;

/// How calls are executed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Mode {
    /// In this process, without a sandbox (embedding, tests).
    #[default]
    Inline,
    /// In a sandboxed runner process per lane, started from this `toolyard` executable.
    Lanes {
        /// The `toolyard` binary.
        exe: PathBuf,
    },
}

/// Said in the command tools' descriptions under [`Mode::Inline`].
const INLINE_NOTE: &str = " NOT SANDBOXED: this server runs inline, so the command runs with \
     the user's full access to every file and to the network; no lane rule applies.";

/// What a dispatcher serves.
#[derive(Debug, Clone)]
pub struct DispatcherConfig {
    /// The workspace root.
    pub workspace: PathBuf,
    /// The merged catalog.
    pub catalog: Catalog,
    /// The file the catalog came from (runners load it too), if not the built-in one.
    pub catalog_path: Option<PathBuf>,
    /// The tool vocabulary.
    pub dialect: Dialect,
    /// The profile (`all`, or one of the catalog's loop types).
    pub profile: String,
    /// How calls run.
    pub mode: Mode,
    /// Toolyard's state directory for this workspace (default: the one [`StateDir`] picks).
    ///
    /// [`StateDir`]: toolyard_workspace::StateDir
    pub state_dir: Option<PathBuf>,
}

impl DispatcherConfig {
    /// Defaults: built-in catalog, loopr dialect, profile `all`, inline.
    pub fn new(workspace: impl Into<PathBuf>) -> Self {
        Self {
            workspace: workspace.into(),
            catalog: Catalog::builtin(),
            catalog_path: None,
            dialect: Dialect::Loopr,
            profile: toolyard_core::ALL_PROFILE.into(),
            mode: Mode::Inline,
            state_dir: None,
        }
    }
}

/// Routes calls to tools: dialect names, profile filter, catalog limits, execution. Every call,
/// from every front door (MCP, the CLI, the session host, Rust), takes one path through
/// [`Dispatcher::call`]: admit (the layers) → place (one decision) → execute (the executor
/// placed), with the hooks around placing and executing when the catalog configures any.
pub struct Dispatcher {
    /// Runs calls in this process; holds the shared tool environment.
    in_process: InProcess,
    /// The one table of served tools: name in the dialect → tool, engine and argument shape.
    tools: BTreeMap<String, DialectTool>,
    /// Each served tool's catalog entry (its engine's, or its own), by the name it is served
    /// under: every served tool has one, so none runs with made-up limits.
    specs: BTreeMap<String, ToolSpec>,
    /// The catalog's `[policy]`, for the command policy layer.
    policy: CommandPolicy,
    config: DispatcherConfig,
    /// Runs calls in the lanes' runners, when calls run in lanes.
    lanes: Option<Lanes>,
    /// The hooks layer, present only when the catalog configures hooks.
    hooks: Option<Hooks>,
    /// The catalog's sections, parsed once.
    sections: crate::config::Config,
    calls: AtomicU64,
    /// Calls running now (a small write runs inline only when it is the only one).
    in_flight: AtomicUsize,
    /// Identical failed calls per session, to say when a model repeats one.
    repeats: crate::repeats::Repeats,
}

/// What [`DispatcherBuilder::build`] assembles.
pub(crate) struct Parts {
    pub(crate) in_process: InProcess,
    pub(crate) tools: BTreeMap<String, DialectTool>,
    pub(crate) specs: BTreeMap<String, ToolSpec>,
    pub(crate) policy: CommandPolicy,
    pub(crate) config: DispatcherConfig,
    pub(crate) lanes: Option<Lanes>,
    pub(crate) hooks: Option<Hooks>,
    pub(crate) sections: crate::config::Config,
}

impl Dispatcher {
    pub(crate) fn from_parts(p: Parts) -> Self {
        Self {
            in_process: p.in_process,
            tools: p.tools,
            specs: p.specs,
            policy: p.policy,
            config: p.config,
            lanes: p.lanes,
            hooks: p.hooks,
            sections: p.sections,
            calls: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            repeats: Default::default(),
        }
    }

    /// Serve `tool`, an embedder's own Rust tool, beside the dialect's, with the limits of
    /// `spec` (its lane is only a label: it runs in this process). Every layer applies to it
    /// as to a built-in tool: argument validation against its schema, the time limit, hooks
    /// (a tool not annotated read-only counts as changing files, and reports them in
    /// `files_changed`, which auto-commit commits). Refused when the name is taken or its
    /// schema does not compile.
    pub fn register(&mut self, tool: Arc<dyn Tool>, spec: ToolSpec) -> Result<(), ToolError> {
        self.register_shaped(tool, spec, toolyard_core::CallShape::NONE)
    }

    /// [`Dispatcher::register`] for a tool whose arguments carry what a layer checks: with
    /// `shape.command`, the command policy judges that argument before the tool runs.
    pub fn register_shaped(
        &mut self,
        tool: Arc<dyn Tool>,
        spec: ToolSpec,
        shape: toolyard_core::CallShape,
    ) -> Result<(), ToolError> {
        let name = tool.name().to_string();
        if self.tools.contains_key(&name) || self.config.catalog.tool(&name).is_some() {
            return Err(ToolError::InvalidArguments(format!(
                "cannot register `{name}`: a tool of that name is already served; rename it"
            )));
        }
        tool.arg_validator().map_err(|e| {
            ToolError::InvalidArguments(format!(
                "cannot register `{name}`: its input schema does not compile: {e}"
            ))
        })?;
        self.specs.insert(name.clone(), spec);
        self.tools
            .insert(name, DialectTool::new(Engine::Embedded, tool).shaped(shape));
        Ok(())
    }

    /// The shared tool environment.
    pub fn env(&self) -> &Arc<ToolEnv> {
        &self.in_process.env
    }

    /// The catalog's sections, parsed once when this dispatcher was built.
    pub fn sections(&self) -> &crate::config::Config {
        &self.sections
    }

    /// The configuration this dispatcher was built with.
    pub fn config(&self) -> &DispatcherConfig {
        &self.config
    }

    /// The names of the tools served, sorted.
    pub fn tool_names(&self) -> Vec<&str> {
        self.tools.keys().map(String::as_str).collect()
    }

    /// Definitions of the tools served and able to work, sorted by name: a tool that needs
    /// configuring (web_search without a provider, oracle without an endpoint) is left out. A
    /// description set in the catalog file replaces the tool's own (for tools that keep their
    /// catalog name).
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.all_definitions()
            .into_iter()
            .filter_map(|(d, need)| need.is_none().then_some(d))
            .collect()
    }

    /// Definitions of every tool of the dialect and profile, each with what it still needs
    /// configured (`None`: it can work).
    pub fn all_definitions(&self) -> Vec<(ToolDefinition, Option<String>)> {
        self.tools
            .values()
            .map(|t| {
                let spec = self.spec(t);
                let custom = (t.engine.is_builtin() && t.tool.name() == t.engine.name())
                    .then_some(spec.description.as_deref())
                    .flatten();
                let mut def = ToolDefinition::of(t.tool.as_ref(), custom)
                    .with_timeout_limits(spec.timeout_ms, spec.max_timeout_ms);
                if self.config.mode == Mode::Inline && t.engine.runs_commands() {
                    def.description.push_str(INLINE_NOTE);
                }
                (def, t.tool.needs())
            })
            .collect()
    }

    /// Whether calls run in this process, with nothing sandboxed but the file tools' paths.
    pub fn is_inline(&self) -> bool {
        self.config.mode == Mode::Inline
    }

    /// Whether `tool` runs in the lane its `process_id` names (or every lane, for
    /// `process_list`) rather than in its catalog lane.
    pub fn runs_in_process_lane(&self, tool: &str) -> bool {
        self.tools
            .get(tool)
            .is_some_and(|t| t.engine.runs_in_process_lane())
    }

    /// Whether `tool` keeps a session's state in memory between calls (see
    /// [`toolyard_core::Tool::keeps_session_state`]).
    pub fn keeps_session_state(&self, tool: &str) -> bool {
        self.tools
            .get(tool)
            .is_some_and(|t| t.tool.keeps_session_state())
    }

    /// The engine a served tool runs under, e.g. `run_command` for claude-code's `Bash`.
    pub fn engine_of(&self, tool: &str) -> Option<Engine> {
        self.tools.get(tool).map(|t| t.engine)
    }

    /// Whether a call of `tool` with `args` may leave a process running past its answer (or
    /// reaches one, or keeps the session's state), so a CLI call must run where processes
    /// live on (the session host). Asked of the engine and the tool's argument shape.
    pub fn outlives_call(&self, tool: &str, args: &Value) -> bool {
        let Some(t) = self.tools.get(tool) else {
            return false;
        };
        t.tool.keeps_session_state()
            || match t.engine.outlives_call() {
                toolyard_core::Outlives::Always => true,
                toolyard_core::Outlives::WhenAsked => t.shape.asks_to_outlive(args),
                toolyard_core::Outlives::Never => false,
            }
    }

    /// Whether `tool` runs in this (server) process rather than in its lane's runner.
    pub fn runs_in_server(&self, tool: &str) -> bool {
        self.tools
            .get(tool)
            .is_some_and(|t| t.engine.runs_in_server(self.is_remote()))
    }

    /// Whether the runners' workspace is elsewhere (the catalog's `[remote]` link).
    pub fn is_remote(&self) -> bool {
        self.router().is_some_and(Router::is_remote)
    }

    /// The catalog entry a served tool runs under (its lane and limits).
    pub fn spec_of(&self, tool: &str) -> Option<ToolSpec> {
        self.tools.get(tool).map(|t| self.spec(t).clone())
    }

    /// The catalog entry of a served tool (every one has one: see `specs`).
    fn spec(&self, t: &DialectTool) -> &ToolSpec {
        self.specs
            .get(t.tool.name())
            .unwrap_or_else(|| unreachable!("a served tool without a spec"))
    }

    /// The router, when calls run in lanes.
    pub fn router(&self) -> Option<&Router> {
        self.lanes.as_ref().map(|l| &*l.router)
    }

    /// What the network-request admission needs to know of `tool`, when it is served.
    fn served(&self, tool: &str) -> Option<crate::network_request::Served<'_>> {
        Some(crate::network_request::Served {
            engine: self.engine_of(tool)?,
            lane: self.spec_of(tool)?.lane,
            gated: self.router().is_some() && !self.is_remote(),
            state: self.env().state.path(),
            network: &self.sections.network,
            catalog_path: self.config.catalog_path.as_deref(),
        })
    }

    /// Whether a call of `tool` with `args` may run on its transport's own thread (driven
    /// there with `block_on`): no hooks around calls (they start processes), and placed in this
    /// process on the request's own thread ([`Placement::InServer`] `inline`), as when the
    /// call is `alone` (the client has nothing else waiting) or not. The stdio front door asks
    /// this of each request it reads.
    pub fn is_prompt(
        &self,
        tool: &str,
        args: Option<&serde_json::Map<String, Value>>,
        alone: bool,
    ) -> bool {
        if self.hooks.is_some() {
            return false;
        }
        let Ok(entry) = layers::resolve(&self.tools, tool) else {
            return false;
        };
        let args = args.map_or(Value::Null, |a| Value::Object(a.clone()));
        let placer = Placer {
            in_flight: if alone { 1 } else { usize::MAX },
            ..self.placer()
        };
        matches!(
            placer.place(entry, self.spec(entry), "", &args),
            Ok(Placement::InServer { inline: true })
        )
    }

    /// Where calls go, as of now.
    fn placer(&self) -> Placer<'_> {
        Placer {
            router: self.router(),
            env: self.env(),
            in_flight: self.in_flight.load(Ordering::Relaxed),
        }
    }

    /// Run one call: admitted by the layers of [`crate::layers`], placed once
    /// ([`crate::place`]), executed by the executor placed, with the hooks around placing and
    /// executing. Every failure, an unknown tool or a timeout included, is a result.
    pub async fn call(&self, req: CallRequest) -> ToolResult {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        let _done = InFlight(&self.in_flight);
        let (session, tool, args) = (req.session.clone(), req.tool.clone(), req.args.clone());
        let mut result = crate::network_request::scope(self.call_once(req)).await;
        self.repeats.note(&session, &tool, &args, &mut result);
        result
    }

    async fn call_once(&self, req: CallRequest) -> ToolResult {
        let admitted = match layers::admit(&self.tools, &self.policy, |t| self.spec(t), &req) {
            Ok(admitted) => admitted,
            Err(e) => return e.into(),
        };
        let call = crate::network_request::Call {
            tool: &req.tool,
            session: &req.session,
            args: &req.args,
            approver: req.approver.as_deref(),
        };
        if let Err(e) = crate::network_request::admit(self.served(&req.tool), call).await {
            return e.into();
        }
        let call_id = self.next_call_id();
        let after = (
            admitted.entry.engine.name(),
            req.session.clone(),
            toolyard_tools::lsp::path_args(&req.args),
        );
        let result = match &self.hooks {
            None => self.execute(admitted, req, call_id).await,
            Some(hooks) => {
                let call = HookCall {
                    session: req.session.clone(),
                    tool: req.tool.clone(),
                    engine: admitted.entry.engine,
                    call_id: call_id.clone(),
                    args: req.args.clone(),
                    annotations: admitted.entry.tool.annotations(),
                };
                let cancel = req.cancel.clone();
                hooks
                    .around(&call, &cancel, self.execute(admitted, req, call_id))
                    .await
            }
        };
        crate::lsp::with_diagnostics(self.env(), after, result).await
    }

    /// Place an admitted call and run it on the executor placed.
    async fn execute(
        &self,
        admitted: Admitted<'_>,
        req: CallRequest,
        call_id: String,
    ) -> ToolResult {
        let Admitted { entry, spec, limit } = admitted;
        let placement = match self.placer().place(entry, spec, &req.session, &req.args) {
            Ok(p) => p,
            Err(e) => return e.into(),
        };
        let lanes = match (placement, &self.lanes) {
            (Placement::InServer { inline }, _) => {
                return self
                    .in_process
                    .run(entry.tool.clone(), req, call_id, (limit, spec), inline)
                    .await;
            }
            (_, Some(lanes)) => lanes,
            (_, None) => unreachable!("placed in a lane without lanes"),
        };
        let job = Job::for_call(
            req.session,
            call_id,
            (self.config.dialect.as_str(), &req.tool),
            req.args,
        )
        .within(limit, spec.max_timeout_ms, spec.max_output_bytes);
        match placement {
            Placement::Lane(lane) => {
                let mutating = !entry.tool.annotations().read_only;
                lanes
                    .run(lane, job, req.cancel, req.progress, mutating)
                    .await
            }
            _ => lanes.every(job, req.cancel).await,
        }
    }

    /// A fresh call id: this process's id and a counter.
    fn next_call_id(&self) -> String {
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        format!("{}-{n}", std::process::id())
    }

    /// The server is stopping: remote links release what they placed (a session's pods).
    pub async fn shutdown(&self) {
        if let Some(m) = &self.env().lsp {
            m.shutdown();
        }
        if let Some(router) = self.router() {
            router.shutdown().await;
        }
    }

    /// Kill the background processes of `session` (its client disconnected), in every lane.
    pub async fn end_session(&self, session: &str) {
        crate::network_request::end_session(self.env().state.path(), session);
        match self.router() {
            Some(router) => router.end_session(session).await,
            None => {
                toolyard_tools::process::end_session(session);
            }
        }
    }

    /// How many background processes `session` holds in every lane (running, or ended with
    /// output unread), its persistent shell included.
    pub async fn session_processes(&self, session: &str) -> usize {
        let Some(router) = self.router() else {
            return toolyard_tools::process::session_process_count(session);
        };
        let mut n = 0;
        for lane in router.live_lanes_for(session).await {
            // The engine's own process_list: every runner serves it, whatever this dialect names.
            let call_id = format!("{}-count", std::process::id());
            let tool = Engine::ProcessList.name();
            let job = Job::for_call(session, call_id, (Dialect::Loopr.as_str(), tool), json!({}))
                .within(
                    std::time::Duration::from_secs(10),
                    10_000,
                    toolyard_core::DEFAULT_MAX_OUTPUT_BYTES,
                );
            let r = router
                .submit(lane, job, CancellationToken::new(), Arc::new(|_| {}))
                .await;
            n += r
                .data
                .as_ref()
                .and_then(|d| d.get("processes"))
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
        }
        n
    }
}

/// Counts a call out of [`Dispatcher::in_flight`] when it ends, however it ends.
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
