//! What `read_file` shows of a file that is not text: an image (scaled to fit), a PDF's
//! pages, a notebook's cells and outputs.

use std::io::Read;

use serde_json::json;
use toolyard_core::shape::head_tail;
use toolyard_core::{ToolContext, ToolError, ToolResult};
use toolyard_workspace::RelPath;

use super::{
    DEFAULT_PAGES, IMAGE_LONG_SIDE, MAX_DECODE_ALLOC, MAX_DECODE_PIXELS, MAX_DECODE_SIDE,
    MAX_DOCUMENT_BYTES, MAX_IMAGE_BYTES, MAX_IMAGE_FILE_BYTES,
};
use crate::ToolEnv;

/// The media engine every dialect's read shares: when the file at the path argument `path` is
/// an image, a PDF or a Jupyter notebook, read it (recorded in the ledger) and return what
/// `read_file` returns for it (an image block; the text of the `pages` asked for; the cells
/// with their outputs); `Ok(None)` when it is anything else, for the caller to read as text.
pub async fn read_media(
    env: &ToolEnv,
    ctx: &ToolContext,
    path: &str,
    pages: Option<String>,
) -> Result<Option<ToolResult>, ToolError> {
    let ws = &env.workspace;
    let rel = ws.locate(path, &ctx.cwd)?;
    if ws.metadata(&rel)?.is_some_and(|m| m.is_dir()) {
        return Ok(None);
    }
    let mut file = ws.open_file(&rel)?;
    let mut head = [0u8; 16];
    let head_len = read_head(&mut file, &mut head).map_err(|e| ws.map_err(e, &rel))?;
    let kind = Kind::sniff(&head[..head_len], rel.as_str());
    if kind == Kind::Text {
        return Ok(None);
    }
    read_document(env, kind, &rel, &head[..head_len], file, pages, ctx)
        .await
        .map(Some)
}

/// An image, a PDF or a notebook: read whole (capped), recorded, then shown its own way.
pub(super) async fn read_document(
    env: &ToolEnv,
    kind: Kind,
    rel: &RelPath,
    head: &[u8],
    file: cap_std::fs::File,
    pages: Option<String>,
    ctx: &ToolContext,
) -> Result<ToolResult, ToolError> {
    let ws = &env.workspace;
    let cap = match kind {
        Kind::Image(_) => MAX_IMAGE_FILE_BYTES,
        _ => MAX_DOCUMENT_BYTES,
    };
    let size = file.metadata().map_err(|e| ws.map_err(e, rel))?.len();
    if size > cap {
        let what = kind.describe();
        let todo = match kind {
            Kind::Image(_) => format!(
                "scale it down or convert it first, e.g. with run_command \
                     `convert {rel} -resize {IMAGE_LONG_SIDE}x{IMAGE_LONG_SIDE} small.png`, \
                     and read that"
            ),
            Kind::Pdf => format!(
                "extract its text first, e.g. with run_command `pdftotext {rel} out.txt`, \
                     and read that"
            ),
            _ => "read it with a command (run_command) that prints only the part you need"
                .to_string(),
        };
        return Err(ToolError::InvalidArguments(format!(
            "read_file: {rel} is {what} of {size} bytes; read_file returns at most {cap} \
                 bytes of one; {todo}"
        )));
    }
    // The sniffed head was read already: the rest follows it.
    let mut content = Vec::with_capacity(size as usize);
    content.extend_from_slice(head);
    file.take(cap + 1)
        .read_to_end(&mut content)
        .map_err(|e| ws.map_err(e, rel))?;
    let hash = blake3::hash(&content).to_hex().to_string();
    env.records.record_read(&ctx.session_id, rel, &hash).await?;
    if pages.is_some() && kind != Kind::Pdf {
        return Err(ToolError::InvalidArguments(format!(
            "read_file: `pages` applies to PDF files only, and {rel} is {}",
            kind.describe()
        )));
    }
    match kind {
        Kind::Image(mime) => image_result(rel, mime, &content),
        Kind::Pdf => pdf_result(rel, &content, pages.as_deref(), ctx.max_output_bytes),
        Kind::Notebook => notebook_result(rel, &content, ctx.max_output_bytes),
        Kind::Text => Err(ToolError::Unavailable(
            "read_file: a text file reached the document reader".into(),
        )),
    }
}

