//! Killing a whole process tree, grandchildren that called `setsid` or double-forked included.
//!
//! The preferred mechanism is a PID namespace per command: the spawned process (the "outer
//! shim", outside the namespace) unshares `CLONE_NEWPID` and forks a tiny init of our own (PID 1
//! of the namespace), which forks `sh` (PID 2). When the init dies, the kernel kills every other
//! process of the namespace. The init reaps orphans and, once `sh` has exited, hands its raw
//! wait status to the outer shim over a pipe and exits (so background leftovers die with it);
//! the outer shim then ends the same way `sh` did (same exit code, or same signal), which is what
//! the caller's `wait` sees. Killing the command's process group therefore kills the init, and
//! with it the whole namespace.
//!
//! Without a PID namespace, a delegated cgroup v2 with `cgroup.kill` is used, and as a last
//! resort the process group (which misses processes that called `setsid`).

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::process::Command;

/// How a command's process tree is killed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Mechanism {
    /// A PID namespace per command, made directly (root, or inside our own user namespace).
    PidNamespace,
    /// A user namespace first, then a PID namespace (unprivileged).
    UserPidNamespace,
    /// A child cgroup per command under this delegated cgroup v2 directory.
    Cgroup(PathBuf),
    /// `killpg` only: misses processes that left the group.
    ProcessGroup,
}

impl Mechanism {
    fn name(&self) -> &'static str {
        match self {
            Mechanism::PidNamespace => "pid-namespace",
            Mechanism::UserPidNamespace => "user+pid-namespace",
            Mechanism::Cgroup(_) => "cgroup-v2",
            Mechanism::ProcessGroup => "process-group",
        }
    }
}

/// Environment variable that forces a mechanism (for tests and debugging), when it works.
pub const FORCE_MECHANISM_ENV: &str = "TOOLYARD_TREE_KILL";

static MECHANISM: OnceLock<Mechanism> = OnceLock::new();

/// The mechanism this process uses to kill a command's whole tree, e.g. `"pid-namespace"`.
pub fn tree_kill_mechanism() -> &'static str {
    mechanism().name()
}

/// Whether process `pid` is alive: it exists (one this process may not signal counts too) and
/// has not exited (a zombie only waits for its parent to reap it).
pub fn pid_alive(pid: u32) -> bool {
    let Ok(p) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // 0 would name this process group, not a process.
    if p <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists; nothing is sent.
    if unsafe { libc::kill(p, 0) } != 0
        && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    {
        return false;
    }
    // Its state is the first field after the command name, which may hold `)` itself; a
    // `/proc` this process cannot read leaves the answer to `kill`.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
        s.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_none_or(|state| state != "Z")
    })
}

pub(crate) fn mechanism() -> &'static Mechanism {
    MECHANISM.get_or_init(detect)
}

fn detect() -> Mechanism {
    let forced = std::env::var(FORCE_MECHANISM_ENV).ok();
    let wanted = |name: &str| forced.as_deref().is_none_or(|f| f == name);
    let mut candidates = Vec::new();
    if wanted("pid-namespace") {
        candidates.push(Mechanism::PidNamespace);
    }
    if wanted("user+pid-namespace") {
        candidates.push(Mechanism::UserPidNamespace);
    }
    if wanted("cgroup-v2")
        && let Some(dir) = delegated_cgroup()
    {
        candidates.push(Mechanism::Cgroup(dir));
    }
    for m in candidates {
        match probe(&m) {
            Ok(()) => {
                tracing::debug!(mechanism = m.name(), "process-tree kill mechanism");
                return m;
            }
            Err(e) => {
                tracing::debug!(mechanism = m.name(), error = %e, "tree-kill mechanism unavailable")
            }
        }
    }
    tracing::warn!(
        "no PID namespace or delegated cgroup: a timed-out command's setsid'd descendants may survive"
    );
    Mechanism::ProcessGroup
}

