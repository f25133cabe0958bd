//! Run one command: `sh -c COMMAND` in a working directory, stdin from /dev/null (or given
//! bytes), a timeout and cancellation that end the whole process tree, and output captured
//! head-and-tail while the command runs, so memory stays bounded however much it prints.
//!
//! By default stdout and stderr share one pipe, as `2>&1` would: the output reads in the order
//! the command wrote it, as a terminal shows it, and the whole budget goes to what was printed.

use std::fmt::Write as _;
use std::fs::File;
use std::io::Write as _;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::pin::Pin;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncReadExt, Interest};
use tokio::net::unix::pipe;
use tokio::process::Command;
use tokio_util::sync::CancellationToken;
use toolyard_core::ToolError;
use toolyard_core::shape::{HeadTail, Shaped};

use crate::env::EnvPolicy;
use crate::fd;
use crate::spawn::{self, ShellCommand};
use crate::tree::{self, Mechanism};

/// How long readers may keep going after the command exited, before leftovers are killed.
const EXIT_GRACE: Duration = Duration::from_millis(200);
pub use crate::spawn::TERM_GRACE;
/// How long to drain the pipes after a kill before giving up on them.
const DRAIN_GRACE: Duration = Duration::from_millis(500);
/// How long to wait for a killed process to be reaped before giving up on it.
const REAP_GRACE: Duration = Duration::from_secs(5);
/// How often `on_progress` is called.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// Read buffer size per stream.
const CHUNK: usize = 64 * 1024;

/// Where one saved output (a cut command's, a background process's log) stops growing.
pub(crate) const MAX_SAVED_BYTES: u64 = 64 << 20;

/// How the saved full outputs are kept bounded. Checked each time a new one is written (so
/// cheaply: one directory listing): files older than `max_age` go, then the oldest until the
/// others number fewer than `max_files` and leave room for the new one at its cap within
/// `max_total_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpillLimits {
    /// A saved output older than this is deleted.
    pub max_age: Duration,
    /// Most files kept in the directory, the new one included.
    pub max_files: usize,
    /// Most bytes kept in the directory, the new one (at its cap) included.
    pub max_total_bytes: u64,
    /// One saved output stops growing here; a line at its end says the rest was not saved.
    pub max_file_bytes: u64,
}

impl Default for SpillLimits {
    /// 24 hours, 100 files, 256 MiB in all, 64 MiB per file.
    fn default() -> Self {
        Self {
            max_age: Duration::from_secs(24 * 3600),
            max_files: 100,
            max_total_bytes: 256 << 20,
            max_file_bytes: MAX_SAVED_BYTES,
        }
    }
}

/// How a command's stdout and stderr reach the result.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Streams {
    /// One pipe for both, as `2>&1` would: the output in the order it was written, as a
    /// terminal shows it, in [`ExecOutcome::stdout`].
    #[default]
    Merged,
    /// A pipe each, shaped apart within one budget (for results that name the two).
    Separate,
}

/// A progress report of a running command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecProgress {
    /// Time since the command started.
    pub elapsed: Duration,
    /// Bytes read from stdout so far (both streams with [`Streams::Merged`]).
    pub stdout_bytes: u64,
    /// Bytes read from stderr so far (0 with [`Streams::Merged`]).
    pub stderr_bytes: u64,
}

/// Called with progress reports while a command runs.
pub type ProgressFn = Arc<dyn Fn(ExecProgress) + Send + Sync>;

/// One command to run.
#[derive(Clone)]
pub struct ExecRequest {
    /// The shell command line, run with `sh -c`.
    pub command: String,
    /// Working directory: absolute, already confined to the workspace by the caller.
    pub cwd: PathBuf,
    /// Time limit; on expiry the tree gets SIGTERM, then SIGKILL after [`TERM_GRACE`].
    pub timeout: Duration,
    /// The most output bytes (stdout and stderr together) the result shows.
    pub max_output_bytes: usize,
    /// One stream in arrival order (the default) or stdout and stderr apart.
    pub streams: Streams,
    /// Which environment variables the command inherits.
    pub env: EnvPolicy,
    /// Where the full output of a truncated call is saved, as `{call_id}.log`.
    pub spill_dir: Option<PathBuf>,
    /// How the files in `spill_dir` are kept bounded.
    pub spill_limits: SpillLimits,
    /// This call's id (names the spill file).
    pub call_id: String,
    /// Cancelling it kills the whole tree.
    pub cancel: CancellationToken,
    /// Called about once a second while the command runs.
    pub on_progress: Option<ProgressFn>,
    /// Bytes written to the command's stdin, which is then closed (`None`: /dev/null).
    pub stdin: Option<Vec<u8>>,
    /// Also keep stdout's first this many bytes exactly as written, in
    /// [`ExecOutcome::raw_stdout`] (0: none), for output that is data, not text.
    pub raw_stdout_limit: usize,
    /// With [`run_or_answer`]: still running after this long, the command is handed back
    /// running ([`Ran::Running`]) instead of waited for. Only a command in a PID namespace of
    /// its own, on one output stream and without given stdin can be; others run to the end.
    pub answer_after: Option<Duration>,
}

