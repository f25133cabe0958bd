//! A runner's link once it is open: the handshake, the writer of jobs, and the reader of
//! results, progress, pings and records requests, which fails every call in flight when the
//! link dies.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::process::Child;
use tokio::sync::mpsc;
use tokio::time::Instant;
use toolyard_core::{Lane, ToolError};
use toolyard_records::Records;
use toolyard_runner::protocol::{
    FromRunner, Hello, LineReader, MAX_LINE_BYTES, MISSED_PINGS, PROTOCOL_VERSION, RecordOp, Reply,
    ToRunner, encode,
};

use super::records::{Uploads, apply, claim_is_owned};
use super::{IdSet, Key, LostIds, Orphans, Pending, PendingMap, Router, RunnerConn, take};

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

impl Router {
    pub(super) async fn start(&self, key: &Key) -> Result<RunnerConn, ToolError> {
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
pub(super) fn ready_of(
    line: Option<&str>,
    lane: Lane,
    link: &str,
) -> Result<(u32, usize, String), ToolError> {
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
pub(super) fn link_died(lane: Lane, why: &str, mutating: bool) -> ToolError {
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
    bury(
        link,
        why,
        &pending,
        &alive,
        &begun,
        (issued, lost, token, orphans),
    )
    .await;
}

/// The link is dead: fail what was in flight, now, and make sure the runner is gone; its
/// background process ids are lost and the journal entries it began are left to settle.
async fn bury(
    mut link: Link,
    why: String,
    pending: &PendingMap,
    alive: &AtomicBool,
    begun: &std::sync::Mutex<HashSet<i64>>,
    (issued, lost, token, orphans): (IdSet, LostIds, Option<String>, Orphans),
) {
    let lane = link.lane;
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
