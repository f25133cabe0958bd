//! The runner process (`toolyard runner --lane L --workspace DIR`): sandbox itself once, say
//! it is ready, read the router's hello, then serve jobs from stdin, several at once, until
//! stdin closes or the router goes silent for [`MISSED_PINGS`] heartbeats.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::ChildStdin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::sync::{Mutex, Semaphore, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use toolyard_core::{Catalog, Lane, Tool, ToolContext, ToolError, ToolResult};
use toolyard_dialects::Dialect;
use toolyard_exec::protect::{self, Protected};
use toolyard_exec::sandbox::{self, LanePolicy, LanesConfig, SandboxConfig};
use toolyard_records::Records;
use toolyard_tools::ToolEnv;
use toolyard_workspace::{RelPath, StateDir, Workspace, flock};

use crate::pre_image::file_state;
use crate::protocol::{
    FromRunner, Hello, Job, LineReader, MAX_LINE_BYTES, MISSED_PINGS, PART_BYTES, PROTOCOL_VERSION,
    PreImageWire, RecordOp, Reply, ToRunner, encode,
};

/// How long a runner waits for the router's hello after saying it is ready.
const HELLO_TIMEOUT: Duration = Duration::from_secs(30);

/// Messages waiting for stdout: past this, senders wait (back-pressure).
const QUEUE: usize = 256;

/// What `toolyard runner` is started with.
#[derive(Debug, Clone)]
pub struct RunnerArgs {
    /// The lane whose sandbox to apply.
    pub lane: Lane,
    /// The workspace root.
    pub workspace: PathBuf,
    /// The catalog file, if not the built-in one.
    pub catalog: Option<PathBuf>,
    /// The state directory, when not the workspace's default one.
    pub state_dir: Option<PathBuf>,
}

/// Run a runner: call this from `main` before any other thread exists (the sandbox needs a
/// single-threaded process), it returns when the router closes stdin.
pub fn runner_main(args: RunnerArgs) -> Result<(), ToolError> {
    // Before anything secret is in memory: commands must not read this process's environment.
    sandbox::make_non_dumpable();
    let catalog = match &args.catalog {
        Some(p) => Catalog::load(p).map_err(|e| ToolError::InvalidArguments(e.to_string()))?,
        None => Catalog::builtin(),
    };
    let root = args
        .workspace
        .canonicalize()
        .map_err(|e| ToolError::Io(format!("{}: {e}", args.workspace.display())))?;
    let state = match &args.state_dir {
        Some(dir) => StateDir::at(dir, &root)?,
        None => StateDir::for_workspace(&root)?,
    };
    // Held until this function returns: dropping it empties the dir.
    let temp = RunnerTempDir::claim(&state.tmp_dir(), args.lane)?;
    // The store of what commands may change (see `toolyard_tools::capture`), private to this
    // runner as its temp dir is, and out of its commands' sight.
    let capture_root = state.path().join("capture");
    let capture = std::fs::create_dir_all(&capture_root)
        .map_err(|e| ToolError::Io(format!("{}: {e}", capture_root.display())))
        .and_then(|()| RunnerTempDir::claim(&capture_root, args.lane))?;
    toolyard_tools::capture::set_store_dir(capture.path().to_path_buf());
    let temp_dir = temp.path().to_path_buf();
    let mut policy = lane_policy(
        args.lane,
        &root,
        &state,
        &catalog,
        args.catalog.as_deref(),
        &temp_dir,
    )?;
    policy.runner_write.push(capture.path().to_path_buf());
    let slots = policy.limits.slots();
    // SAFETY: no other thread exists yet (the runtime starts below), so nothing can read the
    // environment concurrently; children inherit TMPDIR pointing at the private temp dir.
    unsafe { std::env::set_var("TMPDIR", &temp_dir) };
    let report = sandbox::apply(&policy).map_err(|e| {
        ToolError::Unavailable(format!(
            "the {} lane's sandbox could not be applied: {e}",
            args.lane
        ))
    })?;

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| ToolError::Io(format!("cannot start the runtime: {e}")))?;
    let mut sandbox = report.to_string();
    // Read after the sandbox is applied: what this runner reads, its commands can.
    if std::fs::File::open(SERVICE_ACCOUNT_TOKEN).is_ok() {
        tracing::warn!(
            path = SERVICE_ACCOUNT_TOKEN,
            "a cluster credential is readable where commands run"
        );
        sandbox.push_str(&format!(
            "; WARNING: commands can read the cluster credential {SERVICE_ACCOUNT_TOKEN} (set automountServiceAccountToken: false in the pod)"
        ));
    }
    let result = rt.block_on(serve(args.lane, root, state, catalog, slots, sandbox));
    rt.shutdown_timeout(Duration::from_secs(1));
    result
}

