//! Background processes: started by one call, then read, written, signalled and killed by later
//! calls of the same session, until they end, are killed, or their session ends.
//!
//! Each process runs like any command (`sh -c` in its own PID namespace, the lane's sandbox,
//! the nested per-command Landlock domain, the scrubbed environment), with its stdin on a pipe
//! or all three standard descriptors on a pseudo-terminal. Its output is kept in a bounded
//! buffer of unread bytes (the oldest dropped first), and written whole to a log file.
//!
//! The namespace's init is spawned from one long-lived thread and dies with it
//! (`PR_SET_PDEATHSIG`): a runner that dies takes every process it started with it.

use std::collections::{BTreeMap, VecDeque};
use std::fs::File;
use std::io::Write as _;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::sync::Notify;
use toolyard_core::ToolError;
use toolyard_core::sync::lock;

use crate::env::{EnvPolicy, Terminal};
use crate::exec::Running;
use crate::fd::{self, set_nonblocking};
use crate::spawn::{self, ShellCommand, TERM_GRACE};
use crate::tree::{self, NsChild, NsStdio};

/// Read buffer size.
const CHUNK: usize = 64 * 1024;
/// How long output may keep arriving after the command ended, before reading stops.
const DRAIN_GRACE: Duration = Duration::from_millis(500);
/// The terminal size a pty starts with.
const TTY_ROWS: u16 = 40;
const TTY_COLS: u16 = 120;

/// The catalog's `[processes]` section: limits on background processes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProcessesConfig {
    /// Running processes one session may have at once.
    pub max_per_session: usize,
    /// Unread output kept per process, in bytes (older output is dropped first; the log file
    /// keeps it all).
    pub output_bytes: usize,
    /// Unread output kept by all processes of a runner together, in bytes.
    pub total_output_bytes: usize,
    /// Seconds without a call after which a CLI session (or an HTTP client's cookie session)
    /// ends and its processes are killed.
    pub idle_timeout_s: u64,
}

impl Default for ProcessesConfig {
    fn default() -> Self {
        Self {
            max_per_session: 8,
            output_bytes: 1 << 20,
            total_output_bytes: 16 << 20,
            idle_timeout_s: 1800,
        }
    }
}

/// How a process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    /// Its exit code, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended it, e.g. `"SIGKILL"`.
    pub signal: Option<String>,
    /// It was killed by `process_kill`, its session's end or its runner's.
    pub killed: bool,
    /// Its time limit expired (then it got SIGTERM).
    pub timed_out: bool,
    /// SIGTERM was not enough: SIGKILL ended its tree after [`TERM_GRACE`].
    pub escalated: bool,
}

impl Ended {
    /// `exit code 0`, `killed by SIGKILL`, ...
    pub fn describe(&self) -> String {
        let grace = TERM_GRACE.as_secs();
        if self.timed_out && self.escalated {
            format!(
                "timed out: sent SIGTERM, then SIGKILL {grace} s later; it was killed with its whole process tree"
            )
        } else if self.timed_out {
            let how = match (&self.signal, self.exit_code) {
                (Some(s), _) => format!("ended by {s}"),
                (None, Some(c)) => format!("exit code {c}"),
                (None, None) => "no status".into(),
            };
            format!("timed out: sent SIGTERM, it exited within the {grace} s grace period ({how})")
        } else if self.killed {
            "was killed with its whole process tree".into()
        } else if let Some(s) = &self.signal {
            format!("was ended by signal {s}")
        } else {
            format!("exited with code {}", self.exit_code.unwrap_or(-1))
        }
    }
}

/// What one read of a process's output returned.
#[derive(Debug, Clone)]
pub struct Taken {
    /// The output since the last read (the part still buffered).
    pub bytes: Vec<u8>,
    /// Unread bytes dropped from the buffer since the last read (still in the log file).
    pub dropped: u64,
    /// Bytes printed in all.
    pub total: u64,
    /// How it ended, once it has (and all its output has been read into the buffer).
    pub ended: Option<Ended>,
    /// The log file holding all its output.
    pub log: Option<PathBuf>,
}

/// A row of `process_list`.
#[derive(Debug, Clone)]
pub struct ProcessInfo {
    /// Its id, e.g. `net-3`.
    pub id: String,
    /// The command line.
    pub command: String,
    /// Time since it started.
    pub age: Duration,
    /// How it ended, or `None` while it runs.
    pub ended: Option<Ended>,
    /// Bytes printed in all.
    pub output_bytes: u64,
    /// Whether it has a pseudo-terminal.
    pub tty: bool,
}

