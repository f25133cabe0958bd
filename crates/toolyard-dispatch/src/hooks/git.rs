//! `auto_commit`: what a mutating call changed, committed to the workspace's git repository,
//! never the user's own uncommitted work.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use toolyard_core::ToolResult;
use toolyard_exec::{EnvPolicy, ExecConfig};

use super::command::{Run, run_process, text, timed_out_message};
use super::{HookCall, HookReport, HookStatus, Hooks};

/// Bytes of git's stdout kept (a status of many paths); the rest is read and dropped.
const GIT_OUTPUT_LIMIT: usize = 16 << 20;

impl Hooks {
    /// The dirty paths of the repository (inside the workspace), and with `hash` their
    /// content now (without, every content is `None`: only the paths are wanted).
    pub(super) async fn snapshot(&self, hash: bool) -> Result<Snapshot, String> {
        let _guard = self.git_lock.lock().await;
        let repo = self.repo().await?;
        let dirty = repo.status(&self.root).await?;
        if !hash {
            return Ok(dirty.into_iter().map(|p| (p, None)).collect());
        }
        let top = repo.top.clone();
        tokio::task::spawn_blocking(move || {
            dirty
                .into_iter()
                .map(|p| {
                    let h = content_hash(&top, &p);
                    (p, h)
                })
                .collect()
        })
        .await
        .map_err(|e| format!("hashing the changed files failed: {e}"))
    }

    /// Commit what the call changed, leaving out every path that was dirty before it (`before`):
    /// those hold the user's uncommitted work, which a `toolyard:` commit must never take.
    pub(super) async fn auto_commit(
        &self,
        call: &HookCall,
        result: &mut ToolResult,
        reports_files: bool,
        before: Result<Snapshot, String>,
    ) -> HookReport {
        let report = HookReport::new("post_tools", "auto_commit", HookStatus::Ok);
        let before = match before {
            Ok(b) => b,
            Err(e) => return report.status_msg(HookStatus::Failed, e),
        };
        let _guard = self.git_lock.lock().await;
        let repo = match self.repo().await {
            Ok(r) => r,
            Err(e) => return report.status_msg(HookStatus::Failed, e),
        };
        let dirty = match repo.status(&self.root).await {
            Ok(d) => d,
            Err(e) => return report.status_msg(HookStatus::Failed, e),
        };
        let (paths, left_out): (Vec<Vec<u8>>, Vec<Vec<u8>>) = if reports_files {
            let wanted: HashSet<Vec<u8>> = result
                .files_changed
                .iter()
                .map(|f| [repo.prefix.as_slice(), f.as_bytes()].concat())
                .collect();
            dirty
                .into_iter()
                .filter(|p| wanted.contains(p))
                .partition(|p| !before.contains_key(p))
        } else {
            let top = repo.top.clone();
            let changed = tokio::task::spawn_blocking(move || {
                let mut fresh = Vec::new();
                let mut again = Vec::new();
                for p in dirty {
                    match before.get(&p) {
                        None => fresh.push(p),
                        Some(h) if content_hash(&top, &p) != *h => again.push(p),
                        // Dirty before and untouched by the call: not its change.
                        Some(_) => {}
                    }
                }
                (fresh, again)
            })
            .await;
            match changed {
                Ok((fresh, again)) => {
                    if result.files_changed.is_empty() {
                        result.files_changed = fresh
                            .iter()
                            .chain(&again)
                            .map(|p| repo.workspace_relative(p))
                            .collect();
                    }
                    (fresh, again)
                }
                Err(e) => {
                    return report.status_msg(
                        HookStatus::Failed,
                        format!("hashing the changed files failed: {e}"),
                    );
                }
            }
        };
        let mut report = report;
        report.left_out = left_out
            .iter()
            .map(|p| repo.workspace_relative(p))
            .collect();
        let left_note = left_out_message(&report.left_out);
        let files: Vec<String> = paths.iter().map(|p| repo.workspace_relative(p)).collect();
        if paths.is_empty() {
            let msg = match left_note {
                Some(note) => format!("{note}; nothing else to commit"),
                None => "no change to commit".into(),
            };
            return report.status_msg(HookStatus::Skipped, msg);
        }
        report.message = left_note;
        let message = self
            .message
            .replace("{tool}", &call.tool)
            .replace("{call_id}", &call.call_id)
            .replace("{session}", &call.session)
            .replace("{files}", &files.join(", "));
        let mut list = Vec::new();
        for p in &paths {
            list.extend_from_slice(p);
            list.push(0);
        }
        let add = ["add", "-A", "--pathspec-from-file=-", "--pathspec-file-nul"];
        if let Err(e) = repo.git(&add, list.clone()).await {
            return report.status_msg(HookStatus::Failed, e);
        }
        // `--only` (implied by the paths) leaves anything the user had staged out of the commit.
        let commit = [
            "commit",
            "--quiet",
            "-m",
            message.as_str(),
            "--pathspec-from-file=-",
            "--pathspec-file-nul",
        ];
        if let Err(e) = repo.git(&commit, list).await {
            return report.status_msg(HookStatus::Failed, e);
        }
        let head = repo
            .git(&["rev-parse", "HEAD"], Vec::new())
            .await
            .map(|o| o.trim().to_string())
            .ok();
        tracing::info!(tool = %call.tool, call = %call.call_id, commit = ?head, files = files.len(), left_out = report.left_out.len(), "auto-committed");
        report.commit = head;
        report.files = files;
        report
    }