/// The sandbox policy of a `lane` runner of the workspace `root`: its private temp dir, the
/// private tool caches, the state dir out of reach, the protected paths held read-only, and the
/// catalog's `[sandbox]` and `[lanes]` settings. `toolyard lane-exec` applies the same.
pub fn lane_policy(
    lane: Lane,
    root: &Path,
    state: &StateDir,
    catalog: &Catalog,
    catalog_path: Option<&Path>,
    temp_dir: &Path,
) -> Result<LanePolicy, ToolError> {
    let bad = |e: toolyard_core::CatalogError| ToolError::InvalidArguments(e.to_string());
    let (root, temp_dir) = (root.to_path_buf(), temp_dir.to_path_buf());
    let config: SandboxConfig = catalog.section("sandbox").map_err(bad)?;
    let lanes: LanesConfig = catalog.section("lanes").map_err(bad)?;
    let mut policy = LanePolicy::new(lane, root.clone(), temp_dir.clone());
    policy.cache_dir = Some(state.caches_dir());
    // Commands can neither read nor write Toolyard's state; the runner writes its spill files
    // and moves what a command did to protected paths into the quarantine.
    // Every workspace's state, not only this one's: a command of a workspace at `~` would
    // otherwise reach the journals of all the others.
    policy.state_dir = Some(state.tree().to_path_buf());
    policy.runner_write = vec![state.outputs_dir(), state.quarantine_dir()];
    policy.command_read = vec![state.outputs_dir()];
    // The protected paths that exist now are held read-only; git's own config files stay
    // writable (`git config` replaces them by a rename) and are repaired after each command.
    let catalog_file: Vec<PathBuf> = catalog_path
        .iter()
        .filter(|p| p.is_absolute())
        .map(|p| p.to_path_buf())
        .collect();
    let protected = Protected::new(&root, &protect::configured(&config), &catalog_file);
    policy.read_only = protected
        .existing()
        .into_iter()
        .filter(|p| {
            !p.file_name()
                .is_some_and(|n| n == "config" || n == "config.worktree")
        })
        .collect();
    policy.keep_writable = protect::UNPROTECTED
        .iter()
        .chain(protect::WATCHED)
        .map(|u| root.join(u))
        .collect();
    policy.config = config;
    policy.limits = lanes.limits(lane);
    Ok(policy)
}

/// Where Kubernetes mounts a pod's service account token, a credential for the cluster.
const SERVICE_ACCOUNT_TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

/// A runner's private temp dir (`<state>/tmp/<lane>-<pid>`), flock'ed for the runner's life so
/// another runner's sweep knows it is in use, and emptied when the runner ends.
pub(crate) struct RunnerTempDir {
    path: PathBuf,
    _lock: File,
    /// Closed when this runner ends, however it ends: then the remover deletes the dir.
    _remover: Option<ChildStdin>,
}

