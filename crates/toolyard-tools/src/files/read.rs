//! `read_file`: seed 000's line-numbered view of a file, bounded and honest about cuts.

use std::fmt::Write as _;
use std::io::Read;
use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use toolyard_core::{Annotations, ToolContext, ToolError, ToolInfo, ToolResult, TypedTool};
use toolyard_workspace::RelPath;

use crate::ToolEnv;

mod media;

pub use media::read_media;
use media::{Kind, read_document, read_head};

/// Lines shown when the call gives no limit (seed 000 says 2000; OpenCode passes the model only
/// the first 2,000 lines of a result, so the footer that says how to go on would be lost).
pub const DEFAULT_LIMIT: usize = 1000;
/// Characters of one line shown before it is cut (seed 000).
pub const MAX_LINE_CHARS: usize = 2000;

/// Arguments of `read_file`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileArgs {
    /// File path, relative to the workspace root (or absolute inside it); or a saved command
    /// output: the path a cut command output named (`.../outputs/<id>.log`), or `output:<id>`.
    /// To read several files at once, give `paths` or `reads` instead.
    #[serde(default)]
    pub path: Option<String>,
    /// First line to show, 1-indexed (default 1).
    #[schemars(range(min = 1))]
    pub offset: Option<usize>,
    /// Most lines to show (default 1000).
    #[schemars(range(min = 1))]
    pub limit: Option<usize>,
    /// PDF only: the pages to read, e.g. `"1-3"`, `"5"` or `"1,4-6"` (default: from page 1 on,
    /// as many as fit).
    pub pages: Option<String>,
    /// Several files in one call, each read as `path` is (`offset` and `limit` apply to each),
    /// e.g. `["src/a.rs", "src/b.rs"]`. Each counts as read for a later edit.
    #[serde(default)]
    pub paths: Option<Vec<String>>,
    /// Several files or line ranges in one call, e.g. `[{"path": "src/a.rs", "offset": 40,
    /// "limit": 30}, {"path": "src/b.rs"}]`. Each counts as read for a later edit.
    #[serde(default)]
    pub reads: Option<Vec<ReadSpec>>,
}

/// One read of several (`reads` of `read_file`).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadSpec {
    /// File path, as for `path`.
    pub path: String,
    /// First line to show, 1-indexed (default: the call's `offset`, else 1).
    #[schemars(range(min = 1))]
    pub offset: Option<usize>,
    /// Most lines to show (default: the call's `limit`, else 1000).
    #[schemars(range(min = 1))]
    pub limit: Option<usize>,
    /// PDF only: the pages to read.
    pub pages: Option<String>,
}

/// Most files (or ranges) one `read_file` call reads.
pub const MAX_READS: usize = 50;
/// The least output a file of several gets, however many share the budget.
const MIN_SHARE: usize = 2048;

