//! Session records the file tools keep: the read ledger and the change journal.
//!
//! The tools see them through [`Records`], so the same tool code runs in the server process
//! (where [`LocalRecords`] writes the state database directly) and in a sandboxed runner
//! (where the runner sends the same [`RecordOp`] to the server over the job protocol, because
//! a runner may not write Toolyard's state directory).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, mpsc};

use async_trait::async_trait;
use toolyard_core::ToolError;
use toolyard_workspace::{RelPath, Workspace};

use crate::db::lock;
use crate::journal::{
    ChangeFilter, ChangeId, ChangeStatus, CommandJournaled, CommandRecord, Journal, NewChange,
    PreImage, UndoOutcome,
};
use crate::ledger::{Ledger, LedgerUpdate, Via};
use crate::op::{CommandEntryWire, PreImageWire, RecordOp, Reply, relative};
use crate::remote::RemoteFiles;
use crate::undo::{Disk, Files, Link, undo_group};

/// What the file tools record per session: reads, writes, and journal entries. The one
/// required method is [`Records::apply`]; the others build a [`RecordOp`] and apply it.
#[async_trait]
pub trait Records: Send + Sync {
    /// Carry out one record operation.
    async fn apply(&self, op: RecordOp) -> Reply;

    /// The session read `path` and saw content `hash`.
    async fn record_read(
        &self,
        session: &str,
        path: &RelPath,
        hash: &str,
    ) -> Result<(), ToolError> {
        self.apply(RecordOp::RecordRead {
            session: session.into(),
            path: path.as_str().into(),
            hash: hash.into(),
        })
        .await
        .into_result()
        .map(drop)
    }
    /// May the session overwrite `path`, whose content now hashes to `current`?
    async fn check_write(
        &self,
        session: &str,
        path: &RelPath,
        current: &str,
    ) -> Result<(), ToolError> {
        self.apply(RecordOp::CheckWrite {
            session: session.into(),
            path: path.as_str().into(),
            current: current.into(),
        })
        .await
        .into_result()
        .map(drop)
    }
    /// The session wrote `path`; its view is now `hash`.
    async fn record_write(
        &self,
        session: &str,
        path: &RelPath,
        hash: &str,
    ) -> Result<(), ToolError> {
        self.apply(RecordOp::RecordWrite {
            session: session.into(),
            path: path.as_str().into(),
            hash: hash.into(),
        })
        .await
        .into_result()
        .map(drop)
    }
    /// Journal the previous content of `path` before it changes; returns the change id.
    async fn journal_begin(
        &self,
        session: &str,
        call_id: &str,
        tool: &str,
        path: &RelPath,
        new_hash: &str,
    ) -> Result<i64, ToolError> {
        self.journal_begin_grouped(session, call_id, tool, path, new_hash, None)
            .await
    }
    /// Like [`Records::journal_begin`], the change joining the group of change `group` (the
    /// first change of the same call, which only that call may name), so they are undone
    /// together.
    async fn journal_begin_grouped(
        &self,
        session: &str,
        call_id: &str,
        tool: &str,
        path: &RelPath,
        new_hash: &str,
        group: Option<i64>,
    ) -> Result<i64, ToolError> {
        self.apply(begin(
            session,
            call_id,
            tool,
            path,
            Some(new_hash),
            group,
            None,
        ))
        .await
        .into_change()
    }
    /// Journal the content of `path` before it is removed, joining `group` as in
    /// [`Records::journal_begin_grouped`]; returns the change id.
    async fn journal_begin_removal(
        &self,
        session: &str,
        call_id: &str,
        tool: &str,
        path: &RelPath,
        group: Option<i64>,
    ) -> Result<i64, ToolError> {
        self.apply(begin(session, call_id, tool, path, None, group, None))
            .await
            .into_change()
    }
    /// Like [`Records::journal_begin_grouped`] (or, when `new_hash` is `None`,
    /// [`Records::journal_begin_removal`]), with the previous content `pre` as a remote runner
    /// read it (its workspace is not on this disk). Only the server keeps the journal.
    #[allow(clippy::too_many_arguments)]
    async fn journal_begin_preimage(
        &self,
        session: &str,
        call_id: &str,
        tool: &str,
        path: &RelPath,
        new_hash: Option<&str>,
        group: Option<i64>,
        pre: PreImage<'_>,
    ) -> Result<i64, ToolError> {
        let pre = PreImageWire::received(pre.content.map(<[u8]>::to_vec), pre.mode);
        self.apply(begin(
            session,
            call_id,
            tool,
            path,
            new_hash,
            group,
            Some(pre),
        ))
        .await
        .into_change()
    }
    /// The journaled change landed (`done`) or did not happen.
    async fn journal_end(&self, change: i64, done: bool) -> Result<(), ToolError> {
        self.apply(RecordOp::JournalEnd { change, done })
            .await
            .into_result()
            .map(drop)
    }
    /// Journal what a command changed (already done), as one group with its previous states,
    /// and the call with what it changed out of scope; returns its first change's id.
    async fn journal_command(&self, cmd: CommandRecord<'_>) -> Result<CommandJournaled, ToolError> {
        let entries = cmd
            .entries
            .iter()
            .map(|e| CommandEntryWire {
                entry: e.clone(),
                len: e.old_content.len() as u64,
            })
            .collect();
        self.apply(RecordOp::JournalCommand {
            session: cmd.session.into(),
            call_id: cmd.call_id.into(),
            tool: cmd.tool.into(),
            command: cmd.command.into(),
            entries,
            skipped: cmd.skipped.to_vec(),
            upload: None,
            since: cmd.since,
        })
        .await
        .into_command()
    }
    /// Undo the changes call `call_id` of `session` made so far, the journal group of its first
    /// change `first`: a call that changes several files and fails part way puts back the
    /// files it already changed.
    async fn roll_back_call(
        &self,
        session: &str,
        call_id: &str,
        first: i64,
    ) -> Result<Vec<UndoOutcome>, ToolError> {
        self.apply(RecordOp::RollBack {
            session: session.into(),
            call_id: call_id.into(),
            first,
        })
        .await
        .into_undone()
    }
    /// Undo `session`'s last change of `path` that is not undone (anthropic's `undo_edit`),
    /// with the other changes of its group, journaled as changes of `call_id`: the path's own
    /// undo first.
    async fn undo_last_of_path(
        &self,
        session: &str,
        call_id: &str,
        path: &RelPath,
    ) -> Result<Vec<UndoOutcome>, ToolError> {
        self.apply(RecordOp::UndoLast {
            session: session.into(),
            call_id: call_id.into(),
            path: path.as_str().into(),
        })
        .await
        .into_undone()
    }
}

