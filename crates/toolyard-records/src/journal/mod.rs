//! The change journal: every mutation of the workspace, recorded (with the previous content)
//! and committed **before** the file is touched, so any change can be undone, across restarts
//! and after a crash.
//!
//! The protocol of one mutation:
//!
//! 1. [`Journal::record`] stores the file's current bytes and mode (or "did not exist") as a
//!    `pending` change and commits (`synchronous=FULL`);
//! 2. the writer replaces the file with [`Workspace::write_atomic_from`] under a
//!    compare-and-swap ([`Expect`]);
//! 3. [`Journal::mark_done`] (or [`Journal::mark_failed`] when the write did not happen).
//!
//! A crash between 1 and 3 leaves a `pending` change; [`Journal::recover`] settles it by
//! looking at the file: new content means done, anything else means the write never landed.
//! [`Journal::apply`] runs the three steps in one process.
//!
//! ```
//! use toolyard_records::{Journal, NewChange};
//! use toolyard_workspace::{Expect, StateDir, Workspace, hash_bytes};
//!
//! let tmp = tempfile::tempdir().unwrap();
//! std::fs::create_dir(tmp.path().join("ws")).unwrap();
//! let ws = Workspace::open(&tmp.path().join("ws")).unwrap();
//! let state = StateDir::at(&tmp.path().join("state"), ws.root()).unwrap();
//! let journal = Journal::open(&state).unwrap();
//!
//! let path = ws.locate("notes.txt", ws.root()).unwrap();
//! std::fs::write(ws.absolute(&path), "before\r\n").unwrap();
//! let new_hash = hash_bytes(b"after\n");
//! let change = NewChange { session: "s1", call_id: "c1", tool: "write_file", path: &path, new_hash: &new_hash, group: None };
//! // 1. record and commit the old content
//! let id = journal.record(&ws, change).unwrap();
//! // 2. write under a compare-and-swap on the recorded content
//! let old = journal.get(id).unwrap().old_hash.unwrap();
//! ws.write_atomic(&path, b"after\n", &Expect::Hash(old)).unwrap();
//! // 3. confirm
//! journal.mark_done(id).unwrap();
//!
//! let last = journal.last_of_session("s1").unwrap().unwrap();
//! journal.undo(&ws, last.id, "s1", "c2", false).unwrap();
//! assert_eq!(std::fs::read(ws.absolute(&path)).unwrap(), b"before\r\n");
//! ```

use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, Row, Transaction, TransactionBehavior, params};
use serde::{Deserialize, Serialize};
use toolyard_core::ToolError;
use toolyard_workspace::{ContentHash, Expect, RelPath, StateDir, Workspace, WriteOutcome, flock};

use crate::db::{self, Durability, db_err};
use crate::error::RecordsError;
use crate::remote::FileState;

mod query;
mod record;
mod recover;
mod store;
mod undo;

use query::*;
use store::*;
use undo::*;

pub use recover::remove_stale_temps;
pub use undo::{Checked, read_link, restore_state, state_at};

/// Size of one stored content chunk: large files are streamed through memory this much at a time.
pub const CHUNK_SIZE: usize = 1 << 20;
/// Changes kept when [`JournalConfig::max_changes`] is not set.
pub const DEFAULT_MAX_CHANGES: u64 = 10_000;
/// Stored previous-content bytes kept when [`JournalConfig::max_bytes`] is not set (2 GiB).
pub const DEFAULT_MAX_BYTES: u64 = 2 << 30;
/// Days a change is kept when [`JournalConfig::max_age_days`] is not set.
pub const DEFAULT_MAX_AGE_DAYS: u64 = 30;
/// The tool name of a change made by [`Journal::undo`].
pub const UNDO_TOOL: &str = "undo";