impl RunnerTempDir {
    /// Sweep the dirs dead runners left in `tmp`, then make, lock and return this runner's.
    pub(crate) fn claim(tmp: &Path, lane: Lane) -> Result<Self, ToolError> {
        sweep_temp_dirs(tmp);
        let path = tmp.join(format!("{lane}-{}", std::process::id()));
        let io = |e: std::io::Error| ToolError::Io(format!("{}: {e}", path.display()));
        // A dead runner that had this pid may have left it: start empty.
        empty_dir(&path);
        std::fs::create_dir_all(&path).map_err(io)?;
        let lock = File::open(&path).map_err(io)?;
        // Blocking: another runner's sweep may hold it for a moment (and then leaves it, as
        // this pid is alive).
        flock(&lock, libc::LOCK_EX).map_err(io)?;
        let remover = match spawn_remover(&path) {
            Ok((pipe, _child)) => Some(pipe),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "no remover for the temp dir; the next runner's sweep will remove it");
                None
            }
        };
        Ok(Self {
            path,
            _lock: lock,
            _remover: remover,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for RunnerTempDir {
    fn drop(&mut self) {
        empty_dir(&self.path);
        // Landlock lets a sandboxed runner empty its dir but not unlink it from `tmp/`: the
        // next runner's sweep removes the empty dir then.
        if let Err(e) = std::fs::remove_dir(&self.path) {
            tracing::debug!(path = %self.path.display(), error = %e, "temp dir left for the next sweep");
        }
    }
}

/// Start the process that removes `dir` once this runner is gone, however it ends: the router
/// kills its runners with SIGKILL, and the sandbox keeps a runner from unlinking the dir itself.
/// A shell started before the sandbox, in its own process group (a Ctrl-C at the terminal
/// leaves it), waits for end of file on its stdin, a pipe only this runner holds (close-on-exec,
/// so commands do not hold it), then removes the dir, read-only subdirectories included.
fn spawn_remover(dir: &Path) -> std::io::Result<(ChildStdin, std::process::Child)> {
    use std::os::unix::process::CommandExt;
    let mut child = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(
            r#"while read -r _; do :; done; chmod -R u+w -- "$0" 2>/dev/null; exec rm -rf -- "$0""#,
        )
        .arg(dir)
        // Outside the sandbox and readable through /proc: none of the runner's secrets.
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()?;
    let pipe = child
        .stdin
        .take()
        .ok_or_else(|| std::io::Error::other("the remover's stdin is missing"))?;
    Ok((pipe, child))
}

/// Remove the runner temp dirs in `tmp` whose runner is gone: named `<lane>-<pid>`, not locked
/// by a live runner, and with no live process of that pid (a runner between making its dir
/// and locking it). Best effort: whatever cannot be removed waits for the next sweep.
fn sweep_temp_dirs(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(runner_pid) else {
            continue;
        };
        if pid == std::process::id() || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let path = entry.path();
        let Ok(dir) = File::open(&path) else {
            continue;
        };
        if !matches!(flock(&dir, libc::LOCK_EX | libc::LOCK_NB), Ok(true))
            || toolyard_exec::pid_alive(pid)
        {
            continue;
        }
        empty_dir(&path);
        match std::fs::remove_dir(&path) {
            Ok(()) => tracing::debug!(path = %path.display(), "removed a dead runner's temp dir"),
            Err(e) => {
                tracing::debug!(path = %path.display(), error = %e, "cannot remove a dead runner's temp dir")
            }
        }
    }
}

/// The pid of a runner temp dir's name `<lane>-<pid>`; `None` for anything else.
fn runner_pid(name: &str) -> Option<u32> {
    let (lane, pid) = name.rsplit_once('-')?;
    lane.parse::<Lane>().ok()?;
    pid.parse::<u32>().ok().filter(|p| *p > 0)
}

/// Remove everything inside `dir` (never following links), making read-only directories
/// writable first when needed (tools such as Go leave their caches read-only).
fn empty_dir(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        let removed = if is_dir {
            std::fs::remove_dir_all(&path).or_else(|_| {
                make_writable(&path);
                std::fs::remove_dir_all(&path)
            })
        } else {
            std::fs::remove_file(&path)
        };
        if let Err(e) = removed {
            tracing::debug!(path = %path.display(), error = %e, "cannot remove from a runner temp dir");
        }
    }
}

