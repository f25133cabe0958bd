//! The process tools: `process_output`, `process_input`, `process_kill` and `process_list`,
//! each reaching a process of this session by its id.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use toolyard_core::{Annotations, ToolContext, ToolError, ToolInfo, ToolResult, TypedTool};
use toolyard_exec::background::{BgProcess, Ended};

use super::{
    CommandEnv, DEFAULT_INPUT_WAIT, SETTLE, capture_line, find, progress_tick, push_output,
    read_result, table, wait_end,
};

/// Arguments of `process_output`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProcessOutputArgs {
    /// The process, as run_command returned it in `data.process_id` (e.g. `net-3`).
    pub process_id: String,
    /// Wait up to this many milliseconds for new output or the end (default 0: do not wait).
    pub wait_ms: Option<u64>,
}

/// Arguments of `process_input`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProcessInputArgs {
    /// The process.
    pub process_id: String,
    /// The text to write to its input, as typed (end a line with `\n`; on a tty `\u0003` is ^C
    /// and `\u0004` is ^D).
    #[serde(default)]
    pub text: String,
    /// Then close its input (end of file), for a process on pipes.
    pub eof: Option<bool>,
    /// Wait up to this many milliseconds for what it prints in answer (default 1000).
    pub wait_ms: Option<u64>,
}

/// Arguments of `process_kill`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProcessKillArgs {
    /// The process.
    pub process_id: String,
    /// A signal to send instead of killing the whole tree: SIGINT, SIGTERM, SIGHUP, SIGQUIT,
    /// SIGUSR1, SIGUSR2 (default: SIGKILL to every process of its tree).
    pub signal: Option<String>,
}

/// Arguments of `process_list`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProcessListArgs {}

fn signal_number(name: &str) -> Result<i32, ToolError> {
    let n = name.trim().to_ascii_uppercase();
    let n = n.strip_prefix("SIG").unwrap_or(&n);
    Ok(match n {
        "KILL" | "9" => libc::SIGKILL,
        "INT" | "2" => libc::SIGINT,
        "TERM" | "15" => libc::SIGTERM,
        "HUP" | "1" => libc::SIGHUP,
        "QUIT" | "3" => libc::SIGQUIT,
        "USR1" | "10" => libc::SIGUSR1,
        "USR2" | "12" => libc::SIGUSR2,
        _ => {
            return Err(ToolError::InvalidArguments(format!(
                "signal `{name}` is not one process_kill sends; use SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, or omit it to kill the whole tree"
            )));
        }
    })
}

/// `process_output`, `process_input`, `process_kill`, `process_list`.
pub struct ProcessTool {
    pub(super) name: &'static str,
    pub(super) commands: Arc<CommandEnv>,
}

pub(super) struct OutputTool(pub(super) ProcessTool);
pub(super) struct InputTool(pub(super) ProcessTool);
pub(super) struct KillTool(pub(super) ProcessTool);
pub(super) struct ListTool(pub(super) ProcessTool);

#[async_trait]
impl TypedTool for OutputTool {
    type Args = ProcessOutputArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new(
            self.0.name,
            "Read a process started with run_command background/yield_ms: the output since the last read (head and tail; the full output is in a file), whether it still runs, its exit status once ended. wait_ms waits for new output or the end.",
            Annotations::READ_ONLY,
        )
    }
    async fn run(
        &self,
        args: ProcessOutputArgs,
        ctx: &ToolContext,
    ) -> Result<ToolResult, ToolError> {
        let commands = &self.0.commands;
        let proc = find(commands, &ctx.session_id, &args.process_id)?;
        let wait = Duration::from_millis(args.wait_ms.unwrap_or(0)).min(ctx.max_timeout);
        if !wait.is_zero() {
            let tick = progress_tick(ctx, &proc.id);
            tokio::select! {
                _ = proc.wait_output(wait, SETTLE, &tick) => {}
                _ = ctx.cancel.cancelled() => {}
            }
        }
        let mut result = read_result(commands, &proc, ctx.max_output_bytes, None);
        capture_line(commands, &proc, ctx, &mut result).await;
        Ok(result)
    }
}

