//! Search tools: `grep`, `glob`, `list_directory` (and seed 003's `list_files`).
//!
//! All of them walk the workspace with ripgrep's `ignore` crate (parallel where it pays), honour
//! `.gitignore`/`.ignore` files (even outside a git repository), never follow symlinks, and
//! always skip `.git`, `node_modules`, `__pycache__` and cargo `target` directories. Every file
//! whose *content* is read is opened through the workspace's root handle
//! (`openat2(RESOLVE_BENEATH)`), and every path reported by `glob`/`list_*` is re-checked beneath
//! the root, so a directory swapped for a symlink during a walk cannot leak what lies outside.
//!
//! The engines ([`grep::search`], [`glob::find`], [`list::tree`], [`list::list_files`]) are
//! plain functions over a [`Workspace`] so other dialects (seed 002's `search_files`, seed 003's
//! `list_files`) and the benchmark can use them without the tool wrappers.

pub mod glob;
pub mod grep;
mod ignores;
pub mod list;
mod parallel;
mod pattern;
pub mod saved;
mod walk;

use std::sync::Arc;

use toolyard_core::{Tool, ToolError, Typed};

use crate::ToolEnv;

pub use glob::{GlobArgs, GlobHit, GlobOutcome, GlobQuery, GlobTool};
pub use grep::{
    FileMatches, GrepArgs, GrepLimits, GrepLine, GrepOutcome, GrepQuery, GrepTool, MAX_LINE_CHARS,
    OutputMode,
};
pub use list::{ListDirectoryArgs, ListDirectoryTool, ListFilesArgs, ListFilesTool, TreeEntry};
pub use pattern::PathGlob;
pub use walk::HiddenSkipped;

/// A search tool's parameters as one dialect names them, for the hints its answers give: how
/// to reach the hidden files it skipped, how to narrow what overflowed. Each dialect's `grep`
/// and `glob` take one of these, so a hint never names a parameter the model's schema lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vocab {
    /// How to include hidden files that would match: `{file}` becomes one of them, `{glob}` a
    /// pattern naming its hidden directory (`.github/**`) or the file itself.
    pub hidden: &'static str,
    /// How to narrow a search whose matching lines overflowed.
    pub narrow: &'static str,
    /// How to narrow a list of files that overflowed.
    pub narrow_files: &'static str,
}

impl Vocab {
    /// loopr `grep` (and seed vocabularies built on it).
    pub const LOOPR_GREP: Vocab = Vocab {
        hidden: "pass hidden: true to include them",
        narrow: "narrow the pattern or path, use file_pattern or type, or raise head_limit",
        narrow_files: "narrow the pattern or path, or raise head_limit",
    };
    /// loopr `glob`.
    pub const LOOPR_GLOB: Vocab = Vocab {
        hidden: "pass hidden: true to include them",
        narrow: "narrow the pattern or path",
        narrow_files: "narrow the pattern or path",
    };
    /// loom-py `search_files` {pattern, path, file_pattern}.
    pub const LOOM_PY_SEARCH: Vocab = Vocab {
        hidden: "give one as path (e.g. `{file}`) to search it",
        narrow: "narrow the pattern or path, or use file_pattern",
        narrow_files: "narrow the pattern or path, or use file_pattern",
    };
    /// Claude Code `Grep` {pattern, path, glob, type, head_limit, ...}: no hidden switch.
    pub const CLAUDE_CODE_GREP: Vocab = Vocab {
        hidden: "give one as path (e.g. `{file}`), or name its hidden directory in glob (e.g. `{glob}`), to search them",
        narrow: "narrow the pattern or path, use glob or type, or raise head_limit",
        narrow_files: "narrow the pattern or path, or raise head_limit",
    };
    /// Claude Code `Glob` {pattern, path}.
    pub const CLAUDE_CODE_GLOB: Vocab = Vocab {
        hidden: "name the hidden directory in pattern (e.g. `{glob}`) to include them",
        narrow: "narrow the pattern or path",
        narrow_files: "narrow the pattern or path",
    };
    /// Gemini CLI `grep_search` / `search_file_content` {pattern, dir_path, include_pattern,
    /// total_max_matches, names_only, ...}.
    pub const GEMINI_GREP: Vocab = Vocab {
        hidden: "give one as dir_path (e.g. `{file}`), or name its hidden directory in include_pattern (e.g. `{glob}`), to search them",
        narrow: "narrow the pattern or dir_path, use include_pattern, or raise total_max_matches",
        narrow_files: "narrow the pattern or dir_path, or raise total_max_matches",
    };
    /// Gemini CLI `glob` {pattern, dir_path, ...}.
    pub const GEMINI_GLOB: Vocab = Vocab {
        hidden: "name the hidden directory in pattern (e.g. `{glob}`) to include them",
        narrow: "narrow the pattern or dir_path",
        narrow_files: "narrow the pattern or dir_path",
    };
}

/// The search tools of the `loopr` dialect: `list_directory`, `glob`, `grep`.
pub fn tools(env: Arc<ToolEnv>) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(Typed(ListDirectoryTool::new(env.clone()))),
        Arc::new(Typed(GlobTool::new(env.clone()))),
        Arc::new(Typed(GrepTool::new(env))),
    ]
}

/// Run a blocking search where it may block (see [`toolyard_core::blocking`]), so the async
/// runtime keeps serving.
pub async fn blocking<T, F>(f: F) -> Result<T, ToolError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, ToolError> + Send + 'static,
{
    toolyard_core::blocking::blocking(f)
        .await
        .map_err(|e| ToolError::Io(format!("search task failed: {e}")))?
}

/// The byte budget for a tool's model-facing output: the catalog's and the call's, whichever
/// is smaller.
pub(crate) fn output_budget(env: &ToolEnv, tool: &str, ctx_limit: usize) -> usize {
    env.max_output(tool).min(ctx_limit).max(1)
}