/// `u+rwx` on `dir` and every directory below it (links are not followed).
fn make_writable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = dir.symlink_metadata() else {
        return;
    };
    if !meta.is_dir() {
        return;
    }
    let mode = meta.permissions().mode() | 0o700;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode));
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            make_writable(&entry.path());
        }
    }
}

/// A line writer shared by every task.
type Out = mpsc::Sender<FromRunner>;

/// [`Records`] kept by the router: each [`RecordOp`] is forwarded over the job protocol.
struct RemoteRecords {
    out: Out,
    next: AtomicU64,
    waiting: Mutex<HashMap<u64, oneshot::Sender<Reply>>>,
    /// The router cannot read this workspace: ship the previous content with each journal
    /// request (its hello says so).
    pre_images: AtomicBool,
    /// Where the previous content is read from.
    workspace: OnceLock<Arc<Workspace>>,
}

impl RemoteRecords {
    async fn ask(&self, op: RecordOp) -> Result<Reply, ToolError> {
        let rid = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.waiting.lock().await.insert(rid, tx);
        self.out
            .send(FromRunner::Request { rid, op })
            .await
            .map_err(|_| ToolError::Unavailable("the router is gone".into()))?;
        rx.await.map_err(|_| {
            ToolError::Unavailable("the router did not answer a records request".into())
        })
    }

    /// `op` as it travels: a journal request brings the previous content when the router
    /// cannot read this workspace, and content past one line's worth goes ahead in parts.
    async fn forward(&self, mut op: RecordOp) -> Result<Reply, ToolError> {
        match &mut op {
            RecordOp::JournalBegin {
                session,
                path,
                pre: pre @ None,
                ..
            } if self.pre_images.load(Ordering::SeqCst) => {
                let Some(ws) = self.workspace.get() else {
                    return Err(ToolError::Unavailable(
                        "the runner's workspace is not open yet".into(),
                    ));
                };
                let rel = RelPath::from_normalized(path);
                *pre = Some(self.ship(session, ws, &rel).await?);
            }
            RecordOp::JournalCommand {
                session,
                entries,
                upload,
                ..
            } => {
                let mut content = Vec::new();
                for e in entries.iter_mut() {
                    let bytes = std::mem::take(&mut e.entry.old_content);
                    e.len = bytes.len() as u64;
                    content.extend_from_slice(&bytes);
                }
                if !content.is_empty() {
                    *upload = Some(self.upload(session, &content).await?);
                }
            }
            _ => {}
        }
        self.ask(op).await
    }

    /// `path`'s previous content for a journal request: inline, or, past one line's worth,
    /// sent ahead in parts the request then names.
    async fn ship(
        &self,
        session: &str,
        ws: &Workspace,
        path: &RelPath,
    ) -> Result<PreImageWire, ToolError> {
        let (bytes, mode) = file_state(ws, path)?;
        let bytes = match bytes {
            Some(b) if b.len() > PART_BYTES => b,
            b => return Ok(PreImageWire::new(b.as_deref(), mode)),
        };
        let mut wire = PreImageWire::new(None, mode);
        wire.hash = Some(toolyard_workspace::hash_bytes(&bytes));
        wire.upload = Some(self.upload(session, &bytes).await?);
        Ok(wire)
    }

    /// Send `content` ahead in [`RecordOp::PreImagePart`]s; the upload's name.
    async fn upload(&self, session: &str, content: &[u8]) -> Result<String, ToolError> {
        use base64::Engine;
        let upload = format!(
            "{}-{}",
            std::process::id(),
            self.next.fetch_add(1, Ordering::Relaxed)
        );
        for (seq, part) in content.chunks(PART_BYTES).enumerate() {
            self.ask(RecordOp::PreImagePart {
                session: session.into(),
                upload: upload.clone(),
                seq: seq as u64,
                data: base64::engine::general_purpose::STANDARD.encode(part),
            })
            .await?
            .into_result()?;
        }
        Ok(upload)
    }

