//! The command link (`[remote] command`) end to end, through the real binary: a plain wrapper
//! script stands in for `podman exec -i` and starts `toolyard runner` on a directory that is
//! NOT the server's `-w`, so every test can check that the server's own workspace stays
//! untouched. Fake runners (shell scripts) play a runner of another protocol version and one
//! that stops answering pings.

mod server_side;

use std::io::{BufRead, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use server_side::{HARNESS, Server, ServerCli, run_bounded, snapshot, toolyard_bin};
use toolyard_core::{Catalog, Lane};
use toolyard_dispatch::{CallRequest, Dispatcher, DispatcherConfig, Mode};

struct Env {
    _t: tempfile::TempDir,
    /// The server's `-w`: must stay byte-identical.
    server_ws: PathBuf,
    server_state: PathBuf,
    /// The runner's `--workspace`.
    runner_ws: PathBuf,
    home: PathBuf,
    /// One line per runner the wrapper started: `PID LANE SESSION-TOKEN`.
    log: PathBuf,
    catalog: PathBuf,
    base: PathBuf,
}

fn env() -> Env {
    env_with("")
}

/// An environment whose catalog runs the wrapper, with `extra` added to its `[remote]` section.
fn env_with(extra: &str) -> Env {
    let t = tempfile::tempdir().unwrap();
    let base = t.path().canonicalize().unwrap();
    let dir = |n: &str| {
        let p = base.join(n);
        std::fs::create_dir_all(&p).unwrap();
        p
    };
    let (server_ws, server_state, runner_ws, runner_state, home) = (
        dir("server-ws"),
        dir("server-state"),
        dir("runner-ws"),
        dir("runner-state"),
        dir("home"),
    );
    let log = base.join("links.log");
    std::fs::write(server_ws.join("a.txt"), "server copy\n").unwrap();
    std::fs::write(runner_ws.join("a.txt"), "remote one\n").unwrap();
    let wrapper = script(
        &base,
        "wrapper.sh",
        &format!(
            "echo \"$$ $1 $2\" >> '{log}'\nexport HOME='{home}'\nexec '{bin}' runner --lane \"$1\" --workspace '{ws}' --state-dir '{state}'\n",
            log = log.display(),
            home = home.display(),
            bin = toolyard_bin().display(),
            ws = runner_ws.display(),
            state = runner_state.display(),
        ),
    );
    let catalog = base.join("catalog.toml");
    std::fs::write(
        &catalog,
        format!(
            "[remote]\ncommand = [\"{}\", \"{{lane}}\", \"{{session}}\"]\n{extra}",
            wrapper.display()
        ),
    )
    .unwrap();
    Env {
        _t: t,
        server_ws,
        server_state,
        runner_ws,
        home,
        log,
        catalog,
        base,
    }
}

/// An executable `/bin/sh` script `name` in `dir`.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

impl ServerCli for Env {
    fn server(&self) -> Server<'_> {
        Server {
            ws: &self.server_ws,
            state: &self.server_state,
            home: &self.home,
            catalog: &self.catalog,
            base: &self.base,
        }
    }
}

impl Env {
    /// The wrapper's log: (pid, lane, session token) per runner started.
    fn links(&self) -> Vec<(u32, String, String)> {
        let Ok(text) = std::fs::read_to_string(&self.log) else {
            return Vec::new();
        };
        text.lines()
            .map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                (f[0].parse().unwrap(), f[1].to_string(), f[2].to_string())
            })
            .collect()
    }

    /// A dispatcher in this process whose runners are reached through the wrapper.
    fn dispatcher(&self) -> Dispatcher {
        let mut config = DispatcherConfig::new(&self.server_ws);
        config.state_dir = Some(self.server_state.clone());
        config.catalog_path = Some(self.catalog.clone());
        config.catalog = Catalog::load(&self.catalog).unwrap();
        config.mode = Mode::Lanes {
            exe: toolyard_bin(),
        };
        Dispatcher::new(config).unwrap()
    }

    /// A catalog whose `[remote] command` is the fake runner `body` (a shell script).
    fn fake_runner(&self, body: &str, extra: &str) -> PathBuf {
        let fake = script(&self.base, "fake-runner.sh", body);
        let catalog = self.base.join("fake.toml");
        std::fs::write(
            &catalog,
            format!("[remote]\ncommand = [\"{}\"]\n{extra}", fake.display()),
        )
        .unwrap();
        catalog
    }
}

