//! The command domain: what every command enters between fork and exec. The lane's sandbox
//! prepares it once, in `apply` (the net lanes' network rules, the nested Landlock ruleset);
//! every spawner enters it, then drops every capability and closes the descriptors above 2.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;

use seccompiler::BpfProgram;

/// Past the highest capability any kernel defines (`CAP_LAST_CAP` is 40 in Linux 6.x); dropping
/// one the kernel does not know fails harmlessly with EINVAL.
const CAP_BOUND: libc::c_ulong = 64;
/// `_LINUX_CAPABILITY_VERSION_3` of `<linux/capability.h>`.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// The nested Landlock ruleset each command enters (the sandbox's `fs::command_layer`), once
/// applied.
static COMMAND_LAYER: OnceLock<OwnedFd> = OnceLock::new();
/// The commands' network namespace.
static NETNS: OnceLock<OwnedFd> = OnceLock::new();
/// The fallback's Landlock ruleset (TCP connect to the forwarder's port only).
static NET_LAYER: OnceLock<OwnedFd> = OnceLock::new();
/// The fallback's seccomp filter (stream sockets only), as the kernel takes it.
static NET_FILTER: OnceLock<BpfProgram> = OnceLock::new();

/// Keep the ruleset every command enters from now on (set once, by the sandbox).
pub(crate) fn set_command_layer(layer: OwnedFd) {
    let _ = COMMAND_LAYER.set(layer);
}

/// Keep the network namespace every command enters from now on (set once, by the sandbox).
pub(crate) fn set_netns(ns: OwnedFd) {
    let _ = NETNS.set(ns);
}

/// The commands' network namespace, once set.
pub(crate) fn netns() -> Option<RawFd> {
    NETNS.get().map(|fd| fd.as_raw_fd())
}

/// Keep the fallback's network rules every command enters from now on (set once, by the
/// sandbox, where no namespace can be made).
pub(crate) fn set_net_fallback(layer: OwnedFd, filter: BpfProgram) {
    let _ = NET_LAYER.set(layer);
    let _ = NET_FILTER.set(filter);
}

/// The descriptor of the ruleset a command must enter before it execs, or -1 when this process
/// is not sandboxed (inline mode).
pub(crate) fn command_layer_fd() -> libc::c_int {
    COMMAND_LAYER.get().map_or(-1, |fd| fd.as_raw_fd())
}

/// Enter the command's own Landlock domain, drop every capability for good, and close every
/// descriptor above 2 on exec.
///
/// # Safety
/// Async-signal-safe (raw syscalls only): call between fork and exec.
pub(crate) unsafe fn enter_command_domain(layer: libc::c_int) -> io::Result<()> {
    // SAFETY: raw syscalls on plain integers.
    unsafe {
        // The net lanes' gate (a namespace, or Landlock and seccomp network rules) first:
        // entering a namespace needs the capabilities dropped below.
        enter_command_net()?;
        if layer >= 0 {
            if libc::syscall(libc::SYS_landlock_restrict_self, layer, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            drop_capabilities();
        }
        // Nothing but 0, 1 and 2 crosses into the command, whatever a library left open.
        libc::syscall(
            libc::SYS_close_range,
            3,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        );
    }
    Ok(())
}

/// Enter the commands' network rules: the namespace, or the fallback's Landlock and seccomp
/// layers.
///
/// # Safety
/// Async-signal-safe (raw syscalls only): call between fork and exec, before capabilities are
/// dropped (entering a namespace needs CAP_SYS_ADMIN in the runner's user namespace).
unsafe fn enter_command_net() -> io::Result<()> {
    // SAFETY: raw syscalls on descriptors and a program prepared before the fork.
    unsafe {
        if let Some(ns) = NETNS.get()
            && libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) != 0
        {
            return Err(io::Error::last_os_error());
        }
        if let Some(layer) = NET_LAYER.get()
            && libc::syscall(libc::SYS_landlock_restrict_self, layer.as_raw_fd(), 0) != 0
        {
            return Err(io::Error::last_os_error());
        }
        if let Some(prog) = NET_FILTER.get() {
            let fprog = libc::sock_fprog {
                len: prog.len() as libc::c_ushort,
                filter: prog.as_ptr() as *mut libc::sock_filter,
            };
            if libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &fprog as *const libc::sock_fprog,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// Drop every capability from the bounding, ambient, effective, permitted and inheritable
/// sets, so a command of a root runner is root without powers: no device nodes (CAP_MKNOD), no
/// network or mount reconfiguration (CAP_NET_ADMIN, CAP_SYS_ADMIN), no ptrace of the runner or
/// server (CAP_SYS_PTRACE), no file-permission override; and an exec (of a setuid binary or
/// as uid 0) gains none back, the bounding set being empty. Without CAP_SETPCAP (any
/// unprivileged runner) there is nothing to drop and the calls fail harmlessly.
///
/// # Safety
/// Async-signal-safe (raw syscalls only): call between fork and exec.
unsafe fn drop_capabilities() {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    // SAFETY: prctl and capset on plain integers and local structs.
    unsafe {
        // The bounding set first: dropping from it needs CAP_SETPCAP, which capset then clears.
        for cap in 0..CAP_BOUND {
            libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
        }
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        );
        let header = Header {
            version: CAPABILITY_VERSION_3,
            pid: 0,
        };
        let data = [Data {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        libc::syscall(libc::SYS_capset, &header, data.as_ptr());
    }
}
