//! What commands change, undone through the real binary: every command call's created,
//! changed and removed files, symlinks and directories are one journal group, undone to the
//! exact bytes, modes and links (with and without git, in the default, claude-code and codex
//! dialects), redone by undoing the undo, refused whole when a file changed since; background
//! processes piece by piece; what is out of scope named, never silently lost.
//!
//! Every test has its own workspace, TOOLYARD_STATE_DIR and HOME in a temp dir. With
//! `TOOLYARD_E2E_LINK=wrapper` the runners sit behind a command link (a script starting
//! `toolyard runner` on a directory of its own), as `scripts/test.sh` runs it.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod common;
mod mcp_client;
use common::toolyard_bin;
use mcp_client::Mcp;

/// How long a test waits for something that should happen soon (a failure bound only).
const PATIENCE: Duration = Duration::from_secs(60);

struct Env {
    t: tempfile::TempDir,
    /// The server's workspace (`-w`, the calls' cwd).
    ws: PathBuf,
    /// Where the files are: `ws`, or the runner's workspace behind a link.
    files: PathBuf,
    state: PathBuf,
    home: PathBuf,
    /// The catalog every call uses.
    catalog: PathBuf,
}

fn linked() -> bool {
    matches!(std::env::var("TOOLYARD_E2E_LINK").as_deref(), Ok("wrapper"))
}

/// A fresh workspace; `catalog` is laid over the built-in one (plus a `[remote]` section
/// when the runners are behind a link).
fn env(catalog: &str) -> Env {
    let t = tempfile::tempdir().unwrap();
    let base = t.path().canonicalize().unwrap();
    let (ws, state, home) = (base.join("ws"), base.join("state"), base.join("home"));
    for d in [&ws, &state, &home] {
        std::fs::create_dir_all(d).unwrap();
    }
    let mut text = catalog.to_string();
    let files = if linked() {
        let files = base.join("runner-ws");
        std::fs::create_dir_all(&files).unwrap();
        let wrapper = base.join("runner.sh");
        // The runner applies the scope of what is journaled: it gets the same settings.
        let runner_catalog = base.join("runner-catalog.toml");
        std::fs::write(&runner_catalog, catalog).unwrap();
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\nexec '{}' runner --lane \"$1\" --workspace '{}' --state-dir '{}' --catalog '{}'\n",
                toolyard_bin().display(),
                files.display(),
                base.join("runner-state").display(),
                runner_catalog.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
        text.push_str(&format!(
            "\n[remote]\ncommand = {}\n",
            json!([wrapper.display().to_string(), "{lane}"])
        ));
        files
    } else {
        ws.clone()
    };
    let catalog = base.join("catalog.toml");
    std::fs::write(&catalog, text).unwrap();
    Env {
        t,
        ws,
        files,
        state,
        home,
        catalog,
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

impl Env {
    fn command(&self) -> Command {
        let mut c = Command::new(toolyard_bin());
        c.current_dir(&self.ws)
            .env("TOOLYARD_STATE_DIR", &self.state)
            .env("HOME", &self.home)
            .env("TOOLYARD_CATALOG", &self.catalog)
            .env("RUST_BACKTRACE", "1");
        c
    }

    /// `toolyard call TOOL ARGS --json --dialect D`: the ToolResult.
    fn call(&self, dialect: &str, tool: &str, args: &Value) -> Value {
        let o = self
            .command()
            .args([
                "call",
                tool,
                &args.to_string(),
                "--json",
                "--dialect",
                dialect,
            ])
            .output()
            .expect("toolyard runs");
        serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{tool}: not JSON ({e}): {}", text(&o)))
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command().args(args).output().expect("toolyard runs")
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.files.join(rel)
    }

    /// Everything in the workspace but `.git`: kind, bytes or link target, mode.
    fn tree(&self) -> BTreeMap<String, (char, Vec<u8>, u32)> {
        let mut out = BTreeMap::new();
        walk(&self.files, &self.files, &mut out);
        out
    }
}

fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, (char, Vec<u8>, u32)>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        let rel = p.strip_prefix(root).unwrap().display().to_string();
        if rel == ".git" {
            continue;
        }
        let m = std::fs::symlink_metadata(&p).unwrap();
        let mode = m.permissions().mode() & 0o7777;
        if m.file_type().is_symlink() {
            let t = std::fs::read_link(&p).unwrap();
            out.insert(rel, ('l', t.as_os_str().as_encoded_bytes().to_vec(), 0));
        } else if m.is_dir() {
            out.insert(rel, ('d', Vec::new(), mode));
            walk(root, &p, out);
        } else {
            out.insert(rel, ('f', std::fs::read(&p).unwrap(), mode));
        }
    }
}