impl std::fmt::Debug for ExecRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecRequest")
            .field("command", &self.command)
            .field("cwd", &self.cwd)
            .field("timeout", &self.timeout)
            .field("max_output_bytes", &self.max_output_bytes)
            .field("streams", &self.streams)
            .field("spill_dir", &self.spill_dir)
            .field("call_id", &self.call_id)
            .field("answer_after", &self.answer_after)
            .finish_non_exhaustive()
    }
}

impl ExecRequest {
    /// A request with defaults: 60 s, 30 000 bytes on one stream, secrets scrubbed, no spill
    /// file.
    pub fn new(command: impl Into<String>, cwd: impl Into<PathBuf>) -> Self {
        Self {
            command: command.into(),
            cwd: cwd.into(),
            timeout: Duration::from_secs(60),
            max_output_bytes: toolyard_core::DEFAULT_MAX_OUTPUT_BYTES as usize,
            streams: Streams::Merged,
            env: EnvPolicy::default(),
            spill_dir: None,
            spill_limits: SpillLimits::default(),
            call_id: "call".into(),
            cancel: CancellationToken::new(),
            on_progress: None,
            stdin: None,
            raw_stdout_limit: 0,
            answer_after: None,
        }
    }
}

/// How a timed-out command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeoutStop {
    /// The time limit, in milliseconds.
    pub after_ms: u64,
    /// SIGTERM was not enough: SIGKILL ended the tree after [`TERM_GRACE`].
    pub killed: bool,
}

impl TimeoutStop {
    /// `timed out after N ms: sent SIGTERM, ...`
    pub fn describe(&self) -> String {
        let grace = TERM_GRACE.as_secs();
        if self.killed {
            format!(
                "timed out after {} ms: sent SIGTERM, then SIGKILL {grace} s later; the command and all its processes were killed",
                self.after_ms
            )
        } else {
            format!(
                "timed out after {} ms: sent SIGTERM, the command exited within the {grace} s grace period",
                self.after_ms
            )
        }
    }

    /// The signal that ended the command: `SIGTERM` or `SIGKILL`.
    pub fn signal(&self) -> &'static str {
        if self.killed { "SIGKILL" } else { "SIGTERM" }
    }
}

/// What a command did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutcome {
    /// Exit code, when it exited normally.
    pub exit_code: Option<i32>,
    /// The signal that ended it, e.g. `"SIGKILL"`.
    pub signal: Option<String>,
    /// The output, shaped head + tail: both streams in arrival order when [`Self::merged`],
    /// else stdout.
    pub stdout: String,
    /// Stderr, shaped head + tail (empty when [`Self::merged`]).
    pub stderr: String,
    /// Stdout and stderr came on one pipe: [`Self::stdout`] holds both.
    pub merged: bool,
    /// The time limit expired and the tree was stopped.
    pub timed_out: bool,
    /// How the timed-out tree was stopped.
    pub timeout_stop: Option<TimeoutStop>,
    /// The call was cancelled and the tree was killed.
    pub cancelled: bool,
    /// Some output was cut from `stdout` or `stderr`.
    pub truncated: bool,
    /// Wall-clock duration.
    pub duration_ms: u64,
    /// Total bytes the command wrote to stdout (to both streams when [`Self::merged`]).
    pub stdout_bytes: u64,
    /// Total bytes the command wrote to stderr (0 when [`Self::merged`]).
    pub stderr_bytes: u64,
    /// The file holding the full stdout+stderr (interleaved as they arrived) when truncated.
    pub full_output: Option<PathBuf>,
    /// Stdout's first [`ExecRequest::raw_stdout_limit`] bytes, unshaped.
    pub raw_stdout: Vec<u8>,
    /// One line saying the lane's sandbox refused the command something, and what to do.
    pub sandbox_note: Option<String>,
}

