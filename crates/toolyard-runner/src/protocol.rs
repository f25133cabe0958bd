//! The job protocol between the router and a runner process: JSON lines over a link (a local
//! child's pipes, or whatever byte stream a `[remote] command` reaches a runner through).
//!
//! Version [`PROTOCOL_VERSION`]. Each side's first line says its version: the router's
//! `hello`, the runner's `ready`. Both sides then ping every `heartbeat_ms` and answer pings
//! with pongs; a side that hears no line for [`MISSED_PINGS`] periods takes the link as dead.
//! No line is longer than the reader's `max_frame` (said in `hello` and `ready`).
//!
//! Router → runner (the runner's stdin):
//! - `{"type":"hello","proto":2,"max_frame":67108864,"heartbeat_ms":5000,"process_base":1,"pre_images":true}` first
//! - `{"type":"ping","seq":4}` / `{"type":"pong","seq":4}`
//! - `{"type":"job","id":"7","session":"s","call_id":"c7","dialect":"loopr","tool":"grep","args":{..},"timeout_ms":60000,"max_timeout_ms":600000,"max_output_bytes":100000}`
//! - `{"type":"cancel","id":"7"}`
//! - `{"type":"end_session","session":"s"}`: kill the session's background processes
//! - `{"type":"reply","rid":3,"result":{"ok":7}}` or `{"type":"reply","rid":3,"result":{"err":{"StaleRead":{"path":"src/a.rs"}}}}`
//!
//! Runner → router (the runner's stdout):
//! - `{"type":"ready","proto":2,"max_frame":67108864,"lane":"no-net","pid":4242,"sandbox":"..."}`
//!   once, after the sandbox is on and the hello read
//! - `{"type":"ping","seq":4}` / `{"type":"pong","seq":4}`
//! - `{"type":"result","id":"7","result":{ToolResult}}`
//! - `{"type":"progress","id":"7","progress":{"progress":3.0,"message":".."}}`
//! - `{"type":"request","rid":3,"op":{"record_read":{..}}}`: a runner may not write Toolyard's
//!   state, so it asks the router to record reads, check and record writes, journal, and undo
//!   (`undo_last`, anthropic's `undo_edit`; answered `{"undone":[UndoOutcome, ...]}`).
//!
//! Internal jobs (dialect [`INTERNAL_DIALECT`], never a model's tool): what the server asks of
//! a remote runner's workspace, so that it never needs the files on its own disk. Each answers
//! a result whose `data` holds what it found, or `{"internal_error": ToolError}`.
//! - `read_state {path}`: the file's bytes (base64) and mode, or absent (undo reads it first);
//! - `restore {path, expect_hash, content, mode}`: write `content` (absent: remove), atomically,
//!   only if the file's hash is `expect_hash` (absent: only if it is absent); answers `hash`;
//! - `hashes {paths, clean}`: each path's hash or null (recovery; `clean` removes the temp files
//!   a killed write left beside them);
//! - `spill_read {name, offset, len}`: a slice of a saved command output (`outputs/NAME`);
//! - `hydrate {git: {url, rev}}` / `hydrate {upload, seq, data, last}`: bring a workspace in,
//!   from a git revision or a tar archive sent in chunks;
//! - `export {base}`: the workspace's changes as a patch (git checkouts only).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolyard_core::{Progress, ToolResult};

/// The dialect of the internal jobs (see the module docs): the dispatcher never gives a
/// model's call this dialect, so a model cannot reach them.
pub const INTERNAL_DIALECT: &str = "internal";

/// The version of this protocol. 1 was the unversioned protocol before the hello (a runner of
/// it sends a `ready` without `proto`).
pub const PROTOCOL_VERSION: u32 = 2;

/// How many heartbeat periods without a line from the other side make a link dead.
pub const MISSED_PINGS: u32 = 3;

/// The heartbeat period unless the catalog's `[remote] heartbeat_ms` says otherwise.
pub const DEFAULT_HEARTBEAT_MS: u64 = 5_000;

/// The largest previous content a remote runner ships with a journal request.
pub const MAX_PRE_IMAGE_BYTES: u64 = toolyard_records::MAX_REMOTE_FILE_BYTES;

/// The most file bytes one line carries (base64 makes it a third larger, well under
/// [`MAX_LINE_BYTES`]); larger content crosses the link in parts of this size.
pub const PART_BYTES: usize = 8 << 20;

fn protocol_one() -> u32 {
    1
}

/// A message to a runner.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToRunner {
    /// The router's first line.
    Hello(Hello),
    /// Are you there? Answered with a pong.
    Ping {
        /// Echoed in the pong.
        seq: u64,
    },
    /// The answer to the runner's ping.
    Pong {
        /// The ping's.
        seq: u64,
    },
    /// Run a tool.
    Job(Job),
    /// Stop a job: cancel its token, which kills its command's process tree.
    Cancel {
        /// The job.
        id: String,
    },
    /// A session ended (its client disconnected): kill its background processes.
    EndSession {
        /// The session.
        session: String,
    },
    /// The answer to a records request.
    Reply {
        /// The request's id.
        rid: u64,
        /// Its outcome.
        result: Reply,
    },
}

