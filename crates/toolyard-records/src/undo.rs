//! Group undo, written once over where the files are ([`Files`]: this disk, or a remote
//! runner's workspace over its link). The journal plans every undo; the backend reads a
//! change's path and restores it under a compare-and-swap. An undo is itself journaled, so
//! undoing it redoes the change.

use async_trait::async_trait;
use toolyard_core::ToolError;
use toolyard_workspace::Workspace;

use crate::error::RecordsError;
pub use crate::journal::Checked;
use crate::journal::{Change, ChangeId, ChangeStatus, EntryKind, Journal, PreImage, UndoOutcome};
use crate::remote::{MAX_REMOTE_FILE_BYTES, RemoteFiles};

/// Where the files of an undo are: each step of one change's undo, read then restore.
#[async_trait]
pub trait Files: Send + Sync {
    /// Whether `target` can be undone now, as [`Journal::undo_verdict_mode`] decides from
    /// the state of its path.
    async fn check(
        &self,
        journal: &Journal,
        target: Change,
        force: bool,
    ) -> Result<Checked, ToolError>;

    /// Undo the checked change: journal the undo (joining `group`, the first undo of the same
    /// group undo) with the path's current state, then restore it under a compare-and-swap.
    async fn restore(
        &self,
        journal: &Journal,
        checked: Checked,
        session: &str,
        call_id: &str,
        group: Option<ChangeId>,
    ) -> Result<UndoOutcome, ToolError>;
}

/// Undo change `id` and every other change of its group (see
/// [`NewChange::group`](crate::NewChange)), as `session`'s call `call_id`, newest first, each
/// under a compare-and-swap: all or none. Every change is checked before any file is touched,
/// so if one file changed since (or one change is already undone) the whole undo is refused,
/// naming it, unless `force`; if a file changes during the undo, the files already restored
/// are put back. The undos form a group of their own, so undoing any of them redoes the whole
/// group. Changes whose write never happened are skipped.
pub async fn undo_group(
    journal: &Journal,
    files: &dyn Files,
    id: ChangeId,
    session: &str,
    call_id: &str,
    force: bool,
) -> Result<Vec<UndoOutcome>, ToolError> {
    let members = journal.group_of(id)?;
    let count = members.len();
    if count <= 1 {
        let target = journal.get(id)?;
        let checked = files.check(journal, target, force).await?;
        return Ok(vec![
            files
                .restore(journal, checked, session, call_id, None)
                .await?,
        ]);
    }
    let tool = members[0].tool.clone();
    let names: Vec<String> = members.iter().map(|m| m.path.clone()).collect();
    let whole = |e: ToolError| match e {
        ToolError::Conflict(m) => ToolError::Conflict(format!(
            "{m}. Change {id} is one of the {count} changes one {tool} call made together ({}); they are undone together, so nothing was undone",
            names.join(", ")
        )),
        other => other,
    };
    let mut checked = Vec::with_capacity(count);
    for m in members {
        if m.status == ChangeStatus::Failed {
            continue;
        }
        checked.push(files.check(journal, m, force).await.map_err(whole)?);
    }
    if checked.is_empty() {
        return Err(ToolError::Conflict(format!(
            "change {id} and its group failed: their writes never happened, so there is nothing to undo"
        )));
    }
    let mut done: Vec<UndoOutcome> = Vec::with_capacity(checked.len());
    let mut first: Option<ChangeId> = None;
    for c in checked {
        let shown = c.target.path.clone();
        match files.restore(journal, c, session, call_id, first).await {
            Ok(out) => {
                first.get_or_insert(out.undo);
                done.push(out);
            }
            Err(e) => {
                let left = put_back(journal, files, &done, session, call_id).await;
                let outcome = if left.is_empty() {
                    "the files already restored were put back, so nothing changed".to_string()
                } else {
                    format!(
                        "putting back the files already restored failed for {}; see `toolyard log`",
                        left.join(", ")
                    )
                };
                return Err(ToolError::Conflict(format!(
                    "undoing change {id} stopped at {shown}: {e}; {outcome}"
                )));
            }
        }
    }
    Ok(done)
}

