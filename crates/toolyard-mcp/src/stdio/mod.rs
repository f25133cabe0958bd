//! The stdio transport's guard: every line a client sends gets an answer.
//!
//! rmcp's line codec drops a line it cannot parse without a reply, so a client that sent a
//! lone surrogate (`"\ud800"`), JSON nested deeper than serde's limit, or plain garbage waits
//! for ever. This guard sits between stdin and rmcp: lines rmcp can read pass through
//! unchanged; a lone surrogate escape is replaced by U+FFFD (the call is then answered like any
//! other); anything else unreadable gets a JSON-RPC error at once (`-32700`, or `-32600` for a
//! line over [`MAX_LINE_BYTES`]), with the request's id when it can be recovered, else null.
//! The server's replies and the guard's own errors share one writer, line by line.
//!
//! rmcp also holds a request id (and a progress token) as an `i64` or a string, so an id such as
//! 2^64, `1.5` or `1e400` would be refused, or echoed changed. The guard swaps such a number
//! for a stand-in string on the way in and puts the number back, byte for byte as the client
//! wrote it, in every line on the way out ([`RawIds`]).
//!
//! The front door ([`front`]) reads the lines this guard judges and answers some requests
//! itself; the rest go on to rmcp.

use std::collections::HashMap;
use std::io::{BufRead, Read, Write};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use rmcp::ServiceExt;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, DuplexStream};
use tokio::sync::mpsc;

use crate::{ServeError, ToolyardServer};

mod front;

/// The longest line accepted (a `write_file` of a large file is one line).
pub const MAX_LINE_BYTES: usize = 64 * 1024 * 1024;

/// Room in each pipe between the guard and rmcp.
const PIPE_BYTES: usize = 256 * 1024;

/// What to do with one line from the client.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// A message rmcp reads (this line, or it with lone surrogates replaced), parsed.
    Message(Vec<u8>, Box<ClientJsonRpcMessage>),
    /// Hand this line to rmcp (valid JSON, not a message: rmcp answers it as it sees fit).
    Forward(Vec<u8>),
    /// Answer the client with this JSON-RPC error, do not hand anything on.
    Reply(Value),
    /// Nothing to do (a blank line).
    Skip,
}

/// Judge one line (without its newline); ids rmcp cannot carry as sent are swapped for
/// stand-ins in `ids`.
pub(crate) fn judge(line: &[u8], ids: &RawIds) -> Verdict {
    let trimmed = line.trim_ascii();
    if trimmed.is_empty() {
        return Verdict::Skip;
    }
    let swapped = ids.swap_in(trimmed);
    let (line, trimmed) = match &swapped {
        Some(fixed) => (fixed.as_slice(), fixed.as_slice()),
        None => (line, trimmed),
    };
    if let Some(message) = parse(trimmed) {
        return Verdict::Message(line.to_vec(), message);
    }
    let error = match serde_json::from_slice::<Value>(trimmed) {
        Ok(value) => return judge_json(line, &value),
        Err(e) => e,
    };
    if let Some(fixed) = replace_lone_surrogates(trimmed)
        && let Some(message) = parse(&fixed)
    {
        return Verdict::Message(fixed, message);
    }
    Verdict::Reply(error_reply(
        sniff_id(trimmed),
        -32700,
        format!("Parse error: {error}; send one JSON-RPC message per line, as UTF-8 JSON"),
    ))
}

