//! The lanes and the journal end to end through a real container engine: runners started by
//! `podman exec -i` in a pod that `podman kube play` made from a Kubernetes Pod manifest, running
//! as nobody with no network, its `/workspace` a host directory that is NOT the server's `-w`.
//!
//! tests/containers/run.sh installs podman, builds the image, plays the pod and runs this file
//! with `TOOLYARD_E2E_POD` (the pod), `TOOLYARD_E2E_CONTAINER` (its runner container) and
//! `TOOLYARD_E2E_POD_WS` (the host directory mounted at /workspace). Without them every test
//! prints why it skipped and passes: plain `cargo test` has no pod.

mod server_side;

use std::io::Read;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use server_side::{HARNESS, Server, ServerCli, run_bounded, snapshot, toolyard_bin};
use toolyard_core::Catalog;
use toolyard_dispatch::{CallRequest, Dispatcher, DispatcherConfig, Mode};

/// The uid the pod runs as (its manifest's `runAsUser`).
const NOBODY: u32 = 65534;

/// One pod serves every test, and one test kills it: they take turns.
static POD_LOCK: Mutex<()> = Mutex::new(());

/// The pod tests/containers/run.sh started.
struct Pod {
    name: String,
    container: String,
    /// The host directory the pod sees at /workspace.
    ws: PathBuf,
}

fn pod() -> Option<Pod> {
    let var = |n: &str| std::env::var(n).ok().filter(|v| !v.is_empty());
    match (
        var("TOOLYARD_E2E_POD"),
        var("TOOLYARD_E2E_CONTAINER"),
        var("TOOLYARD_E2E_POD_WS"),
    ) {
        (Some(name), Some(container), Some(ws)) => Some(Pod {
            name,
            container,
            ws: PathBuf::from(ws),
        }),
        _ => {
            eprintln!(
                "skipped: no pod to run in (TOOLYARD_E2E_POD, TOOLYARD_E2E_CONTAINER, \
                 TOOLYARD_E2E_POD_WS unset); tests/containers/run.sh starts one and runs these"
            );
            None
        }
    }
}

struct Env {
    _t: tempfile::TempDir,
    _turn: MutexGuard<'static, ()>,
    pod: Pod,
    /// The server's `-w`: must stay byte-identical.
    server_ws: PathBuf,
    server_state: PathBuf,
    home: PathBuf,
    catalog: PathBuf,
    base: PathBuf,
}

/// This test's turn with the pod, its /workspace emptied and given `files` (owned by nobody, as
/// a checkout in the image would be), and a server whose runners are `podman exec -i` into it.
fn env(files: &[(&str, &[u8])]) -> Option<Env> {
    let pod = pod()?;
    let turn = POD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    for e in std::fs::read_dir(&pod.ws).unwrap().flatten() {
        let p = e.path();
        if e.file_type().unwrap().is_dir() {
            std::fs::remove_dir_all(&p).unwrap();
        } else {
            std::fs::remove_file(&p).unwrap();
        }
    }
    for (name, bytes) in files {
        let p = pod.ws.join(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
            std::os::unix::fs::chown(parent, Some(NOBODY), Some(NOBODY)).unwrap();
        }
        std::fs::write(&p, bytes).unwrap();
        std::os::unix::fs::chown(&p, Some(NOBODY), Some(NOBODY)).unwrap();
    }

    let t = tempfile::tempdir().unwrap();
    let base = t.path().canonicalize().unwrap();
    let dir = |n: &str| {
        let p = base.join(n);
        std::fs::create_dir_all(&p).unwrap();
        p
    };
    let (server_ws, server_state, home) = (dir("server-ws"), dir("server-state"), dir("home"));
    std::fs::write(server_ws.join("a.txt"), "server copy\n").unwrap();
    let catalog = base.join("catalog.toml");
    std::fs::write(
        &catalog,
        format!(
            "[remote]\ncommand = [\"podman\", \"exec\", \"-i\", \"{}\", \"toolyard\", \"runner\", \
             \"--lane\", \"{{lane}}\", \"--workspace\", \"/workspace\"]\n",
            pod.container
        ),
    )
    .unwrap();
    Some(Env {
        _t: t,
        _turn: turn,
        pod,
        server_ws,
        server_state,
        home,
        catalog,
        base,
    })
}

