//! web_search against local servers that speak each provider's documented format: the request
//! (method, path, key header, JSON body or query), the normalised results, retries on 429 and
//! 5xx, malformed answers, timeouts and missing configuration.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use toolyard_core::{Tool, ToolContext, ToolError, ToolResult, Typed};
use toolyard_tools::web::{
    EnvLookup, Provider, ProviderConfig, SearchConfig, WebConfig, WebSearch,
};

/// One request as the server saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: Method,
    path: String,
    query: HashMap<String, String>,
    headers: HeaderMap,
    body: Value,
}

/// One scripted answer: status, extra headers, body, delay before answering.
type Answer = (StatusCode, Vec<(&'static str, String)>, String, Duration);

/// A scripted server: answers the queued responses in order (the last one repeats) and records
/// every request.
#[derive(Clone, Default)]
struct Script {
    seen: Arc<Mutex<Vec<Seen>>>,
    answers: Arc<Mutex<Vec<Answer>>>,
}

impl Script {
    fn answer(self, status: u16, body: impl Into<String>) -> Self {
        self.answer_with(status, vec![], body, Duration::ZERO)
    }

    fn answer_with(
        self,
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: impl Into<String>,
        delay: Duration,
    ) -> Self {
        self.answers.lock().unwrap().push((
            StatusCode::from_u16(status).unwrap(),
            headers,
            body.into(),
            delay,
        ));
        self
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

async fn handler(
    State(s): State<Script>,
    method: Method,
    uri: Uri,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let n = {
        let mut seen = s.seen.lock().unwrap();
        seen.push(Seen {
            method,
            path: uri.path().to_string(),
            query,
            headers,
            body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        });
        seen.len() - 1
    };
    let (status, hdrs, body, delay) = {
        let answers = s.answers.lock().unwrap();
        answers[n.min(answers.len() - 1)].clone()
    };
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let mut resp = (status, [(header::CONTENT_TYPE, "application/json")], body).into_response();
    for (k, v) in hdrs {
        resp.headers_mut().insert(k, v.parse().unwrap());
    }
    resp
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

fn no_env() -> EnvLookup {
    Arc::new(|_| None)
}

fn env_of(pairs: &[(&str, &str)]) -> EnvLookup {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Arc::new(move |k| map.get(k).cloned())
}

/// Fast retries for tests.
fn search_config(provider: Provider) -> SearchConfig {
    SearchConfig {
        provider: Some(provider),
        max_retries: Some(2),
        backoff_base_ms: Some(1),
        backoff_max_ms: Some(5),
        timeout_ms: Some(5_000),
    }
}

fn tool(config: WebConfig, env: EnvLookup) -> Arc<dyn Tool> {
    Arc::new(Typed(WebSearch::new(Ok(config), env)))
}

async fn search(tool: &Arc<dyn Tool>, args: Value) -> Result<ToolResult, ToolError> {
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

fn serper_config(addr: SocketAddr) -> WebConfig {
    WebConfig {
        search: search_config(Provider::Serper),
        serper: ProviderConfig {
            api_key: Some("serper-key".into()),
            url: Some(format!("http://{addr}/search")),
            ..Default::default()
        },
        ..Default::default()
    }
}

const SERPER_OK: &str = r#"{
  "searchParameters": {"q": "rust async", "type": "search", "engine": "google"},
  "organic": [
    {"title": "Async Rust", "link": "https://rust-lang.github.io/async-book/", "snippet": "The async book.", "position": 1},
    {"title": "Tokio", "link": "https://tokio.rs/", "snippet": "An asynchronous runtime.", "position": 2}
  ]
}"#;

#[tokio::test]
async fn serper_posts_the_query_with_the_key_and_normalises_results() {
    let script = Script::default().answer(200, SERPER_OK);
    let addr = serve(script.clone()).await;
    let t = tool(serper_config(addr), no_env());
    let r = search(&t, json!({"query": "rust async", "max_results": 2}))
        .await
        .unwrap();

    let seen = script.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, Method::POST);
    assert_eq!(seen[0].path, "/search");
    assert_eq!(seen[0].headers["x-api-key"], "serper-key");
    assert_eq!(seen[0].body, json!({"q": "rust async", "num": 2}));

    let data = r.data.unwrap();
    assert_eq!(data["provider"], "serper");
    assert_eq!(
        data["results"],
        json!([
            {"title": "Async Rust", "url": "https://rust-lang.github.io/async-book/", "snippet": "The async book."},
            {"title": "Tokio", "url": "https://tokio.rs/", "snippet": "An asynchronous runtime."}
        ])
    );
    assert!(
        r.output
            .contains("1. Async Rust\n   https://rust-lang.github.io/async-book/")
    );
}

#[tokio::test]
async fn google_custom_search_gets_key_cx_q_and_num() {
    let script = Script::default().answer(
        200,
        r#"{"kind": "customsearch#search", "items": [
            {"kind": "customsearch#result", "title": "The Rust Book", "link": "https://doc.rust-lang.org/book/", "displayLink": "doc.rust-lang.org", "snippet": "Learn Rust."}
        ]}"#,
    );
    let addr = serve(script.clone()).await;
    let config = WebConfig {
        search: search_config(Provider::Google),
        google: ProviderConfig {
            url: Some(format!("http://{addr}/customsearch/v1")),
            ..Default::default()
        },
        ..Default::default()
    };
    let t = tool(
        config,
        env_of(&[("GOOGLE_API_KEY", "g-key"), ("GOOGLE_CSE_ID", "cx-1")]),
    );
    let r = search(&t, json!({"query": "rust book"})).await.unwrap();

    let seen = script.seen();
    assert_eq!(seen[0].method, Method::GET);
    assert_eq!(seen[0].path, "/customsearch/v1");
    assert_eq!(seen[0].query["key"], "g-key");
    assert_eq!(seen[0].query["cx"], "cx-1");
    assert_eq!(seen[0].query["q"], "rust book");
    assert_eq!(seen[0].query["num"], "5", "the default is 5 results");
    assert_eq!(
        r.data.unwrap()["results"],
        json!([{"title": "The Rust Book", "url": "https://doc.rust-lang.org/book/", "snippet": "Learn Rust."}])
    );
}

#[tokio::test]
async fn google_without_items_means_no_results() {
    let script = Script::default().answer(
        200,
        r#"{"kind": "customsearch#search", "searchInformation": {"totalResults": "0"}}"#,
    );
    let addr = serve(script).await;
    let config = WebConfig {
        search: search_config(Provider::Google),
        google: ProviderConfig {
            api_key: Some("k".into()),
            cse_id: Some("cx".into()),
            url: Some(format!("http://{addr}/customsearch/v1")),
            ..Default::default()
        },
        ..Default::default()
    };
    let r = search(&tool(config, no_env()), json!({"query": "zzzz"}))
        .await
        .unwrap();
    assert!(r.output.starts_with("No results"));
    assert_eq!(r.data.unwrap()["results"], json!([]));
}

#[tokio::test]
async fn brave_sends_the_subscription_token_and_strips_markup() {
    let script = Script::default().answer(
        200,
        r#"{"type": "search", "web": {"type": "search", "results": [
            {"title": "Cargo <strong>Book</strong>", "url": "https://doc.rust-lang.org/cargo/", "description": "The <strong>Cargo</strong> guide &amp; reference."}
        ]}}"#,
    );
    let addr = serve(script.clone()).await;
    let config = WebConfig {
        search: search_config(Provider::Brave),
        brave: ProviderConfig {
            url: Some(format!("http://{addr}/res/v1/web/search")),
            ..Default::default()
        },
        ..Default::default()
    };
    let t = tool(config, env_of(&[("BRAVE_API_KEY", "brave-key")]));
    let r = search(&t, json!({"query": "cargo", "max_results": 3}))
        .await
        .unwrap();

    let seen = script.seen();
    assert_eq!(seen[0].method, Method::GET);
    assert_eq!(seen[0].path, "/res/v1/web/search");
    assert_eq!(seen[0].headers["x-subscription-token"], "brave-key");
    assert_eq!(seen[0].query["q"], "cargo");
    assert_eq!(seen[0].query["count"], "3");
    assert_eq!(
        r.data.unwrap()["results"],
        json!([{"title": "Cargo Book", "url": "https://doc.rust-lang.org/cargo/", "snippet": "The Cargo guide & reference."}])
    );
}

