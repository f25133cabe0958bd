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
mod pattern;
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
pub(crate) async fn blocking<T, F>(f: F) -> Result<T, ToolError>
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