/// `podman ARGS`, which must succeed.
fn podman(args: &[&str]) -> String {
    let mut cmd = Command::new("podman");
    cmd.args(args);
    let o = run_bounded(cmd);
    assert!(
        o.status.success(),
        "podman {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Host pids of processes whose command line contains `marker` (the pod's processes are visible
/// from the host's /proc).
fn processes_with(marker: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(entry.path().join("cmdline")) {
            let _ = f.read_to_string(&mut s);
        }
        if s.replace('\0', " ").contains(marker) {
            found.push(pid);
        }
    }
    found
}

impl ServerCli for Env {
    fn server(&self) -> Server<'_> {
        Server {
            ws: &self.server_ws,
            state: &self.server_state,
            home: &self.home,
            catalog: &self.catalog,
            base: &self.base,
        }
    }
}

impl Env {
    /// A dispatcher in this process whose runners are `podman exec -i` into the pod.
    fn dispatcher(&self) -> Arc<Dispatcher> {
        let mut config = DispatcherConfig::new(&self.server_ws);
        config.state_dir = Some(self.server_state.clone());
        config.catalog_path = Some(self.catalog.clone());
        config.catalog = Catalog::load(&self.catalog).unwrap();
        config.mode = Mode::Lanes {
            exe: toolyard_bin(),
        };
        Arc::new(Dispatcher::new(config).unwrap())
    }

