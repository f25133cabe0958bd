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

mod accepted;
pub use accepted::Hold;

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

impl Snapshot {
    /// Compare the protected paths now with the snapshot and undo every difference: what the
    /// command created is moved into a fresh subdirectory of `quarantine` (never deleted),
    /// what it changed or deleted gets its bytes, mode and type back (its own version moved
    /// into `quarantine` too). A new repository (`.git` absent before) is kept, minus hooks
    /// other than `*.sample` and a config that makes git run a program.
    pub fn restore(&self, quarantine: &Path) -> Vec<Restored> {
        let mut fx = Fixer {
            quarantine: quarantine.to_path_buf(),
            call_dir: None,
            out: Vec::new(),
        };
        if let Some(e) = &self.unavailable {
            fx.push(
                ".",
                "could not check",
                format!("no snapshot was taken: {e}"),
            );
            return fx.out;
        }
        let root = match open_root(&self.root) {
            Ok(fd) => fd,
            Err(e) => {
                fx.push(
                    ".",
                    "could not check",
                    format!("cannot open {}: {e}", self.root.display()),
                );
                return fx.out;
            }
        };
        let git_now = lstat_at(root.as_fd(), OsStr::new(".git")).map(|st| kind(&st));
        let new_repo = !self.git_existed && git_now == Some(Kind::Dir);
        let listed = |rel: &str| self.entries.iter().any(|(r, _)| r == rel);
        let (check_hooks, check_config) = (listed(".git/hooks"), listed(".git/config"));
        for (rel, before) in &self.entries {
            if new_repo && (rel == ".git/hooks" || rel == ".git/config") {
                continue;
            }
            // Read-only here (another runner took the state): only the user changes it.
            if is_held(&self.root, rel) {
                continue;
            }
            fx.fix_entry(root.as_fd(), rel, before);
        }
        if !self.git_existed {
            let gitdir = match git_now {
                Some(Kind::Dir) => Some(".git".to_string()),
                // `git init --separate-git-dir` or a planted gitfile: check where it points.
                Some(Kind::File) => gitfile_target(&self.root, &self.root.join(".git"))
                    .and_then(|dir| inside(&self.root, &dir)),
                _ => None,
            };
            if let Some(gitdir) = gitdir {
                fx.check_new_repo(root.as_fd(), &gitdir, check_hooks, check_config);
            }
        }
        fx.out
    }
}

// ---------------------------------------------------------------------------------------------
// Snapshot data

/// The file type as far as protection cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum Kind {
    Dir,
    File,
    Link,
    Other,
}

/// What identifies a file's version when its bytes were not kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: i64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    mode: u32,
}