/// Retention also runs after this many records, so a long-lived server stays bounded.
const PRUNE_EVERY: u64 = 64;
/// How long [`Journal::recover`] waits for another process's recovery to end.
const OWNER_WAIT: Duration = Duration::from_secs(30);
const SCHEMA_VERSION: i64 = 3;
/// Upgrades of older databases: version 1 had no groups, version 2 no new modes (commands).
const MIGRATIONS: &[&str] = &[
    "ALTER TABLE journal_changes ADD COLUMN grp INTEGER;",
    "ALTER TABLE journal_changes ADD COLUMN new_mode INTEGER;",
];
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS journal_changes (
    id        INTEGER PRIMARY KEY AUTOINCREMENT, -- never reused, even after pruning
    session   TEXT    NOT NULL,
    call_id   TEXT    NOT NULL,
    tool      TEXT    NOT NULL,
    path      TEXT    NOT NULL,                  -- workspace-relative, '/'-separated
    time      TEXT    NOT NULL,                  -- RFC 3339, UTC
    existed   INTEGER NOT NULL,                  -- 0: the change created the file
    old_hash  TEXT,                              -- BLAKE3 of the previous content
    old_mode  INTEGER,
    old_bytes INTEGER,
    new_hash  TEXT,                              -- NULL: the change removes the file
    status    TEXT    NOT NULL CHECK (status IN ('pending', 'done', 'failed')),
    undoes    INTEGER,                           -- set on an undo: the change it reverts
    undone_by INTEGER,                           -- set while an undo of this change is in effect
    grp       INTEGER,                           -- the first change of the call that made several
    new_mode  INTEGER                            -- set by commands: the mode the change left
);
CREATE TABLE IF NOT EXISTS journal_commands (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    session   TEXT    NOT NULL,
    call_id   TEXT    NOT NULL,
    tool      TEXT    NOT NULL,
    command   TEXT    NOT NULL,
    time      TEXT    NOT NULL,
    first     INTEGER,                           -- its first change (NULL: none in scope)
    changes   INTEGER NOT NULL,
    skipped   TEXT    NOT NULL                   -- JSON: what it changed out of scope, and why
);
CREATE INDEX IF NOT EXISTS journal_commands_first ON journal_commands (first);
CREATE INDEX IF NOT EXISTS journal_changes_grp ON journal_changes (grp);
CREATE INDEX IF NOT EXISTS journal_changes_session ON journal_changes (session, id);
CREATE INDEX IF NOT EXISTS journal_changes_path ON journal_changes (path, id);
CREATE INDEX IF NOT EXISTS journal_changes_status ON journal_changes (status);
CREATE TABLE IF NOT EXISTS journal_chunks (
    change_id INTEGER NOT NULL,
    seq       INTEGER NOT NULL,
    data      BLOB    NOT NULL,
    PRIMARY KEY (change_id, seq)
);
";
const COLUMNS: &str = "id, session, call_id, tool, path, time, existed, old_hash, old_mode, \
                       old_bytes, new_hash, status, undoes, undone_by, grp, new_mode";

/// The id of a journaled change (shown to the model and the user as a plain number).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ChangeId(pub i64);

impl fmt::Display for ChangeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for ChangeId {
    type Err = ToolError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        let t = t.strip_prefix('#').unwrap_or(t);
        t.parse::<i64>().map(ChangeId).map_err(|_| {
            ToolError::InvalidArguments(format!(
                "a change id is a number such as 42 (see `toolyard log`), not {s:?}"
            ))
        })
    }
}

/// Where a change stands in the mutation protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeStatus {
    /// Recorded; the write has not been confirmed (yet, or ever: see [`Journal::recover`]).
    Pending,
    /// The write landed.
    Done,
    /// The write did not happen; the file kept its previous content.
    Failed,
}

impl ChangeStatus {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Done => "done",
            Self::Failed => "failed",
        }
    }
}

impl fmt::Display for ChangeStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ChangeStatus {
    type Err = ToolError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "pending" => Ok(Self::Pending),
            "done" => Ok(Self::Done),
            "failed" => Ok(Self::Failed),
            _ => Err(ToolError::InvalidArguments(format!(
                "unknown change status {s:?} (pending, done or failed)"
            ))),
        }
    }
}

