//! Commands in sandboxed runner lanes, end to end through the real binary and real runner
//! processes.

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::{Value, json};
use toolyard_core::Lane;
use toolyard_dispatch::{CallRequest, Dispatcher, DispatcherConfig, Mode};

mod common;
use common::toolyard_bin;

struct Env {
    _t: tempfile::TempDir,
    ws: PathBuf,
    state: PathBuf,
    home: PathBuf,
    outside: PathBuf,
}

fn env() -> Env {
    let t = tempfile::tempdir().unwrap();
    let base = t.path().canonicalize().unwrap();
    let (ws, state, home, outside) = (
        base.join("ws"),
        base.join("state"),
        base.join("home"),
        base.join("outside"),
    );
    for d in [&ws, &state, &home.join(".ssh"), &outside] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(home.join(".ssh/id_ed25519"), "PLANTED-PRIVATE-KEY\n").unwrap();
    Env {
        _t: t,
        ws,
        state,
        home,
        outside,
    }
}

impl Env {
    fn call(&self, tool: &str, args: Value) -> (Output, Value) {
        let o = Command::new(toolyard_bin())
            .args(["call", tool, &args.to_string(), "--json"])
            .current_dir(&self.ws)
            .env("TOOLYARD_STATE_DIR", &self.state)
            .env("HOME", &self.home)
            .output()
            .expect("toolyard runs");
        let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): {}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        });
        (o, v)
    }
}

fn connect_script(port: u16) -> String {
    format!(
        "python3 -c \"import socket; s=socket.create_connection(('127.0.0.1', {port}), timeout=3); print('CONNECTED', s.recv(10).decode())\""
    )
}

/// A TCP server on 127.0.0.1 that greets every connection.
fn greeter() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            use std::io::Write;
            let mut s = stream;
            let _ = s.write_all(b"hello");
        }
    });
    port
}

#[test]
fn no_lane_reaches_the_host_loopback_directly() {
    let e = env();
    let port = greeter();
    // The net lane reaches the network only through the egress gate (tests/egress_e2e.rs),
    // which refuses the machine's own loopback unless the catalog names the address.
    let (_, v) = e.call("run_command", json!({"command": connect_script(port)}));
    assert_eq!(v["success"], false, "{v}");
    assert!(!v["output"].as_str().unwrap().contains("CONNECTED"), "{v}");

    let (o, v) = e.call(
        "run_command_isolated",
        json!({"command": connect_script(port)}),
    );
    assert_eq!(o.status.code(), Some(1), "{v}");
    assert!(!v["output"].as_str().unwrap().contains("CONNECTED"), "{v}");

    let (_, v) = e.call(
        "run_command_isolated",
        json!({"command": "python3 -c \"import socket; print(socket.getaddrinfo('example.com', 80))\""}),
    );
    assert_eq!(v["success"], false, "name resolution must fail: {v}");
}

#[test]
fn no_lane_writes_outside_the_workspace_or_reads_a_denied_secret() {
    let e = env();
    let target = e.outside.join("pwned");
    for tool in ["run_command", "run_command_isolated", "build"] {
        let cmd = format!(
            "echo x > {t}; echo y > $HOME/pwned; cat $HOME/.ssh/id_ed25519; echo inside > ok-{tool}.txt",
            t = target.display()
        );
        let (_, v) = e.call(tool, json!({"command": cmd}));
        let text = v.to_string();
        assert!(
            !text.contains("PLANTED-PRIVATE-KEY"),
            "{tool} read the key: {text}"
        );
        assert!(!target.exists(), "{tool} wrote outside");
        assert!(!e.home.join("pwned").exists(), "{tool} wrote into HOME");
        assert!(
            e.ws.join(format!("ok-{tool}.txt")).exists(),
            "{tool} can write inside: {text}"
        );
    }
}

fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let p = entry.path().join("cmdline");
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(&p) {
            let _ = f.read_to_string(&mut s);
        }
        if s.replace('\0', " ").contains(marker) {
            found.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    found
}

#[test]
fn a_timeout_leaves_no_process_behind_even_setsid_ones() {
    let e = env();
    let marker = "1337.25";
    let cmd = format!("setsid sleep {marker} & (sleep {marker} &) ; echo started; sleep 100");
    let (_, v) = e.call("run_command", json!({"command": cmd, "timeout_ms": 1500}));
    assert_eq!(v["data"]["timed_out"], true, "{v}");
    assert!(
        v["output"].as_str().unwrap().contains("started"),
        "partial output kept: {v}"
    );
    // The kernel reaps the namespace at once; allow a moment for /proc to catch up.
    let mut left = processes_with(marker);
    for _ in 0..50 {
        if left.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        left = processes_with(marker);
    }
    assert!(left.is_empty(), "processes left behind: {left:?}");
}

