//! The net lane's egress gate, end to end through the real binary: local servers on 127.0.0.1
//! named through `[network] resolve`, reached by curl, git, pip and npm through the gate, and
//! refused at another name; direct connections and DNS refused by the kernel; the metadata
//! address refused in `open` mode; a dev server in the lane reached from the lane and from the
//! host's loopback. Each gate test runs twice: with the lane's network namespace, and with the
//! fallback where no namespace can be made (Landlock TCP-connect and seccomp rules).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod common;
use common::toolyard_bin;

struct Env {
    _t: tempfile::TempDir,
    ws: PathBuf,
    state: PathBuf,
    home: PathBuf,
    catalog: PathBuf,
    /// Set `TOOLYARD_SANDBOX_SKIP_NETNS=1`: the fallback without a namespace.
    fallback: bool,
}

const MODES: [bool; 2] = [false, true];

fn env(catalog: &str, fallback: bool) -> Env {
    let t = tempfile::tempdir().unwrap();
    let base = t.path().canonicalize().unwrap();
    let (ws, state, home) = (base.join("ws"), base.join("state"), base.join("home"));
    for d in [&ws, &state, &home] {
        std::fs::create_dir_all(d).unwrap();
    }
    let path = base.join("catalog.toml");
    std::fs::write(&path, catalog).unwrap();
    Env {
        _t: t,
        ws,
        state,
        home,
        catalog: path,
        fallback,
    }
}

impl Env {
    fn call(&self, tool: &str, args: Value) -> Value {
        let mut cmd = Command::new(toolyard_bin());
        cmd.args(["call", tool, &args.to_string(), "--json", "--catalog"])
            .arg(&self.catalog)
            .current_dir(&self.ws)
            .env("TOOLYARD_STATE_DIR", &self.state)
            .env("HOME", &self.home)
            .env_remove("TOOLYARD_SANDBOX_SKIP_NETNS");
        if self.fallback {
            cmd.env("TOOLYARD_SANDBOX_SKIP_NETNS", "1");
        }
        let o: Output = cmd.output().expect("toolyard runs");
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): {}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        })
    }

    fn run(&self, command: &str) -> (bool, String) {
        let v = self.call("run_command", json!({ "command": command }));
        (
            v["success"] == true,
            v["output"].as_str().unwrap_or_default().to_string(),
        )
    }

    fn mode(&self) -> &'static str {
        if self.fallback {
            "fallback (no namespace)"
        } else {
            "namespace"
        }
    }
}

/// A static HTTP/1.1 server of `root` on 127.0.0.1 (each request on its own connection).
fn static_server(root: PathBuf) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let root = root.clone();
            std::thread::spawn(move || serve_one(stream, &root));
        }
    });
    port
}

fn serve_one(mut s: TcpStream, root: &Path) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let head = String::from_utf8_lossy(&head);
    let target = head.split(' ').nth(1).unwrap_or("/");
    let path = target.split('?').next().unwrap_or("/");
    let mut file = root.join(path.trim_start_matches('/'));
    if file.is_dir() {
        file = file.join("index.html");
    }
    let reply = match std::fs::read(&file) {
        Ok(body) => {
            let kind = if path.ends_with(".html") || path.ends_with('/') {
                "text/html"
            } else if file.extension().is_none() && !path.contains(".git/") {
                "application/json"
            } else {
                "application/octet-stream"
            };
            let mut r = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            )
            .into_bytes();
            r.extend(body);
            r
        }
        Err(_) => {
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec()
        }
    };
    let _ = s.write_all(&reply);
}