    /// The git repository holding the workspace, checked for configuration that would make
    /// git run programs the model could have planted.
    async fn repo(&self) -> Result<Repo, String> {
        let probe = Repo {
            top: self.root.clone(),
            prefix: Vec::new(),
            timeout: self.git_timeout,
        };
        let out = probe
            .git(&["rev-parse", "--show-toplevel", "--show-prefix"], Vec::new())
            .await
            .map_err(|e| {
                format!(
                    "the workspace {} is not in a git repository, so nothing was committed (run `git init` there, or turn auto_commit off): {e}",
                    self.root.display()
                )
            })?;
        let mut lines = out.lines();
        let repo = Repo {
            top: PathBuf::from(lines.next().unwrap_or_default()),
            prefix: lines.next().unwrap_or_default().as_bytes().to_vec(),
            timeout: self.git_timeout,
        };
        if !self.trust_repo_config {
            let keys = repo
                .git(
                    &["config", "--local", "--includes", "--name-only", "--list"],
                    Vec::new(),
                )
                .await
                .unwrap_or_default();
            if let Some(key) = keys.lines().find(|k| runs_a_program(k)) {
                return Err(format!(
                    "the repository's own config sets `{key}`, which makes git run a program; auto_commit runs git outside the sandbox, so it refuses (remove the setting, or set trust_repo_config = true in [hooks.post_tools] if you wrote it)"
                ));
            }
        }
        Ok(repo)
    }
}

/// Git configuration keys (lower case, as `git config --list` prints them) that make git
/// status / add / commit run a program.
fn runs_a_program(key: &str) -> bool {
    // Hooks, fsmonitor and signing are switched off on the command line (`Repo::run`); a
    // filter driver (run by status and add on every file its attributes name) cannot be.
    toolyard_exec::protect::git_program(key, "") == Some(toolyard_exec::protect::GitProgram::Filter)
}

/// What auto-commit says of the files it left out, if any.
fn left_out_message(left_out: &[String]) -> Option<String> {
    let (had, them, stays) = match left_out.len() {
        0 => return None,
        1 => ("it had", "it", "it stays"),
        _ => ("they had", "them", "they stay"),
    };
    Some(format!(
        "left out {}: {had} uncommitted changes before the call, and committing {them} would \
         take the user's own edits too; {stays} uncommitted",
        left_out.join(", ")
    ))
}