/// What to start.
pub struct BgSpawn {
    /// The shell command, run with `sh -c`.
    pub command: String,
    /// Working directory: absolute, already confined by the caller.
    pub cwd: PathBuf,
    /// Which environment variables it inherits.
    pub env: EnvPolicy,
    /// Give it a pseudo-terminal.
    pub tty: bool,
    /// The session it belongs to.
    pub session: String,
    /// Where its whole output is written.
    pub log: Option<PathBuf>,
    /// Kill it after this long (none: it runs until it ends or is killed).
    pub timeout: Option<Duration>,
    /// Called once it has ended and its output is drained (e.g. to restore protected paths).
    pub on_end: Option<Box<dyn FnOnce() + Send>>,
}

/// The background processes of one runner.
pub struct ProcessTable {
    prefix: String,
    next: AtomicU64,
    limits: ProcessesConfig,
    procs: Mutex<BTreeMap<String, Arc<BgProcess>>>,
    buffered: Arc<AtomicUsize>,
}

impl ProcessTable {
    /// A table whose process ids are `{prefix}-{n}`, n counting from `first`.
    pub fn new(prefix: &str, first: u64, limits: ProcessesConfig) -> Self {
        Self {
            prefix: prefix.to_string(),
            next: AtomicU64::new(first.max(1)),
            limits,
            procs: Mutex::new(BTreeMap::new()),
            buffered: Arc::default(),
        }
    }

    /// The limits it enforces.
    pub fn limits(&self) -> &ProcessesConfig {
        &self.limits
    }

    /// Start a process (call from within a tokio runtime).
    pub fn spawn(&self, spec: BgSpawn) -> Result<Arc<BgProcess>, ToolError> {
        if spec.command.trim().is_empty() {
            return Err(ToolError::InvalidArguments(
                "command is empty; give a shell command to run".into(),
            ));
        }
        {
            let mut procs = lock(&self.procs);
            // Ended processes whose last output was read make room.
            procs.retain(|_, p| !(p.session == spec.session && p.is_done_and_read()));
            let running = procs
                .values()
                .filter(|p| p.session == spec.session && p.ended().is_none())
                .count();
            if running >= self.limits.max_per_session {
                return Err(ToolError::Conflict(format!(
                    "this session already has {running} running processes, the most the catalog's [processes] max_per_session allows; end one with process_kill (see process_list) and retry"
                )));
            }
        }
        let id = format!(
            "{}-{}",
            self.prefix,
            self.next.fetch_add(1, Ordering::Relaxed)
        );
        let proc = start(id.clone(), spec, &self.limits, self.buffered.clone())?;
        lock(&self.procs).insert(id, proc.clone());
        Ok(proc)
    }

    /// The process `id` of `session`; an unknown id or another session's is an error.
    pub fn get(&self, session: &str, id: &str) -> Result<Arc<BgProcess>, ToolError> {
        match lock(&self.procs).get(id) {
            Some(p) if p.session == session => Ok(p.clone()),
            _ => Err(unknown(id)),
        }
    }

    /// Take over a foreground command handed back still running (its time limit and the
    /// output file it writes go on): a process of `session` from now on. The session's limit on
    /// running processes is not checked here (the command already runs); see
    /// [`ProcessTable::has_room`].
    pub fn adopt(
        &self,
        running: Running,
        session: &str,
        command: &str,
        on_end: Option<Box<dyn FnOnce() + Send>>,
    ) -> Result<Arc<BgProcess>, ToolError> {
        let id = format!(
            "{}-{}",
            self.prefix,
            self.next.fetch_add(1, Ordering::Relaxed)
        );
        let Running {
            so_far,
            log,
            time_left,
            child,
            pidfd,
            output,
            log_file,
            started,
        } = running;
        let io = |e: std::io::Error| ToolError::Io(format!("watching the process: {e}"));
        set_nonblocking(&output);
        // SAFETY: the AsyncFd owns the descriptor, open and the same until dropped.
        let output = Arc::new(
            unsafe { AsyncFd::register_with_interest(output, Interest::READABLE) }
                .map_err(|e| io(e.into()))?,
        );
        let live = Live {
            child,
            pidfd,
            output,
            input: None,
            tty: false,
            log: log.zip(log_file),
            printed: so_far.output_bytes(),
            started,
        };
        let proc = launch(
            id.clone(),
            session.to_string(),
            command.to_string(),
            live,
            Some(time_left),
            on_end,
            &self.limits,
            self.buffered.clone(),
        );
        lock(&self.procs).insert(id, proc.clone());
        Ok(proc)
    }

