//! The anthropic dialect's text editor and bash: Anthropic's texts, create never overwriting,
//! insert at the top and the end, view_range with -1, tabs kept, read-before-write,
//! confinement, undo_edit through the journal, and the persistent shell.

use std::fs;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Value, json};
use toolyard_core::{Catalog, Tool, ToolContext, ToolResult};
use toolyard_dialects::{self as dialect, Dialect};
use toolyard_tools::ToolEnv;

const EDITOR: &str = "str_replace_based_edit_tool";
const OLD_EDITOR: &str = "str_replace_editor";

mod common;

struct Fixture {
    _tmp: tempfile::TempDir,
    ws: PathBuf,
    tools: Vec<Arc<dyn Tool>>,
}

impl Fixture {
    fn new(files: &[(&str, &str)]) -> Self {
        let common::DialectWorkspace { tmp, ws, tools, .. } =
            common::DialectWorkspace::new(Dialect::Anthropic, files);
        Self {
            _tmp: tmp,
            ws,
            tools,
        }
    }

    async fn call_as(&self, session: &str, name: &str, args: Value) -> ToolResult {
        let tool = self.tools.iter().find(|t| t.name() == name).unwrap();
        let mut ctx = ToolContext::new(&self.ws, session);
        ctx.call_id = format!("call-{}", next_id());
        match tool.invoke(args, &ctx).await {
            Ok(r) => r,
            Err(e) => ToolResult::from(e),
        }
    }

    async fn edit(&self, args: Value) -> ToolResult {
        self.call_as("s1", EDITOR, args).await
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
    &r.output
}

#[track_caller]
fn ok(r: &ToolResult) -> &str {
    assert!(r.success, "expected success, got {}", r.output);
    &r.output
}

#[tokio::test]
async fn the_dialect_has_both_editors_and_bash_under_their_engines() {
    let tmp = tempfile::tempdir().unwrap();
    let env = Arc::new(
        ToolEnv::open_with_state(tmp.path(), Catalog::builtin(), Some(&tmp.path().join("st")))
            .unwrap(),
    );
    let mut got: Vec<(String, &str)> = dialect::tools(&env, Dialect::Anthropic)
        .unwrap()
        .into_iter()
        .map(|t| (t.tool.name().to_string(), t.engine.name()))
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            ("bash".to_string(), "shell"),
            (EDITOR.to_string(), "edit_file"),
            (OLD_EDITOR.to_string(), "edit_file"),
        ]
    );
    assert_eq!("anthropic".parse::<Dialect>().unwrap(), Dialect::Anthropic);
}

#[tokio::test]
async fn view_numbers_lines_like_cat_n_and_keeps_tabs() {
    let f = Fixture::new(&[("a.go", "package a\n\nfunc f() {\n\treturn\n}\n")]);
    let r = f
        .edit(json!({"command": "view", "path": f.abs("a.go")}))
        .await;
    assert_eq!(
        ok(&r),
        format!(
            "Here's the result of running `cat -n` on {}:\n     1\tpackage a\n     2\t\n     3\tfunc f() {{\n     4\t\treturn\n     5\t}}\n",
            f.abs("a.go")
        )
    );
}

#[tokio::test]
async fn view_range_with_minus_one_runs_to_the_end_and_bad_ranges_get_the_reference_texts() {
    let f = Fixture::new(&[("f.txt", "one\ntwo\nthree\nfour\n")]);
    let r = f
        .edit(json!({"command": "view", "path": "f.txt", "view_range": [3, -1]}))
        .await;
    assert_eq!(
        ok(&r),
        "Here's the result of running `cat -n` on f.txt:\n     3\tthree\n     4\tfour\n"
    );
    let r = f
        .edit(json!({"command": "view", "path": "f.txt", "view_range": [2, 3]}))
        .await;
    assert!(
        ok(&r).ends_with("     2\ttwo\n     3\tthree\n"),
        "{}",
        r.output
    );
    let cases = [
        (
            json!([0, 2]),
            "Error: Invalid `view_range`: [0, 2]. Its first element `0` should be within the range of lines of the file: [1, 4]",
        ),
        (
            json!([1, 9]),
            "Error: Invalid `view_range`: [1, 9]. Its second element `9` should be smaller than the number of lines in the file: `4`",
        ),
        (
            json!([3, 2]),
            "Error: Invalid `view_range`: [3, 2]. Its second element `2` should be larger or equal than its first `3`",
        ),
        (
            json!([1]),
            "Error: Invalid `view_range`. It should be a list of two integers.",
        ),
    ];
    for (range, want) in cases {
        let r = f
            .edit(json!({"command": "view", "path": "f.txt", "view_range": range}))
            .await;
        assert_eq!(failed(&r), want);
    }
}