#[test]
fn file_tools_and_commands_act_on_the_runner_s_directory_and_the_journal_keeps_the_pre_image() {
    let e = env();
    let before = snapshot(&e.server_ws);

    let out = e.ok("s1", "read_file", json!({"path": "a.txt"}));
    assert!(
        out.contains("remote one") && !out.contains("server copy"),
        "{out}"
    );
    e.ok(
        "s1",
        "edit_file",
        json!({"path": "a.txt", "old_string": "remote one", "new_string": "remote two"}),
    );
    e.ok(
        "s1",
        "write_file",
        json!({"path": "made.txt", "content": "made remotely\n"}),
    );
    let out = e.ok("s1", "glob", json!({"pattern": "*.txt"}));
    assert!(out.contains("made.txt"), "{out}");
    let out = e.ok("s1", "run_command", json!({"command": "pwd; cat a.txt"}));
    assert!(
        out.contains(&e.runner_ws.display().to_string()) && out.contains("remote two"),
        "the net lane ran elsewhere: {out}"
    );
    let out = e.ok(
        "s1",
        "run_command_isolated",
        json!({"command": "cat made.txt"}),
    );
    assert!(out.contains("made remotely"), "{out}");

    assert_eq!(
        std::fs::read_to_string(e.runner_ws.join("a.txt")).unwrap(),
        "remote two\n"
    );
    assert!(e.runner_ws.join("made.txt").exists());
    assert_eq!(
        snapshot(&e.server_ws),
        before,
        "the server's workspace changed"
    );
    let lanes: Vec<String> = e.links().into_iter().map(|l| l.1).collect();
    assert!(
        lanes.contains(&"net".to_string()) && lanes.contains(&"no-net".to_string()),
        "{lanes:?}"
    );

    // The server's journal holds the remote edit, with the text it replaced.
    let o = e.cli(&["log", "--json"]);
    let changes: Value = serde_json::from_slice(&o.stdout).unwrap();
    let edit = changes
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["tool"] == "edit_file")
        .unwrap_or_else(|| panic!("no edit journaled: {changes}"));
    assert_eq!(edit["path"], "a.txt");
    assert_eq!(edit["status"], "done");
    assert_eq!(edit["existed"], true);
    let created = changes
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["tool"] == "write_file")
        .unwrap();
    assert_eq!(created["existed"], false);
    let states: Vec<PathBuf> = std::fs::read_dir(e.server_state.join("workspaces"))
        .unwrap()
        .flatten()
        .map(|d| d.path())
        .collect();
    assert_eq!(states.len(), 1, "{states:?}");
    let state = toolyard_workspace::StateDir::at(&states[0], &e.server_ws).unwrap();
    let journal = toolyard_records::Journal::open(&state).unwrap();
    let id = toolyard_records::ChangeId(edit["id"].as_i64().unwrap());
    let mut old = String::new();
    std::io::Read::read_to_string(&mut journal.old_content(id).unwrap().unwrap(), &mut old)
        .unwrap();
    assert_eq!(old, "remote one\n");

    assert_eq!(snapshot(&e.server_ws), before);
}

/// The server's journal, opened beside the CLI (the state dir exists once a call ran).
fn server_journal(e: &Env) -> toolyard_records::Journal {
    let states: Vec<PathBuf> = std::fs::read_dir(e.server_state.join("workspaces"))
        .unwrap()
        .flatten()
        .map(|d| d.path())
        .collect();
    assert_eq!(states.len(), 1, "{states:?}");
    let state = toolyard_workspace::StateDir::at(&states[0], &e.server_ws).unwrap();
    toolyard_records::Journal::open(&state).unwrap()
}

