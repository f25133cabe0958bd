//! Landlock file-system rules: write only in the allowed trees, read everything but the denied.
//!
//! Landlock only grants (a rule on a directory grants its whole subtree), so "read everything
//! except ~/.ssh" is expressed by splitting: `/` is granted entry by entry wherever a denied path
//! lies beneath, recursively, so everything beside the denied trees stays readable. The
//! directories split this way (e.g. `/` and `~`) get the listing right only, so `ls ~` works;
//! that right is inherited, so names under a denied tree stay listable, never their contents.
//! Symlinks are skipped: Landlock checks the resolved file, so the target's own rule applies.

use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope,
};

use super::SandboxError;
use super::report::FeatureStatus;

/// The newest ABI whose rights we ask for; older kernels get what they support.
const ABI_WANTED: ABI = ABI::V6;

/// Devices any shell needs to write (and ioctl, for terminals).
const WRITABLE_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
];

/// The outcome of applying the rules, for the report.
pub(crate) struct FsOutcome {
    pub status: FeatureStatus,
    pub detail: String,
    pub scope_status: FeatureStatus,
    pub no_new_privs: bool,
}

/// Restrict this thread (and what it starts later) to the given trees.
pub(crate) fn restrict(
    writable: &[PathBuf],
    denied: &[PathBuf],
) -> Result<FsOutcome, SandboxError> {
    let err = |e: landlock::RulesetError| SandboxError::Landlock(e.to_string());
    let status = ruleset(writable, denied)?.restrict_self().map_err(err)?;
    let writes = writable
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let denies = denied
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let (fs_status, note) = match status.ruleset {
        RulesetStatus::FullyEnforced => (FeatureStatus::Enforced, String::new()),
        RulesetStatus::PartiallyEnforced => (
            FeatureStatus::Partial,
            format!(
                " (kernel Landlock older than ABI {}: some rights not restricted)",
                ABI_WANTED as i32
            ),
        ),
        RulesetStatus::NotEnforced => (
            FeatureStatus::NotEnforced,
            " (Landlock is not supported or not enabled by this kernel)".to_string(),
        ),
    };
    let scope_status = match status.ruleset {
        RulesetStatus::FullyEnforced => FeatureStatus::Enforced,
        _ => FeatureStatus::NotEnforced,
    };
    Ok(FsOutcome {
        status: fs_status,
        detail: format!(
            "writes only in: {writes} (+ /dev/null and terminals); file contents unreadable under: {denies}{note}"
        ),
        scope_status,
        no_new_privs: status.no_new_privs,
    })
}

/// A ruleset for one more, nested domain per command, stricter than its runner's: writes only
/// in `writable` and no access at all under `denied` (Toolyard's own state: the runner writes
/// its spill files and quarantine there, its commands may not even read it). Being its own
/// domain, it also makes the kernel refuse the command ptrace and `/proc/<pid>` access
/// (descriptors, environment, memory) to its runner, the runner's other commands and the
/// server, and (ABI 6) signals to them. `None` without Landlock.
pub(crate) fn command_layer(
    writable: &[PathBuf],
    denied: &[PathBuf],
    readable: &[PathBuf],
) -> Option<std::os::fd::OwnedFd> {
    match ruleset(writable, denied).and_then(|r| grant_read(r, readable)) {
        Ok(ruleset) => Option::<std::os::fd::OwnedFd>::from(ruleset),
        Err(e) => {
            tracing::warn!(error = %e, "cannot build the commands' Landlock domain");
            None
        }
    }
}

/// `rules` plus read access to `paths` (trees inside a denied one that stay readable).
fn grant_read(
    mut rules: RulesetCreated,
    paths: &[PathBuf],
) -> Result<RulesetCreated, SandboxError> {
    let read = AccessFs::from_read(ABI_WANTED);
    for path in paths {
        let Ok(fd) = PathFd::new(path) else { continue };
        rules = rules
            .add_rule(PathBeneath::new(fd, read))
            .map_err(|e| SandboxError::Landlock(e.to_string()))?;
    }
    Ok(rules)
}

