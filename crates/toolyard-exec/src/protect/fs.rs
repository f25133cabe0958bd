//! Workspace-relative paths, and file-system steps through directory descriptors that never
//! follow a symlink.

use super::*;

/// `item` as a normalized workspace-relative path; `None` for absolute, `~` or `..` paths.
pub(super) fn normalize(item: &str) -> Option<String> {
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
pub(super) fn inside(root: &Path, path: &Path) -> Option<String> {
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
pub(super) fn gitfile_target(root: &Path, path: &Path) -> Option<PathBuf> {
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

pub(super) fn join_rel(rel: &str, name: &str) -> String {
    if rel.is_empty() {
        name.to_string()
    } else {
        format!("{rel}/{name}")
    }
}

pub(super) fn beneath_or_at(rel: &str, ancestor: &str) -> bool {
    rel == ancestor
        || rel
            .strip_prefix(ancestor)
            .is_some_and(|rest| rest.starts_with('/'))
}

// ---------------------------------------------------------------------------------------------
// File descriptors, never following symlinks

pub(super) fn open_root(path: &Path) -> nix::Result<OwnedFd> {
    nix::fcntl::open(
        path,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

pub(super) fn dup_dir(dir: BorrowedFd<'_>) -> nix::Result<OwnedFd> {
    openat(
        dir,
        ".",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

pub(super) fn open_dir_at(dir: BorrowedFd<'_>, name: &OsStr) -> nix::Result<OwnedFd> {
    openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

pub(super) fn lstat_at(dir: BorrowedFd<'_>, name: &OsStr) -> Option<FileStat> {
    fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW).ok()
}

pub(super) fn kind(st: &FileStat) -> Kind {
    match st.st_mode & libc::S_IFMT {
        libc::S_IFDIR => Kind::Dir,
        libc::S_IFREG => Kind::File,
        libc::S_IFLNK => Kind::Link,
        _ => Kind::Other,
    }
}

/// The parent directory of `rel` (reached through real directories only) and its last name.
pub(super) fn walk_parent(root: BorrowedFd<'_>, rel: &str) -> Option<(OwnedFd, OsString)> {
    let comps: Vec<&str> = rel.split('/').collect();
    let (last, ancestors) = comps.split_last()?;
    let mut dir = dup_dir(root).ok()?;
    for comp in ancestors {
        dir = open_dir_at(dir.as_fd(), OsStr::new(comp)).ok()?;
    }
    Some((dir, OsString::from(last)))
}

/// Directory `rel`, reached through real directories only.
pub(super) fn walk_dir(root: BorrowedFd<'_>, rel: &str) -> Option<OwnedFd> {
    let mut dir = dup_dir(root).ok()?;
    for comp in rel.split('/').filter(|c| !c.is_empty()) {
        dir = open_dir_at(dir.as_fd(), OsStr::new(comp)).ok()?;
    }
    Some(dir)
}

/// The bytes of regular file `name` when it holds at most [`MAX_KEPT_FILE`].
pub(super) fn read_small(dir: BorrowedFd<'_>, name: &OsStr) -> Option<Vec<u8>> {
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
pub(super) fn list_dir(dir: BorrowedFd<'_>) -> nix::Result<Vec<OsString>> {
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
pub(super) fn copy_tree(
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
pub(super) fn remove_tree(dir: BorrowedFd<'_>, name: &OsStr) -> Result<(), String> {
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
    fn normalize_refuses_escapes() {
        assert_eq!(normalize("./.vscode/"), Some(".vscode".into()));
        assert_eq!(normalize("a//b"), Some("a/b".into()));
        assert_eq!(normalize("../x"), None);
        assert_eq!(normalize("/etc"), None);
        assert_eq!(normalize("~/.bashrc"), None);
        assert_eq!(normalize("."), None);
    }
}
