//! `toolyard workspace` (a remote runner's files in and out) and `toolyard artifacts`.

use std::process::ExitCode;

use anyhow::{Result, bail};

use crate::print::{json_printable, printable};
use crate::{WorkspaceArgs, WorkspaceCmd, dispatcher, workspace_root};

pub(crate) async fn workspace(cmd: WorkspaceCmd) -> Result<ExitCode> {
    match cmd {
        WorkspaceCmd::Import(args) => {
            let d = dispatcher(&args.common)?;
            let limit = std::time::Duration::from_secs(args.timeout_s);
            let done = match (&args.source.from_git, &args.source.from_dir, &args.rev) {
                (Some(url), _, Some(rev)) => d
                    .hydrate_git(&args.session, url, rev, limit)
                    .await
                    .map(|head| format!("checked out {head} of {url} in the runner's workspace")),
                (_, Some(dir), _) => d.hydrate_dir(&args.session, dir, limit).await.map(|n| {
                    format!(
                        "unpacked {n} entries of {} in the runner's workspace",
                        dir.display()
                    )
                }),
                _ => bail!("give --from-git URL --rev REV, or --from-dir DIR"),
            };
            match done {
                Ok(text) => {
                    eprintln!("toolyard: {}", printable(&text));
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    eprintln!("toolyard: {}", printable(&e.to_string()));
                    Ok(ExitCode::from(1))
                }
            }
        }
        WorkspaceCmd::Export(args) => {
            let d = dispatcher(&args.common)?;
            let limit = std::time::Duration::from_secs(args.timeout_s);
            match d.export(&args.session, args.base.as_deref(), limit).await {
                Ok(export) => {
                    use std::io::Write as _;
                    let mut out = std::io::stdout().lock();
                    out.write_all(&export.patch)?;
                    out.flush()?;
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    eprintln!("toolyard: {}", printable(&e.to_string()));
                    Ok(ExitCode::from(1))
                }
            }
        }
    }
}

pub(crate) fn artifacts(args: WorkspaceArgs) -> Result<ExitCode> {
    let ws = toolyard_workspace::Workspace::open(&workspace_root(args.workspace.as_deref())?)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let list =
        toolyard_tools::artifacts::list_artifacts(&ws).map_err(|e| anyhow::anyhow!("{e}"))?;
    if list.is_empty() {
        out!("no artifacts in {}", ws.root().display());
    }
    for a in list {
        out!("{}", json_printable(serde_json::to_string(&a)?));
    }
    Ok(ExitCode::SUCCESS)
}
