//! Real development work through the real binary (issue 20): builds, package managers, git and
//! long output behave in the sandbox as they do outside it.
//!
//! Each workload is a fixture (made here, offline) and one string of shell commands. The commands
//! run first outside the sandbox (`sh -c` in a fresh copy of the fixture, HOME a fresh temp dir),
//! then through `toolyard call` in every lane where the workload belongs, each in a fresh copy:
//! the exit status, the set of files in the workspace afterwards and the files whose content is
//! known in advance (what the built program printed) must be the same as outside.
//!
//! The lanes: `run_command_isolated` (no-net), `run_command` (net), `test` and `build` (heavy),
//! the persistent `shell`, Claude Code's `Bash` and Codex's `exec_command`.
//!
//! Every call has TOOLYARD_STATE_DIR and HOME in a temp dir; the commands' environment is the
//! test's own minus the variables that would point a tool at the user's real caches or at this
//! cargo run (`CARGO_*`, `XDG_*`, ...), plus `RUSTUP_HOME` so the user's toolchains are found
//! (reading them is something the sandbox must allow).
//!
//! A missing tool (npm, gcc, make, python3's venv) is a failure that names it: CI installs them.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod common;
use common::toolyard_bin;

/// A bound on how long one workload may take in one lane: a failure bound, not a threshold (a
/// passing run takes seconds).
const PATIENCE_MS: u64 = 600_000;

/// Where a command runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lane {
    /// `run_command_isolated`: the no-net lane, with what is already local.
    Isolated,
    /// `run_command`: the net lane.
    Net,
    /// `test`: the heavy lane.
    Test,
    /// `build`: the heavy lane.
    Build,
    /// The persistent `shell` (net lane, a session host).
    Shell,
    /// Claude Code's `Bash` (`--dialect claude-code`).
    Bash,
    /// Codex's `exec_command` (`--dialect codex`), continued with `write_stdin` past its yield.
    Exec,
}

impl Lane {
    fn name(self) -> &'static str {
        match self {
            Lane::Isolated => "run_command_isolated",
            Lane::Net => "run_command",
            Lane::Test => "test",
            Lane::Build => "build",
            Lane::Shell => "shell",
            Lane::Bash => "Bash (claude-code)",
            Lane::Exec => "exec_command (codex)",
        }
    }
}

/// What one run of a command gave.
struct Ran {
    exit: Option<i32>,
    timed_out: bool,
    /// What the model sees (for a run outside: stdout then stderr).
    output: String,
    /// The tool's whole JSON result (the last one, for a continued `exec_command`).
    json: Value,
}

/// The test's temp dir: the toolyard state and HOME, and a workspace per run.
struct Env {
    t: Option<tempfile::TempDir>,
    base: PathBuf,
    state: PathBuf,
    home: PathBuf,
}

fn env() -> Env {
    let t = tempfile::tempdir().unwrap();
    let base = t.path().canonicalize().unwrap();
    let (state, home) = (base.join("state"), base.join("home"));
    for d in [&state, &home] {
        std::fs::create_dir_all(d).unwrap();
    }
    Env {
        t: Some(t),
        base,
        state,
        home,
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let pids = self.host_pids();
        // Deleting the state directory is what ends a session host; the kill is a backstop.
        drop(self.t.take());
        for pid in pids {
            if wait_until(Duration::from_secs(10), || !alive(pid)) {
                continue;
            }
            // SAFETY: kill with a pid this test's host record named.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// The environment every command gets, outside and (through toolyard) inside: the test's own,
/// without what points at this cargo run or at the user's caches and configuration.
fn base_env() -> Vec<(OsString, OsString)> {
    let dropped = |k: &str| {
        let u = k.to_ascii_uppercase();
        [
            "CARGO",
            "XDG_",
            "TOOLYARD_",
            "NPM_CONFIG_",
            "PIP_",
            "GIT_",
            "RUSTUP_HOME",
        ]
        .iter()
        .any(|p| u.starts_with(p))
    };
    let mut vars: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| k.to_str().is_some_and(|k| !dropped(k)))
        .collect();
    // The user's toolchains: rustup's proxies find them through RUSTUP_HOME (set by rustup for
    // this test process), else in the real HOME, which the commands' HOME no longer is.
    let rustup = std::env::var_os("RUSTUP_HOME").or_else(|| {
        let p = PathBuf::from(std::env::var_os("HOME")?).join(".rustup");
        p.is_dir().then(|| p.into_os_string())
    });
    if let Some(r) = rustup {
        vars.push(("RUSTUP_HOME".into(), r));
    }
    vars
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The last `n` characters of `s`, for failure messages.
fn tail(s: &str, n: usize) -> &str {
    let start = s.len().saturating_sub(n);
    let start = (start..=s.len())
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(s.len());
    &s[start..]
}

fn alive(pid: i32) -> bool {
    // A zombie has exited; only its parent has not reaped it yet.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().next().map(|st| st != "Z"))
        })
        .unwrap_or(false)
}

fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    f()
}

