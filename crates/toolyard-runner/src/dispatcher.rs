//! The dispatcher: one entry point for every call, from every front door.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use toolyard_core::blocking::on_blocking_thread;
use toolyard_core::engine::SMALL_WRITE_BYTES;
use toolyard_core::{
    Bound, Catalog, Engine, Lane, ProgressSink, Site, Tool, ToolContext, ToolDefinition, ToolError,
    ToolResult, ToolSpec,
};
use toolyard_dialects::{Dialect, DialectTool};
use toolyard_policy::{CommandPolicy, PolicyConfig};
use toolyard_tools::ToolEnv;

use crate::hooks::{HookCall, Hooks};
use crate::layers;
use crate::link::{CommandLink, RemoteConfig, RunnerLink, RunnerSpawn};
use crate::protocol::Job;
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

/// One call as a front door hands it over.
pub struct CallRequest {
    /// The session (read tracking, journal).
    pub session: String,
    /// The tool's name in the dispatcher's dialect.
    pub tool: String,
    /// Its arguments (a JSON object).
    pub args: Value,
    /// Cancelled when the caller gives up.
    pub cancel: CancellationToken,
    /// Where progress reports go, if the caller wants them.
    pub progress: Option<ProgressSink>,
    /// Who asks the user about the call's network request (`None`: nobody can).
    pub approver: Option<Arc<dyn crate::network_request::Approver>>,
}

impl CallRequest {
    /// A call with no cancellation and no progress.
    pub fn new(session: impl Into<String>, tool: impl Into<String>, args: Value) -> Self {
        Self {
            session: session.into(),
            tool: tool.into(),
            args,
            cancel: CancellationToken::new(),
            progress: None,
            approver: None,
        }
    }
}

/// Routes calls to tools: dialect names, profile filter, catalog limits, execution.
pub struct Dispatcher {
    env: Arc<ToolEnv>,
    /// The one table of served tools: name in the dialect → tool, engine and argument shape.
    tools: BTreeMap<String, DialectTool>,
    /// Each served tool's catalog entry (its engine's, or its own), by the name it is served
    /// under: every served tool has one, so none runs with made-up limits.
    specs: BTreeMap<String, ToolSpec>,
    /// The catalog's `[policy]`, for the command policy layer.
    policy: CommandPolicy,
    config: DispatcherConfig,
    router: Option<Arc<Router>>,
    hooks: Hooks,
    calls: AtomicU64,
    /// Identical failed calls per session, to say when a model repeats one.
    repeats: crate::repeats::Repeats,
}

impl Dispatcher {
    /// Open the workspace and build the dialect's tools, filtered by the profile.
    pub fn new(config: DispatcherConfig) -> Result<Self, ToolError> {
        Self::with_link(config, None)
    }

