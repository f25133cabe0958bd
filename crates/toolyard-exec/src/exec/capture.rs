//! Bounded capture of a command's output: head and tail of each stream within one budget,
//! the first bytes kept raw when asked, and the whole output handed to a spill file once it
//! outgrows what the result shows.

use super::*;
use crate::spill::{Spill, file_safe};

#[derive(Clone, Copy)]
pub(super) enum Stream {
    Out,
    Err,
}

/// Bounded capture of the output, plus the spill file once it outgrows the limit.
pub(super) struct Capture {
    /// The one stream (merged), or stdout.
    pub(super) out: HeadTail,
    /// Stderr, when apart (unused when merged).
    pub(super) err: HeadTail,
    pub(super) merged: bool,
    /// The bytes the result shows, for both streams together.
    pub(super) limit: usize,
    /// The lines the result shows, for both streams together.
    pub(super) lines: u64,
    pub(super) spill: Spill,
    pub(super) raw_stdout: Vec<u8>,
    pub(super) raw_limit: usize,
}

impl Capture {
    pub(super) fn new(req: &ExecRequest) -> Self {
        let spill = match &req.spill_dir {
            Some(dir) => Spill::Pending {
                path: dir.join(format!("{}.log", file_safe(&req.call_id))),
                limits: req.spill_limits,
                buffered: Vec::new(),
            },
            None => Spill::Off,
        };
        let limit = req.max_output_bytes;
        let merged = req.streams == Streams::Merged;
        // Apart, each stream may get the whole budget (the other printed nothing): both keep
        // that much, and the budget is split when the result is shaped.
        let out = HeadTail::new(limit);
        let lines = out.limits().1;
        Self {
            out,
            err: HeadTail::new(if merged { 0 } else { limit }),
            merged,
            limit,
            lines,
            spill,
            raw_stdout: Vec::new(),
            raw_limit: req.raw_stdout_limit,
        }
    }

    pub(super) fn push(&mut self, stream: Stream, chunk: &[u8]) {
        match stream {
            Stream::Out => {
                let room = self.raw_limit.saturating_sub(self.raw_stdout.len());
                self.raw_stdout
                    .extend_from_slice(&chunk[..room.min(chunk.len())]);
                self.out.push(chunk);
            }
            Stream::Err => self.err.push(chunk),
        }
        // Spill as soon as the result can no longer show all of it.
        let overflow = if self.merged {
            self.out.cut()
        } else {
            self.out.cut()
                || self.err.cut()
                || self.out.total_bytes() + self.err.total_bytes() > self.limit as u64
                || self.out.total_lines() + self.err.total_lines() > self.lines
        };
        self.spill.push(chunk, overflow);
    }

    pub(super) fn finish(
        self,
        exit_code: Option<i32>,
        signal: Option<String>,
        timeout_stop: Option<TimeoutStop>,
        cancelled: bool,
        duration_ms: u64,
    ) -> ExecOutcome {
        let (stdout_bytes, stderr_bytes) = (self.out.total_bytes(), self.err.total_bytes());
        let full_output = self.spill.finish();
        let hint = full_output
            .as_ref()
            .map(|p| format!("full output in {}", p.display()));
        let (stdout, stderr, truncated) =
            capture_text(self.out, self.err, self.merged, self.limit, hint.as_deref());
        ExecOutcome {
            exit_code,
            signal,
            stdout,
            stderr,
            merged: self.merged,
            timed_out: timeout_stop.is_some(),
            timeout_stop,
            cancelled,
            truncated,
            duration_ms,
            stdout_bytes,
            stderr_bytes,
            full_output: if truncated { full_output } else { None },
            raw_stdout: self.raw_stdout,
            sandbox_note: None,
        }
    }
}

/// The shown text of the captured streams within `limit` bytes (and its lines), and whether
/// anything was cut. Apart, a stream that printed less than half the budget leaves the rest to
/// the other.
pub(super) fn capture_text(
    out: HeadTail,
    err: HeadTail,
    merged: bool,
    limit: usize,
    hint: Option<&str>,
) -> (String, String, bool) {
    if merged {
        let shaped: Shaped = out.finish(hint);
        let cut = shaped.truncated();
        return (shaped.text, String::new(), cut);
    }
    let lines = out.limits().1;
    let bytes = share(out.total_bytes(), err.total_bytes(), limit as u64);
    let line_shares = share(out.total_lines(), err.total_lines(), lines);
    let o = out.finish_within(to_usize(bytes.0), line_shares.0, hint);
    let e = err.finish_within(to_usize(bytes.1), line_shares.1, hint);
    let cut = o.truncated() || e.truncated();
    (o.text, e.text, cut)
}

pub(super) fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// Split `budget` between two streams of sizes `a` and `b`: each keeps what it has up to half,
/// and the rest goes to the other.
pub(super) fn share(a: u64, b: u64, budget: u64) -> (u64, u64) {
    let half = budget / 2;
    let other_half = budget - half;
    let a_share = if b <= other_half {
        budget - b
    } else if a <= half {
        a
    } else {
        half
    };
    let b_share = if a <= half {
        budget - a
    } else if b <= other_half {
        b
    } else {
        other_half
    };
    (a_share, b_share)
}
