//! Long-running and interactive commands: `run_command` with `background` / `yield_ms` / `tty`,
//! `process_output`, `process_input`, `process_kill`, `process_list`, and `shell` (one
//! persistent shell per session).
//!
//! The processes live in the runner of the lane that started them (the process id names the
//! lane, e.g. `net-3`, so the dispatcher sends later calls there), inside its sandbox, each in
//! its own PID namespace; the runner checks that an id belongs to the calling session.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use toolyard_core::shape::HeadTail;
use toolyard_core::sync::lock;
use toolyard_core::{
    Annotations, Progress, Tool, ToolContext, ToolError, ToolInfo, ToolResult, Typed, TypedTool,
};
use toolyard_exec::background::{BgProcess, BgSpawn, Ended, ProcessTable, ProcessesConfig, Taken};

use super::{CommandEnv, RunCommandArgs, sanitize};

mod tools;

use tools::{InputTool, KillTool, ListTool, OutputTool};
pub use tools::{
    ProcessInputArgs, ProcessKillArgs, ProcessListArgs, ProcessOutputArgs, ProcessTool,
};

/// Default `yield_ms` of a background start.
const DEFAULT_YIELD: Duration = Duration::from_millis(1000);
/// Default `wait_ms` of `process_input`.
const DEFAULT_INPUT_WAIT: Duration = Duration::from_millis(1000);
/// Once output arrives, how long a quiet spell ends the wait (a REPL's answer and prompt).
pub(crate) const SETTLE: Duration = Duration::from_millis(150);

static TABLE: OnceLock<ProcessTable> = OnceLock::new();
static LANE: OnceLock<(String, u64)> = OnceLock::new();

/// Name this process's background processes `{lane}-{n}`, n counting from `first` (a runner
/// calls this once, before any tool runs; in-process servers use `local`).
pub fn set_lane(lane: &str, first: u64) {
    let _ = LANE.set((lane.to_string(), first));
}

/// The lane a process id names (`net-3` → `net`), if it looks like one.
pub fn lane_of(process_id: &str) -> Option<&str> {
    process_id
        .rsplit_once('-')
        .filter(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .map(|(lane, _)| lane)
}

/// The table of this process's background processes (its limits from `[processes]`).
pub fn table(commands: &CommandEnv) -> &'static ProcessTable {
    TABLE.get_or_init(|| {
        let limits: ProcessesConfig = commands
            .env
            .catalog
            .section("processes")
            .unwrap_or_default();
        let (lane, first) = LANE.get().cloned().unwrap_or_else(|| ("local".into(), 1));
        ProcessTable::new(&lane, first, limits)
    })
}

/// Kill every process of `session` (its connection closed); how many were running.
pub fn end_session(session: &str) -> usize {
    lock(shells()).remove(session);
    TABLE.get().map_or(0, |t| t.end_session(session))
}

/// How many processes `session` has in this process's table (running, or ended and unread).
pub fn session_process_count(session: &str) -> usize {
    TABLE.get().map_or(0, |t| t.list(session).len())
}

/// Kill every process (the runner is shutting down).
pub fn kill_all() {
    if let Some(t) = TABLE.get() {
        t.kill_all();
    }
}

/// Processes whose end a reply reported, so a later call naming one can say what became of it
/// (the table forgets them once read).
static REPORTED: OnceLock<Mutex<Reported>> = OnceLock::new();

/// How many reported ends are remembered (the oldest are forgotten first).
const REPORTED_KEPT: usize = 4096;

#[derive(Default)]
struct Reported {
    ends: HashMap<String, ReportedEnd>,
    order: std::collections::VecDeque<String>,
}

/// One process whose end was reported.
struct ReportedEnd {
    session: String,
    /// How it ended ("exited with code 0").
    how: String,
    /// The file holding all its output.
    log: Option<std::path::PathBuf>,
}

/// Remember that `proc`'s end (`ended`) was reported to its session.
fn reported(proc: &BgProcess, ended: &Ended, log: Option<&std::path::Path>) {
    let mut r = lock(REPORTED.get_or_init(Default::default));
    if r.ends.len() >= REPORTED_KEPT
        && let Some(oldest) = r.order.pop_front()
    {
        r.ends.remove(&oldest);
    }
    if r.ends
        .insert(
            proc.id.clone(),
            ReportedEnd {
                session: proc.session.clone(),
                how: ended.describe(),
                log: log.map(std::path::Path::to_path_buf),
            },
        )
        .is_none()
    {
        r.order.push_back(proc.id.clone());
    }
}

