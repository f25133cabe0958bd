//! The verify loop end to end: `toolyard serve` over MCP (stdio), real language servers where
//! they are on PATH (scripts/test.sh installs pyright and typescript-language-server), cargo
//! check for Rust, and a fake server that never answers. Each test has its own workspace,
//! TOOLYARD_STATE_DIR and HOME.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::{Value, json};

struct Mcp {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next: u64,
    _t: tempfile::TempDir,
    ws: PathBuf,
}

impl Mcp {
    /// `toolyard serve` on a fresh workspace holding `files`, with `catalog` (TOML) when given.
    fn start(files: &[(&str, &str)], catalog: Option<&str>, extra: &[&str]) -> Self {
        let t = tempfile::tempdir().unwrap();
        let ws = t.path().join("ws");
        let state = t.path().join("state");
        let home = t.path().join("home");
        for d in [&ws, &state, &home] {
            std::fs::create_dir_all(d).unwrap();
        }
        for (p, text) in files {
            let f = ws.join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, text).unwrap();
        }
        let mut cmd = Command::new(common::toolyard_bin());
        cmd.arg("serve").arg("--workspace").arg(&ws).args(extra);
        if let Some(c) = catalog {
            let path = t.path().join("catalog.toml");
            std::fs::write(&path, c).unwrap();
            cmd.arg("--catalog").arg(path);
        }
        let mut child = cmd
            .env("TOOLYARD_STATE_DIR", &state)
            .env("HOME", &home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("toolyard serve starts");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut m = Self {
            child,
            stdin,
            stdout,
            next: 1,
            _t: t,
            ws: ws.canonicalize().unwrap(),
        };
        m.rpc(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "lsp_e2e", "version": "0"}}),
        );
        m.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        m
    }

    fn send(&mut self, v: Value) {
        writeln!(self.stdin, "{v}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn rpc(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let mut line = String::new();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "the server closed stdout"
            );
            let v: Value = serde_json::from_str(&line).unwrap();
            if v.get("id") == Some(&json!(id)) {
                return v;
            }
        }
    }

    /// Call `tool`; its text, and whether it is an error.
    fn call(&mut self, tool: &str, args: Value) -> (String, bool) {
        let v = self.rpc("tools/call", json!({"name": tool, "arguments": args}));
        let r = &v["result"];
        let text = r["content"]
            .as_array()
            .map(|c| {
                c.iter()
                    .filter_map(|b| b["text"].as_str())
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_else(|| v.to_string());
        (text, r["isError"] == json!(true))
    }

    fn ok(&mut self, tool: &str, args: Value) -> String {
        let (text, err) = self.call(tool, args.clone());
        assert!(!err, "{tool} {args} failed: {text}");
        text
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.ws.join(rel)
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether `program` is on PATH; where CI installed it (TOOLYARD_LSP_REQUIRE=1), missing
/// is a failure, not a skip.
fn on_path(program: &str) -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()));
    assert!(
        found || std::env::var_os("TOOLYARD_LSP_REQUIRE").is_none(),
        "{program} is not on PATH, and TOOLYARD_LSP_REQUIRE is set"
    );
    found
}

/// Whether the no-net sandbox can be applied here (a user namespace for the network one).
fn sandbox_works() -> bool {
    let t = tempfile::tempdir().unwrap();
    Command::new(common::toolyard_bin())
        .args(["lane-exec", "--workspace"])
        .arg(t.path())
        .args(["--", "true"])
        .env("TOOLYARD_STATE_DIR", t.path().join("state"))
        .status()
        .is_ok_and(|s| s.success())
}

const WAIT: &str = "[lsp]\nwait_ms = 60000\n";

