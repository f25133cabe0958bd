//! Seeds 003/004's tool API — [`Tool`], [`ToolRegistry`], [`ToolContext`] — on Toolyard's
//! engine, for an embedder that adds one dependency.
//!
//! ```no_run
//! # async fn demo() -> Result<(), toolyard_api::ToolError> {
//! use toolyard_api::{ToolContext, ToolRegistry};
//! let registry = ToolRegistry::for_workspace("/path/to/project")?;   // seeds 003/004's tools
//! let ctx = ToolContext::new("/path/to/project");
//! let tool = registry.get("read_file").expect("a built-in tool");
//! let result = tool.invoke(serde_json::json!({"path": "src/main.rs"}), &ctx).await?;
//! println!("{}", result["contents"]);
//! # Ok(()) }
//! ```
//!
//! The built-in tools are Toolyard's, in the `loom` dialect (seeds 003/004's `read_file`,
//! `list_files`, `edit_file`, `bash`, `web_search`, `oracle`, plus `undo`), each one a call of
//! the [`Dispatcher`] every front door uses (`toolyard serve`, `toolyard call`): the same
//! layers (argument validation, time limit, command policy, read ledger, journal, hooks). The
//! post-tools hook (seed 004's `PostToolsHook`: the catalog's `[hooks.post_tools]`, e.g.
//! `auto_commit`) fires after every mutating call. By default calls run in this process without
//! a sandbox (only paths are confined); [`RegistryBuilder::runners`] runs commands in
//! sandboxed runner lanes. A tool of your own implements [`Tool`] and is registered beside them;
//! it runs as you wrote it, outside the dispatcher's layers.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value, json};
pub use toolyard_core::{Catalog, ToolDefinition, ToolError, ToolResult};
pub use toolyard_dialects::Dialect;
use toolyard_dispatch::{CallRequest, Dispatcher, DispatcherConfig, Mode};

/// The session calls run in when the context names no thread.
pub const DEFAULT_SESSION: &str = "embedder";

/// A conversation thread: calls of one thread share a read ledger and an undo history.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ThreadId(pub String);

impl fmt::Display for ThreadId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for ThreadId {
    fn from(s: &str) -> Self {
        Self(s.to_string())
    }
}

/// Passed to every tool invocation (seed 004).
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The workspace the tools are confined to.
    pub workspace_root: PathBuf,
    /// Where commands run (inside the workspace; default its root).
    pub cwd: PathBuf,
    /// The thread the call belongs to (its read ledger and undo history); none: one shared.
    pub thread_id: Option<ThreadId>,
}

impl ToolContext {
    /// A context at the workspace root, with no thread.
    pub fn new(workspace_root: impl Into<PathBuf>) -> Self {
        let root = workspace_root.into();
        Self {
            cwd: root.clone(),
            workspace_root: root,
            thread_id: None,
        }
    }

    /// The same context in thread `id`.
    pub fn with_thread(mut self, id: impl Into<ThreadId>) -> Self {
        self.thread_id = Some(id.into());
        self
    }
}

/// A tool (seed 003's trait).
#[async_trait]
pub trait Tool: Send + Sync {
    /// The name the model calls it by.
    fn name(&self) -> &str;
    /// What it does, for the model.
    fn description(&self) -> &str;
    /// JSON Schema of its arguments.
    fn input_schema(&self) -> Value;
    /// Run it.
    async fn invoke(&self, args: Value, ctx: &ToolContext) -> Result<Value, ToolError>;
    /// Whether it changes the workspace (seed 004: mutating tools trigger the post-tools hook).
    fn is_mutating(&self) -> bool {
        false
    }
}

/// HashMap-based dynamic dispatch for tool lookup (seed 004).
#[derive(Default)]
pub struct ToolRegistry {
    tools: HashMap<String, Arc<dyn Tool>>,
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Toolyard's tools for `workspace` (dialect `loom`, built-in catalog, in process).
    pub fn for_workspace(workspace: impl Into<PathBuf>) -> Result<Self, ToolError> {
        RegistryBuilder::new(workspace).build()
    }

    /// Register `tool` under its name, replacing one of the same name.
    pub fn register(&mut self, tool: Arc<dyn Tool>) {
        self.tools.insert(tool.name().to_string(), tool);
    }

    /// The tool named `name`.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.get(name).cloned()
    }

    /// The registered names, sorted.
    pub fn list(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.tools.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }

    /// Every tool's definition for the model (seed 003's `ToolDefinition`), sorted by name.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.list()
            .into_iter()
            .filter_map(|n| self.tools.get(n))
            .map(|t| ToolDefinition {
                name: t.name().to_string(),
                description: t.description().to_string(),
                input_schema: t.input_schema(),
                output_schema: None,
                result_is_data: true,
                // What the trait says: a mutating tool may change files, another only looks.
                annotations: toolyard_core::Annotations {
                    read_only: !t.is_mutating(),
                    destructive: t.is_mutating(),
                    idempotent: false,
                    open_world: false,
                },
                freeform: None,
                anthropic_type: None,
            })
            .collect()
    }
}

/// How to build a registry of Toolyard's tools: dialect, catalog, runners.
pub struct RegistryBuilder {
    config: DispatcherConfig,
}

impl RegistryBuilder {
    /// Defaults: dialect `loom` (seeds 003/004), the built-in catalog, calls in this process.
    pub fn new(workspace: impl Into<PathBuf>) -> Self {
        let mut config = DispatcherConfig::new(workspace);
        config.dialect = Dialect::Loom;
        Self { config }
    }