    async fn answer(&self, rid: u64, reply: Reply) {
        if let Some(tx) = self.waiting.lock().await.remove(&rid) {
            let _ = tx.send(reply);
        }
    }
}

#[async_trait]
impl Records for RemoteRecords {
    async fn apply(&self, op: RecordOp) -> Reply {
        self.forward(op).await.unwrap_or_else(Reply::Err)
    }
}

/// The router's hello, checked: `Err` says why this runner cannot serve it.
fn hello_of(line: Option<&str>) -> Result<Hello, String> {
    let Some(line) = line else {
        return Err(format!(
            "the router sent no hello within {} s; is it a toolyard server?",
            HELLO_TIMEOUT.as_secs()
        ));
    };
    match serde_json::from_str::<ToRunner>(line) {
        Ok(ToRunner::Hello(h)) if h.proto == PROTOCOL_VERSION => Ok(h),
        Ok(ToRunner::Hello(h)) => Err(format!(
            "the router speaks job protocol version {}, this runner version {PROTOCOL_VERSION}: install the same toolyard release on both sides",
            h.proto
        )),
        _ => Err(format!(
            "the router's first line is not a hello, so it speaks job protocol version 1 and this runner version {PROTOCOL_VERSION}: upgrade the toolyard server"
        )),
    }
}

/// A runner's tools, by dialect and name.
type Tools = HashMap<(String, String), Arc<dyn Tool>>;

/// Every dialect's tools on `env`.
fn every_tool(env: &Arc<ToolEnv>) -> Result<Tools, ToolError> {
    let mut tools = Tools::new();
    for dialect in Dialect::ALL {
        for t in toolyard_dialects::tools(env, dialect)? {
            tools.insert((dialect.to_string(), t.tool.name().to_string()), t.tool);
        }
    }
    Ok(tools)
}