#[tokio::test]
async fn view_clips_at_max_characters() {
    let f = Fixture::new(&[("big.txt", &"x".repeat(500))]);
    let r = f
        .edit(json!({"command": "view", "path": "big.txt", "max_characters": 50}))
        .await;
    let out = ok(&r);
    assert!(out.contains("<response clipped>"), "{out}");
    assert!(!out.contains(&"x".repeat(60)), "{out}");
}

#[tokio::test]
async fn view_of_a_directory_lists_two_levels_and_refuses_view_range() {
    let f = Fixture::new(&[
        ("src/lib.rs", ""),
        ("src/deep/inner/far.rs", ""),
        ("top.txt", ""),
        (".hidden/x", ""),
    ]);
    let r = f.edit(json!({"command": "view", "path": f.abs("")})).await;
    let out = ok(&r);
    let root = f.abs("");
    let root = root.trim_end_matches('/');
    assert!(out.starts_with(&format!(
        "Here's the files and directories up to 2 levels deep in {}, excluding hidden items:\n",
        f.abs("")
    )));
    assert!(out.contains(&format!("{root}/src/lib.rs\n")), "{out}");
    assert!(out.contains(&format!("{root}/src/deep\n")), "{out}");
    assert!(out.contains(&format!("{root}/top.txt\n")), "{out}");
    assert!(!out.contains("far.rs"), "three levels deep: {out}");
    assert!(!out.contains(".hidden"), "{out}");
    let r = f
        .edit(json!({"command": "view", "path": "src", "view_range": [1, 2]}))
        .await;
    assert_eq!(
        failed(&r),
        "Error: The `view_range` parameter is not allowed when `path` points to a directory."
    );
    let r = f
        .edit(json!({"command": "str_replace", "path": "src", "old_str": "a"}))
        .await;
    assert_eq!(
        failed(&r),
        "Error: The path src is a directory and only the `view` command can be used on directories"
    );
}

#[tokio::test]
async fn create_writes_a_new_file_and_never_overwrites() {
    let f = Fixture::new(&[("keep.txt", "precious\n")]);
    let r = f
        .edit(json!({"command": "create", "path": "new/dir/n.py", "file_text": "a\tb\n"}))
        .await;
    assert_eq!(ok(&r), "File created successfully at: new/dir/n.py");
    assert_eq!(f.read("new/dir/n.py").unwrap(), "a\tb\n");
    // Even after a view (which would allow an edit), create refuses an existing file.
    ok(&f.edit(json!({"command": "view", "path": "keep.txt"})).await);
    let r = f
        .edit(json!({"command": "create", "path": "keep.txt", "file_text": "gone"}))
        .await;
    assert_eq!(
        failed(&r),
        "Error: File already exists at: keep.txt. Cannot overwrite files using command `create`."
    );
    assert_eq!(f.read("keep.txt").unwrap(), "precious\n");
    let r = f.edit(json!({"command": "create", "path": "x.txt"})).await;
    assert_eq!(
        failed(&r),
        "Error: Parameter `file_text` is required for command: create"
    );
}

#[tokio::test]
async fn str_replace_needs_a_view_first_then_edits_exactly_and_shows_a_snippet() {
    let f = Fixture::new(&[("m.go", "func a() {\n\tx := 1\n\treturn x\n}\n")]);
    let args = json!({"command": "str_replace", "path": "m.go", "old_str": "\tx := 1", "new_str": "\tx := 2"});
    let r = f.edit(args.clone()).await;
    assert!(failed(&r).contains("has not been viewed"), "{}", r.output);
    assert!(r.output.contains("`view`"), "{}", r.output);
    ok(&f.edit(json!({"command": "view", "path": "m.go"})).await);
    let r = f.edit(args).await;
    assert_eq!(
        ok(&r),
        "The file m.go has been edited. Here's the result of running `cat -n` on a snippet of m.go:\n     1\tfunc a() {\n     2\t\tx := 2\n     3\t\treturn x\n     4\t}\nReview the changes and make sure they are as expected. Edit the file again if necessary."
    );
    assert_eq!(
        f.read("m.go").unwrap(),
        "func a() {\n\tx := 2\n\treturn x\n}\n"
    );
    assert_eq!(r.files_changed, ["m.go"]);
    // new_str omitted: old_str is deleted.
    let r = f
        .edit(json!({"command": "str_replace", "path": "m.go", "old_str": "\treturn x\n"}))
        .await;
    ok(&r);
    assert_eq!(f.read("m.go").unwrap(), "func a() {\n\tx := 2\n}\n");
}

