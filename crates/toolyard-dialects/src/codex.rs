//! The `codex` dialect (OpenAI Codex CLI): `apply_patch {input}` (the JSON form of Codex's
//! freeform tool; MCP cannot carry a grammar) over the patch engine in [`toolyard_tools::patch`].
//! `exec_command` and `write_stdin` are Codex's unified exec over the process engine in
//! [`toolyard_tools::process`]: a command that outlives its yield keeps running as a session whose id
//! is the process id.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use toolyard_core::{
    Annotations, Freeform, ToolContext, ToolError, ToolInfo, ToolResult, Typed, TypedTool,
};

use super::DialectTool;
use toolyard_core::shape::HeadTail;
use toolyard_core::{CallShape, Engine};
use toolyard_exec::background::{BgProcess, Taken};
use toolyard_tools::ToolEnv;
use toolyard_tools::command::CommandEnv;
use toolyard_tools::patch;
use toolyard_tools::process;

/// Codex's Lark grammar of a patch (`codex-rs/core/src/tools/handlers/apply_patch.lark`), for
/// the freeform form of the tool.
pub const APPLY_PATCH_LARK: &str = r#"start: begin_patch hunk+ end_patch
begin_patch: "*** Begin Patch" LF
end_patch: "*** End Patch" LF?

hunk: add_hunk | delete_hunk | update_hunk
add_hunk: "*** Add File: " filename LF add_line+
delete_hunk: "*** Delete File: " filename LF
update_hunk: "*** Update File: " filename LF change_move? change?

filename: /(.+)/
add_line: "+" /(.*)/ LF -> line

change_move: "*** Move to: " filename LF
change: (change_context | change_line)+ eof_line?
change_context: ("@@" | "@@ " /(.+)/) LF
change_line: ("+" | "-" | " ") /(.*)/ LF
eof_line: "*** End of File" LF

%import common.LF
"#;

/// The description of Codex's freeform `apply_patch`.
pub const APPLY_PATCH_FREEFORM_DESCRIPTION: &str = "Use the `apply_patch` tool to edit files. This is a FREEFORM tool, so do not wrap the patch in JSON.";

const DESCRIPTION: &str = r#"Use the `apply_patch` tool to edit files. Your patch language is a stripped-down, file-oriented diff format designed to be easy to parse and safe to apply. You can think of it as a high-level envelope:

*** Begin Patch
[ one or more file sections ]
*** End Patch

Within that envelope, you get a sequence of file operations. You MUST include a header to specify the action you are taking. Each operation starts with one of three headers:

*** Add File: <path> - create a new file. Every following line is a + line (the initial contents).
*** Delete File: <path> - remove an existing file. Nothing follows.
*** Update File: <path> - patch an existing file in place (optionally with a rename).

May be immediately followed by *** Move to: <new path> if you want to rename the file. Then one or more hunks, each introduced by @@ (optionally followed by a hunk header). Within a hunk each line starts with a space (context), - (removed) or + (added).

For context lines: show 3 lines of code immediately above and 3 lines immediately below each change; do not duplicate context between nearby changes. If 3 lines do not identify the place uniquely, use @@ with a class or function line (e.g. `@@ class BaseClass`); several @@ headers may narrow it further. End a hunk that ends the file with *** End of File.

Patch := Begin { FileOp } End
Begin := "*** Begin Patch" NEWLINE
End := "*** End Patch" NEWLINE
FileOp := AddFile | DeleteFile | UpdateFile
AddFile := "*** Add File: " path NEWLINE { "+" line NEWLINE }
DeleteFile := "*** Delete File: " path NEWLINE
UpdateFile := "*** Update File: " path NEWLINE [ MoveTo ] { Hunk }
MoveTo := "*** Move to: " newPath NEWLINE
Hunk := "@@" [ header ] NEWLINE { HunkLine } [ "*** End of File" NEWLINE ]
HunkLine := (" " | "-" | "+") text NEWLINE

Example:

*** Begin Patch
*** Add File: hello.txt
+Hello world
*** Update File: src/app.py
*** Move to: src/main.py
@@ def greet():
-print("Hi")
+print("Hello, world!")
*** Delete File: obsolete.txt
*** End Patch