    /// Whether `session` may start another process (fewer running than its limit).
    pub fn has_room(&self, session: &str) -> bool {
        let procs = lock(&self.procs);
        let running = procs
            .values()
            .filter(|p| p.session == session && p.ended().is_none())
            .count();
        running < self.limits.max_per_session
    }

    /// Forget process `id` (after its last output was read).
    pub fn remove(&self, id: &str) {
        if let Some(p) = lock(&self.procs).remove(id) {
            p.release();
        }
    }

    /// The processes of `session`, oldest first.
    pub fn list(&self, session: &str) -> Vec<Arc<BgProcess>> {
        let mut v: Vec<_> = lock(&self.procs)
            .values()
            .filter(|p| p.session == session)
            .cloned()
            .collect();
        v.sort_by_key(|p| p.started);
        v
    }

    /// Kill and forget every process of `session`; how many were running.
    pub fn end_session(&self, session: &str) -> usize {
        let gone: Vec<_> = {
            let mut procs = lock(&self.procs);
            let ids: Vec<String> = procs
                .iter()
                .filter(|(_, p)| p.session == session)
                .map(|(id, _)| id.clone())
                .collect();
            ids.iter().filter_map(|id| procs.remove(id)).collect()
        };
        let mut running = 0;
        for p in gone {
            if p.ended().is_none() {
                running += 1;
            }
            p.kill();
            p.release();
        }
        running
    }

    /// Kill every process (the runner is shutting down).
    pub fn kill_all(&self) {
        let all: Vec<_> = std::mem::take(&mut *lock(&self.procs))
            .into_values()
            .collect();
        for p in all {
            p.kill();
        }
    }
}

/// The error for an id this session does not own.
fn unknown(id: &str) -> ToolError {
    ToolError::NotFound(format!(
        "no process `{id}` in this session: it never existed, belongs to another session, or ended and was read; see process_list for this session's processes"
    ))
}

/// One background process.
pub struct BgProcess {
    /// Its id, e.g. `net-3`.
    pub id: String,
    /// Its session.
    pub session: String,
    /// The command line.
    pub command: String,
    /// Whether it has a pseudo-terminal.
    pub tty: bool,
    started: Instant,
    state: Mutex<State>,
    changed: Notify,
    /// The init of its namespace (kill, reap).
    child: Arc<Mutex<NsChild>>,
    /// Where input goes: the pty's master, or the stdin pipe (`None` once closed).
    input: Mutex<Option<Arc<AsyncFd<OwnedFd>>>>,
    /// The pty's master, for signals to its foreground group.
    master: Option<Arc<AsyncFd<OwnedFd>>>,
    buffered: Arc<AtomicUsize>,
    limits: ProcessesConfig,
}

struct State {
    unread: VecDeque<u8>,
    dropped: u64,
    total: u64,
    ended: Option<Ended>,
    killed: bool,
    log: Option<(PathBuf, File)>,
    log_path: Option<PathBuf>,
    /// The final output (after the end) was read.
    final_read: bool,
}

impl BgProcess {
    /// How it ended, once it has and its output is all buffered.
    pub fn ended(&self) -> Option<Ended> {
        lock(&self.state).ended.clone()
    }

    fn is_done_and_read(&self) -> bool {
        let s = lock(&self.state);
        s.ended.is_some() && s.final_read
    }

    /// A row for `process_list`.
    pub fn info(&self) -> ProcessInfo {
        let s = lock(&self.state);
        ProcessInfo {
            id: self.id.clone(),
            command: self.command.clone(),
            age: self.started.elapsed(),
            ended: s.ended.clone(),
            output_bytes: s.total,
            tty: self.tty,
        }
    }

    /// The file its whole output is written to.
    pub fn log_path(&self) -> Option<PathBuf> {
        lock(&self.state).log_path.clone()
    }

