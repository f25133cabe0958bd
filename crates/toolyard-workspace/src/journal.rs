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
//! use toolyard_workspace::{Expect, Journal, NewChange, StateDir, Workspace, hash_bytes};
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
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, Row, Transaction, TransactionBehavior, params};
use serde::{Deserialize, Serialize};
use toolyard_core::ToolError;

use crate::confine::{Expect, RelPath, Workspace, WriteOutcome};
use crate::db::{self, Durability, db_err};
use crate::hash::ContentHash;
use crate::state::StateDir;

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
    format!("{SYMLINK_HASH_PREFIX}{}", crate::hash::hash_bytes(target))
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

    /// Record the current content of `change.path` (or that it does not exist) and its mode as
    /// a pending change, streaming the file in [`CHUNK_SIZE`] chunks, and commit. Only then may
    /// the file be written: with `Expect::Hash` of the recorded `old_hash` (see [`Journal::get`]),
    /// or `Expect::Missing` when it did not exist.
    pub fn record(&self, ws: &Workspace, change: NewChange<'_>) -> Result<ChangeId, ToolError> {
        let rec = self.record_pending(ws, Pending::from(&change))?;
        Ok(rec.id)
    }

    /// Like [`Journal::record`], with the previous content given rather than read from a
    /// workspace on this disk: a remote runner ships it with its journal request, and writes
    /// only once this returns (committed).
    pub fn record_preimage(
        &self,
        change: NewChange<'_>,
        pre: &PreImage<'_>,
    ) -> Result<ChangeId, ToolError> {
        self.insert_preimage(Pending::from(&change), pre)
    }

    /// Like [`Journal::record_removal`], with the previous content given as in
    /// [`Journal::record_preimage`].
    pub fn record_removal_preimage(
        &self,
        session: &str,
        call_id: &str,
        tool: &str,
        path: &RelPath,
        group: Option<ChangeId>,
        pre: &PreImage<'_>,
    ) -> Result<ChangeId, ToolError> {
        self.insert_preimage(
            Pending {
                session,
                call_id,
                tool,
                path,
                new_hash: None,
                undoes: None,
                group,
                new_mode: None,
            },
            pre,
        )
    }

    /// Record `p` with the previous content `pre` another process read, and commit.
    fn insert_preimage(&self, p: Pending<'_>, pre: &PreImage<'_>) -> Result<ChangeId, ToolError> {
        let path = p.path.to_string();
        let mut bytes = pre.content;
        let old = match bytes.as_mut() {
            Some(b) => Old::Content {
                reader: b as &mut dyn Read,
                link: false,
            },
            None => Old::Absent,
        };
        let rec =
            self.insert_pending(p, old, pre.mode, &|e| ToolError::Io(format!("{path}: {e}")))?;
        Ok(rec.id)
    }

    /// Like [`Journal::record`] for a change that removes `path`: its new state is "absent", so
    /// undoing it writes the recorded content and mode back. `group` as in [`NewChange::group`].
    pub fn record_removal(
        &self,
        ws: &Workspace,
        session: &str,
        call_id: &str,
        tool: &str,
        path: &RelPath,
        group: Option<ChangeId>,
    ) -> Result<ChangeId, ToolError> {
        let rec = self.record_pending(
            ws,
            Pending {
                session,
                call_id,
                tool,
                path,
                new_hash: None,
                undoes: None,
                group,
                new_mode: None,
            },
        )?;
        Ok(rec.id)
    }

    /// The whole protocol in one process: record, write `content` under `expect` (the session's
    /// view of the file; refused with `StaleRead` if the file no longer matches), mark done or
    /// failed. `mode` overrides the file's mode as in [`Workspace::write_atomic_from`].
    pub fn apply(
        &self,
        ws: &Workspace,
        change: NewChange<'_>,
        content: &mut dyn Read,
        expect: &Expect,
        mode: Option<u32>,
    ) -> Result<(ChangeId, WriteOutcome), ToolError> {
        let rec = self.record_pending(ws, Pending::from(&change))?;
        // Check against what was recorded, not only at rename time: if the file changed and
        // changed back in between, the journal must still hold the content being replaced.
        let matches = match (expect, &rec.old_hash) {
            (Expect::Any, _) | (Expect::Missing, None) => true,
            (Expect::Hash(want), Some(have)) => want == have,
            _ => false,
        };
        let written = if matches {
            let cas = match &rec.old_hash {
                Some(h) => Expect::Hash(h.clone()),
                None => Expect::Missing,
            };
            ws.write_atomic_from(change.path, content, &cas, mode)
        } else {
            Err(ToolError::StaleRead {
                path: change.path.to_string(),
            })
        };
        match written {
            Ok(outcome) => {
                if let Err(e) = self.mark_done(rec.id) {
                    // The file is written; recover() will settle the entry from its content.
                    tracing::warn!(change = %rec.id, error = %e, "write landed but the journal entry stays pending");
                }
                Ok((rec.id, outcome))
            }
            Err(e) => {
                self.fail_quietly(rec.id);
                Err(e)
            }
        }
    }

    /// Record what a command did, after the fact, in one durable transaction: each entry as
    /// a `done` change with its previous state (content included), all of them one group
    /// (undone together, newest first), and the call with what it changed out of scope. A
    /// crash before the commit leaves nothing of it; after, all of it. Returns the changes'
    /// ids in `entries`' order.
    pub fn record_command(&self, cmd: &CommandRecord<'_>) -> Result<CommandJournaled, ToolError> {
        for e in cmd.entries {
            let kind = EntryKind::of_hash(e.old_hash.as_deref());
            let ok = match kind {
                EntryKind::Absent | EntryKind::Dir => true,
                EntryKind::File => {
                    e.old_hash.as_deref() == Some(crate::hash::hash_bytes(&e.old_content).as_str())
                }
                EntryKind::Symlink => {
                    e.old_hash.as_deref() == Some(symlink_hash(&e.old_content).as_str())
                }
            };
            if !ok {
                return Err(ToolError::Io(format!(
                    "the previous content of {} does not match its hash; nothing was journaled",
                    e.path
                )));
            }
        }
        let mut ids = Vec::with_capacity(cmd.entries.len());
        let mut dropped = Vec::new();
        {
            let mut conn = db::lock(&self.conn);
            ensure_full_sync(&conn)?;
            let tx = immediate(&mut conn)?;
            let mut fresh = Vec::with_capacity(cmd.entries.len());
            for e in cmd.entries {
                let latest: Option<Option<String>> = tx
                    .prepare_cached(
                        "SELECT new_hash FROM journal_changes
                         WHERE path = ?1 AND status = 'done'
                         AND (julianday(time) - 2440587.5) * 86400.0 >= ?2
                         ORDER BY id DESC LIMIT 1",
                    )
                    .and_then(|mut st| {
                        st.query_row(params![e.path, cmd.since], |r| r.get(0))
                            .optional()
                    })
                    .map_err(db_err)?;
                if cmd.since > 0.0 && latest.is_some_and(|h| h == e.new_hash) {
                    dropped.push(e.path.clone());
                    continue;
                }
                fresh.push(e);
            }
            let mut group: Option<i64> = None;
            for e in fresh.iter().copied() {
                let kind = EntryKind::of_hash(e.old_hash.as_deref());
                tx.prepare_cached(
                    "INSERT INTO journal_changes
                     (session, call_id, tool, path, time, existed, old_mode, new_hash, status,
                      grp, new_mode)
                     VALUES (?1, ?2, ?3, ?4, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), ?5, ?6, ?7,
                             'done', ?8, ?9)",
                )
                .and_then(|mut insert| {
                    insert.execute(params![
                        cmd.session,
                        cmd.call_id,
                        cmd.tool,
                        e.path,
                        kind != EntryKind::Absent,
                        e.old_mode,
                        e.new_hash,
                        group,
                        e.new_mode,
                    ])
                })
                .map_err(db_err)?;
                let id = ChangeId(tx.last_insert_rowid());
                if group.is_none() && fresh.len() > 1 {
                    group = Some(id.0);
                    tx.execute(
                        "UPDATE journal_changes SET grp = ?1 WHERE id = ?1",
                        params![id.0],
                    )
                    .map_err(db_err)?;
                }
                let path = e.path.clone();
                let read_err = move |err: io::Error| ToolError::Io(format!("{path}: {err}"));
                match kind {
                    EntryKind::File | EntryKind::Symlink => {
                        store_content(&tx, id, &mut &e.old_content[..], &read_err)?;
                        if let Some(h) = &e.old_hash {
                            set_old_hash(&tx, id, h)?;
                        }
                    }
                    EntryKind::Dir => {
                        set_old_hash(&tx, id, DIR_HASH)?;
                    }
                    EntryKind::Absent => {}
                }
                ids.push(id);
            }
            let skipped = serde_json::to_string(cmd.skipped)
                .map_err(|e| ToolError::Io(format!("journaling a command: {e}")))?;
            // A call whose every change was journaled already leaves no record of its own.
            let record = !ids.is_empty() || !cmd.skipped.is_empty();
            if record {
                tx.execute(
                    "INSERT INTO journal_commands
                 (session, call_id, tool, command, time, first, changes, skipped)
                 VALUES (?1, ?2, ?3, ?4, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), ?5, ?6, ?7)",
                    params![
                        cmd.session,
                        cmd.call_id,
                        cmd.tool,
                        cmd.command,
                        ids.first().map(|i| i.0),
                        ids.len() as i64,
                        skipped
                    ],
                )
                .map_err(db_err)?;
            }
            tx.commit().map_err(db_err)?;
        }
        tracing::debug!(
            changes = ids.len(),
            skipped = cmd.skipped.len(),
            tool = cmd.tool,
            "journaled a command's changes"
        );
        let due = self.records.fetch_add(1, Ordering::Relaxed) % PRUNE_EVERY == PRUNE_EVERY - 1;
        if due && let Err(e) = self.prune() {
            tracing::warn!(error = %e, "journal retention failed");
        }
        Ok(CommandJournaled { ids, dropped })
    }

    /// The command calls recorded, newest first (at most `limit`; of `session` if given).
    pub fn commands(
        &self,
        session: Option<&str>,
        limit: usize,
    ) -> Result<Vec<CommandCall>, ToolError> {
        let conn = db::lock(&self.conn);
        let mut st = conn
            .prepare_cached(
                "SELECT id, session, call_id, tool, command, time, first, changes, skipped
                 FROM journal_commands WHERE ?1 IS NULL OR session = ?1
                 ORDER BY id DESC LIMIT ?2",
            )
            .map_err(db_err)?;
        let rows = st
            .query_map(params![session, to_sql_int(limit as u64)], |r| {
                let skipped: String = r.get(8)?;
                Ok(CommandCall {
                    id: r.get(0)?,
                    session: r.get(1)?,
                    call_id: r.get(2)?,
                    tool: r.get(3)?,
                    command: r.get(4)?,
                    time: r.get(5)?,
                    first: r.get::<_, Option<i64>>(6)?.map(ChangeId),
                    changes: u64::try_from(r.get::<_, i64>(7)?).unwrap_or(0),
                    skipped: serde_json::from_str(&skipped).unwrap_or_default(),
                })
            })
            .map_err(db_err)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(db_err)
    }

    /// The write of change `id` landed.
    ///
    /// This commit does not wait for the disk (`synchronous=NORMAL` for it alone): if it is
    /// lost in a crash, the change is left `pending` and [`Journal::recover`] settles it as done
    /// from the file's content, exactly as for a crash just before this call. The next
    /// `synchronous=FULL` commit (the next record) makes it durable along with its own.
    pub fn mark_done(&self, id: ChangeId) -> Result<(), ToolError> {
        let mut conn = db::lock(&self.conn);
        let relaxed = RelaxedSync::new(&conn);
        let result = Self::mark_done_in(&mut conn, id);
        relaxed.restore(&conn)?;
        result
    }

    fn mark_done_in(conn: &mut Connection, id: ChangeId) -> Result<(), ToolError> {
        let tx = immediate(conn)?;
        let (status, undoes) = status_of(&tx, id)?;
        match status {
            ChangeStatus::Done => {}
            ChangeStatus::Pending | ChangeStatus::Failed => {
                if status == ChangeStatus::Failed {
                    // recover() may have run while this write was in flight.
                    tracing::warn!(change = %id, "change marked failed is now reported done");
                }
                set_status(&tx, id, ChangeStatus::Done)?;
                if undoes.is_some() {
                    link_undo(&tx, id)?;
                }
            }
        }
        tx.commit().map_err(db_err)
    }

    /// The write of change `id` did not happen.
    pub fn mark_failed(&self, id: ChangeId) -> Result<(), ToolError> {
        let mut conn = db::lock(&self.conn);
        let tx = immediate(&mut conn)?;
        match status_of(&tx, id)?.0 {
            ChangeStatus::Failed => {}
            ChangeStatus::Pending => set_status(&tx, id, ChangeStatus::Failed)?,
            ChangeStatus::Done => {
                return Err(ToolError::Conflict(format!(
                    "change {id} is already done; a write that landed cannot be marked failed"
                )));
            }
        }
        tx.commit().map_err(db_err)
    }

    /// Changes matching `filter`, newest first.
    pub fn list(&self, filter: &ChangeFilter) -> Result<Vec<Change>, ToolError> {
        let mut sql = format!("SELECT {COLUMNS} FROM journal_changes WHERE 1 = 1");
        let mut args: Vec<Value> = Vec::new();
        if let Some(s) = &filter.session {
            args.push(Value::Text(s.clone()));
            sql.push_str(&format!(" AND session = ?{}", args.len()));
        }
        if let Some(p) = &filter.path {
            args.push(Value::Text(p.clone()));
            sql.push_str(&format!(" AND path = ?{}", args.len()));
        }
        if let Some(st) = filter.status {
            args.push(Value::Text(st.as_str().into()));
            sql.push_str(&format!(" AND status = ?{}", args.len()));
        }
        sql.push_str(" ORDER BY id DESC");
        if let Some(limit) = filter.limit {
            args.push(Value::Integer(i64::try_from(limit).unwrap_or(i64::MAX)));
            sql.push_str(&format!(" LIMIT ?{}", args.len()));
        }
        let conn = db::lock(&self.conn);
        let mut st = conn.prepare(&sql).map_err(db_err)?;
        let rows = st
            .query_map(rusqlite::params_from_iter(args), change_from_row)
            .map_err(db_err)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(db_err)
    }

    /// The change `id`.
    pub fn get(&self, id: ChangeId) -> Result<Change, ToolError> {
        let conn = db::lock(&self.conn);
        get_change(&conn, id)
    }

    /// The change a plain `undo` of `session` reverts: its newest change that is done, is not
    /// itself an undo, and is not undone. Undoing it marks it undone, so repeated undos walk
    /// back through the session's history; a redo (undoing an undo) makes its change current again.
    pub fn last_of_session(&self, session: &str) -> Result<Option<Change>, ToolError> {
        let conn = db::lock(&self.conn);
        conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM journal_changes
             WHERE session = ?1 AND status = 'done' AND undoes IS NULL AND undone_by IS NULL
             ORDER BY id DESC LIMIT 1"
        ))
        .and_then(|mut st| st.query_row(params![session], change_from_row).optional())
        .map_err(db_err)
    }

    /// The previous content stored for change `id` (`None` if the file did not exist), streamed
    /// chunk by chunk and checked against its hash at the end.
    pub fn old_content(&self, id: ChangeId) -> Result<Option<impl Read + '_>, ToolError> {
        let change = self.get(id)?;
        Ok(change
            .existed
            .then(|| ChunkReader::new(&self.conn, &change)))
    }

    /// The changes undone together with change `id`: its group, newest first (just `id` when
    /// it was made alone).
    pub fn group_of(&self, id: ChangeId) -> Result<Vec<Change>, ToolError> {
        let change = self.get(id)?;
        let Some(group) = change.group else {
            return Ok(vec![change]);
        };
        let conn = db::lock(&self.conn);
        let mut st = conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM journal_changes WHERE grp = ?1 ORDER BY id DESC"
            ))
            .map_err(db_err)?;
        let rows = st
            .query_map(params![group.0], change_from_row)
            .map_err(db_err)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(db_err)
    }

    /// Restore `path` to its content before change `id`: exact bytes and mode, or remove it if
    /// the change created it. Refused with `Conflict` if the file changed since the change (or
    /// the change was already undone) unless `force`. The undo is journaled as a change of tool
    /// `undo` by `session`/`call_id`; undoing that change redoes `id`.
    ///
    /// Only for a change made alone: a change of a group is refused (undo its group with
    /// [`Journal::undo_group`], so one call's changes are never split).
    pub fn undo(
        &self,
        ws: &Workspace,
        id: ChangeId,
        session: &str,
        call_id: &str,
        force: bool,
    ) -> Result<UndoOutcome, ToolError> {
        let members = self.group_of(id)?;
        if members.len() > 1 {
            return Err(ToolError::Conflict(format!(
                "change {id} is one of {} changes one {} call made together; undo them together (the `undo` tool and `toolyard undo` do)",
                members.len(),
                members[0].tool
            )));
        }
        let target = self.get(id)?;
        let (path, current, forced) = self.check_undoable(ws, &target, force)?;
        self.undo_checked(ws, target, path, current, forced, session, call_id, None)
    }

    /// Undo change `id` and every other change of its group (see [`NewChange::group`]),
    /// newest first, each under a compare-and-swap: all or none. Every change is checked before
    /// any file is touched, so if one file changed since (or one change is already undone) the
    /// whole undo is refused, naming it, unless `force`; if a file changes during the undo, the
    /// files already restored are put back. The undos form a group of their own, so undoing
    /// any of them redoes the whole group. Changes whose write never happened are skipped.
    pub fn undo_group(
        &self,
        ws: &Workspace,
        id: ChangeId,
        session: &str,
        call_id: &str,
        force: bool,
    ) -> Result<Vec<UndoOutcome>, ToolError> {
        let members = self.group_of(id)?;
        if members.len() <= 1 {
            return self.undo(ws, id, session, call_id, force).map(|o| vec![o]);
        }
        let count = members.len();
        let names: Vec<&str> = members.iter().map(|m| m.path.as_str()).collect();
        let whole = |e: ToolError| match e {
            ToolError::Conflict(m) => ToolError::Conflict(format!(
                "{m}. Change {id} is one of the {count} changes one {} call made together ({}); they are undone together, so nothing was undone",
                members[0].tool,
                names.join(", ")
            )),
            other => other,
        };
        let mut checked = Vec::with_capacity(count);
        for m in &members {
            if m.status == ChangeStatus::Failed {
                continue;
            }
            let (path, current, forced) = self.check_undoable(ws, m, force).map_err(whole)?;
            checked.push((m.clone(), path, current, forced));
        }
        let mut done: Vec<UndoOutcome> = Vec::with_capacity(checked.len());
        let mut first: Option<ChangeId> = None;
        for (target, path, current, forced) in checked {
            let shown = target.path.clone();
            match self.undo_checked(ws, target, path, current, forced, session, call_id, first) {
                Ok(out) => {
                    first.get_or_insert(out.undo);
                    done.push(out);
                }
                Err(e) => {
                    let left = self.put_back(ws, &done, session, call_id);
                    let outcome = if left.is_empty() {
                        "the files already restored were put back, so nothing changed".to_string()
                    } else {
                        format!(
                            "putting back the files already restored failed for {}; see `toolyard log`",
                            left.join(", ")
                        )
                    };
                    return Err(ToolError::Conflict(format!(
                        "undoing change {id} stopped at {shown}: {e}; {outcome}"
                    )));
                }
            }
        }
        if done.is_empty() {
            return Err(ToolError::Conflict(format!(
                "change {id} and its group failed: their writes never happened, so there is nothing to undo"
            )));
        }
        Ok(done)
    }

    /// Revert the undos in `done` (newest first); returns the paths that could not be.
    fn put_back(
        &self,
        ws: &Workspace,
        done: &[UndoOutcome],
        session: &str,
        call_id: &str,
    ) -> Vec<String> {
        let mut left = Vec::new();
        let mut first = None;
        for out in done.iter().rev() {
            let again = self.get(out.undo).and_then(|target| {
                let (path, current, verdict) = self.check_undoable(ws, &target, false)?;
                self.undo_checked(ws, target, path, current, verdict, session, call_id, first)
            });
            match again {
                Ok(o) => {
                    first.get_or_insert(o.undo);
                }
                Err(e) => {
                    tracing::warn!(change = %out.undo, error = %e, "could not put back a file of a failed group undo");
                    left.push(out.path.clone());
                }
            }
        }
        left
    }

    /// Whether `target` can be undone now (see [`Journal::undo_check`]): its path, the file's
    /// current hash, and whether `force` overrode a conflict.
    fn check_undoable(
        &self,
        ws: &Workspace,
        target: &Change,
        force: bool,
    ) -> Result<(RelPath, Option<ContentHash>, UndoVerdict), ToolError> {
        let path = ws.relative(&target.path, ws.root())?;
        let (current, mode) = state_at(ws, &path)?;
        let verdict = self.undo_verdict_mode(target, current.as_deref(), mode, force)?;
        Ok((path, current, verdict))
    }

    /// Undo `target`, checked by [`Journal::check_undoable`]; the undo joins `group`.
    #[allow(clippy::too_many_arguments)]
    fn undo_checked(
        &self,
        ws: &Workspace,
        target: Change,
        path: RelPath,
        current: Option<ContentHash>,
        verdict: UndoVerdict,
        session: &str,
        call_id: &str,
        group: Option<ChangeId>,
    ) -> Result<UndoOutcome, ToolError> {
        let UndoVerdict { forced, already } = verdict;
        let id = target.id;
        let rec = self.record_state_pending(
            ws,
            Pending {
                session,
                call_id,
                tool: UNDO_TOOL,
                path: &path,
                new_hash: target.old_hash.as_deref(),
                undoes: Some(id),
                group,
                // A command's change tracks modes: its undo does too, so a redo checks it.
                new_mode: target.new_mode.and(target.old_mode),
            },
        )?;
        if rec.old_hash != current {
            self.fail_quietly(rec.id);
            return Err(ToolError::Conflict(format!(
                "{} changed while undoing change {id}; retry the undo",
                target.path
            )));
        }
        let expect = match &rec.old_hash {
            Some(h) => Expect::Hash(h.clone()),
            None => Expect::Missing,
        };
        // Already as before the change (and with its mode): there is nothing to write.
        let nothing_to_write = already && (!target.existed || rec.old_mode == target.old_mode);
        let restored = if nothing_to_write {
            let bytes = match ws.metadata(&path) {
                Ok(Some(m)) if target.existed => m.len(),
                _ => 0,
            };
            Ok((!target.existed, bytes, rec.old_mode))
        } else {
            self.restore_entry(ws, &path, &target, rec.old_hash.as_deref(), expect)
        };
        match restored {
            Ok((removed, bytes, mode)) => {
                self.mark_done(rec.id)?;
                tracing::info!(undo = %rec.id, undone = %id, path = %path, removed, "undid change");
                Ok(UndoOutcome {
                    undo: rec.id,
                    undone: id,
                    redo: target.undoes.is_some(),
                    path: target.path,
                    removed,
                    bytes,
                    mode,
                    new_hash: target.old_hash,
                    forced,
                    already,
                })
            }
            Err(e) => {
                self.fail_quietly(rec.id);
                Err(match e {
                    ToolError::StaleRead { path } => ToolError::Conflict(format!(
                        "{path} changed while undoing change {id}; retry the undo"
                    )),
                    other => other,
                })
            }
        }
    }

    /// Whether change `target` may be undone now that its file hashes to `current` (`None`:
    /// absent): `Ok(forced)`, where `forced` says `force` overrode a conflict, or the
    /// `Conflict` saying why not. The checks of [`Journal::undo`], for an undo done elsewhere.
    pub fn undo_check(
        &self,
        target: &Change,
        current: Option<&str>,
        force: bool,
    ) -> Result<bool, ToolError> {
        self.undo_verdict(target, current, force).map(|v| v.forced)
    }

    /// [`Journal::undo_check`], saying also whether the file is already as before the change
    /// (its content changed back since, a formatter undoing an edit): that is no conflict, since
    /// undoing it loses nothing; the undo then writes nothing and only marks the change undone.
    pub fn undo_verdict(
        &self,
        target: &Change,
        current: Option<&str>,
        force: bool,
    ) -> Result<UndoVerdict, ToolError> {
        self.undo_verdict_mode(target, current, None, force)
    }

    /// [`Journal::undo_verdict`], given also the path's mode now (`None`: unknown): a change
    /// that tracks modes (a command's) has also changed since when its mode differs.
    pub fn undo_verdict_mode(
        &self,
        target: &Change,
        current: Option<&str>,
        current_mode: Option<u32>,
        force: bool,
    ) -> Result<UndoVerdict, ToolError> {
        let id = target.id;
        match target.status {
            ChangeStatus::Done => {}
            ChangeStatus::Pending => {
                return Err(ToolError::Conflict(format!(
                    "change {id} is still pending: its write was never confirmed (in flight, or interrupted by a crash; restarting Toolyard settles it)"
                )));
            }
            ChangeStatus::Failed => {
                return Err(ToolError::Conflict(format!(
                    "change {id} failed: its write never happened, so there is nothing to undo"
                )));
            }
        }
        let mut forced = false;
        if let Some(by) = target.undone_by {
            if !force {
                return Err(ToolError::Conflict(format!(
                    "change {id} was already undone by change {by}; to redo it, undo change {by}"
                )));
            }
            forced = true;
        }
        let tracked = target.new_mode.is_some() && current_mode.is_some();
        let is_new = current == target.new_hash.as_deref()
            && (!tracked || current.is_none() || current_mode == target.new_mode);
        let already = !is_new
            && current == target.old_hash.as_deref()
            && (!tracked || current.is_none() || current_mode == target.old_mode);
        if !is_new && !already {
            if !force {
                return Err(ToolError::Conflict(format!(
                    "{} changed since change {id} ({}); undoing it would lose those changes. Read the file and edit it instead, or undo with force (`force: true`; `--force` on the command line) to restore the content from before change {id} anyway",
                    target.path,
                    if current.is_none() {
                        "it was removed"
                    } else if current == target.new_hash.as_deref() {
                        "its mode differs"
                    } else {
                        "its content differs"
                    }
                )));
            }
            forced = true;
        }
        Ok(UndoVerdict { forced, already })
    }

    /// Record the undo of `target` as a pending change whose previous content `pre` another
    /// process read (a remote runner), and commit; the runner restores the file only then, and
    /// [`Journal::mark_done`] links the undo. Check with [`Journal::undo_check`] first. The
    /// undo joins `group` (the first undo of the same group undo), as in [`Journal::undo_group`].
    pub fn record_undo_preimage(
        &self,
        target: &Change,
        session: &str,
        call_id: &str,
        group: Option<ChangeId>,
        pre: &PreImage<'_>,
    ) -> Result<ChangeId, ToolError> {
        let path = RelPath::from_normalized(&target.path);
        self.insert_preimage(
            Pending {
                session,
                call_id,
                tool: UNDO_TOOL,
                path: &path,
                new_hash: target.old_hash.as_deref(),
                undoes: Some(target.id),
                group,
                new_mode: None,
            },
            pre,
        )
    }

    /// [`Journal::record_undo_preimage`] for a path whose state another process read may be a
    /// symlink or a directory: `state` is its state hash when it is not a regular file
    /// (`pre.content` then holds a symlink's target).
    pub fn record_undo_state(
        &self,
        target: &Change,
        session: &str,
        call_id: &str,
        group: Option<ChangeId>,
        pre: &PreImage<'_>,
        state: Option<&str>,
    ) -> Result<ChangeId, ToolError> {
        let path = RelPath::from_normalized(&target.path);
        let p = Pending {
            session,
            call_id,
            tool: UNDO_TOOL,
            path: &path,
            new_hash: target.old_hash.as_deref(),
            undoes: Some(target.id),
            group,
            new_mode: target.new_mode.and(target.old_mode),
        };
        let shown = target.path.clone();
        let read_err = move |e: io::Error| ToolError::Io(format!("{shown}: {e}"));
        let mut bytes = pre.content.unwrap_or_default();
        let old = match EntryKind::of_hash(state) {
            EntryKind::Dir => Old::Dir,
            EntryKind::Symlink => Old::Content {
                reader: &mut bytes,
                link: true,
            },
            _ if pre.content.is_some() => Old::Content {
                reader: &mut bytes,
                link: false,
            },
            _ => Old::Absent,
        };
        let mode = if state.is_some_and(|s| s.starts_with(SYMLINK_HASH_PREFIX)) {
            None
        } else {
            pre.mode
        };
        self.insert_pending(p, old, mode, &read_err).map(|r| r.id)
    }

    /// Take the journal's owner lock as [`Journal::recover`] does, without looking at any
    /// file: the changes left pending when no other process has the journal open (a dead
    /// process left them, for the caller to settle from where the files are, with
    /// [`Journal::settle_from_hash`]), none otherwise.
    pub fn adopt_pending(&self) -> Result<Vec<Change>, ToolError> {
        self.with_owner(|| {
            let mut pending = self.list(&ChangeFilter {
                status: Some(ChangeStatus::Pending),
                ..ChangeFilter::default()
            })?;
            pending.reverse();
            Ok(pending)
        })
    }

    /// Settle the pending change `id` from its file's hash `current` (`None`: absent), as
    /// recovery does: done if it is the new content, failed otherwise.
    pub fn settle_from_hash(
        &self,
        id: ChangeId,
        current: Option<&str>,
    ) -> Result<Change, ToolError> {
        let change = self.get(id)?;
        if change.status != ChangeStatus::Pending {
            return Ok(change);
        }
        let landed = current == change.new_hash.as_deref();
        if landed {
            self.mark_done(id)?;
        } else {
            self.mark_failed(id)?;
        }
        tracing::info!(change = %id, path = %change.path, landed, "settled a pending change");
        self.get(id)
    }

    /// Settle the changes left `pending` by a crash: done if the file now has the new content,
    /// failed otherwise (the write never landed, the file has its old content), and remove the
    /// temp files those writes left. Call it at startup, before writes begin.
    ///
    /// A pending change may as well be a write in flight in another process, so this runs only
    /// when no other process has recovered the journal and is still alive: it takes
    /// `owner.lock` in the state directory exclusively, settles, and then holds the lock shared
    /// for as long as this `Journal` lives. When another process holds it, this one settles
    /// nothing (returns no changes), takes its share, and deletes nobody's temp files.
    pub fn recover(&self, ws: &Workspace) -> Result<Vec<Change>, ToolError> {
        self.with_owner(|| self.settle(ws))
    }

    /// Run `work` if no other process holds the owner lock (else return nothing), then hold
    /// the lock shared for as long as this `Journal` lives.
    fn with_owner(
        &self,
        work: impl FnOnce() -> Result<Vec<Change>, ToolError>,
    ) -> Result<Vec<Change>, ToolError> {
        let mut owner = self.owner.lock().unwrap_or_else(PoisonError::into_inner);
        let file = match owner.take() {
            Some(f) => f,
            None => open_owner_lock(&self.owner_path)?,
        };
        let lock_err =
            |e: io::Error| ToolError::Io(format!("cannot lock {}: {e}", self.owner_path.display()));
        let alone = flock(&file, libc::LOCK_EX | libc::LOCK_NB).map_err(lock_err)?;
        let settled = if alone {
            work()
        } else {
            tracing::info!(lock = %self.owner_path.display(), "another Toolyard process has the journal open; leaving its pending changes to it");
            Ok(Vec::new())
        };
        // Shared from now on: a later process must not settle this one's writes in flight.
        share_owner_lock(&file, &self.owner_path);
        *owner = Some(file);
        settled
    }

    fn settle(&self, ws: &Workspace) -> Result<Vec<Change>, ToolError> {
        let mut pending = self.list(&ChangeFilter {
            status: Some(ChangeStatus::Pending),
            ..ChangeFilter::default()
        })?;
        pending.reverse();
        let mut settled = Vec::with_capacity(pending.len());
        for change in pending {
            let current = ws
                .relative(&change.path, ws.root())
                .and_then(|p| state_at(ws, &p))
                .map(|(hash, _)| hash);
            let landed = match current {
                Ok(h) => h == change.new_hash,
                Err(e) => {
                    tracing::warn!(change = %change.id, path = %change.path, error = %e, "cannot read the file of a pending change; marking it failed");
                    false
                }
            };
            if landed {
                self.mark_done(change.id)?;
            } else {
                self.mark_failed(change.id)?;
            }
            remove_stale_temps(ws, &change.path);
            tracing::info!(change = %change.id, path = %change.path, landed, "settled a pending change");
            settled.push(self.get(change.id)?);
        }
        Ok(settled)
    }

    /// Apply retention now (it also runs at open and every few records); returns how many
    /// changes were deleted. Pending changes are never deleted.
    pub fn prune(&self) -> Result<u64, ToolError> {
        let mut conn = db::lock(&self.conn);
        let tx = immediate(&mut conn)?;
        let mut deleted = 0u64;
        if let Some(days) = self.max_age_days {
            deleted += tx
                .execute(
                    "DELETE FROM journal_changes WHERE status != 'pending'
                     AND julianday('now') - julianday(time) > ?1",
                    params![days as f64],
                )
                .map_err(db_err)? as u64;
        }
        if let Some(max) = self.max_changes {
            deleted += tx
                .execute(
                    "DELETE FROM journal_changes WHERE status != 'pending' AND id <=
                     (SELECT id FROM journal_changes ORDER BY id DESC LIMIT 1 OFFSET ?1)",
                    params![to_sql_int(max)],
                )
                .map_err(db_err)? as u64;
        }
        if let Some(max) = self.max_bytes {
            deleted += prune_bytes(&tx, max)?;
        }
        if deleted > 0 {
            tx.execute(
                "DELETE FROM journal_chunks
                 WHERE change_id NOT IN (SELECT id FROM journal_changes)",
                [],
            )
            .map_err(db_err)?;
            // A command's record goes with its first change.
            tx.execute(
                "DELETE FROM journal_commands WHERE first IS NOT NULL
                 AND first NOT IN (SELECT id FROM journal_changes)",
                [],
            )
            .map_err(db_err)?;
        }
        if let Some(days) = self.max_age_days {
            tx.execute(
                "DELETE FROM journal_commands WHERE julianday('now') - julianday(time) > ?1",
                params![days as f64],
            )
            .map_err(db_err)?;
        }
        tx.commit().map_err(db_err)?;
        if deleted > 0 {
            tracing::debug!(deleted, "journal retention pruned changes");
            // Hand freed pages back (a no-op on a database made before auto_vacuum was set).
            if let Err(e) = conn.execute_batch("PRAGMA incremental_vacuum") {
                tracing::debug!(error = %e, "incremental vacuum failed");
            }
        }
        Ok(deleted)
    }

    fn record_pending(&self, ws: &Workspace, p: Pending<'_>) -> Result<Recorded, ToolError> {
        // Opening a FIFO for reading would block, and a device has no content to keep.
        if let Some(meta) = ws.metadata(p.path)?
            && !meta.is_file()
            && !meta.is_dir()
        {
            return Err(ToolError::InvalidArguments(format!(
                "{} is not a regular file; only regular files can be changed",
                p.path
            )));
        }
        let mut file = match ws.open_file(p.path) {
            Ok(f) => Some(f),
            Err(ToolError::FileNotFound(_)) => None,
            Err(e) => return Err(e),
        };
        let mode = match &file {
            Some(f) => {
                use cap_std::fs::PermissionsExt;
                let meta = f.metadata().map_err(|e| ws.map_err(e, p.path))?;
                Some(meta.permissions().mode() & 0o7777)
            }
            None => None,
        };
        let path = p.path;
        let old = match file.as_mut() {
            Some(f) => Old::Content {
                reader: f as &mut dyn Read,
                link: false,
            },
            None => Old::Absent,
        };
        self.insert_pending(p, old, mode, &|e| ws.map_err(e, path))
    }

    /// [`Journal::record_pending`] for any kind of entry, not following a final symlink: an
    /// undo records what it replaces, which a command may have made a symlink or a directory.
    fn record_state_pending(&self, ws: &Workspace, p: Pending<'_>) -> Result<Recorded, ToolError> {
        let path = p.path;
        let meta = match ws.dir().symlink_metadata(path.as_path()) {
            Ok(m) => Some(m),
            Err(e) if is_absent(&e) => None,
            Err(e) => return Err(ws.map_err(e, path)),
        };
        let Some(meta) = meta else {
            return self.insert_pending(p, Old::Absent, None, &|e| ws.map_err(e, path));
        };
        use cap_std::fs::PermissionsExt;
        let mode = Some(meta.permissions().mode() & 0o7777);
        if meta.file_type().is_symlink() {
            let mut target = &read_link(ws, path)?[..];
            let old = Old::Content {
                reader: &mut target,
                link: true,
            };
            return self.insert_pending(p, old, None, &|e| ws.map_err(e, path));
        }
        if meta.is_dir() {
            return self.insert_pending(p, Old::Dir, mode, &|e| ws.map_err(e, path));
        }
        self.record_pending(ws, p)
    }

    /// Insert `p` as a pending change holding `content` (`None`: the file did not exist) and
    /// `mode`, and commit.
    fn insert_pending(
        &self,
        p: Pending<'_>,
        mut old: Old<'_>,
        mode: Option<u32>,
        read_err: &dyn Fn(io::Error) -> ToolError,
    ) -> Result<Recorded, ToolError> {
        let rec = {
            let mut conn = db::lock(&self.conn);
            ensure_full_sync(&conn)?;
            let tx = immediate(&mut conn)?;
            tx.prepare_cached(
                "INSERT INTO journal_changes
                 (session, call_id, tool, path, time, existed, old_mode, new_hash, status, undoes,
                  grp, new_mode)
                 VALUES (?1, ?2, ?3, ?4, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), ?5, ?6, ?7,
                         'pending', ?8, ?9, ?10)",
            )
            .and_then(|mut insert| {
                insert.execute(params![
                    p.session,
                    p.call_id,
                    p.tool,
                    p.path.as_str(),
                    !matches!(old, Old::Absent),
                    mode,
                    p.new_hash,
                    p.undoes.map(|c| c.0),
                    p.group.map(|c| c.0),
                    p.new_mode,
                ])
            })
            .map_err(db_err)?;
            let id = ChangeId(tx.last_insert_rowid());
            // A group is tagged on its first change only once a second one joins: a call that
            // changes one file leaves a plain change.
            if let Some(first) = p.group {
                tx.execute(
                    "UPDATE journal_changes SET grp = ?1 WHERE id = ?1 AND grp IS NULL",
                    params![first.0],
                )
                .map_err(db_err)?;
            }
            let old_hash = match &mut old {
                Old::Content { reader, link } => {
                    let hash = store_content(&tx, id, *reader, read_err)?;
                    Some(if *link {
                        set_old_hash(&tx, id, &format!("{SYMLINK_HASH_PREFIX}{hash}"))?
                    } else {
                        hash
                    })
                }
                Old::Dir => Some(set_old_hash(&tx, id, DIR_HASH)?),
                Old::Absent => None,
            };
            tx.commit().map_err(db_err)?;
            Recorded {
                id,
                old_hash,
                old_mode: mode,
            }
        };
        tracing::debug!(change = %rec.id, path = %p.path, tool = p.tool, existed = rec.old_hash.is_some(), "journaled change");
        let due = self.records.fetch_add(1, Ordering::Relaxed) % PRUNE_EVERY == PRUNE_EVERY - 1;
        if due && let Err(e) = self.prune() {
            tracing::warn!(error = %e, "journal retention failed");
        }
        Ok(rec)
    }

    /// Put `path` back as it was before `target`, from `current` (its state hash now, checked
    /// again before anything is removed): a file's bytes and mode, a symlink, a directory, or
    /// nothing. Returns (removed, bytes, mode).
    fn restore_entry(
        &self,
        ws: &Workspace,
        path: &RelPath,
        target: &Change,
        current: Option<&str>,
        expect: Expect,
    ) -> Result<(bool, u64, Option<u32>), ToolError> {
        let now = EntryKind::of_hash(current);
        match target.old_kind() {
            EntryKind::Absent => match now {
                EntryKind::File => self.remove_if(ws, path, current).map(|()| (true, 0, None)),
                _ => remove_entry(ws, path, current).map(|()| (true, 0, None)),
            },
            EntryKind::File => {
                let expect = if matches!(now, EntryKind::Symlink | EntryKind::Dir) {
                    remove_entry(ws, path, current)?;
                    Expect::Missing
                } else {
                    expect
                };
                let mut reader = ChunkReader::new(&self.conn, target);
                ws.write_atomic_from(path, &mut reader, &expect, target.old_mode)
                    .map(|o| (false, o.bytes, Some(o.mode)))
            }
            EntryKind::Symlink => {
                let mut link = Vec::new();
                ChunkReader::new(&self.conn, target)
                    .read_to_end(&mut link)
                    .map_err(|e| ws.map_err(e, path))?;
                if now == EntryKind::Dir {
                    remove_entry(ws, path, current)?;
                } else {
                    recheck(ws, path, current)?;
                }
                make_symlink(ws, path, &link)?;
                Ok((false, link.len() as u64, None))
            }
            EntryKind::Dir => {
                if now != EntryKind::Dir && now != EntryKind::Absent {
                    remove_entry(ws, path, current)?;
                }
                let mode = target.old_mode.unwrap_or(0o755);
                make_dir(ws, path, mode, now == EntryKind::Dir)?;
                Ok((false, 0, Some(mode)))
            }
        }
    }

    /// Remove `path` if it still has hash `expect` (`None`: it is already gone).
    fn remove_if(
        &self,
        ws: &Workspace,
        path: &RelPath,
        expect: Option<&str>,
    ) -> Result<(), ToolError> {
        let Some(expect) = expect else {
            return Ok(());
        };
        // A narrow window remains between this check and the unlink (see the module docs of
        // confine.rs: remove_file takes no expectation yet).
        if ws.hash_of(path)?.as_deref() != Some(expect) {
            return Err(ToolError::StaleRead {
                path: path.to_string(),
            });
        }
        ws.remove_file(path)
    }

    fn fail_quietly(&self, id: ChangeId) {
        if let Err(e) = self.mark_failed(id) {
            tracing::warn!(change = %id, error = %e, "cannot mark change failed; recover() will settle it");
        }
    }
}

