//! Git config: which keys make git run a program (the one table, shared with the hooks' auto-
//! commit), the programs a workspace's git config names, and package-manager links.

use super::snapshot::Node;
use super::*;

/// Whether the change at `name` in `node_modules/.bin` is a package manager's: a link made or
/// changed to point into a package in `node_modules`, or a link removed.
pub(super) fn package_link_change(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    before: Option<&Node>,
    now: Option<&FileStat>,
) -> bool {
    match now {
        None => matches!(before, Some(Node::Link { .. })),
        Some(st) if kind(st) == Kind::Link => {
            readlinkat(dir, name).is_ok_and(|target| links_into_a_package(Path::new(&target)))
        }
        Some(_) => false,
    }
}

/// Whether `target`, a link's target in `node_modules/.bin`, stays in `node_modules` (and out
/// of `.bin`) as written: relative, never climbing out on the way.
pub(super) fn links_into_a_package(target: &Path) -> bool {
    let mut at: Vec<&OsStr> = vec![OsStr::new("node_modules"), OsStr::new(".bin")];
    for comp in target.components() {
        match comp {
            Component::Normal(name) => at.push(name),
            Component::CurDir => {}
            Component::ParentDir => {
                at.pop();
                if at.is_empty() {
                    return false;
                }
            }
            Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    at.len() > 2 && at[1] != ".bin"
}

/// The first key of git config `bytes` that makes git run a program, if any (read by git
/// itself, without includes, system or global config).
pub(super) fn runs_program(bytes: &[u8]) -> Result<Option<String>, String> {
    Ok(config_entries(None, bytes)?
        .into_iter()
        .find(|(key, value)| key_runs_program(key, value))
        .map(|(key, _)| key))
}

/// Whether `rel` is a git config file whose change from `before` to `now` leaves every key
/// that makes git run a program as it was: `git config user.email`, `git remote add` and
/// `git branch --set-upstream-to` keep working from a command (and a change the user makes
/// meanwhile is never reverted), while a hook path, an alias, a filter or an include is held.
pub(super) fn same_git_programs(rel: &str, before: &[u8], now: Option<&[u8]>) -> bool {
    let is_git_config = Path::new(rel)
        .file_name()
        .is_some_and(|n| n == "config" || n == "config.worktree");
    let Some(now) = now.filter(|_| is_git_config) else {
        return false;
    };
    let programs = |bytes: &[u8]| {
        config_entries(None, bytes).map(|entries| {
            let mut held: Vec<(String, String)> = entries
                .into_iter()
                .filter(|(key, value)| key_runs_program(key, value))
                .collect();
            held.sort();
            held
        })
    };
    matches!((programs(before), programs(now)), (Ok(a), Ok(b)) if a == b)
}

/// The `(key, value)` pairs of the git config in `file`, else in `bytes`, as git itself reads
/// them (no includes, no system or global config, no home).
pub(super) fn config_entries(
    file: Option<&Path>,
    bytes: &[u8],
) -> Result<Vec<(String, String)>, String> {
    let mut cmd = Command::new("git");
    cmd.arg("config")
        .arg("--file")
        .arg(file.map_or(OsStr::new("-"), Path::as_os_str))
        .args(["--null", "--list"])
        .env_clear()
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(path) = std::env::var_os("PATH") {
        cmd.env("PATH", path);
    }
    let mut child = cmd.spawn().map_err(|e| format!("cannot run git: {e}"))?;
    let mut stdin = child.stdin.take();
    let input = bytes.to_vec();
    // Feed stdin from another thread: git may write output before it has read everything.
    let feeder = std::thread::spawn(move || {
        if let Some(stdin) = stdin.as_mut() {
            let _ = stdin.write_all(&input);
        }
    });
    let output = child
        .wait_with_output()
        .map_err(|e| format!("git config failed: {e}"))?;
    let _ = feeder.join();
    if !output.status.success() {
        return Err(format!(
            "git cannot read it: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(output
        .stdout
        .split(|b| *b == 0)
        .filter(|item| !item.is_empty())
        .map(|item| {
            let text = String::from_utf8_lossy(item);
            match text.split_once('\n') {
                Some((k, v)) => (k.to_string(), v.to_string()),
                None => (text.into_owned(), String::new()),
            }
        })
        .collect())
}

/// Workspace files that the git config at `config` (in git directory `gitdir`) makes git run
/// or load: the hooks directory, included config files, and programs named by a path.
pub(super) fn config_programs(root: &Path, gitdir: &Path, config: &Path) -> Vec<String> {
    let Ok(meta) = config.symlink_metadata() else {
        return Vec::new();
    };
    if !meta.is_file() || meta.len() > MAX_KEPT_FILE {
        return Vec::new();
    }
    // From the file itself: git refuses relative includes in config read from stdin.
    let Ok(entries) = config_entries(Some(config), &[]) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for (key, value) in entries {
        let lower = key.to_ascii_lowercase();
        let path = if lower == "core.hookspath" {
            // Hook managers (husky) put the packages' programs first on the hooks' PATH.
            found.push(PACKAGE_BINS.to_string());
            // Relative to the working tree, where hooks run.
            Some(root.join(value.trim()))
        } else if lower == "include.path"
            || (lower.starts_with("includeif.") && lower.ends_with(".path"))
        {
            // Relative to the including file.
            Some(gitdir.join(value.trim()))
        } else if key_runs_program(&key, &value) {
            value
                .trim_start()
                .trim_start_matches('!')
                .split_whitespace()
                .next()
                .filter(|word| word.contains('/') && !word.starts_with('~'))
                .map(|word| root.join(word))
        } else {
            None
        };
        if let Some(rel) = path.and_then(|p| inside(root, &p))
            && !rel.is_empty()
        {
            found.push(rel);
        }
    }
    found
}

/// Whether git config `key` (as `git config --list` prints it: section and name lowercased)
/// with `value` makes git run a program or load more config.
pub fn key_runs_program(key: &str, value: &str) -> bool {
    git_program(key, value).is_some()
}

/// What kind of program a git config key makes git run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GitProgram {
    /// A filter driver: run on file contents by `add`, `status`, `checkout` and `commit`
    /// alike, and not switched off by any fixed command-line option.
    Filter,
    /// Anything else: hooks, fsmonitor, signing, editors, pagers, credential helpers, diff
    /// and merge drivers, aliases, remote helpers, included config.
    Other,
}

/// The kind of program git config `key` with `value` makes git run (or the config it makes
/// git load); `None` when it makes git run none. The one table of such keys: protected paths
/// and the hooks' auto-commit both ask it.
pub fn git_program(key: &str, value: &str) -> Option<GitProgram> {
    let (section, rest) = key.split_once('.').unwrap_or((key, ""));
    let section = section.to_ascii_lowercase();
    let name = rest.rsplit('.').next().unwrap_or("").to_ascii_lowercase();
    let has_sub = rest.contains('.');
    if section == "filter" {
        return Some(GitProgram::Filter);
    }
    let other = match section.as_str() {
        "core" => matches!(
            name.as_str(),
            "fsmonitor"
                | "hookspath"
                | "sshcommand"
                | "gitproxy"
                | "askpass"
                | "editor"
                | "pager"
                | "alternaterefscommand"
        ),
        "sequence" => name == "editor",
        "credential" => name == "helper",
        "gpg" => name == "program" || name.ends_with("command"),
        "include" | "includeif" | "protocol" | "pager" => true,
        "diff" => name == "external" || (has_sub && (name == "textconv" || name == "command")),
        "merge" => has_sub && name == "driver",
        "alias" => value.trim_start().starts_with('!'),
        "uploadpack" => name == "packobjectshook",
        "interactive" => name == "difffilter",
        "difftool" | "mergetool" | "man" | "browser" => name == "cmd" || name == "path",
        "web" => name == "browser",
        "remote" => matches!(name.as_str(), "uploadpack" | "receivepack" | "vcs"),
        "submodule" => name == "update" && value.trim_start().starts_with('!'),
        "sendemail" => name.ends_with("cmd") || name == "smtpserver",
        _ => false,
    };
    other.then_some(GitProgram::Other)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_links_stay_in_node_modules() {
        for ok in [
            "../eslint/bin/eslint.js",
            "./../a/b",
            "../@scope/pkg/cli.js",
        ] {
            assert!(links_into_a_package(Path::new(ok)), "{ok}");
        }
        for bad in [
            "../../.git/hooks/x",
            "/usr/bin/sh",
            "evil.sh",
            "../.bin/x",
            "../..",
            "../../node_modules/x/../../../y",
            "..",
        ] {
            assert!(!links_into_a_package(Path::new(bad)), "{bad}");
        }
    }

    #[test]
    fn program_keys() {
        for (k, v) in [
            ("core.fsmonitor", "x"),
            ("core.hookspath", "/tmp"),
            ("alias.st", "!sh -c x"),
            ("includeif.gitdir:/x/.path", "y"),
            ("filter.lfs.process", "git-lfs"),
            ("diff.Foo.textconv", "z"),
            ("merge.ours.driver", "true"),
            ("credential.https://h.helper", "store"),
            ("gpg.ssh.program", "x"),
            ("protocol.allow", "always"),
        ] {
            assert!(key_runs_program(k, v), "{k}");
        }
        for (k, v) in [
            ("core.repositoryformatversion", "0"),
            ("core.filemode", "true"),
            ("core.bare", "false"),
            ("core.logallrefupdates", "true"),
            ("remote.origin.url", "https://x"),
            ("remote.origin.fetch", "+refs/heads/*:refs/remotes/origin/*"),
            ("branch.main.remote", "origin"),
            ("alias.st", "status"),
        ] {
            assert!(!key_runs_program(k, v), "{k}");
        }
    }
}
