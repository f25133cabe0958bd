//! The change journal: record before write, undo that restores exact bytes and modes, redo,
//! refusal on conflicts, retention, and recovery after a crash.

mod common;

use std::io::Read;

use common::Fixture;
use proptest::prelude::*;
use toolyard_records::{ChangeFilter, ChangeId, ChangeStatus, Journal, JournalConfig, NewChange};
use toolyard_workspace::{Expect, hash_bytes};

fn all_bytes() -> Vec<u8> {
    (0..=255u8).chain((0..=255u8).rev()).collect()
}

#[test]
fn undo_restores_exact_bytes_of_awkward_files() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("crlf.txt", b"one\r\ntwo\r\nthree\r\n".to_vec()),
        ("bom.txt", b"\xEF\xBB\xBFhello\nworld\n".to_vec()),
        ("binary.bin", all_bytes()),
        ("empty.txt", Vec::new()),
        ("no-final-newline.txt", b"last line".to_vec()),
        ("mixed.txt", b"a\r\nb\nc\rd".to_vec()),
    ];
    let fx = Fixture::new();
    let j = Journal::open(&fx.state).unwrap();
    for (name, original) in &cases {
        fx.put(name, original, 0o644);
        let id = fx.write(&j, "s", name, b"replaced\n");
        assert_eq!(fx.bytes(name).unwrap(), b"replaced\n");
        let out = j.undo(&fx.ws, id, "s", "undo-call", false).unwrap();
        assert_eq!(&fx.bytes(name).unwrap(), original, "{name}");
        assert_eq!(out.bytes, original.len() as u64);
        assert_eq!(out.new_hash.as_deref(), Some(hash_bytes(original).as_str()));
        assert!(!out.removed && !out.forced && !out.redo);
    }
}

#[test]
fn undo_restores_the_file_mode() {
    let fx = Fixture::new();
    let j = Journal::open(&fx.state).unwrap();
    for (name, mode) in [("run.sh", 0o755), ("secret.env", 0o600), ("odd", 0o640)] {
        fx.put(name, b"#!/bin/sh\necho hi\n", mode);
        let id = fx.write(&j, "s", name, b"changed");
        // Someone (a command) also changed the mode after the write.
        std::fs::set_permissions(
            fx.abs(name),
            std::os::unix::fs::PermissionsExt::from_mode(0o444),
        )
        .unwrap();
        let out = j.undo(&fx.ws, id, "s", "u", false).unwrap();
        assert_eq!(fx.mode(name), mode, "{name}");
        assert_eq!(out.mode, Some(mode));
        assert_eq!(j.get(id).unwrap().old_mode, Some(mode));
    }
}

#[test]
fn undo_of_a_created_file_removes_it() {
    let fx = Fixture::new();
    let j = Journal::open(&fx.state).unwrap();
    let id = fx.write(&j, "s", "dir/new.txt", b"fresh");
    let change = j.get(id).unwrap();
    assert!(!change.existed);
    assert_eq!(change.old_hash, None);
    let out = j.undo(&fx.ws, id, "s", "u", false).unwrap();
    assert!(out.removed);
    assert_eq!(fx.bytes("dir/new.txt"), None);
    // Redo brings it back.
    let redo = j.undo(&fx.ws, out.undo, "s", "r", false).unwrap();
    assert!(redo.redo);
    assert_eq!(fx.bytes("dir/new.txt").unwrap(), b"fresh");
}

#[test]
fn undo_of_a_removal_restores_the_file_and_its_mode() {
    let fx = Fixture::new();
    let j = Journal::open(&fx.state).unwrap();
    fx.put("gone.sh", b"#!/bin/sh\r\necho hi\r\n", 0o755);
    let rel = fx.rel("gone.sh");
    let id = j
        .record_removal(&fx.ws, "s", "c1", "apply_patch", &rel, None)
        .unwrap();
    let change = j.get(id).unwrap();
    assert!(change.existed);
    assert_eq!(change.new_hash, None);
    fx.ws.remove_file(&rel).unwrap();
    j.mark_done(id).unwrap();
    assert_eq!(fx.bytes("gone.sh"), None);
    let out = j.undo(&fx.ws, id, "s", "u", false).unwrap();
    assert!(!out.removed && !out.forced);
    assert_eq!(fx.bytes("gone.sh").unwrap(), b"#!/bin/sh\r\necho hi\r\n");
    assert_eq!(fx.mode("gone.sh"), 0o755);
}

