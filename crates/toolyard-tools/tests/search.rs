//! The search tools on small real trees: grep's format, caps, context, smart case, filters;
//! glob's semantics and order; list_directory's tree; list_files' shape.

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use toolyard_core::{Catalog, Tool, ToolContext, ToolResult, Typed};
use toolyard_tools::ToolEnv;
use toolyard_tools::search::{self, GlobTool, GrepTool, ListDirectoryTool, ListFilesTool};

fn env(root: &Path) -> Arc<ToolEnv> {
    // Inside the temp workspace (hidden from the tools), never the user's state directory.
    let state = root.join(".test-state");
    Arc::new(ToolEnv::open_with_state(root, Catalog::builtin(), Some(&state)).expect("open env"))
}

fn write(root: &Path, rel: &str, content: &str) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, content).unwrap();
}

fn set_mtime(root: &Path, rel: &str, secs_ago: u64) {
    let f = fs::File::options()
        .write(true)
        .open(root.join(rel))
        .unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(secs_ago))
        .unwrap();
}

struct Fixture {
    dir: tempfile::TempDir,
    env: Arc<ToolEnv>,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let env = env(dir.path());
        Self { dir, env }
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn ctx(&self) -> ToolContext {
        ToolContext::new(self.env.workspace.root(), "search-test")
    }

    async fn call(&self, tool: Arc<dyn Tool>, args: Value) -> ToolResult {
        ToolResult::from(tool.invoke(args, &self.ctx()).await)
    }

    async fn grep(&self, args: Value) -> ToolResult {
        self.call(Arc::new(Typed(GrepTool::new(self.env.clone()))), args)
            .await
    }

    async fn glob(&self, args: Value) -> ToolResult {
        self.call(Arc::new(Typed(GlobTool::new(self.env.clone()))), args)
            .await
    }

    async fn list(&self, args: Value) -> ToolResult {
        self.call(
            Arc::new(Typed(ListDirectoryTool::new(self.env.clone()))),
            args,
        )
        .await
    }

    async fn list_files(&self, args: Value) -> ToolResult {
        self.call(Arc::new(Typed(ListFilesTool::new(self.env.clone()))), args)
            .await
    }
}

fn ok(r: &ToolResult) -> &str {
    assert!(r.success, "expected success, got {}", r.output);
    &r.output
}

fn err_kind(r: &ToolResult) -> &str {
    assert!(!r.success, "expected an error, got {}", r.output);
    r.error_kind.as_deref().unwrap_or("")
}

#[tokio::test]
async fn tools_are_the_three_loopr_search_tools_with_described_schemas() {
    let f = Fixture::new();
    let tools = search::tools(f.env.clone());
    let names: Vec<&str> = tools.iter().map(|t| t.name()).collect();
    assert_eq!(names, ["list_directory", "glob", "grep"]);
    for t in &tools {
        assert!(t.annotations().read_only);
        let schema = t.input_schema();
        let props = schema["properties"].as_object().unwrap();
        for (name, prop) in props {
            assert!(
                prop["description"].as_str().is_some_and(|d| !d.is_empty()),
                "{}.{name} has no description",
                t.name()
            );
        }
    }
}

#[tokio::test]
async fn grep_prints_path_line_text_sorted_by_path_then_line() {
    let f = Fixture::new();
    write(f.root(), "b.rs", "fn main() {}\nlet needle = 1;\n");
    write(f.root(), "a/z.rs", "needle here\nnothing\nneedle again\n");
    write(f.root(), "a/y.txt", "no match\n");
    let r = f.grep(json!({"pattern": "needle"})).await;
    assert_eq!(
        ok(&r),
        "a/z.rs:1:needle here\na/z.rs:3:needle again\nb.rs:2:let needle = 1;\n"
    );
    let data = r.data.unwrap();
    assert_eq!(data["total_matches"], 3);
    assert_eq!(data["total_files"], 2);
    assert_eq!(data["files"][0], json!({"path": "a/z.rs", "matches": 2}));
    assert_eq!(data["truncated"], false);
}

#[tokio::test]
async fn grep_is_deterministic_across_runs() {
    let f = Fixture::new();
    for i in 0..200 {
        write(f.root(), &format!("d{}/f{i}.txt", i % 7), "x needle y\n");
    }
    let first = f.grep(json!({"pattern": "needle"})).await.output;
    for _ in 0..5 {
        assert_eq!(f.grep(json!({"pattern": "needle"})).await.output, first);
    }
}