/// Whether `e` says the path is not there (or a parent is not a directory).
fn is_absent(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR)
}

/// The state of `rel` now, not following a final symlink: its state hash (see
/// [`EntryKind::of_hash`]; `None`: absent) and permission bits (`None` for a symlink).
pub fn state_at(
    ws: &Workspace,
    rel: &RelPath,
) -> Result<(Option<ContentHash>, Option<u32>), ToolError> {
    use cap_std::fs::PermissionsExt;
    let meta = match ws.dir().symlink_metadata(rel.as_path()) {
        Ok(m) => m,
        Err(e) if is_absent(&e) => return Ok((None, None)),
        Err(e) => return Err(ws.map_err(e, rel)),
    };
    let mode = meta.permissions().mode() & 0o7777;
    if meta.file_type().is_symlink() {
        return Ok((Some(symlink_hash(&read_link(ws, rel)?)), None));
    }
    if meta.is_dir() {
        return Ok((Some(DIR_HASH.to_string()), Some(mode)));
    }
    Ok((ws.hash_of(rel)?, Some(mode)))
}

/// The target of the symlink `rel`, as bytes (absolute or dangling targets included).
pub fn read_link(ws: &Workspace, rel: &RelPath) -> Result<Vec<u8>, ToolError> {
    let dir = ws.open_dir(&rel.parent())?;
    rustix::fs::readlinkat(&dir, rel.file_name(), Vec::new())
        .map(|t| t.into_bytes())
        .map_err(|e| ws.map_err(e.into(), rel))
}

