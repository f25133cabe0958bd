//! Recording changes: before a write (its previous content), after it (done or failed), and what a command changed.

use super::*;

impl Journal {
    /// Record the current content of `change.path` (or that it does not exist) and its mode as
    /// a pending change, streaming the file in [`CHUNK_SIZE`] chunks, and commit. Only then may
    /// the file be written: with `Expect::Hash` of the recorded `old_hash` (see [`Journal::get`]),
    /// or `Expect::Missing` when it did not exist.
    pub fn record(&self, ws: &Workspace, change: NewChange<'_>) -> Result<ChangeId, ToolError> {
        let rec = self.record_pending(ws, Pending::from(&change))?;
        Ok(rec.id)
    }

    /// Like [`Journal::record`], with the previous content given rather than read from a
    /// workspace on this disk: a remote runner ships it with its journal request, and writes
    /// only once this returns (committed).
    pub fn record_preimage(
        &self,
        change: NewChange<'_>,
        pre: &PreImage<'_>,
    ) -> Result<ChangeId, ToolError> {
        self.insert_preimage(Pending::from(&change), pre)
    }

    /// Like [`Journal::record_removal`], with the previous content given as in
    /// [`Journal::record_preimage`].
    pub fn record_removal_preimage(
        &self,
        session: &str,
        call_id: &str,
        tool: &str,
        path: &RelPath,
        group: Option<ChangeId>,
        pre: &PreImage<'_>,
    ) -> Result<ChangeId, ToolError> {
        self.insert_preimage(
            Pending {
                session,
                call_id,
                tool,
                path,
                new_hash: None,
                undoes: None,
                group,
                new_mode: None,
            },
            pre,
        )
    }

    /// Record `p` with the previous content `pre` another process read, and commit.
    pub(super) fn insert_preimage(
        &self,
        p: Pending<'_>,
        pre: &PreImage<'_>,
    ) -> Result<ChangeId, ToolError> {
        let path = p.path.to_string();
        let mut bytes = pre.content;
        let old = match bytes.as_mut() {
            Some(b) => Old::Content {
                reader: b as &mut dyn Read,
                link: false,
            },
            None => Old::Absent,
        };
        let rec = self.insert_pending(p, old, pre.mode, &|source| read_err(&path, source))?;
        Ok(rec.id)
    }

    /// Like [`Journal::record`] for a change that removes `path`: its new state is "absent", so
    /// undoing it writes the recorded content and mode back. `group` as in [`NewChange::group`].
    pub fn record_removal(
        &self,
        ws: &Workspace,
        session: &str,
        call_id: &str,
        tool: &str,
        path: &RelPath,
        group: Option<ChangeId>,
    ) -> Result<ChangeId, ToolError> {
        let rec = self.record_pending(
            ws,
            Pending {
                session,
                call_id,
                tool,
                path,
                new_hash: None,
                undoes: None,
                group,
                new_mode: None,
            },
        )?;
        Ok(rec.id)
    }

    /// The whole protocol in one process: record, write `content` under `expect` (the session's
    /// view of the file; refused with `StaleRead` if the file no longer matches), mark done or
    /// failed. `mode` overrides the file's mode as in [`Workspace::write_atomic_from`].
    pub fn apply(
        &self,
        ws: &Workspace,
        change: NewChange<'_>,
        content: &mut dyn Read,
        expect: &Expect,
        mode: Option<u32>,
    ) -> Result<(ChangeId, WriteOutcome), ToolError> {
        let rec = self.record_pending(ws, Pending::from(&change))?;
        // Check against what was recorded, not only at rename time: if the file changed and
        // changed back in between, the journal must still hold the content being replaced.
        let matches = match (expect, &rec.old_hash) {
            (Expect::Any, _) | (Expect::Missing, None) => true,
            (Expect::Hash(want), Some(have)) => want == have,
            _ => false,
        };
        let written = if matches {
            let cas = match &rec.old_hash {
                Some(h) => Expect::Hash(h.clone()),
                None => Expect::Missing,
            };
            ws.write_atomic_from(change.path, content, &cas, mode)
        } else {
            Err(ToolError::StaleRead {
                path: change.path.to_string(),
            })
        };
        match written {
            Ok(outcome) => {
                if let Err(e) = self.mark_done(rec.id) {
                    // The file is written; recover() will settle the entry from its content.
                    tracing::warn!(change = %rec.id, error = %e, "write landed but the journal entry stays pending");
                }
                Ok((rec.id, outcome))
            }
            Err(e) => {
                self.fail_quietly(rec.id);
                Err(e)
            }
        }
    }