#[tokio::test]
async fn grep_shows_context_with_dashes_and_separators() {
    let f = Fixture::new();
    let body: String = (1..=20)
        .map(|i| format!("line {i}\n"))
        .collect::<String>()
        .replace("line 5\n", "hit 5\n")
        .replace("line 15\n", "hit 15\n");
    write(f.root(), "a.txt", &body);
    write(f.root(), "b.txt", "hit b\n");
    let r = f.grep(json!({"pattern": "hit", "context": 1})).await;
    assert_eq!(
        ok(&r),
        "a.txt-4-line 4\na.txt:5:hit 5\na.txt-6-line 6\n--\na.txt-14-line 14\na.txt:15:hit 15\n\
         a.txt-16-line 16\n--\nb.txt:1:hit b\n"
    );
}

#[tokio::test]
async fn grep_caps_files_and_lines_and_says_how_many_more() {
    let f = Fixture::new();
    for i in 0..80 {
        write(f.root(), &format!("f{i:03}.txt"), "needle\n");
    }
    let r = f.grep(json!({"pattern": "needle"})).await;
    let out = ok(&r);
    assert_eq!(out.lines().filter(|l| l.contains(":1:needle")).count(), 50);
    assert!(out.contains("f000.txt:1:needle") && out.contains("f049.txt:1:needle"));
    assert!(!out.contains("f050.txt"));
    assert!(
        out.contains("30 more matches in 30 files"),
        "footer missing: {out}"
    );
    assert!(out.contains("narrow the pattern or path"));
    assert_eq!(r.data.as_ref().unwrap()["truncated"], true);

    let g = Fixture::new();
    let many: String = (0..500).map(|i| format!("needle {i}\n")).collect();
    write(g.root(), "big.txt", &many);
    let r = g.grep(json!({"pattern": "needle"})).await;
    let out = ok(&r);
    assert_eq!(
        out.lines().filter(|l| l.starts_with("big.txt:")).count(),
        200
    );
    assert!(out.contains("300 more matches in 1 files"), "{out}");
}

#[tokio::test]
async fn grep_cuts_long_lines() {
    let f = Fixture::new();
    write(
        f.root(),
        "long.txt",
        &format!("needle{}\n", "x".repeat(5000)),
    );
    let r = f.grep(json!({"pattern": "needle"})).await;
    let out = ok(&r);
    assert!(out.len() < 700, "line not cut: {} bytes", out.len());
    assert!(out.contains("more characters cut"));
}

#[tokio::test]
async fn grep_bad_regex_is_invalid_arguments_that_points_at_the_error() {
    let f = Fixture::new();
    write(f.root(), "a.txt", "x\n");
    let r = f.grep(json!({"pattern": "fn (foo"})).await;
    assert_eq!(err_kind(&r), "invalid_arguments");
    assert!(r.output.contains("unclosed group"), "{}", r.output);
    assert!(r.output.contains('^'), "no position marker: {}", r.output);
}

#[tokio::test]
async fn grep_is_smart_case() {
    let f = Fixture::new();
    write(f.root(), "a.txt", "Needle\nneedle\nNEEDLE\n");
    let r = f.grep(json!({"pattern": "needle"})).await;
    assert_eq!(r.data.unwrap()["total_matches"], 3);
    let r = f.grep(json!({"pattern": "Needle"})).await;
    assert_eq!(ok(&r), "a.txt:1:Needle\n");
    let r = f.grep(json!({"pattern": "(?-i)needle"})).await;
    assert_eq!(ok(&r), "a.txt:2:needle\n");
}

#[tokio::test]
async fn grep_path_may_be_a_file_or_a_directory() {
    let f = Fixture::new();
    write(f.root(), "src/a.rs", "needle\n");
    write(f.root(), "src/b.rs", "needle\n");
    write(f.root(), "other.rs", "needle\n");
    let r = f
        .grep(json!({"pattern": "needle", "path": "src/b.rs"}))
        .await;
    assert_eq!(ok(&r), "src/b.rs:1:needle\n");
    let r = f.grep(json!({"pattern": "needle", "path": "src"})).await;
    assert_eq!(ok(&r), "src/a.rs:1:needle\nsrc/b.rs:1:needle\n");
    let r = f
        .grep(json!({"pattern": "needle", "path": "missing"}))
        .await;
    assert_eq!(err_kind(&r), "file_not_found");
}

