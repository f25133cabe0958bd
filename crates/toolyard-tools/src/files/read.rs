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

/// Lines shown when the call gives no limit (seed 000 says 2000; OpenCode passes the model only
/// the first 2,000 lines of a result, so the footer that says how to go on would be lost).
pub const DEFAULT_LIMIT: usize = 1000;
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
    /// Most lines to show (default 1000).
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
    let mut w = Windower::new(offset, limit, max_bytes);
    w.push(content);
    w.finish()
}

/// Builds a [`Window`] from a file streamed in chunks, keeping only the lines shown, so a huge
/// file costs memory in proportion to the window, not to the file.
#[derive(Debug)]
pub struct Windower {
    offset: usize,
    limit: usize,
    max_bytes: usize,
    started: bool,
    lines_done: usize,
    /// The current line's bytes, kept only while it is inside the window (and bounded).
    line: Vec<u8>,
    line_chars: usize,
    line_has_bytes: bool,
    line_last: u8,
    window: Window,
}

/// Bytes of one line kept before it is cut (`MAX_LINE_CHARS` characters of up to 4 bytes).
const LINE_KEEP_BYTES: usize = MAX_LINE_CHARS * 4 + 4;

impl Windower {
    /// A window of `limit` lines from line `offset` (1-indexed), at most `max_bytes` of text.
    pub fn new(offset: usize, limit: usize, max_bytes: usize) -> Self {
        Self {
            offset,
            limit,
            max_bytes,
            started: false,
            lines_done: 0,
            line: Vec::new(),
            line_chars: 0,
            line_has_bytes: false,
            line_last: 0,
            window: Window {
                text: String::new(),
                total_lines: 0,
                first: offset,
                last: 0,
                capped: false,
                long_lines_cut: false,
                lossy: false,
            },
        }
    }

    fn in_window(&self, line_no: usize) -> bool {
        !self.window.capped && line_no >= self.offset && line_no - self.offset < self.limit
    }

    /// Feed the next chunk of the file.
    pub fn push(&mut self, mut chunk: &[u8]) {
        if !self.started && !chunk.is_empty() {
            self.started = true;
            chunk = chunk.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(chunk);
        }
        while !chunk.is_empty() {
            let (piece, ends_line) = match memchr::memchr(b'\n', chunk) {
                Some(i) => (&chunk[..i], true),
                None => (chunk, false),
            };
            self.add_to_line(piece);
            chunk = if ends_line {
                &chunk[piece.len() + 1..]
            } else {
                &[]
            };
            if ends_line {
                self.end_line();
            }
        }
    }

    fn add_to_line(&mut self, piece: &[u8]) {
        if piece.is_empty() {
            return;
        }
        self.line_has_bytes = true;
        self.line_last = piece[piece.len() - 1];
        if self.in_window(self.lines_done + 1) {
            // Count characters as UTF-8 lead bytes, so the cut marker can say how many remain.
            self.line_chars += piece.iter().filter(|&&b| (b & 0xC0) != 0x80).count();
            let room = LINE_KEEP_BYTES.saturating_sub(self.line.len());
            self.line.extend_from_slice(&piece[..piece.len().min(room)]);
        }
    }

    fn end_line(&mut self) {
        self.lines_done += 1;
        let n = self.lines_done;
        if self.in_window(n) {
            let mut line = std::mem::take(&mut self.line);
            let mut chars = self.line_chars;
            let truncated = line.len() >= LINE_KEEP_BYTES;
            // A CRLF line's `\r` is part of the line ending, not of the text.
            if self.line_last == b'\r' {
                chars -= 1;
                if !truncated {
                    line.pop();
                }
            }
            self.emit(n, &line, chars, truncated);
        }
        self.line.clear();
        self.line_chars = 0;
        self.line_has_bytes = false;
        self.line_last = 0;
    }

