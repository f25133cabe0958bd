//! The MCP server in process, spoken to in raw JSON-RPC lines over an in-memory pipe (the
//! same bytes a stdio client writes), with an inline dispatcher over a temporary workspace.

use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceExt;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines};
use toolyard_dispatch::{Dispatcher, DispatcherConfig};
use toolyard_mcp::ToolyardServer;

struct Conn {
    write: tokio::io::WriteHalf<DuplexStream>,
    lines: Lines<BufReader<tokio::io::ReadHalf<DuplexStream>>>,
    _dir: tempfile::TempDir,
}

impl Conn {
    async fn open() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).expect("mkdir");
        std::fs::write(ws.join("a.txt"), "one\ntwo\n").expect("write fixture");
        let mut config = DispatcherConfig::new(&ws);
        config.state_dir = Some(dir.path().join("state"));
        let dispatcher = Dispatcher::new(config).expect("dispatcher");
        let (client, server) = tokio::io::duplex(1 << 20);
        let (sr, sw) = tokio::io::split(server);
        tokio::spawn(async move {
            if let Ok(running) = ToolyardServer::new(Arc::new(dispatcher))
                .serve((sr, sw))
                .await
            {
                let _ = running.waiting().await;
            }
        });
        let (cr, cw) = tokio::io::split(client);
        Self {
            write: cw,
            lines: BufReader::new(cr).lines(),
            _dir: dir,
        }
    }

    async fn send(&mut self, msg: Value) {
        let mut line = msg.to_string();
        line.push('\n');
        self.write.write_all(line.as_bytes()).await.expect("write");
    }

    /// Messages until the response with `id`; notifications seen on the way are returned too.
    async fn until(&mut self, id: u64) -> (Value, Vec<Value>) {
        let mut notes = Vec::new();
        loop {
            let line = tokio::time::timeout(Duration::from_secs(20), self.lines.next_line())
                .await
                .expect("timely answer")
                .expect("read")
                .expect("open stream");
            let msg: Value = serde_json::from_str(&line).expect("json line");
            if msg.get("id") == Some(&json!(id)) && msg.get("method").is_none() {
                return (msg, notes);
            }
            notes.push(msg);
        }
    }

    async fn initialize(&mut self) {
        self.send(
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"}}}),
        )
        .await;
        let (init, _) = self.until(0).await;
        assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
    }

    async fn call(&mut self, id: u64, tool: &str, args: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": args}}))
            .await;
        self.until(id).await.0
    }
}

#[tokio::test]
async fn tools_list_is_sorted_and_annotated() {
    let mut c = Conn::open().await;
    c.initialize().await;
    c.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .await;
    let (list, _) = c.until(1).await;
    let tools = list["result"]["tools"].as_array().expect("tools");
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted);
    assert!(names.contains(&"read_file"));
    for t in tools {
        assert!(
            t["annotations"]["readOnlyHint"].is_boolean(),
            "{t}: annotations"
        );
    }
}

#[tokio::test]
async fn read_file_returns_text_and_structured_content() {
    let mut c = Conn::open().await;
    c.initialize().await;
    let r = c.call(1, "read_file", json!({"path": "a.txt"})).await;
    let result = &r["result"];
    assert_eq!(result["isError"], false);
    assert!(
        result["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .contains("1|one")
    );
    assert_eq!(result["structuredContent"]["success"], true);
    // Claude Code and Codex show the model structuredContent instead of the text: it must carry
    // the same text, the file's numbered lines.
    assert_eq!(
        result["structuredContent"]["output"],
        result["content"][0]["text"]
    );
}

#[tokio::test]
async fn a_blocked_path_is_an_error_result_not_a_protocol_error() {
    let mut c = Conn::open().await;
    c.initialize().await;
    let r = c
        .call(1, "read_file", json!({"path": "../etc/passwd"}))
        .await;
    assert!(r.get("error").is_none(), "{r}");
    assert_eq!(r["result"]["isError"], true);
    assert_eq!(
        r["result"]["structuredContent"]["error_kind"],
        "path_outside_workspace"
    );
}

#[tokio::test]
async fn the_2026_era_needs_no_initialize() {
    let mut c = Conn::open().await;
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    c.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "read_file", "arguments": {"path": "a.txt"}, "_meta": meta}}))
        .await;
    let (r, _) = c.until(1).await;
    assert_eq!(r["result"]["isError"], false, "{r}");
    assert_eq!(r["result"]["resultType"], "complete");
}

#[tokio::test]
async fn progress_reports_become_notifications_with_the_clients_token() {
    let mut c = Conn::open().await;
    c.initialize().await;
    c.send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "run_command", "_meta": {"progressToken": "tok-1"},
        "arguments": {"command": "sleep 2.5; echo done"}}}),
    )
    .await;
    let (r, notes) = c.until(1).await;
    assert_eq!(r["result"]["isError"], false, "{r}");
    let progress: Vec<&Value> = notes
        .iter()
        .filter(|n| n["method"] == "notifications/progress")
        .collect();
    assert!(progress.len() >= 2, "{notes:?}");
    assert!(
        progress
            .iter()
            .all(|n| n["params"]["progressToken"] == "tok-1")
    );
}

#[tokio::test]
async fn a_cancelled_call_ends_with_its_command() {
    let mut c = Conn::open().await;
    c.initialize().await;
    c.send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "run_command", "arguments": {"command": "sleep 300", "timeout_ms": 600000}}}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    c.send(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 1, "reason": "test"}}),
    )
    .await;
    // rmcp drops the response of a cancelled request; the connection must stay usable and the
    // next call answer promptly.
    let started = std::time::Instant::now();
    let r = c.call(2, "read_file", json!({"path": "a.txt"})).await;
    assert_eq!(r["result"]["isError"], false);
    assert!(started.elapsed() < Duration::from_secs(10));
}
