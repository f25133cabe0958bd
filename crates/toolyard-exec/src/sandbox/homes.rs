//! Private homes for the state that builds and package managers keep beyond the workspace.
//!
//! Commands may not write the user's own caches (`~/.cargo/registry`, `~/.npm`, ...): whatever
//! a command puts there would later be read, built or run by the user's own tools outside the
//! sandbox (a planted `build.rs` in a shared registry source tree runs at the user's next
//! build). Instead each tool is pointed, through its own environment variables, at a directory
//! of its own under the workspace's Toolyard state (`caches/<tool>`), shared by the lanes of
//! that workspace and by nothing else. What the user already downloaded stays usable where the
//! tool allows it without a write: cargo's private home links to the user's downloaded crates
//! and extracted sources (links the sandbox can read through but never write through) and holds
//! a copy of the registry index.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// One tool's home: the variables that point it at a directory.
pub(crate) struct ToolHome {
    /// The directory under `caches/`, also the name `doctor` shows.
    pub name: &'static str,
    /// Each variable set for commands, and the path under the private home it points at
    /// (`""`: the home itself).
    pub vars: &'static [(&'static str, &'static str)],
}

/// The table of tool homes: one row per tool, the only place these facts live.
pub(crate) const TOOL_HOMES: &[ToolHome] = &[
    ToolHome {
        name: "cargo",
        vars: &[("CARGO_HOME", "")],
    },
    // pip, uv, pre-commit, go's build cache, yarn v1, ccache 4 and most tools that follow the
    // XDG base directories keep their caches under XDG_CACHE_HOME.
    ToolHome {
        name: "xdg-cache",
        vars: &[("XDG_CACHE_HOME", "")],
    },
    ToolHome {
        name: "npm",
        vars: &[("npm_config_cache", "")],
    },
    ToolHome {
        name: "go",
        vars: &[("GOMODCACHE", "mod"), ("GOCACHE", "build")],
    },
    ToolHome {
        name: "gradle",
        vars: &[("GRADLE_USER_HOME", "")],
    },
    ToolHome {
        name: "ccache",
        vars: &[("CCACHE_DIR", "")],
    },
];

/// The variables to set for commands, after making each tool's private home under `caches`.
/// A home that cannot be made is left out (its tool then writes where it would, and the
/// sandbox refuses it, with a note).
pub(crate) fn prepare(caches: &Path, home: Option<&Path>) -> Vec<(&'static str, PathBuf)> {
    let mut vars = Vec::new();
    for tool in TOOL_HOMES {
        let dir = caches.join(tool.name);
        let made = tool
            .vars
            .iter()
            .try_for_each(|(_, sub)| std::fs::create_dir_all(dir.join(sub)));
        if let Err(e) = made {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot make a private tool home");
            continue;
        }
        if tool.name == "cargo" {
            let user = user_cargo_home(home);
            if let Some(user) = user.filter(|u| u.is_dir()) {
                seed_cargo(&user, &dir);
            }
        }
        vars.extend(tool.vars.iter().map(|(var, sub)| (*var, dir.join(sub))));
    }
    vars
}

/// Maven reads no variable for its repository: its option goes into `MAVEN_OPTS`.
pub(crate) fn maven_opts(caches: &Path, current: Option<OsString>) -> OsString {
    let repo = caches.join("maven").join("repository");
    let _ = std::fs::create_dir_all(&repo);
    let mut opts = current.unwrap_or_default();
    if !opts.is_empty() {
        opts.push(" ");
    }
    opts.push(format!("-Dmaven.repo.local={}", repo.display()));
    opts
}

/// The user's cargo home: `CARGO_HOME`, else `~/.cargo`.
fn user_cargo_home(home: Option<&Path>) -> Option<PathBuf> {
    std::env::var_os("CARGO_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| home.map(|h| h.join(".cargo")))
}

/// Make the private cargo home see what the user's has: their configuration and the crates
/// they downloaded (links), and the registry index (a copy, which cargo rewrites as it
/// refreshes). Credentials are never linked. Best effort: what fails is only not seen.
fn seed_cargo(user: &Path, private: &Path) {
    for name in ["config.toml", "config"] {
        let from = user.join(name);
        if from.is_file() {
            relink(&from, &private.join(name));
        }
    }
    let registry = user.join("registry");
    for kind in ["cache", "src"] {
        for_each_entry(&registry.join(kind), |index_dir| {
            let Some(index_name) = index_dir.file_name() else {
                return;
            };
            let to = private.join("registry").join(kind).join(index_name);
            if std::fs::create_dir_all(&to).is_err() {
                return;
            }
            for_each_entry(index_dir, |entry| {
                if let Some(name) = entry.file_name() {
                    link_missing(entry, &to.join(name));
                }
            });
        });
    }
    // Sparse indexes only: a git index is a repository cargo would write into.
    for_each_entry(&registry.join("index"), |index_dir| {
        if index_dir.join(".git").exists() {
            return;
        }
        if let Some(index_name) = index_dir.file_name() {
            copy_newer(
                index_dir,
                &private.join("registry").join("index").join(index_name),
            );
        }
    });
}

fn for_each_entry(dir: &Path, mut f: impl FnMut(&Path)) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        f(&entry.path());
    }
}

