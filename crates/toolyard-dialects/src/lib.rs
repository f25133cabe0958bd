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
use toolyard_core::{
    Annotations, CallShape, CustomTool, Engine, Tool, ToolContext, ToolError, ToolInfo, ToolResult,
    TypedTool,
};

use toolyard_tools::ToolEnv;
use toolyard_tools::command::CommandEnv;

mod anthropic;
mod claude_code;
mod codex;
mod gemini;
mod loom;
mod loom_py;
mod text;

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

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo {
            // A dialect's read answers an image as the engine's does: it then declares no
            // output schema either (a client checks results against one).
            returns_images: self.target.returns_images(),
            ..ToolInfo::new(self.name, self.description, self.annotations)
        }
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

/// A tool as a dialect exposes it, with the engine it runs under and the shape of its
/// arguments, both declared beside the tool.
#[derive(Clone)]
pub struct DialectTool {
    /// The tool.
    pub tool: Arc<dyn Tool>,
    /// The engine: its catalog entry (lane, limits) and its facts.
    pub engine: Engine,
    /// Which of its arguments carry the command line, the path, the process id.
    pub shape: CallShape,
    /// A catalog command tool's declaration (its argv is its command line).
    custom: Option<Arc<CustomTool>>,
}

impl DialectTool {
    /// `tool` under `engine`, its arguments shaped as the engine's own.
    pub fn new(engine: Engine, tool: Arc<dyn Tool>) -> Self {
        Self {
            tool,
            engine,
            shape: engine.shape(),
            custom: None,
        }
    }

    /// The catalog's command tool `spec`, run through `commands`.
    pub fn custom(spec: &CustomTool, commands: Arc<CommandEnv>) -> Self {
        let tool = Arc::new(toolyard_tools::custom::CustomCommand::new(
            spec.clone(),
            commands,
        ));
        Self {
            custom: Some(Arc::new(spec.clone())),
            ..Self::new(Engine::Custom, tool)
        }
    }

    /// The command line a call with `args` runs, for the command policy: the argument its
    /// shape names, or a catalog command tool's argv, shell-quoted.
    pub fn command_line<'a>(
        &self,
        args: &'a Value,
    ) -> Result<Option<std::borrow::Cow<'a, str>>, ToolError> {
        if let Some(custom) = &self.custom {
            return custom
                .command_line(args)
                .map(|l| Some(std::borrow::Cow::Owned(l)))
                .map_err(ToolError::InvalidArguments);
        }
        Ok(self.shape.command_of(args).map(std::borrow::Cow::Borrowed))
    }

    /// The same tool, whose arguments are shaped as `shape` says.
    pub fn shaped(mut self, shape: CallShape) -> Self {
        self.shape = shape;
        self
    }

    /// An engine tool of the loopr vocabulary: its name is its engine's.
    fn engine_tool(tool: Arc<dyn Tool>) -> Result<Self, ToolError> {
        match Engine::builtin(tool.name()) {
            Some(engine) => Ok(Self::new(engine, tool)),
            None => Err(ToolError::Io(format!(
                "internal: the engine tool `{}` names no engine (toolyard_core::Engine)",
                tool.name()
            ))),
        }
    }

    /// The name of its catalog entry: its engine's, or, for a tool of the catalog's own or
    /// an embedder's, its own.
    pub fn catalog_name(&self) -> &str {
        if self.engine.is_builtin() {
            self.engine.name()
        } else {
            self.tool.name()
        }
    }
}