/// Spawn `sh -c 'exit 7'` through the mechanism and check the status comes back faithfully.
fn probe(m: &Mechanism) -> io::Result<()> {
    let status = match m {
        Mechanism::PidNamespace | Mechanism::UserPidNamespace => {
            let sh = CString::from(c"/bin/sh");
            let args = [sh.clone(), CString::from(c"-c"), CString::from(c"exit 7")];
            let cwd = CString::from(c"/");
            let spawned = spawn_in_pid_namespace(
                &NsCommand {
                    program: &sh,
                    args: &args,
                    env: &[],
                    cwd: &cwd,
                    stdio: None,
                    die_with_parent: false,
                },
                matches!(m, Mechanism::UserPidNamespace),
            )?;
            let NsSpawned { mut child, .. } = spawned;
            child.wait_blocking()
        }
        _ => {
            let mut cmd = std::process::Command::new("/bin/sh");
            cmd.args(["-c", "exit 7"])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null());
            let leaf = prepare_std(&mut cmd, m)?;
            let status = cmd.status();
            if let Some(leaf) = leaf {
                leaf.remove();
            }
            status
        }
    };
    match status?.code() {
        Some(7) => Ok(()),
        other => Err(io::Error::other(format!("probe exited with {other:?}"))),
    }
}

/// A running command's tree, for killing and cleanup.
#[derive(Debug)]
pub(crate) struct Tree {
    pgid: i32,
    leaf: Option<CgroupLeaf>,
}

impl Tree {
    /// Ask every process of the tree to end (SIGTERM), so it can clean up (remove its lock
    /// files) before [`Tree::kill`].
    pub(crate) fn terminate(&self) {
        match &self.leaf {
            // The cgroup holds the processes that left the group too.
            Some(leaf) => leaf.signal(libc::SIGTERM),
            // SAFETY: killpg only sends a signal; pgid is the group our child leads.
            None => unsafe {
                libc::killpg(self.pgid, libc::SIGTERM);
            },
        }
    }

    /// Kill every process of the tree (idempotent).
    pub(crate) fn kill(&self) {
        if let Some(leaf) = &self.leaf {
            leaf.kill();
        }
        // SAFETY: killpg only sends a signal; pgid is the group our child leads.
        unsafe {
            libc::killpg(self.pgid, libc::SIGKILL);
        }
    }

    /// Remove what the tree left behind (its cgroup), after it is dead.
    pub(crate) fn cleanup(self) {
        if let Some(leaf) = self.leaf {
            leaf.kill();
            leaf.remove();
        }
    }
}

/// Configure `cmd` so its tree can be killed with the current mechanism; call [`Tree::new`]
/// with the spawned pid afterwards.
pub(crate) fn prepare(cmd: &mut Command, m: &Mechanism) -> io::Result<Prepared> {
    Ok(Prepared {
        leaf: prepare_std(cmd.as_std_mut(), m)?,
    })
}

/// A command configured by [`prepare`], not yet spawned.
#[derive(Debug)]
pub(crate) struct Prepared {
    leaf: Option<CgroupLeaf>,
}

impl Prepared {
    /// The tree of the command spawned with pid `pid` (its process group id).
    pub(crate) fn spawned(self, pid: u32) -> Tree {
        Tree {
            pgid: i32::try_from(pid).unwrap_or(i32::MAX),
            leaf: self.leaf,
        }
    }

    /// The spawn failed: remove what was prepared.
    pub(crate) fn abandon(self) {
        if let Some(leaf) = self.leaf {
            leaf.remove();
        }
    }
}

/// [`prepare`] for a `std` command: its cgroup leaf, if the mechanism makes one.
fn prepare_std(cmd: &mut std::process::Command, m: &Mechanism) -> io::Result<Option<CgroupLeaf>> {
    use std::os::unix::process::CommandExt;
    cmd.process_group(0);
    let leaf = match m {
        Mechanism::Cgroup(parent) => Some(CgroupLeaf::create(parent)?),
        _ => None,
    };
    let hook = PreExec::new(leaf.as_ref());
    // SAFETY: the hook only makes async-signal-safe syscalls on data prepared before the fork.
    unsafe {
        cmd.pre_exec(move || hook.run());
    }
    Ok(leaf)
}

