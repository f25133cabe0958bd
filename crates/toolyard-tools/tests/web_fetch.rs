//! web_fetch against local HTTP servers on 127.0.0.1: conversion, paging, redirects, refusals,
//! the download cap, the cache, timeouts and the SSRF guard (on).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use serde_json::{Value, json};
use toolyard_core::{Tool, ToolContext, ToolError};
use toolyard_tools::web::{WebConfig, WebFetch};

async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    addr
}

fn fetch_tool(config: WebConfig) -> Arc<dyn Tool> {
    Arc::new(toolyard_core::Typed(WebFetch::new(Ok(config))))
}

/// Loopback allowed: the test servers live there.
fn open_config() -> WebConfig {
    WebConfig {
        allow_private: true,
        ..Default::default()
    }
}

fn ctx() -> ToolContext {
    ToolContext::new("/tmp", "s1")
}

async fn call(tool: &Arc<dyn Tool>, args: Value) -> Result<toolyard_core::ToolResult, ToolError> {
    let result = tool.invoke(args, &ctx()).await;
    // Every structured result conforms to the output schema the tool declares.
    if let Ok(r) = &result
        && let Some(data) = &r.data
    {
        let problems = toolyard_core::output_problems(&**tool, data);
        assert!(problems.is_empty(), "{data}: {problems:?}");
    }
    result
}

const ARTICLE_PAGE: &str = r#"<!doctype html>
<html><head><title>Ferris goes sailing</title>
<style>body { color: red }</style>
<script>window.trackEverything = function() { return "TRACKING-CODE"; };</script>
</head>
<body>
<nav class="site-nav"><ul><li><a href="/">Home</a></li><li><a href="/about">About us</a></li><li><a href="/shop">Shop</a></li></ul></nav>
<main><article>
<h1>Ferris goes sailing</h1>
<p>Ferris the crab set out from the harbour at dawn, carrying nothing but a borrow checker and a
small bag of lifetimes. The sea was calm and the wind was steady from the west, which suited a
crab who prefers to move sideways.</p>
<p>By noon the harbour had vanished behind the horizon. Ferris checked the compass, adjusted the
sail, and wrote a short note in the log about the importance of ownership at sea: every rope has
exactly one owner, and borrowing a rope requires asking nicely.</p>
<p>When the storm came in the afternoon, Ferris did not panic. The boat was built from safe code,
with no undefined behaviour anywhere in its hull, and it rode the waves until evening.</p>
<pre><code>fn main() { println!("ahoy"); }</code></pre>
</article></main>
<footer>Copyright Example Corp. All rights reserved. Cookie settings.</footer>
<script>console.log("FOOTER-SCRIPT")</script>
</body></html>"#;

#[tokio::test]
async fn html_page_becomes_markdown_with_the_article_and_without_scripts() {
    let app = Router::new().route(
        "/post",
        get(|| async {
            (
                [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
                ARTICLE_PAGE,
            )
        }),
    );
    let addr = serve(app).await;
    let tool = fetch_tool(open_config());
    let r = call(&tool, json!({"url": format!("http://{addr}/post")}))
        .await
        .unwrap();
    assert!(r.success);
    let md = &r.output;
    assert!(
        md.contains("Ferris the crab set out from the harbour"),
        "{md}"
    );
    assert!(md.contains("every rope has"), "{md}");
    assert!(md.contains("```"), "code block kept: {md}");
    assert!(!md.contains("TRACKING-CODE"), "{md}");
    assert!(!md.contains("FOOTER-SCRIPT"), "{md}");
    assert!(!md.contains("color: red"), "{md}");
    assert!(!md.contains("About us"), "navigation dropped: {md}");
    assert!(!md.contains("Cookie settings"), "footer dropped: {md}");
    assert!(md.starts_with("# Ferris goes sailing"), "{md}");
    assert!(!md.contains("<p>"), "no HTML left: {md}");
    let data = r.data.unwrap();
    assert_eq!(data["format"], "markdown");
    assert_eq!(data["status"], 200);
    assert_eq!(data["next_start_index"], Value::Null);
}

#[tokio::test]
async fn raw_returns_the_html_source() {
    let app = Router::new().route(
        "/post",
        get(|| async { ([(header::CONTENT_TYPE, "text/html")], ARTICLE_PAGE) }),
    );
    let addr = serve(app).await;
    let tool = fetch_tool(open_config());
    let r = call(
        &tool,
        json!({"url": format!("http://{addr}/post"), "raw": true}),
    )
    .await
    .unwrap();
    assert!(r.output.contains("<article>"));
    assert_eq!(r.data.unwrap()["format"], "html");
}

#[tokio::test]
async fn json_and_plain_text_are_passed_through() {
    let app = Router::new()
        .route(
            "/api",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "application/json")],
                    r#"{"name":"toolyard","tags":["a","b"]}"#,
                )
            }),
        )
        .route(
            "/notes.txt",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/plain")],
                    "line one\n<b>not html</b>\n",
                )
            }),
        );
    let addr = serve(app).await;
    let tool = fetch_tool(open_config());

    let r = call(&tool, json!({"url": format!("http://{addr}/api")}))
        .await
        .unwrap();
    let parsed: Value = serde_json::from_str(r.output.trim()).unwrap();
    assert_eq!(parsed, json!({"name": "toolyard", "tags": ["a", "b"]}));
    assert_eq!(r.data.unwrap()["format"], "json");

    let r = call(&tool, json!({"url": format!("http://{addr}/notes.txt")}))
        .await
        .unwrap();
    assert_eq!(r.output, "line one\n<b>not html</b>\n");
    assert_eq!(r.data.unwrap()["format"], "text");
}