    /// Like [`Dispatcher::new`], with runners reached through `link` when given (a link built
    /// outside this crate, such as the Kubernetes one of `toolyard-remote`).
    pub fn with_link(
        config: DispatcherConfig,
        link: Option<Arc<dyn RunnerLink>>,
    ) -> Result<Self, ToolError> {
        // Every section now, so a mistake fails the start, not the first call that reads it.
        crate::check_catalog(&config.catalog)
            .map_err(|e| ToolError::InvalidArguments(e.to_string()))?;
        let remote: RemoteConfig = config
            .catalog
            .section("remote")
            .map_err(|e| ToolError::InvalidArguments(e.to_string()))?;
        if remote.kubernetes.is_some() && link.is_none() {
            return Err(ToolError::InvalidArguments(
                "the catalog's [remote.kubernetes] needs a toolyard built with the Kubernetes link: `cargo build -p toolyard --features kube`; or reach the pods with [remote] command = [\"kubectl\", \"exec\", \"-i\", ...]".into(),
            ));
        }
        let remote: Option<Arc<dyn RunnerLink>> = match link {
            Some(link) => Some(link),
            None => CommandLink::from_config(&remote).map(|c| Arc::new(c) as Arc<dyn RunnerLink>),
        };
        if remote.is_some() && config.mode == Mode::Inline {
            return Err(ToolError::InvalidArguments(
                "the catalog's [remote] command runs the tools on a remote runner, but this server runs them inline (--inline); drop --inline, or the [remote] section".into(),
            ));
        }
        type Open =
            fn(&std::path::Path, Catalog, Option<&std::path::Path>) -> Result<ToolEnv, ToolError>;
        let open: Open = if remote.as_ref().is_some_and(|l| l.is_remote()) {
            ToolEnv::open_for_remote
        } else {
            ToolEnv::open_with_state
        };
        let mut env = open(
            &config.workspace,
            config.catalog.clone(),
            config.state_dir.as_deref(),
        )?;
        if !remote.as_ref().is_some_and(|l| l.is_remote()) {
            env.lsp = Some(crate::lsp::manager(&config, env.workspace.root())?);
        }
        let env = Arc::new(env);
        let allowed = config
            .catalog
            .profile(&config.profile)
            .map_err(ToolError::InvalidArguments)?;
        let served = toolyard_dialects::tools(&env, config.dialect)?;
        toolyard_dialects::custom_clash(&config.catalog, &served, config.dialect)?;
        let tools: BTreeMap<String, DialectTool> = served
            .into_iter()
            .filter(|t| allowed.iter().any(|a| a == t.catalog_name()))
            .map(|t| (t.tool.name().to_string(), t))
            .collect();
        let mut specs = BTreeMap::new();
        for (name, t) in &tools {
            let spec = config.catalog.tool(t.catalog_name()).ok_or_else(|| {
                ToolError::Io(format!(
                    "internal: `{name}` runs under `{}`, which has no catalog entry",
                    t.catalog_name()
                ))
            })?;
            specs.insert(name.clone(), spec.clone());
        }
        // Every schema compiles now (once per tool type), so validation cannot fail later.
        for t in tools.values() {
            t.tool.arg_validator().map_err(|e| {
                ToolError::Io(format!(
                    "internal: the input schema of `{}` does not compile: {e}",
                    t.tool.name()
                ))
            })?;
        }
        let policy_config: PolicyConfig = config
            .catalog
            .section("policy")
            .map_err(|e| ToolError::InvalidArguments(e.to_string()))?;
        let policy = CommandPolicy::new(&policy_config)
            .map_err(|e| ToolError::InvalidArguments(format!("catalog [policy]: {e}")))?;
        let hooks = Hooks::from_catalog(&config.catalog, env.workspace.root())?;
        let router = match &config.mode {
            Mode::Inline => None,
            Mode::Lanes { exe } => {
                let link: Arc<dyn RunnerLink> = match remote {
                    Some(remote) => remote,
                    None => Arc::new(RunnerSpawn {
                        exe: exe.clone(),
                        workspace: env.workspace.root().to_path_buf(),
                        catalog: config.catalog_path.clone(),
                        state_dir: config.state_dir.clone(),
                    }),
                };
                let router = Arc::new(Router::with_link(link, env.records.clone()));
                if router.is_remote()
                    && let Some(local) = &env.local
                {
                    // Undo restores, and recovery settles, on the runner's side.
                    let lane = config
                        .catalog
                        .spec(Engine::EditFile)
                        .map_or(Lane::NoNet, |s| s.lane);
                    local.set_remote(Arc::new(crate::remote::RouterFiles {
                        router: Arc::downgrade(&router),
                        lane,
                    }));
                    let _ = router
                        .recovery
                        .set(Arc::new(crate::remote::Recovery::new(local.clone())));
                }
                Some(router)
            }
        };
        Ok(Self {
            env,
            tools,
            specs,
            policy,
            config,
            router,
            hooks,
            calls: AtomicU64::new(0),
            repeats: Default::default(),
        })
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
        &self.env
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
        self.router.as_deref().is_some_and(Router::is_remote)
    }

    /// The catalog entry a served tool runs under (its lane and limits).
    pub fn spec_of(&self, tool: &str) -> Option<ToolSpec> {
        self.tools.get(tool).map(|t| self.spec(t))
    }

    /// The catalog entry of a served tool (every one has one: see `specs`).
    fn spec(&self, t: &DialectTool) -> ToolSpec {
        self.specs
            .get(t.tool.name())
            .cloned()
            .unwrap_or_else(|| unreachable!("a served tool without a spec"))
    }

    /// The router, when calls run in lanes.
    pub fn router(&self) -> Option<&Router> {
        self.router.as_deref()
    }

    /// Run one call through the layers of [`crate::layers`], then the hooks around its
    /// execution. Every failure, an unknown tool or a timeout included, is a result.
    pub async fn call(&self, req: CallRequest) -> ToolResult {
        let (session, tool, args) = (req.session.clone(), req.tool.clone(), req.args.clone());
        let mut result = crate::network_request::scope(self.call_once(req)).await;
        self.repeats.note(&session, &tool, &args, &mut result);
        result
    }

