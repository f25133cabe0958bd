//! Run one command: `sh -c COMMAND` in a working directory, stdin from /dev/null (or given
//! bytes), a timeout and cancellation that kill the whole process tree, and output captured
//! head-and-tail while the command runs, so memory stays bounded however much it prints.

use std::ffi::CString;
use std::fmt::Write as _;
use std::fs::File;
use std::io::Write as _;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncReadExt, Interest};
use tokio::net::unix::pipe;
use tokio::process::Command;
use tokio_util::sync::CancellationToken;
use toolyard_core::ToolError;
use toolyard_core::shape::{HeadTail, Shaped};

use crate::env::EnvPolicy;
use crate::tree::{self, Mechanism};

/// How long readers may keep going after the command exited, before leftovers are killed.
const EXIT_GRACE: Duration = Duration::from_millis(200);
/// How long to drain the pipes after a kill before giving up on them.
const DRAIN_GRACE: Duration = Duration::from_millis(500);
/// How long to wait for a killed process to be reaped before giving up on it.
const REAP_GRACE: Duration = Duration::from_secs(5);
/// How often `on_progress` is called.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// Read buffer size per stream.
const CHUNK: usize = 64 * 1024;

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
            max_file_bytes: 64 << 20,
        }
    }
}

/// A progress report of a running command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecProgress {
    /// Time since the command started.
    pub elapsed: Duration,
    /// Bytes read from stdout so far.
    pub stdout_bytes: u64,
    /// Bytes read from stderr so far.
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
    /// Time limit; on expiry the whole tree is killed.
    pub timeout: Duration,
    /// The most output bytes (stdout and stderr together) the result shows.
    pub max_output_bytes: usize,
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
}

impl std::fmt::Debug for ExecRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecRequest")
            .field("command", &self.command)
            .field("cwd", &self.cwd)
            .field("timeout", &self.timeout)
            .field("max_output_bytes", &self.max_output_bytes)
            .field("spill_dir", &self.spill_dir)
            .field("call_id", &self.call_id)
            .finish_non_exhaustive()
    }
}

impl ExecRequest {
    /// A request with defaults: 60 s, 100 000 bytes, secrets scrubbed, no spill file.
    pub fn new(command: impl Into<String>, cwd: impl Into<PathBuf>) -> Self {
        Self {
            command: command.into(),
            cwd: cwd.into(),
            timeout: Duration::from_secs(60),
            max_output_bytes: toolyard_core::DEFAULT_MAX_OUTPUT_BYTES as usize,
            env: EnvPolicy::default(),
            spill_dir: None,
            spill_limits: SpillLimits::default(),
            call_id: "call".into(),
            cancel: CancellationToken::new(),
            on_progress: None,
            stdin: None,
            raw_stdout_limit: 0,
        }
    }
}

/// What a command did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutcome {
    /// Exit code, when it exited normally.
    pub exit_code: Option<i32>,
    /// The signal that ended it, e.g. `"SIGKILL"`.
    pub signal: Option<String>,
    /// Stdout, shaped head + tail.
    pub stdout: String,
    /// Stderr, shaped head + tail.
    pub stderr: String,
    /// The time limit expired and the tree was killed.
    pub timed_out: bool,
    /// The call was cancelled and the tree was killed.
    pub cancelled: bool,
    /// Some output was cut from `stdout` or `stderr`.
    pub truncated: bool,
    /// Wall-clock duration.
    pub duration_ms: u64,
    /// Total bytes the command wrote to stdout.
    pub stdout_bytes: u64,
    /// Total bytes the command wrote to stderr.
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

    /// The text the model reads: how it ended, then stdout and stderr.
    pub fn model_text(&self) -> String {
        let mut text = String::new();
        if self.timed_out {
            let _ = writeln!(
                text,
                "timed out after {} ms; the command and all its processes were killed",
                self.duration_ms
            );
        } else if self.cancelled {
            text.push_str("cancelled; the command and all its processes were killed\n");
        } else if let Some(sig) = &self.signal {
            let _ = writeln!(text, "killed by signal {sig}");
        } else if let Some(code) = self.exit_code {
            let _ = writeln!(text, "exit code: {code}");
        }
        if self.stdout.is_empty() && self.stderr.is_empty() {
            text.push_str("(no output)\n");
        }
        for (name, body) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            if body.is_empty() {
                continue;
            }
            let _ = writeln!(text, "--- {name} ---");
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
}