#[test]
fn blocked_commands_say_which_rule() {
    let e = env();
    let (o, v) = e.call(
        "run_command",
        json!({"command": "sudo rm -r -f --no-preserve-root /"}),
    );
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(v["error_kind"], "blocked", "{v}");
    assert!(v["output"].as_str().unwrap().contains("rule"), "{v}");
}

fn lanes_dispatcher(ws: &Path) -> Dispatcher {
    let mut config = DispatcherConfig::new(ws);
    config.state_dir = ws.parent().map(|base| base.join("state"));
    config.mode = Mode::Lanes {
        exe: toolyard_bin(),
    };
    Dispatcher::new(config).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_killed_mid_call_fails_that_call_and_the_next_call_works() {
    let e = env();
    let d = std::sync::Arc::new(lanes_dispatcher(&e.ws));
    let first = d
        .call(CallRequest::new(
            "s",
            "run_command",
            json!({"command": "echo warm"}),
        ))
        .await;
    assert!(first.success, "{}", first.output);
    let pid = d
        .router()
        .unwrap()
        .runner_pid(Lane::Net)
        .await
        .expect("net runner is up");

    let slow = {
        let d = d.clone();
        tokio::spawn(async move {
            d.call(CallRequest::new(
                "s",
                "run_command",
                json!({"command": "sleep 60"}),
            ))
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    nix_kill(pid);
    let r = tokio::time::timeout(Duration::from_secs(20), slow)
        .await
        .expect("the caller is not left hanging")
        .unwrap();
    assert!(!r.success);
    assert!(r.output.contains("runner's link died"), "{}", r.output);

    let again = d
        .call(CallRequest::new(
            "s",
            "run_command",
            json!({"command": "echo back"}),
        ))
        .await;
    assert!(again.success, "{}", again.output);
    let new_pid = d.router().unwrap().runner_pid(Lane::Net).await.unwrap();
    assert_ne!(new_pid, pid, "a new runner was started");
}

fn nix_kill(pid: u32) {
    let status = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_call_kills_its_process_tree() {
    let e = env();
    let d = std::sync::Arc::new(lanes_dispatcher(&e.ws));
    let marker = "1441.75";
    let req = CallRequest::new(
        "s",
        "run_command_isolated",
        json!({"command": format!("setsid sleep {marker} & sleep {marker}")}),
    );
    let cancel = req.cancel.clone();
    let call = {
        let d = d.clone();
        tokio::spawn(async move { d.call(req).await })
    };
    for _ in 0..100 {
        if processes_with(marker).len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!processes_with(marker).is_empty(), "the command started");
    cancel.cancel();
    let r = tokio::time::timeout(Duration::from_secs(20), call)
        .await
        .expect("cancel answers")
        .unwrap();
    assert!(!r.success);
    let mut left = processes_with(marker);
    for _ in 0..50 {
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        left = processes_with(marker);
    }
    assert!(left.is_empty(), "processes left after cancel: {left:?}");
}

fn claude_code_dispatcher(ws: &Path, lanes: bool) -> Dispatcher {
    let mut config = DispatcherConfig::new(ws);
    config.state_dir = ws.parent().map(|base| base.join("state"));
    config.dialect = toolyard_dialects::Dialect::ClaudeCode;
    if lanes {
        config.mode = Mode::Lanes {
            exe: toolyard_bin(),
        };
    }
    Dispatcher::new(config).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_bash_keeps_each_sessions_directory_in_lanes_and_inline() {
    for lanes in [true, false] {
        let e = env();
        std::fs::create_dir(e.ws.join("sub")).unwrap();
        let d = claude_code_dispatcher(&e.ws, lanes);
        let bash = |session: &'static str, command: &str| {
            d.call(CallRequest::new(
                session,
                "Bash",
                json!({"command": command}),
            ))
        };
        let sub = format!("{}\n", e.ws.join("sub").display());
        let root = format!("{}\n", e.ws.display());
        let r = bash("s", "cd sub").await;
        assert!(r.success, "lanes {lanes}: {}", r.output);
        let r = bash("s", "pwd").await;
        assert!(r.output.ends_with(&sub), "lanes {lanes}: {:?}", r.output);
        assert!(
            !r.output.contains('\u{1e}'),
            "lanes {lanes}: {:?}",
            r.output
        );
        let r = bash("t", "pwd").await;
        assert!(r.output.ends_with(&root), "lanes {lanes}: {:?}", r.output);
        let r = bash("s", "cd /").await;
        assert!(
            r.output.contains("Shell cwd was reset to"),
            "lanes {lanes}: {:?}",
            r.output
        );
        let r = bash("s", "pwd").await;
        assert!(r.output.ends_with(&root), "lanes {lanes}: {:?}", r.output);
    }
}
