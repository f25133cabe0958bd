//! The job protocol between the router and a runner process: JSON lines.
//!
//! Router → runner (the runner's stdin):
//! - `{"type":"job","id":"7","session":"s","call_id":"c7","dialect":"loopr","tool":"grep","args":{..},"timeout_ms":60000,"max_timeout_ms":600000,"max_output_bytes":100000}`
//! - `{"type":"cancel","id":"7"}`
//! - `{"type":"end_session","session":"s"}`: kill the session's background processes
//! - `{"type":"reply","rid":3,"result":{"ok":7}}` or `{"type":"reply","rid":3,"result":{"err":{"StaleRead":{"path":"src/a.rs"}}}}`
//!
//! Runner → router (the runner's stdout):
//! - `{"type":"ready","lane":"no-net","pid":4242,"sandbox":"..."}` once, after the sandbox is on
//! - `{"type":"result","id":"7","result":{ToolResult}}`
//! - `{"type":"progress","id":"7","progress":{"progress":3.0,"message":".."}}`
//! - `{"type":"request","rid":3,"op":{"record_read":{..}}}`: a runner may not write Toolyard's
//!   state, so it asks the router to record reads, check and record writes, and journal.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolyard_core::{Progress, ToolError, ToolResult};

/// A message to a runner.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToRunner {
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

/// A message from a runner.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FromRunner {
    /// The runner is sandboxed and serving.
    Ready {
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
    /// The runner asks the router to keep a record.
    Request {
        /// The request's id, echoed in the reply.
        rid: u64,
        /// What to record.
        op: RecordOp,
    },
}

/// A records operation a runner asks for (see `toolyard_tools::records::Records`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordOp {
    /// The session read a file.
    RecordRead {
        /// Session.
        session: String,
        /// Workspace-relative path.
        path: String,
        /// Content hash.
        hash: String,
    },
    /// May the session overwrite the file?
    CheckWrite {
        /// Session.
        session: String,
        /// Workspace-relative path.
        path: String,
        /// Current content hash.
        current: String,
    },
    /// The session wrote a file.
    RecordWrite {
        /// Session.
        session: String,
        /// Workspace-relative path.
        path: String,
        /// New content hash.
        hash: String,
    },
    /// Journal the file before it changes.
    JournalBegin {
        /// Session.
        session: String,
        /// Call id.
        call_id: String,
        /// Tool.
        tool: String,
        /// Workspace-relative path.
        path: String,
        /// The content hash it will have.
        new_hash: String,
    },
    /// The journaled change landed or not.
    JournalEnd {
        /// Change id.
        change: i64,
        /// Whether it landed.
        done: bool,
    },
}

/// The answer to a [`RecordOp`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// Done; for `JournalBegin`, the change id.
    Ok(Option<i64>),
    /// Refused or failed, with the error the runner's tool passes on to the model.
    Err(ToolError),
}

impl Reply {
    /// The reply for a records outcome.
    pub fn from_result(r: Result<Option<i64>, ToolError>) -> Self {
        match r {
            Ok(v) => Reply::Ok(v),
            Err(e) => Reply::Err(e),
        }
    }

    /// Back to a result on the runner's side.
    pub fn into_result(self) -> Result<Option<i64>, ToolError> {
        match self {
            Reply::Ok(v) => Ok(v),
            Reply::Err(e) => Err(e),
        }
    }
}

/// The longest protocol line either side reads (a job's arguments, a result): past it the line
/// is skipped, so a runner cannot make the server hold an unbounded buffer, nor the reverse.
pub const MAX_LINE_BYTES: usize = 64 << 20;

/// Reads protocol lines of at most [`MAX_LINE_BYTES`].
pub(crate) struct LineReader<R> {
    inner: R,
    buf: Vec<u8>,
}

impl<R: tokio::io::AsyncBufRead + Unpin> LineReader<R> {
    /// Lines of `inner`.
    pub(crate) fn new(inner: R) -> Self {
        Self {
            inner,
            buf: Vec::new(),
        }
    }

    /// The next line (without its newline) that fits the bound, skipping and logging any that
    /// does not or is not UTF-8; `None` at the end of the stream or on an error.
    pub(crate) async fn next_line(&mut self) -> Option<String> {
        use tokio::io::AsyncBufReadExt;
        loop {
            self.buf.clear();
            let mut too_long = false;
            loop {
                let chunk = match self.inner.fill_buf().await {
                    // The end: a last line without its newline still counts.
                    Ok([]) if self.buf.is_empty() && !too_long => return None,
                    Ok([]) => break,
                    Ok(c) => c,
                    Err(_) => return None,
                };
                let (take, done) = match memchr_newline(chunk) {
                    Some(i) => (i + 1, true),
                    None => (chunk.len(), false),
                };
                if !too_long && self.buf.len() + take <= MAX_LINE_BYTES + 1 {
                    self.buf.extend_from_slice(&chunk[..take]);
                } else {
                    too_long = true;
                    self.buf.clear();
                }
                self.inner.consume(take);
                if done {
                    break;
                }
            }
            if too_long {
                tracing::warn!("skipping a protocol line longer than {MAX_LINE_BYTES} bytes");
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
    async fn an_overlong_line_is_skipped_and_the_next_one_read() {
        let mut input = vec![b'x'; MAX_LINE_BYTES + 10];
        input.extend_from_slice(b"\n{\"ok\":1}\nlast");
        let mut r = LineReader::new(tokio::io::BufReader::new(&input[..]));
        assert_eq!(r.next_line().await.as_deref(), Some("{\"ok\":1}"));
        assert_eq!(r.next_line().await.as_deref(), Some("last"));
        assert_eq!(r.next_line().await, None);
    }
}