/// The largest image sent (bytes): Claude's API refuses images over 5 MB; a bigger image is
/// scaled down until it fits.
pub const MAX_IMAGE_BYTES: u64 = 5_000_000;
/// The largest image file read to be scaled down (bytes).
pub const MAX_IMAGE_FILE_BYTES: u64 = 64 << 20;
/// The longest side (pixels) past which an image is scaled down (a model's API would anyway).
const IMAGE_LONG_SIDE: u32 = 1568;
/// The most pixels, per side and in all, an image may claim to be decoded: past them it is
/// refused from its header, before any decoding (a decompression bomb is never expanded).
const MAX_DECODE_SIDE: u32 = 20_000;
const MAX_DECODE_PIXELS: u64 = 100_000_000;
/// Memory the decoder may allocate (bytes).
const MAX_DECODE_ALLOC: u64 = 512 << 20;
/// The largest PDF or notebook read (bytes): both are parsed whole, in memory.
pub const MAX_DOCUMENT_BYTES: u64 = 64 << 20;
/// PDF pages shown when `pages` is not given (more only fit when they are short).
const DEFAULT_PAGES: u32 = 20;

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
                std::borrow::Cow::Owned(format!(
                    "{}... [line cut: {rest} more characters]",
                    &line[..cut]
                ))
            }
            None => line,
        };
        // `{n:>6}|{shown}\n`, written in place.
        let digits = n.checked_ilog10().map_or(1, |d| d as usize + 1);
        let numbered_len = digits.max(6) + shown.len() + 2;
        let text = &mut self.window.text;
        if !text.is_empty() && text.len() + numbered_len > self.max_bytes {
            self.window.capped = true;
            return;
        }
        let _ = write!(text, "{n:>6}|");
        text.push_str(&shown);
        text.push('\n');
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

    fn info(&self) -> ToolInfo<'_> {
        let description = "Read a text file with line numbers (`     N|line`). Shows up to 1000 lines from `offset` \
         (1-indexed); long lines and large outputs are cut with a note saying how to read on. \
         Several files or ranges in one call: `paths` [\"a.rs\", \"b.rs\"] or `reads` \
         [{\"path\": \"a.rs\", \"offset\": 40, \"limit\": 30}, ...], each after a `==> path <==` \
         line. A file must be read before write_file or edit_file may change it. Images (PNG, \
         JPEG, GIF, WebP; large ones scaled down) come back as an image; a PDF as its text page \
         by page (`pages`: \"1-3\", \"5\"); a Jupyter notebook (.ipynb) as its numbered cells \
         with their outputs. Other binary files are refused with what they are. The full output \
         of a command that was cut is read by the path its note gives (or `output:<id>`).";
        ToolInfo::new("read_file", description, Annotations::READ_ONLY).returns_images()
    }

    async fn run(&self, args: ReadFileArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let several = args.paths.is_some() || args.reads.is_some();
        let mut items: Vec<ReadSpec> = Vec::new();
        if let Some(path) = args.path {
            items.push(ReadSpec {
                path,
                offset: args.offset,
                limit: args.limit,
                pages: args.pages.clone(),
            });
        }
        for path in args.paths.unwrap_or_default() {
            items.push(ReadSpec {
                path,
                offset: args.offset,
                limit: args.limit,
                pages: None,
            });
        }
        for r in args.reads.unwrap_or_default() {
            items.push(ReadSpec {
                offset: r.offset.or(args.offset),
                limit: r.limit.or(args.limit),
                ..r
            });
        }
        match items.len() {
            0 if several => Err(ToolError::InvalidArguments(
                "read_file: `paths` and `reads` are empty; name at least one file".into(),
            )),
            0 => Err(ToolError::InvalidArguments(
                "read_file: give `path` (one file), or `paths` (several files) or `reads` \
                 ([{path, offset, limit}], several files or ranges)"
                    .into(),
            )),
            n if n > MAX_READS => Err(ToolError::InvalidArguments(format!(
                "read_file: {n} files asked for; one call reads at most {MAX_READS}, so split \
                 them over several calls"
            ))),
            // One file, however it was asked for, reads as `path` does.
            1 => self.read_one(items.remove(0), ctx).await,
            _ => self.read_several(items, ctx).await,
        }
    }
}

impl ReadFile {
    /// Several reads in one answer: each after a `==> path <==` line, as `head` prints several
    /// files, sharing the output budget (what one leaves goes to the next). One that fails
    /// says why in its place; the others are read all the same.
    async fn read_several(
        &self,
        items: Vec<ReadSpec>,
        ctx: &ToolContext,
    ) -> Result<ToolResult, ToolError> {
        let n = items.len();
        let mut left = ctx.max_output_bytes;
        let mut out = String::new();
        let mut files = Vec::with_capacity(n);
        let mut images = Vec::new();
        let mut failed = 0;
        for (i, item) in items.into_iter().enumerate() {
            let header = format!("==> {} <==\n", item.path);
            let mut sub = ctx.clone();
            sub.max_output_bytes = (left / (n - i)).max(MIN_SHARE);
            let path = item.path.clone();
            let r = match self.read_one(item, &sub).await {
                Err(ToolError::Cancelled) => return Err(ToolError::Cancelled),
                r => ToolResult::from(r),
            };
            if i > 0 {
                out.push('\n');
            }
            out.push_str(&header);
            out.push_str(&r.output);
            if !r.output.ends_with('\n') {
                out.push('\n');
            }
            left = left.saturating_sub(header.len() + r.output.len() + 1);
            if r.success {
                files.push(r.data.unwrap_or_else(|| json!({"path": path})));
            } else {
                failed += 1;
                files.push(json!({
                    "path": path,
                    "error": r.error.unwrap_or_else(|| r.output.clone()),
                    "error_kind": r.error_kind,
                }));
            }
            images.extend(r.images);
        }
        let data = json!({"files": files, "read": n - failed, "failed": failed});
        if failed == n {
            // Each section says why already.
            return Ok(ToolResult {
                success: false,
                output: out,
                data: Some(data),
                files_changed: Vec::new(),
                error: Some(format!("none of the {n} files could be read")),
                error_kind: Some("read_failed".into()),
                images: Vec::new(),
            });
        }
        let mut r = ToolResult::ok(out).with_data(data);
        r.images = images;
        Ok(r)
    }