#[test]
fn undo_refuses_when_the_file_changed_since_and_force_overrides() {
    let fx = Fixture::new();
    let j = Journal::open(&fx.state).unwrap();
    fx.put("f.txt", b"v1", 0o644);
    let id = fx.write(&j, "s", "f.txt", b"v2");
    fx.put("f.txt", b"v3 by hand", 0o644);
    let e = j.undo(&fx.ws, id, "s", "u", false).unwrap_err();
    assert_eq!(e.kind(), "conflict");
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("f.txt changed since change {id}")),
        "{msg}"
    );
    assert!(msg.contains("force"), "{msg}");
    assert_eq!(fx.bytes("f.txt").unwrap(), b"v3 by hand");
    // The refusal left no journal entry behind.
    assert_eq!(j.list(&ChangeFilter::default()).unwrap().len(), 1);

    let out = j.undo(&fx.ws, id, "s", "u", true).unwrap();
    assert!(out.forced);
    assert_eq!(fx.bytes("f.txt").unwrap(), b"v1");
    // The overwritten hand edit is itself journaled: undoing the undo brings it back.
    j.undo(&fx.ws, out.undo, "s", "r", false).unwrap();
    assert_eq!(fx.bytes("f.txt").unwrap(), b"v3 by hand");
}

#[test]
fn undo_refuses_when_a_created_file_was_removed_since() {
    let fx = Fixture::new();
    let j = Journal::open(&fx.state).unwrap();
    fx.put("keep.txt", b"old", 0o644);
    let id = fx.write(&j, "s", "keep.txt", b"new");
    std::fs::remove_file(fx.abs("keep.txt")).unwrap();
    let e = j.undo(&fx.ws, id, "s", "u", false).unwrap_err();
    assert!(e.to_string().contains("it was removed"), "{e}");
    j.undo(&fx.ws, id, "s", "u", true).unwrap();
    assert_eq!(fx.bytes("keep.txt").unwrap(), b"old");
}

#[test]
fn undo_of_an_undo_redoes_the_change() {
    let fx = Fixture::new();
    let j = Journal::open(&fx.state).unwrap();
    fx.put("f", b"original", 0o600);
    let id = fx.write(&j, "s", "f", b"edited");
    let undo = j.undo(&fx.ws, id, "s", "u1", false).unwrap();
    assert_eq!(fx.bytes("f").unwrap(), b"original");
    assert_eq!(j.get(id).unwrap().undone_by, Some(undo.undo));
    let undo_change = j.get(undo.undo).unwrap();
    assert_eq!(undo_change.tool, "undo");
    assert_eq!(undo_change.undoes, Some(id));
    assert_eq!(undo_change.status, ChangeStatus::Done);

    let redo = j.undo(&fx.ws, undo.undo, "s", "u2", false).unwrap();
    assert!(redo.redo);
    assert_eq!(fx.bytes("f").unwrap(), b"edited");
    assert_eq!(fx.mode("f"), 0o600);
    assert_eq!(
        j.get(id).unwrap().undone_by,
        None,
        "the change is in effect again"
    );
    // And it can be undone again by default.
    assert_eq!(j.last_of_session("s").unwrap().unwrap().id, id);
    j.undo(&fx.ws, id, "s", "u3", false).unwrap();
    assert_eq!(fx.bytes("f").unwrap(), b"original");
}

#[test]
fn undoing_an_already_undone_change_points_to_redo() {
    let fx = Fixture::new();
    let j = Journal::open(&fx.state).unwrap();
    let id = fx.write(&j, "s", "f", b"x");
    let undo = j.undo(&fx.ws, id, "s", "u", false).unwrap();
    let e = j.undo(&fx.ws, id, "s", "u", false).unwrap_err();
    assert_eq!(e.kind(), "conflict");
    assert!(
        e.to_string()
            .contains(&format!("undo change {}", undo.undo)),
        "{e}"
    );
}

#[test]
fn repeated_undo_walks_back_through_the_session_history() {
    let fx = Fixture::new();
    let j = Journal::open(&fx.state).unwrap();
    fx.put("f", b"v0", 0o644);
    for v in [b"v1", b"v2", b"v3"] {
        fx.write(&j, "s", "f", v);
    }
    fx.write(&j, "other-session", "g", b"not mine");
    for expected in [b"v2", b"v1", b"v0"] {
        let last = j.last_of_session("s").unwrap().unwrap();
        j.undo(&fx.ws, last.id, "s", "u", false).unwrap();
        assert_eq!(fx.bytes("f").unwrap(), expected);
    }
    assert_eq!(j.last_of_session("s").unwrap(), None);
    assert_eq!(fx.bytes("g").unwrap(), b"not mine");
}

