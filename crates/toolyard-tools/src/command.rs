//! Command tools: `run_command`, `run_command_isolated`, `build`, `test`, `validate`.
//!
//! One implementation, five names: the catalog gives each its lane (the sandbox it runs in),
//! its default timeout and its output limit. Every command passes the command policy first.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use toolyard_core::{
    Annotations, Engine, Progress, Tool, ToolContext, ToolError, ToolInfo, ToolResult, Typed,
    TypedTool,
};
use toolyard_exec::protect::Protected;
use toolyard_exec::sandbox::SandboxConfig;
use toolyard_exec::{EnvPolicy, ExecConfig, ExecOutcome, ExecRequest, Ran, Streams};
use toolyard_policy::{CommandPolicy, Decision, PolicyConfig};

use crate::ToolEnv;

// A command that outlives its call (background, yielding, a tty, the shell) is still one of
// these commands, run through the same CommandEnv: a child of this module, not a sibling
// both sides of which import the other.
pub mod process;

/// Project commands for build / test / validate, from the catalog's `[project]` section.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectConfig {
    /// The build command (default: detected from the project's files).
    pub build: Option<String>,
    /// The test command (default: detected from the project's files).
    pub test: Option<String>,
    /// The validation command (no default).
    pub validate: Option<String>,
}

/// Arguments of `run_command` and `run_command_isolated`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCommandArgs {
    /// The shell command (run with `sh -c`).
    pub command: String,
    /// Time limit in milliseconds (default and ceiling from the catalog).
    #[schemars(range(min = 1))]
    pub timeout_ms: Option<u64>,
    /// Working directory, relative to the workspace root (default: the root).
    pub cwd: Option<String>,
    /// Start it and return at once (after at most `yield_ms`) with its output so far and
    /// `data.process_id`; it keeps running: read it with process_output, stop it with
    /// process_kill. `timeout_ms`, when given, still kills it.
    pub background: Option<bool>,
    /// Give it a pseudo-terminal (echo, line editing, ^C as a terminal has them), for REPLs
    /// and programs that want a terminal; implies `yield_ms` (default 1000).
    pub tty: Option<bool>,
    /// Return after this many milliseconds if it is still running, with its output so far
    /// and `data.process_id`, instead of killing it (default with `background`: 1000).
    pub yield_ms: Option<u64>,
    /// Hosts the command needs beyond the catalog's [network], if the user approves.
    #[schemars(description = crate::network_ask::DESCRIPTION)]
    pub network: Option<crate::network_ask::NetworkAsk>,
}

/// Arguments of `build`, `test` and `validate`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProjectCommandArgs {
    /// The command to run (default: the project's configured or detected command).
    pub command: Option<String>,
    /// Time limit in milliseconds (default and ceiling from the catalog).
    #[schemars(range(min = 1))]
    pub timeout_ms: Option<u64>,
    /// Hosts the command needs beyond the catalog's [network], if the user approves.
    #[schemars(description = crate::network_ask::DESCRIPTION)]
    pub network: Option<crate::network_ask::NetworkAsk>,
}

pub use toolyard_exec::env::ANSWER_AFTER_ENV;

/// Refuse `command` if `policy` blocks it, naming the rule and why.
pub fn check_policy(policy: &CommandPolicy, command: &str) -> Result<(), ToolError> {
    match policy.check(command) {
        Decision::Block { rule, reason } => Err(ToolError::Blocked {
            rule: format!("command policy rule `{rule}`"),
            reason,
        }),
        Decision::Allow => Ok(()),
    }
}

/// Refuse `line` if the command policy `commands` holds blocks it.
pub(crate) fn check_policy_line(commands: &CommandEnv, line: &str) -> Result<(), ToolError> {
    check_policy(&commands.policy, line)
}

/// Everything the command tools share: the policy, the environment policy, project commands.
pub struct CommandEnv {
    pub(crate) env: Arc<ToolEnv>,
    policy: CommandPolicy,
    pub(crate) env_policy: EnvPolicy,
    project: ProjectConfig,
    /// The paths through which code runs outside the sandbox, checked around every command.
    pub(crate) protected: Protected,
    /// A foreground command still running after this long is answered with its process id
    /// and goes on as a background process (`[exec] answer_after_ms`; `None`: never).
    answer_after: Option<Duration>,
}