    /// Time since it started.
    pub fn age(&self) -> Duration {
        self.started.elapsed()
    }

    /// Take the output since the last read.
    pub fn take(&self) -> Taken {
        let mut s = lock(&self.state);
        let bytes: Vec<u8> = s.unread.drain(..).collect();
        self.buffered.fetch_sub(bytes.len(), Ordering::Relaxed);
        let dropped = std::mem::take(&mut s.dropped);
        if s.ended.is_some() {
            s.final_read = true;
        }
        Taken {
            bytes,
            dropped,
            total: s.total,
            ended: s.ended.clone(),
            log: s.log_path.clone(),
        }
    }

    /// Wait until it prints something or ends, or `wait` passes; once output arrives, keep
    /// collecting until it pauses for `settle` (a prompt after an answer). `tick` is called
    /// about once a second with the time waited so far.
    pub async fn wait_output(
        &self,
        wait: Duration,
        settle: Duration,
        tick: &(dyn Fn(Duration) + Sync),
    ) {
        let start = tokio::time::Instant::now();
        let deadline = start + wait;
        let mut seen = lock(&self.state).total;
        let mut got_any = !lock(&self.state).unread.is_empty();
        loop {
            let notified = self.changed.notified();
            {
                let s = lock(&self.state);
                if s.ended.is_some() {
                    return;
                }
                if s.total > seen {
                    seen = s.total;
                    got_any = true;
                }
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return;
            }
            let until = if got_any {
                (now + settle).min(deadline)
            } else {
                deadline.min(now + Duration::from_secs(1))
            };
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(until) => {
                    if got_any {
                        return;
                    }
                    tick(start.elapsed());
                }
            }
        }
    }

    /// Write `data` to its input.
    pub async fn write(&self, data: &[u8]) -> Result<(), ToolError> {
        if self.ended().is_some() {
            return Err(ToolError::Conflict(format!(
                "process {} has ended, so it reads no more input; start it again with run_command",
                self.id
            )));
        }
        let Some(fd) = lock(&self.input).clone() else {
            return Err(ToolError::Conflict(format!(
                "process {} has no open input (it was closed with `eof`, or the command started in the foreground, with stdin from /dev/null); start it again with background or yield_ms to give it input",
                self.id
            )));
        };
        let mut rest = data;
        while !rest.is_empty() {
            let mut guard = fd
                .writable()
                .await
                .map_err(|e| ToolError::Io(format!("writing to {}: {e}", self.id)))?;
            // SAFETY: a write from a live buffer to a descriptor we own.
            match guard.try_io(|f| {
                let n = unsafe { libc::write(f.as_raw_fd(), rest.as_ptr().cast(), rest.len()) };
                if n < 0 {
                    Err(std::io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            }) {
                Ok(Ok(n)) => rest = &rest[n..],
                Ok(Err(e)) if e.raw_os_error() == Some(libc::EPIPE) => {
                    return Err(ToolError::Conflict(format!(
                        "process {} closed its input; it reads no more",
                        self.id
                    )));
                }
                Ok(Err(e)) => return Err(ToolError::Io(format!("writing to {}: {e}", self.id))),
                Err(_would_block) => continue,
            }
        }
        Ok(())
    }

    /// Close its input (end of file), for a pipe; a pty gets `^D` instead.
    pub fn close_input(&self) {
        if !self.tty {
            lock(&self.input).take();
        }
    }

    /// Send `sig` to the command (a pty's foreground group, else the command's group).
    pub fn signal(&self, sig: i32) -> Result<(), ToolError> {
        if self.ended().is_some() {
            return Ok(());
        }
        if sig == libc::SIGKILL {
            self.kill();
            return Ok(());
        }
        // SAFETY: ioctl/killpg only send a signal.
        let r = unsafe {
            match &self.master {
                Some(m) => libc::ioctl(m.get_ref().as_raw_fd(), libc::TIOCSIG, sig),
                None => {
                    let child = lock(&self.child);
                    if child.reaped() {
                        return Ok(());
                    }
                    libc::killpg(child.pid(), sig)
                }
            }
        };
        if r < 0 {
            return Err(ToolError::Io(format!(
                "sending signal {sig} to {}: {}",
                self.id,
                std::io::Error::last_os_error()
            )));
        }
        Ok(())
    }

    /// Kill its whole tree (idempotent).
    pub fn kill(&self) {
        lock(&self.state).killed = true;
        lock(&self.child).kill();
    }

    /// Give back what its buffer holds to the runner's total.
    fn release(&self) {
        let mut s = lock(&self.state);
        self.buffered.fetch_sub(s.unread.len(), Ordering::Relaxed);
        s.unread.clear();
    }

    fn push(&self, chunk: &[u8]) {
        let mut s = lock(&self.state);
        let before = s.total;
        s.total += chunk.len() as u64;
        if let Some((path, file)) = &mut s.log {
            // Capped like any saved output, with a line saying where it stopped.
            let room = usize::try_from(crate::spill::MAX_SAVED_BYTES.saturating_sub(before))
                .unwrap_or(usize::MAX);
            let full = room <= chunk.len();
            let written = file
                .write_all(&chunk[..room.min(chunk.len())])
                .and_then(|()| {
                    if full {
                        file.write_all(
                            b"\n[toolyard: the output beyond this point was not saved]\n",
                        )
                    } else {
                        Ok(())
                    }
                });
            if let Err(e) = &written {
                tracing::warn!(path = %path.display(), error = %e, "cannot write a process log");
            }
            if written.is_err() || full {
                s.log = None;
            }
        }
        s.unread.extend(chunk);
        let total = self.buffered.fetch_add(chunk.len(), Ordering::Relaxed) + chunk.len();
        let over_own = s.unread.len().saturating_sub(self.limits.output_bytes);
        let over_all = total.saturating_sub(self.limits.total_output_bytes);
        let cut = over_own.max(over_all).min(s.unread.len());
        if cut > 0 {
            s.unread.drain(..cut);
            s.dropped += cut as u64;
            self.buffered.fetch_sub(cut, Ordering::Relaxed);
        }
        drop(s);
        self.changed.notify_waiters();
    }
}

/// Run `f` on the one thread that spawns every background process: their inits die with it,
/// and it lives as long as the process.
fn on_spawner<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, ToolError> {
    type Job = Box<dyn FnOnce() + Send>;
    static SPAWNER: std::sync::OnceLock<Mutex<std::sync::mpsc::Sender<Job>>> =
        std::sync::OnceLock::new();
    let tx = SPAWNER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let _ = std::thread::Builder::new()
            .name("toolyard-spawner".into())
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    job();
                }
            });
        Mutex::new(tx)
    });
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let job: Job = Box::new(move || {
        let _ = done_tx.send(f());
    });
    lock(tx)
        .send(job)
        .map_err(|_| ToolError::Unavailable("the process spawner thread is gone".into()))?;
    done_rx
        .recv()
        .map_err(|_| ToolError::Unavailable("the process spawner thread is gone".into()))
}

