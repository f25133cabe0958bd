//! Ignore rules for listings, cached per directory and checked against the files' stamps.
//!
//! The `ignore` crate's walker probes every ancestor and every visited directory for its
//! ignore files and re-reads git's global configuration on each walk: about a hundred failed
//! `statx` calls for a two-level listing. Here each directory's rules are parsed once and kept
//! while the directory (its entries) and its ignore files (their content) keep their stamps,
//! so an unchanged tree costs one `statx` per ancestor and nothing per visited directory beyond
//! the `lstat` a listing does anyway.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use ignore::Match;
use ignore::gitignore::Gitignore;
use toolyard_core::sync::lock;

/// The ignore files a directory may hold, strongest first (as ripgrep: `.ignore` over
/// `.gitignore`).
const IGNORE_FILES: [&str; 2] = [".ignore", ".gitignore"];

/// Directories remembered before the cache starts over (a bound on memory).
const MAX_DIRS: usize = 20_000;

/// How often git's global excludes are checked for changes.
const GLOBAL_RECHECK: Duration = Duration::from_secs(2);

/// What identifies one version of a file or directory: change its entries (a directory) or its
/// content (a file) and the stamp changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    dev: u64,
    ino: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    len: u64,
}

impl Stamp {
    /// The stamp of `st` (from `lstat` through a directory handle).
    pub(crate) fn of(st: &rustix::fs::Stat) -> Self {
        Self {
            dev: st.st_dev,
            ino: st.st_ino,
            mtime_ns: i128::from(st.st_mtime) * 1_000_000_000 + i128::from(st.st_mtime_nsec),
            ctime_ns: i128::from(st.st_ctime) * 1_000_000_000 + i128::from(st.st_ctime_nsec),
            len: st.st_size as u64,
        }
    }

    fn of_std(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
            len: meta.len(),
        }
    }

    fn of_path(path: &Path) -> Option<Self> {
        std::fs::symlink_metadata(path)
            .ok()
            .map(|m| Self::of_std(&m))
    }
}

/// One directory's own rules.
#[derive(Debug)]
struct DirRules {
    /// The directory's stamp when its rules were read.
    stamp: Stamp,
    /// Each ignore file present (by [`IGNORE_FILES`] order) with its stamp and matcher.
    files: [Option<(Stamp, Arc<Gitignore>)>; 2],
    /// `.git/info/exclude`, when the directory is a repository's root.
    exclude: Option<(Stamp, Arc<Gitignore>)>,
}

impl DirRules {
    fn read(dir: &Path, stamp: Stamp) -> Self {
        let load = |path: PathBuf| {
            let s = Stamp::of_path(&path)?;
            Some((s, Arc::new(Gitignore::new(&path).0)))
        };
        Self {
            stamp,
            files: IGNORE_FILES.map(|name| load(dir.join(name))),
            exclude: load(dir.join(".git/info/exclude")),
        }
    }

    /// Whether the files these rules came from are unchanged.
    fn fresh(&self, dir: &Path) -> bool {
        let same = |name: &str, known: &Option<(Stamp, Arc<Gitignore>)>| match known {
            Some((s, _)) => Stamp::of_path(&dir.join(name)) == Some(*s),
            None => true,
        };
        IGNORE_FILES
            .iter()
            .zip(&self.files)
            .all(|(name, f)| same(name, f))
            && same(".git/info/exclude", &self.exclude)
    }

    fn is_empty(&self) -> bool {
        self.files.iter().all(Option::is_none) && self.exclude.is_none()
    }
}

/// Git's global excludes (`core.excludesFile`), re-read when git's config files change.
struct Global {
    matcher: Arc<Gitignore>,
    stamps: Vec<Option<Stamp>>,
    checked: Instant,
}

fn global_sources() -> Vec<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let xdg = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".config")));
    let mut v = Vec::new();
    if let Some(h) = &home {
        v.push(h.join(".gitconfig"));
    }
    if let Some(x) = &xdg {
        v.push(x.join("git/config"));
        v.push(x.join("git/ignore"));
    }
    v
}