/// Refuse (`StaleRead`) unless `rel`'s state hash is still `expect`.
fn recheck(ws: &Workspace, rel: &RelPath, expect: Option<&str>) -> Result<(), ToolError> {
    if state_at(ws, rel)?.0.as_deref() == expect {
        Ok(())
    } else {
        Err(ToolError::StaleRead {
            path: rel.to_string(),
        })
    }
}

/// Remove the file, symlink or (empty) directory `rel` if its state hash is still `expect`.
fn remove_entry(ws: &Workspace, rel: &RelPath, expect: Option<&str>) -> Result<(), ToolError> {
    let Some(expect) = expect else {
        return Ok(());
    };
    recheck(ws, rel, Some(expect))?;
    ws.check_protected(rel, true)?;
    let dir = ws.open_dir(&rel.parent())?;
    let removed = if expect == DIR_HASH {
        dir.remove_dir(rel.file_name())
    } else {
        dir.remove_file(rel.file_name())
    };
    removed.map_err(|e| {
        if e.raw_os_error() == Some(libc::ENOTEMPTY) {
            ToolError::Conflict(format!(
                "{rel} is a directory that is not empty: it holds entries the change did not make; move them away and retry"
            ))
        } else {
            ws.map_err(e, rel)
        }
    })
}

/// Make `rel` a symlink to `link` (in place of a file or symlink there): made under a
/// temporary name and renamed over, so the path is never missing.
fn make_symlink(ws: &Workspace, rel: &RelPath, link: &[u8]) -> Result<(), ToolError> {
    ws.check_protected(rel, true)?;
    let parent = rel.parent();
    if !parent.is_root() {
        ws.dir()
            .create_dir_all(parent.as_path())
            .map_err(|e| ws.map_err(e, &parent))?;
    }
    let dir = ws.open_dir(&parent)?;
    let tmp = format!(".{}.toolyard-{}.tmp", rel.file_name(), std::process::id());
    let io = |e: rustix::io::Errno| ws.map_err(e.into(), rel);
    let _ = rustix::fs::unlinkat(&dir, tmp.as_str(), rustix::fs::AtFlags::empty());
    rustix::fs::symlinkat(link, &dir, tmp.as_str()).map_err(io)?;
    rustix::fs::renameat(&dir, tmp.as_str(), &dir, rel.file_name()).map_err(|e| {
        let _ = rustix::fs::unlinkat(&dir, tmp.as_str(), rustix::fs::AtFlags::empty());
        io(e)
    })
}

