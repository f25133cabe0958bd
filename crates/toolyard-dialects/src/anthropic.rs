//! The `anthropic` dialect: Anthropic's text editor (`str_replace_based_edit_tool`,
//! `text_editor_20250728`, and the older `str_replace_editor`, `text_editor_20250124`, with
//! `undo_edit`) and `bash` (`bash_20250124`), over Toolyard's engine.
//!
//! Texts follow Anthropic's documentation and reference implementation (see
//! docs/dialects notes, section 2): the documented `Error: …` strings for failed replacements,
//! `cat -n` views, the snippet after an edit. Unlike the reference implementation, tabs are
//! never expanded, every path goes through the workspace's confinement, an existing file must
//! have been viewed before it is edited, and every write is journaled (`undo_edit` reverts the
//! session's last change to the path through the journal).

use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use toolyard_core::{
    Annotations, Tool, ToolContext, ToolError, ToolInfo, ToolResult, Typed, TypedTool,
};
use toolyard_workspace::{Expect, RelPath, hash_bytes};

use super::DialectTool;
use crate::text::{lines_of, numbered};
use toolyard_core::Engine;
use toolyard_tools::ToolEnv;
use toolyard_tools::command::CommandEnv;
use toolyard_tools::files::{
    apply_edit, commit_write, expect_for_write, lines_before, read_media, read_tracked,
};

/// Lines of context around an edit in the snippet shown after it (the reference's
/// `SNIPPET_LINES`).
const SNIPPET_LINES: usize = 4;

/// Most entries a directory `view` lists.
const TREE_LIMIT: usize = 1000;

/// The note after a clipped `view`.
const CLIPPED: &str = "<response clipped><NOTE>To save on context only part of this file has been shown to you. You should retry this tool with `view_range` after you have searched inside the file with `grep -n` in order to find the line numbers of what you are looking for.</NOTE>";

/// Which version of Anthropic's text editor a tool presents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EditorVersion {
    /// `text_editor_20250728`: `str_replace_based_edit_tool`, no `undo_edit`.
    V20250728,
    /// `text_editor_20250124`: `str_replace_editor`, with `undo_edit`.
    V20250124,
}

impl EditorVersion {
    /// The tool's name.
    pub fn name(self) -> &'static str {
        match self {
            EditorVersion::V20250728 => "str_replace_based_edit_tool",
            EditorVersion::V20250124 => "str_replace_editor",
        }
    }

    /// The Anthropic API's built-in tool type.
    pub fn api_type(self) -> &'static str {
        match self {
            EditorVersion::V20250728 => "text_editor_20250728",
            EditorVersion::V20250124 => "text_editor_20250124",
        }
    }

    fn commands(self) -> &'static [&'static str] {
        match self {
            EditorVersion::V20250728 => &["view", "create", "str_replace", "insert"],
            EditorVersion::V20250124 => &["view", "create", "str_replace", "insert", "undo_edit"],
        }
    }
}

/// Arguments of the text editor (both versions).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TextEditorArgs {
    /// The command to run: `view`, `create`, `str_replace` or `insert` (`str_replace_editor`
    /// also has `undo_edit`).
    pub command: String,
    /// Absolute path to file or directory inside the workspace, e.g. `/repo/file.py` or
    /// `/repo`; a path relative to the workspace root works too.
    pub path: String,
    /// `create`: the content of the new file (an existing file is never overwritten).
    pub file_text: Option<String>,
    /// `view` of a file: `[start, end]`, 1-indexed lines, end inclusive; `[start, -1]` shows
    /// from start to the end of the file.
    pub view_range: Option<Vec<i64>>,
    /// `str_replace`: the exact text to replace (whitespace and indentation included); it must
    /// occur exactly once.
    pub old_str: Option<String>,
    /// `str_replace`: the new text (omitted: old_str is deleted). `insert`: the text to insert
    /// (same as insert_text).
    pub new_str: Option<String>,
    /// `insert`: the line after which to insert the text (0 = the top of the file).
    pub insert_line: Option<i64>,
    /// `insert`: the text to insert.
    pub insert_text: Option<String>,
    /// `view`: the most characters to show (default: the whole file, up to the output limit).
    #[schemars(range(min = 1))]
    pub max_characters: Option<u64>,
}