    async fn call_once(&self, req: CallRequest) -> ToolResult {
        let (entry, limit) = match self.admit(&req) {
            Ok(admitted) => admitted,
            Err(e) => return e.into(),
        };
        if let Err(e) = crate::network_request::admit(self, &req).await {
            return e.into();
        }
        let call_id = self.next_call_id();
        let after = (
            entry.engine.name(),
            req.session.clone(),
            toolyard_tools::lsp::path_args(&req.args),
        );
        if self.hooks.is_empty() {
            let result = self.execute(entry, req, call_id, limit).await;
            return crate::lsp::with_diagnostics(&self.env, after, result).await;
        }
        // The hooks are a layer around the call, for the inline and the router path alike.
        let call = HookCall {
            session: req.session.clone(),
            tool: req.tool.clone(),
            engine: entry.engine,
            call_id: call_id.clone(),
            args: req.args.clone(),
            annotations: entry.tool.annotations(),
        };
        let cancel = req.cancel.clone();
        let result = self
            .hooks
            .around(&call, &cancel, self.execute(entry, req, call_id, limit))
            .await;
        crate::lsp::with_diagnostics(&self.env, after, result).await
    }

    /// Whether a call of `tool` with `args` may run on its transport's own thread
    /// ([`Self::call_here`]): a file tool that runs in this process, with no hooks around calls
    /// (they start processes), whose work is bounded by its output cap ([`Bound::Prompt`]) or,
    /// when the call is `alone` (the client has nothing else waiting), a small write
    /// ([`Bound::SmallWrite`]: the file at its path argument and every string argument at most
    /// [`SMALL_WRITE_BYTES`]). A 50 MB edit goes to the runtime's threads, and so do writes in
    /// flight together, whose fsyncs overlap there.
    pub fn is_prompt(
        &self,
        tool: &str,
        args: Option<&serde_json::Map<String, Value>>,
        alone: bool,
    ) -> bool {
        if !self.hooks.is_empty() {
            return false;
        }
        let Ok(entry) = layers::resolve(&self.tools, tool) else {
            return false;
        };
        if !entry.engine.runs_in_server(self.is_remote()) {
            return false;
        }
        match entry.engine.bound() {
            Bound::Prompt => true,
            Bound::SmallWrite => {
                alone
                    && args.is_some_and(|a| self.is_small_write(entry, a))
                    && !toolyard_tools::lsp::may_wait(&self.env, entry.engine.name(), args)
            }
            Bound::Open => false,
        }
    }

    /// Whether `args` name a file of at most [`SMALL_WRITE_BYTES`] (or none yet) and carry no
    /// longer string.
    fn is_small_write(&self, entry: &DialectTool, args: &serde_json::Map<String, Value>) -> bool {
        let small = |v: &Value| v.as_str().is_none_or(|s| s.len() <= SMALL_WRITE_BYTES);
        let Some(path) = entry
            .shape
            .path
            .and_then(|k| args.get(k))
            .and_then(Value::as_str)
        else {
            return false;
        };
        let ws = &self.env.workspace;
        args.values().all(small)
            && ws
                .locate(path, ws.root())
                .and_then(|rel| ws.metadata(&rel))
                .is_ok_and(|m| m.is_none_or(|m| m.len() <= SMALL_WRITE_BYTES as u64))
    }

    /// Run one call on the calling thread, which must not be a worker of `runtime` (a
    /// transport's own thread): a [prompt](Self::is_prompt) call runs right here, with no
    /// hand-off between threads; any other waits for [`Self::call`] on the runtime.
    pub fn call_here(&self, runtime: &tokio::runtime::Handle, req: CallRequest) -> ToolResult {
        if !self.is_prompt(&req.tool, req.args.as_object(), true) {
            return runtime.block_on(self.call(req));
        }
        let (session, tool, call_args) = (req.session.clone(), req.tool.clone(), req.args.clone());
        let mut result = match self.admit(&req) {
            Ok((entry, limit)) => {
                let call_id = self.next_call_id();
                let spec = self.spec(entry);
                let (args, ctx) = local_call(req, &spec, call_id, limit, &self.env);
                let bound = backstop(&ctx, limit);
                let after = toolyard_tools::lsp::path_args(&args);
                let run = async { entry.tool.invoke_checked(args, &ctx).await.into() };
                let mut result =
                    on_blocking_thread(|| runtime.block_on(settle(run, &ctx.cancel, bound)));
                // A read opens its file with its server in the background; nothing here waits.
                toolyard_tools::lsp::after_call(
                    &self.env,
                    entry.engine.name(),
                    &ctx.session_id,
                    &after,
                    &mut result,
                );
                result
            }
            Err(e) => e.into(),
        };
        self.repeats.note(&session, &tool, &call_args, &mut result);
        result
    }