/// The tools of `dialect` over `env`.
pub fn tools(env: &Arc<ToolEnv>, dialect: Dialect) -> Result<Vec<DialectTool>, ToolError> {
    let commands = Arc::new(CommandEnv::new(env.clone())?);
    let mut loopr: Vec<Arc<dyn Tool>> = Vec::new();
    loopr.extend(toolyard_tools::files::tools(env.clone()));
    loopr.extend(toolyard_tools::search::tools(env.clone()));
    loopr.extend(toolyard_tools::command::tools(commands.clone()));
    loopr.extend(toolyard_tools::process::tools(commands.clone()));
    loopr.extend(toolyard_tools::web::tools(env.clone()));
    loopr.extend(toolyard_tools::oracle::tools(env.clone()));
    loopr.extend(toolyard_tools::task::tools(env.clone()));
    loopr.extend(toolyard_tools::artifacts::tools(env.clone()));
    loopr.extend(toolyard_tools::lsp::tools(env.clone()));
    if let Some(local) = &env.local {
        loopr.extend(toolyard_tools::undo::tools(local.clone()));
    }
    let loopr: Vec<DialectTool> = loopr
        .into_iter()
        .map(DialectTool::engine_tool)
        .collect::<Result<_, _>>()?;
    let shared = |names: &[&str]| -> Vec<DialectTool> {
        loopr
            .iter()
            .filter(|t| names.contains(&t.tool.name()))
            .cloned()
            .collect()
    };
    let mut chosen: Vec<DialectTool> = match dialect {
        Dialect::Loopr => loopr.clone(),
        Dialect::Loom => {
            let mut v = loom::tools(env, commands.clone());
            v.extend(shared(&["web_search", "oracle", "undo"]));
            v.extend(shared(toolyard_tools::lsp::ENGINES));
            v
        }
        Dialect::LoomPy => {
            let mut v = loom_py::tools(env, commands.clone());
            v.extend(shared(&["write_file", "list_directory", "undo"]));
            v.extend(shared(toolyard_tools::lsp::ENGINES));
            v
        }
        Dialect::Codex => {
            let mut v = codex::tools(env, commands.clone());
            v.extend(shared(&["undo"]));
            v.extend(shared(toolyard_tools::lsp::ENGINES));
            v
        }
        Dialect::Anthropic => anthropic::tools(env, commands.clone()),
        Dialect::Gemini => {
            let mut v = gemini::tools(env, commands.clone());
            // is_background hands back a process id; these read, list and stop it.
            v.extend(shared(&[
                "process_output",
                "process_list",
                "process_kill",
                "undo",
            ]));
            v.extend(shared(toolyard_tools::lsp::ENGINES));
            v
        }
        Dialect::ClaudeCode => {
            let engines: Vec<Arc<dyn Tool>> = loopr.iter().map(|t| t.tool.clone()).collect();
            claude_code::tools(env, commands.clone(), &engines)
        }
    };
    // The catalog's own command tools, the same in every dialect. One named like a tool of
    // this dialect is left out here (a runner builds every dialect); a dispatcher serving
    // this dialect refuses the catalog instead (see `custom_clash`).
    for custom in env.catalog.custom_tools().values() {
        if chosen.iter().all(|t| t.tool.name() != custom.name) {
            chosen.push(DialectTool::custom(custom, commands.clone()));
        }
    }
    Ok(chosen)
}

