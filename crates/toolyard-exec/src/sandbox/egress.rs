//! The runner's end of the egress gate: how commands of the `net` and `heavy` lanes reach the
//! network only through the proxy the server runs (crate `toolyard-egress`).
//!
//! The server starts a runner with the gate's unix socket in [`SOCKET_ENV`]. The runner then
//! makes a network namespace with only a loopback (a forked child unshares it, brings `lo` up,
//! binds `127.0.0.1:<port>` there and hands both descriptors back), and forwards every
//! connection to that port to the gate's socket: a pathname socket, reachable from any
//! network namespace. Each command enters the namespace before it execs (the command domain's
//! `enter_command_net`); the runner itself stays in the host's (`web_fetch` has its own
//! guard). Commands get `HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY` (socks5h: names resolved by
//! the gate) and what npm, pip and yarn read ([`command_env`]).
//!
//! Where no namespace can be made (a container without CAP_SYS_ADMIN that refuses user
//! namespaces), the forwarder listens on the host's loopback instead and each command gets a
//! Landlock (ABI 4) rule allowing TCP connections only to that port, and a seccomp filter
//! allowing only stream sockets (no UDP, so no DNS): what still gets through is TCP to that
//! same port number on another host. Without Landlock ABI 4 the lane's network stays open, and
//! the report says so.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::OnceLock;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use toolyard_core::Lane;

use super::{FeatureStatus, SandboxReport, net};
use crate::domain;

mod ports;

/// The environment variable through which the server hands a runner the gate's unix socket.
pub const SOCKET_ENV: &str = "TOOLYARD_EGRESS_SOCKET";

/// How this runner's commands reach the gate.
#[derive(Debug)]
pub struct Egress {
    /// The port of the forwarder (on the namespace's loopback, or the host's).
    pub port: u16,
    /// Whether commands are in a network namespace of their own (else the Landlock fallback).
    pub namespace: bool,
}

static EGRESS: OnceLock<Egress> = OnceLock::new();
/// The variables every command gets.
static COMMAND_ENV: OnceLock<Vec<(String, String)>> = OnceLock::new();

/// How this runner's commands reach the network, when they go through the gate.
pub fn active() -> Option<&'static Egress> {
    EGRESS.get()
}

/// The proxy variables every command of this runner gets (none without a gate).
pub fn command_env() -> &'static [(String, String)] {
    COMMAND_ENV.get().map_or(&[], Vec::as_slice)
}

/// Set up the gate's runner end for `lane`, if the server gave a gate. Call from `apply`,
/// single-threaded, after the runner's own user namespace exists.
pub(crate) fn isolate(lane: Lane, report: &mut SandboxReport) {
    let socket = std::env::var_os(SOCKET_ENV).map(PathBuf::from);
    // SAFETY: `apply` runs single-threaded; commands must not see the socket's path.
    unsafe { std::env::remove_var(SOCKET_ENV) };
    if lane == Lane::NoNet {
        return;
    }
    let Some(socket) = socket else {
        report.add(
            "egress-gate",
            FeatureStatus::NotRequested,
            "no gate (this runner was not started by a Toolyard server on this machine): commands reach every address",
        );
        return;
    };
    let attempt = if std::env::var(super::SKIP_NETNS_ENV).is_ok_and(|v| v == "1") {
        Err(io::Error::other(format!(
            "skipped ({}=1)",
            super::SKIP_NETNS_ENV
        )))
    } else {
        namespace()
    };
    let (listener, namespace, how) = match attempt {
        Ok((ns, listener)) => {
            domain::set_netns(ns);
            (
                listener,
                true,
                "commands run in a network namespace of their own with only a loopback, \
                 where the forwarder listens; a port a command listens on there is forwarded \
                 from the same port of the host's 127.0.0.1 (not other interfaces) when free"
                    .to_string(),
            )
        }
        Err(ns_error) => match fallback() {
            Ok((listener, layer, filter)) => {
                domain::set_net_fallback(layer, filter);
                (
                    listener,
                    false,
                    format!(
                        "no network namespace here ({ns_error}): Landlock lets commands make TCP \
                         connections only to the forwarder's port on the host's loopback, and \
                         seccomp only stream sockets (no UDP, so no DNS); NOT enforced: a TCP \
                         connection to that same port number on another host, and commands' \
                         own servers on the loopback are unreachable from other commands"
                    ),
                )
            }
            Err(e) => {
                report.add(
                    "egress-gate",
                    FeatureStatus::NotEnforced,
                    format!(
                        "no network namespace ({ns_error}) and no Landlock ABI 4 network rules \
                         ({e}): commands reach every address, and [network] is not applied"
                    ),
                );
                return;
            }
        },
    };
    let port = match local_port(&listener) {
        Ok(p) => p,
        Err(e) => {
            report.add(
                "egress-gate",
                FeatureStatus::NotEnforced,
                format!("the forwarder's socket: {e}"),
            );
            return;
        }
    };
    let netns = domain::netns();
    if let Err(e) = spawn_forwarder(listener, socket, netns) {
        report.add(
            "egress-gate",
            FeatureStatus::NotEnforced,
            format!("cannot start the forwarder: {e}"),
        );
        return;
    }
    let _ = COMMAND_ENV.set(proxy_env(port));
    let _ = EGRESS.set(Egress { port, namespace });
    report.add(
        "egress-gate",
        if namespace {
            FeatureStatus::Enforced
        } else {
            FeatureStatus::Partial
        },
        format!(
            "every connection goes through Toolyard's gate, a proxy outside the sandbox at \
             127.0.0.1:{port} (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY=socks5h), which resolves \
             names itself and applies [network]; {how}"
        ),
    );
}

