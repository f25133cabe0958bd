//! Seeds 003/004's API as written, and the example agent loop against the scripted model
//! (tests/frameworks/model_server.py, python3) on 127.0.0.1.

#[path = "../examples/agent_loop.rs"]
mod agent_loop;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use toolyard_api::{
    Catalog, RegistryBuilder, ThreadId, Tool, ToolContext, ToolError, ToolRegistry,
};

fn workspace() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join("src")).expect("mkdir");
    std::fs::write(
        ws.join("src/main.rs"),
        "fn main() {\n    println!(\"hi\");\n}\n",
    )
    .expect("write");
    (dir, ws)
}

/// A registry whose state dir is inside `dir`, with a post-tools command hook appending each
/// mutating call's JSON to `dir/hooks.jsonl`.
fn registry(dir: &Path, ws: &Path) -> ToolRegistry {
    let log = dir.join("hooks.jsonl");
    let catalog = Catalog::parse_over_builtin(
        &format!(
            "[hooks.post_tools]\ncommand = \"cat >> '{}'; echo >> '{}'\"\n",
            log.display(),
            log.display()
        ),
        "test.toml",
    )
    .expect("catalog");
    RegistryBuilder::new(ws)
        .catalog(catalog)
        .state_dir(dir.join("state"))
        .build()
        .expect("registry")
}

struct Shout;

#[async_trait]
impl Tool for Shout {
    fn name(&self) -> &str {
        "shout"
    }
    fn description(&self) -> &str {
        "Upper-cases text"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
    }
    async fn invoke(&self, args: Value, _ctx: &ToolContext) -> Result<Value, ToolError> {
        let text = args["text"]
            .as_str()
            .ok_or_else(|| ToolError::InvalidArguments("text must be a string".into()))?;
        Ok(json!({"result": text.to_uppercase()}))
    }
}

#[tokio::test]
async fn seed_names_get_list_invoke_and_the_post_tools_hook() {
    let (dir, ws) = workspace();
    let mut reg = registry(dir.path(), &ws);
    for name in ["read_file", "list_files", "edit_file", "bash"] {
        assert!(reg.list().contains(&name), "{name} in {:?}", reg.list());
    }
    reg.register(Arc::new(Shout));
    assert!(reg.list().contains(&"shout"));
    let ctx = ToolContext {
        workspace_root: ws.clone(),
        cwd: ws.join("src"),
        thread_id: Some(ThreadId("t1".into())),
    };

    // read_file as seed 003 shows it: {path, contents, truncated}.
    let read = reg.get("read_file").expect("read_file");
    assert!(!read.is_mutating());
    let v = read
        .invoke(json!({"path": "src/main.rs"}), &ctx)
        .await
        .expect("read");
    assert_eq!(
        v["contents"],
        json!("fn main() {\n    println!(\"hi\");\n}\n")
    );
    assert_eq!(v["truncated"], json!(false));

    // edit_file {path, edits}: {path, edits_applied, original_bytes, new_bytes}.
    let edit = reg.get("edit_file").expect("edit_file");
    assert!(edit.is_mutating());
    let v = edit
        .invoke(
            json!({"path": "src/main.rs", "edits": [{"old_str": "hi", "new_str": "hello"}]}),
            &ctx,
        )
        .await
        .expect("edit");
    assert_eq!(v["edits_applied"], json!(1));
    assert!(
        std::fs::read_to_string(ws.join("src/main.rs"))
            .expect("read")
            .contains("hello")
    );

    // A failed edit is an Err the loop can show the model; the file is untouched.
    let e = edit
        .invoke(
            json!({"path": "src/main.rs", "edits": [{"old_str": "nope", "new_str": "x"}]}),
            &ctx,
        )
        .await
        .expect_err("a miss");
    assert!(
        e.to_string().contains("nope") || e.to_string().contains("not found"),
        "{e}"
    );

    // bash runs in the context's cwd.
    let v = reg
        .get("bash")
        .expect("bash")
        .invoke(json!({"command": "pwd; ls"}), &ctx)
        .await
        .expect("bash");
    assert!(
        v["stdout"]
            .as_str()
            .is_some_and(|s| s.contains("main.rs") && s.contains("/src")),
        "{v}"
    );
    assert_eq!(v["exit_code"], json!(0));

    // The path confinement and the command policy are the dispatcher's layers.
    let e = read
        .invoke(json!({"path": "../../etc/passwd"}), &ctx)
        .await
        .expect_err("escape");
    assert!(e.to_string().contains("outside the workspace"), "{e}");
    let e = reg
        .get("bash")
        .expect("bash")
        .invoke(json!({"command": "rm -rf /"}), &ctx)
        .await
        .expect_err("blocked");
    assert!(e.to_string().contains("blocked"), "{e}");

    // A context for another workspace is refused, naming both.
    let other = ToolContext::new(dir.path());
    let e = read
        .invoke(json!({"path": "x"}), &other)
        .await
        .expect_err("other workspace");
    assert!(
        e.to_string().contains("not this registry's workspace"),
        "{e}"
    );

    // The embedder's own tool.
    let v = reg
        .get("shout")
        .expect("shout")
        .invoke(json!({"text": "hi"}), &ctx)
        .await
        .expect("shout");
    assert_eq!(v, json!({"result": "HI"}));

    // The post-tools hook fired for the mutating calls only: the edit and the bash calls.
    let log = std::fs::read_to_string(dir.path().join("hooks.jsonl")).expect("hook log");
    let calls: Vec<Value> = log
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("hook JSON"))
        .collect();
    let tools: Vec<&str> = calls
        .iter()
        .filter_map(|c| c["tool_name"].as_str())
        .collect();
    assert!(
        tools.contains(&"edit_file") && tools.contains(&"bash"),
        "{tools:?}"
    );
    assert!(!tools.contains(&"read_file"), "{tools:?}");
}