/// What runs in the forked child before `exec`; everything it needs is allocated beforehand.
struct PreExec {
    cgroup_procs: Option<CString>,
}

impl PreExec {
    fn new(leaf: Option<&CgroupLeaf>) -> Self {
        Self {
            cgroup_procs: leaf.map(|l| l.procs.clone()),
        }
    }

    fn run(&self) -> io::Result<()> {
        if let Some(procs) = &self.cgroup_procs {
            write_file(procs, b"0")?;
        }
        Ok(())
    }
}

/// The uid/gid map lines that map our own ids into a new user namespace.
pub(crate) struct IdMaps {
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

impl IdMaps {
    /// Maps for the current real uid and gid (computed before any fork).
    pub(crate) fn current() -> Self {
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        Self {
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
        }
    }

    /// Write the maps for this process, just after `unshare(CLONE_NEWUSER)`.
    pub(crate) fn write(&self) -> io::Result<()> {
        // setgroups must be denied before an unprivileged gid_map write is allowed.
        write_file(c"/proc/self/setgroups", b"deny")?;
        write_file(c"/proc/self/uid_map", &self.uid_map)?;
        write_file(c"/proc/self/gid_map", &self.gid_map)
    }
}

/// Open, write and close with raw syscalls (async-signal-safe).
pub(crate) fn write_file(path: &std::ffi::CStr, data: &[u8]) -> io::Result<()> {
    // SAFETY: plain syscalls on a valid C string and buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        let err = io::Error::last_os_error();
        libc::close(fd);
        if n == data.len() as isize {
            Ok(())
        } else {
            Err(err)
        }
    }
}

/// Close every descriptor from `from` upward except `keep`.
fn close_all_but(from: libc::c_uint, keep: libc::c_int) {
    let keep = keep as libc::c_uint;
    // SAFETY: close_range only closes descriptors.
    unsafe {
        if keep > from {
            libc::syscall(libc::SYS_close_range, from, keep - 1, 0);
        }
        libc::syscall(libc::SYS_close_range, keep + 1, libc::c_uint::MAX, 0);
    }
}

/// What a command run in a PID namespace of its own executes.
pub(crate) struct NsCommand<'a> {
    /// The program to exec, e.g. `/bin/sh`.
    pub(crate) program: &'a CStr,
    /// Its argument vector, `argv[0]` included.
    pub(crate) args: &'a [CString],
    /// Its whole environment, as `NAME=value` strings.
    pub(crate) env: &'a [CString],
    /// Its working directory.
    pub(crate) cwd: &'a CStr,
    /// Descriptors to give it as stdin/stdout/stderr (pipes, a pty) instead of /dev/null for
    /// all three; the caller keeps (and closes) its own copies.
    pub(crate) stdio: Option<NsStdio>,
    /// The init dies (and the whole tree with it) when the thread that spawned it exits:
    /// for processes that outlive the call that started them.
    pub(crate) die_with_parent: bool,
}

/// Given standard descriptors for a command in a PID namespace.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NsStdio {
    pub(crate) stdin: libc::c_int,
    pub(crate) stdout: libc::c_int,
    pub(crate) stderr: libc::c_int,
    /// Make stdin the command's controlling terminal, in a session of its own (a pty).
    pub(crate) controlling_tty: bool,
}

/// A command just started in its own PID namespace.
pub(crate) struct NsSpawned {
    pub(crate) child: NsChild,
    /// Becomes readable when the init (and so the whole namespace) is gone.
    pub(crate) pidfd: OwnedFd,
}

/// The init of a command's PID namespace, as seen from the runner.
///
/// Dropping it before it was reaped kills the whole tree and reaps it on a helper thread.
#[derive(Debug)]
pub(crate) struct NsChild {
    pid: libc::pid_t,
    /// The init's report: 8 bytes, `[0, raw wait status of the command]` or `[1, errno]` of a
    /// setup step that failed before the command could start.
    report: OwnedFd,
    reaped: bool,
}