impl ExecOutcome {
    /// Whether the command exited with code 0.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out && !self.cancelled
    }

    /// Bytes the command printed in all.
    pub fn output_bytes(&self) -> u64 {
        self.stdout_bytes + self.stderr_bytes
    }

    /// The first line of [`Self::model_text`]: how it ended (`None` while it runs).
    pub fn status_line(&self) -> Option<String> {
        if let Some(stop) = &self.timeout_stop {
            Some(stop.describe())
        } else if self.timed_out {
            Some(format!(
                "timed out after {} ms; the command and all its processes were killed",
                self.duration_ms
            ))
        } else if self.cancelled {
            Some("cancelled; the command and all its processes were killed".into())
        } else if let Some(sig) = &self.signal {
            Some(format!("killed by signal {sig}"))
        } else {
            self.exit_code.map(|code| format!("exit code: {code}"))
        }
    }

    /// The output for the model: the one stream, or stdout and stderr under headers.
    pub fn output_text(&self) -> String {
        let mut text = String::new();
        if self.stdout.is_empty() && self.stderr.is_empty() {
            text.push_str("(no output)\n");
        }
        for (name, body) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            if body.is_empty() {
                continue;
            }
            if !self.merged {
                let _ = writeln!(text, "--- {name} ---");
            }
            text.push_str(body);
            if !body.ends_with('\n') {
                text.push('\n');
            }
        }
        if self.truncated {
            match &self.full_output {
                Some(p) => {
                    let _ = writeln!(text, "(output truncated; full output in {})", p.display());
                }
                None => text.push_str("(output truncated)\n"),
            }
        }
        if let Some(note) = &self.sandbox_note {
            text.push_str(note);
            text.push('\n');
        }
        text
    }

    /// The text the model reads: how it ended, then the output.
    pub fn model_text(&self) -> String {
        let mut text = String::new();
        if let Some(status) = self.status_line() {
            text.push_str(&status);
            text.push('\n');
        }
        text.push_str(&self.output_text());
        text
    }
}

/// A command handed back still running by [`run_or_answer`]: what it printed so far, and the
/// live process, for a background process table to adopt (`ProcessTable::adopt`).
pub struct Running {
    /// The output so far, shaped like a finished command's (no exit status yet).
    pub so_far: ExecOutcome,
    /// The file that holds its whole output, and keeps receiving it once adopted.
    pub log: Option<PathBuf>,
    /// What is left of its time limit.
    pub time_left: Duration,
    pub(crate) child: tree::NsChild,
    pub(crate) pidfd: AsyncFd<OwnedFd>,
    pub(crate) output: OwnedFd,
    pub(crate) log_file: Option<File>,
    pub(crate) started: Instant,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running")
            .field("so_far", &self.so_far)
            .field("log", &self.log)
            .field("time_left", &self.time_left)
            .finish_non_exhaustive()
    }
}

/// What [`run_or_answer`] returns.
#[derive(Debug)]
pub enum Ran {
    /// The command ended.
    Finished(ExecOutcome),
    /// Still running after [`ExecRequest::answer_after`].
    Running(Box<Running>),
}

/// Run `req.command` with `sh -c` and capture its bounded output.
pub async fn run(mut req: ExecRequest) -> Result<ExecOutcome, ToolError> {
    req.answer_after = None;
    match run_or_answer(req).await? {
        Ran::Finished(outcome) => Ok(outcome),
        Ran::Running(_) => Err(ToolError::Io(
            "internal: a command was handed back running without being asked to".into(),
        )),
    }
}