/// What the router says first: its protocol and how this link works.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Hello {
    /// The router's [`PROTOCOL_VERSION`].
    pub proto: u32,
    /// The longest line the router reads.
    pub max_frame: u64,
    /// The heartbeat period: the runner pings this often and expects a line from the router
    /// at least every [`MISSED_PINGS`] periods.
    pub heartbeat_ms: u64,
    /// The first background process number this runner hands out (past every id of the
    /// runners before it, so an old id is never reused).
    pub process_base: u64,
    /// Ship the previous content with every journal request: the router cannot read the
    /// runner's workspace (a remote link).
    pub pre_images: bool,
}

/// One call, as a runner receives it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Job {
    /// Unique per runner connection.
    pub id: String,
    /// The session the call belongs to.
    pub session: String,
    /// The call's id (journal, spill files).
    pub call_id: String,
    /// The dialect the tool name belongs to.
    pub dialect: String,
    /// The tool name.
    pub tool: String,
    /// The arguments.
    pub args: Value,
    /// The call's time limit, decided once by the dispatcher (`layers::time_limit`).
    pub timeout_ms: u64,
    /// The catalog's ceiling, for waits a call asks for (a yield, a read).
    pub max_timeout_ms: u64,
    /// Output limit.
    pub max_output_bytes: u64,
}

impl Job {
    /// A job for one call of `tool` (named in `dialect`) in `session`, with the default
    /// output limit and no time yet ([`Job::within`] sets it); the router gives it its `id`.
    pub fn for_call(
        session: impl Into<String>,
        call_id: String,
        (dialect, tool): (&str, &str),
        args: Value,
    ) -> Self {
        Job {
            id: String::new(),
            session: session.into(),
            call_id,
            dialect: dialect.to_string(),
            tool: tool.to_string(),
            args,
            timeout_ms: 0,
            max_timeout_ms: 0,
            max_output_bytes: toolyard_core::DEFAULT_MAX_OUTPUT_BYTES,
        }
    }

    /// This job with its time limit `timeout`, its ceiling `max_timeout_ms` and its output
    /// limit `max_output_bytes`.
    pub fn within(
        mut self,
        timeout: std::time::Duration,
        max_timeout_ms: u64,
        max_output_bytes: u64,
    ) -> Self {
        self.timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        self.max_timeout_ms = max_timeout_ms;
        self.max_output_bytes = max_output_bytes;
        self
    }
}

/// A message from a runner.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FromRunner {
    /// The runner is sandboxed and serving.
    Ready {
        /// Its [`PROTOCOL_VERSION`] (1 when absent: a runner from before the hello).
        #[serde(default = "protocol_one")]
        proto: u32,
        /// The longest line it reads (0 when absent: [`MAX_LINE_BYTES`]).
        #[serde(default)]
        max_frame: u64,
        /// Its lane.
        lane: String,
        /// Its process id.
        pid: u32,
        /// What its sandbox enforces.
        sandbox: String,
    },
    /// A job finished.
    Result {
        /// The job.
        id: String,
        /// Its result.
        result: ToolResult,
    },
    /// A job's progress.
    Progress {
        /// The job.
        id: String,
        /// The report.
        progress: Progress,
    },
    /// Are you there? Answered with a pong.
    Ping {
        /// Echoed in the pong.
        seq: u64,
    },
    /// The answer to the router's ping.
    Pong {
        /// The ping's.
        seq: u64,
    },
    /// The runner asks the router to keep a record.
    Request {
        /// The request's id, echoed in the reply.
        rid: u64,
        /// What to record.
        op: RecordOp,
    },
}

pub use toolyard_records::op::{CommandEntryWire, PreImageWire, RecordOp, Reply};

/// The longest protocol line either side reads (a job's arguments, a result): past it the line
/// is skipped, so a runner cannot make the server hold an unbounded buffer, nor the reverse.
pub const MAX_LINE_BYTES: usize = 64 << 20;

/// One message as a protocol line (newline included), refused when longer than `max` bytes.
pub fn encode<T: Serialize>(msg: &T, max: usize) -> Result<Vec<u8>, String> {
    let mut line = serde_json::to_vec(msg).map_err(|e| format!("cannot encode: {e}"))?;
    if line.len() > max {
        return Err(format!(
            "the message is {} bytes, over the link's frame limit of {max} bytes",
            line.len()
        ));
    }
    line.push(b'\n');
    Ok(line)
}

