//! The `gemini` dialect: Gemini CLI's tools (`read_file`, `write_file`, `replace`, `glob`,
//! `search_file_content` and its newer name `grep_search`, `list_directory`,
//! `run_shell_command`, `read_many_files`) over Toolyard's engine.
//!
//! Every tool accepts both the parameter names Gemini models were trained on in 2025
//! (`absolute_path`, `path`, `directory`, `expected_replacements`) and the later ones
//! (`file_path`, `dir_path`, `allow_multiple`, `start_line`/`end_line`). Each one delegates to
//! the loopr tool it is named after in the catalog, so paths go through the workspace's
//! confinement, writes need a prior read and are journaled. `replace` speaks Gemini's error
//! texts.

use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use toolyard_core::{
    Annotations, Tool, ToolContext, ToolError, ToolInfo, ToolResult, Typed, TypedTool,
};
use toolyard_workspace::{Expect, hash_bytes};

use super::DialectTool;
use super::{Adapter, Shaped, as_engine};
use toolyard_core::{CallShape, Engine};
use toolyard_tools::ToolEnv;
use toolyard_tools::command::CommandEnv;
use toolyard_tools::files::{
    apply_edit, commit_write, expect_for_write, lines_before, read_tracked,
};
use toolyard_tools::search::{GlobQuery, PathGlob};

/// The first of the names a model may have used for one argument, or an error naming them.
fn either(names: &[&str], values: &[&Option<String>]) -> Result<String, ToolError> {
    values
        .iter()
        .find_map(|v| v.as_ref().cloned())
        .ok_or_else(|| {
            ToolError::InvalidArguments(format!(
                "missing `{}`: give the path (absolute inside the workspace, or relative to it){}",
                names[0],
                if names.len() > 1 {
                    format!("; `{}` is accepted too", names[1..].join("`, `"))
                } else {
                    String::new()
                }
            ))
        })
}

/// Arguments of `read_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadArgs {
    /// The file to read: absolute inside the workspace, or relative to it.
    pub file_path: Option<String>,
    /// Older name of `file_path`.
    pub absolute_path: Option<String>,
    /// The 0-based line to start reading from (older form; use with `limit`).
    pub offset: Option<usize>,
    /// Most lines to read.
    #[schemars(range(min = 1))]
    pub limit: Option<usize>,
    /// The first line to read, 1-based.
    #[schemars(range(min = 1))]
    pub start_line: Option<usize>,
    /// The last line to read, 1-based, inclusive.
    #[schemars(range(min = 1))]
    pub end_line: Option<usize>,
}

fn shape_read(a: ReadArgs) -> Result<Value, ToolError> {
    let path = either(
        &["file_path", "absolute_path"],
        &[&a.file_path, &a.absolute_path],
    )?;
    // Gemini's `offset` is 0-based; loopr's is 1-based.
    let first = a.start_line.or(a.offset.map(|o| o + 1));
    let limit = match (a.end_line, first) {
        (Some(end), first) => {
            let from = first.unwrap_or(1);
            if end < from {
                return Err(ToolError::InvalidArguments(format!(
                    "end_line {end} is before start_line {from}: give end_line >= start_line"
                )));
            }
            Some(end - from + 1)
        }
        (None, _) => a.limit,
    };
    let mut call = json!({ "path": path });
    if let Some(f) = first {
        call["offset"] = json!(f);
    }
    if let Some(l) = limit {
        call["limit"] = json!(l);
    }
    Ok(call)
}

/// Arguments of `write_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteArgs {
    /// The file to write: absolute inside the workspace, or relative to it.
    pub file_path: Option<String>,
    /// Older name of `file_path`.
    pub absolute_path: Option<String>,
    /// The full content of the file; do not use placeholders like `// ... rest of code`.
    pub content: String,
}

fn shape_write(a: WriteArgs) -> Result<Value, ToolError> {
    let path = either(
        &["file_path", "absolute_path"],
        &[&a.file_path, &a.absolute_path],
    )?;
    Ok(json!({ "path": path, "content": a.content }))
}

