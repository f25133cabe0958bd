//! The claude-code dialect: Claude Code's tool names and parameters over the engine, its
//! `cat -n` Read, its Edit error texts, atomic MultiEdit, read-before-write, confinement,
//! Grep's options, and background Bash with BashOutput's filter and KillShell.

use std::fs;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Value, json};
use toolyard_core::{Catalog, Tool, ToolContext, ToolResult};
use toolyard_dialects::{self as dialect, Dialect};
use toolyard_tools::ToolEnv;

mod common;

struct Fixture {
    _tmp: tempfile::TempDir,
    ws: PathBuf,
    tools: Vec<Arc<dyn Tool>>,
}

impl Fixture {
    fn new(files: &[(&str, &str)]) -> Self {
        let common::DialectWorkspace { tmp, ws, tools, .. } =
            common::DialectWorkspace::new(Dialect::ClaudeCode, files);
        Self {
            _tmp: tmp,
            ws,
            tools,
        }
    }

    async fn call(&self, name: &str, args: Value) -> ToolResult {
        self.call_in("s1", name, args).await
    }

    async fn call_in(&self, session: &str, name: &str, args: Value) -> ToolResult {
        let tool = self.tools.iter().find(|t| t.name() == name).unwrap();
        let mut ctx = ToolContext::new(&self.ws, session);
        ctx.call_id = format!("call-{}", next_id());
        match tool.invoke(args, &ctx).await {
            Ok(r) => r,
            Err(e) => ToolResult::from(e),
        }
    }

    fn abs(&self, p: &str) -> String {
        self.ws.join(p).display().to_string()
    }

    fn read(&self, p: &str) -> Option<String> {
        fs::read_to_string(self.ws.join(p)).ok()
    }
}

fn next_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(1);
    N.fetch_add(1, Ordering::Relaxed)
}

#[track_caller]
fn failed(r: &ToolResult) -> &str {
    assert!(!r.success, "expected a failure, got {}", r.output);
    // Every failure's text carries the result's `Error: ` prefix.
    r.output.strip_prefix("Error: ").unwrap_or(&r.output)
}

#[track_caller]
fn ok(r: &ToolResult) -> &str {
    assert!(r.success, "expected success, got {}", r.output);
    &r.output
}

#[tokio::test]
async fn the_dialect_has_claude_codes_tools_under_their_engines() {
    let tmp = tempfile::tempdir().unwrap();
    let env = Arc::new(
        ToolEnv::open_with_state(tmp.path(), Catalog::builtin(), Some(&tmp.path().join("st")))
            .unwrap(),
    );
    let mut got: Vec<(String, &str)> = dialect::tools(&env, Dialect::ClaudeCode)
        .unwrap()
        .into_iter()
        .map(|t| (t.tool.name().to_string(), t.engine.name()))
        .collect();
    got.sort();
    let want = [
        ("Bash", "run_command"),
        ("BashOutput", "process_output"),
        ("Edit", "edit_file"),
        ("Glob", "glob"),
        ("Grep", "grep"),
        ("KillShell", "process_kill"),
        ("LSP", "lsp"),
        ("MultiEdit", "edit_file"),
        ("NotebookEdit", "edit_file"),
        ("Read", "read_file"),
        ("Write", "write_file"),
    ];
    let want: Vec<(String, &str)> = want.iter().map(|(n, e)| (n.to_string(), *e)).collect();
    assert_eq!(got, want);
    assert_eq!("claude-code".parse::<Dialect>(), Ok(Dialect::ClaudeCode));
}

#[tokio::test]
async fn read_is_cat_n_with_offset_and_limit() {
    let f = Fixture::new(&[("a.txt", "one\n\ttwo\nthree\nfour\n"), ("e.txt", "")]);
    let r = f.call("Read", json!({"file_path": f.abs("a.txt")})).await;
    assert_eq!(
        ok(&r),
        "     1\tone\n     2\t\ttwo\n     3\tthree\n     4\tfour"
    );
    let r = f
        .call(
            "Read",
            json!({"file_path": f.abs("a.txt"), "offset": 2, "limit": 2}),
        )
        .await;
    let out = ok(&r);
    assert!(out.starts_with("     2\t\ttwo\n     3\tthree\n"), "{out}");
    assert!(out.contains("offset 4"), "{out}");
    let r = f.call("Read", json!({"file_path": f.abs("e.txt")})).await;
    assert!(ok(&r).contains("contents are empty"));
    let r = f
        .call("Read", json!({"file_path": f.ws.display().to_string()}))
        .await;
    assert!(failed(&r).contains("EISDIR"));
    let r = f.call("Read", json!({"file_path": "/etc/passwd"})).await;
    failed(&r);
}