async fn serve(
    lane: Lane,
    root: PathBuf,
    state: StateDir,
    catalog: Catalog,
    slots: usize,
    sandbox: String,
) -> Result<(), ToolError> {
    let (out, out_rx) = mpsc::channel::<FromRunner>(QUEUE);
    // The router's frame limit, known from its hello.
    let frame = Arc::new(AtomicUsize::new(MAX_LINE_BYTES));
    let writer = tokio::spawn(write_out(out_rx, frame.clone()));
    let records = Arc::new(RemoteRecords {
        out: out.clone(),
        next: AtomicU64::new(1),
        waiting: Mutex::new(HashMap::new()),
        pre_images: AtomicBool::new(false),
        workspace: OnceLock::new(),
    });
    let env = Arc::new(ToolEnv::with_records(
        &root,
        state,
        catalog,
        records.clone(),
    )?);
    let _ = records.workspace.set(env.workspace.clone());
    let tools = Arc::new(every_tool(&env)?);
    let slots = Arc::new(Semaphore::new(slots.max(1)));
    let jobs: Arc<Mutex<HashMap<String, CancellationToken>>> = Arc::default();
    let internal = Arc::new(crate::internal::Internal::default());
    let _ = out
        .send(FromRunner::Ready {
            proto: PROTOCOL_VERSION,
            max_frame: MAX_LINE_BYTES as u64,
            lane: lane.to_string(),
            pid: std::process::id(),
            sandbox,
        })
        .await;

    let mut lines = LineReader::new(BufReader::new(tokio::io::stdin()));
    let first = tokio::time::timeout(HELLO_TIMEOUT, lines.next_line())
        .await
        .ok()
        .flatten();
    let hello = match hello_of(first.as_deref()) {
        Ok(h) => h,
        Err(why) => {
            tracing::error!("{why}");
            drop(out);
            let _ = tokio::time::timeout(Duration::from_secs(2), writer).await;
            return Err(ToolError::Unavailable(why));
        }
    };
    frame.store(
        usize::try_from(hello.max_frame)
            .unwrap_or(MAX_LINE_BYTES)
            .clamp(1024, MAX_LINE_BYTES),
        Ordering::SeqCst,
    );
    records.pre_images.store(hello.pre_images, Ordering::SeqCst);
    // Process ids name the lane, so the dispatcher routes later calls here; a restarted
    // runner continues the numbering its router gives it, so an old id is never reused.
    toolyard_tools::process::set_lane(lane.as_str(), hello.process_base.max(1));
    let period = Duration::from_millis(hello.heartbeat_ms.max(10));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut heard = tokio::time::Instant::now();
    let mut seq = 0u64;
    loop {
        let line = tokio::select! {
            line = lines.next_line() => line,
            _ = tick.tick() => {
                if heard.elapsed() >= period * MISSED_PINGS {
                    tracing::error!(
                        "the router went silent ({} ms without a line, {MISSED_PINGS} heartbeats): stopping every job and exiting",
                        heard.elapsed().as_millis()
                    );
                    break;
                }
                seq += 1;
                let _ = out.try_send(FromRunner::Ping { seq });
                continue;
            }
        };
        let Some(line) = line else { break };
        heard = tokio::time::Instant::now();
        let Some(msg) = read_message(&line, &out) else {
            continue;
        };
        match msg {
            ToRunner::Job(Job {
                id,
                timeout_ms,
                internal: Some(op),
                ..
            }) => {
                // The server's own jobs take no slot: an undo_edit holding the lane's last
                // slot waits on the restore it asked for.
                let cancel = CancellationToken::new();
                jobs.lock().await.insert(id.clone(), cancel.clone());
                let (out, env, jobs, internal) =
                    (out.clone(), env.clone(), jobs.clone(), internal.clone());
                tokio::spawn(async move {
                    let timeout = Duration::from_millis(timeout_ms.max(1));
                    let result = internal.run(&env, *op, timeout, &cancel).await;
                    jobs.lock().await.remove(&id);
                    let _ = out.send(FromRunner::Result { id, result }).await;
                });
            }
            ToRunner::Job(job) => {
                let cancel = CancellationToken::new();
                jobs.lock().await.insert(job.id.clone(), cancel.clone());
                let (out, tools, env, slots, jobs) = (
                    out.clone(),
                    tools.clone(),
                    env.clone(),
                    slots.clone(),
                    jobs.clone(),
                );
                tokio::spawn(async move {
                    let id = job.id.clone();
                    let result = match slots.acquire().await {
                        Ok(_permit) => run_job(&tools, &env, job, cancel, &out).await,
                        Err(_) => {
                            ToolError::Unavailable("the runner is shutting down".into()).into()
                        }
                    };
                    jobs.lock().await.remove(&id);
                    let _ = out.send(FromRunner::Result { id, result }).await;
                });
            }
            ToRunner::Ping { seq } => {
                let _ = out.try_send(FromRunner::Pong { seq });
            }
            ToRunner::Pong { .. } => {}
            ToRunner::Hello(_) => tracing::warn!("runner: ignoring a second hello"),
            ToRunner::Cancel { id } => {
                if let Some(token) = jobs.lock().await.get(&id) {
                    token.cancel();
                }
            }
            ToRunner::Reply { rid, result } => records.answer(rid, result).await,
            ToRunner::EndSession { session } => {
                let n = toolyard_tools::process::end_session(&session);
                tracing::debug!(%session, killed = n, "session ended");
            }
        }
    }
    // Background processes end with the runner's router.
    toolyard_tools::process::kill_all();
    // The router is gone: stop every job (their command trees die with their tokens).
    for token in jobs.lock().await.values() {
        token.cancel();
    }
    drop(out);
    drop(env);
    let _ = tokio::time::timeout(Duration::from_secs(2), writer).await;
    Ok(())
}

