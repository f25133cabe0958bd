//! What the server asks of a remote runner's workspace when the files are not on its own disk
//! (a `[remote]` link): the server keeps the journal and plans every undo, the runner reads
//! and writes its files, each write a compare-and-swap there.

use async_trait::async_trait;
use toolyard_core::ToolError;

/// The largest file a change on a remote runner journals (its previous content crosses the
/// link in parts) and an undo there restores.
pub const MAX_REMOTE_FILE_BYTES: u64 = 256 << 20;

/// A file's state as the runner read it: its bytes (`None`: absent) and permission bits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileState {
    /// The bytes, `None` when the file does not exist.
    pub content: Option<Vec<u8>>,
    /// The permission bits, when it exists.
    pub mode: Option<u32>,
    /// Its state hash when it is not a regular file (`symlink:...`, `content` then holding
    /// the link's target; or `dir`).
    pub state: Option<String>,
}

/// The runner's workspace, reached over its link.
#[async_trait]
pub trait RemoteFiles: Send + Sync {
    /// The current content and mode of `path` in the workspace of `session`'s runner.
    async fn read_state(&self, session: &str, path: &str) -> Result<FileState, ToolError>;

    /// Write `content` (`None`: remove the file) with `mode` at `path`, atomically, only if its
    /// current hash is `expect` (`None`: only if it is absent); the new hash. `change` is the
    /// journal entry this write settles: if the link dies before the answer, it is left
    /// pending for the next link's recovery.
    async fn restore(
        &self,
        session: &str,
        change: i64,
        path: &str,
        expect: Option<&str>,
        content: Option<Vec<u8>>,
        mode: Option<u32>,
    ) -> Result<Option<String>, ToolError>;

    /// Like [`RemoteFiles::restore`] for a path that may be a symlink or a directory (an undo
    /// of a command's change): put it in the state `target` (a state hash; `None`: absent)
    /// with `content` (a file's bytes or a symlink's target), only if its state is `expect`.
    #[allow(clippy::too_many_arguments)]
    async fn restore_state(
        &self,
        session: &str,
        change: i64,
        path: &str,
        expect: Option<&str>,
        target: Option<&str>,
        content: Vec<u8>,
        mode: Option<u32>,
    ) -> Result<(), ToolError> {
        let _ = (session, change, expect, target, content, mode);
        Err(ToolError::Unavailable(format!(
            "cannot restore {path} on this runner: it restores regular files only"
        )))
    }
}