/// A failure in the dialect's own words (`kind` for programs, `msg` for the model), or an
/// engine error passed on as it is.
enum Fail {
    Said(&'static str, String),
    Raw(ToolError),
}

fn said(kind: &'static str, msg: impl Into<String>) -> Fail {
    Fail::Said(kind, msg.into())
}

/// An engine error for the path the model named, in this dialect's words (its tools are
/// `view`, not read_file).
fn translate(e: ToolError, shown: &str, write: bool) -> Fail {
    match e {
        ToolError::FileNotFound(_) => said(
            "file_not_found",
            format!(
                "File not found. The path {shown} does not exist. Please provide a valid path."
            ),
        ),
        ToolError::NotRead { .. } => said(
            "not_read",
            format!(
                "{shown} has not been viewed in this session; run the `view` command on it first, then retry."
            ),
        ),
        ToolError::StaleRead { .. } => said(
            "stale_read",
            format!(
                "{shown} changed on disk since this session last viewed it; run the `view` command again to see its current content, then retry."
            ),
        ),
        e @ (ToolError::PathOutsideWorkspace { .. } | ToolError::Blocked { .. }) if write => said(
            e.kind(),
            format!("Permission denied. Cannot write to file. {e}"),
        ),
        ToolError::Cancelled => Fail::Raw(ToolError::Cancelled),
        e => said(e.kind(), e.to_string()),
    }
}

/// The editor: one type for both versions.
pub struct TextEditor {
    env: Arc<ToolEnv>,
    version: EditorVersion,
}

impl TextEditor {
    /// The editor of `version` over `env`.
    pub fn new(env: Arc<ToolEnv>, version: EditorVersion) -> Self {
        Self { env, version }
    }
}

#[async_trait]
impl TypedTool for TextEditor {
    type Args = TextEditorArgs;

    fn info(&self) -> ToolInfo<'_> {
        let description = match self.version {
            EditorVersion::V20250728 => {
                "Anthropic's text editor (text_editor_20250728) for viewing, creating and editing files. \
                 view: a file as `cat -n` (view_range [start, end], -1 = to the end; max_characters), or a \
                 directory two levels deep. create: a new file from file_text (never overwrites). \
                 str_replace: replace old_str, which must occur exactly once, by new_str. insert: the \
                 text (insert_text or new_str) after line insert_line (0 = top). Tabs are kept as they \
                 are. A file must be viewed before it is edited; every edit can be undone."
            }
            EditorVersion::V20250124 => {
                "Anthropic's text editor (text_editor_20250124) for viewing, creating and editing files. \
                 view: a file as `cat -n` (view_range [start, end], -1 = to the end), or a directory two \
                 levels deep. create: a new file from file_text (never overwrites). str_replace: replace \
                 old_str, which must occur exactly once, by new_str. insert: new_str after line \
                 insert_line (0 = top). undo_edit: revert this session's last edit of the file. Tabs are \
                 kept as they are. A file must be viewed before it is edited."
            }
        };
        ToolInfo::new(self.version.name(), description, Annotations::MUTATING)
            .anthropic_type(self.version.api_type())
            // `view` of an image answers with the image, as every dialect's read does.
            .returns_images()
    }

    async fn run(&self, args: TextEditorArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        match self.exec(args, ctx).await {
            Ok(r) => Ok(r),
            Err(Fail::Said(kind, msg)) => Ok(ToolResult::failure(kind, msg)),
            Err(Fail::Raw(e)) => Err(e),
        }
    }
}

