//! One line under a failed command's output when the lane's sandbox is what refused it: what
//! was refused, by which rule, and what to do instead. A bare "Permission denied" sends a
//! model to file modes and mounts; this names the boundary.
//!
//! The output is only a hint of what failed, so every guess is checked against the lane's own
//! rules: a path is blamed on the sandbox only when it lies outside every writable tree (or
//! inside a denied one), and the network only in a lane that has none.

use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

use toolyard_core::Lane;

/// What this runner's sandbox allows, recorded by `apply` for [`explain`].
#[derive(Debug, Clone)]
pub struct LaneRules {
    /// The lane.
    pub lane: Lane,
    /// Trees commands may write (canonical).
    pub writable: Vec<PathBuf>,
    /// Trees whose contents no command may read.
    pub denied: Vec<PathBuf>,
    /// Protected paths held read-only.
    pub protected: Vec<PathBuf>,
    /// Whether the lane has no network (no-net isolated by a namespace or seccomp).
    pub offline: bool,
    /// Toolyard's state tree, out of every command's reach.
    pub state: Option<PathBuf>,
}

static RULES: OnceLock<LaneRules> = OnceLock::new();

/// Record this process's sandbox rules (once, from `apply`).
pub(crate) fn record(rules: LaneRules) {
    let _ = RULES.set(rules);
}

/// The rules of this process's sandbox, when one was applied.
pub fn rules() -> Option<&'static LaneRules> {
    RULES.get()
}

/// The note for a command's output run in `cwd` under this process's sandbox, if the
/// sandbox refused it something.
pub fn explain(output: &str, cwd: &Path) -> Option<String> {
    explain_with(rules()?, output, cwd)
}

/// How many lines above a refusal may name its path.
const CONTEXT_LINES: usize = 4;

/// Messages that mean a file access was refused.
const FILE_REFUSALS: &[&str] = &[
    "Permission denied",
    "os error 13",
    "EACCES",
    "Read-only file system",
    "os error 30",
    "EROFS",
    "Operation not permitted",
    "os error 1)",
    "EPERM",
    "Invalid cross-device link",
    "os error 18",
    "EXDEV",
    // A rename onto a path held read-only (a mount point).
    "Device or resource busy",
    "os error 16",
    "EBUSY",
];

/// Messages that mean the network or a name lookup was refused.
const NET_REFUSALS: &[&str] = &[
    "Network is unreachable",
    "os error 101",
    "ENETUNREACH",
    "Could not resolve host",
    "Temporary failure in name resolution",
    "Name or service not known",
    "failed to lookup address",
    "getaddrinfo",
    "EAI_AGAIN",
    "ENOTFOUND",
    "No address associated with hostname",
    "Could not resolve hostname",
    "nodename nor servname",
];

/// [`explain`] against given rules.
pub fn explain_with(rules: &LaneRules, output: &str, cwd: &Path) -> Option<String> {
    let lines: Vec<&str> = output.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        // Without a namespace, Landlock and seccomp refuse a direct connection or a datagram
        // socket with EACCES, which would otherwise read as a file refusal.
        if let Some(gate) = super::egress::active().filter(|g| !g.namespace)
            && [
                "Permission denied",
                "os error 13",
                "EACCES",
                "Couldn't connect to server",
            ]
            .iter()
            .any(|m| line.contains(m))
            && lines[i.saturating_sub(CONTEXT_LINES)..=i].iter().any(|l| {
                let l = l.to_ascii_lowercase();
                l.contains("connect") || l.contains("socket")
            })
        {
            return Some(gated(rules.lane, gate.port));
        }
        if let Some(at) = FILE_REFUSALS.iter().filter_map(|m| line.find(m)).min() {
            // The path named nearest before the cause first, then a few lines above it
            // (cargo's "Caused by:" chain).
            let above = &lines[i.saturating_sub(CONTEXT_LINES)..i];
            let named = paths_in(&line[..at], cwd);
            let bare = named.is_empty();
            let nearest = named.into_iter().rev();
            let earlier = above
                .iter()
                .rev()
                .flat_map(|l| paths_in(l, cwd).into_iter().rev());
            for path in nearest.chain(earlier) {
                if let Some(held) = rules.protected.iter().find(|p| path.starts_with(p)) {
                    return Some(format!(
                        "[sandbox: {} is a protected path, read-only for commands: code there (git hooks, editor and agent configuration, shell start-up files) runs outside the sandbox; leave it alone, or tell the user what to change there and why]",
                        held.display()
                    ));
                }
                if let Some(note) = state_note(rules, &path) {
                    return Some(note);
                }
                if let Some(denied) = rules.denied.iter().find(|d| path.starts_with(d)) {
                    return Some(format!(
                        "[sandbox: reading {} is refused in every lane: {} is a secret location ([sandbox] deny_read in the catalog); work with copies inside the workspace instead]",
                        path.display(),
                        denied.display()
                    ));
                }
                if !rules.writable.iter().any(|w| path.starts_with(w)) && !is_device(&path) {
                    return Some(format!(
                        "[sandbox: writing {} was refused: commands of the {} lane may write only in the workspace, $TMPDIR and the private tool caches (CARGO_HOME, XDG_CACHE_HOME, npm_config_cache, ...); write inside the workspace (set the tool's output, prefix or cache directory there), or let the user add the directory to [sandbox] extra_write in the catalog]",
                        path.display(),
                        rules.lane
                    ));
                }
            }
            // A bare name (`touch: cannot touch 'new.txt'`) made in a directory on the way to
            // the state.
            if bare && let Some(note) = state_note(rules, &cwd.join("new")) {
                return Some(note);
            }
        }
        if let Some(gate) = super::egress::active()
            && !rules.offline
            && NET_REFUSALS.iter().any(|m| line.contains(m))
        {
            return Some(gated(rules.lane, gate.port));
        }
        if rules.offline && NET_REFUSALS.iter().any(|m| line.contains(m)) {
            return Some(format!(
                "[sandbox: the {} lane has no network (only a private loopback; names do not resolve): run the command with a tool of the net lane (run_command), or fetch what it needs there first (cargo fetch, pip download, npm ci) and work offline here]",
                rules.lane
            ));
        }
    }
    None
}

