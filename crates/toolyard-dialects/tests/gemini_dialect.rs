//! The gemini dialect: old and new parameter names, replace's count rule and Gemini's texts,
//! read-before-write, list_directory's ignore, read_many_files's separators and bound.

use std::fs;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Value, json};
use toolyard_core::{Tool, ToolContext, ToolResult};
use toolyard_dialects::Dialect;

mod common;

struct Fixture {
    _tmp: tempfile::TempDir,
    ws: PathBuf,
    tools: Vec<Arc<dyn Tool>>,
}

impl Fixture {
    fn new(files: &[(&str, &str)]) -> Self {
        let common::DialectWorkspace { tmp, ws, tools, .. } =
            common::DialectWorkspace::new(Dialect::Gemini, files);
        Self {
            _tmp: tmp,
            ws,
            tools,
        }
    }

    async fn call(&self, name: &str, args: Value) -> ToolResult {
        self.call_limited(name, args, None).await
    }

    async fn call_limited(&self, name: &str, args: Value, max: Option<usize>) -> ToolResult {
        let tool = self.tools.iter().find(|t| t.name() == name).unwrap();
        let mut ctx = ToolContext::new(&self.ws, "s1");
        ctx.call_id = format!("call-{}", next_id());
        if let Some(m) = max {
            ctx.max_output_bytes = m;
        }
        match tool.invoke(args, &ctx).await {
            Ok(r) => r,
            Err(e) => ToolResult::from(e),
        }
    }

    fn abs(&self, p: &str) -> String {
        self.ws.join(p).display().to_string()
    }

