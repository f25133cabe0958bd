//! Storage: previous contents in chunks, retention (pruning) and sync levels.

use super::*;

/// `path`'s previous content could not be read into the journal.
pub(super) fn read_err(path: &str, source: io::Error) -> ToolError {
    RecordsError::Read {
        path: path.into(),
        source,
    }
    .into()
}

impl Journal {
    /// Apply retention now (it also runs at open and every few records); returns how many
    /// changes were deleted. Pending changes are never deleted.
    pub fn prune(&self) -> Result<u64, ToolError> {
        let mut conn = db::lock(&self.conn);
        let tx = immediate(&mut conn)?;
        let mut deleted = 0u64;
        if let Some(days) = self.max_age_days {
            deleted += tx
                .execute(
                    "DELETE FROM journal_changes WHERE status != 'pending'
                     AND julianday('now') - julianday(time) > ?1",
                    params![days as f64],
                )
                .map_err(db_err)? as u64;
        }
        if let Some(max) = self.max_changes {
            deleted += tx
                .execute(
                    "DELETE FROM journal_changes WHERE status != 'pending' AND id <=
                     (SELECT id FROM journal_changes ORDER BY id DESC LIMIT 1 OFFSET ?1)",
                    params![to_sql_int(max)],
                )
                .map_err(db_err)? as u64;
        }
        if let Some(max) = self.max_bytes {
            deleted += prune_bytes(&tx, max)?;
        }
        if deleted > 0 {
            tx.execute(
                "DELETE FROM journal_chunks
                 WHERE change_id NOT IN (SELECT id FROM journal_changes)",
                [],
            )
            .map_err(db_err)?;
            // A command's record goes with its first change.
            tx.execute(
                "DELETE FROM journal_commands WHERE first IS NOT NULL
                 AND first NOT IN (SELECT id FROM journal_changes)",
                [],
            )
            .map_err(db_err)?;
        }
        if let Some(days) = self.max_age_days {
            tx.execute(
                "DELETE FROM journal_commands WHERE julianday('now') - julianday(time) > ?1",
                params![days as f64],
            )
            .map_err(db_err)?;
        }
        tx.commit().map_err(db_err)?;
        if deleted > 0 {
            tracing::debug!(deleted, "journal retention pruned changes");
            // Hand freed pages back (a no-op on a database made before auto_vacuum was set).
            if let Err(e) = conn.execute_batch("PRAGMA incremental_vacuum") {
                tracing::debug!(error = %e, "incremental vacuum failed");
            }
        }
        Ok(deleted)
    }
}

/// Stream `file` into chunks of change `id`; returns the content hash and stores it with the size.
pub(super) fn store_content(
    tx: &Transaction<'_>,
    id: ChangeId,
    file: &mut dyn Read,
    read_err: &dyn Fn(io::Error) -> ToolError,
) -> Result<ContentHash, ToolError> {
    let mut hasher = blake3::Hasher::new();
    // Grown to the content (up to a chunk), not a zeroed chunk per call: most files are small.
    let mut buf = Vec::new();
    let mut total = 0u64;
    let mut seq = 0i64;
    let mut insert = tx
        .prepare_cached("INSERT INTO journal_chunks (change_id, seq, data) VALUES (?1, ?2, ?3)")
        .map_err(db_err)?;
    loop {
        buf.clear();
        let n = (&mut *file)
            .take(CHUNK_SIZE as u64)
            .read_to_end(&mut buf)
            .map_err(read_err)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf);
        insert.execute(params![id.0, seq, &buf]).map_err(db_err)?;
        total += n as u64;
        seq += 1;
    }
    let hash = hasher.finalize().to_hex().to_string();
    tx.prepare_cached("UPDATE journal_changes SET old_hash = ?2, old_bytes = ?3 WHERE id = ?1")
        .and_then(|mut update| update.execute(params![id.0, hash, to_sql_int(total)]))
        .map_err(db_err)?;
    Ok(hash)
}

/// Delete the oldest settled changes until the stored content fits `max` bytes; the newest
/// change is kept whatever its size, so the last write can always be undone.
pub(super) fn prune_bytes(tx: &Transaction<'_>, max: u64) -> Result<u64, ToolError> {
    let total: i64 = tx
        .query_row(
            "SELECT COALESCE(SUM(old_bytes), 0) FROM journal_changes",
            [],
            |r| r.get(0),
        )
        .map_err(db_err)?;
    let mut excess = u64::try_from(total).unwrap_or(0).saturating_sub(max);
    if excess == 0 {
        return Ok(0);
    }
    let mut victims = Vec::new();
    {
        let mut st = tx
            .prepare(
                "SELECT id, COALESCE(old_bytes, 0) FROM journal_changes
                 WHERE status != 'pending' AND id < (SELECT MAX(id) FROM journal_changes)
                 ORDER BY id",
            )
            .map_err(db_err)?;
        let mut rows = st.query([]).map_err(db_err)?;
        while excess > 0 {
            let Some(row) = rows.next().map_err(db_err)? else {
                break;
            };
            let id: i64 = row.get(0).map_err(db_err)?;
            let bytes: i64 = row.get(1).map_err(db_err)?;
            victims.push(id);
            excess = excess.saturating_sub(u64::try_from(bytes).unwrap_or(0));
        }
    }
    let mut del = tx
        .prepare_cached("DELETE FROM journal_changes WHERE id = ?1")
        .map_err(db_err)?;
    for id in &victims {
        del.execute(params![id]).map_err(db_err)?;
    }
    Ok(victims.len() as u64)
}

/// `synchronous=NORMAL` on a `synchronous=FULL` connection for one commit.
pub(super) struct RelaxedSync {
    relaxed: bool,
}

impl RelaxedSync {
    pub(super) fn new(conn: &Connection) -> Self {
        let relaxed = set_sync(conn, false).is_ok();
        Self { relaxed }
    }

    /// Back to `synchronous=FULL`; on failure the connection is left unusable for records
    /// ([`ensure_full_sync`] runs before each).
    pub(super) fn restore(self, conn: &Connection) -> Result<(), ToolError> {
        if self.relaxed {
            set_sync(conn, true).map_err(db_err)?;
        }
        Ok(())
    }
}

/// Make sure the connection commits with `synchronous=FULL` (2 = FULL), restoring it if a
/// relaxed commit could not.
pub(super) fn ensure_full_sync(conn: &Connection) -> Result<(), ToolError> {
    let level: i64 = conn
        .prepare_cached("PRAGMA synchronous")
        .and_then(|mut query| query.query_row([], |r| r.get(0)))
        .map_err(db_err)?;
    if level < 2 {
        set_sync(conn, true).map_err(db_err)?;
    }
    Ok(())
}

/// `PRAGMA synchronous = FULL` (or `NORMAL`), prepared once per connection: every write sets
/// it twice.
pub(super) fn set_sync(conn: &Connection, full: bool) -> rusqlite::Result<()> {
    let sql = if full {
        "PRAGMA synchronous = FULL"
    } else {
        "PRAGMA synchronous = NORMAL"
    };
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

pub(super) fn immediate(conn: &mut Connection) -> Result<Transaction<'_>, ToolError> {
    // IMMEDIATE takes the write lock up front, so a busy database waits (busy_timeout) instead
    // of failing at the first write of a deferred transaction.
    conn.transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(db_err)
}

pub(super) fn to_sql_int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}
