//! `undo`: revert a journaled change (the session's last one by default). An undo is itself
//! journaled, so undoing it redoes the change.

use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use toolyard_core::{Annotations, Tool, ToolContext, ToolError, ToolResult, Typed, TypedTool};
use toolyard_workspace::{ChangeId, PreImage, RelPath, UndoOutcome};

use crate::records::LocalRecords;

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
         last change; call it again to go further back. Refuses if a file changed since, \
         unless force is true."
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
        let what = if out.removed {
            format!("removed {} (change #{} had created it)", out.path, id.0)
        } else {
            format!(
                "restored {} to its content before change #{} ({} bytes)",
                out.path, id.0, out.bytes
            )
        };
        let verb = if out.redo { "Redid" } else { "Undid" };
        Ok(ToolResult::ok(format!(
            "{verb} change #{} ({} on {}): {what}. This undo is change #{}; undo it to {}.",
            id.0,
            change.tool,
            change.path,
            out.undo.0,
            if out.redo { "revert again" } else { "redo" }
        ))
        .with_data(json!(out))
        .with_files_changed(files))
    }
}

/// The result of undoing a group: every file, and the undo to undo for a redo.
fn group_result(id: ChangeId, tool: &str, undone: &[UndoOutcome]) -> ToolResult {
    let redo = undone.iter().all(|o| o.redo);
    let verb = if redo { "Redid" } else { "Undid" };
    let lines: Vec<String> = undone
        .iter()
        .map(|o| {
            if o.removed {
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
        "{verb} change #{} and the {} other changes the same {tool} call made, together:\n{}\nThese undos are one group, changes #{}-#{}; undo #{} to {}.",
        id.0,
        undone.len() - 1,
        lines.join("\n"),
        first.0,
        undone.iter().map(|o| o.undo).max().unwrap_or(id).0,
        first.0,
        if redo { "revert again" } else { "redo" }
    ))
    .with_data(json!({"undo": first, "undone": id, "redo": redo, "files": undone}))
}

/// The most bytes an undo sends to a remote runner at once (the journal holds at most a
/// remote pre-image's worth for a remote file; a larger local entry cannot cross the link).
const MAX_REMOTE_RESTORE: u64 = 16 << 20;

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
            let members = records.journal.group_of(id)?;
            if members.len() > 1 {
                return Err(ToolError::Unavailable(format!(
                    "change {id} is one of {} changes one {} call made together, and undoing such a group on a remote runner is not supported yet; restore the files with write_file or edit_file (`toolyard log` lists the changes)",
                    members.len(),
                    members[0].tool
                )));
            }
            vec![undo_remote(records, remote.as_ref(), id, session, call_id, force).await?]
        }
    };
    for out in &undone {
        let rel = RelPath::from_normalized(&out.path);
        records.set_view(session, &rel, out.new_hash.as_deref());
    }
    Ok(undone)
}

/// [`undo_change`] for a remote runner's file: read its current state there, check it as a
/// local undo does, journal the undo with that content (committed), then restore under a
/// compare-and-swap on it. The runner of the change's own session holds the file.
async fn undo_remote(
    records: &LocalRecords,
    remote: &dyn crate::remote::RemoteFiles,
    id: ChangeId,
    session: &str,
    call_id: &str,
    force: bool,
) -> Result<UndoOutcome, ToolError> {
    let journal = &records.journal;
    let target = journal.get(id)?;
    // Refuse what the journal alone refuses before asking the runner anything.
    if target.status != toolyard_workspace::ChangeStatus::Done
        || (target.undone_by.is_some() && !force)
    {
        journal.undo_check(&target, target.new_hash.as_deref(), force)?;
    }
    let now = remote.read_state(&target.session, &target.path).await?;
    let current = now.content.as_deref().map(toolyard_workspace::hash_bytes);
    let forced = journal.undo_check(&target, current.as_deref(), force)?;
    let old = match journal.old_content(id)? {
        Some(reader) => {
            use std::io::Read;
            let mut bytes = Vec::new();
            reader
                .take(MAX_REMOTE_RESTORE + 1)
                .read_to_end(&mut bytes)
                .map_err(|e| ToolError::Io(format!("reading change {id} from the journal: {e}")))?;
            if bytes.len() as u64 > MAX_REMOTE_RESTORE {
                return Err(ToolError::Unavailable(format!(
                    "the content before change {id} is over {MAX_REMOTE_RESTORE} bytes, more than an undo sends to a remote runner; restore {} with run_command instead",
                    target.path
                )));
            }
            Some(bytes)
        }
        None => None,
    };
    let pre = PreImage {
        content: now.content.as_deref(),
        mode: now.mode,
    };
    let undo = journal.record_undo_preimage(&target, session, call_id, &pre)?;
    let bytes = old.as_ref().map_or(0, |b| b.len() as u64);
    let removed = old.is_none();
    let restored = remote
        .restore(
            &target.session,
            undo.0,
            &target.path,
            current.as_deref(),
            old,
            target.old_mode,
        )
        .await;
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
                forced,
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