#[test]
fn undo_works_after_reopening_the_journal() {
    let fx = Fixture::new();
    fx.put("f", b"before restart", 0o644);
    let id = {
        let j = Journal::open(&fx.state).unwrap();
        fx.write(&j, "s", "f", b"after")
    };
    let j = Journal::open(&fx.state).unwrap();
    assert_eq!(j.last_of_session("s").unwrap().unwrap().id, id);
    j.undo(&fx.ws, id, "s", "u", false).unwrap();
    assert_eq!(fx.bytes("f").unwrap(), b"before restart");
}

#[test]
fn a_stale_write_is_refused_marked_failed_and_cannot_be_undone() {
    let fx = Fixture::new();
    let j = Journal::open(&fx.state).unwrap();
    fx.put("f", b"disk", 0o644);
    let rel = fx.rel("f");
    let new_hash = hash_bytes(b"mine");
    let change = NewChange {
        session: "s",
        call_id: "c",
        tool: "edit_file",
        path: &rel,
        new_hash: &new_hash,
        group: None,
    };
    let e = j
        .apply(
            &fx.ws,
            change,
            &mut &b"mine"[..],
            &Expect::Hash(hash_bytes(b"what I read")),
            None,
        )
        .unwrap_err();
    assert_eq!(e.kind(), "stale_read");
    assert_eq!(fx.bytes("f").unwrap(), b"disk");
    let c = j.list(&ChangeFilter::default()).unwrap().remove(0);
    assert_eq!(c.status, ChangeStatus::Failed);
    let e = j.undo(&fx.ws, c.id, "s", "u", false).unwrap_err();
    assert!(e.to_string().contains("never happened"), "{e}");
}

#[test]
fn a_pending_change_cannot_be_undone_and_mark_failed_after_done_conflicts() {
    let fx = Fixture::new();
    let j = Journal::open(&fx.state).unwrap();
    let rel = fx.rel("f");
    let h = hash_bytes(b"x");
    let id = j
        .record(
            &fx.ws,
            NewChange {
                session: "s",
                call_id: "c",
                tool: "write_file",
                path: &rel,
                new_hash: &h,
                group: None,
            },
        )
        .unwrap();
    assert_eq!(j.get(id).unwrap().status, ChangeStatus::Pending);
    assert!(
        j.undo(&fx.ws, id, "s", "u", false)
            .unwrap_err()
            .to_string()
            .contains("pending")
    );
    fx.ws.write_atomic(&rel, b"x", &Expect::Missing).unwrap();
    j.mark_done(id).unwrap();
    j.mark_done(id).unwrap(); // idempotent
    assert_eq!(j.mark_failed(id).unwrap_err().kind(), "conflict");
    assert_eq!(j.get(ChangeId(9999)).unwrap_err().kind(), "not_found");
}

#[test]
fn recover_settles_pending_changes_by_the_file_content() {
    let fx = Fixture::new();
    let j = Journal::open(&fx.state).unwrap();
    fx.put("landed", b"old", 0o644);
    fx.put("lost", b"old", 0o644);
    let record = |p: &str, new: &[u8]| {
        let rel = fx.rel(p);
        let h = hash_bytes(new);
        j.record(
            &fx.ws,
            NewChange {
                session: "s",
                call_id: "c",
                tool: "write_file",
                path: &rel,
                new_hash: &h,
                group: None,
            },
        )
        .unwrap()
    };
    // Crash after the rename but before mark_done: the file is new.
    let landed = record("landed", b"new");
    fx.ws
        .write_atomic(&fx.rel("landed"), b"new", &Expect::Any)
        .unwrap();
    // Crash before the rename: the file is old.
    let lost = record("lost", b"new");
    // Crash before the rename of a creation: the file does not exist.
    let never_created = record("never-created", b"new");

    let reopened = Journal::open(&fx.state).unwrap();
    let settled = reopened.recover(&fx.ws).unwrap();
    let status: Vec<_> = settled.iter().map(|c| (c.id, c.status)).collect();
    assert_eq!(
        status,
        vec![
            (landed, ChangeStatus::Done),
            (lost, ChangeStatus::Failed),
            (never_created, ChangeStatus::Failed)
        ]
    );
    assert!(reopened.recover(&fx.ws).unwrap().is_empty());
    // The landed write can be undone to the journaled old content.
    reopened.undo(&fx.ws, landed, "s", "u", false).unwrap();
    assert_eq!(fx.bytes("landed").unwrap(), b"old");
}

