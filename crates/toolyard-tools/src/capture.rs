//! What commands change in the workspace, journaled so `undo` reverts it.
//!
//! The design: a content-addressed store of the workspace's current files, kept warm with a
//! stat cache (as git's index is). The first capture reads every file in scope once into the
//! store; before each command a stat walk (no reads) refreshes it, reading only the files whose
//! stat changed since; after the command a second stat walk finds what the command created,
//! changed (content or mode) or removed. Those entries become one journal group, with exact
//! previous states taken from the store, shipped to the server's journal through [`Records`]
//! (over the link when this runs in a runner, as a patch's group is).
//!
//! Why not an overlay: it needs a mount namespace, which the confined modes (Landlock only, no
//! user namespaces) do not have, and a merge step that a command killed by a timeout leaves
//! undone. The stat walk works wherever commands run, costs a `getdents` and an `fstatat` per
//! entry, and reads nothing for a command that changes nothing.
//!
//! Attribution: whatever changed in scope between the walk before and the walk after is the
//! command's, including what another program (an editor, a second command) changed meanwhile;
//! the undo's compare-and-swap then refuses to revert a file changed again since.
//!
//! The store lives in a directory only the runner can write and its commands cannot see; every
//! file in it is opened without following symlinks. It is private to one runner process
//! (`<state>/capture/<lane>-<pid>`) and pruned to the contents its index still names.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use rustix::fs::{AtFlags, Mode, OFlags};
use toolyard_core::{ToolError, ToolResult};
use toolyard_records::{
    CommandEntry, CommandRecord, CommandsConfig, DEFAULT_EXCLUDED, DEFAULT_MAX_CALL_BYTES,
    DEFAULT_MAX_FILE_BYTES, DEFAULT_MAX_STORE_BYTES, DIR_HASH, EntryKind, JournalConfig, Skipped,
};

use crate::ToolEnv;

mod walk;

use walk::{Watcher, list, read_entry, stat_of, take};

/// Timestamps closer than this to a walk's start may not show a change made in the same
/// clock tick (Linux stamps files with a coarse clock): such files are hashed again after.
const RACY_NS: i128 = 50_000_000;

/// A workspace with more entries than this is not captured (each command would walk it twice).
const MAX_ENTRIES: usize = 500_000;

/// Walker threads (the machine's cores, at most this many).
const MAX_WALKERS: usize = 4;

/// The scope of the capture, from `[journal.commands]`.
#[derive(Debug, Clone)]
pub struct Scope {
    /// Directory names left out, with why.
    exclude: HashMap<String, String>,
    /// The state directory's path relative to the root, when it lies inside the workspace.
    state_rel: Option<String>,
    max_file: u64,
    max_call: u64,
    max_store: u64,
}

impl Scope {
    /// The scope the catalog sets (`None`: command journaling is off).
    pub fn of(env: &ToolEnv) -> Result<Option<Self>, ToolError> {
        let config: JournalConfig = env
            .catalog
            .section("journal")
            .map_err(|e| ToolError::InvalidArguments(e.to_string()))?;
        let c: CommandsConfig = config.commands;
        if c.enabled == Some(false) {
            return Ok(None);
        }
        let exclude = match &c.exclude {
            Some(list) => list
                .iter()
                .map(|n| {
                    let reason = DEFAULT_EXCLUDED
                        .iter()
                        .find(|(d, _)| d == n)
                        .map_or("excluded by [journal.commands] exclude", |(_, why)| why);
                    (n.trim_end_matches('/').to_string(), reason.to_string())
                })
                .collect(),
            None => DEFAULT_EXCLUDED
                .iter()
                .map(|(n, why)| (n.to_string(), why.to_string()))
                .collect(),
        };
        let state_rel = env
            .state
            .path()
            .strip_prefix(env.workspace.root())
            .ok()
            .and_then(|p| p.to_str())
            .map(str::to_string);
        Ok(Some(Self {
            exclude,
            state_rel,
            max_file: c.max_file_bytes.unwrap_or(DEFAULT_MAX_FILE_BYTES),
            max_call: c.max_call_bytes.unwrap_or(DEFAULT_MAX_CALL_BYTES),
            max_store: c.max_store_bytes.unwrap_or(DEFAULT_MAX_STORE_BYTES),
        }))
    }

    /// Why the directory `rel` (named `name`) is left out, if it is.
    fn excluded(&self, rel: &str, name: &str) -> Option<String> {
        if self.state_rel.as_deref() == Some(rel) {
            return Some("Toolyard's own state".into());
        }
        self.exclude
            .get(name)
            .map(|why| format!("excluded directory ({why})"))
    }
}

/// What the stat walk saw of one entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    kind: Kind,
    size: u64,
    mtime: i128,
    ctime: i128,
    ino: u64,
    mode: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    File,
    Symlink,
    Dir,
    /// A FIFO, socket or device: never read.
    Special,
}

