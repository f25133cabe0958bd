//! The gate: a proxy on a unix socket that speaks HTTP (CONNECT, and plain requests with an
//! absolute URL) and SOCKS5 on the same socket (told apart by the first byte), resolves names
//! itself, applies the [`Policy`] and records every decision for the `network:` line.

use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixListener, UnixStream};

use crate::grants::{Grants, Scope};
use crate::policy::{Addresses, Host, Policy, Refusal};

/// The largest request head the gate reads.
const MAX_HEAD: usize = 64 * 1024;
/// How long a connection to an upstream may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// How many decisions a gate keeps (the oldest go first).
const MAX_EVENTS: usize = 4096;

/// What became of one connection the gate was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Let through and connected.
    Allowed,
    /// Let through because the user approved it (the policy alone refuses it), and connected.
    Approved(Scope),
    /// Refused by the policy.
    Refused(Refusal),
    /// Let through, but the upstream could not be reached.
    Failed(String),
}

/// One decision of the gate.
#[derive(Debug, Clone)]
pub struct Event {
    /// When it was asked for.
    pub at: Instant,
    /// The host as the program named it.
    pub host: Host,
    /// The port.
    pub port: u16,
    /// What became of it.
    pub outcome: Outcome,
}

type Log = Arc<Mutex<VecDeque<Event>>>;

/// What a gate judges connections by: the catalog's policy and the approvals held now.
#[derive(Debug)]
struct Rules {
    policy: Policy,
    grants: Arc<Grants>,
}

/// A running gate: it serves until dropped, then removes its socket.
#[derive(Debug)]
pub struct Gate {
    path: PathBuf,
    log: Log,
    grants: Arc<Grants>,
    task: tokio::task::JoinHandle<()>,
}