/// What a file is, from its first bytes (and `.ipynb` from its name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// Text (or an unknown binary, refused by the text check).
    Text,
    /// An image the model can see, with its MIME type.
    Image(&'static str),
    /// A PDF document.
    Pdf,
    /// A Jupyter notebook.
    Notebook,
}

impl Kind {
    pub(super) fn sniff(head: &[u8], path: &str) -> Self {
        if let Some(mime) = image_mime(head) {
            Kind::Image(mime)
        } else if head.starts_with(b"%PDF-") {
            Kind::Pdf
        } else if path.to_ascii_lowercase().ends_with(".ipynb") {
            Kind::Notebook
        } else {
            Kind::Text
        }
    }

    fn describe(self) -> String {
        match self {
            Kind::Text => "a text file".into(),
            Kind::Image(mime) => format!("an image ({mime})"),
            Kind::Pdf => "a PDF".into(),
            Kind::Notebook => "a Jupyter notebook".into(),
        }
    }
}

/// The MIME type of a PNG, JPEG, GIF or WebP image, by its magic bytes.
fn image_mime(head: &[u8]) -> Option<&'static str> {
    if head.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if head.starts_with(b"\xff\xd8\xff") {
        Some("image/jpeg")
    } else if head.starts_with(b"GIF87a") || head.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if head.len() >= 12 && head.starts_with(b"RIFF") && &head[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

/// Fill `head` as far as the file allows (a read may return less than asked).
pub(super) fn read_head(file: &mut impl Read, head: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < head.len() {
        match file.read(&mut head[n..])? {
            0 => break,
            m => n += m,
        }
    }
    Ok(n)
}

/// The image as an image block, with a line saying what it is: as it is when it is small
/// enough, else scaled down (see [`scale_image`]).
fn image_result(
    rel: &RelPath,
    mime: &'static str,
    content: &[u8],
) -> Result<ToolResult, ToolError> {
    use base64::Engine as _;
    let format = mime.trim_start_matches("image/").to_ascii_uppercase();
    let dims = imagesize::blob_size(content).ok();
    let size = match dims {
        Some(d) => format!(", {}x{} pixels", d.width, d.height),
        None => String::new(),
    };
    let long = dims.map_or(0, |d| d.width.max(d.height));
    let too_big = content.len() as u64 > MAX_IMAGE_BYTES || long > IMAGE_LONG_SIDE as usize;
    let (sent, sent_mime, width, height, text) = if too_big {
        let scaled = scale_image(rel, mime, content)?;
        let sent_format = scaled
            .mime
            .trim_start_matches("image/")
            .to_ascii_uppercase();
        let text = format!(
            "Image {rel}: {format}, {}x{} pixels, {} bytes; scaled down to {}x{} pixels \
             ({sent_format}, {} bytes) and returned as an image.",
            scaled.from.0,
            scaled.from.1,
            content.len(),
            scaled.to.0,
            scaled.to.1,
            scaled.bytes.len()
        );
        let (w, h) = scaled.to;
        (
            std::borrow::Cow::Owned(scaled.bytes),
            scaled.mime,
            Some(w as usize),
            Some(h as usize),
            text,
        )
    } else {
        let text = format!(
            "Image {rel}: {format}{size}, {} bytes; returned as an image.",
            content.len()
        );
        (
            std::borrow::Cow::Borrowed(content),
            mime,
            dims.map(|d| d.width),
            dims.map(|d| d.height),
            text,
        )
    };
    Ok(ToolResult::ok(text)
        .with_data(json!({
            "path": rel.as_str(),
            "kind": "image",
            "mime_type": sent_mime,
            "bytes": sent.len(),
            "width": width,
            "height": height,
            "original": {
                "mime_type": mime,
                "bytes": content.len(),
                "width": dims.map(|d| d.width),
                "height": dims.map(|d| d.height),
            },
            "scaled": too_big,
        }))
        .with_image(toolyard_core::Image {
            data: base64::engine::general_purpose::STANDARD.encode(&sent),
            mime_type: sent_mime.to_string(),
        }))
}

/// An image scaled down: its bytes and type, and the sizes before and after.
struct Scaled {
    bytes: Vec<u8>,
    mime: &'static str,
    from: (u32, u32),
    to: (u32, u32),
}

/// Decode `content` (bounded: dimensions and allocation are limited, so a decompression bomb
/// is refused, not expanded; an animated GIF gives its first frame), scale it so its long side
/// is at most [`IMAGE_LONG_SIDE`] and its encoding at most [`MAX_IMAGE_BYTES`] (keeping the
/// aspect ratio), and encode it again: a PNG as PNG, anything else as JPEG.
fn scale_image(rel: &RelPath, mime: &str, content: &[u8]) -> Result<Scaled, ToolError> {
    use image::{ImageFormat, ImageReader, Limits};
    let todo = format!(
        "convert it to a smaller PNG or JPEG first, e.g. with run_command `convert {rel} \
         -resize {IMAGE_LONG_SIDE}x{IMAGE_LONG_SIDE} small.png`, and read that"
    );
    if let Ok(d) = imagesize::blob_size(content) {
        let (w, h) = (d.width as u64, d.height as u64);
        if w > MAX_DECODE_SIDE as u64 || h > MAX_DECODE_SIDE as u64 || w * h > MAX_DECODE_PIXELS {
            return Err(ToolError::InvalidArguments(format!(
                "read_file: {rel} says it is {w}x{h} pixels, more than read_file decodes \
                 ({MAX_DECODE_SIDE} a side, {MAX_DECODE_PIXELS} in all), so it was not decoded; \
                 {todo}"
            )));
        }
    }
    let format = match mime {
        "image/png" => ImageFormat::Png,
        "image/jpeg" => ImageFormat::Jpeg,
        "image/gif" => ImageFormat::Gif,
        _ => ImageFormat::WebP,
    };
    let mut limits = Limits::default();
    limits.max_image_width = Some(MAX_DECODE_SIDE);
    limits.max_image_height = Some(MAX_DECODE_SIDE);
    limits.max_alloc = Some(MAX_DECODE_ALLOC);
    let mut reader = ImageReader::with_format(std::io::Cursor::new(content), format);
    reader.limits(limits);
    let img = reader.decode().map_err(|e| {
        ToolError::InvalidArguments(format!(
            "read_file: {rel} looks like {mime} but cannot be decoded ({e}); it may be damaged \
             or too large to decode; {todo}"
        ))
    })?;
    let from = (img.width(), img.height());
    let png = format == ImageFormat::Png;
    let mut side = IMAGE_LONG_SIDE.min(from.0.max(from.1)).max(1);
    loop {
        let small = img.resize(side, side, image::imageops::FilterType::Triangle);
        let mut bytes = Vec::new();
        let encoded = if png {
            small.write_to(&mut std::io::Cursor::new(&mut bytes), ImageFormat::Png)
        } else {
            let rgb = small.to_rgb8();
            image::codecs::jpeg::JpegEncoder::new_with_quality(&mut bytes, 85).encode_image(&rgb)
        };
        encoded.map_err(|e| {
            ToolError::Io(format!("read_file: cannot encode {rel} scaled down: {e}"))
        })?;
        if bytes.len() as u64 <= MAX_IMAGE_BYTES || side <= 64 {
            return Ok(Scaled {
                bytes,
                mime: if png { "image/png" } else { "image/jpeg" },
                from,
                to: (small.width(), small.height()),
            });
        }
        // Still over the byte cap (a noisy PNG): smaller again.
        side = side * 3 / 4;
    }
}

/// Parse `pages` ("1-3", "5", "1,4-6") into sorted, distinct page numbers within `count`.
fn parse_pages(spec: &str, count: u32) -> Result<Vec<u32>, ToolError> {
    let bad = |why: String| {
        ToolError::InvalidArguments(format!(
            "read_file: `pages` {spec:?} {why}; give pages such as \"1-3\", \"5\" or \"1,4-6\" \
             (the PDF has {count} pages)"
        ))
    };
    let mut pages = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (part, part),
        };
        let a: u32 = a
            .parse()
            .map_err(|_| bad(format!("has {a:?}, not a page number")))?;
        let b: u32 = if b.is_empty() {
            count
        } else {
            b.parse()
                .map_err(|_| bad(format!("has {b:?}, not a page number")))?
        };
        if a == 0 || b < a {
            return Err(bad(format!(
                "has the range {part:?}; pages start at 1, low-high"
            )));
        }
        if a > count {
            return Err(bad(format!("starts past the last page ({part:?})")));
        }
        pages.extend(a..=b.min(count));
    }
    if pages.is_empty() {
        return Err(bad("names no page".into()));
    }
    pages.sort_unstable();
    pages.dedup();
    Ok(pages)
}

