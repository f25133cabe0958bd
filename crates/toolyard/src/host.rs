//! The session host: what keeps a CLI session's background processes and shell alive between
//! `toolyard call`s.
//!
//! A call that starts or reaches a process ([`Dispatcher::outlives_call`]) is handed to the host of its
//! workspace, state directory, catalog, dialect, profile and mode (one host per such key), which
//! holds one [`Dispatcher`] and runs the call under the `--session` given; every other call runs
//! in the calling process as before. The first such call starts the host detached (`toolyard
//! session-host`, in a session of its own, stdio to /dev/null and a log in the state directory).
//!
//! - **Transport.** A Unix socket file, `hosts/KEY.sock`, in the state directory's private
//!   `hosts/` directory (mode 0700, checked to be this user's and no symlink). A command cannot
//!   create, replace or remove a file there (the directory is outside every lane's writable
//!   trees), so no command can stand in for a host that left: an abstract socket name was
//!   free for anyone to bind once its host was gone. Both ends also check each other: the peer
//!   (SO_PEERCRED) must have our uid, run in our PID namespace (every sandboxed command has a
//!   PID namespace of its own) and, when we are not under `no_new_privs`, not be under it
//!   either (every sandboxed command is, and cannot leave it): that holds where the state
//!   directory is inside the workspace, and on systems without PID namespaces.
//! - **Files.** The host's files (socket, lock, log, record) are reached through a descriptor
//!   of `hosts/` held open and opened without following symlinks; the log and the record are
//!   made afresh (`O_EXCL`), so a symlink or file planted in their place is never written
//!   through. One host per key holds `hosts/KEY.lock` for its life.
//! - **Ends.** A session with no call for `[processes] idle_timeout_s` ends (its processes are
//!   killed); the host leaves when no session holds a process or kept
//!   state (Claude Code's `Bash` working directory) and no call came for [`GRACE`], and when
//!   its state directory disappears.
//! - **Lost.** The host keeps a record (`hosts/KEY.json` in the state directory) of the process
//!   ids it handed out. A host that was killed leaves its record behind: the next call says the
//!   session's processes were lost, and the fresh host answers their ids as lost.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{Read as _, Write as _};
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::{
    DirBuilderExt as _, FileTypeExt as _, MetadataExt as _, OpenOptionsExt as _,
    PermissionsExt as _,
};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio_util::sync::CancellationToken;
use toolyard_core::ToolResult;
use toolyard_dispatch::{CallRequest, Dispatcher};

use crate::Common;

/// How long a host with no process left waits for another call before it leaves.
pub const GRACE: Duration = Duration::from_secs(5);

/// How often the host looks at its sessions' idle times and its state directory.
const TICK: Duration = Duration::from_secs(1);

/// The largest request line a host reads (a `write_file` of a big file is one line).
const MAX_REQUEST_BYTES: u64 = 64 << 20;

/// The host's first line to a connection it takes.
const ACK: &str = "toolyard-host 1";

/// The largest record a host or client reads back (its process ids, session by session).
const MAX_RECORD_BYTES: u64 = 8 << 20;

/// How long a starting host waits for the one before it (of the same key) to finish leaving.
const LOCK_WAIT: Duration = Duration::from_secs(15);

/// The hidden `session-host` subcommand's arguments.
#[derive(clap::Args)]
pub struct HostArgs {
    /// The key the caller computed: the host refuses to serve under another one.
    #[arg(long)]
    key: String,
    #[command(flatten)]
    common: Common,
}

/// One call as the client sends it.
#[derive(Serialize, Deserialize)]
struct Request {
    session: String,
    tool: String,
    args: Value,
}

/// What a host leaves in the state directory while it runs.
#[derive(Serialize, Deserialize, Default, Clone)]
struct Record {
    pid: u32,
    /// The socket file's path.
    socket: String,
    /// Each session's process ids handed out by this host.
    sessions: BTreeMap<String, Vec<String>>,
    /// Each session's ids lost with an earlier host of this key that was killed.
    lost: BTreeMap<String, Vec<String>>,
}