/// A [`RecordOp::JournalBegin`]: before `path` changes to `new_hash` (`None`: is removed).
fn begin(
    session: &str,
    call_id: &str,
    tool: &str,
    path: &RelPath,
    new_hash: Option<&str>,
    group: Option<i64>,
    pre: Option<PreImageWire>,
) -> RecordOp {
    RecordOp::JournalBegin {
        session: session.into(),
        call_id: call_id.into(),
        tool: tool.into(),
        path: path.as_str().into(),
        new_hash: new_hash.unwrap_or_default().into(),
        pre,
        group,
        removal: new_hash.is_none(),
    }
}

/// [`Records`] kept in this process: the read ledger in memory (written behind to the state
/// database, in order, by one thread: losing the tail in a crash costs only a re-read), the
/// journal in the database before every change.
pub struct LocalRecords {
    /// The workspace whose files are journaled.
    pub workspace: Arc<Workspace>,
    /// Every change, before it happens.
    pub journal: Journal,
    ledger: Arc<Ledger>,
    /// What each session saw of each path: `Some(hash)`, or `None` once forgotten.
    seen: Mutex<HashMap<(String, String), Option<String>>>,
    /// The write-behind queue, and the thread that drains it (joined on drop: a CLI process
    /// leaves its reads in the database for the next one).
    behind: Mutex<Option<mpsc::Sender<LedgerUpdate>>>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The runner's workspace, when the files are not on this disk (a `[remote]` link): undo
    /// restores through it instead of writing `workspace`.
    remote: OnceLock<Arc<dyn RemoteFiles>>,
}

/// The most updates the write-behind thread commits in one transaction.
const BATCH: usize = 512;

