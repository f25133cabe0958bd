//! The session host: what keeps a CLI session's background processes and shell alive between
//! `toolyard call`s.
//!
//! A call that starts or reaches a process ([`outlives_call`]) is handed to the host of its
//! workspace, state directory, catalog, dialect, profile and mode (one host per such key), which
//! holds one [`Dispatcher`] and runs the call under the `--session` given; every other call runs
//! in the calling process as before. The first such call starts the host detached (`toolyard
//! session-host`, in a session of its own, stdio to /dev/null and a log in the state directory).
//!
//! - **Transport.** An abstract Unix socket, `toolyard-host-KEY`. A sandboxed command cannot
//!   reach it: the no-net lane is in a network namespace of its own, which holds its own abstract
//!   sockets, and every lane's Landlock domain scopes abstract-socket connections (ABI 6), so a
//!   connect from inside the sandbox fails before the host sees it. As a second layer for kernels
//!   without the scope, the host takes a connection only from a peer (SO_PEERCRED) of its own uid
//!   in its own PID namespace: every sandboxed command runs in a PID namespace of its own. A
//!   filesystem socket would be reachable by whoever can open its path, the net lane included.
//! - **Ends.** A session with no call for `[processes] idle_timeout_s` ends (its processes are
//!   killed); the host leaves when no session holds a process or kept
//!   state (Claude Code's `Bash` working directory) and no call came for [`GRACE`], and when
//!   its state directory disappears.
//! - **Lost.** The host keeps a record (`hosts/KEY.json` in the state directory) of the process
//!   ids it handed out. A host that was killed leaves its record behind: the next call says the
//!   session's processes were lost, and the fresh host answers their ids as lost.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write as _;
use std::os::linux::net::SocketAddrExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio_util::sync::CancellationToken;
use toolyard_core::ToolResult;
use toolyard_exec::background::ProcessesConfig;
use toolyard_runner::{CallRequest, Dispatcher};

use crate::Common;

/// How long a host with no process left waits for another call before it leaves.
pub const GRACE: Duration = Duration::from_secs(5);

/// How often the host looks at its sessions' idle times and its state directory.
const TICK: Duration = Duration::from_secs(1);

/// The largest request line a host reads (a `write_file` of a big file is one line).
const MAX_REQUEST_BYTES: u64 = 64 << 20;

/// The host's first line to a connection it takes.
const ACK: &str = "toolyard-host 1";

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
    /// The abstract socket's name (without the leading NUL).
    socket: String,
    /// Each session's process ids handed out by this host.
    sessions: BTreeMap<String, Vec<String>>,
    /// Each session's ids lost with an earlier host of this key that was killed.
    lost: BTreeMap<String, Vec<String>>,
}

/// Whether a call must run in the session host: it starts a process that may outlive the call
/// (a background or yielding command, the persistent shell), reaches one by id, or runs a tool
/// that keeps the session's state between calls (Claude Code's `Bash` keeps its working
/// directory).
///
/// The rule goes by the engine the dialect's tool runs under, so every dialect's form is
/// covered: the process tools (BashOutput, KillShell, write_stdin, ...), `shell` (anthropic's
/// `bash`), and a command engine called with a background or yield argument, or whose schema
/// takes `yield_time_ms` (Codex's unified exec keeps whatever outlives its yield).
pub fn outlives_call(d: &Dispatcher, tool: &str, args: &Value) -> bool {
    if d.runs_in_process_lane(tool) || d.keeps_session_state(tool) {
        return true;
    }
    match d.engine_of(tool) {
        Some("shell") => true,
        Some("run_command" | "run_command_isolated") => {
            let on = |k: &&str| args.get(*k).and_then(Value::as_bool) == Some(true);
            let given = |k: &&str| args.get(*k).is_some_and(|v| !v.is_null());
            ["background", "run_in_background", "is_background", "tty"]
                .iter()
                .any(on)
                || ["yield_ms", "yield_time_ms"].iter().any(given)
                || yields_by_default(d, tool)
        }
        _ => false,
    }
}

