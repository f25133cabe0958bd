//! One call as a front door hands it to [`crate::Dispatcher::call`].

use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use toolyard_core::ProgressSink;

/// One call as a front door hands it over.
pub struct CallRequest {
    /// The session (read tracking, journal).
    pub session: String,
    /// The tool's name in the dispatcher's dialect.
    pub tool: String,
    /// Its arguments (a JSON object).
    pub args: Value,
    /// Cancelled when the caller gives up.
    pub cancel: CancellationToken,
    /// Where progress reports go, if the caller wants them.
    pub progress: Option<ProgressSink>,
    /// Who asks the user about the call's network request (`None`: nobody can).
    pub approver: Option<Arc<dyn crate::network_request::Approver>>,
}

impl CallRequest {
    /// A call with no cancellation and no progress.
    pub fn new(session: impl Into<String>, tool: impl Into<String>, args: Value) -> Self {
        Self {
            session: session.into(),
            tool: tool.into(),
            args,
            cancel: CancellationToken::new(),
            progress: None,
            approver: None,
        }
    }
}