/// The host key: every setting that makes one dispatcher differ from another.
fn key_of(common: &Common, d: &Dispatcher) -> String {
    let c = d.config();
    let parts = [
        // SAFETY: geteuid cannot fail.
        unsafe { libc::geteuid() }.to_string(),
        d.env().workspace.root().display().to_string(),
        d.env().state.path().display().to_string(),
        c.catalog_path
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        // Its content too: after an edit, calls go to a host that serves the catalog as it is.
        c.catalog_path
            .as_ref()
            .and_then(|p| std::fs::read(p).ok())
            .map(|text| blake3::hash(&text).to_hex().to_string())
            .unwrap_or_default(),
        c.dialect.to_string(),
        c.profile.clone(),
        common.inline.to_string(),
    ];
    let digest = blake3::hash(parts.join("\0").as_bytes()).to_hex();
    digest[..32].to_string()
}

fn hosts_dir(d: &Dispatcher) -> PathBuf {
    d.env().state.path().join("hosts")
}

/// The session hosts' private directory, held open: every file in it is reached through this
/// descriptor (`/proc/self/fd/N/NAME`, which also keeps socket paths short whatever the state
/// directory's length) and opened without following a symlink.
struct HostsDir {
    dir: File,
    path: PathBuf,
}

impl HostsDir {
    /// Make (mode 0700) or open `hosts/` in `d`'s state directory; refused when it is a
    /// symlink or another user's, and made private again when its mode let others in.
    fn open(d: &Dispatcher) -> Result<Self> {
        let path = hosts_dir(d);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&path)
            .with_context(|| {
                format!(
                    "cannot create the session hosts' directory {}",
                    path.display()
                )
            })?;
        let dir = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .with_context(|| {
                format!(
                    "cannot open the session hosts' directory {} (it must be a directory, not a \
                     symlink: remove it and call again)",
                    path.display()
                )
            })?;
        let meta = dir.metadata()?;
        // SAFETY: geteuid cannot fail.
        let me = unsafe { libc::geteuid() };
        if meta.uid() != me {
            bail!(
                "the session hosts' directory {} belongs to uid {}, not to this user (uid {me}); \
                 remove it and call again",
                path.display(),
                meta.uid()
            );
        }
        if meta.mode() & 0o077 != 0 {
            dir.set_permissions(std::fs::Permissions::from_mode(0o700))
                .with_context(|| format!("cannot make {} private (mode 0700)", path.display()))?;
        }
        Ok(Self { dir, path })
    }

    /// `name` in this directory, as a path that resolves through the held descriptor.
    fn at(&self, name: &str) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}/{name}", self.dir.as_raw_fd()))
    }

    /// `name`'s real path, for messages and the record.
    fn shown(&self, name: &str) -> String {
        self.path.join(name).display().to_string()
    }

    /// Remove `name` (a file, a socket or a symlink, never what a symlink points to).
    fn remove(&self, name: &str) -> std::io::Result<()> {
        match std::fs::remove_file(self.at(name)) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            r => r,
        }
    }

    /// A new, empty, private file `name`, made afresh: whatever was there (a symlink planted
    /// to redirect the write) is removed, and the create fails rather than open anything
    /// that appears in between.
    fn create_fresh(&self, name: &str) -> std::io::Result<File> {
        self.remove(name)?;
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(self.at(name))
    }

    /// The text of the regular file `name`, at most `limit` bytes; `None` when it is absent,
    /// a symlink, not a regular file or not text.
    fn read(&self, name: &str, limit: u64) -> Option<String> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(self.at(name))
            .ok()?;
        if !file.metadata().ok()?.is_file() {
            return None;
        }
        let mut text = String::new();
        file.take(limit).read_to_string(&mut text).ok()?;
        Some(text)
    }

    fn read_record(&self, key: &str) -> Option<Record> {
        serde_json::from_str(&self.read(&record_name(key), MAX_RECORD_BYTES)?).ok()
    }

    /// The record of a host that is gone without clearing it: it was killed or crashed.
    fn dead_record(&self, key: &str) -> Option<Record> {
        self.read_record(key)
            .filter(|r| r.pid != std::process::id() && !toolyard_exec::pid_alive(r.pid))
    }

    /// Replace the record whole: a fresh temporary file renamed over it.
    fn write_record(&self, key: &str, record: &Record) -> std::io::Result<()> {
        let name = record_name(key);
        let tmp = format!("{name}.tmp");
        let mut file = self.create_fresh(&tmp)?;
        file.write_all(&serde_json::to_vec_pretty(record)?)?;
        drop(file);
        std::fs::rename(self.at(&tmp), self.at(&name))
    }

    /// Connect to `key`'s host and check that the peer is one: `None` when no host listens.
    fn connect(&self, key: &str) -> std::io::Result<UnixStream> {
        let name = socket_name(key);
        let path = self.at(&name);
        // connect() follows a symlink: take only a socket.
        let meta = std::fs::symlink_metadata(&path)?;
        if !meta.file_type().is_socket() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{} is not a socket", self.shown(&name)),
            ));
        }
        let std_stream = std::os::unix::net::UnixStream::connect(&path)?;
        std_stream.set_nonblocking(true)?;
        let stream = UnixStream::from_std(std_stream)?;
        peer_is_trusted(&stream).map_err(|why| {
            std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "the process listening on {} is not a session host of this user ({why}); \
                     refusing to send it calls",
                    self.shown(&name)
                ),
            )
        })?;
        Ok(stream)
    }
}