/// The note for `path` when Toolyard's state is why it was refused: it lies in the state, or
/// directly in a directory on the way to it inside a writable tree (a served home), where
/// nothing new can be made.
fn state_note(rules: &LaneRules, path: &Path) -> Option<String> {
    let state = rules.state.as_ref()?;
    if path.starts_with(state) {
        return Some(format!(
            "[sandbox: {} is Toolyard's own state (journal, read ledger, saved outputs), out of every command's reach; use the tools (log, undo, read_file of output:<id>) instead]",
            state.display()
        ));
    }
    let parent = path.parent()?;
    let on_the_way =
        state.starts_with(parent) && rules.writable.iter().any(|w| parent.starts_with(w));
    on_the_way.then(|| {
        format!(
            "[sandbox: nothing new can be made directly in {}: the workspace holds Toolyard's state ({}), which commands may not reach, so the directories on the way to it take no new entries (existing files and subdirectories stay writable); make it in a subdirectory, or serve a project directory instead of one that holds the state]",
            parent.display(),
            state.display()
        )
    })
}

/// The note for a direct connection or a name lookup refused in a lane behind the egress gate.
fn gated(lane: Lane, port: u16) -> String {
    format!(
        "[sandbox: the {lane} lane reaches the network only through Toolyard's egress gate, a proxy at 127.0.0.1:{port} (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY=socks5h://, set for every command): a program that ignores them cannot connect and names do not resolve here; use one that honours them (curl, git, pip, npm, cargo do), or point it at the proxy (e.g. `--proxy $HTTPS_PROXY`); the network: line says what the gate let through and what catalog line allows the rest]"
    )
}

/// Device files (`/dev/...`) are opened by many tools and refused for reasons of their own.
fn is_device(path: &Path) -> bool {
    path.starts_with("/dev") || path.starts_with("/proc") || path.starts_with("/sys")
}

/// The file paths a message line names: absolute ones, `~/` ones, and relative ones with a `/`
/// (resolved against `cwd`), cleaned of `.` and `..` without touching the disk.
fn paths_in(line: &str, cwd: &Path) -> Vec<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let mut out = Vec::new();
    let quoted = |c: char| matches!(c, '\'' | '"' | '`' | '‘' | '’' | '“' | '”');
    for (n, raw) in line
        .split(|c: char| c.is_whitespace() || quoted(c))
        .enumerate()
    {
        // `/bin/sh: 1: cannot create ...`: the program that reports, not what it was refused.
        if n == 0 && raw.ends_with(':') {
            continue;
        }
        let token = raw.trim_matches(|c: char| {
            matches!(
                c,
                ':' | ',' | ';' | '(' | ')' | '[' | ']' | '{' | '}' | '<' | '>'
            )
        });
        let path = if token.starts_with('/') {
            PathBuf::from(token)
        } else if let (Some(rest), Some(home)) = (token.strip_prefix("~/"), home.as_ref()) {
            home.join(rest)
        } else if token.contains('/') && !token.contains("://") {
            // Relative: judged where it lands from the working directory.
            cwd.join(token)
        } else {
            continue;
        };
        if path.as_os_str().len() > 1 {
            out.push(clean(&path));
        }
    }
    out
}

