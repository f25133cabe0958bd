//! The server's side of the internal jobs (see [`toolyard_runner::protocol`]) for a `[remote]`
//! link: undo's reads and restores, recovery of pending journal entries when a runner starts, spill
//! reads, and bringing a workspace in and out. The journal stays here; the files stay there.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use toolyard_core::{Lane, ToolError, ToolResult};
use toolyard_records::{Change, ChangeId};
use toolyard_records::{FileState, LocalRecords, RemoteFiles};
use toolyard_runner::protocol::{Chunk, InternalOp, Job, PART_BYTES, PreImageWire, Restore};

use crate::link::session_token;
use crate::router::{Key, Router, RunnerConn};

/// The time limit of the internal jobs that touch one file.
const FILE_JOB: Duration = Duration::from_secs(60);

/// An internal job for `session`.
pub(crate) fn job(session: &str, op: InternalOp, limit: Duration) -> Job {
    Job::internal(session, op).within(
        limit,
        crate::execute::millis(limit),
        toolyard_core::DEFAULT_MAX_OUTPUT_BYTES,
    )
}

/// An internal job's answer: its data, or the error it carries.
pub(crate) fn outcome(r: ToolResult) -> Result<Value, ToolError> {
    if r.success {
        return Ok(r.data.unwrap_or(Value::Null));
    }
    if let Some(e) = r
        .data
        .as_ref()
        .and_then(|d| d.get("internal_error"))
        .and_then(|e| serde_json::from_value::<ToolError>(e.clone()).ok())
    {
        return Err(e);
    }
    // The router's own errors (a dead link, a time limit) carry only their text.
    let text = r.error.unwrap_or(r.output);
    Err(match r.error_kind.as_deref() {
        Some("cancelled") => ToolError::Cancelled,
        Some("unavailable") => ToolError::Unavailable(
            text.strip_prefix("unavailable: ")
                .unwrap_or(&text)
                .to_string(),
        ),
        _ => ToolError::Io(text),
    })
}

/// The runner's workspace as [`RemoteFiles`], over the router (held weakly: the router's
/// records hold this).
pub(crate) struct RouterFiles {
    pub(crate) router: Weak<Router>,
    /// The lane whose runner does the file jobs (the file tools' lane).
    pub(crate) lane: Lane,
}

impl RouterFiles {
    async fn run(&self, session: &str, op: InternalOp, mutating: bool) -> Result<Value, ToolError> {
        let router = self
            .router
            .upgrade()
            .ok_or_else(|| ToolError::Unavailable("the server is shutting down".into()))?;
        let r = router
            .submit_with(
                self.lane,
                job(session, op, FILE_JOB),
                CancellationToken::new(),
                Arc::new(|_| {}),
                mutating,
            )
            .await;
        outcome(r)
    }
}

#[async_trait]
impl RemoteFiles for RouterFiles {
    async fn read_state(&self, session: &str, path: &str) -> Result<FileState, ToolError> {
        let op = InternalOp::ReadState {
            path: path.to_string(),
            max: PART_BYTES,
        };
        let data = self.run(session, op, false).await?;
        let pre: PreImageWire = serde_json::from_value(data).map_err(|e| {
            ToolError::Io(format!("the runner's state of {path} is unreadable: {e}"))
        })?;
        let Some(size) = pre.size else {
            let content = pre.decode(path)?;
            return Ok(FileState {
                content,
                mode: pre.mode,
                state: pre.state,
            });
        };
        // Larger than one line: read it in parts, and check the whole against the hash the
        // runner read it with, so a file that changed meanwhile is never taken for either.
        let size = size.min(toolyard_records::MAX_REMOTE_FILE_BYTES);
        let mut bytes = Vec::with_capacity(size as usize);
        while (bytes.len() as u64) < size {
            let op = InternalOp::ReadPart {
                path: path.to_string(),
                offset: bytes.len() as u64,
            };
            let part = self.run(session, op, false).await?;
            let data = part.get("data").and_then(Value::as_str).unwrap_or_default();
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(data)
                .map_err(|e| ToolError::Io(format!("a part of {path} is not base64: {e}")))?;
            if decoded.is_empty() {
                break;
            }
            bytes.extend_from_slice(&decoded);
        }
        pre.check(path, &bytes).map_err(|_| {
            ToolError::Conflict(format!(
                "{path} changed on the runner while it was read; nothing was written, retry"
            ))
        })?;
        Ok(FileState {
            content: Some(bytes),
            mode: pre.mode,
            state: None,
        })
    }