    /// Record what a command did, after the fact, in one durable transaction: each entry as
    /// a `done` change with its previous state (content included), all of them one group
    /// (undone together, newest first), and the call with what it changed out of scope. A
    /// crash before the commit leaves nothing of it; after, all of it. Returns the changes'
    /// ids in `entries`' order.
    pub fn record_command(&self, cmd: &CommandRecord<'_>) -> Result<CommandJournaled, ToolError> {
        for e in cmd.entries {
            let kind = EntryKind::of_hash(e.old_hash.as_deref());
            let ok = match kind {
                EntryKind::Absent | EntryKind::Dir => true,
                EntryKind::File => {
                    e.old_hash.as_deref()
                        == Some(toolyard_workspace::hash_bytes(&e.old_content).as_str())
                }
                EntryKind::Symlink => {
                    e.old_hash.as_deref() == Some(symlink_hash(&e.old_content).as_str())
                }
            };
            if !ok {
                return Err(ToolError::Io(format!(
                    "the previous content of {} does not match its hash; nothing was journaled",
                    e.path
                )));
            }
        }
        let mut ids = Vec::with_capacity(cmd.entries.len());
        let mut dropped = Vec::new();
        {
            let mut conn = db::lock(&self.conn);
            ensure_full_sync(&conn)?;
            let tx = immediate(&mut conn)?;
            let mut fresh = Vec::with_capacity(cmd.entries.len());
            for e in cmd.entries {
                let latest: Option<Option<String>> = tx
                    .prepare_cached(
                        "SELECT new_hash FROM journal_changes
                         WHERE path = ?1 AND status = 'done'
                         AND (julianday(time) - 2440587.5) * 86400.0 >= ?2
                         ORDER BY id DESC LIMIT 1",
                    )
                    .and_then(|mut st| {
                        st.query_row(params![e.path, cmd.since], |r| r.get(0))
                            .optional()
                    })
                    .map_err(db_err)?;
                if cmd.since > 0.0 && latest.is_some_and(|h| h == e.new_hash) {
                    dropped.push(e.path.clone());
                    continue;
                }
                fresh.push(e);
            }
            let mut group: Option<i64> = None;
            for e in fresh.iter().copied() {
                let kind = EntryKind::of_hash(e.old_hash.as_deref());
                tx.prepare_cached(
                    "INSERT INTO journal_changes
                     (session, call_id, tool, path, time, existed, old_mode, new_hash, status,
                      grp, new_mode)
                     VALUES (?1, ?2, ?3, ?4, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), ?5, ?6, ?7,
                             'done', ?8, ?9)",
                )
                .and_then(|mut insert| {
                    insert.execute(params![
                        cmd.session,
                        cmd.call_id,
                        cmd.tool,
                        e.path,
                        kind != EntryKind::Absent,
                        e.old_mode,
                        e.new_hash,
                        group,
                        e.new_mode,
                    ])
                })
                .map_err(db_err)?;
                let id = ChangeId(tx.last_insert_rowid());
                if group.is_none() && fresh.len() > 1 {
                    group = Some(id.0);
                    tx.execute(
                        "UPDATE journal_changes SET grp = ?1 WHERE id = ?1",
                        params![id.0],
                    )
                    .map_err(db_err)?;
                }
                let path = e.path.clone();
                let read_err = move |source: io::Error| read_err(&path, source);
                match kind {
                    EntryKind::File | EntryKind::Symlink => {
                        store_content(&tx, id, &mut &e.old_content[..], &read_err)?;
                        if let Some(h) = &e.old_hash {
                            set_old_hash(&tx, id, h)?;
                        }
                    }
                    EntryKind::Dir => {
                        set_old_hash(&tx, id, DIR_HASH)?;
                    }
                    EntryKind::Absent => {}
                }
                ids.push(id);
            }
            let skipped = serde_json::to_string(cmd.skipped)
                .map_err(|e| ToolError::Io(format!("journaling a command: {e}")))?;
            // A call whose every change was journaled already leaves no record of its own.
            let record = !ids.is_empty() || !cmd.skipped.is_empty();
            if record {
                tx.execute(
                    "INSERT INTO journal_commands
                 (session, call_id, tool, command, time, first, changes, skipped)
                 VALUES (?1, ?2, ?3, ?4, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), ?5, ?6, ?7)",
                    params![
                        cmd.session,
                        cmd.call_id,
                        cmd.tool,
                        cmd.command,
                        ids.first().map(|i| i.0),
                        ids.len() as i64,
                        skipped
                    ],
                )
                .map_err(db_err)?;
            }
            tx.commit().map_err(db_err)?;
        }
        tracing::debug!(
            changes = ids.len(),
            skipped = cmd.skipped.len(),
            tool = cmd.tool,
            "journaled a command's changes"
        );
        let due = self.records.fetch_add(1, Ordering::Relaxed) % PRUNE_EVERY == PRUNE_EVERY - 1;
        if due && let Err(e) = self.prune() {
            tracing::warn!(error = %e, "journal retention failed");
        }
        Ok(CommandJournaled { ids, dropped })
    }

    /// The write of change `id` landed.
    ///
    /// This commit does not wait for the disk (`synchronous=NORMAL` for it alone): if it is
    /// lost in a crash, the change is left `pending` and [`Journal::recover`] settles it as done
    /// from the file's content, exactly as for a crash just before this call. The next
    /// `synchronous=FULL` commit (the next record) makes it durable along with its own.
    pub fn mark_done(&self, id: ChangeId) -> Result<(), ToolError> {
        let mut conn = db::lock(&self.conn);
        let relaxed = RelaxedSync::new(&conn);
        let result = Self::mark_done_in(&mut conn, id);
        relaxed.restore(&conn)?;
        result
    }

    pub(super) fn mark_done_in(conn: &mut Connection, id: ChangeId) -> Result<(), ToolError> {
        let tx = immediate(conn)?;
        let (status, undoes) = status_of(&tx, id)?;
        match status {
            ChangeStatus::Done => {}
            ChangeStatus::Pending | ChangeStatus::Failed => {
                if status == ChangeStatus::Failed {
                    // recover() may have run while this write was in flight.
                    tracing::warn!(change = %id, "change marked failed is now reported done");
                }
                set_status(&tx, id, ChangeStatus::Done)?;
                if undoes.is_some() {
                    link_undo(&tx, id)?;
                }
            }
        }
        tx.commit().map_err(db_err)
    }

    /// The write of change `id` did not happen.
    pub fn mark_failed(&self, id: ChangeId) -> Result<(), ToolError> {
        let mut conn = db::lock(&self.conn);
        let tx = immediate(&mut conn)?;
        match status_of(&tx, id)?.0 {
            ChangeStatus::Failed => {}
            ChangeStatus::Pending => set_status(&tx, id, ChangeStatus::Failed)?,
            ChangeStatus::Done => {
                return Err(ToolError::Conflict(format!(
                    "change {id} is already done; a write that landed cannot be marked failed"
                )));
            }
        }
        tx.commit().map_err(db_err)
    }

    pub(super) fn record_pending(
        &self,
        ws: &Workspace,
        p: Pending<'_>,
    ) -> Result<Recorded, ToolError> {
        // Opening a FIFO for reading would block, and a device has no content to keep.
        if let Some(meta) = ws.metadata(p.path)?
            && !meta.is_file()
            && !meta.is_dir()
        {
            return Err(ToolError::InvalidArguments(format!(
                "{} is not a regular file; only regular files can be changed",
                p.path
            )));
        }
        let mut file = match ws.open_file(p.path) {
            Ok(f) => Some(f),
            Err(ToolError::FileNotFound(_)) => None,
            Err(e) => return Err(e),
        };
        let mode = match &file {
            Some(f) => {
                use cap_std::fs::PermissionsExt;
                let meta = f.metadata().map_err(|e| ws.map_err(e, p.path))?;
                Some(meta.permissions().mode() & 0o7777)
            }
            None => None,
        };
        let path = p.path;
        let old = match file.as_mut() {
            Some(f) => Old::Content {
                reader: f as &mut dyn Read,
                link: false,
            },
            None => Old::Absent,
        };
        self.insert_pending(p, old, mode, &|e| ws.map_err(e, path))
    }

    /// [`Journal::record_pending`] for any kind of entry, not following a final symlink: an
    /// undo records what it replaces, which a command may have made a symlink or a directory.
    pub(super) fn record_state_pending(
        &self,
        ws: &Workspace,
        p: Pending<'_>,
    ) -> Result<Recorded, ToolError> {
        let path = p.path;
        let meta = match ws.dir().symlink_metadata(path.as_path()) {
            Ok(m) => Some(m),
            Err(e) if is_absent(&e) => None,
            Err(e) => return Err(ws.map_err(e, path)),
        };
        let Some(meta) = meta else {
            return self.insert_pending(p, Old::Absent, None, &|e| ws.map_err(e, path));
        };
        use cap_std::fs::PermissionsExt;
        let mode = Some(meta.permissions().mode() & 0o7777);
        if meta.file_type().is_symlink() {
            let mut target = &read_link(ws, path)?[..];
            let old = Old::Content {
                reader: &mut target,
                link: true,
            };
            return self.insert_pending(p, old, None, &|e| ws.map_err(e, path));
        }
        if meta.is_dir() {
            return self.insert_pending(p, Old::Dir, mode, &|e| ws.map_err(e, path));
        }
        self.record_pending(ws, p)
    }

    /// Insert `p` as a pending change holding `content` (`None`: the file did not exist) and
    /// `mode`, and commit.
    pub(super) fn insert_pending(
        &self,
        p: Pending<'_>,
        mut old: Old<'_>,
        mode: Option<u32>,
        read_err: &dyn Fn(io::Error) -> ToolError,
    ) -> Result<Recorded, ToolError> {
        let rec = {
            let mut conn = db::lock(&self.conn);
            ensure_full_sync(&conn)?;
            let tx = immediate(&mut conn)?;
            tx.prepare_cached(
                "INSERT INTO journal_changes
                 (session, call_id, tool, path, time, existed, old_mode, new_hash, status, undoes,
                  grp, new_mode)
                 VALUES (?1, ?2, ?3, ?4, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), ?5, ?6, ?7,
                         'pending', ?8, ?9, ?10)",
            )
            .and_then(|mut insert| {
                insert.execute(params![
                    p.session,
                    p.call_id,
                    p.tool,
                    p.path.as_str(),
                    !matches!(old, Old::Absent),
                    mode,
                    p.new_hash,
                    p.undoes.map(|c| c.0),
                    p.group.map(|c| c.0),
                    p.new_mode,
                ])
            })
            .map_err(db_err)?;
            let id = ChangeId(tx.last_insert_rowid());
            // A group is tagged on its first change only once a second one joins: a call that
            // changes one file leaves a plain change.
            if let Some(first) = p.group {
                tx.execute(
                    "UPDATE journal_changes SET grp = ?1 WHERE id = ?1 AND grp IS NULL",
                    params![first.0],
                )
                .map_err(db_err)?;
            }
            let old_hash = match &mut old {
                Old::Content { reader, link } => {
                    let hash = store_content(&tx, id, *reader, read_err)?;
                    Some(if *link {
                        set_old_hash(&tx, id, &format!("{SYMLINK_HASH_PREFIX}{hash}"))?
                    } else {
                        hash
                    })
                }
                Old::Dir => Some(set_old_hash(&tx, id, DIR_HASH)?),
                Old::Absent => None,
            };
            tx.commit().map_err(db_err)?;
            Recorded {
                id,
                old_hash,
                old_mode: mode,
            }
        };
        tracing::debug!(change = %rec.id, path = %p.path, tool = p.tool, existed = rec.old_hash.is_some(), "journaled change");
        let due = self.records.fetch_add(1, Ordering::Relaxed) % PRUNE_EVERY == PRUNE_EVERY - 1;
        if due && let Err(e) = self.prune() {
            tracing::warn!(error = %e, "journal retention failed");
        }
        Ok(rec)
    }

    pub(super) fn fail_quietly(&self, id: ChangeId) {
        if let Err(e) = self.mark_failed(id) {
            tracing::warn!(change = %id, error = %e, "cannot mark change failed; recover() will settle it");
        }
    }
}

