//! # toolyard-mcp
//!
//! Toolyard's MCP front door: every tool of a [`Dispatcher`] served over the Model Context
//! Protocol, on stdio ([`serve_stdio`]) or streamable HTTP ([`serve_http`]), built on `rmcp`.
//!
//! The server knows nothing of tools itself. `tools/list` is the dispatcher's definitions
//! (sorted, with annotations and output schemas); `tools/call` is [`Dispatcher::call`], so every
//! call passes the same dialect, profile, lanes, sandbox, read ledger and journal as the CLI.
//!
//! - **Sessions**: each MCP connection is its own read-tracking session (a fresh uuid per stdio
//!   connection and per HTTP session), so a read in one client never licenses an edit in another.
//! - **Results**: one result, the same in every client. The model-facing text is one text
//!   content block, and `structuredContent` carries that same text as `output` beside the
//!   metadata (`{output, success, files_changed, data, error, error_kind}`), because Claude Code
//!   and Codex show the model `structuredContent` *instead of* the text when it is present, while
//!   Gemini CLI and OpenCode show the text. A tool whose result *is* JSON (the `loom` dialect's)
//!   has that JSON as `structuredContent` and as the text. Every tool's `outputSchema` says
//!   which. A tool failure is a result with `isError: true`, never a JSON-RPC error.
//! - **Progress and cancellation**: with a `progressToken`, the dispatcher's progress reports
//!   become `notifications/progress`; `notifications/cancelled` cancels the call's token, which
//!   kills the command's process tree in its runner.
//! - **Protocol eras**: both the `initialize` era (2024-11-05 … 2025-11-25) and the
//!   per-request-metadata era (2026-07-28) that rmcp speaks.
//!
//! ```no_run
//! # async fn demo() -> Result<(), toolyard_mcp::ServeError> {
//! use std::sync::Arc;
//! use toolyard_dispatch::{Dispatcher, DispatcherConfig};
//!
//! let dispatcher = Dispatcher::new(DispatcherConfig::new(".")).expect("workspace");
//! toolyard_mcp::serve_stdio(Arc::new(dispatcher)).await?;
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use rmcp::model::{ProtocolVersion, Tool};
use toolyard_core::ToolDefinition;
use toolyard_dispatch::Dispatcher;

mod approve;
#[cfg(feature = "conformance")]
mod fixtures;
mod gate;
mod http;
mod idle;
mod result;
mod server;
mod stdio;

pub use gate::{ClientSession, Gate, McpSessionKey, SESSION_COOKIE};
pub use http::{HttpServer, serve_http};
pub use result::{Structured, to_call_result};
pub use server::ToolyardServer;

/// The protocol versions this server speaks, oldest first (every one rmcp knows).
pub const PROTOCOL_VERSIONS: &[ProtocolVersion] = ProtocolVersion::KNOWN_VERSIONS;

/// Why the server could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The transport failed (binding the address, reading stdin, ...).
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The MCP handshake over stdio failed.
    #[error("the MCP session could not start: {0}")]
    Init(String),
    /// The server task ended by panicking.
    #[error("the MCP server task failed: {0}")]
    Task(String),
    /// A non-loopback address without a token.
    #[error(
        "refusing to serve {0} without authentication: anyone who can reach it could run commands. \
         Set a bearer token with TOOLYARD_HTTP_TOKEN_FILE=PATH (or TOOLYARD_HTTP_TOKEN), or serve \
         on 127.0.0.1"
    )]
    Unprotected(String),
}

/// The prefix of a session keyed by an HTTP client's cookie.
const COOKIE_SESSION: &str = "mcp-http-client-";

/// What every connection of one server shares: the dispatcher and the tool list, built once.
struct Shared {
    dispatcher: Arc<Dispatcher>,
    /// `tools/list`, in the dispatcher's (sorted) order; built once so it is deterministic and cheap.
    tools: Arc<Vec<Tool>>,
    /// What each tool's `outputSchema` promises as `structuredContent`.
    forms: HashMap<String, Structured>,
    /// Whether this server is reached over HTTP (sessions are then keyed by the HTTP session).
    http: bool,
    /// HTTP clients' cookie sessions, which end after the catalog's idle time.
    cookies: Arc<idle::CookieSessions>,
    /// Serve the conformance suite's fixtures too (only with the `conformance` feature).
    #[cfg_attr(not(feature = "conformance"), allow(dead_code))]
    fixtures: bool,
    /// Network requests asked of 2026-07-28 clients and not answered yet.
    open_asks: approve::Open,
}