    /// The file as the pod left it in its /workspace.
    fn pod_file(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.pod.ws.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    /// The server's journal (its one workspace state under the server's state dir).
    fn journal(&self) -> toolyard_records::Journal {
        let states: Vec<PathBuf> = std::fs::read_dir(self.server_state.join("workspaces"))
            .unwrap()
            .flatten()
            .map(|d| d.path())
            .collect();
        assert_eq!(states.len(), 1, "{states:?}");
        let state = toolyard_workspace::StateDir::at(&states[0], &self.server_ws).unwrap();
        toolyard_records::Journal::open(&state).unwrap()
    }

    /// The bytes change `id` replaced, from the server's journal.
    fn old_bytes(&self, id: i64) -> Vec<u8> {
        let mut old = Vec::new();
        self.journal()
            .old_content(toolyard_records::ChangeId(id))
            .unwrap()
            .expect("the change kept its pre-image")
            .read_to_end(&mut old)
            .unwrap();
        old
    }
}

/// Call `tool` through `d` in session `s`, bounded by [`HARNESS`].
async fn call(d: &Dispatcher, s: &str, tool: &str, args: Value) -> toolyard_core::ToolResult {
    tokio::time::timeout(HARNESS, d.call(CallRequest::new(s, tool, args)))
        .await
        .unwrap_or_else(|_| panic!("{tool} did not answer within {HARNESS:?}"))
}

#[test]
fn file_tools_and_both_lanes_act_inside_the_pod_and_the_journal_keeps_the_old_text() {
    let Some(e) = env(&[
        ("a.txt", b"inside the pod\n"),
        ("src/lib.rs", b"fn needle() {}\n"),
    ]) else {
        return;
    };
    let before = snapshot(&e.server_ws);

    let out = e.ok("s1", "read_file", json!({"path": "a.txt"}));
    assert!(
        out.contains("inside the pod") && !out.contains("server copy"),
        "{out}"
    );
    e.ok(
        "s1",
        "edit_file",
        json!({"path": "a.txt", "old_string": "inside the pod", "new_string": "edited in the pod"}),
    );
    e.ok(
        "s1",
        "write_file",
        json!({"path": "made.txt", "content": "made in the pod\n"}),
    );
    let out = e.ok("s1", "glob", json!({"pattern": "**/*.rs"}));
    assert!(out.contains("src/lib.rs"), "{out}");
    let out = e.ok("s1", "grep", json!({"pattern": "needle"}));
    assert!(out.contains("src/lib.rs"), "{out}");

    // The net lane (run_command) and the no-net lane (run_command_isolated) both run in the
    // pod, as nobody, in its /workspace.
    let out = e.ok(
        "s1",
        "run_command",
        json!({"command": "id -u; pwd; cat a.txt"}),
    );
    assert!(
        out.contains(&NOBODY.to_string())
            && out.contains("/workspace")
            && out.contains("edited in the pod"),
        "the net lane ran elsewhere: {out}"
    );
    let out = e.ok(
        "s1",
        "run_command_isolated",
        json!({"command": "id -u; cat made.txt"}),
    );
    assert!(
        out.contains(&NOBODY.to_string()) && out.contains("made in the pod"),
        "{out}"
    );

    // The runner confines itself inside the pod as it does on a host: /tmp is world-writable
    // in the image, yet no lane may write there.
    for tool in ["run_command", "run_command_isolated"] {
        let v = e.call(
            "s1",
            tool,
            json!({"command": format!("echo x > /tmp/pwned-{tool}; echo inside > ok-{tool}.txt")}),
        );
        let found = Command::new("podman")
            .args(["exec", &e.pod.container, "test", "-e"])
            .arg(format!("/tmp/pwned-{tool}"))
            .status()
            .unwrap();
        assert!(!found.success(), "{tool} wrote outside /workspace: {v}");
        assert_eq!(e.pod_file(&format!("ok-{tool}.txt")), b"inside\n", "{v}");
    }

    assert_eq!(e.pod_file("a.txt"), b"edited in the pod\n");
    assert_eq!(e.pod_file("made.txt"), b"made in the pod\n");
    assert_eq!(
        snapshot(&e.server_ws),
        before,
        "the server's workspace changed"
    );

    // `toolyard log` lists the edit; the server's journal holds the text it replaced.
    let o = e.cli(&["log"]);
    let listing = String::from_utf8_lossy(&o.stdout);
    assert!(
        listing.contains("edit_file") && listing.contains("a.txt") && listing.contains("done"),
        "{listing}"
    );
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
    assert_eq!(
        e.old_bytes(edit["id"].as_i64().unwrap()),
        b"inside the pod\n"
    );
    assert_eq!(snapshot(&e.server_ws), before);
}

#[test]
fn the_journal_keeps_exact_pre_images_of_awkward_files_changed_in_the_pod() {
    let awkward: &[(&str, &[u8])] = &[
        ("crlf.txt", b"one\r\ntwo\r\nthree\r\n"),
        ("no-newline.txt", b"last line has no newline"),
        ("utf8.txt", "caf\u{e9} \u{1F600}\n\tindent\n".as_bytes()),
        ("script.sh", b"#!/bin/sh\necho run\n"),
    ];
    let Some(e) = env(awkward) else {
        return;
    };
    std::fs::set_permissions(
        e.pod.ws.join("script.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let before = snapshot(&e.server_ws);
    for (name, bytes) in awkward {
        e.ok("s", "read_file", json!({"path": name}));
        let mut new = bytes.to_vec();
        new.extend_from_slice(b"\nappended in the pod\n");
        let v = e.call(
            "s",
            "write_file",
            json!({"path": name, "content": String::from_utf8(new.clone()).unwrap()}),
        );
        assert_eq!(v["success"], true, "{name}: {v}");
        assert_eq!(e.pod_file(name), new, "{name}");
    }
    let mode = std::fs::metadata(e.pod.ws.join("script.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755, "the write kept the file's mode");

    let o = e.cli(&["log", "--json"]);
    let changes: Value = serde_json::from_slice(&o.stdout).unwrap();
    for (name, bytes) in awkward {
        let c = changes
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["path"] == *name)
            .unwrap_or_else(|| panic!("{name} not journaled: {changes}"));
        assert_eq!(c["status"], "done", "{c}");
        assert_eq!(&e.old_bytes(c["id"].as_i64().unwrap()), bytes, "{name}");
    }
    assert_eq!(snapshot(&e.server_ws), before);
}

#[test]
fn a_patch_in_the_pod_is_journaled_as_one_group_and_one_undo_reverts_it() {
    let Some(e) = env(&[("a.txt", b"one\n"), ("gone.txt", b"bye\n")]) else {
        return;
    };
    let before = snapshot(&e.server_ws);
    let patch = "*** Begin Patch\n*** Update File: a.txt\n@@\n-one\n+two\n*** Add File: sub/new.txt\n+made in the pod\n*** Delete File: gone.txt\n*** End Patch";
    let v = e.call_with(
        "s",
        "apply_patch",
        json!({ "input": patch }),
        &["--dialect", "codex"],
    );
    assert_eq!(v["success"], true, "{v}");
    assert_eq!(e.pod_file("a.txt"), b"two\n");
    assert_eq!(e.pod_file("sub/new.txt"), b"made in the pod\n");
    assert!(!e.pod.ws.join("gone.txt").exists());

    let out = e.ok("s", "undo", json!({}));
    assert!(out.contains("2 other changes"), "{out}");
    assert_eq!(e.pod_file("a.txt"), b"one\n");
    assert_eq!(e.pod_file("gone.txt"), b"bye\n");
    assert!(!e.pod.ws.join("sub/new.txt").exists());
    assert_eq!(snapshot(&e.server_ws), before);
}

/// A TCP server on the host's 127.0.0.1 that counts the connections it accepts.
fn host_listener() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        for _ in listener.incoming().flatten() {
            seen.fetch_add(1, Ordering::SeqCst);
        }
    });
    (port, count)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pod_has_no_network_and_the_no_net_lane_not_even_the_pod_s_loopback() {
    let Some(e) = env(&[("www/index.html", b"served in the pod\n")]) else {
        return;
    };
    let d = e.dispatcher();
    let (port, accepted) = host_listener();

    // A background process in the net lane: a web server on the pod's own loopback.
    let r = call(
        &d,
        "s",
        "run_command",
        json!({"command": "httpd -f -p 127.0.0.1:8080 -h /workspace/www", "background": true}),
    )
    .await;
    assert!(r.success, "{}", r.output);
    let id = r
        .data
        .as_ref()
        .and_then(|d| d["process_id"].as_str())
        .map(String::from);
    let id = id.unwrap_or_else(|| panic!("no process_id: {:?}", r.data));
    let fetch = "for i in $(seq 50); do wget -q -O - http://127.0.0.1:8080/ && exit 0; sleep 0.1; done; exit 1";
    let r = call(&d, "s", "run_command", json!({"command": fetch})).await;
    assert!(
        r.success && r.output.contains("served in the pod"),
        "the net lane reaches the pod's loopback: {}",
        r.output
    );
    let r = call(
        &d,
        "s",
        "run_command_isolated",
        json!({"command": "wget -q -O - http://127.0.0.1:8080/"}),
    )
    .await;
    assert!(
        !r.success && !r.output.contains("served in the pod"),
        "the no-net lane has a loopback of its own: {}",
        r.output
    );

    // The host's loopback is out of reach from both lanes (`--network none`).
    let probe = format!("nc -w 2 127.0.0.1 {port} </dev/null && echo REACHED");
    for tool in ["run_command", "run_command_isolated"] {
        let r = call(&d, "s", tool, json!({"command": probe})).await;
        assert!(!r.output.contains("REACHED"), "{tool}: {}", r.output);
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        0,
        "a command reached the host"
    );

    // The background process is still there to read and to stop.
    let r = call(&d, "s", "process_output", json!({"process_id": id})).await;
    assert!(r.success, "{}", r.output);
    let r = call(&d, "s", "process_kill", json!({"process_id": id})).await;
    assert!(r.success, "{}", r.output);
    let gone = call(
        &d,
        "s",
        "run_command",
        json!({"command": "wget -q -O - http://127.0.0.1:8080/"}),
    )
    .await;
    assert!(
        !gone.success,
        "the server outlived process_kill: {}",
        gone.output
    );
}

#[test]
fn a_timeout_leaves_no_process_behind_in_the_pod_even_setsid_ones() {
    let Some(e) = env(&[]) else {
        return;
    };
    let marker = "1337.25";
    let v = e.call(
        "s",
        "run_command",
        json!({
            "command": format!("setsid sleep {marker} & (sleep {marker} &) ; echo started; sleep 100"),
            "timeout_ms": 1500
        }),
    );
    assert_eq!(v["data"]["timed_out"], true, "{v}");
    assert!(v["output"].as_str().unwrap().contains("started"), "{v}");
    let mut left = processes_with(&format!("sleep {marker}"));
    for _ in 0..50 {
        if left.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        left = processes_with(&format!("sleep {marker}"));
    }
    assert!(left.is_empty(), "processes left in the pod: {left:?}");
}

/// Kill the pod while `d` runs `sleep 60` in session `s`: the call fails with the link's
/// error well before the command could have ended; then restart the pod.
async fn kill_the_pod_during_a_long_command(e: &Env, d: &Arc<Dispatcher>, s: &str) {
    let long = {
        let d = d.clone();
        let s = s.to_string();
        tokio::spawn(async move {
            d.call(CallRequest::new(
                &s,
                "run_command",
                json!({"command": "echo started > started.txt; sleep 60"}),
            ))
            .await
        })
    };
    let marker = e.pod.ws.join("started.txt");
    let waited = Instant::now();
    while !marker.exists() {
        assert!(waited.elapsed() < HARNESS, "the command never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    podman(&["pod", "kill", &e.pod.name]);
    let r = tokio::time::timeout(HARNESS, long)
        .await
        .expect("the call in flight must fail long before its 60 s command ends")
        .unwrap();
    assert!(!r.success, "{}", r.output);
    assert!(
        r.output.contains("the net runner's link died")
            && r.output.contains("may or may not have run"),
        "{}",
        r.output
    );
    // Podman keeps a container with exec sessions "Stopping" for a while after the kill, and
    // `pod start` skips it until it has exited.
    podman(&["wait", &e.pod.container]);
    podman(&["pod", "start", &e.pod.name]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_pod_fails_the_call_in_flight_and_the_next_call_gets_a_fresh_runner() {
    let Some(e) = env(&[("a.txt", b"before the kill\n")]) else {
        return;
    };
    let before = snapshot(&e.server_ws);
    let d = e.dispatcher();
    let r = call(&d, "s", "run_command", json!({"command": "true"})).await;
    assert!(r.success, "{}", r.output);
    let runner = "toolyard runner --lane net --workspace /workspace";
    let old = processes_with(runner);
    assert!(!old.is_empty(), "no net runner seen from the host");

    kill_the_pod_during_a_long_command(&e, &d, "s").await;
    assert!(
        processes_with(runner).iter().all(|p| !old.contains(p)),
        "the old runner outlived its pod"
    );

    let r = call(
        &d,
        "s",
        "run_command",
        json!({"command": "echo fresh; cat a.txt"}),
    )
    .await;
    assert!(
        r.success && r.output.contains("fresh") && r.output.contains("before the kill"),
        "{}",
        r.output
    );
    let new = processes_with(runner);
    assert!(
        !new.is_empty() && new.iter().all(|p| !old.contains(p)),
        "not a fresh runner: {old:?} then {new:?}"
    );
    assert_eq!(snapshot(&e.server_ws), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undo_of_a_change_made_before_the_pod_was_killed_works_on_the_fresh_runner() {
    let Some(e) = env(&[("a.txt", b"original\n")]) else {
        return;
    };
    let before = snapshot(&e.server_ws);
    let d = e.dispatcher();
    let r = call(&d, "s", "read_file", json!({"path": "a.txt"})).await;
    assert!(r.success, "{}", r.output);
    let r = call(
        &d,
        "s",
        "edit_file",
        json!({"path": "a.txt", "old_string": "original", "new_string": "changed"}),
    )
    .await;
    assert!(r.success, "{}", r.output);
    assert_eq!(e.pod_file("a.txt"), b"changed\n");

    kill_the_pod_during_a_long_command(&e, &d, "s").await;

    let r = call(&d, "s", "undo", json!({})).await;
    assert!(r.success, "{}", r.output);
    assert_eq!(e.pod_file("a.txt"), b"original\n");
    assert_eq!(snapshot(&e.server_ws), before);
}