/// Make `rel` a directory of `mode` (or, `exists`, set the mode of the one there).
fn make_dir(ws: &Workspace, rel: &RelPath, mode: u32, exists: bool) -> Result<(), ToolError> {
    use cap_std::fs::PermissionsExt;
    ws.check_protected(rel, true)?;
    if !exists {
        ws.dir()
            .create_dir_all(rel.as_path())
            .map_err(|e| ws.map_err(e, rel))?;
    }
    ws.dir()
        .set_permissions(rel.as_path(), cap_std::fs::Permissions::from_mode(mode))
        .map_err(|e| ws.map_err(e, rel))
}

/// Put `rel` in the state `target` (a state hash, see [`EntryKind::of_hash`]; `None`: absent)
/// with `content` (a file's bytes or a symlink's target) and `mode`, only if its state is
/// still `expect`: the compare-and-swap of an undo done where the files are (a remote
/// runner). A changed path is refused with `StaleRead`.
pub fn restore_state(
    ws: &Workspace,
    rel: &RelPath,
    expect: Option<&str>,
    target: Option<&str>,
    content: &[u8],
    mode: Option<u32>,
) -> Result<(), ToolError> {
    recheck(ws, rel, expect)?;
    let now = EntryKind::of_hash(expect);
    match EntryKind::of_hash(target) {
        EntryKind::Absent => remove_entry(ws, rel, expect),
        EntryKind::File => {
            let cas = match now {
                EntryKind::Symlink | EntryKind::Dir => {
                    remove_entry(ws, rel, expect)?;
                    Expect::Missing
                }
                EntryKind::File => Expect::Hash(expect.unwrap_or_default().to_string()),
                EntryKind::Absent => Expect::Missing,
            };
            ws.write_atomic_from(rel, &mut &content[..], &cas, mode)
                .map(drop)
        }
        EntryKind::Symlink => {
            if now == EntryKind::Dir {
                remove_entry(ws, rel, expect)?;
            }
            make_symlink(ws, rel, content)
        }
        EntryKind::Dir => {
            if now != EntryKind::Dir && now != EntryKind::Absent {
                remove_entry(ws, rel, expect)?;
            }
            make_dir(ws, rel, mode.unwrap_or(0o755), now == EntryKind::Dir)
        }
    }
}

