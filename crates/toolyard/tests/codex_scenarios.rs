//! Codex's 23 apply_patch scenarios (`codex-rs/apply-patch/tests/fixtures/scenarios`, copied
//! unmodified into tests/fixtures/codex-apply-patch, see its PROVENANCE.md) run through the real
//! binary: `toolyard call apply_patch '{"input": PATCH}' --dialect codex -w COPY`, with the state
//! directory and HOME outside the workspace. The workspace must then equal `expected/` byte for
//! byte, directories included, so nothing of Toolyard's may appear in it.
//!
//! One declared divergence: 015 expects the file added before a failing hunk to stay (Codex's
//! standalone binary is not atomic). Toolyard checks the whole patch first, so for 015 the
//! workspace must be unchanged and the error must name the failing file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

/// `{relative path: None for a directory, Some(bytes) for a file}`.
type Snapshot = BTreeMap<String, Option<Vec<u8>>>;

fn snapshot(root: &Path) -> Snapshot {
    fn walk(root: &Path, dir: &Path, out: &mut Snapshot) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.is_dir() {
                out.insert(rel, None);
                walk(root, &p, out);
            } else {
                out.insert(rel, Some(std::fs::read(&p).unwrap()));
            }
        }
    }
    let mut out = Snapshot::new();
    walk(root, root, &mut out);
    out
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        let dest = to.join(p.file_name().unwrap());
        if p.is_dir() {
            copy_dir(&p, &dest);
        } else {
            std::fs::copy(&p, &dest).unwrap();
        }
    }
}

fn scenarios_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/codex-apply-patch/scenarios")
}

/// Run one scenario; returns the result JSON and the workspace afterwards.
fn run(case: &Path) -> (Value, Snapshot) {
    let t = tempfile::tempdir().unwrap();
    let ws = t.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    if case.join("input").is_dir() {
        copy_dir(&case.join("input"), &ws);
    }
    let patch = std::fs::read_to_string(case.join("patch.txt")).unwrap();
    let args = json!({ "input": patch }).to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_toolyard"))
        .args([
            "call",
            "apply_patch",
            &args,
            "--dialect",
            "codex",
            "--json",
            "-w",
        ])
        .arg(&ws)
        .current_dir(t.path())
        .env("TOOLYARD_STATE_DIR", t.path().join("state"))
        .env("HOME", t.path().join("home"))
        .output()
        .expect("the toolyard binary runs");
    let result: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{}: not a JSON result ({e}): {}{}",
            case.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (result, snapshot(&ws))
}

/// What each scenario's call must say: success and the exact summary (only its start when the
/// text ends in a newline), or failure and a text the error contains (Codex's, with the path
/// as the patch spells it).
fn expected_result(name: &str) -> (bool, &'static str) {
    match name {
        "001_add_file" => (true, "Success. Updated the following files:\nA bar.md"),
        "002_multiple_operations" => (
            true,
            "Success. Updated the following files:\nA nested/new.txt\nM modify.txt\nD delete.txt",
        ),
        "003_multiple_chunks" => (true, "Success. Updated the following files:\nM multi.txt"),
        "004_move_to_new_directory" | "010_move_overwrites_existing_destination" => (
            true,
            "Success. Updated the following files:\nM renamed/dir/name.txt",
        ),
        "005_rejects_empty_patch" => (false, "No files were modified."),
        "006_rejects_missing_context" => (
            false,
            "Failed to find expected lines in modify.txt:\nmissing\n",
        ),
        "007_rejects_missing_file_delete" => (false, "Failed to delete file missing.txt"),
        "008_rejects_empty_update_hunk" => (
            false,
            "Invalid patch hunk on line 2: Update file hunk for path 'foo.txt' is empty",
        ),
        "009_requires_existing_file_for_update"
        | "015_failure_after_partial_success_leaves_changes" => (
            false,
            "Failed to read file to update missing.txt: No such file or directory (os error 2)",
        ),
        "011_add_overwrites_existing_file" => (
            true,
            "Success. Updated the following files:\nA duplicate.txt",
        ),
        "012_delete_directory_fails" => (false, "Failed to delete file dir"),
        "013_rejects_invalid_hunk_header" => (
            false,
            "Invalid patch hunk on line 2: '*** Frobnicate File: foo' is not a valid hunk header. \
             Valid hunk headers: '*** Add File: {path}', '*** Delete File: {path}', \
             '*** Update File: {path}'",
        ),
        _ => (true, "Success. Updated the following files:\n"),
    }
}