/// The stack on which the init starts the command with `clone(CLONE_VM | CLONE_VFORK)`, like
/// `posix_spawn`. Only ever touched in an init, each of which has its own copy of the runner's
/// memory, so concurrent spawns never share it and the runner never pays for it.
struct SpawnStack(std::cell::UnsafeCell<[u8; SPAWN_STACK]>);
// SAFETY: the runner never reads or writes it; each init writes only its private copy.
unsafe impl Sync for SpawnStack {}
const SPAWN_STACK: usize = 64 * 1024;
static SPAWN_STACK_MEM: SpawnStack = SpawnStack(std::cell::UnsafeCell::new([0; SPAWN_STACK]));

/// The signal that asks a namespace's init to send SIGTERM to every process of its namespace:
/// a real-time one nothing else sends it, so a SIGTERM sent to the command's group (which holds
/// the init) is not passed on a second time.
pub(crate) fn term_request() -> libc::c_int {
    libc::SIGRTMIN()
}

/// The init's handler of [`term_request`]: SIGTERM to every other process of the namespace.
extern "C" fn forward_term(_sig: libc::c_int) {
    // SAFETY: kill is async-signal-safe; -1 in a PID namespace's init means all but itself.
    unsafe {
        libc::kill(-1, libc::SIGTERM);
    }
}

/// Report kinds written by the init.
const REPORT_STATUS: i32 = 0;
const REPORT_ERRNO: i32 = 1;

/// Everything the init needs, prepared before the clone (the child must not allocate).
struct InitContext<'a> {
    program: &'a CStr,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: &'a CStr,
    stdin: libc::c_int,
    stdout: libc::c_int,
    stderr: libc::c_int,
    report: libc::c_int,
    id_maps: Option<&'a IdMaps>,
    stack_top: *mut libc::c_void,
    /// The nested Landlock ruleset the command enters before exec (-1: none).
    layer: libc::c_int,
    controlling_tty: bool,
    die_with_parent: bool,
    /// [`term_request`], computed before the clone.
    term_request: libc::c_int,
}

/// `struct clone_args` of `clone3(2)` (the first, version 0 fields).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
}

/// Start `cmd` as PID 2 of a new PID namespace (in a new user namespace too when `user_ns`),
/// under an init of our own as PID 1, in a process group of its own, with the given standard
/// descriptors (or /dev/null).
///
/// One `clone3(CLONE_NEWPID | CLONE_PIDFD)` makes the init directly (no shim outside the
/// namespace); the init starts the command with a vfork-style clone (no copy of the address
/// space), closes everything but its report pipe, reaps every process until the command has
/// exited, reports the command's raw wait status and exits, and the kernel then kills whatever
/// the command left behind. The runner waits on the pidfd, which is readable once the init
/// (and so the namespace) is gone.
pub(crate) fn spawn_in_pid_namespace(cmd: &NsCommand<'_>, user_ns: bool) -> io::Result<NsSpawned> {
    let argv: Vec<*const libc::c_char> = cmd
        .args
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let envp: Vec<*const libc::c_char> = cmd
        .env
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    // SAFETY: open of a constant path; the descriptor is then owned.
    let devnull = unsafe {
        let fd = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        OwnedFd::from_raw_fd(fd)
    };
    let (stdin, stdout, stderr) = match &cmd.stdio {
        Some(s) => (s.stdin, s.stdout, s.stderr),
        None => {
            let null = devnull.as_raw_fd();
            (null, null, null)
        }
    };
    let (report_r, report_w) = crate::fd::pipe(libc::O_CLOEXEC | libc::O_NONBLOCK)?;
    let id_maps = user_ns.then(IdMaps::current);
    // The stack grows down; keep its top 16-byte aligned.
    let top = SPAWN_STACK_MEM
        .0
        .get()
        .cast::<u8>()
        .wrapping_add(SPAWN_STACK);
    let stack_top = top.wrapping_sub(top as usize % 16).cast::<libc::c_void>();
    let ctx = InitContext {
        program: cmd.program,
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        cwd: cmd.cwd,
        stdin,
        stdout,
        stderr,
        report: report_w.as_raw_fd(),
        id_maps: id_maps.as_ref(),
        stack_top,
        layer: crate::domain::command_layer_fd(),
        controlling_tty: cmd.stdio.is_some_and(|s| s.controlling_tty),
        die_with_parent: cmd.die_with_parent,
        term_request: term_request(),
    };
    let mut pidfd: libc::c_int = -1;
    let mut flags = (libc::CLONE_NEWPID | libc::CLONE_PIDFD) as u64;
    if user_ns {
        flags |= libc::CLONE_NEWUSER as u64;
    }
    let mut args = CloneArgs {
        flags,
        pidfd: std::ptr::from_mut(&mut pidfd) as u64,
        exit_signal: libc::SIGCHLD as u64,
        ..CloneArgs::default()
    };
    // SAFETY: a fork-like clone3 (no CLONE_VM, no new stack): the child continues here with
    // its own copy of the address space and runs only async-signal-safe code on data prepared
    // above, then exits without returning.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            std::ptr::from_mut(&mut args),
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: we are the freshly cloned, single-threaded child.
        unsafe { namespace_init(&ctx) }
    }
    // SAFETY: the kernel stored a new pidfd for the child.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    Ok(NsSpawned {
        child: NsChild {
            pid: pid as libc::pid_t,
            report: report_r,
            reaped: false,
        },
        pidfd,
    })
}

