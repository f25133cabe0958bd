//! The codex dialect's unified exec: `exec_command` returns a quick command's output and exit
//! code; a long one yields a session id that `write_stdin` polls to the end; a tty REPL
//! answers through `write_stdin`; output is capped by `max_output_tokens`.

use std::fs;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Value, json};
use toolyard_core::{Catalog, Tool, ToolContext, ToolResult};
use toolyard_dialects::{self as dialect, Dialect};
use toolyard_tools::ToolEnv;

struct Fixture {
    _tmp: tempfile::TempDir,
    ws: PathBuf,
    tools: Vec<Arc<dyn Tool>>,
}

impl Fixture {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        fs::create_dir_all(ws.join("sub")).unwrap();
        let ws = ws.canonicalize().unwrap();
        let state = tmp.path().join("state");
        let env =
            Arc::new(ToolEnv::open_with_state(&ws, Catalog::builtin(), Some(&state)).unwrap());
        let tools = dialect::tools(&env, Dialect::Codex)
            .unwrap()
            .into_iter()
            .map(|t| t.tool)
            .collect();
        Self {
            _tmp: tmp,
            ws,
            tools,
        }
    }

    async fn call(&self, name: &str, args: Value) -> ToolResult {
        let tool = self.tools.iter().find(|t| t.name() == name).unwrap();
        let ctx = ToolContext::new(&self.ws, "s1");
        match tool.invoke(args, &ctx).await {
            Ok(r) => r,
            Err(e) => ToolResult::from(e),
        }
    }
}

#[track_caller]
fn ok(r: &ToolResult) -> &str {
    assert!(r.success, "expected success, got {}", r.output);
    &r.output
}

fn session_of(r: &ToolResult) -> String {
    r.data.as_ref().unwrap()["session_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no session id in {}", r.output))
        .to_string()
}

#[tokio::test]
async fn dialect_lists_exec_command_and_write_stdin_under_process_engines() {
    let tmp = tempfile::tempdir().unwrap();
    let env = Arc::new(
        ToolEnv::open_with_state(tmp.path(), Catalog::builtin(), Some(&tmp.path().join("s")))
            .unwrap(),
    );
    let tools = dialect::tools(&env, Dialect::Codex).unwrap();
    let engine = |n: &str| {
        tools
            .iter()
            .find(|t| t.tool.name() == n)
            .map(|t| t.engine.name())
    };
    assert_eq!(engine("exec_command"), Some("run_command"));
    assert_eq!(engine("write_stdin"), Some("process_input"));
}

#[tokio::test]
async fn quick_command_returns_output_and_exit_code_in_workdir() {
    let f = Fixture::new();
    let r = f
        .call(
            "exec_command",
            json!({"cmd": "pwd; echo hello; exit 3", "workdir": "sub"}),
        )
        .await;
    let text = ok(&r);
    assert!(text.starts_with("Wall time: "), "{text}");
    assert!(text.contains("Process exited with code 3\n"), "{text}");
    assert!(text.contains("Output:\n"), "{text}");
    assert!(text.contains("/sub\nhello\n"), "{text}");
    assert!(!text.contains("session ID"), "{text}");
    let data = r.data.unwrap();
    assert_eq!(data["exit_code"], 3);
    assert!(data["session_id"].is_null());
}

#[tokio::test]
async fn long_command_yields_a_session_that_write_stdin_polls_to_the_end() {
    let f = Fixture::new();
    let r = f
        .call(
            "exec_command",
            json!({"cmd": "echo alpha; sleep 2; echo omega", "yield_time_ms": 250}),
        )
        .await;
    let text = ok(&r).to_string();
    let id = session_of(&r);
    assert!(
        text.contains(&format!("Process running with session ID {id}\n")),
        "{text}"
    );
    assert!(text.contains("alpha"), "{text}");
    assert!(!text.contains("omega"), "{text}");
    // An empty poll waits for the end (its yield is at least 5 s, and it returns at the exit).
    let r = f
        .call("write_stdin", json!({"session_id": id, "chars": ""}))
        .await;
    let text = ok(&r);
    assert!(text.contains("Process exited with code 0\n"), "{text}");
    assert!(text.contains("omega"), "{text}");
    assert!(!text.contains("alpha"), "only new output: {text}");
    // An exited session is gone.
    let r = f.call("write_stdin", json!({"session_id": id})).await;
    assert!(!r.success);
    assert!(
        r.output.contains(&format!("Unknown process id {id}")),
        "{}",
        r.output
    );
}

#[tokio::test]
async fn tty_python_repl_answers_through_write_stdin() {
    let f = Fixture::new();
    let r = f
        .call(
            "exec_command",
            json!({"cmd": "python3 -i -q", "tty": true, "yield_time_ms": 1000}),
        )
        .await;
    let id = session_of(&r);
    let r = f
        .call(
            "write_stdin",
            json!({"session_id": id, "chars": "print(6*7)\n", "yield_time_ms": 1500}),
        )
        .await;
    let text = ok(&r);
    assert!(text.contains("42"), "{text}");
    assert!(text.contains(&format!("session ID {id}")), "{text}");
    let r = f
        .call(
            "write_stdin",
            json!({"session_id": id, "chars": "exit()\n", "yield_time_ms": 3000}),
        )
        .await;
    let text = ok(&r);
    assert!(text.contains("Process exited with code 0"), "{text}");
}

#[tokio::test]
async fn max_output_tokens_caps_the_output_head_and_tail() {
    let f = Fixture::new();
    let r = f
        .call(
            "exec_command",
            json!({"cmd": "echo START; seq 1 20000; echo END", "max_output_tokens": 100}),
        )
        .await;
    let text = ok(&r);
    assert!(text.contains("START") && text.contains("END"), "{text}");
    let out = text.split_once("Output:\n").unwrap().1;
    assert!(out.len() < 1000, "{} bytes: {out}", out.len());
    // The token count is the whole output's, before the cap.
    let count: u64 = r.data.as_ref().unwrap()["original_token_count"]
        .as_u64()
        .unwrap();
    assert!(count > 20_000, "{count}");
}

#[tokio::test]
async fn a_shell_toolyard_cannot_run_is_named() {
    let f = Fixture::new();
    let r = f
        .call("exec_command", json!({"cmd": "echo hi", "shell": "zsh"}))
        .await;
    assert!(!r.success);
    assert!(r.output.contains("shell `zsh`"), "{}", r.output);
}

#[tokio::test]
async fn write_stdin_to_a_session_whose_exit_was_reported_says_so() {
    let f = Fixture::new();
    let r = f
        .call(
            "exec_command",
            json!({"cmd": "sleep 0.3; echo bye", "yield_time_ms": 250}),
        )
        .await;
    let id = session_of(&r);
    let mut seen = String::new();
    for _ in 0..40 {
        let r = f
            .call(
                "write_stdin",
                json!({"session_id": id, "chars": "", "yield_time_ms": 5000}),
            )
            .await;
        seen.push_str(ok(&r));
        if seen.contains("Process exited with code 0") {
            break;
        }
    }
    assert!(seen.contains("bye"), "{seen}");
    let r = f
        .call("write_stdin", json!({"session_id": id, "chars": "x"}))
        .await;
    assert!(!r.success);
    assert!(
        r.output.contains(&format!(
            "Unknown process id {id}: the session {id} exited with code 0; its output was already returned"
        )),
        "{}",
        r.output
    );
}