/// The variables that point programs at the forwarder on `port`.
fn proxy_env(port: u16) -> Vec<(String, String)> {
    let http = format!("http://127.0.0.1:{port}");
    let socks = format!("socks5h://127.0.0.1:{port}");
    let local = "localhost,127.0.0.1,::1".to_string();
    let mut vars = Vec::new();
    for (names, value) in [
        (
            &["HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"][..],
            &http,
        ),
        (&["ALL_PROXY", "all_proxy"][..], &socks),
        (&["NO_PROXY", "no_proxy"][..], &local),
        (
            &[
                "npm_config_proxy",
                "npm_config_https_proxy",
                "PIP_PROXY",
                "YARN_HTTP_PROXY",
                "YARN_HTTPS_PROXY",
            ][..],
            &http,
        ),
    ] {
        for name in names {
            vars.push((name.to_string(), value.clone()));
        }
    }
    vars
}

/// A new network namespace with its loopback up, and a listener on its 127.0.0.1: made by a
/// forked child (the runner stays where it is) and handed back over a socket pair.
fn namespace() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut pair = [0 as RawFd; 2];
    // SAFETY: socketpair fills the array on success.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            pair.as_mut_ptr(),
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors are fresh and ours.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(pair[0]), OwnedFd::from_raw_fd(pair[1])) };
    // SAFETY: the process is single-threaded (apply checked), so the child may do anything;
    // it leaves with _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        drop(ours);
        let code = match child_namespace(theirs.as_raw_fd()) {
            Ok(()) => 0,
            Err(e) => e.raw_os_error().unwrap_or(libc::EIO).clamp(1, 255),
        };
        // SAFETY: leaving the forked child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    drop(theirs);
    let received = recv_fds(ours.as_raw_fd());
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) != 0 {
        return Err(io::Error::from_raw_os_error(libc::WEXITSTATUS(status)));
    }
    match received?.as_slice() {
        [ns, listener] => {
            // SAFETY: received from the child, now ours alone.
            Ok(unsafe { (OwnedFd::from_raw_fd(*ns), OwnedFd::from_raw_fd(*listener)) })
        }
        other => {
            for fd in other {
                // SAFETY: received descriptors we will not use.
                unsafe { libc::close(*fd) };
            }
            Err(io::Error::other("the namespace child sent no descriptors"))
        }
    }
}

/// In the forked child: unshare the network, bring up `lo`, listen on 127.0.0.1:0 and send
/// the namespace and the listener to the parent.
fn child_namespace(to_parent: RawFd) -> io::Result<()> {
    net::unshare(libc::CLONE_NEWNET, None)?;
    net::loopback_up()?;
    // SAFETY: plain syscalls on a NUL-terminated path and a fresh socket.
    unsafe {
        let ns = libc::open(
            c"/proc/self/ns/net".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if ns < 0 {
            return Err(io::Error::last_os_error());
        }
        let listener = loopback_listener()?;
        send_fds(to_parent, &[ns, listener.as_raw_fd()])
    }
}

/// A listening TCP socket on 127.0.0.1 with a port the kernel picks.
fn loopback_listener() -> io::Result<OwnedFd> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    Ok(OwnedFd::from(listener))
}

fn local_port(fd: &OwnedFd) -> io::Result<u16> {
    let dup = fd.try_clone()?;
    let listener = std::net::TcpListener::from(dup);
    Ok(listener.local_addr()?.port())
}

