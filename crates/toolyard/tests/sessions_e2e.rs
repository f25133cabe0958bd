//! CLI sessions that outlive one `toolyard call`: the session host, through the real binary.
//!
//! Every test has its own workspace and TOOLYARD_STATE_DIR (and HOME) in a temp dir; the host
//! leaves when that state directory is deleted, and the test's guard kills any host it finds
//! left, so no host outlives the suite.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long a test waits for something that should happen soon (a failure bound, not a
/// threshold: a passing test never waits this long).
const PATIENCE: Duration = Duration::from_secs(60);

struct Env {
    t: Option<tempfile::TempDir>,
    ws: PathBuf,
    state: PathBuf,
    home: PathBuf,
}

fn env() -> Env {
    let t = tempfile::tempdir().unwrap();
    let ws = t.path().join("ws");
    let state = t.path().join("state");
    let home = t.path().join("home");
    for d in [&ws, &state, &home] {
        std::fs::create_dir_all(d).unwrap();
    }
    Env {
        t: Some(t),
        ws,
        state,
        home,
    }
}

impl Env {
    fn run(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_toolyard"))
            .args(args)
            .current_dir(&self.ws)
            .env("TOOLYARD_STATE_DIR", &self.state)
            .env("HOME", &self.home)
            .output()
            .expect("the toolyard binary runs")
    }

    /// `toolyard call TOOL ARGS --session SESSION EXTRA...`.
    fn call(&self, session: &str, tool: &str, args: &str, extra: &[&str]) -> Output {
        let mut v = vec!["call", tool, args, "--session", session];
        v.extend_from_slice(extra);
        self.run(&v)
    }

    /// The session hosts' records: (record file, its JSON).
    fn hosts(&self) -> Vec<(PathBuf, Value)> {
        let mut out = Vec::new();
        let Ok(workspaces) = std::fs::read_dir(self.state.join("workspaces")) else {
            return out;
        };
        for ws in workspaces.flatten() {
            let Ok(hosts) = std::fs::read_dir(ws.path().join("hosts")) else {
                continue;
            };
            for h in hosts.flatten() {
                let p = h.path();
                if p.extension().is_some_and(|e| e == "json")
                    && let Ok(text) = std::fs::read_to_string(&p)
                    && let Ok(v) = serde_json::from_str(&text)
                {
                    out.push((p, v));
                }
            }
        }
        out
    }

    fn host_pids(&self) -> Vec<i32> {
        self.hosts()
            .iter()
            .filter_map(|(_, v)| v["pid"].as_i64())
            .map(|p| p as i32)
            .filter(|p| alive(*p))
            .collect()
    }

    fn catalog(&self, text: &str) -> String {
        let p = self.t.as_ref().unwrap().path().join("catalog.toml");
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let pids = self.host_pids();
        // Deleting the state directory is what ends a host; the kill is only a backstop.
        drop(self.t.take());
        for pid in pids {
            if wait_until(Duration::from_secs(10), || !alive(pid)) {
                continue;
            }
            // SAFETY: kill with a pid this test's host record named.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn alive(pid: i32) -> bool {
    // A zombie has exited; only its parent has not reaped it yet.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().next().map(|st| st != "Z"))
        })
        .unwrap_or(false)
}

/// Live processes whose command line contains `marker`.
fn pids_with(marker: &str) -> Vec<i32> {
    let me = std::process::id() as i32;
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me && alive(pid))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| {
                    String::from_utf8_lossy(&c)
                        .replace('\0', " ")
                        .contains(marker)
                })
                .unwrap_or(false)
        })
        .collect()
}

fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    f()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A marker unique to this test run, for telling its processes apart.
fn marker(tag: u32) -> String {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
        % 1_000_000;
    format!("{tag}.{n}{}", std::process::id() % 1000)
}

fn json_of(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(o)))
}

