//! Every structured result the loom dialect's tools return conforms to the output schema they
//! declare (derived from the data struct that builds it), on success and on a command failing.

mod common;

use serde_json::{Value, json};
use toolyard_core::{ArgValidator, ToolContext};
use toolyard_dialects::Dialect;

use common::DialectWorkspace;

/// Call `name` with `args` and check its data against its declared output schema.
async fn conforms(f: &DialectWorkspace, name: &str, args: Value) -> Value {
    let tool = f
        .tools
        .iter()
        .find(|t| t.name() == name)
        .unwrap_or_else(|| panic!("no {name}"));
    let schema = tool
        .output_schema()
        .unwrap_or_else(|| panic!("{name} declares no output schema"));
    let ctx = ToolContext::new(&f.ws, "s1");
    let r = tool.invoke(args, &ctx).await.unwrap();
    let data = r.data.unwrap_or_else(|| panic!("{name}: no data"));
    let problems = ArgValidator::new(&schema).unwrap().problems(&data);
    assert!(
        problems.is_empty(),
        "{name}: {data} against {schema}: {problems:?}"
    );
    data
}

#[tokio::test]
async fn loom_results_conform_to_their_output_schemas() {
    let f = DialectWorkspace::new(Dialect::Loom, &[("a.txt", "one\ntwo\n")]);
    let read = conforms(&f, "read_file", json!({"path": "a.txt", "max_bytes": 3})).await;
    assert_eq!(read["truncated"], json!(true));
    let edit = conforms(
        &f,
        "edit_file",
        json!({"path": "a.txt", "edits": [{"old_str": "two", "new_str": "three"}]}),
    )
    .await;
    assert_eq!(edit["edits_applied"], json!(1));
    let ok = conforms(&f, "bash", json!({"command": "echo hi"})).await;
    assert_eq!(ok["exit_code"], json!(0));
    let failed = conforms(&f, "bash", json!({"command": "exit 3"})).await;
    assert_eq!(failed["exit_code"], json!(3));
}
