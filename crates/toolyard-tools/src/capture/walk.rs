//! The stat walk that finds what a command changed (a `getdents` and an `fstatat` per entry,
//! reading only files whose stat changed), the inotify watcher that spares it when the kernel
//! can say what changed, and the reads beneath the workspace root both use.

use std::collections::HashMap;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::{Arc, Mutex};

use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags};
use toolyard_core::sync::lock;
use toolyard_records::{DIR_HASH, symlink_hash};

use super::{
    Entry, Kind, MAX_ENTRIES, MAX_WALKERS, RACY_NS, Scope, Snapshot, Stat, Store, Touched,
};

/// inotify watches on every directory of the workspace: what changed since the last look, so a
/// command that changes nothing costs no walk. Anything it cannot account for exactly (a lost
/// event, a directory moved, a watch that could not be set) makes the next look a full walk.
pub(super) struct Watcher {
    fd: OwnedFd,
    /// Watch descriptor to (workspace-relative directory, excluded).
    dirs: HashMap<i32, (String, bool)>,
    /// Set once it may have missed a change (a directory it could not watch, a failed read):
    /// the next look walks again.
    pub(super) broken: bool,
}

impl Watcher {
    pub(super) fn new() -> Option<Self> {
        use rustix::fs::inotify;
        let fd = inotify::init(inotify::CreateFlags::NONBLOCK | inotify::CreateFlags::CLOEXEC)
            .map_err(|e| tracing::debug!(error = %e, "no inotify: every command walks the workspace twice"))
            .ok()?;
        Some(Self {
            fd,
            dirs: HashMap::new(),
            broken: false,
        })
    }

    /// Watch directory `rel` (an excluded one only for changes directly in it).
    pub(super) fn add(&mut self, root: &Path, rel: &str, excluded: bool) {
        match watch_dir(self.fd.as_fd(), root, rel) {
            Ok(wd) => {
                self.dirs.insert(wd, (rel.to_string(), excluded));
            }
            Err(e) => {
                tracing::debug!(dir = rel, error = %e, "cannot watch a directory; walking instead");
                self.broken = true;
            }
        }
    }

    /// What changed since the last call; `None` when that is not known exactly.
    pub(super) fn changed(&mut self) -> Option<Touched> {
        use rustix::fs::inotify::{ReadFlags, Reader};
        if self.broken {
            return None;
        }
        let mut touched = Touched::default();
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 16384];
        let mut reader = Reader::new(&self.fd, &mut buf);
        loop {
            let ev = match reader.next() {
                Ok(ev) => ev,
                Err(rustix::io::Errno::WOULDBLOCK) | Err(rustix::io::Errno::INTR) => break,
                Err(_) => {
                    self.broken = true;
                    return None;
                }
            };
            let flags = ev.events();
            if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                self.broken = true;
                return None;
            }
            if flags.contains(ReadFlags::IGNORED) {
                self.dirs.remove(&ev.wd());
                continue;
            }
            let Some((dir, excluded)) = self.dirs.get(&ev.wd()).cloned() else {
                self.broken = true;
                return None;
            };
            // A directory moved keeps its watches under its old name: look again from scratch.
            if flags.contains(ReadFlags::MOVE_SELF)
                || (flags.contains(ReadFlags::ISDIR) && flags.contains(ReadFlags::MOVED_TO))
            {
                self.broken = true;
                return None;
            }
            if excluded {
                touched.excluded.insert(dir);
                continue;
            }
            match ev.file_name().map(|n| n.to_str()) {
                Some(Ok(name)) if !name.is_empty() => {
                    let path = if dir.is_empty() {
                        name.to_string()
                    } else {
                        format!("{dir}/{name}")
                    };
                    if flags.contains(ReadFlags::ISDIR)
                        && flags.intersects(ReadFlags::DELETE | ReadFlags::MOVED_FROM)
                    {
                        touched.removed_dirs.insert(path.clone());
                    }
                    touched.paths.insert(path);
                }
                Some(Err(_)) => {} // a name that is not UTF-8 is never journaled
                _ => {
                    if !dir.is_empty() {
                        touched.paths.insert(dir);
                    }
                }
            }
        }
        Some(touched)
    }
}