/// `path` with `.` and `..` resolved lexically.
fn clean(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(offline: bool) -> LaneRules {
        LaneRules {
            lane: if offline { Lane::NoNet } else { Lane::Net },
            writable: vec!["/work/ws".into(), "/state/tmp/net-1".into()],
            denied: vec!["/home/u/.ssh".into()],
            protected: vec!["/work/ws/.git/hooks".into()],
            offline,
            state: None,
        }
    }

    #[test]
    fn a_write_outside_the_writable_trees_is_blamed_on_the_sandbox() {
        let out = "error: failed to open `/home/u/.cargo/registry/cache/x.crate`\n\nCaused by:\n  Permission denied (os error 13)\n";
        let note = explain_with(&rules(false), out, Path::new("/work/ws")).unwrap();
        assert!(
            note.contains("writing /home/u/.cargo/registry/cache/x.crate"),
            "{note}"
        );
        let out = "mkdir: cannot create directory '/home/u/.local/lib': Permission denied\n";
        let note = explain_with(&rules(false), out, Path::new("/work/ws")).unwrap();
        assert!(
            note.contains("writing /home/u/.local/lib was refused"),
            "{note}"
        );
        assert!(
            note.contains("net lane") && note.contains("extra_write"),
            "{note}"
        );
    }

    #[test]
    fn a_served_home_names_its_state_and_the_directories_on_the_way() {
        let home = LaneRules {
            writable: vec!["/home/u".into()],
            state: Some("/home/u/.local/state/toolyard".into()),
            ..rules(false)
        };
        let out = "touch: cannot touch 'new.txt': Permission denied\n";
        let note = explain_with(&home, out, Path::new("/home/u")).unwrap_or_default();
        assert!(
            note.contains("nothing new can be made directly in /home/u"),
            "{note}"
        );
        let out = "cat: .local/state/toolyard/workspaces/x/state.db: Permission denied\n";
        let note = explain_with(&home, out, Path::new("/home/u")).unwrap_or_default();
        assert!(note.contains("Toolyard's own state"), "{note}");
        let out = "touch: cannot touch 'proj/ro.txt': Permission denied\n";
        assert_eq!(explain_with(&home, out, Path::new("/home/u")), None);
    }

    #[test]
    fn a_refusal_inside_the_workspace_is_not_the_sandbox() {
        for out in [
            "touch: cannot touch '/work/ws/ro.txt': Permission denied",
            "touch: cannot touch 'sub/ro.txt': Permission denied",
            "sh: 1: ./script.sh: Permission denied",
            "cat: /dev/tty: Permission denied",
        ] {
            assert_eq!(
                explain_with(&rules(false), out, Path::new("/work/ws")),
                None,
                "{out}"
            );
        }
        // A relative path that climbs out is judged where it lands.
        let out = "touch: cannot touch '../../etc/x': Permission denied";
        assert!(explain_with(&rules(false), out, Path::new("/work/ws")).is_some());
    }

    #[test]
    fn a_write_to_a_held_path_says_it_is_protected() {
        for out in [
            "/bin/sh: 1: cannot create .git/hooks/pre-commit: Read-only file system",
            "touch: cannot touch '.git/hooks/pre-commit': Read-only file system",
        ] {
            let note = explain_with(&rules(false), out, Path::new("/work/ws")).unwrap();
            assert!(
                note.contains("/work/ws/.git/hooks is a protected path"),
                "{note}"
            );
        }
    }

    #[test]
    fn a_denied_read_names_the_secret_location() {
        let out = "cat: /home/u/.ssh/id_ed25519: Permission denied";
        let note = explain_with(&rules(false), out, Path::new("/work/ws")).unwrap();
        assert!(
            note.contains("deny_read") && note.contains("/home/u/.ssh"),
            "{note}"
        );
    }

    #[test]
    fn name_lookups_are_blamed_only_in_an_offline_lane() {
        let out = "curl: (6) Could not resolve host: example.org";
        let note = explain_with(&rules(true), out, Path::new("/work/ws")).unwrap();
        assert!(note.contains("no-net lane has no network") && note.contains("run_command"));
        assert_eq!(
            explain_with(&rules(false), out, Path::new("/work/ws")),
            None
        );
    }
}
