//! The `Tool` trait, its typed form, and the context a call runs in.

use std::any::TypeId;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::validate::{ArgValidator, TIMEOUT_ARG};
use crate::{ToolError, ToolResult};

/// Hints a client may show or act on (MCP's tool annotations).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Annotations {
    /// The tool does not change its environment.
    pub read_only: bool,
    /// The tool may overwrite or delete (meaningful when not read-only).
    pub destructive: bool,
    /// Calling twice with the same arguments has no further effect.
    pub idempotent: bool,
    /// The tool reaches outside the workspace (the web, another model).
    pub open_world: bool,
}

impl Annotations {
    /// A tool that only looks.
    pub const READ_ONLY: Self = Self {
        read_only: true,
        destructive: false,
        idempotent: true,
        open_world: false,
    };
    /// A tool that changes files in the workspace.
    pub const MUTATING: Self = Self {
        read_only: false,
        destructive: true,
        idempotent: false,
        open_world: false,
    };
    /// A tool that runs arbitrary commands.
    pub const COMMAND: Self = Self {
        read_only: false,
        destructive: true,
        idempotent: false,
        open_world: true,
    };
    /// A tool that reads from the outside world without changing anything here.
    pub const WEB: Self = Self {
        read_only: true,
        destructive: false,
        idempotent: true,
        open_world: true,
    };
}

/// A progress report from a long-running call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// Work done so far (units chosen by the tool, increasing).
    pub progress: f64,
    /// Total work when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    /// A short human-readable note.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Where a call sends its progress reports.
pub type ProgressSink = Arc<dyn Fn(Progress) + Send + Sync>;

/// Everything a call may know about where and how it runs.
#[derive(Clone)]
pub struct ToolContext {
    /// The workspace root (absolute).
    pub workspace_root: PathBuf,
    /// The working directory for relative paths and commands (inside the workspace).
    pub cwd: PathBuf,
    /// The session this call belongs to (read tracking, journal).
    pub session_id: String,
    /// This call's id, unique within the session.
    pub call_id: String,
    /// Cancelled when the caller gives up on the call.
    pub cancel: CancellationToken,
    /// Where progress reports go.
    pub progress: ProgressSink,
    /// This call's time limit, decided once by [`time_limit`] (the dispatcher's layer, or
    /// [`Tool::invoke`] for a direct call): the tool runs within it and clamps nothing itself.
    pub timeout: Duration,
    /// The catalog's ceiling (`max_timeout_ms`), for waits a call asks for (a yield, a read).
    pub max_timeout: Duration,
    /// The most output bytes the model should get.
    pub max_output_bytes: usize,
}

impl std::fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolContext")
            .field("workspace_root", &self.workspace_root)
            .field("cwd", &self.cwd)
            .field("session_id", &self.session_id)
            .field("call_id", &self.call_id)
            .field("timeout", &self.timeout)
            .field("max_output_bytes", &self.max_output_bytes)
            .finish_non_exhaustive()
    }
}

impl ToolContext {
    /// A context rooted at `workspace_root` with default limits and no progress sink.
    pub fn new(workspace_root: impl Into<PathBuf>, session_id: impl Into<String>) -> Self {
        let root = workspace_root.into();
        Self {
            cwd: root.clone(),
            workspace_root: root,
            session_id: session_id.into(),
            call_id: "call-0".into(),
            cancel: CancellationToken::new(),
            progress: Arc::new(|_| {}),
            timeout: Duration::from_secs(60),
            max_timeout: Duration::from_secs(600),
            max_output_bytes: crate::DEFAULT_MAX_OUTPUT_BYTES as usize,
        }
    }

    /// Send a progress report.
    pub fn report(&self, progress: f64, total: Option<f64>, message: impl Into<String>) {
        (self.progress)(Progress {
            progress,
            total,
            message: Some(message.into()),
        });
    }
}

