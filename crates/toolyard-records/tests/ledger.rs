//! The read ledger: persisted, shared between processes of one session, judged by content.

mod common;

use common::Fixture;
use toolyard_records::{Ledger, LedgerLimits};
use toolyard_workspace::hash_bytes;

#[test]
fn a_read_recorded_by_one_process_is_seen_by_another() {
    let fx = Fixture::new();
    let a = fx.rel("src/a.rs");
    let first = Ledger::open(&fx.state).unwrap();
    first.record_read("s1", &a, "h1").unwrap();
    drop(first);
    // A second open is what a separate `toolyard call --session s1` does.
    let second = Ledger::open(&fx.state).unwrap();
    assert_eq!(second.seen("s1", &a).unwrap().as_deref(), Some("h1"));
    second.check_write("s1", &a, "h1").unwrap();
}

#[test]
fn two_open_ledgers_see_each_others_updates_live() {
    let fx = Fixture::new();
    let a = fx.rel("a.txt");
    let one = Ledger::open(&fx.state).unwrap();
    let two = Ledger::open(&fx.state).unwrap();
    one.record_read("s", &a, "old").unwrap();
    assert_eq!(two.seen("s", &a).unwrap().as_deref(), Some("old"));
    two.record_write("s", &a, "new").unwrap();
    assert_eq!(one.seen("s", &a).unwrap().as_deref(), Some("new"));
}

#[test]
fn write_over_an_unread_file_is_refused_with_not_read() {
    let fx = Fixture::new();
    let ledger = Ledger::open(&fx.state).unwrap();
    let e = ledger
        .check_write("s", &fx.rel("notes.md"), &hash_bytes(b"x"))
        .unwrap_err();
    assert_eq!(e.kind(), "not_read");
    assert_eq!(
        e.to_string(),
        "notes.md has not been read in this session; call read_file on it first, then retry"
    );
}

#[test]
fn write_over_a_file_changed_since_read_is_refused_with_stale_read() {
    let fx = Fixture::new();
    let ledger = Ledger::open(&fx.state).unwrap();
    let p = fx.rel("notes.md");
    ledger.record_read("s", &p, &hash_bytes(b"before")).unwrap();
    let e = ledger
        .check_write("s", &p, &hash_bytes(b"after"))
        .unwrap_err();
    assert_eq!(e.kind(), "stale_read");
    assert!(
        e.to_string()
            .contains("changed on disk since this session last read it"),
        "{e}"
    );
    assert!(e.to_string().contains("read_file again"), "{e}");
}

#[test]
fn a_session_s_own_write_allows_a_second_edit_without_rereading() {
    let fx = Fixture::new();
    let ledger = Ledger::open(&fx.state).unwrap();
    let p = fx.rel("f");
    ledger.record_read("s", &p, &hash_bytes(b"v1")).unwrap();
    ledger.check_write("s", &p, &hash_bytes(b"v1")).unwrap();
    ledger.record_write("s", &p, &hash_bytes(b"v2")).unwrap();
    ledger.check_write("s", &p, &hash_bytes(b"v2")).unwrap();
}

#[test]
fn sessions_do_not_share_reads() {
    let fx = Fixture::new();
    let ledger = Ledger::open(&fx.state).unwrap();
    let p = fx.rel("f");
    ledger.record_read("alice", &p, "h").unwrap();
    assert_eq!(
        ledger.check_write("bob", &p, "h").unwrap_err().kind(),
        "not_read"
    );
}

#[test]
fn snapshot_holds_exactly_the_session_s_view() {
    let fx = Fixture::new();
    let ledger = Ledger::open(&fx.state).unwrap();
    ledger.record_read("s", &fx.rel("a"), "ha").unwrap();
    ledger.record_read("s", &fx.rel("dir/b"), "hb").unwrap();
    ledger.record_read("other", &fx.rel("c"), "hc").unwrap();
    ledger.forget("s", &fx.rel("a")).unwrap();
    let snap = ledger.snapshot("s").unwrap();
    assert_eq!(
        snap.into_iter().collect::<Vec<_>>(),
        vec![("dir/b".to_string(), "hb".to_string())]
    );
}