/// Revert the undos in `done` (newest first); returns the paths that could not be.
async fn put_back(
    journal: &Journal,
    files: &dyn Files,
    done: &[UndoOutcome],
    session: &str,
    call_id: &str,
) -> Vec<String> {
    let mut left = Vec::new();
    let mut first = None;
    for out in done.iter().rev() {
        let again = match journal.get(out.undo) {
            Ok(target) => match files.check(journal, target, false).await {
                Ok(c) => files.restore(journal, c, session, call_id, first).await,
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        match again {
            Ok(o) => {
                first.get_or_insert(o.undo);
            }
            Err(e) => {
                tracing::warn!(change = %out.undo, error = %e, "could not put back a file of a failed group undo");
                left.push(out.path.clone());
            }
        }
    }
    left
}

impl Journal {
    /// Restore `path` to its content before change `id`: exact bytes and mode, or remove it if
    /// the change created it. Refused with `Conflict` if the file changed since the change (or
    /// the change was already undone) unless `force`. The undo is journaled as a change of tool
    /// `undo` by `session`/`call_id`; undoing that change redoes `id`.
    ///
    /// Only for a change made alone: a change of a group is refused (undo its group with
    /// [`Journal::undo_group`], so one call's changes are never split).
    pub fn undo(
        &self,
        ws: &Workspace,
        id: ChangeId,
        session: &str,
        call_id: &str,
        force: bool,
    ) -> Result<UndoOutcome, ToolError> {
        let members = self.group_of(id)?;
        if members.len() > 1 {
            return Err(ToolError::Conflict(format!(
                "change {id} is one of {} changes one {} call made together; undo them together (the `undo` tool and `toolyard undo` do)",
                members.len(),
                members[0].tool
            )));
        }
        let mut undone = self.undo_group(ws, id, session, call_id, force)?;
        undone
            .pop()
            .ok_or_else(|| ToolError::Io(format!("internal: undoing change {id} undid nothing")))
    }

    /// [`crate::undo_group`] on this disk: change `id` and every other change of its group,
    /// all or none.
    pub fn undo_group(
        &self,
        ws: &Workspace,
        id: ChangeId,
        session: &str,
        call_id: &str,
        force: bool,
    ) -> Result<Vec<UndoOutcome>, ToolError> {
        // The disk answers at once: the future never waits.
        futures::executor::block_on(undo_group(self, &Disk(ws), id, session, call_id, force))
    }
}

/// The files on this disk, in `0`'s workspace.
pub struct Disk<'a>(pub &'a Workspace);

#[async_trait]
impl Files for Disk<'_> {
    async fn check(
        &self,
        journal: &Journal,
        target: Change,
        force: bool,
    ) -> Result<Checked, ToolError> {
        journal.check_on_disk(self.0, target, force)
    }

    async fn restore(
        &self,
        journal: &Journal,
        checked: Checked,
        session: &str,
        call_id: &str,
        group: Option<ChangeId>,
    ) -> Result<UndoOutcome, ToolError> {
        journal.restore_on_disk(self.0, checked, session, call_id, group)
    }
}

/// The files of a remote runner, reached over its link: the journal and its planning stay
/// here, each restore is a compare-and-swap on the runner of the change's own session.
pub struct Link<'a>(pub &'a dyn RemoteFiles);