/// One entry of a snapshot: its stat and, once known, its state hash.
#[derive(Debug, Clone)]
struct Entry {
    stat: Stat,
    /// The state hash (content hash, [`symlink_hash`](toolyard_workspace::symlink_hash), [`DIR_HASH`]); `None` when unknown
    /// (a special file, or a file that could not be read).
    hash: Option<Arc<str>>,
    /// A symlink's target.
    link: Option<Arc<[u8]>>,
    /// Its content is in the store.
    stored: bool,
    /// Its timestamps were too recent to trust: hashed again after the command.
    racy: bool,
}

/// The workspace as one walk saw it.
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    entries: HashMap<String, Entry>,
    /// Excluded directories found, with their stat and why they are out.
    excluded: HashMap<String, (Stat, String)>,
}

/// The runner's warm state: the latest snapshot and its store.
struct Index {
    root: PathBuf,
    last: Arc<Snapshot>,
    /// What changed since `last` was taken, when the kernel can tell (see [`Watcher`]).
    watcher: Option<Watcher>,
    store: Store,
    /// Captures in flight (their snapshots keep store contents the index may have dropped).
    live: usize,
}

tokio::task_local! {
    /// The tool of the call running on this task (set by the runner around each job), for
    /// attribution.
    pub static TOOL: String;
}

/// The tool the current call runs, or `command` when no runner set it.
pub fn current_tool() -> String {
    TOOL.try_with(Clone::clone)
        .unwrap_or_else(|_| "command".to_string())
}

tokio::task_local! {
    /// The files the current call's commands created, changed or removed (see [`scope_call`]).
    static CHANGED: std::cell::RefCell<Vec<String>>;
}

/// Run a tool's `call` as `tool` (for attribution) and add the files its commands created,
/// changed or removed to the result's `files_changed`: the server's language servers then hear
/// of every one of them, not only of the documents they had open.
pub async fn scope_call<F>(tool: String, call: F) -> ToolResult
where
    F: std::future::Future<Output = Result<ToolResult, ToolError>>,
{
    let (result, changed) = CHANGED
        .scope(std::cell::RefCell::new(Vec::new()), async {
            let r = TOOL.scope(tool, call).await;
            (r, CHANGED.with(|c| c.take()))
        })
        .await;
    let mut result: ToolResult = result.into();
    for path in changed {
        if !result.files_changed.contains(&path) {
            result.files_changed.push(path);
        }
    }
    result
}

/// Note the files (not directories) of `entries` for [`scope_call`], when it is in scope.
fn note_changed(entries: &[CommandEntry]) {
    let files = entries.iter().filter(|e| {
        let kind = |h: &Option<String>| EntryKind::of_hash(h.as_deref());
        kind(&e.old_hash) == EntryKind::File || kind(&e.new_hash) == EntryKind::File
    });
    let _ = CHANGED.try_with(|c| c.borrow_mut().extend(files.map(|e| e.path.clone())));
}

/// A process's capture (answered while running, or started in the background), checked at
/// each call that reads or drives it.
struct Adopted {
    capture: Capture,
    command: String,
}

static PROCS: OnceLock<Mutex<HashMap<String, Arc<tokio::sync::Mutex<Adopted>>>>> = OnceLock::new();

fn procs() -> std::sync::MutexGuard<'static, HashMap<String, Arc<tokio::sync::Mutex<Adopted>>>> {
    PROCS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Keep `capture` for process `id` (running `command`): its changes are journaled at each
/// [`checkpoint_process`].
pub fn adopt(id: &str, capture: Capture, command: &str) {
    procs().insert(
        id.to_string(),
        Arc::new(tokio::sync::Mutex::new(Adopted {
            capture,
            command: command.to_string(),
        })),
    );
}

/// Journal what process `id` changed since its last checkpoint, attributed to the current
/// call (`session`, `call_id`); `ended`: the process is over, its capture goes. The line
/// for the result, if it changed anything.
pub async fn checkpoint_process(
    env: &ToolEnv,
    id: &str,
    session: &str,
    call_id: &str,
    ended: bool,
) -> Option<String> {
    let adopted = procs().get(id).cloned()?;
    let line = {
        let mut a = adopted.lock().await;
        let tool = current_tool();
        let Adopted { capture, command } = &mut *a;
        let who = Attribution {
            session,
            call_id,
            tool: &tool,
            command,
        };
        capture.checkpoint(env, who).await.line()
    };
    if ended {
        procs().remove(id);
    }
    line
}

static INDEX: OnceLock<Mutex<Option<Index>>> = OnceLock::new();
static STORE_DIR: OnceLock<PathBuf> = OnceLock::new();

/// Where this process keeps its store (a runner sets its private directory at start; else a
/// directory of its own under the state directory).
pub fn set_store_dir(dir: PathBuf) {
    let _ = STORE_DIR.set(dir);
}