impl Shared {
    fn new(dispatcher: Arc<Dispatcher>, http: bool) -> Self {
        let defs = dispatcher.definitions();
        let forms = defs
            .iter()
            .map(|d| (d.name.clone(), Structured::of(d)))
            .collect();
        let tools = defs.iter().filter_map(mcp_tool).collect();
        let idle = dispatcher.sections().idle_timeout();
        Self {
            cookies: idle::CookieSessions::new(idle),
            dispatcher,
            tools: Arc::new(tools),
            forms,
            http,
            fixtures: fixtures_enabled(),
            open_asks: approve::Open::default(),
        }
    }
}

#[cfg(feature = "conformance")]
fn fixtures_enabled() -> bool {
    std::env::var("TOOLYARD_MCP_CONFORMANCE").is_ok_and(|v| v == "1")
}

#[cfg(not(feature = "conformance"))]
fn fixtures_enabled() -> bool {
    false
}

/// A definition in rmcp's form (via the MCP JSON core already exports, so the two cannot drift).
fn mcp_tool(def: &ToolDefinition) -> Option<Tool> {
    match serde_json::from_value::<Tool>(def.to_mcp()) {
        Ok(tool) => Some(tool),
        Err(e) => {
            // A definition that does not fit MCP is a bug in that tool; serve the others.
            tracing::error!(tool = %def.name, error = %e, "tool definition is not valid MCP; not served");
            None
        }
    }
}

impl Shared {
    /// What `tool`'s results carry as `structuredContent` (an unknown tool's failure: the
    /// envelope).
    fn form(&self, tool: &str) -> Structured {
        self.forms
            .get(tool)
            .copied()
            .unwrap_or(Structured::ENVELOPE)
    }
}

/// Serve `dispatcher` over stdin/stdout until the client closes the connection.
///
/// stdout is the transport: nothing else may write to it while this runs.
pub async fn serve_stdio(dispatcher: Arc<Dispatcher>) -> Result<(), ServeError> {
    serve_stdio_as(dispatcher, None).await
}

/// [`serve_stdio`] under the read-tracking session `session` (a fresh one when `None`), so a
/// client that starts a server per call keeps one read ledger and undo history.
pub async fn serve_stdio_as(
    dispatcher: Arc<Dispatcher>,
    session: Option<String>,
) -> Result<(), ServeError> {
    let server = match session {
        Some(s) => ToolyardServer::with_session(dispatcher, s),
        None => ToolyardServer::new(dispatcher),
    };
    let (input, output) = stdio::Fd::dup(0)
        .and_then(|input| Ok((input, stdio::Fd::dup(1)?)))
        .map_err(|source| ServeError::Io {
            context: "starting the stdio transport".into(),
            source,
        })?;
    stdio::serve(server, input, output).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_definition_converts_to_an_mcp_tool() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let mut config = toolyard_dispatch::DispatcherConfig::new(dir.path().join("ws"));
        std::fs::create_dir(&config.workspace).unwrap_or_else(|e| panic!("mkdir: {e}"));
        config.state_dir = Some(dir.path().join("state"));
        let d = Dispatcher::new(config).unwrap_or_else(|e| panic!("dispatcher: {e}"));
        let defs = d.definitions();
        let tools: Vec<Tool> = defs.iter().filter_map(mcp_tool).collect();
        assert_eq!(tools.len(), defs.len());
        let names: Vec<_> = tools.iter().map(|t| t.name.to_string()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted, "tools/list must be deterministic (sorted)");
        assert!(tools.iter().all(|t| t.annotations.is_some()));
        // Every result has a declared structured form, so a client knows `output` is in it,
        // except where a result may be an image (then it goes as content blocks only).
        for t in &tools {
            assert_eq!(
                t.output_schema.is_some(),
                t.name != "read_file",
                "{}: output schema",
                t.name
            );
        }
    }
}
