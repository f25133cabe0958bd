//! The router: one runner process per lane, started on first use, restarted when it dies.
//! Calls are matched to results by job id; calls in flight when a runner dies get a clear
//! error at once, never a hang.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{Mutex, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use toolyard_core::{Lane, ProgressSink, ToolError, ToolResult};
use toolyard_tools::records::Records;
use toolyard_workspace::RelPath;

use crate::protocol::{FromRunner, Job, LineReader, RecordOp, Reply, ToRunner};

/// How long a runner may take to sandbox itself and say it is ready.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// Where runners come from.
#[derive(Debug, Clone)]
pub struct RunnerSpawn {
    /// The `toolyard` executable (it has the `runner` subcommand).
    pub exe: PathBuf,
    /// The workspace root.
    pub workspace: PathBuf,
    /// The catalog file the runners load, if not the built-in one.
    pub catalog: Option<PathBuf>,
    /// The state directory, when not the workspace's default one.
    pub state_dir: Option<PathBuf>,
}

struct Pending {
    done: oneshot::Sender<ToolResult>,
    progress: ProgressSink,
    /// The job's session: the only one its runner may ask records for.
    session: String,
}

/// Background process ids (issued by a runner, or lost with one).
type IdSet = Arc<std::sync::Mutex<HashSet<String>>>;

type PendingMap = Arc<std::sync::Mutex<HashMap<String, Pending>>>;

/// One live runner process.
struct RunnerConn {
    tx: mpsc::UnboundedSender<ToRunner>,
    pending: PendingMap,
    alive: Arc<AtomicBool>,
    pid: u32,
}

/// Sends calls to the runner of their lane.
pub struct Router {
    spawn: RunnerSpawn,
    records: Arc<dyn Records>,
    runners: Mutex<HashMap<Lane, Arc<RunnerConn>>>,
    next_job: AtomicU64,
    /// Background process ids whose runner died (and killed them).
    lost: IdSet,
}

impl Router {
    /// A router that starts runners as `spawn` says and keeps their records in `records`.
    pub fn new(spawn: RunnerSpawn, records: Arc<dyn Records>) -> Self {
        Self {
            spawn,
            records,
            runners: Mutex::new(HashMap::new()),
            next_job: AtomicU64::new(1),
            lost: Arc::default(),
        }
    }

    /// Whether background process `id` was lost with a runner that died.
    pub fn is_lost(&self, id: &str) -> bool {
        self.lost.lock().map(|l| l.contains(id)).unwrap_or(false)
    }

    /// Count `ids` as lost (a session host that held them died): calls naming them are told so,
    /// and new processes are numbered past them.
    pub fn mark_lost(&self, ids: impl IntoIterator<Item = String>) {
        if let Ok(mut lost) = self.lost.lock() {
            lost.extend(ids);
        }
    }

    /// The lanes whose runner is running.
    pub async fn live_lanes(&self) -> Vec<Lane> {
        let runners = self.runners.lock().await;
        let mut v: Vec<Lane> = runners
            .iter()
            .filter(|(_, r)| r.alive.load(Ordering::SeqCst))
            .map(|(l, _)| *l)
            .collect();
        v.sort();
        v
    }

    /// Tell every runner that `session` ended, so they kill its background processes.
    pub async fn end_session(&self, session: &str) {
        let runners = self.runners.lock().await;
        for r in runners.values() {
            let _ = r.tx.send(ToRunner::EndSession {
                session: session.to_string(),
            });
        }
    }

    /// The first process number for a new runner of `lane`: past every id handed out before.
    fn process_base(&self, lane: Lane) -> u64 {
        let prefix = format!("{}-", lane.as_str());
        self.lost
            .lock()
            .map(|l| {
                l.iter()
                    .filter_map(|id| id.strip_prefix(&prefix)?.parse::<u64>().ok())
                    .max()
                    .unwrap_or(0)
            })
            .unwrap_or(0)
            + 1
    }