#[test]
fn recover_completes_an_interrupted_undo_and_links_it() {
    let fx = Fixture::new();
    let j = Journal::open(&fx.state).unwrap();
    fx.put("f", b"old", 0o644);
    let id = fx.write(&j, "s", "f", b"new");
    // What undo has done when it is killed after its rename: its own change recorded (with the
    // link to the change it reverts), the file restored, the entry still pending.
    let rel = fx.rel("f");
    let old_hash = hash_bytes(b"old");
    let undo_id = j
        .record(
            &fx.ws,
            NewChange {
                session: "s",
                call_id: "u",
                tool: "undo",
                path: &rel,
                new_hash: &old_hash,
                group: None,
            },
        )
        .unwrap();
    let db = rusqlite::Connection::open(fx.state.db_path()).unwrap();
    db.execute(
        "UPDATE journal_changes SET undoes = ?1 WHERE id = ?2",
        [id.0, undo_id.0],
    )
    .unwrap();
    fx.ws.write_atomic(&rel, b"old", &Expect::Any).unwrap();

    let settled = Journal::open(&fx.state).unwrap().recover(&fx.ws).unwrap();
    assert_eq!(settled.len(), 1);
    assert_eq!(
        (settled[0].id, settled[0].status),
        (undo_id, ChangeStatus::Done)
    );
    assert_eq!(j.get(id).unwrap().undone_by, Some(undo_id));
    assert_eq!(
        j.last_of_session("s").unwrap(),
        None,
        "the reverted change is not offered again"
    );
    j.undo(&fx.ws, undo_id, "s", "r", false).unwrap();
    assert_eq!(fx.bytes("f").unwrap(), b"new");
}

/// A write of `p` caught between its journal entry and its rename, as another process would
/// leave it while still running: the change pending, its temp file beside the target.
fn mid_write(fx: &Fixture, j: &Journal, p: &str, tmp: &str) -> ChangeId {
    fx.put(p, b"old", 0o644);
    let rel = fx.rel(p);
    let new_hash = hash_bytes(b"new");
    let id = j
        .record(
            &fx.ws,
            NewChange {
                session: "s",
                call_id: "c",
                tool: "write_file",
                path: &rel,
                new_hash: &new_hash,
                group: None,
            },
        )
        .unwrap();
    fx.put(tmp, b"ne", 0o600);
    id
}

#[test]
fn recovery_leaves_alone_the_writes_of_a_process_that_has_the_journal_open() {
    let fx = Fixture::new();
    // Process A (the server) started first: it recovered, and now is in the middle of a write.
    let a = Journal::open(&fx.state).unwrap();
    assert!(a.recover(&fx.ws).unwrap().is_empty());
    let id = mid_write(&fx, &a, "f", ".f.toolyard-a1.tmp");

    // Process B (`toolyard log`, a CLI call) opens the journal meanwhile.
    let b = Journal::open(&fx.state).unwrap();
    assert!(b.recover(&fx.ws).unwrap().is_empty());
    assert_eq!(b.get(id).unwrap().status, ChangeStatus::Pending);
    assert!(
        fx.bytes(".f.toolyard-a1.tmp").is_some(),
        "B removed A's temp file"
    );

    // A exits while B is mid-write: C, starting now, must leave B's write alone too.
    drop(a);
    let id_b = mid_write(&fx, &b, "g", ".g.toolyard-b1.tmp");
    let c = Journal::open(&fx.state).unwrap();
    assert!(c.recover(&fx.ws).unwrap().is_empty());
    assert!(
        fx.bytes(".g.toolyard-b1.tmp").is_some(),
        "C removed B's temp file"
    );
    assert_eq!(c.get(id_b).unwrap().status, ChangeStatus::Pending);

    // Once every process is gone (killed, say), the next one settles both and sweeps the litter.
    drop(b);
    drop(c);
    let d = Journal::open(&fx.state).unwrap();
    let settled: Vec<_> = d
        .recover(&fx.ws)
        .unwrap()
        .into_iter()
        .map(|c| (c.id, c.status))
        .collect();
    assert_eq!(
        settled,
        vec![(id, ChangeStatus::Failed), (id_b, ChangeStatus::Failed)]
    );
    assert!(fx.bytes(".f.toolyard-a1.tmp").is_none());
    assert!(fx.bytes(".g.toolyard-b1.tmp").is_none());
}

