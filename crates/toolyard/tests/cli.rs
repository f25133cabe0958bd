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