impl Gate {
    /// Listen on the unix socket `path` (its directory must exist and should be private) and
    /// serve connections with `policy`. Call inside a tokio runtime.
    pub fn start(path: &Path, policy: Policy) -> io::Result<Self> {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path)?;
        let log: Log = Arc::default();
        let grants = Arc::new(Grants::default());
        let rules = Arc::new(Rules {
            policy,
            grants: grants.clone(),
        });
        let task = tokio::spawn(serve(listener, rules, log.clone()));
        Ok(Self {
            path: path.to_path_buf(),
            log,
            grants,
            task,
        })
    }

    /// The approvals this gate lets through beside its policy (see [`Grants::hold`]).
    pub fn grants(&self) -> &Arc<Grants> {
        &self.grants
    }

    /// The socket the gate listens on.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The decisions made at or after `since`, oldest first.
    pub fn events_since(&self, since: Instant) -> Vec<Event> {
        self.log
            .lock()
            .map(|l| l.iter().filter(|e| e.at >= since).cloned().collect())
            .unwrap_or_default()
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The `network:` line for `events`: each host once, in the order first asked, with how many
/// times; `None` when there were none.
pub fn summarize(events: &[Event]) -> Option<String> {
    let mut seen: Vec<(String, usize)> = Vec::new();
    for e in events {
        let target = format!("{}:{}", e.host, e.port);
        let text = match &e.outcome {
            Outcome::Allowed => format!("{target} allowed"),
            Outcome::Approved(scope) => format!("{target} allowed by approval ({scope})"),
            Outcome::Failed(why) => format!("{target} allowed but unreachable ({why})"),
            Outcome::Refused(r) => format!(
                "{target} refused ({}; {})",
                r.short(),
                r.remedy(&e.host, e.port)
            ),
        };
        match seen.iter_mut().find(|(t, _)| *t == text) {
            Some((_, n)) => *n += 1,
            None => seen.push((text, 1)),
        }
    }
    if seen.is_empty() {
        return None;
    }
    let parts: Vec<String> = seen
        .into_iter()
        .map(|(t, n)| if n > 1 { format!("{t} ×{n}") } else { t })
        .collect();
    Some(format!("network: {}", parts.join("; ")))
}

async fn serve(listener: UnixListener, rules: Arc<Rules>, log: Log) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let rules = rules.clone();
                let log = log.clone();
                tokio::spawn(async move {
                    if let Err(e) = handle(stream, &rules, &log).await {
                        tracing::debug!(error = %e, "egress connection ended");
                    }
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "the egress gate cannot accept");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

fn record(log: &Log, host: &Host, port: u16, outcome: Outcome) {
    if let Ok(mut l) = log.lock() {
        if l.len() >= MAX_EVENTS {
            l.pop_front();
        }
        l.push_back(Event {
            at: Instant::now(),
            host: host.clone(),
            port,
            outcome,
        });
    }
}

/// Judge and connect `host:port`; every attempt is recorded.
async fn open(rules: &Rules, log: &Log, host: &Host, port: u16) -> Result<TcpStream, Outcome> {
    let result = connect(rules, host, port).await;
    let (outcome, result) = match result {
        Ok((s, None)) => (Outcome::Allowed, Ok(s)),
        Ok((s, Some(scope))) => (Outcome::Approved(scope), Ok(s)),
        Err(o) => (o.clone(), Err(o)),
    };
    record(log, host, port, outcome);
    result
}

/// Judge and connect `host:port`: the stream, and the approval's scope when one let it
/// through.
async fn connect(
    rules: &Rules,
    host: &Host,
    port: u16,
) -> Result<(TcpStream, Option<Scope>), Outcome> {
    let policy = &rules.policy;
    // An approval answers "not in allow" only: deny and the internal addresses still hold.
    let (addresses, approved) = match policy.check_name(host, port) {
        Ok(a) => (a, None),
        Err(Refusal::NotAllowed { suggest }) => match rules.grants.find(host, port) {
            Some(scope) => (policy.addresses(host), Some(scope)),
            None => return Err(Outcome::Refused(Refusal::NotAllowed { suggest })),
        },
        Err(r) => return Err(Outcome::Refused(r)),
    };
    let addrs: Vec<IpAddr> = match addresses {
        Addresses::Fixed(ip) => vec![ip],
        Addresses::Lookup => {
            let Host::Name(name) = host else {
                return Err(Outcome::Failed("no address".into()));
            };
            match tokio::net::lookup_host((name.0.as_str(), port)).await {
                Ok(a) => a.map(|s| s.ip()).collect(),
                Err(e) => {
                    return Err(Outcome::Refused(Refusal::Unresolved {
                        error: e.to_string(),
                    }));
                }
            }
        }
    };
    // Every address must pass: a name that resolves to a public and an internal address is
    // refused, so the order of the answers cannot pick the internal one.
    for ip in &addrs {
        policy
            .check_address(host, *ip, port)
            .map_err(Outcome::Refused)?;
    }
    let mut last = String::from("no address");
    for ip in addrs {
        match tokio::time::timeout(
            CONNECT_TIMEOUT,
            TcpStream::connect(SocketAddr::new(ip, port)),
        )
        .await
        {
            Ok(Ok(s)) => {
                let _ = s.set_nodelay(true);
                return Ok((s, approved));
            }
            Ok(Err(e)) => last = e.to_string(),
            Err(_) => last = format!("no answer within {} s", CONNECT_TIMEOUT.as_secs()),
        }
    }
    Err(Outcome::Failed(last))
}

async fn handle(mut client: UnixStream, policy: &Rules, log: &Log) -> io::Result<()> {
    let mut first = [0u8; 1];
    if client.read(&mut first).await? == 0 {
        return Ok(());
    }
    if first[0] == 5 {
        socks5(client, policy, log).await
    } else {
        http(client, first[0], policy, log).await
    }
}

/// Splice two streams until both sides are done.
async fn splice<A, B>(a: &mut A, b: &mut B) -> io::Result<()>
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    tokio::io::copy_bidirectional_with_sizes(a, b, 256 * 1024, 256 * 1024)
        .await
        .map(|_| ())
}

// ---- SOCKS5 (RFC 1928, RFC 1929) ----

const SOCKS_OK: u8 = 0;
const SOCKS_NOT_ALLOWED: u8 = 2;
const SOCKS_HOST_UNREACHABLE: u8 = 4;
const SOCKS_COMMAND_UNSUPPORTED: u8 = 7;
const SOCKS_ADDRESS_UNSUPPORTED: u8 = 8;

async fn socks5(mut c: UnixStream, policy: &Rules, log: &Log) -> io::Result<()> {
    let n = c.read_u8().await? as usize;
    let mut methods = vec![0u8; n];
    c.read_exact(&mut methods).await?;
    // No authentication, or a user name and password, which the gate ignores (clients send
    // them when the proxy URL carries them).
    if methods.contains(&0) {
        c.write_all(&[5, 0]).await?;
    } else if methods.contains(&2) {
        c.write_all(&[5, 2]).await?;
        let _ver = c.read_u8().await?;
        let ulen = c.read_u8().await? as usize;
        let mut skip = vec![0u8; ulen];
        c.read_exact(&mut skip).await?;
        let plen = c.read_u8().await? as usize;
        let mut skip = vec![0u8; plen];
        c.read_exact(&mut skip).await?;
        c.write_all(&[1, 0]).await?;
    } else {
        c.write_all(&[5, 0xff]).await?;
        return Ok(());
    }
    let mut head = [0u8; 4];
    c.read_exact(&mut head).await?;
    let reply = |code: u8| [5, code, 0, 1, 0, 0, 0, 0, 0, 0];
    let host = match head[3] {
        1 => {
            let mut a = [0u8; 4];
            c.read_exact(&mut a).await?;
            Host::Address(IpAddr::from(a))
        }
        4 => {
            let mut a = [0u8; 16];
            c.read_exact(&mut a).await?;
            Host::Address(IpAddr::from(a))
        }
        3 => {
            let len = c.read_u8().await? as usize;
            let mut name = vec![0u8; len];
            c.read_exact(&mut name).await?;
            match Host::parse(&String::from_utf8_lossy(&name)) {
                Ok(h) => h,
                Err(_) => {
                    c.write_all(&reply(SOCKS_ADDRESS_UNSUPPORTED)).await?;
                    return Ok(());
                }
            }
        }
        _ => {
            c.write_all(&reply(SOCKS_ADDRESS_UNSUPPORTED)).await?;
            return Ok(());
        }
    };
    let port = c.read_u16().await?;
    if head[1] != 1 {
        // BIND and UDP ASSOCIATE: a datagram relay would be a way around the gate's names.
        c.write_all(&reply(SOCKS_COMMAND_UNSUPPORTED)).await?;
        return Ok(());
    }
    match open(policy, log, &host, port).await {
        Ok(mut up) => {
            c.write_all(&reply(SOCKS_OK)).await?;
            splice(&mut c, &mut up).await
        }
        Err(Outcome::Refused(_)) => c.write_all(&reply(SOCKS_NOT_ALLOWED)).await,
        Err(_) => c.write_all(&reply(SOCKS_HOST_UNREACHABLE)).await,
    }
}

// ---- HTTP ----

/// A request head: its lines, and whatever of the body came with it.
struct Head {
    method: String,
    target: String,
    version: String,
    headers: Vec<(String, String)>,
    rest: Vec<u8>,
}

async fn read_head(c: &mut UnixStream, first: u8) -> io::Result<Option<Head>> {
    let mut buf = vec![first];
    let mut chunk = [0u8; 8192];
    let end = loop {
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            break i;
        }
        if buf.len() > MAX_HEAD {
            return Ok(None);
        }
        let n = c.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let text = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut lines = text.split("\r\n");
    let mut start = lines.next().unwrap_or_default().split(' ');
    let (Some(method), Some(target), Some(version)) = (start.next(), start.next(), start.next())
    else {
        return Ok(None);
    };
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    Ok(Some(Head {
        method: method.to_string(),
        target: target.to_string(),
        version: version.to_string(),
        headers,
        rest: buf[end + 4..].to_vec(),
    }))
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// `host:port` (with `[v6]`), the port defaulting to `default`.
fn split_authority(auth: &str, default: u16) -> Option<(Host, u16)> {
    let (host, port) = if let Some(rest) = auth.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if after.is_empty() => default,
            None => return None,
        };
        (h, port)
    } else {
        match auth.rsplit_once(':') {
            Some((h, p)) => (h, p.parse().ok()?),
            None => (auth, default),
        }
    };
    Some((Host::parse(host).ok()?, port))
}