#[test]
fn a_plain_call_starts_no_host() {
    let e = env();
    std::fs::write(e.ws.join("a.txt"), "one\n").unwrap();
    let o = e.call("cli", "read_file", r#"{"path":"a.txt"}"#, &[]);
    assert!(o.status.success(), "{}", text(&o));
    let o = e.call("cli", "run_command", r#"{"command":"echo hi"}"#, &[]);
    assert!(o.status.success(), "{}", text(&o));
    // With no host there is no process to reach: answered here, without starting one.
    let o = e.call("cli", "process_list", "{}", &[]);
    assert!(stdout(&o).contains("no processes"), "{}", text(&o));
    let o = e.call("cli", "process_output", r#"{"process_id":"net-1"}"#, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(stdout(&o).contains("no process `net-1`"), "{}", text(&o));
    assert!(e.hosts().is_empty(), "no host: {:?}", e.hosts());
}

#[test]
fn a_background_server_is_reached_by_later_calls_and_killed_whole() {
    let e = env();
    let port = free_port();
    let cmd = format!("python3 -u -m http.server {port} --bind 127.0.0.1");
    let args = serde_json::json!({"command": cmd, "background": true, "yield_ms": 1000});
    let o = e.call("cli", "run_command", &args.to_string(), &["--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let id = json_of(&o)["data"]["process_id"]
        .as_str()
        .unwrap_or_else(|| panic!("a process id: {}", text(&o)))
        .to_string();
    assert!(id.starts_with("net-"), "{id}");
    assert_eq!(e.host_pids().len(), 1, "one host: {:?}", e.hosts());

    // A later call, a new process: the server still answers.
    let fetch = format!(
        "python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:{port}/hello-from-test').status)\" || true"
    );
    let o = e.call(
        "cli",
        "run_command",
        &serde_json::json!({ "command": fetch }).to_string(),
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    // 404 for a file that does not exist: the server answered.
    assert!(text(&o).contains("404"), "{}", text(&o));

    // Its access log, read by a third call.
    let mut seen = String::new();
    let got = wait_until(PATIENCE, || {
        let o = e.call(
            "cli",
            "process_output",
            &serde_json::json!({"process_id": id, "wait_ms": 500}).to_string(),
            &[],
        );
        seen.push_str(&stdout(&o));
        seen.contains("GET /hello-from-test")
    });
    assert!(got, "the access log: {seen}");

    let o = e.call(
        "cli",
        "process_kill",
        &serde_json::json!({ "process_id": id }).to_string(),
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    let marker = format!("http.server {port}");
    assert!(
        wait_until(PATIENCE, || pids_with(&marker).is_empty()),
        "no python left: {:?}",
        pids_with(&marker)
    );
    // The host's loopback mirrors the lane's server until the next look at its namespace.
    assert!(
        wait_until(PATIENCE, || std::net::TcpStream::connect((
            "127.0.0.1",
            port
        ))
        .is_err()),
        "the port refuses"
    );
    // Nothing left to keep: the host leaves after its grace.
    assert!(
        wait_until(PATIENCE, || e.host_pids().is_empty()),
        "the host exits: {:?}",
        e.hosts()
    );
}

#[test]
fn the_shell_keeps_its_directory_across_calls() {
    let e = env();
    std::fs::create_dir(e.ws.join("sub")).unwrap();
    let o = e.call("cli", "shell", r#"{"command":"cd sub"}"#, &[]);
    assert!(o.status.success(), "{}", text(&o));
    let o = e.call("cli", "shell", r#"{"command":"pwd"}"#, &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(stdout(&o).trim_end().ends_with("/sub"), "{}", text(&o));
    // Another session has a shell of its own, at the root.
    let o = e.call("other", "shell", r#"{"command":"pwd"}"#, &[]);
    assert!(!stdout(&o).contains("/sub"), "{}", text(&o));
}

#[test]
fn claude_code_bash_keeps_its_directory_across_calls_until_the_session_goes_idle() {
    // Claude Code's Bash says a `cd` lasts into the next call; from the CLI that memory lives
    // in the session host, which stays for it past its grace period (a model's next call comes
    // after a turn), and leaves once the session goes idle.
    let e = env();
    let catalog = e.catalog("[processes]\nidle_timeout_s = 8\n");
    std::fs::create_dir(e.ws.join("sub")).unwrap();
    let bash = |session: &str, command: &str| {
        let args = serde_json::json!({ "command": command }).to_string();
        let o = e.call(
            session,
            "Bash",
            &args,
            &["--dialect", "claude-code", "--catalog", &catalog],
        );
        assert!(o.status.success(), "{}", text(&o));
        stdout(&o)
    };
    bash("cc", "cd sub");
    let hosts = e.host_pids();
    assert_eq!(hosts.len(), 1, "{:?}", e.hosts());
    // Past the host's grace period.
    std::thread::sleep(Duration::from_secs(6));
    assert!(
        alive(hosts[0]),
        "the host left while a session kept a directory"
    );
    assert!(bash("cc", "pwd").trim_end().ends_with("/sub"));
    assert!(
        !bash("other", "pwd").contains("/sub"),
        "another session starts at the root"
    );
    assert!(
        wait_until(PATIENCE, || !alive(hosts[0])),
        "the host leaves once the sessions are idle"
    );
}

#[test]
fn an_edited_catalog_is_served_by_a_new_host() {
    let e = env();
    let catalog = e.catalog("[processes]\nmax_per_session = 1\n");
    let start = |tag: u32| {
        let args = serde_json::json!({"command": format!("exec sleep {}", marker(tag)), "background": true});
        e.call(
            "cli",
            "run_command",
            &args.to_string(),
            &["--catalog", &catalog],
        )
    };
    let o = start(311);
    assert!(o.status.success(), "{}", text(&o));
    let o = start(312);
    assert!(
        !o.status.success(),
        "the limit of one refuses a second: {}",
        text(&o)
    );
    let first_host = e.host_pids();
    assert_eq!(first_host.len(), 1, "{:?}", e.hosts());
    // The user raises the limit: the next call is served with the catalog as it is now.
    e.catalog("[processes]\nmax_per_session = 2\n");
    let o = start(313);
    assert!(o.status.success(), "{}", text(&o));
    let hosts = e.host_pids();
    assert_eq!(
        hosts.len(),
        2,
        "a second host serves the edited catalog: {:?}",
        e.hosts()
    );
    assert!(
        hosts.contains(&first_host[0]),
        "the first keeps its process"
    );
}

#[test]
fn another_session_cannot_reach_a_sessions_process() {
    let e = env();
    let m = marker(301);
    let args = serde_json::json!({"command": format!("exec sleep {m}"), "background": true});
    let o = e.call("a", "run_command", &args.to_string(), &["--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let id = json_of(&o)["data"]["process_id"]
        .as_str()
        .unwrap()
        .to_string();

    let kill = serde_json::json!({ "process_id": id }).to_string();
    let o = e.call("b", "process_kill", &kill, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        stdout(&o).contains(&format!("no process `{id}`")),
        "{}",
        text(&o)
    );
    let o = e.call("b", "process_list", "{}", &[]);
    assert!(stdout(&o).contains("no processes"), "{}", text(&o));
    assert_eq!(pids_with(&m).len(), 1, "still running");

    let o = e.call("a", "process_list", "{}", &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        stdout(&o).contains(&id) && stdout(&o).contains(&m),
        "{}",
        text(&o)
    );
    let o = e.call("a", "process_kill", &kill, &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(wait_until(PATIENCE, || pids_with(&m).is_empty()));
}

#[test]
fn an_idle_session_loses_its_processes_and_the_host_exits() {
    let e = env();
    let catalog = e.catalog("[processes]\nidle_timeout_s = 2\n");
    let m = marker(302);
    let args = serde_json::json!({"command": format!("exec sleep {m}"), "background": true});
    let o = e.call(
        "cli",
        "run_command",
        &args.to_string(),
        &["--catalog", &catalog],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(pids_with(&m).len(), 1, "it runs");
    let hosts = e.host_pids();
    assert_eq!(hosts.len(), 1, "{:?}", e.hosts());
    assert!(
        wait_until(PATIENCE, || pids_with(&m).is_empty()),
        "the idle session's process is killed"
    );
    assert!(
        wait_until(PATIENCE, || !alive(hosts[0])),
        "and the host exits"
    );
}

#[test]
fn the_host_leaves_when_its_state_directory_is_deleted() {
    let mut e = env();
    let m = marker(303);
    let args = serde_json::json!({"command": format!("exec sleep {m}"), "background": true});
    let o = e.call("cli", "run_command", &args.to_string(), &[]);
    assert!(o.status.success(), "{}", text(&o));
    let hosts = e.host_pids();
    assert_eq!(hosts.len(), 1, "{:?}", e.hosts());
    drop(e.t.take());
    assert!(wait_until(PATIENCE, || !alive(hosts[0])), "the host exits");
    assert!(
        wait_until(PATIENCE, || pids_with(&m).is_empty()),
        "its processes die"
    );
}

#[test]
fn a_killed_host_is_reported_lost_and_replaced() {
    let e = env();
    let m = marker(304);
    let args = serde_json::json!({"command": format!("exec sleep {m}"), "background": true});
    let o = e.call("cli", "run_command", &args.to_string(), &["--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let id = json_of(&o)["data"]["process_id"]
        .as_str()
        .unwrap()
        .to_string();
    let hosts = e.host_pids();
    assert_eq!(hosts.len(), 1, "{:?}", e.hosts());
    // SAFETY: the host this test started.
    unsafe { libc::kill(hosts[0], libc::SIGKILL) };
    assert!(
        wait_until(PATIENCE, || pids_with(&m).is_empty()),
        "its processes die with it"
    );

    let read = serde_json::json!({ "process_id": id }).to_string();
    let o = e.call("cli", "process_output", &read, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        stdout(&o).contains("lost"),
        "said lost, not unknown: {}",
        text(&o)
    );
    assert!(!stdout(&o).contains("no process"), "{}", text(&o));
    // A fresh host serves the session again, and a new process does not take the lost id.
    let o = e.call("cli", "run_command", &args.to_string(), &["--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let again = json_of(&o)["data"]["process_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(again, id);
    let now = e.host_pids();
    assert_eq!(now.len(), 1, "{:?}", e.hosts());
    assert_ne!(now[0], hosts[0]);
    let o = e.call("cli", "process_output", &read, &[]);
    assert!(stdout(&o).contains("lost"), "still lost: {}", text(&o));
}

/// A command run through the tools tries to reach the host and make it run a call for it.
#[test]
fn a_sandboxed_command_cannot_reach_the_host() {
    let e = env();
    let victim = marker(305);
    let args = serde_json::json!({"command": format!("exec sleep {victim}"), "background": true});
    let o = e.call("victim", "run_command", &args.to_string(), &["--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let id = json_of(&o)["data"]["process_id"]
        .as_str()
        .unwrap()
        .to_string();
    let hosts = e.hosts();
    assert_eq!(hosts.len(), 1, "{hosts:?}");
    let path = hosts[0].1["socket"].as_str().unwrap().to_string();

    // Asks the host to kill the victim's process: the host must refuse before its first line
    // (no ACK, so no call can follow).
    let request = serde_json::json!({
        "session": "victim", "tool": "process_kill", "args": {"process_id": id}
    });
    let script = format!(
        "import socket\n\
         s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n\
         try:\n    s.connect({path:?})\n\
         except OSError as e:\n    print('REFUSED', e.errno); raise SystemExit(0)\n\
         first = s.recv(65536)\n\
         print('FIRST', first)\n\
         if first.startswith(b'toolyard-host'):\n    s.sendall({req:?}.encode() + b'\\n')\n    print('REPLY', s.recv(65536))\n",
        req = request.to_string()
    );
    std::fs::write(e.ws.join("attack.py"), script).unwrap();
    let refused = |t: &str| {
        (t.contains("REFUSED") || t.contains("FIRST b'refused"))
            && !t.contains("REPLY")
            && !t.contains("toolyard-host")
    };

    let attempts = [
        ("run_command_isolated", false),
        ("run_command", false),
        ("run_command", true),
    ];
    for (tool, background) in attempts {
        let mut a = serde_json::json!({"command": "python3 attack.py"});
        if background {
            a["background"] = true.into();
            a["yield_ms"] = 5000.into();
        }
        let o = e.call("attacker", tool, &a.to_string(), &[]);
        let t = text(&o);
        assert!(refused(&t), "{tool} background={background}: {t}");
    }
    assert_eq!(
        pids_with(&victim).len(),
        1,
        "the victim's process still runs"
    );

    // Outside any sandbox too, a peer in another PID namespace is refused (every sandboxed
    // command has one).
    let unshare = |cmd: &[&str]| {
        Command::new("unshare")
            .args(["--user", "--map-current-user", "--pid", "--fork"])
            .args(cmd)
            .output()
    };
    if unshare(&["true"]).is_ok_and(|o| o.status.success()) {
        let attack = e.ws.join("attack.py").display().to_string();
        let o = unshare(&["python3", &attack]).unwrap();
        let t = text(&o);
        assert!(o.status.success(), "{t}");
        assert!(
            refused(&t),
            "no call ran for a peer in another PID namespace: {t}"
        );
        assert_eq!(
            pids_with(&victim).len(),
            1,
            "the victim's process still runs"
        );
    } else {
        eprintln!("unshare --user --pid is not allowed here: the peer check is not tested");
    }
}

#[test]
fn dialect_forms_reach_their_processes_across_calls() {
    let e = env();
    let claude = ["--dialect", "claude-code"];
    let o = e.call(
        "cli",
        "Bash",
        r#"{"command":"echo from-claude; exec sleep 100","run_in_background":true}"#,
        &claude,
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(stdout(&o).contains("ID: net-1"), "{}", text(&o));
    let mut seen = String::new();
    assert!(
        wait_until(PATIENCE, || {
            let o = e.call("cli", "BashOutput", r#"{"bash_id":"net-1"}"#, &claude);
            seen.push_str(&text(&o));
            seen.contains("from-claude")
        }),
        "{seen}"
    );
    let o = e.call("cli", "KillShell", r#"{"shell_id":"net-1"}"#, &claude);
    assert!(o.status.success(), "{}", text(&o));

    // Codex's unified exec: a `cat` outlives its yield and takes input from a later call.
    let codex = ["--dialect", "codex"];
    // No yield_time_ms: Codex's default yield keeps what outlives it, so this goes to the host.
    let o = e.call(
        "cli",
        "exec_command",
        r#"{"cmd":"cat"}"#,
        &["--dialect", "codex", "--json"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let id = json_of(&o)["data"]["session_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(!id.is_empty());
    let write =
        serde_json::json!({"session_id": id, "chars": "echoed-back\n", "yield_time_ms": 1000});
    let o = e.call("cli", "write_stdin", &write.to_string(), &codex);
    assert!(o.status.success(), "{}", text(&o));
    assert!(stdout(&o).contains("echoed-back"), "{}", text(&o));
}
