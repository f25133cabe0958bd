//! The `claude-code` dialect: Claude Code's built-in tools (`Read`, `Write`, `Edit`,
//! `MultiEdit`, `Glob`, `Grep`, `Bash`, `BashOutput`, `KillShell`) with their exact parameter
//! names, over Toolyard's engine.
//!
//! Texts follow Claude Code v1.0.x (see the dialects notes, section 2c): `cat -n` reads, the
//! Edit error strings. Every path goes through the workspace's confinement, an existing file
//! must have been read before it is written, and every write is journaled. Tools that need no
//! shaping of their own (Glob, Grep, BashOutput, KillShell) call the loopr tool with renamed
//! arguments through the shared [`Adapter`]; `Bash` also keeps each session's directory.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use grep_matcher::Matcher;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use toolyard_core::sync::lock;
use toolyard_core::{
    Annotations, TIMEOUT_ARG, Tool, ToolContext, ToolError, ToolInfo, ToolResult, Typed, TypedTool,
    time_limit,
};
use toolyard_exec::ExecOutcome;
use toolyard_workspace::{Expect, RelPath, hash_bytes};

use super::DialectTool;
use super::{Adapter, Answer, Shaped};
use crate::text::{lines_of, numbered};
use toolyard_core::{CallShape, Engine};
use toolyard_tools::ToolEnv;
use toolyard_tools::command::{CommandEnv, command_result};
use toolyard_tools::files::{apply_edit, commit_write, expect_for_write, lines_before};

mod notebook;
mod read;

use notebook::NotebookEdit;
use read::Read;

/// Characters of a line `Read` shows; the rest is cut.
const MAX_LINE: usize = 2000;
/// The longest `Bash` timeout (ms).
const MAX_TIMEOUT_MS: u64 = 600_000;
/// `Bash`'s timeout when none is given (ms).
const DEFAULT_TIMEOUT_MS: u64 = 120_000;

const NOT_READ: &str = "File has not been read yet. Read it first before writing to it.";
const STALE: &str = "File has been modified since read, either by the user or by a linter. Read it again before attempting to write it.";

/// A failure in Claude Code's words.
type Fail = (&'static str, String);

/// An engine error in Claude Code's words (read-before-write), otherwise as the engine says it.
fn translate(e: ToolError) -> Result<Fail, ToolError> {
    match e {
        ToolError::NotRead { .. } => Ok(("not_read", NOT_READ.into())),
        ToolError::StaleRead { .. } => Ok(("stale_read", STALE.into())),
        ToolError::Cancelled => Err(ToolError::Cancelled),
        e => Ok((e.kind(), e.to_string())),
    }
}

/// A result of a delegated loopr tool, its read-before-write failures in Claude Code's words.
fn recast(r: ToolResult) -> ToolResult {
    match r.error_kind.as_deref() {
        Some("not_read") => ToolResult::failure("not_read", NOT_READ),
        Some("stale_read") => ToolResult::failure("stale_read", STALE),
        _ => r,
    }
}

/// The outcome of a delegated call, read-before-write errors in Claude Code's words.
fn delegated(r: Result<ToolResult, ToolError>) -> Result<ToolResult, ToolError> {
    match r {
        Ok(r) => Ok(recast(r)),
        Err(ToolError::NotRead { .. }) => Ok(ToolResult::failure("not_read", NOT_READ)),
        Err(ToolError::StaleRead { .. }) => Ok(ToolResult::failure("stale_read", STALE)),
        Err(e) => Err(e),
    }
}

/// Run `f`, turning a [`Fail`] into a failed result.
fn finish(r: Result<ToolResult, Result<Fail, ToolError>>) -> Result<ToolResult, ToolError> {
    match r {
        Ok(r) => Ok(r),
        Err(Ok((kind, msg))) => Ok(ToolResult::failure(kind, msg)),
        Err(Err(e)) => Err(e),
    }
}

/// Find the loopr tool `name` among `tools`.
fn engine(tools: &[Arc<dyn Tool>], name: &str) -> Option<Arc<dyn Tool>> {
    tools.iter().find(|t| t.name() == name).cloned()
}

/// Arguments of `Write`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteArgs {
    /// The absolute path to the file to write (must be absolute, not relative).
    pub file_path: String,
    /// The content to write to the file.
    pub content: String,
}

