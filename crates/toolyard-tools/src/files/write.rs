//! `write_file`: create or replace a file, atomically and journaled.

use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use toolyard_core::{Annotations, ToolContext, ToolError, ToolInfo, ToolResult, TypedTool};

use super::{Aim, commit_write, expect_for_write, is_read_refusal, refuse_unread};
use crate::ToolEnv;

/// Arguments of `write_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFileArgs {
    /// File path, relative to the workspace root (or absolute inside it).
    pub path: String,
    /// The whole new content of the file.
    pub content: String,
}

/// `write_file`: write content to a file, creating parent directories.
pub struct WriteFile {
    env: Arc<ToolEnv>,
}

impl WriteFile {
    /// The tool over `env`.
    pub fn new(env: Arc<ToolEnv>) -> Self {
        Self { env }
    }
}

#[async_trait]
impl TypedTool for WriteFile {
    type Args = WriteFileArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new(
            "write_file",
            "Write content to a file, creating parent directories. Replacing an existing file \
         requires reading it first with read_file in this session. The write is atomic and can \
         be undone.",
            Annotations::MUTATING,
        )
    }

    async fn run(&self, args: WriteFileArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let ws = &self.env.workspace;
        let rel = ws.locate(&args.path, &ctx.cwd)?;
        let current = ws.hash_of(&rel)?;
        let expect = match expect_for_write(&self.env, ctx, &rel, current.as_deref()).await {
            Ok(expect) => expect,
            Err(e) if is_read_refusal(&e) => {
                let content = ws.read(&rel)?;
                return refuse_unread(&self.env, ctx, &rel, &content, Aim::Head, e).await;
            }
            Err(e) => return Err(e),
        };
        let out = commit_write(
            &self.env,
            ctx,
            "write_file",
            &rel,
            args.content.as_bytes(),
            &expect,
        )
        .await?;
        let verb = if out.created { "Created" } else { "Overwrote" };
        Ok(
            ToolResult::ok(format!("{verb} {} ({} bytes written)", out.path, out.bytes))
                .with_data(json!({
                    "path": out.path.as_str(),
                    "bytes_written": out.bytes,
                    "created": out.created,
                }))
                .with_files_changed(vec![out.path.to_string()]),
        )
    }
}