#[test]
fn python_type_errors_come_back_in_the_edit_that_made_them_and_the_fix_resolves_them() {
    if !on_path("pyright-langserver") {
        eprintln!("SKIPPED: pyright-langserver is not on PATH (scripts/test.sh installs it)");
        return;
    }
    let src = "def total(xs: list[int]) -> int:\n    return sum(xs)\n\nunknown_thing\n";
    let mut m = Mcp::start(&[("app.py", src)], Some(WAIT), &[]);
    m.ok("read_file", json!({"path": "app.py"}));
    // The read started the server; a model thinks before it edits, and by then the server has
    // looked at the file. This waits for that look.
    let r = m.ok("diagnostics", json!({"path": "app.py"}));
    assert!(r.contains("app.py:4:1"), "{r}");
    let r = m.ok(
        "edit_file",
        json!({"path": "app.py", "old_string": "return sum(xs)", "new_string": "return sum(xs) + \"1\""}),
    );
    assert!(r.contains("new problem(s)"), "{r}");
    assert!(r.contains("app.py:2:"), "the problem's line: {r}");
    assert!(r.contains("return sum(xs) + \"1\""), "the line's text: {r}");
    assert!(
        !r.contains("app.py:4:"),
        "the problem that was there before is not repeated: {r}"
    );
    let r = m.ok(
        "edit_file",
        json!({"path": "app.py", "old_string": "return sum(xs) + \"1\"", "new_string": "return sum(xs) + 1"}),
    );
    assert!(r.contains("resolved 1 problem(s): app.py:2"), "{r}");
    assert!(r.contains("no new problems"), "{r}");
    // A command changes it behind the tools' back; diagnostics sees it.
    m.ok(
        "run_command",
        json!({"command": "sed -i 's/sum(xs) + 1/sum(xs) + None/' app.py"}),
    );
    let r = m.ok("diagnostics", json!({"path": "app.py"}));
    assert!(r.contains("app.py:2:") && r.contains("None"), "{r}");
}

