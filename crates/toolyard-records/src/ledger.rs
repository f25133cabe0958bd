//! The read ledger: which files each session has read, and the content hash it saw.
//!
//! A write over an existing file is allowed only if the session read that file and the file
//! still has the content it saw. The ledger lives in `state.db`, so separate processes that
//! share a `--session` (CLI calls, the server and its runners) share one view.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use rusqlite::{Connection, OptionalExtension, params};
use toolyard_core::ToolError;

use toolyard_workspace::{ContentHash, RelPath, StateDir};

use crate::db::{self, Durability, db_err};

const SCHEMA_VERSION: i64 = 1;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS ledger_seen (
    session    TEXT NOT NULL,
    path       TEXT NOT NULL,
    hash       TEXT NOT NULL,
    via        TEXT NOT NULL CHECK (via IN ('read', 'write')),
    updated_at TEXT NOT NULL,
    PRIMARY KEY (session, path)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS ledger_seen_updated ON ledger_seen (updated_at);
";

/// Retention also runs after this many updates, so a long-lived server stays bounded.
const PRUNE_EVERY: u64 = 256;

/// How much of the ledger is kept (every connection opens a new session, so it only grows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerLimits {
    /// A session not used for this many days is forgotten whole (its next write asks for a read).
    pub max_idle_days: u64,
    /// Most rows kept across all sessions; the least recently updated go first.
    pub max_rows: u64,
}

impl Default for LedgerLimits {
    /// 7 idle days, 100 000 rows.
    fn default() -> Self {
        Self {
            max_idle_days: 7,
            max_rows: 100_000,
        }
    }
}

/// Per-session read tracking, persisted in the state database; cheap to share across threads.
#[derive(Debug)]
pub struct Ledger {
    conn: Mutex<Connection>,
    limits: LedgerLimits,
    updates: AtomicU64,
}

impl Ledger {
    /// Open (creating if needed) the ledger in `state`'s database, with default retention.
    pub fn open(state: &StateDir) -> Result<Self, ToolError> {
        Self::open_with(state, LedgerLimits::default())
    }

    /// Open the ledger with the given retention, and apply it.
    pub fn open_with(state: &StateDir, limits: LedgerLimits) -> Result<Self, ToolError> {
        // A lost ledger update after a power cut only asks the model to re-read: NORMAL will do.
        let mut conn = db::open(state, Durability::Normal)?;
        db::ensure_schema(&mut conn, "ledger", SCHEMA_VERSION, SCHEMA, &[])?;
        let ledger = Self {
            conn: Mutex::new(conn),
            limits,
            updates: AtomicU64::new(0),
        };
        ledger.prune()?;
        Ok(ledger)
    }

    /// Note that `session` read `path` and saw content with hash `hash`.
    pub fn record_read(&self, session: &str, path: &RelPath, hash: &str) -> Result<(), ToolError> {
        self.upsert(session, path, hash, "read")
    }

    /// The hash `session` last saw for `path`, or `None` if it never read it.
    pub fn seen(&self, session: &str, path: &RelPath) -> Result<Option<ContentHash>, ToolError> {
        let conn = db::lock(&self.conn);
        conn.prepare_cached("SELECT hash FROM ledger_seen WHERE session = ?1 AND path = ?2")
            .and_then(|mut st| {
                st.query_row(params![session, path.as_str()], |r| r.get(0))
                    .optional()
            })
            .map_err(db_err)
    }

    /// Check that `session` may write over the existing file `path` whose content hash is now
    /// `current`: `NotRead` if it never read it, `StaleRead` if the file changed since.
    pub fn check_write(
        &self,
        session: &str,
        path: &RelPath,
        current: &str,
    ) -> Result<(), ToolError> {
        match self.seen(session, path)? {
            None => Err(ToolError::NotRead {
                path: path.to_string(),
            }),
            Some(h) if h != current => {
                tracing::debug!(session, path = %path, seen = %h, current, "stale read");
                Err(ToolError::StaleRead {
                    path: path.to_string(),
                })
            }
            Some(_) => Ok(()),
        }
    }

    /// After the session's own write landed, its view is the new content (so a second edit
    /// needs no fresh read).
    pub fn record_write(&self, session: &str, path: &RelPath, hash: &str) -> Result<(), ToolError> {
        self.upsert(session, path, hash, "write")
    }

    /// Drop what `session` knows of `path` (after the file was removed, say by an undo).
    pub fn forget(&self, session: &str, path: &RelPath) -> Result<(), ToolError> {
        let conn = db::lock(&self.conn);
        conn.execute(
            "DELETE FROM ledger_seen WHERE session = ?1 AND path = ?2",
            params![session, path.as_str()],
        )
        .map_err(db_err)?;
        Ok(())
    }