/// Claude Code's `Write`: write_file with Claude Code's names and texts.
pub struct Write {
    write_file: Arc<dyn Tool>,
}

#[async_trait]
impl TypedTool for Write {
    type Args = WriteArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new(
            "Write",
            "Writes a file to the workspace, overwriting it if it exists. An existing file must have \
         been Read first. Prefer Edit for changing part of an existing file.",
            Annotations::MUTATING,
        )
    }

    async fn run(&self, args: WriteArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let r = self
            .write_file
            .invoke(
                json!({"path": args.file_path, "content": args.content}),
                ctx,
            )
            .await;
        delegated(r)
    }
}

/// One edit of `Edit` or `MultiEdit`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditOp {
    /// The text to replace.
    pub old_string: String,
    /// The text to replace it with (must be different from old_string).
    pub new_string: String,
    /// Replace all occurrences of old_string (default false).
    #[serde(default)]
    pub replace_all: bool,
}

/// Arguments of `Edit`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditArgs {
    /// The absolute path to the file to modify.
    pub file_path: String,
    /// The text to replace.
    pub old_string: String,
    /// The text to replace it with (must be different from old_string).
    pub new_string: String,
    /// Replace all occurrences of old_string (default false).
    #[serde(default)]
    pub replace_all: bool,
}

/// Arguments of `MultiEdit`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MultiEditArgs {
    /// The absolute path to the file to modify.
    pub file_path: String,
    /// Edits applied in order, each to the result of the one before; all or none are applied.
    #[schemars(length(min = 1))]
    pub edits: Vec<EditOp>,
}

/// Claude Code's `Edit` and `MultiEdit`: one engine, one journaled write per call.
pub struct Editor {
    env: Arc<ToolEnv>,
    multi: bool,
}