/// Write every message to stdout, one line each; a result too large for the router's frame
/// limit becomes an error result.
async fn write_out(mut rx: mpsc::Receiver<FromRunner>, frame: Arc<AtomicUsize>) {
    let mut stdout = tokio::io::stdout();
    while let Some(msg) = rx.recv().await {
        let line = match encode(&msg, frame.load(Ordering::SeqCst)) {
            Ok(l) => l,
            Err(why) => {
                let FromRunner::Result { id, .. } = msg else {
                    tracing::warn!(%why, "runner: dropped a message to the router");
                    continue;
                };
                let e = ToolError::Io(format!(
                    "the result cannot reach the server: {why}; ask for less output (a narrower range, a filter)"
                ));
                let small = FromRunner::Result {
                    id,
                    result: e.into(),
                };
                match encode(&small, usize::MAX) {
                    Ok(l) => l,
                    Err(_) => continue,
                }
            }
        };
        if stdout.write_all(&line).await.is_err() || stdout.flush().await.is_err() {
            break;
        }
    }
}

/// The message on `line`, or `None` (logged) when it is not one; a job line this runner cannot
/// read (say, an internal operation of another release) is answered at once, not left to the
/// server's time limit.
fn read_message(line: &str, out: &Out) -> Option<ToRunner> {
    let e = match serde_json::from_str(line) {
        Ok(m) => return Some(m),
        Err(e) => e,
    };
    if let Some(id) = job_id(line) {
        let e = ToolError::NotFound(format!(
            "this runner cannot read the job ({e}); install the same toolyard release on both sides"
        ));
        let _ = out.try_send(FromRunner::Result {
            id,
            result: e.into(),
        });
    }
    tracing::warn!(%e, "runner: ignoring a malformed line");
    None
}

/// The id of a job line that did not parse as a job, when it has one.
fn job_id(line: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    if v.get("type")?.as_str()? != "job" {
        return None;
    }
    Some(v.get("id")?.as_str()?.to_string())
}

