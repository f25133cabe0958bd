//! The MCP form of a tool's result: one text block (after any images) and the
//! `structuredContent` its definition promises.

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Map, Value};
use toolyard_core::{ToolDefinition, ToolResult};

/// What a tool's definition promises its results carry as `structuredContent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Structured {
    /// The structured form is the tool's `data` itself (else the envelope `{output, success,
    /// files_changed, data, error, error_kind}`).
    pub data: bool,
    /// The tool declares an `outputSchema`, which clients check every success against. A tool
    /// that may answer with an image declares none: an image goes without
    /// `structuredContent` (clients that prefer it, like Codex, would show it instead).
    pub declared: bool,
}

impl Structured {
    /// The envelope, declared (most tools).
    pub const ENVELOPE: Structured = Structured {
        data: false,
        declared: true,
    };

    /// The form `def` declares.
    pub fn of(def: &ToolDefinition) -> Self {
        Structured {
            data: def.result_is_data,
            declared: def.output_schema.is_some(),
        }
    }
}

/// The MCP form of a ToolResult (see the crate docs for the `structuredContent` rule), as the
/// tool's declared `form` promises it.
pub fn to_call_result(result: ToolResult, form: Structured) -> CallToolResult {
    // Images go to the model as image blocks, never into structuredContent (base64 there
    // would cost its size again); the text `output` says an image was returned. The image
    // comes first: it is what the call was for, and a client that keeps only the first block
    // (smolagents, through mcpadapt) must not lose it.
    let mut blocks: Vec<ContentBlock> = result
        .images
        .iter()
        .map(|image| ContentBlock::image(image.data.clone(), image.mime_type.clone()))
        .collect();
    blocks.push(ContentBlock::text(result.output.clone()));
    let mut out = CallToolResult::success(blocks);
    out.is_error = Some(!result.success);
    out.structured_content = if !result.images.is_empty() && !form.declared {
        // Clients that prefer structuredContent (Codex) would show it instead of the image;
        // tools that return images declare no output schema, so none is owed.
        None
    } else if form.data {
        // The text is this JSON already. A failure has no data: its text is the whole story,
        // and clients fall back to the text when structured content is absent (they check
        // the schema of successes only).
        result.data.filter(|_| result.success)
    } else {
        if !result.images.is_empty() {
            // A declared schema is a promise clients check (the Python SDK fails the call
            // without it): keep it, even if a client may then show the text, not the image.
            tracing::warn!(
                "a tool that declares an output schema returned an image; it should not declare one"
            );
        }
        Some(envelope(result))
    };
    out
}

/// The ToolResult's JSON form: `output` (the model's text) beside the metadata programs read.
fn envelope(result: ToolResult) -> Value {
    let mut map = Map::new();
    map.insert("output".into(), Value::String(result.output));
    map.insert("success".into(), Value::Bool(result.success));
    if let Some(data) = result.data {
        map.insert("data".into(), data);
    }
    map.insert(
        "files_changed".into(),
        Value::Array(
            result
                .files_changed
                .into_iter()
                .map(Value::String)
                .collect(),
        ),
    );
    if let Some(e) = result.error {
        map.insert("error".into(), Value::String(e));
    }
    if let Some(k) = result.error_kind {
        map.insert("error_kind".into(), Value::String(k));
    }
    Value::Object(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn structured_content_carries_the_text_beside_the_data() {
        let r = ToolResult::ok("     1|hello")
            .with_data(json!({"n": 1}))
            .with_files_changed(vec!["a.txt".into()]);
        let out = to_call_result(r, Structured::ENVELOPE);
        assert_eq!(
            out.structured_content,
            Some(
                json!({"output": "     1|hello", "success": true, "data": {"n": 1}, "files_changed": ["a.txt"]})
            )
        );
        assert_eq!(out.is_error, Some(false));
    }

    #[test]
    fn an_image_becomes_an_image_block_and_the_result_has_no_structured_form() {
        let r = ToolResult::ok("PNG image, 1x1 pixels").with_image(toolyard_core::Image {
            data: "iVBORw0=".into(),
            mime_type: "image/png".into(),
        });
        let out = to_call_result(
            r.clone(),
            Structured {
                data: false,
                declared: false,
            },
        );
        let content = serde_json::to_value(&out.content).unwrap_or_default();
        // The image first (a client keeping only the first block keeps it), then the text.
        assert_eq!(content[0]["type"], json!("image"));
        assert_eq!(content[0]["data"], json!("iVBORw0="));
        assert_eq!(content[0]["mimeType"], json!("image/png"));
        assert_eq!(content[1]["type"], json!("text"));
        // Codex shows structuredContent instead of the blocks: with it the image would be lost.
        assert!(out.structured_content.is_none());
        // A tool that declared a schema anyway still gets its structured form: clients check
        // for it, and a result they refuse is worse than an image shown as text.
        let out = to_call_result(r, Structured::ENVELOPE);
        assert_eq!(
            out.structured_content.unwrap_or_default()["output"],
            json!("PNG image, 1x1 pixels")
        );
    }

    #[test]
    fn a_data_shaped_tool_that_may_return_images_keeps_its_data_for_text() {
        // loom's read_file: its result is its data, and it declares no schema (images).
        let form = Structured {
            data: true,
            declared: false,
        };
        let r = ToolResult::ok("{\"contents\": \"x\"}").with_data(json!({"contents": "x"}));
        assert_eq!(
            to_call_result(r, form).structured_content,
            Some(json!({"contents": "x"}))
        );
        let r = ToolResult::ok("{}")
            .with_data(json!({"contents": "PNG"}))
            .with_image(toolyard_core::Image {
                data: "iVBORw0=".into(),
                mime_type: "image/png".into(),
            });
        assert!(to_call_result(r, form).structured_content.is_none());
    }

    #[test]
    fn structured_content_is_the_data_when_the_result_is_its_data() {
        let r = ToolResult::ok("{\"contents\": \"x\"}").with_data(json!({"contents": "x"}));
        let out = to_call_result(
            r,
            Structured {
                data: true,
                declared: true,
            },
        );
        assert_eq!(out.structured_content, Some(json!({"contents": "x"})));
    }

    #[test]
    fn a_failure_is_an_error_result_whose_text_reaches_every_client() {
        let r = ToolResult::failure("path_outside_workspace", "nope");
        let out = to_call_result(r.clone(), Structured::ENVELOPE);
        assert_eq!(out.is_error, Some(true));
        let text = serde_json::to_value(&out.content).unwrap_or_default();
        assert_eq!(text[0]["text"], json!("Error: nope"));
        let structured = out.structured_content.unwrap_or_default();
        assert_eq!(structured["output"], json!("Error: nope"));
        assert_eq!(structured["error_kind"], json!("path_outside_workspace"));
        // A data-shaped tool's failure has no structured form: clients then show the text.
        assert!(
            to_call_result(
                r,
                Structured {
                    data: true,
                    declared: true,
                },
            )
            .structured_content
            .is_none()
        );
    }
}