/// The content of `top/path` now, for comparing before and after a command: the bytes' hash
/// for a file, the target for a symlink, `None` when it does not exist.
fn content_hash(top: &Path, path: &[u8]) -> Option<String> {
    let full = top.join(OsStr::from_bytes(path));
    let meta = std::fs::symlink_metadata(&full).ok()?;
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(&full).ok()?;
        return Some(format!("link:{}", target.display()));
    }
    if !meta.is_file() {
        // A FIFO or device would block or be endless; its type and size are what can change.
        return Some(format!("other:{:?}:{}", meta.file_type(), meta.len()));
    }
    let file = std::fs::File::open(&full).ok()?;
    toolyard_workspace::hash_reader(file).ok()
}

/// Dirty repository-relative paths and their content (see [`content_hash`]) before a call.
pub(super) type Snapshot = HashMap<Vec<u8>, Option<String>>;

/// A git repository, and how to run git in it.
struct Repo {
    top: PathBuf,
    /// The workspace root's path inside the repository, `/`-terminated (empty at the top).
    prefix: Vec<u8>,
    timeout: Duration,
}

impl Repo {
    /// Run `git args` in `cwd` with `stdin`; its stdout (bytes: paths may not be UTF-8), or an
    /// error naming the step.
    async fn run(&self, cwd: &Path, args: &[&str], stdin: Vec<u8>) -> Result<Vec<u8>, String> {
        // Neither a hook nor an fsmonitor the repository names may run outside the sandbox;
        // nothing may prompt; pathspecs are paths, not patterns.
        let fixed = [
            "git",
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.fsmonitor=false",
            "-c",
            "commit.gpgSign=false",
            "--no-optional-locks",
            "--literal-pathspecs",
        ];
        let command = fixed
            .iter()
            .chain(args)
            .map(|a| sh_quote(a))
            .collect::<Vec<_>>()
            .join(" ");
        let env = EnvPolicy::from_config(&ExecConfig {
            scrub: Some(
                ["GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"]
                    .map(String::from)
                    .to_vec(),
            ),
            keep: Vec::new(),
            set: BTreeMap::from([("GIT_TERMINAL_PROMPT".to_string(), "0".to_string())]),
            ..ExecConfig::default()
        });
        let step = args.first().copied().unwrap_or("git");
        let req = Run {
            command,
            cwd,
            env,
            input: stdin,
            timeout: self.timeout,
            cancel: None,
            stdout_limit: GIT_OUTPUT_LIMIT,
        };
        let out = run_process(req)
            .await
            .map_err(|e| format!("cannot run git: {e}"))?;
        if out.timed_out {
            return Err(format!("git {step} {}", timed_out_message(self.timeout)));
        }
        if out.exit_code == Some(0) {
            return Ok(out.stdout);
        }
        let why = text(&out.stderr);
        let why = if why.is_empty() {
            text(&out.stdout)
        } else {
            why
        };
        Err(format!("git {step} failed: {why}"))
    }

    /// Run `git args` at the top of the repository; its stdout as text.
    async fn git(&self, args: &[&str], stdin: Vec<u8>) -> Result<String, String> {
        let out = self.run(&self.top, args, stdin).await?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// Repository-relative paths under `dir` that differ from HEAD or are untracked (not
    /// ignored), one per file.
    async fn status(&self, dir: &Path) -> Result<Vec<Vec<u8>>, String> {
        let args = [
            "status",
            "--porcelain=v1",
            "-z",
            "--untracked-files=all",
            "--",
            ".",
        ];
        let out = self.run(dir, &args, Vec::new()).await?;
        let mut paths = Vec::new();
        let mut entries = out.split(|b| *b == 0).filter(|e| !e.is_empty());
        while let Some(e) = entries.next() {
            if e.len() < 4 {
                continue;
            }
            paths.push(e[3..].to_vec());
            // A rename or copy: the next entry is its source, which changed too.
            if matches!(e[0], b'R' | b'C')
                && let Some(src) = entries.next()
            {
                paths.push(src.to_vec());
            }
        }
        Ok(paths)
    }

    /// A repository-relative path as the workspace names it.
    fn workspace_relative(&self, path: &[u8]) -> String {
        let rel = path.strip_prefix(self.prefix.as_slice()).unwrap_or(path);
        String::from_utf8_lossy(rel).into_owned()
    }
}

/// `s` as one word for `sh`.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}