/// Arguments of `glob`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GlobArgs {
    /// Glob pattern, e.g. `**/*.py` or `docs/*.md`.
    pub pattern: String,
    /// Directory to search in (default: the workspace root).
    pub dir_path: Option<String>,
    /// Older name of `dir_path`.
    pub path: Option<String>,
    /// Whether the match is case-sensitive (default false).
    pub case_sensitive: Option<bool>,
    /// Whether files .gitignore ignores are left out (default true).
    pub respect_git_ignore: Option<bool>,
    /// Accepted for compatibility; .gitignore and .ignore files are always respected.
    #[allow(dead_code)] // accepted so a model's call is not refused; nothing to do with it
    pub respect_gemini_ignore: Option<bool>,
}

/// Gemini's `glob`: the engine's glob with Gemini's switches (case-insensitive and .gitignore
/// respected unless told otherwise).
struct Glob {
    env: Arc<ToolEnv>,
}

#[async_trait]
impl TypedTool for Glob {
    type Args = GlobArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new(
            "glob",
            "Finds files matching a glob pattern (e.g. `src/**/*.ts`) under dir_path (or the older \
         path), newest first. Matching is case-insensitive unless case_sensitive is true; files \
         .gitignore ignores are left out unless respect_git_ignore is false.",
            Annotations::READ_ONLY,
        )
    }

    async fn run(&self, a: GlobArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let args = toolyard_tools::search::glob::GlobArgs {
            pattern: a.pattern,
            path: a.dir_path.or(a.path),
            hidden: false,
        };
        toolyard_tools::search::glob::glob_result(
            &self.env,
            ctx,
            args,
            !a.case_sensitive.unwrap_or(false),
            !a.respect_git_ignore.unwrap_or(true),
            &toolyard_tools::search::Vocab::GEMINI_GLOB,
        )
        .await
    }
}

/// Arguments of `search_file_content` / `grep_search`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    /// Regular expression to search for in file contents.
    pub pattern: String,
    /// Directory or file to search (default: the workspace root).
    pub dir_path: Option<String>,
    /// Older name of `dir_path`.
    pub path: Option<String>,
    /// Only search files matching this glob, e.g. `*.js` or `src/**/*.{ts,tsx}`.
    pub include: Option<String>,
    /// Newer name of `include`.
    pub include_pattern: Option<String>,
    /// Case-sensitive search (default false).
    pub case_sensitive: Option<bool>,
    /// Lines of context around each match.
    pub context: Option<usize>,
    /// List only the paths of matching files.
    pub names_only: Option<bool>,
    /// Most matching lines shown (default 100).
    #[schemars(range(min = 1))]
    pub total_max_matches: Option<usize>,
}

fn shape_search(a: SearchArgs) -> Result<Value, ToolError> {
    // The engine uses smart case; an inline flag makes a lowercase pattern case-sensitive.
    let pattern = if a.case_sensitive.unwrap_or(false) {
        format!("(?-i){}", a.pattern)
    } else {
        a.pattern
    };
    let mut call = json!({ "pattern": pattern });
    if let Some(p) = a.dir_path.or(a.path) {
        call["path"] = json!(p);
    }
    if let Some(g) = a.include_pattern.or(a.include) {
        call["file_pattern"] = json!(g);
    }
    // Gemini searches case-insensitively unless told otherwise.
    if !a.case_sensitive.unwrap_or(false) {
        call["case_insensitive"] = json!(true);
    }
    if let Some(c) = a.context {
        call["context"] = json!(c);
    }
    if a.names_only.unwrap_or(false) {
        call["output_mode"] = json!("files_with_matches");
    }
    call["head_limit"] = json!(a.total_max_matches.unwrap_or(100));
    Ok(call)
}

/// Arguments of `run_shell_command`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShellArgs {
    /// Exact bash command to execute.
    pub command: String,
    /// A short description of the command, for the user.
    #[allow(dead_code)] // accepted so a model's call is not refused; nothing to do with it
    pub description: Option<String>,
    /// Directory to run in, inside the workspace (default: the root).
    pub dir_path: Option<String>,
    /// Older name of `dir_path`.
    pub directory: Option<String>,
    /// Start it in the background (servers, watchers) and return at once; do not use `&`.
    pub is_background: Option<bool>,
}

fn shape_shell(a: ShellArgs) -> Result<Value, ToolError> {
    let mut call = json!({ "command": a.command });
    if let Some(d) = a.dir_path.or(a.directory) {
        call["cwd"] = json!(d);
    }
    if a.is_background.unwrap_or(false) {
        call["background"] = json!(true);
    }
    Ok(call)
}