fn index() -> std::sync::MutexGuard<'static, Option<Index>> {
    INDEX
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// The content-addressed store: `<dir>/<hash>`, written by temp file and rename.
struct Store {
    dir: PathBuf,
    fd: Option<OwnedFd>,
    bytes: u64,
    /// The hashes it holds, with their sizes.
    held: HashMap<String, u64>,
}

impl Store {
    fn open(dir: PathBuf) -> Self {
        let _ = std::fs::create_dir_all(&dir);
        let fd = rustix::fs::open(
            &dir,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| tracing::warn!(dir = %dir.display(), error = %e, "no store for command undo"))
        .ok();
        // Whatever an earlier process of the same id left is not known: start empty.
        if let Some(fd) = &fd
            && let Ok(entries) = std::fs::read_dir(&dir)
        {
            for e in entries.flatten() {
                let _ = rustix::fs::unlinkat(fd, e.file_name().as_os_str(), AtFlags::empty());
            }
        }
        Self {
            dir,
            fd,
            bytes: 0,
            held: HashMap::new(),
        }
    }

    fn has(&self, hash: &str) -> bool {
        self.held.contains_key(hash)
    }

    /// Keep `bytes` (whose hash is `hash`); false when the store is full or unwritable.
    fn put(&mut self, hash: &str, bytes: &[u8], max: u64) -> bool {
        if self.has(hash) {
            return true;
        }
        let Some(fd) = &self.fd else { return false };
        if self.bytes + bytes.len() as u64 > max {
            return false;
        }
        let tmp = format!("{hash}.tmp");
        let written = (|| -> std::io::Result<()> {
            let file = rustix::fs::openat(
                fd,
                tmp.as_str(),
                OFlags::WRONLY
                    | OFlags::CREATE
                    | OFlags::TRUNC
                    | OFlags::NOFOLLOW
                    | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            )?;
            let mut file = std::fs::File::from(file);
            file.write_all(bytes)?;
            rustix::fs::renameat(fd, tmp.as_str(), fd, hash)?;
            Ok(())
        })();
        match written {
            Ok(()) => {
                self.bytes += bytes.len() as u64;
                self.held.insert(hash.to_string(), bytes.len() as u64);
                true
            }
            Err(e) => {
                tracing::debug!(dir = %self.dir.display(), error = %e, "cannot store a file's content");
                let _ = rustix::fs::unlinkat(fd, tmp.as_str(), AtFlags::empty());
                false
            }
        }
    }

    fn get(&self, hash: &str) -> Option<Vec<u8>> {
        let fd = self.fd.as_ref()?;
        let file = rustix::fs::openat(
            fd,
            hash,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        let mut out = Vec::new();
        std::fs::File::from(file).read_to_end(&mut out).ok()?;
        (toolyard_workspace::hash_bytes(&out) == hash).then_some(out)
    }

    /// Drop every content no snapshot in `keep` names.
    fn prune(&mut self, keep: &[&Snapshot]) {
        let Some(fd) = &self.fd else { return };
        let wanted: HashSet<&str> = keep
            .iter()
            .flat_map(|s| s.entries.values())
            .filter(|e| e.stored)
            .filter_map(|e| e.hash.as_deref())
            .collect();
        let gone: Vec<String> = self
            .held
            .keys()
            .filter(|h| !wanted.contains(h.as_str()))
            .cloned()
            .collect();
        for h in gone {
            let _ = rustix::fs::unlinkat(fd, h.as_str(), AtFlags::empty());
            if let Some(n) = self.held.remove(&h) {
                self.bytes -= n;
            }
        }
    }
}

/// A command's capture in flight: the snapshot before it.
pub struct Capture {
    before: Arc<Snapshot>,
    /// When the snapshot before was taken (Unix seconds): changes the journal holds from
    /// since then (a file tool's) are not journaled twice.
    since: f64,
    scope: Scope,
    root: PathBuf,
}

impl Drop for Capture {
    fn drop(&mut self) {
        if let Some(ix) = index().as_mut()
            && ix.root == self.root
        {
            ix.live = ix.live.saturating_sub(1);
        }
    }
}

/// What a capture found and journaled, for the call's result.
#[derive(Debug, Default, Clone)]
pub struct Captured {
    /// The first change of the group (undo it to undo them all).
    pub first: Option<i64>,
    /// Paths created, changed, removed.
    pub added: usize,
    /// Changed in content or mode.
    pub changed: usize,
    /// Removed.
    pub removed: usize,
    /// Out of scope.
    pub skipped: Vec<Skipped>,
    /// Journaling failed: why (the changes stand, but cannot be undone).
    pub failed: Option<String>,
}

impl Captured {
    /// The line the result ends with ("3 files changed, 1 removed: undo with undo {...}"),
    /// or `None` when the call changed nothing.
    pub fn line(&self) -> Option<String> {
        let mut parts = Vec::new();
        let noun = |n: usize| if n == 1 { "file" } else { "files" };
        let mut first_noun = true;
        for (n, what) in [
            (self.added, "added"),
            (self.changed, "changed"),
            (self.removed, "removed"),
        ] {
            if n > 0 {
                if first_noun {
                    parts.push(format!("{n} {} {what}", noun(n)));
                    first_noun = false;
                } else {
                    parts.push(format!("{n} {what}"));
                }
            }
        }
        let mut line = String::new();
        if !parts.is_empty() {
            line.push_str(&parts.join(", "));
            match (&self.failed, self.first) {
                (Some(why), _) => line.push_str(&format!(" (not journaled: {why})")),
                (None, Some(first)) => {
                    line.push_str(&format!(": undo with undo {{\"change_id\": {first}}}"))
                }
                (None, None) => {}
            }
        }
        if !self.skipped.is_empty() {
            const SHOWN: usize = 5;
            let mut names: Vec<String> = self
                .skipped
                .iter()
                .take(SHOWN)
                .map(|s| format!("{} ({})", s.path, s.reason))
                .collect();
            if self.skipped.len() > SHOWN {
                names.push(format!(
                    "{} more (see `toolyard log`)",
                    self.skipped.len() - SHOWN
                ));
            }
            if !line.is_empty() {
                line.push_str("; ");
            }
            line.push_str(&format!("not undoable: {}", names.join(", ")));
        }
        (!line.is_empty()).then_some(line)
    }