/// The fallback without a namespace: a listener on the host's loopback, a Landlock ruleset
/// allowing TCP connections to its port only, and a seccomp filter allowing stream sockets only.
fn fallback() -> io::Result<(OwnedFd, OwnedFd, BpfProgram)> {
    use landlock::{
        AccessFs, AccessNet, NetPort, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr,
    };
    let listener = loopback_listener()?;
    let port = local_port(&listener)?;
    let err = |e: landlock::RulesetError| io::Error::other(e.to_string());
    let abi = super::fs::kernel_abi();
    if abi < 4 {
        return Err(io::Error::other(format!(
            "Landlock ABI {abi}, network rules need 4"
        )));
    }
    // Landlock refuses reparenting (a rename or link into another directory, EXDEV) in any
    // domain that does not handle `Refer`: this layer handles it and grants it everywhere, so
    // it restricts connections only and leaves files to the command's own domain.
    let root = PathFd::new("/").map_err(|e| io::Error::other(e.to_string()))?;
    let rules = Ruleset::default()
        .handle_access(AccessNet::ConnectTcp)
        .map_err(err)?
        .handle_access(AccessFs::Refer)
        .map_err(err)?
        .create()
        .map_err(err)?
        .add_rule(NetPort::new(port, AccessNet::ConnectTcp))
        .map_err(err)?
        .add_rule(PathBeneath::new(root, AccessFs::Refer))
        .map_err(err)?;
    let layer = Option::<OwnedFd>::from(rules)
        .ok_or_else(|| io::Error::other("Landlock network rules are not supported here"))?;
    let filter = stream_only_filter().map_err(io::Error::other)?;
    Ok((listener, layer, filter))
}

/// `socket()` may make unix and netlink sockets, and IPv4/IPv6 sockets of type SOCK_STREAM
/// only; io_uring is refused (it could make sockets without `socket`).
fn stream_only_filter() -> Result<BpfProgram, String> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|e| e.to_string())?;
    let cond = |arg, op, value: u64| {
        SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).map_err(|e| e.to_string())
    };
    let rule = |conds| SeccompRule::new(conds).map_err(|e| e.to_string());
    // Refused: a family other than these four, and an IPv4 or IPv6 socket of any type but
    // SOCK_STREAM (the type's low four bits; SOCK_NONBLOCK and SOCK_CLOEXEC lie above them).
    let mut refused = vec![rule(vec![
        cond(0, SeccompCmpOp::Ne, libc::AF_UNIX as u64)?,
        cond(0, SeccompCmpOp::Ne, libc::AF_NETLINK as u64)?,
        cond(0, SeccompCmpOp::Ne, libc::AF_INET as u64)?,
        cond(0, SeccompCmpOp::Ne, libc::AF_INET6 as u64)?,
    ])?];
    for family in [libc::AF_INET, libc::AF_INET6] {
        for kind in [
            libc::SOCK_DGRAM,
            libc::SOCK_RAW,
            libc::SOCK_RDM,
            libc::SOCK_SEQPACKET,
            libc::SOCK_DCCP,
            10, // SOCK_PACKET (deprecated in libc, still a type the kernel takes)
        ] {
            refused.push(rule(vec![
                cond(0, SeccompCmpOp::Eq, family as u64)?,
                cond(1, SeccompCmpOp::MaskedEq(0xf), kind as u64)?,
            ])?);
        }
    }
    let mut rules = std::collections::BTreeMap::new();
    rules.insert(libc::SYS_socket, refused);
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

/// Forward each connection to `listener` to the gate's `socket`, on a thread of its own. With
/// `netns`, that thread enters the namespace, and commands' servers there are mirrored onto
/// the host's loopback ([`ports`]).
fn spawn_forwarder(listener: OwnedFd, socket: PathBuf, netns: Option<RawFd>) -> io::Result<()> {
    let listener = std::net::TcpListener::from(listener);
    listener.set_nonblocking(true)?;
    let port = listener.local_addr()?.port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("egress-forwarder".into())
        .spawn(move || {
            // SAFETY: setns on a descriptor this process holds, for this thread only.
            let inside = netns.is_some_and(|fd| unsafe { libc::setns(fd, libc::CLONE_NEWNET) } == 0);
            if netns.is_some() && !inside {
                tracing::warn!(error = %io::Error::last_os_error(), "the forwarder cannot enter the lane's namespace: servers there stay unreachable from the host");
            }
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::error!(error = %e, "the egress forwarder cannot start");
                    return;
                }
            };
            if inside {
                // SAFETY: gettid cannot fail.
                let _ = tx.send((rt.handle().clone(), unsafe { libc::gettid() }));
            }
            drop(tx);
            rt.block_on(forward(listener, socket));
        })?;
    if let Ok((rt, tid)) = rx.recv() {
        ports::spawn(rt, tid, port)?;
    }
    Ok(())
}