#[tokio::test]
async fn write_and_edit_need_a_read_first_in_claude_codes_words() {
    let f = Fixture::new(&[("a.txt", "alpha\nbeta\n")]);
    let path = f.abs("a.txt");
    let r = f
        .call("Write", json!({"file_path": path, "content": "x\n"}))
        .await;
    assert_eq!(
        failed(&r),
        "File has not been read yet. Read it first before writing to it."
    );
    let r = f
        .call(
            "Edit",
            json!({"file_path": path, "old_string": "alpha", "new_string": "gamma"}),
        )
        .await;
    assert_eq!(
        failed(&r),
        "File has not been read yet. Read it first before writing to it."
    );
    ok(&f.call("Read", json!({"file_path": path})).await);
    fs::write(f.ws.join("a.txt"), "alpha\nbeta\nlinted\n").unwrap();
    let r = f
        .call(
            "Edit",
            json!({"file_path": path, "old_string": "alpha", "new_string": "gamma"}),
        )
        .await;
    assert!(failed(&r).starts_with("File has been modified since read"));
    // A new file needs no read.
    let r = f
        .call(
            "Write",
            json!({"file_path": f.abs("new/b.txt"), "content": "b\n"}),
        )
        .await;
    ok(&r);
    assert_eq!(f.read("new/b.txt").as_deref(), Some("b\n"));
}

#[tokio::test]
async fn edit_texts_match_claude_code() {
    let f = Fixture::new(&[("a.txt", "x = 1\ny = 2\nx = 1\n")]);
    let path = f.abs("a.txt");
    ok(&f.call("Read", json!({"file_path": path})).await);
    let edit = |old: &str, new: &str, all: bool| json!({"file_path": path, "old_string": old, "new_string": new, "replace_all": all});
    let r = f.call("Edit", edit("x = 1", "x = 3", false)).await;
    assert!(
        failed(&r)
            .starts_with("Found 2 matches of the string to replace, but replace_all is false.")
    );
    let r = f.call("Edit", edit("zzz", "q", false)).await;
    assert!(failed(&r).starts_with("String to replace not found in file.\nString: zzz"));
    let r = f.call("Edit", edit("y = 2", "y = 2", false)).await;
    assert_eq!(
        failed(&r),
        "No changes to make: old_string and new_string are exactly the same."
    );
    let r = f.call("Edit", edit("y = 2", "y = 5", false)).await;
    assert!(ok(&r).contains("     2\ty = 5"));
    let r = f.call("Edit", edit("x = 1", "x = 3", true)).await;
    ok(&r);
    assert_eq!(f.read("a.txt").as_deref(), Some("x = 3\ny = 5\nx = 3\n"));
}

#[tokio::test]
async fn multi_edit_is_all_or_nothing_and_can_create() {
    let f = Fixture::new(&[("m.rs", "fn a() {}\nfn b() {}\n")]);
    let path = f.abs("m.rs");
    ok(&f.call("Read", json!({"file_path": path})).await);
    let r = f
        .call(
            "MultiEdit",
            json!({"file_path": path, "edits": [
                {"old_string": "fn a()", "new_string": "fn aa()"},
                {"old_string": "fn missing()", "new_string": "x"}
            ]}),
        )
        .await;
    assert!(failed(&r).contains("String to replace not found in file. (edit 2)"));
    assert_eq!(f.read("m.rs").as_deref(), Some("fn a() {}\nfn b() {}\n"));
    // Later edits see earlier ones.
    let r = f
        .call(
            "MultiEdit",
            json!({"file_path": path, "edits": [
                {"old_string": "fn a()", "new_string": "fn aa()"},
                {"old_string": "fn aa() {}", "new_string": "fn aa() { b() }"}
            ]}),
        )
        .await;
    assert!(ok(&r).starts_with("Applied 2 edits to"));
    assert_eq!(
        f.read("m.rs").as_deref(),
        Some("fn aa() { b() }\nfn b() {}\n")
    );
    let r = f
        .call(
            "MultiEdit",
            json!({"file_path": f.abs("n.txt"), "edits": [
                {"old_string": "", "new_string": "hello\n"},
                {"old_string": "hello", "new_string": "bye"}
            ]}),
        )
        .await;
    ok(&r);
    assert_eq!(f.read("n.txt").as_deref(), Some("bye\n"));
}

