//! `undo`: revert a journaled change (the session's last one by default). An undo is itself
//! journaled, so undoing it redoes the change.

use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use toolyard_core::{Annotations, Tool, ToolContext, ToolError, ToolResult, Typed, TypedTool};
use toolyard_workspace::{
    Change, ChangeId, ChangeStatus, Journal, PreImage, RelPath, UndoOutcome, UndoVerdict,
};

use crate::records::LocalRecords;
use crate::remote::{FileState, MAX_REMOTE_FILE_BYTES, RemoteFiles};

/// Arguments of `undo`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UndoArgs {
    /// The change to revert (default: this session's last change that is not undone).
    pub change_id: Option<i64>,
    /// Revert even if the file changed since that change (its later content is journaled too).
    #[serde(default)]
    pub force: bool,
}

/// `undo`: restore a file to its content before a change.
pub struct Undo {
    records: Arc<LocalRecords>,
}

#[async_trait]
impl TypedTool for Undo {
    type Args = UndoArgs;

    fn name(&self) -> &str {
        "undo"
    }

    fn description(&self) -> &str {
        "Undo a change made by write_file, edit_file or undo: restores the exact previous bytes \
         and mode, or removes a file the change created. The changes one call made to several \
         files (an apply_patch) are undone together. Without change_id, undoes this session's \
         last change; call it again to go further back. An undo is a change too: undo it (by \
         its change_id) to redo. Refuses if a file changed since, unless force is true; a file \
         already back to its earlier content is only marked undone."
    }

    fn annotations(&self) -> Annotations {
        Annotations::MUTATING
    }

    async fn run(&self, args: UndoArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let journal = &self.records.journal;
        let id = match args.change_id {
            Some(id) => ChangeId(id),
            None => journal
                .last_of_session(&ctx.session_id)?
                .map(|c| c.id)
                .ok_or_else(|| {
                    ToolError::NotFound(
                        "this session has no change left to undo; `toolyard log` lists every change"
                            .into(),
                    )
                })?,
        };
        let change = journal.get(id)?;
        let undone =
            undo_change(&self.records, id, &ctx.session_id, &ctx.call_id, args.force).await?;
        let files: Vec<String> = undone.iter().map(|o| o.path.clone()).collect();
        let [out] = undone.as_slice() else {
            return Ok(group_result(id, &change.tool, &undone).with_files_changed(files));
        };
        let text = if out.already {
            format!(
                "{} was already as before change #{} ({} on {}): its content had changed back \
                 since, so nothing was written; change #{} is now marked undone (by change #{}). \
                 There is nothing to redo: what change #{} wrote is no longer in the file.",
                out.path, id.0, change.tool, change.path, id.0, out.undo.0, id.0
            )
        } else {
            let what = if out.removed {
                format!("removed {} (change #{} had created it)", out.path, id.0)
            } else {
                format!(
                    "restored {} to its content before change #{} ({} bytes)",
                    out.path, id.0, out.bytes
                )
            };
            let verb = if out.redo { "Redid" } else { "Undid" };
            format!(
                "{verb} change #{} ({} on {}): {what}. This undo is change #{}: {}.",
                id.0,
                change.tool,
                change.path,
                out.undo.0,
                redo_hint(out.undo, out.redo)
            )
        };
        // Only a write changes the file.
        let files = if out.already { Vec::new() } else { files };
        Ok(ToolResult::ok(text)
            .with_data(json!(out))
            .with_files_changed(files))
    }
}

/// How to take an undo back, in the call the model makes: `undo {"change_id": N}` (to redo the
/// change it undid, or, for a redo, to revert again).
fn redo_hint(undo: ChangeId, was_redo: bool) -> String {
    format!(
        "undo {{\"change_id\": {}}} to {}",
        undo.0,
        if was_redo { "revert again" } else { "redo" }
    )
}

/// The result of undoing a group: every file, and the undo to undo for a redo.
fn group_result(id: ChangeId, tool: &str, undone: &[UndoOutcome]) -> ToolResult {
    let redo = undone.iter().all(|o| o.redo);
    let verb = if redo { "Redid" } else { "Undid" };
    let lines: Vec<String> = undone
        .iter()
        .map(|o| {
            if o.already {
                format!(
                    "- {} was already as before change #{} (nothing written)",
                    o.path, o.undone.0
                )
            } else if o.removed {
                format!(
                    "- removed {} (change #{} had created it)",
                    o.path, o.undone.0
                )
            } else {
                format!(
                    "- restored {} to its content before change #{} ({} bytes)",
                    o.path, o.undone.0, o.bytes
                )
            }
        })
        .collect();
    // The first undo names the group: undoing it redoes them all.
    let first = undone.iter().map(|o| o.undo).min().unwrap_or(id);
    ToolResult::ok(format!(
        "{verb} change #{} and the {} other changes the same {tool} call made, together:\n{}\nThese undos are one group, changes #{}-#{}: {} (all of them).",
        id.0,
        undone.len() - 1,
        lines.join("\n"),
        first.0,
        undone.iter().map(|o| o.undo).max().unwrap_or(id).0,
        redo_hint(first, redo)
    ))
    .with_data(json!({"undo": first, "undone": id, "redo": redo, "files": undone}))
}