/// How a command run by [`CommandEnv::execute`] came back.
enum Executed {
    /// It ended.
    Finished(ExecOutcome),
    /// Still running past `answer_after`: now this background process, with its output so far.
    Running(Arc<toolyard_exec::background::BgProcess>, Box<ExecOutcome>),
}

impl CommandEnv {
    /// Read `[policy]`, `[exec]` and `[project]` from the catalog.
    pub fn new(env: Arc<ToolEnv>) -> Result<Self, ToolError> {
        let bad = |e: toolyard_core::CatalogError| ToolError::InvalidArguments(e.to_string());
        let policy_config: PolicyConfig = env.catalog.section("policy").map_err(bad)?;
        let exec_config: ExecConfig = env.catalog.section("exec").map_err(bad)?;
        let project: ProjectConfig = env.catalog.section("project").map_err(bad)?;
        let sandbox: SandboxConfig = env.catalog.section("sandbox").map_err(bad)?;
        // Toolyard's own catalog is protected too when it lies in the workspace.
        let catalog_file = Path::new(env.catalog.origin());
        let extra: Vec<_> = catalog_file
            .is_absolute()
            .then(|| catalog_file.to_path_buf())
            .into_iter()
            .collect();
        let protected = Protected::new(
            env.workspace.root(),
            &toolyard_exec::protect::configured(&sandbox),
            &extra,
        );
        let policy = CommandPolicy::new(&policy_config)
            .map_err(|e| ToolError::InvalidArguments(format!("catalog [policy]: {e}")))?;
        let answer_after_ms = match std::env::var(ANSWER_AFTER_ENV) {
            Ok(v) => v.trim().parse::<u64>().map_err(|_| {
                ToolError::InvalidArguments(format!(
                    "{ANSWER_AFTER_ENV}={v:?} is not a number of milliseconds"
                ))
            })?,
            Err(_) => exec_config
                .answer_after_ms
                .unwrap_or(toolyard_exec::env::DEFAULT_ANSWER_AFTER_MS),
        };
        Ok(Self {
            env,
            policy,
            env_policy: EnvPolicy::from_config(&exec_config),
            project,
            protected,
            answer_after: (answer_after_ms > 0).then(|| Duration::from_millis(answer_after_ms)),
        })
    }

    /// Check `command` against the policy and run it in `cwd` (workspace-relative), within the
    /// call's time limit (`ctx.timeout`) or, for a dialect whose own argument sets one (loom's
    /// `timeout` in seconds, range-checked by its schema), within `timeout_ms`.
    pub async fn run(
        &self,
        ctx: &ToolContext,
        command: &str,
        cwd: Option<&str>,
        timeout_ms: Option<u64>,
    ) -> Result<ToolResult, ToolError> {
        let outcome = self.run_outcome(ctx, command, cwd, timeout_ms).await?;
        Ok(command_result(&outcome))
    }

    /// [`CommandEnv::run`], returning the command's outcome itself (for dialects that shape
    /// their own results): the output as one stream in arrival order.
    pub async fn run_outcome(
        &self,
        ctx: &ToolContext,
        command: &str,
        cwd: Option<&str>,
        timeout_ms: Option<u64>,
    ) -> Result<ExecOutcome, ToolError> {
        self.finished(ctx, command, cwd, timeout_ms, Streams::Merged)
            .await
    }

    /// [`CommandEnv::run_outcome`] for a dialect whose tools continue a running command: one
    /// still running after `[exec] answer_after_ms` comes back as `Err` with the process's
    /// result (its id in `data.process_id`, the output so far), and goes on in the background.
    pub async fn run_outcome_or_answer(
        &self,
        ctx: &ToolContext,
        command: &str,
    ) -> Result<Result<ExecOutcome, ToolResult>, ToolError> {
        Ok(
            match self
                .execute(ctx, command, None, None, Streams::Merged, true, &[])
                .await?
            {
                Executed::Finished(outcome) => Ok(outcome),
                Executed::Running(proc, so_far) => Err(running_result(&proc, &so_far, ctx.timeout)),
            },
        )
    }

