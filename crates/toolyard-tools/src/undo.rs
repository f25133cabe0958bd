//! `undo`: revert a journaled change (the session's last one by default). An undo is itself
//! journaled, so undoing it redoes the change.

use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use toolyard_core::{
    Annotations, Tool, ToolContext, ToolError, ToolInfo, ToolResult, Typed, TypedTool,
};
use toolyard_records::{ChangeId, LocalRecords, UndoOutcome};

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

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new(
            "undo",
            "Undo a change made by write_file, edit_file or undo: restores the exact previous bytes \
         and mode, or removes a file the change created. The changes one call made to several \
         files (an apply_patch) are undone together. Without change_id, undoes this session's \
         last change; call it again to go further back. An undo is a change too: undo it (by \
         its change_id) to redo. Refuses if a file changed since, unless force is true; a file \
         already back to its earlier content is only marked undone.",
            Annotations::MUTATING,
        )
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
        let undone = self
            .records
            .undo(id, &ctx.session_id, &ctx.call_id, args.force)
            .await?;
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

/// The `undo` tool over the server's own records.
pub fn tools(records: Arc<LocalRecords>) -> Vec<Arc<dyn Tool>> {
    vec![Arc::new(Typed(Undo { records }))]
}