#[test]
fn list_filters_by_session_path_and_limit_newest_first() {
    let fx = Fixture::new();
    let j = Journal::open(&fx.state).unwrap();
    let a1 = fx.write(&j, "alice", "a", b"1");
    let _b = fx.write(&j, "bob", "b", b"1");
    let a2 = fx.write(&j, "alice", "a", b"2");
    let a3 = fx.write(&j, "alice", "c", b"1");
    let ids = |f: ChangeFilter| {
        j.list(&f)
            .unwrap()
            .into_iter()
            .map(|c| c.id)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        ids(ChangeFilter {
            session: Some("alice".into()),
            ..Default::default()
        }),
        vec![a3, a2, a1]
    );
    assert_eq!(
        ids(ChangeFilter {
            path: Some("a".into()),
            ..Default::default()
        }),
        vec![a2, a1]
    );
    assert_eq!(
        ids(ChangeFilter {
            limit: Some(1),
            ..Default::default()
        }),
        vec![a3]
    );
    let c = j.get(a1).unwrap();
    assert_eq!(
        (c.session.as_str(), c.tool.as_str(), c.path.as_str()),
        ("alice", "write_file", "a")
    );
    assert!(c.time.ends_with('Z') && c.time.contains('T'), "{}", c.time);
    assert_eq!(c.new_hash.as_deref(), Some(hash_bytes(b"1").as_str()));
}

#[test]
fn retention_keeps_the_newest_changes() {
    let fx = Fixture::new();
    let ids: Vec<ChangeId> = {
        let j = Journal::open(&fx.state).unwrap();
        (0..10)
            .map(|i| fx.write(&j, "s", "f", format!("v{i}").as_bytes()))
            .collect()
    };
    let config = JournalConfig {
        max_changes: Some(3),
        ..Default::default()
    };
    let j = Journal::open_with(&fx.state, &config).unwrap();
    let kept: Vec<_> = j
        .list(&ChangeFilter::default())
        .unwrap()
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(kept, vec![ids[9], ids[8], ids[7]]);
    assert_eq!(j.get(ids[0]).unwrap_err().kind(), "not_found");
    // Pruned content is gone too; the kept changes still undo.
    j.undo(&fx.ws, ids[9], "s", "u", false).unwrap();
    assert_eq!(fx.bytes("f").unwrap(), b"v8");
}

#[test]
fn retention_by_bytes_drops_the_oldest_content_but_keeps_the_newest() {
    let fx = Fixture::new();
    fx.put("f", &[b'x'; 1000], 0o644);
    let ids: Vec<ChangeId> = {
        let j = Journal::open(&fx.state).unwrap();
        (0..5)
            .map(|_| fx.write(&j, "s", "f", &[b'y'; 1000]))
            .collect()
    };
    // Each change stores 1000 bytes of previous content; keep at most 2500.
    let config = JournalConfig {
        max_bytes: Some(2500),
        ..Default::default()
    };
    let j = Journal::open_with(&fx.state, &config).unwrap();
    let kept: Vec<_> = j
        .list(&ChangeFilter::default())
        .unwrap()
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(kept, vec![ids[4], ids[3]]);
    let tiny = JournalConfig {
        max_bytes: Some(1),
        ..Default::default()
    };
    let j = Journal::open_with(&fx.state, &tiny).unwrap();
    assert_eq!(
        j.list(&ChangeFilter::default()).unwrap().len(),
        1,
        "the newest change is kept"
    );
}