/// Valid JSON that is not a message rmcp can read. A request (a method and an id) gets its
/// error here, with its id (rmcp's own answer would drop the id); anything else goes on to rmcp,
/// which answers `-32600` or, for a notification, nothing.
fn judge_json(line: &[u8], value: &Value) -> Verdict {
    let method = value.get("method").and_then(Value::as_str);
    if let (Some(method), Some(bad)) = (
        method,
        value
            .get("id")
            .filter(|id| !(id.is_string() || id.is_number())),
    ) {
        // rmcp would answer without any id, which no client can match; JSON-RPC answers an
        // id it cannot use with null.
        return Verdict::Reply(error_reply(
            None,
            -32600,
            format!(
                "Invalid Request: the id of `{method}` is {}; a request's id must be a string or \
                 a number (MCP does not allow null), and a notification has none",
                match bad {
                    Value::Null => "null",
                    Value::Bool(_) => "a boolean",
                    Value::Array(_) => "an array",
                    _ => "an object",
                }
            ),
        ));
    }
    let id = value
        .get("id")
        .filter(|id| id.is_string() || id.is_number());
    match (method, id) {
        (Some(method), Some(id)) => {
            let why = serde_json::from_value::<ClientJsonRpcMessage>(value.clone())
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            Verdict::Reply(error_reply(
                Some(id.clone()),
                -32602,
                format!("Invalid params for `{method}`: {why}"),
            ))
        }
        _ => Verdict::Forward(line.to_vec()),
    }
}

fn parse(line: &[u8]) -> Option<Box<ClientJsonRpcMessage>> {
    serde_json::from_slice(line).ok()
}

fn error_reply(id: Option<Value>, code: i64, message: String) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id.unwrap_or(Value::Null),
        "error": {"code": code, "message": message},
    })
}

/// `\uD800`-`\uDFFF` escapes that do not form a pair, replaced by `\uFFFD`; `None` when the line
/// has none.
fn replace_lone_surrogates(line: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(line).ok()?;
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut changed = false;
    let mut i = 0;
    let unit_at = |i: usize| -> Option<u16> {
        let esc = bytes.get(i..i + 6)?;
        if esc[0] != b'\\' || !matches!(esc[1], b'u' | b'U') {
            return None;
        }
        u16::from_str_radix(std::str::from_utf8(&esc[2..]).ok()?, 16).ok()
    };
    while i < bytes.len() {
        if bytes[i] == b'\\' {
            // Count the backslashes before: an escaped backslash is not an escape's start.
            let run = bytes[i..].iter().take_while(|&&b| b == b'\\').count();
            if run % 2 == 0 {
                out.push_str(&text[i..i + run]);
                i += run;
                continue;
            }
            out.push_str(&text[i..i + run - 1]);
            i += run - 1;
            if let Some(unit) = unit_at(i) {
                let high = (0xD800..0xDC00).contains(&unit);
                let low = (0xDC00..0xE000).contains(&unit);
                let paired = high && unit_at(i + 6).is_some_and(|u| (0xDC00..0xE000).contains(&u));
                if paired {
                    out.push_str(&text[i..i + 12]);
                    i += 12;
                    continue;
                }
                if high || low {
                    out.push_str("\\ufffd");
                    changed = true;
                    i += 6;
                    continue;
                }
            }
            out.push('\\');
            i += 1;
            continue;
        }
        let ch_len = text[i..].chars().next().map_or(1, char::len_utf8);
        out.push_str(&text[i..i + ch_len]);
        i += ch_len;
    }
    changed.then(|| out.into_bytes())
}