    /// Another vocabulary (e.g. `Dialect::Loopr`, seed 000's).
    pub fn dialect(mut self, dialect: Dialect) -> Self {
        self.config.dialect = dialect;
        self
    }

    /// A catalog (limits, `[policy]`, `[hooks]` with `[hooks.post_tools]`, profiles).
    pub fn catalog(mut self, catalog: Catalog) -> Self {
        self.config.catalog = catalog;
        self
    }

    /// Toolyard's state directory for this workspace (default: the one it picks itself).
    pub fn state_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.config.state_dir = Some(dir.into());
        self
    }

    /// Run commands in sandboxed runner lanes, started from the `toolyard` binary `exe`.
    pub fn runners(mut self, exe: impl Into<PathBuf>) -> Self {
        self.config.mode = Mode::Lanes { exe: exe.into() };
        self
    }

    /// Open the workspace and register each of the dialect's tools.
    pub fn build(self) -> Result<ToolRegistry, ToolError> {
        let dispatcher = Arc::new(Dispatcher::new(self.config)?);
        let mut registry = ToolRegistry::new();
        for definition in dispatcher.definitions() {
            let mutating = dispatcher
                .engine_of(&definition.name)
                .is_some_and(|e| toolyard_dispatch::hooks::is_mutating(e, definition.annotations));
            registry.register(Arc::new(EngineTool {
                dispatcher: dispatcher.clone(),
                definition,
                mutating,
            }));
        }
        Ok(registry)
    }
}

/// One of Toolyard's tools: a call of the dispatcher, through all its layers.
struct EngineTool {
    dispatcher: Arc<Dispatcher>,
    definition: ToolDefinition,
    mutating: bool,
}

#[async_trait]
impl Tool for EngineTool {
    fn name(&self) -> &str {
        &self.definition.name
    }

    fn description(&self) -> &str {
        &self.definition.description
    }

    fn input_schema(&self) -> Value {
        self.definition.input_schema.clone()
    }

    fn is_mutating(&self) -> bool {
        self.mutating
    }

    async fn invoke(&self, mut args: Value, ctx: &ToolContext) -> Result<Value, ToolError> {
        let root = &self.dispatcher.config().workspace;
        if !same_dir(&ctx.workspace_root, root) {
            return Err(ToolError::InvalidArguments(format!(
                "the context's workspace_root {} is not this registry's workspace {}; build a \
                 registry for it with ToolRegistry::for_workspace",
                ctx.workspace_root.display(),
                root.display()
            )));
        }
        apply_cwd(&mut args, &self.definition.input_schema, ctx, root)?;
        let session = ctx
            .thread_id
            .as_ref()
            .map_or(DEFAULT_SESSION.to_string(), ToString::to_string);
        let result = self
            .dispatcher
            .call(CallRequest::new(
                session,
                self.definition.name.clone(),
                args,
            ))
            .await;
        into_value(result)
    }
}

/// Whether `a` and `b` name the same directory (symlinks resolved when both exist).
fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// A context `cwd` below the root becomes the `cwd` argument of a tool that takes one (`bash`),
/// unless the call gave its own.
fn apply_cwd(
    args: &mut Value,
    schema: &Value,
    ctx: &ToolContext,
    root: &Path,
) -> Result<(), ToolError> {
    let takes_cwd = schema["properties"].get("cwd").is_some();
    if !takes_cwd || same_dir(&ctx.cwd, root) {
        return Ok(());
    }
    let cwd = ctx.cwd.strip_prefix(&ctx.workspace_root).map_err(|_| {
        ToolError::outside(
            &ctx.cwd,
            "the context's cwd is not inside its workspace_root",
        )
    })?;
    if let Value::Object(map) = args {
        map.entry("cwd")
            .or_insert_with(|| Value::String(cwd.to_string_lossy().into_owned()));
    }
    Ok(())
}

/// Seed 003's outcome: the dialect's result object on success (`{path, contents, truncated}`
/// for `read_file`), else the error.
fn into_value(result: ToolResult) -> Result<Value, ToolError> {
    if result.success {
        return Ok(match result.data {
            Some(Value::Object(mut map)) => {
                // Images and changed files ride along when the dialect's object lacks them.
                if !result.files_changed.is_empty() && !map.contains_key("files_changed") {
                    map.insert("files_changed".into(), json!(result.files_changed));
                }
                if !result.images.is_empty() {
                    map.insert("images".into(), json!(result.images));
                }
                Value::Object(map)
            }
            Some(other) => other,
            None => {
                let mut map = Map::new();
                map.insert("output".into(), Value::String(result.output));
                if !result.files_changed.is_empty() {
                    map.insert("files_changed".into(), json!(result.files_changed));
                }
                Value::Object(map)
            }
        });
    }
    let message = result.error.unwrap_or(result.output);
    Err(match result.error_kind.as_deref() {
        Some("invalid_arguments") => ToolError::InvalidArguments(
            message
                .strip_prefix("invalid arguments: ")
                .unwrap_or(&message)
                .to_string(),
        ),
        Some("cancelled") => ToolError::Cancelled,
        Some("unavailable") => ToolError::Unavailable(
            message
                .strip_prefix("unavailable: ")
                .unwrap_or(&message)
                .to_string(),
        ),
        Some("not_found") => ToolError::NotFound(message),
        // The rest keep the engine's whole message (what the model should read).
        _ => ToolError::Conflict(message),
    })
}