File paths are relative to the workspace, never absolute. The whole patch is checked before anything is written: if any part fails, no file changes. Each changed file can be reverted with undo."#;

/// Arguments of Codex's `apply_patch` (its JSON function form).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApplyPatchArgs {
    /// The entire contents of the apply_patch command
    pub input: String,
}

/// Codex's `apply_patch`: add, delete, update and move files with one patch, all or nothing.
pub struct ApplyPatch {
    env: Arc<ToolEnv>,
}

impl ApplyPatch {
    /// The tool over `env`.
    pub fn new(env: Arc<ToolEnv>) -> Self {
        Self { env }
    }
}

#[async_trait]
impl TypedTool for ApplyPatch {
    type Args = ApplyPatchArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new("apply_patch", DESCRIPTION, Annotations::MUTATING).freeform(|| Freeform {
            description: APPLY_PATCH_FREEFORM_DESCRIPTION.into(),
            syntax: "lark".into(),
            definition: APPLY_PATCH_LARK.into(),
        })
    }

    async fn run(&self, args: ApplyPatchArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let hunks = patch::parse_patch(&args.input)?;
        // File tools already run on the server's blocking pool.
        let plan = patch::plan(&self.env, &ctx.cwd, &hunks)?;
        let changed = patch::apply(&self.env, ctx, &plan).await?;
        let [added, modified, deleted] = plan.lists();
        Ok(ToolResult::ok(plan.summary())
            .with_data(json!({
                "added": added,
                "modified": modified,
                "deleted": deleted,
            }))
            .with_files_changed(changed))
    }
}

/// `exec_command`'s yield when none is given (ms), as Codex.
const EXEC_YIELD_MS: u64 = 10_000;
/// `write_stdin`'s yield after a write when none is given (ms), as Codex.
const WRITE_YIELD_MS: u64 = 250;
/// `write_stdin`'s yield for an empty poll when none is given (ms), as Codex's floor.
const POLL_YIELD_MS: u64 = 5_000;
/// Codex's yield range for `exec_command` and non-empty writes (ms).
const YIELD_RANGE: (u64, u64) = (250, 30_000);
/// Codex's ceiling for an empty poll (ms).
const POLL_MAX_MS: u64 = 300_000;
/// Codex's default output budget (tokens).
const DEFAULT_TOKENS: u64 = 10_000;
/// Bytes per token when capping output (Codex's own estimate).
const BYTES_PER_TOKEN: u64 = 4;

/// A session id as a model sends it: Codex's models send a number, Toolyard's ids are strings
/// (`net-3`); both are taken.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum SessionId {
    /// The id as returned (`net-3`).
    Text(String),
    /// A bare number.
    Number(u64),
}

impl SessionId {
    fn as_text(&self) -> String {
        match self {
            SessionId::Text(s) => s.clone(),
            SessionId::Number(n) => n.to_string(),
        }
    }
}

/// Arguments of Codex's `exec_command`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecCommandArgs {
    /// Shell command to execute.
    pub cmd: String,
    /// Working directory for the command. Defaults to the turn cwd.
    pub workdir: Option<String>,
    /// True allocates a PTY for the command; false or omitted uses plain pipes.
    pub tty: Option<bool>,
    /// Wait before yielding output. Defaults to 10000 ms; effective range is 250-30000 ms.
    pub yield_time_ms: Option<u64>,
    /// Output token budget. Defaults to 10000 tokens; larger requests may be capped by policy.
    pub max_output_tokens: Option<u64>,
    /// Shell binary to launch. Toolyard runs every command with `sh -c`; only `sh`, `bash` or
    /// omitted are accepted.
    pub shell: Option<String>,
    /// True runs the shell with -l/-i semantics; false disables them. Toolyard's sandboxed
    /// shell is never a login shell, so this is ignored.
    pub login: Option<bool>,
}

/// Arguments of Codex's `write_stdin`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteStdinArgs {
    /// Identifier of the running unified exec session (as exec_command returned it, e.g. `net-3`).
    pub session_id: SessionId,
    /// Bytes to write to stdin. Defaults to empty, which polls without writing.
    pub chars: Option<String>,
    /// Wait before yielding output. Non-empty writes default to 250 ms and cap at 30000 ms;
    /// empty polls wait 5000-300000 ms by default.
    pub yield_time_ms: Option<u64>,
    /// Output token budget. Defaults to 10000 tokens; larger requests may be capped by policy.
    pub max_output_tokens: Option<u64>,
}

