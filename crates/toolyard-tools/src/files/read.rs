//! `read_file`: seed 000's line-numbered view of a file, bounded and honest about cuts.

use std::io::Read;
use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use toolyard_core::{Annotations, ToolContext, ToolError, ToolResult, TypedTool};
use toolyard_workspace::RelPath;

use crate::ToolEnv;

/// Lines shown when the call gives no limit (seed 000).
pub const DEFAULT_LIMIT: usize = 2000;
/// Characters of one line shown before it is cut (seed 000).
pub const MAX_LINE_CHARS: usize = 2000;

/// Arguments of `read_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileArgs {
    /// File path, relative to the workspace root (or absolute inside it).
    pub path: String,
    /// First line to show, 1-indexed (default 1).
    #[schemars(range(min = 1))]
    pub offset: Option<usize>,
    /// Most lines to show (default 2000).
    #[schemars(range(min = 1))]
    pub limit: Option<usize>,
}

/// `read_file`: file contents with line numbers; records the read for later edits.
pub struct ReadFile {
    env: Arc<ToolEnv>,
}

impl ReadFile {
    /// The tool over `env`.
    pub fn new(env: Arc<ToolEnv>) -> Self {
        Self { env }
    }
}

/// One window of a file's lines, as `read_file` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    /// The numbered lines (`{:>6}|line`), cut lines marked.
    pub text: String,
    /// Lines in the whole file.
    pub total_lines: usize,
    /// First line shown (1-indexed).
    pub first: usize,
    /// Last line shown (0 when none).
    pub last: usize,
    /// Whether the byte cap stopped the window early.
    pub capped: bool,
    /// Whether any line was cut at `MAX_LINE_CHARS`.
    pub long_lines_cut: bool,
    /// Whether invalid UTF-8 was replaced.
    pub lossy: bool,
}

/// Number the lines `offset..offset+limit` of `content`, stopping once the text would pass
/// `max_bytes`.
pub fn read_window(content: &[u8], offset: usize, limit: usize, max_bytes: usize) -> Window {
    let body = content.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(content);
    let mut lines: Vec<&[u8]> = body.split(|&b| b == b'\n').collect();
    if body.is_empty() || body.ends_with(b"\n") {
        lines.pop();
    }
    let total_lines = lines.len();
    let mut text = String::new();
    let mut last = 0;
    let mut capped = false;
    let mut long_lines_cut = false;
    let mut lossy = false;
    for (i, raw) in lines.iter().enumerate().skip(offset - 1).take(limit) {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let line = match std::str::from_utf8(raw) {
            Ok(s) => std::borrow::Cow::Borrowed(s),
            Err(_) => {
                lossy = true;
                String::from_utf8_lossy(raw)
            }
        };
        let shown = match line.char_indices().nth(MAX_LINE_CHARS) {
            Some((cut, _)) => {
                long_lines_cut = true;
                let rest = line[cut..].chars().count();
                format!("{}... [line cut: {rest} more characters]", &line[..cut])
            }
            None => line.into_owned(),
        };
        let numbered = format!("{:>6}|{}\n", i + 1, shown);
        if !text.is_empty() && text.len() + numbered.len() > max_bytes {
            capped = true;
            break;
        }
        text.push_str(&numbered);
        last = i + 1;
    }
    Window {
        text,
        total_lines,
        first: offset,
        last,
        capped,
        long_lines_cut,
        lossy,
    }
}

#[async_trait]
impl TypedTool for ReadFile {
    type Args = ReadFileArgs;

    fn name(&self) -> &str {
        "read_file"
    }

    fn description(&self) -> &str {
        "Read a text file with line numbers (`     N|line`). Shows up to 2000 lines from `offset` \
         (1-indexed); long lines and large outputs are cut with a note saying how to read on. \
         A file must be read before write_file or edit_file may change it."
    }

    fn annotations(&self) -> Annotations {
        Annotations::READ_ONLY
    }