#[tokio::test]
async fn a_redirect_chain_is_followed_hop_by_hop() {
    let app = Router::new()
        .route("/a", get(|| async { Redirect::temporary("/b") }))
        .route("/b", get(|| async { Redirect::permanent("/c") }))
        .route(
            "/c",
            get(|| async { (StatusCode::FOUND, [(header::LOCATION, "/final")]) }),
        )
        .route(
            "/final",
            get(|| async { ([(header::CONTENT_TYPE, "text/plain")], "arrived") }),
        );
    let addr = serve(app).await;
    let tool = fetch_tool(open_config());
    let r = call(&tool, json!({"url": format!("http://{addr}/a")}))
        .await
        .unwrap();
    assert!(r.output.contains("arrived"));
    assert!(r.output.contains("redirected to"), "{}", r.output);
    let data = r.data.unwrap();
    assert_eq!(data["final_url"], format!("http://{addr}/final"));
    assert_eq!(data["redirects"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn too_many_redirects_is_an_error() {
    let app = Router::new().route("/loop", get(|| async { Redirect::temporary("/loop") }));
    let addr = serve(app).await;
    let tool = fetch_tool(WebConfig {
        max_redirects: Some(3),
        ..open_config()
    });
    let err = call(&tool, json!({"url": format!("http://{addr}/loop")}))
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("too many redirects"), "{msg}");
    assert!(msg.contains("max_redirects = 3"), "{msg}");
}

#[tokio::test]
async fn binary_content_is_refused_with_a_clear_message() {
    let app = Router::new()
        .route(
            "/logo.png",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "image/png")],
                    vec![0x89u8, b'P', b'N', b'G', 0, 0, 0],
                )
            }),
        )
        .route(
            "/blob",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "application/octet-stream")],
                    vec![0u8; 64],
                )
            }),
        )
        .route(
            "/doc.pdf",
            get(|| async { ([(header::CONTENT_TYPE, "application/pdf")], "%PDF-1.7") }),
        )
        .route(
            "/unlabelled",
            get(|| async { Response::new(Body::from(vec![0u8, 159, 146, 150, 0, 1])) }),
        );
    let addr = serve(app).await;
    let tool = fetch_tool(open_config());
    for (path, ct) in [
        ("logo.png", "image/png"),
        ("blob", "application/octet-stream"),
        ("doc.pdf", "application/pdf"),
        ("unlabelled", "binary"),
    ] {
        let err = call(&tool, json!({"url": format!("http://{addr}/{path}")}))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), "binary", "{path}: {err}");
        let msg = err.to_string();
        assert!(msg.contains(ct), "{path}: {msg}");
        assert!(
            msg.contains("HTML") && msg.contains("JSON"),
            "{path}: {msg}"
        );
    }
}