    fn emit(&mut self, n: usize, raw: &[u8], chars: usize, truncated: bool) {
        let line = match std::str::from_utf8(raw) {
            Ok(s) => std::borrow::Cow::Borrowed(s),
            Err(e) if e.error_len().is_none() && truncated => {
                // Only the kept prefix ends mid-character: not the file's fault.
                std::borrow::Cow::Borrowed(
                    std::str::from_utf8(&raw[..e.valid_up_to()]).unwrap_or(""),
                )
            }
            Err(_) => {
                self.window.lossy = true;
                String::from_utf8_lossy(raw)
            }
        };
        let shown = match line.char_indices().nth(MAX_LINE_CHARS) {
            Some((cut, _)) => {
                self.window.long_lines_cut = true;
                let rest = chars.saturating_sub(MAX_LINE_CHARS);
                format!("{}... [line cut: {rest} more characters]", &line[..cut])
            }
            None => line.into_owned(),
        };
        let numbered = format!("{n:>6}|{shown}\n");
        if !self.window.text.is_empty() && self.window.text.len() + numbered.len() > self.max_bytes
        {
            self.window.capped = true;
            return;
        }
        self.window.text.push_str(&numbered);
        self.window.last = n;
    }

    /// The window, once the whole file was fed.
    pub fn finish(mut self) -> Window {
        if self.line_has_bytes {
            self.end_line();
        }
        self.window.total_lines = self.lines_done;
        self.window
    }
}

#[async_trait]
impl TypedTool for ReadFile {
    type Args = ReadFileArgs;

    fn name(&self) -> &str {
        "read_file"
    }

    fn description(&self) -> &str {
        "Read a text file with line numbers (`     N|line`). Shows up to 1000 lines from `offset` \
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
        // Stream the file: hash all of it for the ledger, keep only the lines shown.
        let mut file = ws.open_file(&rel)?;
        let mut hasher = blake3::Hasher::new();
        let mut windower = Windower::new(offset, limit, ctx.max_output_bytes);
        let mut buf = vec![0u8; 256 * 1024];
        let mut bytes = 0u64;
        loop {
            let n = file.read(&mut buf).map_err(|e| ws.map_err(e, &rel))?;
            if n == 0 {
                break;
            }
            if bytes == 0 {
                check_text(&rel, &buf[..n])?;
            }
            bytes += n as u64;
            hasher.update(&buf[..n]);
            windower.push(&buf[..n]);
        }
        let hash = hasher.finalize().to_hex().to_string();
        self.env
            .records
            .record_read(&ctx.session_id, &rel, &hash)
            .await?;

        if bytes == 0 {
            return Ok(ToolResult::ok(format!("{rel} is empty (0 bytes)."))
                .with_data(json!({"path": rel.as_str(), "total_lines": 0, "bytes": 0})));
        }
        let window = windower.finish();
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
            "bytes": bytes,
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
            detail: "it contains NUL or other non-text bytes".to_string(),
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

    #[test]
    fn a_long_crlf_line_counts_what_was_cut_without_the_line_ending() {
        let content = format!("{}\r\nnext\r\n", "é".repeat(3000));
        let w = read_window(content.as_bytes(), 1, 10, 1_000_000);
        assert!(
            w.text.contains("[line cut: 1000 more characters]"),
            "{}",
            &w.text[w.text.len() - 80..]
        );
        assert!(w.text.ends_with("     2|next\n"));
        assert!(!w.lossy);
    }

    proptest! {
        #[test]
        fn chunked_reading_equals_reading_whole(
            content in "(\\PC{0,30}(\r?\n)?){0,40}",
            cuts in proptest::collection::vec(0usize..2000, 0..12),
            offset in 1usize..20, limit in 1usize..30, max_bytes in 1usize..3000,
        ) {
            let bytes = content.as_bytes();
            let mut points: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
            points.sort_unstable();
            let mut w = Windower::new(offset, limit, max_bytes);
            let mut at = 0;
            for p in points {
                w.push(&bytes[at..p]);
                at = p;
            }
            w.push(&bytes[at..]);
            prop_assert_eq!(w.finish(), read_window(bytes, offset, limit, max_bytes));
        }

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