/// Run `req.command` with `sh -c` and capture its bounded output.
pub async fn run(req: ExecRequest) -> Result<ExecOutcome, ToolError> {
    if req.command.trim().is_empty() {
        return Err(ToolError::InvalidArguments("command is empty".into()));
    }
    if !req.cwd.is_dir() {
        return Err(ToolError::FileNotFound(req.cwd.clone()));
    }
    let mechanism = tree::mechanism();
    let (mut child, mut out, mut err, input) = match spawn(&req, mechanism) {
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
    let (mut out_open, mut err_open) = (true, true);
    let mut status: Option<ExitStatus> = None;
    let (mut timed_out, mut cancelled) = (false, false);
    // When the command exited, and when to stop reading after a kill.
    let mut exited_at: Option<tokio::time::Instant> = None;
    let mut give_up_at: Option<tokio::time::Instant> = None;
    let mut killed = false;
    let deadline = tokio::time::Instant::now() + req.timeout;
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
            r = err.read_buf(&mut err_buf), if err_open => match r {
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
            _ = tokio::time::sleep_until(deadline), if !killed && status.is_none() => {
                timed_out = true;
                child.kill();
                killed = true;
                give_up_at = Some(tokio::time::Instant::now() + DRAIN_GRACE);
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
                        stdout_bytes: capture.stdout.total_bytes(),
                        stderr_bytes: capture.stderr.total_bytes(),
                    });
                }
            }
        }
    }
    child.cleanup();

    let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let (exit_code, signal) = describe(status);
    let mut outcome = capture.finish(exit_code, signal, timed_out, cancelled, duration_ms);
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
    Ok(outcome)
}

/// A started command: how to wait for it and kill its tree.
enum Proc {
    /// Through `tokio::process` (cgroup or process-group mechanisms).
    Tokio(tokio::process::Child, tree::Tree),
    /// In a PID namespace of its own, waited for through the init's pidfd.
    Ns(tree::NsChild, AsyncFd<OwnedFd>),
}

type Reader = Pin<Box<dyn AsyncRead + Send>>;
type Writer = Pin<Box<dyn tokio::io::AsyncWrite + Send>>;
/// A started command, its stdout and stderr, and its stdin when [`ExecRequest::stdin`] is set.
type Spawned = (Proc, Reader, Reader, Option<Writer>);

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
    match mechanism {
        Mechanism::PidNamespace | Mechanism::UserPidNamespace => {
            spawn_ns(req, matches!(mechanism, Mechanism::UserPidNamespace))
        }
        _ => spawn_tokio(req, mechanism),
    }
}

fn spawn_ns(req: &ExecRequest, user_ns: bool) -> Result<Spawned, ToolError> {
    let c = |s: &[u8], what: &str| {
        CString::new(s)
            .map_err(|_| ToolError::InvalidArguments(format!("{what} contains a NUL byte")))
    };
    let program = CString::from(c"/bin/sh");
    let args = [
        program.clone(),
        CString::from(c"-c"),
        c(req.command.as_bytes(), "the command")?,
    ];
    let env = req
        .env
        .build(std::env::vars_os())
        .into_iter()
        .map(|(k, v)| {
            let mut kv = k.into_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            c(&kv, "an environment variable")
        })
        .collect::<Result<Vec<_>, _>>()?;
    let cwd = c(req.cwd.as_os_str().as_bytes(), "the working directory")?;
    let io = |e: std::io::Error| ToolError::Io(format!("watching the command: {e}"));
    // With input, the three pipes are made here and handed over; the child's ends close
    // on our side once it has its copies.
    let given = match req.stdin {
        Some(_) => Some((
            cloexec_pipe().map_err(io)?,
            cloexec_pipe().map_err(io)?,
            cloexec_pipe().map_err(io)?,
        )),
        None => None,
    };
    let cmd = tree::NsCommand {
        program: &program,
        args: &args,
        env: &env,
        cwd: &cwd,
        stdio: given
            .as_ref()
            .map(|((in_r, _), (_, out_w), (_, err_w))| tree::NsStdio {
                stdin: in_r.as_raw_fd(),
                stdout: out_w.as_raw_fd(),
                stderr: err_w.as_raw_fd(),
                controlling_tty: false,
            }),
        die_with_parent: false,
    };
    let spawned = tree::spawn_in_pid_namespace(&cmd, user_ns)
        .map_err(|e| ToolError::Io(format!("cannot start `sh -c`: {e}")))?;
    let tree::NsSpawned {
        child,
        pidfd,
        mut stdout,
        mut stderr,
    } = spawned;
    let mut input = None;
    if let Some(((_, in_w), (out_r, _), (err_r, _))) = given {
        stdout = Some(out_r);
        stderr = Some(err_r);
        input = Some(in_w);
    }
    // SAFETY: the AsyncFd owns the pidfd, which stays open and the same until it is dropped.
    let pidfd = unsafe { AsyncFd::register_with_interest(pidfd, Interest::READABLE) }
        .map_err(|e| io(e.into()))?;
    let (Some(stdout), Some(stderr)) = (stdout, stderr) else {
        return Err(ToolError::Io(
            "the command's output pipes are missing".into(),
        ));
    };
    let out = pipe::Receiver::from_owned_fd(stdout).map_err(io)?;
    let err = pipe::Receiver::from_owned_fd(stderr).map_err(io)?;
    let input: Option<Writer> = match input {
        Some(fd) => Some(Box::pin(pipe::Sender::from_owned_fd(fd).map_err(io)?)),
        None => None,
    };
    Ok((Proc::Ns(child, pidfd), Box::pin(out), Box::pin(err), input))
}