/// Reads protocol lines of at most [`MAX_LINE_BYTES`]. [`LineReader::next_line`] is cancel
/// safe (its state lives here, its only await is `fill_buf`), so it can race a heartbeat timer.
pub struct LineReader<R> {
    inner: R,
    buf: Vec<u8>,
    too_long: bool,
    ended: bool,
}

impl<R: tokio::io::AsyncBufRead + Unpin> LineReader<R> {
    /// Lines of `inner`.
    pub fn new(inner: R) -> Self {
        Self {
            inner,
            buf: Vec::new(),
            too_long: false,
            ended: false,
        }
    }

    /// The next line (without its newline) that fits the bound, skipping and logging any that
    /// does not or is not UTF-8; `None` at the end of the stream or on an error.
    pub async fn next_line(&mut self) -> Option<String> {
        use tokio::io::AsyncBufReadExt;
        loop {
            if self.ended {
                return None;
            }
            let chunk = match self.inner.fill_buf().await {
                Ok(c) => c,
                Err(_) => {
                    self.ended = true;
                    return None;
                }
            };
            if chunk.is_empty() {
                // The end: a last line without its newline still counts.
                self.ended = true;
                if self.buf.is_empty() || self.too_long {
                    return None;
                }
            } else {
                let (take, done) = match memchr_newline(chunk) {
                    Some(i) => (i + 1, true),
                    None => (chunk.len(), false),
                };
                if !self.too_long && self.buf.len() + take <= MAX_LINE_BYTES + 1 {
                    self.buf.extend_from_slice(&chunk[..take]);
                } else {
                    self.too_long = true;
                    self.buf.clear();
                }
                self.inner.consume(take);
                if !done {
                    continue;
                }
            }
            if std::mem::take(&mut self.too_long) {
                tracing::warn!("skipping a protocol line longer than {MAX_LINE_BYTES} bytes");
                self.buf.clear();
                continue;
            }
            if self.buf.last() == Some(&b'\n') {
                self.buf.pop();
            }
            match String::from_utf8(std::mem::take(&mut self.buf)) {
                Ok(line) => return Some(line),
                Err(_) => tracing::warn!("skipping a protocol line that is not UTF-8"),
            }
        }
    }
}

fn memchr_newline(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == b'\n')
}

#[cfg(test)]
mod line_tests {
    use super::*;

    #[tokio::test]
    async fn a_line_read_in_pieces_survives_a_cancelled_read() {
        let (mut w, r) = tokio::io::duplex(64);
        let mut lines = LineReader::new(tokio::io::BufReader::new(r));
        use tokio::io::AsyncWriteExt;
        w.write_all(b"{\"half\":").await.unwrap();
        // The read is cancelled (a heartbeat tick won the race) with half a line taken in.
        let cut =
            tokio::time::timeout(std::time::Duration::from_millis(50), lines.next_line()).await;
        assert!(cut.is_err());
        w.write_all(b"1}\n").await.unwrap();
        assert_eq!(lines.next_line().await.as_deref(), Some("{\"half\":1}"));
    }

    #[test]
    fn an_old_ready_line_reads_as_protocol_one() {
        let m: FromRunner =
            serde_json::from_str(r#"{"type":"ready","lane":"net","pid":1,"sandbox":"x"}"#).unwrap();
        assert!(matches!(
            m,
            FromRunner::Ready {
                proto: 1,
                max_frame: 0,
                ..
            }
        ));
    }

    #[test]
    fn a_pre_image_round_trips_and_a_forged_one_is_refused() {
        let pre = PreImageWire::new(Some(b"old\r\n\x00bytes"), Some(0o644));
        assert_eq!(pre.decode("a").unwrap().unwrap(), b"old\r\n\x00bytes");
        assert_eq!(PreImageWire::new(None, None).decode("a").unwrap(), None);
        let mut forged = pre.clone();
        forged.hash = Some(toolyard_workspace::hash_bytes(b"other"));
        let e = forged.decode("src/a.rs").unwrap_err().to_string();
        assert!(e.contains("src/a.rs") && e.contains("hash"), "{e}");
    }

    #[test]
    fn an_oversized_message_is_refused_with_its_size() {
        let e = encode(&ToRunner::Ping { seq: 1 }, 5).unwrap_err();
        assert!(e.contains("frame limit of 5 bytes"), "{e}");
        assert!(
            encode(&ToRunner::Ping { seq: 1 }, 100)
                .unwrap()
                .ends_with(b"\n")
        );
    }

    #[tokio::test]
    async fn an_overlong_line_is_skipped_and_the_next_one_read() {
        let mut input = vec![b'x'; MAX_LINE_BYTES + 10];
        input.extend_from_slice(b"\n{\"ok\":1}\nlast");
        let mut r = LineReader::new(tokio::io::BufReader::new(&input[..]));
        assert_eq!(r.next_line().await.as_deref(), Some("{\"ok\":1}"));
        assert_eq!(r.next_line().await.as_deref(), Some("last"));
        assert_eq!(r.next_line().await, None);
    }
}