    /// [`CommandEnv::run_outcome`] with stdout and stderr apart, for results that name them.
    pub async fn run_outcome_apart(
        &self,
        ctx: &ToolContext,
        command: &str,
        cwd: Option<&str>,
        timeout_ms: Option<u64>,
    ) -> Result<ExecOutcome, ToolError> {
        self.finished(ctx, command, cwd, timeout_ms, Streams::Separate)
            .await
    }

    /// Run `command` with `vars` set in its environment (a catalog command tool passes its
    /// arguments so, never as shell text), as [`CommandEnv::run`] does otherwise.
    pub async fn run_with_vars(
        &self,
        ctx: &ToolContext,
        command: &str,
        vars: &[(String, String)],
    ) -> Result<ToolResult, ToolError> {
        match self
            .execute(ctx, command, None, None, Streams::Merged, false, vars)
            .await?
        {
            Executed::Finished(outcome) => Ok(command_result(&outcome)),
            Executed::Running(..) => Err(ToolError::Io(
                "internal: a command was handed back running without being asked to".into(),
            )),
        }
    }

    async fn finished(
        &self,
        ctx: &ToolContext,
        command: &str,
        cwd: Option<&str>,
        timeout_ms: Option<u64>,
        streams: Streams,
    ) -> Result<ExecOutcome, ToolError> {
        match self
            .execute(ctx, command, cwd, timeout_ms, streams, false, &[])
            .await?
        {
            Executed::Finished(outcome) => Ok(outcome),
            Executed::Running(..) => Err(ToolError::Io(
                "internal: a command was handed back running without being asked to".into(),
            )),
        }
    }

    /// Run a foreground command of the process-aware tools (`run_command`, `build`, ...):
    /// still running after `[exec] answer_after_ms`, it is answered with its process id and
    /// output so far, and goes on as a background process read with `process_output`.
    pub(crate) async fn run_answering(
        &self,
        ctx: &ToolContext,
        command: &str,
        cwd: Option<&str>,
        ran: Option<&RanWhy>,
    ) -> Result<ToolResult, ToolError> {
        let mut result = match self
            .execute(ctx, command, cwd, None, Streams::Merged, true, &[])
            .await?
        {
            Executed::Finished(outcome) => {
                let mut r = command_result(&outcome);
                if let Some((hidden, note)) = pipeline_note(command, &outcome) {
                    push_line(&mut r.output, &note);
                    if let Some(d) = r.data.as_mut() {
                        d["pipeline_hides_failure"] = json!(hidden);
                    }
                }
                r
            }
            Executed::Running(proc, so_far) => running_result(&proc, &so_far, ctx.timeout),
        };
        if let Some(ran) = ran {
            result.output = format!("{}\n{}", ran.line(), result.output);
            if let Some(d) = result.data.as_mut() {
                d["ran"] = ran.data();
            }
        }
        Ok(result)
    }

