//! The `loom` dialect (seeds 003/004): `read_file {path, max_bytes}`, `list_files`,
//! `edit_file {path, edits}`, `bash {command, cwd, timeout}`, `web_search`, `oracle`.
//! Results are the JSON objects those seeds specify.

use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolyard_core::{Annotations, ToolContext, ToolError, ToolInfo, ToolResult, TypedTool};

use toolyard_tools::ToolEnv;
use toolyard_tools::command::CommandEnv;
use toolyard_tools::files::{apply_edit, commit_write, expect_for_write, read_media, read_tracked};

/// Seed 003's bash timeouts, in seconds.
const BASH_DEFAULT_SECS: u64 = 60;
const BASH_MAX_SECS: u64 = 300;

/// A result whose text for the model is its JSON (the seed's tools return JSON values).
fn json_result(data: impl Serialize) -> ToolResult {
    let value = serde_json::to_value(data).unwrap_or_else(|e| Value::String(e.to_string()));
    let text = serde_json::to_string_pretty(&value).unwrap_or_else(|e| e.to_string());
    ToolResult::ok(text).with_data(value)
}

/// Seed 003's `read_file` result; its output schema is derived from it.
#[derive(Debug, Serialize, JsonSchema)]
struct LoomReadData {
    path: String,
    contents: String,
    truncated: bool,
}

/// Seed 003's `edit_file` result.
#[derive(Debug, Serialize, JsonSchema)]
struct LoomEditData {
    path: String,
    edits_applied: usize,
    original_bytes: usize,
    new_bytes: usize,
}

/// Seed 003's `bash` result.
#[derive(Debug, Serialize, JsonSchema)]
struct LoomBashData {
    exit_code: Option<i32>,
    stdout: String,
    stderr: String,
    timed_out: bool,
    truncated: bool,
}

/// Arguments of loom's `read_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoomReadArgs {
    /// Path to file (absolute or relative to workspace).
    pub path: String,
    /// Maximum bytes to read (default: the catalog's output limit, 30000; seed 003's 1MB
    /// would not reach the model whole in MCP clients).
    #[schemars(range(min = 1))]
    pub max_bytes: Option<u64>,
}

/// Seed 003's `read_file`: `{path, contents, truncated}`, UTF-8 lossy.
pub struct LoomReadFile {
    env: Arc<ToolEnv>,
}

#[async_trait]
impl TypedTool for LoomReadFile {
    type Args = LoomReadArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new(
            "read_file",
            "Read file contents from the workspace. Returns {path, contents, truncated}; contents \
         are cut at max_bytes (default 30000; pass a larger max_bytes to read more). An image \
         comes back as an image; a PDF's contents are its text page by page; a notebook's, its \
         cells with their outputs. A file must be read before edit_file changes it.",
            Annotations::READ_ONLY,
        )
        .result_is_data()
        .output::<LoomReadData>()
        .returns_images()
    }

    async fn run(&self, args: LoomReadArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        // Images, PDFs and notebooks through the shared engine, in the seed's shape: what the
        // engine shows as `contents`, its image blocks kept beside it.
        // The full output of a cut command, by the path its note gave (or `output:<id>`).
        let saved = toolyard_tools::search::saved::read_all(&self.env, &args.path)?;
        if saved.is_none()
            && let Some(media) = read_media(&self.env, ctx, &args.path, None).await?
        {
            let rel = self.env.workspace.locate(&args.path, &ctx.cwd)?;
            let mut shaped = json_result(LoomReadData {
                path: self.env.workspace.absolute(&rel).display().to_string(),
                contents: media.output,
                truncated: false,
            });
            shaped.images = media.images;
            return Ok(shaped);
        }
        let (shown, content) = match saved {
            Some(content) => (args.path.clone(), content),
            None => {
                let (rel, content) = read_tracked(&self.env, ctx, &args.path).await?;
                let ws = &self.env.workspace;
                (ws.absolute(&rel).display().to_string(), content)
            }
        };
        let max = args.max_bytes.unwrap_or(ctx.max_output_bytes as u64) as usize;
        let truncated = content.len() > max;
        let mut end = content.len().min(max);
        // Do not split a UTF-8 sequence at the cut.
        while end < content.len() && end > 0 && (content[end] & 0b1100_0000) == 0b1000_0000 {
            end -= 1;
        }
        let contents = String::from_utf8_lossy(&content[..end]).into_owned();
        Ok(json_result(LoomReadData {
            path: shown,
            contents,
            truncated,
        }))
    }
}

/// One of loom's snippet edits.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoomEdit {
    /// Text to find (empty: append new_str, creating the file if needed).
    pub old_str: String,
    /// Replacement text.
    pub new_str: String,
    /// Replace all occurrences (default: false).
    #[serde(default)]
    pub replace_all: Option<bool>,
}

/// Arguments of loom's `edit_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoomEditArgs {
    /// Path to file (created if it doesn't exist).
    pub path: String,
    /// Edit operations, applied in order.
    #[schemars(length(min = 1))]
    pub edits: Vec<LoomEdit>,
}

/// Seed 003's `edit_file`: sequential snippet edits, all or nothing, one atomic write.
pub struct LoomEditFile {
    env: Arc<ToolEnv>,
}