impl NsChild {
    /// The init's pid (also its process group's id), as the runner sees it.
    pub(crate) fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Whether the init was reaped (its pid may then belong to another process).
    pub(crate) fn reaped(&self) -> bool {
        self.reaped
    }

    /// Ask every process of the namespace to end: the init, on [`term_request`], sends SIGTERM
    /// to all of them (an init ignores SIGTERM itself, and a signal to the command's group
    /// would miss what left it).
    pub(crate) fn terminate(&self) {
        if self.reaped {
            return;
        }
        // SAFETY: only a signal; the pid cannot be reused before we reap it.
        unsafe {
            libc::kill(self.pid, term_request());
        }
    }

    /// Kill the whole tree (the init, and with it the namespace). Idempotent.
    pub(crate) fn kill(&self) {
        if self.reaped {
            return;
        }
        // SAFETY: only signals; the pid cannot be reused before we reap it.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::killpg(self.pid, libc::SIGKILL);
        }
    }

    /// Reap the init if it has exited, and say how the command ended.
    pub(crate) fn try_reap(&mut self) -> io::Result<Option<ExitStatus>> {
        self.reap(libc::WNOHANG)
    }

    /// Wait for the init to exit, and say how the command ended.
    pub(crate) fn wait_blocking(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(st) = self.reap(0)? {
                return Ok(st);
            }
        }
    }

    fn reap(&mut self, options: libc::c_int) -> io::Result<Option<ExitStatus>> {
        if self.reaped {
            return Err(io::Error::other("the command was already reaped"));
        }
        let mut init_status = 0;
        // SAFETY: waitpid on our own child.
        let r = unsafe { libc::waitpid(self.pid, &mut init_status, options) };
        if r == 0 {
            return Ok(None);
        }
        if r < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(None)
            } else {
                Err(e)
            };
        }
        self.reaped = true;
        let mut buf = [0u8; 8];
        // SAFETY: a non-blocking read into a local buffer; the init wrote its report (one
        // atomic write of 8 bytes) before exiting, or never.
        let n = unsafe { libc::read(self.report.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
        if n != 8 {
            // No report: the init itself was killed (our timeout or cancellation).
            return Ok(Some(ExitStatus::from_raw(init_status)));
        }
        let kind = i32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]);
        let value = i32::from_ne_bytes([buf[4], buf[5], buf[6], buf[7]]);
        if kind == REPORT_ERRNO {
            return Err(io::Error::from_raw_os_error(value));
        }
        Ok(Some(ExitStatus::from_raw(value)))
    }
}

