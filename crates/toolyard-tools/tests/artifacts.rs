//! The artifact tools: every constraint of seed 000 rejected with a message naming the field,
//! the schema carrying the same constraints, and valid plans / specs / phases stored as JSON and
//! Markdown that read back to what was given.

use std::sync::Arc;

use serde_json::{Value, json};
use toolyard_core::{Tool, ToolContext, ToolError, ToolResult, Typed};
use toolyard_tools::artifacts::{
    ARTIFACTS_DIR, ArtifactKind, CreateArtifact, Phase, Plan, Spec, from_stored_json,
    list_artifacts,
};
use toolyard_workspace::Workspace;

struct Fixture {
    _ws: tempfile::TempDir,
    workspace: Arc<Workspace>,
    tools: Vec<Arc<dyn Tool>>,
}

impl Fixture {
    fn new() -> Self {
        let ws = tempfile::tempdir().unwrap();
        let workspace = Arc::new(Workspace::open(ws.path()).unwrap());
        let tools: Vec<Arc<dyn Tool>> = vec![
            Arc::new(Typed(CreateArtifact::<Plan>::new(workspace.clone()))),
            Arc::new(Typed(CreateArtifact::<Spec>::new(workspace.clone()))),
            Arc::new(Typed(CreateArtifact::<Phase>::new(workspace.clone()))),
        ];
        Self {
            _ws: ws,
            workspace,
            tools,
        }
    }

    fn tool(&self, name: &str) -> &Arc<dyn Tool> {
        self.tools.iter().find(|t| t.name() == name).unwrap()
    }

    async fn call(&self, name: &str, args: Value) -> Result<ToolResult, ToolError> {
        let ctx = ToolContext::new(self.workspace.root(), "s1");
        let tool = self.tool(name);
        let result = tool.invoke(args, &ctx).await;
        // Every structured result conforms to the output schema the tool declares.
        if let Ok(r) = &result
            && let Some(data) = &r.data
        {
            let problems = toolyard_core::output_problems(&**tool, data);
            assert!(problems.is_empty(), "{data}: {problems:?}");
        }
        result
    }

    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.workspace.root().join(rel)).unwrap()
    }
}

fn phase_entry(name: &str) -> Value {
    json!({"name": name, "title": format!("Phase {name}"), "description": format!("Do {name}."), "validation": "cargo test"})
}

fn spec_args(n_phases: usize) -> Value {
    let phases: Vec<Value> = (1..=n_phases)
        .map(|i| phase_entry(&format!("p{i}")))
        .collect();
    json!({"name": "auth-login", "title": "Login with OAuth", "overview": "Users log in with GitHub.", "phases": phases})
}

fn phase_args() -> Value {
    json!({
        "name": "oauth-callback",
        "title": "OAuth callback",
        "objective": "Handle the provider's redirect and start a session.",
        "tasks": [
            {"description": "Add the callback route", "file": "src/routes/callback.rs", "action": "create"},
            {"description": "Register the route", "file": "src/routes/mod.rs", "action": "modify"},
            {"description": "Drop the old stub", "file": "src/routes/stub.rs", "action": "delete"},
            {"description": "Tell the team"}
        ],
        "validation_command": "cargo test -p web callback"
    })
}

fn plan_args() -> Value {
    json!({
        "title": "Ship Login v2!",
        "overview": "Replace password login with OAuth.",
        "specs": [
            {"name": "auth-login", "title": "Login with OAuth", "description": "The OAuth flow."},
            {"name": "sessions", "title": "Sessions", "description": "Cookie sessions.", "dependencies": ["auth-login"]}
        ]
    })
}

async fn error_of(f: &Fixture, tool: &str, args: Value) -> String {
    let err = f.call(tool, args).await.unwrap_err();
    assert_eq!(err.kind(), "invalid_arguments", "{err}");
    err.to_string()
}

#[tokio::test]
async fn a_spec_needs_three_to_seven_phases() {
    let f = Fixture::new();
    let msg = error_of(&f, "create_spec", spec_args(2)).await;
    assert!(
        msg.contains("phases: a spec has 3 to 7 phases, got 2"),
        "{msg}"
    );
    let msg = error_of(&f, "create_spec", spec_args(8)).await;
    assert!(
        msg.contains("phases: a spec has 3 to 7 phases, got 8"),
        "{msg}"
    );
    for n in [3, 7] {
        f.call("create_spec", spec_args(n)).await.unwrap();
    }
}

