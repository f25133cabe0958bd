//! Advisory file locks (`flock`), the one helper every crate uses.

use std::io;
use std::os::fd::AsFd;

/// `flock(op)` on `file`, retried on `EINTR`: `Ok(false)` when a non-blocking request
/// (`LOCK_NB`) would block. flock locks belong to an open file description, so a lock is
/// released when every descriptor of it is closed (or by `LOCK_UN`).
pub fn flock(file: &impl AsFd, op: libc::c_int) -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    let fd = file.as_fd().as_raw_fd();
    loop {
        // SAFETY: flock on a descriptor the caller owns; it touches no memory.
        if unsafe { libc::flock(fd, op) } == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::Interrupted => continue,
            io::ErrorKind::WouldBlock => return Ok(false),
            _ => return Err(e),
        }
    }
}
