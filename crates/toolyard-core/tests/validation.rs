//! Arguments are checked against the advertised schema before a tool runs.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use toolyard_core::{
    Annotations, Tool, ToolContext, ToolDefinition, ToolError, ToolInfo, ToolResult, Typed,
    TypedTool, schema_of,
};

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct RunArgs {
    /// The command.
    command: String,
    /// Time limit in milliseconds.
    #[schemars(range(min = 1))]
    timeout_ms: Option<u64>,
    /// How many.
    count: Option<u32>,
    /// Lines.
    lines: Option<Vec<u64>>,
}

/// Counts its runs, so a test can see a refused call never ran.
struct Run(Arc<AtomicUsize>);

#[async_trait::async_trait]
impl TypedTool for Run {
    type Args = RunArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new("run", "Run it", Annotations::COMMAND)
    }
    async fn run(&self, _: RunArgs, _: &ToolContext) -> Result<ToolResult, ToolError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(ToolResult::ok("ran"))
    }
}

fn registry() -> (Arc<dyn Tool>, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    (Arc::new(Typed(Run(runs.clone()))), runs)
}

/// A direct call: `invoke` applies the checks the dispatcher's layers apply to a served call.
fn call(tool: &Arc<dyn Tool>, args: Value, ctx: &ToolContext) -> ToolResult {
    invoke(tool.as_ref(), args, ctx)
}

fn invoke(tool: &dyn Tool, args: Value, ctx: &ToolContext) -> ToolResult {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(tool.invoke(args, ctx)).into()
}

fn ctx() -> ToolContext {
    ToolContext::new("/tmp", "s1")
}

#[test]
fn zero_timeout_is_refused_before_the_tool_runs() {
    let (reg, runs) = registry();
    let out = call(&reg, json!({"command": "true", "timeout_ms": 0}), &ctx());
    assert!(!out.success, "{}", out.output);
    assert_eq!(out.error_kind.as_deref(), Some("invalid_arguments"));
    assert!(
        out.output
            .contains("timeout_ms: 0 is less than the minimum of 1"),
        "{}",
        out.output
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[test]
fn every_mistake_is_reported_at_once_with_its_argument() {
    let (reg, runs) = registry();
    let out = call(
        &reg,
        json!({"timeout_ms": 0, "count": "three", "lines": [1, -2], "colour": "red"}),
        &ctx(),
    );
    assert!(!out.success);
    let msg = &out.output;
    assert!(msg.contains("command"), "missing argument not named: {msg}");
    assert!(msg.contains("timeout_ms: 0"), "{msg}");
    assert!(msg.contains("count: \"three\""), "{msg}");
    assert!(msg.contains("lines[1]: -2"), "{msg}");
    assert!(msg.contains("colour"), "unknown argument not named: {msg}");
    // What to do instead: the arguments the tool takes.
    assert!(msg.contains("`run` takes"), "{msg}");
    assert!(msg.contains("command (required)"), "{msg}");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[test]
fn valid_arguments_pass_whatever_the_integer_width() {
    let (reg, runs) = registry();
    let out = call(
        &reg,
        json!({"command": "true", "timeout_ms": 5000, "count": 4_000_000_000u64, "lines": [u64::MAX]}),
        &ctx(),
    );
    assert!(out.success, "{}", out.output);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // null is the empty object, which still lacks `command`.
    let out = call(&reg, Value::Null, &ctx());
    assert!(out.output.contains("command"), "{}", out.output);
}

#[test]
fn a_timeout_over_the_ceiling_is_refused_naming_the_ceiling() {
    let (reg, runs) = registry();
    let mut c = ctx();
    c.max_timeout = Duration::from_millis(90_000);
    let out = call(&reg, json!({"command": "true", "timeout_ms": 120_000}), &c);
    assert!(!out.success);
    assert!(out.output.contains("timeout_ms: 120000"), "{}", out.output);
    assert!(out.output.contains("90000"), "{}", out.output);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let out = call(&reg, json!({"command": "true", "timeout_ms": 90_000}), &c);
    assert!(out.success, "{}", out.output);
}

/// Says the time limit its context carries.
struct Timed;

#[async_trait::async_trait]
impl TypedTool for Timed {
    type Args = RunArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new("timed", "timed", Annotations::COMMAND)
    }
    async fn run(&self, _: RunArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        Ok(ToolResult::ok(ctx.timeout.as_millis().to_string()))
    }
}

#[test]
fn the_decided_time_limit_reaches_the_tool_in_its_context() {
    let mut c = ctx();
    c.timeout = Duration::from_millis(30_000);
    c.max_timeout = Duration::from_millis(90_000);
    let asked = invoke(
        &Typed(Timed),
        json!({"command": "x", "timeout_ms": 5_000}),
        &c,
    );
    assert_eq!(asked.output, "5000");
    let default = invoke(&Typed(Timed), json!({"command": "x"}), &c);
    assert_eq!(default.output, "30000");
    // A default above the ceiling is held to it.
    c.timeout = Duration::from_millis(120_000);
    let held = invoke(&Typed(Timed), json!({"command": "x"}), &c);
    assert_eq!(held.output, "90000");
}

#[test]
fn schemas_carry_no_nonstandard_formats() {
    let schema = schema_of::<RunArgs>();
    let text = schema.to_string();
    assert!(!text.contains("\"format\""), "{text}");
    // The unsigned range stays as a minimum.
    assert_eq!(schema["properties"]["timeout_ms"]["minimum"], json!(1));
    assert_eq!(schema["properties"]["count"]["minimum"], json!(0));
}

#[test]
fn the_definition_states_the_timeout_ceiling() {
    let (tool, _) = registry();
    let def = ToolDefinition::of(tool.as_ref(), None).with_timeout_limits(30_000, 90_000);
    let t = &def.input_schema["properties"]["timeout_ms"];
    assert_eq!(t["maximum"], json!(90_000));
    assert!(t["description"].as_str().unwrap().contains("90000"), "{t}");
    // A tool without a timeout argument is left alone.
    let plain = ToolDefinition::of(tool.as_ref(), None);
    let mut other = plain.clone();
    other.input_schema["properties"]
        .as_object_mut()
        .unwrap()
        .remove("timeout_ms");
    assert_eq!(other.clone().with_timeout_limits(1, 5), other);
}

struct Broken;

#[async_trait::async_trait]
impl Tool for Broken {
    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new(
            "broken",
            "A schema no validator can compile",
            Annotations::READ_ONLY,
        )
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"a": {"type": "no-such-type"}}})
    }
    async fn invoke(&self, _: Value, _: &ToolContext) -> Result<ToolResult, ToolError> {
        Ok(ToolResult::ok("ran"))
    }
}