/// Walk `root` within `scope`: every entry's stat, and the state hash of those whose stat
/// differs from `prev` (read and put in the store); every directory watched by `watcher`
/// before it is listed.
pub(super) fn take(
    root_fd: &OwnedFd,
    scope: &Scope,
    prev: Option<&Snapshot>,
    store: &mut Store,
    started: i128,
    watcher: Option<&mut Watcher>,
    root: &Path,
) -> Option<Snapshot> {
    let ctx = watcher.as_ref().map(|w| WatchCtx {
        fd: w.fd.as_fd(),
        root,
    });
    let mut walked = walk(root_fd, scope, ctx);
    if let Some(w) = watcher {
        for (wd, dir, excluded) in walked.wds.drain(..) {
            w.dirs.insert(wd, (dir, excluded));
        }
        w.broken |= walked.watch_failed;
    }
    if walked.entries.len() > MAX_ENTRIES {
        tracing::warn!(
            entries = walked.entries.len(),
            "the workspace is too large to journal what commands change"
        );
        return None;
    }
    let mut snap = Snapshot {
        entries: HashMap::with_capacity(walked.entries.len()),
        excluded: walked.excluded,
    };
    // A directory that could not be listed (a command made it unreadable) keeps what it held:
    // its entries are not taken for removed.
    if let Some(prev) = prev {
        for dir in &walked.unlisted {
            let prefix = format!("{dir}/");
            for (rel, e) in prev.entries.iter().filter(|(r, _)| r.starts_with(&prefix)) {
                snap.entries.insert(rel.clone(), e.clone());
            }
        }
    }
    for (rel, stat, link) in walked.entries {
        let racy = stat.mtime >= started - RACY_NS || stat.ctime >= started - RACY_NS;
        let known = prev
            .and_then(|p| p.entries.get(&rel))
            .filter(|e| e.stat == stat && !e.racy && e.hash.is_some());
        let entry = match known {
            Some(e) => Entry { racy, ..e.clone() },
            None => read_entry(root_fd, &rel, stat, link, scope, store, racy),
        };
        snap.entries.insert(rel, entry);
    }
    Some(snap)
}

/// The state hash of `rel` (reading a file, storing it within the caps).
pub(super) fn read_entry(
    root: &OwnedFd,
    rel: &str,
    stat: Stat,
    link: Option<Vec<u8>>,
    scope: &Scope,
    store: &mut Store,
    racy: bool,
) -> Entry {
    let (hash, stored) = match stat.kind {
        Kind::Dir => (Some(Arc::from(DIR_HASH)), true),
        Kind::Symlink => (link.as_deref().map(|l| Arc::from(symlink_hash(l))), true),
        Kind::Special => (None, false),
        Kind::File => match read_file(root, rel, scope.max_file) {
            Some((hash, Some(bytes))) => {
                let stored = store.put(&hash, &bytes, scope.max_store);
                (Some(Arc::from(hash)), stored)
            }
            Some((hash, None)) => (Some(Arc::from(hash)), false),
            None => (None, false),
        },
    };
    Entry {
        stat,
        hash,
        link: link.map(Arc::from),
        stored,
        racy,
    }
}

/// Read `rel` beneath `root` without following any symlink: its hash, and its bytes when
/// at most `max` (larger files are only hashed, streamed).
fn read_file(root: &OwnedFd, rel: &str, max: u64) -> Option<(String, Option<Vec<u8>>)> {
    let fd = open_beneath(root, rel)?;
    let mut file = std::fs::File::from(fd);
    let mut bytes = Vec::new();
    (&mut file).take(max + 1).read_to_end(&mut bytes).ok()?;
    if bytes.len() as u64 <= max {
        let hash = toolyard_workspace::hash_bytes(&bytes);
        return Some((hash, Some(bytes)));
    }
    let mut hasher = blake3::Hasher::new();
    hasher.update(&bytes);
    hasher.update_reader(&mut file).ok()?;
    Some((hasher.finalize().to_hex().to_string(), None))
}

fn open_beneath(root: &OwnedFd, rel: &str) -> Option<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    match rustix::fs::openat2(
        root,
        rel,
        flags,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS,
    ) {
        Ok(fd) => Some(fd),
        Err(rustix::io::Errno::NOSYS) => rustix::fs::openat(root, rel, flags, Mode::empty()).ok(),
        Err(_) => None,
    }
}

/// What a walk found: (path, stat, symlink target) and the excluded directories.
#[derive(Default)]
struct Walked {
    entries: Vec<(String, Stat, Option<Vec<u8>>)>,
    excluded: HashMap<String, (Stat, String)>,
    /// Directories that could not be listed.
    unlisted: Vec<String>,
    /// The watches set: descriptor, directory, excluded.
    wds: Vec<(i32, String, bool)>,
    /// A watch could not be set.
    watch_failed: bool,
}

/// Where a walk sets its watches.
#[derive(Clone, Copy)]
struct WatchCtx<'a> {
    fd: std::os::fd::BorrowedFd<'a>,
    root: &'a Path,
}

/// The events a [`Watcher`] asks for on each directory.
fn watch_flags() -> rustix::fs::inotify::WatchFlags {
    use rustix::fs::inotify::WatchFlags;
    WatchFlags::MODIFY
        | WatchFlags::ATTRIB
        | WatchFlags::CREATE
        | WatchFlags::DELETE
        | WatchFlags::MOVED_FROM
        | WatchFlags::MOVED_TO
        | WatchFlags::MOVE_SELF
        | WatchFlags::DONT_FOLLOW
        | WatchFlags::ONLYDIR
}

/// Watch the directory `rel` beneath `root`.
fn watch_dir(fd: std::os::fd::BorrowedFd<'_>, root: &Path, rel: &str) -> rustix::io::Result<i32> {
    let path = if rel.is_empty() {
        root.to_path_buf()
    } else {
        root.join(rel)
    };
    rustix::fs::inotify::add_watch(fd, &path, watch_flags())
}