/// One journaled change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// Its id.
    pub id: ChangeId,
    /// The session that made it.
    pub session: String,
    /// The tool call that made it.
    pub call_id: String,
    /// The tool that made it (`undo` for an undo).
    pub tool: String,
    /// The workspace-relative path.
    pub path: String,
    /// When it was recorded (RFC 3339, UTC).
    pub time: String,
    /// Whether the file existed before (false: the change created it).
    pub existed: bool,
    /// The previous content's hash (`None` when the file did not exist).
    pub old_hash: Option<ContentHash>,
    /// The new content's hash (`None` when the change removes the file, as an undo of a creation does).
    pub new_hash: Option<ContentHash>,
    /// The previous mode (permission bits).
    pub old_mode: Option<u32>,
    /// The previous content's size.
    pub old_bytes: Option<u64>,
    /// Where it stands.
    pub status: ChangeStatus,
    /// For an undo: the change it reverts.
    pub undoes: Option<ChangeId>,
    /// The undo currently in effect over this change, if any.
    pub undone_by: Option<ChangeId>,
    /// The group of changes one call made together (the id of its first change), undone and
    /// redone together; `None` for a change made alone.
    pub group: Option<ChangeId>,
    /// The mode the change left, for a change a command made (`None`: not tracked, as for
    /// the file tools, whose writes keep the mode).
    #[serde(default)]
    pub new_mode: Option<u32>,
}

impl Change {
    /// What the path was before the change.
    pub fn old_kind(&self) -> EntryKind {
        if self.existed {
            EntryKind::of_hash(self.old_hash.as_deref())
        } else {
            EntryKind::Absent
        }
    }

    /// What the path was after the change.
    pub fn new_kind(&self) -> EntryKind {
        EntryKind::of_hash(self.new_hash.as_deref())
    }
}

/// The prefix of the state hash of a symbolic link: `symlink:` and the BLAKE3 of its target.
pub const SYMLINK_HASH_PREFIX: &str = "symlink:";
/// The state hash of a directory (its entries are changes of their own).
pub const DIR_HASH: &str = "dir";

/// The state hash of a symbolic link pointing to `target`.
pub fn symlink_hash(target: &[u8]) -> ContentHash {
    format!(
        "{SYMLINK_HASH_PREFIX}{}",
        toolyard_workspace::hash_bytes(target)
    )
}

/// What a journaled path is, read from its state hash: a regular file's hash is its content's
/// BLAKE3; a symlink's and a directory's are marked ([`symlink_hash`], [`DIR_HASH`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    /// Nothing there.
    Absent,
    /// A regular file.
    File,
    /// A symbolic link.
    Symlink,
    /// A directory.
    Dir,
}

impl EntryKind {
    /// The kind a state hash stands for (`None`: absent).
    pub fn of_hash(hash: Option<&str>) -> Self {
        match hash {
            None => Self::Absent,
            Some(DIR_HASH) => Self::Dir,
            Some(h) if h.starts_with(SYMLINK_HASH_PREFIX) => Self::Symlink,
            Some(_) => Self::File,
        }
    }

    /// Its name in messages.
    pub fn noun(self) -> &'static str {
        match self {
            Self::Absent => "nothing",
            Self::File => "file",
            Self::Symlink => "symlink",
            Self::Dir => "directory",
        }
    }
}

/// One path a command changed, as [`Journal::record_command`] records it: its state before
/// (with the content: a file's bytes or a symlink's target) and after.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandEntry {
    /// The workspace-relative path ('/'-separated, as walked: no symlink in its parents).
    pub path: String,
    /// Its state hash before (`None`: it did not exist): see [`EntryKind::of_hash`].
    pub old_hash: Option<ContentHash>,
    /// Its permission bits before (not for a symlink).
    pub old_mode: Option<u32>,
    /// A file's bytes or a symlink's target before; empty for a directory or an absent path.
    #[serde(skip)]
    pub old_content: Vec<u8>,
    /// Its state hash after (`None`: the command removed it).
    pub new_hash: Option<ContentHash>,
    /// Its permission bits after.
    pub new_mode: Option<u32>,
}

