//! File tools: `read_file`, `write_file`, `edit_file`, and the one mutation path they share.
//!
//! Every write goes the same way: the read ledger must have seen the file's current content
//! (for files that exist), the journal records the previous content and commits, the file is
//! replaced atomically only if it still has the content the ledger saw, and the ledger then
//! takes the new content as this session's view.

mod edit;
pub(crate) mod omission;
mod read;
mod write;

use std::sync::Arc;

use toolyard_core::{Tool, ToolContext, ToolError, ToolResult, Typed};
use toolyard_workspace::{Expect, RelPath, WriteOutcome, hash_bytes};

use crate::ToolEnv;

pub use edit::{
    EditFile, EditFileArgs, EditFileCall, EditOp, Replacement, apply_edit, lines_before,
};
pub(crate) use edit::{
    Frame, Indent, MixedIndent, Shift, capitalized, indent_of, indent_relation, judge_frame,
    nearest_windows, numbered_lines, shared_lines, span, ws_words,
};
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

/// Whether `e` is a read-before-write refusal (never read, or changed since the read).
pub(crate) fn is_read_refusal(e: &ToolError) -> bool {
    matches!(e, ToolError::NotRead { .. } | ToolError::StaleRead { .. })
}

/// Where a refused write was aimed, so the refusal can show the lines there.
pub(crate) enum Aim<'a> {
    /// Edits: the old texts they look for.
    Texts(&'a [&'a str]),
    /// A whole-file write: the file's head.
    Head,
}

/// Lines shown around each place a refused edit aims at, before and after it.
const AIM_CONTEXT: usize = 3;
/// Most lines shown of one place.
const AIM_MAX_LINES: usize = 40;
/// Most places shown.
const AIM_MAX_PLACES: usize = 3;
/// Most bytes of lines shown in all.
const AIM_MAX_BYTES: usize = 16 * 1024;

/// The line ranges (0-based first, count) a refused edit aimed at in `text`: where each old
/// text occurs, or the place most like it, or else the file's head.
fn aimed_windows(text: &str, aim: &Aim<'_>) -> Vec<(usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found: Vec<(usize, usize)> = Vec::new();
    if let Aim::Texts(olds) = aim {
        for old in olds.iter().filter(|o| !o.trim().is_empty()) {
            let crlf = old.replace("\r\n", "\n").replace('\n', "\r\n");
            let at = text.find(old).or_else(|| text.find(&crlf));
            let windows = match at {
                Some(p) => {
                    let first = text[..p].matches('\n').count();
                    let body = old.trim_end_matches(['\n', '\r']);
                    vec![(first, first + body.matches('\n').count())]
                }
                // Not there as sent: the places most like it (the model may mean either).
                None => {
                    let old_lines: Vec<&str> = old.lines().collect();
                    nearest_windows(&lines, &old_lines, 2)
                }
            };
            for (first, last) in windows {
                let from = first.saturating_sub(AIM_CONTEXT);
                let to = (last + AIM_CONTEXT + 1)
                    .min(lines.len())
                    .min(from + AIM_MAX_LINES);
                found.push((from, to.saturating_sub(from).max(1)));
            }
        }
    }
    if found.is_empty() {
        return vec![(0, AIM_MAX_LINES)];
    }
    found.sort_unstable();
    let mut merged: Vec<(usize, usize)> = Vec::new();
    for (from, n) in found {
        match merged.last_mut() {
            Some(last) if from <= last.0 + last.1 => {
                last.1 = (from + n).max(last.0 + last.1) - last.0;
            }
            _ => merged.push((from, n)),
        }
    }
    merged.truncate(AIM_MAX_PLACES);
    merged
}

/// The answer to a write refused by the read ledger (`e`, from [`expect_for_write`]): the
/// refusal, with the file's current numbered lines where the change was aimed. For an edit the
/// lines shown count as this session's read of the file (so the retry is one call, checked
/// against what the model has now seen); a whole-file write shows the head but still needs a
/// read, since the write replaces lines the model has not seen.
pub(crate) async fn refuse_unread(
    env: &ToolEnv,
    ctx: &ToolContext,
    rel: &RelPath,
    content: &[u8],
    aim: Aim<'_>,
    e: ToolError,
) -> Result<ToolResult, ToolError> {
    let text = String::from_utf8_lossy(content);
    let total = text.lines().count();
    let edit = matches!(aim, Aim::Texts(_));
    let mut shown = String::new();
    let mut ranges = Vec::new();
    for (from, n) in aimed_windows(&text, &aim) {
        let w = read::read_window(
            content,
            from + 1,
            n,
            AIM_MAX_BYTES.saturating_sub(shown.len()),
        );
        if w.last < w.first {
            break;
        }
        if !shown.is_empty() {
            shown.push_str("...\n");
        }
        shown.push_str(&w.text);
        if !w.text.ends_with('\n') {
            shown.push('\n');
        }
        ranges.push(span(w.first, w.last));
    }
    let why = match &e {
        ToolError::StaleRead { .. } => {
            format!("{rel} changed on disk since this session last read it")
        }
        _ => format!("{rel} has not been read in this session"),
    };
    let binary = content_inspector::inspect(&content[..content.len().min(8192)]).is_binary();
    let msg = if binary {
        format!(
            "{why}, so nothing was {}. It is a binary file ({} bytes); {}",
            if edit { "changed" } else { "written" },
            content.len(),
            if edit {
                "this counts as reading it."
            } else {
                "call read_file on it, then retry."
            }
        )
    } else if total == 0 {
        format!(
            "{why}, so nothing was changed. It is empty now{}",
            if edit {
                "; this counts as reading it, so write it with write_file."
            } else {
                "; call read_file on it, then retry."
            }
        )
    } else if edit {
        format!(
            "{why}, so nothing was changed. Its current lines where the edit aims are below; \
             this counts as reading it (no read_file call is needed), so check the edit against \
             them and send it again, changed to fit them if needed.\n{shown}[{rel} has {total} \
             lines; shown: {}]",
            ranges.join(", ")
        )
    } else {
        format!(
            "{why}, so nothing was written: replacing a file needs a read of it first, in this \
             session. Its first lines are below; call read_file on it (or read the rest), then \
             retry.\n{shown}[{rel} has {total} lines; shown: {}]",
            ranges.join(", ")
        )
    };
    if edit {
        let hash = hash_bytes(content);
        env.records.record_read(&ctx.session_id, rel, &hash).await?;
    }
    Ok(ToolResult::failure(e.kind(), msg))
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
    // Every edit and write tool of every dialect comes through here (a patch checks its
    // files before writing any): refuse a placeholder that would delete code.
    if !matches!(expect, Expect::Missing) && bytes.len() <= omission::MAX_CHECKED {
        let small = env
            .workspace
            .metadata(rel)?
            .is_some_and(|m| m.is_file() && m.len() <= omission::MAX_CHECKED as u64);
        if small {
            omission::check(rel.as_str(), &env.workspace.read(rel)?, bytes)?;
        }
    }
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