    /// A fresh call id: this process's id and a counter.
    fn next_call_id(&self) -> String {
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        format!("{}-{n}", std::process::id())
    }

    /// The layers before a call runs, in the order it meets them: the tool, its setup, its
    /// arguments, its time limit, the command policy.
    fn admit(&self, req: &CallRequest) -> Result<(&DialectTool, Duration), ToolError> {
        let entry = layers::resolve(&self.tools, &req.tool)?;
        layers::configured(entry, &req.tool)?;
        layers::validate(entry, &req.args)?;
        let limit = layers::time_limit(entry, &self.spec(entry), &req.args)?;
        layers::command_policy(&self.policy, entry, &req.args)?;
        Ok((entry, limit))
    }

    /// The server is stopping: remote links release what they placed (a session's pods).
    pub async fn shutdown(&self) {
        if let Some(m) = &self.env.lsp {
            m.shutdown();
        }
        if let Some(router) = &self.router {
            router.shutdown().await;
        }
    }

    /// Kill the background processes of `session` (its client disconnected), in every lane.
    pub async fn end_session(&self, session: &str) {
        crate::network_request::end_session(self, session);
        match &self.router {
            Some(router) => router.end_session(session).await,
            None => {
                toolyard_tools::process::end_session(session);
            }
        }
    }

