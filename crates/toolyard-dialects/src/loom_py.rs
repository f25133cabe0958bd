//! The `loom-py` dialect (seed 002): `read_file {path, line_range}`, `write_file`,
//! `edit_file {path, old_str, new_str}`, `shell_execute {command}`, `search_files`,
//! `list_directory`.

use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use toolyard_core::{Annotations, ToolContext, ToolError, ToolInfo, ToolResult, Typed, TypedTool};

use toolyard_tools::ToolEnv;
use toolyard_tools::command::CommandEnv;
use toolyard_tools::files::{EditFile, EditFileArgs, read_media, read_tracked};
use toolyard_tools::search::{GrepArgs, GrepTool};

/// Seed 002 truncates human-readable output to 10KB.
const OUTPUT_LIMIT: usize = 10 * 1024;

/// Arguments of seed 002's `read_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PyReadArgs {
    /// Path, relative to the workspace.
    pub path: String,
    /// Optional [start, end] line range, 1-indexed and inclusive.
    pub line_range: Option<[usize; 2]>,
}

/// Seed 002's `read_file`: the file's text, or a range of its lines.
pub struct PyReadFile {
    env: Arc<ToolEnv>,
}

#[async_trait]
impl TypedTool for PyReadFile {
    type Args = PyReadArgs;

    fn info(&self) -> ToolInfo<'_> {
        let description = "Read file contents as text, optionally only lines [start, end] (1-indexed, inclusive). \
         Output is cut at 10KB with a note on how to read on. An image comes back as an image, \
         a PDF as its text page by page, a notebook as its cells with their outputs.";
        ToolInfo::new("read_file", description, Annotations::READ_ONLY).returns_images()
    }

    async fn run(&self, args: PyReadArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        // Images, PDFs and notebooks through the shared engine, in the seed's result shape.
        // The full output of a cut command, by the path its note gave (or `output:<id>`).
        let saved = toolyard_tools::search::saved::read_all(&self.env, &args.path)?;
        if saved.is_none()
            && let Some(media) = read_media(&self.env, ctx, &args.path, None).await?
        {
            if args.line_range.is_some() {
                return Err(ToolError::InvalidArguments(format!(
                    "line_range applies to text files, and {} is not one; read it without line_range",
                    args.path
                )));
            }
            // The engine's text and data ({path, kind, ...}) are already seed 002's shape.
            return Ok(media);
        }
        let (rel, content) = match saved {
            Some(content) => (args.path.clone(), content),
            None => {
                let (rel, content) = read_tracked(&self.env, ctx, &args.path).await?;
                (rel.as_str().to_string(), content)
            }
        };
        let text = String::from_utf8_lossy(&content);
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        let (start, end) = match args.line_range {
            None => (1, lines.len()),
            Some([s, e]) if s >= 1 && e >= s => (s, e.min(lines.len())),
            Some([s, e]) => {
                return Err(ToolError::InvalidArguments(format!(
                    "line_range [{s}, {e}] is not a range: give [start, end] with 1 <= start <= end"
                )));
            }
        };
        if start > lines.len().max(1) {
            return Err(ToolError::InvalidArguments(format!(
                "line_range starts at {start}, past the end of {rel} ({} lines)",
                lines.len()
            )));
        }
        let body: String = lines
            .get(start.saturating_sub(1)..end)
            .unwrap_or(&[])
            .concat();
        let mut output = body.clone();
        if output.len() > OUTPUT_LIMIT {
            let mut cut = OUTPUT_LIMIT;
            while !output.is_char_boundary(cut) {
                cut -= 1;
            }
            let shown_lines = output[..cut].matches('\n').count();
            output.truncate(cut);
            output.push_str(&format!(
                "\n[output cut at 10KB; continue with line_range [{}, {end}]]\n",
                start + shown_lines
            ));
        }
        Ok(ToolResult::ok(output).with_data(json!({
            "path": rel,
            "start_line": start,
            "end_line": end,
            "total_lines": lines.len(),
        })))
    }
}