/// [`run`], or, when [`ExecRequest::answer_after`] passes first, the command still running.
pub async fn run_or_answer(req: ExecRequest) -> Result<Ran, ToolError> {
    if req.command.trim().is_empty() {
        return Err(ToolError::InvalidArguments("command is empty".into()));
    }
    if !req.cwd.is_dir() {
        return Err(ToolError::FileNotFound(req.cwd.clone()));
    }
    let mechanism = tree::mechanism();
    let (mut child, mut out, err, input) = match spawn(&req, mechanism) {
        Ok(spawned) => spawned,
        // The namespace may be refused later than the probe saw (e.g. a limit on namespaces).
        Err(e) if mechanism != &Mechanism::ProcessGroup && is_namespace_refusal(&e) => {
            tracing::warn!(error = %e, "tree-kill mechanism refused; falling back to the process group");
            spawn(&req, &Mechanism::ProcessGroup)?
        }
        Err(e) => return Err(e),
    };
    let started = Instant::now();
    tracing::debug!(command = %req.command, cwd = %req.cwd.display(), "spawned");
    let can_answer = matches!(child, Proc::Ns(..)) && err.is_none() && input.is_none();
    if let (Some(mut pipe), Some(bytes)) = (input, req.stdin.clone()) {
        // Aside, so a command that never reads its input cannot stall the loop; the write
        // ends with an error once the tree is gone.
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            let _ = pipe.write_all(&bytes).await;
        });
    }

    let mut capture = Capture::new(&req);
    // Read into spare capacity: nothing is zeroed (or even touched) for a quiet command.
    let mut out_buf = Vec::with_capacity(CHUNK);
    let mut err_buf = Vec::with_capacity(CHUNK);
    let mut err = err;
    let (mut out_open, mut err_open) = (true, err.is_some());
    let mut status: Option<ExitStatus> = None;
    let (mut timed_out, mut cancelled) = (false, false);
    // When the command exited, when SIGTERM was sent, and when to stop reading after a kill.
    let mut exited_at: Option<tokio::time::Instant> = None;
    let mut term_at: Option<tokio::time::Instant> = None;
    let mut give_up_at: Option<tokio::time::Instant> = None;
    let (mut killed, mut escalated) = (false, false);
    let deadline = tokio::time::Instant::now() + req.timeout;
    let answer_at = req
        .answer_after
        .filter(|a| can_answer && *a < req.timeout)
        .map(|a| tokio::time::Instant::now() + a);
    let mut progress =
        tokio::time::interval_at(tokio::time::Instant::now() + PROGRESS_EVERY, PROGRESS_EVERY);
    let far = tokio::time::Instant::now() + Duration::from_secs(365 * 24 * 3600);

    loop {
        if status.is_some() && !out_open && !err_open {
            break;
        }
        tokio::select! {
            r = out.read_buf(&mut out_buf), if out_open => match r {
                Ok(0) | Err(_) => out_open = false,
                Ok(_) => {
                    capture.push(Stream::Out, &out_buf);
                    out_buf.clear();
                }
            },
            r = read_opt(&mut err, &mut err_buf), if err_open => match r {
                Ok(0) | Err(_) => err_open = false,
                Ok(_) => {
                    capture.push(Stream::Err, &err_buf);
                    err_buf.clear();
                }
            },
            st = child.wait(), if status.is_none() => {
                status = Some(st.map_err(|e| ToolError::Io(format!("waiting for the command: {e}")))?);
                exited_at = Some(tokio::time::Instant::now());
            }
            _ = tokio::time::sleep_until(deadline), if !timed_out && !killed && status.is_none() => {
                // SIGTERM first, so tools remove their lock files and temp state.
                timed_out = true;
                child.terminate();
                term_at = Some(tokio::time::Instant::now());
            }
            _ = tokio::time::sleep_until(term_at.unwrap_or(far) + TERM_GRACE), if term_at.is_some() && !killed && status.is_none() => {
                child.kill();
                killed = true;
                escalated = true;
                give_up_at = Some(tokio::time::Instant::now() + DRAIN_GRACE);
            }
            _ = tokio::time::sleep_until(answer_at.unwrap_or(far)), if answer_at.is_some() && !timed_out && !killed && status.is_none() => {
                return hand_over(child, out, capture, &req, deadline, started);
            }
            _ = req.cancel.cancelled(), if !killed && status.is_none() => {
                cancelled = true;
                child.kill();
                killed = true;
                give_up_at = Some(tokio::time::Instant::now() + DRAIN_GRACE);
            }
            _ = tokio::time::sleep_until(exited_at.unwrap_or(far) + EXIT_GRACE), if exited_at.is_some() && !killed => {
                // The command exited but something it started still holds its pipes.
                child.kill();
                killed = true;
                give_up_at = Some(tokio::time::Instant::now() + DRAIN_GRACE);
            }
            _ = tokio::time::sleep_until(give_up_at.unwrap_or(far)), if give_up_at.is_some() && (out_open || err_open) => {
                // A process outside our reach still holds the pipes: stop reading them.
                out_open = false;
                err_open = false;
            }
            _ = tokio::time::sleep_until(give_up_at.unwrap_or(far) + REAP_GRACE), if give_up_at.is_some() => {
                tracing::error!(command = %req.command, "a killed command was not reaped; abandoning it");
                break;
            }
            _ = progress.tick() => {
                if let Some(cb) = &req.on_progress {
                    cb(ExecProgress {
                        elapsed: started.elapsed(),
                        stdout_bytes: capture.out.total_bytes(),
                        stderr_bytes: capture.err.total_bytes(),
                    });
                }
            }
        }
    }
    child.cleanup();

    let duration_ms = millis(started.elapsed());
    // Neither when it was never reaped.
    let (exit_code, signal) = status.map_or((None, None), spawn::exit_of);
    let timeout_stop = timed_out.then(|| TimeoutStop {
        after_ms: millis(req.timeout),
        killed: escalated,
    });
    let mut outcome = capture.finish(exit_code, signal, timeout_stop, cancelled, duration_ms);
    if !outcome.success() {
        outcome.sandbox_note = crate::sandbox::explain::explain(
            &format!("{}\n{}", outcome.stdout, outcome.stderr),
            &req.cwd,
        );
    }
    tracing::debug!(
        command = %req.command,
        exit_code = ?outcome.exit_code,
        signal = ?outcome.signal,
        timed_out,
        cancelled,
        duration_ms,
        "command finished"
    );
    Ok(Ran::Finished(outcome))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Read from the stream if there is one (a missing one never becomes ready).
