//! Compare-and-swap under contention: writers that each saw one version of a file and write
//! their change over it never lose an acknowledged write, in one process or several handles.

use std::sync::{Arc, Barrier};

use toolyard_core::ToolError;
use toolyard_workspace::{Expect, RelPath, Workspace, hash_bytes};

/// Each writer appends its own line to the version it read; a write refused as stale is
/// retried from a fresh read. Every acknowledged line must be in the final file.
#[test]
fn concurrent_writers_never_lose_an_acknowledged_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Big enough that the hash check takes a while, which is when a rival rename slipped in.
    let base = "x".repeat(512 * 1024) + "\n";
    std::fs::write(dir.path().join("f.txt"), &base).expect("seed");
    let writers = 8;
    let rounds = 6;
    let barrier = Arc::new(Barrier::new(writers));
    let handles: Vec<_> = (0..writers)
        .map(|w| {
            let root = dir.path().to_path_buf();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                // A handle of its own, as another process would have.
                let ws = Workspace::open(&root).expect("workspace");
                let rel = RelPath::from_normalized("f.txt");
                let mut acked = Vec::new();
                barrier.wait();
                for r in 0..rounds {
                    let line = format!("writer {w} round {r}\n");
                    loop {
                        let seen = ws.read(&rel).expect("read");
                        let mut next = seen.clone();
                        next.extend_from_slice(line.as_bytes());
                        match ws.write_atomic(&rel, &next, &Expect::Hash(hash_bytes(&seen))) {
                            Ok(_) => {
                                acked.push(line);
                                break;
                            }
                            Err(ToolError::StaleRead { .. }) => continue,
                            Err(e) => panic!("write failed: {e}"),
                        }
                    }
                }
                acked
            })
        })
        .collect();
    let acked: Vec<String> = handles
        .into_iter()
        .flat_map(|h| h.join().expect("writer thread"))
        .collect();
    let last = std::fs::read_to_string(dir.path().join("f.txt")).expect("final");
    assert_eq!(acked.len(), writers * rounds);
    for line in &acked {
        assert!(
            last.contains(line.as_str()),
            "acknowledged write lost: {line}"
        );
    }
    assert_eq!(
        last.len(),
        base.len() + acked.iter().map(String::len).sum::<usize>()
    );
}

/// The names in `dir` other than `keep`: what a write left behind.
fn leftovers(dir: &std::path::Path, keep: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n != keep)
        .collect()
}

/// A staged write (the content synced beside the file while the journal commits) is in place
/// only once committed; one never committed, or refused as stale, leaves nothing behind.
#[test]
fn a_staged_write_lands_only_on_commit_and_leaves_nothing_when_dropped_or_stale() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("f.txt"), "v1\n").expect("seed");
    let ws = Workspace::open(dir.path()).expect("workspace");
    let rel = RelPath::from_normalized("f.txt");

    let staged = ws.stage(&rel, &mut &b"never\n"[..], None).expect("stage");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("f.txt")).unwrap(),
        "v1\n"
    );
    drop(staged);
    assert_eq!(leftovers(dir.path(), "f.txt"), Vec::<String>::new());

    // Another writer lands between the stage and the commit: the commit is refused as stale.
    let staged = ws.stage(&rel, &mut &b"mine\n"[..], None).expect("stage");
    ws.write_atomic(&rel, b"theirs\n", &Expect::Any)
        .expect("rival write");
    let stale = staged.commit(&ws, &Expect::Hash(hash_bytes(b"v1\n")));
    assert!(
        matches!(stale, Err(ToolError::StaleRead { .. })),
        "{stale:?}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("f.txt")).unwrap(),
        "theirs\n"
    );
    assert_eq!(leftovers(dir.path(), "f.txt"), Vec::<String>::new());

    let staged = ws.stage(&rel, &mut &b"v2\n"[..], None).expect("stage");
    let out = staged
        .commit(&ws, &Expect::Hash(hash_bytes(b"theirs\n")))
        .expect("commit");
    assert_eq!(out.bytes, 3);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("f.txt")).unwrap(),
        "v2\n"
    );
    assert_eq!(leftovers(dir.path(), "f.txt"), Vec::<String>::new());
}

/// The same for content staged in a nameless file (staged before the journal commits): nothing
/// of it is visible, or left, until the commit names it and swaps it in.
#[test]
fn an_anonymously_staged_write_is_invisible_until_committed() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("f.txt"), "v1\n").expect("seed");
    let ws = Workspace::open(dir.path()).expect("workspace");
    let rel = RelPath::from_normalized("f.txt");
    let Some(staged) = ws
        .stage_anonymous(&rel, &mut &b"never\n"[..], None)
        .expect("stage")
    else {
        eprintln!("skipped: this file system has no O_TMPFILE");
        return;
    };
    assert_eq!(leftovers(dir.path(), "f.txt"), Vec::<String>::new());
    drop(staged);
    assert_eq!(leftovers(dir.path(), "f.txt"), Vec::<String>::new());

    let staged = ws
        .stage_anonymous(&rel, &mut &b"mine\n"[..], None)
        .expect("stage")
        .expect("O_TMPFILE");
    ws.write_atomic(&rel, b"theirs\n", &Expect::Any)
        .expect("rival write");
    let stale = staged.commit(&ws, &Expect::Hash(hash_bytes(b"v1\n")));
    assert!(
        matches!(stale, Err(ToolError::StaleRead { .. })),
        "{stale:?}"
    );
    assert_eq!(leftovers(dir.path(), "f.txt"), Vec::<String>::new());

    let staged = ws
        .stage_anonymous(&rel, &mut &b"v2\n"[..], Some(0o600))
        .expect("stage")
        .expect("O_TMPFILE");
    staged
        .commit(&ws, &Expect::Hash(hash_bytes(b"theirs\n")))
        .expect("commit");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("f.txt")).unwrap(),
        "v2\n"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.path().join("f.txt"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(leftovers(dir.path(), "f.txt"), Vec::<String>::new());
}