/// The process `id` of `session`; for one whose end was already reported, an error that says
/// so (how it ended, where its output is), distinct from an id this session never had.
pub(crate) fn find(
    commands: &CommandEnv,
    session: &str,
    id: &str,
) -> Result<Arc<BgProcess>, ToolError> {
    table(commands)
        .get(session, id)
        .map_err(|missing| match reported_end(session, id) {
            Some(why) => ToolError::NotFound(why),
            None => missing,
        })
}

/// What became of `session`'s process `id`, if its end was reported: "no-net-1 exited with
/// code 0; its output was already returned ...".
pub fn reported_end(session: &str, id: &str) -> Option<String> {
    let r = lock(REPORTED.get_or_init(Default::default));
    let end = r.ends.get(id).filter(|e| e.session == session)?;
    Some(format!(
        "{id} {}; its output was already returned{}. Nothing runs under this id any more; \
         start the command again to run it again",
        end.how,
        end.log
            .as_ref()
            .map(|p| format!(" (all of it is in {}; read_file reads it)", p.display()))
            .unwrap_or_default()
    ))
}

/// Forget `proc`, whose end (`ended`) was just reported with the last of its output.
pub fn forget(
    commands: &CommandEnv,
    proc: &BgProcess,
    ended: &Ended,
    log: Option<&std::path::Path>,
) {
    reported(proc, ended, log);
    table(commands).remove(&proc.id);
}

/// Start a command as a process that may outlive the call (`background`, `yield_ms`, `tty`).
pub(crate) async fn run_started(
    commands: &CommandEnv,
    ctx: &ToolContext,
    args: RunCommandArgs,
) -> Result<ToolResult, ToolError> {
    let background = args.background.unwrap_or(false);
    let dir = commands.admit(ctx, &args.command, args.cwd.as_deref())?;
    let yield_for = args
        .yield_ms
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_YIELD)
        .min(ctx.max_timeout);
    let proc = spawn(
        commands,
        ctx,
        &args.command,
        dir,
        args.tty.unwrap_or(false),
        args.timeout_ms.map(Duration::from_millis),
    )
    .await?;
    let tick = progress_tick(ctx, &proc.id);
    // Wait for the end or the yield; a background start does not wait for output to settle.
    wait_end(&proc, yield_for, &tick, &ctx.cancel).await;
    let taken = proc.take();
    if let Some(ended) = &taken.ended {
        table(commands).remove(&proc.id);
        let mut result = ended_result(&proc, &taken, ended, ctx.max_output_bytes);
        capture_line(commands, &proc, ctx, &mut result).await;
        return Ok(result);
    }
    let mut text = format!(
        "process {} is running ({}); it keeps running after this call\n",
        proc.id,
        if background {
            "started in the background"
        } else {
            "still running after yield_ms"
        }
    );
    push_output(&mut text, &taken, ctx.max_output_bytes, "output so far");
    let _ = writeln!(
        text,
        "read its output with process_output {{\"process_id\": \"{id}\"}}, send it input with process_input, stop it with process_kill",
        id = proc.id
    );
    let mut result = ToolResult::ok(text).with_data(process_data(&proc, &taken));
    capture_line(commands, &proc, ctx, &mut result).await;
    Ok(result)
}

/// Wait until `proc` ends or `wait` passes.
pub async fn wait_end(
    proc: &BgProcess,
    wait: Duration,
    tick: &(dyn Fn(Duration) + Sync),
    cancel: &tokio_util::sync::CancellationToken,
) {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let now = tokio::time::Instant::now();
        if proc.ended().is_some() || now >= deadline {
            return;
        }
        tokio::select! {
            _ = proc.wait_output(deadline - now, deadline - now, tick) => {}
            _ = cancel.cancelled() => return,
        }
    }
}

