//! Session records the file tools keep: the read ledger and the change journal.
//!
//! The tools see them through [`Records`], so the same tool code runs in the server process
//! (where [`LocalRecords`] writes the state database directly) and in a sandboxed runner
//! (where the runner asks the server over the job protocol, because a runner may not write
//! Toolyard's state directory).

use std::sync::Arc;

use async_trait::async_trait;
use toolyard_core::ToolError;
use toolyard_workspace::{Journal, Ledger, NewChange, RelPath, Workspace};

/// What the file tools record per session: reads, writes, and journal entries.
#[async_trait]
pub trait Records: Send + Sync {
    /// The session read `path` and saw content `hash`.
    async fn record_read(&self, session: &str, path: &RelPath, hash: &str)
    -> Result<(), ToolError>;
    /// May the session overwrite `path`, whose content now hashes to `current`?
    async fn check_write(
        &self,
        session: &str,
        path: &RelPath,
        current: &str,
    ) -> Result<(), ToolError>;
    /// The session wrote `path`; its view is now `hash`.
    async fn record_write(
        &self,
        session: &str,
        path: &RelPath,
        hash: &str,
    ) -> Result<(), ToolError>;
    /// Journal the previous content of `path` before it changes; returns the change id.
    async fn journal_begin(
        &self,
        session: &str,
        call_id: &str,
        tool: &str,
        path: &RelPath,
        new_hash: &str,
    ) -> Result<i64, ToolError>;
    /// The journaled change landed (`done`) or did not happen.
    async fn journal_end(&self, change: i64, done: bool) -> Result<(), ToolError>;
}

/// [`Records`] kept in this process's state database.
pub struct LocalRecords {
    /// The workspace whose files are journaled.
    pub workspace: Arc<Workspace>,
    /// Per-session reads.
    pub ledger: Ledger,
    /// Every change, before it happens.
    pub journal: Journal,
}

#[async_trait]
impl Records for LocalRecords {
    async fn record_read(
        &self,
        session: &str,
        path: &RelPath,
        hash: &str,
    ) -> Result<(), ToolError> {
        self.ledger.record_read(session, path, hash)
    }

    async fn check_write(
        &self,
        session: &str,
        path: &RelPath,
        current: &str,
    ) -> Result<(), ToolError> {
        self.ledger.check_write(session, path, current)
    }

    async fn record_write(
        &self,
        session: &str,
        path: &RelPath,
        hash: &str,
    ) -> Result<(), ToolError> {
        self.ledger.record_write(session, path, hash)
    }

    async fn journal_begin(
        &self,
        session: &str,
        call_id: &str,
        tool: &str,
        path: &RelPath,
        new_hash: &str,
    ) -> Result<i64, ToolError> {
        let id = self.journal.record(
            &self.workspace,
            NewChange {
                session,
                call_id,
                tool,
                path,
                new_hash,
            },
        )?;
        Ok(id.0)
    }

    async fn journal_end(&self, change: i64, done: bool) -> Result<(), ToolError> {
        let id = toolyard_workspace::ChangeId(change);
        if done {
            self.journal.mark_done(id)
        } else {
            self.journal.mark_failed(id)
        }
    }
}