/// The top-level `"id"` of a line that is not valid JSON, when it is a number or a string.
fn sniff_id(line: &[u8]) -> Option<Value> {
    let mut depth = 0usize;
    let mut i = 0;
    while i < line.len() {
        match line[i] {
            b'"' => {
                let start = i;
                i += 1;
                while i < line.len() && line[i] != b'"' {
                    i += if line[i] == b'\\' { 2 } else { 1 };
                }
                if depth == 1 && line.get(start..=i) == Some(b"\"id\"") {
                    let rest = &line[(i + 1).min(line.len())..];
                    let rest = rest.trim_ascii_start().strip_prefix(b":")?;
                    let mut stream = serde_json::Deserializer::from_slice(rest.trim_ascii_start())
                        .into_iter::<Value>();
                    return match stream.next() {
                        Some(Ok(v @ (Value::Number(_) | Value::String(_)))) => Some(v),
                        _ => None,
                    };
                }
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    None
}

/// Numbers sent as ids (a request's `id`, a progress token, the `requestId` a cancellation
/// names) that rmcp cannot carry as sent, each swapped for a stand-in string while the server
/// holds it, and put back, as the client wrote it, in what goes out.
pub(crate) struct RawIds {
    /// `"toolyard-raw-id-<nonce>-`: what every stand-in starts with, quote included.
    prefix: String,
    next: std::sync::atomic::AtomicU64,
    /// Stand-in (without quotes) → the client's bytes.
    held: Mutex<HashMap<String, Held>>,
}

/// One swapped number.
struct Held {
    raw: Vec<u8>,
    /// A request's id, released once its response is out (a progress token stays while
    /// notifications may name it; those are few and bounded by [`RawIds::MAX_HELD`]).
    is_id: bool,
    /// When it was swapped in (the oldest tokens go first past the bound).
    serial: u64,
}

impl Default for RawIds {
    fn default() -> Self {
        use std::hash::{BuildHasher, Hasher};
        // Unguessable enough that no client string id collides with a stand-in by chance.
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        Self {
            prefix: format!("\"toolyard-raw-id-{:016x}-", h.finish()),
            next: std::sync::atomic::AtomicU64::new(0),
            held: Mutex::new(HashMap::new()),
        }
    }
}

impl RawIds {
    /// Most stand-ins held at once; past it the oldest progress tokens are forgotten.
    const MAX_HELD: usize = 4096;

    /// `line` with its id, progress token and cancelled request id swapped for stand-ins
    /// where rmcp could not carry them as sent; `None` when nothing needs it.
    pub(crate) fn swap_in(&self, line: &[u8]) -> Option<Vec<u8>> {
        let mut swaps: Vec<(std::ops::Range<usize>, String)> = Vec::new();
        if let Some(span) = member_span(line, "id")
            && needs_stand_in(&line[span.clone()])
        {
            swaps.push((span.clone(), self.hold(&line[span], true)));
        }
        if let Some(params) = member_span(line, "params") {
            let inner = &line[params.clone()];
            let at = |r: std::ops::Range<usize>| params.start + r.start..params.start + r.end;
            if let Some(meta) = member_span(inner, "_meta")
                && let Some(token) = member_span(&inner[meta.clone()], "progressToken")
            {
                let span = at(meta.start + token.start..meta.start + token.end);
                if needs_stand_in(&line[span.clone()]) {
                    swaps.push((span.clone(), self.hold(&line[span], false)));
                }
            }
            if let Some(req) = member_span(inner, "requestId") {
                let span = at(req);
                if needs_stand_in(&line[span.clone()])
                    && let Some(stand_in) = self.held_for(&line[span.clone()])
                {
                    swaps.push((span, stand_in));
                }
            }
        }
        if swaps.is_empty() {
            return None;
        }
        swaps.sort_by_key(|(r, _)| r.start);
        let mut out = Vec::with_capacity(line.len() + 64);
        let mut at = 0;
        for (span, stand_in) in swaps {
            out.extend_from_slice(&line[at..span.start]);
            out.extend_from_slice(stand_in.as_bytes());
            at = span.end;
        }
        out.extend_from_slice(&line[at..]);
        Some(out)
    }

    /// Hold `raw`; its stand-in, quoted.
    fn hold(&self, raw: &[u8], is_id: bool) -> String {
        let serial = self.next.fetch_add(1, Ordering::Relaxed);
        let quoted = format!("{}{serial}\"", self.prefix);
        let key = quoted[1..quoted.len() - 1].to_string();
        if let Ok(mut held) = self.held.lock() {
            if held.len() >= Self::MAX_HELD
                && let Some(oldest) = held
                    .iter()
                    .filter(|(_, h)| !h.is_id)
                    .min_by_key(|(_, h)| h.serial)
                    .map(|(k, _)| k.clone())
            {
                held.remove(&oldest);
            }
            held.insert(
                key,
                Held {
                    raw: raw.to_vec(),
                    is_id,
                    serial,
                },
            );
        }
        quoted
    }

    /// The stand-in (quoted) of a request id held as `raw`, if one is.
    fn held_for(&self, raw: &[u8]) -> Option<String> {
        let held = self.held.lock().ok()?;
        held.iter()
            .find(|(_, h)| h.is_id && h.raw == raw)
            .map(|(k, _)| format!("\"{k}\""))
    }

    /// `line` (going out) with every stand-in put back as the client's bytes; a request's id
    /// is released once its response carries it.
    pub(crate) fn swap_out<'a>(&self, line: &'a [u8]) -> std::borrow::Cow<'a, [u8]> {
        let prefix = self.prefix.as_bytes();
        if memchr::memmem::find(line, prefix).is_none() {
            return std::borrow::Cow::Borrowed(line);
        }
        let Ok(mut held) = self.held.lock() else {
            return std::borrow::Cow::Borrowed(line);
        };
        let mut out = Vec::with_capacity(line.len());
        let mut at = 0;
        while let Some(found) = memchr::memmem::find(&line[at..], prefix) {
            let start = at + found;
            let digits = line[start + prefix.len()..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count();
            let end = start + prefix.len() + digits;
            let key = std::str::from_utf8(&line[start + 1..end]).unwrap_or_default();
            out.extend_from_slice(&line[at..start]);
            match held.get(key) {
                Some(h) if line.get(end) == Some(&b'"') => {
                    out.extend_from_slice(&h.raw);
                    // The response to that request: `"id":` right before it.
                    if h.is_id && out[..out.len() - h.raw.len()].ends_with(b"\"id\":") {
                        held.remove(key);
                    }
                    at = end + 1;
                }
                _ => {
                    out.extend_from_slice(&line[start..end]);
                    at = end;
                }
            }
        }
        out.extend_from_slice(&line[at..]);
        std::borrow::Cow::Owned(out)
    }
}

/// Whether the JSON value `raw` is a number rmcp would not carry as sent: anything but an
/// integer in `i64`'s range written the way serde writes it back (`1.0`, `1e3`, `-0`, 2^64).
fn needs_stand_in(raw: &[u8]) -> bool {
    let is_number = raw
        .first()
        .is_some_and(|b| *b == b'-' || b.is_ascii_digit());
    is_number
        && std::str::from_utf8(raw)
            .ok()
            .and_then(|s| s.parse::<i64>().ok().map(|n| n.to_string() != s))
            .unwrap_or(true)
}

/// The byte range of the value of `key` in the JSON object `text` (its last occurrence, as a
/// parser keeps), found by scanning (numbers are not parsed, so any size is fine); `None` when
/// `text` is not an object or has no such key.
fn member_span(text: &[u8], key: &str) -> Option<std::ops::Range<usize>> {
    let mut i = skip_ws(text, 0);
    if text.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    let mut found = None;
    loop {
        i = skip_ws(text, i);
        match text.get(i) {
            Some(b'"') => {}
            _ => return found,
        }
        let key_end = end_of_value(text, i)?;
        let name = &text[i..key_end];
        i = skip_ws(text, key_end);
        if text.get(i) != Some(&b':') {
            return found;
        }
        i = skip_ws(text, i + 1);
        let value_end = end_of_value(text, i)?;
        let same = name.get(1..name.len() - 1) == Some(key.as_bytes())
            || (name.contains(&b'\\')
                && serde_json::from_slice::<String>(name).is_ok_and(|n| n == key));
        if same {
            found = Some(i..value_end);
        }
        i = skip_ws(text, value_end);
        match text.get(i) {
            Some(b',') => i += 1,
            _ => return found,
        }
    }
}

fn skip_ws(text: &[u8], mut i: usize) -> usize {
    while text
        .get(i)
        .is_some_and(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
    {
        i += 1;
    }
    i
}

/// Where the JSON value starting at `i` ends (exclusive), by its brackets and quotes.
fn end_of_value(text: &[u8], i: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut j = i;
    loop {
        match *text.get(j)? {
            b'"' => {
                j += 1;
                loop {
                    match *text.get(j)? {
                        b'\\' => j += 2,
                        b'"' => break,
                        _ => j += 1,
                    }
                }
                j += 1;
                if depth == 0 {
                    return Some(j);
                }
            }
            b'{' | b'[' => {
                depth += 1;
                j += 1;
            }
            b'}' | b']' => {
                if depth == 0 {
                    // A scalar ended by its container's close.
                    return (j > i).then_some(j);
                }
                depth -= 1;
                j += 1;
                if depth == 0 {
                    return Some(j);
                }
            }
            b',' | b' ' | b'\t' | b'\r' | b'\n' if depth == 0 => return (j > i).then_some(j),
            _ => j += 1,
        }
    }
}

/// The answer to a line longer than [`MAX_LINE_BYTES`] (`start` is its beginning).
fn too_long(start: &[u8]) -> Value {
    error_reply(
        sniff_id(start),
        -32600,
        format!(
            "Invalid Request: a message longer than {MAX_LINE_BYTES} bytes; send less per call \
             (e.g. write a large file in parts)"
        ),
    )
}

/// Copy rmcp's reply lines to the writer thread.
async fn pump_replies(replies: DuplexStream, lines: mpsc::Sender<Vec<u8>>) {
    let mut replies = tokio::io::BufReader::new(replies);
    loop {
        let mut line = Vec::new();
        match replies.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                if lines.send(line).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// stdout, shared by the front thread and the writer thread, and the ids swapped on the way
/// in, put back on the way out.
struct Out {
    fd: Mutex<Fd>,
    ids: RawIds,
}

impl Out {
    /// Write one whole line (with its newline) before any other.
    fn write_line(&self, line: &[u8]) -> std::io::Result<()> {
        let line = self.ids.swap_out(line);
        let mut fd = self.fd.lock().map_err(|_| std::io::ErrorKind::BrokenPipe)?;
        fd.write_all(&line)
    }

    /// Write `value` as one line.
    fn write_value(&self, value: &Value) -> std::io::Result<()> {
        let mut text = value.to_string().into_bytes();
        text.push(b'\n');
        self.write_line(&text)
    }

    /// Write an answer of the front as one line.
    fn write_answer(&self, answer: ServerJsonRpcMessage) -> std::io::Result<()> {
        match serde_json::to_vec(&answer) {
            Ok(mut text) => {
                text.push(b'\n');
                self.write_line(&text)
            }
            Err(e) => self.write_value(&error_reply(
                None,
                -32603,
                format!("Internal error: the reply could not be encoded: {e}"),
            )),
        }
    }
}

/// A duplicate of one of this process's standard descriptors, read and written as blocking
/// even if the client handed it over non-blocking (then it waits in `poll`).
pub(crate) struct Fd(std::fs::File);

impl Fd {
    /// A duplicate of `fd`.
    pub(crate) fn dup(fd: std::os::fd::RawFd) -> std::io::Result<Self> {
        use std::os::fd::BorrowedFd;
        // SAFETY: 0 and 1 stay open for the life of the process; the borrow only lasts the dup.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        Ok(Self(std::fs::File::from(borrowed.try_clone_to_owned()?)))
    }

    /// `op` on the file, waiting in `poll` for `events` while it would block and retrying
    /// when interrupted.
    fn blocking<T>(
        &mut self,
        events: nix::poll::PollFlags,
        mut op: impl FnMut(&mut std::fs::File) -> std::io::Result<T>,
    ) -> std::io::Result<T> {
        use std::os::fd::AsFd;
        loop {
            match op(&mut self.0) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    let mut fds = [nix::poll::PollFd::new(self.0.as_fd(), events)];
                    let _ = nix::poll::poll(&mut fds, nix::poll::PollTimeout::NONE);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                other => return other,
            }
        }
    }
}

impl Read for Fd {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.blocking(nix::poll::PollFlags::POLLIN, |f| f.read(buf))
    }
}

impl Write for Fd {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.blocking(nix::poll::PollFlags::POLLOUT, |f| f.write(buf))
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

enum LineRead {
    Line,
    TooLong,
    Eof,
}

/// Read one line into `buf` (without its newline); past [`MAX_LINE_BYTES`], keep only the
/// start (for its id) and skip the rest of the line.
fn read_line_capped(input: &mut impl BufRead, buf: &mut Vec<u8>) -> std::io::Result<LineRead> {
    let mut too_long = false;
    loop {
        let chunk = input.fill_buf()?;
        if chunk.is_empty() {
            return Ok(match (too_long, buf.is_empty()) {
                (true, _) => LineRead::TooLong,
                (false, true) => LineRead::Eof,
                (false, false) => LineRead::Line,
            });
        }
        let (take, done) = match memchr::memchr(b'\n', chunk) {
            Some(i) => (i, true),
            None => (chunk.len(), false),
        };
        if !too_long {
            let room = MAX_LINE_BYTES - buf.len();
            if take > room {
                too_long = true;
                buf.extend_from_slice(&chunk[..room.min(4096)]);
            } else {
                buf.extend_from_slice(&chunk[..take]);
            }
        }
        input.consume(take + usize::from(done));
        if done {
            return Ok(if too_long {
                LineRead::TooLong
            } else {
                LineRead::Line
            });
        }
    }
}

/// Serve `server`'s connection on `input` and `output` (this process's stdin and stdout) until
/// the client closes it: the guard and the front door in front of rmcp.
pub(crate) async fn serve(server: ToolyardServer, input: Fd, output: Fd) -> Result<(), ServeError> {
    let session = server.session().to_string();
    let dispatcher = server.shared.dispatcher.clone();
    tracing::info!(session = %session, "serving MCP over stdio");
    let runtime = tokio::runtime::Handle::current();
    let front = Arc::new(front::Prompt::new(server.clone(), runtime.clone()));
    let (transport, writer) =
        front::guarded(runtime, front, input, output).map_err(|source| ServeError::Io {
            context: "starting the stdio transport".into(),
            source,
        })?;
    let served = match server.serve(transport).await {
        Ok(running) => running
            .waiting()
            .await
            .map(|_| ())
            .map_err(|e| ServeError::Task(e.to_string())),
        // A client that connects and leaves before its first request (a health probe, an
        // editor that changed its mind) is a normal end, not a failure.
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(why)) => {
            tracing::debug!(%why, "client closed the connection before its first request");
            Ok(())
        }
        Err(e) => Err(ServeError::Init(e.to_string())),
    };
    // The client is gone: so are the processes it started.
    dispatcher.end_session(&session).await;
    // The last replies reach stdout before we return.
    let _ = tokio::task::spawn_blocking(move || writer.join()).await;
    served
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_valid_message_passes_unchanged() {
        let line = br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
        match judge(line, &RawIds::default()) {
            Verdict::Message(text, message) => {
                assert_eq!(text, line.to_vec());
                assert!(matches!(*message, ClientJsonRpcMessage::Request(_)));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn garbage_gets_a_parse_error_with_a_null_id() {
        match judge(b"garbage", &RawIds::default()) {
            Verdict::Reply(v) => {
                assert_eq!(v["error"]["code"], -32700);
                assert_eq!(v["id"], Value::Null);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_lone_surrogate_is_replaced_and_the_call_goes_on() {
        let line = br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"a\ud800b"}}}"#;
        match judge(line, &RawIds::default()) {
            Verdict::Message(fixed, _) => {
                let v: Value = serde_json::from_slice(&fixed).unwrap_or_default();
                assert_eq!(v["params"]["arguments"]["path"], "a\u{fffd}b");
            }
            other => panic!("{other:?}"),
        }
        // A proper pair and an escaped backslash are left alone.
        assert_eq!(
            replace_lone_surrogates(br#"{"a":"\ud83d\ude00 \\ud800"}"#),
            None
        );
    }

    #[test]
    fn deep_nesting_gets_an_error_carrying_the_request_id() {
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{{"name":"x","arguments":{{"a":{}{}}}}}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        match judge(deep.as_bytes(), &RawIds::default()) {
            Verdict::Reply(v) => {
                assert_eq!(v["error"]["code"], -32700);
                assert_eq!(v["id"], 4);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_request_with_bad_params_gets_an_error_with_its_id() {
        let line = br#"{"jsonrpc":"2.0","id":"p1","method":"tools/call","params":"not an object"}"#;
        match judge(line, &RawIds::default()) {
            Verdict::Reply(v) => {
                assert_eq!(v["error"]["code"], -32602);
                assert_eq!(v["id"], "p1");
            }
            other => panic!("{other:?}"),
        }
    }

    /// The answer to `line` once swapped in and answered by a server that echoes the id, as it
    /// goes out.
    fn round_trip(ids: &RawIds, line: &str) -> String {
        let Verdict::Message(text, message) = judge(line.as_bytes(), ids) else {
            panic!("{line} is a message once its id is swapped");
        };
        let Some((_, id)) = message.into_request() else {
            panic!("{line} is a request");
        };
        drop(text);
        let reply = ServerJsonRpcMessage::response(rmcp::model::ServerResult::empty(()), id);
        let bytes = serde_json::to_vec(&reply).unwrap_or_default();
        String::from_utf8_lossy(&ids.swap_out(&bytes)).into_owned()
    }

    #[test]
    fn ids_rmcp_cannot_hold_come_back_as_sent() {
        let ids = RawIds::default();
        for raw in [
            "18446744073709551616",
            "18446744073709551615",
            "9223372036854775808",
            "-9223372036854775809",
            "123456789012345678901234567890",
            "1.5",
            "1.0",
            "1e3",
            "1E400",
            "-0",
            "0.1e-5",
        ] {
            let line = format!(r#"{{"jsonrpc":"2.0","id":{raw},"method":"ping"}}"#);
            let out = round_trip(&ids, &line);
            assert!(out.contains(&format!(r#""id":{raw},"#)), "{raw}: {out}");
        }
        // Each stand-in is released with its response.
        assert!(ids.held.lock().map(|h| h.is_empty()).unwrap_or(false));
        // Ids rmcp holds as they are pass untouched.
        for raw in ["0", "42", "-7", "9223372036854775807", r#""s""#] {
            let line = format!(r#"{{"jsonrpc":"2.0","id":{raw},"method":"ping"}}"#);
            assert!(ids.swap_in(line.as_bytes()).is_none(), "{raw}");
            assert!(round_trip(&ids, &line).contains(&format!(r#""id":{raw},"#)));
        }
    }

    #[test]
    fn a_huge_progress_token_and_the_cancellation_of_a_huge_id_are_carried() {
        let ids = RawIds::default();
        let call = r#"{"jsonrpc":"2.0","id":18446744073709551616,"method":"tools/call","params":{"name":"x","_meta":{"progressToken":1e400}}}"#;
        let Verdict::Message(text, _) = judge(call.as_bytes(), &ids) else {
            panic!("a call with a huge id and token is a message");
        };
        let text = String::from_utf8_lossy(&text).into_owned();
        assert!(
            !text.contains("1e400") && !text.contains("18446744073709551616"),
            "{text}"
        );
        let cancel = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":18446744073709551616}}"#;
        let Verdict::Message(swapped, _) = judge(cancel.as_bytes(), &ids) else {
            panic!("the cancellation is a message");
        };
        // It names the same stand-in the call carries.
        let v: Value = serde_json::from_slice(&swapped).unwrap_or_default();
        let call: Value = serde_json::from_str(&text).unwrap_or_default();
        assert_eq!(v["params"]["requestId"], call["id"]);
        // A progress notification carries the token back as sent.
        let token = call["params"]["_meta"]["progressToken"].to_string();
        let note = format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":{token},"progress":1}}}}"#
        );
        let out = ids.swap_out(note.as_bytes());
        assert!(
            String::from_utf8_lossy(&out).contains(r#""progressToken":1e400,"#),
            "{}",
            String::from_utf8_lossy(&out)
        );
    }

    #[test]
    fn a_null_or_boolean_id_gets_an_invalid_request_answer_with_a_null_id() {
        for raw in ["null", "true", "[1]", "{}"] {
            let line = format!(r#"{{"jsonrpc":"2.0","id":{raw},"method":"ping"}}"#);
            match judge(line.as_bytes(), &RawIds::default()) {
                Verdict::Reply(v) => {
                    assert_eq!(v["error"]["code"], -32600, "{raw}");
                    assert_eq!(v["id"], Value::Null, "{raw}");
                    assert!(v.as_object().is_some_and(|o| o.contains_key("id")));
                }
                other => panic!("{raw}: {other:?}"),
            }
        }
    }

    fn json_number() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        (
            any::<bool>(),
            "(0|[1-9][0-9]{0,40})",
            proptest::option::of("[0-9]{1,20}"),
            proptest::option::of(("[eE]", "[+-]?", "[0-9]{1,4}")),
        )
            .prop_map(|(neg, int, frac, exp)| {
                let mut s = String::new();
                if neg {
                    s.push('-');
                }
                s.push_str(&int);
                if let Some(f) = frac {
                    s.push('.');
                    s.push_str(&f);
                }
                if let Some((e, sign, d)) = exp {
                    s.push_str(&e);
                    s.push_str(&sign);
                    s.push_str(&d);
                }
                s
            })
    }

    proptest::proptest! {
        /// Whatever number a client sends as an id, among whatever other members, the answer
        /// carries exactly those bytes as its id.
        #[test]
        fn any_numeric_id_is_echoed_byte_for_byte(
            raw in json_number(),
            before in proptest::collection::btree_map("[a-z]{1,6}", proptest::arbitrary::any::<i32>(), 0..3),
            spaces in "[ \t]{0,2}",
        ) {
            let ids = RawIds::default();
            let mut members: Vec<String> = before
                .iter()
                .filter(|(k, _)| !matches!(k.as_str(), "id" | "method" | "jsonrpc" | "params"))
                .map(|(k, v)| format!(r#""x{k}":{v}"#))
                .collect();
            members.push(format!(r#""id"{spaces}:{spaces}{raw}"#));
            members.push(r#""jsonrpc":"2.0""#.into());
            members.push(r#""method":"ping""#.into());
            let line = format!("{{{}}}", members.join(","));
            let out = round_trip(&ids, &line);
            let want = format!(r#""id":{raw},"#);
            proptest::prop_assert!(out.contains(&want), "{} -> {}", line, out);
        }

        /// The scanner finds a member's value exactly as serde reads it, in any JSON object.
        #[test]
        fn member_span_agrees_with_serde(
            value in proptest::arbitrary::any::<std::collections::BTreeMap<String, Option<i64>>>(),
            nested in "[a-z\"\\\\{}\\[\\],: ]{0,20}",
        ) {
            let mut obj = serde_json::Map::new();
            for (k, v) in &value {
                obj.insert(k.clone(), json!(v));
            }
            obj.insert("id".into(), json!({"s": nested, "a": [1, {"id": 2}]}));
            let text = Value::Object(obj.clone()).to_string();
            let span = member_span(text.as_bytes(), "id");
            proptest::prop_assert!(span.is_some(), "{}", text);
            let span = span.unwrap_or(0..0);
            let got: Value = serde_json::from_slice(&text.as_bytes()[span]).unwrap_or_default();
            proptest::prop_assert_eq!(&got, &obj["id"]);
        }
    }

    #[test]
    fn the_id_is_found_only_at_the_top_level() {
        assert_eq!(
            sniff_id(br#"{"params":{"id":9},"id":"x" garbage"#),
            Some(json!("x"))
        );
        assert_eq!(sniff_id(br#"{"params":{"id":9}"#), None);
    }
}
