//! `edit_file`: exact string replacement that keeps every other byte, with errors that show the
//! model where to look.

use std::sync::Arc;

use async_trait::async_trait;
use memchr::memmem;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use toolyard_core::{Annotations, ToolContext, ToolError, ToolResult, TypedTool};

use super::{commit_write, expect_for_write};
use crate::ToolEnv;

/// Arguments of `edit_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditFileArgs {
    /// File path, relative to the workspace root (or absolute inside it).
    pub path: String,
    /// The exact text to find (copy it from read_file's output, without the line numbers).
    pub old_string: String,
    /// The text to put in its place.
    pub new_string: String,
    /// Replace every occurrence instead of requiring exactly one (default false).
    #[serde(default)]
    pub replace_all: bool,
}

/// One replacement made in a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Replacement {
    /// Byte offset of the new text in the new content.
    pub offset: usize,
    /// Length of the new text in bytes.
    pub len: usize,
    /// 1-indexed line where the new text starts.
    pub line: usize,
}

/// Replace `old` by `new` in `content` (once, or everywhere with `replace_all`), byte-exactly.
/// When the file uses CRLF and `old` has bare `\n`, both strings are matched in CRLF form, so
/// line endings survive. Errors carry a message that shows the nearest candidate lines.
pub fn apply_edit(
    path: &str,
    content: &[u8],
    old: &str,
    new: &str,
    replace_all: bool,
) -> Result<(Vec<u8>, Vec<Replacement>), ToolError> {
    if old.is_empty() {
        return Err(ToolError::InvalidArguments(
            "old_string is empty; to create or replace a whole file use write_file".into(),
        ));
    }
    if old == new {
        return Err(ToolError::InvalidArguments(
            "old_string and new_string are identical; there is nothing to change".into(),
        ));
    }
    let (old_b, new_b) = (old.as_bytes().to_vec(), new.as_bytes().to_vec());
    let mut positions: Vec<usize> = memmem::find_iter(content, &old_b).collect();
    let (mut old_b, mut new_b) = (old_b, new_b);
    if positions.is_empty() && uses_crlf(content) && old.contains('\n') && !old.contains("\r\n") {
        old_b = to_crlf(old).into_bytes();
        new_b = to_crlf(new).into_bytes();
        positions = memmem::find_iter(content, &old_b).collect();
    }
    // find_iter yields overlapping matches; keep non-overlapping ones, left to right.
    let mut distinct = Vec::with_capacity(positions.len());
    let mut next_free = 0;
    for p in positions {
        if p >= next_free {
            distinct.push(p);
            next_free = p + old_b.len();
        }
    }
    match distinct.len() {
        0 => return Err(not_found(path, content, old)),
        1 => {}
        n if !replace_all => {
            let lines: Vec<String> = distinct
                .iter()
                .take(20)
                .map(|&p| line_of(content, p).to_string())
                .collect();
            return Err(ToolError::Conflict(format!(
                "old_string occurs {n} times in {path} (at lines {}); include more surrounding \
                 lines to make it unique, or set replace_all to true to change every one",
                lines.join(", ")
            )));
        }
        _ => {}
    }
    let mut out = Vec::with_capacity(content.len() + distinct.len() * new_b.len());
    let mut reps = Vec::with_capacity(distinct.len());
    let mut last = 0;
    for p in distinct {
        out.extend_from_slice(&content[last..p]);
        reps.push(Replacement {
            offset: out.len(),
            len: new_b.len(),
            line: 0,
        });
        out.extend_from_slice(&new_b);
        last = p + old_b.len();
    }
    out.extend_from_slice(&content[last..]);
    for r in &mut reps {
        r.line = line_of(&out, r.offset);
    }
    Ok((out, reps))
}

fn uses_crlf(content: &[u8]) -> bool {
    memmem::find(content, b"\r\n").is_some()
}

