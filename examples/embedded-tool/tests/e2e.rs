//! The embedder's tools through the example binary: over MCP (stdio, JSON-RPC as a client
//! sends it) and its command line, with validation, the command policy, the journal (`undo`
//! reverts the tool's write) and hooks (pre-tool blocks; a mutating call triggers post-tools).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

struct Env {
    _t: tempfile::TempDir,
    ws: PathBuf,
    state: PathBuf,
    root: PathBuf,
}

fn env() -> Env {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().to_path_buf();
    let ws = root.join("ws");
    let state = root.join("state");
    std::fs::create_dir_all(&ws).unwrap();
    Env {
        _t: t,
        ws,
        state,
        root,
    }
}

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_embedded-tool")
}

impl Env {
    fn cmd(&self, catalog: Option<&Path>) -> Command {
        let mut c = Command::new(bin());
        c.current_dir(&self.ws)
            .env("TOOLYARD_STATE_DIR", &self.state)
            .env("HOME", &self.root);
        if let Some(catalog) = catalog {
            c.arg("--catalog").arg(catalog);
        }
        c
    }

    fn call(&self, catalog: Option<&Path>, tool: &str, args: Value) -> Output {
        self.cmd(catalog)
            .args(["call", tool, &args.to_string()])
            .output()
            .unwrap()
    }

    fn catalog(&self, text: &str) -> PathBuf {
        let p = self.root.join("catalog.toml");
        std::fs::write(&p, text).unwrap();
        p
    }
}

fn out(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn cli_serves_the_tool_with_validation_policy_and_the_journal() {
    let e = env();
    let o = e.cmd(None).arg("tools").output().unwrap();
    let names = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(names.lines().any(|l| l == "append_line"), "{names}");
    assert!(names.lines().any(|l| l == "read_file"), "{names}");

    let o = e.call(
        None,
        "append_line",
        json!({"path": "notes.md", "line": "one"}),
    );
    assert!(o.status.success(), "{}", out(&o));
    let o = e.call(
        None,
        "append_line",
        json!({"path": "notes.md", "line": "two"}),
    );
    assert!(o.status.success(), "{}", out(&o));
    assert_eq!(
        std::fs::read_to_string(e.ws.join("notes.md")).unwrap(),
        "one\ntwo\n"
    );

    // Validation: refused before the tool runs.
    let o = e.call(None, "append_line", json!({"path": "notes.md"}));
    assert!(!o.status.success());
    assert!(out(&o).contains("line: missing"), "{}", out(&o));
    let o = e.call(None, "append_line", json!({"path": "notes.md", "line": ""}));
    assert!(!o.status.success(), "{}", out(&o));
    assert_eq!(
        std::fs::read_to_string(e.ws.join("notes.md")).unwrap(),
        "one\ntwo\n"
    );

    // The journal: the built-in undo reverts the embedder's write.
    let o = e.call(None, "undo", json!({}));
    assert!(o.status.success(), "{}", out(&o));
    assert!(out(&o).contains("append_line"), "{}", out(&o));
    assert_eq!(
        std::fs::read_to_string(e.ws.join("notes.md")).unwrap(),
        "one\n"
    );

    // The command policy judges the argument the tool's shape names.
    let o = e.call(None, "check_command", json!({"command": "rm -rf /"}));
    assert!(!o.status.success());
    assert!(out(&o).contains("command policy"), "{}", out(&o));
    let o = e.call(None, "check_command", json!({"command": "ls"}));
    assert!(o.status.success(), "{}", out(&o));
}

#[test]
fn hooks_run_around_the_embedded_tool() {
    let e = env();
    let marker = e.root.join("post_tools_ran");
    let catalog = e.catalog(&format!(
        "[[hooks.pre_tool]]\nmatcher = \"append_line\"\ncommand = \"grep -q secret && {{ echo no secrets >&2; exit 2; }}; exit 0\"\n\
         [hooks.post_tools]\ncommand = \"cat > '{}'\"\n",
        marker.display()
    ));
    let o = e.call(
        Some(&catalog),
        "append_line",
        json!({"path": "a.txt", "line": "secret"}),
    );
    assert!(!o.status.success(), "{}", out(&o));
    assert!(out(&o).contains("no secrets"), "{}", out(&o));
    assert!(!e.ws.join("a.txt").exists());
    assert!(!marker.exists(), "post_tools ran for a blocked call");

    let o = e.call(
        Some(&catalog),
        "append_line",
        json!({"path": "a.txt", "line": "fine"}),
    );
    assert!(o.status.success(), "{}", out(&o));
    let posted: Value = serde_json::from_str(&std::fs::read_to_string(&marker).unwrap()).unwrap();
    assert_eq!(posted["tool_name"], "append_line");
    assert_eq!(posted["tool_response"]["files_changed"][0], "a.txt");
}

#[test]
fn mcp_lists_and_calls_the_embedded_tool() {
    let e = env();
    let mut child = e
        .cmd(None)
        .arg("serve")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut send = |v: Value| writeln!(stdin, "{v}").unwrap();
    let mut answer = |id: i64| -> Value {
        loop {
            let line = lines.next().expect("an answer").unwrap();
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["id"] == id {
                return v;
            }
        }
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "e2e", "version": "0"}}}),
    );
    assert!(answer(1)["result"]["serverInfo"].is_object());
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    let list = answer(2);
    let tools = list["result"]["tools"].as_array().unwrap();
    let def = tools
        .iter()
        .find(|t| t["name"] == "append_line")
        .expect("append_line is listed");
    assert_eq!(def["annotations"]["readOnlyHint"], false);
    assert!(
        def["inputSchema"]["required"]
            .as_array()
            .unwrap()
            .contains(&json!("line"))
    );

    send(
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "append_line", "arguments": {"path": "m.txt", "line": "over mcp"}}}),
    );
    let r = answer(3);
    assert_eq!(r["result"]["isError"], false, "{r}");
    assert_eq!(
        std::fs::read_to_string(e.ws.join("m.txt")).unwrap(),
        "over mcp\n"
    );

    send(
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
        "name": "append_line", "arguments": {"path": "m.txt", "line": 7}}}),
    );
    let r = answer(4);
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert!(r.to_string().contains("line: 7 is not of type"), "{r}");

    drop(stdin);
    let _ = child.wait();
}