    /// Check, run, and restore the protected paths once the command (with its whole process
    /// tree) has ended; with `answer`, a command still running after `answer_after` is handed
    /// to this session's processes instead, which restore them when it ends.
    #[allow(clippy::too_many_arguments)] // each is one decision of the caller's; a struct would only rename them
    async fn execute(
        &self,
        ctx: &ToolContext,
        command: &str,
        cwd: Option<&str>,
        timeout_ms: Option<u64>,
        streams: Streams,
        answer: bool,
        vars: &[(String, String)],
    ) -> Result<Executed, ToolError> {
        let dir = self.admit(ctx, command, cwd)?;
        let mut req = ExecRequest::new(command, dir);
        // The dispatcher's layer decided the call's limit (`time_limit`); nothing is clamped here.
        req.timeout = timeout_ms.map(Duration::from_millis).unwrap_or(ctx.timeout);
        req.max_output_bytes = ctx.max_output_bytes;
        req.streams = streams;
        req.env = vars.iter().fold(self.env_policy.clone(), |p, (k, v)| {
            p.with_var(k.clone(), v.clone())
        });
        req.spill_dir = Some(self.env.state.outputs_dir());
        req.call_id = sanitize(&ctx.call_id);
        req.cancel = ctx.cancel.clone();
        // A session at its limit of processes keeps waiting, as before.
        if answer && self.answer_after.is_some() && process::table(self).has_room(&ctx.session_id) {
            req.answer_after = self.answer_after;
        }
        let progress = ctx.progress.clone();
        req.on_progress = Some(Arc::new(move |p: toolyard_exec::ExecProgress| {
            progress(Progress {
                progress: p.elapsed.as_secs_f64(),
                total: None,
                message: Some(format!(
                    "running for {:.0} s, {} bytes of output",
                    p.elapsed.as_secs_f64(),
                    p.stdout_bytes + p.stderr_bytes
                )),
            })
        }));
        // What the command does to protected paths is undone once it has ended (with its
        // whole process tree), and said: a planted git hook never runs.
        // Against the state of the workspace Toolyard accepted, held while the command runs.
        let protected = self.protected.clone();
        let quarantine = self.env.state.quarantine_dir();
        let dir = quarantine.clone();
        let (before, hold) = tokio::task::spawn_blocking(move || protected.begin(&dir))
            .await
            .map_err(|e| ToolError::Io(format!("checking the protected paths: {e}")))?;
        // What it changes in the workspace is journaled as one group (see `capture`).
        let capture = crate::capture::begin(&self.env).await;
        let result = toolyard_exec::run_or_answer(req).await;
        let finished = match result {
            Ok(Ran::Running(running)) => {
                let on_end: Box<dyn FnOnce() + Send> = Box::new(move || {
                    let undone = before.restore(&quarantine);
                    drop(hold);
                    if !undone.is_empty() {
                        tracing::warn!(
                            changes = undone.len(),
                            "a command answered while running changed protected paths; undone"
                        );
                    }
                });
                let so_far = Box::new(running.so_far.clone());
                let proc =
                    process::table(self).adopt(*running, &ctx.session_id, command, Some(on_end))?;
                if let Some(capture) = capture {
                    crate::capture::adopt(&proc.id, capture, command);
                }
                return Ok(Executed::Running(proc, so_far));
            }
            Ok(Ran::Finished(outcome)) => Ok(outcome),
            Err(e) => Err(e),
        };
        let undone = tokio::task::spawn_blocking(move || {
            let undone = before.restore(&quarantine);
            drop(hold);
            undone
        })
        .await
        .map_err(|e| ToolError::Io(format!("restoring the protected paths: {e}")))?;
        let mut outcome = finished?;
        if !undone.is_empty() {
            tracing::warn!(
                changes = undone.len(),
                "a command changed protected paths; undone"
            );
            let stream = if outcome.merged {
                &mut outcome.stdout
            } else {
                &mut outcome.stderr
            };
            push_line(stream, &toolyard_exec::protect::describe(&undone));
        }
        if let Some(mut capture) = capture {
            let tool = crate::capture::current_tool();
            let who = crate::capture::Attribution {
                session: &ctx.session_id,
                call_id: &ctx.call_id,
                tool: &tool,
                command,
            };
            if let Some(line) = capture.checkpoint(&self.env, who).await.line() {
                let stream = if outcome.merged {
                    &mut outcome.stdout
                } else {
                    &mut outcome.stderr
                };
                push_line(stream, &line);
            }
        }
        Ok(Executed::Finished(outcome))
    }