    async fn restore(
        &self,
        session: &str,
        change: i64,
        path: &str,
        expect: Option<&str>,
        content: Option<Vec<u8>>,
        mode: Option<u32>,
    ) -> Result<Option<String>, ToolError> {
        self.restore_job(session, change, path, expect, content, mode, None)
            .await
    }

    async fn restore_state(
        &self,
        session: &str,
        change: i64,
        path: &str,
        expect: Option<&str>,
        target: Option<&str>,
        content: Vec<u8>,
        mode: Option<u32>,
    ) -> Result<(), ToolError> {
        self.restore_job(
            session,
            change,
            path,
            expect,
            Some(content),
            mode,
            Some(target),
        )
        .await
        .map(drop)
    }
}

impl RouterFiles {
    /// The `restore` job: a compare-and-swap write of `path` on the runner; with `target`, of
    /// any kind of entry (see [`RemoteFiles::restore_state`]).
    #[allow(clippy::too_many_arguments)]
    async fn restore_job(
        &self,
        session: &str,
        change: i64,
        path: &str,
        expect: Option<&str>,
        content: Option<Vec<u8>>,
        mode: Option<u32>,
        target: Option<Option<&str>>,
    ) -> Result<Option<String>, ToolError> {
        let b64 = base64::engine::general_purpose::STANDARD;
        // Content larger than one line goes ahead in parts, which the restore then names.
        let upload = match &content {
            Some(c) if c.len() > PART_BYTES => {
                let id = format!("r{}-{change}", std::process::id());
                for (seq, part) in c.chunks(PART_BYTES).enumerate() {
                    let op = InternalOp::Upload(Chunk {
                        upload: id.clone(),
                        seq: seq as u64,
                        data: b64.encode(part),
                        last: false,
                    });
                    self.run(session, op, false).await?;
                }
                Some(id)
            }
            _ => None,
        };
        let op = InternalOp::Restore(Restore {
            path: path.to_string(),
            expect_hash: expect.map(str::to_string),
            content: if upload.is_some() {
                None
            } else {
                content.map(|c| b64.encode(c))
            },
            upload,
            mode,
            target: target.flatten().map(str::to_string),
            target_absent: target.is_some_and(|t| t.is_none()),
        });
        match self.run(session, op, true).await {
            Ok(data) => Ok(data.get("hash").and_then(Value::as_str).map(str::to_string)),
            Err(ToolError::Conflict(why)) => Err(ToolError::Conflict(why)),
            Err(e) => {
                // The write may or may not have landed: the next runner settles the entry.
                if let Some(router) = self.router.upgrade()
                    && let Ok(mut o) = router.orphans.lock()
                {
                    o.entry(router.token(session)).or_default().insert(change);
                }
                Err(ToolError::Unavailable(format!(
                    "the undo of {path} did not complete ({e}); it may or may not have landed: the journal settles it when the runner starts again, then check with read_file"
                )))
            }
        }
    }
}

/// Settles the journal entries left pending on a remote runner's workspace, when a runner
/// starts: those a dead process left (taken once, when no other process has the journal
/// open, as local recovery does) and those a dead link of this process left.
pub(crate) struct Recovery {
    records: Arc<LocalRecords>,
    /// The dead processes' entries not settled yet; `None` until first looked at.
    adopted: Mutex<Option<Vec<Change>>>,
}

#[async_trait::async_trait]
impl crate::router::Settle for Recovery {
    async fn settle(&self, router: &Router, conn: &RunnerConn, key: &Key) {
        self.settle_pending(router, conn, key).await;
    }
}

impl Recovery {
    pub(crate) fn new(records: Arc<LocalRecords>) -> Self {
        Self {
            records,
            adopted: Mutex::new(None),
        }
    }