pub(super) fn stat_of(st: &rustix::fs::Stat) -> Stat {
    let fmt = rustix::fs::FileType::from_raw_mode(st.st_mode);
    let kind = match fmt {
        rustix::fs::FileType::RegularFile => Kind::File,
        rustix::fs::FileType::Symlink => Kind::Symlink,
        rustix::fs::FileType::Directory => Kind::Dir,
        _ => Kind::Special,
    };
    Stat {
        kind,
        size: st.st_size as u64,
        mtime: st.st_mtime as i128 * 1_000_000_000 + st.st_mtime_nsec as i128,
        ctime: st.st_ctime as i128 * 1_000_000_000 + st.st_ctime_nsec as i128,
        ino: st.st_ino,
        mode: st.st_mode & 0o7777,
    }
}

/// A parallel stat walk of `root` (directories handed out to a few threads), never
/// following a symlink, not descending into excluded directories.
fn walk(root: &OwnedFd, scope: &Scope, watch: Option<WatchCtx<'_>>) -> Walked {
    struct Shared {
        queue: Vec<String>,
        busy: usize,
    }
    let shared = Mutex::new(Shared {
        queue: vec![String::new()],
        busy: 0,
    });
    let cv = std::sync::Condvar::new();
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, MAX_WALKERS);
    let results: Mutex<Walked> = Mutex::new(Walked::default());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let mut mine = Vec::new();
                let mut excluded = Vec::new();
                let mut unlisted = Vec::new();
                let mut wds = Vec::new();
                let mut watch_failed = false;
                let mut watch = |rel: &str, excluded: bool| {
                    if let Some(w) = watch {
                        match watch_dir(w.fd, w.root, rel) {
                            Ok(wd) => wds.push((wd, rel.to_string(), excluded)),
                            Err(_) => watch_failed = true,
                        }
                    }
                };
                loop {
                    let dir = {
                        let mut sh = lock(&shared);
                        loop {
                            if let Some(d) = sh.queue.pop() {
                                sh.busy += 1;
                                break Some(d);
                            }
                            if sh.busy == 0 {
                                break None;
                            }
                            sh = cv.wait(sh).unwrap_or_else(|e| e.into_inner());
                        }
                    };
                    let Some(dir) = dir else {
                        cv.notify_all();
                        break;
                    };
                    let mut subdirs = Vec::new();
                    // Watched before it is listed: a change made meanwhile is reported later.
                    watch(&dir, false);
                    let had = excluded.len();
                    if !list(root, &dir, scope, &mut mine, &mut subdirs, &mut excluded) {
                        unlisted.push(dir);
                    }
                    for (x, _) in &excluded[had..] {
                        watch(x, true);
                    }
                    let mut sh = lock(&shared);
                    sh.queue.extend(subdirs);
                    sh.busy -= 1;
                    drop(sh);
                    cv.notify_all();
                }
                let mut r = lock(&results);
                r.entries.append(&mut mine);
                r.excluded.extend(excluded);
                r.unlisted.append(&mut unlisted);
                r.wds.append(&mut wds);
                r.watch_failed |= watch_failed;
            });
        }
    });
    results.into_inner().unwrap_or_else(|e| e.into_inner())
}

/// The entries of directory `dir` (workspace-relative, "" for the root); false when it could
/// not be listed.
pub(super) fn list(
    root: &OwnedFd,
    dir: &str,
    scope: &Scope,
    out: &mut Vec<(String, Stat, Option<Vec<u8>>)>,
    subdirs: &mut Vec<String>,
    excluded: &mut Vec<(String, (Stat, String))>,
) -> bool {
    let fd = if dir.is_empty() {
        rustix::fs::openat(
            root,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()
    } else {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rustix::fs::openat2(
            root,
            dir,
            flags,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS,
        ) {
            Ok(fd) => Some(fd),
            Err(rustix::io::Errno::NOSYS) => {
                rustix::fs::openat(root, dir, flags, Mode::empty()).ok()
            }
            Err(_) => None,
        }
    };
    let Some(fd) = fd else { return false };
    let Ok(mut entries) = rustix::fs::Dir::read_from(&fd) else {
        return false;
    };
    while let Some(Ok(e)) = entries.next() {
        let name = e.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let Ok(name) = std::str::from_utf8(name) else {
            // A name that is not UTF-8 cannot be journaled by path; left out.
            continue;
        };
        let Ok(st) = rustix::fs::statat(fd.as_fd(), name, AtFlags::SYMLINK_NOFOLLOW) else {
            continue;
        };
        let stat = stat_of(&st);
        let rel = if dir.is_empty() {
            name.to_string()
        } else {
            format!("{dir}/{name}")
        };
        if stat.kind == Kind::Dir
            && let Some(why) = scope.excluded(&rel, name)
        {
            excluded.push((rel, (stat, why)));
            continue;
        }
        let link = (stat.kind == Kind::Symlink)
            .then(|| rustix::fs::readlinkat(fd.as_fd(), name, Vec::new()).ok())
            .flatten()
            .map(|t| t.into_bytes());
        if stat.kind == Kind::Dir {
            subdirs.push(rel.clone());
        }
        out.push((rel, stat, link));
    }
    true
}