async fn forward(listener: std::net::TcpListener, socket: PathBuf) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "the egress forwarder cannot listen");
            return;
        }
    };
    loop {
        let Ok((mut client, _)) = listener.accept().await else {
            continue;
        };
        let socket = socket.clone();
        tokio::spawn(async move {
            let _ = client.set_nodelay(true);
            match tokio::net::UnixStream::connect(&socket).await {
                Ok(mut gate) => {
                    let _ = tokio::io::copy_bidirectional_with_sizes(
                        &mut client,
                        &mut gate,
                        256 * 1024,
                        256 * 1024,
                    )
                    .await;
                }
                Err(e) => {
                    tracing::warn!(error = %e, socket = %socket.display(), "the egress gate is unreachable")
                }
            }
        });
    }
}

/// Run `f` on a message of one data byte whose control buffer has room for `count`
/// descriptors (SCM_RIGHTS): what both ends of a descriptor hand-over build.
fn with_fd_message<T>(
    count: usize,
    f: impl FnOnce(&mut libc::msghdr) -> io::Result<T>,
) -> io::Result<T> {
    let size = count * std::mem::size_of::<RawFd>();
    // SAFETY: CMSG_SPACE only computes a size.
    let mut cbuf = vec![0u8; unsafe { libc::CMSG_SPACE(size as u32) } as usize];
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // SAFETY: msghdr is plain data, and all zeroes is an empty one.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = cbuf.len() as _;
    // The message points at `iov`, `byte` and `cbuf`, all alive until `f` returns.
    f(&mut msg)
}

/// Send `fds` over the unix socket `sock` (SCM_RIGHTS).
fn send_fds(sock: RawFd, fds: &[RawFd]) -> io::Result<()> {
    let size = std::mem::size_of_val(fds);
    with_fd_message(fds.len(), |msg| {
        // SAFETY: CMSG macros over a buffer sized by CMSG_SPACE; the message points at live data.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(size as u32) as _;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr(),
                libc::CMSG_DATA(cmsg).cast::<RawFd>(),
                fds.len(),
            );
            if libc::sendmsg(sock, msg, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    })
}

/// Receive up to two descriptors sent by [`send_fds`].
fn recv_fds(sock: RawFd) -> io::Result<Vec<RawFd>> {
    const MAX: usize = 2;
    with_fd_message(MAX, |msg| {
        // SAFETY: as in send_fds; the kernel writes at most msg_controllen bytes.
        unsafe {
            let n = libc::recvmsg(sock, msg, libc::MSG_CMSG_CLOEXEC);
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            let mut fds = Vec::new();
            let mut cmsg = libc::CMSG_FIRSTHDR(msg);
            while !cmsg.is_null() {
                if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                    let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                    let count = ((*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                        / std::mem::size_of::<RawFd>();
                    for i in 0..count.min(MAX) {
                        fds.push(std::ptr::read_unaligned(data.add(i)));
                    }
                }
                cmsg = libc::CMSG_NXTHDR(msg, cmsg);
            }
            Ok(fds)
        }
    })
}

/// How the net lanes reach the network here, judged from a [`super::probe`], for `doctor`.
pub fn net_here(probe: &SandboxReport) -> String {
    let available = |name: &str| {
        probe
            .features
            .iter()
            .any(|f| f.name == name && f.status == FeatureStatus::Available)
    };
    let gate = "every connection through Toolyard's egress gate, a proxy the server runs outside \
                the sandbox (HTTP CONNECT, plain HTTP and SOCKS5 at $HTTP_PROXY/$ALL_PROXY; names \
                resolved by the gate, by [network])";
    if available("net-namespace") {
        format!(
            "{gate}; commands run in a network namespace with only a loopback, so the kernel \
             refuses every other route (a program ignoring the proxy, UDP, DNS); a port a \
             command listens on is forwarded from the host's 127.0.0.1 (only there)"
        )
    } else if super::fs::kernel_abi() >= 4 && available("seccomp-net") {
        format!(
            "{gate}; no network namespace here, so Landlock (ABI 4) lets commands make TCP \
             connections only to the forwarder's port and seccomp only stream sockets (no UDP, \
             no DNS); NOT enforced here: a TCP connection to that same port number on another \
             host; servers commands start listen on the host's loopback itself, and other \
             commands cannot connect to them"
        )
    } else {
        "NOT ISOLATED here: no network namespace and no Landlock ABI 4 network rules, so \
         commands reach every address and [network] is not applied to them"
            .into()
    }
}