/// A pipe whose both ends close on exec: (read end, write end).
fn cloexec_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors that we then own.
    unsafe {
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])))
    }
}

fn spawn_tokio(req: &ExecRequest, mechanism: &Mechanism) -> Result<Spawned, ToolError> {
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(&req.command)
        .current_dir(&req.cwd)
        .stdin(match req.stdin {
            Some(_) => Stdio::piped(),
            None => Stdio::null(),
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_clear()
        .envs(req.env.build(std::env::vars_os()))
        .kill_on_drop(false);
    let prepared = tree::prepare(&mut cmd, mechanism)
        .map_err(|e| ToolError::Io(format!("preparing the command's cgroup: {e}")))?;
    let layer = crate::sandbox::command_layer_fd();
    // SAFETY: the hook makes raw syscalls only.
    unsafe {
        cmd.pre_exec(move || crate::sandbox::enter_command_domain(layer));
    }
    match cmd.spawn() {
        Ok(mut child) => {
            let pid = child.id().unwrap_or(0);
            let tree = prepared.spawned(pid);
            let (Some(out), Some(err)) = (child.stdout.take(), child.stderr.take()) else {
                tree.kill();
                return Err(ToolError::Io(
                    "the command's output pipes are missing".into(),
                ));
            };
            let input = child.stdin.take().map(|i| Box::pin(i) as Writer);
            Ok((
                Proc::Tokio(child, tree),
                Box::pin(out),
                Box::pin(err),
                input,
            ))
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

/// Exit code and signal name of a status (neither when it was never reaped).
fn describe(status: Option<ExitStatus>) -> (Option<i32>, Option<String>) {
    let Some(st) = status else {
        return (None, None);
    };
    let signal = st
        .signal()
        .map(|n| match nix::sys::signal::Signal::try_from(n) {
            Ok(s) => s.as_str().to_string(),
            Err(_) => format!("signal {n}"),
        });
    (st.code(), signal)
}

#[derive(Clone, Copy)]
enum Stream {
    Out,
    Err,
}

/// Bounded capture of both streams, plus the spill file once the output outgrows the limit.
struct Capture {
    stdout: HeadTail,
    stderr: HeadTail,
    stdout_cap: usize,
    stderr_cap: usize,
    spill: Spill,
    raw_stdout: Vec<u8>,
    raw_limit: usize,
}

impl Capture {
    fn new(req: &ExecRequest) -> Self {
        // An even split: build tools write their logs to stderr, tests theirs to stdout.
        let half = req.max_output_bytes / 2;
        let spill = match &req.spill_dir {
            Some(dir) => Spill::Pending {
                path: dir.join(format!("{}.log", file_safe(&req.call_id))),
                limits: req.spill_limits,
                buffered: Vec::new(),
            },
            None => Spill::Off,
        };
        Self {
            stdout: HeadTail::new(half),
            stderr: HeadTail::new(req.max_output_bytes - half),
            stdout_cap: half,
            stderr_cap: req.max_output_bytes - half,
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
                self.stdout.push(chunk)
            }
            Stream::Err => self.stderr.push(chunk),
        }
        // Spill as soon as either stream no longer fits its share.
        let overflow = self.stdout.total_bytes() > self.stdout_cap as u64
            || self.stderr.total_bytes() > self.stderr_cap as u64;
        self.spill.push(chunk, overflow);
    }

    fn finish(
        self,
        exit_code: Option<i32>,
        signal: Option<String>,
        timed_out: bool,
        cancelled: bool,
        duration_ms: u64,
    ) -> ExecOutcome {
        let (stdout_bytes, stderr_bytes) = (self.stdout.total_bytes(), self.stderr.total_bytes());
        let full_output = self.spill.finish();
        let hint = full_output
            .as_ref()
            .map(|p| format!("full output in {}", p.display()));
        let out: Shaped = self.stdout.finish(hint.as_deref());
        let err: Shaped = self.stderr.finish(hint.as_deref());
        let truncated = out.truncated() || err.truncated();
        ExecOutcome {
            exit_code,
            signal,
            stdout: out.text,
            stderr: err.text,
            timed_out,
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
