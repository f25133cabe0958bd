//! The router: one runner per lane (or per session and lane, when the link's template names
//! `{session}`), reached through a [`RunnerLink`], started on first use, restarted when it
//! dies. Calls are matched to results by job id; calls in flight when a link dies (EOF, a
//! killed process, missed heartbeats) get a clear error at once, never a hang and never a
//! silent retry.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::process::Child;
use tokio::sync::{Mutex, mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use toolyard_core::{Lane, ProgressSink, ToolError, ToolResult};
use toolyard_records::Records;
use toolyard_runner::protocol::{
    FromRunner, Hello, Job, LineReader, MAX_LINE_BYTES, MAX_PRE_IMAGE_BYTES, MISSED_PINGS,
    PROTOCOL_VERSION, RecordOp, Reply, ToRunner, encode,
};

pub use crate::link::RunnerSpawn;
use crate::link::{RunnerLink, session_token};

/// How long a runner may take to sandbox itself and say it is ready.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// Messages waiting for a link's writer: past this, senders wait (back-pressure).
const QUEUE: usize = 256;

/// The longest background process id kept from a runner's result (ids are like `net-12`).
const MAX_PROCESS_ID_BYTES: usize = 256;

/// The most background process ids kept per link, and lost per session: a runner that names a
/// new one in every result cannot grow the server without bound.
const MAX_KEPT_IDS: usize = 100_000;

/// A link's records requests carried out at once; past this its lines wait to be read.
const MAX_REQUESTS_IN_FLIGHT: usize = 64;

/// How much of a link's stderr goes to the log; the rest is dropped (a tail is kept for
/// start-up errors).
const STDERR_LOG_BYTES: usize = 64 << 10;

struct Pending {
    done: oneshot::Sender<ToolResult>,
    progress: ProgressSink,
    /// The job's session: the only one its runner may ask records for.
    session: String,
    /// Whether the call may change files or run commands: then a dead link cannot say
    /// whether it ran.
    mutating: bool,
}

/// Background process ids (issued by a runner, or lost with one).
type IdSet = Arc<std::sync::Mutex<HashSet<String>>>;

type PendingMap = Arc<std::sync::Mutex<HashMap<String, Pending>>>;

/// Lost background process ids per session token (`None`: runners shared by every session).
type LostIds = Arc<std::sync::Mutex<HashMap<Option<String>, HashSet<String>>>>;

/// Which runner: the session token (`None` when runners serve every session) and the lane.
pub(crate) type Key = (Option<String>, Lane);

/// One live link to a runner.
pub(crate) struct RunnerConn {
    tx: mpsc::Sender<ToRunner>,
    pending: PendingMap,
    alive: Arc<AtomicBool>,
    pid: u32,
    /// What its sandbox enforces, from its `ready`.
    sandbox: String,
    /// The egress gate of its commands, if the link started one.
    egress: Option<Arc<crate::link::LaneGate>>,
}

/// Journal entries whose runner's link died before it ended them, per session token: the
/// next runner of that token settles them from the file's hash.
pub(crate) type Orphans = Arc<std::sync::Mutex<HashMap<Option<String>, HashSet<i64>>>>;

/// Where the runner of one key lives: starting one holds `start` (so two calls never start
/// two), and only that key's calls wait behind a slow start, not every session's.
#[derive(Default)]
struct Slot {
    start: Mutex<()>,
    conn: std::sync::Mutex<Option<Arc<RunnerConn>>>,
}

impl Slot {
    /// The runner, if its link is alive.
    fn live(&self) -> Option<Arc<RunnerConn>> {
        self.conn
            .lock()
            .ok()?
            .as_ref()
            .filter(|r| r.alive.load(Ordering::SeqCst))
            .cloned()
    }
}

/// Sends calls to the runner of their lane.
pub struct Router {
    link: Arc<dyn RunnerLink>,
    records: Arc<dyn Records>,
    runners: std::sync::Mutex<HashMap<Key, Arc<Slot>>>,
    next_job: AtomicU64,
    /// Background process ids whose runner died (and killed them), per session token.
    lost: LostIds,
    /// Journal entries a dead link left pending, per session token.
    pub(crate) orphans: Orphans,
    /// Settles pending journal entries when a remote runner starts (set by the dispatcher).
    pub(crate) recovery: std::sync::OnceLock<Arc<dyn Settle>>,
}

/// What settles the pending journal entries of a remote runner's sessions through its fresh
/// connection (the remote workspace's recovery).
#[async_trait::async_trait]
pub(crate) trait Settle: Send + Sync {
    /// Settle, through the fresh runner `conn` of `key`, every pending entry of its sessions.
    async fn settle(&self, router: &Router, conn: &RunnerConn, key: &Key);
}

impl Router {
    /// A router that starts local runner processes as `spawn` says and keeps their records in
    /// `records`.
    pub fn new(spawn: RunnerSpawn, records: Arc<dyn Records>) -> Self {
        Self::with_link(Arc::new(spawn), records)
    }

    /// A router that reaches its runners through `link`.
    pub fn with_link(link: Arc<dyn RunnerLink>, records: Arc<dyn Records>) -> Self {
        Self {
            link,
            records,
            runners: std::sync::Mutex::default(),
            next_job: AtomicU64::new(1),
            lost: Arc::default(),
            orphans: Arc::default(),
            recovery: std::sync::OnceLock::new(),
        }
    }

    /// Whether the runners' workspace is elsewhere (a `[remote]` link).
    pub fn is_remote(&self) -> bool {
        self.link.is_remote()
    }

    pub(crate) fn token(&self, session: &str) -> Option<String> {
        self.link.per_session().then(|| session_token(session))
    }

    /// Whether background process `id` of `session` was lost with a runner that died.
    pub fn is_lost(&self, session: &str, id: &str) -> bool {
        let token = self.token(session);
        self.lost
            .lock()
            .map(|l| l.get(&token).is_some_and(|ids| ids.contains(id)))
            .unwrap_or(false)
    }

    /// Count `ids` of `session` as lost (a session host that held them died): calls naming
    /// them are told so, and new processes are numbered past them.
    pub fn mark_lost(&self, session: &str, ids: impl IntoIterator<Item = String>) {
        let token = self.token(session);
        if let Ok(mut lost) = self.lost.lock() {
            lost.entry(token).or_default().extend(ids);
        }
    }

    /// The lanes whose runner is running (any session's).
    pub async fn live_lanes(&self) -> Vec<Lane> {
        self.live(|_| true).await
    }

    /// The lanes whose runner serving `session` is running.
    pub async fn live_lanes_for(&self, session: &str) -> Vec<Lane> {
        let token = self.token(session);
        self.live(|t| *t == token).await
    }

    async fn live(&self, of: impl Fn(&Option<String>) -> bool) -> Vec<Lane> {
        let mut v: Vec<Lane> = self
            .slots()
            .into_iter()
            .filter(|((t, _), slot)| of(t) && slot.live().is_some())
            .map(|((_, l), _)| l)
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// Tell the runners serving `session` that it ended, so they kill its background
    /// processes; runners of that session alone are closed.
    pub async fn end_session(&self, session: &str) {
        let token = self.token(session);
        let targets: Vec<Arc<RunnerConn>> = {
            let Ok(mut runners) = self.runners.lock() else {
                return;
            };
            let slots: Vec<Arc<Slot>> = if token.is_some() {
                // Dropping the session's slots closes its links: its runners exit.
                let keys: Vec<Key> = runners.keys().filter(|k| k.0 == token).cloned().collect();
                keys.iter().filter_map(|k| runners.remove(k)).collect()
            } else {
                runners.values().cloned().collect()
            };
            slots.iter().filter_map(|s| s.live()).collect()
        };
        for r in targets {
            let msg = ToRunner::EndSession {
                session: session.to_string(),
            };
            // A full queue means a stuck link: the heartbeat ends it, and its processes with it.
            if let Err(e) = r.tx.try_send(msg) {
                tracing::debug!(error = %e, "could not tell a runner that a session ended");
            }
        }
        // What the link placed for the session (a pod) goes with it.
        if let Some(token) = token {
            self.link.end_session(&token).await;
        }
    }

    /// The server is stopping: the link releases everything it placed (pods).
    pub async fn shutdown(&self) {
        self.link.shutdown().await;
    }

    /// The first process number for a new runner of `key`: past every id handed out before.
    fn process_base(&self, key: &Key) -> u64 {
        let prefix = format!("{}-", key.1.as_str());
        self.lost
            .lock()
            .map(|l| {
                l.get(&key.0)
                    .into_iter()
                    .flatten()
                    .filter_map(|id| id.strip_prefix(&prefix)?.parse::<u64>().ok())
                    .max()
                    .unwrap_or(0)
            })
            .unwrap_or(0)
            + 1
    }

    /// The pid the lane's runner reported, if one is running (for tests and `doctor`); for
    /// links with a runner per session, see [`Router::runner_pid_for`].
    pub async fn runner_pid(&self, lane: Lane) -> Option<u32> {
        self.pid_of(&(None, lane)).await
    }

    /// The pid the runner serving `session` in `lane` reported, if one is running.
    pub async fn runner_pid_for(&self, session: &str, lane: Lane) -> Option<u32> {
        self.pid_of(&(self.token(session), lane)).await
    }

    /// What the sandbox of `session`'s runner in `lane` enforces, as its `ready` said; the
    /// runner is started if none runs.
    pub async fn sandbox_report(&self, session: &str, lane: Lane) -> Result<String, ToolError> {
        let key = (self.token(session), lane);
        Ok(self.runner(&key).await?.sandbox.clone())
    }

    async fn pid_of(&self, key: &Key) -> Option<u32> {
        let slot = self.runners.lock().ok()?.get(key).cloned()?;
        slot.live().map(|r| r.pid)
    }

    /// Every slot, copied out of the lock.
    fn slots(&self) -> Vec<(Key, Arc<Slot>)> {
        self.runners
            .lock()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default()
    }

    /// Run `job` (its id is assigned here) in the runner of `lane`, as a call that may change
    /// things (see [`Router::submit_with`]).
    pub async fn submit(
        &self,
        lane: Lane,
        job: Job,
        cancel: CancellationToken,
        progress: ProgressSink,
    ) -> ToolResult {
        self.submit_with(lane, job, cancel, progress, true).await
    }

    /// Run `job` in the runner of `lane` for its session. `mutating`: the call may change files
    /// or run commands, so if its link dies the error says it may or may not have run.
    pub async fn submit_with(
        &self,
        lane: Lane,
        job: Job,
        cancel: CancellationToken,
        progress: ProgressSink,
        mutating: bool,
    ) -> ToolResult {
        let key = (self.token(&job.session), lane);
        let conn = match self.runner(&key).await {
            Ok(c) => c,
            Err(e) => return e.into(),
        };
        self.submit_on(&conn, lane, job, cancel, progress, mutating)
            .await
    }

    /// Run `job` on the runner behind `conn`; its result ends with the `network:` line of
    /// what the lane's egress gate let through or refused while it ran.
    pub(crate) async fn submit_on(
        &self,
        conn: &RunnerConn,
        lane: Lane,
        job: Job,
        cancel: CancellationToken,
        progress: ProgressSink,
        mutating: bool,
    ) -> ToolResult {
        let since = std::time::Instant::now();
        // The hosts approved for this call (and its session, and the workspace) are let
        // through while it runs.
        let _approved = crate::network_request::hold(conn.egress.as_deref());
        let mut result = self
            .submit_raw(conn, lane, job, cancel, progress, mutating)
            .await;
        // Per runner, by time: the connections of calls running beside this one in the same
        // lane show up in both (the gate cannot tell the commands of one runner apart).
        if let Some(line) = conn.egress.as_ref().and_then(|g| g.summary_since(since)) {
            if !result.output.is_empty() && !result.output.ends_with('\n') {
                result.output.push('\n');
            }
            result.output.push_str(&line);
        }
        result
    }

    async fn submit_raw(
        &self,
        conn: &RunnerConn,
        lane: Lane,
        mut job: Job,
        cancel: CancellationToken,
        progress: ProgressSink,
        mutating: bool,
    ) -> ToolResult {
        let gone = || link_died(lane, "it ended before the call was sent", false);
        job.id = self.next_job.fetch_add(1, Ordering::Relaxed).to_string();
        let id = job.id.clone();
        let bound = Duration::from_millis(job.max_timeout_ms) + Duration::from_secs(10);
        let (done, mut rx) = oneshot::channel();
        if let Ok(mut p) = conn.pending.lock() {
            p.insert(
                id.clone(),
                Pending {
                    done,
                    progress,
                    session: job.session.clone(),
                    mutating,
                },
            );
        }
        // The reader may have seen the link die before the job was registered.
        if !conn.alive.load(Ordering::SeqCst) {
            take(&conn.pending, &id);
            return gone().into();
        }
        // Waiting for room in the queue, the link may die: its reader then fails this call.
        tokio::select! {
            sent = conn.tx.send(ToRunner::Job(job)) => if sent.is_err() {
                take(&conn.pending, &id);
                return gone().into();
            },
            r = &mut rx => return r.unwrap_or_else(|_| gone().into()),
        }
        tokio::select! {
            r = &mut rx => r.unwrap_or_else(|_| gone().into()),
            _ = cancel.cancelled() => {
                let _ = conn.tx.try_send(ToRunner::Cancel { id: id.clone() });
                // The runner kills the command's tree and answers; give it a moment.
                match tokio::time::timeout(Duration::from_secs(5), rx).await {
                    Ok(Ok(r)) => r,
                    _ => { take(&conn.pending, &id); ToolError::Cancelled.into() }
                }
            }
            _ = tokio::time::sleep(bound) => {
                let _ = conn.tx.try_send(ToRunner::Cancel { id: id.clone() });
                take(&conn.pending, &id);
                ToolError::Timeout { ms: bound.as_millis() as u64 }.into()
            }
        }
    }

    /// The runner of `key`, started if there is none or its link died.
    async fn runner(&self, key: &Key) -> Result<Arc<RunnerConn>, ToolError> {
        let slot = self
            .runners
            .lock()
            .map_err(|_| ToolError::Io("the router's runner table is poisoned".into()))?
            .entry(key.clone())
            .or_default()
            .clone();
        if let Some(r) = slot.live() {
            return Ok(r);
        }
        let _starting = slot.start.lock().await;
        // Another call may have started it while this one waited.
        if let Some(r) = slot.live() {
            return Ok(r);
        }
        let conn = Arc::new(self.start(key).await?);
        // Before any call uses it: settle what a dead link left pending on this workspace.
        if let Some(recovery) = self.recovery.get() {
            recovery.settle(self, &conn, key).await;
        }
        if let Ok(mut c) = slot.conn.lock() {
            *c = Some(conn.clone());
        }
        Ok(conn)
    }

    async fn start(&self, key: &Key) -> Result<RunnerConn, ToolError> {
        let lane = key.1;
        let token = key.0.clone().unwrap_or_else(|| "shared".into());
        let io = self.link.open(lane, &token).await?;
        let egress = io.egress;
        let mut child = io.child;
        let stderr_tail = Arc::new(std::sync::Mutex::new(String::new()));
        if let Some(stderr) = io.stderr {
            let loud = self.link.is_remote();
            tokio::spawn(forward_stderr(stderr, lane, stderr_tail.clone(), loud));
        }
        let mut writer = io.writer;
        let mut lines = LineReader::new(BufReader::new(io.reader));
        let heartbeat = self.link.heartbeat();
        let hello = ToRunner::Hello(Hello {
            proto: PROTOCOL_VERSION,
            max_frame: MAX_LINE_BYTES as u64,
            heartbeat_ms: heartbeat.as_millis() as u64,
            process_base: self.process_base(key),
            pre_images: self.link.is_remote(),
        });
        let handshake = async {
            let line = encode(&hello, MAX_LINE_BYTES).map_err(ToolError::Io)?;
            // A runner that already exited fails the write; its stderr says why, below.
            let _ = write_line(&mut writer, &line).await;
            let first = lines.next_line().await;
            ready_of(first.as_deref(), lane, &self.link.describe())
        };
        let ready = match tokio::time::timeout(START_TIMEOUT, handshake).await {
            Ok(Ok(ready)) => Ok(ready),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(ToolError::Unavailable(format!(
                "the {lane} runner did not say it was ready within {} s",
                START_TIMEOUT.as_secs()
            ))),
        };
        let (pid, max_frame, sandbox) = match ready {
            Ok(r) => r,
            Err(e) => {
                if let Some(c) = child.as_mut() {
                    let _ = c.start_kill();
                }
                // Let stderr drain so the message says why.
                tokio::time::sleep(Duration::from_millis(100)).await;
                let why = stderr_tail
                    .lock()
                    .map(|s| s.trim().to_string())
                    .unwrap_or_default();
                let msg = e.to_string();
                return Err(ToolError::Unavailable(if why.is_empty() {
                    msg
                } else {
                    format!("{msg}; its stderr: {why}")
                }));
            }
        };

        let (tx, rx) = mpsc::channel(QUEUE);
        let pending: PendingMap = Arc::default();
        let alive = Arc::new(AtomicBool::new(true));
        let issued: IdSet = Arc::default();
        tokio::spawn(write_jobs(writer, rx, max_frame, pending.clone(), lane));
        tokio::spawn(read_results(
            Link {
                lines,
                child,
                lane,
                heartbeat,
            },
            pending.clone(),
            alive.clone(),
            tx.downgrade(),
            Shared {
                records: self.records.clone(),
                remote: self.link.is_remote(),
            },
            (
                issued,
                self.lost.clone(),
                key.0.clone(),
                self.orphans.clone(),
            ),
        ));
        Ok(RunnerConn {
            tx,
            pending,
            alive,
            pid,
            sandbox,
            egress,
        })
    }
}

/// The runner's pid and the largest line it reads, from its `ready` line, or why it is not one.
fn ready_of(line: Option<&str>, lane: Lane, link: &str) -> Result<(u32, usize, String), ToolError> {
    let Some(line) = line else {
        return Err(ToolError::Unavailable(format!(
            "the {lane} runner did not start ({link} ended without a word)"
        )));
    };
    match serde_json::from_str::<FromRunner>(line) {
        Ok(FromRunner::Ready {
            proto,
            max_frame,
            pid,
            sandbox,
            ..
        }) => {
            if proto != PROTOCOL_VERSION {
                let upgrade = if proto < PROTOCOL_VERSION {
                    format!("upgrade the toolyard that {link} starts")
                } else {
                    "upgrade this toolyard server".to_string()
                };
                return Err(ToolError::Unavailable(format!(
                    "the {lane} runner speaks job protocol version {proto}, this server version {PROTOCOL_VERSION}: {upgrade}, so both are the same release"
                )));
            }
            tracing::info!(%lane, pid, %sandbox, "a runner is ready");
            let max = match usize::try_from(max_frame) {
                Ok(0) | Err(_) => MAX_LINE_BYTES,
                Ok(m) => m.min(MAX_LINE_BYTES),
            };
            Ok((pid, max, sandbox))
        }
        _ => Err(ToolError::Unavailable(format!(
            "the {lane} runner did not start: its first line is not a ready message ({}); is {link} starting `toolyard runner`?",
            line.chars().take(200).collect::<String>()
        ))),
    }
}

/// Why calls in flight on a dead link failed, said for the model to act on.
fn link_died(lane: Lane, why: &str, mutating: bool) -> ToolError {
    ToolError::Unavailable(if mutating {
        format!(
            "the {lane} runner's link died: {why}; the call may or may not have run; check with read_file/git status before retrying (the next call starts a fresh runner)"
        )
    } else {
        format!(
            "the {lane} runner's link died: {why}; the call did not complete; retry it (the next call starts a fresh runner)"
        )
    })
}

fn take(pending: &PendingMap, id: &str) -> Option<Pending> {
    pending.lock().ok().and_then(|mut p| p.remove(id))
}

async fn write_line(w: &mut (dyn AsyncWrite + Send + Unpin), line: &[u8]) -> std::io::Result<()> {
    w.write_all(line).await?;
    w.flush().await
}

async fn write_jobs(
    mut writer: Box<dyn AsyncWrite + Send + Unpin>,
    mut rx: mpsc::Receiver<ToRunner>,
    max_frame: usize,
    pending: PendingMap,
    lane: Lane,
) {
    while let Some(msg) = rx.recv().await {
        let line = match encode(&msg, max_frame) {
            Ok(l) => l,
            Err(why) => {
                // Only a job can be this large: fail it rather than the link.
                if let ToRunner::Job(job) = &msg
                    && let Some(p) = take(&pending, &job.id)
                {
                    let e = ToolError::InvalidArguments(format!(
                        "the call's arguments cannot reach the {lane} runner: {why}; pass less at once"
                    ));
                    let _ = p.done.send(e.into());
                } else {
                    tracing::warn!(%lane, %why, "dropped a message to a runner");
                }
                continue;
            }
        };
        if write_line(writer.as_mut(), &line).await.is_err() {
            break;
        }
    }
}

async fn forward_stderr(
    mut stderr: Box<dyn AsyncRead + Send + Unpin>,
    lane: Lane,
    tail: Arc<std::sync::Mutex<String>>,
    loud: bool,
) {
    let mut buf = vec![0u8; 8192];
    let mut logged = 0usize;
    while let Ok(n) = stderr.read(&mut buf).await {
        if n == 0 {
            break;
        }
        let text = String::from_utf8_lossy(&buf[..n]);
        if logged < STDERR_LOG_BYTES {
            let msg = text.trim_end();
            // A remote runner's diagnostics are the only ones the server sees of it.
            if loud {
                tracing::warn!(%lane, "runner: {msg}");
            } else {
                tracing::debug!(%lane, "runner: {msg}");
            }
            logged += n;
            if logged >= STDERR_LOG_BYTES {
                tracing::warn!(%lane, "runner: further stderr of this link is not logged");
            }
        }
        if let Ok(mut t) = tail.lock() {
            t.push_str(&text);
            if t.len() > 4096 {
                let cut = t.len() - 4096;
                let cut = (cut..t.len())
                    .find(|&i| t.is_char_boundary(i))
                    .unwrap_or(t.len());
                t.drain(..cut);
            }
        }
    }
}

/// The reading end of a link and what ends it.
struct Link {
    lines: LineReader<BufReader<Box<dyn AsyncRead + Send + Unpin>>>,
    child: Option<Child>,
    lane: Lane,
    heartbeat: Duration,
}

/// What records requests need.
struct Shared {
    records: Arc<dyn Records>,
    /// The server cannot read the runner's workspace: journal requests must carry pre-images.
    remote: bool,
}

async fn read_results(
    mut link: Link,
    pending: PendingMap,
    alive: Arc<AtomicBool>,
    // Weak: the link stays open only while the router holds its runner (or a call is in
    // flight on it); dropping the runner closes the runner's stdin, and it exits.
    tx: mpsc::WeakSender<ToRunner>,
    shared: Shared,
    (issued, lost, token, orphans): (IdSet, LostIds, Option<String>, Orphans),
) {
    let lane = link.lane;
    let shared = Arc::new(shared);
    let begun: Arc<std::sync::Mutex<HashSet<i64>>> = Arc::default();
    // Dropped with the link: the parts of a pre-image it never sent whole go with it.
    let uploads: Arc<std::sync::Mutex<Uploads>> = Arc::default();
    let requests = Arc::new(tokio::sync::Semaphore::new(MAX_REQUESTS_IN_FLIGHT));
    let mut tick = tokio::time::interval(link.heartbeat);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut heard = Instant::now();
    let mut seq = 0u64;
    let why = loop {
        let line = tokio::select! {
            line = link.lines.next_line() => line,
            _ = tick.tick() => {
                let silent = heard.elapsed();
                if silent >= link.heartbeat * MISSED_PINGS {
                    break format!(
                        "no answer to {MISSED_PINGS} pings ({} ms without a line from it)",
                        silent.as_millis()
                    );
                }
                seq += 1;
                // A full queue is a busy link, not a dead one: skip this ping.
                if let Some(tx) = tx.upgrade() {
                    let _ = tx.try_send(ToRunner::Ping { seq });
                }
                continue;
            }
        };
        let Some(line) = line else {
            break "its output closed".to_string();
        };
        heard = Instant::now();
        let msg: FromRunner = match serde_json::from_str(&line) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(%lane, %e, "router: malformed line from a runner");
                continue;
            }
        };
        match msg {
            FromRunner::Result { id, result } => {
                // The job first: a result for no job in flight is dropped whole, whatever it
                // carries.
                let Some(p) = take(&pending, &id) else {
                    tracing::debug!(%lane, "router: a result for no job in flight, dropped");
                    continue;
                };
                let process = result
                    .data
                    .as_ref()
                    .and_then(|d| d.get("process_id"))
                    .and_then(|v| v.as_str())
                    .filter(|pid| pid.len() <= MAX_PROCESS_ID_BYTES);
                if let (Some(pid), Ok(mut set)) = (process, issued.lock())
                    && set.len() < MAX_KEPT_IDS
                {
                    set.insert(pid.to_string());
                }
                let _ = p.done.send(result);
            }
            FromRunner::Progress { id, progress } => {
                let sink = pending
                    .lock()
                    .ok()
                    .and_then(|p| p.get(&id).map(|p| p.progress.clone()));
                if let Some(sink) = sink {
                    sink(progress);
                }
            }
            FromRunner::Request { rid, op } => {
                let Some(tx) = tx.upgrade() else { continue };
                // Back-pressure: a runner that sends requests faster than they are answered
                // (or never reads the replies) waits here instead of piling up tasks.
                let Ok(permit) = requests.clone().acquire_owned().await else {
                    continue;
                };
                // A runner's request is a claim, checked before it is carried out: it may act
                // only for the sessions of its own jobs in flight, and end only the journal
                // entries it began.
                if let Err(e) = claim_is_owned(&op, &pending, &begun) {
                    tracing::warn!(%lane, error = %e, "router: refused a runner's records request");
                    let reply = ToRunner::Reply {
                        rid,
                        result: Reply::from_result(Err(e)),
                    };
                    tokio::spawn(async move {
                        let _permit = permit;
                        tx.send(reply).await
                    });
                    continue;
                }
                let (shared, begun, uploads) = (shared.clone(), begun.clone(), uploads.clone());
                tokio::spawn(async move {
                    let _permit = permit;
                    let is_begin = matches!(op, RecordOp::JournalBegin { .. });
                    let result = apply(shared.records.as_ref(), op, shared.remote, &uploads).await;
                    if let (true, Reply::Ok(Some(change))) = (is_begin, &result)
                        && let Ok(mut b) = begun.lock()
                    {
                        b.insert(*change);
                    }
                    let _ = tx.send(ToRunner::Reply { rid, result }).await;
                });
            }
            FromRunner::Ping { seq } => {
                if let Some(tx) = tx.upgrade() {
                    let _ = tx.try_send(ToRunner::Pong { seq });
                }
            }
            FromRunner::Pong { .. } | FromRunner::Ready { .. } => {}
        }
    };
    // The link is dead: fail what was in flight, now, and make sure the runner is gone.
    alive.store(false, Ordering::SeqCst);
    // Its background processes died with it (their inits die with the runner's thread).
    if let (Ok(mut from), Ok(mut to)) = (issued.lock(), lost.lock()) {
        let kept = to.entry(token.clone()).or_default();
        let room = MAX_KEPT_IDS.saturating_sub(kept.len());
        kept.extend(from.drain().take(room));
    }
    // Journal entries it began and never ended: the next runner settles them.
    if let (Ok(mut from), Ok(mut to)) = (begun.lock(), orphans.lock()) {
        to.entry(token).or_default().extend(from.drain());
    }
    let mut why = why;
    if let Some(child) = link.child.as_mut() {
        let _ = child.start_kill();
        if let Ok(Ok(status)) = tokio::time::timeout(Duration::from_secs(1), child.wait()).await {
            why.push_str(&format!(" ({status})"));
        }
    }
    tracing::warn!(%lane, %why, "a runner's link died");
    let drained: Vec<Pending> = pending
        .lock()
        .map(|mut p| p.drain().map(|(_, v)| v).collect())
        .unwrap_or_default();
    for p in drained {
        let _ = p.done.send(link_died(lane, &why, p.mutating).into());
    }
}