    /// The pid of the lane's runner, if one is running (for tests and `doctor`).
    pub async fn runner_pid(&self, lane: Lane) -> Option<u32> {
        let runners = self.runners.lock().await;
        runners
            .get(&lane)
            .filter(|r| r.alive.load(Ordering::SeqCst))
            .map(|r| r.pid)
    }

    /// Run `job` (its id is assigned here) in the runner of `lane`.
    pub async fn submit(
        &self,
        lane: Lane,
        mut job: Job,
        cancel: CancellationToken,
        progress: ProgressSink,
    ) -> ToolResult {
        let conn = match self.runner(lane).await {
            Ok(c) => c,
            Err(e) => return e.into(),
        };
        job.id = self.next_job.fetch_add(1, Ordering::Relaxed).to_string();
        let id = job.id.clone();
        let bound = Duration::from_millis(job.max_timeout_ms) + Duration::from_secs(10);
        let (done, rx) = oneshot::channel();
        if let Ok(mut p) = conn.pending.lock() {
            p.insert(
                id.clone(),
                Pending {
                    done,
                    progress,
                    session: job.session.clone(),
                },
            );
        }
        // The reader may have seen the runner die before the job was registered.
        if !conn.alive.load(Ordering::SeqCst) {
            take(&conn.pending, &id);
            return died(lane).into();
        }
        if conn.tx.send(ToRunner::Job(job)).is_err() {
            take(&conn.pending, &id);
            return died(lane).into();
        }
        let mut rx = rx;
        tokio::select! {
            r = &mut rx => r.unwrap_or_else(|_| died(lane).into()),
            _ = cancel.cancelled() => {
                let _ = conn.tx.send(ToRunner::Cancel { id: id.clone() });
                // The runner kills the command's tree and answers; give it a moment.
                match tokio::time::timeout(Duration::from_secs(5), rx).await {
                    Ok(Ok(r)) => r,
                    _ => { take(&conn.pending, &id); ToolError::Cancelled.into() }
                }
            }
            _ = tokio::time::sleep(bound) => {
                let _ = conn.tx.send(ToRunner::Cancel { id: id.clone() });
                take(&conn.pending, &id);
                ToolError::Timeout { ms: bound.as_millis() as u64 }.into()
            }
        }
    }

    /// The lane's runner, started if there is none or it died.
    async fn runner(&self, lane: Lane) -> Result<Arc<RunnerConn>, ToolError> {
        let mut runners = self.runners.lock().await;
        if let Some(r) = runners
            .get(&lane)
            .filter(|r| r.alive.load(Ordering::SeqCst))
        {
            return Ok(r.clone());
        }
        let conn = Arc::new(self.start(lane).await?);
        runners.insert(lane, conn.clone());
        Ok(conn)
    }

