//! Protected paths held read-only: bind-mounted onto themselves, read-only, in the runner's own
//! mount namespace, before Landlock (a Landlock domain may not mount). A command's write to a
//! git hook or an editor's configuration then fails at once with EROFS, instead of being
//! undone after the fact; nothing of the kind is visible outside the runner's namespace, and
//! the user's own changes (made outside) show through the bind.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Enter a mount namespace of this process's own (mounts made here stay here) and hold each of
/// `paths` read-only, then make each of `writable` (beneath a held path) writable again.
/// Returns the paths actually held.
pub(crate) fn hold_read_only(paths: &[PathBuf], writable: &[PathBuf]) -> io::Result<Vec<PathBuf>> {
    // SAFETY: unshare only changes this (single-threaded) process's namespaces.
    if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // Nothing mounted below may propagate back to the namespace we came from.
    mount(None, Path::new("/"), libc::MS_REC | libc::MS_PRIVATE)?;
    // A writable place beneath a path about to be held is made when missing (its parent must
    // exist), so an installer's first run (husky writing `.husky/_`) has one.
    for path in writable {
        if paths.iter().any(|p| path.starts_with(p))
            && !path.exists()
            && let Err(e) = std::fs::create_dir(path)
        {
            tracing::debug!(path = %path.display(), error = %e, "no writable place made");
        }
    }
    let mut held = Vec::new();
    for path in paths {
        match bind(path, true) {
            Ok(()) => held.push(path.clone()),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot hold a protected path read-only")
            }
        }
    }
    for path in writable {
        if !held.iter().any(|h| path.starts_with(h)) {
            continue;
        }
        if path.exists()
            && let Err(e) = bind(path, false)
        {
            tracing::warn!(path = %path.display(), error = %e, "cannot leave a path writable");
        }
    }
    Ok(held)
}

/// Bind `path` onto itself, then remount it read-only or writable, keeping the flags the
/// kernel locks in a user namespace (nosuid, nodev, noexec, atime).
fn bind(path: &Path, read_only: bool) -> io::Result<()> {
    mount(Some(path), path, libc::MS_BIND | libc::MS_REC)?;
    let mut flags = libc::MS_BIND | libc::MS_REMOUNT | locked_flags(path)?;
    if read_only {
        flags |= libc::MS_RDONLY;
    }
    mount(None, path, flags)
}

/// The mount flags of the mount holding `path` that a remount must keep.
fn locked_flags(path: &Path) -> io::Result<libc::c_ulong> {
    let c = cstring(path)?;
    // SAFETY: statvfs fills a zeroed local struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let pairs = [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ];
    Ok(pairs
        .iter()
        .filter(|(st_flag, _)| st.f_flag & st_flag != 0)
        .fold(0, |acc, (_, ms)| acc | ms))
}

fn mount(source: Option<&Path>, target: &Path, flags: libc::c_ulong) -> io::Result<()> {
    let target = cstring(target)?;
    let source = source.map(cstring).transpose()?;
    // SAFETY: NUL-terminated strings that outlive the call; no data argument.
    let r = unsafe {
        libc::mount(
            source.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            target.as_ptr(),
            std::ptr::null(),
            flags,
            std::ptr::null(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn cstring(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))
}