#[tokio::test]
async fn str_replace_failures_use_the_documented_texts_with_the_nearest_lines() {
    let f = Fixture::new(&[("p.py", "def f(x):\n    return x + 1\n\nv = 1\nv = 1\n")]);
    ok(&f.edit(json!({"command": "view", "path": "p.py"})).await);
    let r = f
        .edit(json!({"command": "str_replace", "path": "p.py", "old_str": "return x + 2", "new_str": "y"}))
        .await;
    let out = failed(&r);
    assert!(
        out.starts_with(
            "Error: No match found for replacement. Please check your text and try again."
        ),
        "{out}"
    );
    assert!(out.contains("     2|    return x + 1"), "{out}");
    let r = f
        .edit(json!({"command": "str_replace", "path": "p.py", "old_str": "v = 1", "new_str": "v = 2"}))
        .await;
    assert_eq!(
        failed(&r),
        "Error: Found 2 matches for replacement text. Please provide more context to make a unique match. The matches start at lines 4, 5."
    );
    let r = f
        .edit(json!({"command": "str_replace", "path": "p.py"}))
        .await;
    assert_eq!(
        failed(&r),
        "Error: Parameter `old_str` is required for command: str_replace"
    );
    assert_eq!(
        f.read("p.py").unwrap(),
        "def f(x):\n    return x + 1\n\nv = 1\nv = 1\n"
    );
    let r = f
        .edit(json!({"command": "str_replace", "path": "nope.py", "old_str": "a"}))
        .await;
    assert_eq!(
        failed(&r),
        "Error: File not found. The path nope.py does not exist. Please provide a valid path."
    );
}

#[tokio::test]
async fn insert_at_the_top_and_at_the_end_with_insert_text_or_new_str() {
    let f = Fixture::new(&[("i.txt", "a\nb\n"), ("n.txt", "a\nb")]);
    ok(&f.edit(json!({"command": "view", "path": "i.txt"})).await);
    let r = f
        .edit(json!({"command": "insert", "path": "i.txt", "insert_line": 0, "insert_text": "top"}))
        .await;
    assert!(
        ok(&r).starts_with("The file i.txt has been edited. Here's the result of running `cat -n` on a snippet of the edited file:\n     1\ttop\n"),
        "{}",
        r.output
    );
    assert!(r.output.ends_with("Review the changes and make sure they are as expected (correct indentation, no duplicate lines, etc). Edit the file again if necessary."));
    let r = f
        .edit(json!({"command": "insert", "path": "i.txt", "insert_line": 3, "new_str": "\tend"}))
        .await;
    ok(&r);
    assert_eq!(f.read("i.txt").unwrap(), "top\na\nb\n\tend\n");
    let r = f
        .edit(json!({"command": "insert", "path": "i.txt", "insert_line": 9, "insert_text": "x"}))
        .await;
    assert_eq!(
        failed(&r),
        "Error: Invalid `insert_line` parameter: 9. It should be within the range of lines of the file: [0, 4]"
    );
    let r = f
        .edit(json!({"command": "insert", "path": "i.txt", "insert_text": "x"}))
        .await;
    assert_eq!(
        failed(&r),
        "Error: Parameter `insert_line` is required for command: insert"
    );
    // A file without a final newline keeps having none.
    ok(&f.edit(json!({"command": "view", "path": "n.txt"})).await);
    ok(&f
        .edit(json!({"command": "insert", "path": "n.txt", "insert_line": 2, "insert_text": "c"}))
        .await);
    assert_eq!(f.read("n.txt").unwrap(), "a\nb\nc");
}

#[tokio::test]
async fn unknown_commands_name_the_allowed_ones_per_version() {
    let f = Fixture::new(&[("a.txt", "a\n")]);
    let r = f
        .edit(json!({"command": "undo_edit", "path": "a.txt"}))
        .await;
    assert_eq!(
        failed(&r),
        "Error: Unrecognized command undo_edit. The allowed commands for the str_replace_based_edit_tool tool are: view, create, str_replace, insert"
    );
    let r = f
        .call_as(
            "s1",
            OLD_EDITOR,
            json!({"command": "delete", "path": "a.txt"}),
        )
        .await;
    assert_eq!(
        failed(&r),
        "Error: Unrecognized command delete. The allowed commands for the str_replace_editor tool are: view, create, str_replace, insert, undo_edit"
    );
}

