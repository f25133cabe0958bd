//! Adversarial paths against the search tools: escapes are refused, symlinks to outside are
//! never followed, and a directory swapped for a symlink while a search runs never leaks what
//! lies outside (neither file contents nor file names).

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use toolyard_core::{Catalog, Tool, ToolContext, ToolResult, Typed};
use toolyard_tools::ToolEnv;
use toolyard_tools::search::{GlobTool, GrepTool, ListDirectoryTool, ListFilesTool};

/// Appears in the outside files' names and contents; must never appear in any output.
const SECRET: &str = "TOPSECRET4242";

struct Fixture {
    _tmp: tempfile::TempDir,
    ws: PathBuf,
    outside: PathBuf,
    env: Arc<ToolEnv>,
}

impl Fixture {
    /// A workspace with ordinary files, and beside it an `outside` directory holding secrets.
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        let outside = tmp.path().join("outside");
        fs::create_dir_all(ws.join("src")).unwrap();
        fs::write(ws.join("src/ok.txt"), "needle harmless\n").unwrap();
        fs::create_dir_all(outside.join("sub")).unwrap();
        for p in [
            format!("{SECRET}.txt"),
            format!("sub/{SECRET}.txt"),
            "sub/file.txt".to_string(),
            "file.txt".to_string(),
        ] {
            fs::write(outside.join(p), format!("needle {SECRET}\n")).unwrap();
        }
        let state = tmp.path().join("state");
        let env =
            Arc::new(ToolEnv::open_with_state(&ws, Catalog::builtin(), Some(&state)).unwrap());
        let ws = env.workspace.root().to_path_buf();
        Self {
            _tmp: tmp,
            ws,
            outside,
            env,
        }
    }

    fn tools(&self) -> Vec<(&'static str, Arc<dyn Tool>)> {
        vec![
            ("grep", Arc::new(Typed(GrepTool::new(self.env.clone())))),
            ("glob", Arc::new(Typed(GlobTool::new(self.env.clone())))),
            (
                "list_directory",
                Arc::new(Typed(ListDirectoryTool::new(self.env.clone()))),
            ),
            (
                "list_files",
                Arc::new(Typed(ListFilesTool::new(self.env.clone()))),
            ),
        ]
    }

    fn ctx(&self) -> ToolContext {
        ToolContext::new(&self.ws, "adversarial")
    }
}

/// Arguments for `tool` searching `path` for the needle / every text file.
fn args_for(tool: &str, path: &str) -> Value {
    match tool {
        "grep" => json!({"pattern": "needle", "path": path}),
        "glob" => json!({"pattern": "**/*.txt", "path": path}),
        "list_files" => json!({"path": path, "recursive": true}),
        _ => json!({"path": path}),
    }
}

async fn call(tool: &Arc<dyn Tool>, args: Value, ctx: &ToolContext) -> ToolResult {
    ToolResult::from(tool.invoke(args, ctx).await)
}

fn assert_clean(what: &str, r: &ToolResult) {
    let all = r.to_json();
    assert!(!all.contains(SECRET), "{what} leaked the secret: {all}");
}

#[tokio::test]
async fn escaping_paths_are_refused_by_every_search_tool() {
    let f = Fixture::new();
    symlink(&f.outside, f.ws.join("out-dir")).unwrap();
    symlink(f.outside.join("file.txt"), f.ws.join("out-file")).unwrap();
    symlink("../outside", f.ws.join("rel-out")).unwrap();
    symlink("rel-out", f.ws.join("chain")).unwrap();
    let outside = f.outside.to_string_lossy().into_owned();
    let escapes = [
        "..",
        "../",
        "../outside",
        "/etc",
        "/",
        "src/../..",
        "src/../../outside",
        "./../outside/sub",
        outside.as_str(),
        "out-dir",
        "out-dir/sub",
        "out-file",
        "rel-out",
        "chain",
        "chain/sub",
        "src\0x",
    ];
    let ctx = f.ctx();
    for (name, tool) in f.tools() {
        for path in escapes {
            let r = call(&tool, args_for(name, path), &ctx).await;
            assert!(!r.success, "{name} {path:?} was allowed: {}", r.output);
            assert_eq!(
                r.error_kind.as_deref(),
                Some("path_outside_workspace"),
                "{name} {path:?}: {}",
                r.output
            );
            assert_clean(name, &r);
        }
        // The same tool works on an absolute path inside.
        let inside = f.ws.join("src");
        let r = call(&tool, args_for(name, inside.to_str().unwrap()), &ctx).await;
        assert!(r.success, "{name} inside: {}", r.output);
    }
}

