//! Claude Code's `Read`: a file as `cat -n` shows it, from `offset`, `limit` lines; images,
//! PDFs and notebooks through read_file's media engine.

use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use toolyard_core::{Annotations, Tool, ToolContext, ToolError, ToolInfo, ToolResult, TypedTool};
use toolyard_tools::ToolEnv;
use toolyard_tools::files::read_tracked;

use super::{Fail, MAX_LINE, finish, translate};
use crate::text::{lines_of, numbered};

/// Lines `Read` shows when `limit` is not given.
const DEFAULT_LINES: usize = 2000;

/// Extensions `Read` hands to read_file's media engine (images, PDFs, notebooks).
const MEDIA: &[&str] = &["png", "jpg", "jpeg", "gif", "webp", "pdf", "ipynb"];

/// Arguments of `Read`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadArgs {
    /// The absolute path to the file to read (a path relative to the workspace root works too).
    pub file_path: String,
    /// The line number to start reading from (1-indexed). Only give it when the file is too
    /// large to read at once.
    pub offset: Option<u64>,
    /// The number of lines to read (default 2000).
    #[schemars(range(min = 1))]
    pub limit: Option<u64>,
    /// PDF only: the page range, e.g. `"1-5"`.
    pub pages: Option<String>,
}

/// Claude Code's `Read`.
pub struct Read {
    pub(super) env: Arc<ToolEnv>,
    pub(super) read_file: Option<Arc<dyn Tool>>,
}

#[async_trait]
impl TypedTool for Read {
    type Args = ReadArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new(
            "Read",
            "Reads a file from the workspace. file_path should be absolute. By default reads up to \
         2000 lines from the start; offset (line to start from) and limit (number of lines) read \
         part of a long file. Lines longer than 2000 characters are cut. Results are in `cat -n` \
         format, line numbers starting at 1. Reads images (shown visually), PDFs (pages) and \
         .ipynb notebooks. Directories cannot be read; use Bash `ls` or Glob.",
            Annotations::READ_ONLY,
        )
        .returns_images()
    }

    async fn run(&self, args: ReadArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        finish(self.exec(args, ctx).await)
    }
}

impl Read {
    async fn exec(
        &self,
        args: ReadArgs,
        ctx: &ToolContext,
    ) -> Result<ToolResult, Result<Fail, ToolError>> {
        let shown = args.file_path.clone();
        // The full output of a cut command, by the path its note gave (or `output:<id>`).
        if let Some(content) = toolyard_tools::search::saved::read_all(&self.env, &args.file_path)
            .map_err(translate)?
        {
            return cat_n(&content, &shown, &args, ctx);
        }
        let ws = &self.env.workspace;
        let rel = ws.locate(&args.file_path, &ctx.cwd).map_err(translate)?;
        match ws.metadata(&rel).map_err(translate)? {
            None => {
                return Err(Ok((
                    "file_not_found",
                    format!(
                        "File does not exist: {shown}. Check the path, or use Glob to find the file."
                    ),
                )));
            }
            Some(m) if m.is_dir() => {
                return Err(Ok((
                    "invalid_arguments",
                    format!(
                        "EISDIR: illegal operation on a directory, read '{shown}'. Read reads files only; use Glob or Bash `ls` to list a directory."
                    ),
                )));
            }
            _ => {}
        }
        let ext = rel
            .as_str()
            .rsplit_once('.')
            .map(|(_, e)| e.to_ascii_lowercase());
        if let (Some(ext), Some(read_file)) = (ext, &self.read_file)
            && MEDIA.contains(&ext.as_str())
        {
            let mut call = json!({ "path": args.file_path });
            if let Some(p) = &args.pages {
                call["pages"] = json!(p);
            }
            return read_file.invoke(call, ctx).await.map_err(Err);
        }
        let (_, content) = read_tracked(&self.env, ctx, &args.file_path)
            .await
            .map_err(translate)?;
        cat_n(&content, &shown, &args, ctx)
    }
}

/// `content` as Read shows a file (`cat -n`, from `offset`, `limit` lines), `shown` naming it.
fn cat_n(
    content: &[u8],
    shown: &str,
    args: &ReadArgs,
    ctx: &ToolContext,
) -> Result<ToolResult, Result<Fail, ToolError>> {
    if content.is_empty() {
        return Ok(ToolResult::ok(
                "<system-reminder>Warning: the file exists but the contents are empty.</system-reminder>",
            )
            .with_data(json!({"lines": 0})));
    }
    if content.contains(&0) {
        return Err(Ok((
            "binary",
            format!("{shown} is a binary file (it holds NUL bytes) and cannot be read as text."),
        )));
    }
    let text = String::from_utf8_lossy(content);
    let lines = lines_of(&text);
    let n = lines.len();
    let from = usize::try_from(args.offset.unwrap_or(1).max(1)).unwrap_or(usize::MAX);
    let limit =
        usize::try_from(args.limit.unwrap_or(DEFAULT_LINES as u64).max(1)).unwrap_or(usize::MAX);
    if from > n {
        return Ok(ToolResult::ok(format!(
                "<system-reminder>Warning: the file exists but is shorter than the provided offset ({from}). The file has {n} lines.</system-reminder>"
            ))
            .with_data(json!({"lines": n})));
    }
    let to = from.saturating_add(limit - 1).min(n);
    let mut body = numbered(&lines[from - 1..to], from, Some(MAX_LINE));
    if body.len() > ctx.max_output_bytes {
        let mut cut = ctx.max_output_bytes;
        while !body.is_char_boundary(cut) {
            cut -= 1;
        }
        body.truncate(cut);
        body.push_str("\n[output cut to fit; read on with offset and limit]");
    } else if to < n {
        body.push_str(&format!(
            "\n[lines {from}-{to} of {n} shown; read on with offset {}]",
            to + 1
        ));
    }
    Ok(ToolResult::ok(body).with_data(json!({"lines": n, "from": from, "to": to})))
}