/// Apply `edits` in order to `content` (all or none); the new content and each edit's first
/// line.
fn apply_all(shown: &str, content: &[u8], edits: &[EditOp]) -> Result<(Vec<u8>, Vec<usize>), Fail> {
    let mut cur = content.to_vec();
    let mut lines = Vec::new();
    for (i, op) in edits.iter().enumerate() {
        let which = if edits.len() > 1 {
            format!(" (edit {})", i + 1)
        } else {
            String::new()
        };
        if op.old_string == op.new_string {
            return Err((
                "invalid_arguments",
                format!(
                    "No changes to make: old_string and new_string are exactly the same.{which}"
                ),
            ));
        }
        if op.old_string.is_empty() {
            return Err((
                "invalid_arguments",
                format!(
                    "Cannot create new file - file already exists.{which} Give a non-empty old_string, or use Write to replace the whole file."
                ),
            ));
        }
        let (next, reps) =
            apply_edit(shown, &cur, &op.old_string, &op.new_string, true).map_err(|e| match e {
                ToolError::NotFound(msg) => {
                    // Claude Code's sentence, then the engine's nearest lines with their
                    // numbers, so the retry can aim at the right place.
                    let detail = msg
                        .split_once(". ")
                        .map(|(_, r)| r.replace("read_file", "Read"))
                        .unwrap_or_default();
                    (
                        "not_found",
                        format!(
                            "String to replace not found in file.{which}\nString: {}\n{detail}",
                            op.old_string
                        ),
                    )
                }
                e => (e.kind(), format!("{e}{which}")),
            })?;
        if reps.len() > 1 && !op.replace_all {
            return Err((
                "conflict",
                format!(
                    "Found {} matches of the string to replace, but replace_all is false. To replace all occurrences, set replace_all to true. To replace only one occurrence, please provide more context to uniquely identify the instance.{which}\nString: {}\nThe matches start at lines {}.",
                    reps.len(),
                    op.old_string,
                    lines_before(&reps, &op.old_string, &op.new_string)
                        .iter()
                        .take(20)
                        .map(usize::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        lines.push(reps.first().map_or(1, |r| r.line));
        cur = next;
    }
    Ok((cur, lines))
}

#[async_trait]
impl TypedTool for Editor {
    type Args = MultiEditArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new(
            if self.multi { "MultiEdit" } else { "Edit" },
            if self.multi {
                "Makes several edits to one file in one operation: each {old_string, new_string, \
             replace_all} is applied in order to the result of the one before, and either all \
             succeed or none is applied. The file must have been Read first. An empty old_string \
             in the first edit of a file that does not exist creates it with new_string."
            } else {
                "Performs exact string replacement in a file: old_string must occur exactly once \
             (give more surrounding context) unless replace_all is true. Copy old_string from Read \
             output without the line-number prefix. The file must have been Read first. An empty \
             old_string on a file that does not exist creates it with new_string."
            },
            Annotations::MUTATING,
        )
    }

    async fn run(&self, args: MultiEditArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        finish(self.exec(args, ctx).await)
    }
}

impl Editor {
    async fn exec(
        &self,
        args: MultiEditArgs,
        ctx: &ToolContext,
    ) -> Result<ToolResult, Result<Fail, ToolError>> {
        let shown = args.file_path.clone();
        if args.edits.is_empty() {
            return Err(Ok((
                "invalid_arguments",
                "edits is empty; give at least one {old_string, new_string}".into(),
            )));
        }
        let ws = &self.env.workspace;
        let rel = ws.locate(&args.file_path, &ctx.cwd).map_err(translate)?;
        let name = self.info().name.to_string();
        let exists = ws.metadata(&rel).map_err(translate)?.is_some();
        let (content, expect, edits): (Vec<u8>, Expect, &[EditOp]) = if !exists {
            // Claude Code creates a file from an empty old_string in the first edit.
            match args.edits.first() {
                Some(first) if first.old_string.is_empty() => (
                    first.new_string.as_bytes().to_vec(),
                    Expect::Missing,
                    &args.edits[1..],
                ),
                _ => {
                    return Err(Ok((
                        "file_not_found",
                        format!(
                            "File does not exist: {shown}. To create it, use Write (or an empty old_string)."
                        ),
                    )));
                }
            }
        } else {
            let content = ws.read(&rel).map_err(translate)?;
            let current = hash_bytes(&content);
            let expect = expect_for_write(&self.env, ctx, &rel, Some(&current))
                .await
                .map_err(translate)?;
            (content, expect, &args.edits[..])
        };
        let (next, lines) = apply_all(&shown, &content, edits).map_err(Ok)?;
        let out = commit_write(&self.env, ctx, &name, &rel, &next, &expect)
            .await
            .map_err(translate)?;
        let text = if !exists && edits.is_empty() {
            format!("File created successfully at: {shown}")
        } else if self.multi {
            let mut t = format!("Applied {} edits to {shown}:", args.edits.len());
            for (i, op) in args.edits.iter().enumerate() {
                t.push_str(&format!(
                    "\n{}. Replaced \"{}\" with \"{}\"",
                    i + 1,
                    short(&op.old_string),
                    short(&op.new_string)
                ));
            }
            t
        } else if args.edits.first().is_some_and(|e| e.replace_all) {
            let op = &args.edits[0];
            format!(
                "The file {shown} has been updated. All occurrences of '{}' were successfully replaced with '{}'.",
                short(&op.old_string),
                short(&op.new_string)
            )
        } else {
            let at = lines.first().copied().unwrap_or(1).saturating_sub(1);
            let after = String::from_utf8_lossy(&next);
            let all = lines_of(&after);
            let added = args
                .edits
                .first()
                .map_or(0, |e| e.new_string.matches('\n').count());
            let start = at.saturating_sub(4);
            let end = (at + added + 5).min(all.len());
            format!(
                "The file {shown} has been updated. Here's the result of running `cat -n` on a snippet of the edited file:\n{}",
                numbered(&all[start.min(end)..end], start + 1, Some(MAX_LINE))
            )
        };
        Ok(ToolResult::ok(text)
            .with_data(
                json!({"path": out.path.as_str(), "edits": args.edits.len(), "lines": lines}),
            )
            .with_files_changed(vec![out.path.to_string()]))
    }
}

/// `s` cut to 80 characters for a summary line.
fn short(s: &str) -> String {
    match s.char_indices().nth(80) {
        Some((at, _)) => format!("{}...", &s[..at]),
        None => s.to_string(),
    }
}

/// `Edit`'s arguments as a one-edit `MultiEdit`.
struct SingleEdit(Editor);

#[async_trait]
impl TypedTool for SingleEdit {
    type Args = EditArgs;

    fn info(&self) -> ToolInfo<'_> {
        self.0.info()
    }

    async fn run(&self, args: EditArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let multi = MultiEditArgs {
            file_path: args.file_path,
            edits: vec![EditOp {
                old_string: args.old_string,
                new_string: args.new_string,
                replace_all: args.replace_all,
            }],
        };
        finish(self.0.exec(multi, ctx).await)
    }
}

/// Arguments of `Glob`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GlobArgs {
    /// The glob pattern to match files against, e.g. `**/*.js` or `src/**/*.ts`.
    pub pattern: String,
    /// The directory to search in (default: the working directory). Omit it for the default;
    /// do not pass "undefined" or "null".
    pub path: Option<String>,
}

/// Arguments of `Grep`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrepArgs {
    /// The regular expression to search for in file contents.
    pub pattern: String,
    /// File or directory to search in (default: the working directory).
    pub path: Option<String>,
    /// Glob to filter files, e.g. `*.js` or `*.{ts,tsx}` (rg --glob).
    pub glob: Option<String>,
    /// `content` (matching lines), `files_with_matches` (paths, the default) or `count`.
    pub output_mode: Option<String>,
    /// Lines to show before each match (content mode only).
    #[serde(rename = "-B")]
    pub before: Option<u64>,
    /// Lines to show after each match (content mode only).
    #[serde(rename = "-A")]
    pub after: Option<u64>,
    /// Lines to show before and after each match (content mode only).
    #[serde(rename = "-C")]
    pub context: Option<u64>,
    /// Show line numbers (content mode; they are always shown).
    #[serde(rename = "-n")]
    #[allow(dead_code)] // Accepted as Claude Code sends it; the engine always numbers lines.
    pub line_numbers: Option<bool>,
    /// Case-insensitive search.
    #[serde(rename = "-i")]
    pub insensitive: Option<bool>,
    /// File type to search (rg --type), e.g. `js`, `py`, `rust`.
    #[serde(rename = "type")]
    pub file_type: Option<String>,
    /// Show only the first N entries (lines, files or counts), like `| head -N`.
    pub head_limit: Option<u64>,
    /// Let patterns span lines; `.` matches newlines (default false).
    pub multiline: Option<bool>,
}

/// Arguments of `Bash`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BashArgs {
    /// The command to execute.
    pub command: String,
    /// Optional timeout in milliseconds (max 600000; default 120000).
    pub timeout: Option<u64>,
    /// Clear, concise description of what this command does in 5-10 words.
    #[allow(dead_code)] // For the user's eyes in Claude Code; the command needs none.
    pub description: Option<String>,
    /// Run the command in the background; read its output with BashOutput, stop it with
    /// KillShell.
    pub run_in_background: Option<bool>,
}