#[tokio::test]
async fn glob_and_grep_take_claude_codes_parameters() {
    let f = Fixture::new(&[
        ("src/a.rs", "fn main() {}\n// TODO one\n"),
        ("src/b.py", "# todo two\n"),
        ("doc/c.md", "nothing\n"),
    ]);
    let r = f
        .call("Glob", json!({"pattern": "**/*.rs", "path": "undefined"}))
        .await;
    let out = ok(&r);
    assert!(out.contains("src/a.rs") && !out.contains("b.py"), "{out}");
    // Default mode lists files only.
    let r = f.call("Grep", json!({"pattern": "todo", "-i": true})).await;
    let out = ok(&r);
    assert!(
        out.contains("src/a.rs") && out.contains("src/b.py"),
        "{out}"
    );
    assert!(!out.contains("TODO one"), "{out}");
    let r = f
        .call(
            "Grep",
            json!({"pattern": "TODO", "output_mode": "content", "-n": true, "-B": 1, "glob": "*.rs"}),
        )
        .await;
    let out = ok(&r);
    assert!(out.contains("TODO one") && out.contains("fn main"), "{out}");
    let r = f
        .call("Grep", json!({"pattern": "x", "output_mode": "lines"}))
        .await;
    assert!(failed(&r).contains("output_mode"));
}