impl LocalRecords {
    /// Records over `ledger` and `journal` for `workspace`.
    pub fn new(workspace: Arc<Workspace>, ledger: Ledger, journal: Journal) -> Self {
        let ledger = Arc::new(ledger);
        let (tx, rx) = mpsc::channel::<LedgerUpdate>();
        let db = ledger.clone();
        let writer = std::thread::Builder::new()
            .name("toolyard-ledger".into())
            .spawn(move || {
                // Whatever queued up while the last batch committed goes in the next one.
                while let Ok(first) = rx.recv() {
                    let mut batch = vec![first];
                    batch.extend(rx.try_iter().take(BATCH - 1));
                    persist(&db, &batch);
                }
            })
            .ok();
        Self {
            workspace,
            journal,
            ledger,
            seen: Mutex::new(HashMap::new()),
            behind: Mutex::new(writer.is_some().then_some(tx)),
            writer: Mutex::new(writer),
            remote: OnceLock::new(),
        }
    }

    /// The files live with a remote runner, reached through `files`: undo restores there.
    /// Set once (by the dispatcher that owns the link).
    pub fn set_remote(&self, files: Arc<dyn RemoteFiles>) {
        if self.remote.set(files).is_err() {
            tracing::warn!("the remote files of these records were already set");
        }
    }

    /// The runner's workspace, when the files are remote.
    pub fn remote(&self) -> Option<&Arc<dyn RemoteFiles>> {
        self.remote.get()
    }

    /// What `session` last saw of `path`: memory first, then the database (another process's
    /// reads of the same session, e.g. an earlier `toolyard call`).
    fn seen(&self, session: &str, path: &RelPath) -> Result<Option<String>, ToolError> {
        let key = (session.to_string(), path.as_str().to_string());
        if let Some(known) = lock(&self.seen).get(&key) {
            return Ok(known.clone());
        }
        self.ledger.seen(session, path)
    }

    fn note(&self, session: &str, path: &RelPath, hash: Option<&str>, via: Via) {
        let key = (session.to_string(), path.as_str().to_string());
        let known = lock(&self.seen).insert(key, hash.map(str::to_string));
        // Reading again what the session already knows changes nothing to persist.
        if via == Via::Read && known.flatten().as_deref() == hash {
            return;
        }
        let update = match hash {
            Some(h) => LedgerUpdate::Seen {
                session: session.into(),
                path: path.clone(),
                hash: h.into(),
                via,
            },
            None => LedgerUpdate::Forget {
                session: session.into(),
                path: path.clone(),
            },
        };
        let unsent = match lock(&self.behind).as_ref() {
            Some(tx) => tx.send(update).err().map(|e| e.0),
            None => Some(update),
        };
        // No writer thread: persist in line.
        if let Some(update) = unsent {
            persist(&self.ledger, &[update]);
        }
    }

    /// `group` as a journal group a change of `session`'s call `call_id` may join: its first
    /// change must be one of that same call (a runner's request names the group, and may only
    /// name its own).
    fn own_group(
        &self,
        session: &str,
        call_id: &str,
        group: Option<i64>,
    ) -> Result<Option<ChangeId>, ToolError> {
        let Some(first) = group.map(ChangeId) else {
            return Ok(None);
        };
        let change = self.journal.get(first)?;
        if change.session != session || change.call_id != call_id {
            return Err(ToolError::Blocked {
                rule: "journal groups".into(),
                reason: format!(
                    "change {first} is not a change of call {call_id}; a call may only group its own changes"
                ),
            });
        }
        Ok(Some(first))
    }

    /// After an undo: the session's view of `path` is `hash`, or nothing when it was removed.
    pub fn set_view(&self, session: &str, path: &RelPath, hash: Option<&str>) {
        self.note(session, path, hash, Via::Write);
    }
}

impl Drop for LocalRecords {
    fn drop(&mut self) {
        lock(&self.behind).take();
        if let Some(writer) = lock(&self.writer).take() {
            let _ = writer.join();
        }
    }
}

/// Write ledger updates to the database; a failure only costs a re-read later.
fn persist(db: &Ledger, updates: &[LedgerUpdate]) {
    if let Err(e) = db.apply(updates) {
        tracing::warn!(error = %e, "could not persist read-ledger entries");
    }
}

