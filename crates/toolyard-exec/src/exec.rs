//! Run one command: `sh -c COMMAND` in a working directory, stdin from /dev/null (or given
//! bytes), a timeout and cancellation that end the whole process tree, and output captured
//! head-and-tail while the command runs, so memory stays bounded however much it prints.
//!
//! By default stdout and stderr share one pipe, as `2>&1` would: the output reads in the order
//! the command wrote it, as a terminal shows it, and the whole budget goes to what was printed.

use std::fmt::Write as _;
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::pin::Pin;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncReadExt, Interest};
use tokio::net::unix::pipe;
use tokio::process::Command;
use tokio_util::sync::CancellationToken;
use toolyard_core::shape::{HeadTail, Shaped};

use crate::env::EnvPolicy;
use crate::error::ExecError;
use crate::fd;
use crate::spawn::{self, ShellCommand};
pub use crate::spill::SpillLimits;
use crate::tree::{self, Mechanism};

mod capture;
use capture::{Capture, Stream, capture_text};

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
pub async fn run(mut req: ExecRequest) -> Result<ExecOutcome, ExecError> {
    req.answer_after = None;
    match run_or_answer(req).await? {
        Ran::Finished(outcome) => Ok(outcome),
        Ran::Running(_) => Err(ExecError::Internal(
            "a command was handed back running without being asked to",
        )),
    }
}

/// [`run`], or, when [`ExecRequest::answer_after`] passes first, the command still running.
pub async fn run_or_answer(req: ExecRequest) -> Result<Ran, ExecError> {
    if req.command.trim().is_empty() {
        return Err(ExecError::EmptyCommand);
    }
    if !req.cwd.is_dir() {
        return Err(ExecError::NoDirectory(req.cwd.clone()));
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
                status = Some(st.map_err(|source| ExecError::Io { doing: "waiting for the command", source })?);
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
) -> Result<Ran, ExecError> {
    let Proc::Ns(child, pidfd) = child else {
        return Err(ExecError::Internal(
            "only a command in a PID namespace can be handed back",
        ));
    };
    let io = |source: std::io::Error| ExecError::Io {
        doing: "handing the command over",
        source,
    };
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

fn spawn(req: &ExecRequest, mechanism: &Mechanism) -> Result<Spawned, ExecError> {
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

fn spawn_ns(req: &ExecRequest, user_ns: bool) -> Result<Spawned, ExecError> {
    let shell = ShellCommand::new(&req.command, &req.cwd, req.env.build(std::env::vars_os()))?;
    let io = watching;
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

fn spawn_tokio(req: &ExecRequest, mechanism: &Mechanism) -> Result<Spawned, ExecError> {
    let io = watching;
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
    let prepared = tree::prepare(&mut cmd, mechanism).map_err(ExecError::Cgroup)?;
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
            Err(ExecError::Start {
                cwd: req.cwd.clone(),
                source: e,
            })
        }
    }
}

fn is_namespace_refusal(e: &ExecError) -> bool {
    e.io_error().is_some_and(|io| {
        matches!(
            io.raw_os_error(),
            Some(libc::EPERM | libc::EINVAL | libc::ENOSPC)
        )
    })
}

/// The error for a failed step in watching a command's pipes and process.
fn watching(source: std::io::Error) -> ExecError {
    ExecError::Io {
        doing: "watching the command",
        source,
    }
}