fn to_crlf(s: &str) -> String {
    s.replace("\r\n", "\n").replace('\n', "\r\n")
}

/// 1-indexed line number of byte `offset`.
fn line_of(content: &[u8], offset: usize) -> usize {
    memchr::memchr_iter(b'\n', &content[..offset]).count() + 1
}

/// The "not found" error: the nearest candidate lines with their numbers, and a whitespace hint.
fn not_found(path: &str, content: &[u8], old: &str) -> ToolError {
    let text = String::from_utf8_lossy(content);
    let lines: Vec<&str> = text.lines().collect();
    let old_lines: Vec<&str> = old.lines().collect();
    let mut msg = format!("old_string was not found in {path}.");

    let squash = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let old_squashed = squash(old);
    if !old_squashed.is_empty() {
        // A match that differs only in whitespace: say where.
        let first = squash(
            old_lines
                .iter()
                .find(|l| !l.trim().is_empty())
                .unwrap_or(&""),
        );
        if let Some(i) = lines.iter().position(|l| squash(l) == first) {
            let span = old_lines.len().max(1);
            let region = lines[i..(i + span).min(lines.len())].join("\n");
            if squash(&region) == old_squashed {
                msg.push_str(&format!(
                    " Lines {}-{} match it except for whitespace (indentation, tabs or line \
                     endings); copy the exact text from read_file.",
                    i + 1,
                    i + span
                ));
            }
        }
    }

    let probe = old_lines
        .iter()
        .map(|l| l.trim())
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let mut scored: Vec<(f64, usize)> = lines
        .iter()
        .enumerate()
        .take(200_000)
        .filter(|(_, l)| l.len() <= 1000)
        .map(|(i, l)| (strsim::normalized_levenshtein(l.trim(), probe), i))
        .filter(|(s, _)| *s >= 0.4)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let span = old_lines.len().clamp(1, 6);
    let mut shown: Vec<usize> = Vec::new();
    for (_, i) in scored {
        if shown.len() == 3 {
            break;
        }
        if shown.iter().any(|&s| s.abs_diff(i) < span) {
            continue;
        }
        shown.push(i);
    }
    if shown.is_empty() {
        msg.push_str(" No similar lines found; read the file again with read_file to see its current content.");
    } else {
        msg.push_str(" The closest lines are:");
        for i in shown {
            msg.push('\n');
            for (n, l) in lines.iter().enumerate().skip(i).take(span) {
                msg.push_str(&format!("\n{:>6}|{}", n + 1, l));
            }
        }
    }
    ToolError::NotFound(msg)
}

/// `edit_file`: replace an exact string in a file.
pub struct EditFile {
    env: Arc<ToolEnv>,
}

impl EditFile {
    /// The tool over `env`.
    pub fn new(env: Arc<ToolEnv>) -> Self {
        Self { env }
    }
}

#[async_trait]
impl TypedTool for EditFile {
    type Args = EditFileArgs;

    fn name(&self) -> &str {
        "edit_file"
    }

    fn description(&self) -> &str {
        "Replace an exact string in a file. old_string must occur exactly once unless \
         replace_all is true; line endings, BOM and the final newline are kept. The file must \
         have been read with read_file in this session. Shows the changed lines."
    }

    fn annotations(&self) -> Annotations {
        Annotations::MUTATING
    }

    async fn run(&self, args: EditFileArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let ws = &self.env.workspace;
        let rel = ws.locate(&args.path, &ctx.cwd)?;
        let content = ws.read(&rel)?;
        let current = toolyard_workspace::hash_bytes(&content);
        let expect = expect_for_write(&self.env, ctx, &rel, Some(&current)).await?;
        let (new_content, reps) = apply_edit(
            rel.as_str(),
            &content,
            &args.old_string,
            &args.new_string,
            args.replace_all,
        )?;
        let out = commit_write(&self.env, ctx, "edit_file", &rel, &new_content, &expect).await?;
        let text = describe(rel.as_str(), &new_content, &reps);
        Ok(ToolResult::ok(text)
            .with_data(json!({
                "path": out.path.as_str(),
                "replacements": reps.len(),
                "lines": reps.iter().map(|r| r.line).collect::<Vec<_>>(),
                "original_bytes": content.len(),
                "new_bytes": new_content.len(),
            }))
            .with_files_changed(vec![out.path.to_string()]))
    }
}

