//! `list_directory` (a two-level tree, seed 002) and `list_files` (seed 003's flat listing).

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use toolyard_core::shape::head_tail;
use toolyard_core::{Annotations, ToolContext, ToolError, ToolInfo, ToolResult, TypedTool};
use toolyard_workspace::{RelPath, Workspace};

use super::{ignores, walk};
use crate::ToolEnv;

/// Most entries `list_directory` shows.
pub const TREE_LIMIT: usize = 500;
/// Most entries `list_files` returns.
pub const LIST_FILES_LIMIT: usize = 1000;
/// `list_files`'s deepest recursion (seed 003).
pub const LIST_FILES_MAX_DEPTH: usize = 10;

const LIST_DIRECTORY_DESCRIPTION: &str = "List a directory as a tree two levels deep: \
directories first (with a trailing `/`), then files with their sizes. Shows hidden files \
(like .github, .env) but skips .git, node_modules, __pycache__, cargo target dirs and \
.gitignored entries; symlinks are shown (`name@`) but not followed. At most 500 entries, \
shared fairly between subdirectories, with counts of what was left out.";

const LIST_FILES_DESCRIPTION: &str = "List files in a directory (glob-like). Non-recursive by \
default; with `recursive`, descends up to `max_depth` levels (default and maximum 10). Skips \
.git, node_modules, __pycache__, cargo target dirs and .gitignored entries; symlinks are not \
followed. Returns at most 1000 entries sorted by path.";

/// Arguments of `list_directory`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListDirectoryArgs {
    /// Directory to list, relative to the working directory (default: `.`).
    #[serde(default)]
    pub path: Option<String>,
}

/// Arguments of `list_files` (seed 003).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListFilesArgs {
    /// Directory path (default: workspace root).
    #[serde(default)]
    pub path: Option<String>,
    /// List files recursively (default: false).
    #[serde(default)]
    pub recursive: Option<bool>,
    /// Maximum recursion depth (default: 10, at most 10).
    #[serde(default)]
    pub max_depth: Option<usize>,
}

/// One entry of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeEntry {
    /// Workspace-relative path.
    pub path: String,
    /// The last path component.
    pub name: String,
    /// Depth below the listed directory (1 = its children).
    pub depth: usize,
    /// A directory.
    pub is_dir: bool,
    /// A symlink (never followed).
    pub is_symlink: bool,
    /// Size in bytes (0 for directories).
    pub size: u64,
}

/// A listing: entries found under a directory, in walk order.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    /// Entries, sorted: per directory, subdirectories first, then by name.
    pub entries: Vec<TreeEntry>,
    /// Whether the walk stopped at its entry cap (more entries exist).
    pub capped: bool,
}

/// Walk `root` to `max_depth` levels, at most `cap` entries (a safety net for huge trees).
///
/// Every directory is opened beneath the workspace root without following symlinks and read
/// through its handle, and every entry is `lstat`ed by name in it: an entry a swapped symlink
/// could show from outside never resolves. Ignore rules come from [`ignores`], cached.
fn walk_entries(
    ws: &Workspace,
    root: &RelPath,
    max_depth: usize,
    cap: usize,
) -> Result<Listing, ToolError> {
    match ws.metadata(root)? {
        None => return Err(ToolError::FileNotFound(root.as_path().to_path_buf())),
        Some(m) if !m.is_dir() => {
            return Err(ToolError::InvalidArguments(format!(
                "{root} is a file, not a directory; use read_file to read it"
            )));
        }
        Some(_) => {}
    }
    let top = if root.is_root() {
        ws.dir().try_clone()
    } else {
        ws.dir().open_dir(root.as_path())
    }
    .map_err(|e| ToolError::Io(format!("cannot open {root}: {e}")))?;
    let abs = ws.absolute(root);
    let mut walk = Walk {
        off_limits: ws.hidden_paths(),
        max_depth,
        cap,
        listing: Listing::default(),
    };
    let rel = if root.is_root() {
        String::new()
    } else {
        root.as_str().to_string()
    };
    // The handle may be a path-only one (cap-std opens directories with O_PATH): reopen it
    // for reading.
    let read_flags = fs::OFlags::RDONLY | fs::OFlags::DIRECTORY | fs::OFlags::CLOEXEC;
    let fd = fs::openat(&top, c".", read_flags, fs::Mode::empty())
        .map_err(|e| ToolError::Io(format!("cannot read {root}: {e}")))?;
    walk.visit(fd, &abs, &rel, 1, &ignores::Rules::for_dir(&abs));
    Ok(walk.listing)
}

/// One listing walk in progress.
struct Walk {
    /// The workspace's hidden parts (Toolyard's state), never listed.
    off_limits: Vec<PathBuf>,
    max_depth: usize,
    cap: usize,
    listing: Listing,
}

