//! Adversarial paths against every file tool: traversal, absolute paths, symlinks to outside,
//! symlink chains, dangling symlinks, NUL bytes, and a symlink swapped in while calls run.
//! The property: zero escapes — no secret from outside ever appears in any output, and
//! nothing outside the workspace is created or changed.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};
use toolyard_dispatch::{CallRequest, Dispatcher, DispatcherConfig};

const SECRET: &str = "TOP-SECRET-OUTSIDE-7f3a";
const FILE_TOOLS: [&str; 6] = [
    "read_file",
    "write_file",
    "edit_file",
    "list_directory",
    "glob",
    "grep",
];

struct Fixture {
    _tmp: tempfile::TempDir,
    base: PathBuf,
    ws: PathBuf,
    outside: PathBuf,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().canonicalize().unwrap();
    let ws = base.join("ws");
    let outside = base.join("outside");
    let evil = base.join("ws-evil");
    for d in [&ws, &outside, &outside.join("dir"), &evil, &ws.join("sub")] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(outside.join("secret.txt"), format!("{SECRET}\n")).unwrap();
    std::fs::write(outside.join("dir/secret2.txt"), format!("{SECRET}\n")).unwrap();
    std::fs::write(evil.join("secret.txt"), format!("{SECRET}\n")).unwrap();
    std::fs::write(ws.join("inside.txt"), "inside\n").unwrap();
    std::fs::write(ws.join("sub/file.txt"), "sub file\n").unwrap();
    symlink("../outside/secret.txt", ws.join("link_out_file")).unwrap();
    symlink(outside.join("secret.txt"), ws.join("link_out_abs")).unwrap();
    symlink("../outside", ws.join("link_out_dir")).unwrap();
    symlink(&outside, ws.join("link_dir_abs")).unwrap();
    symlink("chain2", ws.join("chain1")).unwrap();
    symlink("sub/chain3", ws.join("chain2")).unwrap();
    symlink("../../outside/secret.txt", ws.join("sub/chain3")).unwrap();
    symlink("../outside/newfile", ws.join("dangling_out")).unwrap();
    symlink(outside.join("new_abs"), ws.join("dangling_abs")).unwrap();
    symlink("loop2", ws.join("loop1")).unwrap();
    symlink("loop1", ws.join("loop2")).unwrap();
    symlink("../..", ws.join("sub/up")).unwrap();
    symlink("/proc/self/root/etc/passwd", ws.join("proc_link")).unwrap();
    symlink("/", ws.join("root_link")).unwrap();
    symlink("inside.txt", ws.join("link_in")).unwrap();
    Fixture {
        _tmp: tmp,
        base,
        ws,
        outside,
    }
}

/// Every file under `dir` with its content, to prove nothing outside changed.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                stack.push(p);
            } else {
                out.push((p.clone(), std::fs::read(&p).unwrap_or_default()));
            }
        }
    }
    out.sort();
    out
}

