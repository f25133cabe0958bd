//! The confined workspace: path resolution beneath the root and race-free file access.

use std::io::{self, Read, Write};
use std::path::{Component, Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::{Dir, File, Metadata, OpenOptions, OpenOptionsExt, Permissions, PermissionsExt};
use toolyard_core::ToolError;

use crate::hash::{ContentHash, hash_reader};

/// Symlink hops allowed while resolving one path (Linux's own limit is 40).
const MAX_SYMLINK_HOPS: usize = 40;

/// A normalized path relative to the workspace root: `/`-separated, no `.` or `..`, no leading
/// slash; the empty path is the root itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct RelPath(String);

impl RelPath {
    /// The workspace root.
    pub fn root() -> Self {
        Self(String::new())
    }

    /// A path already in normal form (`/`-separated, no `.`/`..`, no leading slash; `.` is the
    /// root), e.g. one received from another Toolyard process.
    pub fn from_normalized(path: &str) -> Self {
        if path == "." {
            Self::root()
        } else {
            Self(path.to_string())
        }
    }

    /// The path as text (`.` for the root).
    pub fn as_str(&self) -> &str {
        if self.0.is_empty() { "." } else { &self.0 }
    }

    /// Whether this is the workspace root.
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// The path for cap-std calls (`.` for the root).
    pub fn as_path(&self) -> &Path {
        Path::new(self.as_str())
    }

    /// The parent directory (the root's parent is the root).
    pub fn parent(&self) -> RelPath {
        match self.0.rfind('/') {
            Some(i) => Self(self.0[..i].to_string()),
            None => Self::root(),
        }
    }

    /// The last component (empty for the root).
    pub fn file_name(&self) -> &str {
        match self.0.rfind('/') {
            Some(i) => &self.0[i + 1..],
            None => &self.0,
        }
    }

    /// This path with `name` appended (one component).
    pub fn join(&self, name: &str) -> RelPath {
        if self.0.is_empty() {
            Self(name.to_string())
        } else {
            Self(format!("{}/{name}", self.0))
        }
    }

    fn components(&self) -> impl DoubleEndedIterator<Item = &str> {
        self.0.split('/').filter(|c| !c.is_empty())
    }

    fn from_components(parts: &[String]) -> Self {
        Self(parts.join("/"))
    }
}

impl std::fmt::Display for RelPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a conditional write expects to find at the path (a compare-and-swap on content).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// Write whatever is there.
    Any,
    /// The file must not exist.
    Missing,
    /// The file must have this content hash.
    Hash(ContentHash),
}

/// What an atomic write did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteOutcome {
    /// The path written (after following symlinks inside the workspace).
    pub path: RelPath,
    /// Whether the file was created (it did not exist before).
    pub created: bool,
    /// Bytes written.
    pub bytes: u64,
    /// The file's mode after the write (the previous mode when it existed).
    pub mode: u32,
}

/// New content written and synced beside its file, waiting to be swapped in
/// ([`Workspace::stage`]); the temporary file is removed if it never is.
#[derive(Debug)]
pub struct Staged {
    parent: RelPath,
    parent_dir: Dir,
    /// The temporary file's name; `None` while the content is in `anon`, and once committed.
    tmp_name: Option<String>,
    /// Content in a nameless file (`O_TMPFILE`), linked in only at the commit: a crash before
    /// then leaves nothing behind.
    anon: Option<std::fs::File>,
    name: String,
    target: RelPath,
    created: bool,
    written: u64,
    mode: u32,
}

impl Staged {
    /// The path the content goes to (after following symlinks inside the workspace).
    pub fn path(&self) -> &RelPath {
        &self.target
    }