/// Arguments of `replace`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplaceArgs {
    /// The file to modify: absolute inside the workspace, or relative to it.
    pub file_path: String,
    /// What the change is for (accepted; not needed here).
    pub instruction: Option<String>,
    /// The exact literal text to replace, with its whitespace and indentation and enough
    /// context to be unique. Empty: create a new file with `new_string`.
    pub old_string: String,
    /// The text to put in its place.
    pub new_string: String,
    /// How many occurrences must be replaced (default 1); the edit is refused when the file
    /// holds a different number.
    #[schemars(range(min = 1))]
    pub expected_replacements: Option<usize>,
    /// Replace every occurrence (at least one) instead of requiring exactly one.
    pub allow_multiple: Option<bool>,
}

/// Gemini's `replace`.
pub struct Replace {
    env: Arc<ToolEnv>,
}

#[async_trait]
impl TypedTool for Replace {
    type Args = ReplaceArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new(
            "replace",
            "Replaces text within a file. By default replaces exactly one occurrence; set \
         expected_replacements to the number of occurrences to replace them all (the edit is \
         refused when the count differs), or allow_multiple to replace every occurrence. \
         old_string must be the exact literal text (whitespace and indentation included); small \
         differences in line endings, trailing whitespace and indentation are forgiven when \
         exactly one place matches. An empty old_string creates a new file. Read the file \
         with read_file first; the change is journaled and can be undone.",
            Annotations::MUTATING,
        )
    }

    async fn run(&self, a: ReplaceArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let shown = a.file_path.clone();
        let ws = &self.env.workspace;
        let rel = ws.locate(&a.file_path, &ctx.cwd)?;
        let exists = ws.metadata(&rel)?.is_some();
        if a.old_string.is_empty() {
            if exists {
                return Ok(ToolResult::failure(
                    "conflict",
                    format!(
                        "File already exists, cannot create: {shown}. Give a non-empty old_string to edit it, or use write_file to overwrite it."
                    ),
                ));
            }
            let out = commit_write(
                &self.env,
                ctx,
                "replace",
                &rel,
                a.new_string.as_bytes(),
                &Expect::Missing,
            )
            .await?;
            return Ok(
                ToolResult::ok(format!("Created new file: {shown} with provided content."))
                    .with_data(json!({"path": out.path.as_str(), "created": true}))
                    .with_files_changed(vec![out.path.to_string()]),
            );
        }
        if !exists {
            return Ok(ToolResult::failure(
                "file_not_found",
                format!(
                    "File not found: {shown}. Check the path with glob or list_directory; to create a new file, use an empty old_string."
                ),
            ));
        }
        if a.old_string == a.new_string {
            return Ok(ToolResult::failure(
                "invalid_arguments",
                format!(
                    "No changes to apply. The old_string and new_string are identical in file: {shown}"
                ),
            ));
        }
        let content = ws.read(&rel)?;
        let current = hash_bytes(&content);
        let expect = expect_for_write(&self.env, ctx, &rel, Some(&current)).await?;
        let (next, reps) = match apply_edit(&shown, &content, &a.old_string, &a.new_string, true) {
            Ok(r) => r,
            Err(ToolError::NotFound(msg)) => {
                // Keep the engine's nearest-candidate detail after Gemini's sentence.
                let detail = msg.split_once(". ").map(|(_, r)| r).unwrap_or_default();
                return Ok(ToolResult::failure(
                    "not_found",
                    format!(
                        "Failed to edit, 0 occurrences found for old_string in {shown}. Ensure you're not escaping content incorrectly and check whitespace, indentation, and context. Use read_file tool to verify.{}{detail}",
                        if detail.is_empty() { "" } else { " " }
                    ),
                ));
            }
            Err(e) => return Err(e),
        };
        let found = reps.len();
        let allow_multiple = a.allow_multiple.unwrap_or(false);
        let expected = a.expected_replacements.unwrap_or(1);
        if !allow_multiple && found != expected {
            let at = lines_before(&reps, &a.old_string, &a.new_string)
                .iter()
                .take(20)
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ");
            let text = if expected == 1 {
                format!(
                    "Failed to edit, Expected 1 occurrence but found {found} for old_string in file: {shown}. If you intended to replace multiple occurrences, set 'allow_multiple' to true (or expected_replacements to {found}). To change one, add surrounding lines to old_string to make it unique: the occurrences start at lines {at}."
                )
            } else {
                format!(
                    "Failed to edit, Expected {expected} occurrences but found {found} for old_string in file: {shown}. Give expected_replacements: {found} to replace all of them, or add context to old_string to pick the ones you mean."
                )
            };
            return Ok(ToolResult::failure("conflict", text));
        }
        let out = commit_write(&self.env, ctx, "replace", &rel, &next, &expect).await?;
        let forgiven: Vec<&str> = reps.iter().filter_map(|r| r.forgiven).collect();
        let mut text = format!(
            "Successfully modified file: {shown} ({found} replacement{}).",
            if found == 1 { "" } else { "s" }
        );
        if let Some(f) = forgiven.first() {
            text.push_str(&format!(" Note: old_string did not match exactly; {f}."));
        }
        let lines: Vec<usize> = reps.iter().map(|r| r.line).collect();
        Ok(ToolResult::ok(text)
            .with_data(json!({"path": out.path.as_str(), "replacements": found, "lines": lines}))
            .with_files_changed(vec![out.path.to_string()]))
    }
}

