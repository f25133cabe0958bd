//! End-to-end tests of the `toolyard` binary: the CLI a newcomer uses.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn toolyard(ws: &Path, state: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_toolyard"))
        .args(args)
        .current_dir(ws)
        .env("TOOLYARD_STATE_DIR", state)
        .output()
        .expect("the toolyard binary runs")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

struct Env {
    _t: tempfile::TempDir,
    ws: std::path::PathBuf,
    state: std::path::PathBuf,
}

fn env() -> Env {
    let t = tempfile::tempdir().unwrap();
    let ws = t.path().join("ws");
    let state = t.path().join("state");
    std::fs::create_dir_all(&ws).unwrap();
    Env { _t: t, ws, state }
}

impl Env {
    fn run(&self, args: &[&str]) -> Output {
        toolyard(&self.ws, &self.state, args)
    }
}

#[test]
fn read_file_prints_numbered_lines() {
    let e = env();
    std::fs::write(e.ws.join("a.txt"), "one\ntwo\n").unwrap();
    let o = e.run(&["call", "read_file", r#"{"path":"a.txt"}"#]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "     1|one\n     2|two\n"
    );
}

#[test]
fn read_tracking_persists_across_invocations_of_one_session() {
    let e = env();
    std::fs::write(e.ws.join("a.txt"), "hello world\n").unwrap();
    let edit = r#"{"path":"a.txt","old_string":"world","new_string":"there"}"#;
    let o = e.run(&["call", "edit_file", edit, "--session", "s1"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "edit before read fails: {}",
        text(&o)
    );
    assert!(text(&o).contains("read_file"), "{}", text(&o));

    let o = e.run(&[
        "call",
        "read_file",
        r#"{"path":"a.txt"}"#,
        "--session",
        "s1",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let o = e.run(&["call", "edit_file", edit, "--session", "s1"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        std::fs::read_to_string(e.ws.join("a.txt")).unwrap(),
        "hello there\n"
    );

    // Another session has not read it.
    let o = e.run(&[
        "call",
        "write_file",
        r#"{"path":"a.txt","content":"x"}"#,
        "--session",
        "s2",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
}

#[test]
fn edit_refuses_when_file_changed_since_read() {
    let e = env();
    std::fs::write(e.ws.join("a.txt"), "v1\n").unwrap();
    let o = e.run(&["call", "read_file", r#"{"path":"a.txt"}"#]);
    assert!(o.status.success(), "{}", text(&o));
    std::fs::write(e.ws.join("a.txt"), "v2\n").unwrap();
    let o = e.run(&[
        "call",
        "edit_file",
        r#"{"path":"a.txt","old_string":"v2","new_string":"v3"}"#,
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("changed on disk"), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(e.ws.join("a.txt")).unwrap(), "v2\n");
}

#[test]
fn json_flag_prints_the_whole_tool_result() {
    let e = env();
    let o = e.run(&[
        "call",
        "write_file",
        r#"{"path":"d/new.txt","content":"abc"}"#,
        "--json",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["success"], true);
    assert_eq!(v["files_changed"][0], "d/new.txt");
    assert_eq!(v["data"]["bytes_written"], 3);
    assert_eq!(
        std::fs::read_to_string(e.ws.join("d/new.txt")).unwrap(),
        "abc"
    );
}

#[test]
fn bad_arguments_name_the_field() {
    let e = env();
    let o = e.run(&["call", "read_file", r#"{"path":"a","offset":"ten"}"#]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("offset"), "{}", text(&o));
    let o = e.run(&["call", "read_file", r#"{"path":"a","bogus":1}"#]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("bogus"), "{}", text(&o));
    let o = e.run(&["call", "read_file", "{not json"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("not valid JSON"), "{}", text(&o));
    let o = e.run(&["call", "no_such_tool", "{}"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("unknown tool"), "{}", text(&o));
}

#[test]
fn arguments_can_come_from_stdin() {
    use std::io::Write;
    let e = env();
    std::fs::write(e.ws.join("a.txt"), "x\n").unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolyard"))
        .args(["call", "read_file", "-"])
        .current_dir(&e.ws)
        .env("TOOLYARD_STATE_DIR", &e.state)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(br#"{"path":"a.txt"}"#)
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success());
    assert_eq!(String::from_utf8_lossy(&o.stdout), "     1|x\n");
}

#[test]
fn every_exported_schema_is_valid_json_schema_2020_12() {
    let e = env();
    for format in ["openai", "anthropic", "mcp"] {
        let o = e.run(&["tools", "--format", format]);
        assert!(o.status.success(), "{}", text(&o));
        let defs: Value = serde_json::from_slice(&o.stdout).unwrap();
        let defs = defs.as_array().unwrap();
        assert!(defs.len() >= 6, "{format}: {} tools", defs.len());
        for d in defs {
            let schema = match format {
                "openai" => &d["function"]["parameters"],
                "anthropic" => &d["input_schema"],
                _ => &d["inputSchema"],
            };
            assert_eq!(schema["type"], "object", "{d}");
            assert!(
                jsonschema::draft202012::meta::is_valid(schema),
                "{format}: invalid schema {schema}"
            );
            // The schema actually describes arguments: it accepts a valid call shape check.
            assert!(jsonschema::draft202012::new(schema).is_ok(), "{schema}");
        }
        if format == "mcp" {
            for d in defs {
                let a = &d["annotations"];
                for hint in [
                    "readOnlyHint",
                    "destructiveHint",
                    "idempotentHint",
                    "openWorldHint",
                ] {
                    assert!(a[hint].is_boolean(), "{hint} in {d}");
                }
            }
        }
    }
}

#[test]
fn profiles_limit_the_tools() {
    let e = env();
    let o = e.run(&["tools", "--format", "anthropic", "--profile", "plan"]);
    assert!(o.status.success(), "{}", text(&o));
    let defs: Value = serde_json::from_slice(&o.stdout).unwrap();
    let names: Vec<&str> = defs
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"read_file"));
    assert!(
        !names.contains(&"run_command"),
        "plan has no run_command: {names:?}"
    );
    let o = e.run(&["tools", "--profile", "nope"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("unknown profile"), "{}", text(&o));
}

#[test]
fn a_bad_catalog_names_the_line() {
    let e = env();
    std::fs::write(e.ws.join("catalog.toml"), "[tools.grep]\nlane = \"fast\"\n").unwrap();
    let o = e.run(&["tools", "--catalog", "catalog.toml"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("line 2"), "{}", text(&o));
}

#[test]
fn check_command_exit_codes() {
    let e = env();
    let o = e.run(&["check-command", "cargo test --workspace"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = e.run(&["check-command", "rm -rf /"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("blocked by rule"), "{}", text(&o));
}

/// The binary with a fake home and no state directory set: where a newcomer starts it.
fn bare(cwd: &Path, home: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_toolyard"));
    c.args(args)
        .current_dir(cwd)
        .env("HOME", home)
        .env_remove("TOOLYARD_STATE_DIR")
        .env_remove("XDG_STATE_HOME")
        .env("RUST_BACKTRACE", "1");
    c
}

#[test]
fn a_closed_pipe_ends_the_program_quietly() {
    let e = env();
    std::fs::write(e.ws.join("big.txt"), "line\n".repeat(50_000)).unwrap();
    for args in [
        vec!["tools"],
        vec!["doctor"],
        vec!["call", "read_file", r#"{"path":"big.txt","limit":2000}"#],
    ] {
        // stdout is a pipe whose reader is gone before the program writes.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let o = Command::new(env!("CARGO_BIN_EXE_toolyard"))
            .args(&args)
            .current_dir(&e.ws)
            .env("TOOLYARD_STATE_DIR", &e.state)
            .env("RUST_BACKTRACE", "1")
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(err.trim().is_empty(), "{args:?} printed: {err}");
    }
}

#[test]
fn listing_checking_and_doctor_need_no_state_directory() {
    let t = tempfile::tempdir().unwrap();
    let home = t.path().join("home");
    std::fs::create_dir(&home).unwrap();
    // A home nobody may write: any attempt to make a state directory would fail.
    std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o500)).unwrap();
    for args in [
        vec!["tools"],
        vec!["check-command", "ls"],
        vec!["doctor"],
        vec!["--help"],
    ] {
        let o = bare(&home, &home, &args).output().unwrap();
        assert!(o.status.success(), "{args:?}: {}", text(&o));
    }
    std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    assert_eq!(
        std::fs::read_dir(&home).unwrap().count(),
        0,
        "nothing was created"
    );
}

#[test]
fn serving_from_home_keeps_the_state_directory_out_of_the_tools_reach() {
    let t = tempfile::tempdir().unwrap();
    let home = t.path().join("home");
    std::fs::create_dir(&home).unwrap();
    std::fs::write(home.join("notes.txt"), "mine\n").unwrap();
    let run = |args: &[&str]| bare(&home, &home, args).output().unwrap();
    let o = run(&["call", "--inline", "read_file", r#"{"path":"notes.txt"}"#]);
    assert!(o.status.success(), "{}", text(&o));
    let o = run(&[
        "call",
        "--inline",
        "write_file",
        r#"{"path":"new.txt","content":"x\n"}"#,
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let state = home.join(".local/state/toolyard");
    assert!(state.is_dir(), "the default state directory is used");
    let db = std::fs::read_dir(state.join("workspaces"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
        .join("state.db");
    let before = std::fs::read(&db).unwrap();
    let forged = format!(r#"{{"path":"{}","content":"forged"}}"#, db.display());
    for (tool, args) in [
        (
            "read_file",
            r#"{"path":".local/state/toolyard/"}"#.to_string(),
        ),
        ("write_file", forged),
    ] {
        let o = run(&["call", "--inline", tool, &args]);
        assert_eq!(o.status.code(), Some(1), "{tool}: {}", text(&o));
        assert!(text(&o).contains("state directory"), "{tool}: {}", text(&o));
    }
    assert_eq!(std::fs::read(&db).unwrap(), before);
    // Nor do the search tools show it, hidden files included.
    for (tool, args) in [
        ("glob", r#"{"pattern":"**/*","hidden":true}"#),
        ("grep", r#"{"pattern":"new","hidden":true}"#),
        ("list_directory", r#"{"path":".local/state"}"#),
    ] {
        let o = run(&["call", "--inline", tool, args]);
        let out = text(&o);
        assert!(
            !out.contains("state.db") && !out.contains("toolyard"),
            "{tool}: {out}"
        );
    }
    let o = run(&[
        "call",
        "--inline",
        "glob",
        r#"{"pattern":"**/*","hidden":true}"#,
    ]);
    assert!(text(&o).contains("notes.txt"), "{}", text(&o));
    let o = run(&["log"]);
    assert!(text(&o).contains("new.txt"), "{}", text(&o));
}

#[test]
fn log_and_undo_in_a_subdirectory_see_the_repository_root() {
    let e = env();
    std::fs::create_dir_all(e.ws.join(".git")).unwrap();
    std::fs::create_dir_all(e.ws.join("src/deep")).unwrap();
    let o = e.run(&[
        "call",
        "write_file",
        r#"{"path":"src/made.txt","content":"x\n"}"#,
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let sub = e.ws.join("src/deep");
    let o = toolyard(&sub, &e.state, &["log"]);
    let out = text(&o);
    assert!(out.contains("src/made.txt"), "{out}");
    assert!(
        out.contains(&e.ws.canonicalize().unwrap().display().to_string()),
        "log says which workspace it looked at: {out}"
    );
    let o = toolyard(&sub, &e.state, &["undo"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(!e.ws.join("src/made.txt").exists());
}

#[test]
fn cli_undo_says_when_a_file_was_already_back_and_how_to_redo() {
    let e = env();
    std::fs::write(e.ws.join("f.txt"), "one\n").unwrap();
    let call = |tool: &str, args: &str| {
        let o = e.run(&["call", tool, args]);
        assert!(o.status.success(), "{}", text(&o));
    };
    call("read_file", r#"{"path":"f.txt"}"#);
    call(
        "edit_file",
        r#"{"path":"f.txt","old_string":"one","new_string":"two"}"#,
    );
    // A formatter (or the user) put it back meanwhile.
    std::fs::write(e.ws.join("f.txt"), "one\n").unwrap();
    let o = e.run(&["undo"]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("f.txt was already as before it, so nothing was written"),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(e.ws.join("f.txt")).unwrap(),
        "one\n"
    );

    // A plain undo names the change that redoes it, and that redo works.
    call("read_file", r#"{"path":"f.txt"}"#);
    call(
        "edit_file",
        r#"{"path":"f.txt","old_string":"one","new_string":"three"}"#,
    );
    let o = e.run(&["undo"]);
    let out = text(&o);
    assert_eq!(
        std::fs::read_to_string(e.ws.join("f.txt")).unwrap(),
        "one\n"
    );
    let redo = out
        .split("`toolyard undo ")
        .nth(1)
        .and_then(|r| r.split('`').next())
        .unwrap_or_else(|| panic!("no redo hint: {out}"))
        .to_string();
    let o = e.run(&["undo", &redo]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        std::fs::read_to_string(e.ws.join("f.txt")).unwrap(),
        "three\n"
    );
}

#[test]
fn a_missing_workspace_is_named_as_the_workspace() {
    let e = env();
    let o = e.run(&["log", "-w", "/nonexistent/ws"]);
    assert_eq!(o.status.code(), Some(2));
    let out = text(&o);
    assert!(out.contains("workspace /nonexistent/ws"), "{out}");
    assert!(out.contains("-w"), "{out}");
}

#[test]
fn http_with_only_a_port_says_host_and_port() {
    let e = env();
    for addr in ["8799", ":8799"] {
        let o = e.run(&["serve", "--http", addr]);
        assert_eq!(o.status.code(), Some(2));
        assert!(text(&o).contains("127.0.0.1:8799"), "{}", text(&o));
    }
}

#[test]
fn errors_say_each_cause_once() {
    let e = env();
    let o = e.run(&["tools", "--catalog", "/nonexistent/catalog.toml"]);
    let out = text(&o);
    assert_eq!(out.matches("No such file or directory").count(), 1, "{out}");
}

#[test]
fn inline_says_it_is_not_sandboxed() {
    let e = env();
    let o = e.run(&["tools", "--inline", "--format", "mcp"]);
    let json: Value = serde_json::from_slice(&o.stdout).unwrap();
    let run = json
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "run_command")
        .unwrap();
    assert!(
        run["description"]
            .as_str()
            .unwrap()
            .contains("NOT SANDBOXED"),
        "{run}"
    );
    let o = e.run(&["tools", "--format", "mcp"]);
    assert!(!String::from_utf8_lossy(&o.stdout).contains("NOT SANDBOXED"));
    let o = e.run(&["doctor"]);
    assert!(
        text(&o).contains("--inline: nothing is sandboxed"),
        "{}",
        text(&o)
    );
}

#[test]
fn the_readme_quick_start_works_as_printed() {
    let readme = include_str!("../../../README.md");
    let start = readme
        .find("With only the binary")
        .expect("the README has the binary-only quick start");
    let block = readme[start..]
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("its sh block");
    let e = env();
    let bin = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_toolyard"), bin.path().join("toolyard"))
        .unwrap();
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut ran = 0;
    for line in block.lines().filter(|l| !l.trim().is_empty()) {
        let o = Command::new("sh")
            .args(["-c", line])
            .current_dir(&e.ws)
            .env("PATH", &path)
            .env("HOME", &e.ws)
            .env("TOOLYARD_STATE_DIR", &e.state)
            .output()
            .unwrap();
        let blocked_on_purpose = line.contains("check-command 'rm -rf /'");
        let want = if blocked_on_purpose { 3 } else { 0 };
        assert_eq!(o.status.code(), Some(want), "{line}\n{}", text(&o));
        ran += 1;
    }
    assert!(ran >= 10, "the block has its examples: {block}");
    assert_eq!(
        std::fs::read_to_string(e.ws.join("notes.txt")).unwrap(),
        "hello\nworld\n",
        "the edit landed and the undo restored it"
    );
}

#[test]
fn an_empty_state_dir_variable_counts_as_unset() {
    let e = env();
    let home = e.state.join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(e.ws.join("a.txt"), "x\n").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_toolyard"))
        .args(["call", "read_file", r#"{"path":"a.txt"}"#])
        .current_dir(&e.ws)
        .env("TOOLYARD_STATE_DIR", "")
        .env("XDG_STATE_HOME", "")
        .env("HOME", &home)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        !e.ws.join("workspaces").exists(),
        "no state in the working directory"
    );
    assert!(home.join(".local/state/toolyard/workspaces").is_dir());
}