/// A path a command changed that is not journaled, and why (excluded, too large, ...).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    /// The workspace-relative path (a directory for an excluded one).
    pub path: String,
    /// Why it cannot be undone.
    pub reason: String,
}

/// What one command call changed, for [`Journal::record_command`].
#[derive(Debug, Clone, Copy)]
pub struct CommandRecord<'a> {
    /// The session that ran it.
    pub session: &'a str,
    /// The call.
    pub call_id: &'a str,
    /// The tool (`run_command`, `Bash`, `process_output`, ...).
    pub tool: &'a str,
    /// The command line.
    pub command: &'a str,
    /// The paths it changed in scope, in the order they are applied: removals deepest first,
    /// then creations and changes shallowest first (undo goes the other way).
    pub entries: &'a [CommandEntry],
    /// What it changed out of scope.
    pub skipped: &'a [Skipped],
    /// When the command's capture began (Unix seconds; 0: no such filter): an entry whose
    /// path's latest change since then already ends in the same state (a file tool's write,
    /// journaled with its own previous content) is not journaled again.
    pub since: f64,
}

/// What [`Journal::record_command`] journaled.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandJournaled {
    /// The changes, in the entries' order (the first names the group).
    pub ids: Vec<ChangeId>,
    /// Entries left out because the journal already held their change (a file tool's write,
    /// an undo, made while the command ran).
    pub dropped: Vec<String>,
}

/// A command call as `toolyard log` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandCall {
    /// Its record's id (not a change id).
    pub id: i64,
    /// The session.
    pub session: String,
    /// The call.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// The command line.
    pub command: String,
    /// When it was recorded.
    pub time: String,
    /// Its first change (undo it to undo them all), if it changed anything in scope.
    pub first: Option<ChangeId>,
    /// How many changes it made in scope.
    pub changes: u64,
    /// What it changed out of scope.
    pub skipped: Vec<Skipped>,
}

/// A mutation about to happen, as given to [`Journal::record`].
#[derive(Debug, Clone, Copy)]
pub struct NewChange<'a> {
    /// The session making it.
    pub session: &'a str,
    /// The tool call making it.
    pub call_id: &'a str,
    /// The tool making it.
    pub tool: &'a str,
    /// The file (resolved, see [`Workspace::locate`]).
    pub path: &'a RelPath,
    /// The hash of the content about to be written.
    pub new_hash: &'a str,
    /// The first change of the same call, when the call changes several files: the changes
    /// of one group are undone together, all or none (see [`Journal::undo_group`]).
    pub group: Option<ChangeId>,
}

/// The previous state of a file as another process read it (a remote runner, whose workspace
/// is not on this disk), given to [`Journal::record_preimage`] instead of reading the file.
#[derive(Debug, Clone, Copy)]
pub struct PreImage<'a> {
    /// The file's bytes, `None` when it did not exist.
    pub content: Option<&'a [u8]>,
    /// Its permission bits, when it existed.
    pub mode: Option<u32>,
}

/// Which changes [`Journal::list`] returns (newest first).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChangeFilter {
    /// Only this session's changes.
    pub session: Option<String>,
    /// Only changes of this workspace-relative path.
    pub path: Option<String>,
    /// Only changes with this status.
    pub status: Option<ChangeStatus>,
    /// At most this many.
    pub limit: Option<usize>,
}

/// What [`Journal::undo`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UndoOutcome {
    /// The undo's own change (undo it to redo).
    pub undo: ChangeId,
    /// The change that was reverted.
    pub undone: ChangeId,
    /// Whether the reverted change was itself an undo (so this was a redo).
    pub redo: bool,
    /// The workspace-relative path.
    pub path: String,
    /// The file was removed (the reverted change had created it).
    pub removed: bool,
    /// Bytes restored (0 when removed).
    pub bytes: u64,
    /// The restored mode.
    pub mode: Option<u32>,
    /// The file's hash now (`None` when removed), for the read ledger.
    pub new_hash: Option<ContentHash>,
    /// `force` overrode a conflict (the file had changed since, or the change was already undone).
    pub forced: bool,
    /// The file was already as before the change (its content changed back since, outside
    /// the journal): nothing was written, the change is only marked undone.
    #[serde(default)]
    pub already: bool,
}

