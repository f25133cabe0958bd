//! Dialects: the tool names and argument shapes each seed uses, over one engine.
//!
//! `loopr` (seed 000) is the engine's own vocabulary. `loom` (seeds 003/004) and `loom-py`
//! (seed 002) are thin adapters: each of their tools parses its own arguments, calls the same
//! engine code, and shapes the result the way its seed specifies. Every dialect tool names the
//! catalog entry (its *engine* tool) whose lane and limits it runs under. A tool that only
//! renames or reshapes arguments for an engine tool is an [`Adapter`].

use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use toolyard_core::{Annotations, Tool, ToolContext, ToolError, ToolResult, TypedTool};

use crate::ToolEnv;
use crate::command::CommandEnv;

mod anthropic;
mod claude_code;
mod codex;
mod gemini;
mod loom;
mod loom_py;

pub use anthropic::{AnthropicBash, EditorVersion, TextEditor, TextEditorArgs};
pub use codex::{APPLY_PATCH_FREEFORM_DESCRIPTION, APPLY_PATCH_LARK, ApplyPatch, ApplyPatchArgs};
pub use gemini::{ReadManyFiles, Replace};
pub use loom::{Bash, LoomEditFile, LoomReadFile};
pub use loom_py::{PyEditFile, PyReadFile, SearchFiles, ShellExecute};

/// A tool vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Dialect {
    /// Seed 000's names and arguments (the default).
    #[default]
    Loopr,
    /// Seeds 003/004: read_file {path, max_bytes}, list_files, edit_file {edits}, bash, ...
    Loom,
    /// Seed 002: read_file {path, line_range}, shell_execute, search_files, list_directory, ...
    LoomPy,
    /// OpenAI Codex CLI: apply_patch {input}, exec_command, write_stdin.
    Codex,
    /// Anthropic's API tools: str_replace_based_edit_tool, str_replace_editor, bash.
    Anthropic,
    /// Gemini CLI: read_file, write_file, replace, glob, search_file_content, run_shell_command, ...
    Gemini,
    /// Claude Code's built-in tools: Read, Write, Edit, MultiEdit, Glob, Grep, Bash, ...
    ClaudeCode,
}

impl Dialect {
    /// Every dialect.
    pub const ALL: [Dialect; 7] = [
        Dialect::Loopr,
        Dialect::Loom,
        Dialect::LoomPy,
        Dialect::Codex,
        Dialect::Anthropic,
        Dialect::Gemini,
        Dialect::ClaudeCode,
    ];

    /// The dialect's name on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::Loopr => "loopr",
            Dialect::Loom => "loom",
            Dialect::LoomPy => "loom-py",
            Dialect::Codex => "codex",
            Dialect::Anthropic => "anthropic",
            Dialect::Gemini => "gemini",
            Dialect::ClaudeCode => "claude-code",
        }
    }
}

impl std::fmt::Display for Dialect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Dialect {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "loopr" => Ok(Dialect::Loopr),
            "loom" => Ok(Dialect::Loom),
            "loom-py" | "loom_py" => Ok(Dialect::LoomPy),
            "codex" => Ok(Dialect::Codex),
            "anthropic" => Ok(Dialect::Anthropic),
            "gemini" => Ok(Dialect::Gemini),
            "claude-code" | "claude_code" => Ok(Dialect::ClaudeCode),
            other => Err(format!(
                "unknown dialect `{other}`; expected loopr, loom, loom-py, codex, anthropic, gemini \
                 or claude-code"
            )),
        }
    }
}

/// Tools that write Toolyard's own state (the journal, the session's completion) and touch
/// neither the network nor anything a command could run: they run in the server process,
/// whatever the lane, because runners may not write the state directory.
pub const SERVER_SIDE: &[&str] = &[
    "undo",
    "complete_task",
    "diagnostics",
    "lsp",
    "rename_symbol",
    "outline",
];

