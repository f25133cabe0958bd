//! The walker every search tool shares, and turning its absolute paths back into
//! workspace-relative ones.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ignore::{DirEntry, WalkBuilder};
use toolyard_core::sync::lock;
use toolyard_workspace::Workspace;

/// Directory names never descended into, whatever the ignore files say.
pub(crate) const ALWAYS_SKIPPED: &[&str] = &[".git", "node_modules", "__pycache__"];

/// A walker over `root` (absolute, in `ws`) with Toolyard's rules: ignore files honoured even
/// outside a git repository, symlinks never followed, hidden entries skipped unless `hidden`,
/// [`ALWAYS_SKIPPED`] plus cargo build directories pruned, and so are the parts of `ws` the file
/// tools may not read (Toolyard's state directory when the workspace holds it).
pub(crate) fn builder(ws: &Workspace, root: &Path, hidden: bool) -> WalkBuilder {
    let mut b = base(root);
    let off_limits = ws.hidden_paths();
    b.hidden(!hidden)
        .filter_entry(move |e| !is_pruned(e) && !off_limits.iter().any(|p| e.path() == p));
    b
}

/// Like [`builder`] with hidden entries skipped from the results, but walked into by `probe`
/// (within its budget) so the caller can tell which of them would have matched: the visitor
/// sees hidden entries too and asks [`is_hidden_below`] to tell them apart. Once the probe's
/// budget is spent, hidden entries are pruned and the probe says some went unchecked.
pub(crate) fn builder_probing_hidden(
    ws: &Workspace,
    root: &Path,
    probe: Arc<HiddenProbe>,
) -> WalkBuilder {
    let mut b = base(root);
    let off_limits = ws.hidden_paths();
    // The walker's own hidden filter cannot look inside what it skips: hidden names are let
    // through here and kept out of the results by the visitor.
    b.hidden(false).filter_entry(move |e| {
        if is_pruned(e) || off_limits.iter().any(|p| e.path() == p) {
            return false;
        }
        if e.depth() > 0 && is_hidden(e.file_name()) && probe.spent() {
            probe.unchecked.store(true, Ordering::Relaxed);
            return false;
        }
        true
    });
    b
}

/// Whether a path below the search root (`below`, relative to it) is hidden: one of its
/// components is a dotfile name.
pub(crate) fn is_hidden_below(below: &[u8]) -> bool {
    below
        .split(|&b| b == b'/')
        .any(|c| c.first() == Some(&b'.'))
}

/// Most hidden files looked at for one search, and most of their bytes read, to tell which
/// would have matched (a workspace holding a big hidden cache costs no more than this).
const PROBE_FILES: u64 = 10_000;
const PROBE_BYTES: u64 = 64 << 20;
/// Hidden files named in the note.
const NAMES_SHOWN: usize = 5;

/// What a search learns about the hidden files it skipped, shared by its walker threads.
#[derive(Debug, Default)]
pub(crate) struct HiddenProbe {
    files: AtomicU64,
    bytes: AtomicU64,
    matched: AtomicU64,
    unchecked: AtomicBool,
    /// The first matching names, by path.
    names: Mutex<BTreeSet<String>>,
}

impl HiddenProbe {
    /// Whether the budget is spent.
    fn spent(&self) -> bool {
        self.files.load(Ordering::Relaxed) >= PROBE_FILES
            || self.bytes.load(Ordering::Relaxed) >= PROBE_BYTES
    }