impl Drop for NsChild {
    fn drop(&mut self) {
        if self.reaped {
            return;
        }
        // Abandoned (the caller gave up or was dropped): the tree dies, and is reaped aside.
        self.kill();
        let pid = self.pid;
        let _ = std::thread::Builder::new()
            .name("toolyard-reap".into())
            .spawn(move || {
                let mut st = 0;
                // SAFETY: waitpid on our own (killed) child.
                while unsafe { libc::waitpid(pid, &mut st, 0) } < 0
                    && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
                {
                }
            });
    }
}

/// Write the init's 8-byte report.
fn report(fd: libc::c_int, kind: i32, value: i32) {
    let mut buf = [0u8; 8];
    buf[..4].copy_from_slice(&kind.to_ne_bytes());
    buf[4..].copy_from_slice(&value.to_ne_bytes());
    // SAFETY: a plain write of a local buffer.
    unsafe {
        libc::write(fd, buf.as_ptr().cast(), buf.len());
    }
}

/// Report a failed setup step and exit.
fn init_fail(ctx: &InitContext<'_>) -> ! {
    let errno = io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO);
    report(ctx.report, REPORT_ERRNO, errno);
    // SAFETY: ends the init without running any of the runner's exit code.
    unsafe { libc::_exit(127) }
}

/// Make `fd` the descriptor `target`, inheritable across exec.
///
/// # Safety
/// Async-signal-safe; call only in the freshly cloned child.
unsafe fn move_fd(fd: libc::c_int, target: libc::c_int) -> bool {
    // SAFETY: descriptor syscalls only.
    unsafe {
        if fd == target {
            libc::fcntl(fd, libc::F_SETFD, 0) == 0
        } else {
            libc::dup2(fd, target) == target
        }
    }
}

