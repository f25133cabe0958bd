//! Putting protected paths back: the `Fixer` that restores what a command changed and moves
//! what it planted into the quarantine.

use super::fs::{copy_tree, dup_dir, list_dir, open_dir_at, read_small, remove_tree, walk_dir};
use super::gitconfig::{package_link_change, runs_program, same_git_programs};
use super::snapshot::{Budget, Node, Stamp, capture, kind_name, unchanged, what};
use super::*;

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