#[test]
fn a_server_that_never_answers_is_still_checking_and_a_killed_one_comes_back() {
    if !sandbox_works() {
        eprintln!("SKIPPED: the no-net sandbox cannot be applied here (no user namespaces)");
        return;
    }
    let catalog = "[lsp]\nwait_ms = 500\n[lsp.python]\ncommand = [\"sh\", \"-c\", \"exec cat > /dev/null\"]\n";
    let mut m = Mcp::start(&[("a.py", "x = 1\n")], Some(catalog), &[]);
    m.ok("read_file", json!({"path": "a.py"}));
    let r = m.ok("write_file", json!({"path": "a.py", "content": "x = 2\n"}));
    assert!(
        r.contains("still checking") && r.contains("diagnostics {\"path\": \"a.py\"}"),
        "{r}"
    );
    assert!(!r.contains("no problems"), "{r}");
    // Kill the fake server (its whole group): the next change says it was restarted.
    let pids = String::from_utf8(
        Command::new("pgrep")
            .args(["-f", "exec cat > /dev/null"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let ours: Vec<i32> = pids
        .lines()
        .filter_map(|p| p.trim().parse().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/environ"))
                .map(|e| e.contains(m.ws.parent().unwrap().to_str().unwrap()))
                .unwrap_or(true)
        })
        .collect();
    assert!(!ours.is_empty(), "the fake server runs");
    for p in ours {
        unsafe { libc::kill(p, libc::SIGKILL) };
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    let r = m.ok("write_file", json!({"path": "a.py", "content": "x = 3\n"}));
    assert!(r.contains("had stopped") && r.contains("restarted"), "{r}");
    assert!(r.contains("still checking"), "{r}");
}

#[test]
fn a_rust_edit_that_breaks_the_crate_reports_the_compiler_error() {
    if !on_path("cargo") {
        eprintln!("SKIPPED: cargo is not on PATH");
        return;
    }
    let toml = "[package]\nname = \"t\"\nversion = \"0.1.0\"\nedition = \"2021\"\n[workspace]\n";
    let catalog = "[lsp]\nwait_ms = 120000\n[lsp.rust]\ncommand = []\n";
    let mut m = Mcp::start(
        &[
            ("Cargo.toml", toml),
            ("src/lib.rs", "pub fn f() -> u32 {\n    1\n}\n"),
        ],
        Some(catalog),
        &[],
    );
    m.ok("read_file", json!({"path": "src/lib.rs"}));
    let r = m.ok(
        "edit_file",
        json!({"path": "src/lib.rs", "old_string": "    1\n", "new_string": "    \"one\"\n"}),
    );
    assert!(r.contains("src/lib.rs:2:5: error [E0308]"), "{r}");
    assert!(r.contains("\"one\""), "the line's text: {r}");
}

#[test]
fn python_navigation_and_a_rename_across_three_files_undone_at_once() {
    if !on_path("pyright-langserver") {
        eprintln!("SKIPPED: pyright-langserver is not on PATH (scripts/test.sh installs it)");
        return;
    }
    let files = [
        ("lib.py", "def helper(n: int) -> int:\n    return n * 2\n"),
        (
            "a.py",
            "from lib import helper\n\n\ndef run() -> int:\n    return helper(1)\n",
        ),
        ("b.py", "from lib import helper\n\nprint(helper(2))\n"),
    ];
    let mut m = Mcp::start(&files, Some(WAIT), &[]);
    let r = m.ok(
        "lsp",
        json!({"operation": "goToDefinition", "path": "a.py", "line": 5, "character": 13}),
    );
    assert!(r.contains("lib.py:1:5") && r.contains("def helper"), "{r}");
    let r = m.ok(
        "lsp",
        json!({"operation": "findReferences", "path": "lib.py", "line": 1, "character": 5}),
    );
    for want in ["lib.py:1:5", "a.py:1:17", "a.py:5:12", "b.py:3:7"] {
        assert!(r.contains(want), "{want} in {r}");
    }
    let r = m.ok(
        "lsp",
        json!({"operation": "hover", "path": "a.py", "line": 5, "character": 13}),
    );
    assert!(r.contains("helper") && r.contains("int"), "{r}");
    let r = m.ok(
        "lsp",
        json!({"operation": "documentSymbol", "path": "a.py"}),
    );
    assert!(r.contains("function run (line 4-5)"), "{r}");
    let r = m.ok(
        "lsp",
        json!({"operation": "workspaceSymbol", "path": "a.py", "query": "helper"}),
    );
    assert!(r.contains("lib.py:1:5"), "{r}");
    let r = m.ok(
        "lsp",
        json!({"operation": "incomingCalls", "path": "lib.py", "line": 1, "character": 5}),
    );
    assert!(r.contains("run") && r.contains("a.py:5:12"), "{r}");
    let r = m.ok(
        "lsp",
        json!({"operation": "outgoingCalls", "path": "a.py", "line": 4, "character": 5}),
    );
    assert!(r.contains("helper") && r.contains("lib.py:1:5"), "{r}");
    let r = m.ok("outline", json!({"path": "lib.py"}));
    assert!(r.contains("function helper (line 1-2)"), "{r}");

    let r = m.ok(
        "rename_symbol",
        json!({"path": "lib.py", "line": 1, "character": 5, "new_name": "doubled"}),
    );
    assert!(r.contains("in 3 file(s), one change"), "{r}");
    for (p, _) in files {
        let text = std::fs::read_to_string(m.path(p)).unwrap();
        assert!(
            text.contains("doubled") && !text.contains("helper"),
            "{p}: {text}"
        );
    }
    let r = m.ok("undo", json!({}));
    assert!(r.contains("3"), "one undo reverts every file: {r}");
    for (p, text) in files {
        assert_eq!(
            std::fs::read_to_string(m.path(p)).unwrap(),
            text,
            "{p} is back"
        );
    }
    let (r, err) = m.call(
        "rename_symbol",
        json!({"path": "lib.py", "line": 2, "character": 1, "new_name": "x"}),
    );
    assert!(err, "no symbol at a line's indentation: {r}");
}

#[test]
fn typescript_navigation_gives_the_right_lines() {
    if !on_path("typescript-language-server") {
        eprintln!(
            "SKIPPED: typescript-language-server is not on PATH (scripts/test.sh installs it)"
        );
        return;
    }
    let files = [
        (
            "tsconfig.json",
            "{\"compilerOptions\": {\"strict\": true}}\n",
        ),
        (
            "src/shape.ts",
            "export interface Shape {\n  area(): number;\n}\n\nexport class Square implements Shape {\n  constructor(private s: number) {}\n  area(): number {\n    return this.s * this.s;\n  }\n}\n",
        ),
        (
            "src/main.ts",
            "import { Square } from \"./shape\";\n\nconst sq = new Square(2);\nconsole.log(sq.area());\n\nexport function report(s: Square): number {\n  return s.area();\n}\n",
        ),
    ];
    let mut m = Mcp::start(&files, Some(WAIT), &[]);
    let r = m.ok(
        "lsp",
        json!({"operation": "goToDefinition", "path": "src/main.ts", "line": 4, "character": 16}),
    );
    assert!(r.contains("src/shape.ts:7:3"), "{r}");
    let r = m.ok("lsp", json!({"operation": "goToImplementation", "path": "src/shape.ts", "line": 1, "character": 18}));
    assert!(r.contains("src/shape.ts:5:14"), "{r}");
    let r = m.ok(
        "lsp",
        json!({"operation": "findReferences", "path": "src/shape.ts", "line": 5, "character": 14}),
    );
    assert!(
        r.contains("src/main.ts:1:10") && r.contains("src/main.ts:3:16"),
        "{r}"
    );
    let r = m.ok(
        "lsp",
        json!({"operation": "hover", "path": "src/main.ts", "line": 3, "character": 7}),
    );
    assert!(r.contains("sq") && r.contains("Square"), "{r}");
    let r = m.ok(
        "lsp",
        json!({"operation": "documentSymbol", "path": "src/shape.ts"}),
    );
    for want in [
        "interface Shape (line 1-3)",
        "class Square (line 5-10)",
        "method area (line 7-9)",
    ] {
        assert!(r.contains(want), "{want} in {r}");
    }
    let r = m.ok(
        "lsp",
        json!({"operation": "incomingCalls", "path": "src/shape.ts", "line": 7, "character": 3}),
    );
    assert!(
        r.contains("report") && r.contains("call at src/main.ts:7:12"),
        "{r}"
    );
    let r = m.ok(
        "lsp",
        json!({"operation": "outgoingCalls", "path": "src/main.ts", "line": 6, "character": 17}),
    );
    assert!(r.contains("area") && r.contains("src/shape.ts:7:3"), "{r}");
    m.ok("read_file", json!({"path": "src/main.ts"}));
    let r = m.ok(
        "edit_file",
        json!({"path": "src/main.ts", "old_string": "new Square(2)", "new_string": "new Square(\"2\")"}),
    );
    assert!(r.contains("src/main.ts:3:") && r.contains("error"), "{r}");
}

#[test]
fn a_language_server_cannot_reach_the_network_ssh_keys_or_outside_the_workspace() {
    if !sandbox_works() {
        eprintln!("SKIPPED: the no-net sandbox cannot be applied here (no user namespaces)");
        return;
    }
    // The "server" is a script of the project: it tries, writes what happened into the
    // workspace, then serves nothing.
    let t = tempfile::tempdir().unwrap();
    let outside = t.path().join("outside.txt");
    let script = format!(
        "#!/bin/sh\n\
         (exec 3<>/dev/tcp/1.1.1.1/80 && echo NET-OPEN || echo net-refused) > report.txt 2>&1\n\
         (cat \"$HOME/.ssh/id_ed25519\" && echo SSH-READ || echo ssh-refused) >> report.txt 2>&1\n\
         (echo x > {} && echo OUTSIDE-WRITTEN || echo outside-refused) >> report.txt 2>&1\n\
         echo done >> report.txt\n\
         exec cat > /dev/null\n",
        outside.display()
    );
    let catalog = "[lsp]\nwait_ms = 300\n[lsp.python]\ncommand = [\"bash\", \"evil-server.sh\"]\n";
    let mut m = Mcp::start(
        &[("evil-server.sh", &script), ("a.py", "x = 1\n")],
        Some(catalog),
        &[],
    );
    let home = m.ws.parent().unwrap().join("home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_ed25519"), "SECRET KEY\n").unwrap();
    m.ok("read_file", json!({"path": "a.py"}));
    m.ok("write_file", json!({"path": "a.py", "content": "x = 2\n"}));
    let report = m.path("report.txt");
    let mut text = String::new();
    for _ in 0..100 {
        text = std::fs::read_to_string(&report).unwrap_or_default();
        if text.contains("done") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(text.contains("net-refused"), "{text}");
    assert!(
        text.contains("ssh-refused") && !text.contains("SECRET"),
        "{text}"
    );
    assert!(text.contains("outside-refused"), "{text}");
    assert!(!outside.exists());
}

#[test]
fn codex_apply_patch_and_undo_report_their_diagnostics() {
    if !on_path("pyright-langserver") {
        eprintln!("SKIPPED: pyright-langserver is not on PATH (scripts/test.sh installs it)");
        return;
    }
    let src = "def half(n: int) -> float:\n    return n / 2\n";
    let mut m = Mcp::start(&[("calc.py", src)], Some(WAIT), &["--dialect", "codex"]);
    let r = m.ok("diagnostics", json!({"path": "calc.py"}));
    assert!(r.contains("calc.py: no problems"), "{r}");
    let patch = "*** Begin Patch\n*** Update File: calc.py\n@@\n-    return n / 2\n+    return n.upper()\n*** End Patch";
    let r = m.ok("apply_patch", json!({"input": patch}));
    assert!(
        r.contains("new problem(s)") && r.contains("calc.py:2:"),
        "{r}"
    );
    assert!(r.contains("return n.upper()"), "the line's text: {r}");
    let r = m.ok("undo", json!({}));
    assert!(r.contains("resolved") && r.contains("calc.py:2"), "{r}");
}

#[test]
fn outline_without_a_server_comes_from_the_grammars_and_ranks_a_directory() {
    // No server for Python (the catalog turns it off), none for Go or C anywhere in CI.
    let catalog = "[lsp.python]\ncommand = []\n[lsp.go]\ncommand = []\n[lsp.c]\ncommand = []\n";
    let files = [
        (
            "app/models.py",
            "class User:\n    def __init__(self, name: str) -> None:\n        self.name = name\n\n    def greet(self) -> str:\n        return f\"hi {self.name}\"\n\n\ndef make_user(name: str) -> User:\n    return User(name)\n",
        ),
        (
            "app/views.py",
            "from models import User, make_user\n\n\ndef show(u: User) -> str:\n    return u.greet()\n\n\nshow(make_user(\"a\"))\nshow(User(\"b\"))\n",
        ),
        (
            "tool/main.go",
            "package main\n\ntype Point struct {\n\tX int\n}\n\nfunc (p Point) Len() int {\n\treturn p.X\n}\n\nfunc main() {\n\tprintln(Point{X: 1}.Len())\n}\n",
        ),
    ];
    let mut m = Mcp::start(&files, Some(catalog), &[]);
    let r = m.ok("outline", json!({"path": "app/models.py"}));
    assert_eq!(
        r,
        "class User (line 1-6)  class User\n  method __init__ (line 2-3)  def __init__(self, name: str) -> None\n  method greet (line 5-6)  def greet(self) -> str\nfunction make_user (line 9-10)  def make_user(name: str) -> User"
    );
    let r = m.ok("outline", json!({"path": "tool/main.go"}));
    assert_eq!(
        r,
        "struct Point (line 3-5)  type Point struct\nmethod Len (line 7-9)  func (p Point) Len() int\nfunction main (line 11-13)  func main()"
    );
    // The directory: User occurs 5 times besides its definition (views.py: import, annotation,
    // call; models.py: the return type and the call), make_user twice, show twice.
    let r = m.ok("outline", json!({"path": "app"}));
    let lines: Vec<&str> = r.lines().collect();
    assert!(
        lines[0]
            .starts_with("app: 3 top-level symbols in 2 file(s) (python), most referenced first"),
        "{r}"
    );
    assert_eq!(
        lines[1], "class User  app/models.py:1-6  (5 refs)  class User",
        "{r}"
    );
    assert!(lines[2..].iter().all(|l| !l.contains("User ")), "{r}");
    std::fs::write(m.path("README.md"), "# app\n").unwrap();
    let (r, err) = m.call("outline", json!({"path": "README.md"}));
    assert!(err && r.contains("no grammar for it"), "{r}");
    let (r, err) = m.call("outline", json!({"path": "nope.py"}));
    assert!(err && r.contains("does not exist"), "{r}");
}

#[test]
fn a_command_that_breaks_a_file_no_server_had_open_reports_it_and_diagnostics_agrees() {
    if !on_path("pyright-langserver") {
        eprintln!("SKIPPED: pyright-langserver is not on PATH (scripts/test.sh installs it)");
        return;
    }
    let files = [
        ("ok.py", "x: int = 1\n"),
        ("calc.py", "def half(n: int) -> float:\n    return n / 2\n"),
    ];
    let mut m = Mcp::start(&files, Some(WAIT), &[]);
    // The server runs (another file was read and checked); calc.py was never opened.
    m.ok("read_file", json!({"path": "ok.py"}));
    let r = m.ok("diagnostics", json!({"path": "ok.py"}));
    assert!(r.contains("ok.py: no problems"), "{r}");
    let r = m.ok(
        "run_command",
        json!({"command": "sed -i 's|n / 2|n.upper()|' calc.py"}),
    );
    assert!(
        r.contains("calc.py:2:") && r.contains("error") && r.contains("return n.upper()"),
        "the command's own result has the problem, its line and text: {r}"
    );
    assert!(
        !r.contains("ok.py"),
        "an unchanged file is not reported: {r}"
    );
    let r = m.ok("diagnostics", json!({"path": "calc.py"}));
    assert!(r.contains("calc.py:2:") && r.contains("upper"), "{r}");
    let r = m.ok("diagnostics", json!({}));
    assert!(r.contains("calc.py:2:"), "the workspace's problems: {r}");
    // A command that changes nothing waits for no server and says nothing of diagnostics.
    let r = m.ok("run_command", json!({"command": "true"}));
    assert!(!r.contains("diagnostics:"), "{r}");
    // The fix through a command: resolved.
    let r = m.ok(
        "run_command",
        json!({"command": "sed -i 's|n.upper()|n / 2|' calc.py"}),
    );
    assert!(r.contains("resolved 1 problem(s): calc.py:2"), "{r}");
}

#[test]
fn a_c_edit_that_breaks_the_file_returns_clangds_error_never_a_clean_result_before() {
    if !on_path("clangd") {
        eprintln!("SKIPPED: clangd is not on PATH (scripts/test.sh installs it from Debian)");
        return;
    }
    // A short bound: clangd cold may not answer within it. The edit's result then says it is
    // still checking (never "no problems"), and diagnostics is asked until clangd answers.
    let src = "int twice(int x) {\n    return x * 2;\n}\n";
    let mut m = Mcp::start(&[("m.c", src)], Some("[lsp]\nwait_ms = 2000\n"), &[]);
    m.ok("read_file", json!({"path": "m.c"}));
    let mut r = m.ok(
        "edit_file",
        json!({"path": "m.c", "old_string": "return x * 2;", "new_string": "return y * 2;"}),
    );
    assert!(!r.contains("no problems"), "{r}");
    let mut asked = 0;
    while r.contains("still checking") && asked < 300 {
        r = m.ok("diagnostics", json!({"path": "m.c"}));
        assert!(!r.contains("no problems"), "{r}");
        asked += 1;
    }
    assert!(
        r.contains("m.c:2:12")
            && r.contains("undeclared identifier")
            && r.contains("return y * 2;"),
        "clangd's error with its line and text (after {asked} diagnostics calls): {r}"
    );
    let r = m.ok(
        "edit_file",
        json!({"path": "m.c", "old_string": "return y * 2;", "new_string": "return x * 2;"}),
    );
    assert!(
        r.contains("resolved 1 problem(s): m.c:2") || r.contains("still checking"),
        "{r}"
    );
}

/// The guards of issue 23 in two dialects each, through the binary: the omission guard and
/// the repeated-failure note in loopr (edit_file) and claude-code (Edit) or codex
/// (apply_patch), and "already applied", which only codex's apply_patch has.
#[test]
fn the_guards_refuse_placeholders_note_repeats_and_say_already_applied() {
    let src = "def f():\n    x = 1\n    y = 2\n    return x + y\n";
    let placeholder = |m: &mut Mcp, tool: &str, args: Value| {
        let (r, err) = m.call(tool, args);
        assert!(err, "{tool}: {r}");
        assert!(
            r.contains("line 2") && r.contains("omission placeholder"),
            "{tool} names the line: {r}"
        );
        assert_eq!(std::fs::read_to_string(m.path("a.py")).unwrap(), src);
    };
    let mut m = Mcp::start(&[("a.py", src)], None, &[]);
    m.ok("read_file", json!({"path": "a.py"}));
    placeholder(
        &mut m,
        "edit_file",
        json!({"path": "a.py", "old_string": "    x = 1\n    y = 2\n", "new_string": "    # existing code here\n"}),
    );
    let bad = json!({"path": "a.py", "old_string": "z = 3", "new_string": "z = 4"});
    for n in 1..=3 {
        let (r, err) = m.call("edit_file", bad.clone());
        assert!(err, "{r}");
        assert_eq!(
            r.contains("has now failed 3 times"),
            n == 3,
            "call {n}: {r}"
        );
    }

    let mut m = Mcp::start(&[("a.py", src)], None, &["--dialect", "claude-code"]);
    let path = m.path("a.py").to_string_lossy().into_owned();
    m.ok("Read", json!({"file_path": path}));
    placeholder(
        &mut m,
        "Edit",
        json!({"file_path": path, "old_string": "    x = 1\n    y = 2\n", "new_string": "    # ... rest of code unchanged\n"}),
    );

    let mut m = Mcp::start(&[("a.py", src)], None, &["--dialect", "codex"]);
    let patch = "*** Begin Patch\n*** Update File: a.py\n@@\n-    y = 2\n+    y = 3\n*** End Patch";
    m.ok("apply_patch", json!({"input": patch}));
    let (r, err) = m.call("apply_patch", json!({"input": patch}));
    assert!(err && r.contains("already applied to a.py"), "{r}");
    let stale = "*** Begin Patch\n*** Update File: a.py\n@@\n-    w = 9\n+    w = 8\n*** End Patch";
    for n in 1..=3 {
        let (r, err) = m.call("apply_patch", json!({"input": stale}));
        assert!(err, "{r}");
        assert_eq!(
            r.contains("has now failed 3 times"),
            n == 3,
            "call {n}: {r}"
        );
    }
}

#[test]
fn a_build_script_run_by_the_rust_check_cannot_reach_the_network_ssh_keys_or_outside() {
    if !on_path("cargo") || !sandbox_works() {
        eprintln!("SKIPPED: cargo is not on PATH, or the no-net sandbox cannot be applied here");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let outside = t.path().join("outside.txt");
    let toml = "[package]\nname = \"t\"\nversion = \"0.1.0\"\nedition = \"2021\"\nbuild = \"build.rs\"\n[workspace]\n";
    // The build script tries, and writes what happened into the workspace.
    let build = format!(
        r#"fn main() {{
    let mut out = String::new();
    let addr = "1.1.1.1:80".parse().unwrap();
    out += match std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(3)) {{
        Ok(_) => "NET-OPEN\n",
        Err(_) => "net-refused\n",
    }};
    let home = std::env::var("TEST_HOME").unwrap_or_default();
    out += match std::fs::read_to_string(format!("{{home}}/.ssh/id_ed25519")) {{
        Ok(_) => "SSH-READ\n",
        Err(_) => "ssh-refused\n",
    }};
    out += match std::fs::write({outside:?}, "x") {{
        Ok(_) => "OUTSIDE-WRITTEN\n",
        Err(_) => "outside-refused\n",
    }};
    std::fs::write(concat!(env!("CARGO_MANIFEST_DIR"), "/report.txt"), out).unwrap();
    println!("cargo:rerun-if-changed=build.rs");
}}
"#
    );
    let catalog = "[lsp]\nwait_ms = 120000\n[lsp.rust]\ncommand = []\n";
    let mut m = Mcp::start(
        &[
            ("Cargo.toml", toml),
            ("build.rs", &build),
            ("src/lib.rs", "pub fn f() -> u32 {\n    1\n}\n"),
        ],
        Some(catalog),
        &[],
    );
    let home = m.ws.parent().unwrap().join("home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_ed25519"), "SECRET KEY\n").unwrap();
    // The script reads the key by its real path, wherever the sandbox puts HOME.
    let script = std::fs::read_to_string(m.path("build.rs"))
        .unwrap()
        .replace(
            "std::env::var(\"TEST_HOME\").unwrap_or_default()",
            &format!("{:?}.to_string()", home.to_str().unwrap()),
        );
    std::fs::write(m.path("build.rs"), script).unwrap();
    m.ok("read_file", json!({"path": "src/lib.rs"}));
    let r = m.ok(
        "edit_file",
        json!({"path": "src/lib.rs", "old_string": "    1\n", "new_string": "    2\n"}),
    );
    assert!(r.contains("src/lib.rs"), "the check ran: {r}");
    let text = std::fs::read_to_string(m.path("report.txt")).unwrap_or_default();
    assert!(text.contains("net-refused"), "{text} / {r}");
    assert!(text.contains("ssh-refused"), "{text}");
    assert!(text.contains("outside-refused"), "{text}");
    assert!(!outside.exists());
}