/// Spawn a process of this session, with the protected paths restored when it ends.
pub async fn spawn(
    commands: &CommandEnv,
    ctx: &ToolContext,
    command: &str,
    dir: std::path::PathBuf,
    tty: bool,
    timeout: Option<Duration>,
) -> Result<Arc<BgProcess>, ToolError> {
    // Held for the process's whole life: the workspace is not at rest while it runs.
    let protected = commands.protected.clone();
    let quarantine = commands.env.state.quarantine_dir();
    let kept = quarantine.clone();
    let (before, hold) = tokio::task::spawn_blocking(move || protected.begin(&kept))
        .await
        .map_err(|e| ToolError::Io(format!("checking the protected paths: {e}")))?;
    let on_end: Box<dyn FnOnce() + Send> = Box::new(move || {
        let undone = before.restore(&quarantine);
        drop(hold);
        if !undone.is_empty() {
            tracing::warn!(
                changes = undone.len(),
                "a background process changed protected paths; undone"
            );
        }
    });
    let log = commands
        .env
        .state
        .outputs_dir()
        .join(format!("{}-process.log", sanitize(&ctx.call_id)));
    // What it changes is journaled at each call that reads or drives it (`capture_line`).
    let capture = crate::capture::begin(&commands.env).await;
    let proc = table(commands).spawn(BgSpawn {
        command: command.to_string(),
        cwd: dir,
        env: commands.env_policy.clone(),
        tty,
        session: ctx.session_id.clone(),
        log: Some(log),
        timeout,
        on_end: Some(on_end),
    })?;
    if let Some(capture) = capture {
        crate::capture::adopt(&proc.id, capture, command);
    }
    Ok(proc)
}

/// Journal what `proc` changed since the last call that read or drove it, as this call's
/// group, and append the summary line to `result` (see `capture`).
pub async fn capture_line(
    commands: &CommandEnv,
    proc: &BgProcess,
    ctx: &ToolContext,
    result: &mut ToolResult,
) {
    let ended = proc.ended().is_some();
    if let Some(line) = crate::capture::checkpoint_process(
        &commands.env,
        &proc.id,
        &ctx.session_id,
        &ctx.call_id,
        ended,
    )
    .await
    {
        if !result.output.is_empty() && !result.output.ends_with('\n') {
            result.output.push('\n');
        }
        result.output.push_str(&line);
        result.output.push('\n');
    }
}

pub fn progress_tick(ctx: &ToolContext, id: &str) -> impl Fn(Duration) + Sync + use<> {
    let progress = ctx.progress.clone();
    let id = id.to_string();
    move |waited: Duration| {
        progress(Progress {
            progress: waited.as_secs_f64(),
            total: None,
            message: Some(format!(
                "waiting for process {id}: {:.0} s",
                waited.as_secs_f64()
            )),
        })
    }
}

/// Append the taken output, head and tail within `limit`, to `text`.
fn push_output(text: &mut String, taken: &Taken, limit: usize, label: &str) {
    if taken.dropped > 0 {
        let _ = writeln!(
            text,
            "({} bytes of older output were dropped from the buffer{})",
            taken.dropped,
            taken
                .log
                .as_ref()
                .map(|p| format!("; all of it is in {}", p.display()))
                .unwrap_or_default()
        );
    }
    if taken.bytes.is_empty() {
        let _ = writeln!(text, "(no new output)");
        return;
    }
    let mut ht = HeadTail::new(limit);
    ht.push(&taken.bytes);
    let hint = taken
        .log
        .as_ref()
        .map(|p| format!("full output in {}", p.display()));
    let shaped = ht.finish(hint.as_deref());
    let _ = writeln!(text, "--- {label} ---");
    text.push_str(&shaped.text);
    if !shaped.text.ends_with('\n') {
        text.push('\n');
    }
}

fn status_text(proc: &BgProcess, ended: Option<&Ended>) -> String {
    match ended {
        Some(e) => format!("process {} {}", proc.id, e.describe()),
        None => format!(
            "process {} is running ({} s)",
            proc.id,
            proc.age().as_secs()
        ),
    }
}

fn process_data(proc: &BgProcess, taken: &Taken) -> serde_json::Value {
    json!({
        "process_id": proc.id,
        "running": taken.ended.is_none(),
        "exit_code": taken.ended.as_ref().and_then(|e| e.exit_code),
        "signal": taken.ended.as_ref().and_then(|e| e.signal.clone()),
        "killed": taken.ended.as_ref().is_some_and(|e| e.killed),
        "timed_out": taken.ended.as_ref().is_some_and(|e| e.timed_out),
        "new_bytes": taken.bytes.len(),
        "dropped_bytes": taken.dropped,
        "output_bytes": taken.total,
        "tty": proc.tty,
        "full_output": taken.log,
    })
}