    fn read(&self, p: &str) -> String {
        fs::read_to_string(self.ws.join(p)).unwrap()
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
async fn the_dialect_has_gemini_names() {
    let f = Fixture::new(&[]);
    let names: Vec<&str> = f.tools.iter().map(|t| t.name()).collect();
    for n in [
        "read_file",
        "write_file",
        "replace",
        "glob",
        "search_file_content",
        "grep_search",
        "list_directory",
        "run_shell_command",
        "read_many_files",
        "process_output",
        "process_kill",
    ] {
        assert!(names.contains(&n), "{n} missing from {names:?}");
    }
}

#[tokio::test]
async fn read_file_takes_old_and_new_names_and_line_windows() {
    let f = Fixture::new(&[("a.txt", "one\ntwo\nthree\nfour\n")]);
    let r = f
        .call("read_file", json!({"absolute_path": f.abs("a.txt")}))
        .await;
    assert!(ok(&r).contains("four"));
    // Old form: offset is 0-based, so offset 1 starts at the second line.
    let r = f
        .call(
            "read_file",
            json!({"file_path": "a.txt", "offset": 1, "limit": 2}),
        )
        .await;
    let out = ok(&r);
    assert!(out.contains("two") && out.contains("three"), "{out}");
    assert!(!out.contains("one") && !out.contains("four"), "{out}");
    let r = f
        .call(
            "read_file",
            json!({"file_path": "a.txt", "start_line": 3, "end_line": 3}),
        )
        .await;
    let out = ok(&r);
    assert!(
        out.contains("three") && !out.contains("two") && !out.contains("four"),
        "{out}"
    );
    let r = f.call("read_file", json!({"offset": 1})).await;
    assert!(failed(&r).contains("file_path"));
}

#[tokio::test]
async fn replace_refuses_a_count_that_differs_in_geminis_words() {
    let f = Fixture::new(&[("a.py", "x = 1\nx = 1\ny = 2\n")]);
    ok(&f.call("read_file", json!({"file_path": "a.py"})).await);
    let r = f
        .call(
            "replace",
            json!({"file_path": f.abs("a.py"), "old_string": "x = 1", "new_string": "x = 3"}),
        )
        .await;
    assert!(
        failed(&r)
            .contains("Failed to edit, Expected 1 occurrence but found 2 for old_string in file:"),
        "{}",
        r.output
    );
    let r = f
        .call(
            "replace",
            json!({"file_path": "a.py", "old_string": "x = 1", "new_string": "x = 3", "expected_replacements": 3}),
        )
        .await;
    assert!(
        failed(&r).contains("Expected 3 occurrences but found 2"),
        "{}",
        r.output
    );
    assert_eq!(f.read("a.py"), "x = 1\nx = 1\ny = 2\n");
    let r = f
        .call(
            "replace",
            json!({"file_path": "a.py", "old_string": "x = 1", "new_string": "x = 3", "expected_replacements": 2}),
        )
        .await;
    ok(&r);
    assert_eq!(f.read("a.py"), "x = 3\nx = 3\ny = 2\n");
    let r = f
        .call(
            "replace",
            json!({"file_path": "a.py", "instruction": "rename", "old_string": "x = 3", "new_string": "z = 3", "allow_multiple": true}),
        )
        .await;
    ok(&r);
    assert_eq!(f.read("a.py"), "z = 3\nz = 3\ny = 2\n");
}

#[tokio::test]
async fn replace_says_what_gemini_says_when_nothing_matches_or_nothing_changes() {
    let f = Fixture::new(&[("a.py", "y = 2\n")]);
    ok(&f.call("read_file", json!({"file_path": "a.py"})).await);
    let r = f
        .call(
            "replace",
            json!({"file_path": "a.py", "old_string": "nope", "new_string": "x"}),
        )
        .await;
    assert!(
        failed(&r).contains("Failed to edit, 0 occurrences found for old_string in a.py. Ensure"),
        "{}",
        r.output
    );
    let r = f
        .call(
            "replace",
            json!({"file_path": "a.py", "old_string": "y", "new_string": "y"}),
        )
        .await;
    assert!(failed(&r).contains("No changes to apply."), "{}", r.output);
    let r = f
        .call(
            "replace",
            json!({"file_path": "b.py", "old_string": "y", "new_string": "z"}),
        )
        .await;
    assert!(failed(&r).contains("File not found: b.py"), "{}", r.output);
    // Empty old_string creates a file, never overwrites one.
    ok(&f
        .call(
            "replace",
            json!({"file_path": "b.py", "old_string": "", "new_string": "new\n"}),
        )
        .await);
    assert_eq!(f.read("b.py"), "new\n");
    let r = f
        .call(
            "replace",
            json!({"file_path": "a.py", "old_string": "", "new_string": "x"}),
        )
        .await;
    assert!(
        failed(&r).contains("File already exists, cannot create"),
        "{}",
        r.output
    );
}

#[tokio::test]
async fn writes_need_a_read_first_and_stay_in_the_workspace() {
    let f = Fixture::new(&[("a.txt", "old\n")]);
    let r = f
        .call(
            "replace",
            json!({"file_path": "a.txt", "old_string": "old", "new_string": "new"}),
        )
        .await;
    failed(&r);
    let r = f
        .call("write_file", json!({"file_path": "a.txt", "content": "x"}))
        .await;
    failed(&r);
    assert_eq!(f.read("a.txt"), "old\n");
    let r = f
        .call(
            "write_file",
            json!({"file_path": "/etc/evil", "content": "x"}),
        )
        .await;
    failed(&r);
    ok(&f
        .call(
            "write_file",
            json!({"file_path": f.abs("d/new.txt"), "content": "hi\n"}),
        )
        .await);
    assert_eq!(f.read("d/new.txt"), "hi\n");
}

#[tokio::test]
async fn search_glob_list_and_shell_take_old_and_new_names() {
    let f = Fixture::new(&[
        ("src/a.rs", "fn Main() {}\n"),
        ("src/b.txt", "fn main\n"),
        ("src/c.log", "x\n"),
    ]);
    let r = f
        .call(
            "search_file_content",
            json!({"pattern": "fn main", "path": "src", "include": "*.rs"}),
        )
        .await;
    // Case-insensitive by default, and only *.rs.
    let out = ok(&r);
    assert!(out.contains("a.rs") && !out.contains("b.txt"), "{out}");
    let r = f
        .call(
            "grep_search",
            json!({"pattern": "fn main", "dir_path": "src", "case_sensitive": true}),
        )
        .await;
    let out = ok(&r);
    assert!(out.contains("b.txt") && !out.contains("a.rs"), "{out}");
    let r = f
        .call("glob", json!({"pattern": "*.rs", "path": "src", "case_sensitive": false, "respect_git_ignore": true}))
        .await;
    assert!(ok(&r).contains("a.rs"));
    let r = f
        .call(
            "list_directory",
            json!({"path": "src", "ignore": ["*.log"]}),
        )
        .await;
    let out = ok(&r);
    assert!(out.contains("a.rs") && !out.contains("c.log"), "{out}");
    let r = f
        .call(
            "run_shell_command",
            json!({"command": "pwd", "description": "where", "directory": "src"}),
        )
        .await;
    assert!(ok(&r).contains("/src"), "{}", r.output);
}

#[tokio::test]
async fn read_many_files_joins_with_separators_and_stays_bounded() {
    let big = "y".repeat(4000);
    let f = Fixture::new(&[
        ("docs/a.md", "alpha\n"),
        ("docs/b.md", "beta\n"),
        ("docs/skip.md", "skip\n"),
        ("docs/big.md", &big),
    ]);
    let r = f
        .call(
            "read_many_files",
            json!({"paths": ["docs/*.md"], "exclude": ["**/skip.md", "**/big.md"]}),
        )
        .await;
    let out = ok(&r);
    assert!(
        out.contains("--- docs/a.md ---") && out.contains("alpha"),
        "{out}"
    );
    assert!(
        out.contains("--- docs/b.md ---") && out.contains("beta"),
        "{out}"
    );
    assert!(!out.contains("skip"), "{out}");
    assert!(out.trim_end().ends_with("--- End of content ---"), "{out}");
    let r = f
        .call_limited(
            "read_many_files",
            json!({"include": ["docs/*.md"]}),
            Some(1000),
        )
        .await;
    let out = ok(&r);
    assert!(!out.contains(&big), "not bounded");
    assert!(
        out.contains("docs/big.md"),
        "the file left out is named: {out}"
    );
    // Files read count as read: an edit of one is allowed.
    ok(&f
        .call(
            "replace",
            json!({"file_path": "docs/a.md", "old_string": "alpha", "new_string": "gamma"}),
        )
        .await);
}

#[tokio::test]
async fn glob_applies_case_sensitive_and_respect_git_ignore() {
    let f = Fixture::new(&[
        (".gitignore", "build/\n"),
        ("src/Main.RS", "fn main() {}\n"),
        ("src/lib.rs", "\n"),
        ("build/gen.rs", "\n"),
    ]);
    let paths = |r: &ToolResult| -> Vec<String> {
        let mut v: Vec<String> = r.data.as_ref().unwrap()["paths"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap().to_string())
            .collect();
        v.sort();
        v
    };
    // Gemini CLI's defaults: case-insensitive, .gitignore respected.
    let r = f.call("glob", json!({"pattern": "**/*.rs"})).await;
    assert!(r.success, "{}", r.output);
    assert_eq!(paths(&r), ["src/Main.RS", "src/lib.rs"]);
    let r = f
        .call(
            "glob",
            json!({"pattern": "**/*.rs", "case_sensitive": true}),
        )
        .await;
    assert_eq!(paths(&r), ["src/lib.rs"]);
    let r = f
        .call(
            "glob",
            json!({"pattern": "**/*.rs", "respect_git_ignore": false}),
        )
        .await;
    assert_eq!(paths(&r), ["build/gen.rs", "src/Main.RS", "src/lib.rs"]);
    // A literal directory in the pattern matches whatever its case, too.
    let r = f.call("glob", json!({"pattern": "SRC/*.rs"})).await;
    assert_eq!(paths(&r), ["src/Main.RS", "src/lib.rs"]);
}