/// The rules: every right handled; `writable` trees get all of them (but making device
/// nodes), everything else outside `denied` is readable, the terminal devices writable.
/// Handling every right matters for nesting too: Landlock denies reparenting (a rename or link
/// into another directory, with EXDEV) in any domain that does not handle `Refer`.
fn ruleset(writable: &[PathBuf], denied: &[PathBuf]) -> Result<RulesetCreated, SandboxError> {
    let all = AccessFs::from_all(ABI_WANTED);
    let read = AccessFs::from_read(ABI_WANTED);
    let file_read = read & AccessFs::from_file(ABI_WANTED);
    let device = AccessFs::WriteFile
        | AccessFs::ReadFile
        | AccessFs::Truncate
        | AccessFs::IoctlDev
        | AccessFs::ReadDir;
    // Device nodes are never made, even by root: one in the workspace would write outside it.
    let writable_access = all & !(AccessFs::MakeChar | AccessFs::MakeBlock);

    let err = |e: landlock::RulesetError| SandboxError::Landlock(e.to_string());
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(err)?
        .scope(Scope::from_all(ABI_WANTED))
        .map_err(err)?
        .create()
        .map_err(err)?;

    let mut readable = Vec::new();
    let mut listable = Vec::new();
    split_readable(Path::new("/"), denied, &mut readable, &mut listable);
    for path in &listable {
        let Ok(fd) = PathFd::new(path) else { continue };
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, AccessFs::ReadDir))
            .map_err(err)?;
    }
    for path in &readable {
        let Ok(fd) = PathFd::new(path) else { continue };
        let access = if path.is_dir() { read } else { file_read };
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, access))
            .map_err(err)?;
    }
    // A writable tree holding a denied one (a workspace at `~` holds Toolyard's state) is
    // granted piece by piece around it, as `/` is for reading: the directories split on the
    // way only list, so nothing new can be made directly in them.
    for path in writable {
        PathFd::new(path).map_err(|e| SandboxError::Path {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        let (mut pieces, mut split) = (Vec::new(), Vec::new());
        split_readable(path, denied, &mut pieces, &mut split);
        for dir in &split {
            let Ok(fd) = PathFd::new(dir) else { continue };
            ruleset = ruleset
                .add_rule(PathBeneath::new(fd, AccessFs::ReadDir))
                .map_err(err)?;
        }
        for piece in &pieces {
            let Ok(fd) = PathFd::new(piece) else { continue };
            let access = if piece.is_dir() {
                writable_access
            } else {
                writable_access & AccessFs::from_file(ABI_WANTED)
            };
            ruleset = ruleset
                .add_rule(PathBeneath::new(fd, access))
                .map_err(err)?;
        }
    }
    for dev in WRITABLE_DEVICES {
        let path = Path::new(dev);
        let Ok(fd) = PathFd::new(path) else { continue };
        let access: BitFlags<AccessFs> = if path.is_dir() {
            device
        } else {
            device & AccessFs::from_file(ABI_WANTED)
        };
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, access))
            .map_err(err)?;
    }
    Ok(ruleset)
}

/// Push the paths to grant read on (all of `dir` except the `denied` trees) to `out`, and the
/// directories split on the way to a denied tree to `listable`.
pub(crate) fn split_readable(
    dir: &Path,
    denied: &[PathBuf],
    out: &mut Vec<PathBuf>,
    listable: &mut Vec<PathBuf>,
) {
    if denied.iter().any(|d| d == dir) {
        return;
    }
    if !denied.iter().any(|d| d.starts_with(dir)) {
        out.push(dir.to_path_buf());
        return;
    }
    listable.push(dir.to_path_buf());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_symlink() {
            continue;
        }
        split_readable(&entry.path(), denied, out, listable);
    }
}

/// The Landlock ABI this kernel supports (0 when none).
pub(crate) fn kernel_abi() -> i32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: the documented version query: null attr, zero size, the VERSION flag.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    i32::try_from(v).unwrap_or(0).max(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_grants_siblings_and_skips_the_denied_tree() {
        let root = tempfile::tempdir().unwrap();
        let home = root.path().join("home");
        for d in ["home/.ssh", "home/proj/src", "other"] {
            std::fs::create_dir_all(root.path().join(d)).unwrap();
        }
        std::fs::write(home.join("notes.txt"), "x").unwrap();
        let (mut out, mut listable) = (Vec::new(), Vec::new());
        split_readable(root.path(), &[home.join(".ssh")], &mut out, &mut listable);
        out.sort();
        assert_eq!(listable, vec![root.path().to_path_buf(), home.clone()]);
        let mut want = vec![
            home.join("notes.txt"),
            home.join("proj"),
            root.path().join("other"),
        ];
        want.sort();
        assert_eq!(out, want);
    }
}