/// `toolyard log --json` as a list of changes.
fn log(e: &Env) -> Vec<Value> {
    let o = e.cli(&["log", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice::<Value>(&o.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn undo_and_redo_restore_the_runner_s_files_and_leave_the_server_s_untouched() {
    let e = env();
    let before = snapshot(&e.server_ws);
    e.ok("s1", "read_file", json!({"path": "a.txt"}));
    e.ok(
        "s1",
        "edit_file",
        json!({"path": "a.txt", "old_string": "remote one", "new_string": "remote two"}),
    );
    e.ok(
        "s1",
        "write_file",
        json!({"path": "made.txt", "content": "made remotely\n"}),
    );
    let a = e.runner_ws.join("a.txt");
    std::fs::set_permissions(&a, std::fs::Permissions::from_mode(0o640)).unwrap();
    // The session's last change first: the file it created goes.
    let out = e.ok("s1", "undo", json!({}));
    assert!(out.contains("removed made.txt"), "{out}");
    assert!(!e.runner_ws.join("made.txt").exists());
    // Then the edit: the runner's file has its old bytes back.
    let out = e.ok("s1", "undo", json!({}));
    assert!(out.contains("restored a.txt"), "{out}");
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "remote one\n");
    // Undoing the undo redoes the edit, from the content the runner shipped to the journal;
    // here through `toolyard undo` with the remote catalog.
    let undo_of_edit = log(&e)
        .into_iter()
        .find(|c| c["tool"] == "undo" && c["path"] == "a.txt")
        .unwrap();
    assert_eq!(undo_of_edit["status"], "done");
    let id = undo_of_edit["id"].as_i64().unwrap().to_string();
    let o = e.cli(&["undo", &id]);
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "remote two\n");
    assert_eq!(
        std::fs::metadata(&a).unwrap().permissions().mode() & 0o777,
        0o640,
        "the mode the edit left is restored with its bytes"
    );
    // The redone edit is the session's last change again; after undoing it the session's
    // view follows the restored bytes: it may edit them without reading again.
    e.ok("s1", "undo", json!({}));
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "remote one\n");
    e.ok(
        "s1",
        "edit_file",
        json!({"path": "a.txt", "old_string": "one", "new_string": "three"}),
    );
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "remote three\n");
    assert_eq!(
        snapshot(&e.server_ws),
        before,
        "the server's workspace changed"
    );
}

#[test]
fn undo_is_refused_when_the_runner_s_file_changed_since_and_nothing_is_written() {
    let e = env();
    let before = snapshot(&e.server_ws);
    e.ok("s1", "read_file", json!({"path": "a.txt"}));
    e.ok(
        "s1",
        "edit_file",
        json!({"path": "a.txt", "old_string": "remote one", "new_string": "remote two"}),
    );
    // Someone else changes the runner's file after the edit.
    std::fs::write(e.runner_ws.join("a.txt"), "changed behind our back\n").unwrap();
    let v = e.call("s1", "undo", json!({}));
    assert_eq!(v["success"], false, "{v}");
    let out = v["output"].as_str().unwrap();
    assert!(out.contains("a.txt changed since change"), "{out}");
    assert_eq!(
        std::fs::read_to_string(e.runner_ws.join("a.txt")).unwrap(),
        "changed behind our back\n"
    );
    assert!(
        !log(&e).iter().any(|c| c["tool"] == "undo"),
        "a refused undo journaled a change"
    );
    assert_eq!(snapshot(&e.server_ws), before);
}

/// `toolyard call apply_patch` in the codex dialect, as JSON.
fn patch(e: &Env, session: &str, input: &str) -> Value {
    e.call_with(
        session,
        "apply_patch",
        json!({ "input": input }),
        &["--dialect", "codex"],
    )
}