/// Codex's `exec_command`: run a command; past the yield it keeps running as a session.
pub struct ExecCommand {
    commands: Arc<CommandEnv>,
}

/// Codex's `write_stdin`: write to a session (or just poll it) and return what it printed.
pub struct WriteStdin {
    commands: Arc<CommandEnv>,
}

/// The output cap in bytes for `tokens` (at most the call's own output limit).
fn byte_cap(tokens: Option<u64>, ctx: &ToolContext) -> usize {
    let tokens = tokens.unwrap_or(DEFAULT_TOKENS).max(1);
    let bytes = usize::try_from(tokens.saturating_mul(BYTES_PER_TOKEN)).unwrap_or(usize::MAX);
    bytes.min(ctx.max_output_bytes)
}

/// The result in Codex's text form: wall time, exit code or session id, output.
fn unified_result(
    commands: &CommandEnv,
    proc: &BgProcess,
    taken: &Taken,
    started: Instant,
    cap: usize,
) -> ToolResult {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "Wall time: {:.4} seconds",
        started.elapsed().as_secs_f64()
    );
    let exit_code = taken.ended.as_ref().map(|e| {
        e.exit_code.unwrap_or(match e.signal.as_deref() {
            // A shell's convention: 128 + the signal's number.
            Some("SIGINT") => 130,
            Some("SIGTERM") => 143,
            _ => 137,
        })
    });
    match (&taken.ended, exit_code) {
        (Some(e), Some(code)) => {
            let _ = writeln!(text, "Process exited with code {code}");
            if e.exit_code.is_none() || e.timed_out || e.killed {
                let _ = writeln!(text, "(the process {})", e.describe());
            }
            // Its last output is read: the id is free.
            process::forget(commands, proc, e, taken.log.as_deref());
        }
        _ => {
            let _ = writeln!(text, "Process running with session ID {}", proc.id);
        }
    }
    let original = (taken.bytes.len() as u64).div_ceil(BYTES_PER_TOKEN);
    let _ = writeln!(text, "Original token count: {original}");
    if taken.dropped > 0 {
        let _ = writeln!(
            text,
            "({} bytes of older output were dropped from the buffer)",
            taken.dropped
        );
    }
    text.push_str("Output:\n");
    let mut ht = HeadTail::new(cap);
    ht.push(&taken.bytes);
    let hint = taken
        .log
        .as_ref()
        .map(|p| format!("full output in {}", p.display()));
    text.push_str(&ht.finish(hint.as_deref()).text);
    let data = json!({
        "wall_time_seconds": started.elapsed().as_secs_f64(),
        "exit_code": exit_code,
        "session_id": taken.ended.is_none().then(|| proc.id.clone()),
        "original_token_count": original,
        "full_output": taken.log,
    });
    ToolResult::ok(text).with_data(data)
}

#[async_trait]
impl TypedTool for ExecCommand {
    type Args = ExecCommandArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new(
            "exec_command",
            "Runs a command in a PTY, returning output or a session ID for ongoing interaction. \
         tty defaults to false (plain pipes); set tty: true for programs that read a terminal \
         (REPLs). A command still running after yield_time_ms keeps running: continue it with \
         write_stdin {session_id}.",
            Annotations::COMMAND,
        )
    }

    async fn run(&self, args: ExecCommandArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        if let Some(sh) = args
            .shell
            .as_deref()
            .filter(|s| !matches!(s.rsplit('/').next(), Some("sh" | "bash")))
        {
            return Ok(ToolResult::failure(
                "invalid_arguments",
                format!(
                    "shell `{sh}` is not available: commands run with sh -c; omit shell or use \"bash\""
                ),
            ));
        }
        // Toolyard's sandboxed shell is never a login shell: login changes nothing.
        let _ = args.login;
        let started = Instant::now();
        let commands = &self.commands;
        let dir = commands.admit(ctx, &args.cmd, args.workdir.as_deref())?;
        let yield_ms = args
            .yield_time_ms
            .unwrap_or(EXEC_YIELD_MS)
            .clamp(YIELD_RANGE.0, YIELD_RANGE.1);
        let yield_for = Duration::from_millis(yield_ms).min(ctx.max_timeout);
        let proc = process::spawn(
            commands,
            ctx,
            &args.cmd,
            dir,
            args.tty.unwrap_or(false),
            None,
        )
        .await?;
        let tick = process::progress_tick(ctx, &proc.id);
        process::wait_end(&proc, yield_for, &tick, &ctx.cancel).await;
        let taken = proc.take();
        let mut result = unified_result(
            commands,
            &proc,
            &taken,
            started,
            byte_cap(args.max_output_tokens, ctx),
        );
        process::capture_line(commands, &proc, ctx, &mut result).await;
        Ok(result)
    }
}