/// Arguments of `BashOutput`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BashOutputArgs {
    /// The ID of the background shell to read output from.
    pub bash_id: String,
    /// Regular expression: only output lines matching it are shown (the others are dropped).
    pub filter: Option<String>,
}

/// Arguments of `KillShell`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KillShellArgs {
    /// The ID of the background shell to kill.
    pub shell_id: String,
}

/// The engine's arguments and memo, or a refusal of arguments it cannot take.
fn refused(r: Result<(Value, Value), String>) -> Shaped {
    match r {
        Ok((args, memo)) => Shaped::Call { args, memo },
        Err(msg) => Shaped::Answer(Ok(ToolResult::failure("invalid_arguments", msg))),
    }
}

/// The engine's answer, read-before-write errors in Claude Code's words.
fn same(r: Answer, _: &Value) -> Answer {
    delegated(r)
}

fn glob_call(a: GlobArgs) -> Result<(Value, Value), String> {
    let mut c = json!({"pattern": a.pattern});
    // Claude Code's models sometimes send the strings "undefined" or "null" for an omitted path.
    if let Some(p) = a
        .path
        .filter(|p| !matches!(p.as_str(), "" | "undefined" | "null"))
    {
        c["path"] = json!(p);
    }
    Ok((c, Value::Null))
}