async fn run_job(
    tools: &Tools,
    env: &Arc<ToolEnv>,
    job: Job,
    cancel: CancellationToken,
    out: &Out,
) -> ToolResult {
    let Some(tool) = tools.get(&(job.dialect.clone(), job.tool.clone())) else {
        return ToolError::NotFound(format!(
            "this runner has no tool `{}` in dialect {}",
            job.tool, job.dialect
        ))
        .into();
    };
    let progress_out = out.clone();
    let id = job.id.clone();
    let ctx = ToolContext {
        workspace_root: env.workspace.root().to_path_buf(),
        cwd: env.workspace.root().to_path_buf(),
        session_id: job.session,
        call_id: job.call_id,
        cancel: cancel.clone(),
        // Progress is advisory: dropped when the link is busy.
        progress: Arc::new(move |p| {
            let _ = progress_out.try_send(FromRunner::Progress {
                id: id.clone(),
                progress: p,
            });
        }),
        timeout: Duration::from_millis(job.timeout_ms),
        max_timeout: Duration::from_millis(job.max_timeout_ms),
        max_output_bytes: job.max_output_bytes as usize,
    };
    tokio::select! {
        // The dispatcher checked the arguments and decided `timeout_ms`; a bad argument is
        // still an error result here, never a crash.
        // The tool's name goes with the call, for what its commands change (`capture`).
        // The files its commands changed go into its result: the server's language servers hear of them.
        r = toolyard_tools::capture::scope_call(job.tool.clone(), tool.invoke_checked(job.args, &ctx)) => r,
        // A tool that ignores its token still ends here; command tools kill their tree first.
        _ = async { cancel.cancelled().await; tokio::time::sleep(Duration::from_secs(3)).await } => {
            ToolError::Cancelled.into()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use super::*;

    #[test]
    fn a_job_line_this_runner_cannot_read_still_names_its_job() {
        let future = r#"{"type":"job","id":"7","session":"s","call_id":"c","dialect":"","tool":"x","args":null,"timeout_ms":1,"max_timeout_ms":1,"max_output_bytes":1,"internal":{"op":"from_a_newer_release"}}"#;
        assert!(serde_json::from_str::<ToRunner>(future).is_err());
        assert_eq!(job_id(future).as_deref(), Some("7"));
        assert_eq!(job_id(r#"{"type":"ping","seq":"x"}"#), None);
        assert_eq!(job_id("not json"), None);
    }

    /// The pid of a process that has exited (and been reaped).
    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    /// An exclusive flock on `dir`, as a live runner holds on its own; `None` if taken.
    fn try_lock(dir: &Path) -> Option<File> {
        let f = File::open(dir).unwrap();
        // SAFETY: flock on a descriptor we own.
        let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        (r == 0).then_some(f)
    }

    #[test]
    fn the_remover_deletes_the_dir_once_its_runner_is_gone() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("net-1");
        let ro = dir.join("cache/ro");
        std::fs::create_dir_all(&ro).unwrap();
        std::fs::write(ro.join("f"), "x").unwrap();
        std::fs::set_permissions(&ro, std::os::unix::fs::PermissionsExt::from_mode(0o555)).unwrap();
        let (pipe, mut remover) = spawn_remover(&dir).unwrap();
        assert!(
            remover.try_wait().unwrap().is_none(),
            "the remover did not wait"
        );
        assert!(ro.join("f").exists());
        // What a runner's death does: its end of the pipe closes.
        drop(pipe);
        assert!(remover.wait().unwrap().success());
        assert!(!dir.exists(), "the dir outlived its runner");
    }

    #[test]
    fn temp_dirs_of_dead_runners_are_swept_and_live_ones_kept() {
        let root = tempfile::tempdir().unwrap();
        let dir = |name: &str| {
            let p = root.path().join(name);
            std::fs::create_dir_all(p.join("sub")).unwrap();
            std::fs::write(p.join("sub/junk"), "x").unwrap();
            p
        };
        let dead = dead_pid();
        let stale = dir(&format!("net-{dead}"));
        // A runner that has made its dir but not locked it yet: its pid is alive.
        let mut alive = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let starting = dir(&format!("no-net-{}", alive.id()));
        // A runner whose pid this process cannot see (another pid namespace) holds its lock.
        let locked = dir(&format!("heavy-{dead}"));
        let _held = try_lock(&locked).unwrap();
        let not_ours = dir("notes");

        sweep_temp_dirs(root.path());
        let _ = alive.kill();
        let _ = alive.wait();

        assert!(!stale.exists(), "a dead runner's dir is left");
        for kept in [&starting, &locked, &not_ours] {
            assert!(
                kept.join("sub/junk").exists(),
                "{} was removed",
                kept.display()
            );
        }
    }

    #[test]
    fn a_runner_s_temp_dir_is_locked_while_it_lives_and_removed_when_it_ends() {
        let root = tempfile::tempdir().unwrap();
        let dead = dead_pid();
        std::fs::create_dir(root.path().join(format!("heavy-{dead}"))).unwrap();
        let temp = RunnerTempDir::claim(root.path(), Lane::Net).unwrap();
        assert_eq!(
            temp.path(),
            root.path().join(format!("net-{}", std::process::id()))
        );
        // Claiming swept the dead runner's dir.
        assert!(!root.path().join(format!("heavy-{dead}")).exists());
        std::fs::create_dir(temp.path().join("build")).unwrap();
        std::fs::write(temp.path().join("build/out.o"), "x").unwrap();
        // Read-only, as Go leaves its module cache (only meaningful when not run as root).
        let ro = temp.path().join("build/ro");
        std::fs::create_dir(&ro).unwrap();
        std::fs::write(ro.join("f"), "x").unwrap();
        std::fs::set_permissions(&ro, std::os::unix::fs::PermissionsExt::from_mode(0o555)).unwrap();
        assert!(try_lock(temp.path()).is_none(), "the dir is not locked");
        let path = temp.path().to_path_buf();
        drop(temp);
        assert!(!path.exists(), "the dir outlived its runner");
    }
}
