//! The dispatcher's layers, in the order a call meets them: a call refused by one never
//! reaches the next (the hooks, the tool), and the time limit decided there is the one the
//! tool runs within.

use std::path::Path;

use serde_json::{Value, json};
use toolyard_core::{Catalog, ToolResult};
use toolyard_dialects::Dialect;
use toolyard_dispatch::{CallRequest, Dispatcher, DispatcherConfig};

/// A dispatcher over `ws` whose catalog is the built-in one plus `extra`; a pre-tool hook on
/// every call touches `hook-ran` in the workspace.
fn dispatcher(ws: &Path, dialect: Dialect, extra: &str) -> Dispatcher {
    let text = format!("[[hooks.pre_tool]]\ncommand = \"touch hook-ran\"\n{extra}");
    let mut config = DispatcherConfig::new(ws);
    config.catalog = Catalog::parse_over_builtin(&text, "test.toml").unwrap();
    // Inside the temp workspace: never the user's state directory.
    config.state_dir = Some(ws.join(".test-state"));
    config.dialect = dialect;
    Dispatcher::new(config).unwrap()
}

async fn call(d: &Dispatcher, tool: &str, args: Value) -> ToolResult {
    d.call(CallRequest::new("s1", tool, args)).await
}

#[tokio::test]
async fn an_unknown_tool_is_refused_with_the_served_names_before_any_hook() {
    let ws = tempfile::tempdir().unwrap();
    let d = dispatcher(ws.path(), Dialect::Loom, "");
    let r = call(&d, "ls -la", json!({})).await;
    assert_eq!(r.error_kind.as_deref(), Some("not_found"), "{}", r.output);
    assert!(r.output.contains("unknown tool `ls -la`"), "{}", r.output);
    assert!(r.output.contains("bash"), "the served names: {}", r.output);
    assert!(!ws.path().join("hook-ran").exists());
}

#[tokio::test]
async fn bad_arguments_are_refused_before_the_hooks_run() {
    let ws = tempfile::tempdir().unwrap();
    let d = dispatcher(ws.path(), Dialect::Loopr, "");
    let r = call(&d, "write_file", json!({"path": "a.txt", "colour": 1})).await;
    assert_eq!(
        r.error_kind.as_deref(),
        Some("invalid_arguments"),
        "{}",
        r.output
    );
    assert!(r.output.contains("colour"), "{}", r.output);
    assert!(
        !ws.path().join("hook-ran").exists(),
        "a hook saw a refused call"
    );
    assert!(!ws.path().join("a.txt").exists());
}

#[tokio::test]
async fn a_timeout_over_the_ceiling_is_refused_before_the_hooks_run() {
    let ws = tempfile::tempdir().unwrap();
    let d = dispatcher(ws.path(), Dialect::Loopr, "");
    let r = call(
        &d,
        "run_command",
        json!({"command": "touch ran", "timeout_ms": 700_000}),
    )
    .await;
    assert_eq!(
        r.error_kind.as_deref(),
        Some("invalid_arguments"),
        "{}",
        r.output
    );
    assert!(r.output.contains("ceiling of 600000 ms"), "{}", r.output);
    assert!(
        !ws.path().join("hook-ran").exists(),
        "a hook saw a refused call"
    );
    assert!(!ws.path().join("ran").exists());
}

#[tokio::test]
async fn the_command_policy_refuses_before_the_hooks_run_in_every_dialect_shape() {
    let ws = tempfile::tempdir().unwrap();
    let deny = "[policy]\ndeny = [\"touch forbidden\"]\n";
    // loopr and codex name the command differently (`command`, `cmd`).
    for (dialect, tool, args) in [
        (
            Dialect::Loopr,
            "run_command",
            json!({"command": "touch forbidden"}),
        ),
        (
            Dialect::Codex,
            "exec_command",
            json!({"cmd": "touch forbidden"}),
        ),
    ] {
        let d = dispatcher(ws.path(), dialect, deny);
        let r = call(&d, tool, args).await;
        assert_eq!(
            r.error_kind.as_deref(),
            Some("blocked"),
            "{dialect}: {}",
            r.output
        );
        assert!(r.output.contains("user-deny:1"), "{dialect}: {}", r.output);
        assert!(
            !ws.path().join("hook-ran").exists(),
            "{dialect}: a hook saw a refused call"
        );
        assert!(!ws.path().join("forbidden").exists());
    }
}

#[tokio::test]
async fn the_catalog_default_time_limit_is_the_one_the_command_runs_within() {
    let ws = tempfile::tempdir().unwrap();
    let short = "[tools.run_command]\ntimeout_ms = 300\n";
    let d = dispatcher(ws.path(), Dialect::Loopr, short);
    let r = call(&d, "run_command", json!({"command": "sleep 30"})).await;
    assert!(!r.success, "{}", r.output);
    assert!(r.output.contains("timed out"), "{}", r.output);
    // The call's own timeout_ms, within the ceiling, replaces the default.
    let r = call(
        &d,
        "run_command",
        json!({"command": "sleep 1; echo done", "timeout_ms": 60_000}),
    )
    .await;
    assert!(r.success, "{}", r.output);
    assert!(r.output.contains("done"), "{}", r.output);
    assert!(
        ws.path().join("hook-ran").exists(),
        "admitted calls meet the hooks"
    );
}