/// PID 1 of the namespace: set up, start the command, reap everything, report, exit.
///
/// # Safety
/// Only in the freshly cloned, single-threaded child: async-signal-safe calls on data
/// prepared before the clone, no allocation.
unsafe fn namespace_init(ctx: &InitContext<'_>) -> ! {
    // SAFETY: see the function's contract.
    unsafe {
        // A fresh start: handlers inherited from the runner (tokio's SIGCHLD) must not run
        // here, and the command must not inherit a blocked signal or an ignored SIGPIPE.
        if ctx.die_with_parent {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        for sig in 1..32 {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
        if let Some(maps) = ctx.id_maps
            && maps.write().is_err()
        {
            init_fail(ctx);
        }
        if libc::setpgid(0, 0) != 0
            || !move_fd(ctx.stdin, 0)
            || !move_fd(ctx.stdout, 1)
            || !move_fd(ctx.stderr, 2)
            || libc::chdir(ctx.cwd.as_ptr()) != 0
        {
            init_fail(ctx);
        }
        let sh = libc::clone(
            exec_command,
            ctx.stack_top,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            std::ptr::from_ref(ctx).cast_mut().cast(),
        );
        if sh < 0 {
            init_fail(ctx);
        }
        // Installed once the command has exec'ed (the clone waits for that), so the command
        // starts with default handlers.
        libc::signal(
            ctx.term_request,
            forward_term as *const () as libc::sighandler_t,
        );
        // Hold no pipe open (stdio, the runner's descriptors), so readers see EOF when the
        // command's processes are gone.
        close_all_but(0, ctx.report);
        let mut status: libc::c_int = 127 << 8;
        loop {
            let mut st = 0;
            let r = libc::waitpid(-1, &mut st, 0);
            if r == sh {
                status = st;
                break;
            }
            if r < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                break;
            }
        }
        report(ctx.report, REPORT_STATUS, status);
        libc::_exit(0);
    }
}

/// The vfork-style child of the init: enter the command's domain and exec the command (the
/// init waits until it has).
extern "C" fn exec_command(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the init's context, alive while the init is suspended in the clone;
    // only execve and _exit are called.
    unsafe {
        let ctx = &*arg.cast::<InitContext<'_>>();
        // A terminal's session leader: ^C and ^Z on the pty reach the command's group.
        if ctx.controlling_tty && (libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0) {
            const MSG: &[u8] = b"toolyard: the command could not take its terminal\n";
            libc::write(2, MSG.as_ptr().cast(), MSG.len());
            libc::_exit(126);
        }
        // The init stays in the runner's domain; only the command is shut out of it.
        if crate::domain::enter_command_domain(ctx.layer).is_err() {
            const MSG: &[u8] = b"toolyard: the command could not enter its sandbox domain\n";
            libc::write(2, MSG.as_ptr().cast(), MSG.len());
            libc::_exit(126);
        }
        libc::execve(ctx.program.as_ptr(), ctx.argv, ctx.envp);
        libc::_exit(127)
    }
}

/// A per-command child cgroup, killed with `cgroup.kill` and removed afterwards.
#[derive(Debug)]
pub(crate) struct CgroupLeaf {
    dir: PathBuf,
    procs: CString,
}

impl CgroupLeaf {
    fn create(parent: &Path) -> io::Result<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = parent.join(format!("toolyard-{}-{n}", std::process::id()));
        std::fs::create_dir(&dir)?;
        let procs = CString::new(dir.join("cgroup.procs").as_os_str().as_bytes())
            .map_err(io::Error::other)?;
        Ok(Self { dir, procs })
    }

    /// Send `sig` to every process of the cgroup.
    fn signal(&self, sig: libc::c_int) {
        let procs = match std::fs::read_to_string(self.dir.join("cgroup.procs")) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(cgroup = %self.dir.display(), error = %e, "cannot list the command's processes");
                return;
            }
        };
        for pid in procs
            .lines()
            .filter_map(|l| l.trim().parse::<libc::pid_t>().ok())
        {
            // SAFETY: only a signal, to a process of the command's cgroup.
            unsafe {
                libc::kill(pid, sig);
            }
        }
    }

    fn kill(&self) {
        if let Err(e) = std::fs::write(self.dir.join("cgroup.kill"), "1") {
            tracing::warn!(cgroup = %self.dir.display(), error = %e, "cgroup.kill failed");
        }
    }

    fn remove(self) {
        // A killed cgroup empties asynchronously; retry briefly before giving up.
        for _ in 0..50 {
            match std::fs::remove_dir(&self.dir) {
                Ok(()) => return,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return,
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(2)),
            }
        }
        tracing::warn!(cgroup = %self.dir.display(), "could not remove the command's cgroup");
    }
}

/// Our own cgroup v2 directory when we can create children with `cgroup.kill` in it.
pub(crate) fn delegated_cgroup() -> Option<PathBuf> {
    let dir = own_cgroup_v2_dir()?;
    let probe = dir.join(format!("toolyard-probe-{}", std::process::id()));
    std::fs::create_dir(&probe).ok()?;
    let has_kill = probe.join("cgroup.kill").exists();
    let _ = std::fs::remove_dir(&probe);
    has_kill.then_some(dir)
}

/// The cgroup v2 directory this process belongs to (unified or hybrid hierarchy).
pub(crate) fn own_cgroup_v2_dir() -> Option<PathBuf> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = cgroup.lines().find_map(|l| l.strip_prefix("0::"))?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        (right.split_whitespace().next()? == "cgroup2").then(|| left.split_whitespace().nth(4))?
    })?;
    Some(Path::new(mount).join(rel.trim_start_matches('/')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_is_alive_until_it_exits_and_a_zombie_counts_as_exited() {
        assert!(pid_alive(std::process::id()));
        assert!(!pid_alive(0));
        assert!(!pid_alive(u32::MAX));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        // Exited and not reaped yet: a zombie, which `pid_alive` calls dead.
        let state = || std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        while !state().contains(") Z ") {
            std::thread::yield_now();
        }
        assert!(!pid_alive(pid));
        child.wait().unwrap();
        assert!(!pid_alive(pid));
    }
}