/// The error for a catalog command tool named like one of `served` (a dialect's own tools).
pub fn custom_clash(
    catalog: &toolyard_core::Catalog,
    served: &[DialectTool],
    dialect: Dialect,
) -> Result<(), ToolError> {
    for name in catalog.custom_tools().keys() {
        if served
            .iter()
            .any(|t| t.engine != Engine::Custom && t.tool.name() == name)
        {
            return Err(ToolError::InvalidArguments(format!(
                "the catalog's [tools.{name}] has the name of a {dialect} tool; rename it"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolyard_core::{Catalog, Outlives};

    fn env() -> (tempfile::TempDir, Arc<ToolEnv>) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let env = ToolEnv::open_with_state(
            tmp.path(),
            Catalog::builtin(),
            Some(&tmp.path().join("state")),
        )
        .expect("env");
        (tmp, Arc::new(env))
    }

    /// The first of `names` the tool's schema takes: what the hand-kept lists sniffed for.
    fn first_taken(schema: &Value, names: &[&'static str]) -> Option<&'static str> {
        names
            .iter()
            .copied()
            .find(|n| schema["properties"].get(*n).is_some())
    }

    #[test]
    fn every_engine_has_a_catalog_entry_and_an_engine_tool() {
        let (_tmp, env) = env();
        let catalog = Catalog::builtin();
        let loopr = tools(&env, Dialect::Loopr).expect("loopr tools");
        for engine in Engine::BUILTIN {
            assert!(
                catalog.spec(engine).is_some(),
                "{engine} has no catalog entry"
            );
            assert!(
                loopr
                    .iter()
                    .any(|t| t.engine == engine && t.tool.name() == engine.name()),
                "{engine} has no engine tool"
            );
        }
        assert_eq!(catalog.tools().len(), Engine::BUILTIN.len());
    }

    /// An engine tool's `openWorldHint` is its engine's fact (not its name's).
    #[test]
    fn engine_tools_are_open_world_as_their_engines() {
        let (_tmp, env) = env();
        for t in tools(&env, Dialect::Loopr).expect("loopr tools") {
            if t.engine.is_builtin() {
                assert_eq!(
                    t.tool.annotations().open_world,
                    t.engine.open_world(),
                    "{}",
                    t.engine
                );
            }
        }
    }

    #[test]
    fn every_dialect_tool_has_an_engine_with_an_entry() {
        let (_tmp, env) = env();
        let catalog = Catalog::builtin();
        for dialect in Dialect::ALL {
            let served = tools(&env, dialect).expect("tools");
            assert!(!served.is_empty(), "{dialect}");
            for t in &served {
                assert!(t.engine.is_builtin(), "{dialect} {}", t.tool.name());
                assert!(
                    catalog.tool(t.catalog_name()).is_some(),
                    "{dialect} {}: no catalog entry `{}`",
                    t.tool.name(),
                    t.catalog_name()
                );
            }
        }
    }

    /// Each tool's declared shape names arguments its schema takes, and every argument the
    /// layers look for by its engine is declared (so no call is routed differently than the
    /// lists of names the code sniffed before did).
    #[test]
    fn shapes_match_the_schemas() {
        let (_tmp, env) = env();
        for dialect in Dialect::ALL {
            for t in tools(&env, dialect).expect("tools") {
                let schema = t.tool.input_schema();
                let who = format!("{dialect} {}", t.tool.name());
                for name in t.shape.names() {
                    assert!(
                        schema["properties"].get(name).is_some(),
                        "{who}: its shape names `{name}`, which it does not take"
                    );
                }
                if t.engine.runs_commands() {
                    assert_eq!(
                        t.shape.command,
                        first_taken(&schema, &["command", "cmd"]),
                        "{who}"
                    );
                } else {
                    // The policy layer checks what a shape declares: only commands.
                    assert_eq!(t.shape.command, None, "{who}");
                }
                if t.engine.bound() == toolyard_core::Bound::SmallWrite {
                    assert_eq!(
                        t.shape.path,
                        first_taken(&schema, &["path", "file_path"]),
                        "{who}"
                    );
                }
                if t.engine.is_process_tool() {
                    assert_eq!(
                        t.shape.process_id,
                        first_taken(
                            &schema,
                            &["process_id", "bash_id", "shell_id", "session_id"]
                        ),
                        "{who}"
                    );
                }
                if t.engine.outlives_call() == Outlives::WhenAsked {
                    let props = &schema["properties"];
                    let taken = |names: &[&'static str]| -> Vec<&'static str> {
                        names
                            .iter()
                            .copied()
                            .filter(|n| props.get(*n).is_some())
                            .collect()
                    };
                    let bg = ["background", "run_in_background", "is_background", "tty"];
                    assert_eq!(t.shape.background.to_vec(), taken(&bg), "{who}");
                    assert_eq!(
                        t.shape.yields.to_vec(),
                        taken(&["yield_ms", "yield_time_ms"]),
                        "{who}"
                    );
                    assert_eq!(
                        t.shape.yields_by_default,
                        props.get("yield_time_ms").is_some(),
                        "{who}"
                    );
                }
            }
        }
    }
}