/// The previous contents a runner is sending in parts ([`RecordOp::PreImagePart`]), by upload
/// id, until the journal request that names one takes it.
#[derive(Default)]
pub(crate) struct Uploads {
    parts: HashMap<String, (u64, Vec<u8>)>,
    /// Bytes held, all uploads together.
    held: u64,
}

/// The most bytes one link's uploads hold at once (two whole pre-images).
const MAX_UPLOADING: u64 = 2 * MAX_PRE_IMAGE_BYTES;

/// The most uploads one link has open at once, and the longest upload id.
const MAX_UPLOADS: usize = 16;
const MAX_UPLOAD_ID_BYTES: usize = 128;

impl Uploads {
    /// Append part `seq` (base64 `data`) to `upload`; an upload whose parts come out of order
    /// or grow past the limits is dropped.
    fn add(&mut self, upload: &str, seq: u64, data: &str) -> Result<(), ToolError> {
        use base64::Engine;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| {
                ToolError::InvalidArguments(format!("a pre-image part is not base64: {e}"))
            })?;
        let (next, have) = self
            .parts
            .get(upload)
            .map_or((0, 0), |(n, b)| (*n, b.len() as u64));
        let len = bytes.len() as u64;
        let refused = if upload.len() > MAX_UPLOAD_ID_BYTES {
            Some(format!(
                "an upload id is longer than {MAX_UPLOAD_ID_BYTES} bytes"
            ))
        } else if !self.parts.contains_key(upload) && self.parts.len() >= MAX_UPLOADS {
            Some(format!(
                "this runner has {MAX_UPLOADS} uploads open already"
            ))
        } else if seq != next {
            Some(format!(
                "part {seq} of upload {upload} came, {next} was expected"
            ))
        } else if have + len > MAX_PRE_IMAGE_BYTES {
            Some(format!(
                "upload {upload} is over {MAX_PRE_IMAGE_BYTES} bytes"
            ))
        } else if self.held + len > MAX_UPLOADING {
            Some(format!(
                "this runner's uploads in flight are over {MAX_UPLOADING} bytes"
            ))
        } else {
            None
        };
        if let Some(why) = refused {
            self.take(upload);
            return Err(ToolError::InvalidArguments(format!(
                "{why}; nothing was written, retry the call"
            )));
        }
        let entry = self.parts.entry(upload.to_string()).or_default();
        entry.0 += 1;
        entry.1.extend_from_slice(&bytes);
        self.held += len;
        Ok(())
    }

    /// The whole content of `upload`, which leaves the store.
    fn take(&mut self, upload: &str) -> Option<Vec<u8>> {
        let (_, bytes) = self.parts.remove(upload)?;
        self.held -= bytes.len() as u64;
        Some(bytes)
    }

    /// `op` with the content its upload names put back (`None`: a part, kept here until its
    /// request comes). `remote`: a journal request must bring its pre-image.
    fn put_back(&mut self, mut op: RecordOp, remote: bool) -> Result<Option<RecordOp>, ToolError> {
        match &mut op {
            RecordOp::PreImagePart {
                upload, seq, data, ..
            } => {
                self.add(upload, *seq, data)?;
                return Ok(None);
            }
            RecordOp::JournalBegin { pre: Some(pre), .. } => {
                if let Some(upload) = &pre.upload {
                    pre.received = self.take(upload);
                }
            }
            // Never read this disk for a remote runner's file.
            RecordOp::JournalBegin {
                pre: None, path, ..
            } if remote => {
                return Err(ToolError::Unavailable(format!(
                    "the runner sent no previous content of {path} to journal, so nothing was written; the runner is older than this server: install the same toolyard release on both sides"
                )));
            }
            RecordOp::JournalCommand {
                entries, upload, ..
            } => {
                let content = match upload.take() {
                    Some(upload) => self.take(&upload).ok_or_else(|| {
                        ToolError::InvalidArguments(format!(
                            "the runner named upload {upload} for a command's changes, which it never sent whole; nothing was journaled"
                        ))
                    })?,
                    None => Vec::new(),
                };
                let total: u64 = entries.iter().map(|e| e.len).sum();
                if total != content.len() as u64 {
                    return Err(ToolError::InvalidArguments(format!(
                        "a command's previous contents are {} bytes, its entries name {total}; nothing was journaled",
                        content.len()
                    )));
                }
                let mut at = 0usize;
                for e in entries.iter_mut() {
                    // The lengths sum to the content's (checked above), so this stays in bounds.
                    let end = at + usize::try_from(e.len).unwrap_or(0);
                    e.entry.old_content = content.get(at..end).unwrap_or_default().to_vec();
                    at = end;
                }
            }
            _ => {}
        }
        Ok(Some(op))
    }
}