#[tokio::test]
async fn a_task_action_is_create_modify_or_delete() {
    let f = Fixture::new();
    let mut args = phase_args();
    args["tasks"][1]["action"] = json!("rename");
    let msg = error_of(&f, "create_phase", args).await;
    assert!(msg.contains("tasks[1].action"), "{msg}");
    assert!(
        msg.contains("expected create, modify or delete, got \"rename\""),
        "{msg}"
    );
}

#[tokio::test]
async fn a_phase_needs_a_validation_command() {
    let f = Fixture::new();
    let mut args = phase_args();
    args["validation_command"] = json!("   ");
    let msg = error_of(&f, "create_phase", args).await;
    assert!(
        msg.contains("validation_command: must not be empty"),
        "{msg}"
    );

    let mut args = phase_args();
    args.as_object_mut().unwrap().remove("validation_command");
    let msg = error_of(&f, "create_phase", args).await;
    assert!(msg.contains("validation_command"), "{msg}");
}

#[tokio::test]
async fn names_must_be_safe_file_names() {
    let f = Fixture::new();
    let mut args = spec_args(3);
    args["name"] = json!("Auth Login");
    let msg = error_of(&f, "create_spec", args).await;
    assert!(
        msg.contains("name: \"Auth Login\" is not a safe file name"),
        "{msg}"
    );
    assert!(msg.contains("e.g. \"auth-login\""), "{msg}");

    for bad in ["../escape", "a/b", "-dash", ".hidden", ""] {
        let mut args = phase_args();
        args["name"] = json!(bad);
        let msg = error_of(&f, "create_phase", args).await;
        assert!(msg.contains("name:"), "{bad}: {msg}");
    }
    let mut args = spec_args(3);
    args["phases"][2]["name"] = json!("P3!");
    let msg = error_of(&f, "create_spec", args).await;
    assert!(msg.contains("phases[2].name"), "{msg}");
}

#[tokio::test]
async fn every_problem_is_reported_at_once_with_its_field() {
    let f = Fixture::new();
    let mut args = spec_args(2);
    args["title"] = json!("");
    args["phases"][1]["name"] = json!("p1");
    let msg = error_of(&f, "create_spec", args).await;
    assert!(msg.contains("3 problems"), "{msg}");
    assert!(msg.contains("title: must not be empty"), "{msg}");
    assert!(
        msg.contains("phases[1].name: \"p1\" is used twice"),
        "{msg}"
    );
}

#[tokio::test]
async fn plan_rules_are_enforced() {
    let f = Fixture::new();
    let mut args = plan_args();
    args["specs"][1]["dependencies"] = json!(["billing"]);
    let msg = error_of(&f, "create_plan", args).await;
    assert!(
        msg.contains("specs[1].dependencies[0]: \"billing\" is not a spec of this plan"),
        "{msg}"
    );

    let mut args = plan_args();
    args["specs"] = json!([]);
    let msg = error_of(&f, "create_plan", args).await;
    assert!(msg.contains("specs: a plan has at least one spec"), "{msg}");

    let mut args = plan_args();
    args["title"] = json!("???");
    let msg = error_of(&f, "create_plan", args).await;
    assert!(
        msg.contains("title: needs at least one ASCII letter or digit"),
        "{msg}"
    );
}

#[tokio::test]
async fn task_files_stay_inside_the_workspace_and_tasks_exist() {
    let f = Fixture::new();
    let mut args = phase_args();
    args["tasks"][0]["file"] = json!("../outside.rs");
    let msg = error_of(&f, "create_phase", args).await;
    assert!(msg.contains("tasks[0].file"), "{msg}");

    let mut args = phase_args();
    args["tasks"] = json!([]);
    let msg = error_of(&f, "create_phase", args).await;
    assert!(
        msg.contains("tasks: a phase has at least one task"),
        "{msg}"
    );
}

