//! The router: one runner per lane (or per session and lane, when the link's template names
//! `{session}`), reached through a [`RunnerLink`], started on first use, restarted when it
//! dies. Calls are matched to results by job id; calls in flight when a link dies (EOF, a
//! killed process, missed heartbeats) get a clear error at once, never a hang and never a
//! silent retry.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{Mutex, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use toolyard_core::{Lane, ProgressSink, ToolError, ToolResult};
use toolyard_records::Records;
use toolyard_runner::protocol::{Job, ToRunner};

mod conn;
mod records;

pub use crate::link::RunnerSpawn;
use crate::link::{RunnerLink, session_token};
use conn::link_died;

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
}

fn take(pending: &PendingMap, id: &str) -> Option<Pending> {
    pending.lock().ok().and_then(|mut p| p.remove(id))
}