/// What [`Journal::undo_verdict`] found: a change may be undone now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UndoVerdict {
    /// `force` overrode a conflict (the file changed since, or the change was already undone).
    pub forced: bool,
    /// The file already holds its content from before the change: undoing it writes nothing.
    pub already: bool,
}

/// Retention of the journal, from the catalog's `[journal]` section. An unset limit takes its
/// default (`DEFAULT_*`); `0` means unlimited.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JournalConfig {
    /// Most changes kept.
    pub max_changes: Option<u64>,
    /// Most bytes of previous content kept (the newest change is kept whatever its size).
    pub max_bytes: Option<u64>,
    /// Oldest change kept, in days.
    pub max_age_days: Option<u64>,
    /// What commands change (`[journal.commands]`).
    #[serde(default)]
    pub commands: CommandsConfig,
}

/// Directories whose changes by commands are not journaled unless `[journal.commands] exclude`
/// says otherwise: build output and dependencies (large, and made again by a build), and
/// repositories' own stores (git has its own history), with the reason each is left out.
pub const DEFAULT_EXCLUDED: &[(&str, &str)] = &[
    ("target", "build output"),
    ("node_modules", "dependencies"),
    (".venv", "dependencies"),
    ("__pycache__", "build output"),
    ("dist", "build output"),
    (".git", "the repository's own store (git keeps its history)"),
    (".toolyard", "Toolyard's own state"),
];
/// A file larger than this is not kept for undo by default (16 MiB).
pub const DEFAULT_MAX_FILE_BYTES: u64 = 16 << 20;
/// Previous contents kept for one call by default (64 MiB).
pub const DEFAULT_MAX_CALL_BYTES: u64 = 64 << 20;
/// The runner's store of current contents by default (1 GiB).
pub const DEFAULT_MAX_STORE_BYTES: u64 = 1 << 30;

/// `[journal.commands]`: which changes commands make are journaled.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandsConfig {
    /// Journal what commands change (default true).
    pub enabled: Option<bool>,
    /// Directory names left out, wherever they are (default: [`DEFAULT_EXCLUDED`]).
    pub exclude: Option<Vec<String>>,
    /// Files larger than this are not kept (default [`DEFAULT_MAX_FILE_BYTES`]).
    pub max_file_bytes: Option<u64>,
    /// At most this many bytes of previous content per call (default [`DEFAULT_MAX_CALL_BYTES`]).
    pub max_call_bytes: Option<u64>,
    /// The runner's store of current contents (default [`DEFAULT_MAX_STORE_BYTES`]).
    pub max_store_bytes: Option<u64>,
}

impl JournalConfig {
    fn limit(v: Option<u64>, default: u64) -> Option<u64> {
        match v.unwrap_or(default) {
            0 => None,
            n => Some(n),
        }
    }
}

/// The change journal in the state database; cheap to share across threads.
#[derive(Debug)]
pub struct Journal {
    conn: Mutex<Connection>,
    max_changes: Option<u64>,
    max_bytes: Option<u64>,
    max_age_days: Option<u64>,
    records: AtomicU64,
    /// `owner.lock` in the state directory, held shared from [`Journal::recover`] on.
    owner: Mutex<Option<File>>,
    owner_path: PathBuf,
}

impl<'a> From<&NewChange<'a>> for Pending<'a> {
    fn from(change: &NewChange<'a>) -> Self {
        Self {
            session: change.session,
            call_id: change.call_id,
            tool: change.tool,
            path: change.path,
            new_hash: Some(change.new_hash),
            undoes: None,
            group: change.group,
            new_mode: None,
        }
    }
}