impl TextEditor {
    async fn exec(&self, args: TextEditorArgs, ctx: &ToolContext) -> Result<ToolResult, Fail> {
        let commands = self.version.commands();
        if !commands.contains(&args.command.as_str()) {
            return Err(said(
                "invalid_arguments",
                format!(
                    "Unrecognized command {}. The allowed commands for the {} tool are: {}",
                    args.command,
                    self.version.name(),
                    commands.join(", ")
                ),
            ));
        }
        let shown = args.path.clone();
        let write = args.command != "view";
        // The full output of a cut command, by the path its note gave (or `output:<id>`).
        if !write
            && let Some(content) = toolyard_tools::search::saved::read_all(&self.env, &args.path)
                .map_err(|e| translate(e, &shown, false))?
        {
            return view_text(&args, &shown, &content, ctx);
        }
        let ws = &self.env.workspace;
        let rel = ws
            .locate(&args.path, &ctx.cwd)
            .map_err(|e| translate(e, &shown, write))?;
        let meta = ws.metadata(&rel).map_err(|e| translate(e, &shown, write))?;
        match (&meta, args.command.as_str()) {
            (Some(_), "create") => {
                return Err(said(
                    "conflict",
                    format!(
                        "File already exists at: {shown}. Cannot overwrite files using command `create`."
                    ),
                ));
            }
            (None, "create") => {}
            // undo_edit of a file its last edit created (and so removed) still has history.
            (None, "undo_edit") => {}
            (None, _) => {
                return Err(said(
                    "file_not_found",
                    format!(
                        "File not found. The path {shown} does not exist. Please provide a valid path."
                    ),
                ));
            }
            (Some(m), cmd) if m.is_dir() && cmd != "view" => {
                return Err(said(
                    "invalid_arguments",
                    format!(
                        "The path {shown} is a directory and only the `view` command can be used on directories"
                    ),
                ));
            }
            _ => {}
        }
        let is_dir = meta.as_ref().is_some_and(|m| m.is_dir());
        match args.command.as_str() {
            "view" if is_dir => self.view_dir(&args, &rel, &shown, ctx).await,
            "view" => self.view_file(&args, &shown, ctx).await,
            "create" => self.create(&args, &rel, &shown, ctx).await,
            "str_replace" => self.str_replace(&args, &rel, &shown, ctx).await,
            "insert" => self.insert(&args, &rel, &shown, ctx).await,
            _ => self.undo_edit(&rel, &shown, ctx).await,
        }
    }

    async fn view_dir(
        &self,
        args: &TextEditorArgs,
        rel: &RelPath,
        shown: &str,
        ctx: &ToolContext,
    ) -> Result<ToolResult, Fail> {
        if args.view_range.is_some() {
            return Err(said(
                "invalid_arguments",
                "The `view_range` parameter is not allowed when `path` points to a directory.",
            ));
        }
        let env = self.env.clone();
        let root = rel.clone();
        let tree = toolyard_tools::search::blocking(move || {
            toolyard_tools::search::list::tree(&env.workspace, &root, TREE_LIMIT)
        })
        .await
        .map_err(|e| translate(e, shown, false))?;
        // `find PATH -maxdepth 2` style: the directory, then each entry under it.
        let base = shown.trim_end_matches('/');
        let base = if base.is_empty() { "/" } else { base };
        let prefix = if rel.is_root() {
            String::new()
        } else {
            format!("{}/", rel.as_str())
        };
        let mut text = format!(
            "Here's the files and directories up to 2 levels deep in {shown}, excluding hidden items:\n{base}\n"
        );
        // Hidden items are left out, as the reference's `-not -path '*/.*'` does.
        let visible = |under: &str| !under.split('/').any(|c| c.starts_with('.'));
        for e in &tree.shown {
            let under = e.path.strip_prefix(&prefix).unwrap_or(&e.path);
            if !visible(under) {
                continue;
            }
            let sep = if base.ends_with('/') { "" } else { "/" };
            text.push_str(&format!("{base}{sep}{under}\n"));
        }
        let omitted: usize = tree.omitted.values().sum();
        if omitted > 0 || tree.walk_capped {
            text.push_str(&format!(
                "[{} of {}{} entries shown; view a subdirectory to see more]\n",
                tree.shown.len(),
                if tree.walk_capped { "at least " } else { "" },
                tree.total
            ));
        }
        text.push('\n');
        Ok(
            ToolResult::ok(clip(&text, ctx.max_output_bytes)).with_data(json!({
                "path": tree.root,
                "total": tree.total,
                "shown": tree.shown.len(),
            })),
        )
    }

    async fn view_file(
        &self,
        args: &TextEditorArgs,
        shown: &str,
        ctx: &ToolContext,
    ) -> Result<ToolResult, Fail> {
        // An image comes back as an image block, and a PDF as its text, as every dialect's
        // read gives them; a notebook is JSON text, shown as it is so it can be edited.
        if !args.path.to_ascii_lowercase().ends_with(".ipynb")
            && let Some(media) = read_media(&self.env, ctx, &args.path, None)
                .await
                .map_err(|e| translate(e, shown, false))?
        {
            if args.view_range.is_some() {
                return Err(said(
                    "invalid_arguments",
                    format!(
                        "The `view_range` parameter applies to text files; {shown} is not one."
                    ),
                ));
            }
            return Ok(media);
        }
        // A view counts as the read that allows a later edit.
        let (_, content) = read_tracked(&self.env, ctx, &args.path)
            .await
            .map_err(|e| translate(e, shown, false))?;
        view_text(args, shown, &content, ctx)
    }