/// The file tools: they run no program and reach files only through the workspace's path
/// confinement (`openat2(RESOLVE_BENEATH)`, protected and hidden paths), so they run in the
/// server process, on its blocking pool: no runner hop, no records round trip, never queued
/// behind a lane's commands. See docs/architecture.md.
pub const FILE_TOOLS: &[&str] = &[
    "read_file",
    "write_file",
    "edit_file",
    "list_directory",
    "glob",
    "grep",
];

/// A call's answer: a result, or an error the model reads as one.
pub(crate) type Answer = Result<ToolResult, ToolError>;

/// What an [`Adapter`]'s `shape` makes of the dialect's arguments.
pub(crate) enum Shaped {
    /// Call the engine tool with `args`; `memo` (what they cannot carry) goes to `after`.
    Call { args: Value, memo: Value },
    /// Answer without the engine (arguments it cannot take).
    Answer(Answer),
}

impl Shaped {
    /// The engine's arguments with no memo, or the error that answers the call.
    pub(crate) fn plain(r: Result<Value, ToolError>) -> Self {
        match r {
            Ok(args) => Shaped::Call {
                args,
                memo: Value::Null,
            },
            Err(e) => Shaped::Answer(Err(e)),
        }
    }
}

/// A dialect's tool that renames or reshapes its arguments for an engine tool and calls it:
/// `shape` makes the engine's arguments (and a memo of what they cannot carry), `after` makes
/// the dialect's answer of the engine's, with the memo.
pub(crate) struct Adapter<A> {
    /// The name in the dialect.
    pub name: &'static str,
    /// The description in the dialect.
    pub description: &'static str,
    /// Behaviour hints.
    pub annotations: Annotations,
    /// The engine tool it calls.
    pub target: Arc<dyn Tool>,
    /// The engine's arguments (and memo), or the answer without the engine.
    pub shape: fn(A) -> Shaped,
    /// The dialect's answer from the engine's and the memo.
    pub after: fn(Answer, &Value) -> Answer,
}

#[async_trait]
impl<A> TypedTool for Adapter<A>
where
    A: for<'de> Deserialize<'de> + JsonSchema + Send + 'static,
{
    type Args = A;

    fn name(&self) -> &str {
        self.name
    }

    fn description(&self) -> &str {
        self.description
    }

    fn annotations(&self) -> Annotations {
        self.annotations
    }

    // A dialect's read answers an image as the engine's does: it then declares no output
    // schema either (a client checks results against one).
    fn returns_images(&self) -> bool {
        self.target.returns_images()
    }

    async fn run(&self, args: A, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        match (self.shape)(args) {
            Shaped::Call { args, memo } => (self.after)(self.target.invoke(args, ctx).await, &memo),
            Shaped::Answer(answer) => answer,
        }
    }
}

/// An `after` that answers as the engine did.
pub(crate) fn as_engine(r: Answer, _: &Value) -> Answer {
    r
}

/// A tool as a dialect exposes it, with the catalog entry it runs under.
#[derive(Clone)]
pub struct DialectTool {
    /// The tool.
    pub tool: Arc<dyn Tool>,
    /// The catalog entry (loopr name) that gives its lane and limits.
    pub engine: &'static str,
}