#[async_trait]
impl Records for LocalRecords {
    async fn apply(&self, op: RecordOp) -> Reply {
        match op {
            RecordOp::RecordRead {
                session,
                path,
                hash,
            } => done(relative(&path).map(|p| self.note(&session, &p, Some(&hash), Via::Read))),
            RecordOp::CheckWrite {
                session,
                path,
                current,
            } => done(relative(&path).and_then(|p| self.may_write(&session, &p, &current))),
            RecordOp::RecordWrite {
                session,
                path,
                hash,
            } => done(relative(&path).map(|p| self.note(&session, &p, Some(&hash), Via::Write))),
            RecordOp::JournalBegin {
                session,
                call_id,
                tool,
                path,
                new_hash,
                pre,
                group,
                removal,
            } => {
                let new_hash = (!removal).then_some(new_hash.as_str());
                let begun = self.begin(&session, &call_id, &tool, &path, new_hash, group, pre);
                Reply::from_result(begun.map(Some))
            }
            RecordOp::JournalEnd { change, done } => {
                let id = ChangeId(change);
                let ended = if done {
                    self.journal.mark_done(id)
                } else {
                    self.journal.mark_failed(id)
                };
                Reply::from_result(ended.map(|()| None))
            }
            RecordOp::PreImagePart { .. } => Reply::Err(ToolError::Io(
                "internal: a pre-image part reached the records; the runner's link keeps them"
                    .into(),
            )),
            RecordOp::RollBack {
                session,
                call_id,
                first,
            } => undone(self.roll_back(&session, &call_id, first).await),
            RecordOp::JournalCommand {
                session,
                call_id,
                tool,
                command,
                entries,
                skipped,
                upload: _,
                since,
            } => match self.command(
                &session, &call_id, &tool, &command, entries, &skipped, since,
            ) {
                Ok(done) => Reply::Command(done),
                Err(e) => Reply::Err(e),
            },
            RecordOp::UndoLast {
                session,
                call_id,
                path,
            } => undone(self.undo_last(&session, &call_id, &path).await),
        }
    }
}

/// The reply to an operation that answers nothing.
fn done(r: Result<(), ToolError>) -> Reply {
    Reply::from_result(r.map(|()| None))
}

/// The reply to an undo.
fn undone(r: Result<Vec<UndoOutcome>, ToolError>) -> Reply {
    match r {
        Ok(out) => Reply::Undone(out),
        Err(e) => Reply::Err(e),
    }
}

impl LocalRecords {
    /// May `session` overwrite `path`, whose content now hashes to `current`?
    fn may_write(&self, session: &str, path: &RelPath, current: &str) -> Result<(), ToolError> {
        match self.seen(session, path)? {
            None => Err(ToolError::NotRead {
                path: path.to_string(),
            }),
            Some(h) if h != current => Err(ToolError::StaleRead {
                path: path.to_string(),
            }),
            Some(_) => Ok(()),
        }
    }

    /// Journal `path` before it changes to `new_hash` (`None`: is removed), joining `group`;
    /// its previous content is `pre` when another process read it (a remote runner), else
    /// read here.
    #[allow(clippy::too_many_arguments)]
    fn begin(
        &self,
        session: &str,
        call_id: &str,
        tool: &str,
        path: &str,
        new_hash: Option<&str>,
        group: Option<i64>,
        pre: Option<PreImageWire>,
    ) -> Result<i64, ToolError> {
        let rel = relative(path)?;
        let group = self.own_group(session, call_id, group)?;
        let id = match (pre, new_hash) {
            (Some(mut pre), _) => {
                let content = pre.content(path)?;
                let image = PreImage {
                    content: content.as_deref(),
                    mode: pre.mode,
                };
                match new_hash {
                    Some(new_hash) => {
                        let change = NewChange {
                            session,
                            call_id,
                            tool,
                            path: &rel,
                            new_hash,
                            group,
                        };
                        self.journal.record_preimage(change, &image)?
                    }
                    None => self
                        .journal
                        .record_removal_preimage(session, call_id, tool, &rel, group, &image)?,
                }
            }
            (None, Some(new_hash)) => self.journal.record(
                &self.workspace,
                NewChange {
                    session,
                    call_id,
                    tool,
                    path: &rel,
                    new_hash,
                    group,
                },
            )?,
            (None, None) => {
                self.journal
                    .record_removal(&self.workspace, session, call_id, tool, &rel, group)?
            }
        };
        Ok(id.0)
    }

    /// Journal a command's changes, each entry with its previous content.
    #[allow(clippy::too_many_arguments)]
    fn command(
        &self,
        session: &str,
        call_id: &str,
        tool: &str,
        command: &str,
        entries: Vec<CommandEntryWire>,
        skipped: &[crate::Skipped],
        since: f64,
    ) -> Result<CommandJournaled, ToolError> {
        let mut list = Vec::with_capacity(entries.len());
        for e in entries {
            relative(&e.entry.path)?;
            list.push(e.entry);
        }
        self.journal.record_command(&CommandRecord {
            session,
            call_id,
            tool,
            command,
            entries: &list,
            skipped,
            since,
        })
    }