#[tokio::test]
async fn unknown_and_missing_fields_are_refused() {
    let f = Fixture::new();
    let mut args = spec_args(3);
    args["priority"] = json!("high");
    let msg = error_of(&f, "create_spec", args).await;
    assert!(msg.contains("priority"), "{msg}");
    let mut args = spec_args(3);
    args["phases"][0]
        .as_object_mut()
        .unwrap()
        .remove("description");
    let msg = error_of(&f, "create_spec", args).await;
    assert!(
        msg.contains("phases[0]") && msg.contains("description"),
        "{msg}"
    );
}

#[test]
fn the_schemas_carry_seed_000s_constraints() {
    let f = Fixture::new();
    let spec = f.tool("create_spec").input_schema();
    assert_eq!(spec["properties"]["phases"]["minItems"], 3);
    assert_eq!(spec["properties"]["phases"]["maxItems"], 7);
    assert_eq!(
        spec["required"],
        json!(["name", "title", "overview", "phases"])
    );
    assert!(spec["properties"]["name"]["pattern"].is_string());

    let phase = f.tool("create_phase").input_schema();
    assert_eq!(
        phase["required"],
        json!(["name", "title", "objective", "tasks", "validation_command"])
    );
    let action = &phase["properties"]["tasks"]["items"]["properties"]["action"];
    let text = action.to_string();
    for v in ["create", "modify", "delete"] {
        assert!(text.contains(v), "{text}");
    }
    assert_eq!(
        phase["properties"]["tasks"]["items"]["required"],
        json!(["description"])
    );

    let plan = f.tool("create_plan").input_schema();
    assert_eq!(plan["required"], json!(["title", "overview", "specs"]));
    assert_eq!(
        plan["properties"]["specs"]["items"]["required"],
        json!(["name", "title", "description"])
    );

    // A JSON Schema validator agrees with the code on the same inputs.
    let validator = jsonschema::validator_for(&spec).unwrap();
    assert!(validator.is_valid(&spec_args(3)));
    assert!(!validator.is_valid(&spec_args(2)));
    assert!(!validator.is_valid(&spec_args(8)));
    let phase_validator = jsonschema::validator_for(&phase).unwrap();
    assert!(phase_validator.is_valid(&phase_args()));
    let mut bad = phase_args();
    bad["tasks"][0]["action"] = json!("rename");
    assert!(!phase_validator.is_valid(&bad));
    let mut bad = phase_args();
    bad["name"] = json!("Bad Name");
    assert!(!phase_validator.is_valid(&bad));
}

#[tokio::test]
async fn a_spec_round_trips_through_json_and_markdown() {
    let f = Fixture::new();
    let r = f.call("create_spec", spec_args(4)).await.unwrap();
    let json_path = format!("{ARTIFACTS_DIR}/specs/auth-login.json");
    let md_path = format!("{ARTIFACTS_DIR}/specs/auth-login.md");
    assert_eq!(r.files_changed, vec![json_path.clone(), md_path.clone()]);
    let data = r.data.unwrap();
    assert_eq!(data["kind"], "spec");
    assert_eq!(data["name"], "auth-login");
    assert_eq!(data["created"], true);
    assert!(
        r.output.contains("Created spec `auth-login` (4 phases)"),
        "{}",
        r.output
    );

    let stored: Value = serde_json::from_str(&f.read(&json_path)).unwrap();
    assert_eq!(stored["version"], 1);
    assert_eq!(stored["kind"], "spec");
    let back: Spec = from_stored_json(&stored).unwrap();
    let given: Spec = serde_json::from_value(spec_args(4)).unwrap();
    assert_eq!(back, given);

    let md = f.read(&md_path);
    assert!(md.starts_with("# Spec: Login with OAuth\n"), "{md}");
    assert!(md.contains("Users log in with GitHub."), "{md}");
    for i in 1..=4 {
        assert!(
            md.contains(&format!("### Phase {i}: Phase p{i} (`p{i}`)")),
            "{md}"
        );
        assert!(md.contains(&format!("Do p{i}.")), "{md}");
    }
    assert!(md.contains("**Validation:** cargo test"), "{md}");
}