fn socket_name(key: &str) -> String {
    format!("{key}.sock")
}

fn record_name(key: &str) -> String {
    format!("{key}.json")
}

/// Whether the peer of `stream` may be trusted as the other end of a host connection (a client
/// to a host, a host to a client): our uid, in our PID namespace (every sandboxed command runs
/// in one of its own), and not under `no_new_privs` unless we are too (every sandboxed command
/// is, and nothing can lift it). Its pid when so.
fn peer_is_trusted(stream: &UnixStream) -> Result<i32, String> {
    let cred = stream
        .peer_cred()
        .map_err(|e| format!("its credentials are unreadable: {e}"))?;
    // SAFETY: geteuid cannot fail.
    if cred.uid() != unsafe { libc::geteuid() } {
        return Err(format!("uid {} is not this user's", cred.uid()));
    }
    // pid 0: a PID namespace this process cannot see into.
    let pid = cred
        .pid()
        .filter(|p| *p > 0)
        .ok_or("its process is in a PID namespace this process cannot see")?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("its process {pid} is unreadable: {e}"))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    };
    // NSpid lists its pid in each namespace from ours down: one entry means ours.
    let levels = field("NSpid:")
        .map(|l| l.split_whitespace().count())
        .ok_or("this kernel does not say the peer's PID namespace")?;
    if levels != 1 {
        return Err(format!(
            "its process {pid} runs in another PID namespace (a sandboxed command)"
        ));
    }
    // SAFETY: prctl with constant arguments only reads a flag.
    let we_are_nnp = unsafe { libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) } == 1;
    if !we_are_nnp && field("NoNewPrivs:") == Some("1") {
        return Err(format!(
            "its process {pid} runs under no_new_privs, as every sandboxed command does"
        ));
    }
    Ok(pid)
}

// ---- the client: `toolyard call` ------------------------------------------------------------