    async fn start(&self, lane: Lane) -> Result<RunnerConn, ToolError> {
        let mut cmd = Command::new(&self.spawn.exe);
        cmd.arg("runner")
            .arg("--lane")
            .arg(lane.as_str())
            .arg("--workspace")
            .arg(&self.spawn.workspace);
        if let Some(c) = &self.spawn.catalog {
            cmd.arg("--catalog").arg(c);
        }
        if let Some(s) = &self.spawn.state_dir {
            cmd.arg("--state-dir").arg(s);
        }
        cmd.env(
            crate::process::PROCESS_BASE_ENV,
            self.process_base(lane).to_string(),
        );
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| {
            ToolError::Unavailable(format!(
                "cannot start the {lane} runner ({}): {e}",
                self.spawn.exe.display()
            ))
        })?;
        let pid = child.id().unwrap_or(0);
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| ToolError::Io("runner stdin".into()))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| ToolError::Io("runner stdout".into()))?;
        let stderr = child
            .stderr
            .take()
            .ok_or_else(|| ToolError::Io("runner stderr".into()))?;
        let stderr_tail = Arc::new(std::sync::Mutex::new(String::new()));
        tokio::spawn(forward_stderr(stderr, lane, stderr_tail.clone()));

        let mut lines = LineReader::new(BufReader::new(stdout));
        let ready = tokio::time::timeout(START_TIMEOUT, lines.next_line()).await;
        match ready {
            Ok(Some(line))
                if matches!(serde_json::from_str(&line), Ok(FromRunner::Ready { .. })) => {}
            _ => {
                let _ = child.start_kill();
                // Let stderr drain so the message says why.
                tokio::time::sleep(Duration::from_millis(100)).await;
                let why = stderr_tail
                    .lock()
                    .map(|s| s.trim().to_string())
                    .unwrap_or_default();
                return Err(ToolError::Unavailable(format!(
                    "the {lane} runner did not start: {}",
                    if why.is_empty() {
                        "no reason given".to_string()
                    } else {
                        why
                    }
                )));
            }
        }

        let (tx, rx) = mpsc::unbounded_channel();
        let pending: PendingMap = Arc::default();
        let alive = Arc::new(AtomicBool::new(true));
        let issued: IdSet = Arc::default();
        tokio::spawn(write_jobs(stdin, rx));
        tokio::spawn(read_results(
            lines,
            child,
            lane,
            pending.clone(),
            alive.clone(),
            tx.clone(),
            self.records.clone(),
            (issued.clone(), self.lost.clone()),
        ));
        Ok(RunnerConn {
            tx,
            pending,
            alive,
            pid,
        })
    }
}

fn died(lane: Lane) -> ToolError {
    ToolError::Unavailable(format!(
        "the {lane} runner stopped while running this call, so it did not complete; it restarts on the next call, so retry"
    ))
}

fn take(pending: &PendingMap, id: &str) -> Option<Pending> {
    pending.lock().ok().and_then(|mut p| p.remove(id))
}

async fn write_jobs(
    mut stdin: tokio::process::ChildStdin,
    mut rx: mpsc::UnboundedReceiver<ToRunner>,
) {
    while let Some(msg) = rx.recv().await {
        let Ok(mut line) = serde_json::to_vec(&msg) else {
            continue;
        };
        line.push(b'\n');
        if stdin.write_all(&line).await.is_err() || stdin.flush().await.is_err() {
            break;
        }
    }
}

async fn forward_stderr(
    mut stderr: tokio::process::ChildStderr,
    lane: Lane,
    tail: Arc<std::sync::Mutex<String>>,
) {
    let mut buf = vec![0u8; 8192];
    while let Ok(n) = stderr.read(&mut buf).await {
        if n == 0 {
            break;
        }
        let text = String::from_utf8_lossy(&buf[..n]);
        tracing::debug!(%lane, "runner: {}", text.trim_end());
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

#[allow(clippy::too_many_arguments)]
async fn read_results(
    mut lines: LineReader<BufReader<tokio::process::ChildStdout>>,
    mut child: Child,
    lane: Lane,
    pending: PendingMap,
    alive: Arc<AtomicBool>,
    tx: mpsc::UnboundedSender<ToRunner>,
    records: Arc<dyn Records>,
    (issued, lost): (IdSet, IdSet),
) {
    let begun: Arc<std::sync::Mutex<HashSet<i64>>> = Arc::default();
    while let Some(line) = lines.next_line().await {
        let msg: FromRunner = match serde_json::from_str(&line) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(%lane, %e, "router: malformed line from a runner");
                continue;
            }
        };
        match msg {
            FromRunner::Result { id, result } => {
                let process = result
                    .data
                    .as_ref()
                    .and_then(|d| d.get("process_id"))
                    .and_then(|v| v.as_str());
                if let (Some(pid), Ok(mut set)) = (process, issued.lock()) {
                    set.insert(pid.to_string());
                }
                if let Some(p) = take(&pending, &id) {
                    let _ = p.done.send(result);
                }
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
                // A runner's request is a claim, checked before it is carried out: it may act
                // only for the sessions of its own jobs in flight, and end only the journal
                // entries it began.
                if let Err(e) = claim_is_owned(&op, &pending, &begun) {
                    tracing::warn!(%lane, error = %e, "router: refused a runner's records request");
                    let _ = tx.send(ToRunner::Reply {
                        rid,
                        result: Reply::from_result(Err(e)),
                    });
                    continue;
                }
                let (records, tx, begun) = (records.clone(), tx.clone(), begun.clone());
                tokio::spawn(async move {
                    let is_begin = matches!(op, RecordOp::JournalBegin { .. });
                    let result = apply(records.as_ref(), op).await;
                    if let (true, Ok(Some(change))) = (is_begin, &result)
                        && let Ok(mut b) = begun.lock()
                    {
                        b.insert(*change);
                    }
                    let _ = tx.send(ToRunner::Reply {
                        rid,
                        result: Reply::from_result(result),
                    });
                });
            }
            FromRunner::Ready { .. } => {}
        }
    }
    // EOF: the runner is gone. Fail what was in flight, now.
    alive.store(false, Ordering::SeqCst);
    // Its background processes died with it (their inits die with the runner's thread).
    if let (Ok(mut from), Ok(mut to)) = (issued.lock(), lost.lock()) {
        to.extend(from.drain());
    }
    let status = tokio::time::timeout(Duration::from_secs(1), child.wait()).await;
    tracing::warn!(%lane, ?status, "a runner exited");
    let drained: Vec<Pending> = pending
        .lock()
        .map(|mut p| p.drain().map(|(_, v)| v).collect())
        .unwrap_or_default();
    for p in drained {
        let _ = p.done.send(died(lane).into());
    }
}