    /// Everything `session` has seen, path to hash, for shipping its view to a runner process.
    pub fn snapshot(&self, session: &str) -> Result<BTreeMap<String, ContentHash>, ToolError> {
        let conn = db::lock(&self.conn);
        let mut st = conn
            .prepare_cached("SELECT path, hash FROM ledger_seen WHERE session = ?1")
            .map_err(db_err)?;
        let rows = st
            .query_map(params![session], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(db_err)?;
        rows.collect::<Result<BTreeMap<_, _>, _>>().map_err(db_err)
    }

    /// Apply retention now (it also runs at open and every few hundred updates): forget the
    /// sessions idle for `max_idle_days`, then the least recently updated rows beyond
    /// `max_rows`. Returns how many rows went.
    pub fn prune(&self) -> Result<u64, ToolError> {
        let conn = db::lock(&self.conn);
        // The timestamps are fixed-width UTC text, so they compare as strings (and use the index).
        let idle = conn
            .execute(
                "DELETE FROM ledger_seen WHERE session IN (
                     SELECT session FROM ledger_seen GROUP BY session
                     HAVING MAX(updated_at) <
                         strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' || ?1 || ' days'))",
                params![to_sql_int(self.limits.max_idle_days)],
            )
            .map_err(db_err)?;
        let over = conn
            .execute(
                "DELETE FROM ledger_seen WHERE (session, path) IN (
                     SELECT session, path FROM ledger_seen
                     ORDER BY updated_at DESC LIMIT -1 OFFSET ?1)",
                params![to_sql_int(self.limits.max_rows)],
            )
            .map_err(db_err)?;
        let deleted = (idle + over) as u64;
        if deleted > 0 {
            tracing::debug!(deleted, "ledger retention pruned rows");
        }
        Ok(deleted)
    }

    /// Apply `updates` in one transaction (one WAL commit for a whole batch of reads).
    pub fn apply(&self, updates: &[LedgerUpdate]) -> Result<(), ToolError> {
        let mut conn = db::lock(&self.conn);
        let tx = conn.transaction().map_err(db_err)?;
        for u in updates {
            match u {
                LedgerUpdate::Seen {
                    session,
                    path,
                    hash,
                    via,
                } => upsert_in(&tx, session, path, hash, via.as_str())?,
                LedgerUpdate::Forget { session, path } => {
                    tx.execute(
                        "DELETE FROM ledger_seen WHERE session = ?1 AND path = ?2",
                        params![session, path.as_str()],
                    )
                    .map_err(db_err)?;
                }
            }
        }
        tx.commit().map_err(db_err)?;
        drop(conn);
        self.count_updates(updates.len() as u64);
        Ok(())
    }

    /// Run retention every [`PRUNE_EVERY`] updates.
    fn count_updates(&self, n: u64) {
        let before = self.updates.fetch_add(n, Ordering::Relaxed);
        let due = before / PRUNE_EVERY != (before + n) / PRUNE_EVERY;
        if due && let Err(e) = self.prune() {
            tracing::warn!(error = %e, "ledger retention failed");
        }
    }

    fn upsert(
        &self,
        session: &str,
        path: &RelPath,
        hash: &str,
        via: &str,
    ) -> Result<(), ToolError> {
        let conn = db::lock(&self.conn);
        upsert_in(&conn, session, path, hash, via)?;
        drop(conn);
        self.count_updates(1);
        Ok(())
    }
}

/// How a session came to know a path's content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// It read the file.
    Read,
    /// Its own write produced it.
    Write,
}

impl Via {
    fn as_str(self) -> &'static str {
        match self {
            Via::Read => "read",
            Via::Write => "write",
        }
    }
}

/// One change to the ledger, for [`Ledger::apply`].
#[derive(Debug, Clone)]
pub enum LedgerUpdate {
    /// `session` now knows `path` as `hash`.
    Seen {
        /// The session.
        session: String,
        /// The path.
        path: RelPath,
        /// The content hash it saw.
        hash: String,
        /// How.
        via: Via,
    },
    /// `session` no longer knows `path`.
    Forget {
        /// The session.
        session: String,
        /// The path.
        path: RelPath,
    },
}

fn upsert_in(
    conn: &Connection,
    session: &str,
    path: &RelPath,
    hash: &str,
    via: &str,
) -> Result<(), ToolError> {
    conn.prepare_cached(
        "INSERT INTO ledger_seen (session, path, hash, via, updated_at)
         VALUES (?1, ?2, ?3, ?4, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
         ON CONFLICT (session, path) DO UPDATE
         SET hash = excluded.hash, via = excluded.via, updated_at = excluded.updated_at",
    )
    .and_then(|mut st| st.execute(params![session, path.as_str(), hash, via]))
    .map_err(db_err)?;
    Ok(())
}

fn to_sql_int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn _assert_send_sync() {
        fn is<T: Send + Sync>() {}
        is::<Ledger>();
    }
}