/// Set the stored old hash of change `id` (a symlink's or a directory's state hash).
fn set_old_hash(tx: &Transaction<'_>, id: ChangeId, hash: &str) -> Result<ContentHash, ToolError> {
    tx.prepare_cached("UPDATE journal_changes SET old_hash = ?2 WHERE id = ?1")
        .and_then(|mut update| update.execute(params![id.0, hash]))
        .map_err(db_err)?;
    Ok(hash.to_string())
}

/// Open (creating it) the lock file owners of the journal share.
fn open_owner_lock(path: &std::path::Path) -> Result<File, ToolError> {
    use std::os::unix::fs::OpenOptionsExt;
    // std opens with O_CLOEXEC: commands this process starts never inherit the lock.
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(|e| ToolError::Io(format!("cannot open {}: {e}", path.display())))
}

/// `flock(op)` on `file`: `Ok(false)` when a non-blocking request would block.
fn flock(file: &File, op: libc::c_int) -> io::Result<bool> {
    loop {
        // SAFETY: flock on a descriptor we own; it touches no memory.
        if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::Interrupted => continue,
            io::ErrorKind::WouldBlock => return Ok(false),
            _ => return Err(e),
        }
    }
}

/// Hold `file` shared, waiting (bounded) while another process holds it to recover. Best
/// effort: without the share this process's writes in flight are merely unprotected.
fn share_owner_lock(file: &File, path: &std::path::Path) {
    let started = Instant::now();
    loop {
        match flock(file, libc::LOCK_SH | libc::LOCK_NB) {
            Ok(true) => return,
            Ok(false) if started.elapsed() < OWNER_WAIT => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(false) => {
                tracing::warn!(lock = %path.display(), "another process has held the journal's owner lock for long; going on without it");
                return;
            }
            Err(e) => {
                tracing::warn!(lock = %path.display(), error = %e, "cannot share the journal's owner lock");
                return;
            }
        }
    }
}