#[test]
fn retention_by_age_drops_old_changes_and_zero_means_unlimited() {
    let fx = Fixture::new();
    let (old, new) = {
        let j = Journal::open(&fx.state).unwrap();
        (fx.write(&j, "s", "a", b"1"), fx.write(&j, "s", "b", b"1"))
    };
    let db = rusqlite::Connection::open(fx.state.db_path()).unwrap();
    db.execute(
        "UPDATE journal_changes SET time = '2000-01-01T00:00:00.000Z' WHERE id = ?1",
        [old.0],
    )
    .unwrap();
    let unlimited = JournalConfig {
        max_age_days: Some(0),
        ..Default::default()
    };
    assert_eq!(
        Journal::open_with(&fx.state, &unlimited)
            .unwrap()
            .list(&ChangeFilter::default())
            .unwrap()
            .len(),
        2
    );
    let j = Journal::open_with(
        &fx.state,
        &JournalConfig {
            max_age_days: Some(7),
            ..Default::default()
        },
    )
    .unwrap();
    let kept: Vec<_> = j
        .list(&ChangeFilter::default())
        .unwrap()
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(kept, vec![new]);
    let chunks: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM journal_chunks WHERE change_id = ?1",
            [old.0],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(chunks, 0, "the pruned change's content is deleted");
}

#[test]
fn recording_a_fifo_is_refused_instead_of_blocking() {
    let fx = Fixture::new();
    let j = Journal::open(&fx.state).unwrap();
    let ok = std::process::Command::new("mkfifo")
        .arg(fx.abs("pipe"))
        .status()
        .unwrap();
    assert!(ok.success());
    let rel = fx.rel("pipe");
    let h = hash_bytes(b"x");
    let e = j
        .record(
            &fx.ws,
            NewChange {
                session: "s",
                call_id: "c",
                tool: "write_file",
                path: &rel,
                new_hash: &h,
                group: None,
            },
        )
        .unwrap_err();
    assert!(e.to_string().contains("not a regular file"), "{e}");
    assert!(j.list(&ChangeFilter::default()).unwrap().is_empty());
}

#[test]
fn old_content_streams_the_stored_bytes() {
    let fx = Fixture::new();
    let j = Journal::open(&fx.state).unwrap();
    fx.put("f", &all_bytes(), 0o644);
    let id = fx.write(&j, "s", "f", b"new");
    let mut got = Vec::new();
    j.old_content(id)
        .unwrap()
        .unwrap()
        .read_to_end(&mut got)
        .unwrap();
    assert_eq!(got, all_bytes());
    let created = fx.write(&j, "s", "g", b"new");
    assert!(j.old_content(created).unwrap().is_none());
}

#[test]
fn damaged_journal_content_is_never_written_back() {
    let fx = Fixture::new();
    let j = Journal::open(&fx.state).unwrap();
    fx.put("f", b"precious", 0o644);
    let id = fx.write(&j, "s", "f", b"new");
    let db = rusqlite::Connection::open(fx.state.db_path()).unwrap();
    db.execute(
        "UPDATE journal_chunks SET data = x'00' WHERE change_id = ?1",
        [id.0],
    )
    .unwrap();
    let e = j.undo(&fx.ws, id, "s", "u", false).unwrap_err();
    assert!(e.to_string().contains("damaged"), "{e}");
    assert_eq!(fx.bytes("f").unwrap(), b"new");
}

#[test]
fn journals_in_several_threads_and_connections_record_concurrently() {
    let fx = Fixture::new();
    std::thread::scope(|s| {
        for t in 0..4 {
            let fx = &fx;
            s.spawn(move || {
                let j = Journal::open(&fx.state).unwrap();
                for i in 0..20 {
                    fx.write(&j, &format!("s{t}"), &format!("t{t}/f{i}"), b"data");
                }
            });
        }
    });
    let j = Journal::open(&fx.state).unwrap();
    assert_eq!(j.list(&ChangeFilter::default()).unwrap().len(), 80);
}