async fn read_opt(r: &mut Option<Reader>, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    match r {
        Some(r) => r.read_buf(buf).await,
        None => std::future::pending().await,
    }
}

/// Hand a still-running command back: its output so far, and the pieces a background
/// process needs to go on reading, reaping and stopping it.
fn hand_over(
    child: Proc,
    out: Reader,
    capture: Capture,
    req: &ExecRequest,
    deadline: tokio::time::Instant,
    started: Instant,
) -> Result<Ran, ToolError> {
    let Proc::Ns(child, pidfd) = child else {
        return Err(ToolError::Io(
            "internal: only a command in a PID namespace can be handed back".into(),
        ));
    };
    let io = |e: std::io::Error| ToolError::Io(format!("handing the command over: {e}"));
    let output = out.into_nonblocking_fd().map_err(io)?;
    let (log, log_file) = match capture.spill.into_log() {
        Some((path, file)) => (Some(path), Some(file)),
        None => (None, None),
    };
    let hint = log
        .as_ref()
        .map(|p| format!("full output in {}", p.display()));
    let stdout_bytes = capture.out.total_bytes();
    let (stdout, stderr, truncated) = capture_text(
        capture.out,
        capture.err,
        capture.merged,
        capture.limit,
        hint.as_deref(),
    );
    let so_far = ExecOutcome {
        exit_code: None,
        signal: None,
        stdout,
        stderr,
        merged: capture.merged,
        timed_out: false,
        timeout_stop: None,
        cancelled: false,
        truncated,
        duration_ms: millis(started.elapsed()),
        stdout_bytes,
        stderr_bytes: 0,
        full_output: if truncated { log.clone() } else { None },
        raw_stdout: capture.raw_stdout,
        sandbox_note: None,
    };
    tracing::debug!(command = %req.command, "handed back running");
    Ok(Ran::Running(Box::new(Running {
        so_far,
        log,
        time_left: deadline.saturating_duration_since(tokio::time::Instant::now()),
        child,
        pidfd,
        output,
        log_file,
        started,
    })))
}

/// A started command: how to wait for it and stop its tree.
enum Proc {
    /// Through `tokio::process` (cgroup or process-group mechanisms).
    Tokio(tokio::process::Child, tree::Tree),
    /// In a PID namespace of its own, waited for through the init's pidfd.
    Ns(tree::NsChild, AsyncFd<OwnedFd>),
}

type Reader = pipe::Receiver;
type Writer = Pin<Box<dyn tokio::io::AsyncWrite + Send>>;
/// A started command, its output (stderr apart with [`Streams::Separate`]), and its stdin when
/// [`ExecRequest::stdin`] is set.
type Spawned = (Proc, Reader, Option<Reader>, Option<Writer>);