#[tokio::test]
async fn grep_file_pattern_filters_by_glob() {
    let f = Fixture::new();
    write(f.root(), "a.rs", "needle\n");
    write(f.root(), "src/deep/b.rs", "needle\n");
    write(f.root(), "src/c.py", "needle\n");
    let r = f
        .grep(json!({"pattern": "needle", "file_pattern": "*.rs"}))
        .await;
    assert_eq!(ok(&r), "a.rs:1:needle\nsrc/deep/b.rs:1:needle\n");
    let r = f
        .grep(json!({"pattern": "needle", "file_pattern": "src/*.py"}))
        .await;
    assert_eq!(ok(&r), "src/c.py:1:needle\n");
    // Relative to `path`.
    let r = f
        .grep(json!({"pattern": "needle", "path": "src", "file_pattern": "deep/*.rs"}))
        .await;
    assert_eq!(ok(&r), "src/deep/b.rs:1:needle\n");
    let r = f
        .grep(json!({"pattern": "needle", "file_pattern": "*.go"}))
        .await;
    assert!(ok(&r).starts_with("No matches"), "{}", r.output);
}

#[tokio::test]
async fn grep_honours_gitignore_hidden_and_noise_dirs_and_skips_binaries() {
    let f = Fixture::new();
    write(f.root(), ".gitignore", "ignored.txt\nbuild/\n");
    write(f.root(), "ignored.txt", "needle\n");
    write(f.root(), "build/out.txt", "needle\n");
    write(f.root(), ".hidden/h.txt", "needle\n");
    write(f.root(), ".env", "needle\n");
    write(f.root(), "node_modules/m.js", "needle\n");
    write(f.root(), "__pycache__/c.txt", "needle\n");
    write(f.root(), ".git/config", "needle\n");
    write(
        f.root(),
        "target/CACHEDIR.TAG",
        "Signature: 8a477f597d28d172789f06886806bc55\n",
    );
    write(f.root(), "target/debug/x.txt", "needle\n");
    // A source directory that happens to be called `target` is not cargo's.
    write(f.root(), "src/target/t.rs", "needle\n");
    fs::write(f.root().join("bin.dat"), b"needle\0\x01\x02needle").unwrap();
    write(f.root(), "kept.txt", "needle\n");
    let r = f.grep(json!({"pattern": "needle"})).await;
    // .hidden/h.txt and .env are hidden and would match (and are named); .gitignore is
    // hidden but holds no match; .git is never searched.
    assert_eq!(
        ok(&r),
        "kept.txt:1:needle\nsrc/target/t.rs:1:needle\n\
         [2 hidden files would also match: .env, .hidden/h.txt; pass hidden: true to include them]\n"
    );
    // `hidden` opens the dotfiles, never .git, node_modules or ignored files.
    let r = f.grep(json!({"pattern": "needle", "hidden": true})).await;
    assert_eq!(
        ok(&r),
        ".env:1:needle\n.hidden/h.txt:1:needle\nkept.txt:1:needle\nsrc/target/t.rs:1:needle\n"
    );
    // Naming a hidden directory searches it; a pattern naming a hidden file opts in.
    let r = f
        .grep(json!({"pattern": "needle", "path": ".hidden"}))
        .await;
    assert_eq!(ok(&r), ".hidden/h.txt:1:needle\n");
    let r = f
        .grep(json!({"pattern": "needle", "file_pattern": ".env"}))
        .await;
    assert_eq!(ok(&r), ".env:1:needle\n");
}

#[tokio::test]
async fn grep_rejects_unknown_and_missing_arguments() {
    let f = Fixture::new();
    let r = f.grep(json!({"pattern": "x", "regex": true})).await;
    assert_eq!(err_kind(&r), "invalid_arguments");
    let r = f.grep(json!({"path": "."})).await;
    assert_eq!(err_kind(&r), "invalid_arguments");
    let r = f.grep(json!({"pattern": ""})).await;
    assert_eq!(err_kind(&r), "invalid_arguments");
}

