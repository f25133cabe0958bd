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

mod changes;
mod store;
mod walk;

use changes::{Touched, diff, refresh};
use store::Store;
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