impl Stamp {
    fn of(st: &FileStat) -> Self {
        Self {
            dev: st.st_dev,
            ino: st.st_ino,
            size: st.st_size,
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
            mode: st.st_mode,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
enum Node {
    /// A regular file; `bytes` is `None` when it was too large to keep.
    File {
        mode: u32,
        bytes: Option<Vec<u8>>,
        stamp: Stamp,
    },
    Link {
        target: OsString,
    },
    Dir {
        mode: u32,
        children: BTreeMap<OsString, Node>,
    },
    /// A special file, or a directory past the entry budget: only its stat is known.
    Unscanned {
        kind: Kind,
        stamp: Stamp,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
enum State {
    /// The path does not exist: an ancestor or the path itself is missing.
    Absent,
    /// The ancestor made of the first `depth` components is not a directory.
    Blocked { depth: usize, node: Node },
    /// The path exists, reached through real directories only.
    Present(Node),
}

struct Budget {
    bytes: u64,
    entries: usize,
}

impl Budget {
    /// What one snapshot may keep of one kind of path.
    fn fresh() -> Self {
        Self {
            bytes: MAX_KEPT_TOTAL,
            entries: MAX_ENTRIES,
        }
    }
}

/// Whether `rel` is (beneath) a path held read-only in this runner's mount namespace (and not
/// a [`WATCHED`] one, bound writable again beneath it).
fn is_held(root: &Path, rel: &str) -> bool {
    if WATCHED.iter().any(|w| beneath_or_at(rel, w)) {
        return false;
    }
    let path = root.join(rel);
    crate::sandbox::held_read_only()
        .iter()
        .any(|h| path.starts_with(h))
}

/// The states of `rels`. Editor and agent directories (a home's `.claude/` holds gigabytes of
/// transcripts) get a budget of their own, so they never crowd out the code-bearing files.
fn capture_paths<'a>(
    root: BorrowedFd<'_>,
    rels: impl Iterator<Item = &'a String>,
) -> Vec<(String, State)> {
    let (mut code, mut bulk) = (Budget::fresh(), Budget::fresh());
    rels.map(|rel| {
        let budget = if BULK.contains(&rel.as_str()) {
            &mut bulk
        } else {
            &mut code
        };
        (rel.clone(), capture_entry(root, rel, budget))
    })
    .collect()
}

fn capture_entry(root: BorrowedFd<'_>, rel: &str, budget: &mut Budget) -> State {
    let comps: Vec<&str> = rel.split('/').collect();
    let Some((last, ancestors)) = comps.split_last() else {
        return State::Absent;
    };
    let mut dir = match dup_dir(root) {
        Ok(fd) => fd,
        Err(_) => return State::Absent,
    };
    for (i, comp) in ancestors.iter().enumerate() {
        let name = OsStr::new(comp);
        match lstat_at(dir.as_fd(), name) {
            None => return State::Absent,
            Some(st) if kind(&st) == Kind::Dir => match open_dir_at(dir.as_fd(), name) {
                Ok(fd) => dir = fd,
                Err(_) => return State::Absent,
            },
            Some(_) => {
                return match capture(dir.as_fd(), name, comps[..=i].join("/").as_str(), budget) {
                    Some(node) => State::Blocked { depth: i + 1, node },
                    None => State::Absent,
                };
            }
        }
    }
    match capture(dir.as_fd(), OsStr::new(last), rel, budget) {
        Some(node) => State::Present(node),
        None => State::Absent,
    }
}

/// Record `name` in `dir` (never following a symlink); `None` when it does not exist.
fn capture(dir: BorrowedFd<'_>, name: &OsStr, rel: &str, budget: &mut Budget) -> Option<Node> {
    let st = lstat_at(dir, name)?;
    let stamp = Stamp::of(&st);
    let mode = st.st_mode & 0o7777;
    let k = kind(&st);
    if budget.entries == 0 {
        return Some(Node::Unscanned { kind: k, stamp });
    }
    budget.entries -= 1;
    Some(match k {
        Kind::Link => match readlinkat(dir, name) {
            Ok(target) => Node::Link { target },
            Err(_) => Node::Unscanned { kind: k, stamp },
        },
        Kind::File => {
            let size = u64::try_from(st.st_size).unwrap_or(u64::MAX);
            let bytes = if size <= MAX_KEPT_FILE && size <= budget.bytes {
                read_small(dir, name)
            } else {
                None
            };
            if let Some(b) = &bytes {
                budget.bytes = budget.bytes.saturating_sub(b.len() as u64);
            }
            Node::File { mode, bytes, stamp }
        }
        Kind::Dir => match open_dir_at(dir, name) {
            Ok(sub) => {
                let mut children = BTreeMap::new();
                for child in list_dir(sub.as_fd()).unwrap_or_default() {
                    let child_rel = join_rel(rel, &child.to_string_lossy());
                    if is_unprotected(&child_rel) {
                        continue;
                    }
                    if let Some(node) = capture(sub.as_fd(), &child, &child_rel, budget) {
                        children.insert(child, node);
                    }
                }
                Node::Dir { mode, children }
            }
            Err(_) => Node::Unscanned { kind: k, stamp },
        },
        Kind::Other => Node::Unscanned { kind: k, stamp },
    })
}

/// Whether `name` in `dir` is still what `node` recorded (deeply).
fn unchanged(dir: BorrowedFd<'_>, name: &OsStr, rel: &str, node: &Node) -> bool {
    let mut budget = Budget {
        bytes: MAX_KEPT_TOTAL,
        entries: MAX_ENTRIES,
    };
    capture(dir, name, rel, &mut budget).is_some_and(|now| same(node, &now))
}

fn same(a: &Node, b: &Node) -> bool {
    match (a, b) {
        (
            Node::File {
                mode: ma,
                bytes: Some(ba),
                ..
            },
            Node::File {
                mode: mb,
                bytes: Some(bb),
                ..
            },
        ) => ma == mb && ba == bb,
        (Node::File { stamp: sa, .. }, Node::File { stamp: sb, .. }) => sa == sb,
        (Node::Link { target: ta }, Node::Link { target: tb }) => ta == tb,
        (
            Node::Dir {
                mode: ma,
                children: ca,
            },
            Node::Dir {
                mode: mb,
                children: cb,
            },
        ) => {
            ma == mb
                && ca.len() == cb.len()
                && ca
                    .iter()
                    .all(|(k, v)| cb.get(k).is_some_and(|w| same(v, w)))
        }
        (Node::Unscanned { stamp: sa, .. }, Node::Unscanned { stamp: sb, .. }) => sa == sb,
        _ => false,
    }
}

fn what(node: &Node) -> String {
    match node {
        Node::File { .. } => "a file".into(),
        Node::Link { target } => format!("a symlink to {}", target.to_string_lossy()),
        Node::Dir { .. } => "a directory".into(),
        Node::Unscanned { kind, .. } => kind_name(*kind).into(),
    }
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Dir => "a directory",
        Kind::File => "a file",
        Kind::Link => "a symlink",
        Kind::Other => "a special file",
    }
}

// ---------------------------------------------------------------------------------------------
// Restoring

struct Fixer {
    quarantine: PathBuf,
    /// This call's own subdirectory of `quarantine`, made on first use.
    call_dir: Option<PathBuf>,
    out: Vec<Restored>,
}

impl Fixer {
    fn push(&mut self, path: &str, action: &str, why: String) {
        self.out.push(Restored {
            path: path.to_string(),
            action: action.to_string(),
            why,
        });
    }

    fn fix_entry(&mut self, root: BorrowedFd<'_>, rel: &str, before: &State) {
        let comps: Vec<&str> = rel.split('/').collect();
        let Some((last, ancestors)) = comps.split_last() else {
            return;
        };
        let mut dir = match dup_dir(root) {
            Ok(fd) => fd,
            Err(e) => {
                self.push(
                    rel,
                    "could not check",
                    format!("cannot open the workspace: {e}"),
                );
                return;
            }
        };
        let wanted = matches!(before, State::Present(_));
        for (i, comp) in ancestors.iter().enumerate() {
            let name = OsStr::new(comp);
            let anc_rel = comps[..=i].join("/");
            match lstat_at(dir.as_fd(), name) {
                None => {
                    if !wanted {
                        return;
                    }
                    if let Err(e) = mkdirat(
                        dir.as_fd(),
                        name,
                        Mode::from_bits_truncate(DIR_MODE_FOR_MISSING),
                    ) {
                        self.push(
                            rel,
                            "could not restore",
                            format!("the command deleted it and {anc_rel} cannot be made: {e}"),
                        );
                        return;
                    }
                }
                Some(st) if kind(&st) == Kind::Dir => {}
                Some(st) => {
                    if let State::Blocked { depth, node } = before
                        && *depth == i + 1
                    {
                        if !unchanged(dir.as_fd(), name, &anc_rel, node) {
                            self.replace(
                                dir.as_fd(),
                                name,
                                &anc_rel,
                                node,
                                "the command changed it",
                            );
                        }
                        return;
                    }
                    let k = kind(&st);
                    if k != Kind::Link && !wanted {
                        // A plain file where nothing protected was: nothing can run from it.
                        return;
                    }
                    let now = capture(
                        dir.as_fd(),
                        name,
                        &anc_rel,
                        &mut Budget {
                            bytes: 0,
                            entries: 1,
                        },
                    );
                    let now = now.map(|n| what(&n)).unwrap_or_else(|| kind_name(k).into());
                    let why = format!("the command put {now} where {rel}, a protected path, lies");
                    if !self.remove(dir.as_fd(), name, &anc_rel, &why) || !wanted {
                        return;
                    }
                    if let Err(e) = mkdirat(
                        dir.as_fd(),
                        name,
                        Mode::from_bits_truncate(DIR_MODE_FOR_MISSING),
                    ) {
                        self.push(
                            rel,
                            "could not restore",
                            format!("{anc_rel} cannot be made again: {e}"),
                        );
                        return;
                    }
                }
            }
            match open_dir_at(dir.as_fd(), name) {
                Ok(fd) => dir = fd,
                Err(e) => {
                    self.push(
                        rel,
                        "could not check",
                        format!("cannot open {anc_rel}: {e}"),
                    );
                    return;
                }
            }
        }
        let before = match before {
            State::Present(node) => Some(node),
            _ => None,
        };
        self.fix(dir.as_fd(), OsStr::new(last), rel, before);
    }

    /// Make `name` in `dir` what `before` recorded (`None`: it did not exist).
    fn fix(&mut self, dir: BorrowedFd<'_>, name: &OsStr, rel: &str, before: Option<&Node>) {
        let now = lstat_at(dir, name);
        if rel
            .strip_prefix(PACKAGE_BINS)
            .is_some_and(|r| r.starts_with('/'))
            && package_link_change(dir, name, before, now.as_ref())
        {
            return;
        }
        match (before, now) {
            (None, None) => {}
            // Toolyard's own artifact tools make `.toolyard/artifacts`: a `.toolyard` made
            // meanwhile keeps that, and loses the rest. A package manager's new
            // `node_modules/.bin` keeps its links (see `package_link_change`).
            (None, Some(st))
                if kind(&st) == Kind::Dir && (holds_unprotected(rel) || rel == PACKAGE_BINS) =>
            {
                match open_dir_at(dir, name) {
                    Ok(sub) => {
                        for child in list_dir(sub.as_fd()).unwrap_or_default() {
                            let child_rel = join_rel(rel, &child.to_string_lossy());
                            if !is_unprotected(&child_rel) {
                                self.fix(sub.as_fd(), &child, &child_rel, None);
                            }
                        }
                    }
                    Err(e) => self.push(rel, "could not check", format!("cannot open it: {e}")),
                }
            }
            (None, Some(_)) => {
                self.remove(dir, name, rel, "created by the command");
            }
            (Some(node), None) => match self.recreate(dir, name, node) {
                Ok(()) => self.push(rel, "restored", "the command deleted it".into()),
                Err(e) => self.push(
                    rel,
                    "could not restore",
                    format!("the command deleted it, and {e}"),
                ),
            },
            (Some(node), Some(st)) => self.fix_existing(dir, name, rel, node, &st),
        }
    }

    fn fix_existing(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &OsStr,
        rel: &str,
        node: &Node,
        st: &FileStat,
    ) {
        let k = kind(st);
        let mode_now = st.st_mode & 0o7777;
        match (node, k) {
            (Node::Dir { mode, children }, Kind::Dir) => {
                let sub = match open_dir_at(dir, name) {
                    Ok(fd) => fd,
                    Err(e) => {
                        self.push(rel, "could not check", format!("cannot open it: {e}"));
                        return;
                    }
                };
                let mut names: BTreeSet<OsString> = children.keys().cloned().collect();
                names.extend(list_dir(sub.as_fd()).unwrap_or_default());
                for child in names {
                    let child_rel = join_rel(rel, &child.to_string_lossy());
                    if is_unprotected(&child_rel) {
                        continue;
                    }
                    self.fix(sub.as_fd(), &child, &child_rel, children.get(&child));
                }
                if mode_now != *mode {
                    match fchmod(sub.as_fd(), Mode::from_bits_truncate(*mode)) {
                        Ok(()) => self.push(
                            rel,
                            "restored",
                            format!("the command changed its mode from {mode:o} to {mode_now:o}"),
                        ),
                        Err(e) => self.push(
                            rel,
                            "could not restore",
                            format!("the command changed its mode to {mode_now:o}: {e}"),
                        ),
                    }
                }
            }
            (
                Node::File {
                    mode,
                    bytes: Some(bytes),
                    ..
                },
                Kind::File,
            ) => {
                let now = read_small(dir, name);
                let same_bytes = i64::try_from(bytes.len()).is_ok_and(|n| n == st.st_size)
                    && now.as_ref().is_some_and(|now| now == bytes);
                if mode_now != *mode
                    || !same_bytes && !same_git_programs(rel, bytes, now.as_deref())
                {
                    self.replace(dir, name, rel, node, "the command changed it");
                }
            }
            (
                Node::File {
                    bytes: None, stamp, ..
                },
                Kind::File,
            ) => {
                if *stamp != Stamp::of(st) {
                    self.push(
                        rel,
                        "could not restore",
                        "the command changed it, and no copy of it was kept (larger than 1 MiB, or past the snapshot's budget); check it".into(),
                    );
                }
            }
            (Node::Link { target }, Kind::Link) => {
                if readlinkat(dir, name).ok().as_ref() != Some(target) {
                    self.replace(dir, name, rel, node, "the command changed where it points");
                }
            }
            (Node::Unscanned { kind, stamp }, k) if *kind == k => {
                if *stamp != Stamp::of(st) {
                    self.push(
                        rel,
                        "could not check",
                        "it changed, but it was too large or too special to snapshot; check it"
                            .into(),
                    );
                }
            }
            _ => {
                let now = capture(
                    dir,
                    name,
                    rel,
                    &mut Budget {
                        bytes: 0,
                        entries: 1,
                    },
                )
                .map(|n| what(&n))
                .unwrap_or_else(|| kind_name(k).into());
                let why = format!("the command replaced {} with {now}", what(node));
                self.replace(dir, name, rel, node, &why);
            }
        }
    }

    /// Move what is at `name` aside into the quarantine, then put `node` back.
    fn replace(&mut self, dir: BorrowedFd<'_>, name: &OsStr, rel: &str, node: &Node, why: &str) {
        let kept = match self.stash(dir, name, rel) {
            Ok(path) => path,
            Err(e) => {
                self.push(
                    rel,
                    "could not restore",
                    format!("{why}, and moving its version aside failed: {e}"),
                );
                return;
            }
        };
        match self.recreate(dir, name, node) {
            Ok(()) => self.push(
                rel,
                "restored",
                format!("{why}; its version is kept at {}", kept.display()),
            ),
            Err(e) => self.push(
                rel,
                "could not restore",
                format!("{why}; its version is kept at {}, and {e}", kept.display()),
            ),
        }
    }

    /// Move `name` into the quarantine and say so; whether it is gone from the workspace.
    fn remove(&mut self, dir: BorrowedFd<'_>, name: &OsStr, rel: &str, why: &str) -> bool {
        match self.stash(dir, name, rel) {
            Ok(kept) => {
                self.push(rel, "removed", format!("{why}; kept at {}", kept.display()));
                true
            }
            Err(e) => {
                self.push(
                    rel,
                    "could not remove",
                    format!("{why}, and moving it aside failed: {e}"),
                );
                false
            }
        }
    }

    /// Move `name` (in `dir`, not followed) to `rel` under this call's quarantine directory.
    fn stash(&mut self, dir: BorrowedFd<'_>, name: &OsStr, rel: &str) -> Result<PathBuf, String> {
        let call_dir = self.call_dir()?;
        let mut dest = call_dir.join(rel);
        let mut n = 1;
        while dest.symlink_metadata().is_ok() {
            dest = call_dir.join(format!("{rel}.{n}"));
            n += 1;
        }
        let parent = dest.parent().unwrap_or(&call_dir).to_path_buf();
        std::fs::create_dir_all(&parent)
            .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        let parent_fd = open_root(&parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        let dest_name = dest.file_name().unwrap_or(name).to_os_string();
        match renameat(dir, name, parent_fd.as_fd(), dest_name.as_os_str()) {
            Ok(()) => Ok(dest),
            Err(Errno::EXDEV) => {
                // The quarantine is on another file system: copy, then remove the original.
                copy_tree(dir, name, parent_fd.as_fd(), &dest_name)
                    .map_err(|e| format!("cannot copy it to {}: {e}", dest.display()))?;
                remove_tree(dir, name).map_err(|e| {
                    format!("copied to {} but cannot remove it: {e}", dest.display())
                })?;
                Ok(dest)
            }
            Err(e) => Err(format!("cannot move it to {}: {e}", dest.display())),
        }
    }

    fn call_dir(&mut self) -> Result<PathBuf, String> {
        if let Some(dir) = &self.call_dir {
            return Ok(dir.clone());
        }
        static NEXT: AtomicU64 = AtomicU64::new(0);
        std::fs::create_dir_all(&self.quarantine)
            .map_err(|e| format!("cannot create {}: {e}", self.quarantine.display()))?;
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        loop {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let dir = self
                .quarantine
                .join(format!("{secs}-{}-{n}", std::process::id()));
            match std::fs::create_dir(&dir) {
                Ok(()) => {
                    self.call_dir = Some(dir.clone());
                    return Ok(dir);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
            }
        }
    }

    /// Create `node` at `name` in `dir` (which must not exist).
    fn recreate(&self, dir: BorrowedFd<'_>, name: &OsStr, node: &Node) -> Result<(), String> {
        match node {
            Node::File {
                mode,
                bytes: Some(bytes),
                ..
            } => {
                let fd = openat(
                    dir,
                    name,
                    OFlag::O_WRONLY
                        | OFlag::O_CREAT
                        | OFlag::O_EXCL
                        | OFlag::O_NOFOLLOW
                        | OFlag::O_CLOEXEC,
                    Mode::from_bits_truncate(0o600),
                )
                .map_err(|e| format!("cannot create it: {e}"))?;
                let mut file = std::fs::File::from(fd);
                file.write_all(bytes)
                    .map_err(|e| format!("cannot write it: {e}"))?;
                fchmod(file.as_fd(), Mode::from_bits_truncate(*mode))
                    .map_err(|e| format!("cannot set its mode: {e}"))
            }
            Node::File { bytes: None, .. } => {
                Err("it was larger than 1 MiB, so no copy was kept".into())
            }
            Node::Link { target } => symlinkat(target.as_os_str(), dir, name)
                .map_err(|e| format!("cannot create the symlink: {e}")),
            Node::Dir { mode, children } => {
                mkdirat(dir, name, Mode::from_bits_truncate(0o700))
                    .map_err(|e| format!("cannot create it: {e}"))?;
                let sub = open_dir_at(dir, name).map_err(|e| format!("cannot open it: {e}"))?;
                let mut failed = Vec::new();
                for (child, node) in children {
                    if let Err(e) = self.recreate(sub.as_fd(), child, node) {
                        failed.push(format!("{}: {e}", child.to_string_lossy()));
                    }
                }
                fchmod(sub.as_fd(), Mode::from_bits_truncate(*mode))
                    .map_err(|e| format!("cannot set its mode: {e}"))?;
                if failed.is_empty() {
                    Ok(())
                } else {
                    Err(format!(
                        "some entries were not put back ({})",
                        failed.join(", ")
                    ))
                }
            }
            Node::Unscanned { kind, .. } => Err(format!(
                "it was {} not snapshotted (too many entries or a special file)",
                kind_name(*kind)
            )),
        }
    }

    /// A repository the command made (`git init`, `git clone`): keep it, but only `*.sample`
    /// hooks, and no config that makes git run a program.
    fn check_new_repo(&mut self, root: BorrowedFd<'_>, gitdir: &str, hooks: bool, config: bool) {
        let Some(dir) = walk_dir(root, gitdir) else {
            return;
        };
        if hooks {
            let rel = join_rel(gitdir, "hooks");
            match lstat_at(dir.as_fd(), OsStr::new("hooks")).map(|st| kind(&st)) {
                None => {}
                Some(Kind::Dir) => match open_dir_at(dir.as_fd(), OsStr::new("hooks")) {
                    Ok(sub) => {
                        for child in list_dir(sub.as_fd()).unwrap_or_default() {
                            let sample = child.as_bytes().ends_with(b".sample")
                                && lstat_at(sub.as_fd(), &child)
                                    .is_some_and(|st| kind(&st) == Kind::File);
                            if !sample {
                                let child_rel = join_rel(&rel, &child.to_string_lossy());
                                self.remove(
                                    sub.as_fd(),
                                    &child,
                                    &child_rel,
                                    "created by the command in a new repository, where only *.sample hooks are kept",
                                );
                            }
                        }
                    }
                    Err(e) => self.push(&rel, "could not check", format!("cannot open it: {e}")),
                },
                Some(k) => {
                    self.remove(
                        dir.as_fd(),
                        OsStr::new("hooks"),
                        &rel,
                        &format!("the command made it {} in a new repository", kind_name(k)),
                    );
                }
            }
        }
        if config {
            let rel = join_rel(gitdir, "config");
            let name = OsStr::new("config");
            let problem = match lstat_at(dir.as_fd(), name).map(|st| kind(&st)) {
                None => None,
                Some(Kind::File) => match read_small(dir.as_fd(), name) {
                    None => Some("is larger than 1 MiB, too large to check".to_string()),
                    Some(bytes) => match runs_program(&bytes) {
                        Ok(None) => None,
                        Ok(Some(key)) => Some(format!("sets {key}, which makes git run a program")),
                        Err(e) => Some(format!("could not be checked ({e})")),
                    },
                },
                Some(k) => Some(format!("is {}", kind_name(k))),
            };
            if let Some(problem) = problem {
                self.remove(
                    dir.as_fd(),
                    name,
                    &rel,
                    &format!("created by the command in a new repository and {problem}"),
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Git config

/// Whether the change at `name` in `node_modules/.bin` is a package manager's: a link made or
/// changed to point into a package in `node_modules`, or a link removed.
fn package_link_change(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    before: Option<&Node>,
    now: Option<&FileStat>,
) -> bool {
    match now {
        None => matches!(before, Some(Node::Link { .. })),
        Some(st) if kind(st) == Kind::Link => {
            readlinkat(dir, name).is_ok_and(|target| links_into_a_package(Path::new(&target)))
        }
        Some(_) => false,
    }
}

/// Whether `target`, a link's target in `node_modules/.bin`, stays in `node_modules` (and out
/// of `.bin`) as written: relative, never climbing out on the way.
fn links_into_a_package(target: &Path) -> bool {
    let mut at: Vec<&OsStr> = vec![OsStr::new("node_modules"), OsStr::new(".bin")];
    for comp in target.components() {
        match comp {
            Component::Normal(name) => at.push(name),
            Component::CurDir => {}
            Component::ParentDir => {
                at.pop();
                if at.is_empty() {
                    return false;
                }
            }
            Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    at.len() > 2 && at[1] != ".bin"
}

/// The first key of git config `bytes` that makes git run a program, if any (read by git
/// itself, without includes, system or global config).
fn runs_program(bytes: &[u8]) -> Result<Option<String>, String> {
    Ok(config_entries(None, bytes)?
        .into_iter()
        .find(|(key, value)| key_runs_program(key, value))
        .map(|(key, _)| key))
}

/// Whether `rel` is a git config file whose change from `before` to `now` leaves every key
/// that makes git run a program as it was: `git config user.email`, `git remote add` and
/// `git branch --set-upstream-to` keep working from a command (and a change the user makes
/// meanwhile is never reverted), while a hook path, an alias, a filter or an include is held.
fn same_git_programs(rel: &str, before: &[u8], now: Option<&[u8]>) -> bool {
    let is_git_config = Path::new(rel)
        .file_name()
        .is_some_and(|n| n == "config" || n == "config.worktree");
    let Some(now) = now.filter(|_| is_git_config) else {
        return false;
    };
    let programs = |bytes: &[u8]| {
        config_entries(None, bytes).map(|entries| {
            let mut held: Vec<(String, String)> = entries
                .into_iter()
                .filter(|(key, value)| key_runs_program(key, value))
                .collect();
            held.sort();
            held
        })
    };
    matches!((programs(before), programs(now)), (Ok(a), Ok(b)) if a == b)
}

/// The `(key, value)` pairs of the git config in `file`, else in `bytes`, as git itself reads
/// them (no includes, no system or global config, no home).
fn config_entries(file: Option<&Path>, bytes: &[u8]) -> Result<Vec<(String, String)>, String> {
    let mut cmd = Command::new("git");
    cmd.arg("config")
        .arg("--file")
        .arg(file.map_or(OsStr::new("-"), Path::as_os_str))
        .args(["--null", "--list"])
        .env_clear()
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(path) = std::env::var_os("PATH") {
        cmd.env("PATH", path);
    }
    let mut child = cmd.spawn().map_err(|e| format!("cannot run git: {e}"))?;
    let mut stdin = child.stdin.take();
    let input = bytes.to_vec();
    // Feed stdin from another thread: git may write output before it has read everything.
    let feeder = std::thread::spawn(move || {
        if let Some(stdin) = stdin.as_mut() {
            let _ = stdin.write_all(&input);
        }
    });
    let output = child
        .wait_with_output()
        .map_err(|e| format!("git config failed: {e}"))?;
    let _ = feeder.join();
    if !output.status.success() {
        return Err(format!(
            "git cannot read it: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(output
        .stdout
        .split(|b| *b == 0)
        .filter(|item| !item.is_empty())
        .map(|item| {
            let text = String::from_utf8_lossy(item);
            match text.split_once('\n') {
                Some((k, v)) => (k.to_string(), v.to_string()),
                None => (text.into_owned(), String::new()),
            }
        })
        .collect())
}

/// Workspace files that the git config at `config` (in git directory `gitdir`) makes git run
/// or load: the hooks directory, included config files, and programs named by a path.
fn config_programs(root: &Path, gitdir: &Path, config: &Path) -> Vec<String> {
    let Ok(meta) = config.symlink_metadata() else {
        return Vec::new();
    };
    if !meta.is_file() || meta.len() > MAX_KEPT_FILE {
        return Vec::new();
    }
    // From the file itself: git refuses relative includes in config read from stdin.
    let Ok(entries) = config_entries(Some(config), &[]) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for (key, value) in entries {
        let lower = key.to_ascii_lowercase();
        let path = if lower == "core.hookspath" {
            // Hook managers (husky) put the packages' programs first on the hooks' PATH.
            found.push(PACKAGE_BINS.to_string());
            // Relative to the working tree, where hooks run.
            Some(root.join(value.trim()))
        } else if lower == "include.path"
            || (lower.starts_with("includeif.") && lower.ends_with(".path"))
        {
            // Relative to the including file.
            Some(gitdir.join(value.trim()))
        } else if key_runs_program(&key, &value) {
            value
                .trim_start()
                .trim_start_matches('!')
                .split_whitespace()
                .next()
                .filter(|word| word.contains('/') && !word.starts_with('~'))
                .map(|word| root.join(word))
        } else {
            None
        };
        if let Some(rel) = path.and_then(|p| inside(root, &p))
            && !rel.is_empty()
        {
            found.push(rel);
        }
    }
    found
}

/// Whether git config `key` (as `git config --list` prints it: section and name lowercased)
/// with `value` makes git run a program or load more config.
pub fn key_runs_program(key: &str, value: &str) -> bool {
    git_program(key, value).is_some()
}

/// What kind of program a git config key makes git run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GitProgram {
    /// A filter driver: run on file contents by `add`, `status`, `checkout` and `commit`
    /// alike, and not switched off by any fixed command-line option.
    Filter,
    /// Anything else: hooks, fsmonitor, signing, editors, pagers, credential helpers, diff
    /// and merge drivers, aliases, remote helpers, included config.
    Other,
}

/// The kind of program git config `key` with `value` makes git run (or the config it makes
/// git load); `None` when it makes git run none. The one table of such keys: protected paths
/// and the hooks' auto-commit both ask it.
pub fn git_program(key: &str, value: &str) -> Option<GitProgram> {
    let (section, rest) = key.split_once('.').unwrap_or((key, ""));
    let section = section.to_ascii_lowercase();
    let name = rest.rsplit('.').next().unwrap_or("").to_ascii_lowercase();
    let has_sub = rest.contains('.');
    if section == "filter" {
        return Some(GitProgram::Filter);
    }
    let other = match section.as_str() {
        "core" => matches!(
            name.as_str(),
            "fsmonitor"
                | "hookspath"
                | "sshcommand"
                | "gitproxy"
                | "askpass"
                | "editor"
                | "pager"
                | "alternaterefscommand"
        ),
        "sequence" => name == "editor",
        "credential" => name == "helper",
        "gpg" => name == "program" || name.ends_with("command"),
        "include" | "includeif" | "protocol" | "pager" => true,
        "diff" => name == "external" || (has_sub && (name == "textconv" || name == "command")),
        "merge" => has_sub && name == "driver",
        "alias" => value.trim_start().starts_with('!'),
        "uploadpack" => name == "packobjectshook",
        "interactive" => name == "difffilter",
        "difftool" | "mergetool" | "man" | "browser" => name == "cmd" || name == "path",
        "web" => name == "browser",
        "remote" => matches!(name.as_str(), "uploadpack" | "receivepack" | "vcs"),
        "submodule" => name == "update" && value.trim_start().starts_with('!'),
        "sendemail" => name.ends_with("cmd") || name == "smtpserver",
        _ => false,
    };
    other.then_some(GitProgram::Other)
}

// ---------------------------------------------------------------------------------------------
// Paths

/// `item` as a normalized workspace-relative path; `None` for absolute, `~` or `..` paths.
fn normalize(item: &str) -> Option<String> {
    let item = item.trim();
    if item.starts_with('/') || item.starts_with('~') {
        return None;
    }
    let mut parts = Vec::new();
    for part in item.split('/') {
        match part {
            "" | "." => {}
            ".." => return None,
            p => parts.push(p),
        }
    }
    if parts.is_empty() {
        None
    } else {
        Some(parts.join("/"))
    }
}

/// `path` (absolute, or relative to `root`) as a workspace-relative path when it lies inside
/// `root` (canonical); symlinks in existing ancestors are resolved first.
fn inside(root: &Path, path: &Path) -> Option<String> {
    let path = root.join(path);
    let mut clean = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                clean.pop();
            }
            Component::CurDir => {}
            c => clean.push(c),
        }
    }
    // Resolve the longest existing prefix; keep the rest as written.
    let mut real = clean.clone();
    let mut tail = Vec::new();
    let resolved = loop {
        if let Ok(r) = real.canonicalize() {
            break r;
        }
        match (real.file_name().map(OsStr::to_os_string), real.parent()) {
            (Some(name), Some(parent)) => {
                tail.push(name);
                real = parent.to_path_buf();
            }
            _ => break clean.clone(),
        }
    };
    let mut full = resolved;
    for name in tail.into_iter().rev() {
        full.push(name);
    }
    let rel = full.strip_prefix(root).ok()?;
    let rel = rel.to_str()?;
    Some(rel.to_string())
}

/// The directory a gitfile (`gitdir: X`) at `path` names, resolved against `root`.
fn gitfile_target(root: &Path, path: &Path) -> Option<PathBuf> {
    let meta = path.symlink_metadata().ok()?;
    if !meta.is_file() || meta.len() > 4096 {
        return None;
    }
    let text = std::fs::read_to_string(path).ok()?;
    let dir = text.lines().find_map(|l| l.strip_prefix("gitdir:"))?.trim();
    if dir.is_empty() {
        return None;
    }
    Some(root.join(dir))
}

fn join_rel(rel: &str, name: &str) -> String {
    if rel.is_empty() {
        name.to_string()
    } else {
        format!("{rel}/{name}")
    }
}

fn beneath_or_at(rel: &str, ancestor: &str) -> bool {
    rel == ancestor
        || rel
            .strip_prefix(ancestor)
            .is_some_and(|rest| rest.starts_with('/'))
}

// ---------------------------------------------------------------------------------------------
// File descriptors, never following symlinks

fn open_root(path: &Path) -> nix::Result<OwnedFd> {
    nix::fcntl::open(
        path,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

fn dup_dir(dir: BorrowedFd<'_>) -> nix::Result<OwnedFd> {
    openat(
        dir,
        ".",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

fn open_dir_at(dir: BorrowedFd<'_>, name: &OsStr) -> nix::Result<OwnedFd> {
    openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

fn lstat_at(dir: BorrowedFd<'_>, name: &OsStr) -> Option<FileStat> {
    fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW).ok()
}

fn kind(st: &FileStat) -> Kind {
    match st.st_mode & libc::S_IFMT {
        libc::S_IFDIR => Kind::Dir,
        libc::S_IFREG => Kind::File,
        libc::S_IFLNK => Kind::Link,
        _ => Kind::Other,
    }
}

/// The parent directory of `rel` (reached through real directories only) and its last name.
fn walk_parent(root: BorrowedFd<'_>, rel: &str) -> Option<(OwnedFd, OsString)> {
    let comps: Vec<&str> = rel.split('/').collect();
    let (last, ancestors) = comps.split_last()?;
    let mut dir = dup_dir(root).ok()?;
    for comp in ancestors {
        dir = open_dir_at(dir.as_fd(), OsStr::new(comp)).ok()?;
    }
    Some((dir, OsString::from(last)))
}

/// Directory `rel`, reached through real directories only.
fn walk_dir(root: BorrowedFd<'_>, rel: &str) -> Option<OwnedFd> {
    let mut dir = dup_dir(root).ok()?;
    for comp in rel.split('/').filter(|c| !c.is_empty()) {
        dir = open_dir_at(dir.as_fd(), OsStr::new(comp)).ok()?;
    }
    Some(dir)
}

/// The bytes of regular file `name` when it holds at most [`MAX_KEPT_FILE`].
fn read_small(dir: BorrowedFd<'_>, name: &OsStr) -> Option<Vec<u8>> {
    // O_NONBLOCK: a FIFO swapped in after the lstat must not block the open.
    let fd = openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    if kind(&fstat(fd.as_fd()).ok()?) != Kind::File {
        return None;
    }
    let mut bytes = Vec::new();
    std::fs::File::from(fd)
        .take(MAX_KEPT_FILE + 1)
        .read_to_end(&mut bytes)
        .ok()?;
    (bytes.len() as u64 <= MAX_KEPT_FILE).then_some(bytes)
}

/// The names in directory `dir` (without `.` and `..`).
fn list_dir(dir: BorrowedFd<'_>) -> nix::Result<Vec<OsString>> {
    let fd = dup_dir(dir)?;
    // SAFETY: fdopendir takes ownership of a valid directory fd (released from `fd`); the DIR
    // is closed below on every path, and readdir's entries are copied before the next call.
    unsafe {
        let raw = fd.as_raw_fd();
        let stream = libc::fdopendir(raw);
        if stream.is_null() {
            return Err(Errno::last());
        }
        std::mem::forget(fd);
        let mut names = Vec::new();
        loop {
            Errno::clear();
            let entry = libc::readdir(stream);
            if entry.is_null() {
                let errno = Errno::last_raw();
                libc::closedir(stream);
                if errno != 0 {
                    return Err(Errno::from_raw(errno));
                }
                break;
            }
            let name = CStr::from_ptr((*entry).d_name.as_ptr()).to_bytes();
            if name != b"." && name != b".." {
                names.push(OsString::from_vec(name.to_vec()));
            }
        }
        names.sort();
        Ok(names)
    }
}

/// Copy `name` in `src` to `dest_name` in `dest` without following symlinks (quarantine on
/// another file system).
fn copy_tree(
    src: BorrowedFd<'_>,
    name: &OsStr,
    dest: BorrowedFd<'_>,
    dest_name: &OsStr,
) -> Result<(), String> {
    let st = lstat_at(src, name).ok_or("it vanished")?;
    match kind(&st) {
        Kind::Dir => {
            mkdirat(dest, dest_name, Mode::from_bits_truncate(0o700)).map_err(|e| e.to_string())?;
            let from = open_dir_at(src, name).map_err(|e| e.to_string())?;
            let to = open_dir_at(dest, dest_name).map_err(|e| e.to_string())?;
            for child in list_dir(from.as_fd()).map_err(|e| e.to_string())? {
                copy_tree(from.as_fd(), &child, to.as_fd(), &child)?;
            }
            Ok(())
        }
        Kind::File => {
            let from = openat(
                src,
                name,
                OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| e.to_string())?;
            let to = openat(
                dest,
                dest_name,
                OFlag::O_WRONLY
                    | OFlag::O_CREAT
                    | OFlag::O_EXCL
                    | OFlag::O_NOFOLLOW
                    | OFlag::O_CLOEXEC,
                Mode::from_bits_truncate(0o600),
            )
            .map_err(|e| e.to_string())?;
            std::io::copy(&mut std::fs::File::from(from), &mut std::fs::File::from(to))
                .map(drop)
                .map_err(|e| e.to_string())
        }
        Kind::Link => {
            let target = readlinkat(src, name).map_err(|e| e.to_string())?;
            symlinkat(target.as_os_str(), dest, dest_name).map_err(|e| e.to_string())
        }
        // A FIFO, socket or device holds no data to keep.
        Kind::Other => Ok(()),
    }
}

/// Remove `name` in `dir` and everything beneath it, without following symlinks.
fn remove_tree(dir: BorrowedFd<'_>, name: &OsStr) -> Result<(), String> {
    let st = lstat_at(dir, name).ok_or("it vanished")?;
    if kind(&st) == Kind::Dir {
        let sub = open_dir_at(dir, name).map_err(|e| e.to_string())?;
        for child in list_dir(sub.as_fd()).map_err(|e| e.to_string())? {
            remove_tree(sub.as_fd(), &child)?;
        }
        unlinkat(dir, name, UnlinkatFlags::RemoveDir).map_err(|e| e.to_string())
    } else {
        unlinkat(dir, name, UnlinkatFlags::NoRemoveDir).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_links_stay_in_node_modules() {
        for ok in [
            "../eslint/bin/eslint.js",
            "./../a/b",
            "../@scope/pkg/cli.js",
        ] {
            assert!(links_into_a_package(Path::new(ok)), "{ok}");
        }
        for bad in [
            "../../.git/hooks/x",
            "/usr/bin/sh",
            "evil.sh",
            "../.bin/x",
            "../..",
            "../../node_modules/x/../../../y",
            "..",
        ] {
            assert!(!links_into_a_package(Path::new(bad)), "{bad}");
        }
    }

    #[test]
    fn normalize_refuses_escapes() {
        assert_eq!(normalize("./.vscode/"), Some(".vscode".into()));
        assert_eq!(normalize("a//b"), Some("a/b".into()));
        assert_eq!(normalize("../x"), None);
        assert_eq!(normalize("/etc"), None);
        assert_eq!(normalize("~/.bashrc"), None);
        assert_eq!(normalize("."), None);
    }

    #[test]
    fn program_keys() {
        for (k, v) in [
            ("core.fsmonitor", "x"),
            ("core.hookspath", "/tmp"),
            ("alias.st", "!sh -c x"),
            ("includeif.gitdir:/x/.path", "y"),
            ("filter.lfs.process", "git-lfs"),
            ("diff.Foo.textconv", "z"),
            ("merge.ours.driver", "true"),
            ("credential.https://h.helper", "store"),
            ("gpg.ssh.program", "x"),
            ("protocol.allow", "always"),
        ] {
            assert!(key_runs_program(k, v), "{k}");
        }
        for (k, v) in [
            ("core.repositoryformatversion", "0"),
            ("core.filemode", "true"),
            ("core.bare", "false"),
            ("core.logallrefupdates", "true"),
            ("remote.origin.url", "https://x"),
            ("remote.origin.fetch", "+refs/heads/*:refs/remotes/origin/*"),
            ("branch.main.remote", "origin"),
            ("alias.st", "status"),
        ] {
            assert!(!key_runs_program(k, v), "{k}");
        }
    }
}