/// Undo change `id`, with every other change of its group (the files one call changed
/// together), as `session`'s call `call_id`: on this disk, or, when the files live with a
/// remote runner, as a compare-and-swap there (the journal and its planning stay here). The
/// session's view of each file follows the restored content.
pub async fn undo_change(
    records: &LocalRecords,
    id: ChangeId,
    session: &str,
    call_id: &str,
    force: bool,
) -> Result<Vec<UndoOutcome>, ToolError> {
    let undone = match records.remote() {
        None => records
            .journal
            .undo_group(&records.workspace, id, session, call_id, force)?,
        Some(remote) => {
            undo_group_remote(records, remote.as_ref(), id, session, call_id, force).await?
        }
    };
    for out in &undone {
        let rel = RelPath::from_normalized(&out.path);
        records.set_view(session, &rel, out.new_hash.as_deref());
    }
    Ok(undone)
}

/// A change checked for undoing on the remote runner, with what its file holds there now.
struct Checked {
    target: Change,
    now: FileState,
    current: Option<String>,
    verdict: UndoVerdict,
}

/// Whether `target` can be undone now, as [`toolyard_workspace::Journal::undo_check`] decides
/// from the file's state on the runner of the change's own session.
async fn check_remote(
    journal: &Journal,
    remote: &dyn RemoteFiles,
    target: Change,
    force: bool,
) -> Result<Checked, ToolError> {
    // Refuse what the journal alone refuses before asking the runner anything.
    if target.status != ChangeStatus::Done || (target.undone_by.is_some() && !force) {
        journal.undo_check(&target, target.new_hash.as_deref(), force)?;
    }
    let now = remote.read_state(&target.session, &target.path).await?;
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

/// [`undo_change`] for a remote runner's files, as [`toolyard_workspace::Journal::undo_group`]
/// does on this disk: every change of the group checked first (all or none), then each undone
/// under a compare-and-swap on the runner; if one fails, the files already restored are put
/// back. The undos form a group of their own, so undoing one redoes them all.
async fn undo_group_remote(
    records: &LocalRecords,
    remote: &dyn RemoteFiles,
    id: ChangeId,
    session: &str,
    call_id: &str,
    force: bool,
) -> Result<Vec<UndoOutcome>, ToolError> {
    let journal = &records.journal;
    let members = journal.group_of(id)?;
    let count = members.len();
    if count <= 1 {
        let target = journal.get(id)?;
        let checked = check_remote(journal, remote, target, force).await?;
        return Ok(vec![
            restore_remote(journal, remote, checked, session, call_id, None).await?,
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
        checked.push(
            check_remote(journal, remote, m, force)
                .await
                .map_err(whole)?,
        );
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
        match restore_remote(journal, remote, c, session, call_id, first).await {
            Ok(out) => {
                first.get_or_insert(out.undo);
                done.push(out);
            }
            Err(e) => {
                let left = put_back_remote(journal, remote, &done, session, call_id).await;
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

/// Revert the undos in `done` (newest first) on the runner; returns the paths that could not
/// be.
async fn put_back_remote(
    journal: &Journal,
    remote: &dyn RemoteFiles,
    done: &[UndoOutcome],
    session: &str,
    call_id: &str,
) -> Vec<String> {
    let mut left = Vec::new();
    let mut first = None;
    for out in done.iter().rev() {
        let again = match journal.get(out.undo) {
            Ok(target) => match check_remote(journal, remote, target, false).await {
                Ok(c) => restore_remote(journal, remote, c, session, call_id, first).await,
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        match again {
            Ok(o) => {
                first.get_or_insert(o.undo);
            }
            Err(e) => {
                tracing::warn!(change = %out.undo, error = %e, "could not put back a file of a failed group undo on the remote runner");
                left.push(out.path.clone());
            }
        }
    }
    left
}

/// Undo the checked change on the runner: journal the undo with the file's current content
/// (committed, joining `group`), then restore under a compare-and-swap on it.
async fn restore_remote(
    journal: &Journal,
    remote: &dyn RemoteFiles,
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
    let old = if target.old_kind() == toolyard_workspace::EntryKind::Dir {
        // A directory has no content: its entries are changes of their own.
        Some(Vec::new())
    } else {
        match journal.old_content(id)? {
            Some(reader) => {
                use std::io::Read;
                let mut bytes = Vec::new();
                reader
                    .take(MAX_REMOTE_FILE_BYTES + 1)
                    .read_to_end(&mut bytes)
                    .map_err(|e| {
                        ToolError::Io(format!("reading change {id} from the journal: {e}"))
                    })?;
                if bytes.len() as u64 > MAX_REMOTE_FILE_BYTES {
                    return Err(ToolError::Unavailable(format!(
                        "the content before change {id} is over {MAX_REMOTE_FILE_BYTES} bytes, more than an undo sends to a remote runner; restore {} with run_command instead",
                        target.path
                    )));
                }
                Some(bytes)
            }
            None => None,
        }
    };
    let pre = PreImage {
        content: now.content.as_deref(),
        mode: now.mode,
    };
    // A command's change (its modes tracked) may involve symlinks and directories.
    let kinds = target.new_mode.is_some()
        || now.state.is_some()
        || !matches!(
            target.old_kind(),
            toolyard_workspace::EntryKind::File | toolyard_workspace::EntryKind::Absent
        );
    let undo = if kinds {
        journal.record_undo_state(&target, session, call_id, group, &pre, now.state.as_deref())?
    } else {
        journal.record_undo_preimage(&target, session, call_id, group, &pre)?
    };
    let bytes = old.as_ref().map_or(0, |b| b.len() as u64);
    let removed = !target.existed;
    // Already as before the change (and with its mode): there is nothing to write.
    let restored = if verdict.already && (removed || now.mode == target.old_mode) {
        Ok(())
    } else if kinds {
        remote
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
        remote
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
        Ok(_) => {
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

/// The `undo` tool over the server's own records.
pub fn tools(records: Arc<LocalRecords>) -> Vec<Arc<dyn Tool>> {
    vec![Arc::new(Typed(Undo { records }))]
}