    /// How many background processes `session` holds in every lane (running, or ended with
    /// output unread), its persistent shell included.
    pub async fn session_processes(&self, session: &str) -> usize {
        let Some(router) = &self.router else {
            return toolyard_tools::process::session_process_count(session);
        };
        let mut n = 0;
        for lane in router.live_lanes_for(session).await {
            // The engine's own process_list: every runner serves it, whatever this dialect names.
            let job = Job {
                id: String::new(),
                session: session.to_string(),
                call_id: format!("{}-count", std::process::id()),
                dialect: Dialect::Loopr.to_string(),
                tool: Engine::ProcessList.name().into(),
                args: serde_json::json!({}),
                timeout_ms: 10_000,
                max_timeout_ms: 10_000,
                max_output_bytes: toolyard_core::DEFAULT_MAX_OUTPUT_BYTES,
            };
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

    /// The lane a process tool's call goes to: the one its process id names (the argument
    /// its shape declares: claude-code's bash_id, shell_id; codex's session_id).
    fn process_lane(&self, entry: &DialectTool, req: &CallRequest) -> Result<Lane, ToolError> {
        let id = entry.shape.process_id_of(&req.args);
        let unknown = || {
            ToolError::NotFound(format!(
                "no process `{id}` in this session: process ids look like `net-3`, as run_command returned them in data.process_id; see process_list"
            ))
        };
        let lane: Lane = toolyard_tools::process::lane_of(id)
            .and_then(|l| l.parse().ok())
            .ok_or_else(unknown)?;
        if let Some(router) = &self.router
            && router.is_lost(&req.session, id)
        {
            return Err(ToolError::Unavailable(format!(
                "process `{id}` is lost: the {lane} runner that held it stopped, and every process it ran was killed; start the command again"
            )));
        }
        Ok(lane)
    }

    /// `process_list` in every lane whose runner runs, merged.
    async fn list_everywhere(
        &self,
        router: &Router,
        entry: &DialectTool,
        req: CallRequest,
        call_id: String,
        limit: Duration,
    ) -> ToolResult {
        let spec = self.spec(entry);
        let mut rows: Vec<Value> = Vec::new();
        let mut text = String::new();
        for lane in router.live_lanes_for(&req.session).await {
            let job = Job {
                id: String::new(),
                session: req.session.clone(),
                call_id: call_id.clone(),
                dialect: self.config.dialect.to_string(),
                tool: req.tool.clone(),
                args: req.args.clone(),
                timeout_ms: millis(limit),
                max_timeout_ms: spec.max_timeout_ms,
                max_output_bytes: spec.max_output_bytes,
            };
            let r = router
                .submit(lane, job, req.cancel.clone(), Arc::new(|_| {}))
                .await;
            if let Some(Value::Array(a)) = r.data.as_ref().and_then(|d| d.get("processes")) {
                rows.extend(a.iter().cloned());
                if !a.is_empty() {
                    text.push_str(&r.output);
                }
            }
        }
        if rows.is_empty() {
            text = "no processes in this session\n".into();
        }
        ToolResult::ok(text).with_data(serde_json::json!({ "processes": rows }))
    }

    /// Run one admitted call (checked arguments, decided `limit`) in its lane's runner, or
    /// in this process.
    async fn execute(
        &self,
        entry: &DialectTool,
        req: CallRequest,
        call_id: String,
        limit: Duration,
    ) -> ToolResult {
        let mut spec = self.spec(entry);
        if let Some(router) = &self.router {
            match entry.engine.site() {
                Site::EveryLane => {
                    return self
                        .list_everywhere(router, entry, req, call_id, limit)
                        .await;
                }
                Site::ByProcessId => match self.process_lane(entry, &req) {
                    Ok(lane) => spec.lane = lane,
                    Err(e) => return e.into(),
                },
                Site::Server | Site::Files | Site::Lane => {}
            }
        }
        let remote = self.is_remote();
        if let (Some(router), false) = (&self.router, entry.engine.runs_in_server(remote)) {
            let job = Job {
                id: String::new(),
                session: req.session,
                call_id,
                dialect: self.config.dialect.to_string(),
                tool: req.tool,
                args: req.args,
                timeout_ms: millis(limit),
                max_timeout_ms: spec.max_timeout_ms,
                max_output_bytes: spec.max_output_bytes,
            };
            let progress = req.progress.unwrap_or_else(|| Arc::new(|_| {}));
            let mutating = !entry.tool.annotations().read_only;
            return router
                .submit_with(spec.lane, job, req.cancel, progress, mutating)
                .await;
        }
        let (args, ctx) = local_call(req, &spec, call_id, limit, &self.env);
        let bound = backstop(&ctx, limit);
        let tool = entry.tool.clone();
        // File I/O, hashing and SQLite block: run the call on a thread that may block, so no
        // async thread (a ping, another session's call) ever waits behind it.
        let cancel = ctx.cancel.clone();
        let handle = tokio::runtime::Handle::current();
        let work = if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread {
            // This worker hands its other tasks over and runs the call itself: one thread
            // hand-off fewer than the blocking pool.
            tokio::spawn(async move {
                tokio::task::block_in_place(|| {
                    on_blocking_thread(|| handle.block_on(tool.invoke_checked(args, &ctx)))
                })
            })
        } else {
            tokio::task::spawn_blocking(move || {
                on_blocking_thread(|| handle.block_on(tool.invoke_checked(args, &ctx)))
            })
        };
        let joined = async {
            match work.await {
                Ok(r) => r.into(),
                Err(e) => ToolError::Io(format!("the call failed: {e}")).into(),
            }
        };
        settle(joined, &cancel, bound).await
    }
}

/// The arguments and context of a call that runs in this process.
fn local_call(
    req: CallRequest,
    spec: &ToolSpec,
    call_id: String,
    limit: Duration,
    env: &ToolEnv,
) -> (Value, ToolContext) {
    let ctx = ToolContext {
        workspace_root: env.workspace.root().to_path_buf(),
        cwd: env.workspace.root().to_path_buf(),
        session_id: req.session,
        call_id,
        cancel: req.cancel,
        progress: req.progress.unwrap_or_else(|| Arc::new(|_| {})),
        timeout: limit,
        max_timeout: Duration::from_millis(spec.max_timeout_ms),
        max_output_bytes: spec.max_output_bytes as usize,
    };
    (req.args, ctx)
}

/// How long an in-process call may take before it is abandoned: tools stop within `limit`
/// themselves; this, past the longest wait a call may ask for, only catches one that hangs.
fn backstop(ctx: &ToolContext, limit: Duration) -> Duration {
    ctx.max_timeout.max(limit) + Duration::from_secs(5)
}

/// `work`'s result, unless `cancel` fires or `bound` passes first.
async fn settle(
    work: impl std::future::Future<Output = ToolResult>,
    cancel: &CancellationToken,
    bound: Duration,
) -> ToolResult {
    tokio::select! {
        r = work => r,
        _ = cancel.cancelled() => ToolError::Cancelled.into(),
        _ = tokio::time::sleep(bound) => ToolError::Timeout { ms: millis(bound) }.into(),
    }
}

/// `d` in whole milliseconds, for the job protocol.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
