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
//! Internal jobs (a job whose `internal` holds an [`InternalOp`], never a model's tool): what
//! the server asks of a remote runner's workspace, so that it never needs the files on its own
//! disk. Each answers a result whose `data` holds what it found, or
//! `{"internal_error": ToolError}`. The operations are the variants of [`InternalOp`], tagged
//! `op` on the wire: `{"type":"job",..,"internal":{"op":"read_state","path":"src/a.rs"}}`.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolyard_core::{Progress, ToolResult};

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
    /// The server's own operation on the runner's workspace, run instead of a tool (its
    /// `dialect` and `tool` then only name it in logs). Only the server builds one
    /// ([`Job::internal`]): no model's call carries it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal: Option<Box<InternalOp>>,
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
            internal: None,
        }
    }

    /// An internal job in `session` (see [`InternalOp`]), with no time yet ([`Job::within`]).
    pub fn internal(session: &str, op: InternalOp) -> Self {
        let call_id = format!("{}-{}", std::process::id(), op.name());
        let mut job = Job::for_call(session, call_id, ("", op.name()), Value::Null);
        job.internal = Some(Box::new(op));
        job
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

/// An internal job's operation: what the server asks of a remote runner's workspace. A new
/// operation is a variant here and its arm in the runner's one match (`internal.rs`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum InternalOp {
    /// The file's bytes (base64) and mode, or absent (as a journal pre-image; undo reads it
    /// first); a file over `max` bytes answers its size, hash and mode instead of its bytes,
    /// to read with [`InternalOp::ReadPart`].
    ReadState {
        /// The file, relative to the workspace.
        path: String,
        /// The most content bytes to answer with.
        #[serde(default = "part_bytes")]
        max: usize,
    },
    /// Up to [`PART_BYTES`] of the file's bytes from `offset`.
    ReadPart {
        /// The file, relative to the workspace.
        path: String,
        /// Where to start.
        offset: u64,
    },
    /// Part `seq` of an upload (content too large for one line), appended to its file in the
    /// runner's temp dir; a [`InternalOp::Restore`] names it when it is complete.
    Upload(Chunk),
    /// A compare-and-swap write (or, with no content, removal) of one file; answers `hash`.
    Restore(Restore),
    /// Each path's hash or null, or why it cannot be read (recovery).
    Hashes {
        /// The files, relative to the workspace.
        paths: Vec<String>,
        /// Also remove the temp files a killed write left beside them.
        #[serde(default)]
        clean: bool,
    },
    /// A slice of a saved command output (`outputs/NAME`).
    SpillRead {
        /// The output's file name.
        name: String,
        /// Where to start.
        #[serde(default)]
        offset: u64,
        /// How many bytes (at most 8 MiB).
        len: u64,
    },
    /// Bring a workspace in from a git revision: clone (or fetch) and check it out detached.
    HydrateGit {
        /// A URL or a path where the runner runs.
        url: String,
        /// A commit, tag or branch.
        rev: String,
    },
    /// Bring a workspace in from a tar archive sent in chunks: the last one unpacks it.
    HydrateChunk(Chunk),
    /// The workspace's changes as a patch (git checkouts only).
    Export {
        /// What to diff against (else the hydrated revision, else `HEAD`).
        base: Option<String>,
    },
}

impl InternalOp {
    /// The operation's name, as the wire tags it.
    pub fn name(&self) -> &'static str {
        match self {
            InternalOp::ReadState { .. } => "read_state",
            InternalOp::ReadPart { .. } => "read_part",
            InternalOp::Upload(_) => "upload",
            InternalOp::Restore(_) => "restore",
            InternalOp::Hashes { .. } => "hashes",
            InternalOp::SpillRead { .. } => "spill_read",
            InternalOp::HydrateGit { .. } => "hydrate_git",
            InternalOp::HydrateChunk(_) => "hydrate_chunk",
            InternalOp::Export { .. } => "export",
        }
    }
}

fn part_bytes() -> usize {
    PART_BYTES
}

/// One piece of an upload or of a `hydrate` archive (base64), in order from 0.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Chunk {
    /// The upload's id: 1 to 64 letters, digits, `-` or `_`.
    pub upload: String,
    /// The piece's number.
    pub seq: u64,
    /// The piece, base64.
    pub data: String,
    /// The last piece of a `hydrate` archive (an upload ends with its restore instead).
    #[serde(default)]
    pub last: bool,
}

/// The arguments of [`InternalOp::Restore`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Restore {
    /// The file, relative to the workspace.
    pub path: String,
    /// The hash the file must have now (absent: the file must be absent).
    pub expect_hash: Option<String>,
    /// The content to write, base64 (absent, and no `upload`: remove the file).
    pub content: Option<String>,
    /// The content was sent ahead with [`InternalOp::Upload`] jobs (too large for one line).
    #[serde(default)]
    pub upload: Option<String>,
    /// The mode to give it.
    pub mode: Option<u32>,
    /// The state hash to restore when it may be a symlink or a directory (an undo of a
    /// command's change): `content` is then a symlink's target, `expect_hash` a state hash.
    #[serde(default)]
    pub target: Option<String>,
    /// `target` is set and means "absent" (a creation undone).
    #[serde(default)]
    pub target_absent: bool,
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

    #[test]
    fn an_internal_job_carries_its_typed_op_and_a_tool_job_none() {
        let job = Job::internal(
            "s",
            InternalOp::ReadPart {
                path: "a.rs".into(),
                offset: 3,
            },
        );
        let line = serde_json::to_string(&ToRunner::Job(job)).unwrap();
        assert!(
            line.contains(r#""internal":{"op":"read_part","path":"a.rs","offset":3}"#),
            "{line}"
        );
        let back: ToRunner = serde_json::from_str(&line).unwrap();
        let ToRunner::Job(Job {
            internal: Some(op), ..
        }) = back
        else {
            panic!("not an internal job: {line}");
        };
        assert!(matches!(*op, InternalOp::ReadPart { offset: 3, .. }));
        // A model's call: the same line as before internal jobs were typed.
        let tool: ToRunner = serde_json::from_str(
            r#"{"type":"job","id":"1","session":"s","call_id":"c1","dialect":"loopr","tool":"grep","args":{},"timeout_ms":1,"max_timeout_ms":1,"max_output_bytes":1}"#,
        )
        .unwrap();
        assert!(matches!(tool, ToRunner::Job(Job { internal: None, .. })));
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
