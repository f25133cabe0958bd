//! Crash safety: a process making journaled writes is killed with SIGKILL at random moments;
//! afterwards every file holds one whole version (old or new, never a mix), recovery settles
//! the pending entries, and undo restores the content from before the last change.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use toolyard_records::{ChangeFilter, ChangeStatus, Journal, NewChange};
use toolyard_workspace::{Expect, StateDir, Workspace, hash_bytes};

const FILES: usize = 4;
const CHILD_ENV: &str = "TOOLYARD_JOURNAL_CRASH_CHILD";

/// Version `generation` of file `file`: a header naming both, then a body of varying size (up to
/// about 1.5 MiB, so some writes span several journal chunks and take a while).
fn content(file: usize, generation: u64) -> Vec<u8> {
    let mut v = format!("file {file} gen {generation}\n").into_bytes();
    let len = (generation as usize * 7919 + file * 104_729) % (3 << 19);
    v.extend((0..len).map(|i| (i as u64 ^ generation) as u8));
    v
}

/// Which version `bytes` is, if it is exactly one whole version of `file`.
fn version_of(file: usize, bytes: &[u8]) -> Option<u64> {
    let header = bytes.split(|b| *b == b'\n').next()?;
    let header = std::str::from_utf8(header).ok()?;
    let generation: u64 = header
        .strip_prefix(&format!("file {file} gen "))?
        .parse()
        .ok()?;
    (content(file, generation) == bytes).then_some(generation)
}

/// The child: write new versions of the files, round-robin, until killed.
#[test]
fn crash_child() {
    let Some(dirs) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let dirs = dirs.into_string().unwrap();
    let (ws, state) = dirs.split_once('\n').unwrap();
    let ws = Workspace::open(Path::new(ws)).unwrap();
    let state = StateDir::at(Path::new(state), ws.root()).unwrap();
    let j = Journal::open(&state).unwrap();
    for round in 0.. {
        let file = round % FILES;
        let name = format!("f{file}");
        let rel = ws.relative(&name, ws.root()).unwrap();
        let (expect, next) = match ws.read(&rel) {
            Ok(bytes) => (
                Expect::Hash(hash_bytes(&bytes)),
                version_of(file, &bytes).expect("a whole version") + 1,
            ),
            Err(_) => (Expect::Missing, 0),
        };
        let new = content(file, next);
        let h = hash_bytes(&new);
        let change = NewChange {
            session: "crash",
            call_id: "c",
            tool: "write_file",
            path: &rel,
            new_hash: &h,
            group: None,
        };
        j.apply(&ws, change, &mut &new[..], &expect, None).unwrap();
    }
}

#[test]
fn files_are_old_or_new_after_sigkill_and_undo_restores_the_old() {
    let fx = common::Fixture::new();
    let exe = std::env::current_exe().unwrap();
    let dirs = format!("{}\n{}", fx.ws.root().display(), fx.state.path().display());
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64
        | 1;
    let mut total_changes = 0;
    for _round in 0..40 {
        let mut child = Command::new(&exe)
            .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, &dirs)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        std::thread::sleep(Duration::from_millis(20 + seed % 180));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();

        let j = Journal::open(&fx.state).unwrap();
        j.recover(&fx.ws).unwrap();
        for file in 0..FILES {
            let name = format!("f{file}");
            if let Some(bytes) = fx.bytes(&name) {
                assert!(version_of(file, &bytes).is_some(), "{name} is torn");
            }
        }
        let pending = j
            .list(&ChangeFilter {
                status: Some(ChangeStatus::Pending),
                ..Default::default()
            })
            .unwrap();
        assert!(
            pending.is_empty(),
            "recover left pending changes: {pending:?}"
        );
        total_changes = j.list(&ChangeFilter::default()).unwrap().len();
    }
    eprintln!("{total_changes} journaled writes across the kills");
    assert!(total_changes >= 50, "only {total_changes} writes happened");
    let names: Vec<String> = std::fs::read_dir(fx.ws.root())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| !n.starts_with('f'))
        .collect();
    assert!(names.is_empty(), "recover left temp files: {names:?}");

    // Each file's last done change undoes to exactly the previous whole version.
    let j = Journal::open(&fx.state).unwrap();
    for file in 0..FILES {
        let name = format!("f{file}");
        let last = j
            .list(&ChangeFilter {
                path: Some(name.clone()),
                status: Some(ChangeStatus::Done),
                limit: Some(1),
                ..Default::default()
            })
            .unwrap();
        let Some(last) = last.into_iter().next() else {
            continue;
        };
        let now = version_of(file, &fx.bytes(&name).unwrap()).unwrap();
        j.undo(&fx.ws, last.id, "check", "u", false).unwrap();
        match fx.bytes(&name) {
            Some(bytes) => assert_eq!(version_of(file, &bytes), Some(now - 1), "{name}"),
            None => assert_eq!(now, 0, "{name} removed although it existed before"),
        }
    }
}