#[tokio::test]
async fn grep_relative_paths_start_at_the_working_directory() {
    let f = Fixture::new();
    write(f.root(), "sub/inner/a.txt", "needle\n");
    write(f.root(), "b.txt", "needle\n");
    let mut ctx = f.ctx();
    ctx.cwd = f.env.workspace.root().join("sub");
    let tool = Typed(GrepTool::new(f.env.clone()));
    let r = ToolResult::from(
        tool.invoke(json!({"pattern": "needle", "path": "inner"}), &ctx)
            .await,
    );
    // Paths in output stay workspace-relative.
    assert_eq!(ok(&r), "sub/inner/a.txt:1:needle\n");
}

#[tokio::test]
async fn glob_semantics_bare_names_anywhere_slashes_anchor() {
    let f = Fixture::new();
    write(f.root(), "main.rs", "");
    write(f.root(), "src/lib.rs", "");
    write(f.root(), "src/a/mod.rs", "");
    write(f.root(), "src/a/b/mod.rs", "");
    write(f.root(), "tests/mod.rs", "");
    write(f.root(), "README.md", "");
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
    let r = f.glob(json!({"pattern": "*.rs"})).await;
    assert_eq!(
        paths(&r),
        [
            "main.rs",
            "src/a/b/mod.rs",
            "src/a/mod.rs",
            "src/lib.rs",
            "tests/mod.rs"
        ]
    );
    let r = f.glob(json!({"pattern": "**/*.rs"})).await;
    assert_eq!(paths(&r).len(), 5);
    let r = f.glob(json!({"pattern": "src/*.rs"})).await;
    assert_eq!(paths(&r), ["src/lib.rs"]);
    let r = f.glob(json!({"pattern": "src/**/mod.rs"})).await;
    assert_eq!(paths(&r), ["src/a/b/mod.rs", "src/a/mod.rs"]);
    let r = f.glob(json!({"pattern": "*.rs", "path": "src/a"})).await;
    assert_eq!(paths(&r), ["src/a/b/mod.rs", "src/a/mod.rs"]);
    let r = f.glob(json!({"pattern": "b/*.rs", "path": "src/a"})).await;
    assert_eq!(paths(&r), ["src/a/b/mod.rs"]);
    let r = f.glob(json!({"pattern": "*.{md,toml}"})).await;
    assert_eq!(paths(&r), ["README.md"]);
    let r = f.glob(json!({"pattern": "*.go"})).await;
    assert!(ok(&r).starts_with("No files match"));
    let r = f.glob(json!({"pattern": "src/[", "path": "."})).await;
    assert_eq!(err_kind(&r), "invalid_arguments");
}

#[tokio::test]
async fn glob_lists_newest_first_and_caps_with_a_count() {
    let f = Fixture::new();
    write(f.root(), "old.rs", "");
    write(f.root(), "new.rs", "");
    write(f.root(), "mid.rs", "");
    set_mtime(f.root(), "old.rs", 3000);
    set_mtime(f.root(), "mid.rs", 2000);
    set_mtime(f.root(), "new.rs", 1000);
    let r = f.glob(json!({"pattern": "*.rs"})).await;
    assert_eq!(ok(&r), "new.rs\nmid.rs\nold.rs\n");

    let g = Fixture::new();
    for i in 0..130 {
        write(g.root(), &format!("d/f{i:03}.txt"), "");
        set_mtime(g.root(), &format!("d/f{i:03}.txt"), 10_000 - i);
    }
    let r = g.glob(json!({"pattern": "**/*.txt"})).await;
    let out = ok(&r);
    assert_eq!(out.lines().filter(|l| l.starts_with("d/")).count(), 100);
    assert!(out.starts_with("d/f129.txt\n"), "newest first: {out}");
    assert!(out.contains("30 more files match (130 in all); narrow the pattern"));
    let data = r.data.unwrap();
    assert_eq!(data["total"], 130);
    assert_eq!(data["truncated"], true);
}

#[tokio::test]
async fn glob_honours_gitignore_and_hidden_and_returns_files_only() {
    let f = Fixture::new();
    write(f.root(), ".gitignore", "gen/\n");
    write(f.root(), "gen/x.yml", "");
    write(f.root(), ".github/workflows/ci.yml", "");
    write(f.root(), "conf/a.yml", "");
    fs::create_dir_all(f.root().join("dir.yml")).unwrap();
    let r = f.glob(json!({"pattern": "**/*.yml"})).await;
    assert_eq!(
        ok(&r),
        "conf/a.yml\n[1 hidden file would also match: .github/workflows/ci.yml; pass hidden: \
         true to include them]\n"
    );
    let r = f.glob(json!({"pattern": ".github/**/*.yml"})).await;
    assert_eq!(ok(&r), ".github/workflows/ci.yml\n");
}