#[async_trait]
impl TypedTool for LoomEditFile {
    type Args = LoomEditArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new(
            "edit_file",
            "Apply snippet-based edits to a file, in order: an empty old_str appends new_str \
         (creating the file if needed); otherwise old_str must occur once (or set replace_all). \
         All edits apply or none does. An existing file must be read first. Returns \
         {path, edits_applied, original_bytes, new_bytes}.",
            Annotations::MUTATING,
        )
        .result_is_data()
        .output::<LoomEditData>()
    }

    async fn run(&self, args: LoomEditArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        if args.edits.is_empty() {
            return Err(ToolError::InvalidArguments(
                "edits is empty; give at least one {old_str, new_str}".into(),
            ));
        }
        let ws = &self.env.workspace;
        let rel = ws.locate(&args.path, &ctx.cwd)?;
        let original = match ws.metadata(&rel)? {
            Some(_) => Some(ws.read(&rel)?),
            None => None,
        };
        let current = original.as_deref().map(toolyard_workspace::hash_bytes);
        let expect = expect_for_write(&self.env, ctx, &rel, current.as_deref()).await?;
        let mut content = original.clone().unwrap_or_default();
        for (i, edit) in args.edits.iter().enumerate() {
            if edit.old_str.is_empty() {
                content.extend_from_slice(edit.new_str.as_bytes());
                continue;
            }
            let (next, _) = apply_edit(
                rel.as_str(),
                &content,
                &edit.old_str,
                &edit.new_str,
                edit.replace_all.unwrap_or(false),
            )
            .map_err(|e| ToolError::InvalidArguments(format!("edits[{i}]: {e}")))?;
            content = next;
        }
        let out = commit_write(&self.env, ctx, "edit_file", &rel, &content, &expect).await?;
        Ok(json_result(LoomEditData {
            path: ws.absolute(&out.path).display().to_string(),
            edits_applied: args.edits.len(),
            original_bytes: original.map(|o| o.len()).unwrap_or(0),
            new_bytes: content.len(),
        })
        .with_files_changed(vec![out.path.to_string()]))
    }
}

/// Arguments of loom's `bash`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BashArgs {
    /// The shell command (run with `sh -c`).
    pub command: String,
    /// Working directory (relative to workspace, default: workspace root).
    pub cwd: Option<String>,
    /// Timeout in seconds (default: 60, max: 300).
    #[schemars(range(min = 1, max = 300))]
    pub timeout: Option<u64>,
}

/// Seed 003's `bash`: `{exit_code, stdout, stderr, timed_out, truncated}`.
pub struct Bash {
    commands: Arc<CommandEnv>,
}

#[async_trait]
impl TypedTool for Bash {
    type Args = BashArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new(
            "bash",
            "Execute a shell command in the workspace (sh -c). Returns {exit_code, stdout, stderr, \
         timed_out, truncated}; timeout in seconds (default 60, max 300) kills the whole \
         process tree; long output keeps its head and tail (30000 bytes in all by default) and \
         the full output is saved to a file named in stderr.",
            Annotations::COMMAND,
        )
        .result_is_data()
        .output::<LoomBashData>()
    }

    async fn run(&self, args: BashArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let secs = args
            .timeout
            .unwrap_or(BASH_DEFAULT_SECS)
            .clamp(1, BASH_MAX_SECS);
        let mut ctx = ctx.clone();
        ctx.max_timeout = ctx
            .max_timeout
            .max(std::time::Duration::from_secs(BASH_MAX_SECS));
        let o = self
            .commands
            .run_outcome_apart(&ctx, &args.command, args.cwd.as_deref(), Some(secs * 1000))
            .await?;
        // Seed 003 reports the command's outcome as data, not as a tool error. The file with the
        // whole output is named where a model reading stderr will see it.
        let mut stderr = o.stderr.clone();
        if let Some(full) = &o.full_output {
            stderr.push_str(&format!(
                "\n[output truncated; full output in {}]",
                full.display()
            ));
        }
        Ok(json_result(LoomBashData {
            exit_code: o.exit_code,
            stdout: o.stdout,
            stderr,
            timed_out: o.timed_out,
            truncated: o.truncated,
        }))
    }
}

/// The loom tools that differ from loopr's (read_file, edit_file, bash); list_files,
/// web_search and oracle are shared.
pub fn tools(env: &Arc<ToolEnv>, commands: Arc<CommandEnv>) -> Vec<super::DialectTool> {
    use super::DialectTool;
    use toolyard_core::{CallShape, Engine, Typed};
    vec![
        DialectTool::new(
            Engine::ReadFile,
            Arc::new(Typed(LoomReadFile { env: env.clone() })),
        ),
        DialectTool::new(
            Engine::EditFile,
            Arc::new(Typed(LoomEditFile { env: env.clone() })),
        ),
        DialectTool::new(Engine::RunCommand, Arc::new(Typed(Bash { commands }))).shaped(
            CallShape {
                command: Some("command"),
                ..CallShape::NONE
            },
        ),
        DialectTool::new(
            Engine::ListDirectory,
            Arc::new(Typed(toolyard_tools::search::ListFilesTool::new(
                env.clone(),
            ))),
        ),
    ]
}
