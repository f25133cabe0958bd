//! Input bounds of the search tools: over-long patterns are refused with an error naming the
//! argument and the limit, an over-large regex is refused however short its text, and a search
//! stops at the call's time limit.

use std::fs;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use toolyard_core::{Catalog, Tool, ToolContext, ToolResult, Typed};
use toolyard_tools::ToolEnv;
use toolyard_tools::search::{GlobTool, GrepTool};

struct Fixture {
    _tmp: tempfile::TempDir,
    ws: PathBuf,
    env: Arc<ToolEnv>,
}

impl Fixture {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        fs::create_dir_all(ws.join("src")).unwrap();
        fs::write(ws.join("src/a.rs"), "fn needle() {}\n").unwrap();
        let state = tmp.path().join("state");
        let env =
            Arc::new(ToolEnv::open_with_state(&ws, Catalog::builtin(), Some(&state)).unwrap());
        let ws = env.workspace.root().to_path_buf();
        Self { _tmp: tmp, ws, env }
    }

    fn glob(&self) -> Arc<dyn Tool> {
        Arc::new(Typed(GlobTool::new(self.env.clone())))
    }

    fn grep(&self) -> Arc<dyn Tool> {
        Arc::new(Typed(GrepTool::new(self.env.clone())))
    }

    fn ctx(&self) -> ToolContext {
        ToolContext::new(&self.ws, "bounds")
    }
}

async fn call(tool: &Arc<dyn Tool>, args: Value, ctx: &ToolContext) -> ToolResult {
    ToolResult::from(tool.invoke(args, ctx).await)
}

/// The call failed as invalid arguments, with a message holding every one of `words`.
fn assert_refused(r: &ToolResult, words: &[&str]) {
    let msg = r.error.clone().unwrap_or_default();
    assert!(
        !r.success,
        "accepted: {}",
        &r.output[..r.output.len().min(300)]
    );
    assert_eq!(r.error_kind.as_deref(), Some("invalid_arguments"), "{msg}");
    for w in words {
        assert!(msg.contains(w), "{w:?} not in: {msg}");
    }
    assert!(
        msg.len() < 1_000,
        "the message quotes the pattern: {} bytes",
        msg.len()
    );
}

#[tokio::test]
async fn an_over_long_glob_pattern_is_refused_naming_the_argument_and_the_limit() {
    let fx = Fixture::new();
    let ctx = fx.ctx();
    let at_limit = format!("src/{}", "a".repeat(4096 - 4));
    let r = call(&fx.glob(), json!({ "pattern": at_limit }), &ctx).await;
    assert!(r.success, "{}", r.output);
    for len in [4097, 1 << 20] {
        let long = format!("src/{}", "a/".repeat(len / 2));
        let r = call(&fx.glob(), json!({ "pattern": long }), &ctx).await;
        assert_refused(&r, &["`pattern`", "4096 bytes"]);
    }
}

#[tokio::test]
async fn an_over_long_grep_file_pattern_is_refused_naming_the_argument_and_the_limit() {
    let fx = Fixture::new();
    let long = "a/".repeat(1 << 19);
    let r = call(
        &fx.grep(),
        json!({ "pattern": "needle", "file_pattern": long }),
        &fx.ctx(),
    )
    .await;
    assert_refused(&r, &["`file_pattern`", "4096 bytes"]);
}

#[tokio::test]
async fn an_over_long_regex_is_refused_naming_the_argument_and_the_limit() {
    let fx = Fixture::new();
    let ctx = fx.ctx();
    let r = call(&fx.grep(), json!({ "pattern": "a".repeat(65_536) }), &ctx).await;
    assert!(r.success, "{}", r.error.unwrap_or_default());
    for len in [65_537, 1 << 20] {
        let r = call(&fx.grep(), json!({ "pattern": "a".repeat(len) }), &ctx).await;
        assert_refused(&r, &["`pattern`", "65536 bytes"]);
    }
}

#[tokio::test]
async fn a_short_regex_that_compiles_too_large_is_refused_with_advice() {
    let fx = Fixture::new();
    // A dozen bytes of text, megabytes of automaton (Unicode word characters, repeated).
    let r = call(&fx.grep(), json!({ "pattern": r"\w{1000}" }), &fx.ctx()).await;
    assert_refused(&r, &["`pattern`", "too large"]);
}

#[tokio::test]
async fn grep_and_glob_stop_at_the_call_s_time_limit() {
    let fx = Fixture::new();
    let mut ctx = fx.ctx();
    ctx.timeout = Duration::ZERO;
    for (tool, args) in [
        (fx.grep(), json!({ "pattern": "needle" })),
        (fx.glob(), json!({ "pattern": "**/*.rs" })),
    ] {
        let r = call(&tool, args, &ctx).await;
        assert_eq!(r.error_kind.as_deref(), Some("timeout"), "{}", r.output);
    }
    // With time to run, the same searches succeed.
    let ctx = fx.ctx();
    let r = call(&fx.grep(), json!({ "pattern": "needle" }), &ctx).await;
    assert!(r.success && r.output.contains("src/a.rs"), "{}", r.output);
}
