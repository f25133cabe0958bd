//! End to end through the binary: a tool the catalog declares (`[tools.NAME]` with `command`)
//! is listed and served like a built-in one, in every dialect and export format, through every
//! layer (validation, the command policy, hooks), its placeholders one argv element each.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const SHOUT: &str = r#"
[tools.shout]
lane = "no-net"
description = "Print the text between brackets"
command = ["printf", "[%s]\n", "{text}"]
timeout_ms = 20000
parameters = { type = "object", properties = { text = { type = "string", description = "What to print" } }, required = ["text"] }
"#;

struct Env {
    _t: tempfile::TempDir,
    ws: PathBuf,
    state: PathBuf,
    catalog: PathBuf,
}

fn env(catalog: &str) -> Env {
    let t = tempfile::tempdir().unwrap();
    let ws = t.path().join("ws");
    let state = t.path().join("state");
    std::fs::create_dir_all(&ws).unwrap();
    let path = t.path().join("catalog.toml");
    std::fs::write(&path, catalog).unwrap();
    Env {
        _t: t,
        ws,
        state,
        catalog: path,
    }
}

impl Env {
    fn run(&self, args: &[&str]) -> Output {
        run_in(&self.ws, &self.state, &self.catalog, args)
    }
}

fn run_in(ws: &Path, state: &Path, catalog: &Path, args: &[&str]) -> Output {
    Command::new(common::toolyard_bin())
        .args(args)
        .arg("--catalog")
        .arg(catalog)
        .current_dir(ws)
        .env("TOOLYARD_STATE_DIR", state)
        .env("HOME", state)
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

#[test]
fn a_catalog_tool_is_listed_in_every_dialect_and_format() {
    let e = env(SHOUT);
    for dialect in [
        "loopr",
        "loom",
        "loom-py",
        "codex",
        "anthropic",
        "gemini",
        "claude-code",
    ] {
        let o = e.run(&["tools", "--dialect", dialect]);
        assert!(o.status.success(), "{}", text(&o));
        assert!(text(&o).contains("shout"), "{dialect}: {}", text(&o));
        for format in ["openai", "anthropic", "mcp"] {
            let o = e.run(&["tools", "--dialect", dialect, "--format", format]);
            assert!(o.status.success(), "{}", text(&o));
            let defs: Value = serde_json::from_slice(&o.stdout).unwrap();
            let all = defs.to_string();
            assert!(
                all.contains("\"shout\"") && all.contains("Print the text between brackets"),
                "{dialect} {format}: {all}"
            );
        }
    }
    // Its schema is the catalog's, with misspelt arguments refused.
    let o = e.run(&["tools", "--format", "mcp"]);
    let defs: Value = serde_json::from_slice(&o.stdout).unwrap();
    let shout = defs
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "shout")
        .unwrap();
    assert_eq!(shout["inputSchema"]["required"][0], "text");
    assert_eq!(shout["inputSchema"]["additionalProperties"], false);
}

#[test]
fn a_placeholder_is_one_argument_never_shell_text() {
    let e = env(SHOUT);
    let hostile = "a  b $(touch pwned) `touch pwned2`; touch pwned3 'q' \"d\"";
    let args = serde_json::json!({ "text": hostile }).to_string();
    let o = e.run(&["call", "shout", &args]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains(&format!("[{hostile}]")),
        "{}",
        text(&o)
    );
    for f in ["pwned", "pwned2", "pwned3"] {
        assert!(!e.ws.join(f).exists(), "{f} was created: {}", text(&o));
    }
    // The same in another dialect.
    let o = e.run(&["call", "--dialect", "claude-code", "shout", &args]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains(&format!("[{hostile}]")));
}

#[test]
fn arguments_are_validated_before_anything_runs() {
    let e = env(r#"
[tools.mark]
lane = "no-net"
description = "Create a file"
command = ["touch", "{name}"]
parameters = { type = "object", properties = { name = { type = "string", pattern = "^[a-z]+$" } }, required = ["name"] }
"#);
    for bad in [
        r#"{"name": 5}"#,
        r#"{}"#,
        r#"{"name": "ok", "extra": 1}"#,
        r#"{"name": "Bad1"}"#,
    ] {
        let o = e.run(&["call", "mark", bad]);
        assert!(!o.status.success(), "{bad}: {}", text(&o));
        assert!(
            text(&o).contains("invalid arguments"),
            "{bad}: {}",
            text(&o)
        );
    }
    assert_eq!(
        std::fs::read_dir(&e.ws).unwrap().count(),
        0,
        "something ran"
    );
    let o = e.run(&["call", "mark", r#"{"name": "made"}"#]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(e.ws.join("made").exists());
}

#[test]
fn the_command_policy_and_hooks_apply() {
    // The policy sees the argv as words: a placeholder's value is one argument.
    let e = env(&format!(
        "{SHOUT}\n[policy]\ndeny = [{{ pattern = \"printf ** *forbidden* **\", reason = \"not that word\" }}]\n"
    ));
    let o = e.run(&["call", "shout", r#"{"text": "a forbidden word"}"#]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("not that word"), "{}", text(&o));
    let o = e.run(&["call", "shout", r#"{"text": "fine"}"#]);
    assert!(o.status.success(), "{}", text(&o));

    let e = env(&format!(
        "{SHOUT}\n[[hooks.pre_tool]]\nmatcher = \"shout\"\ncommand = \"echo no shouting >&2; exit 2\"\n"
    ));
    let o = e.run(&["call", "shout", r#"{"text": "hi"}"#]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("no shouting"), "{}", text(&o));
}

#[test]
fn a_bad_definition_fails_the_load_saying_what_to_fix() {
    let e = env(&SHOUT.replace("\"{text}\"", "\"--text={text}\""));
    let o = e.run(&["tools"]);
    assert!(!o.status.success(), "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains("[tools.shout]") && t.contains("whole element"),
        "{t}"
    );
    let e = env(&SHOUT.replace("[tools.shout]", "[tools.grep]"));
    let o = e.run(&["tools"]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("built-in tool"), "{}", text(&o));
    // A clash with a dialect's own name is refused when that dialect is served.
    let e = env(&SHOUT.replace("[tools.shout]", "[tools.Bash]"));
    let o = e.run(&["tools", "--dialect", "claude-code"]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("rename it"), "{}", text(&o));
    // In a dialect without a tool of that name it is served, and its lane's runner (which
    // knows every dialect) runs it.
    let o = e.run(&["call", "Bash", r#"{"text": "still served"}"#]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("[still served]"), "{}", text(&o));
}