/// Remove the temp files a write killed before its rename left next to `path` (named by
/// `Workspace::write_atomic_from` as `.NAME.toolyard-*.tmp`). Best effort: they are only litter.
pub fn remove_stale_temps(ws: &Workspace, path: &str) {
    let Ok(target) = ws
        .relative(path, ws.root())
        .and_then(|rel| ws.resolve(&rel, true))
    else {
        return;
    };
    let prefix = format!(".{}.toolyard-", target.file_name());
    let Ok(dir) = ws.open_dir(&target.parent()) else {
        return;
    };
    let Ok(entries) = dir.entries() else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        if name.starts_with(&prefix) && name.ends_with(".tmp") {
            match dir.remove_file(name) {
                Ok(()) => {
                    tracing::info!(path = %target.parent().join(name), "removed a crashed write's temp file")
                }
                Err(e) => tracing::debug!(name, error = %e, "cannot remove temp file"),
            }
        }
    }
}

/// Stream `file` into chunks of change `id`; returns the content hash and stores it with the size.
fn store_content(
    tx: &Transaction<'_>,
    id: ChangeId,
    file: &mut dyn Read,
    read_err: &dyn Fn(io::Error) -> ToolError,
) -> Result<ContentHash, ToolError> {
    let mut hasher = blake3::Hasher::new();
    // Grown to the content (up to a chunk), not a zeroed chunk per call: most files are small.
    let mut buf = Vec::new();
    let mut total = 0u64;
    let mut seq = 0i64;
    let mut insert = tx
        .prepare_cached("INSERT INTO journal_chunks (change_id, seq, data) VALUES (?1, ?2, ?3)")
        .map_err(db_err)?;
    loop {
        buf.clear();
        let n = (&mut *file)
            .take(CHUNK_SIZE as u64)
            .read_to_end(&mut buf)
            .map_err(read_err)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf);
        insert.execute(params![id.0, seq, &buf]).map_err(db_err)?;
        total += n as u64;
        seq += 1;
    }
    let hash = hasher.finalize().to_hex().to_string();
    tx.prepare_cached("UPDATE journal_changes SET old_hash = ?2, old_bytes = ?3 WHERE id = ?1")
        .and_then(|mut update| update.execute(params![id.0, hash, to_sql_int(total)]))
        .map_err(db_err)?;
    Ok(hash)
}

