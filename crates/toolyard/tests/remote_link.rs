//! The command link (`[remote] command`) end to end, through the real binary: a plain wrapper
//! script stands in for `podman exec -i` and starts `toolyard runner` on a directory that is
//! NOT the server's `-w`, so every test can check that the server's own workspace stays
//! untouched. Fake runners (shell scripts) play a runner of another protocol version and one
//! that stops answering pings.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolyard_core::{Catalog, Lane};
use toolyard_runner::{CallRequest, Dispatcher, DispatcherConfig, Mode};

fn toolyard_bin() -> PathBuf {
    std::env::var_os("TOOLYARD_TEST_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_toolyard")))
}

/// A generous bound for the test harness itself, far under the 60 s of the command the link
/// test kills: a hang fails the test instead of stalling the suite.
const HARNESS: Duration = Duration::from_secs(40);

struct Env {
    _t: tempfile::TempDir,
    /// The server's `-w`: must stay byte-identical.
    server_ws: PathBuf,
    server_state: PathBuf,
    /// The runner's `--workspace`.
    runner_ws: PathBuf,
    home: PathBuf,
    /// One line per runner the wrapper started: `PID LANE SESSION-TOKEN`.
    log: PathBuf,
    catalog: PathBuf,
    base: PathBuf,
}

fn env() -> Env {
    env_with("")
}

/// An environment whose catalog runs the wrapper, with `extra` added to its `[remote]` section.
fn env_with(extra: &str) -> Env {
    let t = tempfile::tempdir().unwrap();
    let base = t.path().canonicalize().unwrap();
    let dir = |n: &str| {
        let p = base.join(n);
        std::fs::create_dir_all(&p).unwrap();
        p
    };
    let (server_ws, server_state, runner_ws, runner_state, home) = (
        dir("server-ws"),
        dir("server-state"),
        dir("runner-ws"),
        dir("runner-state"),
        dir("home"),
    );
    let log = base.join("links.log");
    std::fs::write(server_ws.join("a.txt"), "server copy\n").unwrap();
    std::fs::write(runner_ws.join("a.txt"), "remote one\n").unwrap();
    let wrapper = script(
        &base,
        "wrapper.sh",
        &format!(
            "echo \"$$ $1 $2\" >> '{log}'\nexport HOME='{home}'\nexec '{bin}' runner --lane \"$1\" --workspace '{ws}' --state-dir '{state}'\n",
            log = log.display(),
            home = home.display(),
            bin = toolyard_bin().display(),
            ws = runner_ws.display(),
            state = runner_state.display(),
        ),
    );
    let catalog = base.join("catalog.toml");
    std::fs::write(
        &catalog,
        format!(
            "[remote]\ncommand = [\"{}\", \"{{lane}}\", \"{{session}}\"]\n{extra}",
            wrapper.display()
        ),
    )
    .unwrap();
    Env {
        _t: t,
        server_ws,
        server_state,
        runner_ws,
        home,
        log,
        catalog,
        base,
    }
}

/// An executable `/bin/sh` script `name` in `dir`.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Every file under `dir` with its bytes and mode.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (Vec<u8>, u32)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let meta = e.metadata().unwrap();
            let rel = e.path().strip_prefix(dir).unwrap().to_path_buf();
            if meta.is_dir() {
                stack.push(e.path());
                out.insert(rel, (Vec::new(), meta.permissions().mode()));
            } else {
                let bytes = std::fs::read(e.path()).unwrap();
                out.insert(rel, (bytes, meta.permissions().mode()));
            }
        }
    }
    out
}

