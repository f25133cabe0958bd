//! The `codex` dialect (OpenAI Codex CLI): `apply_patch {input}` (the JSON form of Codex's
//! freeform tool; MCP cannot carry a grammar) over the patch engine in [`crate::patch`].
//! `exec_command` and `write_stdin` wait for the process tools.

use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use toolyard_core::{
    Annotations, Freeform, Tool, ToolContext, ToolError, ToolResult, Typed, TypedTool,
};

use crate::ToolEnv;
use crate::patch;

/// Codex's Lark grammar of a patch (`codex-rs/core/src/tools/handlers/apply_patch.lark`), for
/// the freeform form of the tool.
pub const APPLY_PATCH_LARK: &str = r#"start: begin_patch hunk+ end_patch
begin_patch: "*** Begin Patch" LF
end_patch: "*** End Patch" LF?

hunk: add_hunk | delete_hunk | update_hunk
add_hunk: "*** Add File: " filename LF add_line+
delete_hunk: "*** Delete File: " filename LF
update_hunk: "*** Update File: " filename LF change_move? change?

filename: /(.+)/
add_line: "+" /(.*)/ LF -> line

change_move: "*** Move to: " filename LF
change: (change_context | change_line)+ eof_line?
change_context: ("@@" | "@@ " /(.+)/) LF
change_line: ("+" | "-" | " ") /(.*)/ LF
eof_line: "*** End of File" LF

%import common.LF
"#;

/// The description of Codex's freeform `apply_patch`.
pub const APPLY_PATCH_FREEFORM_DESCRIPTION: &str = "Use the `apply_patch` tool to edit files. This is a FREEFORM tool, so do not wrap the patch in JSON.";

const DESCRIPTION: &str = r#"Use the `apply_patch` tool to edit files. Your patch language is a stripped-down, file-oriented diff format designed to be easy to parse and safe to apply. You can think of it as a high-level envelope:

*** Begin Patch
[ one or more file sections ]
*** End Patch

Within that envelope, you get a sequence of file operations. You MUST include a header to specify the action you are taking. Each operation starts with one of three headers:

*** Add File: <path> - create a new file. Every following line is a + line (the initial contents).
*** Delete File: <path> - remove an existing file. Nothing follows.
*** Update File: <path> - patch an existing file in place (optionally with a rename).

May be immediately followed by *** Move to: <new path> if you want to rename the file. Then one or more hunks, each introduced by @@ (optionally followed by a hunk header). Within a hunk each line starts with a space (context), - (removed) or + (added).

For context lines: show 3 lines of code immediately above and 3 lines immediately below each change; do not duplicate context between nearby changes. If 3 lines do not identify the place uniquely, use @@ with a class or function line (e.g. `@@ class BaseClass`); several @@ headers may narrow it further. End a hunk that ends the file with *** End of File.

Patch := Begin { FileOp } End
Begin := "*** Begin Patch" NEWLINE
End := "*** End Patch" NEWLINE
FileOp := AddFile | DeleteFile | UpdateFile
AddFile := "*** Add File: " path NEWLINE { "+" line NEWLINE }
DeleteFile := "*** Delete File: " path NEWLINE
UpdateFile := "*** Update File: " path NEWLINE [ MoveTo ] { Hunk }
MoveTo := "*** Move to: " newPath NEWLINE
Hunk := "@@" [ header ] NEWLINE { HunkLine } [ "*** End of File" NEWLINE ]
HunkLine := (" " | "-" | "+") text NEWLINE

Example:

*** Begin Patch
*** Add File: hello.txt
+Hello world
*** Update File: src/app.py
*** Move to: src/main.py
@@ def greet():
-print("Hi")
+print("Hello, world!")
*** Delete File: obsolete.txt
*** End Patch

File paths are relative to the workspace, never absolute. The whole patch is checked before anything is written: if any part fails, no file changes. Each changed file can be reverted with undo."#;

/// Arguments of Codex's `apply_patch` (its JSON function form).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApplyPatchArgs {
    /// The entire contents of the apply_patch command
    pub input: String,
}

/// Codex's `apply_patch`: add, delete, update and move files with one patch, all or nothing.
pub struct ApplyPatch {
    env: Arc<ToolEnv>,
}

impl ApplyPatch {
    /// The tool over `env`.
    pub fn new(env: Arc<ToolEnv>) -> Self {
        Self { env }
    }
}

#[async_trait]
impl TypedTool for ApplyPatch {
    type Args = ApplyPatchArgs;

    fn name(&self) -> &str {
        "apply_patch"
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn annotations(&self) -> Annotations {
        Annotations::MUTATING
    }

    fn freeform(&self) -> Option<Freeform> {
        Some(Freeform {
            description: APPLY_PATCH_FREEFORM_DESCRIPTION.into(),
            syntax: "lark".into(),
            definition: APPLY_PATCH_LARK.into(),
        })
    }

    async fn run(&self, args: ApplyPatchArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let hunks = patch::parse_patch(&args.input)?;
        // File tools already run on the server's blocking pool.
        let plan = patch::plan(&self.env, &ctx.cwd, &hunks)?;
        let changed = patch::apply(&self.env, ctx, &plan).await?;
        let [added, modified, deleted] = plan.lists();
        Ok(ToolResult::ok(plan.summary())
            .with_data(json!({
                "added": added,
                "modified": modified,
                "deleted": deleted,
            }))
            .with_files_changed(changed))
    }
}

/// The codex dialect's own tools.
pub fn tools(env: &Arc<ToolEnv>) -> Vec<Arc<dyn Tool>> {
    vec![Arc::new(Typed(ApplyPatch::new(env.clone())))]
}