/// The result for a process that ended within the call: like a finished command's.
fn ended_result(proc: &BgProcess, taken: &Taken, ended: &Ended, limit: usize) -> ToolResult {
    reported(proc, ended, taken.log.as_deref());
    let mut text = format!("{}\n", status_text(proc, Some(ended)));
    push_output(&mut text, taken, limit, "output");
    let mut data = process_data(proc, taken);
    data["process_id"] = serde_json::Value::Null;
    let ok = ended.exit_code == Some(0) && !ended.killed && !ended.timed_out;
    if ok {
        ToolResult::ok(text).with_data(data)
    } else {
        ToolResult {
            success: false,
            output: text,
            data: Some(data),
            files_changed: Vec::new(),
            error: Some(format!("the command {}", ended.describe())),
            error_kind: Some(
                if ended.timed_out {
                    "timeout"
                } else {
                    "command_failed"
                }
                .into(),
            ),
            images: Vec::new(),
        }
    }
}

/// The result of a read of a process (output, input, kill): status, new output, data.
fn read_result(
    commands: &CommandEnv,
    proc: &BgProcess,
    limit: usize,
    note: Option<String>,
) -> ToolResult {
    let taken = proc.take();
    let mut text = String::new();
    if let Some(n) = note {
        text.push_str(&n);
        text.push('\n');
    }
    let _ = writeln!(text, "{}", status_text(proc, taken.ended.as_ref()));
    push_output(&mut text, &taken, limit, "output since the last read");
    if let Some(ended) = &taken.ended {
        // Its last output is read: the id is free.
        forget(commands, proc, ended, taken.log.as_deref());
    }
    ToolResult::ok(text).with_data(process_data(proc, &taken))
}

/// Arguments of `shell`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShellArgs {
    /// The command, run in this session's persistent shell (cd, variables and functions
    /// persist between calls).
    pub command: Option<String>,
    /// Time limit in milliseconds: past it the command is interrupted (^C) and the shell
    /// stays usable (default and ceiling from the catalog).
    #[schemars(range(min = 1))]
    pub timeout_ms: Option<u64>,
    /// Start a fresh shell first (the old one and everything it ran is killed).
    pub restart: Option<bool>,
    /// Hosts the command needs beyond the catalog's [network], if the user approves.
    #[schemars(description = crate::network_ask::DESCRIPTION)]
    pub network: Option<crate::network_ask::NetworkAsk>,
}

/// The persistent shell of each session (in this runner).
fn shells() -> &'static Mutex<HashMap<String, Arc<BgProcess>>> {
    static SHELLS: OnceLock<Mutex<HashMap<String, Arc<BgProcess>>>> = OnceLock::new();
    SHELLS.get_or_init(Mutex::default)
}

/// `shell`: one persistent shell per session.
pub struct ShellTool {
    commands: Arc<CommandEnv>,
}

/// Whether the shell is bash (else sh).
fn has_bash() -> bool {
    std::path::Path::new("/bin/bash").exists()
}

/// The shell program: bash when present, else sh.
fn shell_command() -> &'static str {
    if has_bash() {
        // A handler (not an ignore, which children would inherit) keeps the shell alive when
        // an interrupt ends the command it runs.
        "exec /bin/bash --noprofile --norc"
    } else {
        "exec /bin/sh"
    }
}

impl ShellTool {
    async fn session_shell(
        &self,
        ctx: &ToolContext,
        restart: bool,
    ) -> Result<(Arc<BgProcess>, Option<String>), ToolError> {
        let existing = lock(shells()).get(&ctx.session_id).cloned();
        let mut note = None;
        if let Some(sh) = existing {
            if restart {
                sh.kill();
                table(&self.commands).remove(&sh.id);
                note = Some("the shell was restarted: a fresh one, nothing kept".to_string());
            } else if sh.ended().is_none() {
                return Ok((sh, None));
            } else {
                table(&self.commands).remove(&sh.id);
                note = Some(
                    "the session's shell had ended; this is a fresh one (cd, variables and functions were lost)"
                        .to_string(),
                );
            }
        } else if restart {
            note = Some("started a fresh shell".to_string());
        }
        let dir = self.commands.admit(ctx, shell_command(), None)?;
        let sh = spawn(&self.commands, ctx, shell_command(), dir, false, None).await?;
        sh.write(b"trap ':' INT\n").await?;
        lock(shells()).insert(ctx.session_id.clone(), sh.clone());
        Ok((sh, note))
    }
}