fn grep_call(a: GrepArgs) -> Result<(Value, Value), String> {
    let mode = a.output_mode.as_deref().unwrap_or("files_with_matches");
    if !matches!(mode, "content" | "files_with_matches" | "count") {
        return Err(format!(
            "output_mode `{mode}` is not one Grep knows; use \"content\", \"files_with_matches\" or \"count\""
        ));
    }
    let mut c = json!({"pattern": a.pattern, "output_mode": mode});
    if let Some(p) = a
        .path
        .filter(|p| !matches!(p.as_str(), "" | "undefined" | "null"))
    {
        c["path"] = json!(p);
    }
    if let Some(g) = a.glob {
        c["file_pattern"] = json!(g);
    }
    if let Some(t) = a.file_type {
        c["type"] = json!(t);
    }
    // The engine has one context width: the widest asked for.
    let ctx = [a.context, a.before, a.after].into_iter().flatten().max();
    if let Some(n) = ctx.filter(|n| *n > 0) {
        if mode != "content" {
            return Err(format!(
                "-A, -B and -C apply to output_mode \"content\" only; output_mode is \"{mode}\""
            ));
        }
        c["context"] = json!(n.min(20));
    }
    if let Some(h) = a.head_limit.filter(|h| *h > 0) {
        c["head_limit"] = json!(h);
    }
    if a.insensitive == Some(true) {
        c["-i"] = json!(true);
    }
    if a.multiline == Some(true) {
        c["multiline"] = json!(true);
    }
    Ok((c, Value::Null))
}

fn bash_call(a: BashArgs) -> Result<(Value, Value), String> {
    let timeout = a.timeout.unwrap_or(DEFAULT_TIMEOUT_MS);
    if timeout == 0 || timeout > MAX_TIMEOUT_MS {
        return Err(format!(
            "timeout {timeout} is out of range; give milliseconds between 1 and {MAX_TIMEOUT_MS}"
        ));
    }
    let mut c = json!({"command": a.command});
    if a.run_in_background == Some(true) {
        c["background"] = json!(true);
        // Claude Code answers at once with the ID; the output is read with BashOutput.
        c["yield_ms"] = json!(0);
        // Only an explicit timeout limits a background command.
        if let Some(t) = a.timeout {
            c["timeout_ms"] = json!(t);
        }
    } else {
        c["timeout_ms"] = json!(timeout);
    }
    let memo = json!({"background": a.run_in_background == Some(true)});
    Ok((c, memo))
}

/// `text` without the engine's hint lines that name loopr's process tools.
fn without_engine_hints(text: &str) -> String {
    text.lines()
        .filter(|l| !l.contains("process_output") && !l.contains("process_kill"))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// A background start in Claude Code's words, with the id BashOutput and KillShell take.
fn bash_after(r: ToolResult, call: &Value) -> ToolResult {
    if call.get("background") != Some(&Value::Bool(true)) || !r.success {
        return r;
    }
    let Some(id) = r
        .data
        .as_ref()
        .and_then(|d| d.get("process_id"))
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        return r;
    };
    ToolResult {
        output: format!(
            "Command running in background with ID: {id}. Read its output with BashOutput {{\"bash_id\": \"{id}\"}}; stop it with KillShell.\n{}",
            without_engine_hints(&r.output)
        ),
        ..r
    }
}

fn bash_output_call(a: BashOutputArgs) -> Result<(Value, Value), String> {
    let c = json!({"process_id": a.bash_id});
    let mut memo = json!({});
    if let Some(f) = a.filter.filter(|f| !f.is_empty()) {
        // Checked here so a bad regex is named before any output is consumed.
        toolyard_tools::search::grep::matcher(&f).map_err(|e| format!("filter: {e}"))?;
        memo["filter"] = json!(f);
    }
    Ok((c, memo))
}

/// Keep only the lines of the output that match the filter (the status line stays).
fn bash_output_after(r: ToolResult, call: &Value) -> ToolResult {
    let r = ToolResult {
        output: without_engine_hints(&r.output),
        ..r
    };
    let Some(f) = call.get("filter").and_then(Value::as_str) else {
        return r;
    };
    let Ok(m) = toolyard_tools::search::grep::matcher(f) else {
        return r;
    };
    let mut lines = r.output.lines();
    let mut out = lines.next().unwrap_or_default().to_string();
    for l in lines {
        if m.is_match(l.as_bytes()).unwrap_or(false) {
            out.push('\n');
            out.push_str(l);
        }
    }
    ToolResult { output: out, ..r }
}

fn kill_call(a: KillShellArgs) -> Result<(Value, Value), String> {
    let c = json!({"process_id": a.shell_id});
    Ok((c.clone(), c))
}