/// Panics, naming what CI must install, when `program` is not on PATH.
fn need(program: &str, package: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "`{program}` is not installed: these tests need it (install {package})"
    );
}

/// Runs `script` with `sh -c` in `dir`, HOME `home`, outside the sandbox (to make a fixture);
/// returns its stdout and stderr, and panics with them when it fails.
fn sh(dir: &Path, home: &Path, script: &str) -> String {
    let o = Command::new("sh")
        .args(["-c", script])
        .current_dir(dir)
        .env_clear()
        .envs(base_env())
        .env("HOME", home)
        .output()
        .expect("sh runs");
    assert!(
        o.status.success(),
        "making the fixture failed: `{script}` in {}:\n{}",
        dir.display(),
        text(&o)
    );
    text(&o)
}

/// Writes `files` (path relative to `root`, content) under `root`.
fn write_tree(root: &Path, files: &[(&str, &str)]) {
    for (rel, content) in files {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, content).unwrap();
    }
}

/// A copy of `fixture` at `dest` (modes and symlinks kept).
fn copy_tree(fixture: &Path, dest: &Path) {
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    let o = Command::new("cp")
        .arg("-a")
        .arg(fixture)
        .arg(dest)
        .output()
        .unwrap();
    assert!(o.status.success(), "cp -a: {}", text(&o));
}

/// Every path under `root` (directories with a trailing `/`, symlinks with their target),
/// relative to it, but toolyard's own `.toolyard/` at the root.
fn files_under(root: &Path) -> BTreeSet<String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            if rel == ".toolyard" {
                continue;
            }
            let Ok(meta) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&p).unwrap_or_default();
                out.insert(format!("{rel} -> {}", target.display()));
            } else if meta.is_dir() {
                out.insert(format!("{rel}/"));
                walk(root, &p, out);
            } else {
                out.insert(rel);
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(root, root, &mut out);
    out
}

impl Env {
    /// The session hosts' pids (shell, Bash and exec_command keep one per workspace).
    fn host_pids(&self) -> Vec<i32> {
        let mut out = Vec::new();
        let Ok(workspaces) = std::fs::read_dir(self.state.join("workspaces")) else {
            return out;
        };
        for ws in workspaces.flatten() {
            let Ok(hosts) = std::fs::read_dir(ws.path().join("hosts")) else {
                continue;
            };
            for h in hosts.flatten() {
                let p = h.path();
                if p.extension().is_some_and(|e| e == "json")
                    && let Ok(text) = std::fs::read_to_string(&p)
                    && let Ok(v) = serde_json::from_str::<Value>(&text)
                    && let Some(pid) = v["pid"].as_i64()
                    && alive(pid as i32)
                {
                    out.push(pid as i32);
                }
            }
        }
        out
    }

    /// `toolyard call TOOL ARGS --json [extra]` in `ws`, as JSON.
    fn call(&self, ws: &Path, tool: &str, args: &Value, extra: &[&str]) -> Value {
        let o = Command::new(toolyard_bin())
            .args(["call", tool, &args.to_string(), "--json", "--session", "rw"])
            .arg("-w")
            .arg(ws)
            .args(extra)
            .current_dir(ws)
            .env_clear()
            .envs(base_env())
            .env("TOOLYARD_STATE_DIR", &self.state)
            .env("HOME", &self.home)
            .output()
            .expect("toolyard runs");
        serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{tool}: not JSON ({e}): {}", text(&o)))
    }

    /// Runs `script` in `lane` with the workspace `ws`, waiting at most `limit_ms`.
    fn run_in(&self, lane: Lane, ws: &Path, script: &str, limit_ms: u64) -> Ran {
        let from = |v: Value| Ran {
            exit: v["data"]["exit_code"].as_i64().map(|c| c as i32),
            timed_out: v["data"]["timed_out"].as_bool().unwrap_or(false),
            output: v["output"].as_str().unwrap_or_default().to_string(),
            json: v,
        };
        let plain = json!({"command": script, "timeout_ms": limit_ms});
        match lane {
            Lane::Isolated | Lane::Net | Lane::Test | Lane::Build => {
                let tool = match lane {
                    Lane::Isolated => "run_command_isolated",
                    Lane::Net => "run_command",
                    Lane::Test => "test",
                    _ => "build",
                };
                from(self.call(ws, tool, &plain, &[]))
            }
            // A subshell: an `exit` or `cd` of the script must not end or move the session's
            // shell.
            Lane::Shell => from(self.call(
                ws,
                "shell",
                &json!({"command": format!("( {script} )"), "timeout_ms": limit_ms}),
                &[],
            )),
            Lane::Bash => from(self.call(
                ws,
                "Bash",
                &json!({"command": script, "timeout": limit_ms}),
                &["--dialect", "claude-code"],
            )),
            Lane::Exec => {
                // Codex yields after at most 30 s; a longer command is continued by polling.
                let codex = ["--dialect", "codex"];
                let yield_ms = limit_ms.min(30_000);
                let deadline = Instant::now() + Duration::from_millis(limit_ms);
                let mut v = self.call(
                    ws,
                    "exec_command",
                    &json!({"cmd": script, "yield_time_ms": yield_ms}),
                    &codex,
                );
                let mut output = v["output"].as_str().unwrap_or_default().to_string();
                while let Some(id) = v["data"]["session_id"].as_str().map(str::to_string) {
                    if Instant::now() >= deadline {
                        return Ran {
                            exit: None,
                            timed_out: true,
                            output,
                            json: v,
                        };
                    }
                    v = self.call(
                        ws,
                        "write_stdin",
                        &json!({"session_id": id, "chars": "", "yield_time_ms": yield_ms}),
                        &codex,
                    );
                    output.push_str(v["output"].as_str().unwrap_or_default());
                }
                let mut ran = from(v);
                ran.output = output;
                ran
            }
        }
    }
}