fn os_err(what: &str) -> ToolError {
    ToolError::Io(format!("{what}: {}", std::io::Error::last_os_error()))
}

fn owned(fd: RawFd, what: &str) -> Result<OwnedFd, ToolError> {
    if fd < 0 {
        return Err(os_err(what));
    }
    // SAFETY: a descriptor just returned to us by the kernel.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A pseudo-terminal: (master, slave), with a window size set.
fn open_pty() -> Result<(OwnedFd, OwnedFd), ToolError> {
    // SAFETY: plain pty syscalls; buffers are local.
    unsafe {
        let master = owned(
            libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC),
            "opening a pseudo-terminal (/dev/ptmx)",
        )?;
        if libc::grantpt(master.as_raw_fd()) != 0 || libc::unlockpt(master.as_raw_fd()) != 0 {
            return Err(os_err("unlocking the pseudo-terminal"));
        }
        let mut name = [0 as libc::c_char; 128];
        if libc::ptsname_r(master.as_raw_fd(), name.as_mut_ptr(), name.len()) != 0 {
            return Err(os_err("naming the pseudo-terminal"));
        }
        let slave = owned(
            libc::open(
                name.as_ptr(),
                libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
            ),
            "opening the pseudo-terminal's slave",
        )?;
        let ws = libc::winsize {
            ws_row: TTY_ROWS,
            ws_col: TTY_COLS,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        libc::ioctl(slave.as_raw_fd(), libc::TIOCSWINSZ, &ws);
        Ok((master, slave))
    }
}

fn pipe() -> Result<(OwnedFd, OwnedFd), ToolError> {
    fd::pipe(libc::O_CLOEXEC).map_err(|e| ToolError::Io(format!("creating a pipe: {e}")))
}

fn start(
    id: String,
    spec: BgSpawn,
    limits: &ProcessesConfig,
    buffered: Arc<AtomicUsize>,
) -> Result<Arc<BgProcess>, ToolError> {
    let Some(user_ns) = spawn::user_ns(tree::mechanism()) else {
        return Err(ToolError::Unavailable(
            "background processes need a PID namespace per command, which this system does not allow (see `toolyard doctor`); run the command without background/yield_ms".into(),
        ));
    };
    let terminal = if spec.tty {
        Terminal::Pty
    } else {
        Terminal::None
    };
    let shell = ShellCommand::new(
        &spec.command,
        &spec.cwd,
        spec.env.build_for(std::env::vars_os(), terminal),
    )?;

    // Output: one stream (a terminal's, or stdout and stderr on one pipe, interleaved as a
    // person would see them). Input: the pty, or a pipe.
    let (out_read, input, child_fds) = if spec.tty {
        let (master, slave) = open_pty()?;
        // SAFETY: dup of a descriptor we own.
        let input = owned(
            unsafe { libc::fcntl(master.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) },
            "duplicating the pty",
        )?;
        (master, input, vec![slave])
    } else {
        let (in_r, in_w) = pipe()?;
        let (out_r, out_w) = pipe()?;
        (out_r, in_w, vec![in_r, out_w])
    };
    let stdio = if spec.tty {
        let s = child_fds[0].as_raw_fd();
        NsStdio {
            stdin: s,
            stdout: s,
            stderr: s,
            controlling_tty: true,
        }
    } else {
        let (i, o) = (child_fds[0].as_raw_fd(), child_fds[1].as_raw_fd());
        NsStdio {
            stdin: i,
            stdout: o,
            stderr: o,
            controlling_tty: false,
        }
    };
    let spawned = on_spawner(move || {
        let r = shell.spawn(stdio, user_ns, true);
        // The child has its copies now; ours would keep the output open forever.
        drop(child_fds);
        r
    })??;
    let tree::NsSpawned { child, pidfd } = spawned;
    let io = |e: std::io::Error| ToolError::Io(format!("watching the process: {e}"));
    set_nonblocking(&out_read);
    set_nonblocking(&input);
    // SAFETY (all three): each AsyncFd owns its descriptor, open and the same until dropped.
    let out_read = Arc::new(
        unsafe {
            AsyncFd::register_with_interest(out_read, Interest::READABLE | Interest::WRITABLE)
        }
        .map_err(|e| io(e.into()))?,
    );
    let input = Arc::new(
        unsafe { AsyncFd::register_with_interest(input, Interest::WRITABLE) }
            .map_err(|e| io(e.into()))?,
    );
    let pidfd = unsafe { AsyncFd::register_with_interest(pidfd, Interest::READABLE) }
        .map_err(|e| io(e.into()))?;
    let log = spec.log.as_ref().and_then(|p| match File::create(p) {
        Ok(f) => Some((p.clone(), f)),
        Err(e) => {
            tracing::warn!(path = %p.display(), error = %e, "cannot create a process log");
            None
        }
    });
    let live = Live {
        child,
        pidfd,
        output: out_read,
        input: Some(input),
        tty: spec.tty,
        log,
        printed: 0,
        started: Instant::now(),
    };
    Ok(launch(
        id,
        spec.session,
        spec.command,
        live,
        spec.timeout,
        spec.on_end,
        limits,
        buffered,
    ))
}

/// A started process's parts, as [`launch`] takes them.
struct Live {
    child: NsChild,
    pidfd: AsyncFd<OwnedFd>,
    /// Its output (a pty's master, or the read end of its one output pipe).
    output: Arc<AsyncFd<OwnedFd>>,
    /// Where input goes (none: it reads no input).
    input: Option<Arc<AsyncFd<OwnedFd>>>,
    tty: bool,
    log: Option<(PathBuf, File)>,
    /// Bytes it printed before it became a background process.
    printed: u64,
    started: Instant,
}

/// Make the process and start watching it.
#[allow(clippy::too_many_arguments)]
fn launch(
    id: String,
    session: String,
    command: String,
    live: Live,
    timeout: Option<Duration>,
    on_end: Option<Box<dyn FnOnce() + Send>>,
    limits: &ProcessesConfig,
    buffered: Arc<AtomicUsize>,
) -> Arc<BgProcess> {
    let proc = Arc::new(BgProcess {
        id,
        session,
        command,
        tty: live.tty,
        started: live.started,
        state: Mutex::new(State {
            unread: VecDeque::new(),
            dropped: 0,
            total: live.printed,
            ended: None,
            killed: false,
            log_path: live.log.as_ref().map(|(p, _)| p.clone()),
            log: live.log,
            final_read: false,
        }),
        changed: Notify::new(),
        child: Arc::new(Mutex::new(live.child)),
        input: Mutex::new(live.input),
        master: live.tty.then(|| live.output.clone()),
        buffered,
        limits: limits.clone(),
    });
    tokio::spawn(watch(
        proc.clone(),
        live.output,
        live.pidfd,
        timeout,
        on_end,
    ));
    proc
}

/// Read the output until the end, reap the init, record how it ended, call `on_end`.
async fn watch(
    proc: Arc<BgProcess>,
    out: Arc<AsyncFd<OwnedFd>>,
    pidfd: AsyncFd<OwnedFd>,
    timeout: Option<Duration>,
    on_end: Option<Box<dyn FnOnce() + Send>>,
) {
    let mut buf = vec![0u8; CHUNK];
    let mut open = true;
    let mut status: Option<std::process::ExitStatus> = None;
    let mut timed_out = false;
    let far = tokio::time::Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600);
    let deadline = timeout.map_or(far, |t| tokio::time::Instant::now() + t);
    let mut give_up = far;
    // SIGTERM at the time limit, SIGKILL after the grace period.
    let mut kill_at = far;
    let mut escalated = false;
    loop {
        if !open && status.is_some() {
            break;
        }
        tokio::select! {
            r = out.readable(), if open => match r {
                Ok(mut guard) => {
                    // SAFETY: a read into a local buffer from a descriptor we own.
                    match guard.try_io(|f| {
                        let n = unsafe { libc::read(f.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
                        if n < 0 { Err(std::io::Error::last_os_error()) } else { Ok(n as usize) }
                    }) {
                        Ok(Ok(0)) => open = false,
                        Ok(Ok(n)) => proc.push(&buf[..n]),
                        // EIO: every slave of the pty is closed.
                        Ok(Err(_)) => open = false,
                        Err(_would_block) => {}
                    }
                }
                Err(_) => open = false,
            },
            r = pidfd.readable(), if status.is_none() => {
                match r {
                    Ok(mut guard) => {
                        let reaped = lock(&proc.child).try_reap();
                        match reaped {
                            Ok(Some(st)) => {
                                status = Some(st);
                                give_up = tokio::time::Instant::now() + DRAIN_GRACE;
                            }
                            Ok(None) => guard.clear_ready(),
                            Err(e) => {
                                tracing::warn!(error = %e, "reaping a background process");
                                status = Some(std::process::ExitStatus::from_raw(127 << 8));
                                give_up = tokio::time::Instant::now() + DRAIN_GRACE;
                            }
                        }
                    }
                    Err(_) => {
                        status = Some(std::process::ExitStatus::from_raw(127 << 8));
                    }
                }
            }
            _ = tokio::time::sleep_until(deadline), if status.is_none() && !timed_out => {
                timed_out = true;
                lock(&proc.child).terminate();
                kill_at = tokio::time::Instant::now() + TERM_GRACE;
            }
            _ = tokio::time::sleep_until(kill_at), if status.is_none() && timed_out && !escalated => {
                escalated = true;
                lock(&proc.child).kill();
            }
            _ = tokio::time::sleep_until(give_up), if status.is_some() && open => {
                open = false;
            }
        }
    }
    lock(&proc.input).take();
    if let Some(f) = on_end {
        let _ = tokio::task::spawn_blocking(f).await;
    }
    let st = status.unwrap_or_else(|| std::process::ExitStatus::from_raw(127 << 8));
    let (exit_code, signal) = spawn::exit_of(st);
    {
        let mut s = lock(&proc.state);
        if let Some((_, f)) = &mut s.log {
            let _ = f.flush();
        }
        s.ended = Some(Ended {
            exit_code,
            signal,
            killed: s.killed,
            timed_out,
            escalated,
        });
    }
    proc.changed.notify_waiters();
}