#[async_trait]
impl TypedTool for InputTool {
    type Args = ProcessInputArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new(
            self.0.name,
            "Write text to the input of a running process (started with run_command background/yield_ms/tty) and return what it prints within wait_ms. On a tty, \\u0003 is ^C and \\u0004 is ^D; on pipes, eof: true closes its input.",
            Annotations::COMMAND,
        )
    }
    async fn run(
        &self,
        args: ProcessInputArgs,
        ctx: &ToolContext,
    ) -> Result<ToolResult, ToolError> {
        let commands = &self.0.commands;
        let proc = find(commands, &ctx.session_id, &args.process_id)?;
        // Output it printed before this input is not its answer: keep it, shown first.
        let earlier = proc.take();
        if !args.text.is_empty() {
            proc.write(args.text.as_bytes()).await?;
        }
        if args.eof.unwrap_or(false) {
            proc.close_input();
        }
        let wait = args
            .wait_ms
            .map(Duration::from_millis)
            .unwrap_or(DEFAULT_INPUT_WAIT)
            .min(ctx.max_timeout);
        let tick = progress_tick(ctx, &proc.id);
        tokio::select! {
            _ = proc.wait_output(wait, SETTLE, &tick) => {}
            _ = ctx.cancel.cancelled() => {}
        }
        let note = (!earlier.bytes.is_empty()).then(|| {
            let mut t = String::new();
            push_output(
                &mut t,
                &earlier,
                ctx.max_output_bytes / 2,
                "output before this input",
            );
            t.trim_end().to_string()
        });
        let mut result = read_result(commands, &proc, ctx.max_output_bytes, note);
        capture_line(commands, &proc, ctx, &mut result).await;
        Ok(result)
    }
}

#[async_trait]
impl TypedTool for KillTool {
    type Args = ProcessKillArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new(
            self.0.name,
            "Stop a process started with run_command background/yield_ms: by default kill it and every process it started (its whole tree); or send one signal (SIGINT, SIGTERM, ...). Returns its last output.",
            Annotations::MUTATING,
        )
    }
    async fn run(&self, args: ProcessKillArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let commands = &self.0.commands;
        let proc = find(commands, &ctx.session_id, &args.process_id)?;
        let sig = match &args.signal {
            Some(s) => signal_number(s)?,
            None => libc::SIGKILL,
        };
        let was_running = proc.ended().is_none();
        proc.signal(sig)?;
        let tick = progress_tick(ctx, &proc.id);
        let wait = if sig == libc::SIGKILL {
            Duration::from_secs(5)
        } else {
            Duration::from_millis(500)
        };
        wait_end(&proc, wait, &tick, &ctx.cancel).await;
        let note = match (&args.signal, was_running) {
            (_, false) => "it had already ended".to_string(),
            (None, true) => "killed it and its whole process tree".to_string(),
            (Some(s), true) => format!("sent {s}"),
        };
        let mut result = read_result(commands, &proc, ctx.max_output_bytes, Some(note));
        capture_line(commands, &proc, ctx, &mut result).await;
        Ok(result)
    }
}

#[async_trait]
impl TypedTool for ListTool {
    type Args = ProcessListArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new(
            self.0.name,
            "List this session's processes (started with run_command background/yield_ms/tty, and the shell): id, command, age, status, output size.",
            Annotations::READ_ONLY,
        )
    }
    async fn run(
        &self,
        _args: ProcessListArgs,
        ctx: &ToolContext,
    ) -> Result<ToolResult, ToolError> {
        Ok(list_result(&table(&self.0.commands).list(&ctx.session_id)))
    }
}

/// The `process_list` result of `procs`.
fn list_result(procs: &[Arc<BgProcess>]) -> ToolResult {
    let rows: Vec<_> = procs
        .iter()
        .map(|p| {
            let i = p.info();
            json!({
                "process_id": i.id,
                "command": i.command,
                "age_s": i.age.as_secs(),
                "running": i.ended.is_none(),
                "status": i.ended.as_ref().map_or("running".to_string(), Ended::describe),
                "output_bytes": i.output_bytes,
                "tty": i.tty,
            })
        })
        .collect();
    let mut text = String::new();
    if rows.is_empty() {
        text.push_str("no processes in this session\n");
    }
    for r in &rows {
        let _ = writeln!(
            text,
            "{}  {}  {} s  {} bytes  {}",
            r["process_id"].as_str().unwrap_or(""),
            r["status"].as_str().unwrap_or(""),
            r["age_s"],
            r["output_bytes"],
            r["command"].as_str().unwrap_or("")
        );
    }
    ToolResult::ok(text).with_data(json!({ "processes": rows }))
}

// ---- shell ----