impl Proc {
    /// How the command ended (cancel-safe).
    async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        match self {
            Proc::Tokio(child, _) => child.wait().await,
            Proc::Ns(child, pidfd) => loop {
                let mut ready = pidfd.readable().await?;
                match child.try_reap()? {
                    Some(status) => return Ok(status),
                    None => ready.clear_ready(),
                }
            },
        }
    }

    /// Ask the whole tree to end (SIGTERM).
    fn terminate(&self) {
        match self {
            Proc::Tokio(_, tree) => tree.terminate(),
            Proc::Ns(child, _) => child.terminate(),
        }
    }

    /// Kill the whole tree (idempotent).
    fn kill(&self) {
        match self {
            Proc::Tokio(_, tree) => tree.kill(),
            Proc::Ns(child, _) => child.kill(),
        }
    }

    /// Remove what the tree left behind, after it is dead.
    fn cleanup(self) {
        match self {
            Proc::Tokio(_, tree) => tree.cleanup(),
            // An init not reaped by now is killed and reaped aside when dropped.
            Proc::Ns(..) => {}
        }
    }
}

fn spawn(req: &ExecRequest, mechanism: &Mechanism) -> Result<Spawned, ToolError> {
    match spawn::user_ns(mechanism) {
        Some(user_ns) => spawn_ns(req, user_ns),
        None => spawn_tokio(req, mechanism),
    }
}

/// The command's output pipes: (stdout's read end, stderr's read end when apart, the write
/// ends for stdout and stderr, which are one pipe when merged).
type Pipes = (OwnedFd, Option<OwnedFd>, OwnedFd, OwnedFd);

fn output_pipes(streams: Streams) -> std::io::Result<Pipes> {
    let (out_r, out_w) = cloexec_pipe()?;
    match streams {
        Streams::Merged => {
            let err_w = out_w.try_clone()?;
            Ok((out_r, None, out_w, err_w))
        }
        Streams::Separate => {
            let (err_r, err_w) = cloexec_pipe()?;
            Ok((out_r, Some(err_r), out_w, err_w))
        }
    }
}

fn readers(out: OwnedFd, err: Option<OwnedFd>) -> std::io::Result<(Reader, Option<Reader>)> {
    let out = pipe::Receiver::from_owned_fd(out)?;
    let err = match err {
        Some(fd) => Some(pipe::Receiver::from_owned_fd(fd)?),
        None => None,
    };
    Ok((out, err))
}

fn spawn_ns(req: &ExecRequest, user_ns: bool) -> Result<Spawned, ToolError> {
    let shell = ShellCommand::new(&req.command, &req.cwd, req.env.build(std::env::vars_os()))?;
    let io = |e: std::io::Error| ToolError::Io(format!("watching the command: {e}"));
    // The pipes are made here and handed over; the child's ends close on our side once it has
    // its copies.
    let (out_r, err_r, out_w, err_w) = output_pipes(req.streams).map_err(io)?;
    let (stdin_r, stdin_w) = match req.stdin {
        Some(_) => {
            let (r, w) = cloexec_pipe().map_err(io)?;
            (r, Some(w))
        }
        None => (dev_null().map_err(io)?, None),
    };
    let stdio = tree::NsStdio {
        stdin: stdin_r.as_raw_fd(),
        stdout: out_w.as_raw_fd(),
        stderr: err_w.as_raw_fd(),
        controlling_tty: false,
    };
    let spawned = shell.spawn(stdio, user_ns, false)?;
    drop((stdin_r, out_w, err_w));
    let tree::NsSpawned { child, pidfd, .. } = spawned;
    // SAFETY: the AsyncFd owns the pidfd, which stays open and the same until it is dropped.
    let pidfd = unsafe { AsyncFd::register_with_interest(pidfd, Interest::READABLE) }
        .map_err(|e| io(e.into()))?;
    let (out, err) = readers(out_r, err_r).map_err(io)?;
    let input: Option<Writer> = match stdin_w {
        Some(fd) => Some(Box::pin(pipe::Sender::from_owned_fd(fd).map_err(io)?)),
        None => None,
    };
    Ok((Proc::Ns(child, pidfd), out, err, input))
}

/// /dev/null for reading, close-on-exec.
fn dev_null() -> std::io::Result<OwnedFd> {
    Ok(std::fs::File::open("/dev/null")?.into())
}