/// Delete the oldest settled changes until the stored content fits `max` bytes; the newest
/// change is kept whatever its size, so the last write can always be undone.
fn prune_bytes(tx: &Transaction<'_>, max: u64) -> Result<u64, ToolError> {
    let total: i64 = tx
        .query_row(
            "SELECT COALESCE(SUM(old_bytes), 0) FROM journal_changes",
            [],
            |r| r.get(0),
        )
        .map_err(db_err)?;
    let mut excess = u64::try_from(total).unwrap_or(0).saturating_sub(max);
    if excess == 0 {
        return Ok(0);
    }
    let mut victims = Vec::new();
    {
        let mut st = tx
            .prepare(
                "SELECT id, COALESCE(old_bytes, 0) FROM journal_changes
                 WHERE status != 'pending' AND id < (SELECT MAX(id) FROM journal_changes)
                 ORDER BY id",
            )
            .map_err(db_err)?;
        let mut rows = st.query([]).map_err(db_err)?;
        while excess > 0 {
            let Some(row) = rows.next().map_err(db_err)? else {
                break;
            };
            let id: i64 = row.get(0).map_err(db_err)?;
            let bytes: i64 = row.get(1).map_err(db_err)?;
            victims.push(id);
            excess = excess.saturating_sub(u64::try_from(bytes).unwrap_or(0));
        }
    }
    let mut del = tx
        .prepare_cached("DELETE FROM journal_changes WHERE id = ?1")
        .map_err(db_err)?;
    for id in &victims {
        del.execute(params![id]).map_err(db_err)?;
    }
    Ok(victims.len() as u64)
}

