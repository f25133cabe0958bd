//! File tools: `read_file`, `write_file`, `edit_file`, and the one mutation path they share.
//!
//! Every write goes the same way: the read ledger must have seen the file's current content
//! (for files that exist), the journal records the previous content and commits, the file is
//! replaced atomically only if it still has the content the ledger saw, and the ledger then
//! takes the new content as this session's view.

mod edit;
mod read;
mod write;

use std::sync::Arc;

use toolyard_core::{Tool, ToolContext, ToolError, Typed};
use toolyard_workspace::{Expect, RelPath, WriteOutcome, hash_bytes};

use crate::ToolEnv;

pub use edit::{EditFile, EditFileArgs, Replacement, apply_edit, lines_before};
pub(crate) use edit::{nearest_windows, reindent_like};
pub use read::{ReadFile, ReadFileArgs, read_media, read_window};
pub use write::{WriteFile, WriteFileArgs};

/// The file tools of the `loopr` dialect.
pub fn tools(env: Arc<ToolEnv>) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(Typed(ReadFile::new(env.clone()))),
        Arc::new(Typed(WriteFile::new(env.clone()))),
        Arc::new(Typed(EditFile::new(env))),
    ]
}

/// Read the file at the path argument `path` whole and record the read in the session's ledger,
/// so a later write or edit of it is allowed.
pub async fn read_tracked(
    env: &ToolEnv,
    ctx: &ToolContext,
    path: &str,
) -> Result<(RelPath, Vec<u8>), ToolError> {
    let rel = env.workspace.locate(path, &ctx.cwd)?;
    let content = env.workspace.read(&rel)?;
    let hash = hash_bytes(&content);
    env.records
        .record_read(&ctx.session_id, &rel, &hash)
        .await?;
    Ok((rel, content))
}

/// Check that this session may overwrite `rel` (whose current hash is `current`, `None` when it
/// does not exist) and return the compare-and-swap expectation for the write.
pub async fn expect_for_write(
    env: &ToolEnv,
    ctx: &ToolContext,
    rel: &RelPath,
    current: Option<&str>,
) -> Result<Expect, ToolError> {
    match current {
        None => Ok(Expect::Missing),
        Some(hash) => {
            env.records.check_write(&ctx.session_id, rel, hash).await?;
            Ok(Expect::Hash(hash.to_string()))
        }
    }
}

/// Journal, then atomically write `bytes` to `rel` if it still matches `expect`, then update
/// the ledger. The single path every mutating file tool takes.
pub async fn commit_write(
    env: &ToolEnv,
    ctx: &ToolContext,
    tool: &str,
    rel: &RelPath,
    bytes: &[u8],
    expect: &Expect,
) -> Result<WriteOutcome, ToolError> {
    commit_write_in(env, ctx, tool, rel, bytes, expect, None)
        .await
        .map(|(outcome, _)| outcome)
}

/// [`commit_write`] for a call that changes several files: the change joins the journal group
/// of change `group` (the call's first change), so one undo reverts them all. Returns the
/// outcome and the change's id.
pub async fn commit_write_in(
    env: &ToolEnv,
    ctx: &ToolContext,
    tool: &str,
    rel: &RelPath,
    bytes: &[u8],
    expect: &Expect,
    group: Option<i64>,
) -> Result<(WriteOutcome, i64), ToolError> {
    let new_hash = hash_bytes(bytes);
    // Write-ahead, overlapped: the new content goes into a nameless file on another thread
    // while the journal commits the previous content; only the commit, after both, gives it a
    // name and swaps it in, so a crash at any point leaves nothing no journal entry accounts
    // for. Where the file system has no nameless files, the journal commits first.
    let ws = env.workspace.clone();
    let (staged_rel, content) = (rel.clone(), bytes.to_vec());
    let staging = tokio::task::spawn_blocking(move || {
        ws.stage_anonymous(&staged_rel, &mut &content[..], None)
    });
    let begun = env
        .records
        .journal_begin_grouped(&ctx.session_id, &ctx.call_id, tool, rel, &new_hash, group)
        .await;
    let staged = staging
        .await
        .map_err(|e| ToolError::Io(format!("staging {rel} failed: {e}")))
        .and_then(|r| r);
    let change = begun?;
    let written = match staged {
        Ok(Some(staged)) => Ok(staged),
        Ok(None) => env.workspace.stage(rel, &mut &bytes[..], None),
        Err(e) => Err(e),
    }
    .and_then(|s| s.commit(&env.workspace, expect));
    match written {
        Ok(outcome) => {
            env.records.journal_end(change, true).await?;
            env.records
                .record_write(&ctx.session_id, &outcome.path, &new_hash)
                .await?;
            Ok((outcome, change))
        }
        Err(e) => {
            // The file was not touched; the entry only records the attempt.
            if let Err(mark) = env.records.journal_end(change, false).await {
                tracing::warn!(%mark, "could not mark a failed change in the journal");
            }
            Err(e)
        }
    }
}