#[async_trait]
impl TypedTool for ShellTool {
    type Args = ShellArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new(
            "shell",
            "Run a command in this session's persistent shell (bash if present, else sh): cd, exported variables and functions persist between calls. A command past its timeout is interrupted and the shell stays usable; restart: true starts a fresh shell. stdin is /dev/null; for interactive programs use run_command with tty.",
            Annotations::COMMAND,
        )
    }
    async fn run(&self, args: ShellArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let command = args.command.unwrap_or_default();
        let restart = args.restart.unwrap_or(false);
        if command.trim().is_empty() && !restart {
            return Err(ToolError::InvalidArguments(
                "command is empty; give a shell command, or restart: true".into(),
            ));
        }
        if !command.trim().is_empty() {
            // The policy first: a refused command never reaches the shell.
            self.commands.admit(ctx, &command, None)?;
        }
        let (sh, note) = self.session_shell(ctx, restart).await?;
        if command.trim().is_empty() {
            return Ok(ToolResult::ok(note.unwrap_or_default())
                .with_data(json!({"process_id": sh.id, "restarted": true})));
        }
        let protected = self.commands.protected.clone();
        let quarantine = self.commands.env.state.quarantine_dir();
        let dir = quarantine.clone();
        let (before, hold) = tokio::task::spawn_blocking(move || protected.begin(&dir))
            .await
            .map_err(|e| ToolError::Io(format!("checking the protected paths: {e}")))?;
        let capture = crate::capture::begin(&self.commands.env).await;
        let result = run_in_shell(&sh, &command, ctx, note).await;
        let undone = tokio::task::spawn_blocking(move || {
            let undone = before.restore(&quarantine);
            drop(hold);
            undone
        })
        .await
        .map_err(|e| ToolError::Io(format!("restoring the protected paths: {e}")))?;
        let mut result = result?;
        if !undone.is_empty() {
            result
                .output
                .push_str(&toolyard_exec::protect::describe(&undone));
            result.output.push('\n');
        }
        if let Some(mut capture) = capture {
            let tool = crate::capture::current_tool();
            let who = crate::capture::Attribution {
                session: &ctx.session_id,
                call_id: &ctx.call_id,
                tool: &tool,
                command: &command,
            };
            if let Some(line) = capture.checkpoint(&self.commands.env, who).await.line() {
                if !result.output.is_empty() && !result.output.ends_with('\n') {
                    result.output.push('\n');
                }
                result.output.push_str(&line);
                result.output.push('\n');
            }
        }
        if sh.ended().is_some() {
            lock(shells()).remove(&ctx.session_id);
            table(&self.commands).remove(&sh.id);
        }
        Ok(result)
    }
}