fn output(v: &Value) -> String {
    format!(
        "{}{}",
        v["output"].as_str().unwrap_or_default(),
        v["error"].as_str().unwrap_or_default()
    )
}

/// The change id a command result's last line names ("... undo with undo {"change_id": N}").
fn change_id(v: &Value) -> Option<i64> {
    let text = output(v);
    let at = text.rfind("undo with undo {\"change_id\": ")?;
    let rest = &text[at + "undo with undo {\"change_id\": ".len()..];
    rest[..rest.find('}')?].parse().ok()
}

/// The workspace every scenario starts from: text, binary, a symlink, a tree with links (one
/// absolute and dangling) and an empty directory.
fn seed(e: &Env) {
    let f = &e.files;
    std::fs::write(f.join("f.txt"), "hello\r\nworld\n").unwrap();
    std::fs::write(f.join("b.bin"), [0u8, 159, 146, 150, 0, 255, 10, 13]).unwrap();
    std::fs::set_permissions(f.join("b.bin"), std::fs::Permissions::from_mode(0o640)).unwrap();
    std::fs::create_dir_all(f.join("d/sub/empty")).unwrap();
    std::fs::write(f.join("d/a.txt"), "a\n").unwrap();
    std::fs::write(f.join("d/sub/s.sh"), "#!/bin/sh\necho s\n").unwrap();
    std::fs::set_permissions(f.join("d/sub/s.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("a.txt", f.join("d/rel-link")).unwrap();
    std::os::unix::fs::symlink("/nonexistent/abs", f.join("d/abs-link")).unwrap();
    std::os::unix::fs::symlink("../f.txt", f.join("d/sub/up-link")).unwrap();
    std::fs::set_permissions(f.join("d/sub"), std::fs::Permissions::from_mode(0o750)).unwrap();
}

fn git(dir: &Path, args: &[&str]) {
    let o = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git runs");
    assert!(o.status.success(), "git {args:?}: {}", text(&o));
}

/// The commands of the issue, each a separate call.
const SCENARIOS: &[(&str, &str)] = &[
    ("rm of a file", "rm f.txt"),
    (
        "rm -rf of a tree with symlinks and an empty dir",
        "rm -rf d",
    ),
    ("sed -i", "sed -i 's/hello/bye/' f.txt"),
    ("mv", "mv f.txt d/sub/moved.txt"),
    ("chmod", "chmod 700 b.bin && chmod 700 d/sub"),
    (
        "a file made by a redirect",
        "echo made > new.txt && mkdir -p n/m && echo deep > n/m/x",
    ),
    (
        "a binary file rewritten",
        "printf '\\377\\000\\001binary' > b.bin",
    ),
    (
        "a file replaced by a symlink",
        "rm f.txt && ln -s b.bin f.txt && rm d/rel-link && mkdir d/rel-link",
    ),
];

/// The tool and its arguments for `command` in `dialect`.
fn command_call(dialect: &str, command: &str) -> (&'static str, Value) {
    match dialect {
        "claude-code" => ("Bash", json!({"command": command})),
        "codex" => (
            "exec_command",
            json!({"cmd": command, "yield_time_ms": 30000}),
        ),
        _ => ("run_command", json!({"command": command})),
    }
}

/// Each scenario in `dialect`: the command's change undone to the exact tree before, by the
/// dialect's undo; that undo undone (by the CLI) to the exact tree after.
fn scenarios(dialect: &str, with_git: bool) {
    for (what, command) in SCENARIOS {
        let e = env("");
        seed(&e);
        if with_git {
            git(&e.files, &["init", "-q"]);
            git(&e.files, &["add", "-A"]);
            git(&e.files, &["commit", "-qm", "seed"]);
        }
        let before = e.tree();
        let (tool, args) = command_call(dialect, command);
        let r = e.call(dialect, tool, &args);
        let after = e.tree();
        assert_ne!(before, after, "{what}: the command changed nothing: {r}");
        let id = change_id(&r).unwrap_or_else(|| panic!("{what} ({dialect}): no undo line: {r}"));
        // Undo through the tool (the loopr `undo`, which every dialect serves too).
        let u = e.call("loopr", "undo", &json!({"change_id": id}));
        assert_eq!(u["success"], true, "{what}: undo failed: {u}");
        assert_eq!(
            e.tree(),
            before,
            "{what} ({dialect}, git {with_git}): undo is not exact: {u}"
        );
        // Redo: undo the undo (its first change names the group), from the command line.
        let undo_id = u["data"]["undo"]
            .as_i64()
            .unwrap_or_else(|| panic!("{what}: the undo names no change: {u}"));
        let o = e.run(&["undo", &undo_id.to_string()]);
        assert!(o.status.success(), "{what}: redo failed: {}", text(&o));
        assert_eq!(
            e.tree(),
            after,
            "{what} ({dialect}, git {with_git}): redo is not exact"
        );
    }
}

#[test]
fn default_dialect_without_git() {
    scenarios("loopr", false);
}

#[test]
fn default_dialect_with_git() {
    scenarios("loopr", true);
}

#[test]
fn claude_code_bash_without_git() {
    scenarios("claude-code", false);
}

#[test]
fn claude_code_bash_with_git() {
    scenarios("claude-code", true);
}

#[test]
fn codex_exec_command_without_git() {
    scenarios("codex", false);
}

#[test]
fn codex_exec_command_with_git() {
    scenarios("codex", true);
}

#[test]
fn a_command_that_changes_nothing_says_nothing_and_journals_nothing() {
    let e = env("");
    seed(&e);
    let r = e.call(
        "loopr",
        "run_command",
        &json!({"command": "cat f.txt >/dev/null; ls d"}),
    );
    assert_eq!(r["success"], true, "{r}");
    assert!(!output(&r).contains("undo with"), "{r}");
    let o = e.run(&["log"]);
    assert!(text(&o).contains("none recorded"), "{}", text(&o));
}

#[test]
fn undo_is_refused_whole_naming_the_file_changed_since() {
    let e = env("");
    seed(&e);
    let r = e.call(
        "loopr",
        "run_command",
        &json!({"command": "echo one > one.txt; echo two >> f.txt; rm b.bin"}),
    );
    let id = change_id(&r).unwrap_or_else(|| panic!("no undo line: {r}"));
    std::fs::write(e.path("f.txt"), "edited by hand\n").unwrap();
    let before = e.tree();
    let u = e.call("loopr", "undo", &json!({"change_id": id}));
    assert_eq!(u["success"], false, "{u}");
    let why = output(&u);
    assert!(
        why.contains("f.txt changed since") && why.contains("nothing was undone"),
        "{why}"
    );
    assert_eq!(e.tree(), before, "a refused undo changed files");
    // Forced, it restores the group anyway.
    let u = e.call("loopr", "undo", &json!({"change_id": id, "force": true}));
    assert_eq!(u["success"], true, "{u}");
    assert_eq!(std::fs::read(e.path("f.txt")).unwrap(), b"hello\r\nworld\n");
    assert!(!e.path("one.txt").exists() && e.path("b.bin").exists());
}

#[test]
fn excluded_directories_and_files_over_the_cap_are_named_not_undoable() {
    let e = env("[journal.commands]\nmax_file_bytes = 1000\n");
    seed(&e);
    std::fs::write(e.path("big.bin"), vec![7u8; 2000]).unwrap();
    std::fs::create_dir_all(e.path("target/debug")).unwrap();
    std::fs::create_dir_all(e.path("node_modules")).unwrap();
    let r = e.call(
        "loopr",
        "run_command",
        &json!({"command": "echo x > small.txt; echo y > target/out; echo z > node_modules/m; echo w >> big.bin"}),
    );
    let text_r = output(&r);
    let last = text_r.trim_end().lines().last().unwrap_or_default();
    assert!(
        last.starts_with("1 file added: undo with undo {\"change_id\": ")
            && last.contains("not undoable: big.bin (over the 1000 bytes per-file cap)")
            && last.contains("node_modules/ (excluded directory (dependencies))")
            && last.contains("target/ (excluded directory (build output))"),
        "{text_r}"
    );
    let log = text(&e.run(&["log"]));
    assert!(
        log.contains("not undoable: big.bin (over the 1000 bytes per-file cap)")
            && log.contains("not undoable: target/ (excluded directory (build output))"),
        "{log}"
    );
    // What was in scope is undone; the rest stays as the command left it.
    let id = change_id(&r).unwrap();
    let u = e.call("loopr", "undo", &json!({"change_id": id}));
    assert_eq!(u["success"], true, "{u}");
    assert!(!e.path("small.txt").exists());
    assert_eq!(std::fs::read(e.path("target/out")).unwrap(), b"y\n");
    assert_eq!(std::fs::metadata(e.path("big.bin")).unwrap().len(), 2002);
}

/// `toolyard serve` over stdio, for processes that outlive a call.
fn serve(e: &Env) -> Mcp {
    let mut serve = e.command();
    serve.arg("serve");
    Mcp::start(serve)
}

impl Mcp {
    /// A tool call's result as JSON (`output`, `data`, ...).
    fn call(&mut self, tool: &str, args: Value) -> Value {
        let (text, r) = self.tool_call(tool, args);
        json!({"output": text, "data": r["result"]["structuredContent"]["data"], "raw": r})
    }
}

fn bg_files(e: &Env) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(&e.files)
        .unwrap()
        .flatten()
        .map(|d| d.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("bg"))
        .collect();
    v.sort();
    v
}

#[test]
fn a_background_process_s_changes_are_undone_piece_by_piece_and_after_its_kill() {
    let e = env("");
    let mut mcp = serve(&e);
    let r = mcp.call(
        "run_command",
        json!({"command": "i=0; while true; do i=$((i+1)); echo $i > bg$i.txt; sleep 1; done", "background": true, "yield_ms": 100}),
    );
    let id = r["data"]["process_id"]
        .as_str()
        .unwrap_or_else(|| panic!("not in the background: {r}"))
        .to_string();
    // What it wrote before the start call returned is that call's piece.
    let start_piece = change_id(&r);
    // Each read journals what it wrote since the last one; undo each piece as it comes.
    let mut undone_pieces = 0;
    let until = Instant::now() + PATIENCE;
    while undone_pieces < 2 {
        assert!(Instant::now() < until, "no piece came");
        let r = mcp.call("process_output", json!({"process_id": id, "wait_ms": 1500}));
        let Some(change) = change_id(&r) else {
            continue;
        };
        let present = bg_files(&e);
        let u = mcp.call("undo", json!({"change_id": change}));
        assert!(
            u["output"].as_str().unwrap().starts_with("Undid change")
                || u["output"].as_str().unwrap().starts_with("Undid"),
            "{u}"
        );
        // The piece's files are gone; later ones it had not written yet are not touched. The
        // loop goes on writing meanwhile, so a file may also appear: compare names, not counts.
        let left = bg_files(&e);
        assert!(
            present.iter().any(|f| !left.contains(f)) || present.is_empty(),
            "{present:?} -> {left:?}: {u}"
        );
        undone_pieces += 1;
    }
    let k = mcp.call("process_kill", json!({"process_id": id}));
    if let Some(change) = change_id(&k) {
        let u = mcp.call("undo", json!({"change_id": change}));
        assert!(u["output"].as_str().unwrap().starts_with("Undid"), "{u}");
    }
    if let Some(change) = start_piece {
        let u = mcp.call("undo", json!({"change_id": change}));
        assert!(u["output"].as_str().unwrap().starts_with("Undid"), "{u}");
    }
    // Every piece is undone: nothing it wrote is left.
    let log = text(&e.run(&["log"]));
    assert!(log.contains("commands that changed files:"), "{log}");
    let left = bg_files(&e);
    assert!(
        left.is_empty(),
        "after undoing every piece and the kill's, files remain: {left:?}\n{log}"
    );
}

#[test]
fn the_persistent_shell_s_commands_are_undone_per_call() {
    let e = env("");
    seed(&e);
    let mut mcp = serve(&e);
    let before = e.tree();
    let r = mcp.call(
        "shell",
        json!({"command": "cd d && rm a.txt && echo new > b.txt"}),
    );
    let id = change_id(&r).unwrap_or_else(|| panic!("no undo line: {r}"));
    let r2 = mcp.call("shell", json!({"command": "pwd; echo more > c.txt"}));
    let id2 = change_id(&r2).unwrap_or_else(|| panic!("no undo line: {r2}"));
    assert!(id2 > id, "{r2}");
    let u = mcp.call("undo", json!({"change_id": id2}));
    assert!(u["output"].as_str().unwrap().starts_with("Undid"), "{u}");
    let u = mcp.call("undo", json!({"change_id": id}));
    assert!(u["output"].as_str().unwrap().starts_with("Undid"), "{u}");
    assert_eq!(e.tree(), before);
    drop(e.t);
}
