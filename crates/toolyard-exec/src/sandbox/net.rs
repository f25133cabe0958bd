//! Namespaces and the socket filter: how `no-net` loses the network.

use std::collections::BTreeMap;
use std::io;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use crate::tree::IdMaps;

/// Whether this process runs as root in the initial user namespace's sense (euid 0).
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Whether this process may make namespaces without a user namespace of its own: root with
/// CAP_SYS_ADMIN. Root in a default container lacks that capability and, like any other user,
/// needs a user namespace first.
pub(crate) fn is_privileged() -> bool {
    const CAP_SYS_ADMIN: u32 = 21;
    is_root()
        && std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                let hex = s.lines().find_map(|l| l.strip_prefix("CapEff:"))?.trim();
                u64::from_str_radix(hex, 16).ok()
            })
            .is_some_and(|caps| caps & (1 << CAP_SYS_ADMIN) != 0)
}

/// Enter new namespaces: `extra`, plus a user namespace mapping our own ids when `maps` is
/// given (prepared beforehand, as this may run in a forked child).
pub(crate) fn unshare(extra: libc::c_int, maps: Option<&IdMaps>) -> io::Result<()> {
    let flags = extra
        | if maps.is_some() {
            libc::CLONE_NEWUSER
        } else {
            0
        };
    if flags == 0 {
        return Ok(());
    }
    // SAFETY: unshare only changes this (single-threaded) process's namespaces.
    if unsafe { libc::unshare(flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if let Some(maps) = maps {
        maps.write()?;
    }
    Ok(())
}

/// Bring up `lo` in a fresh network namespace: a private loopback, unrelated to the host's.
pub(crate) fn loopback_up() -> io::Result<()> {
    // SAFETY: a datagram socket and two ioctls on a zeroed, NUL-terminated ifreq.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
            *dst = *src as libc::c_char;
        }
        let mut result = Ok(());
        if libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req) < 0 {
            result = Err(io::Error::last_os_error());
        } else {
            req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            if libc::ioctl(fd, libc::SIOCSIFFLAGS, &req) < 0 {
                result = Err(io::Error::last_os_error());
            }
        }
        libc::close(fd);
        result
    }
}

/// A filter that lets `socket()` make only AF_UNIX sockets and refuses io_uring (which could
/// open sockets without the `socket` syscall).
pub(crate) fn socket_filter() -> Result<BpfProgram, String> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|e| e.to_string())?;
    let not_unix = SeccompCondition::new(
        0,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::Ne,
        libc::AF_UNIX as u64,
    )
    .map_err(|e| e.to_string())?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    rules.insert(
        libc::SYS_socket,
        vec![SeccompRule::new(vec![not_unix]).map_err(|e| e.to_string())?],
    );
    // An empty rule list matches the syscall unconditionally.
    rules.insert(libc::SYS_io_uring_setup, Vec::new());
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EACCES as u32),
        arch,
    )
    .map_err(|e| e.to_string())?;
    BpfProgram::try_from(filter).map_err(|e| e.to_string())
}