impl Walk {
    /// List the directory `fd` (at `abs`, workspace-relative `rel`), its entries at `depth`,
    /// sorted by name, and descend; `false` once the cap stopped the walk.
    ///
    /// Every name comes from the directory itself (one component, no `/`), and is `lstat`ed and
    /// opened relative to its handle without following symlinks: a directory swapped for a
    /// symlink to outside the workspace never resolves.
    fn visit(
        &mut self,
        fd: OwnedFd,
        abs: &Path,
        rel: &str,
        depth: usize,
        rules: &ignores::Rules,
    ) -> bool {
        let Ok(mut read) = fs::Dir::new(fd) else {
            return true;
        };
        let mut names: Vec<CString> = Vec::new();
        while let Some(Ok(e)) = read.read() {
            let n = e.file_name();
            if n != c"." && n != c".." {
                names.push(n.to_owned());
            }
        }
        names.sort_unstable();
        let Ok(dir) = read.fd() else {
            return true;
        };
        for name in names {
            if self.listing.entries.len() >= self.cap {
                self.listing.capped = true;
                return false;
            }
            let os = OsStr::from_bytes(name.to_bytes());
            if walk::ALWAYS_SKIPPED.iter().any(|s| OsStr::new(s) == os) {
                continue;
            }
            let Ok(st) = fs::statat(dir, name.as_c_str(), fs::AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            let ft = fs::FileType::from_raw_mode(st.st_mode);
            let is_dir = ft == fs::FileType::Directory;
            let child_abs = abs.join(os);
            if (is_dir && os == "target" && is_cargo_target(dir, os))
                || self.off_limits.contains(&child_abs)
                || rules.ignored(&child_abs, is_dir)
            {
                continue;
            }
            let shown = os.to_string_lossy().into_owned();
            let child_rel = if rel.is_empty() {
                shown.clone()
            } else {
                format!("{rel}/{shown}")
            };
            self.listing.entries.push(TreeEntry {
                path: child_rel.clone(),
                name: shown,
                depth,
                is_dir,
                is_symlink: ft == fs::FileType::Symlink,
                size: if ft == fs::FileType::RegularFile {
                    st.st_size as u64
                } else {
                    0
                },
            });
            if is_dir && depth < self.max_depth {
                let flags = fs::OFlags::RDONLY
                    | fs::OFlags::DIRECTORY
                    | fs::OFlags::NOFOLLOW
                    | fs::OFlags::CLOEXEC;
                let Ok(sub) = fs::openat(dir, name.as_c_str(), flags, fs::Mode::empty()) else {
                    continue;
                };
                let sub_rules = rules.child(&child_abs, ignores::Stamp::of(&st));
                if !self.visit(sub, &child_abs, &child_rel, depth + 1, &sub_rules) {
                    return false;
                }
            }
        }
        true
    }
}

/// Cargo's build directory (tagged), not a source directory that happens to be called `target`.
fn is_cargo_target(dir: BorrowedFd<'_>, name: &OsStr) -> bool {
    let base = Path::new(name);
    ["CACHEDIR.TAG", ".rustc_info.json"]
        .iter()
        .any(|f| fs::statat(dir, base.join(f), fs::AtFlags::SYMLINK_NOFOLLOW).is_ok())
}

/// `path`'s parent directory within a listing (`""` for the listed directory's children).
fn parent_of(path: &str) -> &str {
    path.rfind('/').map_or("", |i| &path[..i])
}

fn dirs_first(a: &TreeEntry, b: &TreeEntry) -> std::cmp::Ordering {
    b.is_dir.cmp(&a.is_dir).then_with(|| a.name.cmp(&b.name))
}

/// A two-level tree of `root`: the children, and the children of each subdirectory, with the
/// per-directory counts of entries left out to stay within `limit`.
#[derive(Debug, Clone, Default)]
pub struct Tree {
    /// The listed directory.
    pub root: String,
    /// Entries shown, in display order (a child directory is followed by its own children).
    pub shown: Vec<TreeEntry>,
    /// Entries left out per directory path (`""` for the listed directory).
    pub omitted: BTreeMap<String, usize>,
    /// Entries found in all (shown or not).
    pub total: usize,
    /// The walk stopped early (a huge directory): `total` is a lower bound.
    pub walk_capped: bool,
}

/// List `root` two levels deep, at most `limit` entries, dirs first; the budget beyond the
/// top level is shared fairly between the subdirectories.
pub fn tree(ws: &Workspace, root: &RelPath, limit: usize) -> Result<Tree, ToolError> {
    // Walk a generous amount more than is shown so the counts of what was left out are exact
    // for ordinary trees, while a directory with millions of entries stays bounded.
    let listing = walk_entries(ws, root, 2, limit.saturating_mul(40).max(10_000))?;
    let mut top: Vec<TreeEntry> = Vec::new();
    let mut children: BTreeMap<String, Vec<TreeEntry>> = BTreeMap::new();
    for e in listing.entries {
        if e.depth == 1 {
            top.push(e);
        } else {
            children
                .entry(parent_of(&e.path).to_string())
                .or_default()
                .push(e);
        }
    }
    let total = top.len() + children.values().map(Vec::len).sum::<usize>();
    top.sort_by(dirs_first);
    let mut out = Tree {
        root: root.to_string(),
        total,
        ..Tree::default()
    };
    let top_shown = top.len().min(limit);
    if top.len() > top_shown {
        out.omitted.insert(String::new(), top.len() - top_shown);
    }
    top.truncate(top_shown);
    // Water-fill: the largest per-directory quota whose total fits the remaining budget.
    let budget = limit - top_shown;
    let sizes: Vec<usize> = top
        .iter()
        .filter(|e| e.is_dir)
        .map(|e| children.get(&e.path).map_or(0, Vec::len))
        .collect();
    let quota = fair_quota(&sizes, budget);
    for entry in top {
        let kids = if entry.is_dir {
            children.remove(&entry.path).unwrap_or_default()
        } else {
            Vec::new()
        };
        let path = entry.path.clone();
        out.shown.push(entry);
        let mut kids = kids;
        kids.sort_by(dirs_first);
        if kids.len() > quota {
            out.omitted.insert(path, kids.len() - quota);
            kids.truncate(quota);
        }
        out.shown.extend(kids);
    }
    out.walk_capped = listing.capped;
    Ok(out)
}

/// The largest `q` with `sum(min(size, q)) <= budget`.
fn fair_quota(sizes: &[usize], budget: usize) -> usize {
    let max = sizes.iter().copied().max().unwrap_or(0);
    if sizes.iter().sum::<usize>() <= budget {
        return max;
    }
    let (mut lo, mut hi) = (0, max);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if sizes.iter().map(|&s| s.min(mid)).sum::<usize>() <= budget {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

/// Sizes as a person reads them: `512 B`, `1.2 KB`, `3.4 MB`.
pub fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// The tree as text: `├──`/`└──` branches, `name/` for directories, `name@` for symlinks.
pub fn render_tree(tree: &Tree) -> String {
    let mut out = format!("{}/\n", tree.root.trim_end_matches('/'));
    let top: Vec<&TreeEntry> = tree.shown.iter().filter(|e| e.depth == 1).collect();
    let top_more = tree.omitted.get("").copied().unwrap_or(0);
    for (i, entry) in top.iter().enumerate() {
        let last = i + 1 == top.len() && top_more == 0;
        out.push_str(if last { "└── " } else { "├── " });
        out.push_str(&label(entry));
        out.push('\n');
        if !entry.is_dir {
            continue;
        }
        let indent = if last { "    " } else { "│   " };
        let kids: Vec<&TreeEntry> = tree
            .shown
            .iter()
            .filter(|e| e.depth == 2 && parent_of(&e.path) == entry.path)
            .collect();
        let more = tree.omitted.get(&entry.path).copied().unwrap_or(0);
        for (j, kid) in kids.iter().enumerate() {
            let klast = j + 1 == kids.len() && more == 0;
            out.push_str(indent);
            out.push_str(if klast { "└── " } else { "├── " });
            out.push_str(&label(kid));
            out.push('\n');
        }
        if more > 0 {
            out.push_str(&format!("{indent}└── … {more} more\n"));
        }
    }
    if top_more > 0 {
        out.push_str(&format!("└── … {top_more} more\n"));
    }
    out
}

fn label(e: &TreeEntry) -> String {
    if e.is_symlink {
        format!("{}@", e.name)
    } else if e.is_dir {
        format!("{}/", e.name)
    } else {
        format!("{} ({})", e.name, human_size(e.size))
    }
}

/// What a listing of an empty `root` says, naming it plainly.
fn empty_message(root: &RelPath) -> String {
    let place = if root.is_root() {
        "The workspace root".to_string()
    } else {
        root.to_string()
    };
    format!("{place} is empty (or holds only ignored entries).\n")
}

/// The `list_directory` tool (loopr dialect).
pub struct ListDirectoryTool {
    env: Arc<ToolEnv>,
}

impl ListDirectoryTool {
    /// A `list_directory` over `env`'s workspace.
    pub fn new(env: Arc<ToolEnv>) -> Self {
        Self { env }
    }
}

#[async_trait]
impl TypedTool for ListDirectoryTool {
    type Args = ListDirectoryArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new(
            "list_directory",
            LIST_DIRECTORY_DESCRIPTION,
            Annotations::READ_ONLY,
        )
    }

    async fn run(
        &self,
        args: ListDirectoryArgs,
        ctx: &ToolContext,
    ) -> Result<ToolResult, ToolError> {
        let path = args.path.as_deref().unwrap_or(".");
        let root = self.env.workspace.locate(path, &ctx.cwd)?;
        let env = self.env.clone();
        let rel = root.clone();
        let tree = super::blocking(move || tree(&env.workspace, &rel, TREE_LIMIT)).await?;
        let mut text = if tree.total == 0 {
            empty_message(&root)
        } else {
            render_tree(&tree)
        };
        let omitted: usize = tree.omitted.values().sum();
        if omitted > 0 || tree.walk_capped {
            let at_least = if tree.walk_capped { "at least " } else { "" };
            text.push_str(&format!(
                "[{} of {at_least}{} entries shown; list a subdirectory to see more]\n",
                tree.shown.len(),
                tree.total
            ));
        }
        let budget = super::output_budget(&self.env, "list_directory", ctx.max_output_bytes);
        let output = head_tail(&text, budget, Some("list a subdirectory")).text;
        // The tree is the output already; data keeps the counts a program needs beside it.
        let data = json!({
            "path": tree.root,
            "total": tree.total,
            "shown": tree.shown.len(),
            "omitted": omitted,
            "truncated": omitted > 0 || tree.walk_capped,
        });
        Ok(ToolResult::ok(output).with_data(data))
    }
}

/// Seed 003's `list_files`: `{files: [{path, size, is_dir}]}` sorted by path, at most `limit`.
pub fn list_files(
    ws: &Workspace,
    root: &RelPath,
    recursive: bool,
    max_depth: usize,
    limit: usize,
) -> Result<(Vec<TreeEntry>, bool), ToolError> {
    let depth = if recursive {
        max_depth.clamp(1, LIST_FILES_MAX_DEPTH)
    } else {
        1
    };
    let listing = walk_entries(ws, root, depth, limit.saturating_add(1))?;
    let mut entries = listing.entries;
    let truncated = listing.capped || entries.len() > limit;
    entries.truncate(limit);
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    Ok((entries, truncated))
}

/// The `list_files` tool (seed 003's dialect; not registered by [`super::tools`]).
pub struct ListFilesTool {
    env: Arc<ToolEnv>,
}

impl ListFilesTool {
    /// A `list_files` over `env`'s workspace.
    pub fn new(env: Arc<ToolEnv>) -> Self {
        Self { env }
    }
}

#[async_trait]
impl TypedTool for ListFilesTool {
    type Args = ListFilesArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new("list_files", LIST_FILES_DESCRIPTION, Annotations::READ_ONLY)
    }

    async fn run(&self, args: ListFilesArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let path = args.path.as_deref().unwrap_or(".");
        let root = self.env.workspace.locate(path, &ctx.cwd)?;
        let recursive = args.recursive.unwrap_or(false);
        let max_depth = args.max_depth.unwrap_or(LIST_FILES_MAX_DEPTH);
        let env = self.env.clone();
        let rel = root.clone();
        let (entries, truncated) = super::blocking(move || {
            list_files(&env.workspace, &rel, recursive, max_depth, LIST_FILES_LIMIT)
        })
        .await?;
        let mut text = String::new();
        for e in &entries {
            if e.is_dir {
                text.push_str(&format!("{}/\n", e.path));
            } else {
                text.push_str(&format!("{} ({})\n", e.path, human_size(e.size)));
            }
        }
        if entries.is_empty() {
            text = empty_message(&root);
        }
        if truncated {
            text.push_str(&format!(
                "[stopped at {LIST_FILES_LIMIT} entries; list a subdirectory or lower max_depth]\n"
            ));
        }
        let budget = super::output_budget(&self.env, "list_files", ctx.max_output_bytes);
        let output = head_tail(&text, budget, Some("list a subdirectory")).text;
        let files: Vec<_> = entries
            .iter()
            .map(|e| json!({"path": e.path, "size": e.size, "is_dir": e.is_dir}))
            .collect();
        Ok(ToolResult::ok(output).with_data(json!({"files": files, "truncated": truncated})))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_shares_the_budget_fairly() {
        assert_eq!(fair_quota(&[2, 3], 100), 3);
        assert_eq!(fair_quota(&[100, 100, 1], 21), 10);
        assert_eq!(fair_quota(&[], 5), 0);
        assert_eq!(fair_quota(&[5, 5], 0), 0);
    }

    #[test]
    fn sizes_are_human() {
        assert_eq!(human_size(512), "512 B");
        assert_eq!(human_size(1536), "1.5 KB");
        assert_eq!(human_size(5 * 1024 * 1024), "5.0 MB");
    }
}