/// Run `cmd`, killing it and failing the test if it outlives [`HARNESS`].
fn run_bounded(mut cmd: Command) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("toolyard runs");
    let started = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if started.elapsed() > HARNESS {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!(
                "still running after {HARNESS:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Env {
    fn cli(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(toolyard_bin());
        cmd.args(args)
            .arg("-w")
            .arg(&self.server_ws)
            .current_dir(&self.base)
            .env("TOOLYARD_STATE_DIR", &self.server_state)
            .env("HOME", &self.home)
            .env("TOOLYARD_CATALOG", &self.catalog);
        run_bounded(cmd)
    }

    fn call(&self, session: &str, tool: &str, args: Value) -> Value {
        let o = self.cli(&[
            "call",
            tool,
            &args.to_string(),
            "--json",
            "--session",
            session,
        ]);
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): {}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        })
    }

    fn ok(&self, session: &str, tool: &str, args: Value) -> String {
        let v = self.call(session, tool, args);
        assert_eq!(v["success"], true, "{tool}: {v}");
        v["output"].as_str().unwrap_or_default().to_string()
    }

    /// The wrapper's log: (pid, lane, session token) per runner started.
    fn links(&self) -> Vec<(u32, String, String)> {
        let Ok(text) = std::fs::read_to_string(&self.log) else {
            return Vec::new();
        };
        text.lines()
            .map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                (f[0].parse().unwrap(), f[1].to_string(), f[2].to_string())
            })
            .collect()
    }

    /// A dispatcher in this process whose runners are reached through the wrapper.
    fn dispatcher(&self) -> Dispatcher {
        let mut config = DispatcherConfig::new(&self.server_ws);
        config.state_dir = Some(self.server_state.clone());
        config.catalog_path = Some(self.catalog.clone());
        config.catalog = Catalog::load(&self.catalog).unwrap();
        config.mode = Mode::Lanes {
            exe: toolyard_bin(),
        };
        Dispatcher::new(config).unwrap()
    }

    /// A catalog whose `[remote] command` is the fake runner `body` (a shell script).
    fn fake_runner(&self, body: &str, extra: &str) -> PathBuf {
        let fake = script(&self.base, "fake-runner.sh", body);
        let catalog = self.base.join("fake.toml");
        std::fs::write(
            &catalog,
            format!("[remote]\ncommand = [\"{}\"]\n{extra}", fake.display()),
        )
        .unwrap();
        catalog
    }
}

#[test]
fn file_tools_and_commands_act_on_the_runner_s_directory_and_the_journal_keeps_the_pre_image() {
    let e = env();
    let before = snapshot(&e.server_ws);

    let out = e.ok("s1", "read_file", json!({"path": "a.txt"}));
    assert!(
        out.contains("remote one") && !out.contains("server copy"),
        "{out}"
    );
    e.ok(
        "s1",
        "edit_file",
        json!({"path": "a.txt", "old_string": "remote one", "new_string": "remote two"}),
    );
    e.ok(
        "s1",
        "write_file",
        json!({"path": "made.txt", "content": "made remotely\n"}),
    );
    let out = e.ok("s1", "glob", json!({"pattern": "*.txt"}));
    assert!(out.contains("made.txt"), "{out}");
    let out = e.ok("s1", "run_command", json!({"command": "pwd; cat a.txt"}));
    assert!(
        out.contains(&e.runner_ws.display().to_string()) && out.contains("remote two"),
        "the net lane ran elsewhere: {out}"
    );
    let out = e.ok(
        "s1",
        "run_command_isolated",
        json!({"command": "cat made.txt"}),
    );
    assert!(out.contains("made remotely"), "{out}");

    assert_eq!(
        std::fs::read_to_string(e.runner_ws.join("a.txt")).unwrap(),
        "remote two\n"
    );
    assert!(e.runner_ws.join("made.txt").exists());
    assert_eq!(
        snapshot(&e.server_ws),
        before,
        "the server's workspace changed"
    );
    let lanes: Vec<String> = e.links().into_iter().map(|l| l.1).collect();
    assert!(
        lanes.contains(&"net".to_string()) && lanes.contains(&"no-net".to_string()),
        "{lanes:?}"
    );

    // The server's journal holds the remote edit, with the text it replaced.
    let o = e.cli(&["log", "--json"]);
    let changes: Value = serde_json::from_slice(&o.stdout).unwrap();
    let edit = changes
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["tool"] == "edit_file")
        .unwrap_or_else(|| panic!("no edit journaled: {changes}"));
    assert_eq!(edit["path"], "a.txt");
    assert_eq!(edit["status"], "done");
    assert_eq!(edit["existed"], true);
    let created = changes
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["tool"] == "write_file")
        .unwrap();
    assert_eq!(created["existed"], false);
    let states: Vec<PathBuf> = std::fs::read_dir(e.server_state.join("workspaces"))
        .unwrap()
        .flatten()
        .map(|d| d.path())
        .collect();
    assert_eq!(states.len(), 1, "{states:?}");
    let state = toolyard_workspace::StateDir::at(&states[0], &e.server_ws).unwrap();
    let journal = toolyard_workspace::Journal::open(&state).unwrap();
    let id = toolyard_workspace::ChangeId(edit["id"].as_i64().unwrap());
    let mut old = String::new();
    std::io::Read::read_to_string(&mut journal.old_content(id).unwrap().unwrap(), &mut old)
        .unwrap();
    assert_eq!(old, "remote one\n");

    // Undo would write the files, which are on the runner's side: refused, nothing touched.
    let v = e.call("s1", "undo", json!({}));
    assert_eq!(v["success"], false, "{v}");
    assert!(
        v["output"]
            .as_str()
            .unwrap()
            .contains("not available with a [remote] runner yet"),
        "{v}"
    );
    assert_eq!(snapshot(&e.server_ws), before);
    assert_eq!(
        std::fs::read_to_string(e.runner_ws.join("a.txt")).unwrap(),
        "remote two\n"
    );
}