    async fn create(
        &self,
        args: &TextEditorArgs,
        rel: &RelPath,
        shown: &str,
        ctx: &ToolContext,
    ) -> Result<ToolResult, Fail> {
        let Some(text) = &args.file_text else {
            return Err(said(
                "invalid_arguments",
                "Parameter `file_text` is required for command: create",
            ));
        };
        // Expect::Missing: a file that appears meanwhile is not overwritten either.
        let out = commit_write(
            &self.env,
            ctx,
            self.version.name(),
            rel,
            text.as_bytes(),
            &Expect::Missing,
        )
        .await
        .map_err(|e| match e {
            ToolError::Conflict(_) => said(
                "conflict",
                format!(
                    "File already exists at: {shown}. Cannot overwrite files using command `create`."
                ),
            ),
            e => translate(e, shown, true),
        })?;
        Ok(
            ToolResult::ok(format!("File created successfully at: {shown}"))
                .with_data(json!({"path": out.path.as_str(), "bytes": text.len()}))
                .with_files_changed(vec![out.path.to_string()]),
        )
    }

    /// Read `rel` for an edit: its content and the expectation a write must meet (the session
    /// must have viewed its current content).
    async fn for_edit(
        &self,
        rel: &RelPath,
        shown: &str,
        ctx: &ToolContext,
    ) -> Result<(Vec<u8>, Expect), Fail> {
        let content = self
            .env
            .workspace
            .read(rel)
            .map_err(|e| translate(e, shown, true))?;
        let current = hash_bytes(&content);
        let expect = expect_for_write(&self.env, ctx, rel, Some(&current))
            .await
            .map_err(|e| translate(e, shown, true))?;
        Ok((content, expect))
    }

    async fn str_replace(
        &self,
        args: &TextEditorArgs,
        rel: &RelPath,
        shown: &str,
        ctx: &ToolContext,
    ) -> Result<ToolResult, Fail> {
        let Some(old) = &args.old_str else {
            return Err(said(
                "invalid_arguments",
                "Parameter `old_str` is required for command: str_replace",
            ));
        };
        let new = args.new_str.as_deref().unwrap_or("");
        let (content, expect) = self.for_edit(rel, shown, ctx).await?;
        // Every occurrence, so that more than one can be counted and named.
        let (next, reps) = apply_edit(shown, &content, old, new, true).map_err(|e| match e {
            ToolError::NotFound(msg) => {
                let detail = msg
                    .split_once(". ")
                    .map(|(_, rest)| rest.replace("read_file", "the `view` command"))
                    .unwrap_or_default();
                said(
                    "not_found",
                    format!(
                        "No match found for replacement. Please check your text and try again.{}{detail}",
                        if detail.is_empty() { "" } else { " " }
                    ),
                )
            }
            ToolError::InvalidArguments(msg) => said(
                "invalid_arguments",
                msg.replace("old_string", "old_str")
                    .replace("new_string", "new_str")
                    .replace("use write_file", "use the `create` command"),
            ),
            e => translate(e, shown, true),
        })?;
        if reps.len() > 1 {
            // Lines in the original: each earlier replacement shifted later ones by the
            // difference in line count.
            let lines: Vec<String> = lines_before(&reps, old, new)
                .iter()
                .take(20)
                .map(usize::to_string)
                .collect();
            return Err(said(
                "conflict",
                format!(
                    "Found {} matches for replacement text. Please provide more context to make a unique match. The matches start at lines {}.",
                    reps.len(),
                    lines.join(", ")
                ),
            ));
        }
        let out = commit_write(&self.env, ctx, self.version.name(), rel, &next, &expect)
            .await
            .map_err(|e| translate(e, shown, true))?;
        let at = reps.first().map_or(1, |r| r.line) - 1;
        let text = String::from_utf8_lossy(&next);
        let lines = lines_of(&text);
        let start = at.saturating_sub(SNIPPET_LINES);
        let end = (at + SNIPPET_LINES + new.matches('\n').count() + 1).min(lines.len());
        let snippet = numbered(&lines[start.min(end)..end], start + 1, None);
        Ok(ToolResult::ok(format!(
            "The file {shown} has been edited. Here's the result of running `cat -n` on a snippet of {shown}:\n{snippet}\nReview the changes and make sure they are as expected. Edit the file again if necessary."
        ))
        .with_data(json!({"path": out.path.as_str(), "line": at + 1}))
        .with_files_changed(vec![out.path.to_string()]))
    }