#[tokio::test]
async fn searxng_asks_for_json_and_keeps_max_results() {
    let results: Vec<Value> = (0..8)
        .map(|i| json!({"title": format!("Result {i}"), "url": format!("https://example.org/{i}"), "content": format!("Snippet {i}"), "engine": "duckduckgo"}))
        .collect();
    let script =
        Script::default().answer(200, json!({"query": "q", "results": results}).to_string());
    let addr = serve(script.clone()).await;
    let config = WebConfig {
        search: search_config(Provider::Searxng),
        ..Default::default()
    };
    let t = tool(
        config,
        env_of(&[("SEARXNG_URL", &format!("http://{addr}/"))]),
    );
    let r = search(&t, json!({"query": "ferris", "max_results": 4}))
        .await
        .unwrap();

    let seen = script.seen();
    assert_eq!(seen[0].method, Method::GET);
    assert_eq!(seen[0].path, "/search");
    assert_eq!(seen[0].query["q"], "ferris");
    assert_eq!(seen[0].query["format"], "json");
    let data = r.data.unwrap();
    assert_eq!(data["results"].as_array().unwrap().len(), 4);
    assert_eq!(data["results"][3]["snippet"], "Snippet 3");
}

#[tokio::test]
async fn the_loom_proxy_gets_query_and_max_results() {
    let script = Script::default().answer(
        200,
        r#"{"query": "rust async trait", "results": [
            {"title": "Async fn in traits", "url": "https://blog.rust-lang.org/x.html", "snippet": "Stable now.", "display_link": "blog.rust-lang.org", "rank": 1}
        ]}"#,
    );
    let addr = serve(script.clone()).await;
    let config = WebConfig {
        search: search_config(Provider::Proxy),
        ..Default::default()
    };
    let t = tool(
        config,
        env_of(&[
            ("TOOLYARD_PROXY_URL", &format!("http://{addr}")),
            ("TOOLYARD_PROXY_TOKEN", "tok"),
        ]),
    );
    let r = search(&t, json!({"query": "rust async trait", "max_results": 7}))
        .await
        .unwrap();

    let seen = script.seen();
    assert_eq!(seen[0].method, Method::POST);
    assert_eq!(seen[0].path, "/proxy/cse");
    assert_eq!(seen[0].headers["authorization"], "Bearer tok");
    assert_eq!(
        seen[0].body,
        json!({"query": "rust async trait", "max_results": 7})
    );
    assert_eq!(
        r.data.unwrap()["results"],
        json!([{"title": "Async fn in traits", "url": "https://blog.rust-lang.org/x.html", "snippet": "Stable now."}])
    );
}