#[tokio::test]
async fn paths_outside_the_workspace_are_refused() {
    let f = Fixture::new(&[("a.txt", "a\n")]);
    let r = f
        .edit(json!({"command": "create", "path": "/tmp/toolyard-anthropic-escape.txt", "file_text": "x"}))
        .await;
    assert!(
        failed(&r).starts_with("Error: Permission denied. Cannot write to file."),
        "{}",
        r.output
    );
    assert!(!std::path::Path::new("/tmp/toolyard-anthropic-escape.txt").exists());
    let r = f
        .edit(json!({"command": "view", "path": "../../etc/passwd"}))
        .await;
    assert!(!r.success);
    assert!(!r.output.contains("root:"), "{}", r.output);
}

#[tokio::test]
async fn undo_edit_reverts_this_sessions_last_edit_of_the_path() {
    let f = Fixture::new(&[("u.txt", "one\n")]);
    let ed = |args: Value| f.call_as("s1", OLD_EDITOR, args);
    let r = ed(json!({"command": "undo_edit", "path": "u.txt"})).await;
    assert_eq!(failed(&r), "Error: No edit history found for u.txt.");
    ok(&ed(json!({"command": "view", "path": "u.txt"})).await);
    ok(
        &ed(json!({"command": "str_replace", "path": "u.txt", "old_str": "one", "new_str": "two"}))
            .await,
    );
    ok(
        &ed(json!({"command": "insert", "path": "u.txt", "insert_line": 1, "new_str": "three"}))
            .await,
    );
    assert_eq!(f.read("u.txt").unwrap(), "two\nthree\n");
    let r = ed(json!({"command": "undo_edit", "path": "u.txt"})).await;
    assert_eq!(
        ok(&r),
        "Last edit to u.txt undone successfully. Here's the result of running `cat -n` on u.txt:\n     1\ttwo\n"
    );
    let r = ed(json!({"command": "undo_edit", "path": "u.txt"})).await;
    ok(&r);
    assert_eq!(f.read("u.txt").unwrap(), "one\n");
    // Another session's history is its own.
    let r = f
        .call_as(
            "s2",
            OLD_EDITOR,
            json!({"command": "undo_edit", "path": "u.txt"}),
        )
        .await;
    assert_eq!(failed(&r), "Error: No edit history found for u.txt.");
    // Undoing a create removes the file.
    ok(&ed(json!({"command": "create", "path": "c.txt", "file_text": "c"})).await);
    let r = ed(json!({"command": "undo_edit", "path": "c.txt"})).await;
    assert!(ok(&r).starts_with("Last edit to c.txt undone successfully."));
    assert_eq!(f.read("c.txt"), None);
}

#[tokio::test]
async fn bash_keeps_its_session_and_restarts_clean() {
    let f = Fixture::new(&[("sub/x.txt", "x\n")]);
    let bash = |args: Value| f.call_as("b1", "bash", args);
    ok(&bash(json!({"command": "cd sub && export MARK=kept"})).await);
    let r = bash(json!({"command": "pwd; echo $MARK; cat x.txt"})).await;
    let out = ok(&r);
    assert!(out.contains("/sub\n"), "{out}");
    assert!(out.contains("kept\nx\n"), "{out}");
    let r = bash(json!({"restart": true})).await;
    assert_eq!(ok(&r), "tool has been restarted.");
    let r = bash(json!({"command": "echo \"[$MARK]\""})).await;
    assert!(ok(&r).contains("[]"), "{}", r.output);
    let r = bash(json!({})).await;
    assert!(failed(&r).starts_with("Error: no command provided."));
}

#[tokio::test]
async fn the_anthropic_export_is_the_schema_less_built_in_form() {
    let f = Fixture::new(&[]);
    let defs: Vec<toolyard_core::ToolDefinition> = f
        .tools
        .iter()
        .map(|t| toolyard_core::ToolDefinition::of(t.as_ref(), None))
        .collect();
    let exported = toolyard_core::export(&defs, toolyard_core::SchemaFormat::Anthropic);
    let mut got: Vec<Value> = exported.as_array().unwrap().clone();
    got.sort_by_key(|t| t["name"].as_str().unwrap().to_string());
    assert_eq!(
        got,
        [
            json!({"type": "bash_20250124", "name": "bash"}),
            json!({"type": "text_editor_20250728", "name": EDITOR}),
            json!({"type": "text_editor_20250124", "name": OLD_EDITOR}),
        ]
    );
    // The MCP form still carries the full schema.
    let mcp = defs.iter().find(|d| d.name == EDITOR).unwrap().to_mcp();
    assert!(mcp["inputSchema"]["properties"]["insert_text"].is_object());
}
