//! The state database (`state.db` in the [`StateDir`]): one SQLite file shared by the read
//! ledger and the journal, opened by every Toolyard process of the workspace.

use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};
use toolyard_core::ToolError;
use toolyard_workspace::StateDir;

use crate::error::RecordsError;

/// How long a statement waits for another process's lock before it gives up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// How durably a connection commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Durability {
    /// `synchronous=FULL`: a commit is on disk when it returns (the journal).
    Full,
    /// `synchronous=NORMAL`: consistent after a crash, the last commits may be lost (the ledger).
    Normal,
}

/// Open `state.db` with the pragmas every user needs: WAL (readers never block the writer),
/// a busy timeout (concurrent processes wait instead of failing), and the given durability.
pub(crate) fn open(state: &StateDir, durability: Durability) -> Result<Connection, RecordsError> {
    // Several processes (or threads) opening a new database at once can meet SQLITE_BUSY where
    // the busy handler is not consulted (setting up WAL, recovering it): try again briefly.
    let mut tries = 0;
    loop {
        match open_once(state, durability) {
            Err(e) if is_busy(&e) && tries < 100 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(source) => {
                return Err(RecordsError::OpenDb {
                    path: state.db_path(),
                    source,
                });
            }
            Ok(conn) => return Ok(conn),
        }
    }
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

fn open_once(state: &StateDir, durability: Durability) -> rusqlite::Result<Connection> {
    let conn = Connection::open(state.db_path())?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    // Only takes effect on a new, empty database: lets pruning give pages back to the OS.
    // Setting it always runs a write transaction (and a synced commit) even when nothing
    // changes, so it is set only when the database is not incremental yet.
    let auto_vacuum: i64 = conn.pragma_query_value(None, "auto_vacuum", |r| r.get(0))?;
    if auto_vacuum != 2 {
        conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")?;
    }
    let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        tracing::warn!(%mode, "state.db is not in WAL mode; concurrent processes may wait longer");
    }
    let sync = match durability {
        Durability::Full => "FULL",
        Durability::Normal => "NORMAL",
    };
    conn.pragma_update(None, "synchronous", sync)?;
    // Keep the WAL file from staying at the size of the largest transaction (a 100 MiB file).
    conn.pragma_update(None, "journal_size_limit", 64 * 1024 * 1024_i64)?;
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS toolyard_schema (
             component TEXT PRIMARY KEY,
             version   INTEGER NOT NULL
         );",
    )?;
    Ok(conn)
}

/// Make sure `component`'s tables are at `version`, creating them with `ddl` on first use.
/// An older database is upgraded in place: `migrations[i]` takes version `i + 1` to `i + 2`
/// (run in one transaction, then `ddl`, which must only create what is missing). A database
/// written by a newer Toolyard is refused rather than misread.
pub(crate) fn ensure_schema(
    conn: &mut Connection,
    component: &str,
    version: i64,
    ddl: &str,
    migrations: &[&str],
) -> Result<(), RecordsError> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let found: Option<i64> = tx
        .query_row(
            "SELECT version FROM toolyard_schema WHERE component = ?1",
            params![component],
            |r| r.get(0),
        )
        .optional()?;
    match found {
        Some(v) if v == version => {}
        Some(v) if v > version => {
            return Err(RecordsError::NewerSchema {
                component: component.into(),
                found: v,
                known: version,
            });
        }
        found => {
            if let Some(from) = found {
                let first = usize::try_from(from.max(1) - 1).unwrap_or(0);
                for step in migrations.iter().skip(first) {
                    tx.execute_batch(step)?;
                }
                tracing::info!(component, from, to = version, "upgraded the state database");
            }
            tx.execute_batch(ddl)?;
            tx.execute(
                "INSERT INTO toolyard_schema (component, version) VALUES (?1, ?2)
                 ON CONFLICT (component) DO UPDATE SET version = excluded.version",
                params![component, version],
            )?;
        }
    }
    tx.commit().map_err(RecordsError::Db)
}

/// Lock a mutex of this crate; a panic in another thread leaves what it guards usable (a
/// connection's transaction rolled back when the guard's `Transaction` dropped; the ledger's
/// maps hold whole entries), so poisoning is not an error here.
pub(crate) use toolyard_core::sync::lock;

/// A database error as a tool error.
pub(crate) fn db_err(e: rusqlite::Error) -> ToolError {
    RecordsError::Db(e).into()
}