#[derive(Debug, Clone)]
enum Op {
    Write(Vec<u8>, u32),
    UndoLast,
    RedoLastUndo,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (
            prop::collection::vec(any::<u8>(), 0..300),
            prop::sample::select(vec![0o644u32, 0o755, 0o600]),
        )
            .prop_map(|(b, m)| Op::Write(b, m)),
        2 => Just(Op::UndoLast),
        1 => Just(Op::RedoLastUndo),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Whatever the sequence of writes, undos and redos, undoing a change restores exactly the
    /// bytes (and mode) the file had before that change.
    #[test]
    fn undo_always_restores_the_exact_previous_bytes(
        initial in prop::option::of(prop::collection::vec(any::<u8>(), 0..300)),
        ops in prop::collection::vec(op(), 1..24),
    ) {
        let fx = Fixture::new();
        let j = Journal::open(&fx.state).unwrap();
        if let Some(b) = &initial {
            fx.put("f", b, 0o644);
        }
        // What the file held (bytes, mode) just before each change.
        let mut before = std::collections::HashMap::new();
        let state = |fx: &Fixture| fx.bytes("f").map(|b| (b, fx.mode("f")));
        let mut undos: Vec<ChangeId> = Vec::new();
        for op in ops {
            match op {
                Op::Write(bytes, mode) => {
                    let prev = state(&fx);
                    let id = fx.write(&j, "s", "f", &bytes);
                    std::fs::set_permissions(fx.abs("f"), std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
                    // The chmod is not journaled; the journal restores the mode seen at record time.
                    before.insert(id, prev);
                }
                Op::UndoLast | Op::RedoLastUndo => {
                    let target = match op {
                        Op::UndoLast => j.last_of_session("s").unwrap().map(|c| c.id),
                        _ => undos.pop(),
                    };
                    let Some(target) = target else { continue };
                    let prev = state(&fx);
                    let out = j.undo(&fx.ws, target, "s", "u", true).unwrap();
                    prop_assert_eq!(&state(&fx), &before[&target], "undo of {}", target);
                    before.insert(out.undo, prev);
                    undos.push(out.undo);
                }
            }
        }
    }
}

#[test]
fn a_shipped_pre_image_is_journaled_without_reading_this_disk() {
    let fx = Fixture::new();
    let j = Journal::open(&fx.state).unwrap();
    // The file is not on this disk: the content comes with the request, as from a remote runner.
    let path = fx.ws.locate("remote.txt", fx.ws.root()).unwrap();
    let new_hash = hash_bytes(b"new\n");
    let change = NewChange {
        session: "s",
        call_id: "c",
        tool: "edit_file",
        path: &path,
        new_hash: &new_hash,
        group: None,
    };
    let old = b"old remote text\r\n";
    let id = j
        .record_preimage(
            change,
            &toolyard_records::PreImage {
                content: Some(old),
                mode: Some(0o640),
            },
        )
        .unwrap();
    let c = j.get(id).unwrap();
    assert!(c.existed);
    assert_eq!(c.status, ChangeStatus::Pending);
    assert_eq!(c.old_mode, Some(0o640));
    assert_eq!(c.old_hash.as_deref(), Some(hash_bytes(old).as_str()));
    assert_eq!(c.old_bytes, Some(old.len() as u64));
    let mut stored = Vec::new();
    j.old_content(id)
        .unwrap()
        .unwrap()
        .read_to_end(&mut stored)
        .unwrap();
    assert_eq!(stored, old);
    assert!(fx.bytes("remote.txt").is_none(), "nothing was written here");

    let created = j
        .record_preimage(
            change,
            &toolyard_records::PreImage {
                content: None,
                mode: None,
            },
        )
        .unwrap();
    let c = j.get(created).unwrap();
    assert!(!c.existed && c.old_hash.is_none());
}

/// Three changes of one call (two writes and a removal) after an unrelated one.
fn grouped(fx: &Fixture, j: &Journal) -> [ChangeId; 3] {
    fx.put("a.txt", b"a0\n", 0o644);
    fx.put("b.sh", b"b0\r\n", 0o755);
    fx.put("c.txt", b"c0", 0o600);
    fx.write(j, "s", "alone.txt", b"alone\n");
    let a = fx.write_in(j, "s", "a.txt", b"a1\n", None);
    let b = fx.write_in(j, "s", "b.sh", b"b1\n", Some(a));
    let rel = fx.rel("c.txt");
    let c = j
        .record_removal(&fx.ws, "s", "call", "apply_patch", &rel, Some(a))
        .unwrap();
    fx.ws.remove_file(&rel).unwrap();
    j.mark_done(c).unwrap();
    [a, b, c]
}

#[test]
fn a_group_is_undone_and_redone_together_newest_first() {
    let fx = Fixture::new();
    let j = Journal::open(&fx.state).unwrap();
    let [a, b, c] = grouped(&fx, &j);
    // The first change is tagged once a second joins; the unrelated one stays alone.
    for id in [a, b, c] {
        assert_eq!(j.get(id).unwrap().group, Some(a), "{id}");
    }
    assert_eq!(j.get(ChangeId(a.0 - 1)).unwrap().group, None);
    let members: Vec<ChangeId> = j.group_of(b).unwrap().iter().map(|m| m.id).collect();
    assert_eq!(members, vec![c, b, a], "newest first");

    // Any member names the whole group.
    let undone = j.undo_group(&fx.ws, b, "s", "u", false).unwrap();
    let order: Vec<ChangeId> = undone.iter().map(|o| o.undone).collect();
    assert_eq!(order, vec![c, b, a]);
    assert_eq!(fx.bytes("a.txt").unwrap(), b"a0\n");
    assert_eq!(fx.bytes("b.sh").unwrap(), b"b0\r\n");
    assert_eq!(fx.bytes("c.txt").unwrap(), b"c0");
    assert_eq!((fx.mode("b.sh"), fx.mode("c.txt")), (0o755, 0o600));
    assert_eq!(
        fx.bytes("alone.txt").unwrap(),
        b"alone\n",
        "not in the group"
    );
    // The undos are a group of their own: undoing one redoes all.
    let redo = j
        .undo_group(&fx.ws, undone[2].undo, "s", "r", false)
        .unwrap();
    assert_eq!(redo.len(), 3);
    assert!(redo.iter().all(|o| o.redo));
    assert_eq!(fx.bytes("a.txt").unwrap(), b"a1\n");
    assert_eq!(fx.bytes("b.sh").unwrap(), b"b1\n");
    assert_eq!(fx.bytes("c.txt"), None);
    // After the redo the group is current again: the session's last change is in it.
    let last = j.last_of_session("s").unwrap().unwrap();
    assert_eq!(last.group, Some(a));
}

#[test]
fn a_group_undo_refuses_whole_when_one_file_changed_and_a_member_alone_is_refused() {
    let fx = Fixture::new();
    let j = Journal::open(&fx.state).unwrap();
    let [a, b, _] = grouped(&fx, &j);
    fx.put("b.sh", b"edited by hand\n", 0o755);
    let e = j.undo_group(&fx.ws, a, "s", "u", false).unwrap_err();
    let msg = e.to_string();
    assert_eq!(e.kind(), "conflict");
    assert!(msg.contains("b.sh changed since"), "{msg}");
    assert!(msg.contains("nothing was undone"), "{msg}");
    assert_eq!(fx.bytes("a.txt").unwrap(), b"a1\n", "untouched");
    assert_eq!(fx.bytes("c.txt"), None, "untouched");
    let undos = j
        .list(&ChangeFilter::default())
        .unwrap()
        .into_iter()
        .filter(|c| c.undoes.is_some())
        .count();
    assert_eq!(undos, 0, "nothing journaled");
    // One change of a group cannot be undone alone.
    let e = j.undo(&fx.ws, b, "s", "u", true).unwrap_err();
    assert!(e.to_string().contains("undo them together"), "{e}");
    // force overrides, for the whole group.
    let undone = j.undo_group(&fx.ws, a, "s", "u", true).unwrap();
    assert_eq!(undone.len(), 3);
    assert_eq!(fx.bytes("b.sh").unwrap(), b"b0\r\n");
}

#[test]
fn a_version_1_journal_is_upgraded_in_place() {
    let fx = Fixture::new();
    let id = {
        let j = Journal::open(&fx.state).unwrap();
        fx.put("old.txt", b"before\n", 0o644);
        fx.write(&j, "s", "old.txt", b"after\n")
    };
    // Make the database what version 1 wrote: no grp column (nor version 3's new_mode and
    // commands table).
    {
        let conn = rusqlite::Connection::open(fx.state.db_path()).unwrap();
        conn.execute_batch(
            "DROP INDEX journal_changes_grp;
             ALTER TABLE journal_changes DROP COLUMN grp;
             ALTER TABLE journal_changes DROP COLUMN new_mode;
             DROP TABLE journal_commands;
             UPDATE toolyard_schema SET version = 1 WHERE component = 'journal';",
        )
        .unwrap();
    }
    let j = Journal::open(&fx.state).unwrap();
    assert_eq!(j.get(id).unwrap().group, None);
    let a = fx.write_in(&j, "s", "x.txt", b"x", None);
    fx.write_in(&j, "s", "y.txt", b"y", Some(a));
    assert_eq!(j.group_of(a).unwrap().len(), 2);
    j.undo_group(&fx.ws, id, "s", "u", false).unwrap();
    assert_eq!(fx.bytes("old.txt").unwrap(), b"before\n");
}
