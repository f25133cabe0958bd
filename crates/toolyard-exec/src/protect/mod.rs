//! Protected paths inside the workspace: files a sandboxed command could use to plant code that
//! a later, unsandboxed program runs (git hooks and config, editor and agent configuration,
//! shell start-up files).
//!
//! Around every command: [`Protected::snapshot`] before, [`Snapshot::restore`] after. The caller
//! also bind-mounts [`Protected::existing`] read-only where it can, and the file tools refuse
//! writes to [`Protected::relative`]. Every file-system step here goes through directory file
//! descriptors opened with `O_NOFOLLOW`: a command may have swapped a protected directory for a
//! symlink to `/etc` or `~`, and nothing here may follow it.
//!
//! ```no_run
//! use std::path::Path;
//! use toolyard_exec::protect::{Protected, describe};
//!
//! let list: Vec<String> = toolyard_exec::protect::DEFAULT_PROTECTED.iter().map(|s| s.to_string()).collect();
//! let protected = Protected::new(Path::new("/work/project"), &list, &[]);
//! let before = protected.snapshot();
//! // ... run the command ...
//! let undone = before.restore(Path::new("/state/quarantine"));
//! if !undone.is_empty() {
//!     println!("{}", describe(&undone));
//! }
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{CStr, OsStr, OsString};
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use nix::errno::Errno;
use nix::fcntl::AtFlags;
use nix::fcntl::{OFlag, openat, readlinkat, renameat};
use nix::sys::stat::{FileStat, Mode, fchmod, fstat, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, symlinkat, unlinkat};

use serde::{Deserialize, Serialize};

use crate::sandbox::SandboxConfig;
use fs::{
    beneath_or_at, gitfile_target, inside, join_rel, kind, lstat_at, normalize, open_root,
    walk_parent,
};
use gitconfig::config_programs;
use snapshot::{Kind, State, capture_paths, is_held};

mod accepted;
mod fs;
mod gitconfig;
mod restore;
mod snapshot;
pub use accepted::Hold;
pub use gitconfig::{GitProgram, git_program, key_runs_program};

/// Workspace-relative paths protected by default: what git, editors, coding agents and shells
/// run or load from a workspace (shell start-up files matter when the workspace is a home).
pub const DEFAULT_PROTECTED: &[&str] = &[
    ".git/hooks",
    ".git/config",
    ".gitmodules",
    // Hook managers: what they make git run (husky v9 keeps the user's hooks here).
    ".husky",
    ".pre-commit-config.yaml",
    ".pre-commit-hooks.yaml",
    "lefthook.yml",
    "lefthook.yaml",
    ".lefthook.yml",
    ".lefthook.yaml",
    "lefthook-local.yml",
    ".lefthook",
    ".mcp.json",
    ".vscode",
    ".idea",
    ".claude",
    ".codex",
    ".cursor",
    ".gemini",
    ".toolyard",
    ".envrc",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".config/fish",
];

/// Paths beneath a protected one that Toolyard's own tools write (artifacts are data, not
/// code): neither snapshotted nor restored, and left writable for the file tools.
pub const UNPROTECTED: &[&str] = &[".toolyard/artifacts"];

/// The programs of a project's npm packages: protected when a hooks path is set (husky runs
/// hooks with it first on `PATH`), but never held read-only, since package managers write it.
/// A link into a package in `node_modules` (what `npm install` makes) is kept; anything else
/// a command puts there is undone.
const PACKAGE_BINS: &str = "node_modules/.bin";

/// Protected paths that installers rewrite alike on every run, so never held read-only (a
/// held one would fail the install, and with it `npm install`), but checked after each command
/// and undone when changed: husky's generated hooks (its `prepare` script writes `.husky/_`
/// on every install) and [`PACKAGE_BINS`]. Watched even beneath a held path.
pub const WATCHED: &[&str] = &[".husky/_", PACKAGE_BINS];

