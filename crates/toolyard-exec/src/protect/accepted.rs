//! One accepted state of the protected paths per workspace, shared by all its runners.
//!
//! A command's changes to protected paths are undone against the state Toolyard last
//! accepted, never against a copy the command took when it started: a command started while
//! another one's plant stood would otherwise put the plant back after the first one's repair
//! removed it. The state is retaken only when no command of the workspace runs, in any lane,
//! runner or process: every running command (a background process and a shell for their whole
//! life) holds a shared `flock` on [`LOCK`], which the kernel drops when its holder dies, and
//! whoever gets the lock exclusively sees the workspace at rest, takes the state then, and
//! saves it for the others. Both files live in a directory only runners write (the
//! quarantine), opened beneath a descriptor of it without following symlinks.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::Path;

use nix::fcntl::{OFlag, openat, renameat};
use nix::sys::stat::Mode;

use super::{Protected, Snapshot, capture_paths, is_held, open_root};

/// The lock every running command holds shared.
const LOCK: &str = "accepted.lock";
/// The accepted state, as [`Snapshot`] serialized.
const STATE: &str = "accepted.state";
/// Where the state is written before it replaces [`STATE`].
const STATE_NEXT: &str = "accepted.state.next";

/// A running command's hold on the accepted state: while any is held, nobody retakes it.
#[derive(Debug)]
pub struct Hold {
    _lock: Option<File>,
}

impl Protected {
    /// The accepted state a command's changes are undone against, and the hold the command
    /// keeps until it has ended and been checked. `dir` is written by runners only, never by
    /// a command. Falls back to a snapshot of this moment (with a warning) when `dir` cannot
    /// be used.
    pub fn begin(&self, dir: &Path) -> (Snapshot, Hold) {
        match self.try_begin(dir) {
            Ok(pair) => pair,
            Err(e) => {
                tracing::warn!(
                    dir = %dir.display(),
                    error = %e,
                    "no shared accepted state of the protected paths; using this command's own"
                );
                (self.snapshot(), Hold { _lock: None })
            }
        }
    }

    fn try_begin(&self, dir: &Path) -> Result<(Snapshot, Hold), String> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let dir_fd = open_root(dir).map_err(|e| format!("cannot open {}: {e}", dir.display()))?;
        let lock = File::from(
            openat(
                dir_fd.as_fd(),
                LOCK,
                OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::from_bits_truncate(0o600),
            )
            .map_err(|e| format!("cannot open {LOCK}: {e}"))?,
        );
        if flock(&lock, libc::LOCK_EX | libc::LOCK_NB).is_ok() {
            // Nothing of this workspace runs: what is there now is accepted.
            let snapshot = self.snapshot();
            let saved = save(dir_fd.as_fd(), &snapshot);
            flock(&lock, libc::LOCK_SH).map_err(|e| format!("flock: {e}"))?;
            if let Err(e) = saved {
                // Others must not undo against an older state: no state is better.
                let _ = nix::unistd::unlinkat(
                    dir_fd.as_fd(),
                    STATE,
                    nix::unistd::UnlinkatFlags::NoRemoveDir,
                );
                tracing::warn!(error = %e, "cannot save the accepted state of the protected paths");
            }
            return Ok((snapshot, Hold { _lock: Some(lock) }));
        }
        flock(&lock, libc::LOCK_SH).map_err(|e| format!("flock: {e}"))?;
        let mut accepted = load(dir_fd.as_fd())?;
        if accepted.root != self.root {
            return Err(format!(
                "the accepted state is of {}, not {}",
                accepted.root.display(),
                self.root.display()
            ));
        }
        self.complete(&mut accepted);
        Ok((accepted, Hold { _lock: Some(lock) }))
    }

    /// Add to `accepted` the paths this runner protects that whoever took it left out (it
    /// held them read-only; this runner does not), as they are now.
    fn complete(&self, accepted: &mut Snapshot) {
        let missing: Vec<&String> = self
            .paths
            .iter()
            .filter(|rel| !accepted.entries.iter().any(|(r, _)| r == *rel))
            .filter(|rel| !is_held(&self.root, rel))
            .collect();
        if missing.is_empty() {
            return;
        }
        let Ok(root) = open_root(&self.root) else {
            return;
        };
        accepted
            .entries
            .extend(capture_paths(root.as_fd(), missing.into_iter()));
    }
}

fn flock(file: &File, how: libc::c_int) -> std::io::Result<()> {
    loop {
        // SAFETY: flock on a descriptor this File owns.
        if unsafe { libc::flock(file.as_raw_fd(), how) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

fn save(dir: BorrowedFd<'_>, snapshot: &Snapshot) -> Result<(), String> {
    let bytes = postcard::to_stdvec(snapshot).map_err(|e| e.to_string())?;
    let fd = openat(
        dir,
        STATE_NEXT,
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_TRUNC | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o600),
    )
    .map_err(|e| format!("cannot open {STATE_NEXT}: {e}"))?;
    let mut file = File::from(fd);
    file.write_all(&bytes).map_err(|e| e.to_string())?;
    renameat(dir, OsStr::new(STATE_NEXT), dir, OsStr::new(STATE)).map_err(|e| e.to_string())
}

fn load(dir: BorrowedFd<'_>) -> Result<Snapshot, String> {
    let fd = openat(
        dir,
        STATE,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("no accepted state to read ({STATE}: {e})"))?;
    let mut bytes = Vec::new();
    File::from(fd)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    postcard::from_bytes(&bytes).map_err(|e| format!("{STATE} is unreadable: {e}"))
}