/// A pipe whose both ends close on exec: (read end, write end).
fn cloexec_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    fd::pipe(libc::O_CLOEXEC)
}

fn spawn_tokio(req: &ExecRequest, mechanism: &Mechanism) -> Result<Spawned, ToolError> {
    let io = |e: std::io::Error| ToolError::Io(format!("watching the command: {e}"));
    let (out_r, err_r, out_w, err_w) = output_pipes(req.streams).map_err(io)?;
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(&req.command)
        .current_dir(&req.cwd)
        .stdin(match req.stdin {
            Some(_) => Stdio::piped(),
            None => Stdio::null(),
        })
        .stdout(Stdio::from(out_w))
        .stderr(Stdio::from(err_w))
        .env_clear()
        .envs(req.env.build(std::env::vars_os()))
        .kill_on_drop(false);
    let prepared = tree::prepare(&mut cmd, mechanism)
        .map_err(|e| ToolError::Io(format!("preparing the command's cgroup: {e}")))?;
    let layer = crate::domain::command_layer_fd();
    // SAFETY: the hook makes raw syscalls only.
    unsafe {
        cmd.pre_exec(move || crate::domain::enter_command_domain(layer));
    }
    let spawned = cmd.spawn();
    // Our copies of the write ends: the readers see the end of the output once the tree is gone.
    drop(cmd);
    match spawned {
        Ok(mut child) => {
            let pid = child.id().unwrap_or(0);
            let tree = prepared.spawned(pid);
            let (out, err) = match readers(out_r, err_r) {
                Ok(r) => r,
                Err(e) => {
                    tree.kill();
                    return Err(io(e));
                }
            };
            let input = child.stdin.take().map(|i| Box::pin(i) as Writer);
            Ok((Proc::Tokio(child, tree), out, err, input))
        }
        Err(e) => {
            prepared.abandon();
            Err(ToolError::Io(format!("cannot start `sh -c`: {e}")))
        }
    }
}

fn is_namespace_refusal(e: &ToolError) -> bool {
    matches!(e, ToolError::Io(m) if m.contains("Operation not permitted") || m.contains("Invalid argument") || m.contains("No space left"))
}

#[derive(Clone, Copy)]
enum Stream {
    Out,
    Err,
}

/// Bounded capture of the output, plus the spill file once it outgrows the limit.
struct Capture {
    /// The one stream (merged), or stdout.
    out: HeadTail,
    /// Stderr, when apart (unused when merged).
    err: HeadTail,
    merged: bool,
    /// The bytes the result shows, for both streams together.
    limit: usize,
    /// The lines the result shows, for both streams together.
    lines: u64,
    spill: Spill,
    raw_stdout: Vec<u8>,
    raw_limit: usize,
}