/// The catalog entry a dialect's tool runs under; `None` for a tool with no entry (a bug: it
/// must not borrow another tool's lane and limits).
fn engine_of(dialect: Dialect, name: &str) -> Option<&'static str> {
    const ENGINES: &[&str] = &[
        "read_file",
        "write_file",
        "edit_file",
        "list_directory",
        "glob",
        "grep",
        "run_command",
        "run_command_isolated",
        "web_fetch",
        "web_search",
        "build",
        "test",
        "validate",
        "complete_task",
        "create_plan",
        "create_spec",
        "create_phase",
        "undo",
        "oracle",
        "process_output",
        "process_input",
        "process_kill",
        "process_list",
        "shell",
        "diagnostics",
        "lsp",
        "rename_symbol",
        "outline",
    ];
    let engine = match (dialect, name) {
        (Dialect::Loom, "bash") | (Dialect::LoomPy, "shell_execute") => "run_command",
        (Dialect::Loom, "list_files") => "list_directory",
        (Dialect::LoomPy, "search_files") => "grep",
        (Dialect::Codex, "apply_patch") => "edit_file",
        (Dialect::Codex, "exec_command") => "run_command",
        (Dialect::Codex, "write_stdin") => "process_input",
        (Dialect::Anthropic, "str_replace_based_edit_tool" | "str_replace_editor") => "edit_file",
        (Dialect::Anthropic, "bash") => "shell",
        (Dialect::Gemini, "replace") => "edit_file",
        (Dialect::Gemini, "search_file_content" | "grep_search") => "grep",
        (Dialect::Gemini, "run_shell_command") => "run_command",
        (Dialect::Gemini, "read_many_files") => "read_file",
        (Dialect::ClaudeCode, "Read") => "read_file",
        (Dialect::ClaudeCode, "Write") => "write_file",
        (Dialect::ClaudeCode, "Edit" | "MultiEdit" | "NotebookEdit") => "edit_file",
        (Dialect::ClaudeCode, "Glob") => "glob",
        (Dialect::ClaudeCode, "Grep") => "grep",
        (Dialect::ClaudeCode, "Bash") => "run_command",
        (Dialect::ClaudeCode, "BashOutput") => "process_output",
        (Dialect::ClaudeCode, "KillShell") => "process_kill",
        (Dialect::ClaudeCode, "LSP") => "lsp",
        (_, other) => other,
    };
    ENGINES.iter().find(|e| **e == engine).copied()
}

/// The tools of `dialect` over `env`.
pub fn tools(env: &Arc<ToolEnv>, dialect: Dialect) -> Result<Vec<DialectTool>, ToolError> {
    let commands = Arc::new(CommandEnv::new(env.clone())?);
    let mut loopr: Vec<Arc<dyn Tool>> = Vec::new();
    loopr.extend(crate::files::tools(env.clone()));
    loopr.extend(crate::search::tools(env.clone()));
    loopr.extend(crate::command::tools(commands.clone()));
    loopr.extend(crate::process::tools(commands.clone()));
    loopr.extend(crate::web::tools(env.clone()));
    loopr.extend(crate::oracle::tools(env.clone()));
    loopr.extend(crate::task::tools(env.clone()));
    loopr.extend(crate::artifacts::tools(env.clone()));
    loopr.extend(crate::lsp::tools(env.clone()));
    if let Some(local) = &env.local {
        loopr.extend(crate::undo::tools(local.clone()));
    }
    let shared = |names: &[&str]| -> Vec<Arc<dyn Tool>> {
        loopr
            .iter()
            .filter(|t| names.contains(&t.name()))
            .cloned()
            .collect()
    };
    let chosen: Vec<Arc<dyn Tool>> = match dialect {
        Dialect::Loopr => loopr.clone(),
        Dialect::Loom => {
            let mut v = loom::tools(env, commands);
            v.extend(shared(&["web_search", "oracle", "undo"]));
            v.extend(shared(crate::lsp::ENGINES));
            v
        }
        Dialect::LoomPy => {
            let mut v = loom_py::tools(env, commands);
            v.extend(shared(&["write_file", "list_directory", "undo"]));
            v.extend(shared(crate::lsp::ENGINES));
            v
        }
        Dialect::Codex => {
            let mut v = codex::tools(env, commands);
            v.extend(shared(&["undo"]));
            v.extend(shared(crate::lsp::ENGINES));
            v
        }
        Dialect::Anthropic => anthropic::tools(env, commands),
        Dialect::Gemini => {
            let mut v = gemini::tools(env, commands);
            // is_background hands back a process id; these read, list and stop it.
            v.extend(shared(&[
                "process_output",
                "process_list",
                "process_kill",
                "undo",
            ]));
            v.extend(shared(crate::lsp::ENGINES));
            v
        }
        Dialect::ClaudeCode => claude_code::tools(env, commands, &loopr),
    };
    chosen
        .into_iter()
        .map(|tool| match engine_of(dialect, tool.name()) {
            Some(engine) => Ok(DialectTool { tool, engine }),
            None => Err(ToolError::Io(format!(
                "internal: the {dialect} tool `{}` has no catalog entry",
                tool.name()
            ))),
        })
        .collect()
}