#[tokio::test]
async fn symlinks_to_outside_are_never_followed_during_a_walk() {
    let f = Fixture::new();
    symlink(&f.outside, f.ws.join("src/out-dir")).unwrap();
    symlink(f.outside.join("file.txt"), f.ws.join("src/out-file.txt")).unwrap();
    symlink("../../outside/sub", f.ws.join("src/rel-out")).unwrap();
    let ctx = f.ctx();
    for (name, tool) in f.tools() {
        for path in [".", "src"] {
            let r = call(&tool, args_for(name, path), &ctx).await;
            assert!(r.success, "{name} {path}: {}", r.output);
            assert_clean(&format!("{name} {path}"), &r);
        }
    }
    // grep finds the inside needle only.
    let grep = Typed(GrepTool::new(f.env.clone()));
    let r = call_typed(&grep, json!({"pattern": "needle"}), &ctx).await;
    assert_eq!(r.output, "src/ok.txt:1:needle harmless\n");
    // Patterns cannot reach outside either.
    let glob = Typed(GlobTool::new(f.env.clone()));
    for pattern in ["../outside/*", "../**", "src/../../outside/*.txt"] {
        let r = call_typed(&glob, json!({"pattern": pattern}), &ctx).await;
        assert_eq!(
            r.error_kind.as_deref(),
            Some("invalid_arguments"),
            "{pattern}"
        );
    }
    let pattern = format!("{}/*", f.outside.display());
    let r = call_typed(&glob, json!({"pattern": pattern}), &ctx).await;
    assert_eq!(r.error_kind.as_deref(), Some("path_outside_workspace"));
    let r = call_typed(
        &grep,
        json!({"pattern": "needle", "file_pattern": "../outside/*"}),
        &ctx,
    )
    .await;
    assert_eq!(r.error_kind.as_deref(), Some("invalid_arguments"));
    // A symlink that stays inside is listed as a link, not followed.
    symlink("ok.txt", f.ws.join("src/in-link.txt")).unwrap();
    let list = Typed(ListDirectoryTool::new(f.env.clone()));
    let r = call_typed(&list, json!({"path": "src"}), &ctx).await;
    assert!(r.output.contains("in-link.txt@"), "{}", r.output);
    assert!(r.output.contains("out-dir@"), "{}", r.output);
}

async fn call_typed<T: toolyard_core::TypedTool>(
    tool: &Typed<T>,
    args: Value,
    ctx: &ToolContext,
) -> ToolResult {
    ToolResult::from(tool.invoke(args, ctx).await)
}

/// Swap `ws/dir` between a real directory and a symlink to `outside` until told to stop.
fn swapper(ws: &Path, outside: &Path, stop: &AtomicBool) {
    let dir = ws.join("dir");
    let aside = ws.join(".aside");
    while !stop.load(Ordering::Relaxed) {
        if fs::rename(&dir, &aside).is_err() {
            continue;
        }
        let _ = symlink(outside, &dir);
        // Hold each state long enough for walks to list one and open the other.
        std::thread::sleep(Duration::from_micros(150));
        let _ = fs::remove_file(&dir);
        let _ = fs::rename(&aside, &dir);
        std::thread::sleep(Duration::from_micros(150));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_swapped_for_a_symlink_mid_search_never_leaks() {
    let f = Fixture::new();
    // Inside: the same names as outside, harmless content, so every walk has work to do there.
    fs::create_dir_all(f.ws.join("dir/sub")).unwrap();
    for p in ["dir/file.txt", "dir/sub/file.txt"] {
        fs::write(f.ws.join(p), "needle harmless\n").unwrap();
    }
    for i in 0..40 {
        fs::write(f.ws.join(format!("dir/sub/f{i}.txt")), "needle harmless\n").unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let handle = {
        let (ws, outside, stop) = (f.ws.clone(), f.outside.clone(), stop.clone());
        std::thread::spawn(move || swapper(&ws, &outside, &stop))
    };
    let ctx = f.ctx();
    let tools = f.tools();
    let mut successes = 0;
    for round in 0..150 {
        for (name, tool) in &tools {
            for path in [".", "dir", "dir/sub"] {
                let r = call(tool, args_for(name, path), &ctx).await;
                assert_clean(&format!("round {round}: {name} {path}"), &r);
                successes += usize::from(r.success);
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    handle.join().unwrap();
    assert!(successes > 0, "no search ever ran");
}