fn yields_by_default(d: &Dispatcher, tool: &str) -> bool {
    d.definitions().iter().any(|def| {
        def.name == tool
            && def.input_schema["properties"]
                .get("yield_time_ms")
                .is_some()
    })
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

fn socket_name(key: &str) -> String {
    format!("toolyard-host-{key}")
}

fn hosts_dir(d: &Dispatcher) -> PathBuf {
    d.env().state.path().join("hosts")
}

fn alive(pid: u32) -> bool {
    // A zombie has exited: only its parent has not reaped it yet.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().next().map(|st| st != "Z"))
        })
        .unwrap_or(false)
}

fn read_record(path: &Path) -> Option<Record> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// The record of a host that is gone without clearing it: it was killed or crashed.
fn dead_record(path: &Path) -> Option<Record> {
    read_record(path).filter(|r| r.pid != std::process::id() && !alive(r.pid))
}

fn write_record(path: &Path, record: &Record) -> std::io::Result<()> {
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(record)?)?;
    std::fs::rename(&tmp, path)
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
    let dir = hosts_dir(d);
    std::fs::create_dir_all(&dir).with_context(|| {
        format!(
            "cannot create the session hosts' directory {}",
            dir.display()
        )
    })?;
    let reaches = d.runs_in_process_lane(&tool);
    let record = dir.join(format!("{key}.json"));
    let request = serde_json::to_string(&Request {
        session: session.clone(),
        tool,
        args,
    })?;
    let mut starts = 0;
    let mut last_error = String::from("it never answered");
    for _ in 0..100 {
        match connect(&key).await {
            Ok(stream) => match exchange(stream, &request).await? {
                Some(result) => return Ok(result),
                // It was leaving: a fresh one starts below.
                None => last_error = "it was shutting down".into(),
            },
            Err(_) if starts == 0 && reaches && dead_record(&record).is_none() => {
                // No host, none killed: no process to reach. Answer here (the tool says there
                // is none) rather than start a host for nothing.
                let req: Request = serde_json::from_str(&request)?;
                return Ok(d
                    .call(CallRequest::new(req.session, req.tool, req.args))
                    .await);
            }
            Err(e) if starts < 3 => {
                tracing::debug!(error = %e, "no session host answers; starting one");
                starts += 1;
                report_lost(&record, &session);
                start_host(common, d, &key, &dir).await?;
                continue;
            }
            Err(e) => last_error = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!(
        "the session host for this workspace does not answer ({last_error}); see its log in {}",
        dir.display()
    )
}

async fn connect(key: &str) -> std::io::Result<UnixStream> {
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(socket_name(key).as_bytes())?;
    let std_stream = std::os::unix::net::UnixStream::connect_addr(&addr)?;
    std_stream.set_nonblocking(true)?;
    let stream = UnixStream::from_std(std_stream)?;
    // Anyone may bind an abstract name first: talk only to a host of our own uid.
    let cred = stream.peer_cred()?;
    // SAFETY: geteuid cannot fail.
    if cred.uid() != unsafe { libc::geteuid() } {
        return Err(std::io::Error::other(format!(
            "the socket @{} belongs to uid {}, not to this user; refusing to send it calls",
            socket_name(key),
            cred.uid()
        )));
    }
    Ok(stream)
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
fn report_lost(record: &Path, session: &str) {
    let Some(dead) = dead_record(record) else {
        return;
    };
    if let Some(ids) = dead.sessions.get(session) {
        eprintln!(
            "toolyard: the session host (pid {}) stopped without ending its sessions (killed or \
             crashed): the processes of session `{session}` ({}) and its shell were lost; \
             starting a fresh host",
            dead.pid,
            if ids.is_empty() {
                "none by id".to_string()
            } else {
                ids.join(", ")
            }
        );
    }
}

/// Start a host for `key`, detached, and wait until it listens (or says another one does).
async fn start_host(common: &Common, d: &Dispatcher, key: &str, dir: &Path) -> Result<()> {
    use std::os::unix::process::CommandExt as _;
    let log_path = dir.join(format!("{key}.log"));
    let log = std::fs::File::create(&log_path).with_context(|| {
        format!(
            "cannot create the session host's log {}",
            log_path.display()
        )
    })?;
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
    // output to its end would wait for the host).
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(log)
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
    let Some(out) = child.stdout.take() else {
        bail!("cannot read the session host's start");
    };
    let line = tokio::task::spawn_blocking(move || {
        let mut s = String::new();
        let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut s);
        s
    })
    .await
    .unwrap_or_default();
    match line.trim() {
        "ready" | "busy" => Ok(()),
        _ => {
            let _ = child.wait();
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            bail!(
                "the session host did not start: {}",
                log.trim().lines().last().unwrap_or("see its log")
            )
        }
    }
}

// ---- the host: `toolyard session-host` ------------------------------------------------------

struct Host {
    dispatcher: Arc<Dispatcher>,
    record_path: PathBuf,
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
        if let Err(e) = write_record(&self.record_path, &record) {
            tracing::warn!(error = %e, path = %self.record_path.display(), "session host: cannot write its record");
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
    let name = socket_name(&key);
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
    let listener = match std::os::unix::net::UnixListener::bind_addr(&addr) {
        Ok(l) => l,
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            // Another host of this key took it first: the caller talks to that one.
            say("busy")?;
            return Ok(0);
        }
        Err(e) => return Err(e).with_context(|| format!("cannot listen on @{name}")),
    };
    listener.set_nonblocking(true)?;
    let listener = tokio::net::UnixListener::from_std(listener)?;

    let dir = hosts_dir(&d);
    let record_path = dir.join(format!("{key}.json"));
    let mut record = Record {
        pid: std::process::id(),
        socket: name,
        ..Record::default()
    };
    if let Some(dead) = dead_record(&record_path) {
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
    let limits: ProcessesConfig = d.config().catalog.section("processes")?;
    let host = Arc::new(Host {
        dispatcher: d.clone(),
        record_path,
        state_dir: d.env().state.path().to_path_buf(),
        idle: Duration::from_secs(limits.idle_timeout_s),
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
    // No new call from here: the socket closes first.
    drop(listener);
    tracing::info!(%why, "session host leaving");
    let sessions: Vec<String> = host.lock().sessions.keys().cloned().collect();
    if host.state_dir.exists() {
        // Only our own record: a fresh host may already have written its own.
        if read_record(&host.record_path).is_some_and(|r| r.pid == std::process::id()) {
            let _ = std::fs::remove_file(&host.record_path);
        }
    }
    for s in sessions {
        d.end_session(&s).await;
    }
    Ok(0)
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

/// Whether the peer may send calls: our own uid, in our own PID namespace.
fn peer_is_trusted(stream: &UnixStream) -> Result<(), String> {
    let cred = stream
        .peer_cred()
        .map_err(|e| format!("its credentials are unreadable: {e}"))?;
    // SAFETY: geteuid cannot fail.
    if cred.uid() != unsafe { libc::geteuid() } {
        return Err(format!("uid {} is not this host's", cred.uid()));
    }
    // pid 0: a PID namespace this host cannot see into.
    let pid = cred
        .pid()
        .filter(|p| *p > 0)
        .ok_or("its process is in a PID namespace this host cannot see")?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("its process {pid} is unreadable: {e}"))?;
    // NSpid lists its pid in each namespace from ours down: one entry means ours.
    let levels = status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .map(|l| l.split_whitespace().count())
        .ok_or("this kernel does not say the peer's PID namespace")?;
    if levels != 1 {
        return Err(format!(
            "its process {pid} runs in another PID namespace (a sandboxed command)"
        ));
    }
    Ok(())
}

async fn handle(host: &Host, stream: UnixStream) {
    if let Err(why) = peer_is_trusted(&stream) {
        tracing::warn!(%why, "session host: refused a connection");
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
