//! Session records the file tools keep: the read ledger and the change journal.
//!
//! The tools see them through [`Records`], so the same tool code runs in the server process
//! (where [`LocalRecords`] writes the state database directly) and in a sandboxed runner
//! (where the runner asks the server over the job protocol, because a runner may not write
//! Toolyard's state directory).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, mpsc};

use async_trait::async_trait;
use toolyard_core::ToolError;
use toolyard_workspace::{
    ChangeId, Journal, Ledger, LedgerUpdate, NewChange, PreImage, RelPath, UndoOutcome, Via,
    Workspace,
};

use crate::remote::RemoteFiles;

/// What the file tools record per session: reads, writes, and journal entries.
#[async_trait]
pub trait Records: Send + Sync {
    /// The session read `path` and saw content `hash`.
    async fn record_read(&self, session: &str, path: &RelPath, hash: &str)
    -> Result<(), ToolError>;
    /// May the session overwrite `path`, whose content now hashes to `current`?
    async fn check_write(
        &self,
        session: &str,
        path: &RelPath,
        current: &str,
    ) -> Result<(), ToolError>;
    /// The session wrote `path`; its view is now `hash`.
    async fn record_write(
        &self,
        session: &str,
        path: &RelPath,
        hash: &str,
    ) -> Result<(), ToolError>;
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
    ) -> Result<i64, ToolError>;
    /// Journal the content of `path` before it is removed, joining `group` as in
    /// [`Records::journal_begin_grouped`]; returns the change id.
    async fn journal_begin_removal(
        &self,
        session: &str,
        call_id: &str,
        tool: &str,
        path: &RelPath,
        group: Option<i64>,
    ) -> Result<i64, ToolError>;
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
    ) -> Result<i64, ToolError>;
    /// The journaled change landed (`done`) or did not happen.
    async fn journal_end(&self, change: i64, done: bool) -> Result<(), ToolError>;
    /// Journal what a command changed (already done), as one group with its previous states,
    /// and the call with what it changed out of scope; returns its first change's id.
    async fn journal_command(
        &self,
        cmd: toolyard_workspace::CommandRecord<'_>,
    ) -> Result<toolyard_workspace::CommandJournaled, ToolError> {
        let _ = cmd;
        Err(ToolError::Unavailable(
            "these records cannot journal a command's changes".into(),
        ))
    }
    /// Undo the changes call `call_id` of `session` made so far, the journal group of its first
    /// change `first`: a call that changes several files and fails part way puts back the
    /// files it already changed.
    async fn roll_back_call(
        &self,
        session: &str,
        call_id: &str,
        first: i64,
    ) -> Result<Vec<UndoOutcome>, ToolError>;
    /// Undo `session`'s last change of `path` that is not undone (anthropic's `undo_edit`),
    /// with the other changes of its group, journaled as changes of `call_id`: the path's own
    /// undo first.
    async fn undo_last_of_path(
        &self,
        session: &str,
        call_id: &str,
        path: &RelPath,
    ) -> Result<Vec<UndoOutcome>, ToolError>;
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[async_trait]
impl Records for LocalRecords {
    async fn record_read(
        &self,
        session: &str,
        path: &RelPath,
        hash: &str,
    ) -> Result<(), ToolError> {
        self.note(session, path, Some(hash), Via::Read);
        Ok(())
    }

    async fn check_write(
        &self,
        session: &str,
        path: &RelPath,
        current: &str,
    ) -> Result<(), ToolError> {
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

    async fn record_write(
        &self,
        session: &str,
        path: &RelPath,
        hash: &str,
    ) -> Result<(), ToolError> {
        self.note(session, path, Some(hash), Via::Write);
        Ok(())
    }

    async fn journal_begin_grouped(
        &self,
        session: &str,
        call_id: &str,
        tool: &str,
        path: &RelPath,
        new_hash: &str,
        group: Option<i64>,
    ) -> Result<i64, ToolError> {
        let group = self.own_group(session, call_id, group)?;
        let id = self.journal.record(
            &self.workspace,
            NewChange {
                session,
                call_id,
                tool,
                path,
                new_hash,
                group,
            },
        )?;
        Ok(id.0)
    }

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
        let group = self.own_group(session, call_id, group)?;
        let id = match new_hash {
            Some(new_hash) => {
                let change = NewChange {
                    session,
                    call_id,
                    tool,
                    path,
                    new_hash,
                    group,
                };
                self.journal.record_preimage(change, &pre)?
            }
            None => self
                .journal
                .record_removal_preimage(session, call_id, tool, path, group, &pre)?,
        };
        Ok(id.0)
    }

    async fn journal_begin_removal(
        &self,
        session: &str,
        call_id: &str,
        tool: &str,
        path: &RelPath,
        group: Option<i64>,
    ) -> Result<i64, ToolError> {
        let group = self.own_group(session, call_id, group)?;
        let id =
            self.journal
                .record_removal(&self.workspace, session, call_id, tool, path, group)?;
        Ok(id.0)
    }

    async fn roll_back_call(
        &self,
        session: &str,
        call_id: &str,
        first: i64,
    ) -> Result<Vec<UndoOutcome>, ToolError> {
        let first = self
            .own_group(session, call_id, Some(first))?
            .unwrap_or(ChangeId(first));
        crate::undo::undo_change(self, first, session, call_id, false).await
    }

    async fn undo_last_of_path(
        &self,
        session: &str,
        call_id: &str,
        path: &RelPath,
    ) -> Result<Vec<UndoOutcome>, ToolError> {
        let changes = self.journal.list(&toolyard_workspace::ChangeFilter {
            session: Some(session.to_string()),
            path: Some(path.as_str().to_string()),
            status: Some(toolyard_workspace::ChangeStatus::Done),
            limit: None,
        })?;
        let last = changes
            .iter()
            .find(|c| c.undoes.is_none() && c.undone_by.is_none())
            .ok_or_else(|| {
                ToolError::NotFound(format!("no edit of {path} by this session is left to undo"))
            })?;
        let mut undone = crate::undo::undo_change(self, last.id, session, call_id, false).await?;
        if let Some(i) = undone.iter().position(|o| o.undone == last.id) {
            undone.swap(0, i);
        }
        Ok(undone)
    }

    async fn journal_command(
        &self,
        cmd: toolyard_workspace::CommandRecord<'_>,
    ) -> Result<toolyard_workspace::CommandJournaled, ToolError> {
        self.journal.record_command(&cmd)
    }

    async fn journal_end(&self, change: i64, done: bool) -> Result<(), ToolError> {
        let id = toolyard_workspace::ChangeId(change);
        if done {
            self.journal.mark_done(id)
        } else {
            self.journal.mark_failed(id)
        }
    }
}
