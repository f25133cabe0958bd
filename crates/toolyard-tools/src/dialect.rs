//! Dialects: the tool names and argument shapes each seed uses, over one engine.
//!
//! `loopr` (seed 000) is the engine's own vocabulary. `loom` (seeds 003/004) and `loom-py`
//! (seed 002) are thin adapters: each of their tools parses its own arguments, calls the same
//! engine code, and shapes the result the way its seed specifies. Every dialect tool names the
//! catalog entry (its *engine* tool) whose lane and limits it runs under.

use std::sync::Arc;

use toolyard_core::{Tool, ToolError};

use crate::ToolEnv;

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
}

impl Dialect {
    /// Every dialect.
    pub const ALL: [Dialect; 3] = [Dialect::Loopr, Dialect::Loom, Dialect::LoomPy];

    /// The dialect's name on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::Loopr => "loopr",
            Dialect::Loom => "loom",
            Dialect::LoomPy => "loom-py",
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
            other => Err(format!(
                "unknown dialect `{other}`; expected loopr, loom or loom-py"
            )),
        }
    }
}

/// Tools that write Toolyard's own state (the journal, the session's completion) and touch
/// neither the network nor anything a command could run: they run in the server process,
/// whatever the lane, because runners may not write the state directory.
pub const SERVER_SIDE: &[&str] = &["undo", "complete_task"];

/// A tool as a dialect exposes it, with the catalog entry it runs under.
#[derive(Clone)]
pub struct DialectTool {
    /// The tool.
    pub tool: Arc<dyn Tool>,
    /// The catalog entry (loopr name) that gives its lane and limits.
    pub engine: &'static str,
}

fn same(tools: Vec<Arc<dyn Tool>>) -> Vec<DialectTool> {
    tools
        .into_iter()
        .map(|tool| {
            let engine = engine_name(tool.name());
            DialectTool { tool, engine }
        })
        .collect()
}

/// The loopr catalog entry for a loopr tool name (names are static for the catalog lookups).
fn engine_name(name: &str) -> &'static str {
    const NAMES: &[&str] = &[
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
    ];
    NAMES
        .iter()
        .find(|n| **n == name)
        .copied()
        .unwrap_or("run_command")
}

/// The tools of `dialect` over `env`.
pub fn tools(env: &Arc<ToolEnv>, dialect: Dialect) -> Result<Vec<DialectTool>, ToolError> {
    Ok(match dialect {
        Dialect::Loopr => {
            let mut all = Vec::new();
            all.extend(crate::files::tools(env.clone()));
            all.extend(crate::search::tools(env.clone()));
            all.extend(crate::command::tools(env.clone())?);
            all.extend(crate::web::tools(env.clone()));
            all.extend(crate::oracle::tools(env.clone()));
            all.extend(crate::task::tools(env.clone()));
            all.extend(crate::artifacts::tools(env.clone()));
            if let Some(local) = &env.local {
                all.extend(crate::undo::tools(local.clone()));
            }
            same(all)
        }
        Dialect::Loom | Dialect::LoomPy => Vec::new(),
    })
}
