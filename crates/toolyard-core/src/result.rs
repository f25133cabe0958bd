//! `ToolResult`: what a call returns, in seed 002's shape, with a stable JSON form.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ToolError;

/// The outcome of one tool call (seed 002's `ToolResult`).
///
/// JSON form (stable): `{"success", "output", "data"?, "files_changed", "error"?, "error_kind"?,
/// "images"?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// Whether the call did what was asked.
    pub success: bool,
    /// Text for the model: the thing to read, or the error explained.
    pub output: String,
    /// Structured data for programs (the dialect's result shape).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    /// Workspace-relative paths this call modified.
    #[serde(default)]
    pub files_changed: Vec<String>,
    /// The error message when `success` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The error's kind (see [`ToolError::kind`]) when `success` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<String>,
    /// Images for the model beside `output` (MCP image blocks), e.g. a PNG read by `read_file`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<Image>,
}

/// An image a tool returns: base64 data and its MIME type, as an MCP image block carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    /// The image's bytes, base64 (standard alphabet, padded).
    pub data: String,
    /// `image/png`, `image/jpeg`, `image/gif` or `image/webp`.
    #[serde(rename = "mimeType")]
    pub mime_type: String,
}

impl ToolResult {
    /// A successful result with text for the model.
    pub fn ok(output: impl Into<String>) -> Self {
        Self {
            success: true,
            output: output.into(),
            data: None,
            files_changed: Vec::new(),
            error: None,
            error_kind: None,
            images: Vec::new(),
        }
    }

    /// A failed result whose output is `message`.
    pub fn failure(kind: &str, message: impl Into<String>) -> Self {
        let message = message.into();
        Self {
            success: false,
            output: format!("Error: {message}"),
            data: None,
            files_changed: Vec::new(),
            error: Some(message),
            error_kind: Some(kind.to_string()),
            images: Vec::new(),
        }
    }

    /// Attach structured data.
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// Attach an image for the model (shown beside the text).
    pub fn with_image(mut self, image: Image) -> Self {
        self.images.push(image);
        self
    }

    /// Attach the list of changed files.
    pub fn with_files_changed(mut self, files: Vec<String>) -> Self {
        self.files_changed = files;
        self
    }

    /// The JSON form of this result.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| {
            format!(r#"{{"success":false,"output":"Error: {e}","files_changed":[],"error":"result could not be serialized"}}"#)
        })
    }
}

impl From<ToolError> for ToolResult {
    fn from(e: ToolError) -> Self {
        Self::failure(e.kind(), e.to_string())
    }
}

impl From<Result<ToolResult, ToolError>> for ToolResult {
    fn from(r: Result<ToolResult, ToolError>) -> Self {
        r.unwrap_or_else(Self::from)
    }
}