    /// Count one hidden file looked at; `false` once the budget is spent (it was not checked).
    pub(crate) fn take_file(&self) -> bool {
        if self.spent() {
            self.unchecked.store(true, Ordering::Relaxed);
            return false;
        }
        self.files.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Count `n` bytes read from hidden files; `false` once the budget is spent.
    pub(crate) fn take_bytes(&self, n: u64) -> bool {
        if self.bytes.fetch_add(n, Ordering::Relaxed) + n > PROBE_BYTES {
            self.unchecked.store(true, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Mark a file as not fully checked (its read stopped at the budget).
    pub(crate) fn gave_up(&self) {
        self.unchecked.store(true, Ordering::Relaxed);
    }

    /// A hidden file (workspace-relative) that would have matched.
    pub(crate) fn matched(&self, rel: &[u8]) {
        self.matched.fetch_add(1, Ordering::Relaxed);
        let mut names = lock(&self.names);
        names.insert(display(rel));
        if names.len() > NAMES_SHOWN {
            names.pop_last();
        }
    }

    /// What was found.
    pub(crate) fn finish(&self) -> HiddenSkipped {
        HiddenSkipped {
            count: self.matched.load(Ordering::Relaxed),
            names: self
                .names
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .cloned()
                .collect(),
            unchecked: self.unchecked.load(Ordering::Relaxed),
        }
    }
}

/// The hidden files a search skipped that would have matched.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HiddenSkipped {
    /// How many would have matched.
    pub count: u64,
    /// The first of them by path (workspace-relative), at most five.
    pub names: Vec<String>,
    /// Some hidden files were not looked at (the probe's budget ran out).
    pub unchecked: bool,
}

fn base(root: &Path) -> WalkBuilder {
    let mut b = WalkBuilder::new(root);
    b.follow_links(false)
        // A workspace need not be a git checkout; its .gitignore still says what is noise.
        .require_git(false);
    b
}

/// A dotfile name, as ripgrep defines hidden on Unix.
fn is_hidden(name: &OsStr) -> bool {
    name.as_bytes().first() == Some(&b'.')
}

/// The line that names the hidden files skipped that would have matched, and says how to
/// include them in the tool's own words (`hint`, a [`crate::search::Vocab`] `hidden` text);
/// `None` when none would have.
pub(crate) fn hidden_note(h: &HiddenSkipped, hint: &str) -> Option<String> {
    let hint = |file: &str| {
        if file.is_empty() {
            // No name to show: the hint's own example.
            return hint
                .replace("{file}", ".env")
                .replace("{glob}", ".github/**");
        }
        // `{glob}`: the hidden directory it lies in, as a pattern, or the file itself.
        let parts: Vec<&str> = file.split('/').collect();
        let glob = match parts.iter().position(|c| c.starts_with('.')) {
            Some(i) if i + 1 < parts.len() => format!("{}/**", parts[..=i].join("/")),
            _ => file.to_string(),
        };
        hint.replace("{file}", file).replace("{glob}", &glob)
    };
    match (h.count, h.names.first()) {
        (0, _) | (_, None) if h.unchecked => Some(format!(
            "[hidden files were not all searched (past {PROBE_FILES} files or {} MiB); {}]\n",
            PROBE_BYTES >> 20,
            hint("")
        )),
        (0, _) | (_, None) => None,
        (n, Some(first)) => {
            let shown = h.names.len() as u64;
            let mut names = h.names.join(", ");
            if n > shown {
                names.push_str(&format!(" and {} more", n - shown));
            }
            Some(format!(
                "[{n} hidden file{} would also match: {names}{}; {}]\n",
                if n == 1 { "" } else { "s" },
                if h.unchecked {
                    " (some hidden files were not searched)"
                } else {
                    ""
                },
                hint(first)
            ))
        }
    }
}

/// How an empty-result message names the searched directory: "the workspace root" or its
/// workspace-relative path.
pub(crate) fn place(root: &toolyard_workspace::RelPath) -> String {
    if root.is_root() {
        "the workspace root".into()
    } else {
        root.as_str().to_string()
    }
}

/// Whether the walk should not descend into (or report) `entry`.
pub(crate) fn is_pruned(entry: &DirEntry) -> bool {
    if entry.depth() == 0 {
        // The caller named this path explicitly: search it even if it is `target/` or hidden.
        return false;
    }
    let name = entry.file_name();
    if ALWAYS_SKIPPED.iter().any(|s| OsStr::new(s) == name) {
        return true;
    }
    if name == "target" && entry.file_type().is_some_and(|t| t.is_dir()) {
        // Only cargo's build directory: `cc/src/target/` is source code, cargo's has a tag.
        return is_cargo_target(entry.path());
    }
    false
}

fn is_cargo_target(dir: &Path) -> bool {
    ["CACHEDIR.TAG", ".rustc_info.json"]
        .iter()
        .any(|f| std::fs::symlink_metadata(dir.join(f)).is_ok())
}

/// A regular file the walk met, as the searches take it.
pub(crate) struct Found<'e, 'p> {
    /// Its path beneath the workspace root.
    pub(crate) rel: &'e [u8],
    /// Its path beneath the searched directory.
    pub(crate) below: &'e [u8],
    /// The probe, when the file is hidden: then it is only named in the probe's note.
    pub(crate) hidden: Option<&'p HiddenProbe>,
}

/// `entry` as a file to search, or `None` when the searches skip it: not a regular file
/// (directories are walked, symlinks are never followed), not beneath `ws_root`, or hidden
/// once the probe's budget is spent.
pub(crate) fn found<'e, 'p>(
    entry: &'e DirEntry,
    ws_root: &[u8],
    search_prefix: &[u8],
    probe: Option<&'p HiddenProbe>,
) -> Option<Found<'e, 'p>> {
    if !entry.file_type().is_some_and(|t| t.is_file()) {
        return None;
    }
    let rel = rel_bytes(entry.path(), ws_root)?;
    let under = below(rel, search_prefix);
    let hidden = probe.filter(|_| entry.depth() > 0 && is_hidden_below(under));
    if hidden.is_some_and(|p| !p.take_file()) {
        return None;
    }
    Some(Found {
        rel,
        below: under,
        hidden,
    })
}

/// The bytes of `path` below `root_len` bytes of workspace-root prefix (and its `/`), or `None`
/// when `path` is the root itself or not beneath it.
pub(crate) fn rel_bytes<'a>(path: &'a Path, root: &[u8]) -> Option<&'a [u8]> {
    let bytes = path.as_os_str().as_bytes();
    let rest = bytes.strip_prefix(root)?;
    if root.is_empty() || root.ends_with(b"/") {
        return (!rest.is_empty()).then_some(rest);
    }
    match rest.split_first() {
        Some((b'/', rel)) if !rel.is_empty() => Some(rel),
        _ => None,
    }
}

/// `bytes` below a search root that is `prefix` (workspace-relative, without trailing `/`; empty
/// for the workspace root).
pub(crate) fn below<'a>(rel: &'a [u8], prefix: &[u8]) -> &'a [u8] {
    if prefix.is_empty() {
        return rel;
    }
    match rel.strip_prefix(prefix) {
        Some([b'/', rest @ ..]) => rest,
        _ => rel,
    }
}

