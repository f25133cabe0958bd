//! # toolyard-workspace
//!
//! The workspace a model may touch, and nothing else: every path is resolved beneath the
//! workspace root and opened with `openat2(RESOLVE_BENEATH)` (through `cap-std`), so `..`,
//! absolute paths and symlinks cannot lead outside, not even when a symlink is swapped in while
//! a call runs. Writes are atomic and keep the file's mode. Around that: the [`StateDir`] where
//! Toolyard keeps its own files, the per-session read [`Ledger`], and the change [`Journal`].

mod confine;
mod db;
mod hash;
mod journal;
mod ledger;
mod state;

pub use confine::{Expect, Protection, RelPath, Staged, Workspace, WriteOutcome};
pub use hash::{ContentHash, hash_bytes, hash_reader};
pub use journal::{
    CHUNK_SIZE, Change, ChangeFilter, ChangeId, ChangeStatus, CommandCall, CommandEntry,
    CommandJournaled, CommandRecord, CommandsConfig, DEFAULT_EXCLUDED, DEFAULT_MAX_AGE_DAYS,
    DEFAULT_MAX_BYTES, DEFAULT_MAX_CALL_BYTES, DEFAULT_MAX_CHANGES, DEFAULT_MAX_FILE_BYTES,
    DEFAULT_MAX_STORE_BYTES, DIR_HASH, EntryKind, Journal, JournalConfig, NewChange, PreImage,
    SYMLINK_HASH_PREFIX, Skipped, UNDO_TOOL, UndoOutcome, UndoVerdict, read_link,
    remove_stale_temps, restore_state, state_at, symlink_hash,
};
pub use ledger::{Ledger, LedgerLimits, LedgerUpdate, Via};
pub use state::StateDir;