#[test]
fn each_session_gets_its_own_runner_when_the_template_names_the_session() {
    let e = env();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let d = e.dispatcher();
        let call = |session: &str| {
            d.call(CallRequest::new(
                session,
                "run_command",
                json!({"command": "echo hi"}),
            ))
        };
        for session in ["alice", "bob/../x", "alice"] {
            let r = tokio::time::timeout(HARNESS, call(session)).await.unwrap();
            assert!(r.success, "{session}: {}", r.output);
        }
        let links = e.links();
        assert_eq!(links.len(), 2, "one runner per session: {links:?}");
        let (a, b) = (&links[0], &links[1]);
        assert_ne!(a.0, b.0);
        assert_ne!(a.2, b.2, "the sessions share a token: {links:?}");
        for (_, lane, token) in &links {
            assert_eq!(lane, "net");
            assert!(
                token
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
                "{token}"
            );
        }
        assert!(a.2.starts_with("alice-"), "{links:?}");
        let router = d.router().unwrap();
        assert_eq!(router.runner_pid_for("alice", Lane::Net).await, Some(a.0));
        assert_eq!(
            router.runner_pid_for("bob/../x", Lane::Net).await,
            Some(b.0)
        );
        // The session ends: its runner is closed (the process exits), the other's stays.
        d.end_session("alice").await;
        assert_eq!(router.runner_pid_for("alice", Lane::Net).await, None);
        let waited = Instant::now();
        while Path::new(&format!("/proc/{}", a.0)).exists() {
            assert!(
                waited.elapsed() < HARNESS,
                "alice's runner outlived her session"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(Path::new(&format!("/proc/{}", b.0)).exists());
        assert_eq!(router.live_lanes_for("bob/../x").await, vec![Lane::Net]);
    });
}

#[test]
fn killing_the_runner_fails_the_call_in_flight_and_the_next_call_gets_a_fresh_runner() {
    let e = env();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let d = std::sync::Arc::new(e.dispatcher());
        // Start the runner, so the kill below hits one that is serving.
        let r = d
            .call(CallRequest::new(
                "s",
                "run_command",
                json!({"command": "true"}),
            ))
            .await;
        assert!(r.success, "{}", r.output);
        let pid = d
            .router()
            .unwrap()
            .runner_pid_for("s", Lane::Net)
            .await
            .unwrap();
        assert_eq!(e.links()[0].0, pid, "the wrapper's pid is the runner's");

        let long = {
            let d = d.clone();
            tokio::spawn(async move {
                d.call(CallRequest::new(
                    "s",
                    "run_command",
                    json!({"command": "echo started > started.txt; sleep 60"}),
                ))
                .await
            })
        };
        // Wait until the command runs, then kill the runner under it.
        let marker = e.runner_ws.join("started.txt");
        let waited = Instant::now();
        while !marker.exists() {
            assert!(waited.elapsed() < HARNESS, "the command never started");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let killed = Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let r = tokio::time::timeout(HARNESS, long)
            .await
            .expect("the call in flight must fail long before its 60 s command ends")
            .unwrap();
        assert!(!r.success);
        assert!(
            r.output.contains("the net runner's link died")
                && r.output.contains("may or may not have run")
                && r.output.contains("check with read_file/git status"),
            "{}",
            r.output
        );

        let r = tokio::time::timeout(
            HARNESS,
            d.call(CallRequest::new(
                "s",
                "run_command",
                json!({"command": "echo fresh"}),
            )),
        )
        .await
        .unwrap();
        assert!(r.success && r.output.contains("fresh"), "{}", r.output);
        let links = e.links();
        assert_eq!(links.len(), 2, "a fresh runner: {links:?}");
        assert_ne!(links[1].0, pid);
    });
}

