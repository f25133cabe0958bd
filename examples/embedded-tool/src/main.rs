//! An embedder's own Rust tool, served by Toolyard with every layer a built-in tool gets.
//!
//! Seed 004's "Adding a New Tool", literally: implement the trait ([`TypedTool`]), register it
//! on the dispatcher ([`Dispatcher::register`]), and it appears in the definitions, is served
//! over MCP (`embedded-tool serve`) and from the command line (`embedded-tool call TOOL JSON`),
//! its arguments are validated against the schema derived from its argument struct, hooks run
//! around it, and, being a mutating tool that writes through the journal, `undo` reverts it
//! and it triggers the post-tools hook. `check_command` shows the command policy: registered
//! with a shape naming its `command` argument, a blocked command never reaches it.
//!
//! ```text
//! embedded-tool serve [--catalog catalog.toml]                # MCP over stdio
//! embedded-tool call append_line '{"path": "notes.md", "line": "- buy milk"}'
//! ```
//!
//! The workspace is the current directory; Toolyard's state goes where `TOOLYARD_STATE_DIR`
//! says (else its default). This example runs the built-in tools inline (no sandbox); a real
//! embedder that serves the command tools sets `DispatcherConfig::mode` to
//! `Mode::Lanes { exe }` with the path of a `toolyard` binary, which runs the lanes.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use toolyard_core::{
    Annotations, CallShape, Catalog, Lane, ToolContext, ToolError, ToolInfo, ToolResult, ToolSpec,
    Typed, TypedTool,
};
use toolyard_dispatch::{CallRequest, Dispatcher, DispatcherConfig};
use toolyard_tools::ToolEnv;
use toolyard_tools::files::{commit_write, expect_for_write};

/// Arguments of `append_line`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct AppendLineArgs {
    /// The file, relative to the workspace root (created when missing).
    path: String,
    /// The line to add at its end (without a newline).
    #[schemars(length(min = 1))]
    line: String,
}

/// Adds one line to the end of a file, through the journal (so `undo` reverts it).
struct AppendLine {
    env: Arc<ToolEnv>,
}

#[async_trait]
impl TypedTool for AppendLine {
    type Args = AppendLineArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new(
            "append_line",
            "Append one line to the end of a file in the workspace (created when missing).",
            Annotations::MUTATING,
        )
    }

    async fn run(&self, a: AppendLineArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let ws = &self.env.workspace;
        let rel = ws.locate(&a.path, &ctx.cwd)?;
        // Read-before-write holds for us too: reading it here records the read, so the write
        // below replaces exactly what was read, or fails if someone changed it in between.
        let (mut bytes, current) =
            match toolyard_tools::files::read_tracked(&self.env, ctx, &a.path).await {
                Ok((_, content)) => {
                    let hash = toolyard_workspace::hash_bytes(&content);
                    (content, Some(hash))
                }
                Err(ToolError::FileNotFound(_)) => (Vec::new(), None),
                Err(e) => return Err(e),
            };
        let expect = expect_for_write(&self.env, ctx, &rel, current.as_deref()).await?;
        if !bytes.is_empty() && !bytes.ends_with(b"\n") {
            bytes.push(b'\n');
        }
        bytes.extend_from_slice(a.line.as_bytes());
        bytes.push(b'\n');
        let out = commit_write(&self.env, ctx, self.info().name, &rel, &bytes, &expect).await?;
        Ok(ToolResult::ok(format!("appended a line to {rel}"))
            .with_data(json!({"path": rel.to_string()}))
            .with_files_changed(vec![out.path.to_string()]))
    }
}

/// Arguments of `check_command`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CheckCommandArgs {
    /// A shell command line.
    command: String,
}

/// Says a command line back: it runs nothing, but declares its `command` argument, so the
/// catalog's command policy refuses a blocked one before the tool is reached.
struct CheckCommand;

#[async_trait]
impl TypedTool for CheckCommand {
    type Args = CheckCommandArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new(
            "check_command",
            "Say whether the command policy lets a command line through (it is not run).",
            Annotations::READ_ONLY,
        )
    }

    async fn run(&self, a: CheckCommandArgs, _: &ToolContext) -> Result<ToolResult, ToolError> {
        Ok(ToolResult::ok(format!("allowed: {}", a.command)))
    }
}

/// The dispatcher: Toolyard's tools, and ours registered beside them.
fn dispatcher(catalog: Option<&str>) -> Result<Dispatcher> {
    let mut config = DispatcherConfig::new(std::env::current_dir()?);
    if let Some(path) = catalog {
        config.catalog = Catalog::load(path.as_ref()).map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    config.state_dir = std::env::var_os("TOOLYARD_STATE_DIR").map(Into::into);
    let mut d = Dispatcher::new(config).map_err(|e| anyhow::anyhow!("{e}"))?;
    let env = d.env().clone();
    d.register(
        Arc::new(Typed(AppendLine { env })),
        ToolSpec::new(Lane::NoNet, 10_000),
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    d.register_shaped(
        Arc::new(Typed(CheckCommand)),
        ToolSpec::new(Lane::NoNet, 1_000),
        CallShape {
            command: Some("command"),
            ..CallShape::NONE
        },
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(d)
}

fn main() -> Result<ExitCode> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut catalog = None;
    let mut rest = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--catalog" {
            catalog = Some(it.next().context("--catalog needs a file")?.clone());
        } else {
            rest.push(a.clone());
        }
    }
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let d = Arc::new(dispatcher(catalog.as_deref())?);
        match rest
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .as_slice()
        {
            ["serve"] => {
                toolyard_mcp::serve_stdio(d).await?;
                Ok(ExitCode::SUCCESS)
            }
            ["call", tool, json_args] => {
                let args: Value = serde_json::from_str(json_args)
                    .with_context(|| format!("the arguments are not JSON: {json_args}"))?;
                let r = d.call(CallRequest::new("cli", *tool, args)).await;
                println!("{}", r.output);
                Ok(if r.success {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                })
            }
            ["tools"] => {
                for def in d.definitions() {
                    println!("{}", def.name);
                }
                Ok(ExitCode::SUCCESS)
            }
            _ => bail!("usage: embedded-tool [--catalog FILE] serve | tools | call TOOL JSON"),
        }
    })
}
