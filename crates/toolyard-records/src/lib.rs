//! # toolyard-records
//!
//! What Toolyard records of a session's work on a workspace, in one place: the change
//! [`Journal`] (every mutation recorded with its previous content before it happens), the read
//! [`Ledger`] (what each session saw of each file), the record operations as one enum
//! ([`RecordOp`], the API both in this process and over a runner's link, carried out by
//! [`LocalRecords`]), and group undo, written once over where the files are ([`Files`]: this
//! disk, or a remote runner's workspace).

mod db;
mod error;
mod journal;
mod ledger;
pub mod op;
mod records;
mod remote;
mod undo;

pub use error::RecordsError;
pub use journal::{
    CHUNK_SIZE, Change, ChangeFilter, ChangeId, ChangeStatus, CommandCall, CommandEntry,
    CommandJournaled, CommandRecord, CommandsConfig, DEFAULT_EXCLUDED, DEFAULT_MAX_AGE_DAYS,
    DEFAULT_MAX_BYTES, DEFAULT_MAX_CALL_BYTES, DEFAULT_MAX_CHANGES, DEFAULT_MAX_FILE_BYTES,
    DEFAULT_MAX_STORE_BYTES, DIR_HASH, EntryKind, Journal, JournalConfig, NewChange, PreImage,
    SYMLINK_HASH_PREFIX, Skipped, UNDO_TOOL, UndoOutcome, UndoVerdict, read_link,
    remove_stale_temps, restore_state, state_at, symlink_hash,
};
pub use ledger::{Ledger, LedgerLimits, LedgerUpdate, Via};
pub use op::{CommandEntryWire, PreImageWire, RecordOp, Reply};
pub use records::{LocalRecords, Records};
pub use remote::{FileState, MAX_REMOTE_FILE_BYTES, RemoteFiles};
pub use undo::{Checked, Disk, Files, Link, undo_group};