/// Protected directories of editors and agents: data-heavy, snapshotted on a budget of their
/// own after the code-bearing paths.
const BULK: &[&str] = &[
    ".vscode",
    ".idea",
    ".claude",
    ".codex",
    ".cursor",
    ".gemini",
    ".toolyard",
];

/// The largest file whose bytes a snapshot keeps (larger ones are only stat'ed).
pub const MAX_KEPT_FILE: u64 = 1 << 20;
/// Bytes one snapshot keeps in all; past it files are only stat'ed.
const MAX_KEPT_TOTAL: u64 = 64 << 20;
/// Entries one snapshot records; past it directories are only stat'ed, not descended.
const MAX_ENTRIES: usize = 20_000;
/// The mode of a missing parent directory made again to restore a protected path beneath it.
const DIR_MODE_FOR_MISSING: u32 = 0o755;

/// The protected list of a catalog's `[sandbox]` section: `protected_paths` when set, else
/// [`DEFAULT_PROTECTED`].
pub fn configured(config: &SandboxConfig) -> Vec<String> {
    match &config.protected_paths {
        Some(list) => list.clone(),
        None => DEFAULT_PROTECTED.iter().map(|s| s.to_string()).collect(),
    }
}

/// Whether an [`UNPROTECTED`] path lies strictly beneath `rel`.
fn holds_unprotected(rel: &str) -> bool {
    UNPROTECTED
        .iter()
        .any(|u| *u != rel && beneath_or_at(u, rel))
}

/// Whether `rel` (workspace-relative, normalized) is or lies beneath an [`UNPROTECTED`] path.
pub fn is_unprotected(rel: &str) -> bool {
    UNPROTECTED.iter().any(|u| beneath_or_at(rel, u))
}

/// The protected paths of one workspace, resolved once.
#[derive(Debug, Clone)]
pub struct Protected {
    root: PathBuf,
    /// Normalized, workspace-relative, sorted, none beneath another.
    paths: Vec<String>,
}

impl Protected {
    /// The protected paths of the workspace at `root`: `list` (workspace-relative; absolute or
    /// `..` entries are skipped with a warning), `extra` (absolute paths, kept when inside the
    /// workspace, e.g. Toolyard's catalog file), the real gitdir's `config` and `hooks` when
    /// `.git` is a file pointing inside the workspace, and the real location of any protected
    /// path reached through a symlink that stays inside the workspace.
    pub fn new(root: &Path, list: &[String], extra: &[PathBuf]) -> Self {
        let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
        let mut paths = BTreeSet::new();
        for item in list {
            match normalize(item) {
                Some(rel) => {
                    paths.insert(rel);
                }
                None => tracing::warn!(
                    path = %item,
                    "protected_paths: skipping an entry that is not a workspace-relative path"
                ),
            }
        }
        for path in extra {
            if let Some(rel) = inside(&root, path) {
                paths.insert(rel);
            }
        }
        if paths.contains(".husky") {
            paths.insert(".husky/_".to_string());
        }
        let git_config_protected = paths.contains(".git/config");
        // The git directories whose config git reads here.
        let mut gitdirs = vec![root.join(".git")];
        // A linked worktree or submodule: `.git` is a file naming the real git directory.
        if let Some(gitdir) = gitfile_target(&root, &root.join(".git")) {
            paths.insert(".git".to_string());
            if let Some(rel) = inside(&root, &gitdir) {
                for name in ["config", "config.worktree", "hooks"] {
                    paths.insert(join_rel(&rel, name));
                }
            }
            // A worktree's hooks and config live in the common directory.
            if let Ok(common) = std::fs::read_to_string(gitdir.join("commondir")) {
                let common = gitdir.join(common.trim());
                if let Some(rel) = inside(&root, &common) {
                    paths.insert(join_rel(&rel, "config"));
                    paths.insert(join_rel(&rel, "hooks"));
                }
                gitdirs.push(common);
            }
            gitdirs[0] = gitdir;
        }
        // What the config makes git run from the workspace (`core.hooksPath = .husky`, an
        // fsmonitor script, an included file) is as dangerous as a hook.
        if git_config_protected {
            for gitdir in &gitdirs {
                for name in ["config", "config.worktree"] {
                    paths.extend(config_programs(&root, gitdir, &gitdir.join(name)));
                }
            }
        }
        // A protected path that is (or lies beneath) a symlink into the workspace: protect
        // where it really is too, or the command writes there instead.
        for rel in paths.clone() {
            if let Ok(real) = root.join(&rel).canonicalize()
                && let Some(real_rel) = inside(&root, &real)
                && real_rel != rel
            {
                paths.insert(real_rel);
            }
        }
        let mut kept: Vec<String> = Vec::new();
        for rel in paths {
            if rel.is_empty() {
                continue;
            }
            // Sorted, so an ancestor comes before what lies beneath it.
            if kept.iter().any(|k| beneath_or_at(&rel, k)) && !WATCHED.contains(&rel.as_str()) {
                continue;
            }
            kept.push(rel);
        }
        Self { root, paths: kept }
    }