/// "Edited PATH: N replacements" and the changed regions with line numbers and two lines of
/// context (the first three regions).
fn describe(path: &str, content: &[u8], reps: &[Replacement]) -> String {
    let text = String::from_utf8_lossy(content);
    let lines: Vec<&str> = text.lines().collect();
    let n = reps.len();
    let mut out = format!(
        "Edited {path}: {n} replacement{}.",
        if n == 1 { "" } else { "s" }
    );
    for r in reps.iter().take(3) {
        let new_lines = content[r.offset..r.offset + r.len]
            .iter()
            .filter(|&&b| b == b'\n')
            .count();
        let from = r.line.saturating_sub(3);
        let to = (r.line + new_lines + 2).min(lines.len());
        out.push('\n');
        for (i, l) in lines.iter().enumerate().take(to).skip(from) {
            out.push_str(&format!(
                "\n{:>6}|{}",
                i + 1,
                l.strip_suffix('\r').unwrap_or(l)
            ));
        }
    }
    if n > 3 {
        out.push_str(&format!("\n\n... and {} more replacements", n - 3));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn crlf_bom_and_missing_final_newline_survive() {
        let content = b"\xEF\xBB\xBFfn a() {\r\n    1\r\n}";
        let (out, reps) =
            apply_edit("f", content, "fn a() {\n    1", "fn a() {\n    2", false).unwrap();
        assert_eq!(out, b"\xEF\xBB\xBFfn a() {\r\n    2\r\n}");
        assert_eq!(reps[0].line, 1);
    }

    #[test]
    fn not_found_shows_the_nearest_lines_with_numbers() {
        let content = b"alpha\nfn compute(x: u32) -> u32 {\n    x + 1\n}\n";
        let e = apply_edit("f.rs", content, "fn compute(x: u64) -> u64 {", "y", false).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("     2|fn compute(x: u32) -> u32 {"), "{msg}");
    }

    #[test]
    fn whitespace_only_difference_is_named() {
        let content = b"if x {\n\tdo_it();\n}\n";
        let e = apply_edit("f", content, "if x {\n    do_it();\n}", "z", false).unwrap_err();
        assert!(e.to_string().contains("except for whitespace"), "{e}");
    }

    #[test]
    fn several_matches_need_replace_all() {
        let content = b"a\nx\nb\nx\n";
        let e = apply_edit("f", content, "x", "y", false).unwrap_err();
        assert!(e.to_string().contains("2 times"), "{e}");
        assert!(e.to_string().contains("lines 2, 4"), "{e}");
        let (out, reps) = apply_edit("f", content, "x", "y", true).unwrap();
        assert_eq!(out, b"a\ny\nb\ny\n");
        assert_eq!(reps.len(), 2);
    }

    proptest! {
        #[test]
        fn unique_edit_changes_exactly_that_region(
            before in "[a-z \n]{0,200}", needle in "[A-Z]{3,10}", after in "[a-z \n]{0,200}",
            replacement in "[a-zA-Z \n]{0,30}",
        ) {
            prop_assume!(replacement != needle);
            let content = format!("{before}{needle}{after}");
            let (out, reps) = apply_edit("f", content.as_bytes(), &needle, &replacement, false).unwrap();
            prop_assert_eq!(out, format!("{before}{replacement}{after}").into_bytes());
            prop_assert_eq!(reps.len(), 1);
            prop_assert_eq!(reps[0].line, before.matches('\n').count() + 1);
        }
    }
}