#[tokio::test]
async fn glob_path_must_be_an_existing_directory() {
    let f = Fixture::new();
    write(f.root(), "a.rs", "");
    let r = f.glob(json!({"pattern": "*.rs", "path": "a.rs"})).await;
    assert_eq!(err_kind(&r), "invalid_arguments");
    let r = f.glob(json!({"pattern": "*.rs", "path": "nope"})).await;
    assert_eq!(err_kind(&r), "file_not_found");
}

#[tokio::test]
async fn list_directory_shows_two_levels_dirs_first_with_sizes() {
    let f = Fixture::new();
    write(f.root(), "Cargo.toml", &"x".repeat(2048));
    write(f.root(), "a.txt", "hello");
    write(f.root(), "src/main.rs", "fn main() {}\n");
    write(f.root(), "src/deep/er/file.rs", "");
    write(f.root(), ".github/ci.yml", "");
    write(f.root(), ".gitignore", "secret-build/\n");
    write(f.root(), "secret-build/x", "");
    write(f.root(), "node_modules/m/index.js", "");
    write(f.root(), "__pycache__/c.pyc", "");
    write(f.root(), ".git/HEAD", "");
    let r = f.list(json!({})).await;
    let out = ok(&r);
    let expected = "./\n\
├── .github/\n\
│   └── ci.yml (0 B)\n\
├── src/\n\
│   ├── deep/\n\
│   └── main.rs (13 B)\n\
├── .gitignore (14 B)\n\
├── Cargo.toml (2.0 KB)\n\
└── a.txt (5 B)\n";
    assert_eq!(out, expected);
    let data = r.data.unwrap();
    assert_eq!(data["total"], 8);
    assert_eq!(data["shown"], 8);
}

#[tokio::test]
async fn list_directory_caps_fairly_and_counts_the_rest() {
    let f = Fixture::new();
    for d in ["a", "b", "c"] {
        for i in 0..400 {
            write(f.root(), &format!("{d}/f{i:03}"), "");
        }
    }
    write(f.root(), "small/one", "");
    let r = f.list(json!({"path": "."})).await;
    let out = ok(&r);
    let data = r.data.as_ref().unwrap();
    assert_eq!(data["total"], 4 + 1200 + 1);
    assert_eq!(data["shown"], 500);
    assert_eq!(data["omitted"], 1205 - 500);
    assert_eq!(data["truncated"], true);
    // 4 top-level entries, `small/one`, and the rest shared evenly by a, b, c.
    assert!(out.contains("└── … 235 more"), "{out}");
    assert!(out.contains("small/\n    └── one (0 B)") || out.contains("small/\n│   └── one"));
    assert!(out.contains("[500 of 1205 entries shown; list a subdirectory to see more]"));
}

#[tokio::test]
async fn list_directory_refuses_files_and_missing_paths() {
    let f = Fixture::new();
    write(f.root(), "a.txt", "x");
    let r = f.list(json!({"path": "a.txt"})).await;
    assert_eq!(err_kind(&r), "invalid_arguments");
    assert!(r.output.contains("is a file"), "{}", r.output);
    let r = f.list(json!({"path": "missing"})).await;
    assert_eq!(err_kind(&r), "file_not_found");
    let r = f.list(json!({"path": ".", "depth": 3})).await;
    assert_eq!(err_kind(&r), "invalid_arguments");
}