    async fn insert(
        &self,
        args: &TextEditorArgs,
        rel: &RelPath,
        shown: &str,
        ctx: &ToolContext,
    ) -> Result<ToolResult, Fail> {
        let Some(line) = args.insert_line else {
            return Err(said(
                "invalid_arguments",
                "Parameter `insert_line` is required for command: insert",
            ));
        };
        let Some(new) = args.insert_text.as_deref().or(args.new_str.as_deref()) else {
            return Err(said(
                "invalid_arguments",
                "Parameter `insert_text` is required for command: insert (`new_str` is accepted too)",
            ));
        };
        let (content, expect) = self.for_edit(rel, shown, ctx).await?;
        let text = as_text(&content, shown)?;
        let n = lines_of(&text).len();
        let at = match usize::try_from(line) {
            Ok(at) if at <= n => at,
            _ => {
                return Err(said(
                    "invalid_arguments",
                    format!(
                        "Invalid `insert_line` parameter: {line}. It should be within the range of lines of the file: [0, {n}]"
                    ),
                ));
            }
        };
        let next = insert_at(&content, at, new);
        let out = commit_write(&self.env, ctx, self.version.name(), rel, &next, &expect)
            .await
            .map_err(|e| translate(e, shown, true))?;
        let inserted = lines_of(new).len().max(1);
        let after = String::from_utf8_lossy(&next);
        let lines = lines_of(&after);
        let start = at.saturating_sub(SNIPPET_LINES);
        let end = (at + inserted + SNIPPET_LINES).min(lines.len());
        let snippet = numbered(&lines[start.min(end)..end], start + 1, None);
        Ok(ToolResult::ok(format!(
            "The file {shown} has been edited. Here's the result of running `cat -n` on a snippet of the edited file:\n{snippet}\nReview the changes and make sure they are as expected (correct indentation, no duplicate lines, etc). Edit the file again if necessary."
        ))
        .with_data(json!({"path": out.path.as_str(), "inserted_after": at}))
        .with_files_changed(vec![out.path.to_string()]))
    }

    /// Revert this session's last change to `rel` that is not undone, through the journal
    /// (the server's: a runner asks it, and the server restores the file on this runner).
    async fn undo_edit(
        &self,
        rel: &RelPath,
        shown: &str,
        ctx: &ToolContext,
    ) -> Result<ToolResult, Fail> {
        let undone = match self
            .env
            .records
            .undo_last_of_path(&ctx.session_id, &ctx.call_id, rel)
            .await
        {
            Ok(undone) => undone,
            Err(ToolError::NotFound(_)) => {
                return Err(said(
                    "not_found",
                    format!("No edit history found for {shown}."),
                ));
            }
            Err(e) => return Err(translate(e, shown, true)),
        };
        let Some(out) = undone.first() else {
            return Err(said(
                "not_found",
                format!("No edit history found for {shown}."),
            ));
        };
        let others: Vec<&str> = undone[1..].iter().map(|o| o.path.as_str()).collect();
        let also = if out.already {
            // Its content had changed back since (a formatter): nothing to write.
            " The file already had its content from before that edit, so nothing was written."
                .to_string()
        } else if others.is_empty() {
            String::new()
        } else {
            format!(
                " The same call had also changed {}; those changes were undone with it.",
                others.join(", ")
            )
        };
        let text = if out.removed {
            format!(
                "Last edit to {shown} undone successfully. That edit had created the file, so it was removed.{also}"
            )
        } else {
            let content = self
                .env
                .workspace
                .read(&RelPath::from_normalized(&out.path))
                .map_err(|e| translate(e, shown, false))?;
            let text = String::from_utf8_lossy(&content);
            let body = numbered(&lines_of(&text), 1, None);
            let (body, _) = clip_chars(&body, ctx.max_output_bytes);
            format!(
                "Last edit to {shown} undone successfully.{also} Here's the result of running `cat -n` on {shown}:\n{body}\n"
            )
        };
        Ok(ToolResult::ok(text)
            .with_data(json!({"path": out.path, "undone": out.undone.0, "removed": out.removed}))
            .with_files_changed(undone.iter().map(|o| o.path.clone()).collect()))
    }
}