    /// One read: a workspace file (text, image, PDF, notebook) or a saved command output.
    async fn read_one(&self, spec: ReadSpec, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let ReadSpec {
            path,
            offset,
            limit,
            pages,
        } = spec;
        let offset = offset.unwrap_or(1);
        let limit = limit.unwrap_or(DEFAULT_LIMIT);
        if offset == 0 || limit == 0 {
            return Err(ToolError::InvalidArguments(
                "read_file: offset and limit start at 1".into(),
            ));
        }
        if let Some(saved) = crate::search::saved::open(&self.env, &path)? {
            return read_saved(saved, offset, limit, ctx);
        }
        let ws = &self.env.workspace;
        let rel = ws.locate(&path, &ctx.cwd)?;
        let mut file = ws.open_file(&rel)?;
        let mut head = [0u8; 16];
        let head_len = read_head(&mut file, &mut head).map_err(|e| ws.map_err(e, &rel))?;
        let kind = Kind::sniff(&head[..head_len], rel.as_str());
        if !matches!(kind, Kind::Text) {
            return read_document(&self.env, kind, &rel, &head[..head_len], file, pages, ctx).await;
        }
        if pages.is_some() {
            return Err(ToolError::InvalidArguments(format!(
                "read_file: `pages` applies to PDF files only, and {rel} is not a PDF; use \
                 offset and limit to choose its lines"
            )));
        }
        // Stream the file: hash all of it for the ledger, keep only the lines shown.
        let mut hasher = blake3::Hasher::new();
        let mut windower = Windower::new(offset, limit, ctx.max_output_bytes);
        // Sized to the file (a small file needs no 256 KiB buffer, zeroed and unmapped per call).
        let size = file.metadata().map_or(u64::MAX, |m| m.len());
        let mut buf =
            vec![0u8; usize::try_from(size + 1).map_or(256 * 1024, |n| n.clamp(4096, 256 * 1024))];
        let mut bytes = 0u64;
        // The sniffed head starts the first chunk, so the text check sees a whole chunk.
        let mut carried = head_len;
        buf[..head_len].copy_from_slice(&head[..head_len]);
        loop {
            // A huge file is read whole (for its hash): a cancelled call stops here.
            if ctx.cancel.is_cancelled() {
                return Err(ToolError::Cancelled);
            }
            let n = carried
                + file
                    .read(&mut buf[carried..])
                    .map_err(|e| ws.map_err(e, &rel))?;
            carried = 0;
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

        window_result(
            windower.finish(),
            rel.as_str(),
            offset,
            bytes,
            ctx.max_output_bytes,
        )
    }
}

/// The answer to a text read: the window's numbered lines, then notes (what was cut, how to
/// read on), `shown` naming the file.
fn window_result(
    window: Window,
    shown: &str,
    offset: usize,
    bytes: u64,
    max_bytes: usize,
) -> Result<ToolResult, ToolError> {
    if bytes == 0 {
        return Ok(ToolResult::ok(format!("{shown} is empty (0 bytes)."))
            .with_data(json!({"path": shown, "total_lines": 0, "bytes": 0})));
    }
    if window.last == 0 && !window.capped {
        return Err(ToolError::InvalidArguments(format!(
            "offset {offset} is past the end of {shown}, which has {} lines",
            window.total_lines
        )));
    }
    let mut notes = Vec::new();
    if window.lossy {
        notes.push("the file is not valid UTF-8; invalid bytes are shown as \u{FFFD}".to_string());
    }
    if window.long_lines_cut {
        notes.push(format!(
            "lines longer than {MAX_LINE_CHARS} characters were cut"
        ));
    }
    let next = (window.last < window.total_lines).then_some(window.last + 1);
    let mut out = window.text;
    if let Some(next) = next {
        let why = if window.capped {
            format!("output reached the {max_bytes} byte limit")
        } else {
            format!("showing lines {}-{}", window.first, window.last)
        };
        notes.push(format!(
            "{shown} has {} lines; {why}; continue with offset={next}",
            window.total_lines
        ));
    }
    for note in &notes {
        out.push_str(&format!("[{note}]\n"));
    }
    Ok(ToolResult::ok(out).with_data(json!({
        "path": shown,
        "total_lines": window.total_lines,
        "first_line": window.first,
        "last_line": window.last,
        "next_offset": next,
        "bytes": bytes,
        "lossy_utf8": window.lossy,
    })))
}

/// A saved command output, read as a text file is (numbered lines, `offset`/`limit`); it is
/// not a workspace file, so nothing is recorded, and a command's bytes are shown as they are
/// (invalid UTF-8 replaced).
fn read_saved(
    saved: crate::search::saved::SavedOutput,
    offset: usize,
    limit: usize,
    ctx: &ToolContext,
) -> Result<ToolResult, ToolError> {
    let mut windower = Windower::new(offset, limit, ctx.max_output_bytes);
    let mut file = saved.file;
    let mut buf = vec![0u8; 64 * 1024];
    let mut bytes = 0u64;
    loop {
        if ctx.cancel.is_cancelled() {
            return Err(ToolError::Cancelled);
        }
        let n = file
            .read(&mut buf)
            .map_err(|e| ToolError::Io(format!("reading the saved output {}: {e}", saved.shown)))?;
        if n == 0 {
            break;
        }
        bytes += n as u64;
        windower.push(&buf[..n]);
    }
    let mut r = window_result(
        windower.finish(),
        &saved.shown,
        offset,
        bytes,
        ctx.max_output_bytes,
    )?;
    if let Some(d) = r.data.as_mut() {
        d["saved_output"] = json!(saved.path);
    }
    Ok(r)
}

/// Refuse files that are not text: NUL bytes or a binary signature in the first 8 KiB. The
/// refusal names what the file is, when its magic bytes say, and what to do with it.
fn check_text(rel: &RelPath, content: &[u8]) -> Result<(), ToolError> {
    let head = &content[..content.len().min(8192)];
    if content_inspector::inspect(head).is_binary() {
        return Err(ToolError::Binary {
            path: rel.to_string(),
            detail: binary_detail(rel, head),
        });
    }
    Ok(())
}

/// What a binary file is, by its magic bytes, and how to look inside it instead.
fn binary_detail(rel: &RelPath, head: &[u8]) -> String {
    let at = |off: usize, magic: &[u8]| head.get(off..off + magic.len()) == Some(magic);
    let (what, todo) = if at(0, b"PK\x03\x04") || at(0, b"PK\x05\x06") {
        (
            "a ZIP archive (also .jar, .docx, .xlsx, .whl)",
            format!("list it with run_command `unzip -l {rel}`"),
        )
    } else if at(0, b"\x1f\x8b") {
        (
            "gzip-compressed data",
            format!("look inside with run_command `zcat {rel} | head` (or `tar tzf {rel}`)"),
        )
    } else if at(257, b"ustar") {
        (
            "a tar archive",
            format!("list it with run_command `tar tf {rel}`"),
        )
    } else if at(0, b"BZh")
        || at(0, b"\xfd7zXZ\x00")
        || at(0, b"\x28\xb5\x2f\xfd")
        || at(0, b"7z\xbc\xaf\x27\x1c")
    {
        (
            "compressed data (bzip2, xz, zstd or 7z)",
            "decompress it with run_command and read the result".to_string(),
        )
    } else if at(0, b"\x7fELF") {
        (
            "an ELF executable or library",
            format!(
                "inspect it with run_command `file {rel}`, `readelf -h {rel}` or `strings {rel}`"
            ),
        )
    } else if at(0, b"MZ") {
        (
            "a Windows executable (PE)",
            format!("inspect it with run_command `file {rel}` or `strings {rel}`"),
        )
    } else if at(0, b"\xcf\xfa\xed\xfe") || at(0, b"\xce\xfa\xed\xfe") || at(0, b"\xca\xfe\xba\xbe")
    {
        (
            "a Mach-O binary or Java class file",
            format!("inspect it with run_command `file {rel}`"),
        )
    } else if at(0, b"\x00asm") {
        (
            "a WebAssembly module",
            format!("inspect it with run_command `file {rel}` (or wasm-objdump)"),
        )
    } else if at(0, b"SQLite format 3\x00") {
        (
            "an SQLite database",
            format!("query it with run_command `sqlite3 {rel} .tables`"),
        )
    } else if at(0, b"RIFF") || at(4, b"ftyp") || at(0, b"OggS") || at(0, b"fLaC") || at(0, b"ID3")
    {
        (
            "audio or video",
            format!("describe it with run_command `file {rel}`; it has no text to read"),
        )
    } else if at(0, b"BM") || at(0, b"II*\x00") || at(0, b"MM\x00*") || at(0, b"\x00\x00\x01\x00") {
        (
            "an image in a format read_file does not return (BMP, TIFF or ICO)",
            format!(
                "convert it to PNG with run_command (e.g. `convert {rel} out.png`) and read that"
            ),
        )
    } else {
        (
            "it contains NUL or other non-text bytes",
            format!(
                "describe it with run_command `file {rel}`, or show its bytes with `xxd {rel} | head`"
            ),
        )
    };
    format!("{what}; {todo}")
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