#[tokio::test]
async fn background_bash_reads_filtered_output_and_is_killed() {
    let f = Fixture::new(&[]);
    let r = f
        .call(
            "Bash",
            json!({"command": "echo hi; echo there", "description": "Say hi"}),
        )
        .await;
    assert!(ok(&r).contains("hi\nthere"));
    let r = f
        .call(
            "Bash",
            json!({"command": "echo keep-1; echo drop; echo keep-2; sleep 30", "run_in_background": true}),
        )
        .await;
    let out = ok(&r).to_string();
    assert!(
        out.starts_with("Command running in background with ID: "),
        "{out}"
    );
    let id = r.data.as_ref().unwrap()["process_id"]
        .as_str()
        .unwrap()
        .to_string();
    // Wait for the output through the engine (no wall-clock assertion).
    let mut seen = String::new();
    for _ in 0..50 {
        let r = f
            .call("BashOutput", json!({"bash_id": id, "filter": "^keep"}))
            .await;
        seen.push_str(ok(&r));
        if seen.contains("keep-2") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(seen.contains("keep-1") && seen.contains("keep-2"), "{seen}");
    assert!(!seen.contains("drop"), "{seen}");
    let r = f.call("KillShell", json!({"shell_id": id})).await;
    assert!(ok(&r).starts_with("Successfully killed shell"));
    let r = f
        .call("Bash", json!({"command": "true", "timeout": 700000}))
        .await;
    assert!(failed(&r).contains("timeout"));
}

/// `Bash` in `session`: its output, which never carries the directory marker.
async fn bash(f: &Fixture, session: &str, command: &str) -> ToolResult {
    let r = f
        .call_in(session, "Bash", json!({"command": command}))
        .await;
    assert!(
        !r.output.contains('\u{1e}') && !r.output.contains("toolyard-cwd"),
        "the marker leaked: {:?}",
        r.output
    );
    r
}

#[tokio::test]
async fn bash_keeps_the_working_directory_of_its_session_between_calls() {
    let f = Fixture::new(&[("sub/deep/a.txt", "a\n")]);
    let sub = f.abs("sub");
    let r = bash(&f, "s1", "cd sub").await;
    assert_eq!(ok(&r), "exit code: 0\n(no output)\n");
    let r = bash(&f, "s1", "pwd").await;
    assert!(ok(&r).ends_with(&format!("{sub}\n")), "{}", r.output);
    // Relative paths start there too; another session starts at the root.
    assert!(ok(&bash(&f, "s1", "ls").await).contains("deep"));
    let r = bash(&f, "s2", "pwd").await;
    assert!(
        ok(&r).ends_with(&format!("{}\n", f.ws.display())),
        "{}",
        r.output
    );
    // Shell variables do not persist.
    bash(&f, "s1", "X=kept").await;
    assert!(ok(&bash(&f, "s1", "echo ${X:-unset}").await).contains("unset"));
    // A failing command still moves, and keeps its exit code and line numbers.
    let r = bash(&f, "s1", "cd deep; no_such_cmd_xyz").await;
    assert!(failed(&r).contains("exit code: 127"), "{}", r.output);
    assert!(r.output.contains("1: no_such_cmd_xyz"), "{}", r.output);
    assert!(ok(&bash(&f, "s1", "pwd").await).ends_with("/sub/deep\n"));
    let r = bash(&f, "s1", "cd .. && exit 3").await;
    assert!(failed(&r).contains("exit code: 3"), "{}", r.output);
    assert!(ok(&bash(&f, "s1", "pwd").await).ends_with(&format!("{sub}\n")));
    // Output without a final newline keeps its exact bytes.
    let r = bash(&f, "s1", "printf 'no newline'").await;
    assert!(
        ok(&r).ends_with("exit code: 0\nno newline\n"),
        "{:?}",
        r.output
    );
    assert_eq!(r.data.as_ref().unwrap()["output_bytes"], 10);
}

#[tokio::test]
async fn background_bash_starts_in_the_sessions_directory_and_does_not_move_it() {
    let f = Fixture::new(&[("sub/a.txt", "a\n")]);
    bash(&f, "s1", "cd sub").await;
    let r = f
        .call(
            "Bash",
            json!({"command": "pwd; cd ..; echo moved-up", "run_in_background": true}),
        )
        .await;
    let id = r.data.as_ref().unwrap()["process_id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut seen = String::new();
    for _ in 0..50 {
        seen.push_str(ok(&f.call("BashOutput", json!({"bash_id": id})).await));
        if seen.contains("moved-up") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(seen.contains(&format!("{}\n", f.abs("sub"))), "{seen}");
    let r = bash(&f, "s1", "pwd").await;
    assert!(
        ok(&r).ends_with(&format!("{}\n", f.abs("sub"))),
        "{}",
        r.output
    );
}

#[tokio::test]
async fn bash_falls_back_to_the_root_when_its_directory_is_outside_or_gone() {
    let f = Fixture::new(&[("keep.txt", "k\n")]);
    let root = f.ws.display().to_string();
    let r = bash(&f, "s1", "cd /").await;
    assert!(
        ok(&r).ends_with(&format!(
            "Shell cwd was reset to {root}: / is outside the workspace.\n"
        )),
        "{}",
        r.output
    );
    assert!(ok(&bash(&f, "s1", "pwd").await).ends_with(&format!("{root}\n")));
    bash(&f, "s1", "mkdir gone && cd gone").await;
    assert!(ok(&bash(&f, "s1", "pwd").await).ends_with("/gone\n"));
    fs::remove_dir(f.ws.join("gone")).unwrap();
    let r = bash(&f, "s1", "pwd").await;
    let out = ok(&r);
    assert!(
        out.starts_with(&format!(
            "Shell cwd was reset to {root}: gone no longer exists.\n"
        )),
        "{out}"
    );
    assert!(out.ends_with(&format!("{root}\n")), "{out}");
    // A command that moves its stdout into a file gets no marker written there, and stays put.
    bash(&f, "s1", "mkdir d && exec > log.txt && cd d && echo logged").await;
    assert_eq!(f.read("log.txt").as_deref(), Some("logged\n"));
    assert!(ok(&bash(&f, "s1", "pwd").await).ends_with(&format!("{root}\n")));
}

#[tokio::test]
async fn notebook_edit_replaces_inserts_and_deletes_cells() {
    let nb = r##"{"cells": [
      {"cell_type": "code", "id": "c1", "metadata": {}, "source": ["x = 1\n", "x"],
       "outputs": [{"output_type": "stream", "name": "stdout", "text": ["1"]}], "execution_count": 3},
      {"cell_type": "markdown", "id": "m1", "metadata": {}, "source": ["# Title"]}
    ], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}"##;
    let f = Fixture::new(&[("n.ipynb", nb)]);
    let path = f.abs("n.ipynb");
    let edit = |args: Value| f.call("NotebookEdit", args);
    let r = edit(json!({"notebook_path": path, "cell_id": "c1", "new_source": "y = 2"})).await;
    assert_eq!(
        failed(&r),
        "File has not been read yet. Read it first before writing to it."
    );
    ok(&f.call("Read", json!({"file_path": path})).await);
    let r = edit(json!({"notebook_path": path, "cell_id": "c1", "new_source": "y = 2\ny"})).await;
    assert_eq!(ok(&r), "Updated cell c1 with y = 2\ny");
    let r = edit(json!({"notebook_path": path, "cell_id": "zz", "new_source": "q"})).await;
    assert!(failed(&r).contains("Cell with ID \"zz\" not found"));
    let r = edit(json!({"notebook_path": path, "cell_id": "c1", "new_source": "## Sub", "edit_mode": "insert"})).await;
    assert!(failed(&r).contains("cell_type is required"));
    let r = edit(json!({"notebook_path": path, "cell_id": "c1", "new_source": "## Sub", "cell_type": "markdown", "edit_mode": "insert"})).await;
    ok(&r);
    let r = edit(
        json!({"notebook_path": path, "cell_id": "m1", "new_source": "", "edit_mode": "delete"}),
    )
    .await;
    assert_eq!(ok(&r), "Deleted cell m1");
    let v: Value = serde_json::from_str(&f.read("n.ipynb").unwrap()).unwrap();
    let cells = v["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 2);
    assert_eq!(cells[0]["source"], json!(["y = 2\n", "y"]));
    // A replaced code cell's old outputs no longer describe it.
    assert_eq!(cells[0]["outputs"], json!([]));
    assert_eq!(cells[0]["execution_count"], Value::Null);
    assert_eq!(cells[1]["cell_type"], json!("markdown"));
    assert_eq!(cells[1]["source"], json!(["## Sub"]));
    assert_eq!(v["nbformat_minor"], json!(5));
}