#[tokio::test]
async fn a_huge_page_is_capped_while_downloading_and_paged_with_start_index() {
    // 4 MiB of numbered lines, streamed in chunks; the cap stops the download at 100 kB.
    let served = Arc::new(AtomicUsize::new(0));
    let counter = served.clone();
    let app = Router::new().route(
        "/huge.txt",
        get(move || {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                let chunks = (0..4096)
                    .map(|i| Ok::<_, std::io::Error>(format!("{:0>1023}\n", i).into_bytes()));
                (
                    [(header::CONTENT_TYPE, "text/plain")],
                    Body::from_stream(futures::stream::iter(chunks)),
                )
            }
        }),
    );
    let addr = serve(app).await;
    let tool = fetch_tool(WebConfig {
        max_download_bytes: Some(100_000),
        ..open_config()
    });
    let url = format!("http://{addr}/huge.txt");
    let r = call(&tool, json!({"url": url, "max_length": 20_000}))
        .await
        .unwrap();
    let data = r.data.clone().unwrap();
    assert_eq!(data["download_truncated"], true);
    assert_eq!(data["total_chars"], 100_000);
    assert_eq!(data["end_index"], 20_000);
    assert_eq!(data["next_start_index"], 20_000);
    assert!(
        r.output.contains("start_index=20000"),
        "hint names the next index"
    );
    assert!(r.output.contains("download cap of 100000 bytes"));

    let r2 = call(
        &tool,
        json!({"url": url, "max_length": 20_000, "start_index": 20_000}),
    )
    .await
    .unwrap();
    let d2 = r2.data.unwrap();
    assert_eq!(d2["start_index"], 20_000);
    assert_eq!(d2["next_start_index"], 40_000);
    assert_eq!(d2["cached"], true, "the second page comes from the cache");
    // Line 19 starts at character 19 * 1024 = 19456, so the second page begins inside it.
    assert!(r2.output.starts_with(&"0".repeat(10)));
    assert_eq!(served.load(Ordering::SeqCst), 1);

    let err = call(&tool, json!({"url": url, "start_index": 100_000}))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("past the end"), "{err}");
}

#[tokio::test]
async fn the_cache_serves_a_repeat_fetch_without_a_request() {
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    let app = Router::new().route(
        "/page",
        get(move || {
            let h = h.clone();
            async move {
                let n = h.fetch_add(1, Ordering::SeqCst);
                ([(header::CONTENT_TYPE, "text/plain")], format!("visit {n}"))
            }
        }),
    );
    let addr = serve(app).await;
    let tool = fetch_tool(open_config());
    let url = format!("http://{addr}/page");
    let first = call(&tool, json!({"url": url})).await.unwrap();
    let second = call(&tool, json!({"url": url})).await.unwrap();
    assert_eq!(first.output, "visit 0\n");
    assert_eq!(second.output, "visit 0\n");
    assert_eq!(second.data.unwrap()["cached"], true);
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn http_errors_name_the_status() {
    let app = Router::new().route(
        "/gone",
        get(|| async { (StatusCode::NOT_FOUND, "no such page") }),
    );
    let addr = serve(app).await;
    let tool = fetch_tool(open_config());
    let err = call(&tool, json!({"url": format!("http://{addr}/gone")}))
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("404") && msg.contains("no such page"), "{msg}");
}

#[tokio::test]
async fn a_slow_server_times_out() {
    let app = Router::new().route(
        "/slow",
        get(|| async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            "late"
        }),
    );
    let addr = serve(app).await;
    let tool = fetch_tool(WebConfig {
        timeout_ms: Some(200),
        ..open_config()
    });
    let err = call(&tool, json!({"url": format!("http://{addr}/slow")}))
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::Timeout { ms: 200 }), "{err:?}");
}

#[tokio::test]
async fn only_http_and_https_urls_are_fetched() {
    let tool = fetch_tool(open_config());
    for url in ["file:///etc/passwd", "ftp://example.com/x", "not a url"] {
        let err = call(&tool, json!({"url": url})).await.unwrap_err();
        assert_eq!(err.kind(), "invalid_arguments", "{url}: {err}");
    }
}

// --- The SSRF guard, on (the default). ---

fn counting_server() -> (Router, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    let app = Router::new().fallback(move || {
        let h = h.clone();
        async move {
            h.fetch_add(1, Ordering::SeqCst);
            "internal secret"
        }
    });
    (app, hits)
}