/// A call's time limit, the one place it is decided: the `asked_ms` of a tool that takes
/// [`TIMEOUT_ARG`], else the catalog's `default`; asking for more than the catalog's `ceiling`
/// is refused with the ceiling named.
pub fn time_limit(
    tool: &str,
    asked_ms: Option<u64>,
    default: Duration,
    ceiling: Duration,
) -> Result<Duration, ToolError> {
    let Some(asked) = asked_ms else {
        return Ok(default.min(ceiling));
    };
    let ceiling_ms = u64::try_from(ceiling.as_millis()).unwrap_or(u64::MAX);
    if asked > ceiling_ms {
        return Err(ToolError::InvalidArguments(format!(
            "`{tool}` was not run: {TIMEOUT_ARG}: {asked} is greater than this tool's ceiling of \
             {ceiling_ms} ms (max_timeout_ms in the catalog); pass at most {ceiling_ms}, or leave \
             it out for the default of {} ms.",
            default.min(ceiling).as_millis()
        )));
    }
    Ok(Duration::from_millis(asked))
}

/// What a tool is, apart from what it does: every fact clients and the dispatcher read of it,
/// declared once by each tool ([`TypedTool::info`], [`Tool::info`]). A new attribute is one
/// field here, one builder method, and the [`Tool`] method that reads it.
#[derive(Clone, Copy)]
pub struct ToolInfo<'a> {
    /// The name a model calls it by.
    pub name: &'a str,
    /// What it does, for the model.
    pub description: &'a str,
    /// Behaviour hints.
    pub annotations: Annotations,
    /// JSON Schema of its structured result (`ToolResult::data`), when it has one: made when
    /// asked for (see [`crate::output_schema_of`]).
    pub output_schema: Option<fn() -> Value>,
    /// Whether the result *is* its `data` (see [`Tool::result_is_data`]).
    pub result_is_data: bool,
    /// Whether a result may carry images (see [`Tool::returns_images`]).
    pub returns_images: bool,
    /// Whether it keeps a session's state in memory (see [`Tool::keeps_session_state`]).
    pub keeps_session_state: bool,
    /// Whether `run` itself checks every constraint its schema states, all at once and with
    /// messages that say more (the artifact tools): the schema then judges only arguments that
    /// do not parse. Read by [`Typed`].
    pub checks_own_args: bool,
    /// The Anthropic API built-in tool type it implements (see [`Tool::anthropic_type`]).
    pub anthropic_type: Option<&'a str>,
    /// Its freeform form (see [`Tool::freeform`]), made when asked for.
    pub freeform: Option<fn() -> crate::schema::Freeform>,
}

impl<'a> ToolInfo<'a> {
    /// A tool called `name` that does `description`, with no output schema and every flag off.
    pub const fn new(name: &'a str, description: &'a str, annotations: Annotations) -> Self {
        Self {
            name,
            description,
            annotations,
            output_schema: None,
            result_is_data: false,
            returns_images: false,
            keeps_session_state: false,
            checks_own_args: false,
            anthropic_type: None,
            freeform: None,
        }
    }

    /// Its structured data is a `T`: the output schema is derived from it.
    pub fn output<T: JsonSchema>(mut self) -> Self {
        self.output_schema = Some(crate::schema::output_schema_of::<T>);
        self
    }

    /// Its output schema is the one `schema` makes.
    pub const fn output_schema(mut self, schema: fn() -> Value) -> Self {
        self.output_schema = Some(schema);
        self
    }

    /// Its result is its data (see [`Tool::result_is_data`]).
    pub const fn result_is_data(mut self) -> Self {
        self.result_is_data = true;
        self
    }

    /// A result may carry images (see [`Tool::returns_images`]).
    pub const fn returns_images(mut self) -> Self {
        self.returns_images = true;
        self
    }

    /// It keeps a session's state in memory (see [`Tool::keeps_session_state`]).
    pub const fn keeps_session_state(mut self) -> Self {
        self.keeps_session_state = true;
        self
    }

    /// `run` checks its own arguments (see [`ToolInfo::checks_own_args`]).
    pub const fn checks_own_args(mut self) -> Self {
        self.checks_own_args = true;
        self
    }

    /// It implements the Anthropic built-in tool type `t`.
    pub const fn anthropic_type(mut self, t: &'a str) -> Self {
        self.anthropic_type = Some(t);
        self
    }

    /// Its freeform form is the one `form` makes.
    pub const fn freeform(mut self, form: fn() -> crate::schema::Freeform) -> Self {
        self.freeform = Some(form);
        self
    }
}