    /// Check `command` against the policy and resolve `cwd` (workspace-relative) to the
    /// absolute directory it runs in.
    pub fn admit(
        &self,
        ctx: &ToolContext,
        command: &str,
        cwd: Option<&str>,
    ) -> Result<std::path::PathBuf, ToolError> {
        if command.trim().is_empty() {
            return Err(ToolError::InvalidArguments(
                "command is empty; give a shell command to run".into(),
            ));
        }
        // Checked here too, where the command runs: the dispatcher's policy layer refuses
        // earlier, but this runner is the boundary, and sees every command (a project's
        // default one, a dialect's own shape) the dispatcher cannot.
        check_policy(&self.policy, command)?;
        let ws = &self.env.workspace;
        let dir = match cwd {
            Some(c) => ws.locate(c, &ctx.cwd)?,
            None => ws.locate(".", &ctx.cwd)?,
        };
        match ws.metadata(&dir)? {
            Some(m) if m.is_dir() => {}
            Some(_) => {
                return Err(ToolError::InvalidArguments(format!(
                    "cwd {dir} is a file, not a directory"
                )));
            }
            None => return Err(ToolError::FileNotFound(dir.as_path().to_path_buf())),
        }
        Ok(ws.absolute(&dir))
    }

    /// The command `tool` (build / test / validate) runs when the call names none, and why.
    fn project_command(&self, tool: &str) -> Result<RanWhy, ToolError> {
        let configured = match tool {
            "build" => self.project.build.clone(),
            "test" => self.project.test.clone(),
            _ => self.project.validate.clone(),
        };
        let lane = self.env.catalog.tool(tool).map(|t| t.lane.to_string());
        if let Some(command) = configured {
            return Ok(RanWhy {
                command,
                why: Why::Catalog(tool.to_string()),
                lane,
            });
        }
        match detect(self.env.workspace.root(), tool) {
            Some((command, file)) => Ok(RanWhy {
                command,
                why: Why::Detected(file),
                lane,
            }),
            None => Err(ToolError::InvalidArguments(format!(
                "no {tool} command: pass `command`, or set `{tool} = \"...\"` in the [project] section of catalog.toml"
            ))),
        }
    }
}

/// What a project tool ran, and why that command.
pub(crate) struct RanWhy {
    command: String,
    why: Why,
    /// The lane it ran in.
    lane: Option<String>,
}

/// Where a project tool's command came from.
enum Why {
    /// The call's `command`.
    Given,
    /// `[project] TOOL` in the catalog.
    Catalog(String),
    /// Detected from this file of the workspace root.
    Detected(&'static str),
}

impl RanWhy {
    /// `ran: cargo test (detected from Cargo.toml), lane heavy`; a command the call gave is
    /// not repeated (the model wrote it, and it may be long).
    fn line(&self) -> String {
        let what = match &self.why {
            Why::Given => "the command given in the call".to_string(),
            Why::Catalog(tool) => format!("{} ([project] {tool} in the catalog)", self.command),
            Why::Detected(file) => format!("{} (detected from {file})", self.command),
        };
        match &self.lane {
            Some(lane) => format!("ran: {what}, lane {lane}"),
            None => format!("ran: {what}"),
        }
    }