    async fn run(&self, args: ReadFileArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let ws = &self.env.workspace;
        let rel = ws.locate(&args.path, &ctx.cwd)?;
        let offset = args.offset.unwrap_or(1);
        let limit = args.limit.unwrap_or(DEFAULT_LIMIT);
        if offset == 0 || limit == 0 {
            return Err(ToolError::InvalidArguments(
                "read_file: offset and limit start at 1".into(),
            ));
        }
        let mut content = Vec::new();
        ws.open_file(&rel)?
            .read_to_end(&mut content)
            .map_err(|e| ws.map_err(e, &rel))?;
        let hash = toolyard_workspace::hash_bytes(&content);
        check_text(&rel, &content)?;
        self.env
            .records
            .record_read(&ctx.session_id, &rel, &hash)
            .await?;

        if content.is_empty() {
            return Ok(ToolResult::ok(format!("{rel} is empty (0 bytes)."))
                .with_data(json!({"path": rel.as_str(), "total_lines": 0, "bytes": 0})));
        }
        let window = read_window(&content, offset, limit, ctx.max_output_bytes);
        if window.last == 0 && !window.capped {
            return Err(ToolError::InvalidArguments(format!(
                "offset {offset} is past the end of {rel}, which has {} lines",
                window.total_lines
            )));
        }
        let mut out = window.text.clone();
        let mut notes = Vec::new();
        if window.lossy {
            notes.push(
                "the file is not valid UTF-8; invalid bytes are shown as \u{FFFD}".to_string(),
            );
        }
        if window.long_lines_cut {
            notes.push(format!(
                "lines longer than {MAX_LINE_CHARS} characters were cut"
            ));
        }
        let next = (window.last < window.total_lines).then_some(window.last + 1);
        if let Some(next) = next {
            let why = if window.capped {
                format!("output reached the {} byte limit", ctx.max_output_bytes)
            } else {
                format!("showing lines {}-{}", window.first, window.last)
            };
            notes.push(format!(
                "{rel} has {} lines; {why}; continue with offset={next}",
                window.total_lines
            ));
        }
        for note in &notes {
            out.push_str(&format!("[{note}]\n"));
        }
        Ok(ToolResult::ok(out).with_data(json!({
            "path": rel.as_str(),
            "total_lines": window.total_lines,
            "first_line": window.first,
            "last_line": window.last,
            "next_offset": next,
            "bytes": content.len(),
            "lossy_utf8": window.lossy,
        })))
    }
}

/// Refuse files that are not text: NUL bytes or a binary signature in the first 8 KiB.
fn check_text(rel: &RelPath, content: &[u8]) -> Result<(), ToolError> {
    let head = &content[..content.len().min(8192)];
    if content_inspector::inspect(head).is_binary() {
        return Err(ToolError::Binary {
            path: rel.to_string(),
            detail: format!("{} bytes, contains NUL or non-text bytes", content.len()),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn numbers_lines_like_seed_000() {
        let w = read_window(b"a\nb\r\nc", 1, 10, 1000);
        assert_eq!(w.text, "     1|a\n     2|b\n     3|c\n");
        assert_eq!(w.total_lines, 3);
    }

    #[test]
    fn long_lines_are_cut_with_a_marker() {
        let line = "x".repeat(2500);
        let w = read_window(line.as_bytes(), 1, 10, 100_000);
        assert!(w.text.contains("[line cut: 500 more characters]"));
        assert!(w.long_lines_cut);
    }

    #[test]
    fn byte_cap_stops_on_a_line_boundary() {
        let content: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let w = read_window(content.as_bytes(), 1, 2000, 100);
        assert!(w.capped);
        assert!(w.text.len() <= 100);
        assert!(w.last > 0 && w.last < 100);
    }

    proptest! {
        #[test]
        fn every_line_comes_back_exactly(lines in proptest::collection::vec("[^\n\r\u{feff}]{0,80}", 0..200), final_newline: bool) {
            let mut content = lines.join("\n");
            if final_newline && !lines.is_empty() { content.push('\n'); }
            let w = read_window(content.as_bytes(), 1, 100_000, usize::MAX);
            let back: Vec<&str> = w.text.lines().map(|l| &l[7..]).collect();
            let expected: Vec<&str> = content.lines().collect();
            prop_assert_eq!(back, expected);
            prop_assert_eq!(w.total_lines, content.lines().count());
        }
    }
}