async fn run_in_shell(
    sh: &BgProcess,
    command: &str,
    ctx: &ToolContext,
    note: Option<String>,
) -> Result<ToolResult, ToolError> {
    let _ = sh.take();
    let marker = format!("__TOOLYARD_DONE_{}__", uuid_like());
    let script = shell_script(command, &marker, has_bash());
    sh.write(script.as_bytes()).await?;
    // The call's limit, decided by the dispatcher's layer (its `timeout_ms` included).
    let timeout = ctx.timeout;
    let deadline = tokio::time::Instant::now() + timeout;
    let mut out = HeadTail::new(ctx.max_output_bytes);
    let mut recent: Vec<u8> = Vec::new();
    let mut interrupted = false;
    let tick = progress_tick(ctx, &sh.id);
    let code: Option<i32> = loop {
        let now = tokio::time::Instant::now();
        if now >= deadline && !interrupted {
            interrupted = true;
            sh.signal(libc::SIGINT)?;
        }
        let wait = if interrupted {
            Duration::from_secs(3)
        } else {
            deadline - now
        };
        tokio::select! {
            _ = sh.wait_output(wait, Duration::from_millis(20), &tick) => {}
            _ = ctx.cancel.cancelled() => {
                let _ = sh.signal(libc::SIGINT);
                return Err(ToolError::Cancelled);
            }
        }
        let taken = sh.take();
        out.push(&taken.bytes);
        recent.extend_from_slice(&taken.bytes);
        if let Some(code) = find_marker(&recent, &marker) {
            break Some(code);
        }
        if recent.len() > 4096 {
            recent.drain(..recent.len() - 4096);
        }
        if taken.ended.is_some() {
            break None;
        }
        if interrupted && tokio::time::Instant::now() >= deadline + Duration::from_secs(3) {
            // It ignores ^C: the shell cannot get its prompt back.
            sh.kill();
            break None;
        }
    };
    let shaped = out.finish(None);
    let body = strip_marker(&shaped.text, &marker);
    let mut text = String::new();
    if let Some(n) = note {
        text.push_str(&n);
        text.push('\n');
    }
    if interrupted {
        let _ = writeln!(
            text,
            "interrupted (^C) after {} ms, its time limit; the shell is {}",
            timeout.as_millis(),
            if code.is_some() {
                "still usable, with its state kept"
            } else {
                "gone; the next call starts a fresh one"
            }
        );
    } else if let Some(c) = code {
        let _ = writeln!(text, "exit code: {c}");
    } else {
        let _ = writeln!(
            text,
            "the shell exited; the next call starts a fresh one (cd, variables and functions are lost)"
        );
    }
    if body.trim_ascii().is_empty() {
        text.push_str("(no output)\n");
    } else {
        text.push_str(body.trim_start_matches('\n'));
        if !text.ends_with('\n') {
            text.push('\n');
        }
    }
    let data = json!({"exit_code": code, "timed_out": interrupted, "process_id": sh.id});
    if code == Some(0) && !interrupted {
        Ok(ToolResult::ok(text).with_data(data))
    } else {
        Ok(ToolResult {
            success: false,
            output: text,
            data: Some(data),
            files_changed: Vec::new(),
            error: Some(if interrupted {
                format!(
                    "the command timed out after {} ms and was interrupted",
                    timeout.as_millis()
                )
            } else if let Some(c) = code {
                format!("the command exited with code {c}")
            } else {
                "the shell exited".to_string()
            }),
            error_kind: Some(
                if interrupted {
                    "timeout"
                } else {
                    "command_failed"
                }
                .into(),
            ),
            images: Vec::new(),
        })
    }
}

/// What the shell is sent to run `command`, then print `marker` and its exit status.
///
/// The command reaches `eval` as one single-quoted word, whatever it holds: an unclosed quote,
/// a stray `}` or `fi`, a here-document never ended is then the command's own syntax error,
/// reported at once, instead of leaving the shell waiting for the rest (swallowing the marker,
/// so the call would wait out its whole time limit) or ending it. sh (dash) leaves on a syntax
/// error in `eval`, so without bash the syntax is checked first, by `sh -n` in a child.
fn shell_script(command: &str, marker: &str, bash: bool) -> String {
    let word = format!("'{}'", command.replace('\'', r"'\''"));
    let check = if bash {
        String::new()
    } else {
        format!("/bin/sh -n -c {word} && ")
    };
    format!("{{ {check}eval {word}\n}} </dev/null 2>&1\nprintf '\\n%s %d\\n' '{marker}' \"$?\"\n")
}

fn uuid_like() -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{:x}{:x}{n}", std::process::id(), t)
}

fn find_marker(recent: &[u8], marker: &str) -> Option<i32> {
    let text = String::from_utf8_lossy(recent);
    let at = text.rfind(marker)?;
    let rest = &text[at + marker.len()..];
    let line = rest.split_once('\n')?.0;
    line.trim().parse().ok()
}

fn strip_marker<'a>(text: &'a str, marker: &str) -> &'a str {
    match text.rfind(marker) {
        // The marker is printed after a newline of its own.
        Some(at) => text[..at].strip_suffix('\n').unwrap_or(&text[..at]),
        None => text,
    }
}

/// The process tools and `shell`, sharing `commands`.
pub fn tools(commands: Arc<CommandEnv>) -> Vec<Arc<dyn Tool>> {
    let p = |name| ProcessTool {
        name,
        commands: commands.clone(),
    };
    vec![
        Arc::new(Typed(OutputTool(p("process_output")))),
        Arc::new(Typed(InputTool(p("process_input")))),
        Arc::new(Typed(KillTool(p("process_kill")))),
        Arc::new(Typed(ListTool(p("process_list")))),
        Arc::new(Typed(ShellTool {
            commands: commands.clone(),
        })),
    ]
}