/// Whether a runner may make `op`: its session is one of this runner's jobs in flight, and a
/// journal entry it ends is one it began.
fn claim_is_owned(
    op: &RecordOp,
    pending: &PendingMap,
    begun: &std::sync::Mutex<HashSet<i64>>,
) -> Result<(), ToolError> {
    let Some(session) = op.session() else {
        let RecordOp::JournalEnd { change, .. } = op else {
            return Err(ToolError::Io(
                "internal: a records request of no session".into(),
            ));
        };
        let owned = begun.lock().map(|mut b| b.remove(change)).unwrap_or(false);
        return if owned {
            Ok(())
        } else {
            Err(ToolError::Blocked {
                rule: "runner records".into(),
                reason: format!("change {change} was not begun by this runner"),
            })
        };
    };
    let ok = pending
        .lock()
        .map(|p| p.values().any(|job| job.session == session))
        .unwrap_or(false);
    if ok {
        Ok(())
    } else {
        Err(ToolError::Blocked {
            rule: "runner records".into(),
            reason: format!("this runner has no call of session {session} in flight"),
        })
    }
}

/// Carry out a runner's records request with the server's own records, once the parts it sent
/// ahead are put back into the request that names them. `remote`: the runner's workspace is
/// not on this disk, so a journal request must bring its pre-image.
async fn apply(
    records: &dyn Records,
    op: RecordOp,
    remote: bool,
    uploads: &std::sync::Mutex<Uploads>,
) -> Reply {
    let taken = uploads
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .put_back(op, remote);
    match taken {
        Ok(Some(op)) => records.apply(op).await,
        Ok(None) => Reply::Ok(None),
        Err(e) => Reply::Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending_of(session: &str) -> PendingMap {
        let (done, _rx) = oneshot::channel();
        let map = HashMap::from([(
            "job-1".to_string(),
            Pending {
                done,
                progress: Arc::new(|_| {}),
                session: session.into(),
                mutating: true,
            },
        )]);
        Arc::new(std::sync::Mutex::new(map))
    }

    fn write(session: &str) -> RecordOp {
        RecordOp::RecordWrite {
            session: session.into(),
            path: "a.txt".into(),
            hash: "h".into(),
        }
    }

    #[test]
    fn a_runner_may_claim_only_its_own_sessions_and_journal_entries() {
        let pending = pending_of("alice");
        let begun = std::sync::Mutex::new(HashSet::from([7]));
        assert!(claim_is_owned(&write("alice"), &pending, &begun).is_ok());
        let e = claim_is_owned(&write("bob"), &pending, &begun).unwrap_err();
        assert!(e.to_string().contains("session bob"), "{e}");
        let end = |change| RecordOp::JournalEnd { change, done: true };
        assert!(claim_is_owned(&end(8), &pending, &begun).is_err());
        assert!(claim_is_owned(&end(7), &pending, &begun).is_ok());
        assert!(
            claim_is_owned(&end(7), &pending, &begun).is_err(),
            "an entry is ended once"
        );
        let idle: PendingMap = Arc::default();
        assert!(claim_is_owned(&write("alice"), &idle, &begun).is_err());
    }

    #[test]
    fn a_version_mismatch_names_both_versions_and_what_to_upgrade() {
        let old = r#"{"type":"ready","lane":"net","pid":1,"sandbox":"x"}"#;
        let e = ready_of(Some(old), Lane::Net, "the [remote] command `ssh`")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("version 1, this server version 2")
                && e.contains("upgrade the toolyard that the [remote] command `ssh` starts"),
            "{e}"
        );
        let newer = r#"{"type":"ready","proto":9,"lane":"net","pid":1,"sandbox":"x"}"#;
        let e = ready_of(Some(newer), Lane::Net, "x")
            .unwrap_err()
            .to_string();
        assert!(e.contains("upgrade this toolyard server"), "{e}");
        let ok =
            r#"{"type":"ready","proto":2,"max_frame":1000,"lane":"net","pid":7,"sandbox":"x"}"#;
        assert_eq!(
            ready_of(Some(ok), Lane::Net, "x").unwrap(),
            (7, 1000, "x".to_string())
        );
    }

    #[test]
    fn a_runner_s_uploads_come_in_order_within_bounds_and_leave_when_taken() {
        use base64::Engine;
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let mut u = Uploads::default();
        u.add("a", 0, &b64(b"one ")).unwrap();
        u.add("a", 1, &b64(b"two")).unwrap();
        assert_eq!(u.held, 7);
        // Out of order: refused, and the upload is dropped whole.
        let e = u.add("b", 1, &b64(b"x")).unwrap_err().to_string();
        assert!(e.contains("part 1 of upload b came, 0 was expected"), "{e}");
        u.add("c", 0, &b64(b"c")).unwrap();
        assert!(u.add("c", 5, &b64(b"c")).is_err());
        assert!(u.take("c").is_none(), "a refused upload is gone");
        assert!(u.add("d", 0, "not base64!").is_err());
        assert_eq!(u.take("a").as_deref(), Some(&b"one two"[..]));
        assert_eq!(u.held, 0, "taken uploads free what they held");
        assert!(u.take("a").is_none());
        // Past the per-link bound: refused without holding it.
        u.held = MAX_UPLOADING;
        let e = u.add("e", 0, &b64(b"x")).unwrap_err().to_string();
        assert!(e.contains("uploads in flight are over"), "{e}");
    }
}