impl std::fmt::Debug for ToolInfo<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolInfo")
            .field("name", &self.name)
            .field("annotations", &self.annotations)
            .field("has_output_schema", &self.output_schema.is_some())
            .field("result_is_data", &self.result_is_data)
            .finish_non_exhaustive()
    }
}

/// A tool: its [`ToolInfo`], a JSON Schema for its arguments, and an async invoke.
///
/// Implement [`TypedTool`] instead and wrap it in [`Typed`]: the schema is then derived from
/// the argument struct and the arguments arrive parsed. The metadata methods (`name`,
/// `description`, `annotations`, ...) read [`Tool::info`]; a tool declares them there.
#[async_trait]
pub trait Tool: Send + Sync {
    /// What the tool is: name, description, hints, output schema, flags.
    fn info(&self) -> ToolInfo<'_>;
    /// The name a model calls it by.
    fn name(&self) -> &str {
        self.info().name
    }
    /// What it does, for the model.
    fn description(&self) -> &str {
        self.info().description
    }
    /// JSON Schema (draft 2020-12) of its arguments.
    fn input_schema(&self) -> Value;
    /// JSON Schema of its structured result (`ToolResult::data`), when it has one.
    fn output_schema(&self) -> Option<Value> {
        self.info().output_schema.map(|schema| schema())
    }
    /// Whether the result *is* its `data`: the text for the model is that JSON (seed 003's
    /// tools), so a structured view carries `data` alone instead of the text beside it.
    fn result_is_data(&self) -> bool {
        self.info().result_is_data
    }
    /// Behaviour hints.
    fn annotations(&self) -> Annotations {
        self.info().annotations
    }
    /// The compiled validator of [`Tool::input_schema`]; an error says why it does not compile.
    /// Typed tools compile theirs once per type and share it.
    fn arg_validator(&self) -> Result<Arc<ArgValidator>, String> {
        ArgValidator::new(&self.input_schema()).map(Arc::new)
    }
    /// Check `args` against [`Tool::input_schema`], every problem at once; `Ok` means
    /// [`Tool::invoke_checked`] may run them.
    fn check_args(&self, args: &Value) -> Result<(), ToolError> {
        let v = self
            .arg_validator()
            .map_err(|e| broken_schema(self.name(), &e))?;
        v.check(self.name(), args)
    }
    /// What must be configured before this tool can work (which environment variable or
    /// catalog key), or `None` when it can. Servers leave a tool that needs something out of
    /// their listings. Not part of [`ToolInfo`]: it depends on the configuration now.
    fn needs(&self) -> Option<String> {
        None
    }
    /// The tool's freeform form (raw text under a grammar), for exports that can carry it.
    fn freeform(&self) -> Option<crate::schema::Freeform> {
        self.info().freeform.map(|form| form())
    }
    /// The tool keeps a session's state in memory from one call to the next (a shell's working
    /// directory), so a CLI call runs it where that memory lives on: the session host.
    fn keeps_session_state(&self) -> bool {
        self.info().keeps_session_state
    }
    /// The Anthropic API built-in tool type it implements, for the Anthropic export.
    fn anthropic_type(&self) -> Option<&str> {
        self.info().anthropic_type
    }
    /// Whether a result may carry images. Such a tool declares no output schema: a result with
    /// an image then goes without `structuredContent`, which clients (Codex) would show in
    /// place of the image.
    fn returns_images(&self) -> bool {
        self.info().returns_images
    }
    /// Run the call. An `Err` is a result the model reads, not a crash.
    async fn invoke(&self, args: Value, ctx: &ToolContext) -> Result<ToolResult, ToolError>;
    /// Run a call whose arguments passed [`Tool::check_args`] and whose time limit is already
    /// in `ctx` (the dispatcher's layers did both). Arguments that still do not parse are an
    /// error result, never a crash.
    async fn invoke_checked(
        &self,
        args: Value,
        ctx: &ToolContext,
    ) -> Result<ToolResult, ToolError> {
        self.invoke(args, ctx).await
    }
}