/// Run `tool` in the session host, starting one when none runs; the result as the host gave it.
pub async fn call(
    common: &Common,
    d: &Dispatcher,
    session: String,
    tool: String,
    args: Value,
) -> Result<ToolResult> {
    let key = key_of(common, d);
    let hosts = HostsDir::open(d)?;
    let reaches = d.runs_in_process_lane(&tool);
    let request = serde_json::to_string(&Request {
        session: session.clone(),
        tool,
        args,
    })?;
    let mut starts = 0;
    let mut last_error = String::from("it never answered");
    for _ in 0..100 {
        match hosts.connect(&key) {
            Ok(stream) => match exchange(stream, &request).await? {
                Some(result) => return Ok(result),
                // It was leaving: a fresh one starts below.
                None => last_error = "it was shutting down".into(),
            },
            Err(e)
                if starts == 0
                    && reaches
                    && e.kind() != std::io::ErrorKind::PermissionDenied
                    && hosts.dead_record(&key).is_none() =>
            {
                // No host, none killed: no process to reach. Answer here (the tool says there
                // is none) rather than start a host for nothing.
                let req: Request = serde_json::from_str(&request)?;
                return Ok(d
                    .call(CallRequest::new(req.session, req.tool, req.args))
                    .await);
            }
            Err(e) if starts < 3 => {
                // No host, or one that is not ours: a fresh host takes the key's lock and
                // replaces whatever socket is there.
                tracing::debug!(error = %e, "no session host answers; starting one");
                last_error = e.to_string();
                starts += 1;
                report_lost(&hosts, &key, &session);
                start_host(common, d, &key, &hosts).await?;
                continue;
            }
            Err(e) => last_error = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!(
        "the session host for this workspace does not answer ({last_error}); see its log in {}",
        hosts.shown(&log_name(&key))
    )
}

/// Run `tool` in the session host when one runs (without starting one): `None` when none
/// answers. Calls of the net lanes go there while it runs, so they share its runners' network
/// namespaces, and with them the servers its background processes listen on.
pub async fn call_if_running(
    common: &Common,
    d: &Dispatcher,
    session: &str,
    tool: &str,
    args: &Value,
) -> Result<Option<ToolResult>> {
    let key = key_of(common, d);
    let Ok(hosts) = HostsDir::open(d) else {
        return Ok(None);
    };
    let Ok(stream) = hosts.connect(&key) else {
        return Ok(None);
    };
    let request = serde_json::to_string(&Request {
        session: session.to_string(),
        tool: tool.to_string(),
        args: args.clone(),
    })?;
    exchange(stream, &request).await
}

fn log_name(key: &str) -> String {
    format!("{key}.log")
}

/// Send one request; `None` when the host closed before taking it (it is leaving).
async fn exchange(stream: UnixStream, request: &str) -> Result<Option<ToolResult>> {
    let (r, mut w) = stream.into_split();
    let mut r = BufReader::new(r);
    let mut line = String::new();
    if r.read_line(&mut line).await.unwrap_or(0) == 0 {
        return Ok(None);
    }
    let line = line.trim_end();
    if line != ACK {
        bail!("the session host refused this call: {line}");
    }
    w.write_all(request.as_bytes()).await?;
    w.write_all(b"\n").await?;
    let mut reply = String::new();
    if r.read_line(&mut reply).await.unwrap_or(0) == 0 {
        return Ok(Some(ToolResult::failure(
            "unavailable",
            "the session host stopped while running this call (it was killed or crashed), so \
             whether it ran is unknown, and this session's background processes and shell were \
             lost; check the workspace, then start them again",
        )));
    }
    serde_json::from_str(&reply)
        .map(Some)
        .context("the session host sent a reply that is not a tool result")
}

/// Tell the user (stderr) that a killed host took `session`'s processes with it.
fn report_lost(hosts: &HostsDir, key: &str, session: &str) {
    let Some(dead) = hosts.dead_record(key) else {
        return;
    };
    if let Some(ids) = dead.sessions.get(session) {
        let ids = if ids.is_empty() {
            "none by id".to_string()
        } else {
            ids.join(", ")
        };
        eprintln!(
            "{}",
            crate::print::printable(&format!(
                "toolyard: the session host (pid {}) stopped without ending its sessions (killed \
                 or crashed): the processes of session `{session}` ({ids}) and its shell were \
                 lost; starting a fresh host",
                dead.pid,
            ))
        );
    }
}

/// Start a host for `key`, detached, and wait until it listens (or says another one does).
async fn start_host(common: &Common, d: &Dispatcher, key: &str, hosts: &HostsDir) -> Result<()> {
    use std::os::unix::process::CommandExt as _;
    let c = d.config();
    let mut cmd = std::process::Command::new(
        std::env::current_exe().context("cannot find the toolyard executable")?,
    );
    cmd.arg("session-host")
        .arg("--key")
        .arg(key)
        .arg("--workspace")
        .arg(d.env().workspace.root())
        .arg("--dialect")
        .arg(c.dialect.to_string())
        .arg("--profile")
        .arg(&c.profile);
    if let Some(catalog) = &c.catalog_path {
        cmd.arg("--catalog").arg(catalog);
    }
    if common.inline {
        cmd.arg("--inline");
    }
    // Its stdout is a pipe for the one "ready" line; it must not hold ours (a caller reading our
    // output to its end would wait for the host). Its stderr is a pipe until it has opened its
    // own log (the host makes that file itself, once it holds the key's lock): what it says
    // before is why it did not start.
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .current_dir("/");
    // SAFETY: setsid is async-signal-safe; a session of its own keeps the terminal's signals
    // (Ctrl-C in the shell that ran `toolyard call`) away from the host.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().context("cannot start the session host")?;
    let (Some(out), Some(err)) = (child.stdout.take(), child.stderr.take()) else {
        bail!("cannot read the session host's start");
    };
    // Plain threads: neither may hold the runtime's shutdown (the stderr pipe closes only when
    // the host switches to its log).
    let said = std::sync::Arc::new(Mutex::new(String::new()));
    {
        let said = said.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            let mut err = err;
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let mut s = said.lock().unwrap_or_else(|e| e.into_inner());
                if s.len() < 64 << 10 {
                    s.push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            }
        });
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut s);
        let _ = tx.send(s);
    });
    let line = rx.await.unwrap_or_default();
    match line.trim() {
        "ready" | "busy" => Ok(()),
        _ => {
            let _ = child.wait();
            // The stderr reader ends with the host; give it a moment to take the last words.
            tokio::time::sleep(Duration::from_millis(50)).await;
            let said = said.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let log = hosts.read(&log_name(key), 1 << 20).unwrap_or_default();
            let why = said
                .trim()
                .lines()
                .last()
                .or_else(|| log.trim().lines().last())
                .unwrap_or("it said nothing")
                .to_string();
            bail!(
                "the session host did not start: {}",
                crate::print::printable(&why)
            )
        }
    }
}