fn kill_after(r: ToolResult, call: &Value) -> ToolResult {
    if !r.success {
        return r;
    }
    let id = call
        .get("process_id")
        .and_then(Value::as_str)
        .unwrap_or_default();
    ToolResult {
        output: format!("Successfully killed shell: {id}\n{}", r.output),
        ..r
    }
}

/// Starts the marker line a foreground `Bash` command prints last: the directory it ended in.
const CWD_MARK: &str = "\u{1e}toolyard-cwd:";
/// Ends the marker (before its newline).
const CWD_END: char = '\u{1e}';

/// The shell text `Bash` puts before a foreground command: on exit, print the directory it
/// ended in as a marker line, unless the command moved stdout off the capture pipe (as
/// `exec >log` does), where the marker would land in a file. On the command's own line, so
/// the shell's `sh: 1: ...` errors keep their line numbers.
const CWD_TRAP: &str =
    "trap '[ -p /dev/stdout ] && printf \"\\036toolyard-cwd:%s\\036\\n\" \"$(pwd -P)\"' EXIT; ";

/// Claude Code's `Bash`: run_command with Claude Code's arguments, and the working directory
/// kept per session as Claude Code keeps it (a `cd` lasts into the session's next call; shell
/// variables do not).
struct ClaudeBash {
    env: Arc<ToolEnv>,
    commands: Arc<CommandEnv>,
    /// The engine tool that starts background commands.
    run_command: Arc<dyn Tool>,
    /// Each session's working directory where it is not the root: where its last foreground
    /// command ended.
    cwds: Mutex<HashMap<String, RelPath>>,
}

#[async_trait]
impl TypedTool for ClaudeBash {
    type Args = BashArgs;

    fn info(&self) -> ToolInfo<'_> {
        let description = "Executes a bash command in the workspace with an optional timeout (ms, default 120000, \
         max 600000). The working directory persists between commands (a `cd` lasts into the \
         next call); shell state such as variables does not. run_in_background starts it and \
         returns its ID at once: read its output with BashOutput, stop it with KillShell. Use \
         Read, Edit, Glob and Grep rather than cat, sed, find and grep.";
        ToolInfo::new("Bash", description, Annotations::COMMAND).keeps_session_state()
    }

    async fn run(&self, args: BashArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let background = args.run_in_background == Some(true);
        let command = args.command.clone();
        let (call, memo) = match bash_call(args) {
            Ok(c) => c,
            Err(msg) => return Ok(ToolResult::failure("invalid_arguments", msg)),
        };
        let (dir, before) = self.start_dir(ctx);
        let mut ctx = ctx.clone();
        ctx.cwd = self.env.workspace.absolute(&dir);
        let r = if background {
            // A background command starts in the session's directory but never moves it.
            let r = delegated(self.run_command.invoke(call, &ctx).await)?;
            bash_after(r, &memo)
        } else {
            let asked = call.get(TIMEOUT_ARG).and_then(Value::as_u64);
            ctx.timeout = time_limit("Bash", asked, ctx.timeout, ctx.max_timeout)?;
            let wrapped = format!("{CWD_TRAP}{command}");
            // Still running close to when clients give up on a call: handed back as a
            // background shell BashOutput reads (the directory it ends in is not kept).
            match self.commands.run_outcome_or_answer(&ctx, &wrapped).await? {
                Ok(mut outcome) => {
                    let after = take_cwd_marker(&mut outcome)
                        .and_then(|end| self.end_dir(&ctx.session_id, &end));
                    let r = delegated(Ok(command_result(&outcome)))?;
                    match after {
                        Some(note) => with_note(r, &note, false),
                        None => r,
                    }
                }
                Err(running) => bash_after(running, &json!({"background": true})),
            }
        };
        Ok(match before {
            Some(note) => with_note(r, &note, true),
            None => r,
        })
    }
}