/// After the undo `id` took effect, update `undone_by` down its chain: the change it reverts is
/// now undone by it; that change, if itself an undo, no longer holds its own target undone; and
/// so on, alternating. `undoes` always points to an older id, so the walk ends.
fn link_undo(tx: &Transaction<'_>, id: ChangeId) -> Result<(), ToolError> {
    let mut cur = id.0;
    let mut in_effect = true;
    loop {
        let target: Option<i64> = tx
            .query_row(
                "SELECT undoes FROM journal_changes WHERE id = ?1",
                params![cur],
                |r| r.get(0),
            )
            .optional()
            .map_err(db_err)?
            .flatten();
        let Some(target) = target.filter(|t| *t < cur) else {
            return Ok(());
        };
        let by = in_effect.then_some(cur);
        tx.execute(
            "UPDATE journal_changes SET undone_by = ?2 WHERE id = ?1",
            params![target, by],
        )
        .map_err(db_err)?;
        cur = target;
        in_effect = !in_effect;
    }
}

/// `synchronous=NORMAL` on a `synchronous=FULL` connection for one commit.
struct RelaxedSync {
    relaxed: bool,
}

impl RelaxedSync {
    fn new(conn: &Connection) -> Self {
        let relaxed = set_sync(conn, false).is_ok();
        Self { relaxed }
    }

    /// Back to `synchronous=FULL`; on failure the connection is left unusable for records
    /// ([`ensure_full_sync`] runs before each).
    fn restore(self, conn: &Connection) -> Result<(), ToolError> {
        if self.relaxed {
            set_sync(conn, true).map_err(db_err)?;
        }
        Ok(())
    }
}

/// Make sure the connection commits with `synchronous=FULL` (2 = FULL), restoring it if a
/// relaxed commit could not.
fn ensure_full_sync(conn: &Connection) -> Result<(), ToolError> {
    let level: i64 = conn
        .prepare_cached("PRAGMA synchronous")
        .and_then(|mut query| query.query_row([], |r| r.get(0)))
        .map_err(db_err)?;
    if level < 2 {
        set_sync(conn, true).map_err(db_err)?;
    }
    Ok(())
}

/// `PRAGMA synchronous = FULL` (or `NORMAL`), prepared once per connection: every write sets
/// it twice.
fn set_sync(conn: &Connection, full: bool) -> rusqlite::Result<()> {
    let sql = if full {
        "PRAGMA synchronous = FULL"
    } else {
        "PRAGMA synchronous = NORMAL"
    };
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

fn immediate(conn: &mut Connection) -> Result<Transaction<'_>, ToolError> {
    // IMMEDIATE takes the write lock up front, so a busy database waits (busy_timeout) instead
    // of failing at the first write of a deferred transaction.
    conn.transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(db_err)
}

fn status_of(tx: &Transaction<'_>, id: ChangeId) -> Result<(ChangeStatus, Option<i64>), ToolError> {
    let row: Option<(String, Option<i64>)> = tx
        .prepare_cached("SELECT status, undoes FROM journal_changes WHERE id = ?1")
        .and_then(|mut select| {
            select
                .query_row(params![id.0], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
        })
        .map_err(db_err)?;
    let (status, undoes) = row.ok_or_else(|| not_found(id))?;
    Ok((status.parse()?, undoes))
}

fn set_status(tx: &Transaction<'_>, id: ChangeId, status: ChangeStatus) -> Result<(), ToolError> {
    tx.prepare_cached("UPDATE journal_changes SET status = ?2 WHERE id = ?1")
        .and_then(|mut update| update.execute(params![id.0, status.as_str()]))
        .map_err(db_err)?;
    Ok(())
}

fn get_change(conn: &Connection, id: ChangeId) -> Result<Change, ToolError> {
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM journal_changes WHERE id = ?1"
    ))
    .and_then(|mut st| st.query_row(params![id.0], change_from_row).optional())
    .map_err(db_err)?
    .ok_or_else(|| not_found(id))
}

fn not_found(id: ChangeId) -> ToolError {
    ToolError::NotFound(format!(
        "change {id} is not in the journal (never recorded, or pruned by retention); see `toolyard log`"
    ))
}

fn change_from_row(r: &Row<'_>) -> rusqlite::Result<Change> {
    let status: String = r.get(11)?;
    let status = status.parse::<ChangeStatus>().map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(11, rusqlite::types::Type::Text, Box::new(e))
    })?;
    let old_bytes: Option<i64> = r.get(9)?;
    Ok(Change {
        id: ChangeId(r.get(0)?),
        session: r.get(1)?,
        call_id: r.get(2)?,
        tool: r.get(3)?,
        path: r.get(4)?,
        time: r.get(5)?,
        existed: r.get(6)?,
        old_hash: r.get(7)?,
        old_mode: r.get(8)?,
        old_bytes: old_bytes.and_then(|b| u64::try_from(b).ok()),
        new_hash: r.get(10)?,
        status,
        undoes: r.get::<_, Option<i64>>(12)?.map(ChangeId),
        undone_by: r.get::<_, Option<i64>>(13)?.map(ChangeId),
        group: r.get::<_, Option<i64>>(14)?.map(ChangeId),
        new_mode: r.get(15)?,
    })
}

fn to_sql_int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The stored previous content of a change, read chunk by chunk (one chunk in memory at a
/// time, the database locked only while a chunk is fetched), verified against its hash and
/// size at the end so damaged content never reaches the file (the rename happens after EOF).
struct ChunkReader<'a> {
    conn: &'a Mutex<Connection>,
    change: i64,
    seq: i64,
    buf: Vec<u8>,
    pos: usize,
    hasher: blake3::Hasher,
    total: u64,
    expect_hash: Option<ContentHash>,
    expect_len: Option<u64>,
    finished: bool,
}

impl<'a> ChunkReader<'a> {
    fn new(conn: &'a Mutex<Connection>, change: &Change) -> Self {
        Self {
            conn,
            change: change.id.0,
            seq: 0,
            buf: Vec::new(),
            pos: 0,
            hasher: blake3::Hasher::new(),
            total: 0,
            expect_hash: change.old_hash.clone(),
            expect_len: change.old_bytes,
            finished: false,
        }
    }

    fn fetch(&mut self) -> io::Result<bool> {
        let conn = db::lock(self.conn);
        let data: Option<Vec<u8>> = conn
            .prepare_cached("SELECT data FROM journal_chunks WHERE change_id = ?1 AND seq = ?2")
            .and_then(|mut st| {
                st.query_row(params![self.change, self.seq], |r| r.get(0))
                    .optional()
            })
            .map_err(io::Error::other)?;
        drop(conn);
        match data {
            Some(data) => {
                self.hasher.update(&data);
                self.total += data.len() as u64;
                self.buf = data;
                self.pos = 0;
                self.seq += 1;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn verify(&self) -> io::Result<()> {
        let hash = self.hasher.finalize().to_hex().to_string();
        let expect = self.expect_hash.as_deref();
        let expect = expect.map(|h| h.strip_prefix(SYMLINK_HASH_PREFIX).unwrap_or(h));
        let hash_ok = expect == Some(hash.as_str());
        let len_ok = self.expect_len.is_none_or(|n| n == self.total);
        if hash_ok && len_ok {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the journal's copy of change {} is incomplete or damaged ({} bytes, hash {hash}); refusing to restore it",
                    self.change, self.total
                ),
            ))
        }
    }
}

impl Read for ChunkReader<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.buf.len() {
            if self.finished {
                return Ok(0);
            }
            if !self.fetch()? {
                self.finished = true;
                self.buf = Vec::new();
                self.pos = 0;
                self.verify()?;
                return Ok(0);
            }
        }
        let n = out.len().min(self.buf.len() - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
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