    async fn roll_back(
        &self,
        session: &str,
        call_id: &str,
        first: i64,
    ) -> Result<Vec<UndoOutcome>, ToolError> {
        let first = self
            .own_group(session, call_id, Some(first))?
            .unwrap_or(ChangeId(first));
        self.undo(first, session, call_id, false).await
    }

    async fn undo_last(
        &self,
        session: &str,
        call_id: &str,
        path: &str,
    ) -> Result<Vec<UndoOutcome>, ToolError> {
        let path = relative(path)?;
        let changes = self.journal.list(&ChangeFilter {
            session: Some(session.to_string()),
            path: Some(path.as_str().to_string()),
            status: Some(ChangeStatus::Done),
            limit: None,
        })?;
        let last = changes
            .iter()
            .find(|c| c.undoes.is_none() && c.undone_by.is_none())
            .ok_or_else(|| {
                ToolError::NotFound(format!("no edit of {path} by this session is left to undo"))
            })?;
        let mut undone = self.undo(last.id, session, call_id, false).await?;
        if let Some(i) = undone.iter().position(|o| o.undone == last.id) {
            undone.swap(0, i);
        }
        Ok(undone)
    }

    /// Where the files are: this disk, or the remote runner's workspace over its link.
    pub fn files(&self) -> Box<dyn Files + '_> {
        match self.remote.get() {
            Some(remote) => Box::new(Link(remote.as_ref())),
            None => Box::new(Disk(&self.workspace)),
        }
    }

    /// Undo change `id`, with every other change of its group (the files one call changed
    /// together), as `session`'s call `call_id`, wherever the files are (see
    /// [`LocalRecords::files`]); the session's view of each file follows the restored content.
    /// The one entry point of every undo: the `undo` tool, `undo_edit`, a call's roll-back and
    /// `toolyard undo`.
    pub async fn undo(
        &self,
        id: ChangeId,
        session: &str,
        call_id: &str,
        force: bool,
    ) -> Result<Vec<UndoOutcome>, ToolError> {
        let undone = undo_group(
            &self.journal,
            self.files().as_ref(),
            id,
            session,
            call_id,
            force,
        )
        .await?;
        for out in &undone {
            let rel = RelPath::from_normalized(&out.path);
            self.set_view(session, &rel, out.new_hash.as_deref());
        }
        Ok(undone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;
    use toolyard_workspace::StateDir;

    fn records() -> (tempfile::TempDir, LocalRecords) {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("ws")).unwrap();
        let ws = Workspace::open(&tmp.path().join("ws")).unwrap();
        let state = StateDir::at(&tmp.path().join("state"), ws.root()).unwrap();
        let records = LocalRecords::new(
            Arc::new(ws),
            Ledger::open(&state).unwrap(),
            Journal::open(&state).unwrap(),
        );
        (tmp, records)
    }

    #[test]
    fn an_op_with_a_path_outside_the_workspace_is_refused_whatever_the_op() {
        let (_tmp, r) = records();
        for path in ["../a", "/etc/passwd", "a//b", "a/./b"] {
            let ops = [
                RecordOp::RecordRead {
                    session: "s".into(),
                    path: path.into(),
                    hash: "h".into(),
                },
                RecordOp::UndoLast {
                    session: "s".into(),
                    call_id: "c".into(),
                    path: path.into(),
                },
            ];
            for op in ops {
                let reply = block_on(r.apply(op));
                assert!(
                    matches!(&reply, Reply::Err(ToolError::PathOutsideWorkspace { .. })),
                    "{path}: {reply:?}"
                );
            }
        }
    }

    #[test]
    fn a_read_recorded_through_an_op_lets_the_same_session_write_and_no_other() {
        let (_tmp, r) = records();
        let a = RelPath::from_normalized("a.txt");
        block_on(r.record_read("s", &a, "h1")).unwrap();
        block_on(r.check_write("s", &a, "h1")).unwrap();
        let stale = block_on(r.check_write("s", &a, "h2")).unwrap_err();
        assert!(matches!(stale, ToolError::StaleRead { .. }), "{stale:?}");
        let other = block_on(r.check_write("t", &a, "h1")).unwrap_err();
        assert!(matches!(other, ToolError::NotRead { .. }), "{other:?}");
    }
}