// ---- the host: `toolyard session-host` ------------------------------------------------------

struct Host {
    dispatcher: Arc<Dispatcher>,
    hosts: HostsDir,
    key: String,
    state_dir: PathBuf,
    idle: Duration,
    inner: Mutex<Inner>,
    /// Held while the record is written.
    writing: Mutex<()>,
}

struct Inner {
    /// Each session's last call and how many of its calls are in flight.
    sessions: HashMap<String, (Instant, usize)>,
    /// The sessions that ran a tool which keeps their state in memory (a working directory):
    /// the host stays for them until they go idle, as for a process.
    stateful: HashSet<String>,
    /// Connections taken and not yet answered.
    busy: usize,
    last_call: Instant,
    record: Record,
}

impl Host {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Write the record as it is now. One writer at a time, each writing the latest state, so
    /// the file never goes back to an older one.
    fn save(&self) {
        let _one = self.writing.lock().unwrap_or_else(|e| e.into_inner());
        let record = self.lock().record.clone();
        if let Err(e) = self.hosts.write_record(&self.key, &record) {
            tracing::warn!(error = %e, path = %self.hosts.shown(&record_name(&self.key)), "session host: cannot write its record");
        }
    }
}

/// `toolyard session-host`: serve calls until nothing is left to keep.
pub fn host_main(args: HostArgs) -> Result<std::process::ExitCode> {
    let rt = crate::runtime()?;
    let code = rt.block_on(serve(args))?;
    // Leave now: a blocking thread still in a read must not hold the exit.
    std::process::exit(code)
}

