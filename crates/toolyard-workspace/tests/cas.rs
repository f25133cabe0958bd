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
