//! What the runner-link tests share: a Toolyard server driven through its CLI, whose workspace
//! must stay untouched, and the bounds that keep a hang from stalling the suite.
#![allow(dead_code)] // each test crate uses its own part

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A generous bound for the harness itself, far under the 60 s of the command the kill tests
/// interrupt: a hang fails the test instead of stalling the suite.
pub const HARNESS: Duration = Duration::from_secs(40);

/// The binary under test (`TOOLYARD_TEST_BIN` overrides cargo's).
pub fn toolyard_bin() -> PathBuf {
    std::env::var_os("TOOLYARD_TEST_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_toolyard")))
}

/// Every file and directory under `dir` with its bytes and mode.
pub fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (Vec<u8>, u32)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let meta = e.metadata().unwrap();
            let rel = e.path().strip_prefix(dir).unwrap().to_path_buf();
            if meta.is_dir() {
                stack.push(e.path());
                out.insert(rel, (Vec::new(), meta.permissions().mode()));
            } else {
                let bytes = std::fs::read(e.path()).unwrap();
                out.insert(rel, (bytes, meta.permissions().mode()));
            }
        }
    }
    out
}

/// Run `cmd`, killing it and failing the test if it outlives [`HARNESS`].
pub fn run_bounded(mut cmd: Command) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("toolyard runs");
    let started = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if started.elapsed() > HARNESS {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!(
                "still running after {HARNESS:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Where a test's server lives: its `-w`, state, home, catalog and working directory.
pub struct Server<'a> {
    pub ws: &'a Path,
    pub state: &'a Path,
    pub home: &'a Path,
    pub catalog: &'a Path,
    pub base: &'a Path,
}

/// The server's CLI, for a test environment that says where its server lives.
pub trait ServerCli {
    /// Where the server lives.
    fn server(&self) -> Server<'_>;

    /// `toolyard ARGS -w WS`, with the server's state, home and catalog.
    fn cli(&self, args: &[&str]) -> Output {
        let s = self.server();
        let mut cmd = Command::new(toolyard_bin());
        cmd.args(args)
            .arg("-w")
            .arg(s.ws)
            .current_dir(s.base)
            .env("TOOLYARD_STATE_DIR", s.state)
            .env("HOME", s.home)
            .env("TOOLYARD_CATALOG", s.catalog);
        run_bounded(cmd)
    }

    /// `toolyard call TOOL ARGS --json` in `session`.
    fn call(&self, session: &str, tool: &str, args: Value) -> Value {
        self.call_with(session, tool, args, &[])
    }

    /// [`ServerCli::call`] with `extra` arguments (`--dialect codex`).
    fn call_with(&self, session: &str, tool: &str, args: Value, extra: &[&str]) -> Value {
        let args = args.to_string();
        let mut argv = vec!["call", tool, &args, "--json", "--session", session];
        argv.extend_from_slice(extra);
        let o = self.cli(&argv);
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): {}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        })
    }

    /// A call that must succeed: its output.
    fn ok(&self, session: &str, tool: &str, args: Value) -> String {
        let v = self.call(session, tool, args);
        assert_eq!(v["success"], true, "{tool}: {v}");
        v["output"].as_str().unwrap_or_default().to_string()
    }
}