#[async_trait]
impl Files for Link<'_> {
    async fn check(
        &self,
        journal: &Journal,
        target: Change,
        force: bool,
    ) -> Result<Checked, ToolError> {
        // Refuse what the journal alone refuses before asking the runner anything.
        if target.status != ChangeStatus::Done || (target.undone_by.is_some() && !force) {
            journal.undo_check(&target, target.new_hash.as_deref(), force)?;
        }
        let now = self.0.read_state(&target.session, &target.path).await?;
        // A symlink or a directory answers its state hash (a command may have made either).
        let current = match &now.state {
            Some(state) => Some(state.clone()),
            None => now.content.as_deref().map(toolyard_workspace::hash_bytes),
        };
        let verdict = journal.undo_verdict_mode(&target, current.as_deref(), now.mode, force)?;
        Ok(Checked {
            target,
            now,
            current,
            verdict,
        })
    }

    async fn restore(
        &self,
        journal: &Journal,
        checked: Checked,
        session: &str,
        call_id: &str,
        group: Option<ChangeId>,
    ) -> Result<UndoOutcome, ToolError> {
        let Checked {
            target,
            now,
            current,
            verdict,
        } = checked;
        let id = target.id;
        let old = old_content(journal, &target)?;
        let pre = PreImage {
            content: now.content.as_deref(),
            mode: now.mode,
        };
        // A command's change (its modes tracked) may involve symlinks and directories.
        let kinds = target.new_mode.is_some()
            || now.state.is_some()
            || !matches!(target.old_kind(), EntryKind::File | EntryKind::Absent);
        let undo = if kinds {
            journal.record_undo_state(
                &target,
                session,
                call_id,
                group,
                &pre,
                now.state.as_deref(),
            )?
        } else {
            journal.record_undo_preimage(&target, session, call_id, group, &pre)?
        };
        let bytes = old.as_ref().map_or(0, |b| b.len() as u64);
        let removed = !target.existed;
        // Already as before the change (and with its mode): there is nothing to write.
        let restored = if verdict.already && (removed || now.mode == target.old_mode) {
            Ok(())
        } else if kinds {
            self.0
                .restore_state(
                    &target.session,
                    undo.0,
                    &target.path,
                    current.as_deref(),
                    target
                        .existed
                        .then_some(target.old_hash.as_deref())
                        .flatten(),
                    old.clone().unwrap_or_default(),
                    target.old_mode,
                )
                .await
        } else {
            self.0
                .restore(
                    &target.session,
                    undo.0,
                    &target.path,
                    current.as_deref(),
                    old,
                    target.old_mode,
                )
                .await
                .map(|_| ())
        };
        match restored {
            Ok(()) => {
                journal.mark_done(undo)?;
                tracing::info!(undo = %undo, undone = %id, path = %target.path, removed, "undid a change on the remote runner");
                Ok(UndoOutcome {
                    undo,
                    undone: id,
                    redo: target.undoes.is_some(),
                    path: target.path,
                    removed,
                    bytes,
                    mode: if removed { None } else { target.old_mode },
                    new_hash: target.old_hash,
                    forced: verdict.forced,
                    already: verdict.already,
                })
            }
            // The runner refused: nothing was written.
            Err(ToolError::Conflict(why)) => {
                let _ = journal.mark_failed(undo);
                Err(ToolError::Conflict(why))
            }
            // The link died: the write may or may not have landed; recovery settles the entry.
            Err(e) => Err(e),
        }
    }
}

/// The content before `target` to send to a remote runner: `None` when the path did not
/// exist, nothing for a directory (its entries are changes of their own).
fn old_content(journal: &Journal, target: &Change) -> Result<Option<Vec<u8>>, ToolError> {
    use std::io::Read;
    let id = target.id;
    if target.old_kind() == EntryKind::Dir {
        return Ok(Some(Vec::new()));
    }
    let Some(reader) = journal.old_content(id)? else {
        return Ok(None);
    };
    let mut bytes = Vec::new();
    reader
        .take(MAX_REMOTE_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| RecordsError::ReadBack {
            change: id.0,
            source,
        })?;
    if bytes.len() as u64 > MAX_REMOTE_FILE_BYTES {
        return Err(ToolError::Unavailable(format!(
            "the content before change {id} is over {MAX_REMOTE_FILE_BYTES} bytes, more than an undo sends to a remote runner; restore {} with run_command instead",
            target.path
        )));
    }
    Ok(Some(bytes))
}