async fn serve(args: HostArgs) -> Result<i32> {
    let d = Arc::new(crate::dispatcher(&args.common)?);
    let key = key_of(&args.common, &d);
    if key != args.key {
        bail!(
            "session host key mismatch ({} here, {} asked): the caller and the host see different settings",
            key,
            args.key
        );
    }
    let hosts = HostsDir::open(&d)?;
    // One host per key: the lock is held for this process's life (released when it exits).
    let Some(_lock) = take_lock(&hosts, &key).await? else {
        // Another host of this key serves: the caller talks to that one.
        say("busy")?;
        return Ok(0);
    };
    // From here on this host's messages go to its own log, made afresh (never through a
    // symlink planted in its place); the caller reads them there.
    let log_path = hosts.shown(&log_name(&key));
    let log = hosts
        .create_fresh(&log_name(&key))
        .with_context(|| format!("cannot create the session host's log {log_path}"))?;
    // SAFETY: dup2 onto stderr, whose writers (the log subscriber) write whole lines to fd 2.
    if unsafe { libc::dup2(log.as_raw_fd(), 2) } < 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("cannot write the session host's log {log_path}"));
    }
    drop(log);
    let name = socket_name(&key);
    // A socket left by a host that was killed (we hold the lock: no live host owns it).
    hosts
        .remove(&name)
        .with_context(|| format!("cannot remove the old socket {}", hosts.shown(&name)))?;
    let listener = std::os::unix::net::UnixListener::bind(hosts.at(&name))
        .with_context(|| format!("cannot listen on {}", hosts.shown(&name)))?;
    listener.set_nonblocking(true)?;
    let listener = tokio::net::UnixListener::from_std(listener)?;

    let mut record = Record {
        pid: std::process::id(),
        socket: hosts.shown(&name),
        ..Record::default()
    };
    // Under the lock, a record left behind is a dead host's: it leaves none when it ends.
    if let Some(dead) = hosts
        .read_record(&key)
        .filter(|r| r.pid != std::process::id())
    {
        record.lost = dead.lost;
        for (session, ids) in dead.sessions {
            record.lost.entry(session).or_default().extend(ids);
        }
        if let Some(router) = d.router() {
            for (session, ids) in &record.lost {
                router.mark_lost(session, ids.iter().cloned());
            }
        }
        tracing::warn!(pid = dead.pid, lost = ?record.lost, "session host: the previous host was killed; its processes are lost");
    }
    let host = Arc::new(Host {
        dispatcher: d.clone(),
        hosts,
        key: key.clone(),
        state_dir: d.env().state.path().to_path_buf(),
        idle: d.sections().idle_timeout(),
        inner: Mutex::new(Inner {
            sessions: HashMap::new(),
            stateful: HashSet::new(),
            busy: 0,
            last_call: Instant::now(),
            record,
        }),
        writing: Mutex::new(()),
    });
    host.save();
    say("ready")?;
    // From here on stdout is nobody's: the caller has read its line.
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        use std::os::fd::AsRawFd as _;
        // SAFETY: dup2 onto stdout, which nothing else uses in this process.
        unsafe { libc::dup2(null.as_raw_fd(), 1) };
    }
    tracing::info!(workspace = %d.env().workspace.root().display(), "session host serving");

    let mut tick = tokio::time::interval(TICK);
    let why = loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                {
                    let mut inner = host.lock();
                    inner.busy += 1;
                    inner.last_call = Instant::now();
                }
                let host = host.clone();
                tokio::spawn(async move {
                    handle(&host, stream).await;
                    let mut inner = host.lock();
                    inner.busy -= 1;
                    inner.last_call = Instant::now();
                });
            }
            _ = tick.tick() => {
                if let Some(why) = check(&host).await {
                    break why;
                }
            }
        }
    };
    // No new call from here: the socket goes first (a caller then starts a fresh host, which
    // waits for our lock).
    let _ = host.hosts.remove(&socket_name(&key));
    drop(listener);
    tracing::info!(%why, "session host leaving");
    let sessions: Vec<String> = host.lock().sessions.keys().cloned().collect();
    if host.state_dir.exists() {
        let _ = host.hosts.remove(&record_name(&key));
    }
    for s in sessions {
        d.end_session(&s).await;
    }
    Ok(0)
}

