//! Every dialect's tools advertise clean schemas, and every call through the dispatcher (the
//! path MCP and `toolyard call` take) is checked against them before the tool runs.

use std::path::Path;

use serde_json::{Value, json};
use toolyard_core::ArgValidator;
use toolyard_dialects::Dialect;
use toolyard_dispatch::{CallRequest, Dispatcher, DispatcherConfig};

fn dispatcher(ws: &Path, dialect: Dialect) -> Dispatcher {
    let mut config = DispatcherConfig::new(ws);
    // Inside the temp workspace, hidden from the tools: never the user's state directory.
    config.state_dir = Some(ws.join(".test-state"));
    config.dialect = dialect;
    Dispatcher::new(config).unwrap()
}

/// Every `format` keyword in `schema` whose value is a string.
fn formats(schema: &Value, out: &mut Vec<String>) {
    match schema {
        Value::Object(m) => {
            if let Some(f) = m.get("format").and_then(Value::as_str) {
                out.push(f.to_string());
            }
            m.values().for_each(|v| formats(v, out));
        }
        Value::Array(a) => a.iter().for_each(|v| formats(v, out)),
        _ => {}
    }
}

#[test]
fn every_advertised_schema_is_clean_and_compiles() {
    let ws = tempfile::tempdir().unwrap();
    for dialect in Dialect::ALL {
        let d = dispatcher(ws.path(), dialect);
        for def in d.definitions() {
            let mut found = Vec::new();
            formats(&def.input_schema, &mut found);
            if let Some(out) = &def.output_schema {
                formats(out, &mut found);
            }
            assert!(
                found.is_empty(),
                "{dialect} {}: non-standard formats {found:?}",
                def.name
            );
            ArgValidator::new(&def.input_schema)
                .unwrap_or_else(|e| panic!("{dialect} {}: {e}", def.name));
        }
    }
}

#[test]
fn the_timeout_ceiling_is_in_the_schema() {
    let ws = tempfile::tempdir().unwrap();
    let d = dispatcher(ws.path(), Dialect::Loopr);
    let defs = d.definitions();
    let run = defs.iter().find(|d| d.name == "run_command").unwrap();
    let t = &run.input_schema["properties"]["timeout_ms"];
    assert_eq!(t["minimum"], json!(1), "{t}");
    assert_eq!(t["maximum"], json!(600_000), "{t}");
    assert!(t["description"].as_str().unwrap().contains("600000"), "{t}");
}

async fn call(d: &Dispatcher, tool: &str, args: Value) -> toolyard_core::ToolResult {
    d.call(CallRequest::new("s1", tool, args)).await
}

#[tokio::test]
async fn zero_and_over_ceiling_timeouts_are_refused_in_every_dialect() {
    let ws = tempfile::tempdir().unwrap();
    let marker = ws.path().join("ran");
    let touch = format!("touch {}", marker.display());

    let loopr = dispatcher(ws.path(), Dialect::Loopr);
    let r = call(
        &loopr,
        "run_command",
        json!({"command": touch, "timeout_ms": 0}),
    )
    .await;
    assert_eq!(
        r.error_kind.as_deref(),
        Some("invalid_arguments"),
        "{}",
        r.output
    );
    assert!(
        r.output
            .contains("timeout_ms: 0 is less than the minimum of 1"),
        "{}",
        r.output
    );
    let r = call(
        &loopr,
        "run_command",
        json!({"command": touch, "timeout_ms": 700_000}),
    )
    .await;
    assert_eq!(
        r.error_kind.as_deref(),
        Some("invalid_arguments"),
        "{}",
        r.output
    );
    assert!(r.output.contains("600000"), "{}", r.output);

    let loom = dispatcher(ws.path(), Dialect::Loom);
    let r = call(&loom, "bash", json!({"command": touch, "timeout": 0})).await;
    assert!(!r.success, "{}", r.output);
    assert!(
        r.output
            .contains("timeout: 0 is less than the minimum of 1"),
        "{}",
        r.output
    );
    let r = call(&loom, "bash", json!({"command": touch, "timeout": 301})).await;
    assert!(
        r.output
            .contains("timeout: 301 is greater than the maximum of 300"),
        "{}",
        r.output
    );
    assert!(!marker.exists(), "a refused call ran");

    // A valid call still runs.
    let r = call(
        &loopr,
        "run_command",
        json!({"command": touch, "timeout_ms": 5000}),
    )
    .await;
    assert!(r.success, "{}", r.output);
    assert!(marker.exists());
}