/// A PDF's text, page by page, as far as `max_bytes` allows.
fn pdf_result(
    rel: &RelPath,
    content: &[u8],
    pages: Option<&str>,
    max_bytes: usize,
) -> Result<ToolResult, ToolError> {
    let doc = lopdf::Document::load_mem(content).map_err(|e| {
        ToolError::InvalidArguments(format!(
            "read_file: {rel} looks like a PDF but could not be parsed ({e}); try run_command \
             `pdftotext {rel} -` if it is installed"
        ))
    })?;
    let count = doc.get_pages().len() as u32;
    if count == 0 {
        return Ok(ToolResult::ok(format!("PDF {rel}: no pages.\n"))
            .with_data(json!({"path": rel.as_str(), "kind": "pdf", "pages": 0})));
    }
    let wanted = match pages {
        Some(spec) => parse_pages(spec, count)?,
        None => (1..=count.min(DEFAULT_PAGES)).collect(),
    };
    let mut body = String::new();
    let mut shown = Vec::new();
    let mut capped = false;
    for &page in &wanted {
        let text = match doc.extract_text(&[page]) {
            Ok(t) => t,
            Err(e) => format!("[the text of this page could not be extracted: {e}]\n"),
        };
        let text = if text.trim().is_empty() {
            "[no text on this page: it may be a scanned image]\n".to_string()
        } else {
            text
        };
        let block = format!("--- page {page} ---\n{}\n", text.trim_end());
        if !shown.is_empty() && body.len() + block.len() > max_bytes {
            capped = true;
            break;
        }
        body.push_str(&block);
        shown.push(page);
    }
    let mut out = format!("PDF {rel}: {count} pages; showing {}.\n", ranges(&shown));
    out.push_str(&head_tail(&body, max_bytes, Some("read fewer pages at a time")).text);
    let last = shown.last().copied().unwrap_or(0);
    let next = wanted
        .iter()
        .find(|&&p| p > last)
        .copied()
        .or_else(|| (pages.is_none() && last < count).then_some(last + 1));
    if let Some(next) = next {
        let why = if capped {
            "output limit reached"
        } else {
            "more pages follow"
        };
        out.push_str(&format!("[{why}; continue with pages=\"{next}-\"]\n"));
    }
    Ok(ToolResult::ok(out).with_data(json!({
        "path": rel.as_str(),
        "kind": "pdf",
        "pages": count,
        "shown_pages": shown,
        "next_page": next,
    })))
}

