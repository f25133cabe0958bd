//! The read ledger: which files each session has read, and the content hash it saw.
//!
//! A write over an existing file is allowed only if the session read that file and the file
//! still has the content it saw. The ledger lives in `state.db`, so separate processes that
//! share a `--session` (CLI calls, the server and its runners) share one view.

use std::collections::BTreeMap;
use std::sync::Mutex;

use rusqlite::{Connection, OptionalExtension, params};
use toolyard_core::ToolError;

use crate::confine::RelPath;
use crate::db::{self, Durability, db_err};
use crate::hash::ContentHash;
use crate::state::StateDir;

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

/// Per-session read tracking, persisted in the state database; cheap to share across threads.
#[derive(Debug)]
pub struct Ledger {
    conn: Mutex<Connection>,
}

impl Ledger {
    /// Open (creating if needed) the ledger in `state`'s database.
    pub fn open(state: &StateDir) -> Result<Self, ToolError> {
        // A lost ledger update after a power cut only asks the model to re-read: NORMAL will do.
        let mut conn = db::open(state, Durability::Normal)?;
        db::ensure_schema(&mut conn, "ledger", SCHEMA_VERSION, SCHEMA)?;
        Ok(Self {
            conn: Mutex::new(conn),
        })
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

    /// Delete entries not touched for `max_age_days` days; returns how many went.
    pub fn prune(&self, max_age_days: u64) -> Result<u64, ToolError> {
        let conn = db::lock(&self.conn);
        let n = conn
            .execute(
                "DELETE FROM ledger_seen WHERE julianday('now') - julianday(updated_at) > ?1",
                params![max_age_days as f64],
            )
            .map_err(db_err)?;
        Ok(n as u64)
    }

    fn upsert(
        &self,
        session: &str,
        path: &RelPath,
        hash: &str,
        via: &str,
    ) -> Result<(), ToolError> {
        let conn = db::lock(&self.conn);
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn _assert_send_sync() {
        fn is<T: Send + Sync>() {}
        is::<Ledger>();
    }
}