/// Set the stored old hash of change `id` (a symlink's or a directory's state hash).
pub(super) fn set_old_hash(
    tx: &Transaction<'_>,
    id: ChangeId,
    hash: &str,
) -> Result<ContentHash, ToolError> {
    tx.prepare_cached("UPDATE journal_changes SET old_hash = ?2 WHERE id = ?1")
        .and_then(|mut update| update.execute(params![id.0, hash]))
        .map_err(db_err)?;
    Ok(hash.to_string())
}

/// After the undo `id` took effect, update `undone_by` down its chain: the change it reverts is
/// now undone by it; that change, if itself an undo, no longer holds its own target undone; and
/// so on, alternating. `undoes` always points to an older id, so the walk ends.
pub(super) fn link_undo(tx: &Transaction<'_>, id: ChangeId) -> Result<(), ToolError> {
    let mut cur = id.0;
    let mut in_effect = true;
    loop {
        let target: Option<i64> = tx
            .query_row(
                "SELECT undoes FROM journal_changes WHERE id = ?1",
                params![cur],
                |r| r.get(0),
            )
            .optional()
            .map_err(db_err)?
            .flatten();
        let Some(target) = target.filter(|t| *t < cur) else {
            return Ok(());
        };
        let by = in_effect.then_some(cur);
        tx.execute(
            "UPDATE journal_changes SET undone_by = ?2 WHERE id = ?1",
            params![target, by],
        )
        .map_err(db_err)?;
        cur = target;
        in_effect = !in_effect;
    }
}

pub(super) fn status_of(
    tx: &Transaction<'_>,
    id: ChangeId,
) -> Result<(ChangeStatus, Option<i64>), ToolError> {
    let row: Option<(String, Option<i64>)> = tx
        .prepare_cached("SELECT status, undoes FROM journal_changes WHERE id = ?1")
        .and_then(|mut select| {
            select
                .query_row(params![id.0], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
        })
        .map_err(db_err)?;
    let (status, undoes) = row.ok_or_else(|| not_found(id))?;
    Ok((status.parse()?, undoes))
}

pub(super) fn set_status(
    tx: &Transaction<'_>,
    id: ChangeId,
    status: ChangeStatus,
) -> Result<(), ToolError> {
    tx.prepare_cached("UPDATE journal_changes SET status = ?2 WHERE id = ?1")
        .and_then(|mut update| update.execute(params![id.0, status.as_str()]))
        .map_err(db_err)?;
    Ok(())
}