impl Capture {
    fn new(req: &ExecRequest) -> Self {
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

    fn push(&mut self, stream: Stream, chunk: &[u8]) {
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

    fn finish(
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
fn capture_text(
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

fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// Split `budget` between two streams of sizes `a` and `b`: each keeps what it has up to half,
/// and the rest goes to the other.
fn share(a: u64, b: u64, budget: u64) -> (u64, u64) {
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

/// The full output: kept in memory while it fits the limit, then streamed to a file.
enum Spill {
    Off,
    Pending {
        path: PathBuf,
        limits: SpillLimits,
        buffered: Vec<u8>,
    },
    Writing {
        path: PathBuf,
        file: File,
        /// Bytes still allowed in the file; at 0 the rest of the output is dropped.
        room: u64,
    },
    Failed,
}

impl Spill {
    fn push(&mut self, chunk: &[u8], overflow: bool) {
        match self {
            Spill::Off | Spill::Failed => {}
            Spill::Pending {
                path,
                limits,
                buffered,
            } => {
                if !overflow {
                    buffered.extend_from_slice(chunk);
                    return;
                }
                if let Some(dir) = path.parent() {
                    prune_spills(dir, limits, SystemTime::now());
                }
                let room = limits.max_file_bytes;
                let opened = create_spill(path).and_then(|file| {
                    let mut writing = Spill::Writing {
                        path: path.clone(),
                        file,
                        room,
                    };
                    writing.write(buffered)?;
                    writing.write(chunk)?;
                    Ok(writing)
                });
                *self = match opened {
                    Ok(writing) => writing,
                    Err(e) => {
                        tracing::warn!(path = %path.display(), error = %e, "cannot write the spill file");
                        let _ = std::fs::remove_file(&*path);
                        Spill::Failed
                    }
                };
            }
            Spill::Writing { path, .. } => {
                let path = path.clone();
                if let Err(e) = self.write(chunk) {
                    tracing::warn!(path = %path.display(), error = %e, "cannot write the spill file");
                    let _ = std::fs::remove_file(&path);
                    *self = Spill::Failed;
                }
            }
        }
    }

    /// Append to the file up to its cap; the write that reaches the cap ends it with a note.
    fn write(&mut self, chunk: &[u8]) -> std::io::Result<()> {
        let Spill::Writing { file, room, .. } = self else {
            return Ok(());
        };
        if *room == 0 || chunk.is_empty() {
            return Ok(());
        }
        let take = usize::try_from(*room).map_or(chunk.len(), |r| r.min(chunk.len()));
        file.write_all(&chunk[..take])?;
        *room -= take as u64;
        if *room == 0 {
            file.write_all(b"\n[toolyard: the output beyond this point was not saved]\n")?;
        }
        Ok(())
    }

    /// The file to go on writing the whole output to, for a command that keeps running past
    /// the call: the spill file, made now if the output still fitted in memory.
    fn into_log(self) -> Option<(PathBuf, File)> {
        match self {
            Spill::Pending {
                path,
                limits,
                buffered,
            } => {
                if let Some(dir) = path.parent() {
                    prune_spills(dir, &limits, SystemTime::now());
                }
                let made = create_spill(&path).and_then(|mut file| {
                    file.write_all(&buffered)?;
                    Ok(file)
                });
                match made {
                    Ok(file) => Some((path, file)),
                    Err(e) => {
                        tracing::warn!(path = %path.display(), error = %e, "cannot write the output file");
                        let _ = std::fs::remove_file(&path);
                        None
                    }
                }
            }
            Spill::Writing { path, file, .. } => Some((path, file)),
            Spill::Off | Spill::Failed => None,
        }
    }

    /// The spill file, when the output outgrew memory and was saved whole (or up to its cap).
    fn finish(self) -> Option<PathBuf> {
        match self {
            Spill::Writing { path, mut file, .. } => match file.flush() {
                Ok(()) => Some(path),
                Err(_) => None,
            },
            _ => None,
        }
    }
}

/// Create the spill file afresh and private. Commands may write in its directory, so whatever
/// sits at its name (a link planted there, say) is removed, never followed.
fn create_spill(path: &std::path::Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    // create_new (O_EXCL) fails on anything at the name, a link included.
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

/// Keep `dir` within `limits` before a new spill file is written there: delete files older
/// than `max_age`, then the oldest until the rest number under `max_files` and, with room for
/// the new file at its cap, fit `max_total_bytes`. Best effort: a file that cannot be deleted
/// (or a concurrent call's) is only left behind.
fn prune_spills(dir: &std::path::Path, limits: &SpillLimits, now: SystemTime) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut files: Vec<(SystemTime, u64, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            // Commands may write here too: never follow a link, never enter a directory.
            let meta = e.path().symlink_metadata().ok()?;
            if meta.is_dir() {
                return None;
            }
            let modified = meta.modified().unwrap_or(now);
            Some((modified, meta.len(), e.path()))
        })
        .collect();
    // Newest first.
    files.sort_by_key(|f| std::cmp::Reverse(f.0));
    let budget = limits.max_total_bytes.saturating_sub(limits.max_file_bytes);
    let mut kept_bytes = 0u64;
    let mut kept = 0usize;
    for (modified, len, path) in files {
        let too_old = now
            .duration_since(modified)
            .is_ok_and(|age| age > limits.max_age);
        let fits = kept + 1 < limits.max_files && kept_bytes.saturating_add(len) <= budget;
        if !too_old && fits {
            kept += 1;
            kept_bytes += len;
            continue;
        }
        match std::fs::remove_file(&path) {
            Ok(()) => tracing::debug!(path = %path.display(), too_old, "removed a saved output"),
            Err(e) => {
                tracing::debug!(path = %path.display(), error = %e, "cannot remove a saved output")
            }
        }
    }
}

/// `call_id` made safe as a file name.
fn file_safe(id: &str) -> String {
    let s: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.starts_with('.') {
        format!("call{s}")
    } else {
        s
    }
}
