//! Commands as a model meets them, through the real binary: nothing waits for a person, a
//! timeout lets the command clean up, output reads as a terminal shows it, project tools say
//! what they ran, and a command still running when a client would give up is answered.
//!
//! Every test has its own workspace, TOOLYARD_STATE_DIR and HOME in a temp dir; a session host
//! a test starts leaves when that state directory is deleted, and the guard kills any left.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod common;
mod mcp_client;
use common::toolyard_bin;
use mcp_client::Mcp;

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

#[test]
fn a_timeout_sends_sigterm_so_a_trap_cleans_up_and_says_so() {
    let e = env();
    let (_, v) = e.call(
        "run_command",
        &json!({
            "command": "trap 'echo cleaned > cleaned.txt; exit 0' TERM; echo started; sleep 100",
            "timeout_ms": 1000
        }),
        &[],
    );
    assert_eq!(v["success"], false, "{v}");
    assert_eq!(v["error_kind"], "timeout", "{v}");
    assert!(
        out(&v).starts_with(
            "timed out after 1000 ms: sent SIGTERM, the command exited within the 2 s grace period\nstarted\n"
        ),
        "{v}"
    );
    assert_eq!(v["data"]["timeout_signal"], "SIGTERM", "{v}");
    assert_eq!(
        std::fs::read_to_string(e.ws.join("cleaned.txt")).unwrap(),
        "cleaned\n"
    );
    // A command that ignores SIGTERM gets SIGKILL, and the result says so.
    let (_, v) = e.call(
        "run_command",
        &json!({"command": "trap '' TERM; sleep 100", "timeout_ms": 500}),
        &[],
    );
    assert!(out(&v).contains("then SIGKILL 2 s later"), "{v}");
    assert_eq!(v["data"]["timeout_signal"], "SIGKILL", "{v}");
}

#[test]
fn output_is_one_stream_in_order_and_long_output_uses_the_whole_budget() {
    let e = env();
    let (_, v) = e.call(
        "run_command",
        &json!({"command": "for i in 1 2 3; do echo out$i; echo err$i >&2; done"}),
        &[],
    );
    assert_eq!(
        out(&v),
        "exit code: 0\nout1\nerr1\nout2\nerr2\nout3\nerr3\n",
        "{v}"
    );
    let (_, v) = e.call("run_command", &json!({"command": "seq 1 100000"}), &[]);
    let text = out(&v);
    let numbers: Vec<u32> = text.lines().filter_map(|l| l.parse().ok()).collect();
    // README: 30,000 bytes and 1,000 lines; an empty stderr keeps nothing back.
    assert_eq!(numbers.len(), 1_000, "{text}");
    assert_eq!(numbers[..3], [1, 2, 3]);
    assert_eq!(numbers[997..], [99_998, 99_999, 100_000]);
    let full = v["data"]["full_output"].as_str().expect("saved output");
    assert!(
        text.contains(&format!(
            "[... 584002 bytes (99000 lines) cut from the middle of 588895 bytes; full output in {full} ...]"
        )),
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(full).unwrap().lines().count(),
        100_000
    );
}

