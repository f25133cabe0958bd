//! What changed between two snapshots: the next snapshot from the watcher or a walk, the
//! entries that differ, and what each one's journal entry keeps of before.

use super::*;

/// The workspace now, as the index's next snapshot: from the kernel's account of what changed
/// since the last one when its [`Watcher`] can give it whole (only those paths are looked at;
/// nothing changed: the same snapshot), else by a full stat walk, which also sets the watches
/// up again.
pub(super) fn refresh(
    ix: &mut Index,
    root: &Path,
    scope: &Scope,
    started: i128,
) -> Option<Arc<Snapshot>> {
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
pub(super) struct Touched {
    pub(super) paths: HashSet<String>,
    /// Directories removed since the last look: one there now is another, even when the file
    /// system gave it the old one's inode number again.
    pub(super) removed_dirs: HashSet<String>,
    /// Excluded directories with a change directly in them.
    pub(super) excluded: HashSet<String>,
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
pub(super) fn diff(
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