#[tokio::test]
async fn a_phase_round_trips_through_json_and_markdown() {
    let f = Fixture::new();
    f.call("create_phase", phase_args()).await.unwrap();
    let stored: Value =
        serde_json::from_str(&f.read(&format!("{ARTIFACTS_DIR}/phases/oauth-callback.json")))
            .unwrap();
    let back: Phase = from_stored_json(&stored).unwrap();
    assert_eq!(back, serde_json::from_value::<Phase>(phase_args()).unwrap());
    assert_eq!(serde_json::to_value(&back).unwrap(), phase_args());

    let md = f.read(&format!("{ARTIFACTS_DIR}/phases/oauth-callback.md"));
    assert!(md.starts_with("# Phase: OAuth callback\n"), "{md}");
    assert!(
        md.contains("1. **create** `src/routes/callback.rs`: Add the callback route"),
        "{md}"
    );
    assert!(
        md.contains("2. **modify** `src/routes/mod.rs`: Register the route"),
        "{md}"
    );
    assert!(
        md.contains("3. **delete** `src/routes/stub.rs`: Drop the old stub"),
        "{md}"
    );
    assert!(md.contains("4. Tell the team"), "{md}");
    assert!(
        md.contains("```sh\ncargo test -p web callback\n```"),
        "{md}"
    );
}

#[tokio::test]
async fn a_plan_is_named_by_the_slug_of_its_title_and_round_trips() {
    let f = Fixture::new();
    let r = f.call("create_plan", plan_args()).await.unwrap();
    assert_eq!(r.data.unwrap()["name"], "ship-login-v2");
    let stored: Value =
        serde_json::from_str(&f.read(&format!("{ARTIFACTS_DIR}/plans/ship-login-v2.json")))
            .unwrap();
    let back: Plan = from_stored_json(&stored).unwrap();
    assert_eq!(back, serde_json::from_value::<Plan>(plan_args()).unwrap());
    let md = f.read(&format!("{ARTIFACTS_DIR}/plans/ship-login-v2.md"));
    assert!(md.starts_with("# Plan: Ship Login v2!\n"), "{md}");
    assert!(md.contains("### 2. Sessions (`sessions`)"), "{md}");
    assert!(md.contains("Depends on: `auth-login`"), "{md}");
}

#[tokio::test]
async fn creating_again_replaces_under_the_same_name() {
    let f = Fixture::new();
    f.call("create_spec", spec_args(3)).await.unwrap();
    let r = f.call("create_spec", spec_args(5)).await.unwrap();
    assert_eq!(r.data.unwrap()["created"], false);
    assert!(r.output.starts_with("Replaced spec"), "{}", r.output);
    let stored: Value =
        serde_json::from_str(&f.read(&format!("{ARTIFACTS_DIR}/specs/auth-login.json"))).unwrap();
    assert_eq!(stored["artifact"]["phases"].as_array().unwrap().len(), 5);
}

#[tokio::test]
async fn list_artifacts_shows_everything_stored_in_order() {
    let f = Fixture::new();
    assert!(list_artifacts(&f.workspace).unwrap().is_empty());
    f.call("create_phase", phase_args()).await.unwrap();
    f.call("create_spec", spec_args(3)).await.unwrap();
    f.call("create_plan", plan_args()).await.unwrap();
    std::fs::write(
        f.workspace
            .root()
            .join(format!("{ARTIFACTS_DIR}/phases/zz-broken.json")),
        "{ not json",
    )
    .unwrap();

    let list = list_artifacts(&f.workspace).unwrap();
    let summary: Vec<(ArtifactKind, &str, &str, &str)> = list
        .iter()
        .map(|a| (a.kind, a.name.as_str(), a.title.as_str(), a.parts.as_str()))
        .collect();
    assert_eq!(
        summary,
        vec![
            (
                ArtifactKind::Plan,
                "ship-login-v2",
                "Ship Login v2!",
                "2 specs"
            ),
            (
                ArtifactKind::Spec,
                "auth-login",
                "Login with OAuth",
                "3 phases"
            ),
            (
                ArtifactKind::Phase,
                "oauth-callback",
                "OAuth callback",
                "4 tasks"
            ),
            (ArtifactKind::Phase, "zz-broken", "", ""),
        ]
    );
    assert_eq!(
        list[1].path,
        format!("{ARTIFACTS_DIR}/specs/auth-login.json")
    );
    assert_eq!(
        list[1].markdown_path,
        format!("{ARTIFACTS_DIR}/specs/auth-login.md")
    );
    assert!(list[3].problem.is_some());
    assert!(list[..3].iter().all(|a| a.problem.is_none()));
}
