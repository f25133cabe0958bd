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

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
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
    cmd.process_group(0);
    let leaf = match m {
        Mechanism::Cgroup(parent) => Some(CgroupLeaf::create(parent)?),
        _ => None,
    };
    let hook = PreExec::new(m, leaf.as_ref());
    // SAFETY: the hook only makes async-signal-safe syscalls on data prepared before the fork.
    unsafe {
        cmd.pre_exec(move || hook.run());
    }
    Ok(Prepared { leaf })
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

fn prepare_std(cmd: &mut std::process::Command, m: &Mechanism) -> io::Result<Option<CgroupLeaf>> {
    use std::os::unix::process::CommandExt;
    cmd.process_group(0);
    let leaf = match m {
        Mechanism::Cgroup(parent) => Some(CgroupLeaf::create(parent)?),
        _ => None,
    };
    let hook = PreExec::new(m, leaf.as_ref());
    // SAFETY: as in `prepare`.
    unsafe {
        cmd.pre_exec(move || hook.run());
    }
    Ok(leaf)
}

/// What runs in the forked child before `exec`; everything it needs is allocated beforehand.
struct PreExec {
    pid_ns: bool,
    id_maps: Option<IdMaps>,
    cgroup_procs: Option<CString>,
}

impl PreExec {
    fn new(m: &Mechanism, leaf: Option<&CgroupLeaf>) -> Self {
        Self {
            pid_ns: matches!(m, Mechanism::PidNamespace | Mechanism::UserPidNamespace),
            id_maps: matches!(m, Mechanism::UserPidNamespace).then(IdMaps::current),
            cgroup_procs: leaf.map(|l| l.procs.clone()),
        }
    }

    fn run(&self) -> io::Result<()> {
        if let Some(procs) = &self.cgroup_procs {
            write_file(procs, b"0")?;
        }
        if self.pid_ns {
            pid_namespace_shim(self.id_maps.as_ref())?;
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

/// Runs in the forked child: returns `Ok` only in the process that goes on to exec `sh`.
fn pid_namespace_shim(id_maps: Option<&IdMaps>) -> io::Result<()> {
    let mut flags = libc::CLONE_NEWPID;
    if id_maps.is_some() {
        flags |= libc::CLONE_NEWUSER;
    }
    // SAFETY: we are the freshly forked, single-threaded child; only async-signal-safe calls.
    unsafe {
        // A fresh start: handlers inherited from the runner (tokio's SIGCHLD) must not run here.
        for sig in 1..32 {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
        if libc::unshare(flags) != 0 {
            return Err(io::Error::last_os_error());
        }
        if let Some(maps) = id_maps {
            maps.write()?;
        }
        let mut fds = [0; 2];
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return Err(io::Error::last_os_error());
        }
        let [status_rd, status_wr] = fds;
        match libc::fork() {
            -1 => Err(io::Error::last_os_error()),
            0 => {
                libc::close(status_rd);
                namespace_init(status_wr)
            }
            init => outer_shim(init, status_rd, status_wr),
        }
    }
}

/// PID 1 of the namespace: fork `sh`, reap everything, report `sh`'s status, exit.
fn namespace_init(status_wr: libc::c_int) -> io::Result<()> {
    // SAFETY: single-threaded forked child; only async-signal-safe calls.
    unsafe {
        let sh = libc::fork();
        if sh == 0 {
            libc::close(status_wr);
            return Ok(()); // this process execs `sh`
        }
        // Hold no pipe open (stdio, std's exec-error pipe), so readers see EOF when `sh` is done.
        close_all_but(0, status_wr);
        let mut status: libc::c_int = 127 << 8; // "exit 127" if the fork failed
        if sh > 0 {
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
        }
        let bytes = status.to_ne_bytes();
        libc::write(status_wr, bytes.as_ptr().cast(), bytes.len());
        libc::_exit(0);
    }
}

/// Outside the namespace: wait for the init and end exactly as `sh` ended.
fn outer_shim(init: libc::pid_t, status_rd: libc::c_int, status_wr: libc::c_int) -> ! {
    // SAFETY: single-threaded forked child; only async-signal-safe calls.
    unsafe {
        libc::close(status_wr);
        // Closing std's exec-error pipe here lets the parent's spawn() return once `sh` execs.
        close_all_but(0, status_rd);
        let mut buf = [0u8; 4];
        let mut got = 0;
        while got < buf.len() {
            let n = libc::read(status_rd, buf[got..].as_mut_ptr().cast(), buf.len() - got);
            if n > 0 {
                got += n as usize;
            } else if n == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                break;
            }
        }
        let mut init_status = 0;
        while libc::waitpid(init, &mut init_status, 0) < 0
            && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
        {}
        // No report means the init itself was killed (our timeout): end like it did.
        let status = if got == buf.len() {
            libc::c_int::from_ne_bytes(buf)
        } else {
            init_status
        };
        if libc::WIFSIGNALED(status) {
            let sig = libc::WTERMSIG(status);
            // Die of the same signal, without writing a core file for it.
            let no_core = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &no_core);
            libc::signal(sig, libc::SIG_DFL);
            libc::kill(libc::getpid(), sig);
            libc::_exit(128 + sig);
        }
        libc::_exit(libc::WEXITSTATUS(status));
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