/// `content` as `view` shows a text file (`cat -n`, `view_range`, `max_characters`).
fn view_text(
    args: &TextEditorArgs,
    shown: &str,
    content: &[u8],
    ctx: &ToolContext,
) -> Result<ToolResult, Fail> {
    let text = as_text(content, shown)?;
    let lines = lines_of(&text);
    let n = lines.len();
    let (from, to) = match &args.view_range {
        None => (1, n),
        Some(r) => view_window(r, n)?,
    };
    let body = numbered(&lines[from.saturating_sub(1)..to.min(n)], from, None);
    let limit = args
        .max_characters
        .map_or(ctx.max_output_bytes, |m| {
            usize::try_from(m).unwrap_or(usize::MAX)
        })
        .min(ctx.max_output_bytes)
        .max(1);
    let (body, clipped) = clip_chars(&body, limit);
    let mut out = format!("Here's the result of running `cat -n` on {shown}:\n{body}\n");
    if clipped {
        out.push_str(CLIPPED);
        out.push('\n');
    }
    Ok(ToolResult::ok(out).with_data(json!({
        "lines": n,
        "from": from,
        "to": to,
        "clipped": clipped,
    })))
}

/// The file as text, or the reference's read error for a binary one.
fn as_text<'a>(content: &'a [u8], shown: &str) -> Result<std::borrow::Cow<'a, str>, Fail> {
    if content.contains(&0) {
        return Err(said(
            "binary",
            format!(
                "Ran into a binary file while trying to read {shown}: it holds NUL bytes and cannot be shown as text."
            ),
        ));
    }
    Ok(String::from_utf8_lossy(content))
}

/// The 1-indexed inclusive line window `range` asks for in a file of `n` lines, or the
/// reference implementation's error.
fn view_window(range: &[i64], n: usize) -> Result<(usize, usize), Fail> {
    let invalid = |msg: String| said("invalid_arguments", msg);
    let [a, b] = range else {
        return Err(invalid(
            "Invalid `view_range`. It should be a list of two integers.".into(),
        ));
    };
    let (a, b) = (*a, *b);
    let r = format!("[{a}, {b}]");
    let n_i = n as i64;
    if a < 1 || a > n_i {
        return Err(invalid(format!(
            "Invalid `view_range`: {r}. Its first element `{a}` should be within the range of lines of the file: [1, {n}]"
        )));
    }
    if b > n_i {
        return Err(invalid(format!(
            "Invalid `view_range`: {r}. Its second element `{b}` should be smaller than the number of lines in the file: `{n}`"
        )));
    }
    if b != -1 && b < a {
        return Err(invalid(format!(
            "Invalid `view_range`: {r}. Its second element `{b}` should be larger or equal than its first `{a}`"
        )));
    }
    // a is in [1, n] and b is -1 or in [a, n], so both fit.
    let from = a as usize;
    let to = if b == -1 { n } else { b as usize };
    Ok((from, to))
}

/// `content` with `text` inserted as whole lines after line `at` (0 = the top), in the file's
/// line ending. A file without a final newline keeps having none.
fn insert_at(content: &[u8], at: usize, text: &str) -> Vec<u8> {
    let crlf = memchr::memmem::find(content, b"\r\n").is_some();
    let text = if crlf {
        text.replace("\r\n", "\n").replace('\n', "\r\n")
    } else {
        text.to_string()
    };
    let eol = if crlf { "\r\n" } else { "\n" };
    // The byte offset where line `at + 1` starts.
    let offset = if at == 0 {
        0
    } else {
        memchr::memchr_iter(b'\n', content)
            .nth(at - 1)
            .map_or(content.len(), |p| p + 1)
    };
    let mut out = Vec::with_capacity(content.len() + text.len() + 2);
    out.extend_from_slice(&content[..offset]);
    if offset == content.len() && !content.is_empty() && !content.ends_with(b"\n") {
        // After an unterminated last line: end it, and leave the new last line unterminated
        // as the old one was (unless the text brings its own newline).
        out.extend_from_slice(eol.as_bytes());
        out.extend_from_slice(text.as_bytes());
    } else {
        out.extend_from_slice(text.as_bytes());
        if !text.ends_with('\n') {
            out.extend_from_slice(eol.as_bytes());
        }
    }
    out.extend_from_slice(&content[offset..]);
    out
}