/// A workload: a fixture and the commands run in it.
struct Workload {
    name: &'static str,
    /// The fixture, copied afresh for every run.
    fixture: PathBuf,
    /// The commands, one `sh -c` string (POSIX: every lane's shell runs it).
    script: String,
    /// Files the commands write whose content is known in advance.
    expect: Vec<(&'static str, String)>,
}

impl Workload {
    /// Runs the workload outside the sandbox, then in each of `lanes`, and panics listing every
    /// lane whose exit status, files or known contents differ from the run outside.
    fn compare(&self, e: &Env, lanes: &[Lane]) {
        let ws = e.base.join("runs/outside/ws");
        copy_tree(&self.fixture, &ws);
        let home = e.base.join("runs/outside/home");
        std::fs::create_dir_all(&home).unwrap();
        let o = Command::new("timeout")
            .arg((PATIENCE_MS / 1000).to_string())
            .args(["sh", "-c", &self.script])
            .current_dir(&ws)
            .env_clear()
            .envs(base_env())
            .env("HOME", &home)
            .output()
            .expect("sh runs");
        let outside = o.status.code();
        assert_eq!(
            outside,
            Some(0),
            "{}: the commands fail even outside the sandbox:\n{}",
            self.name,
            text(&o)
        );
        let reference = files_under(&ws);
        let mut failures = self.wrong_contents(&ws, "outside");
        assert!(failures.is_empty(), "{}", failures.join("\n"));

        for &lane in lanes {
            let dir = e.base.join(format!("runs/{lane:?}/ws"));
            copy_tree(&self.fixture, &dir);
            let ran = e.run_in(lane, &dir, &self.script, PATIENCE_MS);
            let mut wrong = Vec::new();
            if ran.exit != outside || ran.timed_out {
                wrong.push(format!(
                    "exit status {:?}{} where outside it is {outside:?}",
                    ran.exit,
                    if ran.timed_out { " (timed out)" } else { "" }
                ));
            }
            let files = files_under(&dir);
            let missing: Vec<_> = reference.difference(&files).take(8).collect();
            let extra: Vec<_> = files.difference(&reference).take(8).collect();
            if !missing.is_empty() || !extra.is_empty() {
                wrong.push(format!(
                    "files differ from outside: missing {} (first: {missing:?}), extra {} (first: {extra:?})",
                    reference.difference(&files).count(),
                    files.difference(&reference).count(),
                ));
            }
            wrong.extend(self.wrong_contents(&dir, lane.name()));
            if !wrong.is_empty() {
                failures.push(format!(
                    "== {} in {}:\n  {}\n  its output (end):\n{}",
                    self.name,
                    lane.name(),
                    wrong.join("\n  "),
                    tail(&ran.output, 2500)
                ));
            }
        }
        assert!(
            failures.is_empty(),
            "{} of {} lanes differ from the run outside the sandbox:\n{}",
            failures.len(),
            lanes.len(),
            failures.join("\n\n")
        );
    }

