//! Claude Code's `NotebookEdit`: one cell of a Jupyter notebook replaced, inserted or deleted.

use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use toolyard_core::{Annotations, ToolContext, ToolError, ToolInfo, ToolResult, TypedTool};
use toolyard_tools::ToolEnv;
use toolyard_tools::files::{commit_write, expect_for_write};
use toolyard_workspace::hash_bytes;

use super::{Fail, finish, translate};

/// Arguments of `NotebookEdit`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NotebookEditArgs {
    /// The absolute path to the Jupyter notebook (.ipynb) to edit.
    pub notebook_path: String,
    /// The ID of the cell to edit (a 0-based index works too). insert: the new cell goes after
    /// it (at the top when omitted).
    pub cell_id: Option<String>,
    /// The new source for the cell.
    pub new_source: String,
    /// `code` or `markdown`; required for insert (default for replace: unchanged).
    pub cell_type: Option<String>,
    /// `replace` (default), `insert` or `delete`.
    pub edit_mode: Option<String>,
}

/// Claude Code's `NotebookEdit`: one cell of a notebook replaced, inserted or deleted, in one
/// journaled write.
pub struct NotebookEdit {
    pub(super) env: Arc<ToolEnv>,
}

#[async_trait]
impl TypedTool for NotebookEdit {
    type Args = NotebookEditArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new(
            "NotebookEdit",
            "Replaces the source of one cell of a Jupyter notebook (.ipynb), inserts a new cell \
         after cell_id (edit_mode insert, cell_type required), or deletes a cell (edit_mode \
         delete). The notebook must have been Read first. A replaced code cell loses its outputs.",
            Annotations::MUTATING,
        )
    }

    async fn run(
        &self,
        args: NotebookEditArgs,
        ctx: &ToolContext,
    ) -> Result<ToolResult, ToolError> {
        finish(self.exec(args, ctx).await)
    }
}

/// A cell's source as nbformat stores it: lines, each keeping its newline.
fn source_lines(text: &str) -> Value {
    json!(text.split_inclusive('\n').collect::<Vec<_>>())
}

impl NotebookEdit {
    async fn exec(
        &self,
        args: NotebookEditArgs,
        ctx: &ToolContext,
    ) -> Result<ToolResult, Result<Fail, ToolError>> {
        let bad = |msg: String| Err(Ok(("invalid_arguments", msg)));
        let shown = args.notebook_path.clone();
        let mode = args.edit_mode.as_deref().unwrap_or("replace");
        if !matches!(mode, "replace" | "insert" | "delete") {
            return bad(format!(
                "edit_mode `{mode}` is not one NotebookEdit knows; use replace, insert or delete"
            ));
        }
        if let Some(t) = args.cell_type.as_deref()
            && !matches!(t, "code" | "markdown")
        {
            return bad(format!("cell_type `{t}` must be code or markdown"));
        }
        if !shown.ends_with(".ipynb") {
            return bad(format!(
                "{shown} is not a Jupyter notebook (.ipynb); use Edit for other files"
            ));
        }
        let ws = &self.env.workspace;
        let rel = ws
            .locate(&args.notebook_path, &ctx.cwd)
            .map_err(translate)?;
        if ws.metadata(&rel).map_err(translate)?.is_none() {
            return Err(Ok((
                "file_not_found",
                format!("Notebook file does not exist: {shown}"),
            )));
        }
        let content = ws.read(&rel).map_err(translate)?;
        let current = hash_bytes(&content);
        let expect = expect_for_write(&self.env, ctx, &rel, Some(&current))
            .await
            .map_err(translate)?;
        let mut nb: Value = match serde_json::from_slice(&content) {
            Ok(v) => v,
            Err(e) => return bad(format!("{shown} is not valid notebook JSON: {e}")),
        };
        let Some(cells) = nb.get_mut("cells").and_then(Value::as_array_mut) else {
            return bad(format!(
                "{shown} has no `cells` array; it is not a notebook"
            ));
        };
        // The cell named by id, else by 0-based index.
        let index = match args.cell_id.as_deref() {
            None => None,
            Some(id) => {
                let by_id = cells
                    .iter()
                    .position(|c| c.get("id").and_then(Value::as_str) == Some(id));
                match by_id.or_else(|| id.parse::<usize>().ok().filter(|i| *i < cells.len())) {
                    Some(i) => Some(i),
                    None => {
                        return Err(Ok((
                            "not_found",
                            format!(
                                "Cell with ID \"{id}\" not found in notebook. Read the notebook to see its cell ids."
                            ),
                        )));
                    }
                }
            }
        };
        let text = match (mode, index) {
            ("insert", at) => {
                let Some(kind) = args.cell_type.as_deref() else {
                    return bad("cell_type is required when using edit_mode=insert".into());
                };
                let id = hash_bytes(format!("{}{}", cells.len(), args.new_source).as_bytes())
                    .chars()
                    .filter(char::is_ascii_alphanumeric)
                    .take(8)
                    .collect::<String>();
                let mut cell = json!({
                    "cell_type": kind,
                    "id": id,
                    "metadata": {},
                    "source": source_lines(&args.new_source),
                });
                if kind == "code" {
                    cell["outputs"] = json!([]);
                    cell["execution_count"] = Value::Null;
                }
                let pos = at.map_or(0, |i| i + 1);
                cells.insert(pos, cell);
                format!("Inserted cell {id} with {}", args.new_source)
            }
            (_, None) => return bad(format!("cell_id is required for edit_mode={mode}")),
            ("delete", Some(i)) => {
                cells.remove(i);
                format!(
                    "Deleted cell {}",
                    args.cell_id.as_deref().unwrap_or_default()
                )
            }
            (_, Some(i)) => {
                let cell = &mut cells[i];
                cell["source"] = source_lines(&args.new_source);
                if let Some(kind) = args.cell_type.as_deref() {
                    cell["cell_type"] = json!(kind);
                }
                if cell.get("cell_type").and_then(Value::as_str) == Some("code") {
                    cell["outputs"] = json!([]);
                    cell["execution_count"] = Value::Null;
                } else if let Some(m) = cell.as_object_mut() {
                    m.remove("outputs");
                    m.remove("execution_count");
                }
                format!(
                    "Updated cell {} with {}",
                    args.cell_id.as_deref().unwrap_or_default(),
                    args.new_source
                )
            }
        };
        // Jupyter writes one-space indentation and a final newline.
        let mut bytes = Vec::new();
        let fmt = serde_json::ser::PrettyFormatter::with_indent(b" ");
        let mut ser = serde_json::Serializer::with_formatter(&mut bytes, fmt);
        serde::Serialize::serialize(&nb, &mut ser)
            .map_err(|e| Ok(("io", format!("could not write the notebook: {e}"))))?;
        bytes.push(b'\n');
        let out = commit_write(&self.env, ctx, "NotebookEdit", &rel, &bytes, &expect)
            .await
            .map_err(translate)?;
        Ok(ToolResult::ok(text)
            .with_data(json!({"path": out.path.as_str(), "edit_mode": mode}))
            .with_files_changed(vec![out.path.to_string()]))
    }
}