/// `1-3, 5` for a sorted list of pages.
fn ranges(pages: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < pages.len() {
        let start = pages[i];
        let mut end = start;
        while i + 1 < pages.len() && pages[i + 1] == end + 1 {
            i += 1;
            end = pages[i];
        }
        parts.push(if start == end {
            format!("page {start}")
        } else {
            format!("pages {start}-{end}")
        });
        i += 1;
    }
    parts.join(", ")
}

/// A notebook's cells in order, numbered, each code cell followed by its outputs.
fn notebook_result(
    rel: &RelPath,
    content: &[u8],
    max_bytes: usize,
) -> Result<ToolResult, ToolError> {
    let nb: serde_json::Value = serde_json::from_slice(content).map_err(|e| {
        ToolError::InvalidArguments(format!(
            "read_file: {rel} is named .ipynb but is not valid notebook JSON ({e}); read it \
             as text with run_command `cat {rel}`"
        ))
    })?;
    let cells = nb["cells"].as_array().cloned().unwrap_or_default();
    let language = nb["metadata"]["kernelspec"]["language"]
        .as_str()
        .or_else(|| nb["metadata"]["language_info"]["name"].as_str())
        .unwrap_or("unknown");
    let mut body = String::new();
    for (i, cell) in cells.iter().enumerate() {
        let kind = cell["cell_type"].as_str().unwrap_or("unknown");
        let exec = match cell["execution_count"].as_u64() {
            Some(n) => format!(" (execution {n})"),
            None => String::new(),
        };
        body.push_str(&format!("--- cell {} [{kind}]{exec} ---\n", i + 1));
        push_line_block(&mut body, &joined(&cell["source"]));
        let outputs = cell["outputs"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        if !outputs.is_empty() {
            body.push_str("--- output ---\n");
        }
        for output in outputs {
            push_line_block(&mut body, &output_text(output));
        }
    }
    let text = format!(
        "Notebook {rel}: {} cells ({language}).\n{}",
        cells.len(),
        head_tail(
            &body,
            max_bytes,
            Some("read the notebook's JSON with offset")
        )
        .text
    );
    Ok(ToolResult::ok(text).with_data(json!({
        "path": rel.as_str(),
        "kind": "notebook",
        "cells": cells.len(),
        "language": language,
    })))
}

/// One output's text: streams and text/plain results as they are, images as a note.
fn output_text(output: &serde_json::Value) -> String {
    match output["output_type"].as_str() {
        Some("stream") => joined(&output["text"]),
        Some("error") => {
            let tb: Vec<String> = output["traceback"]
                .as_array()
                .map(|t| {
                    t.iter()
                        .filter_map(|l| l.as_str())
                        .map(strip_ansi)
                        .collect()
                })
                .unwrap_or_default();
            if tb.is_empty() {
                format!(
                    "{}: {}",
                    output["ename"].as_str().unwrap_or("Error"),
                    output["evalue"].as_str().unwrap_or("")
                )
            } else {
                tb.join("\n")
            }
        }
        _ => {
            let data = &output["data"];
            let mut parts = Vec::new();
            if let Some(map) = data.as_object() {
                for mime in map.keys().filter(|m| m.starts_with("image/")) {
                    parts.push(format!("[image: {mime}]"));
                }
            }
            if !data["text/plain"].is_null() {
                parts.push(joined(&data["text/plain"]));
            } else if parts.is_empty() && data.is_object() {
                let kinds: Vec<&str> = data
                    .as_object()
                    .map(|m| m.keys().map(String::as_str).collect())
                    .unwrap_or_default();
                parts.push(format!("[output: {}]", kinds.join(", ")));
            }
            parts.join("\n")
        }
    }
}

/// A notebook string field: one string or a list of lines.
fn joined(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Array(parts) => parts.iter().filter_map(|p| p.as_str()).collect(),
        _ => String::new(),
    }
}

/// `text` with a final newline.
fn push_line_block(out: &mut String, text: &str) {
    out.push_str(text);
    if !text.is_empty() && !text.ends_with('\n') {
        out.push('\n');
    }
}

/// Tracebacks carry terminal colour codes; a model reads them as noise.
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