#[test]
fn concurrent_writers_in_separate_connections_do_not_fail() {
    let fx = Fixture::new();
    let ledgers: Vec<Ledger> = (0..4).map(|_| Ledger::open(&fx.state).unwrap()).collect();
    std::thread::scope(|s| {
        for (t, ledger) in ledgers.iter().enumerate() {
            let fx = &fx;
            s.spawn(move || {
                for i in 0..100 {
                    let p = fx.rel(&format!("f{i}"));
                    ledger
                        .record_read(&format!("s{t}"), &p, &format!("h{i}"))
                        .unwrap();
                }
            });
        }
    });
    let check = Ledger::open(&fx.state).unwrap();
    for t in 0..4 {
        assert_eq!(check.snapshot(&format!("s{t}")).unwrap().len(), 100);
    }
}

/// Set when `session` last touched `path`, as if `days_ago` days had passed since.
fn age(fx: &Fixture, session: &str, path: &str, days_ago: u32) {
    let db = rusqlite::Connection::open(fx.state.db_path()).unwrap();
    let n = db
        .execute(
            "UPDATE ledger_seen SET updated_at =
                 strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' || ?3 || ' days')
             WHERE session = ?1 AND path = ?2",
            rusqlite::params![session, path, days_ago],
        )
        .unwrap();
    assert_eq!(n, 1, "{session} {path}");
}

#[test]
fn sessions_idle_for_a_week_are_pruned_at_open_and_active_ones_kept_whole() {
    let fx = Fixture::new();
    let ledger = Ledger::open(&fx.state).unwrap();
    for session in ["idle", "active"] {
        for p in ["a", "b"] {
            ledger.record_read(session, &fx.rel(p), "h").unwrap();
        }
    }
    age(&fx, "idle", "a", 8);
    age(&fx, "idle", "b", 9);
    // An active session's old read still counts: only whole idle sessions go.
    age(&fx, "active", "a", 30);
    drop(ledger);

    let reopened = Ledger::open(&fx.state).unwrap();
    assert!(reopened.snapshot("idle").unwrap().is_empty());
    assert_eq!(reopened.snapshot("active").unwrap().len(), 2);
    reopened.check_write("active", &fx.rel("a"), "h").unwrap();
}

#[test]
fn the_ledger_keeps_at_most_max_rows_dropping_the_least_recent() {
    let fx = Fixture::new();
    let limits = LedgerLimits {
        max_idle_days: 7,
        max_rows: 3,
    };
    let ledger = Ledger::open_with(&fx.state, limits).unwrap();
    for (i, p) in ["p0", "p1", "p2", "p3", "p4"].iter().enumerate() {
        ledger.record_read("s", &fx.rel(p), "h").unwrap();
        // Older the lower i, in whole days so the order is unambiguous.
        age(&fx, "s", p, 5 - i as u32);
    }
    assert_eq!(ledger.prune().unwrap(), 2);
    let kept: Vec<String> = ledger.snapshot("s").unwrap().into_keys().collect();
    assert_eq!(kept, vec!["p2", "p3", "p4"]);
}

#[test]
fn a_long_lived_ledger_prunes_as_it_records() {
    let fx = Fixture::new();
    let limits = LedgerLimits {
        max_idle_days: 7,
        max_rows: 10,
    };
    let ledger = Ledger::open_with(&fx.state, limits).unwrap();
    for i in 0..1000 {
        ledger
            .record_read("s", &fx.rel(&format!("f{i}")), "h")
            .unwrap();
    }
    let rows = ledger.snapshot("s").unwrap().len();
    // Retention runs every so many records, not on each one: bounded, not exact.
    assert!(rows < 1000 / 2, "{rows} rows kept");
}
