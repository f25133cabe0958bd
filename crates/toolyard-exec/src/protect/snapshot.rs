//! What a snapshot holds of each protected path: kinds, stamps, the nodes captured within a
//! budget, and how a later state is compared with them.

use super::fs::{dup_dir, list_dir, open_dir_at, read_small};
use super::*;

/// The file type as far as protection cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum Kind {
    Dir,
    File,
    Link,
    Other,
}

/// What identifies a file's version when its bytes were not kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Stamp {
    dev: u64,
    ino: u64,
    size: i64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    mode: u32,
}

impl Stamp {
    pub(super) fn of(st: &FileStat) -> Self {
        Self {
            dev: st.st_dev,
            ino: st.st_ino,
            size: st.st_size,
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
            mode: st.st_mode,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) enum Node {
    /// A regular file; `bytes` is `None` when it was too large to keep.
    File {
        mode: u32,
        bytes: Option<Vec<u8>>,
        stamp: Stamp,
    },
    Link {
        target: OsString,
    },
    Dir {
        mode: u32,
        children: BTreeMap<OsString, Node>,
    },
    /// A special file, or a directory past the entry budget: only its stat is known.
    Unscanned {
        kind: Kind,
        stamp: Stamp,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) enum State {
    /// The path does not exist: an ancestor or the path itself is missing.
    Absent,
    /// The ancestor made of the first `depth` components is not a directory.
    Blocked { depth: usize, node: Node },
    /// The path exists, reached through real directories only.
    Present(Node),
}

pub(super) struct Budget {
    pub(super) bytes: u64,
    pub(super) entries: usize,
}

impl Budget {
    /// What one snapshot may keep of one kind of path.
    pub(super) fn fresh() -> Self {
        Self {
            bytes: MAX_KEPT_TOTAL,
            entries: MAX_ENTRIES,
        }
    }
}

/// Whether `rel` is (beneath) a path held read-only in this runner's mount namespace (and not
/// a [`WATCHED`] one, bound writable again beneath it).
pub(super) fn is_held(root: &Path, rel: &str) -> bool {
    if WATCHED.iter().any(|w| beneath_or_at(rel, w)) {
        return false;
    }
    let path = root.join(rel);
    crate::sandbox::held_read_only()
        .iter()
        .any(|h| path.starts_with(h))
}

/// The states of `rels`. Editor and agent directories (a home's `.claude/` holds gigabytes of
/// transcripts) get a budget of their own, so they never crowd out the code-bearing files.
pub(super) fn capture_paths<'a>(
    root: BorrowedFd<'_>,
    rels: impl Iterator<Item = &'a String>,
) -> Vec<(String, State)> {
    let (mut code, mut bulk) = (Budget::fresh(), Budget::fresh());
    rels.map(|rel| {
        let budget = if BULK.contains(&rel.as_str()) {
            &mut bulk
        } else {
            &mut code
        };
        (rel.clone(), capture_entry(root, rel, budget))
    })
    .collect()
}

pub(super) fn capture_entry(root: BorrowedFd<'_>, rel: &str, budget: &mut Budget) -> State {
    let comps: Vec<&str> = rel.split('/').collect();
    let Some((last, ancestors)) = comps.split_last() else {
        return State::Absent;
    };
    let mut dir = match dup_dir(root) {
        Ok(fd) => fd,
        Err(_) => return State::Absent,
    };
    for (i, comp) in ancestors.iter().enumerate() {
        let name = OsStr::new(comp);
        match lstat_at(dir.as_fd(), name) {
            None => return State::Absent,
            Some(st) if kind(&st) == Kind::Dir => match open_dir_at(dir.as_fd(), name) {
                Ok(fd) => dir = fd,
                Err(_) => return State::Absent,
            },
            Some(_) => {
                return match capture(dir.as_fd(), name, comps[..=i].join("/").as_str(), budget) {
                    Some(node) => State::Blocked { depth: i + 1, node },
                    None => State::Absent,
                };
            }
        }
    }
    match capture(dir.as_fd(), OsStr::new(last), rel, budget) {
        Some(node) => State::Present(node),
        None => State::Absent,
    }
}

/// Record `name` in `dir` (never following a symlink); `None` when it does not exist.
pub(super) fn capture(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    rel: &str,
    budget: &mut Budget,
) -> Option<Node> {
    let st = lstat_at(dir, name)?;
    let stamp = Stamp::of(&st);
    let mode = st.st_mode & 0o7777;
    let k = kind(&st);
    if budget.entries == 0 {
        return Some(Node::Unscanned { kind: k, stamp });
    }
    budget.entries -= 1;
    Some(match k {
        Kind::Link => match readlinkat(dir, name) {
            Ok(target) => Node::Link { target },
            Err(_) => Node::Unscanned { kind: k, stamp },
        },
        Kind::File => {
            let size = u64::try_from(st.st_size).unwrap_or(u64::MAX);
            let bytes = if size <= MAX_KEPT_FILE && size <= budget.bytes {
                read_small(dir, name)
            } else {
                None
            };
            if let Some(b) = &bytes {
                budget.bytes = budget.bytes.saturating_sub(b.len() as u64);
            }
            Node::File { mode, bytes, stamp }
        }
        Kind::Dir => match open_dir_at(dir, name) {
            Ok(sub) => {
                let mut children = BTreeMap::new();
                for child in list_dir(sub.as_fd()).unwrap_or_default() {
                    let child_rel = join_rel(rel, &child.to_string_lossy());
                    if is_unprotected(&child_rel) {
                        continue;
                    }
                    if let Some(node) = capture(sub.as_fd(), &child, &child_rel, budget) {
                        children.insert(child, node);
                    }
                }
                Node::Dir { mode, children }
            }
            Err(_) => Node::Unscanned { kind: k, stamp },
        },
        Kind::Other => Node::Unscanned { kind: k, stamp },
    })
}

/// Whether `name` in `dir` is still what `node` recorded (deeply).
pub(super) fn unchanged(dir: BorrowedFd<'_>, name: &OsStr, rel: &str, node: &Node) -> bool {
    let mut budget = Budget {
        bytes: MAX_KEPT_TOTAL,
        entries: MAX_ENTRIES,
    };
    capture(dir, name, rel, &mut budget).is_some_and(|now| same(node, &now))
}

pub(super) fn same(a: &Node, b: &Node) -> bool {
    match (a, b) {
        (
            Node::File {
                mode: ma,
                bytes: Some(ba),
                ..
            },
            Node::File {
                mode: mb,
                bytes: Some(bb),
                ..
            },
        ) => ma == mb && ba == bb,
        (Node::File { stamp: sa, .. }, Node::File { stamp: sb, .. }) => sa == sb,
        (Node::Link { target: ta }, Node::Link { target: tb }) => ta == tb,
        (
            Node::Dir {
                mode: ma,
                children: ca,
            },
            Node::Dir {
                mode: mb,
                children: cb,
            },
        ) => {
            ma == mb
                && ca.len() == cb.len()
                && ca
                    .iter()
                    .all(|(k, v)| cb.get(k).is_some_and(|w| same(v, w)))
        }
        (Node::Unscanned { stamp: sa, .. }, Node::Unscanned { stamp: sb, .. }) => sa == sb,
        _ => false,
    }
}

pub(super) fn what(node: &Node) -> String {
    match node {
        Node::File { .. } => "a file".into(),
        Node::Link { target } => format!("a symlink to {}", target.to_string_lossy()),
        Node::Dir { .. } => "a directory".into(),
        Node::Unscanned { kind, .. } => kind_name(*kind).into(),
    }
}

pub(super) fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Dir => "a directory",
        Kind::File => "a file",
        Kind::Link => "a symlink",
        Kind::Other => "a special file",
    }
}
