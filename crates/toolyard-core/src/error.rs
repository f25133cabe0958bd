//! `ToolError`: every way a tool call can fail, each with a message a model can act on.

use std::path::PathBuf;

/// A failed tool call. It becomes a [`crate::ToolResult`] the model reads, never a crash.
/// It serializes, so a runner process can hand it to the server as it is.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ToolError {
    /// The file or directory does not exist.
    #[error("file not found: {0}; find the right path with glob or list_directory")]
    FileNotFound(PathBuf),
    /// The path resolves (lexically or through a symlink) outside the workspace.
    #[error("path outside the workspace: {path} ({reason}); use a path inside the workspace")]
    PathOutsideWorkspace {
        /// The path as the caller gave it.
        path: PathBuf,
        /// Why it was refused.
        reason: String,
    },
    /// The arguments do not fit the tool's schema or are inconsistent.
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    /// An operating-system error.
    #[error("I/O error: {0}")]
    Io(String),
    /// A value could not be (de)serialized.
    #[error("serialization error: {0}")]
    Serialization(String),
    /// Something named by the call (a tool, a change, a match) does not exist.
    #[error("{0}")]
    NotFound(String),
    /// A write over an existing file that this session never read.
    #[error("{path} has not been read in this session; call read_file on it first, then retry")]
    NotRead {
        /// The workspace-relative path.
        path: String,
    },
    /// The file changed on disk since this session read it.
    #[error(
        "{path} changed on disk since this session last read it; call read_file again to see the current content, then retry"
    )]
    StaleRead {
        /// The workspace-relative path.
        path: String,
    },
    /// A file that is not text.
    #[error("{path} is a binary file ({detail}); it cannot be shown as text")]
    Binary {
        /// The workspace-relative path.
        path: String,
        /// What was detected.
        detail: String,
    },
    /// Refused by the command policy or a hook.
    #[error("blocked by {rule}: {reason}")]
    Blocked {
        /// The rule or hook that blocked the call.
        rule: String,
        /// Why.
        reason: String,
    },
    /// The call ran past its time limit.
    #[error("timed out after {ms} ms")]
    Timeout {
        /// The limit that was exceeded.
        ms: u64,
    },
    /// The caller cancelled the call.
    #[error("cancelled")]
    Cancelled,
    /// A needed service or configuration is missing (an API key, a sandbox feature, a runner).
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The request conflicts with the current state (an edit that cannot apply, a duplicate name).
    #[error("{0}")]
    Conflict(String),
    /// An upstream service answered with an error.
    #[error("upstream error: {0}")]
    Upstream(String),
}

impl ToolError {
    /// A stable snake_case name of the variant, for the JSON form of a result.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::FileNotFound(_) => "file_not_found",
            Self::PathOutsideWorkspace { .. } => "path_outside_workspace",
            Self::InvalidArguments(_) => "invalid_arguments",
            Self::Io(_) => "io",
            Self::Serialization(_) => "serialization",
            Self::NotFound(_) => "not_found",
            Self::NotRead { .. } => "not_read",
            Self::StaleRead { .. } => "stale_read",
            Self::Binary { .. } => "binary",
            Self::Blocked { .. } => "blocked",
            Self::Timeout { .. } => "timeout",
            Self::Cancelled => "cancelled",
            Self::Unavailable(_) => "unavailable",
            Self::Conflict(_) => "conflict",
            Self::Upstream(_) => "upstream",
        }
    }

    /// Shorthand for a path escape.
    pub fn outside(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        Self::PathOutsideWorkspace {
            path: path.into(),
            reason: reason.into(),
        }
    }
}

impl From<std::io::Error> for ToolError {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e.to_string())
    }
}

impl From<serde_json::Error> for ToolError {
    fn from(e: serde_json::Error) -> Self {
        Self::Serialization(e.to_string())
    }
}

/// The error for a call to a tool that is not served, naming the ones that are.
pub fn unknown_tool(name: &str, available: &[&str]) -> ToolError {
    ToolError::NotFound(format!(
        "unknown tool `{name}`; available tools: {}",
        available.join(", ")
    ))
}