async fn respond(c: &mut UnixStream, status: &str, body: &str) -> io::Result<()> {
    let text = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nX-Toolyard-Egress: {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    c.write_all(text.as_bytes()).await?;
    c.shutdown().await
}

/// The answer to a refused or failed connection, naming what to change.
async fn refuse(c: &mut UnixStream, host: &Host, port: u16, outcome: Outcome) -> io::Result<()> {
    match outcome {
        Outcome::Refused(r) => {
            let body = format!(
                "toolyard egress gate: {host}:{port} refused ({}); {}\n",
                r.short(),
                r.remedy(host, port)
            );
            respond(c, "403 Forbidden", &body).await
        }
        Outcome::Failed(why) => {
            let body = format!("toolyard egress gate: {host}:{port} unreachable: {why}\n");
            respond(c, "502 Bad Gateway", &body).await
        }
        Outcome::Allowed | Outcome::Approved(_) => Ok(()),
    }
}

async fn http(mut c: UnixStream, first: u8, policy: &Rules, log: &Log) -> io::Result<()> {
    let Some(head) = read_head(&mut c, first).await? else {
        return respond(
            &mut c,
            "400 Bad Request",
            "toolyard egress gate: not an HTTP request head\n",
        )
        .await;
    };
    if head.method.eq_ignore_ascii_case("CONNECT") {
        let Some((host, port)) = split_authority(&head.target, 443) else {
            let body = format!(
                "toolyard egress gate: CONNECT {}: not host:port\n",
                head.target
            );
            return respond(&mut c, "400 Bad Request", &body).await;
        };
        return match open(policy, log, &host, port).await {
            Ok(mut up) => {
                c.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await?;
                up.write_all(&head.rest).await?;
                splice(&mut c, &mut up).await
            }
            Err(o) => refuse(&mut c, &host, port, o).await,
        };
    }
    // A plain request through a proxy carries an absolute URL.
    let Some(after) = head.target.strip_prefix("http://") else {
        let body = format!(
            "toolyard egress gate: {} {}: this is a proxy; send an absolute http:// URL, or CONNECT host:port for TLS\n",
            head.method, head.target
        );
        return respond(&mut c, "400 Bad Request", &body).await;
    };
    let (auth, path) = match after.find('/') {
        Some(i) => (&after[..i], &after[i..]),
        None => (after, "/"),
    };
    let auth = auth.rsplit_once('@').map_or(auth, |(_, a)| a);
    let Some((host, port)) = split_authority(auth, 80) else {
        let body = format!(
            "toolyard egress gate: {}: no host in the URL\n",
            head.target
        );
        return respond(&mut c, "400 Bad Request", &body).await;
    };
    let mut up = match open(policy, log, &host, port).await {
        Ok(up) => up,
        Err(o) => return refuse(&mut c, &host, port, o).await,
    };
    // One request per connection: a second request on it could name another host.
    let mut out = format!("{} {} {}\r\n", head.method, path, head.version);
    let mut has_host = false;
    for (k, v) in &head.headers {
        let lower = k.to_ascii_lowercase();
        if lower.starts_with("proxy-") || lower == "connection" || lower == "keep-alive" {
            continue;
        }
        has_host |= lower == "host";
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    if !has_host {
        out.push_str(&format!("Host: {auth}\r\n"));
    }
    out.push_str("Connection: close\r\n\r\n");
    up.write_all(out.as_bytes()).await?;
    up.write_all(&head.rest).await?;
    splice(&mut c, &mut up).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{HostName, Refusal};

    /// A gate on a socket in `dir` allowing only `up.test` (pinned to 127.0.0.1), and an
    /// upstream that echoes the request head it got.
    async fn gate_and_upstream(dir: &Path) -> (Gate, u16) {
        let up = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = up.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = up.accept().await {
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let mut got = Vec::new();
                    while find(&got, b"\r\n\r\n").is_none() {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                    }
                    let body = String::from_utf8_lossy(&got).into_owned();
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = s.write_all(reply.as_bytes()).await;
                });
            }
        });
        let config: crate::NetworkConfig = toml::from_str(
            "mode = \"allowlist\"\nallow = [\"up.test\"]\nresolve = { \"up.test\" = \"127.0.0.1\", \"no.test\" = \"127.0.0.1\" }\n",
        )
        .unwrap();
        let gate = Gate::start(&dir.join("g.sock"), Policy::new(config)).unwrap();
        (gate, port)
    }

    async fn exchange(gate: &Gate, send: &[u8]) -> Vec<u8> {
        let mut c = UnixStream::connect(gate.path()).await.unwrap();
        c.write_all(send).await.unwrap();
        let mut out = Vec::new();
        let _ = c.read_to_end(&mut out).await;
        out
    }

    #[tokio::test]
    async fn plain_http_is_forwarded_one_request_per_connection_without_proxy_headers() {
        let dir = tempfile::tempdir().unwrap();
        let (gate, port) = gate_and_upstream(dir.path()).await;
        let req = format!(
            "GET http://up.test:{port}/x?y HTTP/1.1\r\nHost: up.test:{port}\r\nProxy-Authorization: Basic c2VjcmV0\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive\r\n\r\n"
        );
        let out = String::from_utf8(exchange(&gate, req.as_bytes()).await).unwrap();
        assert!(out.starts_with("HTTP/1.1 200 OK"), "{out}");
        assert!(out.contains("GET /x?y HTTP/1.1\r\n"), "{out}");
        assert!(out.contains("Connection: close\r\n"), "{out}");
        assert!(!out.to_ascii_lowercase().contains("proxy-"), "{out}");
        assert!(!out.contains("keep-alive"), "{out}");

        let req = format!("GET http://no.test:{port}/ HTTP/1.1\r\nHost: no.test\r\n\r\n");
        let out = String::from_utf8(exchange(&gate, req.as_bytes()).await).unwrap();
        assert!(out.starts_with("HTTP/1.1 403 Forbidden"), "{out}");
        assert!(out.contains("allow = [..., \"no.test\"]"), "{out}");
        let events = gate.events_since(Instant::now() - Duration::from_secs(60));
        assert_eq!(events.len(), 2, "{events:?}");
        assert_eq!(events[0].outcome, Outcome::Allowed);
    }

    #[tokio::test]
    async fn an_approval_lets_a_host_through_while_it_is_held_and_never_past_deny() {
        use crate::grants::Grant;
        use crate::policy::Pattern;
        let dir = tempfile::tempdir().unwrap();
        let (gate, port) = gate_and_upstream(dir.path()).await;
        let get =
            |host: &str| format!("GET http://{host}:{port}/ HTTP/1.1\r\nHost: {host}\r\n\r\n");
        let start = Instant::now();
        let held = gate.grants().hold(std::sync::Arc::from(vec![Grant {
            pattern: Pattern::parse("no.test").unwrap(),
            scope: Scope::Session,
        }]));
        let out = String::from_utf8(exchange(&gate, get("no.test").as_bytes()).await).unwrap();
        assert!(out.starts_with("HTTP/1.1 200 OK"), "{out}");
        drop(held);
        let out = String::from_utf8(exchange(&gate, get("no.test").as_bytes()).await).unwrap();
        assert!(out.starts_with("HTTP/1.1 403 Forbidden"), "{out}");
        let events = gate.events_since(start);
        assert_eq!(events[0].outcome, Outcome::Approved(Scope::Session));
        assert_eq!(
            summarize(&events[..1]).unwrap(),
            format!("network: no.test:{port} allowed by approval (this session)")
        );
        // The metadata address stays refused whatever was approved.
        let _held = gate.grants().hold(std::sync::Arc::from(vec![Grant {
            pattern: Pattern::parse("169.254.169.254").unwrap(),
            scope: Scope::Call,
        }]));
        let out = exchange(&gate, b"GET http://169.254.169.254/ HTTP/1.1\r\n\r\n").await;
        let out = String::from_utf8(out).unwrap();
        assert!(out.starts_with("HTTP/1.1 403 Forbidden"), "{out}");
    }

    #[tokio::test]
    async fn socks5_resolves_names_at_the_gate_and_refuses_by_the_rules() {
        let dir = tempfile::tempdir().unwrap();
        let (gate, port) = gate_and_upstream(dir.path()).await;
        let socks = |name: &str, cmd: u8| {
            let mut m = vec![5, 1, 0, 5, cmd, 0, 3, name.len() as u8];
            m.extend_from_slice(name.as_bytes());
            m.extend_from_slice(&port.to_be_bytes());
            m
        };
        let mut ok = socks("up.test", 1);
        ok.extend_from_slice(b"GET / HTTP/1.0\r\n\r\n");
        let out = exchange(&gate, &ok).await;
        assert_eq!(&out[..2], &[5, 0], "method: no authentication");
        assert_eq!(out[3], SOCKS_OK, "{out:?}");
        assert!(String::from_utf8_lossy(&out[12..]).contains("200 OK"));
        let out = exchange(&gate, &socks("no.test", 1)).await;
        assert_eq!(out[3], SOCKS_NOT_ALLOWED, "{out:?}");
        // UDP ASSOCIATE would carry datagrams past the gate's names.
        let out = exchange(&gate, &socks("up.test", 3)).await;
        assert_eq!(out[3], SOCKS_COMMAND_UNSUPPORTED, "{out:?}");
    }

    #[test]
    fn authorities_parse_with_default_ports() {
        let (h, p) = split_authority("github.com", 443).unwrap();
        assert_eq!((h.to_string(), p), ("github.com".into(), 443));
        let (h, p) = split_authority("[::1]:8080", 80).unwrap();
        assert_eq!((h.to_string(), p), ("[::1]".into(), 8080));
        assert!(split_authority("a:b", 80).is_none());
    }

    #[test]
    fn the_summary_names_each_host_once_with_its_remedy() {
        let at = Instant::now();
        let ev = |h: &str, port, outcome| Event {
            at,
            host: Host::Name(HostName::parse(h).unwrap()),
            port,
            outcome,
        };
        let events = [
            ev("github.com", 443, Outcome::Allowed),
            ev("github.com", 443, Outcome::Allowed),
            ev(
                "evil.test",
                80,
                Outcome::Refused(Refusal::NotAllowed {
                    suggest: "evil.test".into(),
                }),
            ),
        ];
        assert_eq!(
            summarize(&events).unwrap(),
            "network: github.com:443 allowed ×2; evil.test:80 refused (not in allow; [network] allow = [..., \"evil.test\"] lets it through)"
        );
        assert!(summarize(&[]).is_none());
    }
}