#[test]
fn every_codex_scenario_leaves_the_expected_workspace() {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(scenarios_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    cases.sort();
    assert_eq!(cases.len(), 23, "the fixture holds Codex's 23 scenarios");
    let mut failed = Vec::new();
    for case in &cases {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        let (result, got) = run(case);
        let success = result["success"].as_bool().unwrap_or(false);
        let output = result["output"].as_str().unwrap_or("").to_string();
        // 015 is the declared divergence: atomic, so the workspace stays as the input.
        let want_dir = if name.starts_with("015_") {
            case.join("input")
        } else {
            case.join("expected")
        };
        let want = snapshot(&want_dir);
        let (ok, text) = expected_result(&name);
        let mut why = Vec::new();
        if got != want {
            why.push(format!(
                "workspace differs: got {:?}, want {:?}",
                got.keys().collect::<Vec<_>>(),
                want.keys().collect::<Vec<_>>()
            ));
        }
        if success != ok {
            why.push(format!("success {success}, want {ok}"));
        }
        // A success names its files exactly in Codex's summary (Toolyard's changed lines
        // follow it after a blank line); an error contains Codex's text.
        let summary = output.split("\n\n").next().unwrap_or("");
        let text_ok = match (ok, text.ends_with('\n')) {
            (true, true) => output.starts_with(text),
            (true, false) => summary == text,
            (false, _) => output.contains(text),
        };
        if !text_ok {
            why.push(format!("output {output:?} does not match {text:?}"));
        }
        if !why.is_empty() {
            failed.push(format!("{name}: {}", why.join("; ")));
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} scenarios failed:\n{}",
        failed.len(),
        cases.len(),
        failed.join("\n")
    );
}

#[test]
fn the_openai_export_carries_the_freeform_apply_patch_with_its_lark_grammar() {
    let t = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_toolyard"))
        .args(["tools", "--dialect", "codex", "--format", "openai", "-w"])
        .arg(t.path())
        .env("TOOLYARD_STATE_DIR", t.path().join("state"))
        .env("HOME", t.path().join("home"))
        .output()
        .expect("the toolyard binary runs");
    let tools: Value = serde_json::from_slice(&out.stdout).unwrap();
    let tools = tools.as_array().unwrap();
    let named: Vec<&Value> = tools
        .iter()
        .filter(|t| t["custom"]["name"] == "apply_patch" || t["function"]["name"] == "apply_patch")
        .collect();
    // One tool per name: the API refuses two tools named alike.
    assert_eq!(named.len(), 1, "{named:?}");
    let tool = named[0];
    assert_eq!(tool["type"], "custom", "{tool}");
    let format = &tool["custom"]["format"];
    assert_eq!(format["type"], "grammar", "{tool}");
    assert_eq!(format["grammar"]["syntax"], "lark", "{tool}");
    let lark = format["grammar"]["definition"].as_str().unwrap();
    assert!(
        lark.starts_with("start: begin_patch hunk+ end_patch\n"),
        "{lark}"
    );
    assert!(lark.contains("eof_line: \"*** End of File\" LF"), "{lark}");
    assert!(
        tool["custom"]["description"]
            .as_str()
            .unwrap()
            .contains("FREEFORM tool, so do not wrap the patch in JSON"),
        "{tool}"
    );
    // Over MCP (and in the other exports) it stays the JSON form {input}.
    let out = Command::new(env!("CARGO_BIN_EXE_toolyard"))
        .args(["tools", "--dialect", "codex", "--format", "mcp", "-w"])
        .arg(t.path())
        .env("TOOLYARD_STATE_DIR", t.path().join("state"))
        .env("HOME", t.path().join("home"))
        .output()
        .expect("the toolyard binary runs");
    let tools: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mcp = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "apply_patch")
        .unwrap();
    assert_eq!(mcp["inputSchema"]["required"], json!(["input"]), "{mcp}");
}