    /// The expected files of `ws` that are missing or hold something else.
    fn wrong_contents(&self, ws: &Path, lane: &str) -> Vec<String> {
        self.expect
            .iter()
            .filter_map(|(rel, want)| {
                let got = std::fs::read_to_string(ws.join(rel)).ok();
                (got.as_deref() != Some(want.as_str())).then(|| {
                    format!(
                        "{}: {rel} in {lane} holds {got:?}, expected {want:?}",
                        self.name
                    )
                })
            })
            .collect()
    }
}

/// Steps joined with `&&`: the first failure ends the script with its status.
fn steps(lines: &[&str]) -> String {
    lines.join(" && ")
}

// ---------------------------------------------------------------- the workloads

/// A Rust workspace: a binary with a path dependency on a library with a unit test and a doc
/// test. `cargo build`, `cargo test` (the doc test needs rustdoc to link against the rlib),
/// then the binary runs.
#[test]
fn a_rust_workspace_with_a_path_dependency_builds_and_tests_in_every_lane() {
    need("cargo", "a Rust toolchain");
    let e = env();
    let fixture = e.base.join("fixture");
    write_tree(
        &fixture,
        &[
            (
                "Cargo.toml",
                "[workspace]\nmembers = [\"app\", \"greet\"]\nresolver = \"2\"\n",
            ),
            (
                "greet/Cargo.toml",
                "[package]\nname = \"greet\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
            ),
            (
                "greet/src/lib.rs",
                "//! Greetings.\n\n/// Greets `name`.\n///\n/// ```\n/// assert_eq!(greet::greet(\"doc\"), \"hello, doc\");\n/// ```\npub fn greet(name: &str) -> String {\n    format!(\"hello, {name}\")\n}\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn greets() {\n        assert_eq!(super::greet(\"unit\"), \"hello, unit\");\n    }\n}\n",
            ),
            (
                "app/Cargo.toml",
                "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\ngreet = { path = \"../greet\" }\n",
            ),
            (
                "app/src/main.rs",
                "fn main() {\n    println!(\"{}\", greet::greet(\"world\"));\n}\n",
            ),
        ],
    );
    let w = Workload {
        name: "cargo workspace",
        fixture,
        script: steps(&[
            "export CARGO_TARGET_DIR=\"$PWD/target\" CARGO_INCREMENTAL=0",
            "cargo build --offline",
            "cargo test --offline",
            "./target/debug/app > app-says.txt",
        ]),
        expect: vec![("app-says.txt", "hello, world\n".into())],
    };
    w.compare(
        &e,
        &[
            Lane::Isolated,
            Lane::Net,
            Lane::Test,
            Lane::Build,
            Lane::Shell,
            Lane::Bash,
            Lane::Exec,
        ],
    );
}

/// A crate depending on a registry crate, `tinydep = "0.1"`, served from a vendored directory
/// (`.cargo-checksum.json` and all) through a `[source]` replacement in the workspace's
/// `.cargo/config.toml`, as `cargo vendor` leaves it: no network, no registry cache.
#[test]
fn a_crate_with_a_vendored_registry_dependency_builds_offline() {
    need("cargo", "a Rust toolchain");
    need("sha256sum", "coreutils");
    let e = env();
    let fixture = e.base.join("fixture");
    write_tree(
        &fixture,
        &[
            (
                "Cargo.toml",
                "[package]\nname = \"usevendor\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\ntinydep = \"0.1\"\n",
            ),
            (
                "src/main.rs",
                "fn main() {\n    println!(\"{}\", tinydep::shout(\"vendored\"));\n}\n",
            ),
            (
                ".cargo/config.toml",
                "[source.crates-io]\nreplace-with = \"vendored-sources\"\n\n[source.vendored-sources]\ndirectory = \"vendor\"\n",
            ),
            (
                "vendor/tinydep/Cargo.toml",
                "[package]\nname = \"tinydep\"\nversion = \"0.1.3\"\nedition = \"2021\"\ndescription = \"A registry crate, vendored\"\nlicense = \"MIT\"\n",
            ),
            (
                "vendor/tinydep/src/lib.rs",
                "//! Loud text.\n\n/// `s` in capitals, with a `!`.\npub fn shout(s: &str) -> String {\n    format!(\"{}!\", s.to_uppercase())\n}\n",
            ),
        ],
    );
    // The checksums cargo verifies before it builds a vendored crate.
    let sums = sh(
        &fixture.join("vendor/tinydep"),
        &e.home,
        "sha256sum Cargo.toml src/lib.rs",
    );
    let files: serde_json::Map<String, Value> = sums
        .lines()
        .filter_map(|l| l.split_once("  "))
        .map(|(sum, path)| (path.to_string(), Value::from(sum)))
        .collect();
    assert_eq!(files.len(), 2, "{sums}");
    std::fs::write(
        fixture.join("vendor/tinydep/.cargo-checksum.json"),
        json!({"files": files, "package": null}).to_string(),
    )
    .unwrap();
    let w = Workload {
        name: "vendored crate",
        fixture,
        script: steps(&[
            "export CARGO_TARGET_DIR=\"$PWD/target\" CARGO_INCREMENTAL=0",
            "cargo build --offline",
            "./target/debug/usevendor > says.txt",
        ]),
        expect: vec![("says.txt", "VENDORED!\n".into())],
    };
    w.compare(
        &e,
        &[
            Lane::Isolated,
            Lane::Build,
            Lane::Shell,
            Lane::Bash,
            Lane::Exec,
        ],
    );
}

/// Makes `tinypkg-1.0-py3-none-any.whl` in `dir` by hand (a zip with the package, METADATA,
/// WHEEL and RECORD), with python3's zipfile: no setuptools, no network.
const MAKE_WHEEL: &str = r#"
import base64, hashlib, sys, zipfile
files = {
    "tinypkg/__init__.py": "def double(x):\n    return 2 * x\n",
    "tinypkg-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\nSummary: A tiny package\n",
    "tinypkg-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = []
with zipfile.ZipFile(sys.argv[1] + "/tinypkg-1.0-py3-none-any.whl", "w") as z:
    for name, text in files.items():
        data = text.encode()
        z.writestr(name, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append("tinypkg-1.0.dist-info/RECORD,,")
    z.writestr("tinypkg-1.0.dist-info/RECORD", "\n".join(record) + "\n")
"#;

/// A venv, a package installed into it from a local wheel directory (no index), and the
/// project's tests run with the venv's python.
#[test]
fn a_python_venv_installs_a_local_wheel_and_runs_its_tests() {
    need("python3", "python3");
    let e = env();
    let probe = Command::new("python3")
        .args(["-c", "import ensurepip, venv"])
        .output()
        .expect("python3 runs");
    assert!(
        probe.status.success(),
        "python3 cannot make a venv with pip (install python3-venv): {}",
        text(&probe)
    );
    let fixture = e.base.join("fixture");
    write_tree(
        &fixture,
        &[
            ("tests/__init__.py", ""),
            (
                "tests/test_tinypkg.py",
                "import unittest\n\nimport tinypkg\n\n\nclass Double(unittest.TestCase):\n    def test_double(self):\n        self.assertEqual(tinypkg.double(21), 42)\n",
            ),
        ],
    );
    std::fs::create_dir_all(fixture.join("wheels")).unwrap();
    let maker = e.base.join("make_wheel.py");
    std::fs::write(&maker, MAKE_WHEEL).unwrap();
    sh(
        &fixture,
        &e.home,
        &format!("python3 {} wheels", maker.display()),
    );
    let w = Workload {
        name: "python venv",
        fixture,
        script: steps(&[
            "python3 -m venv .venv",
            ".venv/bin/pip install --no-index --find-links wheels tinypkg",
            ".venv/bin/python -m unittest discover -v",
            ".venv/bin/python -c 'import tinypkg; print(tinypkg.double(50))' > says.txt",
        ]),
        expect: vec![("says.txt", "100\n".into())],
    };
    // Not in the net lane: each venv takes seconds (ensurepip), and an install from a wheel
    // directory is what the no-net lane is for.
    w.compare(&e, &[Lane::Isolated, Lane::Test, Lane::Shell, Lane::Bash]);
}

/// An npm project installs a package from a local tarball (`npm pack` of a tiny package) with
/// `--offline`, then runs a script that requires it.
#[test]
fn an_npm_project_installs_a_local_tarball_and_runs_a_script() {
    need("npm", "nodejs and npm");
    need("node", "nodejs");
    let e = env();
    let lib = e.base.join("tinylib");
    write_tree(
        &lib,
        &[
            (
                "package.json",
                "{\n  \"name\": \"tinylib\",\n  \"version\": \"1.0.0\",\n  \"main\": \"index.js\",\n  \"license\": \"MIT\"\n}\n",
            ),
            (
                "index.js",
                "exports.shout = (s) => s.toUpperCase() + \"!\";\n",
            ),
        ],
    );
    let fixture = e.base.join("fixture");
    write_tree(
        &fixture,
        &[
            (
                "package.json",
                "{\n  \"name\": \"proj\",\n  \"version\": \"1.0.0\",\n  \"private\": true,\n  \"scripts\": {\n    \"shout\": \"node main.js\"\n  }\n}\n",
            ),
            (
                "main.js",
                "console.log(require(\"tinylib\").shout(\"npm\"));\n",
            ),
        ],
    );
    let pack_home = e.base.join("pack-home");
    std::fs::create_dir_all(&pack_home).unwrap();
    sh(
        &lib,
        &pack_home,
        &format!("npm pack --silent --pack-destination {}", fixture.display()),
    );
    assert!(fixture.join("tinylib-1.0.0.tgz").is_file());
    let w = Workload {
        name: "npm project",
        fixture,
        script: steps(&[
            "npm install ./tinylib-1.0.0.tgz --offline --no-audit --no-fund",
            "npm run --silent shout > says.txt",
        ]),
        expect: vec![("says.txt", "NPM!\n".into())],
    };
    w.compare(
        &e,
        &[
            Lane::Isolated,
            Lane::Net,
            Lane::Build,
            Lane::Shell,
            Lane::Exec,
        ],
    );
}

/// A C program of two files through a Makefile (gcc via `cc`), then the program runs.
#[test]
fn a_c_program_builds_through_make() {
    need("make", "make");
    need("cc", "gcc");
    let e = env();
    let fixture = e.base.join("fixture");
    write_tree(
        &fixture,
        &[
            (
                "Makefile",
                "hello: main.o greet.o\n\t$(CC) -o $@ main.o greet.o\n\n%.o: %.c greet.h\n\t$(CC) -Wall -c -o $@ $<\n",
            ),
            ("greet.h", "const char *greeting(void);\n"),
            (
                "greet.c",
                "#include \"greet.h\"\n\nconst char *greeting(void) { return \"hello from make\"; }\n",
            ),
            (
                "main.c",
                "#include <stdio.h>\n#include \"greet.h\"\n\nint main(void) {\n    puts(greeting());\n    return 0;\n}\n",
            ),
        ],
    );
    let w = Workload {
        name: "C through make",
        fixture,
        script: steps(&["make", "./hello > says.txt"]),
        expect: vec![("says.txt", "hello from make\n".into())],
    };
    w.compare(&e, &[Lane::Isolated, Lane::Build, Lane::Bash, Lane::Exec]);
}

/// Fixed identities and dates: the same commits (and so the same object and pack names) in
/// every run.
const GIT_IDENTITY: &str = "export GIT_AUTHOR_NAME=Dev GIT_AUTHOR_EMAIL=dev@example.com \
     GIT_COMMITTER_NAME=Dev GIT_COMMITTER_EMAIL=dev@example.com \
     GIT_AUTHOR_DATE=2024-01-02T03:04:05Z GIT_COMMITTER_DATE=2024-01-02T03:04:05Z";

/// git as a developer uses it: init, commits, a branch, a rebase, a stash, gc, a worktree, a
/// bare clone and a clone of it, and a clone of a local bare repository outside the workspace.
#[test]
fn git_init_commit_branch_rebase_stash_gc_worktree_and_clone() {
    need("git", "git");
    let e = env();
    // The upstream: a bare repository outside every workspace, with one commit.
    let upstream = e.base.join("upstream.git");
    sh(
        &e.base,
        &e.home,
        &steps(&[
            GIT_IDENTITY,
            "git init -q --bare -b main upstream.git",
            "git init -q -b main seed",
            "cd seed",
            "echo 'from upstream' > README",
            "git add README",
            "git commit -q -m upstream",
            "git push -q ../upstream.git main",
        ]),
    );
    let fixture = e.base.join("fixture");
    std::fs::create_dir_all(&fixture).unwrap();
    let upstream_clone = format!("git clone -q {} ../upstream-clone", upstream.display());
    let w = Workload {
        name: "git",
        fixture,
        script: steps(&[
            GIT_IDENTITY,
            "git init -q -b main repo",
            "cd repo",
            "echo one > a.txt",
            "git add a.txt",
            "git commit -q -m one",
            "git checkout -q -b feature",
            "echo two > b.txt",
            "git add b.txt",
            "git commit -q -m two",
            "git checkout -q main",
            "echo three > c.txt",
            "git add c.txt",
            "git commit -q -m three",
            "git checkout -q feature",
            "git rebase -q main",
            "echo dirty >> a.txt",
            "git stash -q",
            "git stash pop -q",
            "git commit -q -a -m four",
            "git gc -q",
            "git worktree add -q ../wt -b hotfix main",
            "git clone -q --bare . ../mirror.git",
            "git clone -q ../mirror.git ../clone",
            &upstream_clone,
            "git log --format=%s > ../history.txt",
            "git -C ../clone log --format=%s > ../clone-history.txt",
            "git -C ../wt log --format=%s > ../wt-history.txt",
            "cat ../upstream-clone/README > ../upstream.txt",
        ]),
        expect: vec![
            ("history.txt", "four\ntwo\nthree\none\n".into()),
            ("clone-history.txt", "four\ntwo\nthree\none\n".into()),
            ("wt-history.txt", "three\none\n".into()),
            ("upstream.txt", "from upstream\n".into()),
            ("repo/a.txt", "one\ndirty\n".into()),
        ],
    };
    w.compare(
        &e,
        &[
            Lane::Isolated,
            Lane::Net,
            Lane::Shell,
            Lane::Bash,
            Lane::Exec,
        ],
    );
}

// ---------------------------------------------------------------- commands that wait, and output

/// Runs `f` for every lane at once (each in its own workspace) and returns the failures it
/// reports, each prefixed with its lane: these tests mostly wait, so their lanes wait together.
fn in_each_lane(lanes: &[Lane], f: impl Fn(Lane) -> Vec<String> + Sync) {
    let failures: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = lanes
            .iter()
            .map(|&lane| {
                let f = &f;
                (lane, s.spawn(move || f(lane)))
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|(lane, h)| {
                let wrong = h.join().unwrap_or_else(|_| vec!["panicked".into()]);
                wrong
                    .into_iter()
                    .map(move |w| format!("{}: {w}", lane.name()))
            })
            .collect()
    });
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// `git commit` without `-m` must not wait for an editor nobody will close: it fails at once,
/// saying to pass `-m`, and leaves no lock (or swap file) behind, so the next git command works.
#[test]
fn git_commit_without_a_message_fails_at_once_naming_m_and_leaves_no_lock() {
    need("git", "git");
    let e = env();
    let fixture = e.base.join("fixture");
    std::fs::create_dir_all(&fixture).unwrap();
    sh(
        &fixture,
        &e.home,
        &steps(&[
            "git init -q -b main",
            "git config user.name Dev",
            "git config user.email dev@example.com",
            "echo one > a.txt",
            "git add a.txt",
        ]),
    );
    let lanes = [
        Lane::Isolated,
        Lane::Net,
        Lane::Test,
        Lane::Shell,
        Lane::Bash,
        Lane::Exec,
    ];
    in_each_lane(&lanes, |lane| {
        let ws = e.base.join(format!("runs/{lane:?}/ws"));
        copy_tree(&fixture, &ws);
        // 30 s: far more than failing at once takes; an editor waiting for a person takes all.
        let ran = e.run_in(lane, &ws, "git commit", 30_000);
        let mut wrong = Vec::new();
        if ran.timed_out || ran.exit.is_none() {
            wrong.push("still waiting after 30 s (an editor or a prompt?)".to_string());
        } else if ran.exit == Some(0) {
            wrong.push("exit status 0: it committed without a message".to_string());
        }
        if !ran.output.contains("-m") {
            wrong.push("the output does not name `-m`".to_string());
        }
        for left in [".git/index.lock", ".git/.COMMIT_EDITMSG.swp"] {
            if ws.join(left).exists() {
                wrong.push(format!("{left} is left behind"));
            }
        }
        let status = Command::new("git")
            .args(["commit", "-q", "-m", "after"])
            .current_dir(&ws)
            .env_clear()
            .envs(base_env())
            .env("HOME", &e.home)
            .output()
            .unwrap();
        if !status.status.success() {
            wrong.push(format!("the next `git commit -m` fails: {}", text(&status)));
        }
        if wrong.is_empty() {
            return wrong;
        }
        vec![format!(
            "{}\n  its output (end):\n{}",
            wrong.join("; "),
            tail(&ran.output, 1500)
        )]
    });
}

/// A command still running at its timeout gets SIGTERM first, and time to clean up: its trap
/// runs and removes its lock file. The result names the signal.
#[test]
fn a_command_at_its_timeout_sees_sigterm_and_cleans_up() {
    let e = env();
    let fixture = e.base.join("fixture");
    std::fs::create_dir_all(&fixture).unwrap();
    // The persistent shell interrupts a command as a terminal's ^C does: SIGINT is its signal.
    let script = "trap 'echo cleaned-up after TERM; rm -f held.lock; exit 143' TERM; \
                  trap 'echo cleaned-up after INT; rm -f held.lock; exit 130' INT; \
                  touch held.lock; echo holding the lock; sleep 600 & wait";
    let lanes = [
        Lane::Isolated,
        Lane::Net,
        Lane::Test,
        Lane::Shell,
        Lane::Bash,
    ];
    in_each_lane(&lanes, |lane| {
        let ws = e.base.join(format!("runs/{lane:?}/ws"));
        copy_tree(&fixture, &ws);
        let ran = e.run_in(lane, &ws, script, 5_000);
        let mut wrong = Vec::new();
        if !ran.timed_out {
            wrong.push(format!("not reported as timed out: {}", ran.json["data"]));
        }
        if !ran.output.contains("holding the lock") {
            wrong.push("the command's output before the timeout is lost".to_string());
        }
        let (signal, name) = match lane {
            Lane::Shell if ran.output.contains("cleaned-up after INT") => ("INT", "^C"),
            _ => ("TERM", "SIGTERM"),
        };
        if !ran.output.contains(&format!("cleaned-up after {signal}")) {
            wrong.push(format!("its trap on {signal} did not run"));
        }
        if ws.join("held.lock").exists() {
            wrong.push("held.lock is left behind".to_string());
        }
        if !ran.output.contains(name) {
            wrong.push(format!("the result does not say {name} ended it"));
        }
        if wrong.is_empty() {
            return wrong;
        }
        vec![format!(
            "{}\n  its output:\n{}",
            wrong.join("; "),
            tail(&ran.output, 1500)
        )]
    });
}

/// The README's output budget: 30,000 bytes and 1,000 lines, head and tail kept.
const BUDGET_BYTES: usize = 30_000;
const BUDGET_LINES: usize = 1_000;

/// `seq 1 100000` (588,895 bytes on one stream) comes back as its head and its tail, within the
/// stated budget and using all of it: an empty stderr keeps none of it.
#[test]
fn long_output_keeps_head_and_tail_using_the_whole_budget() {
    let e = env();
    let fixture = e.base.join("fixture");
    std::fs::create_dir_all(&fixture).unwrap();
    let lanes = [
        Lane::Isolated,
        Lane::Net,
        Lane::Test,
        Lane::Shell,
        Lane::Bash,
    ];
    in_each_lane(&lanes, |lane| {
        let ws = e.base.join(format!("runs/{lane:?}/ws"));
        copy_tree(&fixture, &ws);
        let ran = e.run_in(lane, &ws, "seq 1 100000", PATIENCE_MS);
        let numbers: Vec<u64> = ran
            .output
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        let head = numbers
            .iter()
            .zip(1..)
            .take_while(|(n, i)| **n == *i)
            .count();
        let tail_len = numbers
            .iter()
            .rev()
            .zip((1..=100_000u64).rev())
            .take_while(|(n, i)| **n == *i)
            .count();
        let mut wrong = Vec::new();
        if ran.exit != Some(0) {
            wrong.push(format!("exit status {:?}", ran.exit));
        }
        if head + tail_len != numbers.len() || head == 0 || tail_len == 0 {
            wrong.push(format!(
                "not a head and a tail: {} numbers, the first {head} from 1, the last {tail_len} up to 100000",
                numbers.len()
            ));
        }
        // The notes (exit status, what was cut and where the rest is) may take a few lines.
        let kept = numbers.len();
        if !(BUDGET_LINES - 10..=BUDGET_LINES).contains(&kept) {
            wrong.push(format!(
                "{kept} of the 100000 lines kept (head {head}, tail {tail_len}) where the budget is {BUDGET_LINES} lines"
            ));
        }
        if ran.output.len() > BUDGET_BYTES + 1_000 {
            wrong.push(format!(
                "{} bytes returned, over the budget of {BUDGET_BYTES}",
                ran.output.len()
            ));
        }
        wrong
    });
}

/// stdout and stderr come back as one stream in the order they were written, as a terminal
/// shows them.
#[test]
fn stdout_and_stderr_come_back_in_the_order_they_were_written() {
    let e = env();
    let fixture = e.base.join("fixture");
    std::fs::create_dir_all(&fixture).unwrap();
    let script = "echo out-1; echo err-1 >&2; echo out-2; echo err-2 >&2; echo out-3";
    let order = ["out-1", "err-1", "out-2", "err-2", "out-3"];
    let lanes = [
        Lane::Isolated,
        Lane::Net,
        Lane::Test,
        Lane::Shell,
        Lane::Bash,
        Lane::Exec,
    ];
    in_each_lane(&lanes, |lane| {
        let ws = e.base.join(format!("runs/{lane:?}/ws"));
        copy_tree(&fixture, &ws);
        let ran = e.run_in(lane, &ws, script, PATIENCE_MS);
        let at: Vec<Option<usize>> = order.iter().map(|w| ran.output.find(w)).collect();
        let in_order = at.iter().all(Option::is_some) && at.windows(2).all(|p| p[0] < p[1]);
        if in_order {
            return Vec::new();
        }
        vec![format!(
            "written {order:?}, returned out of order:\n{}",
            ran.output
        )]
    });
}

/// The path in a cut output's "full output in PATH" note.
fn full_output_path(output: &str) -> Option<String> {
    let rest = &output[output.find("full output in ")? + "full output in ".len()..];
    let path = rest.split_whitespace().next()?;
    Some(path.trim_end_matches([')', ']', ';', ',']).to_string())
}

/// The saved full output of a cut result is read back with the dialect's own read tool
/// (`read_file`, Claude Code's `Read`; Codex has none, so `sed` through `exec_command`), from
/// the path its note gives: the middle that was cut is there.
#[test]
fn the_saved_full_output_is_read_back_with_read_file() {
    let e = env();
    let fixture = e.base.join("fixture");
    std::fs::create_dir_all(&fixture).unwrap();
    let lanes = [
        Lane::Isolated,
        Lane::Net,
        Lane::Test,
        Lane::Bash,
        Lane::Exec,
    ];
    in_each_lane(&lanes, |lane| {
        let ws = e.base.join(format!("runs/{lane:?}/ws"));
        copy_tree(&fixture, &ws);
        let ran = e.run_in(lane, &ws, "seq 1 100000", PATIENCE_MS);
        let Some(path) = full_output_path(&ran.output) else {
            return vec![format!(
                "no \"full output in PATH\" note:\n{}",
                tail(&ran.output, 800)
            )];
        };
        if ran.output.lines().any(|l| l.trim() == "50000") {
            return vec!["line 50000 was not cut: the test needs a longer output".into()];
        }
        let read = match lane {
            Lane::Exec => e.call(
                &ws,
                "exec_command",
                &json!({"cmd": format!("sed -n 49990,50020p '{path}'")}),
                &["--dialect", "codex"],
            ),
            Lane::Bash => e.call(
                &ws,
                "Read",
                &json!({"file_path": path, "offset": 49_990, "limit": 30}),
                &["--dialect", "claude-code"],
            ),
            _ => e.call(
                &ws,
                "read_file",
                &json!({"path": path, "offset": 49_990, "limit": 30}),
                &[],
            ),
        };
        let text = read["output"].as_str().unwrap_or_default();
        let found = text.lines().any(|l| {
            let l = l.trim_end();
            l.ends_with("50000") && !l.ends_with("150000")
        });
        if read["success"] == true && found {
            return Vec::new();
        }
        vec![format!(
            "reading {path} around line 50000 gave:\n{}",
            tail(text, 1500)
        )]
    });
}
