//! Dev servers: a port a command listens on in the lane's network namespace is forwarded from
//! the same port on the host's loopback (127.0.0.1 only, never another interface), so the
//! server an agent starts still opens in the user's browser and answers the user's own tests.
//!
//! A thread of the runner (in the host's namespace) reads the namespace's listening sockets
//! every [`POLL`] from the forwarder thread's `/proc/self/task/<tid>/net/tcp{,6}` (that thread
//! lives in the namespace), binds each new port on the host's 127.0.0.1 when it is free there,
//! and hands the listener to the forwarder's runtime, whose tasks connect from inside the
//! namespace. A port that stops listening is closed on the host.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::task::JoinHandle;

/// How often the namespace's listening sockets are read.
const POLL: Duration = Duration::from_millis(250);

/// Start the thread that mirrors the namespace's listening ports (but `skip`, the forwarder's)
/// onto the host's loopback; `tid` is a thread in the namespace, `rt` its runtime.
pub(super) fn spawn(rt: Handle, tid: libc::pid_t, skip: u16) -> io::Result<()> {
    std::thread::Builder::new()
        .name("egress-ports".into())
        .spawn(move || mirror(rt, tid, skip))?;
    Ok(())
}

fn mirror(rt: Handle, tid: libc::pid_t, skip: u16) {
    let mut open: HashMap<u16, JoinHandle<()>> = HashMap::new();
    let mut refused: HashMap<u16, ()> = HashMap::new();
    loop {
        std::thread::sleep(POLL);
        let Some(listening) = listening(tid) else {
            // The forwarder thread is gone: the runner is ending.
            return;
        };
        open.retain(|port, task| {
            let keep = listening.contains_key(port) && !task.is_finished();
            if !keep {
                task.abort();
            }
            keep
        });
        refused.retain(|port, _| listening.contains_key(port));
        for (&port, &target) in &listening {
            if port == skip || open.contains_key(&port) || refused.contains_key(&port) {
                continue;
            }
            match std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port)) {
                Ok(host) => {
                    tracing::debug!(port, "a lane's server is reachable on the host's loopback");
                    open.insert(port, rt.spawn(serve(host, SocketAddr::new(target, port))));
                }
                Err(e) => {
                    tracing::info!(port, error = %e, "a lane's server port is taken on the host's loopback; not forwarded");
                    refused.insert(port, ());
                }
            }
        }
    }
}

/// Accept on the host's loopback and connect to `target` from inside the namespace (this task
/// runs on the forwarder thread, which lives there).
async fn serve(host: std::net::TcpListener, target: SocketAddr) {
    if host.set_nonblocking(true).is_err() {
        return;
    }
    let Ok(host) = tokio::net::TcpListener::from_std(host) else {
        return;
    };
    loop {
        let Ok((mut client, _)) = host.accept().await else {
            continue;
        };
        tokio::spawn(async move {
            if let Ok(mut inner) = tokio::net::TcpStream::connect(target).await {
                let _ = client.set_nodelay(true);
                let _ = inner.set_nodelay(true);
                let _ = tokio::io::copy_bidirectional(&mut client, &mut inner).await;
            }
        });
    }
}

/// The loopback-reachable listening TCP ports of `tid`'s network namespace, each with the
/// address to connect to; `None` when the thread is gone.
fn listening(tid: libc::pid_t) -> Option<HashMap<u16, IpAddr>> {
    let base = format!("/proc/self/task/{tid}/net");
    let v4 = std::fs::read_to_string(format!("{base}/tcp")).ok()?;
    let v6 = std::fs::read_to_string(format!("{base}/tcp6")).unwrap_or_default();
    let mut out = HashMap::new();
    // IPv4 first: a dual-stack server is reached on 127.0.0.1.
    for (port, ip) in parse(&v6, true).into_iter().chain(parse(&v4, false)) {
        out.insert(port, ip);
    }
    Some(out)
}

/// The LISTEN sockets of a `/proc/net/tcp` (or `tcp6`) table bound to a loopback or wildcard
/// address, as (port, address to connect to).
fn parse(table: &str, v6: bool) -> Vec<(u16, IpAddr)> {
    const LISTEN: &str = "0A";
    let mut out = Vec::new();
    for line in table.lines().skip(1) {
        let mut fields = line.split_whitespace();
        let (Some(_), Some(local), Some(_), Some(state)) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if state != LISTEN {
            continue;
        }
        let Some((addr, port)) = local.split_once(':') else {
            continue;
        };
        let Ok(port) = u16::from_str_radix(port, 16) else {
            continue;
        };
        let target = if v6 {
            match addr {
                "00000000000000000000000000000000" | "00000000000000000000000001000000" => {
                    IpAddr::V6(Ipv6Addr::LOCALHOST)
                }
                // ::ffff:127.0.0.1 and ::ffff:0.0.0.0
                "0000000000000000FFFF00000100007F" | "0000000000000000FFFF000000000000" => {
                    IpAddr::V4(Ipv4Addr::LOCALHOST)
                }
                _ => continue,
            }
        } else {
            let Ok(raw) = u32::from_str_radix(addr, 16) else {
                continue;
            };
            // The kernel prints the network-order address as a native-endian number.
            let ip = Ipv4Addr::from(raw.to_ne_bytes());
            if ip.is_loopback() || ip.is_unspecified() {
                IpAddr::V4(Ipv4Addr::LOCALHOST)
            } else {
                continue;
            }
        };
        out.push((port, target));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_loopback_and_wildcard_sockets_are_found() {
        let v4 = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n\
   1: 00000000:0BB8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1\n\
   2: 0100007F:9C40 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 3 1\n\
   3: 0A00000A:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4 1\n";
        let got = parse(v4, false);
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        assert_eq!(got, vec![(8080, lo), (3000, lo)]);
        let v6 = "  sl  local_address remote_address st\n\
   0: 00000000000000000000000001000000:1389 00000000000000000000000000000000:0000 0A\n";
        assert_eq!(
            parse(v6, true),
            vec![(5001, IpAddr::V6(Ipv6Addr::LOCALHOST))]
        );
    }
}