#[tokio::test]
async fn a_429_is_retried_and_then_succeeds() {
    let script = Script::default()
        .answer_with(
            429,
            vec![("retry-after", "0".into())],
            r#"{"message": "slow down"}"#,
            Duration::ZERO,
        )
        .answer(200, SERPER_OK);
    let addr = serve(script.clone()).await;
    let r = search(
        &tool(serper_config(addr), no_env()),
        json!({"query": "rust async"}),
    )
    .await
    .unwrap();
    assert_eq!(script.seen().len(), 2);
    assert_eq!(r.data.unwrap()["results"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn server_errors_are_retried_until_the_retries_run_out() {
    let script = Script::default().answer(503, r#"{"error": "upstream down"}"#);
    let addr = serve(script.clone()).await;
    let err = search(&tool(serper_config(addr), no_env()), json!({"query": "x"}))
        .await
        .unwrap_err();
    assert_eq!(
        script.seen().len(),
        3,
        "one attempt and max_retries = 2 retries"
    );
    let msg = err.to_string();
    assert_eq!(err.kind(), "upstream");
    assert!(
        msg.contains("503") && msg.contains("upstream down"),
        "{msg}"
    );
    assert!(msg.contains("gave up after 3 attempts"), "{msg}");
}

#[tokio::test]
async fn a_client_error_is_not_retried() {
    let script = Script::default().answer(400, r#"{"message": "bad query"}"#);
    let addr = serve(script.clone()).await;
    let err = search(&tool(serper_config(addr), no_env()), json!({"query": "x"}))
        .await
        .unwrap_err();
    assert_eq!(script.seen().len(), 1);
    assert!(err.to_string().contains("bad query"), "{err}");
}

#[tokio::test]
async fn a_rejected_key_says_which_variable_to_check() {
    let script = Script::default().answer(403, r#"{"message": "Unauthorized."}"#);
    let addr = serve(script.clone()).await;
    let err = search(&tool(serper_config(addr), no_env()), json!({"query": "x"}))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "unavailable");
    assert!(err.to_string().contains("SERPER_API_KEY"), "{err}");
    assert_eq!(script.seen().len(), 1);
}

#[tokio::test]
async fn malformed_json_is_a_clear_error() {
    for body in ["<html>gateway says hi</html>", r#"{"unexpected": true}"#] {
        let script = Script::default().answer(200, body);
        let addr = serve(script).await;
        let err = search(&tool(serper_config(addr), no_env()), json!({"query": "x"}))
            .await
            .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("Serper returned a response that is not the expected JSON"),
            "{msg}"
        );
    }
}

#[tokio::test]
async fn a_slow_provider_times_out() {
    let script = Script::default().answer_with(200, vec![], SERPER_OK, Duration::from_secs(30));
    let addr = serve(script).await;
    let mut config = serper_config(addr);
    config.search.timeout_ms = Some(200);
    let err = search(&tool(config, no_env()), json!({"query": "x"}))
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::Timeout { ms: 200 }), "{err:?}");
}

#[tokio::test]
async fn a_chosen_provider_without_its_key_names_the_variable() {
    let config = WebConfig {
        search: search_config(Provider::Serper),
        ..Default::default()
    };
    let err = search(&tool(config, no_env()), json!({"query": "x"}))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "unavailable");
    assert!(err.to_string().contains("SERPER_API_KEY"), "{err}");

    let config = WebConfig {
        search: search_config(Provider::Google),
        ..Default::default()
    };
    let err = search(
        &tool(config, env_of(&[("GOOGLE_API_KEY", "k")])),
        json!({"query": "x"}),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("GOOGLE_CSE_ID"), "{err}");
}

#[tokio::test]
async fn no_provider_at_all_lists_every_way_to_configure_one() {
    let err = search(&tool(WebConfig::default(), no_env()), json!({"query": "x"}))
        .await
        .unwrap_err();
    let msg = err.to_string();
    for var in [
        "SERPER_API_KEY",
        "GOOGLE_API_KEY",
        "GOOGLE_CSE_ID",
        "BRAVE_API_KEY",
        "SEARXNG_URL",
        "TOOLYARD_PROXY_URL",
    ] {
        assert!(msg.contains(var), "{var} missing from: {msg}");
    }
}

#[tokio::test]
async fn without_a_choice_the_first_configured_provider_is_used() {
    let script = Script::default().answer(200, r#"{"web": {"results": []}}"#);
    let addr = serve(script.clone()).await;
    let config = WebConfig {
        brave: ProviderConfig {
            url: Some(format!("http://{addr}/brave")),
            ..Default::default()
        },
        ..Default::default()
    };
    let r = search(
        &tool(config, env_of(&[("BRAVE_API_KEY", "b")])),
        json!({"query": "x"}),
    )
    .await
    .unwrap();
    assert_eq!(r.data.unwrap()["provider"], "brave");
    assert_eq!(script.seen()[0].path, "/brave");
}

#[tokio::test]
async fn max_results_is_bounded_in_schema_and_code() {
    let t = tool(WebConfig::default(), no_env());
    let schema = t.input_schema();
    assert_eq!(schema["properties"]["max_results"]["maximum"], 10);
    assert_eq!(schema["properties"]["max_results"]["minimum"], 1);
    assert_eq!(schema["required"], json!(["query"]));
    let err = search(&t, json!({"query": "x", "max_results": 11}))
        .await
        .unwrap_err();
    // The advertised schema refuses it before the tool runs, naming the bound.
    assert!(
        err.to_string()
            .contains("max_results: 11 is greater than the maximum of 10"),
        "{err}"
    );
    let err = search(&t, json!({"query": "  "})).await.unwrap_err();
    assert_eq!(err.kind(), "invalid_arguments");
}

#[test]
fn the_web_section_parses_from_a_catalog() {
    let catalog = toolyard_core::Catalog::parse_over_builtin(
        r#"
[web]
allow_private = false
allowed_hosts = ["wiki.corp:8443", "10.1.0.0/16"]
cache_ttl_secs = 600

[web.search]
provider = "brave"
max_retries = 4

[web.brave]
api_key_env = "MY_BRAVE_KEY"
"#,
        "test",
    )
    .unwrap();
    let web: WebConfig = catalog.section("web").unwrap();
    assert_eq!(web.search.provider, Some(Provider::Brave));
    assert_eq!(web.allowed_hosts.len(), 2);
    assert_eq!(web.brave.api_key_env.as_deref(), Some("MY_BRAVE_KEY"));

    let bad =
        toolyard_core::Catalog::parse_over_builtin("[web.search]\nprovider = \"bing\"\n", "test")
            .unwrap();
    let err = bad.section::<WebConfig>("web").unwrap_err().to_string();
    assert!(err.contains("bing"), "{err}");
}

#[tokio::test]
async fn an_invalid_web_section_fails_every_call_with_its_message() {
    let tools = toolyard_tools::web::tools_with(
        Err(ToolError::InvalidArguments(
            "invalid catalog: line 3: [web]: unknown field `proxi`".into(),
        )),
        no_env(),
    );
    let names: Vec<&str> = tools.iter().map(|t| t.name()).collect();
    assert_eq!(names, ["web_fetch", "web_search"]);
    for (t, args) in tools
        .iter()
        .zip([json!({"url": "http://127.0.0.1:9/"}), json!({"query": "x"})])
    {
        let err = t
            .invoke(args, &ToolContext::new("/tmp", "s1"))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("proxi"), "{err}");
    }
}

#[test]
fn web_search_needs_a_provider_and_says_which_keys_give_one() {
    let need = tool(WebConfig::default(), no_env())
        .needs()
        .expect("no provider: web_search cannot work");
    for var in [
        "SERPER_API_KEY",
        "BRAVE_API_KEY",
        "GOOGLE_API_KEY",
        "SEARXNG_URL",
    ] {
        assert!(need.contains(var), "{var} missing from: {need}");
    }
    assert!(need.contains("[web"), "no catalog key in: {need}");
    assert!(
        tool(WebConfig::default(), env_of(&[("BRAVE_API_KEY", "k")]))
            .needs()
            .is_none()
    );
    let mut c = WebConfig::default();
    c.serper.api_key = Some("k".into());
    assert!(tool(c, no_env()).needs().is_none());
    // web_fetch needs nothing.
    let tools = toolyard_tools::web::tools_with(Ok(WebConfig::default()), no_env());
    assert!(
        tools
            .iter()
            .find(|t| t.name() == "web_fetch")
            .unwrap()
            .needs()
            .is_none()
    );
}
