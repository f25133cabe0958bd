//! `complete_task`: the signal a loop stops on, recorded once per session.
//!
//! The record is a small JSON file, `<state dir>/sessions/<session>.json`, created exclusively
//! (written to a temp file, then hard-linked into place, which fails if it exists), so two
//! racing calls cannot both complete the task. A second call succeeds too, with
//! `already_completed: true` and the first summary: the loop's stop signal stays valid, and a
//! model that calls twice is not pushed into retrying an error.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use toolyard_core::{
    Annotations, Tool, ToolContext, ToolError, ToolInfo, ToolResult, Typed, TypedTool,
};

use crate::ToolEnv;

/// Arguments of complete_task.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompleteTaskArgs {
    /// What was accomplished.
    pub summary: String,
}

/// A session's completion record, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Completion {
    /// The session id.
    pub session: String,
    /// The summary given with the first call.
    pub summary: String,
    /// When it was recorded (seconds since the Unix epoch).
    pub completed_at: u64,
}

/// complete_task's structured data; its output schema is derived from it.
#[derive(Debug, Serialize, JsonSchema)]
struct CompletionData {
    /// Always true: the task is complete (the first call or an earlier one).
    #[schemars(extend("const" = true))]
    completed: bool,
    already_completed: bool,
    summary: String,
    session: String,
    completed_at: u64,
}

/// The complete_task tool.
pub struct CompleteTask {
    sessions_dir: PathBuf,
}

impl CompleteTask {
    /// A complete_task that records completions under `state_dir/sessions`.
    pub fn new(state_dir: &Path) -> Self {
        Self {
            sessions_dir: state_dir.join("sessions"),
        }
    }

    /// The completion recorded for `session`, if any.
    pub fn completion(&self, session: &str) -> Result<Option<Completion>, ToolError> {
        read_record(&self.record_path(session))
    }

    fn record_path(&self, session: &str) -> PathBuf {
        self.sessions_dir
            .join(format!("{}.json", file_stem(session)))
    }
}

/// A file name for `session`: itself when it is a safe name, else a safe prefix plus a hash,
/// so distinct ids never share a file and none escapes the directory.
fn file_stem(session: &str) -> String {
    let safe = !session.is_empty()
        && session.len() <= 100
        && !session.starts_with('.')
        && session
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if safe {
        return session.to_string();
    }
    let prefix: String = session
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
        .take(40)
        .collect();
    let digest = fnv1a(session.as_bytes());
    format!("{prefix}-{digest:016x}")
}

/// FNV-1a 64: enough to keep unusual session ids apart (not a security boundary).
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

fn read_record(path: &Path) -> Result<Option<Completion>, ToolError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| ToolError::Serialization(format!("{}: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ToolError::Io(format!("{}: {e}", path.display()))),
    }
}

/// Create `path` with `record` unless it exists; `Ok(false)` when it already did.
fn create_exclusive(path: &Path, record: &Completion) -> Result<bool, ToolError> {
    let dir = path
        .parent()
        .ok_or_else(|| ToolError::Io(format!("{} has no parent", path.display())))?;
    std::fs::create_dir_all(dir).map_err(|e| ToolError::Io(format!("{}: {e}", dir.display())))?;
    let tmp = dir.join(format!(
        ".{}.{}.{}.tmp",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("record"),
        std::process::id(),
        fastrand::u64(..)
    ));
    let result = (|| -> std::io::Result<bool> {
        let mut f = std::fs::File::create_new(&tmp)?;
        f.write_all(&serde_json::to_vec_pretty(record)?)?;
        f.sync_all()?;
        // A hard link fails when the target exists: the first writer wins, atomically.
        match std::fs::hard_link(&tmp, path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e),
        }
    })();
    let _ = std::fs::remove_file(&tmp);
    result.map_err(|e| ToolError::Io(format!("{}: {e}", path.display())))
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[async_trait]
impl TypedTool for CompleteTask {
    type Args = CompleteTaskArgs;

    fn info(&self) -> ToolInfo<'_> {
        let description = "Signal that the task is complete, with a summary of what was accomplished. Call it once, \
         when the work is done and verified; the loop stops after it.";
        ToolInfo::new(
            "complete_task",
            description,
            Annotations {
                read_only: false,
                destructive: false,
                idempotent: true,
                open_world: false,
            },
        )
        .output::<CompletionData>()
    }

    async fn run(
        &self,
        args: CompleteTaskArgs,
        ctx: &ToolContext,
    ) -> Result<ToolResult, ToolError> {
        let summary = args.summary.trim();
        if summary.is_empty() {
            return Err(ToolError::InvalidArguments(
                "summary is empty; say what was accomplished".into(),
            ));
        }
        let path = self.record_path(&ctx.session_id);
        let record = Completion {
            session: ctx.session_id.clone(),
            summary: summary.to_string(),
            completed_at: now_secs(),
        };
        let created = {
            let (path, record) = (path.clone(), record.clone());
            tokio::task::spawn_blocking(move || create_exclusive(&path, &record))
                .await
                .map_err(|e| ToolError::Io(format!("recording the completion failed: {e}")))??
        };
        let (stored, already) = if created {
            (record, false)
        } else {
            let first = read_record(&path)?.ok_or_else(|| {
                ToolError::Io(format!("{} vanished while being read", path.display()))
            })?;
            (first, true)
        };
        tracing::info!(session = %stored.session, already, "complete_task");
        let output = if already {
            format!(
                "The task was already completed in this session: {}\nNothing more to do; this call's summary was not recorded.",
                stored.summary
            )
        } else {
            format!("Task complete: {}", stored.summary)
        };
        let data = CompletionData {
            completed: true,
            already_completed: already,
            summary: stored.summary,
            session: stored.session,
            completed_at: stored.completed_at,
        };
        Ok(ToolResult::ok(output).with_data(serde_json::to_value(data)?))
    }
}

/// The complete_task tool, recording under `env`'s state directory.
pub fn tools(env: Arc<ToolEnv>) -> Vec<Arc<dyn Tool>> {
    vec![Arc::new(Typed(CompleteTask::new(env.state.path())))]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unusual_session_ids_get_distinct_safe_names() {
        assert_eq!(file_stem("s-1"), "s-1");
        let a = file_stem("../etc/passwd");
        let b = file_stem("../etc/passwe");
        assert_ne!(a, b);
        assert!(!a.contains('/') && !a.starts_with('.'), "{a}");
        assert!(!file_stem("").is_empty());
    }
}