#[async_trait]
impl TypedTool for WriteStdin {
    type Args = WriteStdinArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new(
            "write_stdin",
            "Writes characters to an existing unified exec session and returns recent output. \
         Empty chars polls without writing. On a tty session \\u0003 is ^C and \\u0004 is ^D.",
            Annotations::COMMAND,
        )
    }

    async fn run(&self, args: WriteStdinArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let started = Instant::now();
        let commands = &self.commands;
        let id = args.session_id.as_text();
        let proc = process::table(commands)
            .get(&ctx.session_id, &id)
            .map_err(|_| {
                ToolError::NotFound(match process::reported_end(&ctx.session_id, &id) {
                    Some(why) => format!("Unknown process id {id}: the session {why}"),
                    None => format!(
                        "Unknown process id {id}: session_id must be one exec_command returned \
                         (e.g. `net-3`) while it was still running; a session that has exited \
                         is gone, run exec_command again"
                    ),
                })
            })?;
        let chars = args.chars.unwrap_or_default();
        let yield_ms = if chars.is_empty() {
            args.yield_time_ms
                .unwrap_or(POLL_YIELD_MS)
                .clamp(POLL_YIELD_MS, POLL_MAX_MS)
        } else {
            args.yield_time_ms
                .unwrap_or(WRITE_YIELD_MS)
                .clamp(YIELD_RANGE.0, YIELD_RANGE.1)
        };
        if !chars.is_empty() {
            if !proc.tty && chars == "\u{3}" {
                // Codex interrupts a pipe session on ^C.
                proc.signal(libc::SIGINT)?;
            } else {
                proc.write(chars.as_bytes()).await.map_err(|e| match e {
                    ToolError::Conflict(_) if proc.ended().is_none() => ToolError::Conflict(
                        "stdin is closed for this session; rerun exec_command with tty=true to keep stdin open"
                            .into(),
                    ),
                    other => other,
                })?;
            }
        }
        let tick = process::progress_tick(ctx, &proc.id);
        let wait = Duration::from_millis(yield_ms).min(ctx.max_timeout);
        process::wait_end(&proc, wait, &tick, &ctx.cancel).await;
        let taken = proc.take();
        let mut result = unified_result(
            commands,
            &proc,
            &taken,
            started,
            byte_cap(args.max_output_tokens, ctx),
        );
        process::capture_line(commands, &proc, ctx, &mut result).await;
        Ok(result)
    }
}

/// The codex dialect's own tools.
pub fn tools(env: &Arc<ToolEnv>, commands: Arc<CommandEnv>) -> Vec<DialectTool> {
    vec![
        // Its files are in the patch text: never a small write.
        DialectTool::new(
            Engine::EditFile,
            Arc::new(Typed(ApplyPatch::new(env.clone()))),
        )
        .shaped(CallShape::NONE),
        DialectTool::new(
            Engine::RunCommand,
            Arc::new(Typed(ExecCommand {
                commands: commands.clone(),
            })),
        )
        .shaped(CallShape {
            command: Some("cmd"),
            background: &["tty"],
            yields: &["yield_time_ms"],
            // Unified exec keeps whatever outlives its default yield.
            yields_by_default: true,
            ..CallShape::NONE
        }),
        DialectTool::new(
            Engine::ProcessInput,
            Arc::new(Typed(WriteStdin { commands })),
        )
        .shaped(CallShape {
            process_id: Some("session_id"),
            ..CallShape::NONE
        }),
    ]
}