/// A link at `at` to `target`, unless something is there already (another lane's runner may
/// be seeding the same home at the same moment).
fn link_missing(target: &Path, at: &Path) {
    if at.symlink_metadata().is_err() {
        let _ = std::os::unix::fs::symlink(target, at);
    }
}

/// A link at `at` to `target`, replacing whatever is there.
fn relink(target: &Path, at: &Path) {
    if std::fs::read_link(at).is_ok_and(|t| t == target) {
        return;
    }
    let tmp = at.with_extension(format!("toolyard-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    if std::os::unix::fs::symlink(target, &tmp).is_ok() && std::fs::rename(&tmp, at).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// Copy the regular files of `from` into `to` (recursively) where `to` has none or an older
/// one, each through a temporary name so a concurrent reader never sees half a file.
fn copy_newer(from: &Path, to: &Path) {
    if std::fs::create_dir_all(to).is_err() {
        return;
    }
    for_each_entry(from, |entry| {
        let Ok(meta) = entry.symlink_metadata() else {
            return;
        };
        let Some(name) = entry.file_name() else {
            return;
        };
        let dest = to.join(name);
        if meta.is_dir() {
            copy_newer(entry, &dest);
            return;
        }
        if !meta.is_file() {
            return;
        }
        let fresh = dest
            .metadata()
            .and_then(|d| Ok(d.modified()? >= meta.modified()?))
            .unwrap_or(false);
        if fresh {
            return;
        }
        let tmp = dest.with_extension(format!("toolyard-{}", std::process::id()));
        if std::fs::copy(entry, &tmp).is_ok() && std::fs::rename(&tmp, &dest).is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cargo_home_links_crates_copies_the_index_and_never_the_credentials() {
        let root = tempfile::tempdir().unwrap();
        let user = root.path().join("user/.cargo");
        let idx = "index.crates.io-0123";
        for d in [
            format!("registry/cache/{idx}"),
            format!("registry/src/{idx}/itoa-1.0.0"),
            format!("registry/index/{idx}/.cache/it/oa"),
        ] {
            std::fs::create_dir_all(user.join(d)).unwrap();
        }
        std::fs::write(
            user.join(format!("registry/cache/{idx}/itoa-1.0.0.crate")),
            "c",
        )
        .unwrap();
        std::fs::write(
            user.join(format!("registry/index/{idx}/.cache/it/oa/itoa")),
            "i",
        )
        .unwrap();
        std::fs::write(user.join("config.toml"), "[net]\n").unwrap();
        std::fs::write(user.join("credentials.toml"), "secret").unwrap();
        let private = root.path().join("caches/cargo");
        std::fs::create_dir_all(&private).unwrap();

        seed_cargo(&user, &private);
        seed_cargo(&user, &private); // a second runner's start changes nothing

        let crate_link = private.join(format!("registry/cache/{idx}/itoa-1.0.0.crate"));
        assert_eq!(
            std::fs::read_link(&crate_link).unwrap(),
            user.join(format!("registry/cache/{idx}/itoa-1.0.0.crate"))
        );
        assert!(std::fs::read_link(private.join(format!("registry/src/{idx}/itoa-1.0.0"))).is_ok());
        let index = private.join(format!("registry/index/{idx}/.cache/it/oa/itoa"));
        assert!(
            index.symlink_metadata().unwrap().is_file(),
            "a copy, not a link"
        );
        assert_eq!(std::fs::read_to_string(index).unwrap(), "i");
        assert_eq!(
            std::fs::read_link(private.join("config.toml")).unwrap(),
            user.join("config.toml")
        );
        assert!(!private.join("credentials.toml").exists());
    }

    #[test]
    fn every_tool_gets_its_variables_under_the_caches_dir() {
        let root = tempfile::tempdir().unwrap();
        let caches = root.path().join("caches");
        let vars = prepare(&caches, Some(&root.path().join("nohome")));
        for tool in TOOL_HOMES {
            for (var, _) in tool.vars {
                let (_, path) = vars.iter().find(|(v, _)| v == var).unwrap();
                assert!(path.starts_with(&caches) && path.is_dir(), "{var}");
            }
        }
    }
}