/// A path for cap-std calls from workspace-relative bytes.
pub(crate) fn as_path(rel: &[u8]) -> &Path {
    Path::new(OsStr::from_bytes(rel))
}

/// Workspace-relative bytes as display text (lossy for non-UTF-8 names).
pub(crate) fn display(rel: &[u8]) -> String {
    String::from_utf8_lossy(rel).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rel_bytes_strips_the_root() {
        let p = Path::new("/ws/a/b.rs");
        assert_eq!(rel_bytes(p, b"/ws"), Some(&b"a/b.rs"[..]));
        assert_eq!(rel_bytes(Path::new("/ws"), b"/ws"), None);
        assert_eq!(rel_bytes(Path::new("/wsx/a"), b"/ws"), None);
        assert_eq!(rel_bytes(Path::new("/a"), b"/"), Some(&b"a"[..]));
    }

    #[test]
    fn the_hidden_note_fills_the_hint_from_the_first_name() {
        let hint = "give one as path (e.g. `{file}`), or name it in glob (e.g. `{glob}`)";
        let h = HiddenSkipped {
            count: 7,
            names: vec![".github/workflows/ci.yml".into(), "src/.env".into()],
            unchecked: false,
        };
        assert_eq!(
            hidden_note(&h, hint).as_deref(),
            Some(
                "[7 hidden files would also match: .github/workflows/ci.yml, src/.env and 5 more; \
                 give one as path (e.g. `.github/workflows/ci.yml`), or name it in glob (e.g. \
                 `.github/**`)]\n"
            )
        );
        let one = HiddenSkipped {
            count: 1,
            names: vec!["src/.env".into()],
            unchecked: false,
        };
        assert!(
            hidden_note(&one, hint).is_some_and(
                |n| n.starts_with("[1 hidden file would") && n.contains("`src/.env`)]")
            )
        );
        assert_eq!(hidden_note(&HiddenSkipped::default(), hint), None);
        // The budget ran out before any match: the note says so, with the hint's own example.
        let unchecked = HiddenSkipped {
            unchecked: true,
            ..HiddenSkipped::default()
        };
        let note = hidden_note(&unchecked, hint).unwrap_or_default();
        assert!(
            note.starts_with("[hidden files were not all searched"),
            "{note}"
        );
        assert!(
            note.contains("`.env`") && note.contains("`.github/**`"),
            "{note}"
        );
    }

    #[test]
    fn below_strips_the_search_root() {
        assert_eq!(below(b"src/a.rs", b"src"), b"a.rs");
        assert_eq!(below(b"src/a.rs", b""), b"src/a.rs");
        assert_eq!(below(b"srcx/a.rs", b"src"), b"srcx/a.rs");
    }
}