impl ClaudeBash {
    fn cwds(&self) -> std::sync::MutexGuard<'_, HashMap<String, RelPath>> {
        // A panic elsewhere while holding it leaves a map that is still whole.
        lock(&self.cwds)
    }

    /// The session's directory, or the root (and a note saying why) when it is gone or may
    /// no longer be entered.
    fn start_dir(&self, ctx: &ToolContext) -> (RelPath, Option<String>) {
        let Some(dir) = self.cwds().get(&ctx.session_id).cloned() else {
            return (RelPath::root(), None);
        };
        let ws = &self.env.workspace;
        let usable = ws
            .locate(dir.as_str(), ws.root())
            .and_then(|d| ws.metadata(&d))
            .is_ok_and(|m| m.is_some_and(|m| m.is_dir()));
        if usable {
            return (dir, None);
        }
        self.cwds().remove(&ctx.session_id);
        let note = format!(
            "Shell cwd was reset to {}: {dir} no longer exists.",
            ws.root().display()
        );
        (RelPath::root(), Some(note))
    }

    /// Keep `end` (the directory the command ended in, as `pwd -P` says it) as the session's
    /// directory; outside the workspace, or somewhere commands may not run, the root instead,
    /// with the note that says so.
    fn end_dir(&self, session: &str, end: &str) -> Option<String> {
        let ws = &self.env.workspace;
        let root = ws.root();
        match ws.locate(end, root) {
            Ok(rel) if rel.is_root() => {
                self.cwds().remove(session);
                None
            }
            Ok(rel) => {
                self.cwds().insert(session.to_string(), rel);
                None
            }
            Err(e) => {
                self.cwds().remove(session);
                let why = if Path::new(end).starts_with(root) {
                    format!("commands may not run in {end} ({e})")
                } else {
                    format!("{end} is outside the workspace")
                };
                Some(format!("Shell cwd was reset to {}: {why}.", root.display()))
            }
        }
    }
}

/// Take the directory marker out of the command's stdout (and out of the saved full output);
/// `None` when the shell printed none (killed, `exec`ed, or its stdout moved).
fn take_cwd_marker(o: &mut ExecOutcome) -> Option<String> {
    let at = o.stdout.rfind(CWD_MARK)?;
    let rest = &o.stdout[at + CWD_MARK.len()..];
    let end = rest.find(CWD_END)?;
    let dir = rest[..end].to_string();
    let mut cut = at + CWD_MARK.len() + end + CWD_END.len_utf8();
    if o.stdout[cut..].starts_with('\n') {
        cut += 1;
    }
    let marker = o.stdout[at..cut].to_string();
    o.stdout.replace_range(at..cut, "");
    o.stdout_bytes = o.stdout_bytes.saturating_sub(marker.len() as u64);
    if let Some(full) = &o.full_output {
        trim_tail(full, marker.as_bytes());
    }
    Some(dir)
}

/// Cut `tail` off the end of the file at `path`, if the file ends with it.
fn trim_tail(path: &Path, tail: &[u8]) {
    use std::io::{Read as _, Seek as _, SeekFrom};
    let Ok(mut f) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
    else {
        return;
    };
    let Ok(len) = f.metadata().map(|m| m.len()) else {
        return;
    };
    let n = tail.len() as u64;
    if len < n || f.seek(SeekFrom::Start(len - n)).is_err() {
        return;
    }
    let mut end = vec![0; tail.len()];
    if f.read_exact(&mut end).is_ok() && end == tail {
        let _ = f.set_len(len - n);
    }
}

/// `r` with a one-line `note` before (`first`) or after its output.
fn with_note(r: ToolResult, note: &str, first: bool) -> ToolResult {
    let output = if first {
        format!("{note}\n{}", r.output)
    } else if r.output.is_empty() || r.output.ends_with('\n') {
        format!("{}{note}\n", r.output)
    } else {
        format!("{}\n{note}\n", r.output)
    };
    ToolResult { output, ..r }
}