/// Every directory's rules seen so far, and git's global excludes.
struct Cache {
    dirs: Mutex<HashMap<PathBuf, Arc<DirRules>>>,
    global: Mutex<Option<Global>>,
}

static CACHE: LazyLock<Cache> = LazyLock::new(|| Cache {
    dirs: Mutex::new(HashMap::new()),
    global: Mutex::new(None),
});

/// The rules of `dir` whose current stamp is `stamp`: from the cache when still fresh.
fn rules_of(dir: &Path, stamp: Stamp) -> Arc<DirRules> {
    if let Some(r) = lock(&CACHE.dirs).get(dir).cloned()
        && r.stamp == stamp
        && r.fresh(dir)
    {
        return r;
    }
    let rules = Arc::new(DirRules::read(dir, stamp));
    let mut dirs = lock(&CACHE.dirs);
    if dirs.len() >= MAX_DIRS {
        dirs.clear();
    }
    dirs.insert(dir.to_path_buf(), rules.clone());
    rules
}

fn global() -> Arc<Gitignore> {
    let mut g = lock(&CACHE.global);
    if let Some(known) = g.as_mut() {
        if known.checked.elapsed() < GLOBAL_RECHECK {
            return known.matcher.clone();
        }
        let now: Vec<_> = global_sources().iter().map(|p| Stamp::of_path(p)).collect();
        known.checked = Instant::now();
        if now == known.stamps {
            return known.matcher.clone();
        }
    }
    let stamps = global_sources().iter().map(|p| Stamp::of_path(p)).collect();
    let matcher = Arc::new(Gitignore::global().0);
    *g = Some(Global {
        matcher: matcher.clone(),
        stamps,
        checked: Instant::now(),
    });
    matcher
}

/// The rules in force inside one directory: its own and its ancestors', nearest last.
#[derive(Clone)]
pub(crate) struct Rules {
    levels: Vec<Arc<DirRules>>,
    global: Arc<Gitignore>,
}

impl Rules {
    /// The rules in force in `dir` (absolute): every ancestor's from the filesystem root down,
    /// as ripgrep reads them with `--no-require-git`.
    pub(crate) fn for_dir(dir: &Path) -> Self {
        let mut levels: Vec<Arc<DirRules>> = dir
            .ancestors()
            .filter_map(|a| Some(rules_of(a, Stamp::of_path(a)?)))
            .collect();
        levels.reverse();
        Self {
            levels,
            global: global(),
        }
    }

    /// The rules in force in the child directory `dir` whose `lstat` gave `stamp`.
    pub(crate) fn child(&self, dir: &Path, stamp: Stamp) -> Self {
        let rules = rules_of(dir, stamp);
        let mut levels = self.levels.clone();
        if !rules.is_empty() {
            levels.push(rules);
        }
        Self {
            levels,
            global: self.global.clone(),
        }
    }

    /// Whether `path` (absolute, inside the directory these rules are for) is ignored. As in
    /// ripgrep: any `.ignore` rule (nearest first) decides before any `.gitignore` rule, then
    /// the repository's `info/exclude`, then git's global excludes.
    pub(crate) fn ignored(&self, path: &Path, is_dir: bool) -> bool {
        for kind in 0..IGNORE_FILES.len() {
            for level in self.levels.iter().rev() {
                if let Some((_, m)) = &level.files[kind] {
                    match m.matched(path, is_dir) {
                        Match::None => {}
                        Match::Ignore(_) => return true,
                        Match::Whitelist(_) => return false,
                    }
                }
            }
        }
        for level in self.levels.iter().rev() {
            if let Some((_, m)) = &level.exclude {
                match m.matched(path, is_dir) {
                    Match::None => {}
                    Match::Ignore(_) => return true,
                    Match::Whitelist(_) => return false,
                }
            }
        }
        self.global.matched(path, is_dir).is_ignore()
    }
}