#[tokio::test]
async fn the_guard_blocks_loopback_by_default_without_connecting() {
    let (app, hits) = counting_server();
    let addr = serve(app).await;
    let tool = fetch_tool(WebConfig::default());
    for url in [
        format!("http://{addr}/"),
        format!("http://localhost:{}/", addr.port()),
        format!("http://[::ffff:127.0.0.1]:{}/", addr.port()),
        "http://169.254.169.254/latest/meta-data/".to_string(),
        "http://10.0.0.1/".to_string(),
        "http://[fd00:ec2::254]/".to_string(),
        "http://0.0.0.0/".to_string(),
    ] {
        let err = call(&tool, json!({"url": url})).await.unwrap_err();
        assert_eq!(err.kind(), "blocked", "{url}: {err}");
        assert!(err.to_string().contains("SSRF guard"), "{err}");
    }
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "no request reached the server"
    );
}

#[tokio::test]
async fn metadata_stays_blocked_even_with_allow_private() {
    let tool = fetch_tool(open_config());
    let err = call(
        &tool,
        json!({"url": "http://169.254.169.254/latest/meta-data/"}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), "blocked");
    assert!(err.to_string().contains("metadata"), "{err}");
}

#[tokio::test]
async fn the_guard_checks_every_redirect_hop() {
    // The internal service: nothing may reach it.
    let (internal, internal_hits) = counting_server();
    let internal_addr = serve(internal).await;
    let internal_port = internal_addr.port();
    // The "public" server, allowed only through an explicit host:port allowlist entry.
    let app = Router::new()
        .route(
            "/ok",
            get(|| async { ([(header::CONTENT_TYPE, "text/plain")], "public page") }),
        )
        .route(
            "/to-internal",
            get(move || async move {
                Redirect::temporary(&format!("http://127.0.0.1:{internal_port}/admin"))
            }),
        )
        .route(
            "/to-localhost",
            get(move || async move {
                Redirect::temporary(&format!("http://localhost:{internal_port}/admin"))
            }),
        )
        .route(
            "/to-metadata",
            get(|| async { Redirect::temporary("http://169.254.169.254/latest/meta-data/iam") }),
        )
        .route(
            "/to-private",
            get(|| async { Redirect::temporary("http://192.168.1.1/router") }),
        );
    let addr = serve(app).await;
    let tool = fetch_tool(WebConfig {
        allowed_hosts: vec![format!("127.0.0.1:{}", addr.port())],
        ..Default::default()
    });

    let ok = call(&tool, json!({"url": format!("http://{addr}/ok")}))
        .await
        .unwrap();
    assert!(
        ok.output.contains("public page"),
        "the allowlisted first hop works"
    );

    for (path, reason) in [
        ("to-internal", "loopback"),
        ("to-localhost", "loopback"),
        ("to-metadata", "metadata"),
        ("to-private", "private"),
    ] {
        let err = call(&tool, json!({"url": format!("http://{addr}/{path}")}))
            .await
            .unwrap_err();
        let msg = err.to_string();
        assert_eq!(err.kind(), "blocked", "{path}: {msg}");
        assert!(msg.contains("redirect 1 to"), "{path}: {msg}");
        assert!(msg.contains(reason), "{path}: {msg}");
    }
    assert_eq!(
        internal_hits.load(Ordering::SeqCst),
        0,
        "the internal service was never reached"
    );
}

#[tokio::test]
async fn an_invalid_allowlist_entry_is_reported_on_call() {
    let tool = fetch_tool(WebConfig {
        allowed_hosts: vec!["10.0.0.0/77".into()],
        ..Default::default()
    });
    let err = call(&tool, json!({"url": "http://example.com/"}))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("10.0.0.0/77"), "{err}");
}

#[tokio::test]
async fn the_headers_say_what_we_accept() {
    let app = Router::new().route(
        "/echo",
        get(|headers: HeaderMap| async move {
            let ua = headers
                .get(header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            ([(header::CONTENT_TYPE, "text/plain")], ua).into_response()
        }),
    );
    let addr = serve(app).await;
    let tool = fetch_tool(WebConfig {
        user_agent: Some("toolyard-test/1".into()),
        ..open_config()
    });
    let r = call(&tool, json!({"url": format!("http://{addr}/echo")}))
        .await
        .unwrap();
    assert_eq!(r.output.trim(), "toolyard-test/1");
}