/// What recording found at the path.
struct Recorded {
    id: ChangeId,
    old_hash: Option<ContentHash>,
    /// The file's permission bits when recorded (`None`: it did not exist).
    old_mode: Option<u32>,
}

/// The fields of a change to record (a [`NewChange`], or an undo).
struct Pending<'a> {
    session: &'a str,
    call_id: &'a str,
    tool: &'a str,
    path: &'a RelPath,
    new_hash: Option<&'a str>,
    undoes: Option<ChangeId>,
    group: Option<ChangeId>,
    /// The mode the change leaves, when tracked (commands and their undos).
    new_mode: Option<u32>,
}

/// What a path held before a change, as [`Journal::insert_pending`] stores it.
enum Old<'r> {
    /// Nothing.
    Absent,
    /// A file's bytes, or (`link`) a symlink's target.
    Content {
        reader: &'r mut dyn Read,
        link: bool,
    },
    /// A directory.
    Dir,
}

impl Journal {
    /// Open (creating if needed) the journal in `state`'s database, with default retention.
    pub fn open(state: &StateDir) -> Result<Self, ToolError> {
        Self::open_with(state, &JournalConfig::default())
    }

    /// Open the journal with the given retention, and apply it.
    pub fn open_with(state: &StateDir, config: &JournalConfig) -> Result<Self, ToolError> {
        let mut conn = db::open(state, Durability::Full)?;
        db::ensure_schema(&mut conn, "journal", SCHEMA_VERSION, SCHEMA, MIGRATIONS)?;
        let journal = Self {
            conn: Mutex::new(conn),
            max_changes: JournalConfig::limit(config.max_changes, DEFAULT_MAX_CHANGES),
            max_bytes: JournalConfig::limit(config.max_bytes, DEFAULT_MAX_BYTES),
            max_age_days: JournalConfig::limit(config.max_age_days, DEFAULT_MAX_AGE_DAYS),
            records: AtomicU64::new(0),
            owner: Mutex::new(None),
            owner_path: state.owner_lock_path(),
        };
        journal.prune()?;
        Ok(journal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn _assert_send_sync() {
        fn is<T: Send + Sync>() {}
        is::<Journal>();
    }

    #[test]
    fn change_id_round_trips_through_text() {
        assert_eq!("42".parse::<ChangeId>().unwrap(), ChangeId(42));
        assert_eq!(" #7 ".parse::<ChangeId>().unwrap(), ChangeId(7));
        assert_eq!(ChangeId(42).to_string(), "42");
        assert_eq!(serde_json::to_string(&ChangeId(3)).unwrap(), "3");
        let e = "abc".parse::<ChangeId>().unwrap_err();
        assert_eq!(e.kind(), "invalid_arguments");
    }

    #[test]
    fn the_sync_level_is_relaxed_for_one_commit_and_restored() {
        let conn = Connection::open_in_memory().unwrap();
        let level = |c: &Connection| -> i64 {
            c.query_row("PRAGMA synchronous", [], |r| r.get(0)).unwrap()
        };
        set_sync(&conn, true).unwrap();
        assert_eq!(level(&conn), 2, "FULL");
        let relaxed = RelaxedSync::new(&conn);
        assert_eq!(level(&conn), 1, "NORMAL while relaxed");
        relaxed.restore(&conn).unwrap();
        assert_eq!(level(&conn), 2, "FULL again");
        set_sync(&conn, false).unwrap();
        ensure_full_sync(&conn).unwrap();
        assert_eq!(level(&conn), 2, "a record never commits below FULL");
    }

    #[test]
    fn journal_config_rejects_unknown_fields() {
        let ok: JournalConfig = serde_json::from_str(r#"{"max_changes": 5}"#).unwrap();
        assert_eq!(ok.max_changes, Some(5));
        assert!(serde_json::from_str::<JournalConfig>(r#"{"max_change": 5}"#).is_err());
    }
}
