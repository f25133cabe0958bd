//! The stdio transport's guard: every line a client sends gets an answer.
//!
//! rmcp's line codec drops a line it cannot parse without a reply, so a client that sent a
//! lone surrogate (`"\ud800"`), JSON nested deeper than serde's limit, or plain garbage waits
//! for ever. This guard sits between stdin and rmcp: lines rmcp can read pass through
//! unchanged; a lone surrogate escape is replaced by U+FFFD (the call is then answered like any
//! other); anything else unreadable gets a JSON-RPC error at once (`-32700`, or `-32600` for a
//! line over [`MAX_LINE_BYTES`]), with the request's id when it can be recovered, else null.
//! The server's replies and the guard's own errors share one writer, line by line.

use rmcp::model::ClientJsonRpcMessage;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// The longest line accepted (a `write_file` of a large file is one line).
pub const MAX_LINE_BYTES: usize = 64 * 1024 * 1024;

/// Room in each pipe between the guard and rmcp.
const PIPE_BYTES: usize = 256 * 1024;

/// What to do with one line from the client.
#[derive(Debug, PartialEq)]
pub(crate) enum Verdict {
    /// Hand this line to rmcp.
    Forward(Vec<u8>),
    /// Answer the client with this JSON-RPC error, do not hand anything on.
    Reply(Value),
    /// Nothing to do (a blank line).
    Skip,
}