    /// For a result's `data`.
    pub fn data(&self) -> serde_json::Value {
        serde_json::json!({
            "change_id": self.first,
            "added": self.added,
            "changed": self.changed,
            "removed": self.removed,
            "not_undoable": self.skipped,
            "failed": self.failed,
        })
    }
}

fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0)
}

/// Take the snapshot a command's changes are measured from (refreshing the store with what
/// changed since the last one). `None` when journaling commands is off or impossible here.
pub async fn begin(env: &ToolEnv) -> Option<Capture> {
    let scope = match Scope::of(env) {
        Ok(Some(s)) => s,
        Ok(None) => return None,
        Err(e) => {
            tracing::warn!(error = %e, "command undo is off: bad [journal.commands]");
            return None;
        }
    };
    let root = env.workspace.root().to_path_buf();
    let state = env.state.path().to_path_buf();
    let work = move || {
        let started = now_ns();
        let mut guard = index();
        let stale = guard.as_ref().is_none_or(|ix| ix.root != root);
        if stale {
            let dir = STORE_DIR.get().cloned().unwrap_or_else(|| {
                let base = state.join("capture");
                sweep_dead_stores(&base);
                base.join(format!("server-{}", std::process::id()))
            });
            *guard = Some(Index {
                root: root.clone(),
                last: Arc::default(),
                watcher: None,
                store: Store::open(dir),
                live: 0,
            });
        }
        let ix = guard.as_mut()?;
        let prev = ix.last.clone();
        let snap = refresh(ix, &root, &scope, started)?;
        ix.live += 1;
        if ix.live == 1 && !Arc::ptr_eq(&prev, &snap) {
            ix.store.prune(&[&snap]);
        }
        Some(Capture {
            before: snap,
            since: started as f64 / 1e9,
            scope,
            root,
        })
    };
    toolyard_core::blocking::blocking(work).await.ok().flatten()
}