    fn data(&self) -> serde_json::Value {
        let (source, from) = match &self.why {
            Why::Given => ("given", None),
            Why::Catalog(_) => ("catalog", None),
            Why::Detected(file) => ("detected", Some(*file)),
        };
        json!({"command": self.command, "source": source, "from": from, "lane": self.lane})
    }
}

/// The usual command for `tool` in a project laid out like `root`, and the file that says so.
fn detect(root: &Path, tool: &str) -> Option<(String, &'static str)> {
    // The first of these files the root holds decides.
    const PROJECTS: &[(&[&str], &str, &str)] = &[
        (&["Cargo.toml"], "cargo build", "cargo test"),
        (&["package.json"], "npm run build", "npm test"),
        (&["go.mod"], "go build ./...", "go test ./..."),
        (&["Makefile"], "make", "make test"),
        (
            &["pyproject.toml", "setup.py"],
            "python3 -m build",
            "python3 -m pytest",
        ),
    ];
    let (file, build, test) = PROJECTS.iter().find_map(|(files, build, test)| {
        files
            .iter()
            .find(|f| root.join(f).exists())
            .map(|f| (*f, *build, *test))
    })?;
    match tool {
        "build" => Some((build.to_string(), file)),
        "test" => Some((test.to_string(), file)),
        _ => None,
    }
}

/// Append `line` to `text` on a line of its own.
fn push_line(text: &mut String, line: &str) {
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(line);
    text.push('\n');
}

/// Output lines that say a build or test run failed, whatever the exit status says.
const FAILURE_SIGNS: &[&str] = &[
    "error: could not compile",
    "error[E",
    "test result: FAILED",
    "error: test failed",
    "npm ERR!",
    "npm error ",
    "make: *** ",
    "Traceback (most recent call last):",
    "--- FAIL:",
    "BUILD FAILED",
    "[ERROR] BUILD FAILURE",
    "FAILED ",
];

/// A pipeline whose exit status (its last command's: `tail` succeeds whatever it reads) hides
/// a failure its output shows: the sign found, and a note saying so.
fn pipeline_note(command: &str, o: &ExecOutcome) -> Option<(String, String)> {
    if o.exit_code != Some(0) || !has_pipe(command) {
        return None;
    }
    let sign = o.stdout.lines().chain(o.stderr.lines()).find_map(|l| {
        FAILURE_SIGNS
            .iter()
            .find(|s| l.trim_start().starts_with(**s))
    })?;
    let note = format!(
        "note: exit code 0 is only the status of the pipeline's last command; the output shows a failure (`{sign}`) that the pipe hid. Run it without the pipe (long output keeps its head and tail, and the full output is saved), or in bash with `set -o pipefail`."
    );
    Some((sign.to_string(), note))
}

/// Whether `command` pipes one command into another (`|`, not `||`), outside quotes.
fn has_pipe(command: &str) -> bool {
    let b = command.as_bytes();
    let (mut single, mut double) = (false, false);
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' if !single => i += 1,
            b'\'' if !double => single = !single,
            b'"' if !single => double = !double,
            b'|' if !single && !double => {
                let doubled = b.get(i + 1) == Some(&b'|');
                let after_pipe_or = i > 0 && b[i - 1] == b'|';
                if !doubled && !after_pipe_or && b.get(i + 1) != Some(&b'&') {
                    return true;
                }
                if doubled {
                    i += 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    false
}

/// The result of a foreground command answered while still running: its process id, its
/// output so far, and how to go on.
fn running_result(
    proc: &toolyard_exec::background::BgProcess,
    so_far: &ExecOutcome,
    limit: Duration,
) -> ToolResult {
    let id = &proc.id;
    let mut text = format!(
        "still running after {} s, close to when clients give up on a call: it goes on as process {id}, and its time limit ({} ms from its start) still applies\n",
        (so_far.duration_ms + 500) / 1000,
        limit.as_millis()
    );
    text.push_str("--- output so far ---\n");
    text.push_str(&so_far.output_text());
    push_line(
        &mut text,
        &format!(
            "read what it prints next with process_output {{\"process_id\": \"{id}\", \"wait_ms\": 30000}} (waits up to 30 s for more or its end); stop it with process_kill {{\"process_id\": \"{id}\"}}"
        ),
    );
    ToolResult::ok(text).with_data(json!({
        "process_id": id,
        "running": true,
        "output_bytes": so_far.output_bytes(),
        "duration_ms": so_far.duration_ms,
        "truncated": so_far.truncated,
        "full_output": proc.log_path(),
    }))
}

/// The ToolResult of a finished command: the text for the model (status, head and tail of each
/// stream) in `output`, the outcome's metadata in `data` (not the streams again: a client shows
/// the model both); a non-zero exit, a signal or a timeout is a failure.
pub fn command_result(o: &ExecOutcome) -> ToolResult {
    let mut data = json!({
        "exit_code": o.exit_code,
        "signal": o.signal,
        "output_bytes": o.output_bytes(),
        "timed_out": o.timed_out,
        "cancelled": o.cancelled,
        "truncated": o.truncated,
        "duration_ms": o.duration_ms,
        "full_output": o.full_output,
    });
    if !o.merged {
        data["stdout_bytes"] = json!(o.stdout_bytes);
        data["stderr_bytes"] = json!(o.stderr_bytes);
    }
    if let Some(stop) = &o.timeout_stop {
        data["timeout_signal"] = json!(stop.signal());
    }
    let text = o.model_text();
    if o.success() {
        ToolResult::ok(text).with_data(data)
    } else {
        let (kind, error) = if o.timed_out {
            (
                "timeout",
                match &o.timeout_stop {
                    Some(stop) => format!("the command {}", stop.describe()),
                    None => format!("the command timed out after {} ms", o.duration_ms),
                },
            )
        } else if o.cancelled {
            ("cancelled", "the command was cancelled".to_string())
        } else if let Some(sig) = &o.signal {
            ("command_failed", format!("the command was killed by {sig}"))
        } else {
            (
                "command_failed",
                format!("the command exited with code {}", o.exit_code.unwrap_or(-1)),
            )
        };
        ToolResult {
            success: false,
            output: text,
            data: Some(data),
            files_changed: Vec::new(),
            error: Some(error),
            error_kind: Some(kind.into()),
            images: Vec::new(),
        }
    }
}

pub(crate) fn sanitize(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `run_command` / `run_command_isolated`: the same tool under two names and two lanes.
pub struct RunCommand {
    engine: Engine,
    commands: Arc<CommandEnv>,
}

#[async_trait]
impl TypedTool for RunCommand {
    type Args = RunCommandArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new(
            self.engine.name(),
            if self.engine == Engine::RunCommandIsolated {
                "Execute a shell command with no network access at all, in the workspace. Long \
             output keeps its head and tail; the full output is saved and named."
            } else {
                "Execute a shell command in the workspace (sh -c), with a timeout that kills the \
             whole process tree. Long output keeps its head and tail; the full output is saved \
             and named. Obviously destructive commands are refused."
            },
            Annotations {
                open_world: self.engine.open_world(),
                ..Annotations::COMMAND
            },
        )
    }

    async fn run(&self, args: RunCommandArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        if args.background.unwrap_or(false) || args.tty.unwrap_or(false) || args.yield_ms.is_some()
        {
            return process::run_started(&self.commands, ctx, args).await;
        }
        self.commands
            .run_answering(ctx, &args.command, args.cwd.as_deref(), None)
            .await
    }
}

/// `build` / `test` / `validate`: the project's command, or the one given.
pub struct ProjectCommand {
    name: &'static str,
    commands: Arc<CommandEnv>,
}

#[async_trait]
impl TypedTool for ProjectCommand {
    type Args = ProjectCommandArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new(
            self.name,
            match self.name {
                "build" => {
                    "Build the project (the given command, or the project's: [project] build in catalog.toml, else detected: cargo build, npm run build, make, ...). Reports progress."
                }
                "test" => {
                    "Run the test suite (the given command, or the project's: [project] test in catalog.toml, else detected: cargo test, npm test, make test, ...). Reports progress."
                }
                _ => {
                    "Run the validation command (the given command, or [project] validate in catalog.toml). Reports progress."
                }
            },
            Annotations::COMMAND,
        )
    }

    async fn run(
        &self,
        args: ProjectCommandArgs,
        ctx: &ToolContext,
    ) -> Result<ToolResult, ToolError> {
        let ran = match args.command {
            Some(command) => RanWhy {
                command,
                why: Why::Given,
                lane: self
                    .commands
                    .env
                    .catalog
                    .tool(self.name)
                    .map(|t| t.lane.to_string()),
            },
            None => self.commands.project_command(self.name)?,
        };
        self.commands
            .run_answering(ctx, &ran.command, None, Some(&ran))
            .await
    }
}

/// The five command tools, sharing `commands`.
pub fn tools(commands: Arc<CommandEnv>) -> Vec<Arc<dyn Tool>> {
    let run = |engine| -> Arc<dyn Tool> {
        Arc::new(Typed(RunCommand {
            engine,
            commands: commands.clone(),
        }))
    };
    let project = |name| -> Arc<dyn Tool> {
        Arc::new(Typed(ProjectCommand {
            name,
            commands: commands.clone(),
        }))
    };
    vec![
        run(Engine::RunCommand),
        run(Engine::RunCommandIsolated),
        project("build"),
        project("test"),
        project("validate"),
    ]
}
