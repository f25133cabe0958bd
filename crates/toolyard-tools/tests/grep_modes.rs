//! grep's Claude-Code-shaped options: `output_mode`, `head_limit`, `-i`, `type`, `multiline`.

use std::fs;
use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};
use toolyard_core::{Catalog, Tool, ToolContext, ToolResult, Typed};
use toolyard_tools::ToolEnv;
use toolyard_tools::search::GrepTool;

struct Fixture {
    dir: tempfile::TempDir,
    env: Arc<ToolEnv>,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        // Inside the temp workspace (hidden from the tools), never the user's state directory.
        let state = dir.path().join(".test-state");
        let env = Arc::new(
            ToolEnv::open_with_state(dir.path(), Catalog::builtin(), Some(&state))
                .expect("open env"),
        );
        Self { dir, env }
    }

    fn write(&self, rel: &str, content: &str) {
        let p = self.dir.path().join(rel);
        fs::create_dir_all(p.parent().unwrap_or(Path::new("."))).expect("mkdir");
        fs::write(p, content).expect("write");
    }

    async fn grep(&self, args: Value) -> ToolResult {
        let ctx = ToolContext::new(self.env.workspace.root(), "grep-modes-test");
        let tool = Typed(GrepTool::new(self.env.clone()));
        ToolResult::from(tool.invoke(args, &ctx).await)
    }
}

fn ok(r: &ToolResult) -> &str {
    assert!(r.success, "expected success, got {}", r.output);
    &r.output
}

fn three_files() -> Fixture {
    let f = Fixture::new();
    f.write("a.rs", "needle one\nhay\nneedle two\n");
    f.write("b.py", "needle\n");
    f.write("c/d.rs", "Needle upper\nneedle lower\nneedle again\n");
    f
}

#[tokio::test]
async fn default_mode_is_content_as_before() {
    let f = three_files();
    let r = f
        .grep(json!({"pattern": "needle", "output_mode": "content"}))
        .await;
    let default = f.grep(json!({"pattern": "needle"})).await;
    assert_eq!(ok(&r), ok(&default));
    assert!(ok(&r).starts_with("a.rs:1:needle one\na.rs:3:needle two\n"));
}

#[tokio::test]
async fn files_with_matches_lists_paths_only() {
    let f = three_files();
    let r = f
        .grep(json!({"pattern": "needle", "output_mode": "files_with_matches"}))
        .await;
    assert_eq!(ok(&r), "a.rs\nb.py\nc/d.rs\n");
    assert_eq!(
        r.data.as_ref().map(|d| d["truncated"].clone()),
        Some(json!(false))
    );
}

#[tokio::test]
async fn count_gives_matching_lines_per_file() {
    let f = three_files();
    let r = f
        .grep(json!({"pattern": "needle", "output_mode": "count"}))
        .await;
    // Smart case: the lowercase pattern also matches "Needle".
    assert_eq!(ok(&r), "a.rs:2\nb.py:1\nc/d.rs:3\n");
}

#[tokio::test]
async fn head_limit_caps_files_and_says_how_many_more() {
    let f = three_files();
    let r = f
        .grep(json!({"pattern": "needle", "output_mode": "files_with_matches", "head_limit": 2}))
        .await;
    let out = ok(&r);
    assert!(out.starts_with("a.rs\nb.py\n["), "{out}");
    assert!(out.contains("1 more files not shown"), "{out}");
    assert!(out.contains("raise head_limit"), "{out}");
    assert_eq!(
        r.data.as_ref().map(|d| d["truncated"].clone()),
        Some(json!(true))
    );
}

#[tokio::test]
async fn head_limit_caps_content_lines() {
    let f = three_files();
    let r = f.grep(json!({"pattern": "needle", "head_limit": 3})).await;
    let out = ok(&r);
    // The matches shown, then the footers (the first starts with `[`).
    let lines: Vec<&str> = out.lines().take_while(|l| !l.starts_with('[')).collect();
    assert_eq!(
        lines,
        ["a.rs:1:needle one", "a.rs:3:needle two", "b.py:1:needle"]
    );
    assert!(
        out.ends_with(
            "[matching lines per file, most first:\n  c/d.rs: 3\n  a.rs: 2\n  b.py: 1]\n"
        ),
        "{out}"
    );
    assert!(out.contains("[3 more matches"), "{out}");
    let zero = f.grep(json!({"pattern": "needle", "head_limit": 0})).await;
    assert!(!zero.success);
}

#[tokio::test]
async fn dash_i_and_its_alias_ignore_case() {
    let f = three_files();
    // An uppercase letter makes smart case sensitive: only "Needle upper".
    let smart = f
        .grep(json!({"pattern": "Needle", "output_mode": "count"}))
        .await;
    assert_eq!(ok(&smart), "c/d.rs:1\n");
    for flag in ["-i", "case_insensitive"] {
        let r = f
            .grep(json!({"pattern": "Needle", "output_mode": "count", flag: true}))
            .await;
        assert_eq!(ok(&r), "a.rs:2\nb.py:1\nc/d.rs:3\n", "{flag}");
    }
}

#[tokio::test]
async fn type_limits_to_ripgrep_file_types() {
    let f = three_files();
    let r = f
        .grep(json!({"pattern": "needle", "type": "py", "output_mode": "files_with_matches"}))
        .await;
    assert_eq!(ok(&r), "b.py\n");
    let both = f
        .grep(json!({"pattern": "needle", "type": "rust,py", "output_mode": "files_with_matches"}))
        .await;
    assert_eq!(ok(&both), "a.rs\nb.py\nc/d.rs\n");
    let bad = f.grep(json!({"pattern": "needle", "type": "rustt"})).await;
    assert!(!bad.success);
    assert!(bad.output.contains("`type` \"rustt\""), "{}", bad.output);
    assert!(bad.output.contains("rust"), "{}", bad.output);
}

#[tokio::test]
async fn multiline_matches_span_lines() {
    let f = Fixture::new();
    f.write("s.rs", "struct A {\n    x: u8,\n}\nfn f() {}\n");
    let r = f
        .grep(json!({"pattern": r"struct A \{.*?\}", "multiline": true}))
        .await;
    assert_eq!(ok(&r), "s.rs:1:struct A {\ns.rs:2:    x: u8,\ns.rs:3:}\n");
    // Without multiline, a `\n` in the pattern is refused with the way out.
    let single = f.grep(json!({"pattern": r"A \{\n"})).await;
    assert!(!single.success);
    assert!(
        single.output.contains("multiline: true"),
        "{}",
        single.output
    );
}

#[tokio::test]
async fn schema_names_the_new_arguments() {
    let f = Fixture::new();
    let schema = Typed(GrepTool::new(f.env.clone())).input_schema();
    let props = &schema["properties"];
    for name in ["output_mode", "head_limit", "-i", "type", "multiline"] {
        assert!(props.get(name).is_some(), "{name} missing from {schema}");
    }
}