/// The error for a tool whose own argument schema does not compile.
fn broken_schema(tool: &str, e: &str) -> ToolError {
    ToolError::Unavailable(format!(
        "{tool}: its argument schema does not compile ({e}); this is a Toolyard bug"
    ))
}

/// A tool whose arguments are a typed struct; the schema is derived from it.
#[async_trait]
pub trait TypedTool: Send + Sync + 'static {
    /// The argument struct (use `#[serde(deny_unknown_fields)]`).
    type Args: DeserializeOwned + JsonSchema + Send;
    /// What the tool is (see [`Tool::info`]).
    fn info(&self) -> ToolInfo<'_>;
    /// What must be configured before this tool can work (see [`Tool::needs`]).
    fn needs(&self) -> Option<String> {
        None
    }
    /// Run the call with parsed arguments.
    async fn run(&self, args: Self::Args, ctx: &ToolContext) -> Result<ToolResult, ToolError>;
}

/// Adapts a [`TypedTool`] to [`Tool`].
pub struct Typed<T>(pub T);

#[async_trait]
impl<T: TypedTool> Tool for Typed<T> {
    fn info(&self) -> ToolInfo<'_> {
        self.0.info()
    }
    fn input_schema(&self) -> Value {
        crate::schema::schema_of::<T::Args>()
    }
    fn arg_validator(&self) -> Result<Arc<ArgValidator>, String> {
        crate::validate::cached(TypeId::of::<T>(), || self.input_schema())
    }
    fn needs(&self) -> Option<String> {
        self.0.needs()
    }
    fn check_args(&self, args: &Value) -> Result<(), ToolError> {
        let info = self.0.info();
        let name = info.name;
        // parse_args says what arguments that are not an object must be.
        if !(args.is_null() || args.is_object()) {
            return Ok(());
        }
        let validator = self.arg_validator().map_err(|e| broken_schema(name, &e))?;
        if info.checks_own_args {
            // Parses: the tool judges in its own words. Several mistakes: all of them at once,
            // where serde names only the first.
            return match parse_args::<T::Args>(name, args.clone()) {
                Ok(_) => Ok(()),
                Err(first) => match validator.problems(args) {
                    p if p.len() > 1 => Err(validator.refusal(name, &p)),
                    _ => Err(first),
                },
            };
        }
        // Refuse what the advertised schema refuses, all of it at once, before serde sees the
        // first mistake.
        validator.check(name, args)
    }
    async fn invoke(&self, args: Value, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        // A direct call (an adapter calling the engine tool, a test) gets the dispatcher's
        // checks here: the schema, then the time limit.
        self.check_args(&args)?;
        let asked = args.get(TIMEOUT_ARG).and_then(Value::as_u64);
        let takes = self.arg_validator().is_ok_and(|v| v.takes_timeout());
        let mut ctx = ctx.clone();
        ctx.timeout = time_limit(
            self.name(),
            asked.filter(|_| takes),
            ctx.timeout,
            ctx.max_timeout,
        )?;
        self.invoke_checked(args, &ctx).await
    }
    async fn invoke_checked(
        &self,
        args: Value,
        ctx: &ToolContext,
    ) -> Result<ToolResult, ToolError> {
        let parsed = parse_args::<T::Args>(self.name(), args)?;
        self.0.run(parsed, ctx).await
    }
}

/// Parse a call's JSON arguments into `A`, with one clear line on failure
/// (which field, what was expected, what came). `null` counts as `{}`.
pub fn parse_args<A: DeserializeOwned>(tool: &str, args: Value) -> Result<A, ToolError> {
    let args = if args.is_null() {
        Value::Object(Default::default())
    } else {
        args
    };
    if !args.is_object() {
        return Err(ToolError::InvalidArguments(format!(
            "{tool}: arguments must be a JSON object, got {}",
            type_name(&args)
        )));
    }
    serde_path_to_error::deserialize::<_, A>(args).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        let inner = inner
            .split(" at line ")
            .next()
            .unwrap_or(&inner)
            .to_string();
        if path == "." || path.is_empty() {
            ToolError::InvalidArguments(format!("{tool}: {inner}"))
        } else {
            ToolError::InvalidArguments(format!("{tool}: argument `{path}`: {inner}"))
        }
    })
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