#[test]
fn project_tools_say_what_they_ran_and_why_and_a_pipe_hiding_a_failure_is_flagged() {
    let e = env();
    std::fs::write(e.ws.join("Makefile"), "test:\n\t@echo tests ran\n").unwrap();
    let (_, v) = e.call("test", &json!({}), &[]);
    assert!(
        out(&v).starts_with("ran: make test (detected from Makefile), lane heavy\nexit code: 0\n"),
        "{v}"
    );
    assert_eq!(
        v["data"]["ran"],
        json!({"command": "make test", "source": "detected", "from": "Makefile", "lane": "heavy"})
    );
    let catalog = e.catalog("[project]\nvalidate = \"echo valid\"\n");
    let (_, v) = e.call("validate", &json!({}), &["--catalog", &catalog]);
    assert!(
        out(&v).starts_with("ran: echo valid ([project] validate in the catalog), lane "),
        "{v}"
    );
    // `| tail` succeeds whatever the build did: the failure in the output is named.
    let failing =
        "printf 'error[E0425]: cannot find value\\nerror: could not compile `x`\\n' >&2; exit 101";
    let (_, v) = e.call(
        "build",
        &json!({"command": format!("{{ {failing}; }} 2>&1 | tail -5")}),
        &[],
    );
    assert_eq!(v["data"]["exit_code"], 0, "{v}");
    assert!(
        out(&v).starts_with("ran: the command given in the call, lane heavy\n"),
        "{v}"
    );
    assert!(
        out(&v).contains("note: exit code 0 is only the status of the pipeline's last command"),
        "{v}"
    );
    assert_eq!(v["data"]["pipeline_hides_failure"], "error[E", "{v}");
    // Without a pipe, or with `||`, nothing is flagged.
    let (_, v) = e.call(
        "build",
        &json!({"command": "echo 'error: could not compile `x`' || true"}),
        &[],
    );
    assert!(!out(&v).contains("note:"), "{v}");
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

/// `toolyard serve` over stdio with `catalog`, as an MCP client drives it.
fn serve(e: &Env, catalog: &str) -> Mcp {
    serve_with(e, catalog, &[])
}

/// [`serve`] with `extra` arguments.
fn serve_with(e: &Env, catalog: &str, extra: &[&str]) -> Mcp {
    let mut serve = e.command();
    serve.args(["serve", "--catalog", catalog]).args(extra);
    Mcp::start(serve)
}

impl Mcp {
    /// A tool call: its text and its structured result.
    fn call(&mut self, tool: &str, args: Value) -> (String, Value) {
        let (text, r) = self.tool_call(tool, args);
        (text, r["result"]["structuredContent"].clone())
    }
}

#[test]
fn a_command_running_when_clients_give_up_is_answered_with_its_process_and_goes_on() {
    let e = env();
    let catalog = e.catalog("[exec]\nanswer_after_ms = 1000\n");
    let mut mcp = serve(&e, &catalog);
    let (text, r) = mcp.call(
        "run_command",
        json!({"command": "echo early; sleep 3; echo late > late.txt; echo late; exit 3", "timeout_ms": 60000}),
    );
    let id = r["data"]["process_id"]
        .as_str()
        .unwrap_or_else(|| panic!("not answered while running: {text}"))
        .to_string();
    assert_eq!(r["data"]["running"], true, "{r}");
    assert!(text.starts_with("still running after 1 s"), "{text}");
    assert!(text.contains("--- output so far ---\nearly\n"), "{text}");
    assert!(
        text.contains(&format!("process_output {{\"process_id\": \"{id}\"")),
        "{text}"
    );
    assert!(!e.ws.join("late.txt").exists(), "it was waited for");
    // It goes on, and ends as it would have.
    let mut seen = String::new();
    let until = Instant::now() + PATIENCE;
    let ended = loop {
        let (text, r) = mcp.call("process_output", json!({"process_id": id, "wait_ms": 5000}));
        seen.push_str(&text);
        if r["data"]["running"] == false {
            break r;
        }
        assert!(Instant::now() < until, "it never ended: {seen}");
    };
    assert_eq!(ended["data"]["exit_code"], 3, "{ended}");
    assert!(seen.contains("late"), "{seen}");
    assert!(e.ws.join("late.txt").exists());

    // Its time limit still applies: SIGTERM at the limit, as for any command.
    let (text, r) = mcp.call(
        "run_command",
        json!({"command": "trap 'echo stopped; exit 0' TERM; echo up; sleep 100", "timeout_ms": 2500}),
    );
    let id = r["data"]["process_id"]
        .as_str()
        .unwrap_or_else(|| panic!("not answered while running: {text}"))
        .to_string();
    let until = Instant::now() + PATIENCE;
    let mut seen = String::new();
    loop {
        let (text, r) = mcp.call("process_output", json!({"process_id": id, "wait_ms": 5000}));
        seen.push_str(&text);
        if r["data"]["running"] == false {
            assert_eq!(r["data"]["timed_out"], true, "{seen}");
            break;
        }
        assert!(Instant::now() < until, "it never ended: {seen}");
    }
    assert!(seen.contains("timed out: sent SIGTERM"), "{seen}");
    assert!(seen.contains("stopped"), "{seen}");

    // A quick command is answered as before.
    let (text, _) = mcp.call("run_command", json!({"command": "echo quick"}));
    assert_eq!(text, "exit code: 0\nquick\n");
}

#[test]
fn a_one_shot_cli_call_waits_for_its_command() {
    let e = env();
    let catalog = e.catalog("[exec]\nanswer_after_ms = 300\n");
    let (_, v) = e.call(
        "run_command",
        &json!({"command": "sleep 1; echo done"}),
        &["--catalog", &catalog],
    );
    assert_eq!(out(&v), "exit code: 0\ndone\n", "{v}");
}

#[test]
fn claude_code_bash_still_running_when_clients_give_up_becomes_a_background_shell() {
    let e = env();
    let catalog = e.catalog("[exec]\nanswer_after_ms = 1000\n");
    let mut mcp = serve_with(&e, &catalog, &["--dialect", "claude-code"]);
    let (text, r) = mcp.call(
        "Bash",
        json!({"command": "echo early; sleep 3; echo late; exit 3"}),
    );
    let id = r["data"]["process_id"]
        .as_str()
        .unwrap_or_else(|| panic!("not answered while running: {text}"))
        .to_string();
    assert!(
        text.starts_with(&format!("Command running in background with ID: {id}.")),
        "{text}"
    );
    assert!(
        text.contains("early") && text.contains("BashOutput"),
        "{text}"
    );
    let until = Instant::now() + PATIENCE;
    let mut seen = String::new();
    while !seen.contains("late") {
        let (text, _) = mcp.call("BashOutput", json!({"bash_id": id}));
        seen.push_str(&text);
        assert!(Instant::now() < until, "its output never came: {seen}");
        std::thread::sleep(Duration::from_millis(300));
    }
}