/// The scripted model: python3 tests/frameworks/model_server.py SCRIPT (prints its base URL).
struct Model {
    child: Child,
    base_url: String,
}

impl Drop for Model {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn model(script: &Value, dir: &Path) -> Model {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let script_path = dir.join("script.json");
    std::fs::write(&script_path, script.to_string()).expect("script");
    let mut child = Command::new("python3")
        .arg(repo.join("tests/frameworks/model_server.py"))
        .arg(&script_path)
        .arg(dir.join("requests.jsonl"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs the scripted model");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("its base URL");
    Model {
        child,
        base_url: line.trim().to_string(),
    }
}

#[tokio::test]
async fn the_example_agent_loop_runs_against_the_scripted_model() {
    let (dir, ws) = workspace();
    let reg = registry(dir.path(), &ws);
    let script = json!([
        {"tool": "read_file", "args": {"path": "src/main.rs"}},
        {"tool": "edit_file", "args": {"path": "src/main.rs",
                                        "edits": [{"old_str": "hi", "new_str": "there"}]}},
        {"tool": "edit_file", "args": {"path": "src/main.rs",
                                        "edits": [{"old_str": "absent", "new_str": "x"}]}},
        {"tool": "bash", "args": {"command": "grep -c there src/main.rs"}},
    ]);
    let m = model(&script, dir.path());
    let ctx = ToolContext::new(&ws).with_thread("loop");
    let (steps, answer) = agent_loop::run(&m.base_url, &reg, &ctx, "fix the greeting", 10)
        .await
        .expect("the loop ends");
    assert_eq!(answer, "done");
    let tools: Vec<(&str, bool)> = steps.iter().map(|s| (s.tool.as_str(), s.ok)).collect();
    assert_eq!(
        tools,
        [
            ("read_file", true),
            ("edit_file", true),
            ("edit_file", false),
            ("bash", true)
        ]
    );
    assert!(
        steps[0].content.contains("println!(\\\"hi\\\")"),
        "{}",
        steps[0].content
    );
    assert!(
        steps[2].content.starts_with("Error: "),
        "{}",
        steps[2].content
    );
    assert!(
        steps[3].content.contains("\"stdout\":\"1\\n\""),
        "{}",
        steps[3].content
    );
    // What the model received: the requests the loop sent carry each result.
    let log = std::fs::read_to_string(dir.path().join("requests.jsonl")).expect("requests");
    let last: Value = serde_json::from_str(log.lines().last().expect("a request")).expect("JSON");
    let tool_messages: Vec<&Value> = last["body"]["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(tool_messages.len(), 4);
    assert!(
        std::fs::read_to_string(ws.join("src/main.rs"))
            .expect("read")
            .contains("there")
    );
}
