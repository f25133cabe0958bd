//! Descriptor helpers every spawner shares: one way to make a pipe, one to make a descriptor
//! non-blocking.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A pipe made with `pipe2(flags)` (`O_CLOEXEC`, `O_NONBLOCK`): (read end, write end).
pub(crate) fn pipe(flags: libc::c_int) -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors that we then own.
    unsafe {
        if libc::pipe2(fds.as_mut_ptr(), flags) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])))
    }
}

/// Make `fd` non-blocking (for a descriptor handed to the reactor).
pub(crate) fn set_nonblocking(fd: &OwnedFd) {
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
    }
}