/// Remove the stores `server-<pid>` that processes no longer alive left in `base` (a runner's
/// own store is removed when it ends, and swept by the next runner, as its temp dir is).
fn sweep_dead_stores(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("server-"))
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: signal 0 only checks that the process exists; nothing is sent.
        let alive = unsafe { libc::kill(pid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH);
        if !alive && pid != std::process::id() as i32 {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Who a capture's changes are attributed to.
#[derive(Debug, Clone, Copy)]
pub struct Attribution<'a> {
    /// The session.
    pub session: &'a str,
    /// The call.
    pub call_id: &'a str,
    /// The tool.
    pub tool: &'a str,
    /// The command line.
    pub command: &'a str,
}

impl Capture {
    /// Walk again, journal what changed since the snapshot before as one group attributed to
    /// `who`, and move the snapshot on (for a process checked again later).
    pub async fn checkpoint(&mut self, env: &ToolEnv, who: Attribution<'_>) -> Captured {
        let before = self.before.clone();
        let scope = self.scope.clone();
        let root = self.root.clone();
        let diffed = toolyard_core::blocking::blocking(move || {
            let now = now_ns();
            let mut guard = index();
            let ix = guard.as_mut().filter(|ix| ix.root == root)?;
            let after = refresh(ix, &root, &scope, now)?;
            if Arc::ptr_eq(&before, &after) {
                // Nothing changed since the snapshot before: no walk of the entries either.
                return Some((Vec::new(), Vec::new(), after, now));
            }
            let (entries, skipped) = diff(&before, &after, &scope, &ix.store);
            if ix.live <= 1 {
                ix.store.prune(&[&after]);
            }
            Some((entries, skipped, after, now))
        })
        .await
        .ok()
        .flatten();
        let Some((entries, skipped, after, now)) = diffed else {
            return Captured {
                failed: Some("the workspace could not be walked".into()),
                ..Captured::default()
            };
        };
        self.before = after;
        let since = std::mem::replace(&mut self.since, now as f64 / 1e9);
        let mut out = Captured {
            skipped: skipped.clone(),
            ..Captured::default()
        };
        for e in &entries {
            match (&e.old_hash, &e.new_hash) {
                (None, _) => out.added += 1,
                (_, None) => out.removed += 1,
                _ => out.changed += 1,
            }
        }
        if entries.is_empty() && skipped.is_empty() {
            return out;
        }
        note_changed(&entries);
        let record = CommandRecord {
            session: who.session,
            call_id: who.call_id,
            tool: who.tool,
            command: who.command,
            entries: &entries,
            skipped: &skipped,
            since,
        };
        match env.records.journal_command(record).await {
            Ok(done) => {
                out.first = done.ids.first().map(|i| i.0);
                // Already journaled (an undo, a file tool's write made meanwhile): not counted.
                for path in &done.dropped {
                    if let Some(e) = entries.iter().find(|e| &e.path == path) {
                        match (&e.old_hash, &e.new_hash) {
                            (None, _) => out.added -= 1,
                            (_, None) => out.removed -= 1,
                            _ => out.changed -= 1,
                        }
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "a command's changes could not be journaled");
                out.failed = Some(e.to_string());
            }
        }
        out
    }
}

/// The workspace now, as the index's next snapshot: from the kernel's account of what changed
/// since the last one when its [`Watcher`] can give it whole (only those paths are looked at;
/// nothing changed: the same snapshot), else by a full stat walk, which also sets the watches
/// up again.
fn refresh(ix: &mut Index, root: &Path, scope: &Scope, started: i128) -> Option<Arc<Snapshot>> {
    let root_fd = rustix::fs::open(
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let prev = ix.last.clone();
    if !prev.entries.is_empty()
        && let Some(w) = ix.watcher.as_mut()
    {
        match w.changed() {
            Some(touched) if touched.is_empty() => return Some(prev),
            Some(touched) => {
                if let Some(snap) = apply(&prev, touched, &root_fd, root, scope, &mut ix.store, w) {
                    let snap = Arc::new(snap);
                    ix.last = snap.clone();
                    return Some(snap);
                }
            }
            None => {}
        }
    }
    // A fresh watcher before the walk: what changes while it walks is reported next time.
    ix.watcher = Watcher::new();
    let snap = Arc::new(take(
        &root_fd,
        scope,
        Some(&prev),
        &mut ix.store,
        started,
        ix.watcher.as_mut(),
        root,
    )?);
    ix.last = snap.clone();
    Some(snap)
}

/// `prev` with the paths the watcher named looked at again: each re-read (an event means it
/// may have changed even within one clock tick), a new directory walked whole, a removed one
/// dropped with everything beneath it. `None` when that cannot be done exactly (then walk).
fn apply(
    prev: &Snapshot,
    touched: Touched,
    root_fd: &OwnedFd,
    root: &Path,
    scope: &Scope,
    store: &mut Store,
    watcher: &mut Watcher,
) -> Option<Snapshot> {
    let mut snap = prev.clone();
    let mut paths: Vec<String> = touched.paths.into_iter().collect();
    paths.sort_by_key(|p| depth(p));
    for rel in paths {
        let name = rel.rsplit('/').next().unwrap_or(&rel).to_string();
        let st = match rustix::fs::statat(root_fd, rel.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Some(stat_of(&st)),
            Err(rustix::io::Errno::NOENT) | Err(rustix::io::Errno::NOTDIR) => None,
            Err(_) => return None,
        };
        let was_dir = snap
            .entries
            .get(&rel)
            .is_some_and(|e| e.stat.kind == Kind::Dir)
            || snap.excluded.contains_key(&rel);
        match st {
            None => {
                snap.entries.remove(&rel);
                snap.excluded.remove(&rel);
                if was_dir {
                    let prefix = format!("{rel}/");
                    snap.entries.retain(|p, _| !p.starts_with(&prefix));
                    snap.excluded.retain(|p, _| !p.starts_with(&prefix));
                }
            }
            Some(stat) => {
                if stat.kind == Kind::Dir
                    && let Some(why) = scope.excluded(&rel, &name)
                {
                    watcher.add(root, &rel, true);
                    snap.excluded.insert(rel, (stat, why));
                    continue;
                }
                if was_dir && stat.kind != Kind::Dir {
                    let prefix = format!("{rel}/");
                    snap.entries.retain(|p, _| !p.starts_with(&prefix));
                }
                let link = (stat.kind == Kind::Symlink)
                    .then(|| rustix::fs::readlinkat(root_fd, rel.as_str(), Vec::new()).ok())
                    .flatten()
                    .map(|t| t.into_bytes());
                // A directory made anew (not the one watched before, even under the same name):
                // what the old one held is gone, and the new one is walked and watched.
                let old_ino = snap.entries.get(&rel).map(|e| e.stat.ino);
                let is_new_dir = stat.kind == Kind::Dir
                    && (!was_dir
                        || old_ino.is_some_and(|i| i != stat.ino)
                        || touched.removed_dirs.contains(&rel));
                if is_new_dir && was_dir {
                    let prefix = format!("{rel}/");
                    snap.entries.retain(|p, _| !p.starts_with(&prefix));
                }
                let entry = read_entry(root_fd, &rel, stat, link, scope, store, false);
                snap.entries.insert(rel.clone(), entry);
                if is_new_dir {
                    // Watched first, then listed: nothing made in it is missed.
                    let mut stack = vec![rel];
                    while let Some(dir) = stack.pop() {
                        watcher.add(root, &dir, false);
                        let (mut found, mut subdirs, mut excluded) =
                            (Vec::new(), Vec::new(), Vec::new());
                        if !list(
                            root_fd,
                            &dir,
                            scope,
                            &mut found,
                            &mut subdirs,
                            &mut excluded,
                        ) {
                            return None;
                        }
                        for (r, st, l) in found {
                            let e = read_entry(root_fd, &r, st, l, scope, store, false);
                            snap.entries.insert(r, e);
                        }
                        for (r, x) in excluded {
                            watcher.add(root, &r, true);
                            snap.excluded.insert(r, x);
                        }
                        stack.extend(subdirs);
                    }
                }
            }
        }
    }
    for rel in touched.excluded {
        if let Ok(st) = rustix::fs::statat(root_fd, rel.as_str(), AtFlags::SYMLINK_NOFOLLOW)
            && let Some((stat, _)) = snap.excluded.get_mut(&rel)
        {
            *stat = stat_of(&st);
            // Its own stat may not move for a change deeper in it: mark it changed anyway.
            stat.mtime += 1;
        }
    }
    if watcher.broken {
        return None;
    }
    Some(snap)
}

/// The paths a [`Watcher`] saw change.
#[derive(Default)]
struct Touched {
    paths: HashSet<String>,
    /// Directories removed since the last look: one there now is another, even when the file
    /// system gave it the old one's inode number again.
    removed_dirs: HashSet<String>,
    /// Excluded directories with a change directly in them.
    excluded: HashSet<String>,
}

impl Touched {
    fn is_empty(&self) -> bool {
        self.paths.is_empty() && self.excluded.is_empty()
    }
}

fn depth(p: &str) -> usize {
    p.bytes().filter(|b| *b == b'/').count()
}

/// The entries that differ between `before` and `after`, in the order the journal applies
/// them (removals deepest first, then the rest shallowest first), and what changed out of
/// scope.
fn diff(
    before: &Snapshot,
    after: &Snapshot,
    scope: &Scope,
    store: &Store,
) -> (Vec<CommandEntry>, Vec<Skipped>) {
    let mut entries = Vec::new();
    let mut skipped = Vec::new();
    let mut call_bytes = 0u64;
    // Every path of either snapshot, once: those before, then those only after.
    let paths = before.entries.keys().chain(
        after
            .entries
            .keys()
            .filter(|p| !before.entries.contains_key(*p)),
    );
    for path in paths {
        let old = before.entries.get(path);
        let new = after.entries.get(path);
        let same = match (old, new) {
            (Some(o), Some(n)) => {
                o.hash.is_some()
                    && o.hash == n.hash
                    && (o.stat.kind == Kind::Symlink || o.stat.mode == n.stat.mode)
            }
            (None, None) => true,
            _ => false,
        };
        if same {
            continue;
        }
        let special = |e: Option<&Entry>| e.is_some_and(|e| e.stat.kind == Kind::Special);
        if special(old) || special(new) {
            skipped.push(Skipped {
                path: path.clone(),
                reason: "not a regular file, symlink or directory".into(),
            });
            continue;
        }
        if new.is_some_and(|n| n.hash.is_none()) {
            skipped.push(Skipped {
                path: path.clone(),
                reason: "unreadable after the command".into(),
            });
            continue;
        }
        let (old_hash, old_mode, content) = match old {
            None => (None, None, Vec::new()),
            Some(o) => match previous(o, scope, store, &mut call_bytes) {
                Ok(previous) => previous,
                Err(reason) => {
                    skipped.push(Skipped {
                        path: path.clone(),
                        reason,
                    });
                    continue;
                }
            },
        };
        let (new_hash, new_mode) = match new {
            None => (None, None),
            Some(n) => (
                n.hash.as_deref().map(str::to_string),
                (n.stat.kind != Kind::Symlink).then_some(n.stat.mode),
            ),
        };
        entries.push(CommandEntry {
            path: path.clone(),
            old_hash,
            old_mode,
            old_content: content,
            new_hash,
            new_mode,
        });
    }
    excluded_changes(before, after, &mut skipped);
    let vacates = |e: &CommandEntry| {
        e.new_hash.is_none()
            || (e.old_hash.as_deref() == Some(DIR_HASH) && e.new_hash.as_deref() != Some(DIR_HASH))
    };
    entries.sort_by(|a, b| {
        let (va, vb) = (vacates(a), vacates(b));
        vb.cmp(&va)
            .then_with(|| {
                if va {
                    depth(&b.path).cmp(&depth(&a.path))
                } else {
                    depth(&a.path).cmp(&depth(&b.path))
                }
            })
            .then_with(|| a.path.cmp(&b.path))
    });
    skipped.sort_by(|a, b| a.path.cmp(&b.path));
    (entries, skipped)
}

/// An entry's previous state as the journal keeps it: hash, mode, content.
type Previous = (Option<String>, Option<u32>, Vec<u8>);

/// What `o`, a path's entry before the command, puts in its journal entry (hash, mode,
/// content), or why it cannot be kept; `call_bytes` counts the contents this call keeps.
fn previous(
    o: &Entry,
    scope: &Scope,
    store: &Store,
    call_bytes: &mut u64,
) -> Result<Previous, String> {
    let Some(hash) = o.hash.clone() else {
        return Err("was unreadable before the command".into());
    };
    let content = match o.stat.kind {
        Kind::Dir | Kind::Special => Vec::new(),
        Kind::Symlink => o.link.as_deref().map(<[u8]>::to_vec).unwrap_or_default(),
        Kind::File => {
            if o.stat.size > scope.max_file {
                return Err(format!("over the {} per-file cap", human(scope.max_file)));
            }
            if *call_bytes + o.stat.size > scope.max_call {
                return Err(format!(
                    "past the {} of previous contents kept per call",
                    human(scope.max_call)
                ));
            }
            let Some(bytes) = o.stored.then(|| store.get(&hash)).flatten() else {
                return Err(format!(
                    "its previous content was not kept (the store is over {})",
                    human(scope.max_store)
                ));
            };
            *call_bytes += bytes.len() as u64;
            bytes
        }
    };
    let mode = (o.stat.kind != Kind::Symlink).then_some(o.stat.mode);
    Ok((Some(hash.to_string()), mode, content))
}

/// The excluded directories whose own stat changed between `before` and `after` (one
/// appeared, went, or its entries changed), each added to `skipped`.
fn excluded_changes(before: &Snapshot, after: &Snapshot, skipped: &mut Vec<Skipped>) {
    let names: HashSet<&String> = before
        .excluded
        .keys()
        .chain(after.excluded.keys())
        .collect();
    for name in names {
        let (o, n) = (before.excluded.get(name), after.excluded.get(name));
        let changed = match (o, n) {
            (Some(o), Some(n)) => o.0 != n.0,
            _ => true,
        };
        // git's store changes on every git command (its index): not worth a line each time.
        if changed
            && name != ".git"
            && let Some((_, why)) = n.or(o)
        {
            skipped.push(Skipped {
                path: format!("{name}/"),
                reason: why.clone(),
            });
        }
    }
}

fn human(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{bytes} bytes")
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::os::unix::fs::PermissionsExt;

    use toolyard_records::symlink_hash;

    use super::*;

    fn scope() -> Scope {
        Scope {
            exclude: HashMap::from([("target".to_string(), "build output".to_string())]),
            state_rel: None,
            max_file: 1 << 20,
            max_call: 1 << 20,
            max_store: 1 << 30,
        }
    }

    fn snapshot(root: &Path, store: &mut Store, prev: Option<&Snapshot>) -> Snapshot {
        let fd = rustix::fs::open(root, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
        take(&fd, &scope(), prev, store, now_ns(), None, root).unwrap()
    }

    /// What a snapshot says of each path: kind, state hash, mode.
    fn seen(s: &Snapshot) -> BTreeMap<String, (Option<String>, u32)> {
        s.entries
            .iter()
            .map(|(p, e)| {
                (
                    p.clone(),
                    (e.hash.as_deref().map(str::to_string), e.stat.mode),
                )
            })
            .collect()
    }

    #[test]
    fn what_the_watcher_reports_is_what_a_full_walk_finds() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("ws");
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::create_dir_all(root.join("gone/deep")).unwrap();
        std::fs::write(root.join("a/b/f"), "f").unwrap();
        std::fs::write(root.join("a/keep"), "k").unwrap();
        std::fs::write(root.join("gone/deep/x"), "x").unwrap();
        std::fs::create_dir_all(root.join("target")).unwrap();
        let mut ix = Index {
            root: root.clone(),
            last: Arc::default(),
            watcher: None,
            store: Store::open(t.path().join("store")),
            live: 0,
        };
        let first = refresh(&mut ix, &root, &scope(), now_ns()).unwrap();
        assert!(ix.watcher.is_some(), "inotify is available here");
        // Nothing changed: the same snapshot, no walk.
        let again = refresh(&mut ix, &root, &scope(), now_ns()).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        // Every kind of change, including within the same clock tick as the last look.
        std::fs::write(root.join("a/b/f"), "F").unwrap();
        std::fs::set_permissions(root.join("a/keep"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        std::fs::remove_dir_all(root.join("gone")).unwrap();
        std::fs::create_dir_all(root.join("new/n1/n2")).unwrap();
        std::fs::write(root.join("new/n1/n2/y"), "y").unwrap();
        std::os::unix::fs::symlink("a/keep", root.join("l")).unwrap();
        std::fs::write(root.join("target/out"), "o").unwrap();
        let incremental = refresh(&mut ix, &root, &scope(), now_ns()).unwrap();
        assert!(!ix.watcher.as_ref().unwrap().broken);
        let fd =
            rustix::fs::open(&root, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
        let mut store = Store::open(t.path().join("store2"));
        let full = take(&fd, &scope(), None, &mut store, now_ns(), None, &root).unwrap();
        assert_eq!(seen(&incremental), seen(&full));
        let (_, skipped) = diff(&first, &incremental, &scope(), &ix.store);
        assert_eq!(
            skipped.len(),
            1,
            "the excluded directory's change is reported: {skipped:?}"
        );
        // A directory removed and made again under the same name, with new entries.
        std::fs::remove_dir_all(root.join("a/b")).unwrap();
        std::fs::create_dir_all(root.join("a/b/c")).unwrap();
        std::fs::write(root.join("a/b/c/z"), "z").unwrap();
        let remade = refresh(&mut ix, &root, &scope(), now_ns()).unwrap();
        let full = take(&fd, &scope(), None, &mut store, now_ns(), None, &root).unwrap();
        assert_eq!(seen(&remade), seen(&full));
        std::fs::write(root.join("a/b/c/z"), "zz").unwrap();
        let later = refresh(&mut ix, &root, &scope(), now_ns()).unwrap();
        let full = take(&fd, &scope(), None, &mut store, now_ns(), None, &root).unwrap();
        assert_eq!(seen(&later), seen(&full), "the remade directory is watched");
        // A directory moved: the watcher cannot follow, so the next look walks again.
        std::fs::rename(root.join("new"), root.join("moved")).unwrap();
        let after_move = refresh(&mut ix, &root, &scope(), now_ns()).unwrap();
        let full = take(&fd, &scope(), None, &mut store, now_ns(), None, &root).unwrap();
        assert_eq!(seen(&after_move), seen(&full));
    }

    #[test]
    fn the_summary_line_counts_what_was_journaled_and_names_what_was_not() {
        let c = Captured {
            first: Some(42),
            added: 0,
            changed: 3,
            removed: 1,
            skipped: vec![Skipped {
                path: "target/".into(),
                reason: "excluded directory (build output)".into(),
            }],
            failed: None,
        };
        assert_eq!(
            c.line().unwrap(),
            "3 files changed, 1 removed: undo with undo {\"change_id\": 42}; not undoable: target/ (excluded directory (build output))"
        );
        assert_eq!(
            Captured::default().line(),
            None,
            "nothing changed, nothing said"
        );
    }

    #[test]
    fn a_removed_tree_is_journaled_deepest_first_and_a_new_one_shallowest_first() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("ws");
        std::fs::create_dir_all(root.join("old/a/b")).unwrap();
        std::fs::write(root.join("old/a/b/f"), "f").unwrap();
        std::os::unix::fs::symlink("a/b/f", root.join("old/l")).unwrap();
        std::fs::create_dir_all(root.join("target")).unwrap();
        let mut store = Store::open(t.path().join("store"));
        let before = snapshot(&root, &mut store, None);
        std::fs::remove_dir_all(root.join("old")).unwrap();
        std::fs::create_dir_all(root.join("new/x")).unwrap();
        std::fs::write(root.join("new/x/g"), "g").unwrap();
        std::fs::write(root.join("target/out"), "o").unwrap();
        let after = snapshot(&root, &mut store, Some(&before));
        let (entries, skipped) = diff(&before, &after, &scope(), &store);
        let order: Vec<&str> = entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            order,
            [
                "old/a/b/f",
                "old/a/b",
                "old/a",
                "old/l",
                "old",
                "new",
                "new/x",
                "new/x/g"
            ]
        );
        let f = &entries[0];
        assert_eq!(
            f.old_content, b"f",
            "the removed file's bytes come from the store"
        );
        let l = entries.iter().find(|e| e.path == "old/l").unwrap();
        assert_eq!(l.old_content, b"a/b/f");
        assert_eq!(l.old_hash.as_deref(), Some(symlink_hash(b"a/b/f").as_str()));
        assert_eq!(skipped.len(), 1, "{skipped:?}");
        assert_eq!(skipped[0].path, "target/");
    }
}