/// `text` cut to at most `limit` characters, on a char boundary; whether it was cut.
fn clip_chars(text: &str, limit: usize) -> (String, bool) {
    match text.char_indices().nth(limit) {
        Some((at, _)) => (text[..at].to_string(), true),
        None => (text.to_string(), false),
    }
}

/// A listing cut to `limit` characters with the clipped note.
fn clip(text: &str, limit: usize) -> String {
    match clip_chars(text, limit) {
        (t, true) => format!("{t}\n<response clipped>\n"),
        (t, false) => t,
    }
}

/// Arguments of `bash`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BashArgs {
    /// The bash command to run. Required unless the tool is being restarted.
    pub command: Option<String>,
    /// Specifying true will restart this tool. Otherwise, leave this unspecified.
    pub restart: Option<bool>,
}

/// Anthropic's `bash` (`bash_20250124`): one persistent shell per session, the `shell`
/// tool's engine.
pub struct AnthropicBash {
    shell: Arc<dyn Tool>,
}

#[async_trait]
impl TypedTool for AnthropicBash {
    type Args = BashArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new(
            "bash",
            "Run commands in a bash shell (bash_20250124). The session is persistent: the working \
         directory, environment variables and files persist between calls; restart: true starts \
         a fresh shell (everything it ran is killed). stderr is merged into the output; a \
         command past its time limit is interrupted and the shell stays usable. stdin is \
         /dev/null, so interactive programs cannot be answered.",
            Annotations::COMMAND,
        )
        .anthropic_type("bash_20250124")
    }

    async fn run(&self, args: BashArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let restart = args.restart.unwrap_or(false);
        let command = args.command.unwrap_or_default();
        if command.trim().is_empty() && !restart {
            return Ok(ToolResult::failure(
                "invalid_arguments",
                "no command provided. Give `command`, or `restart: true` to restart the shell.",
            ));
        }
        if command.trim().is_empty() {
            let r = self.shell.invoke(json!({"restart": true}), ctx).await?;
            if !r.success {
                return Ok(r);
            }
            return Ok(ToolResult {
                output: "tool has been restarted.".into(),
                ..r
            });
        }
        let mut call = json!({ "command": command });
        if restart {
            call["restart"] = json!(true);
        }
        self.shell.invoke(call, ctx).await
    }
}

/// The anthropic dialect's tools: both editors and `bash`.
pub fn tools(env: &Arc<ToolEnv>, commands: Arc<CommandEnv>) -> Vec<DialectTool> {
    let mut v: Vec<DialectTool> = vec![
        DialectTool::new(
            Engine::EditFile,
            Arc::new(Typed(TextEditor::new(
                env.clone(),
                EditorVersion::V20250728,
            ))),
        ),
        DialectTool::new(
            Engine::EditFile,
            Arc::new(Typed(TextEditor::new(
                env.clone(),
                EditorVersion::V20250124,
            ))),
        ),
    ];
    if let Some(shell) = toolyard_tools::process::tools(commands)
        .into_iter()
        .find(|t| t.name() == "shell")
    {
        v.push(DialectTool::new(
            Engine::Shell,
            Arc::new(Typed(AnthropicBash { shell })),
        ));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_keeps_line_endings_and_a_missing_final_newline() {
        assert_eq!(insert_at(b"a\nb\n", 0, "x"), b"x\na\nb\n");
        assert_eq!(insert_at(b"a\nb\n", 2, "x"), b"a\nb\nx\n");
        assert_eq!(insert_at(b"a\nb", 2, "x"), b"a\nb\nx");
        assert_eq!(insert_at(b"a\r\nb\r\n", 1, "x\ny"), b"a\r\nx\r\ny\r\nb\r\n");
        assert_eq!(insert_at(b"", 0, "x"), b"x\n");
    }
}
