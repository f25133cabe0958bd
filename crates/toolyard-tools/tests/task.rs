//! complete_task: the completion is recorded once per session; a second call says so.

use std::sync::Arc;

use serde_json::json;
use toolyard_core::{Tool, ToolContext, ToolResult, Typed};
use toolyard_tools::task::CompleteTask;

struct Fixture {
    state: tempfile::TempDir,
    tool: Arc<dyn Tool>,
}

fn fixture() -> Fixture {
    let state = tempfile::tempdir().unwrap();
    let tool: Arc<dyn Tool> = Arc::new(Typed(CompleteTask::new(state.path())));
    Fixture { state, tool }
}

async fn complete(f: &Fixture, session: &str, summary: &str) -> ToolResult {
    let ctx = ToolContext::new("/tmp", session);
    let result = f
        .tool
        .invoke(json!({"summary": summary}), &ctx)
        .await
        .unwrap();
    let data = result.data.as_ref().expect("data");
    let problems = toolyard_core::output_problems(&*f.tool, data);
    assert!(problems.is_empty(), "{data}: {problems:?}");
    result
}

#[tokio::test]
async fn completing_returns_a_signal_and_records_it_for_the_session() {
    let f = fixture();
    let r = complete(&f, "s1", "Added the OAuth callback; tests pass.").await;
    assert!(r.success);
    let data = r.data.unwrap();
    assert_eq!(data["completed"], true);
    assert_eq!(data["already_completed"], false);
    assert_eq!(data["summary"], "Added the OAuth callback; tests pass.");
    assert_eq!(data["session"], "s1");

    let file = f.state.path().join("sessions/s1.json");
    let stored: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    assert_eq!(stored["summary"], "Added the OAuth callback; tests pass.");
    let record = CompleteTask::new(f.state.path())
        .completion("s1")
        .unwrap()
        .unwrap();
    assert_eq!(record.session, "s1");
}

#[tokio::test]
async fn a_second_call_says_the_task_was_already_completed() {
    let f = fixture();
    complete(&f, "s1", "first").await;
    let r = complete(&f, "s1", "second").await;
    assert!(r.success, "the stop signal stays valid");
    let data = r.data.unwrap();
    assert_eq!(data["completed"], true);
    assert_eq!(data["already_completed"], true);
    assert_eq!(data["summary"], "first", "the first summary is kept");
    assert!(r.output.contains("already completed"), "{}", r.output);

    let other = complete(&f, "s2", "other session").await;
    assert_eq!(
        other.data.unwrap()["already_completed"],
        false,
        "sessions are independent"
    );
}

#[tokio::test]
async fn racing_calls_complete_the_task_exactly_once() {
    let f = fixture();
    let ctx = ToolContext::new("/tmp", "race");
    let calls = (0..8).map(|i| {
        let tool = f.tool.clone();
        let ctx = ctx.clone();
        async move {
            tool.invoke(json!({"summary": format!("call {i}")}), &ctx)
                .await
                .unwrap()
        }
    });
    let results = futures::future::join_all(calls).await;
    let firsts = results
        .iter()
        .filter(|r| r.data.as_ref().unwrap()["already_completed"] == false)
        .count();
    assert_eq!(firsts, 1);
}

#[tokio::test]
async fn odd_session_ids_stay_inside_the_sessions_directory() {
    let f = fixture();
    complete(&f, "../../escape", "done").await;
    let entries: Vec<_> = std::fs::read_dir(f.state.path().join("sessions"))
        .unwrap()
        .collect();
    assert_eq!(entries.len(), 1);
    assert!(
        !f.state
            .path()
            .parent()
            .unwrap()
            .join("escape.json")
            .exists()
    );
    let again = complete(&f, "../../escape", "again").await;
    assert_eq!(again.data.unwrap()["already_completed"], true);
}

#[tokio::test]
async fn an_empty_summary_is_refused() {
    let f = fixture();
    let ctx = ToolContext::new("/tmp", "s1");
    let err = f
        .tool
        .invoke(json!({"summary": "  "}), &ctx)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "invalid_arguments");
    assert!(f.tool.output_schema().is_some());
    assert_eq!(f.tool.name(), "complete_task");
}