/// Take `key`'s lock, waiting for a host that is still leaving; `None` when a live host of
/// this key holds it and answers.
async fn take_lock(hosts: &HostsDir, key: &str) -> Result<Option<File>> {
    let name = format!("{key}.lock");
    let open = || {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(hosts.at(&name))
    };
    let lock = match open() {
        Ok(f) => f,
        // Not a file we made (a symlink): replace it.
        Err(_) => {
            hosts.remove(&name)?;
            open().with_context(|| format!("cannot open the host lock {}", hosts.shown(&name)))?
        }
    };
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(Some(lock));
        }
        if hosts.connect(key).is_ok() {
            return Ok(None);
        }
        if Instant::now() >= deadline {
            // A lock is never stale (it goes with its process): its holder lives and hangs.
            bail!(
                "another session host of this workspace holds {} and does not answer; stop \
                 that `toolyard session-host --key {key}` process (its pid is in {})",
                hosts.shown(&name),
                hosts.shown(&record_name(key))
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn say(line: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}

/// The tick: end idle sessions; say why the host should leave, if it should.
async fn check(host: &Host) -> Option<String> {
    if !host.state_dir.exists() {
        return Some(format!(
            "its state directory {} is gone",
            host.state_dir.display()
        ));
    }
    let now = Instant::now();
    let idle: Vec<String> = host
        .lock()
        .sessions
        .iter()
        .filter(|(_, (last, busy))| *busy == 0 && now.duration_since(*last) >= host.idle)
        .map(|(s, _)| s.clone())
        .collect();
    for s in idle {
        tracing::info!(session = %s, "session idle: ending it and killing its processes");
        host.dispatcher.end_session(&s).await;
        {
            let mut inner = host.lock();
            inner.sessions.remove(&s);
            inner.stateful.remove(&s);
            inner.record.sessions.remove(&s);
        }
        host.save();
    }
    let (busy, last, sessions, stateful) = {
        let inner = host.lock();
        let sessions: Vec<String> = inner.sessions.keys().cloned().collect();
        (
            inner.busy,
            inner.last_call,
            sessions,
            !inner.stateful.is_empty(),
        )
    };
    if busy > 0 || stateful || now.duration_since(last) < GRACE {
        return None;
    }
    for s in sessions {
        if host.dispatcher.session_processes(&s).await > 0 {
            return None;
        }
    }
    Some("no session holds a process".into())
}

async fn handle(host: &Host, stream: UnixStream) {
    if let Err(why) = peer_is_trusted(&stream) {
        tracing::warn!(%why, "session host: refused a connection");
        // The refusal is the only line: the peer gets no ACK, so it can send no call.
        let mut stream = stream;
        let _ = stream
            .write_all(format!("refused: {why}\n").as_bytes())
            .await;
        return;
    }
    let (r, mut w) = stream.into_split();
    if w.write_all(format!("{ACK}\n").as_bytes()).await.is_err() {
        return;
    }
    let mut r = BufReader::new(r.take(MAX_REQUEST_BYTES));
    let mut line = String::new();
    if r.read_line(&mut line).await.unwrap_or(0) == 0 {
        return;
    }
    let result = match serde_json::from_str::<Request>(&line) {
        Ok(req) => run(host, req, r).await,
        Err(e) => ToolResult::failure(
            "invalid_arguments",
            format!("the session host got a request it cannot read: {e}"),
        ),
    };
    let mut reply = serde_json::to_vec(&result).unwrap_or_default();
    reply.push(b'\n');
    let _ = w.write_all(&reply).await;
}

async fn run<R>(host: &Host, req: Request, mut rest: R) -> ToolResult
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
{
    let session = req.session.clone();
    let keeps_state = host.dispatcher.keeps_session_state(&req.tool);
    {
        let mut inner = host.lock();
        if keeps_state {
            inner.stateful.insert(session.clone());
        }
        let entry = inner
            .sessions
            .entry(session.clone())
            .or_insert((Instant::now(), 0));
        entry.0 = Instant::now();
        entry.1 += 1;
        inner.record.sessions.entry(session.clone()).or_default();
    }
    let cancel = CancellationToken::new();
    // The caller leaving (Ctrl-C, killed) cancels its call, as a closed MCP connection does.
    let watch = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 64];
            while let Ok(n) = rest.read(&mut buf).await {
                if n == 0 {
                    break;
                }
            }
            cancel.cancel();
        })
    };
    let call = CallRequest {
        session: req.session,
        tool: req.tool,
        args: req.args,
        cancel,
        progress: None,
        approver: Some(std::sync::Arc::new(
            toolyard_dispatch::network_request::CannotAsk(
                "`toolyard call` cannot ask you (a command line has no one to answer)".into(),
            ),
        )),
    };
    let result = host.dispatcher.call(call).await;
    watch.abort();
    let issued = result
        .data
        .as_ref()
        // Codex's exec_command names its process session_id.
        .and_then(|d| d.get("process_id").or_else(|| d.get("session_id")))
        .and_then(Value::as_str)
        .map(str::to_string);
    {
        let mut inner = host.lock();
        if let Some(entry) = inner.sessions.get_mut(&session) {
            entry.0 = Instant::now();
            entry.1 -= 1;
        }
        let ids = inner.record.sessions.entry(session).or_default();
        if let Some(id) = issued.filter(|id| !ids.contains(id)) {
            ids.push(id);
        }
    }
    host.save();
    result
}