#[test]
fn a_runner_of_another_protocol_version_is_refused_with_both_versions() {
    let e = env();
    let catalog = e.fake_runner(
        "read hello\necho '{\"type\":\"ready\",\"proto\":999,\"max_frame\":1000,\"lane\":\"net\",\"pid\":1,\"sandbox\":\"none\"}'\nexec sleep 30\n",
        "",
    );
    let v = call_with(&e, &catalog);
    let out = v["output"].as_str().unwrap();
    assert_eq!(v["success"], false, "{v}");
    assert!(
        out.contains("job protocol version 999, this server version 2")
            && out.contains("upgrade this toolyard server"),
        "{out}"
    );

    // A runner from before the hello: its ready line has no version.
    let catalog = e.fake_runner(
        "echo '{\"type\":\"ready\",\"lane\":\"net\",\"pid\":1,\"sandbox\":\"none\"}'\nexec sleep 30\n",
        "",
    );
    let v = call_with(&e, &catalog);
    let out = v["output"].as_str().unwrap();
    assert!(
        out.contains("version 1, this server version 2")
            && out.contains("upgrade the toolyard that the [remote] command"),
        "{out}"
    );
}

#[test]
fn a_runner_that_stops_answering_pings_is_declared_dead() {
    let e = env();
    // Says it is ready, then neither reads nor writes again (its stdin stays open).
    let catalog = e.fake_runner(
        "read hello\necho '{\"type\":\"ready\",\"proto\":2,\"max_frame\":67108864,\"lane\":\"net\",\"pid\":'$$',\"sandbox\":\"none\"}'\nexec sleep 600\n",
        "heartbeat_ms = 100\n",
    );
    let v = call_with(&e, &catalog);
    let out = v["output"].as_str().unwrap();
    assert_eq!(v["success"], false, "{v}");
    assert!(
        out.contains("the net runner's link died: no answer to 3 pings")
            && out.contains("may or may not have run"),
        "{out}"
    );
}

/// `run_command` through the server with `catalog`.
fn call_with(e: &Env, catalog: &Path) -> Value {
    let mut cmd = Command::new(toolyard_bin());
    cmd.args(["call", "run_command", r#"{"command":"echo hi"}"#, "--json"])
        .arg("-w")
        .arg(&e.server_ws)
        .env("TOOLYARD_STATE_DIR", &e.server_state)
        .env("HOME", &e.home)
        .env("TOOLYARD_CATALOG", catalog);
    let o = run_bounded(cmd);
    serde_json::from_slice(&o.stdout).unwrap_or_else(|err| {
        panic!(
            "not JSON ({err}): {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

#[test]
fn a_runner_whose_router_goes_silent_stops_its_commands_and_exits() {
    let e = env();
    let state = e.base.join("runner-state");
    let mut runner = Command::new(toolyard_bin())
        .args(["runner", "--lane", "net", "--workspace"])
        .arg(&e.runner_ws)
        .arg("--state-dir")
        .arg(&state)
        .env("HOME", &e.home)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = runner.stdin.take().unwrap();
    let mut stdout = std::io::BufReader::new(runner.stdout.take().unwrap());
    let mut ready = String::new();
    stdout.read_line(&mut ready).unwrap();
    let ready: Value = serde_json::from_str(&ready).unwrap();
    assert_eq!(ready["type"], "ready");
    assert_eq!(ready["proto"], 2);
    let hello = json!({"type": "hello", "proto": 2, "max_frame": 1 << 20, "heartbeat_ms": 100,
        "process_base": 1, "pre_images": true});
    let job = json!({"type": "job", "id": "1", "session": "s", "call_id": "c1", "dialect": "loopr",
        "tool": "run_command", "args": {"command": "sleep 60"},
        "timeout_ms": 120000, "max_timeout_ms": 600000, "max_output_bytes": 30000});
    writeln!(stdin, "{hello}\n{job}").unwrap();
    stdin.flush().unwrap();
    // Then silence, with stdin still open: the runner must give up on its own.
    let started = Instant::now();
    let status = loop {
        if let Some(s) = runner.try_wait().unwrap() {
            break s;
        }
        assert!(
            started.elapsed() < HARNESS,
            "the runner outlived its silent router"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    drop(stdin);
    let mut err = String::new();
    std::io::Read::read_to_string(runner.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(err.contains("the router went silent"), "{status}: {err}");
    // It pinged while it waited.
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    assert!(rest.contains("\"type\":\"ping\""), "{rest}");
}