#[test]
fn a_schema_that_does_not_compile_is_an_error_naming_the_tool() {
    let err = Broken.check_args(&json!({})).unwrap_err();
    assert_eq!(err.kind(), "unavailable", "{err}");
    assert!(err.to_string().contains("broken"), "{err}");
}

#[test]
fn untyped_tools_are_checked_against_their_schema() {
    struct Raw;
    #[async_trait::async_trait]
    impl Tool for Raw {
        fn info(&self) -> ToolInfo<'_> {
            ToolInfo::new("raw", "raw", Annotations::READ_ONLY)
        }
        fn input_schema(&self) -> Value {
            json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}})
        }
        async fn invoke(&self, _: Value, _: &ToolContext) -> Result<ToolResult, ToolError> {
            Ok(ToolResult::ok("ran"))
        }
    }
    let err = Raw.check_args(&json!({"n": 0})).unwrap_err().to_string();
    assert!(err.contains("n: 0 is less than the minimum of 1"), "{err}");
    assert!(Raw.check_args(&json!({"n": 1})).is_ok());
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct ListArgs {
    /// At least two.
    #[schemars(length(min = 2))]
    items: Vec<String>,
}

/// Checks its own rules, in its own words.
struct Own;

#[async_trait::async_trait]
impl TypedTool for Own {
    type Args = ListArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new("own", "own", Annotations::READ_ONLY).checks_own_args()
    }
    async fn run(&self, a: ListArgs, _: &ToolContext) -> Result<ToolResult, ToolError> {
        if a.items.len() < 2 {
            return Err(ToolError::InvalidArguments(format!(
                "items: a list has at least 2 items, got {}",
                a.items.len()
            )));
        }
        Ok(ToolResult::ok("ok"))
    }
}

#[test]
fn a_tool_that_checks_its_own_rules_speaks_for_them() {
    // Parses: the tool's own words.
    let out = invoke(&Typed(Own), json!({"items": ["a"]}), &ctx());
    assert!(
        out.output.contains("a list has at least 2 items, got 1"),
        "{}",
        out.output
    );
    // Does not parse: the schema's list of every mistake, not serde's first.
    let out = invoke(&Typed(Own), json!({"items": ["a"], "extra": 1}), &ctx());
    assert!(
        out.output.contains("2 arguments are wrong"),
        "{}",
        out.output
    );
    assert!(out.output.contains("extra"), "{}", out.output);
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
enum Action {
    /// Make it.
    Create,
    /// Change it.
    Modify,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct TaskArgs {
    /// What to do.
    action: Option<Action>,
}

struct Task;

#[async_trait::async_trait]
impl TypedTool for Task {
    type Args = TaskArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new("task", "task", Annotations::READ_ONLY)
    }
    async fn run(&self, _: TaskArgs, _: &ToolContext) -> Result<ToolResult, ToolError> {
        Ok(ToolResult::ok("ok"))
    }
}

#[test]
fn a_value_outside_an_enum_lists_the_choices() {
    let out = invoke(&Typed(Task), json!({"action": "rename"}), &ctx());
    assert!(
        out.output
            .contains("action: \"rename\" is not one of \"create\", \"modify\""),
        "{}",
        out.output
    );
}