    /// Settle, through the fresh runner `conn` of `key`, every pending entry of its sessions.
    /// A failure leaves them pending for the next start, and never fails the call.
    async fn settle_pending(&self, router: &Router, conn: &RunnerConn, key: &Key) {
        let journal = &self.records.journal;
        let mine = |c: &Change| key.0.is_none() || key.0 == Some(session_token(&c.session));
        let mut todo: Vec<Change> = Vec::new();
        {
            let mut adopted = self.adopted.lock().unwrap_or_else(|p| p.into_inner());
            if adopted.is_none() {
                *adopted = Some(journal.adopt_pending().unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "cannot look for pending journal entries");
                    Vec::new()
                }));
            }
            if let Some(list) = adopted.as_mut() {
                let (take, keep): (Vec<Change>, Vec<Change>) =
                    std::mem::take(list).into_iter().partition(|c| mine(c));
                *list = keep;
                todo.extend(take);
            }
        }
        let orphans: HashSet<i64> = router
            .orphans
            .lock()
            .map(|mut o| o.remove(&key.0).unwrap_or_default())
            .unwrap_or_default();
        for id in orphans {
            if let Ok(c) = journal.get(ChangeId(id))
                && !todo.iter().any(|t| t.id == c.id)
            {
                todo.push(c);
            }
        }
        todo.retain(|c| c.status == toolyard_records::ChangeStatus::Pending);
        if todo.is_empty() {
            return;
        }
        let paths: Vec<String> = todo.iter().map(|c| c.path.clone()).collect();
        let session = todo[0].session.clone();
        let r = router
            .submit_on(
                conn,
                key.1,
                job(
                    &session,
                    InternalOp::Hashes { paths, clean: true },
                    FILE_JOB,
                ),
                CancellationToken::new(),
                Arc::new(|_| {}),
                false,
            )
            .await;
        let rows = match outcome(r) {
            Ok(data) => data
                .get("hashes")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            Err(e) => {
                tracing::warn!(error = %e, "cannot settle pending journal entries; the next runner tries again");
                if let Ok(mut o) = router.orphans.lock() {
                    o.entry(key.0.clone())
                        .or_default()
                        .extend(todo.iter().map(|c| c.id.0));
                }
                return;
            }
        };
        for (change, row) in todo.iter().zip(rows) {
            // An unreadable file settles as not written, as local recovery does.
            let current = match row.get("error") {
                Some(e) => {
                    tracing::warn!(change = %change.id, path = %change.path, error = %e, "cannot read the file of a pending change on the runner; marking it failed");
                    Some("(unreadable)".to_string())
                }
                None => row.get("hash").and_then(Value::as_str).map(str::to_string),
            };
            if let Err(e) = journal.settle_from_hash(change.id, current.as_deref()) {
                tracing::warn!(change = %change.id, error = %e, "cannot settle a pending change");
            }
        }
    }
}

/// The chunk size of an archive sent to a runner: its base64 form stays far under the frame
/// limit.
pub(crate) const UPLOAD_CHUNK: usize = 4 << 20;

/// Run the internal job `op` for `session` in `lane`, bounded by `limit`.
pub(crate) async fn internal(
    router: &Router,
    session: &str,
    lane: Lane,
    op: InternalOp,
    limit: Duration,
) -> Result<Value, ToolError> {
    let r = router
        .submit_with(
            lane,
            job(session, op, limit),
            CancellationToken::new(),
            Arc::new(|_| {}),
            true,
        )
        .await;
    outcome(r)
}

/// The answer of `export`.
#[derive(Debug, Clone)]
pub struct Export {
    /// The patch (`git apply` applies it to a checkout of `base`).
    pub patch: Vec<u8>,
    /// What it is against: the revision given, the one a git hydrate checked out, or `HEAD`.
    pub base: String,
}

impl crate::Dispatcher {
    /// The router, when its runners are remote; else the error saying these jobs need one.
    fn remote_router(&self, what: &str) -> Result<&Router, ToolError> {
        match self.router() {
            Some(r) if r.is_remote() => Ok(r),
            _ => Err(ToolError::Unavailable(format!(
                "{what} works on a remote runner's workspace: the catalog has no [remote] command (or this server runs --inline)"
            ))),
        }
    }

    /// The lane of the file tools (where the internal file jobs run).
    fn file_lane(&self) -> Lane {
        self.config()
            .catalog
            .tool("edit_file")
            .map_or(Lane::NoNet, |s| s.lane)
    }

    /// Bring a workspace in on `session`'s remote runner: clone `url` (a URL or a path where
    /// the runner runs) into its empty workspace, or fetch it into its git checkout, and check
    /// out `rev` detached, in the net lane. Answers the commit checked out.
    pub async fn hydrate_git(
        &self,
        session: &str,
        url: &str,
        rev: &str,
        limit: Duration,
    ) -> Result<String, ToolError> {
        let router = self.remote_router("workspace import")?;
        let op = InternalOp::HydrateGit {
            url: url.to_string(),
            rev: rev.to_string(),
        };
        let data = internal(router, session, Lane::Net, op, limit).await?;
        Ok(data
            .get("head")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string())
    }

