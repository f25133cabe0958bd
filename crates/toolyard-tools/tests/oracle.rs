//! oracle against a local OpenAI-compatible server (and a Loom-style proxy) that answers from a
//! script: the request it sends, the answer it returns, and the errors when it cannot.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use toolyard_core::{Tool, ToolContext, ToolError, ToolResult, Typed};
use toolyard_tools::oracle::{Oracle, OracleConfig};
use toolyard_tools::web::EnvLookup;

#[derive(Clone, Default)]
struct Script {
    seen: Arc<Mutex<Vec<(String, HeaderMap, Value)>>>,
    answers: Arc<Mutex<Vec<(u16, String)>>>,
}

impl Script {
    fn answer(self, status: u16, body: impl Into<String>) -> Self {
        self.answers.lock().unwrap().push((status, body.into()));
        self
    }
}

async fn handler(State(s): State<Script>, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let n = {
        let mut seen = s.seen.lock().unwrap();
        seen.push((
            uri.path().to_string(),
            headers,
            serde_json::from_slice(&body).unwrap_or(Value::Null),
        ));
        seen.len() - 1
    };
    let (status, body) = {
        let a = s.answers.lock().unwrap();
        a[n.min(a.len() - 1)].clone()
    };
    (
        StatusCode::from_u16(status).unwrap(),
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

async fn serve(script: Script) -> SocketAddr {
    let app = Router::new().fallback(handler).with_state(script);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    addr
}

fn env_of(pairs: &[(&str, &str)]) -> EnvLookup {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Arc::new(move |k| map.get(k).cloned())
}

fn oracle(config: OracleConfig, env: EnvLookup) -> Arc<dyn Tool> {
    Arc::new(Typed(Oracle::new(Ok(config), env)))
}

async fn ask(tool: &Arc<dyn Tool>, args: Value) -> Result<ToolResult, ToolError> {
    let result = tool.invoke(args, &ToolContext::new("/tmp", "s1")).await;
    // Every structured result conforms to the output schema the tool declares.
    if let Ok(r) = &result
        && let Some(data) = &r.data
    {
        let problems = toolyard_core::output_problems(&**tool, data);
        assert!(problems.is_empty(), "{data}: {problems:?}");
    }
    result
}

const COMPLETION: &str = r#"{
  "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "second-opinion-1",
  "choices": [{"index": 0, "message": {"role": "assistant", "content": "Use a BTreeMap: ordered keys."}, "finish_reason": "stop"}],
  "usage": {"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27}
}"#;

fn direct_config(addr: SocketAddr) -> OracleConfig {
    OracleConfig {
        base_url: Some(format!("http://{addr}/v1")),
        model: Some("second-opinion-1".into()),
        backoff_base_ms: Some(1),
        ..Default::default()
    }
}

#[tokio::test]
async fn the_oracle_asks_an_openai_compatible_endpoint_and_returns_its_answer() {
    let script = Script::default().answer(200, COMPLETION);
    let addr = serve(script.clone()).await;
    let t = oracle(
        direct_config(addr),
        env_of(&[("TOOLYARD_ORACLE_API_KEY", "sk-test")]),
    );
    let r = ask(
        &t,
        json!({"question": "HashMap or BTreeMap for a sorted listing?", "context": "We print keys in order."}),
    )
    .await
    .unwrap();

    assert_eq!(r.output, "Use a BTreeMap: ordered keys.");
    let data = r.data.unwrap();
    assert_eq!(data["answer"], "Use a BTreeMap: ordered keys.");
    assert_eq!(data["model"], "second-opinion-1");
    assert_eq!(data["via"], "direct");
    assert_eq!(data["finish_reason"], "stop");

    let seen = script.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    let (path, headers, body) = &seen[0];
    assert_eq!(path, "/v1/chat/completions");
    assert_eq!(headers["authorization"], "Bearer sk-test");
    assert_eq!(body["model"], "second-opinion-1");
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["role"], "system");
    assert_eq!(messages[1]["role"], "user");
    let user = messages[1]["content"].as_str().unwrap();
    assert!(
        user.starts_with("HashMap or BTreeMap for a sorted listing?"),
        "{user}"
    );
    assert!(user.contains("We print keys in order."), "{user}");
}

#[tokio::test]
async fn settings_come_from_the_environment_too() {
    let script = Script::default().answer(200, COMPLETION);
    let addr = serve(script.clone()).await;
    let t = oracle(
        OracleConfig {
            api_key_env: Some("MY_KEY".into()),
            system_prompt: Some(String::new()),
            max_tokens: Some(256),
            ..Default::default()
        },
        env_of(&[
            ("TOOLYARD_ORACLE_BASE_URL", &format!("http://{addr}/v1/")),
            ("TOOLYARD_ORACLE_MODEL", "env-model"),
            ("MY_KEY", "sk-env"),
        ]),
    );
    ask(&t, json!({"question": "why?"})).await.unwrap();
    let seen = script.seen.lock().unwrap().clone();
    let (path, headers, body) = &seen[0];
    assert_eq!(path, "/v1/chat/completions");
    assert_eq!(headers["authorization"], "Bearer sk-env");
    assert_eq!(body["model"], "env-model");
    assert_eq!(body["max_tokens"], 256);
    assert_eq!(
        body["messages"].as_array().unwrap().len(),
        1,
        "an empty system prompt is left out"
    );
}

#[tokio::test]
async fn the_oracle_can_go_through_a_loom_style_proxy() {
    let script = Script::default().answer(
        200,
        r#"{"message": {"role": "assistant", "content": "Proxy says hi."}, "usage": {"prompt_tokens": 3, "completion_tokens": 3}, "finish_reason": "end_turn"}"#,
    );
    let addr = serve(script.clone()).await;
    let t = oracle(
        OracleConfig {
            proxy_url: Some(format!("http://{addr}")),
            model: Some("gpt-4o".into()),
            ..Default::default()
        },
        env_of(&[("TOOLYARD_PROXY_TOKEN", "proxy-token")]),
    );
    let r = ask(&t, json!({"question": "hello?"})).await.unwrap();
    assert_eq!(r.output, "Proxy says hi.");
    assert_eq!(r.data.unwrap()["via"], "proxy");
    let seen = script.seen.lock().unwrap().clone();
    assert_eq!(seen[0].0, "/proxy/openai/complete");
    assert_eq!(seen[0].1["authorization"], "Bearer proxy-token");
    assert_eq!(seen[0].2["model"], "gpt-4o");
}

#[tokio::test]
async fn a_server_error_is_retried() {
    let script = Script::default()
        .answer(500, r#"{"error": {"message": "overloaded"}}"#)
        .answer(200, COMPLETION);
    let addr = serve(script.clone()).await;
    let r = ask(
        &oracle(direct_config(addr), env_of(&[])),
        json!({"question": "q"}),
    )
    .await
    .unwrap();
    assert_eq!(r.output, "Use a BTreeMap: ordered keys.");
    assert_eq!(script.seen.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn a_refused_key_says_which_variable_to_set() {
    let script = Script::default().answer(
        401,
        r#"{"error": {"message": "Incorrect API key provided"}}"#,
    );
    let addr = serve(script).await;
    let err = ask(
        &oracle(direct_config(addr), env_of(&[])),
        json!({"question": "q"}),
    )
    .await
    .unwrap_err();
    let msg = err.to_string();
    assert_eq!(err.kind(), "unavailable");
    assert!(msg.contains("Incorrect API key provided"), "{msg}");
    assert!(msg.contains("OPENAI_API_KEY"), "{msg}");
}

#[tokio::test]
async fn a_malformed_answer_is_a_clear_error() {
    for body in ["not json at all", r#"{"choices": []}"#] {
        let script = Script::default().answer(200, body);
        let addr = serve(script).await;
        let err = ask(
            &oracle(direct_config(addr), env_of(&[])),
            json!({"question": "q"}),
        )
        .await
        .unwrap_err();
        let msg = err.to_string();
        assert_eq!(err.kind(), "upstream", "{msg}");
        assert!(
            msg.contains("not the expected JSON") || msg.contains("choices[0].message.content"),
            "{msg}"
        );
    }
}

#[tokio::test]
async fn an_unconfigured_oracle_says_what_to_set() {
    let err = ask(
        &oracle(OracleConfig::default(), env_of(&[])),
        json!({"question": "q"}),
    )
    .await
    .unwrap_err();
    let msg = err.to_string();
    assert_eq!(err.kind(), "unavailable");
    for needle in [
        "TOOLYARD_ORACLE_BASE_URL",
        "TOOLYARD_ORACLE_MODEL",
        "OPENAI_API_KEY",
        "[oracle]",
    ] {
        assert!(msg.contains(needle), "{needle} missing from {msg}");
    }

    let err = ask(
        &oracle(
            OracleConfig {
                base_url: Some("http://127.0.0.1:9/v1".into()),
                ..Default::default()
            },
            env_of(&[]),
        ),
        json!({"question": "q"}),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("TOOLYARD_ORACLE_MODEL"), "{err}");
}

#[tokio::test]
async fn the_oracle_schema_and_arguments() {
    let t = oracle(OracleConfig::default(), env_of(&[]));
    assert_eq!(t.name(), "oracle");
    let schema = t.input_schema();
    assert_eq!(schema["required"], json!(["question"]));
    assert!(schema["properties"]["context"].is_object());
    assert!(t.output_schema().is_some());
    let err = ask(&t, json!({"question": "q", "model": "x"}))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("model"),
        "unknown fields are refused: {err}"
    );
    let err = ask(&t, json!({"question": " "})).await.unwrap_err();
    assert_eq!(err.kind(), "invalid_arguments");
}

#[test]
fn the_oracle_section_parses_from_a_catalog() {
    let catalog = toolyard_core::Catalog::parse_over_builtin(
        "[oracle]\nbase_url = \"http://localhost:11434/v1\"\nmodel = \"qwen3\"\napi_key_env = \"OLLAMA_KEY\"\n",
        "test",
    )
    .unwrap();
    let c: OracleConfig = catalog.section("oracle").unwrap();
    assert_eq!(c.model.as_deref(), Some("qwen3"));
    let bad =
        toolyard_core::Catalog::parse_over_builtin("[oracle]\nmodle = \"x\"\n", "test").unwrap();
    assert!(
        bad.section::<OracleConfig>("oracle")
            .unwrap_err()
            .to_string()
            .contains("modle")
    );
}

#[test]
fn oracle_needs_an_endpoint_and_a_model_and_says_where_to_set_them() {
    let need = oracle(OracleConfig::default(), env_of(&[]))
        .needs()
        .expect("no endpoint: oracle cannot work");
    assert!(need.contains("TOOLYARD_ORACLE_BASE_URL"), "{need}");
    assert!(need.contains("[oracle]"), "{need}");
    let need = oracle(
        OracleConfig::default(),
        env_of(&[("TOOLYARD_ORACLE_BASE_URL", "http://127.0.0.1:9/v1")]),
    )
    .needs()
    .expect("no model");
    assert!(need.contains("TOOLYARD_ORACLE_MODEL"), "{need}");
    let ready = OracleConfig {
        base_url: Some("http://127.0.0.1:9/v1".into()),
        model: Some("m".into()),
        ..Default::default()
    };
    assert!(oracle(ready, env_of(&[])).needs().is_none());
}