    /// Swap the content in if the file is still as `expect` says: the check and the rename
    /// under the directory's lock, as one step for every Toolyard writer, in this process or
    /// another; then the directory is synced.
    pub fn commit(mut self, ws: &Workspace, expect: &Expect) -> Result<WriteOutcome, ToolError> {
        let tmp_name = match (self.tmp_name.take(), self.anon.take()) {
            (Some(name), _) => name,
            (None, Some(file)) => {
                let name = format!(".{}.toolyard-{}.tmp", self.name, unique_suffix());
                name_anonymous(&file, &self.parent_dir, &name)
                    .map_err(|e| ws.map_err(e, &self.target))?;
                name
            }
            (None, None) => {
                return Err(ToolError::Io(
                    "internal: a staged write committed twice".into(),
                ));
            }
        };
        let dir = &self.parent_dir;
        let swapped = lock_dir(dir)
            .map_err(|e| ws.map_err(e, &self.parent))
            .and_then(|_lock| {
                ws.check_expect(dir, &self.name, &self.target, expect)?;
                dir.rename(&tmp_name, dir, &self.name)
                    .map_err(|e| ws.map_err(e, &self.target))
            });
        if let Err(e) = swapped {
            let _ = dir.remove_file(&tmp_name);
            return Err(e);
        }
        sync_dir(dir).map_err(|e| ws.map_err(e, &self.parent))?;
        Ok(WriteOutcome {
            path: self.target.clone(),
            created: self.created,
            bytes: self.written,
            mode: self.mode,
        })
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if let Some(tmp) = self.tmp_name.take() {
            let _ = self.parent_dir.remove_file(&tmp);
        }
    }
}

/// How the file tools may use a protected part of the workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protection {
    /// Neither read nor written (Toolyard's own state directory).
    Hidden,
    /// Read, never written.
    ReadOnly,
}

/// A protected part of the workspace: what, how, and why (said in the refusal).
#[derive(Debug, Clone)]
struct Protected {
    rel: RelPath,
    how: Protection,
    why: String,
}

/// The workspace root, opened once; every access goes beneath it.
#[derive(Debug)]
pub struct Workspace {
    root: PathBuf,
    given_root: PathBuf,
    dir: Dir,
    protected: Vec<Protected>,
    /// Beneath a read-only part but written by Toolyard's own tools (its artifacts).
    writable: Vec<RelPath>,
}