/// Arguments of `list_directory`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {
    /// The directory to list (default: the workspace root).
    pub dir_path: Option<String>,
    /// Older name of `dir_path`.
    pub path: Option<String>,
    /// Glob patterns of entry names to leave out, e.g. `["*.log", "build"]`.
    pub ignore: Option<Vec<String>>,
    /// Accepted for compatibility; .gitignore is always respected.
    #[allow(dead_code)] // accepted so a model's call is not refused; nothing to do with it
    pub file_filtering_options: Option<Value>,
}

/// Gemini's `list_directory`: the directory's entries, directories first.
pub struct ListDirectory {
    env: Arc<ToolEnv>,
}

#[async_trait]
impl TypedTool for ListDirectory {
    type Args = ListArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new(
            "list_directory",
            "Lists the names of files and subdirectories directly within a directory (dir_path, \
         default the workspace root), directories first and marked [DIR]. ignore: glob patterns \
         of names to leave out. .git, node_modules and ignored files are skipped.",
            Annotations::READ_ONLY,
        )
    }

    async fn run(&self, a: ListArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let shown = a.dir_path.or(a.path).unwrap_or_else(|| ".".into());
        let rel = self.env.workspace.locate(&shown, &ctx.cwd)?;
        let ignore = a
            .ignore
            .unwrap_or_default()
            .iter()
            .map(|p| {
                globset::Glob::new(p)
                    .map(|g| g.compile_matcher())
                    .map_err(|e| {
                        ToolError::InvalidArguments(format!(
                            "ignore pattern `{p}` is not a valid glob: {e}"
                        ))
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let env = self.env.clone();
        let root = rel.clone();
        let tree = toolyard_tools::search::blocking(move || {
            toolyard_tools::search::list::tree(&env.workspace, &root, 10_000)
        })
        .await?;
        let mut names: Vec<(bool, String)> = tree
            .shown
            .iter()
            .filter(|e| e.depth <= 1)
            .filter(|e| !ignore.iter().any(|m| m.is_match(&e.name)))
            .map(|e| (e.is_dir, e.name.clone()))
            .collect();
        names.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        let body: Vec<String> = names
            .iter()
            .map(|(d, n)| if *d { format!("[DIR] {n}") } else { n.clone() })
            .collect();
        let text = if body.is_empty() {
            format!("Directory {shown} is empty.")
        } else {
            format!("Directory listing for {shown}:\n{}", body.join("\n"))
        };
        Ok(ToolResult::ok(text).with_data(json!({"path": tree.root, "entries": names.len()})))
    }
}

/// Arguments of `read_many_files`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadManyArgs {
    /// Older form: paths or glob patterns, e.g. `["src/**/*.ts", "README.md"]`.
    pub paths: Option<Vec<String>>,
    /// Paths or glob patterns of files to read (joined with `paths`).
    pub include: Option<Vec<String>>,
    /// Glob patterns of files to leave out.
    pub exclude: Option<Vec<String>>,
    /// Accepted for compatibility; patterns are searched recursively.
    pub recursive: Option<bool>,
    /// Accepted for compatibility; .git, node_modules and ignored files are always skipped.
    #[serde(rename = "useDefaultExcludes")]
    pub use_default_excludes: Option<bool>,
    /// Accepted for compatibility.
    pub file_filtering_options: Option<Value>,
}

/// Gemini's `read_many_files`: files matching globs, each after a `--- path ---` line.
pub struct ReadManyFiles {
    env: Arc<ToolEnv>,
}

#[async_trait]
impl TypedTool for ReadManyFiles {
    type Args = ReadManyArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new(
            "read_many_files",
            "Reads the text of every file matching the given paths or glob patterns (include, or \
         the older paths; exclude leaves some out) and returns them joined, each after a \
         `--- path ---` line, ending with `--- End of content ---`. Output is bounded: files \
         that do not fit are named so they can be read with read_file. Binary files are \
         skipped. Each file read counts as read for a later edit.",
            Annotations::READ_ONLY,
        )
    }

    async fn run(&self, a: ReadManyArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let mut patterns = a.paths.unwrap_or_default();
        patterns.extend(a.include.unwrap_or_default());
        if patterns.is_empty() {
            return Err(ToolError::InvalidArguments(
                "missing `include`: give at least one path or glob pattern, e.g. [\"src/**/*.rs\"] (`paths` is accepted too)".into(),
            ));
        }
        let ws = &self.env.workspace;
        let cwd = ws.locate(".", &ctx.cwd)?;
        let exclude = a
            .exclude
            .unwrap_or_default()
            .iter()
            .map(|p| PathGlob::new(p, ws, &cwd))
            .collect::<Result<Vec<_>, _>>()?;
        let mut files: Vec<String> = Vec::new();
        for p in patterns {
            // A plain file path is read as it is; anything else is a glob.
            if let Ok(rel) = ws.locate(&p, &ctx.cwd)
                && ws.metadata(&rel)?.is_some_and(|m| m.is_file())
            {
                files.push(rel.as_str().to_string());
                continue;
            }
            let query = GlobQuery {
                pattern: p,
                root: cwd.clone(),
                limit: None,
                hidden: false,
                case_insensitive: false,
                no_git_ignore: false,
            };
            let env = self.env.clone();
            let cancel = ctx.cancel.child_token();
            let found = toolyard_tools::search::blocking(move || {
                toolyard_tools::search::glob::find(&env.workspace, &query, &cancel)
            })
            .await?;
            let mut hits: Vec<String> = found.hits.into_iter().map(|h| h.path).collect();
            hits.sort();
            files.extend(hits);
        }
        let prefix = if cwd.is_root() {
            String::new()
        } else {
            format!("{}/", cwd.as_str())
        };
        let mut seen = std::collections::HashSet::new();
        files.retain(|f| seen.insert(f.clone()));
        files.retain(|f| {
            let below = f.strip_prefix(&prefix).unwrap_or(f);
            !exclude.iter().any(|g| g.is_match(below.as_bytes()))
        });
        let budget = ctx.max_output_bytes.max(1);
        let mut out = String::new();
        let (mut read, mut skipped, mut left) = (Vec::new(), Vec::new(), Vec::new());
        for f in &files {
            if !left.is_empty() {
                left.push(f.clone());
                continue;
            }
            let (rel, content) = read_tracked(&self.env, ctx, f).await?;
            if content.contains(&0) {
                skipped.push(rel.as_str().to_string());
                continue;
            }
            let text = String::from_utf8_lossy(&content);
            let part = format!("--- {} ---\n\n{}\n\n", rel.as_str(), text);
            if out.len() + part.len() > budget {
                left.push(f.clone());
                continue;
            }
            out.push_str(&part);
            read.push(rel.as_str().to_string());
        }
        if files.is_empty() {
            return Ok(ToolResult::failure(
                "not_found",
                "No files matching the criteria were found; check the patterns with glob.",
            ));
        }
        out.push_str("--- End of content ---\n");
        if !skipped.is_empty() {
            out.push_str(&format!("Skipped binary files: {}\n", skipped.join(", ")));
        }
        if !left.is_empty() {
            out.push_str(&format!(
                "Output limit reached; {} file(s) not shown, read them with read_file: {}\n",
                left.len(),
                left.join(", ")
            ));
        }
        Ok(ToolResult::ok(out).with_data(json!({
            "read": read,
            "skipped_binary": skipped,
            "not_shown": left,
        })))
    }
}

/// The gemini dialect's tools.
pub fn tools(env: &Arc<ToolEnv>, commands: Arc<CommandEnv>) -> Vec<DialectTool> {
    const FILE_PATH: CallShape = CallShape {
        path: Some("file_path"),
        ..CallShape::NONE
    };
    let mut engine: Vec<Arc<dyn Tool>> = toolyard_tools::files::tools(env.clone());
    engine.extend(toolyard_tools::search::tools(env.clone()));
    engine.extend(toolyard_tools::command::tools(commands));
    let find = |name: &str| engine.iter().find(|t| t.name() == name).cloned();
    let mut v: Vec<DialectTool> = Vec::new();
    if let Some(inner) = find("read_file") {
        v.push(DialectTool::new(Engine::ReadFile, Arc::new(Typed(Adapter {
            name: "read_file",
            description: "Reads a file (file_path, absolute inside the workspace). Text comes as numbered \
                 lines; use start_line/end_line (1-based, inclusive), or the older offset (0-based) \
                 and limit, to read part of a large file. Images and PDFs are returned as media.",
            annotations: Annotations::READ_ONLY,
            target: inner,
            shape: |a| Shaped::plain(shape_read(a)),
            after: as_engine,
        }))));
    }
    if let Some(inner) = find("write_file") {
        let t = Arc::new(Typed(Adapter {
            name: "write_file",
            description: "Writes content to a file (file_path), creating it and its parent directories or \
                 overwriting it. An existing file must have been read first. Provide the full file; \
                 do not use placeholders like '// ... rest of code'.",
            annotations: Annotations::MUTATING,
            target: inner,
            shape: |a| Shaped::plain(shape_write(a)),
            after: as_engine,
        }));
        v.push(DialectTool::new(Engine::WriteFile, t).shaped(FILE_PATH));
    }
    v.push(
        DialectTool::new(
            Engine::EditFile,
            Arc::new(Typed(Replace { env: env.clone() })),
        )
        .shaped(FILE_PATH),
    );
    v.push(DialectTool::new(
        Engine::Glob,
        Arc::new(Typed(Glob { env: env.clone() })),
    ));
    {
        // Its hints name Gemini's parameters (dir_path, include_pattern, total_max_matches).
        let inner: Arc<dyn Tool> = Arc::new(Typed(toolyard_tools::search::GrepTool::speaking(
            env.clone(),
            toolyard_tools::search::Vocab::GEMINI_GREP,
        )));
        for name in ["search_file_content", "grep_search"] {
            v.push(DialectTool::new(Engine::Grep, Arc::new(Typed(Adapter {
                name,
                description: "Searches for a regular expression in file contents under dir_path (or the older \
                     path), optionally only in files matching the include glob. Case-insensitive \
                     unless case_sensitive is true. Returns matching lines with file paths and line \
                     numbers (at most total_max_matches, default 100).",
                annotations: Annotations::READ_ONLY,
                target: inner.clone(),
                shape: |a| Shaped::plain(shape_search(a)),
                after: as_engine,
            }))));
        }
    }
    v.push(DialectTool::new(
        Engine::ListDirectory,
        Arc::new(Typed(ListDirectory { env: env.clone() })),
    ));
    if let Some(inner) = find("run_command") {
        let t = Arc::new(Typed(Adapter {
            name: "run_shell_command",
            description: "Runs a shell command in the workspace (dir_path, or the older directory, sets the \
                 working directory inside it) and returns its output and exit code. \
                 is_background starts servers and watchers without waiting; do not use `&`.",
            annotations: Annotations::COMMAND,
            target: inner,
            shape: |a| Shaped::plain(shape_shell(a)),
            after: as_engine,
        }));
        v.push(DialectTool::new(Engine::RunCommand, t).shaped(CallShape {
            command: Some("command"),
            background: &["is_background"],
            ..CallShape::NONE
        }));
    }
    v.push(DialectTool::new(
        Engine::ReadFile,
        Arc::new(Typed(ReadManyFiles { env: env.clone() })),
    ));
    v
}