    /// Bring a workspace in on `session`'s remote runner from a tar archive read from
    /// `archive`, sent in chunks within the frame limit and unpacked over its workspace.
    /// Answers how many entries it held.
    pub async fn hydrate_archive(
        &self,
        session: &str,
        archive: &mut (dyn std::io::Read + Send),
        limit: Duration,
    ) -> Result<u64, ToolError> {
        let router = self.remote_router("workspace import")?;
        let lane = self.file_lane();
        let b64 = base64::engine::general_purpose::STANDARD;
        let upload = format!("u{}-{}", std::process::id(), fastrand::u64(..));
        let mut buf = vec![0u8; UPLOAD_CHUNK];
        let mut next = read_chunk(archive, &mut buf)?;
        let mut seq = 0u64;
        loop {
            let chunk = b64.encode(&buf[..next]);
            // Read ahead: the chunk is the last when nothing follows it.
            let mut ahead = vec![0u8; UPLOAD_CHUNK];
            let after = if next == UPLOAD_CHUNK {
                read_chunk(archive, &mut ahead)?
            } else {
                0
            };
            let last = after == 0;
            let op = InternalOp::HydrateChunk(Chunk {
                upload: upload.clone(),
                seq,
                data: chunk,
                last,
            });
            let data = internal(router, session, lane, op, limit).await?;
            if last {
                return Ok(data.get("files").and_then(Value::as_u64).unwrap_or(0));
            }
            buf = ahead;
            next = after;
            seq += 1;
        }
    }

    /// Bring the directory `dir` (on this machine) in on `session`'s remote runner, as a tar
    /// archive (symbolic links kept as links).
    pub async fn hydrate_dir(
        &self,
        session: &str,
        dir: &std::path::Path,
        limit: Duration,
    ) -> Result<u64, ToolError> {
        let io = |e: std::io::Error| ToolError::Io(format!("archiving {}: {e}", dir.display()));
        let mut file = tempfile::tempfile().map_err(io)?;
        {
            let mut tar = tar::Builder::new(&mut file);
            tar.follow_symlinks(false);
            tar.append_dir_all(".", dir).map_err(io)?;
            tar.finish().map_err(io)?;
        }
        use std::io::Seek;
        file.seek(std::io::SeekFrom::Start(0)).map_err(io)?;
        self.hydrate_archive(session, &mut file, limit).await
    }

    /// The changes in `session`'s remote runner's workspace as a patch against `base` (else
    /// the revision a git import checked out, else `HEAD`): `git diff --binary`, untracked
    /// files included.
    pub async fn export(
        &self,
        session: &str,
        base: Option<&str>,
        limit: Duration,
    ) -> Result<Export, ToolError> {
        let router = self.remote_router("workspace export")?;
        let op = InternalOp::Export {
            base: base.map(str::to_string),
        };
        let data = internal(router, session, self.file_lane(), op, limit).await?;
        if data.get("git") == Some(&Value::Bool(false)) {
            return self.export_journaled(session).await;
        }
        let patch = data
            .get("patch")
            .and_then(Value::as_str)
            .map(|p| base64::engine::general_purpose::STANDARD.decode(p))
            .transpose()
            .map_err(|e| ToolError::Io(format!("the runner's patch is not base64: {e}")))?
            .unwrap_or_default();
        Ok(Export {
            patch,
            base: data
                .get("base")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        })
    }

    /// The session's changes in a workspace that is not a git checkout: a unified diff of each
    /// path it changed, from the journal's content before its first change to the runner's
    /// content now.
    async fn export_journaled(&self, session: &str) -> Result<Export, ToolError> {
        let local = self
            .env()
            .local
            .clone()
            .ok_or_else(|| ToolError::Unavailable("this process keeps no journal".into()))?;
        let remote = local
            .remote()
            .cloned()
            .ok_or_else(|| ToolError::Unavailable("no remote runner".into()))?;
        let mut changes = local.journal.list(&toolyard_records::ChangeFilter {
            session: Some(session.to_string()),
            status: Some(toolyard_records::ChangeStatus::Done),
            ..Default::default()
        })?;
        changes.reverse();
        let mut first: Vec<Change> = Vec::new();
        for c in changes {
            if !first.iter().any(|f| f.path == c.path) {
                first.push(c);
            }
        }
        first.sort_by(|a, b| a.path.cmp(&b.path));
        let mut patch = Vec::new();
        for c in first {
            let before = match local.journal.old_content(c.id)? {
                Some(mut r) => {
                    let mut b = Vec::new();
                    std::io::Read::read_to_end(&mut r, &mut b)
                        .map_err(|e| ToolError::Io(format!("change {}: {e}", c.id)))?;
                    Some(b)
                }
                None => None,
            };
            let now = remote.read_state(session, &c.path).await?;
            patch.extend(unified(&c.path, before.as_deref(), c.old_mode, &now));
        }
        Ok(Export {
            patch,
            base: "the journal's content before each file's first change".into(),
        })
    }

