//! Commands as a model meets them, through the real binary.
//!
//! Every test has its own workspace, TOOLYARD_STATE_DIR and HOME in a temp dir; a session host
//! a test starts leaves when that state directory is deleted, and the guard kills any left.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

struct Env {
    t: Option<tempfile::TempDir>,
    ws: PathBuf,
    state: PathBuf,
    home: PathBuf,
}

fn env() -> Env {
    let t = tempfile::tempdir().unwrap();
    let base = t.path().canonicalize().unwrap();
    let (ws, state, home) = (base.join("ws"), base.join("state"), base.join("home"));
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

/// The binary under test: `TOOLYARD_TEST_BIN` when set (another build, to compare), else the
/// one cargo built.
fn toolyard_bin() -> PathBuf {
    std::env::var_os("TOOLYARD_TEST_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_toolyard")))
}

impl Env {
    fn command(&self) -> Command {
        let mut c = Command::new(toolyard_bin());
        c.current_dir(&self.ws)
            .env("TOOLYARD_STATE_DIR", &self.state)
            .env("HOME", &self.home)
            // A person's terminal, as the report that found these saw it.
            .env("TERM", "xterm")
            .env("RUST_BACKTRACE", "1")
            .env_remove("EDITOR")
            .env_remove("VISUAL")
            .env_remove("GIT_EDITOR");
        c
    }

    /// `toolyard call TOOL ARGS --json EXTRA...`: the process's output and the ToolResult.
    fn call(&self, tool: &str, args: &Value, extra: &[&str]) -> (Output, Value) {
        let o = self
            .command()
            .args(["call", tool, &args.to_string(), "--json"])
            .args(extra)
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

    fn catalog(&self, text: &str) -> String {
        let p = self.t.as_ref().unwrap().path().join("catalog.toml");
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    }

    fn host_pids(&self) -> Vec<i32> {
        let mut pids = Vec::new();
        let Ok(workspaces) = std::fs::read_dir(self.state.join("workspaces")) else {
            return pids;
        };
        for ws in workspaces.flatten() {
            let Ok(hosts) = std::fs::read_dir(ws.path().join("hosts")) else {
                continue;
            };
            for h in hosts.flatten() {
                if let Ok(text) = std::fs::read_to_string(h.path())
                    && let Ok(v) = serde_json::from_str::<Value>(&text)
                    && let Some(pid) = v["pid"].as_i64()
                {
                    pids.push(pid as i32);
                }
            }
        }
        pids
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let pids = self.host_pids();
        // Deleting the state directory is what ends a host; the kill is only a backstop.
        drop(self.t.take());
        for pid in pids {
            let until = Instant::now() + Duration::from_secs(10);
            // SAFETY: signal 0 only checks that the process exists.
            while unsafe { libc::kill(pid, 0) } == 0 && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(50));
            }
            // SAFETY: kill with a pid this test's host record named.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

fn out(v: &Value) -> &str {
    v["output"].as_str().unwrap_or_default()
}

#[test]
fn the_shell_answers_unusual_unicode_and_broken_syntax_at_once_and_keeps_its_state() {
    let e = env();
    let shell = |command: &str| {
        let (_, v) = e.call(
            "shell",
            &json!({"command": command, "timeout_ms": 30000}),
            &["--session", "s1"],
        );
        assert_eq!(
            v["data"]["timed_out"], false,
            "{command:?} was not answered: {v}"
        );
        v
    };
    shell("export KEPT=yes");
    for command in [
        "\u{202e}evil.txt",
        "ＣＯＮ",
        "echo '\u{202e}evil.txt",
        "cat \"ＣＯＮ",
        "}",
        "fi",
        "echo $(",
        "`",
    ] {
        let v = shell(command);
        assert_eq!(v["success"], false, "{command:?}: {v}");
        assert!(
            v["data"]["exit_code"] == 2 || v["data"]["exit_code"] == 127,
            "{command:?}: {v}"
        );
    }
    let v = shell("echo \"$KEPT\"");
    assert_eq!(
        out(&v),
        "exit code: 0\nyes\n",
        "the shell lost its state: {v}"
    );
}

fn git(dir: &Path, args: &[&str]) {
    let o = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("HOME", dir)
        .output()
        .expect("git runs");
    assert!(o.status.success(), "git {args:?}: {o:?}");
}

#[test]
fn git_commit_without_a_message_fails_at_once_naming_the_flag_and_leaves_no_lock() {
    let e = env();
    git(&e.ws, &["init", "-q", "."]);
    std::fs::write(e.ws.join("a.txt"), "a\n").unwrap();
    git(&e.ws, &["add", "a.txt"]);
    let git_env = "git -c user.name=t -c user.email=t@example.com";
    for tool in ["run_command", "run_command_isolated"] {
        let (_, v) = e.call(
            tool,
            &json!({"command": format!("{git_env} commit"), "timeout_ms": 30000}),
            &[],
        );
        assert_eq!(v["success"], false, "{v}");
        assert_eq!(
            v["data"]["timed_out"], false,
            "it waited for an editor: {v}"
        );
        assert_eq!(v["data"]["exit_code"], 1, "{v}");
        assert!(out(&v).contains("git commit -m"), "{v}");
        assert!(out(&v).contains("--no-edit"), "{v}");
        assert!(
            !e.ws.join(".git/index.lock").exists(),
            "{tool} left the lock"
        );
    }
    // The flag it names works, and the next git command finds no lock.
    let (_, v) = e.call(
        "run_command",
        &json!({"command": format!("{git_env} commit -q -m first && git log --oneline | wc -l")}),
        &[],
    );
    assert_eq!(v["success"], true, "{v}");
    assert!(out(&v).ends_with("1\n"), "{v}");
}

#[test]
fn a_command_sees_no_terminal_pager_or_host_backtrace_setting() {
    let e = env();
    let (_, v) = e.call(
        "run_command",
        &json!({"command": "echo \"[$TERM][$PAGER][$GIT_TERMINAL_PROMPT][${RUST_BACKTRACE-unset}]\""}),
        &[],
    );
    assert!(out(&v).contains("[dumb][cat][0][unset]"), "{v}");
    // The catalog's own values win.
    let catalog = e.catalog("[exec]\nset = { PAGER = \"less\", RUST_BACKTRACE = \"full\" }\n");
    let (_, v) = e.call(
        "run_command",
        &json!({"command": "echo \"[$PAGER][$RUST_BACKTRACE]\""}),
        &["--catalog", &catalog],
    );
    assert!(out(&v).contains("[less][full]"), "{v}");
}