/// Judge one line (without its newline).
pub(crate) fn judge(line: &[u8]) -> Verdict {
    let trimmed = line.trim_ascii();
    if trimmed.is_empty() {
        return Verdict::Skip;
    }
    if parses(trimmed) {
        return Verdict::Forward(line.to_vec());
    }
    let error = match serde_json::from_slice::<Value>(trimmed) {
        Ok(value) => return judge_json(line, &value),
        Err(e) => e,
    };
    if let Some(fixed) = replace_lone_surrogates(trimmed)
        && parses(&fixed)
    {
        return Verdict::Forward(fixed);
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

fn parses(line: &[u8]) -> bool {
    serde_json::from_slice::<ClientJsonRpcMessage>(line).is_ok()
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

/// This process's stdin and stdout for the transport. A pipe or a socket (what clients spawn
/// servers with) is driven by the reactor directly; tokio's own stdin and stdout hand every
/// read and write to a blocking-pool thread, two thread hand-offs per call. Anything else (a
/// file, a terminal) keeps tokio's.
pub(crate) fn std_streams() -> (
    Box<dyn AsyncRead + Unpin + Send>,
    Box<dyn AsyncWrite + Unpin + Send>,
) {
    let input = reactor_stream(0)
        .map(|s| -> Box<dyn AsyncRead + Unpin + Send> {
            match s {
                Stream::Pipe(f) => match tokio::net::unix::pipe::Receiver::from_file(f) {
                    Ok(r) => Box::new(r),
                    Err(_) => Box::new(tokio::io::stdin()),
                },
                Stream::Socket(u) => Box::new(u),
            }
        })
        .unwrap_or_else(|| Box::new(tokio::io::stdin()));
    let output = reactor_stream(1)
        .map(|s| -> Box<dyn AsyncWrite + Unpin + Send> {
            match s {
                Stream::Pipe(f) => match tokio::net::unix::pipe::Sender::from_file(f) {
                    Ok(w) => Box::new(w),
                    Err(_) => Box::new(tokio::io::stdout()),
                },
                Stream::Socket(u) => Box::new(u),
            }
        })
        .unwrap_or_else(|| Box::new(tokio::io::stdout()));
    (input, output)
}

enum Stream {
    Pipe(std::fs::File),
    Socket(tokio::net::UnixStream),
}

/// A duplicate of `fd` when it is a pipe or a socket the reactor can drive.
fn reactor_stream(fd: std::os::fd::RawFd) -> Option<Stream> {
    use std::os::fd::{BorrowedFd, OwnedFd};
    use std::os::unix::fs::FileTypeExt;
    // SAFETY: 0 and 1 stay open for the life of the process; the borrow only lasts the dup.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    let owned: OwnedFd = borrowed.try_clone_to_owned().ok()?;
    let file = std::fs::File::from(owned);
    let kind = file.metadata().ok()?.file_type();
    if kind.is_fifo() {
        Some(Stream::Pipe(file))
    } else if kind.is_socket() {
        let std = std::os::unix::net::UnixStream::from(OwnedFd::from(file));
        std.set_nonblocking(true).ok()?;
        tokio::net::UnixStream::from_std(std)
            .ok()
            .map(Stream::Socket)
    } else {
        None
    }
}

/// The guarded stdio transport: the reader and writer rmcp serves on, and the two pump tasks
/// (join them after the service ends so the last replies reach stdout).
pub(crate) fn guarded(
    input: impl AsyncRead + Unpin + Send + 'static,
    output: impl AsyncWrite + Unpin + Send + 'static,
) -> ((DuplexStream, DuplexStream), [JoinHandle<()>; 2]) {
    let (rmcp_in, mut feed) = tokio::io::duplex(PIPE_BYTES);
    let (rmcp_out, replies) = tokio::io::duplex(PIPE_BYTES);
    let (errors_tx, errors_rx) = mpsc::channel::<Value>(64);
    let reader = tokio::spawn(async move {
        let mut input = BufReader::new(input);
        let mut line = Vec::new();
        loop {
            line.clear();
            match read_line_capped(&mut input, &mut line).await {
                Ok(LineRead::Eof) => break,
                Ok(LineRead::TooLong) => {
                    let id = sniff_id(&line);
                    let reply = error_reply(
                        id,
                        -32600,
                        format!(
                            "Invalid Request: a message longer than {MAX_LINE_BYTES} bytes; send \
                             less per call (e.g. write a large file in parts)"
                        ),
                    );
                    if errors_tx.send(reply).await.is_err() {
                        break;
                    }
                }
                Ok(LineRead::Line) => match judge(&line) {
                    Verdict::Skip => {}
                    Verdict::Reply(reply) => {
                        if errors_tx.send(reply).await.is_err() {
                            break;
                        }
                    }
                    Verdict::Forward(mut ok) => {
                        ok.push(b'\n');
                        if feed.write_all(&ok).await.is_err() {
                            break;
                        }
                    }
                },
                Err(e) => {
                    tracing::debug!(error = %e, "stdin closed");
                    break;
                }
            }
        }
        // Dropping `feed` ends rmcp's input: the service finishes what it has and stops.
    });
    let writer = tokio::spawn(write_out(replies, errors_rx, output));
    ((rmcp_in, rmcp_out), [reader, writer])
}

enum LineRead {
    Line,
    TooLong,
    Eof,
}

/// Read one line into `buf` (without its newline); past [`MAX_LINE_BYTES`], keep only the
/// start (for its id) and skip the rest of the line.
async fn read_line_capped(
    input: &mut (impl tokio::io::AsyncBufRead + Unpin),
    buf: &mut Vec<u8>,
) -> std::io::Result<LineRead> {
    let mut too_long = false;
    loop {
        let chunk = input.fill_buf().await?;
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

/// Copy rmcp's replies and the guard's errors to `output`, each a whole line.
async fn write_out(
    replies: DuplexStream,
    mut errors: mpsc::Receiver<Value>,
    mut output: impl AsyncWrite + Unpin,
) {
    let mut replies = BufReader::new(replies);
    let mut line = Vec::new();
    let mut replies_open = true;
    loop {
        line.clear();
        tokio::select! {
            read = replies.read_until(b'\n', &mut line), if replies_open => match read {
                Ok(0) | Err(_) => replies_open = false,
                Ok(_) => {
                    if output.write_all(&line).await.is_err() || output.flush().await.is_err() {
                        return;
                    }
                }
            },
            error = errors.recv() => match error {
                Some(reply) => {
                    let mut text = reply.to_string().into_bytes();
                    text.push(b'\n');
                    if output.write_all(&text).await.is_err() || output.flush().await.is_err() {
                        return;
                    }
                }
                // The reader is gone; finish once rmcp's replies are all out.
                None if replies_open => {
                    while let Ok(n) = replies.read_until(b'\n', &mut line).await {
                        if n == 0 || output.write_all(&line).await.is_err() {
                            break;
                        }
                        line.clear();
                    }
                    let _ = output.flush().await;
                    return;
                }
                None => return,
            },
        }
        if !replies_open && errors.is_closed() && errors.is_empty() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_valid_message_passes_unchanged() {
        let line = br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
        assert_eq!(judge(line), Verdict::Forward(line.to_vec()));
    }

    #[test]
    fn garbage_gets_a_parse_error_with_a_null_id() {
        match judge(b"garbage") {
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
        match judge(line) {
            Verdict::Forward(fixed) => {
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
        match judge(deep.as_bytes()) {
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
        match judge(line) {
            Verdict::Reply(v) => {
                assert_eq!(v["error"]["code"], -32602);
                assert_eq!(v["id"], "p1");
            }
            other => panic!("{other:?}"),
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