impl Workspace {
    /// Open the workspace at `root` (which must be an existing directory).
    pub fn open(root: &Path) -> Result<Self, ToolError> {
        let given_root = std::path::absolute(root).map_err(|e| io_err(e, root))?;
        let canonical = root.canonicalize().map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                ToolError::FileNotFound(root.to_path_buf())
            } else {
                io_err(e, root)
            }
        })?;
        if !canonical.is_dir() {
            return Err(ToolError::InvalidArguments(format!(
                "workspace {} is not a directory",
                root.display()
            )));
        }
        let dir = Dir::open_ambient_dir(&canonical, ambient_authority())
            .map_err(|e| io_err(e, &canonical))?;
        Ok(Self {
            root: canonical,
            given_root,
            dir,
            protected: Vec::new(),
            writable: Vec::new(),
        })
    }

    /// Protect `rel` and everything beneath it from the file tools; `why` is said in refusals.
    pub fn protect(&mut self, rel: RelPath, how: Protection, why: impl Into<String>) {
        self.protected.push(Protected {
            rel,
            how,
            why: why.into(),
        });
    }

    /// Let the tools write `rel` and beneath even inside a read-only part (Toolyard's own
    /// artifacts under a protected `.toolyard`); hidden parts stay hidden.
    pub fn allow_writes(&mut self, rel: RelPath) {
        self.writable.push(rel);
    }

    /// The protected paths (absolute) the file tools may not read, for walkers to prune.
    pub fn hidden_paths(&self) -> Vec<PathBuf> {
        self.protected
            .iter()
            .filter(|p| p.how == Protection::Hidden)
            .map(|p| self.absolute(&p.rel))
            .collect()
    }

    /// Refuse `rel` (resolved) when it lies in a protected part: any use of a hidden one, a
    /// write to a read-only one.
    pub fn check_protected(&self, rel: &RelPath, write: bool) -> Result<(), ToolError> {
        let within = |base: &RelPath| {
            base.is_root()
                || rel.as_str() == base.as_str()
                || rel
                    .as_str()
                    .strip_prefix(base.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
        };
        let hit = self.protected.iter().find(|p| {
            (write || p.how == Protection::Hidden)
                && within(&p.rel)
                && !(p.how == Protection::ReadOnly && self.writable.iter().any(within))
        });
        match hit {
            None => Ok(()),
            Some(p) => Err(ToolError::Blocked {
                rule: "protected path".into(),
                reason: format!(
                    "{rel} lies in {}, which {}; {}",
                    p.rel,
                    p.why,
                    if p.how == Protection::Hidden {
                        "the tools neither read nor write it"
                    } else {
                        "the tools may read it but not change it"
                    }
                ),
            }),
        }
    }

    /// The workspace root (canonical, absolute).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The root directory handle, for callers that open beneath it themselves.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// Turn a path argument into a workspace-relative path, lexically: relative paths are taken
    /// from `cwd` (an absolute directory inside the workspace), absolute ones must lie inside the
    /// root. `..` may not climb above the root; NUL bytes are refused. Symlinks are not followed
    /// here (see [`Workspace::resolve`]).
    pub fn relative(&self, path: &str, cwd: &Path) -> Result<RelPath, ToolError> {
        if path.contains('\0') {
            return Err(ToolError::outside(
                path.replace('\0', "\\0"),
                "the path contains a NUL byte",
            ));
        }
        if path.is_empty() {
            return Err(ToolError::InvalidArguments(
                "the path is empty; give a path relative to the workspace root".into(),
            ));
        }
        let p = Path::new(path);
        let (base, rest) = if p.is_absolute() {
            let inside = [&self.root, &self.given_root]
                .into_iter()
                .find_map(|r| p.strip_prefix(r).ok());
            match inside {
                Some(rest) => (RelPath::root(), rest.to_path_buf()),
                None => {
                    return Err(ToolError::outside(
                        path,
                        format!(
                            "absolute paths must lie inside the workspace root {}",
                            self.root.display()
                        ),
                    ));
                }
            }
        } else {
            let cwd_rel = self.cwd_relative(cwd)?;
            (cwd_rel, p.to_path_buf())
        };
        let mut parts: Vec<String> = base.components().map(str::to_string).collect();
        for c in rest.components() {
            match c {
                Component::Normal(s) => parts.push(s.to_string_lossy().into_owned()),
                Component::CurDir | Component::RootDir => {}
                Component::ParentDir => {
                    if parts.pop().is_none() {
                        return Err(ToolError::outside(
                            path,
                            "`..` climbs above the workspace root",
                        ));
                    }
                }
                Component::Prefix(_) => {
                    return Err(ToolError::outside(path, "path prefixes are not supported"));
                }
            }
        }
        Ok(RelPath::from_components(&parts))
    }

    fn cwd_relative(&self, cwd: &Path) -> Result<RelPath, ToolError> {
        if cwd.as_os_str().is_empty() {
            return Ok(RelPath::root());
        }
        let rest = [&self.root, &self.given_root]
            .into_iter()
            .find_map(|r| cwd.strip_prefix(r).ok())
            .ok_or_else(|| {
                ToolError::outside(cwd, "the working directory is outside the workspace")
            })?;
        let parts: Vec<String> = rest
            .components()
            .filter_map(|c| match c {
                Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
                _ => None,
            })
            .collect();
        Ok(RelPath::from_components(&parts))
    }

    /// Resolve symlinks in `rel` beneath the root: relative link targets and absolute targets
    /// inside the workspace are followed; anything leading outside is `PathOutsideWorkspace`.
    /// The final component is followed only when `follow_final` is set. Missing components are
    /// kept as they are (so a path to be created resolves too).
    pub fn resolve(&self, rel: &RelPath, follow_final: bool) -> Result<RelPath, ToolError> {
        let mut pending: Vec<String> = rel.components().rev().map(str::to_string).collect();
        let mut done: Vec<String> = Vec::new();
        let mut hops = 0;
        while let Some(part) = pending.pop() {
            if part == ".." {
                if done.pop().is_none() {
                    return Err(ToolError::outside(
                        rel.as_str(),
                        "a symlink on the path leads above the workspace root",
                    ));
                }
                continue;
            }
            if part == "." || part.is_empty() {
                continue;
            }
            done.push(part);
            let here = RelPath::from_components(&done);
            let is_final = pending.is_empty();
            let meta = match self.dir.symlink_metadata(here.as_path()) {
                Ok(m) => m,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    // Nothing more to follow: the rest is lexical.
                    while let Some(p) = pending.pop() {
                        match p.as_str() {
                            ".." => {
                                if done.pop().is_none() {
                                    return Err(ToolError::outside(
                                        rel.as_str(),
                                        "`..` climbs above the workspace root",
                                    ));
                                }
                            }
                            "." | "" => {}
                            _ => done.push(p),
                        }
                    }
                    break;
                }
                Err(e) => return Err(self.map_err(e, &here)),
            };
            if !meta.file_type().is_symlink() || (is_final && !follow_final) {
                continue;
            }
            hops += 1;
            if hops > MAX_SYMLINK_HOPS {
                return Err(ToolError::Io(format!(
                    "{}: too many levels of symbolic links",
                    rel.as_str()
                )));
            }
            let target = self
                .dir
                .read_link_contents(here.as_path())
                .map_err(|e| self.map_err(e, &here))?;
            done.pop();
            if target.is_absolute() {
                let inside = [&self.root, &self.given_root]
                    .into_iter()
                    .find_map(|r| target.strip_prefix(r).ok().map(Path::to_path_buf));
                match inside {
                    Some(rest) => {
                        done.clear();
                        push_reversed(&mut pending, &rest);
                    }
                    None => {
                        return Err(ToolError::outside(
                            rel.as_str(),
                            format!(
                                "symlink {} points outside the workspace, to {}",
                                here,
                                target.display()
                            ),
                        ));
                    }
                }
            } else {
                push_reversed(&mut pending, &target);
            }
        }
        let resolved = RelPath::from_components(&done);
        self.check_protected(&resolved, false)?;
        Ok(resolved)
    }

    /// Parse and resolve a path argument in one step (following a final symlink).
    pub fn locate(&self, path: &str, cwd: &Path) -> Result<RelPath, ToolError> {
        let rel = self.relative(path, cwd)?;
        self.resolve(&rel, true)
    }

    /// The absolute path of a resolved workspace path, for walkers that take a `Path`.
    pub fn absolute(&self, rel: &RelPath) -> PathBuf {
        if rel.is_root() {
            self.root.clone()
        } else {
            self.root.join(rel.as_str())
        }
    }

    /// Metadata of `rel` (following symlinks beneath the root), or `None` when it does not exist.
    pub fn metadata(&self, rel: &RelPath) -> Result<Option<Metadata>, ToolError> {
        match self.dir.metadata(rel.as_path()) {
            Ok(m) => Ok(Some(m)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.map_err(e, rel)),
        }
    }

    /// Open `rel` for reading, beneath the root. Only a regular file opens: a FIFO, socket or
    /// device is refused at once (opened non-blocking, so a FIFO with no writer cannot hang us).
    pub fn open_file(&self, rel: &RelPath) -> Result<File, ToolError> {
        let file = open_nonblocking(&self.dir, rel.as_path()).map_err(|e| {
            // A socket cannot be opened at all (ENXIO): say what it is instead.
            match self.dir.metadata(rel.as_path()) {
                Ok(m) => refuse_special(&m, rel).err(),
                Err(_) => None,
            }
            .unwrap_or_else(|| self.map_err(e, rel))
        })?;
        let meta = file.metadata().map_err(|e| self.map_err(e, rel))?;
        if meta.is_dir() {
            return Err(ToolError::InvalidArguments(format!(
                "{rel} is a directory, not a file; use list_directory or glob to see what it holds"
            )));
        }
        refuse_special(&meta, rel)?;
        Ok(file)
    }

    /// Read all of `rel`.
    pub fn read(&self, rel: &RelPath) -> Result<Vec<u8>, ToolError> {
        let mut file = self.open_file(rel)?;
        let mut buf = Vec::new();
        file.read_to_end(&mut buf)
            .map_err(|e| self.map_err(e, rel))?;
        Ok(buf)
    }

    /// The content hash of `rel`, or `None` when it does not exist.
    pub fn hash_of(&self, rel: &RelPath) -> Result<Option<ContentHash>, ToolError> {
        match self.open_file(rel) {
            Ok(f) => hash_reader(f).map(Some).map_err(|e| self.map_err(e, rel)),
            Err(ToolError::FileNotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Write `bytes` to `path` atomically: a temp file in the same directory, fsync, rename over
    /// the target, fsync of the directory. A symlink inside the workspace is written through; the
    /// file's mode is kept; parent directories are created. `expect` is checked just before the
    /// rename, under the same directory handle.
    pub fn write_atomic(
        &self,
        rel: &RelPath,
        bytes: &[u8],
        expect: &Expect,
    ) -> Result<WriteOutcome, ToolError> {
        self.write_atomic_from(rel, &mut &bytes[..], expect, None)
    }

    /// Like [`Workspace::write_atomic`], streaming the content from `reader`; `mode` overrides
    /// the mode the file ends with.
    pub fn write_atomic_from(
        &self,
        rel: &RelPath,
        reader: &mut dyn Read,
        expect: &Expect,
        mode: Option<u32>,
    ) -> Result<WriteOutcome, ToolError> {
        self.stage(rel, reader, mode)?.commit(self, expect)
    }

    /// The first half of an atomic write: the new content in a temporary file beside `rel`,
    /// durable, not yet in place. [`Staged::commit`] swaps it in; dropping it removes it.
    /// Journal first: a crash between the stage and the commit leaves the temporary file, which
    /// recovery removes only for a path with a pending journal entry ([`Workspace::stage_anonymous`]
    /// may run before the journal commits).
    pub fn stage(
        &self,
        rel: &RelPath,
        reader: &mut dyn Read,
        mode: Option<u32>,
    ) -> Result<Staged, ToolError> {
        let mut staged = self.prepare(rel, mode)?;
        let tmp_name = format!(".{}.toolyard-{}.tmp", staged.name, unique_suffix());
        let mut opts = OpenOptions::new();
        opts.write(true).create_new(true).mode(staged.mode);
        let dir = &staged.parent_dir;
        let mut tmp = dir
            .open_with(&tmp_name, &opts)
            .map_err(|e| self.map_err(e, &staged.target))?;
        // Named from here on: dropped or refused, it is removed.
        staged.tmp_name = Some(tmp_name);
        let mode = staged.mode;
        let result = (|| -> io::Result<u64> {
            let n = io::copy(reader, &mut tmp)?;
            tmp.flush()?;
            // The umask may have narrowed the mode at creation; set it exactly.
            tmp.set_permissions(Permissions::from_mode(mode))?;
            tmp.sync_all()?;
            Ok(n)
        })();
        staged.written = result.map_err(|e| self.map_err(e, &staged.target))?;
        Ok(staged)
    }

    /// Like [`Workspace::stage`], the content in a nameless file (`O_TMPFILE`) that only the
    /// commit links in: staged before the journal has committed, a crash leaves nothing behind,
    /// so the journal's fsync and the content's can overlap. `None` where the file system has
    /// no nameless files (then journal first and [`Workspace::stage`]).
    pub fn stage_anonymous(
        &self,
        rel: &RelPath,
        reader: &mut dyn Read,
        mode: Option<u32>,
    ) -> Result<Option<Staged>, ToolError> {
        use rustix::fs::{Mode, OFlags};
        let mut staged = self.prepare(rel, mode)?;
        let flags = OFlags::RDWR | OFlags::TMPFILE | OFlags::CLOEXEC;
        let fd = match rustix::fs::openat(
            &staged.parent_dir,
            c".",
            flags,
            Mode::from_raw_mode(staged.mode),
        ) {
            Ok(fd) => fd,
            Err(e)
                if [
                    rustix::io::Errno::OPNOTSUPP,
                    rustix::io::Errno::ISDIR,
                    rustix::io::Errno::INVAL,
                ]
                .contains(&e) =>
            {
                return Ok(None);
            }
            Err(e) => return Err(self.map_err(e.into(), &staged.target)),
        };
        let mut file = std::fs::File::from(fd);
        let mode = staged.mode;
        let result = (|| -> io::Result<u64> {
            use std::os::unix::fs::PermissionsExt as _;
            let n = io::copy(reader, &mut file)?;
            file.set_permissions(std::fs::Permissions::from_mode(mode))?;
            file.sync_all()?;
            Ok(n)
        })();
        staged.written = result.map_err(|e| self.map_err(e, &staged.target))?;
        staged.anon = Some(file);
        Ok(Some(staged))
    }

    /// The checks of a write to `rel` and its parent directory, opened: a [`Staged`] with no
    /// content yet.
    fn prepare(&self, rel: &RelPath, mode: Option<u32>) -> Result<Staged, ToolError> {
        let target = self.resolve(rel, true)?;
        if target.is_root() {
            return Err(ToolError::InvalidArguments(
                "cannot write to the workspace root; give a file path".into(),
            ));
        }
        self.check_protected(&target, true)?;
        let parent = target.parent();
        let name = target.file_name().to_string();
        if !parent.is_root() {
            self.dir
                .create_dir_all(parent.as_path())
                .map_err(|e| self.map_err(e, &parent))?;
        }
        let parent_dir = self.open_dir(&parent)?;
        let previous = match parent_dir.symlink_metadata(&name) {
            Ok(m) => Some(m),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(self.map_err(e, &target)),
        };
        if let Some(m) = &previous {
            if m.is_dir() {
                return Err(ToolError::InvalidArguments(format!(
                    "{target} is a directory; give a file path"
                )));
            }
            if m.file_type().is_symlink() {
                // A symlink that resolve() could not follow further: it points outside.
                return Err(ToolError::outside(
                    rel.as_str(),
                    format!("{target} is a symlink that leads outside the workspace"),
                ));
            }
        }
        let mode = mode
            .or_else(|| previous.as_ref().map(|m| m.permissions().mode() & 0o7777))
            .unwrap_or(0o644);

        Ok(Staged {
            parent,
            parent_dir,
            tmp_name: None,
            anon: None,
            name,
            target,
            created: previous.is_none(),
            written: 0,
            mode,
        })
    }

    fn check_expect(
        &self,
        parent_dir: &Dir,
        name: &str,
        target: &RelPath,
        expect: &Expect,
    ) -> Result<(), ToolError> {
        if let Ok(m) = parent_dir.metadata(name) {
            refuse_special(&m, target)?;
        }
        let current = match open_nonblocking(parent_dir, Path::new(name)) {
            Ok(f) => {
                refuse_special(&f.metadata().map_err(|e| self.map_err(e, target))?, target)?;
                Some(hash_reader(f).map_err(|e| self.map_err(e, target))?)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(self.map_err(e, target)),
        };
        let ok = match (expect, &current) {
            (Expect::Any, _) => true,
            (Expect::Missing, None) => true,
            (Expect::Hash(h), Some(c)) => h == c,
            _ => false,
        };
        if ok {
            Ok(())
        } else {
            Err(ToolError::StaleRead {
                path: target.to_string(),
            })
        }
    }

    /// Remove the file `rel` (not a directory), durably.
    pub fn remove_file(&self, rel: &RelPath) -> Result<(), ToolError> {
        let target = self.resolve(rel, false)?;
        self.check_protected(&target, true)?;
        let parent_dir = self.open_dir(&target.parent())?;
        parent_dir
            .remove_file(target.file_name())
            .map_err(|e| self.map_err(e, &target))?;
        sync_dir(&parent_dir).map_err(|e| self.map_err(e, &target))
    }

    /// Open the directory `rel` beneath the root.
    pub fn open_dir(&self, rel: &RelPath) -> Result<Dir, ToolError> {
        if rel.is_root() {
            return self.dir.try_clone().map_err(|e| self.map_err(e, rel));
        }
        self.dir
            .open_dir(rel.as_path())
            .map_err(|e| self.map_err(e, rel))
    }

    /// Map an I/O error on `rel` to the `ToolError` a model can act on.
    pub fn map_err(&self, e: io::Error, rel: &RelPath) -> ToolError {
        if is_escape(&e) {
            return ToolError::outside(rel.as_str(), "it resolves outside the workspace");
        }
        match e.kind() {
            io::ErrorKind::NotFound => ToolError::FileNotFound(PathBuf::from(rel.as_str())),
            io::ErrorKind::PermissionDenied => ToolError::Io(format!("{rel}: permission denied")),
            _ => ToolError::Io(format!("{rel}: {e}")),
        }
    }
}

/// Whether cap-std refused because the path led outside the root.
fn is_escape(e: &io::Error) -> bool {
    let msg = e.to_string();
    msg.contains("outside of the filesystem") || msg.contains("escape")
}

fn io_err(e: io::Error, path: &Path) -> ToolError {
    ToolError::Io(format!("{}: {e}", path.display()))
}

fn push_reversed(pending: &mut Vec<String>, target: &Path) {
    let parts: Vec<String> = target
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
            Component::ParentDir => Some("..".to_string()),
            _ => None,
        })
        .collect();
    pending.extend(parts.into_iter().rev());
}

/// Open `path` beneath `dir` for reading without blocking on a FIFO that has no writer.
fn open_nonblocking(dir: &Dir, path: &Path) -> io::Result<File> {
    let mut opts = OpenOptions::new();
    opts.read(true).custom_flags(libc::O_NONBLOCK);
    dir.open_with(path, &opts)
}

/// A FIFO, socket or device is not content a tool can read or replace.
fn refuse_special(meta: &Metadata, rel: &RelPath) -> Result<(), ToolError> {
    use cap_std::fs::FileTypeExt;
    let ft = meta.file_type();
    let what = if ft.is_fifo() {
        "a FIFO (named pipe)"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else {
        return Ok(());
    };
    Err(ToolError::InvalidArguments(format!(
        "{rel} is {what}, not a regular file: reading it could block or never end, so file \
         tools refuse it; use run_command if you really mean to read from it"
    )))
}

/// An exclusive `flock` on a directory, released when dropped. flock locks belong to an open file
/// description, so each lock opens the directory afresh: two locks then exclude each other, in
/// one process or many (a `dup` of a shared handle would not).
struct DirLock(File);

fn lock_dir(dir: &Dir) -> io::Result<DirLock> {
    // A read-only open (directory handles are O_PATH, on which flock fails).
    let own = dir.open(".")?;
    crate::lock::flock(&own, libc::LOCK_EX)?;
    Ok(DirLock(own))
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // Closing the descriptor would release the lock as well.
        let _ = crate::lock::flock(&self.0, libc::LOCK_UN);
    }
}

fn sync_dir(dir: &Dir) -> io::Result<()> {
    dir.open(".")?.sync_all()
}

/// Give the nameless `file` the name `name` in `dir`: through `/proc/self/fd` (no privilege
/// needed), else `AT_EMPTY_PATH` (needs CAP_DAC_READ_SEARCH), else by copying it into a new
/// file of that name (synced).
fn name_anonymous(file: &std::fs::File, dir: &Dir, name: &str) -> io::Result<()> {
    use rustix::fs::{AtFlags, CWD, linkat};
    use std::os::fd::AsRawFd;
    let proc_path = format!("/proc/self/fd/{}", file.as_raw_fd());
    if linkat(CWD, proc_path.as_str(), dir, name, AtFlags::SYMLINK_FOLLOW).is_ok()
        || linkat(file, c"", dir, name, AtFlags::EMPTY_PATH).is_ok()
    {
        return Ok(());
    }
    let mode = {
        use std::os::unix::fs::PermissionsExt as _;
        file.metadata()?.permissions().mode() & 0o7777
    };
    let mut opts = OpenOptions::new();
    opts.write(true).create_new(true).mode(mode);
    let mut copy = dir.open_with(name, &opts)?;
    let written = (|| -> io::Result<()> {
        let mut reader = file;
        std::io::Seek::seek(&mut reader, std::io::SeekFrom::Start(0))?;
        io::copy(&mut reader, &mut copy)?;
        copy.set_permissions(Permissions::from_mode(mode))?;
        copy.sync_all()
    })();
    if written.is_err() {
        let _ = dir.remove_file(name);
    }
    written
}

fn unique_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{}-{n}-{nanos:x}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{PermissionsExt as _, symlink};

    fn ws() -> (tempfile::TempDir, Workspace) {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir(t.path().join("ws")).unwrap();
        let w = Workspace::open(&t.path().join("ws")).unwrap();
        (t, w)
    }

    #[test]
    fn relative_paths_normalize_inside() {
        let (_t, w) = ws();
        let root = w.root().to_path_buf();
        assert_eq!(w.relative("a/./b/../c", &root).unwrap().as_str(), "a/c");
        assert_eq!(w.relative(".", &root).unwrap().as_str(), ".");
        assert_eq!(
            w.relative(root.join("x/y").to_str().unwrap(), &root)
                .unwrap()
                .as_str(),
            "x/y"
        );
        assert_eq!(
            w.relative("z", &root.join("sub")).unwrap().as_str(),
            "sub/z"
        );
    }

    #[test]
    fn escapes_are_refused() {
        let (_t, w) = ws();
        let root = w.root().to_path_buf();
        for bad in ["..", "../x", "a/../../x", "/etc/passwd", "a\0b"] {
            let e = w.relative(bad, &root).unwrap_err();
            assert_eq!(e.kind(), "path_outside_workspace", "{bad}: {e}");
        }
    }

    #[test]
    fn symlink_inside_works_and_outside_is_refused() {
        let (t, w) = ws();
        let root = w.root().to_path_buf();
        std::fs::write(root.join("real.txt"), "hi").unwrap();
        std::fs::write(t.path().join("secret"), "s").unwrap();
        symlink("real.txt", root.join("rel-link")).unwrap();
        symlink(root.join("real.txt"), root.join("abs-link")).unwrap();
        symlink(t.path().join("secret"), root.join("out-link")).unwrap();
        symlink("../secret", root.join("dotdot-link")).unwrap();
        for ok in ["rel-link", "abs-link"] {
            let rel = w.locate(ok, &root).unwrap();
            assert_eq!(w.read(&rel).unwrap(), b"hi");
        }
        for bad in ["out-link", "dotdot-link"] {
            let e = w.locate(bad, &root).unwrap_err();
            assert_eq!(e.kind(), "path_outside_workspace", "{bad}: {e}");
            let e = w.read(&w.relative(bad, &root).unwrap()).unwrap_err();
            assert_eq!(e.kind(), "path_outside_workspace", "{bad}: {e}");
        }
    }

    #[test]
    fn atomic_write_keeps_mode_and_checks_expectation() {
        let (_t, w) = ws();
        let root = w.root().to_path_buf();
        let rel = w.locate("dir/f.sh", &root).unwrap();
        let out = w.write_atomic(&rel, b"one", &Expect::Missing).unwrap();
        assert!(out.created);
        std::fs::set_permissions(
            root.join("dir/f.sh"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        let h = w.hash_of(&rel).unwrap().unwrap();
        w.write_atomic(&rel, b"two", &Expect::Hash(h.clone()))
            .unwrap();
        let mode = std::fs::metadata(root.join("dir/f.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        let e = w
            .write_atomic(&rel, b"three", &Expect::Hash(h))
            .unwrap_err();
        assert_eq!(e.kind(), "stale_read");
        assert_eq!(std::fs::read(root.join("dir/f.sh")).unwrap(), b"two");
        let leftovers: Vec<_> = std::fs::read_dir(root.join("dir")).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temp files left behind");
    }

    #[test]
    fn dangling_symlink_to_outside_is_refused_on_write() {
        let (t, w) = ws();
        let root = w.root().to_path_buf();
        symlink(t.path().join("new-outside"), root.join("dangling")).unwrap();
        let rel = w.relative("dangling", &root).unwrap();
        let e = w.write_atomic(&rel, b"x", &Expect::Any).unwrap_err();
        assert_eq!(e.kind(), "path_outside_workspace");
        assert!(!t.path().join("new-outside").exists());
    }

    proptest::proptest! {
        #[test]
        fn random_path_strings_never_resolve_outside(
            parts in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::strategy::Just("..".to_string()),
                    proptest::strategy::Just(".".to_string()),
                    proptest::strategy::Just("".to_string()),
                    proptest::strategy::Just("sub".to_string()),
                    proptest::strategy::Just("out".to_string()),
                    proptest::strategy::Just("up".to_string()),
                    proptest::strategy::Just("secret".to_string()),
                    proptest::strategy::Just("f.txt".to_string()),
                    "[a-z.\\\\~%$*-]{1,6}",
                    proptest::strategy::Just("\0".to_string()),
                ],
                0..8,
            ),
            absolute in proptest::bool::ANY,
        ) {
            let (t, w) = ws();
            let root = w.root().to_path_buf();
            std::fs::create_dir_all(root.join("sub")).unwrap();
            std::fs::write(root.join("sub/f.txt"), "inside").unwrap();
            std::fs::write(t.path().join("secret"), "SECRET").unwrap();
            symlink(t.path(), root.join("out")).unwrap();
            symlink("..", root.join("sub/up")).unwrap();
            let joined = parts.join("/");
            let path = if absolute { format!("{}/{joined}", root.display()) } else { joined };
            if let Ok(rel) = w.locate(&path, &root.join("sub")) {
                proptest::prop_assert!(!rel.as_str().split('/').any(|c| c == ".."), "{rel}");
                proptest::prop_assert!(w.absolute(&rel).starts_with(&root));
                if let Ok(bytes) = w.read(&rel) {
                    proptest::prop_assert_ne!(bytes, b"SECRET".to_vec());
                }
            }
            // Unresolved paths too: the beneath-open itself must refuse the escape.
            if let Ok(bytes) = w.relative(&path, &root).and_then(|rel| w.read(&rel)) {
                proptest::prop_assert_ne!(bytes, b"SECRET".to_vec());
            }
        }
    }
}
