//! `toolyard log` and `toolyard undo`: the journal from the command line.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};
use toolyard_dialects::Dialect;

use crate::print::{json_printable, printable};
use crate::{Common, LogArgs, UndoArgs, is_remote, load_config, runtime, workspace_root};

/// The workspace's journal, with interrupted writes settled first when the files are on this
/// disk (with a `remote` link they are settled by the runner's next start).
fn journal(
    ws: Option<&Path>,
    remote: bool,
) -> Result<(toolyard_workspace::Workspace, toolyard_records::Journal)> {
    let workspace = toolyard_workspace::Workspace::open(&workspace_root(ws)?)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let state = toolyard_workspace::StateDir::for_workspace(workspace.root())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let journal = toolyard_records::Journal::open(&state).map_err(|e| anyhow::anyhow!("{e}"))?;
    if !remote {
        journal
            .recover(&workspace)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    Ok((workspace, journal))
}

pub(crate) fn log(args: LogArgs) -> Result<ExitCode> {
    let remote = is_remote(&load_config(args.catalog.as_deref())?.1);
    let (ws, journal) = journal(args.ws.workspace.as_deref(), remote)?;
    let changes = journal
        .list(&toolyard_records::ChangeFilter {
            session: args.session.clone(),
            path: args.path,
            status: None,
            limit: Some(args.limit),
        })
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    if args.json {
        out!(
            "{}",
            json_printable(serde_json::to_string_pretty(&changes)?)
        );
        return Ok(ExitCode::SUCCESS);
    }
    out!("changes in the workspace {}:", ws.root().display());
    if changes.is_empty() {
        out!("none recorded");
    }
    for c in changes {
        use toolyard_records::EntryKind;
        let mut what = match (&c.undoes, c.existed, &c.new_hash) {
            (Some(u), _, _) => format!("undo of #{}", u.0),
            (None, false, _) => "created".to_string(),
            (None, true, None) => "removed".to_string(),
            (None, true, Some(_)) if c.old_hash == c.new_hash => "mode".to_string(),
            (None, true, Some(_)) => "modified".to_string(),
        };
        let kind = match c.new_kind() {
            EntryKind::Absent => c.old_kind(),
            k => k,
        };
        if matches!(kind, EntryKind::Symlink | EntryKind::Dir) {
            what.push_str(&format!(" ({})", kind.noun()));
        }
        let mut undone = c
            .undone_by
            .map(|u| format!(" (undone by #{})", u.0))
            .unwrap_or_default();
        if let Some(g) = c.group {
            undone.push_str(&format!(" (group #{}: undone together)", g.0));
        }
        out!(
            "#{:<5} {} {:<8} {:<12} {:<10} {} [{}]{}",
            c.id.0,
            c.time,
            c.status,
            c.tool,
            what,
            c.path,
            c.session,
            undone
        );
    }
    // What commands changed, with what they changed out of scope (not undoable, and why).
    let commands = journal
        .commands(args.session.as_deref(), args.limit)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    if !commands.is_empty() {
        out!("commands that changed files:");
    }
    for c in commands {
        let undo = match c.first {
            Some(first) => format!(
                "{} change(s) from #{}, undone together (`toolyard undo {}`)",
                c.changes, first.0, first.0
            ),
            None => "nothing undoable".to_string(),
        };
        out!(
            "{} {} [{}] {}: {}",
            c.time,
            c.tool,
            c.session,
            printable(&c.command),
            undo
        );
        for s in &c.skipped {
            out!("    not undoable: {} ({})", printable(&s.path), s.reason);
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn undo(args: UndoArgs) -> Result<ExitCode> {
    let remote = is_remote(&load_config(args.catalog.as_deref())?.1);
    let (ws, journal) = journal(args.ws.workspace.as_deref(), remote)?;
    let id = match (args.change_id, &args.session) {
        (Some(id), _) => toolyard_records::ChangeId(id),
        (None, Some(s)) => journal
            .last_of_session(s)
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .map(|c| c.id)
            .with_context(|| {
                format!(
                    "the session {s} has no change left to undo in the workspace {}",
                    ws.root().display()
                )
            })?,
        (None, None) => journal
            .list(&toolyard_records::ChangeFilter {
                status: Some(toolyard_records::ChangeStatus::Done),
                ..Default::default()
            })
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .into_iter()
            .find(|c| c.undone_by.is_none() && c.undoes.is_none())
            .map(|c| c.id)
            .with_context(|| {
                format!(
                    "no change left to undo in the workspace {}",
                    ws.root().display()
                )
            })?,
    };
    // The one undo: the changes one call made together (an apply_patch) are undone together,
    // on this disk or, when the runner holds the files, through a dispatcher, which reaches it.
    // Lives while the undo runs: the records reach the runner through its router.
    let dispatcher;
    let records = if remote {
        drop(journal);
        let common = Common {
            workspace: args.ws.workspace.clone(),
            catalog: args.catalog.clone(),
            dialect: Dialect::Loopr,
            profile: toolyard_core::ALL_PROFILE.into(),
            inline: false,
        };
        dispatcher = crate::dispatcher(&common)?;
        dispatcher
            .env()
            .local
            .clone()
            .context("internal: the server keeps no journal")?
    } else {
        let state = toolyard_workspace::StateDir::for_workspace(ws.root())
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let ledger = toolyard_records::Ledger::open(&state).map_err(|e| anyhow::anyhow!("{e}"))?;
        std::sync::Arc::new(toolyard_records::LocalRecords::new(
            std::sync::Arc::new(ws),
            ledger,
            journal,
        ))
    };
    let undone = runtime()?.block_on(records.undo(id, "cli", "cli-undo", args.force));
    match undone {
        Ok(undone) => {
            for out in &undone {
                if out.already {
                    out!(
                        "undid change #{}: {} was already as before it, so nothing was written (this undo is change #{}; there is nothing to redo)",
                        out.undone.0,
                        out.path,
                        out.undo.0
                    );
                    continue;
                }
                let what = if out.removed { "removed" } else { "restored" };
                out!(
                    "undid change #{}: {what} {} (this undo is change #{}; `toolyard undo {}` redoes it)",
                    out.undone.0,
                    out.path,
                    out.undo.0,
                    out.undo.0
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("toolyard: {}", printable(&e.to_string()));
            Ok(ExitCode::from(1))
        }
    }
}
