//! The walker every search tool shares, and turning its absolute paths back into
//! workspace-relative ones.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ignore::{DirEntry, WalkBuilder};
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

/// Like [`builder`] with hidden entries skipped, counting in `skipped` the hidden entries
/// pruned that could have mattered: every hidden directory, and the hidden files `counts`
/// accepts (a glob would match them).
pub(crate) fn builder_counting_hidden(
    ws: &Workspace,
    root: &Path,
    skipped: Arc<AtomicU64>,
    counts: impl Fn(&DirEntry) -> bool + Send + Sync + 'static,
) -> WalkBuilder {
    let mut b = base(root);
    let off_limits = ws.hidden_paths();
    // The walker's own hidden filter runs before `filter_entry` and cannot count, so hidden
    // names are pruned here instead; ignored entries were already dropped by then.
    b.hidden(false).filter_entry(move |e| {
        if is_pruned(e) || off_limits.iter().any(|p| e.path() == p) {
            return false;
        }
        if e.depth() > 0 && is_hidden(e.file_name()) {
            let ft = e.file_type();
            if ft.is_some_and(|t| t.is_dir()) || (ft.is_some_and(|t| t.is_file()) && counts(e)) {
                skipped.fetch_add(1, Ordering::Relaxed);
            }
            return false;
        }
        true
    });
    b
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

/// The line that says hidden entries were skipped and how to include them, if any were.
pub(crate) fn hidden_note(skipped: u64) -> Option<String> {
    match skipped {
        0 => None,
        1 => Some("[1 hidden entry skipped; pass hidden: true to include them]\n".into()),
        n => Some(format!(
            "[{n} hidden entries skipped; pass hidden: true to include them]\n"
        )),
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
    fn below_strips_the_search_root() {
        assert_eq!(below(b"src/a.rs", b"src"), b"a.rs");
        assert_eq!(below(b"src/a.rs", b""), b"src/a.rs");
        assert_eq!(below(b"srcx/a.rs", b"src"), b"srcx/a.rs");
    }
}