fn attack_paths(f: &Fixture) -> Vec<String> {
    let o = f.outside.display().to_string();
    let b = f.base.display().to_string();
    let w = f.ws.display().to_string();
    let mut v: Vec<String> = [
        "../outside/secret.txt",
        "../../../../../../etc/passwd",
        "..",
        "../",
        "./../outside/secret.txt",
        "sub/../../outside/secret.txt",
        "sub/./../.././outside/dir/secret2.txt",
        "/etc/passwd",
        "/etc/shadow",
        "//etc/passwd",
        "/../etc/passwd",
        "/proc/self/root/etc/passwd",
        "/proc/self/cwd/../outside/secret.txt",
        "link_out_file",
        "link_out_abs",
        "link_out_dir/secret.txt",
        "link_out_dir/dir/secret2.txt",
        "link_out_dir",
        "link_dir_abs/secret.txt",
        "link_dir_abs",
        "chain1",
        "chain2",
        "sub/chain3",
        "dangling_out",
        "dangling_abs",
        "loop1",
        "sub/up/outside/secret.txt",
        "sub/up",
        "proc_link",
        "root_link/etc/passwd",
        "root_link",
        "inside.txt\0/../../outside/secret.txt",
        "a\0b",
        "\0",
        "link_out_dir/../outside/secret.txt",
        "sub/up/ws-evil/secret.txt",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.extend([
        format!("{o}/secret.txt"),
        format!("{o}/dir"),
        format!("{b}/ws-evil/secret.txt"),
        format!("{w}-evil/secret.txt"),
        format!("{w}/../outside/secret.txt"),
        format!("{w}/sub/../../outside/secret.txt"),
        format!("{w}/link_out_abs"),
        "../".repeat(64) + "etc/passwd",
    ]);
    v
}

fn args_for(tool: &str, path: &str) -> Value {
    match tool {
        "read_file" => json!({"path": path}),
        "write_file" => json!({"path": path, "content": "PWNED"}),
        "edit_file" => json!({"path": path, "old_string": SECRET, "new_string": "PWNED"}),
        "list_directory" => json!({"path": path}),
        "glob" => json!({"pattern": "**/*", "path": path}),
        "grep" => json!({"pattern": "SECRET", "path": path}),
        _ => unreachable!(),
    }
}

fn dispatcher(ws: &Path) -> Dispatcher {
    let mut config = DispatcherConfig::new(ws);
    // Beside the workspace, inside the fixture's temp dir: never the user's state directory.
    config.state_dir = ws.parent().map(|base| base.join("state"));
    Dispatcher::new(config).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_file_tool_escapes_the_workspace() {
    let f = fixture();
    let d = dispatcher(&f.ws);
    for tool in FILE_TOOLS {
        assert!(d.tool_names().contains(&tool), "{tool} is served");
    }
    let outside_before = snapshot(&f.outside);
    let evil_before = snapshot(&f.base.join("ws-evil"));
    let paths = attack_paths(&f);
    assert!(paths.len() >= 40, "{} attack paths", paths.len());
    let mut refused = 0;
    for tool in FILE_TOOLS {
        for path in &paths {
            // Read first in the same session, so write/edit are not stopped by the ledger alone.
            let _ = d
                .call(CallRequest::new("adv", "read_file", json!({"path": path})))
                .await;
            let r = d
                .call(CallRequest::new("adv", tool, args_for(tool, path)))
                .await;
            let text = serde_json::to_string(&r).unwrap();
            assert!(
                !text.contains(SECRET),
                "{tool} {path:?} leaked the secret: {text}"
            );
            if !r.success {
                refused += 1;
            }
        }
    }
    assert_eq!(snapshot(&f.outside), outside_before, "outside changed");
    assert_eq!(
        snapshot(&f.base.join("ws-evil")),
        evil_before,
        "sibling changed"
    );
    assert!(!f.outside.join("newfile").exists());
    assert!(!f.outside.join("new_abs").exists());
    assert!(
        refused > 150,
        "most attacks are refused outright ({refused})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escapes_are_reported_as_path_outside_workspace() {
    let f = fixture();
    let d = dispatcher(&f.ws);
    for path in [
        "../outside/secret.txt",
        "/etc/passwd",
        "link_out_file",
        "link_out_abs",
        "chain1",
        "link_out_dir/secret.txt",
        "a\0b",
    ] {
        let r = d
            .call(CallRequest::new("s", "read_file", json!({"path": path})))
            .await;
        assert_eq!(
            r.error_kind.as_deref(),
            Some("path_outside_workspace"),
            "{path:?}: {}",
            r.output
        );
    }
    let r = d
        .call(CallRequest::new(
            "s",
            "write_file",
            json!({"path": "dangling_out", "content": "x"}),
        ))
        .await;
    assert_eq!(
        r.error_kind.as_deref(),
        Some("path_outside_workspace"),
        "{}",
        r.output
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlinks_that_stay_inside_work() {
    let f = fixture();
    let d = dispatcher(&f.ws);
    std::os::unix::fs::symlink(f.ws.join("inside.txt"), f.ws.join("abs_in")).unwrap();
    for path in ["link_in", "abs_in"] {
        let r = d
            .call(CallRequest::new("s", "read_file", json!({"path": path})))
            .await;
        assert!(r.success, "{path}: {}", r.output);
        assert!(r.output.contains("inside"), "{}", r.output);
    }
    let r = d
        .call(CallRequest::new(
            "s",
            "edit_file",
            json!({"path": "link_in", "old_string": "inside", "new_string": "changed"}),
        ))
        .await;
    assert!(r.success, "{}", r.output);
    assert_eq!(
        std::fs::read_to_string(f.ws.join("inside.txt")).unwrap(),
        "changed\n"
    );
    assert!(
        std::fs::symlink_metadata(f.ws.join("link_in"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlink_swapped_in_during_calls_never_escapes() {
    let f = fixture();
    std::fs::write(f.outside.join("target.txt"), format!("{SECRET}\n")).unwrap();
    let d = Arc::new(dispatcher(&f.ws));
    let swap = f.ws.join("swap");
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (swap, outside, stop) = (swap.clone(), f.outside.clone(), stop.clone());
        std::thread::spawn(move || {
            let real = swap.with_extension("real");
            while !stop.load(Ordering::Relaxed) {
                let _ = std::fs::create_dir_all(&real);
                let _ = std::fs::write(real.join("target.txt"), "harmless\n");
                let _ = std::fs::rename(&real, &swap);
                let _ = std::fs::remove_dir_all(&swap);
                let tmp = swap.with_extension("lnk");
                let _ = std::os::unix::fs::symlink(&outside, &tmp);
                let _ = std::fs::rename(&tmp, &swap);
                let _ = std::fs::remove_file(&swap);
            }
        })
    };
    let before = snapshot(&f.outside);
    for i in 0..300 {
        let tool = FILE_TOOLS[i % FILE_TOOLS.len()];
        let path = if matches!(tool, "list_directory" | "glob" | "grep") {
            "swap"
        } else {
            "swap/target.txt"
        };
        let _ = d
            .call(CallRequest::new("race", "read_file", json!({"path": path})))
            .await;
        let r = d
            .call(CallRequest::new("race", tool, args_for(tool, path)))
            .await;
        let text = serde_json::to_string(&r).unwrap();
        assert!(
            !text.contains(SECRET),
            "{tool} leaked during a swap: {text}"
        );
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    assert_eq!(
        snapshot(&f.outside),
        before,
        "outside changed during the race"
    );
}