#[test]
fn a_patch_on_a_remote_runner_is_one_journal_group_that_undo_and_redo_revert_together() {
    let e = env();
    let before = snapshot(&e.server_ws);
    std::fs::write(e.runner_ws.join("gone.txt"), "to be deleted\n").unwrap();
    std::fs::set_permissions(
        e.runner_ws.join("gone.txt"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let v = patch(
        &e,
        "s1",
        "*** Begin Patch\n*** Update File: a.txt\n@@\n-remote one\n+remote patched\n*** Add File: new.txt\n+added\n*** Delete File: gone.txt\n*** End Patch",
    );
    assert_eq!(v["success"], true, "{v}");
    let read = |n: &str| std::fs::read_to_string(e.runner_ws.join(n)).ok();
    assert_eq!(read("a.txt").as_deref(), Some("remote patched\n"));
    assert_eq!(read("new.txt").as_deref(), Some("added\n"));
    assert_eq!(read("gone.txt"), None);

    // The server's journal holds the three as one group, with the runner's previous bytes.
    let changes = log(&e);
    let patched: Vec<&Value> = changes
        .iter()
        .filter(|c| c["tool"] == "apply_patch")
        .collect();
    assert_eq!(patched.len(), 3, "{changes:?}");
    let group = patched[0]["group"].clone();
    assert!(group.is_i64(), "not grouped: {patched:?}");
    assert!(
        patched
            .iter()
            .all(|c| c["group"] == group && c["status"] == "done")
    );
    let removal = patched.iter().find(|c| c["path"] == "gone.txt").unwrap();
    let journal = server_journal(&e);
    let mut old = String::new();
    std::io::Read::read_to_string(
        &mut journal
            .old_content(toolyard_records::ChangeId(removal["id"].as_i64().unwrap()))
            .unwrap()
            .unwrap(),
        &mut old,
    )
    .unwrap();
    assert_eq!(old, "to be deleted\n");

    // One undo reverts all three on the runner, the deleted file with its bytes and mode.
    let out = e.ok("s1", "undo", json!({}));
    assert!(out.contains("2 other changes"), "{out}");
    assert_eq!(read("a.txt").as_deref(), Some("remote one\n"));
    assert_eq!(read("new.txt"), None);
    assert_eq!(read("gone.txt").as_deref(), Some("to be deleted\n"));
    assert_eq!(
        std::fs::metadata(e.runner_ws.join("gone.txt"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    // Undoing one of its undos (so their group) redoes the whole patch.
    let undo = log(&e).into_iter().find(|c| c["tool"] == "undo").unwrap();
    let out = e.ok("s1", "undo", json!({"change_id": undo["id"]}));
    assert!(out.contains("Redid"), "{out}");
    assert_eq!(read("a.txt").as_deref(), Some("remote patched\n"));
    assert_eq!(read("new.txt").as_deref(), Some("added\n"));
    assert_eq!(read("gone.txt"), None);
    assert_eq!(
        snapshot(&e.server_ws),
        before,
        "the server's workspace changed"
    );
}

#[test]
fn a_group_undo_on_a_remote_runner_is_refused_whole_when_one_file_changed_since() {
    let e = env();
    std::fs::write(e.runner_ws.join("b.txt"), "bee\n").unwrap();
    let v = patch(
        &e,
        "s1",
        "*** Begin Patch\n*** Update File: a.txt\n@@\n-remote one\n+A\n*** Update File: b.txt\n@@\n-bee\n+B\n*** End Patch",
    );
    assert_eq!(v["success"], true, "{v}");
    std::fs::write(e.runner_ws.join("b.txt"), "changed behind our back\n").unwrap();
    let v = e.call("s1", "undo", json!({}));
    assert_eq!(v["success"], false, "{v}");
    let out = v["output"].as_str().unwrap();
    assert!(
        out.contains("b.txt changed since change") && out.contains("nothing was undone"),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(e.runner_ws.join("a.txt")).unwrap(),
        "A\n",
        "one file of the group was undone alone"
    );
    assert!(
        !log(&e).iter().any(|c| c["tool"] == "undo"),
        "a refused undo journaled a change"
    );
}

#[test]
fn a_patch_that_fails_part_way_on_a_remote_runner_puts_back_what_it_changed() {
    let e = env();
    // A (sparse) file over the most a remote change ships to the journal: its removal is
    // refused after the update landed, so the runner asks the server to roll that back.
    let big = e.runner_ws.join("big.bin");
    let over = toolyard_records::MAX_REMOTE_FILE_BYTES + 1;
    std::fs::File::create(&big).unwrap().set_len(over).unwrap();
    let v = patch(
        &e,
        "s1",
        "*** Begin Patch\n*** Update File: a.txt\n@@\n-remote one\n+remote patched\n*** Delete File: big.bin\n*** End Patch",
    );
    assert_eq!(v["success"], false, "{v}");
    let out = v["output"].as_str().unwrap();
    assert!(out.contains("apply_patch stopped at big.bin"), "{out}");
    assert!(
        out.contains("restored, so the workspace is as before"),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(e.runner_ws.join("a.txt")).unwrap(),
        "remote one\n"
    );
    assert_eq!(std::fs::metadata(&big).unwrap().len(), over);
    // The journal shows the update and the undo that put it back.
    let changes = log(&e);
    let update = changes
        .iter()
        .find(|c| c["tool"] == "apply_patch" && c["path"] == "a.txt")
        .unwrap();
    assert_eq!(update["status"], "done");
    assert!(update["undone_by"].is_i64(), "{update}");
}

#[test]
fn anthropic_undo_edit_on_a_remote_runner_asks_the_server_s_journal() {
    let e = env();
    let before = snapshot(&e.server_ws);
    let call = |args: Value| {
        let o = e.cli(&[
            "call",
            "str_replace_editor",
            &args.to_string(),
            "--json",
            "--session",
            "s1",
            "--dialect",
            "anthropic",
        ]);
        let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|err| {
            panic!("not JSON ({err}): {}", String::from_utf8_lossy(&o.stderr))
        });
        assert_eq!(v["success"], true, "{v}");
        v["output"].as_str().unwrap().to_string()
    };
    let path = e.runner_ws.join("a.txt").display().to_string();
    call(json!({"command": "view", "path": path}));
    call(
        json!({"command": "str_replace", "path": path, "old_str": "remote one", "new_str": "remote two"}),
    );
    let out = call(json!({"command": "undo_edit", "path": path}));
    assert!(
        out.contains("undone successfully") && out.contains("remote one"),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(e.runner_ws.join("a.txt")).unwrap(),
        "remote one\n"
    );
    assert_eq!(snapshot(&e.server_ws), before);
}

#[test]
fn pending_entries_are_settled_from_the_runner_s_hashes_and_log_leaves_the_server_s_disk_alone() {
    let e = env();
    let before = snapshot(&e.server_ws);
    log(&e);
    let journal = server_journal(&e);
    let a = toolyard_workspace::RelPath::from_normalized("a.txt");
    let pending = |session: &str, new: &[u8]| {
        let hash = toolyard_workspace::hash_bytes(new);
        let change = toolyard_records::NewChange {
            session,
            call_id: "crafted",
            tool: "write_file",
            path: &a,
            new_hash: &hash,
            group: None,
        };
        let pre = toolyard_records::PreImage {
            content: Some(b"before\n"),
            mode: Some(0o644),
        };
        journal.record_preimage(change, &pre).unwrap()
    };
    // What the runner's file holds: that write landed.
    let landed = pending("s1", b"remote one\n");
    // What the server's own copy holds: a recovery on the server's disk would call it done.
    let not_landed = pending("s1", b"server copy\n");
    // Another session's runner (the template names the session) settles its own.
    let other = pending("s2", b"remote one\n");
    drop(journal);
    // Litter a killed write would leave: only the runner's side may be cleaned.
    std::fs::write(e.server_ws.join(".a.txt.toolyard-1.tmp"), "x").unwrap();
    std::fs::write(e.runner_ws.join(".a.txt.toolyard-1.tmp"), "x").unwrap();
    let before = {
        let mut b = before;
        b.insert(
            PathBuf::from(".a.txt.toolyard-1.tmp"),
            (b"x".to_vec(), 0o100644),
        );
        b
    };

    // `toolyard log` with the remote catalog settles nothing against the server's disk.
    let status = |id: toolyard_records::ChangeId| {
        log(&e)
            .into_iter()
            .find(|c| c["id"] == id.0)
            .map(|c| c["status"].as_str().unwrap().to_string())
            .unwrap()
    };
    assert_eq!(status(not_landed), "pending");
    assert_eq!(status(landed), "pending");
    assert_eq!(
        snapshot(&e.server_ws),
        before,
        "log touched the server's workspace"
    );

    // The next start of s1's runner asks it for the hashes.
    e.ok("s1", "run_command", json!({"command": "true"}));
    assert_eq!(status(landed), "done");
    assert_eq!(status(not_landed), "failed");
    assert_eq!(status(other), "pending", "s1's runner settled s2's entry");
    assert!(!e.runner_ws.join(".a.txt.toolyard-1.tmp").exists());
    e.ok("s2", "run_command", json!({"command": "true"}));
    assert_eq!(status(other), "done");
    assert_eq!(
        snapshot(&e.server_ws),
        before,
        "the server's workspace changed"
    );
}

#[test]
fn a_git_import_edited_then_exported_gives_a_patch_that_git_apply_takes() {
    let e = env();
    let before = snapshot(&e.server_ws);
    let repo = e.base.join("origin");
    std::fs::create_dir(&repo).unwrap();
    let git = |dir: &Path, args: &[&str]| {
        let o = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
            .args(args)
            .current_dir(dir)
            .env("HOME", &e.home)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    git(&repo, &["init", "-q"]);
    std::fs::create_dir(repo.join("src")).unwrap();
    std::fs::write(repo.join("src/lib.rs"), "fn one() {}\n").unwrap();
    std::fs::write(repo.join("gone.txt"), "to delete\n").unwrap();
    std::fs::write(repo.join("blob.bin"), b"\x00\x01bin").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "one"]);
    let rev = git(&repo, &["rev-parse", "HEAD"]);
    // A later commit the import must not see.
    std::fs::write(repo.join("src/lib.rs"), "fn later() {}\n").unwrap();
    git(&repo, &["commit", "-qam", "two"]);

    std::fs::remove_file(e.runner_ws.join("a.txt")).unwrap();
    let o = e.cli(&[
        "workspace",
        "import",
        "--from-git",
        &repo.display().to_string(),
        "--rev",
        &rev,
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        std::fs::read_to_string(e.runner_ws.join("src/lib.rs")).unwrap(),
        "fn one() {}\n"
    );

    e.ok("s", "read_file", json!({"path": "src/lib.rs"}));
    e.ok(
        "s",
        "edit_file",
        json!({"path": "src/lib.rs", "old_string": "one", "new_string": "edited"}),
    );
    e.ok(
        "s",
        "write_file",
        json!({"path": "new/file.txt", "content": "new\n"}),
    );
    e.ok(
        "s",
        "run_command",
        json!({"command": "rm gone.txt && printf '\\002' >> blob.bin"}),
    );

    let o = e.cli(&["workspace", "export"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let patch = e.base.join("changes.patch");
    std::fs::write(&patch, &o.stdout).unwrap();

    let check = e.base.join("check");
    git(
        &e.base,
        &["clone", "-q", &repo.display().to_string(), "check"],
    );
    git(&check, &["checkout", "-q", "--detach", &rev]);
    git(&check, &["apply", &patch.display().to_string()]);
    let tree = |d: &Path| {
        let mut t = snapshot(d);
        t.retain(|p, _| !p.starts_with(".git"));
        t
    };
    assert_eq!(
        tree(&check),
        tree(&e.runner_ws),
        "the patched checkout differs from the runner's tree"
    );
    assert!(check.join("new/file.txt").exists() && !check.join("gone.txt").exists());
    assert_eq!(snapshot(&e.server_ws), before);
}

#[test]
fn export_without_git_diffs_the_journaled_files_from_their_first_pre_image() {
    let e = env();
    e.ok("cli", "read_file", json!({"path": "a.txt"}));
    e.ok(
        "cli",
        "edit_file",
        json!({"path": "a.txt", "old_string": "remote one", "new_string": "remote two"}),
    );
    e.ok(
        "cli",
        "edit_file",
        json!({"path": "a.txt", "old_string": "two", "new_string": "three"}),
    );
    e.ok(
        "cli",
        "write_file",
        json!({"path": "n/new.txt", "content": "fresh\n"}),
    );
    let o = e.cli(&["workspace", "export"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let patch = String::from_utf8(o.stdout).unwrap();
    assert!(
        patch.contains("-remote one\n+remote three\n") && !patch.contains("remote two"),
        "{patch}"
    );
    assert!(
        patch.contains("new file mode 100644\n--- /dev/null\n+++ b/n/new.txt"),
        "{patch}"
    );
    // It applies to the runner's tree as it was.
    let check = e.base.join("check");
    std::fs::create_dir(&check).unwrap();
    std::fs::write(check.join("a.txt"), "remote one\n").unwrap();
    std::fs::write(e.base.join("p.patch"), &patch).unwrap();
    let o = Command::new("git")
        .args(["apply", "../p.patch"])
        .current_dir(&check)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        std::fs::read_to_string(check.join("a.txt")).unwrap(),
        "remote three\n"
    );
    assert_eq!(
        std::fs::read_to_string(check.join("n/new.txt")).unwrap(),
        "fresh\n"
    );
}

#[test]
fn a_directory_import_is_sent_over_the_link() {
    let e = env();
    let src = e.base.join("src-dir");
    std::fs::create_dir_all(src.join("deep/er")).unwrap();
    std::fs::write(src.join("deep/er/x.txt"), "from the server's side\n").unwrap();
    // Past one chunk, so the upload takes several jobs.
    let big: Vec<u8> = (0..(5u32 << 20)).map(|i| (i % 251) as u8).collect();
    std::fs::write(src.join("big.bin"), &big).unwrap();
    let o = e.cli(&[
        "workspace",
        "import",
        "--from-dir",
        &src.display().to_string(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        std::fs::read_to_string(e.runner_ws.join("deep/er/x.txt")).unwrap(),
        "from the server's side\n"
    );
    assert_eq!(std::fs::read(e.runner_ws.join("big.bin")).unwrap(), big);
}

#[test]
fn doctor_prints_what_each_remote_lane_enforces() {
    let e = env();
    let mut cmd = Command::new(toolyard_bin());
    cmd.arg("doctor")
        .current_dir(&e.base)
        .env("TOOLYARD_STATE_DIR", &e.server_state)
        .env("HOME", &e.home)
        .env("TOOLYARD_CATALOG", &e.catalog);
    let o = run_bounded(cmd);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let remote = out
        .split("remote runners")
        .nth(1)
        .unwrap_or_else(|| panic!("no remote section: {out}"));
    for lane in ["no-net:", "net:", "heavy:"] {
        assert!(remote.contains(lane), "{lane} missing: {remote}");
    }
    assert!(!remote.contains("NOT REACHED"), "{remote}");
    // What a runner says of its own sandbox, not of this process.
    assert!(remote.to_lowercase().contains("landlock"), "{remote}");
    let lanes: Vec<String> = e.links().into_iter().map(|l| l.1).collect();
    assert_eq!(lanes.len(), 3, "one runner per lane: {lanes:?}");
}

#[test]
fn a_saved_output_is_read_from_the_runner() {
    let e = env();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let d = e.dispatcher();
        let r = d
            .call(CallRequest::new(
                "s",
                "run_command",
                json!({"command": "seq 1 20000"}),
            ))
            .await;
        assert!(r.success, "{}", r.output);
        let full = r
            .data
            .as_ref()
            .and_then(|d| d["full_output"].as_str())
            .unwrap_or_else(|| panic!("no saved output: {r:?}"))
            .to_string();
        let name = Path::new(&full)
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        assert!(
            full.starts_with(&e.base.join("runner-state").display().to_string()),
            "{full}"
        );
        let (bytes, eof) = d.spill_read("s", &name, 0, 12).await.unwrap();
        assert_eq!(String::from_utf8(bytes).unwrap(), "1\n2\n3\n4\n5\n6\n");
        assert!(!eof);
        let e = d
            .spill_read("s", "../x", 0, 1)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("not the name of a saved output"), "{e}");
    });
}

#[test]
fn each_session_gets_its_own_runner_when_the_template_names_the_session() {
    let e = env();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let d = e.dispatcher();
        let call = |session: &str| {
            d.call(CallRequest::new(
                session,
                "run_command",
                json!({"command": "echo hi"}),
            ))
        };
        for session in ["alice", "bob/../x", "alice"] {
            let r = tokio::time::timeout(HARNESS, call(session)).await.unwrap();
            assert!(r.success, "{session}: {}", r.output);
        }
        let links = e.links();
        assert_eq!(links.len(), 2, "one runner per session: {links:?}");
        let (a, b) = (&links[0], &links[1]);
        assert_ne!(a.0, b.0);
        assert_ne!(a.2, b.2, "the sessions share a token: {links:?}");
        for (_, lane, token) in &links {
            assert_eq!(lane, "net");
            assert!(
                token
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
                "{token}"
            );
        }
        assert!(a.2.starts_with("alice-"), "{links:?}");
        let router = d.router().unwrap();
        assert_eq!(router.runner_pid_for("alice", Lane::Net).await, Some(a.0));
        assert_eq!(
            router.runner_pid_for("bob/../x", Lane::Net).await,
            Some(b.0)
        );
        // The session ends: its runner is closed (the process exits), the other's stays.
        d.end_session("alice").await;
        assert_eq!(router.runner_pid_for("alice", Lane::Net).await, None);
        let waited = Instant::now();
        while Path::new(&format!("/proc/{}", a.0)).exists() {
            assert!(
                waited.elapsed() < HARNESS,
                "alice's runner outlived her session"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(Path::new(&format!("/proc/{}", b.0)).exists());
        assert_eq!(router.live_lanes_for("bob/../x").await, vec![Lane::Net]);
    });
}

#[test]
fn killing_the_runner_fails_the_call_in_flight_and_the_next_call_gets_a_fresh_runner() {
    let e = env();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let d = std::sync::Arc::new(e.dispatcher());
        // Start the runner, so the kill below hits one that is serving.
        let r = d
            .call(CallRequest::new(
                "s",
                "run_command",
                json!({"command": "true"}),
            ))
            .await;
        assert!(r.success, "{}", r.output);
        let pid = d
            .router()
            .unwrap()
            .runner_pid_for("s", Lane::Net)
            .await
            .unwrap();
        assert_eq!(e.links()[0].0, pid, "the wrapper's pid is the runner's");

        let long = {
            let d = d.clone();
            tokio::spawn(async move {
                d.call(CallRequest::new(
                    "s",
                    "run_command",
                    json!({"command": "echo started > started.txt; sleep 60"}),
                ))
                .await
            })
        };
        // Wait until the command runs, then kill the runner under it.
        let marker = e.runner_ws.join("started.txt");
        let waited = Instant::now();
        while !marker.exists() {
            assert!(waited.elapsed() < HARNESS, "the command never started");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let killed = Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let r = tokio::time::timeout(HARNESS, long)
            .await
            .expect("the call in flight must fail long before its 60 s command ends")
            .unwrap();
        assert!(!r.success);
        assert!(
            r.output.contains("the net runner's link died")
                && r.output.contains("may or may not have run")
                && r.output.contains("check with read_file/git status"),
            "{}",
            r.output
        );

        let r = tokio::time::timeout(
            HARNESS,
            d.call(CallRequest::new(
                "s",
                "run_command",
                json!({"command": "echo fresh"}),
            )),
        )
        .await
        .unwrap();
        assert!(r.success && r.output.contains("fresh"), "{}", r.output);
        let links = e.links();
        assert_eq!(links.len(), 2, "a fresh runner: {links:?}");
        assert_ne!(links[1].0, pid);
    });
}

#[test]
fn a_runner_of_another_protocol_version_is_refused_with_both_versions() {
    let e = env();
    let catalog = e.fake_runner(
        "read hello\necho '{\"type\":\"ready\",\"proto\":999,\"max_frame\":1000,\"lane\":\"net\",\"pid\":1,\"sandbox\":\"none\"}'\nexec sleep 30\n",
        "",
    );
    let v = call_with(&e, &catalog);
    let out = v["output"].as_str().unwrap();
    assert_eq!(v["success"], false, "{v}");
    assert!(
        out.contains("job protocol version 999, this server version 2")
            && out.contains("upgrade this toolyard server"),
        "{out}"
    );

    // A runner from before the hello: its ready line has no version.
    let catalog = e.fake_runner(
        "echo '{\"type\":\"ready\",\"lane\":\"net\",\"pid\":1,\"sandbox\":\"none\"}'\nexec sleep 30\n",
        "",
    );
    let v = call_with(&e, &catalog);
    let out = v["output"].as_str().unwrap();
    assert!(
        out.contains("version 1, this server version 2")
            && out.contains("upgrade the toolyard that the [remote] command"),
        "{out}"
    );
}

#[test]
fn a_runner_that_stops_answering_pings_is_declared_dead() {
    let e = env();
    // Says it is ready, then neither reads nor writes again (its stdin stays open).
    let catalog = e.fake_runner(
        "read hello\necho '{\"type\":\"ready\",\"proto\":2,\"max_frame\":67108864,\"lane\":\"net\",\"pid\":'$$',\"sandbox\":\"none\"}'\nexec sleep 600\n",
        "heartbeat_ms = 100\n",
    );
    let v = call_with(&e, &catalog);
    let out = v["output"].as_str().unwrap();
    assert_eq!(v["success"], false, "{v}");
    assert!(
        out.contains("the net runner's link died: no answer to 3 pings")
            && out.contains("may or may not have run"),
        "{out}"
    );
}

/// `run_command` through the server with `catalog`.
fn call_with(e: &Env, catalog: &Path) -> Value {
    let mut cmd = Command::new(toolyard_bin());
    cmd.args(["call", "run_command", r#"{"command":"echo hi"}"#, "--json"])
        .arg("-w")
        .arg(&e.server_ws)
        .env("TOOLYARD_STATE_DIR", &e.server_state)
        .env("HOME", &e.home)
        .env("TOOLYARD_CATALOG", catalog);
    let o = run_bounded(cmd);
    serde_json::from_slice(&o.stdout).unwrap_or_else(|err| {
        panic!(
            "not JSON ({err}): {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

#[test]
fn a_runner_whose_router_goes_silent_stops_its_commands_and_exits() {
    let e = env();
    let state = e.base.join("runner-state");
    let mut runner = Command::new(toolyard_bin())
        .args(["runner", "--lane", "net", "--workspace"])
        .arg(&e.runner_ws)
        .arg("--state-dir")
        .arg(&state)
        .env("HOME", &e.home)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = runner.stdin.take().unwrap();
    let mut stdout = std::io::BufReader::new(runner.stdout.take().unwrap());
    let mut ready = String::new();
    stdout.read_line(&mut ready).unwrap();
    let ready: Value = serde_json::from_str(&ready).unwrap();
    assert_eq!(ready["type"], "ready");
    assert_eq!(ready["proto"], 2);
    let hello = json!({"type": "hello", "proto": 2, "max_frame": 1 << 20, "heartbeat_ms": 100,
        "process_base": 1, "pre_images": true});
    let job = json!({"type": "job", "id": "1", "session": "s", "call_id": "c1", "dialect": "loopr",
        "tool": "run_command", "args": {"command": "sleep 60"},
        "timeout_ms": 120000, "max_timeout_ms": 600000, "max_output_bytes": 30000});
    writeln!(stdin, "{hello}\n{job}").unwrap();
    stdin.flush().unwrap();
    // Then silence, with stdin still open: the runner must give up on its own.
    let started = Instant::now();
    let status = loop {
        if let Some(s) = runner.try_wait().unwrap() {
            break s;
        }
        assert!(
            started.elapsed() < HARNESS,
            "the runner outlived its silent router"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    drop(stdin);
    let mut err = String::new();
    std::io::Read::read_to_string(runner.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(err.contains("the router went silent"), "{status}: {err}");
    // It pinged while it waited.
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    assert!(rest.contains("\"type\":\"ping\""), "{rest}");
}