    /// Bytes `offset..offset+len` (at most 8 MiB) of the saved command output `name` (the file
    /// name in `outputs/`) on `session`'s remote runner, and whether they reach its end.
    pub async fn spill_read(
        &self,
        session: &str,
        name: &str,
        offset: u64,
        len: u64,
    ) -> Result<(Vec<u8>, bool), ToolError> {
        let router = self.remote_router("reading a saved output")?;
        let op = InternalOp::SpillRead {
            name: name.to_string(),
            offset,
            len,
        };
        let data = internal(router, session, self.file_lane(), op, FILE_JOB).await?;
        let bytes = data
            .get("content")
            .and_then(Value::as_str)
            .map(|p| base64::engine::general_purpose::STANDARD.decode(p))
            .transpose()
            .map_err(|e| ToolError::Io(format!("the runner's output is not base64: {e}")))?
            .unwrap_or_default();
        let eof = data.get("eof").and_then(Value::as_bool).unwrap_or(true);
        Ok((bytes, eof))
    }

    /// What each lane's remote runner enforces, as its `ready` said (the runner is started for
    /// `session` if none runs); empty without a remote link.
    pub async fn remote_sandbox_reports(
        &self,
        session: &str,
    ) -> Vec<(Lane, Result<String, ToolError>)> {
        let Some(router) = self.router().filter(|r| r.is_remote()) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for lane in [Lane::NoNet, Lane::Net, Lane::Heavy] {
            out.push((lane, router.sandbox_report(session, lane).await));
        }
        out
    }
}

/// A `git apply`-able diff of `path` from `before` (`None`: absent) to `now`.
fn unified(path: &str, before: Option<&[u8]>, old_mode: Option<u32>, now: &FileState) -> Vec<u8> {
    let after = now.content.as_deref();
    if before == after {
        return Vec::new();
    }
    let mode = |m: Option<u32>| {
        if m.unwrap_or(0o644) & 0o111 != 0 {
            "100755"
        } else {
            "100644"
        }
    };
    let mut out = format!("diff --git a/{path} b/{path}\n");
    match (before, after) {
        (None, _) => out.push_str(&format!("new file mode {}\n", mode(now.mode))),
        (_, None) => out.push_str(&format!("deleted file mode {}\n", mode(old_mode))),
        _ if mode(old_mode) != mode(now.mode) => out.push_str(&format!(
            "old mode {}\nnew mode {}\n",
            mode(old_mode),
            mode(now.mode)
        )),
        _ => {}
    }
    let text = |b: Option<&[u8]>| match b {
        None => Some(String::new()),
        Some(b) if b.contains(&0) => None,
        Some(b) => String::from_utf8(b.to_vec()).ok(),
    };
    let (old_name, new_name) = (
        if before.is_some() {
            format!("a/{path}")
        } else {
            "/dev/null".into()
        },
        if after.is_some() {
            format!("b/{path}")
        } else {
            "/dev/null".into()
        },
    );
    match (text(before), text(after)) {
        (Some(old), Some(new)) => {
            let diff = similar::TextDiff::from_lines(&old, &new);
            out.push_str(
                &diff
                    .unified_diff()
                    .context_radius(3)
                    .header(&old_name, &new_name)
                    .to_string(),
            );
        }
        _ => out.push_str(&format!("Binary files {old_name} and {new_name} differ\n")),
    }
    out.into_bytes()
}

/// Fill `buf` from `r` as far as it goes; the bytes read.
fn read_chunk(r: &mut (dyn std::io::Read + Send), buf: &mut [u8]) -> Result<usize, ToolError> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ToolError::Io(format!("reading the archive: {e}"))),
        }
    }
    Ok(n)
}