    /// The workspace root (canonical).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Absolute paths of the protected paths that exist now as real files or directories
    /// (reached without symlinks, not symlinks themselves): the caller bind-mounts them
    /// read-only.
    pub fn existing(&self) -> Vec<PathBuf> {
        let Ok(root) = open_root(&self.root) else {
            return Vec::new();
        };
        self.paths
            .iter()
            .filter(|rel| !WATCHED.contains(&rel.as_str()))
            .filter(|rel| {
                let Some((dir, name)) = walk_parent(root.as_fd(), rel) else {
                    return false;
                };
                lstat_at(dir.as_fd(), &name).is_some_and(|st| kind(&st) != Kind::Link)
            })
            .map(|rel| self.root.join(rel))
            .collect()
    }

    /// The protected paths, workspace-relative (for the file tools).
    pub fn relative(&self) -> Vec<String> {
        self.paths.clone()
    }

    /// Record the protected paths as they are now: types, modes, link targets, directory
    /// trees, and file bytes up to [`MAX_KEPT_FILE`] each.
    pub fn snapshot(&self) -> Snapshot {
        let root = match open_root(&self.root) {
            Ok(fd) => fd,
            Err(e) => {
                return Snapshot {
                    root: self.root.clone(),
                    entries: Vec::new(),
                    git_existed: true,
                    unavailable: Some(format!("cannot open {}: {e}", self.root.display())),
                };
            }
        };
        // A path held read-only in this runner's mount namespace cannot change here: it is
        // neither recorded nor restored, so the user's own edits to it always stand.
        let entries = capture_paths(
            root.as_fd(),
            self.paths.iter().filter(|rel| !is_held(&self.root, rel)),
        );
        Snapshot {
            root: self.root.clone(),
            entries,
            git_existed: lstat_at(root.as_fd(), OsStr::new(".git")).is_some(),
            unavailable: None,
        }
    }
}

/// The protected paths as they were before a command.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Snapshot {
    root: PathBuf,
    entries: Vec<(String, State)>,
    git_existed: bool,
    unavailable: Option<String>,
}

/// One change to a protected path that [`Snapshot::restore`] undid (or could not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    /// The workspace-relative path.
    pub path: String,
    /// What was done: `removed`, `restored`, `could not remove`, `could not restore`,
    /// `could not check`.
    pub action: String,
    /// Why, and where a moved copy is kept.
    pub why: String,
}

impl std::fmt::Display for Restored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} ({})", self.action, self.path, self.why)
    }
}

/// The text appended to a command's result when protected paths were touched (empty when
/// nothing was).
pub fn describe(restored: &[Restored]) -> String {
    if restored.is_empty() {
        return String::new();
    }
    let items: Vec<String> = restored.iter().map(Restored::to_string).collect();
    format!(
        "Toolyard undid changes to protected paths (they run code outside the sandbox): {}. \
         If the change was intended, ask the user to make it.",
        items.join("; ")
    )
}
