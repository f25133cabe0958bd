//! Reading the journal: changes, their groups and previous contents, command calls.

use super::*;

impl Journal {
    /// The command calls recorded, newest first (at most `limit`; of `session` if given).
    pub fn commands(
        &self,
        session: Option<&str>,
        limit: usize,
    ) -> Result<Vec<CommandCall>, ToolError> {
        let conn = db::lock(&self.conn);
        let mut st = conn
            .prepare_cached(
                "SELECT id, session, call_id, tool, command, time, first, changes, skipped
                 FROM journal_commands WHERE ?1 IS NULL OR session = ?1
                 ORDER BY id DESC LIMIT ?2",
            )
            .map_err(db_err)?;
        let rows = st
            .query_map(params![session, to_sql_int(limit as u64)], |r| {
                let skipped: String = r.get(8)?;
                Ok(CommandCall {
                    id: r.get(0)?,
                    session: r.get(1)?,
                    call_id: r.get(2)?,
                    tool: r.get(3)?,
                    command: r.get(4)?,
                    time: r.get(5)?,
                    first: r.get::<_, Option<i64>>(6)?.map(ChangeId),
                    changes: u64::try_from(r.get::<_, i64>(7)?).unwrap_or(0),
                    skipped: serde_json::from_str(&skipped).unwrap_or_default(),
                })
            })
            .map_err(db_err)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(db_err)
    }

    /// Changes matching `filter`, newest first.
    pub fn list(&self, filter: &ChangeFilter) -> Result<Vec<Change>, ToolError> {
        let mut sql = format!("SELECT {COLUMNS} FROM journal_changes WHERE 1 = 1");
        let mut args: Vec<Value> = Vec::new();
        if let Some(s) = &filter.session {
            args.push(Value::Text(s.clone()));
            sql.push_str(&format!(" AND session = ?{}", args.len()));
        }
        if let Some(p) = &filter.path {
            args.push(Value::Text(p.clone()));
            sql.push_str(&format!(" AND path = ?{}", args.len()));
        }
        if let Some(st) = filter.status {
            args.push(Value::Text(st.as_str().into()));
            sql.push_str(&format!(" AND status = ?{}", args.len()));
        }
        sql.push_str(" ORDER BY id DESC");
        if let Some(limit) = filter.limit {
            args.push(Value::Integer(i64::try_from(limit).unwrap_or(i64::MAX)));
            sql.push_str(&format!(" LIMIT ?{}", args.len()));
        }
        let conn = db::lock(&self.conn);
        let mut st = conn.prepare(&sql).map_err(db_err)?;
        let rows = st
            .query_map(rusqlite::params_from_iter(args), change_from_row)
            .map_err(db_err)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(db_err)
    }

    /// The change `id`.
    pub fn get(&self, id: ChangeId) -> Result<Change, ToolError> {
        let conn = db::lock(&self.conn);
        get_change(&conn, id)
    }

    /// The change a plain `undo` of `session` reverts: its newest change that is done, is not
    /// itself an undo, and is not undone. Undoing it marks it undone, so repeated undos walk
    /// back through the session's history; a redo (undoing an undo) makes its change current again.
    pub fn last_of_session(&self, session: &str) -> Result<Option<Change>, ToolError> {
        let conn = db::lock(&self.conn);
        conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM journal_changes
             WHERE session = ?1 AND status = 'done' AND undoes IS NULL AND undone_by IS NULL
             ORDER BY id DESC LIMIT 1"
        ))
        .and_then(|mut st| st.query_row(params![session], change_from_row).optional())
        .map_err(db_err)
    }

    /// The previous content stored for change `id` (`None` if the file did not exist), streamed
    /// chunk by chunk and checked against its hash at the end.
    pub fn old_content(&self, id: ChangeId) -> Result<Option<impl Read + '_>, ToolError> {
        let change = self.get(id)?;
        Ok(change
            .existed
            .then(|| ChunkReader::new(&self.conn, &change)))
    }

    /// The changes undone together with change `id`: its group, newest first (just `id` when
    /// it was made alone).
    pub fn group_of(&self, id: ChangeId) -> Result<Vec<Change>, ToolError> {
        let change = self.get(id)?;
        let Some(group) = change.group else {
            return Ok(vec![change]);
        };
        let conn = db::lock(&self.conn);
        let mut st = conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM journal_changes WHERE grp = ?1 ORDER BY id DESC"
            ))
            .map_err(db_err)?;
        let rows = st
            .query_map(params![group.0], change_from_row)
            .map_err(db_err)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(db_err)
    }
}

