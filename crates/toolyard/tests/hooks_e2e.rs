//! Hooks through the real `toolyard` binary: a pre-tool hook that exits 2 blocks the call with
//! its message, a JSON reply can deny, a failing or slow hook is reported without blocking, and
//! auto-commit makes one git commit per mutating call with exactly the files it changed.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::{Value, json};

struct Env {
    _t: tempfile::TempDir,
    base: PathBuf,
    ws: PathBuf,
    state: PathBuf,
    catalog: PathBuf,
}

/// A workspace with `catalog` (kept outside it, so git never sees it).
fn env(catalog: &str) -> Env {
    let t = tempfile::tempdir().unwrap();
    let base = t.path().canonicalize().unwrap();
    let ws = base.join("ws");
    let state = base.join("state");
    std::fs::create_dir_all(&ws).unwrap();
    let path = base.join("catalog.toml");
    std::fs::write(&path, catalog).unwrap();
    Env {
        _t: t,
        base,
        ws,
        state,
        catalog: path,
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

impl Env {
    /// `toolyard call TOOL ARGS --json` with the catalog; the result and the process output.
    fn call(&self, tool: &str, args: Value, extra: &[&str]) -> (Value, Output) {
        let args = args.to_string();
        let mut a = vec!["call", tool, args.as_str(), "--json"];
        a.extend_from_slice(extra);
        let o = Command::new(env!("CARGO_BIN_EXE_toolyard"))
            .args(&a)
            .arg("--catalog")
            .arg(&self.catalog)
            .current_dir(&self.ws)
            .env("TOOLYARD_STATE_DIR", &self.state)
            .output()
            .unwrap();
        let v = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
        (v, o)
    }

    fn ok(&self, tool: &str, args: Value) -> Value {
        let (v, o) = self.call(tool, args.clone(), &[]);
        assert_eq!(v["success"], true, "{tool} {args}: {}", text(&o));
        v
    }

    fn git(&self, args: &[&str]) -> String {
        let o = Command::new("git")
            .arg("-C")
            .arg(&self.ws)
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "git {args:?}: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn git_init(&self) {
        self.git(&["init", "-q", "-b", "main"]);
        self.git(&["config", "user.name", "Toolyard Test"]);
        self.git(&["config", "user.email", "test@toolyard.invalid"]);
        std::fs::write(self.ws.join("README"), "start\n").unwrap();
        self.git(&["add", "README"]);
        self.git(&["commit", "-q", "-m", "start"]);
    }

    /// Commits newest first: (subject, files).
    fn commits(&self) -> Vec<(String, Vec<String>)> {
        let log = self.git(&["log", "--name-only", "--format=%x00%s"]);
        log.split('\0')
            .filter(|c| !c.trim().is_empty())
            .map(|c| {
                let mut lines = c.lines().filter(|l| !l.is_empty());
                let subject = lines.next().unwrap_or("").to_string();
                (subject, lines.map(str::to_string).collect())
            })
            .collect()
    }

    fn file(&self, rel: &str) -> String {
        std::fs::read_to_string(self.ws.join(rel)).unwrap()
    }
}

fn hooks_of(v: &Value) -> &Vec<Value> {
    v["data"]["hooks"].as_array().expect("data.hooks")
}

#[test]
fn a_pre_hook_exiting_2_blocks_the_call_with_its_message() {
    let e = env(r#"
[[hooks.pre_tool]]
matcher = "edit_file|write_file"
command = "cat > ../hook-input.json; echo 'writes to a.txt are frozen' >&2; exit 2"
"#);
    std::fs::write(e.ws.join("a.txt"), "original\n").unwrap();
    e.ok("read_file", json!({"path": "a.txt"}));
    let (v, o) = e.call(
        "write_file",
        json!({"path": "a.txt", "content": "changed\n"}),
        &[],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_eq!(v["success"], false);
    assert_eq!(v["error_kind"], "blocked");
    let out = v["output"].as_str().unwrap();
    assert!(out.contains("pre_tool hook"), "{out}");
    assert!(out.contains("writes to a.txt are frozen"), "{out}");
    assert_eq!(e.file("a.txt"), "original\n", "the blocked call never ran");

    // The hook saw the call as Claude Code's hooks do.
    let input: Value =
        serde_json::from_slice(&std::fs::read(e.base.join("hook-input.json")).unwrap()).unwrap();
    assert_eq!(input["hook_event_name"], "PreToolUse");
    assert_eq!(input["tool_name"], "write_file");
    assert_eq!(input["tool_input"]["content"], "changed\n");
    assert_eq!(input["session_id"], "cli");
    assert_eq!(input["cwd"], e.ws.to_str().unwrap());
    assert!(input["call_id"].is_string());

    // A tool the matcher does not name runs untouched.
    e.ok("read_file", json!({"path": "a.txt"}));
}

#[test]
fn a_json_reply_can_deny_in_either_form() {
    let e = env(r#"
[[hooks.pre_tool]]
matcher = "write_file"
command = "echo '{\"hookSpecificOutput\":{\"hookEventName\":\"PreToolUse\",\"permissionDecision\":\"deny\",\"permissionDecisionReason\":\"no new files today\"}}'"

[[hooks.pre_tool]]
matcher = "run_command"
command = "echo '{\"decision\":\"block\",\"reason\":\"use the build tool\"}'"

[[hooks.pre_tool]]
matcher = "edit_file"
command = "echo '{\"decision\":\"approve\",\"reason\":\"fine\"}'"
"#);
    let (v, _) = e.call("write_file", json!({"path": "n.txt", "content": "x"}), &[]);
    assert_eq!(v["error_kind"], "blocked", "{v}");
    assert!(v["output"].as_str().unwrap().contains("no new files today"));
    assert!(!e.ws.join("n.txt").exists());
    let (v, _) = e.call("run_command", json!({"command": "touch made"}), &[]);
    assert_eq!(v["error_kind"], "blocked", "{v}");
    assert!(v["output"].as_str().unwrap().contains("use the build tool"));
    assert!(!e.ws.join("made").exists());

    std::fs::write(e.ws.join("a.txt"), "one\n").unwrap();
    e.ok("read_file", json!({"path": "a.txt"}));
    e.ok(
        "edit_file",
        json!({"path": "a.txt", "old_string": "one", "new_string": "two"}),
    );
    assert_eq!(e.file("a.txt"), "two\n");
}

#[test]
fn a_post_hook_failure_is_reported_and_the_call_still_succeeds() {
    let e = env(r#"
[[hooks.post_tool]]
matcher = "write_file"
command = "echo 'lint crashed' >&2; exit 3"

[[hooks.post_tool]]
matcher = "write_file"
command = "echo 'line 1: use tabs' >&2; exit 2"
"#);
    let v = e.ok("write_file", json!({"path": "a.txt", "content": "x\n"}));
    assert_eq!(
        e.file("a.txt"),
        "x\n",
        "the hook's failure never undoes the write"
    );
    let out = v["output"].as_str().unwrap();
    assert!(out.starts_with("Created a.txt"), "{out}");
    assert!(out.contains("failed (exit 3): lint crashed"), "{out}");
    assert!(out.contains("says: line 1: use tabs"), "{out}");
    let hooks = hooks_of(&v);
    assert_eq!(hooks[0]["status"], "failed");
    assert_eq!(hooks[0]["exit_code"], 3);
    assert_eq!(hooks[1]["status"], "feedback");
    assert_eq!(v["files_changed"], json!(["a.txt"]));
}

/// Live (non-zombie) processes whose command line is `sleep <token>`. A pid the hook wrote
/// down would not do: hooks run in a PID namespace of their own where tree kill allows it.
fn sleepers(token: &str) -> Vec<String> {
    let needle = format!("sleep\0{token}\0");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let zombie = std::fs::read_to_string(entry.path().join("stat")).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        });
        if !zombie && cmdline.ends_with(needle.as_bytes()) {
            found.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    found
}

#[test]
fn a_hook_past_its_timeout_is_killed_with_its_whole_group_and_reported() {
    // A number no other test uses, to find this sleep in /proc.
    let token = format!("{}7", 600_000 + std::process::id());
    let e = env(&format!(
        r#"
[[hooks.pre_tool]]
command = "sleep {token} & wait"
timeout_ms = 500
"#
    ));
    let v = e.ok("write_file", json!({"path": "a.txt", "content": "x\n"}));
    assert_eq!(
        e.file("a.txt"),
        "x\n",
        "a timed-out pre-hook does not block"
    );
    assert!(v["output"].as_str().unwrap().contains("timed out"), "{v}");
    assert_eq!(hooks_of(&v)[0]["status"], "timed_out");
    // The background child was killed with the hook's tree (a zombie awaiting its reaper
    // counts as gone); the kill may take a moment to be seen.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let left = loop {
        let left = sleepers(&token);
        if left.is_empty() || std::time::Instant::now() > until {
            break left;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(
        left.is_empty(),
        "the hook's background child survived: {left:?}"
    );
}

#[test]
fn auto_commit_makes_one_commit_per_mutating_call_with_exactly_its_files() {
    let e = env("[hooks.post_tools]\nauto_commit = true\n");
    e.git_init();
    // The user's own uncommitted work is never swept into an auto-commit.
    std::fs::write(e.ws.join("README"), "start\nuser's edit\n").unwrap();
    std::fs::write(e.ws.join("scratch.txt"), "user's file\n").unwrap();

    let v = e.ok(
        "write_file",
        json!({"path": "src/a.txt", "content": "one\n"}),
    );
    let commit = hooks_of(&v)[0]["commit"].as_str().unwrap().to_string();
    assert_eq!(e.git(&["rev-parse", "HEAD"]).trim(), commit);

    e.ok("read_file", json!({"path": "src/a.txt"}));
    e.ok(
        "edit_file",
        json!({"path": "src/a.txt", "old_string": "one", "new_string": "two"}),
    );
    // A command reports no files: what git status shows it changed is committed, and reported.
    let v = e.ok("run_command", json!({"command": "echo made > b.txt"}));
    assert_eq!(v["files_changed"], json!(["b.txt"]), "{v}");
    // Inline and in a lane alike. The command is journaled too (issue 24): the first undo
    // takes its file back, the second the edit; each commits what it changed.
    let (v, o) = e.call("undo", json!({}), &["--inline"]);
    assert_eq!(v["success"], true, "{}", text(&o));
    assert!(!e.ws.join("b.txt").exists());
    let (v, o) = e.call("undo", json!({}), &["--inline"]);
    assert_eq!(v["success"], true, "{}", text(&o));
    assert_eq!(e.file("src/a.txt"), "one\n");
    // A failed mutation changes nothing and commits nothing.
    let (v, _) = e.call(
        "edit_file",
        json!({"path": "src/a.txt", "old_string": "absent", "new_string": "x"}),
        &[],
    );
    assert_eq!(v["success"], false);

    let commits = e.commits();
    let subjects: Vec<&str> = commits.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(
        commits.len(),
        6,
        "one commit per mutating call: {commits:?}"
    );
    for (subject, tool) in
        subjects
            .iter()
            .zip(["undo", "undo", "run_command", "edit_file", "write_file"])
    {
        assert!(
            subject.starts_with(&format!("toolyard: {tool} (call ")),
            "{subject}"
        );
    }
    let files: Vec<&Vec<String>> = commits.iter().map(|(_, f)| f).collect();
    assert_eq!(files[0], &vec!["src/a.txt".to_string()]);
    assert_eq!(files[1], &vec!["b.txt".to_string()]);
    assert_eq!(files[2], &vec!["b.txt".to_string()]);
    assert_eq!(files[3], &vec!["src/a.txt".to_string()]);
    assert_eq!(files[4], &vec!["src/a.txt".to_string()]);
    let status = e.git(&["status", "--porcelain"]);
    assert!(status.contains(" M README"), "{status}");
    assert!(status.contains("?? scratch.txt"), "{status}");
}

#[test]
fn auto_commit_outside_a_git_repository_says_so_and_keeps_the_write() {
    let e = env("[hooks.post_tools]\nauto_commit = true\n");
    let v = e.ok("write_file", json!({"path": "a.txt", "content": "x\n"}));
    assert_eq!(e.file("a.txt"), "x\n");
    let out = v["output"].as_str().unwrap();
    assert!(out.contains("not in a git repository"), "{out}");
    assert_eq!(hooks_of(&v)[0]["status"], "failed");
}

#[test]
fn auto_commit_refuses_a_repository_that_names_a_filter_program() {
    let e = env("[hooks.post_tools]\nauto_commit = true\n");
    e.git_init();
    // What a sandboxed command could plant: git would run it, outside the sandbox, on `git add`.
    e.git(&["config", "filter.evil.clean", "touch ../pwned; cat"]);
    std::fs::write(e.ws.join(".gitattributes"), "* filter=evil\n").unwrap();
    let v = e.ok("write_file", json!({"path": "a.txt", "content": "x\n"}));
    let out = v["output"].as_str().unwrap();
    assert!(out.contains("filter.evil.clean"), "{out}");
    assert!(
        !e.base.join("pwned").exists(),
        "the planted filter never ran"
    );
    assert_eq!(e.commits().len(), 1);
}

#[test]
fn auto_commit_leaves_out_files_the_user_had_already_changed() {
    let e = env("[hooks.post_tools]\nauto_commit = true\n");
    e.git_init();
    for f in ["edited.txt", "cmd.txt", "clean.txt"] {
        std::fs::write(e.ws.join(f), "one\n").unwrap();
    }
    e.git(&["add", "."]);
    e.git(&["commit", "-q", "-m", "base"]);
    // The user's own work in progress: modified, staged, and untracked.
    std::fs::write(e.ws.join("edited.txt"), "one\nuser's line\n").unwrap();
    std::fs::write(e.ws.join("cmd.txt"), "one\nuser's line\n").unwrap();
    std::fs::write(e.ws.join("staged.txt"), "user's staged file\n").unwrap();
    e.git(&["add", "staged.txt"]);
    std::fs::write(e.ws.join("untracked.txt"), "user's file\n").unwrap();

    // A file tool editing a file the user had changed: nothing to commit, and it says why.
    e.ok("read_file", json!({"path": "edited.txt"}));
    let v = e.ok(
        "edit_file",
        json!({"path": "edited.txt", "old_string": "one", "new_string": "two"}),
    );
    let hook = &hooks_of(&v)[0];
    assert_eq!(hook["status"], "skipped", "{v}");
    assert_eq!(hook["left_out"], json!(["edited.txt"]), "{v}");
    let out = v["output"].as_str().unwrap();
    assert!(
        out.contains("left out edited.txt: it had uncommitted changes before the call"),
        "{out}"
    );
    assert_eq!(e.commits().len(), 2, "no commit for the user's file");

    // A file tool touching a dirty file and a clean one commits only the clean one.
    e.ok("read_file", json!({"path": "untracked.txt"}));
    let v = e.ok(
        "write_file",
        json!({"path": "untracked.txt", "content": "agent\n"}),
    );
    assert_eq!(hooks_of(&v)[0]["left_out"], json!(["untracked.txt"]), "{v}");
    e.ok("read_file", json!({"path": "staged.txt"}));
    let v = e.ok(
        "write_file",
        json!({"path": "staged.txt", "content": "agent\n"}),
    );
    assert_eq!(hooks_of(&v)[0]["left_out"], json!(["staged.txt"]), "{v}");
    let v = e.ok(
        "write_file",
        json!({"path": "new.txt", "content": "agent\n"}),
    );
    assert_eq!(hooks_of(&v)[0]["status"], "ok", "{v}");
    assert_eq!(e.commits()[0].1, vec!["new.txt".to_string()]);

    // A command changing a dirty file and a clean one commits only the clean one.
    let v = e.ok(
        "run_command",
        json!({"command": "echo agent >> cmd.txt && echo agent >> clean.txt"}),
    );
    let hook = &hooks_of(&v)[0];
    assert_eq!(hook["status"], "ok", "{v}");
    assert_eq!(hook["files"], json!(["clean.txt"]), "{v}");
    assert_eq!(hook["left_out"], json!(["cmd.txt"]), "{v}");
    let out = v["output"].as_str().unwrap();
    assert!(
        out.contains("left out cmd.txt: it had uncommitted changes before the call"),
        "{out}"
    );
    let commits = e.commits();
    assert_eq!(commits.len(), 4, "{commits:?}");
    assert_eq!(commits[0].1, vec!["clean.txt".to_string()]);
    // What HEAD holds of the user's files is what the user last committed.
    assert_eq!(e.git(&["show", "HEAD:edited.txt"]), "one\n");
    assert_eq!(e.git(&["show", "HEAD:cmd.txt"]), "one\n");
    assert_eq!(e.git(&["show", "HEAD:clean.txt"]), "one\nagent\n");
    let status = e.git(&["status", "--porcelain"]);
    for line in [
        " M edited.txt",
        " M cmd.txt",
        "AM staged.txt",
        "?? untracked.txt",
    ] {
        assert!(status.contains(line), "{line} missing from {status}");
    }
}