fn sh(dir: &Path, script: &str) {
    let o = Command::new("sh")
        .args(["-c", script])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{script}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The fakes: a file, a git repository over dumb HTTP, a PyPI simple index with one wheel and
/// an npm packument, all under one root.
fn fakes(root: &Path) {
    std::fs::write(root.join("hello.txt"), "hello through the gate\n").unwrap();
    sh(
        root,
        "git init -q -b main src && cd src && echo readme > README && git add README && \
         git -c user.name=t -c user.email=t@t commit -qm one && cd .. && \
         git clone -q --bare src repo.git && cd repo.git && git update-server-info",
    );
    sh(
        root,
        r#"mkdir -p simple/fakepkg packages && python3 - <<'EOF'
import zipfile
name = "fakepkg-1.0-py3-none-any.whl"
with zipfile.ZipFile("packages/" + name, "w") as z:
    z.writestr("fakepkg/__init__.py", "")
    z.writestr("fakepkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: fakepkg\nVersion: 1.0\n")
    z.writestr("fakepkg-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    z.writestr("fakepkg-1.0.dist-info/RECORD", "")
open("simple/fakepkg/index.html", "w").write('<html><body><a href="../../packages/%s">%s</a></body></html>' % (name, name))
EOF"#,
    );
    let packument = json!({
        "name": "fakepkg",
        "dist-tags": {"latest": "1.0.0"},
        "versions": {"1.0.0": {"name": "fakepkg", "version": "1.0.0",
            "dist": {"tarball": "http://registry.test/fakepkg-1.0.0.tgz", "shasum": "0"}}}
    });
    std::fs::write(root.join("fakepkg"), packument.to_string()).unwrap();
}

fn allowlist() -> String {
    "[network]\nmode = \"allowlist\"\nallow = [\"registry.test\"]\n\
     resolve = { \"registry.test\" = \"127.0.0.1\", \"other.test\" = \"127.0.0.1\" }\n"
        .to_string()
}

/// Whether curl is here; else say the test is skipped (scripts/test.sh installs it and runs
/// this suite again).
fn curl_here() -> bool {
    let here = have("curl");
    if !here {
        println!("skipped: curl is not installed here (scripts/test.sh installs it)");
    }
    here
}

#[test]
fn allowlist_lets_curl_git_pip_and_npm_reach_the_allowed_name_only() {
    if !curl_here() {
        return;
    }
    let served = tempfile::tempdir().unwrap();
    fakes(served.path());
    let port = static_server(served.path().to_path_buf());
    for fallback in MODES {
        let e = env(&allowlist(), fallback);
        let m = e.mode();

        // curl through HTTP_PROXY (plain forwarding), CONNECT (-p) and SOCKS5 (ALL_PROXY).
        let (ok, out) = e.run(&format!(
            "curl -sSf http://registry.test:{port}/hello.txt && \
             curl -sSf -p -x \"$HTTPS_PROXY\" http://registry.test:{port}/hello.txt && \
             curl -sSf -x \"$ALL_PROXY\" http://registry.test:{port}/hello.txt"
        ));
        assert!(ok, "{m}: {out}");
        assert_eq!(
            out.matches("hello through the gate").count(),
            3,
            "{m}: {out}"
        );
        assert!(
            out.contains(&format!("network: registry.test:{port} allowed ×3")),
            "{m}: {out}"
        );
        let (ok, out) = e.run(&format!("curl -sSf http://other.test:{port}/hello.txt"));
        assert!(!ok, "{m}: {out}");
        assert!(!out.contains("hello through the gate"), "{m}: {out}");
        assert!(
            out.contains(&format!(
                "other.test:{port} refused (not in allow; [network] allow = [..., \"other.test\"] lets it through)"
            )),
            "{m}: {out}"
        );

        // git over (dumb) HTTP.
        let (ok, out) = e.run(&format!(
            "git clone -q http://registry.test:{port}/repo.git c1 && cat c1/README"
        ));
        assert!(ok && out.contains("readme"), "{m}: {out}");
        let (ok, out) = e.run(&format!(
            "git clone -q http://other.test:{port}/repo.git c2"
        ));
        assert!(!ok, "{m}: {out}");
        assert!(out.contains("other.test"), "{m}: {out}");
        assert!(!e.ws.join("c2/README").exists(), "{m}");

        // pip download from a simple index.
        if have("pip") {
            let pip = |host: &str, dir: &str| {
                format!(
                    "pip download -q --no-deps --no-cache-dir --disable-pip-version-check \
                     --index-url http://{host}:{port}/simple --trusted-host {host} -d {dir} fakepkg"
                )
            };
            let (ok, out) = e.run(&pip("registry.test", "dl1"));
            assert!(ok, "{m}: {out}");
            assert!(
                e.ws.join("dl1/fakepkg-1.0-py3-none-any.whl").exists(),
                "{m}: {out}"
            );
            let (ok, out) = e.run(&pip("other.test", "dl2"));
            assert!(!ok, "{m}: {out}");
            assert!(out.contains("other.test"), "{m}: {out}");
        } else {
            println!("skipped pip: pip is not installed here");
        }

        // npm view against a fake registry.
        if have("npm") {
            let npm = |host: &str| {
                format!(
                    "npm_config_update_notifier=false npm view fakepkg version \
                     --registry http://{host}:{port}/"
                )
            };
            let (ok, out) = e.run(&npm("registry.test"));
            assert!(ok && out.contains("1.0.0"), "{m}: {out}");
            let (ok, out) = e.run(&npm("other.test"));
            assert!(!ok, "{m}: {out}");
            assert!(out.contains("other.test"), "{m}: {out}");
        } else {
            println!("skipped npm: npm is not installed here");
        }
    }
}

#[test]
fn a_program_ignoring_the_proxy_is_refused_by_the_kernel_and_dns_does_not_leave() {
    let served = tempfile::tempdir().unwrap();
    std::fs::write(served.path().join("hello.txt"), "direct\n").unwrap();
    let port = static_server(served.path().to_path_buf());
    for fallback in MODES {
        let e = env(&allowlist(), fallback);
        let m = e.mode();
        // A direct connection to the (allowed!) server's address, and to a public one.
        let direct = format!(
            "python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3); print('CONNECTED')\""
        );
        let (ok, out) = e.run(&direct);
        assert!(!ok && !out.contains("CONNECTED"), "{m}: {out}");
        let (ok, out) = e.run(
            "python3 -c \"import socket; socket.create_connection(('203.0.113.9', 80), timeout=3); print('CONNECTED')\"",
        );
        assert!(!ok && !out.contains("CONNECTED"), "{m}: {out}");
        assert!(
            out.contains(
                "[sandbox: the net lane reaches the network only through Toolyard's egress gate"
            ),
            "{m}: {out}"
        );
        // A DNS query sent straight to an outside resolver gets no answer.
        let dns = r#"python3 -c "
import socket
q = b'\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01'
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(3)
    s.sendto(q, ('8.8.8.8', 53))
    s.recvfrom(512)
    print('DNS-ANSWER')
except OSError as e:
    print('DNS-FAILED', e)
""#;
        let (_, out) = e.run(dns);
        assert!(
            out.contains("DNS-FAILED") && !out.contains("DNS-ANSWER"),
            "{m}: {out}"
        );
        // Nor does the system resolver.
        let (ok, out) = e.run("getent hosts example.com");
        assert!(!ok, "{m}: {out}");
    }
}

#[test]
fn the_metadata_address_is_refused_in_open_mode() {
    if !curl_here() {
        return;
    }
    for fallback in MODES {
        let e = env("[network]\nmode = \"open\"\n", fallback);
        let m = e.mode();
        let (ok, out) = e.run("curl -sSf -m 10 http://169.254.169.254/latest/meta-data/");
        assert!(!ok, "{m}: {out}");
        assert!(
            out.contains(
                "network: 169.254.169.254:80 refused (169.254.169.254 is a cloud metadata address"
            ),
            "{m}: {out}"
        );
        // Through SOCKS5, the IPv6 one.
        let (ok, out) = e.run("curl -sS -m 10 -x \"$ALL_PROXY\" http://[fd00:ec2::254]/");
        assert!(!ok, "{m}: {out}");
        assert!(
            out.contains("[fd00:ec2::254]:80 refused (fd00:ec2::254 is a cloud metadata address"),
            "{m}: {out}"
        );
    }
}

/// Whether this lane runs without a namespace (the fallback refuses datagram sockets).
fn fallback_here(e: &Env) -> bool {
    let (_, out) = e.run(
        "python3 -c \"import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM); print('UDP-OK')\"",
    );
    !out.contains("UDP-OK")
}

fn wait_until(mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(20);
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

fn http_get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

#[test]
fn a_dev_server_in_the_lane_answers_the_lane_and_the_host_loopback() {
    if !curl_here() {
        return;
    }
    let e = env("[network]\nmode = \"allowlist\"\n", false);
    std::fs::write(e.ws.join("page.html"), "dev server page\n").unwrap();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let v = e.call(
        "run_command",
        json!({"command": format!("python3 -u -m http.server {port} --bind 127.0.0.1"),
               "background": true, "yield_ms": 1000}),
    );
    if v["error"]
        .as_str()
        .is_some_and(|e| e.contains("background processes need a PID namespace"))
    {
        println!("skipped: no background processes here ({v})");
        return;
    }
    let id = v["data"]["process_id"]
        .as_str()
        .unwrap_or_else(|| panic!("a process id: {v}"))
        .to_string();
    // From the same lane (a later call: the session host's runner, the same namespace).
    let (ok, out) = e.run(&format!("curl -sSf http://127.0.0.1:{port}/page.html"));
    if out.contains("no network namespace") || fallback_here(&e) {
        // doctor says so: "servers commands start listen on the host's loopback itself, and
        // other commands cannot connect to them".
        println!(
            "skipped the same-lane request: no network namespace here, and the fallback's \
             Landlock rule lets commands connect only to the gate ({out})"
        );
    } else {
        assert!(ok && out.contains("dev server page"), "{out}");
    }
    // From the host's loopback.
    let mut got = String::new();
    assert!(
        wait_until(|| {
            got = http_get(port, "/page.html").unwrap_or_default();
            got.contains("dev server page")
        }),
        "the host's loopback: {got}"
    );
    e.call("process_kill", json!({ "process_id": id }));
    assert!(
        wait_until(|| TcpStream::connect(("127.0.0.1", port)).is_err()),
        "the host's port closes with the server"
    );
}

/// A command's request for more network through the CLI, which cannot ask the user: refused
/// before the command runs, with the catalog line to add; a request the catalog already
/// grants runs without a question. (The approved path needs a client that can ask: see
/// tests/mcp/test_network_request.py.)
#[test]
fn a_request_for_more_is_refused_where_nobody_can_ask_with_the_catalog_line() {
    if !curl_here() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("index.html"), "from the fake registry\n").unwrap();
    let port = static_server(t.path().to_path_buf());
    let e = env(&allowlist(), false);
    let ask = |host: &str| {
        json!({
            "command": format!("touch ran-{host}; curl -sS -m 10 http://{host}:{port}/"),
            "network": {"hosts": [host], "reason": "fetch the index"},
        })
    };
    let v = e.call("run_command", ask("other.test"));
    let out = v["output"].as_str().unwrap_or_default();
    assert_eq!(v["success"], false, "{out}");
    assert!(out.contains("\"other.test\" not approved"), "{out}");
    assert!(out.contains("cannot ask"), "{out}");
    assert!(
        out.contains("[network] allow = [..., \"other.test\"]"),
        "{out}"
    );
    assert!(!e.ws.join("ran-other.test").exists(), "the command ran");
    let v = e.call("run_command", ask("registry.test"));
    let out = v["output"].as_str().unwrap_or_default();
    assert_eq!(v["success"], true, "{out}");
    assert!(out.contains("from the fake registry"), "{out}");
    assert!(
        out.contains(&format!("network: registry.test:{port} allowed")),
        "{out}"
    );
}