/// The claude-code dialect's tools over the loopr tools `loopr`.
pub fn tools(
    env: &Arc<ToolEnv>,
    commands: Arc<CommandEnv>,
    loopr: &[Arc<dyn Tool>],
) -> Vec<DialectTool> {
    const FILE_PATH: CallShape = CallShape {
        path: Some("file_path"),
        ..CallShape::NONE
    };
    let mut v: Vec<DialectTool> = vec![
        DialectTool::new(
            Engine::ReadFile,
            Arc::new(Typed(Read {
                env: env.clone(),
                read_file: engine(loopr, "read_file"),
            })),
        ),
        DialectTool::new(
            Engine::EditFile,
            Arc::new(Typed(SingleEdit(Editor {
                env: env.clone(),
                multi: false,
            }))),
        )
        .shaped(FILE_PATH),
        DialectTool::new(
            Engine::EditFile,
            Arc::new(Typed(Editor {
                env: env.clone(),
                multi: true,
            })),
        )
        .shaped(FILE_PATH),
        // Its path is notebook_path: never a small write, it always leaves the front thread.
        DialectTool::new(
            Engine::EditFile,
            Arc::new(Typed(NotebookEdit { env: env.clone() })),
        )
        .shaped(CallShape::NONE),
        DialectTool::new(
            Engine::Lsp,
            toolyard_tools::lsp::claude_code_tool(env.clone()),
        ),
    ];
    if let Some(t) = engine(loopr, "write_file") {
        v.push(
            DialectTool::new(Engine::WriteFile, Arc::new(Typed(Write { write_file: t })))
                .shaped(FILE_PATH),
        );
    }
    // Glob and Grep: the engine's, their hints in Claude Code's parameter names.
    {
        let t: Arc<dyn Tool> = Arc::new(Typed(toolyard_tools::search::GlobTool::speaking(
            env.clone(),
            toolyard_tools::search::Vocab::CLAUDE_CODE_GLOB,
        )));
        v.push(DialectTool::new(
            Engine::Glob,
            Arc::new(Typed(Adapter {
                name: "Glob",
                description: "Fast file pattern matching: finds files by glob (`**/*.js`, \
                          `src/**/*.ts`), newest first. path is the directory to search in \
                          (omit it for the working directory).",
                annotations: Annotations::READ_ONLY,
                target: t,
                shape: |a| refused(glob_call(a)),
                after: same,
            })),
        ));
    }
    {
        let t: Arc<dyn Tool> = Arc::new(Typed(toolyard_tools::search::GrepTool::speaking(
            env.clone(),
            toolyard_tools::search::Vocab::CLAUDE_CODE_GREP,
        )));
        v.push(DialectTool::new(
            Engine::Grep,
            Arc::new(Typed(Adapter {
                name: "Grep",
                description: "Searches file contents with a regular expression (ripgrep syntax). \
                          output_mode: files_with_matches (default, paths), content (matching \
                          lines, with -A/-B/-C context and -n numbers) or count. Filter files \
                          with glob (`*.js`) or type (`py`, `rust`); -i ignores case; multiline \
                          lets a match span lines; head_limit keeps the first N entries.",
                annotations: Annotations::READ_ONLY,
                target: t,
                shape: |a| refused(grep_call(a)),
                after: same,
            })),
        ));
    }
    if let Some(t) = engine(loopr, "run_command") {
        v.push(
            DialectTool::new(
                Engine::RunCommand,
                Arc::new(Typed(ClaudeBash {
                    env: env.clone(),
                    commands,
                    run_command: t,
                    cwds: Mutex::new(HashMap::new()),
                })),
            )
            .shaped(CallShape {
                command: Some("command"),
                background: &["run_in_background"],
                ..CallShape::NONE
            }),
        );
    }
    if let Some(t) = engine(loopr, "process_output") {
        let t = Arc::new(Typed(Adapter {
            name: "BashOutput",
            description: "Retrieves output from a running or completed background shell: only \
                          the output new since the last check. filter (a regex) keeps only the \
                          matching lines; the others are dropped for good.",
            annotations: Annotations::COMMAND,
            target: t,
            shape: |a| refused(bash_output_call(a)),
            after: |r, memo| delegated(r).map(|r| bash_output_after(r, memo)),
        }));
        v.push(
            DialectTool::new(Engine::ProcessOutput, t).shaped(CallShape {
                process_id: Some("bash_id"),
                ..CallShape::NONE
            }),
        );
    }
    if let Some(t) = engine(loopr, "process_kill") {
        let t = Arc::new(Typed(Adapter {
            name: "KillShell",
            description: "Kills a running background shell by its ID.",
            annotations: Annotations::COMMAND,
            target: t,
            shape: |a| refused(kill_call(a)),
            after: |r, memo| delegated(r).map(|r| kill_after(r, memo)),
        }));
        v.push(DialectTool::new(Engine::ProcessKill, t).shaped(CallShape {
            process_id: Some("shell_id"),
            ..CallShape::NONE
        }));
    }
    v
}