/// Arguments of seed 002's `edit_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PyEditArgs {
    /// Path, relative to the workspace.
    pub path: String,
    /// The exact text to replace; it must appear exactly once.
    pub old_str: String,
    /// The replacement.
    pub new_str: String,
}

/// Seed 002's `edit_file`: a unique find-and-replace, answered with context around the change.
pub struct PyEditFile {
    inner: EditFile,
}

#[async_trait]
impl TypedTool for PyEditFile {
    type Args = PyEditArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new(
            "edit_file",
            "Find and replace a unique string in a file (old_str must appear exactly once); the \
         change is recorded for undo. Returns the changed lines with context.",
            Annotations::MUTATING,
        )
    }

    async fn run(&self, args: PyEditArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        self.inner
            .run(
                EditFileArgs {
                    path: args.path,
                    old_string: args.old_str,
                    new_string: args.new_str,
                    replace_all: false,
                },
                ctx,
            )
            .await
    }
}

/// Arguments of `shell_execute`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShellArgs {
    /// The shell command, run in the workspace directory.
    pub command: String,
}

/// Seed 002's `shell_execute`: stdout and stderr, cut to 10KB, dangerous commands blocked.
pub struct ShellExecute {
    commands: Arc<CommandEnv>,
}

#[async_trait]
impl TypedTool for ShellExecute {
    type Args = ShellArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new(
            "shell_execute",
            "Run a shell command in the workspace directory. Captures stdout and stderr (cut to \
         10KB, head and tail kept); dangerous commands are blocked.",
            Annotations::COMMAND,
        )
    }

    async fn run(&self, args: ShellArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let mut ctx = ctx.clone();
        ctx.max_output_bytes = ctx.max_output_bytes.min(OUTPUT_LIMIT);
        self.commands.run(&ctx, &args.command, None, None).await
    }
}

/// Arguments of `search_files`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchFilesArgs {
    /// Regular expression.
    pub pattern: String,
    /// Subdirectory to search (default: the workspace).
    pub path: Option<String>,
    /// Glob filter on file names, like `*.py`.
    pub file_pattern: Option<String>,
}

/// Seed 002's `search_files`: grep across the workspace.
pub struct SearchFiles {
    inner: GrepTool,
}

#[async_trait]
impl TypedTool for SearchFiles {
    type Args = SearchFilesArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new(
            "search_files",
            "Search file contents with a regular expression across the workspace (optionally under \
         path, in files matching file_pattern); returns matching lines with paths and line numbers.",
            Annotations::READ_ONLY,
        )
    }

    async fn run(&self, args: SearchFilesArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        self.inner
            .run(
                GrepArgs {
                    pattern: args.pattern,
                    path: args.path,
                    file_pattern: args.file_pattern,
                    context: None,
                    hidden: false,
                    ..GrepArgs::default()
                },
                ctx,
            )
            .await
    }
}

/// The loom-py tools that differ from loopr's; write_file and list_directory are shared.
pub fn tools(env: &Arc<ToolEnv>, commands: Arc<CommandEnv>) -> Vec<super::DialectTool> {
    use super::DialectTool;
    use toolyard_core::{CallShape, Engine};
    vec![
        DialectTool::new(
            Engine::ReadFile,
            Arc::new(Typed(PyReadFile { env: env.clone() })),
        ),
        DialectTool::new(
            Engine::EditFile,
            Arc::new(Typed(PyEditFile {
                inner: EditFile::new(env.clone()),
            })),
        ),
        DialectTool::new(
            Engine::RunCommand,
            Arc::new(Typed(ShellExecute { commands })),
        )
        .shaped(CallShape {
            command: Some("command"),
            ..CallShape::NONE
        }),
        DialectTool::new(
            Engine::Grep,
            Arc::new(Typed(SearchFiles {
                inner: GrepTool::speaking(
                    env.clone(),
                    toolyard_tools::search::Vocab::LOOM_PY_SEARCH,
                ),
            })),
        ),
    ]
}