#[tokio::test]
async fn list_files_is_flat_or_recursive_with_seed_003_shape() {
    let f = Fixture::new();
    write(f.root(), "Cargo.toml", "12345");
    write(f.root(), "src/main.rs", "fn main() {}");
    write(f.root(), "src/a/b/c.rs", "");
    let r = f.list_files(json!({})).await;
    let data = r.data.clone().unwrap();
    assert_eq!(
        data["files"],
        json!([
            {"path": "Cargo.toml", "size": 5, "is_dir": false},
            {"path": "src", "size": 0, "is_dir": true},
        ])
    );
    let r = f
        .list_files(json!({"path": "src", "recursive": true, "max_depth": 2}))
        .await;
    let files: Vec<String> = r.data.unwrap()["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(files, ["src/a", "src/a/b", "src/main.rs"]);
}

#[tokio::test]
async fn glob_names_the_hidden_files_that_would_match_and_includes_them_on_request() {
    let f = Fixture::new();
    write(f.root(), ".github/workflows/ci.yml", "");
    write(f.root(), ".hidden.yml", "");
    write(f.root(), ".gitignore", "");
    write(f.root(), "conf/a.yml", "");
    write(f.root(), ".git/x.yml", "");
    write(f.root(), "node_modules/m.yml", "");
    let r = f.glob(json!({"pattern": "*.yml"})).await;
    // The two hidden files that match are named; `.gitignore` does not match `*.yml`, and
    // `.git` is never searched.
    assert_eq!(
        ok(&r),
        "conf/a.yml\n[2 hidden files would also match: .github/workflows/ci.yml, .hidden.yml; \
         pass hidden: true to include them]\n"
    );
    assert_eq!(r.data.as_ref().unwrap()["hidden_skipped"], 2);
    assert_eq!(
        r.data.as_ref().unwrap()["hidden_matching"],
        json!([".github/workflows/ci.yml", ".hidden.yml"])
    );
    let r = f.glob(json!({"pattern": "*.yml", "hidden": true})).await;
    let mut paths: Vec<&str> = ok(&r).lines().collect();
    paths.sort();
    assert_eq!(
        paths,
        [".github/workflows/ci.yml", ".hidden.yml", "conf/a.yml"]
    );
    assert_eq!(r.data.as_ref().unwrap()["hidden_skipped"], 0);
    // Nothing visible matches: the note says which hidden file does.
    let r = f.glob(json!({"pattern": "ci.yml"})).await;
    assert_eq!(
        ok(&r),
        "No files match `ci.yml` in the workspace root.\n\
         [1 hidden file would also match: .github/workflows/ci.yml; pass hidden: true to include them]\n"
    );
    // Hidden files and directories that hold no match are not mentioned at all.
    let r = f.glob(json!({"pattern": "*.toml"})).await;
    assert_eq!(ok(&r), "No files match `*.toml` in the workspace root.\n");
    assert_eq!(r.data.as_ref().unwrap()["hidden_skipped"], 0);
}

#[tokio::test]
async fn grep_names_the_hidden_files_that_would_match_and_includes_them_on_request() {
    let f = Fixture::new();
    write(f.root(), ".github/workflows/ci.yml", "needle\n");
    write(f.root(), ".env", "needle\n");
    write(f.root(), ".cargo-ok", "ok\n");
    write(f.root(), ".gitignore", "target\n");
    write(f.root(), "kept.txt", "needle\n");
    write(f.root(), ".git/config", "needle\n");
    write(f.root(), "node_modules/m.js", "needle\n");
    let r = f.grep(json!({"pattern": "needle"})).await;
    assert_eq!(
        ok(&r),
        "kept.txt:1:needle\n[2 hidden files would also match: .env, .github/workflows/ci.yml; \
         pass hidden: true to include them]\n"
    );
    assert_eq!(r.data.as_ref().unwrap()["hidden_skipped"], 2);
    let r = f.grep(json!({"pattern": "needle", "hidden": true})).await;
    assert_eq!(
        ok(&r),
        ".env:1:needle\n.github/workflows/ci.yml:1:needle\nkept.txt:1:needle\n"
    );
    assert_eq!(r.data.as_ref().unwrap()["hidden_skipped"], 0);
    // No hidden file the file pattern accepts holds a match: nothing to say.
    let r = f
        .grep(json!({"pattern": "needle", "file_pattern": "*.txt"}))
        .await;
    assert_eq!(ok(&r), "kept.txt:1:needle\n");
    // Hidden files exist (.cargo-ok, .gitignore), but none holds a match: no note, even for
    // a search that found nothing.
    let r = f.grep(json!({"pattern": "absent"})).await;
    assert_eq!(
        ok(&r),
        "No matches for `absent` in the workspace root (1 files searched).\n"
    );
    // Only hidden files match: the empty answer names them.
    let r = f.grep(json!({"pattern": "^ok$"})).await;
    assert!(
        ok(&r).ends_with(
            "[1 hidden file would also match: .cargo-ok; pass hidden: true to include them]\n"
        ),
        "{}",
        r.output
    );
}

#[tokio::test]
async fn the_hidden_note_names_a_few_then_counts_the_rest() {
    let f = Fixture::new();
    for i in 0..9 {
        write(f.root(), &format!(".cache/f{i}.txt"), "needle\n");
    }
    let r = f.grep(json!({"pattern": "needle"})).await;
    assert_eq!(
        ok(&r),
        "No matches for `needle` in the workspace root (0 files searched).\n\
         [9 hidden files would also match: .cache/f0.txt, .cache/f1.txt, .cache/f2.txt, \
         .cache/f3.txt, .cache/f4.txt and 4 more; pass hidden: true to include them]\n"
    );
}

#[tokio::test]
async fn an_overflowing_grep_says_which_files_hold_how_many_matches() {
    let f = Fixture::new();
    // LICENSE comes first by path and takes the whole line budget; src/ holds fewer matches.
    write(f.root(), "LICENSE", &"e license\n".repeat(300));
    write(f.root(), "src/a.rs", &"e a\n".repeat(40));
    write(f.root(), "src/b.rs", &"e b\n".repeat(40));
    for i in 0..12 {
        write(f.root(), &format!("src/m{i:02}.rs"), &"e m\n".repeat(i + 1));
    }
    let r = f.grep(json!({"pattern": "e"})).await;
    let out = ok(&r);
    let total = 300 + 40 + 40 + (1..=12).sum::<usize>();
    assert!(
        out.contains(&format!(
            "({total} matches in 15 files in all); narrow the pattern or path, use file_pattern \
             or type, or raise head_limit]\n"
        )),
        "{out}"
    );
    // The ten files with the most matches, most first (ties by path), then the rest summed.
    let table = "[matching lines per file, most first:\n  LICENSE: 300\n  src/a.rs: 40\n  \
                 src/b.rs: 40\n  src/m11.rs: 12\n  src/m10.rs: 11\n  src/m09.rs: 10\n  \
                 src/m08.rs: 9\n  src/m07.rs: 8\n  src/m06.rs: 7\n  src/m05.rs: 6\n  \
                 5 other files: 15]\n";
    assert!(out.ends_with(table), "{out}");
    let top = &r.data.as_ref().unwrap()["top_files"];
    assert_eq!(top[0], json!({"path": "LICENSE", "matches": 300}));
    // The same table when only files are listed and some are left out.
    let r = f
        .grep(json!({"pattern": "e", "output_mode": "count", "head_limit": 3}))
        .await;
    assert!(ok(&r).ends_with(table), "{}", r.output);
    // Everything shown: no table.
    let r = f.grep(json!({"pattern": "e", "path": "src/m00.rs"})).await;
    assert!(!ok(&r).contains("per file"), "{}", r.output);
}

#[tokio::test]
async fn empty_results_name_the_directory_plainly() {
    let f = Fixture::new();
    write(f.root(), "src/a/x.txt", "hay\n");
    fs::create_dir_all(f.root().join("empty/dir")).unwrap();
    fs::create_dir_all(f.root().join("bare")).unwrap();
    let r = f.glob(json!({"pattern": "*.go"})).await;
    assert_eq!(ok(&r), "No files match `*.go` in the workspace root.\n");
    let r = f.glob(json!({"pattern": "*.go", "path": "src/a"})).await;
    assert_eq!(ok(&r), "No files match `*.go` in src/a.\n");
    let r = f.grep(json!({"pattern": "needle"})).await;
    assert_eq!(
        ok(&r),
        "No matches for `needle` in the workspace root (1 files searched).\n"
    );
    let r = f
        .grep(json!({"pattern": "needle", "path": "src/a", "file_pattern": "*.txt"}))
        .await;
    assert_eq!(
        ok(&r),
        "No matches for `needle` in src/a (files matching `*.txt`) (1 files searched).\n"
    );
    let r = f.list(json!({"path": "bare"})).await;
    assert_eq!(ok(&r), "bare is empty (or holds only ignored entries).\n");
    let g = Fixture::new();
    let r = g.list(json!({})).await;
    assert_eq!(
        ok(&r),
        "The workspace root is empty (or holds only ignored entries).\n"
    );
}

#[tokio::test]
async fn search_data_carries_counts_and_paths_not_the_output_again() {
    let f = Fixture::new();
    write(
        f.root(),
        "a.txt",
        "the needle line one\nthe needle line two\n",
    );
    write(f.root(), "b.txt", "another needle line\n");
    write(f.root(), "src/c.rs", "");
    let r = f.grep(json!({"pattern": "needle"})).await;
    let data = r.data.clone().unwrap();
    let text = data.to_string();
    assert!(
        !text.contains("needle line"),
        "grep data repeats the lines: {text}"
    );
    assert_eq!(
        data["files"],
        json!([{"path": "a.txt", "matches": 2}, {"path": "b.txt", "matches": 1}])
    );
    assert_eq!(data["total_matches"], 3);
    assert_eq!(data["truncated"], false);

    let r = f.glob(json!({"pattern": "*.txt"})).await;
    let data = r.data.clone().unwrap();
    assert!(
        data.get("files").is_none(),
        "glob data lists paths twice: {data}"
    );
    assert_eq!(data["paths"].as_array().unwrap().len(), 2);
    assert_eq!(data["total"], 2);

    let r = f.list(json!({})).await;
    let data = r.data.clone().unwrap();
    assert!(
        data.get("entries").is_none(),
        "list data repeats the tree: {data}"
    );
    assert_eq!(data["total"], 4);
    assert_eq!(data["shown"], 4);
    assert_eq!(data["omitted"], 0);
    assert_eq!(data["truncated"], false);
}

#[tokio::test]
async fn list_directory_follows_ignore_files_as_they_change() {
    // The rules are cached per directory: every change to an ignore file must still show.
    let f = Fixture::new();
    write(f.root(), "src/keep.rs", "k");
    write(f.root(), "src/gen.rs", "g");
    write(f.root(), "src/deep/out.log", "o");
    let listed = |r: &ToolResult| ok(r).to_string();
    let first = listed(&f.list(json!({"path": "src"})).await);
    assert!(
        first.contains("gen.rs") && first.contains("out.log"),
        "{first}"
    );

    // A new .gitignore in the listed directory.
    write(f.root(), "src/.gitignore", "gen.rs\n");
    let second = listed(&f.list(json!({"path": "src"})).await);
    assert!(
        !second.contains("gen.rs") && second.contains("keep.rs"),
        "{second}"
    );

    // Its content changes (the directory's own entries do not).
    write(f.root(), "src/.gitignore", "*.log\n");
    let third = listed(&f.list(json!({"path": "src"})).await);
    assert!(
        third.contains("gen.rs") && !third.contains("out.log"),
        "{third}"
    );

    // An ancestor's .ignore, created after the first listing, applies below it, and a
    // whitelist in a deeper .gitignore cannot override a .ignore rule (as in ripgrep).
    write(f.root(), ".ignore", "keep.rs\n");
    write(f.root(), "src/.gitignore", "!keep.rs\n");
    let fourth = listed(&f.list(json!({"path": "src"})).await);
    assert!(!fourth.contains("keep.rs"), "{fourth}");

    // Removed again: everything is back.
    fs::remove_file(f.root().join(".ignore")).unwrap();
    fs::remove_file(f.root().join("src/.gitignore")).unwrap();
    let fifth = listed(&f.list(json!({"path": "src"})).await);
    for name in ["keep.rs", "gen.rs", "out.log"] {
        assert!(fifth.contains(name), "{name} missing: {fifth}");
    }
}

#[tokio::test]
async fn list_directory_never_descends_a_directory_swapped_for_a_symlink() {
    let f = Fixture::new();
    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), "secret.txt", "s");
    write(f.root(), "sub/inner.txt", "i");
    std::os::unix::fs::symlink(outside.path(), f.root().join("link")).unwrap();
    let out = ok(&f.list(json!({})).await).to_string();
    assert!(out.contains("link@"), "{out}");
    assert!(!out.contains("secret.txt"), "{out}");
    // Swapped between listings: the walk must not follow it either.
    fs::remove_dir_all(f.root().join("sub")).unwrap();
    std::os::unix::fs::symlink(outside.path(), f.root().join("sub")).unwrap();
    let out = ok(&f.list(json!({})).await).to_string();
    assert!(out.contains("sub@") && !out.contains("secret.txt"), "{out}");
}