/// Whether a runner may make `op`: its session is one of this runner's jobs in flight, and a
/// journal entry it ends is one it began.
fn claim_is_owned(
    op: &RecordOp,
    pending: &PendingMap,
    begun: &std::sync::Mutex<HashSet<i64>>,
) -> Result<(), ToolError> {
    let session = match op {
        RecordOp::RecordRead { session, .. }
        | RecordOp::CheckWrite { session, .. }
        | RecordOp::RecordWrite { session, .. }
        | RecordOp::JournalBegin { session, .. } => session,
        RecordOp::JournalEnd { change, .. } => {
            let owned = begun.lock().map(|mut b| b.remove(change)).unwrap_or(false);
            return if owned {
                Ok(())
            } else {
                Err(ToolError::Blocked {
                    rule: "runner records".into(),
                    reason: format!("change {change} was not begun by this runner"),
                })
            };
        }
    };
    let ok = pending
        .lock()
        .map(|p| p.values().any(|job| &job.session == session))
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

/// Carry out a runner's records request with the server's own records.
async fn apply(records: &dyn Records, op: RecordOp) -> Result<Option<i64>, ToolError> {
    let rel = |p: &str| -> Result<RelPath, ToolError> {
        // Runners send paths they resolved beneath the root; refuse anything that is not one.
        let bad = p.starts_with('/')
            || (p != "." && p.split('/').any(|c| c.is_empty() || c == "." || c == ".."));
        if bad {
            return Err(ToolError::outside(p, "not a workspace-relative path"));
        }
        Ok(RelPath::from_normalized(p))
    };
    match op {
        RecordOp::RecordRead {
            session,
            path,
            hash,
        } => records
            .record_read(&session, &rel(&path)?, &hash)
            .await
            .map(|_| None),
        RecordOp::CheckWrite {
            session,
            path,
            current,
        } => records
            .check_write(&session, &rel(&path)?, &current)
            .await
            .map(|_| None),
        RecordOp::RecordWrite {
            session,
            path,
            hash,
        } => records
            .record_write(&session, &rel(&path)?, &hash)
            .await
            .map(|_| None),
        RecordOp::JournalBegin {
            session,
            call_id,
            tool,
            path,
            new_hash,
        } => records
            .journal_begin(&session, &call_id, &tool, &rel(&path)?, &new_hash)
            .await
            .map(Some),
        RecordOp::JournalEnd { change, done } => {
            records.journal_end(change, done).await.map(|_| None)
        }
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
}