pub(super) fn get_change(conn: &Connection, id: ChangeId) -> Result<Change, ToolError> {
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM journal_changes WHERE id = ?1"
    ))
    .and_then(|mut st| st.query_row(params![id.0], change_from_row).optional())
    .map_err(db_err)?
    .ok_or_else(|| not_found(id))
}

pub(super) fn not_found(id: ChangeId) -> ToolError {
    ToolError::NotFound(format!(
        "change {id} is not in the journal (never recorded, or pruned by retention); see `toolyard log`"
    ))
}

pub(super) fn change_from_row(r: &Row<'_>) -> rusqlite::Result<Change> {
    let status: String = r.get(11)?;
    let status = status.parse::<ChangeStatus>().map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(11, rusqlite::types::Type::Text, Box::new(e))
    })?;
    let old_bytes: Option<i64> = r.get(9)?;
    Ok(Change {
        id: ChangeId(r.get(0)?),
        session: r.get(1)?,
        call_id: r.get(2)?,
        tool: r.get(3)?,
        path: r.get(4)?,
        time: r.get(5)?,
        existed: r.get(6)?,
        old_hash: r.get(7)?,
        old_mode: r.get(8)?,
        old_bytes: old_bytes.and_then(|b| u64::try_from(b).ok()),
        new_hash: r.get(10)?,
        status,
        undoes: r.get::<_, Option<i64>>(12)?.map(ChangeId),
        undone_by: r.get::<_, Option<i64>>(13)?.map(ChangeId),
        group: r.get::<_, Option<i64>>(14)?.map(ChangeId),
        new_mode: r.get(15)?,
    })
}

/// The stored previous content of a change, read chunk by chunk (one chunk in memory at a
/// time, the database locked only while a chunk is fetched), verified against its hash and
/// size at the end so damaged content never reaches the file (the rename happens after EOF).
pub(super) struct ChunkReader<'a> {
    conn: &'a Mutex<Connection>,
    change: i64,
    seq: i64,
    buf: Vec<u8>,
    pos: usize,
    hasher: blake3::Hasher,
    total: u64,
    expect_hash: Option<ContentHash>,
    expect_len: Option<u64>,
    finished: bool,
}

impl<'a> ChunkReader<'a> {
    pub(super) fn new(conn: &'a Mutex<Connection>, change: &Change) -> Self {
        Self {
            conn,
            change: change.id.0,
            seq: 0,
            buf: Vec::new(),
            pos: 0,
            hasher: blake3::Hasher::new(),
            total: 0,
            expect_hash: change.old_hash.clone(),
            expect_len: change.old_bytes,
            finished: false,
        }
    }

    pub(super) fn fetch(&mut self) -> io::Result<bool> {
        let conn = db::lock(self.conn);
        let data: Option<Vec<u8>> = conn
            .prepare_cached("SELECT data FROM journal_chunks WHERE change_id = ?1 AND seq = ?2")
            .and_then(|mut st| {
                st.query_row(params![self.change, self.seq], |r| r.get(0))
                    .optional()
            })
            .map_err(io::Error::other)?;
        drop(conn);
        match data {
            Some(data) => {
                self.hasher.update(&data);
                self.total += data.len() as u64;
                self.buf = data;
                self.pos = 0;
                self.seq += 1;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    pub(super) fn verify(&self) -> io::Result<()> {
        let hash = self.hasher.finalize().to_hex().to_string();
        let expect = self.expect_hash.as_deref();
        let expect = expect.map(|h| h.strip_prefix(SYMLINK_HASH_PREFIX).unwrap_or(h));
        let hash_ok = expect == Some(hash.as_str());
        let len_ok = self.expect_len.is_none_or(|n| n == self.total);
        if hash_ok && len_ok {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the journal's copy of change {} is incomplete or damaged ({} bytes, hash {hash}); refusing to restore it",
                    self.change, self.total
                ),
            ))
        }
    }
}

impl Read for ChunkReader<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.buf.len() {
            if self.finished {
                return Ok(0);
            }
            if !self.fetch()? {
                self.finished = true;
                self.buf = Vec::new();
                self.pos = 0;
                self.verify()?;
                return Ok(0);
            }
        }
        let n = out.len().min(self.buf.len() - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}
