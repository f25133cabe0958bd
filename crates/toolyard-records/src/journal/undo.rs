//! Undo on this disk: the journal's verdict on a change, and the restore of its path under a compare-and-swap (the group algorithm over any backend is [`crate::undo_group`]).

use super::*;

/// A change checked for undoing, with what its path holds now.
#[derive(Debug)]
pub struct Checked {
    /// The change to undo.
    pub target: Change,
    /// What its path holds now, as the backend read it (the content only when the journal
    /// needs it sent: a remote runner's file).
    pub now: FileState,
    /// The path's state hash now (`None`: absent).
    pub current: Option<ContentHash>,
    /// The journal's verdict: may be undone, forced or already as before.
    pub verdict: UndoVerdict,
}

impl Journal {
    /// Whether `target` can be undone now (see [`Journal::undo_check`]) from its file on this
    /// disk.
    pub(crate) fn check_on_disk(
        &self,
        ws: &Workspace,
        target: Change,
        force: bool,
    ) -> Result<Checked, ToolError> {
        let path = ws.relative(&target.path, ws.root())?;
        let (current, mode) = state_at(ws, &path)?;
        let verdict = self.undo_verdict_mode(&target, current.as_deref(), mode, force)?;
        Ok(Checked {
            target,
            now: FileState {
                content: None,
                mode,
                state: current.clone(),
            },
            current,
            verdict,
        })
    }

    /// Undo the change checked by [`Journal::check_on_disk`] on this disk; the undo joins
    /// `group`.
    pub(crate) fn restore_on_disk(
        &self,
        ws: &Workspace,
        checked: Checked,
        session: &str,
        call_id: &str,
        group: Option<ChangeId>,
    ) -> Result<UndoOutcome, ToolError> {
        let Checked {
            target,
            current,
            verdict,
            ..
        } = checked;
        let UndoVerdict { forced, already } = verdict;
        let path = ws.relative(&target.path, ws.root())?;
        let id = target.id;
        let rec = self.record_state_pending(
            ws,
            Pending {
                session,
                call_id,
                tool: UNDO_TOOL,
                path: &path,
                new_hash: target.old_hash.as_deref(),
                undoes: Some(id),
                group,
                // A command's change tracks modes: its undo does too, so a redo checks it.
                new_mode: target.new_mode.and(target.old_mode),
            },
        )?;
        if rec.old_hash != current {
            self.fail_quietly(rec.id);
            return Err(ToolError::Conflict(format!(
                "{} changed while undoing change {id}; retry the undo",
                target.path
            )));
        }
        let expect = match &rec.old_hash {
            Some(h) => Expect::Hash(h.clone()),
            None => Expect::Missing,
        };
        // Already as before the change (and with its mode): there is nothing to write.
        let nothing_to_write = already && (!target.existed || rec.old_mode == target.old_mode);
        let restored = if nothing_to_write {
            let bytes = match ws.metadata(&path) {
                Ok(Some(m)) if target.existed => m.len(),
                _ => 0,
            };
            Ok((!target.existed, bytes, rec.old_mode))
        } else {
            self.restore_entry(ws, &path, &target, rec.old_hash.as_deref(), expect)
        };
        match restored {
            Ok((removed, bytes, mode)) => {
                self.mark_done(rec.id)?;
                tracing::info!(undo = %rec.id, undone = %id, path = %path, removed, "undid change");
                Ok(UndoOutcome {
                    undo: rec.id,
                    undone: id,
                    redo: target.undoes.is_some(),
                    path: target.path,
                    removed,
                    bytes,
                    mode,
                    new_hash: target.old_hash,
                    forced,
                    already,
                })
            }
            Err(e) => {
                self.fail_quietly(rec.id);
                Err(match e {
                    ToolError::StaleRead { path } => ToolError::Conflict(format!(
                        "{path} changed while undoing change {id}; retry the undo"
                    )),
                    other => other,
                })
            }
        }
    }

    /// Whether change `target` may be undone now that its file hashes to `current` (`None`:
    /// absent): `Ok(forced)`, where `forced` says `force` overrode a conflict, or the
    /// `Conflict` saying why not. The checks of [`Journal::undo`], for an undo done elsewhere.
    pub fn undo_check(
        &self,
        target: &Change,
        current: Option<&str>,
        force: bool,
    ) -> Result<bool, ToolError> {
        self.undo_verdict(target, current, force).map(|v| v.forced)
    }

    /// [`Journal::undo_check`], saying also whether the file is already as before the change
    /// (its content changed back since, a formatter undoing an edit): that is no conflict, since
    /// undoing it loses nothing; the undo then writes nothing and only marks the change undone.
    pub fn undo_verdict(
        &self,
        target: &Change,
        current: Option<&str>,
        force: bool,
    ) -> Result<UndoVerdict, ToolError> {
        self.undo_verdict_mode(target, current, None, force)
    }

    /// [`Journal::undo_verdict`], given also the path's mode now (`None`: unknown): a change
    /// that tracks modes (a command's) has also changed since when its mode differs.
    pub fn undo_verdict_mode(
        &self,
        target: &Change,
        current: Option<&str>,
        current_mode: Option<u32>,
        force: bool,
    ) -> Result<UndoVerdict, ToolError> {
        let id = target.id;
        match target.status {
            ChangeStatus::Done => {}
            ChangeStatus::Pending => {
                return Err(ToolError::Conflict(format!(
                    "change {id} is still pending: its write was never confirmed (in flight, or interrupted by a crash; restarting Toolyard settles it)"
                )));
            }
            ChangeStatus::Failed => {
                return Err(ToolError::Conflict(format!(
                    "change {id} failed: its write never happened, so there is nothing to undo"
                )));
            }
        }
        let mut forced = false;
        if let Some(by) = target.undone_by {
            if !force {
                return Err(ToolError::Conflict(format!(
                    "change {id} was already undone by change {by}; to redo it, undo change {by}"
                )));
            }
            forced = true;
        }
        let tracked = target.new_mode.is_some() && current_mode.is_some();
        let is_new = current == target.new_hash.as_deref()
            && (!tracked || current.is_none() || current_mode == target.new_mode);
        let already = !is_new
            && current == target.old_hash.as_deref()
            && (!tracked || current.is_none() || current_mode == target.old_mode);
        if !is_new && !already {
            if !force {
                return Err(ToolError::Conflict(format!(
                    "{} changed since change {id} ({}); undoing it would lose those changes. Read the file and edit it instead, or undo with force (`force: true`; `--force` on the command line) to restore the content from before change {id} anyway",
                    target.path,
                    if current.is_none() {
                        "it was removed"
                    } else if current == target.new_hash.as_deref() {
                        "its mode differs"
                    } else {
                        "its content differs"
                    }
                )));
            }
            forced = true;
        }
        Ok(UndoVerdict { forced, already })
    }

    /// Record the undo of `target` as a pending change whose previous content `pre` another
    /// process read (a remote runner), and commit; the runner restores the file only then, and
    /// [`Journal::mark_done`] links the undo. Check with [`Journal::undo_check`] first. The
    /// undo joins `group` (the first undo of the same group undo), as in [`Journal::undo_group`].
    pub fn record_undo_preimage(
        &self,
        target: &Change,
        session: &str,
        call_id: &str,
        group: Option<ChangeId>,
        pre: &PreImage<'_>,
    ) -> Result<ChangeId, ToolError> {
        let path = RelPath::from_normalized(&target.path);
        self.insert_preimage(
            Pending {
                session,
                call_id,
                tool: UNDO_TOOL,
                path: &path,
                new_hash: target.old_hash.as_deref(),
                undoes: Some(target.id),
                group,
                new_mode: None,
            },
            pre,
        )
    }

    /// [`Journal::record_undo_preimage`] for a path whose state another process read may be a
    /// symlink or a directory: `state` is its state hash when it is not a regular file
    /// (`pre.content` then holds a symlink's target).
    pub fn record_undo_state(
        &self,
        target: &Change,
        session: &str,
        call_id: &str,
        group: Option<ChangeId>,
        pre: &PreImage<'_>,
        state: Option<&str>,
    ) -> Result<ChangeId, ToolError> {
        let path = RelPath::from_normalized(&target.path);
        let p = Pending {
            session,
            call_id,
            tool: UNDO_TOOL,
            path: &path,
            new_hash: target.old_hash.as_deref(),
            undoes: Some(target.id),
            group,
            new_mode: target.new_mode.and(target.old_mode),
        };
        let shown = target.path.clone();
        let read_err = move |source: io::Error| read_err(&shown, source);
        let mut bytes = pre.content.unwrap_or_default();
        let old = match EntryKind::of_hash(state) {
            EntryKind::Dir => Old::Dir,
            EntryKind::Symlink => Old::Content {
                reader: &mut bytes,
                link: true,
            },
            _ if pre.content.is_some() => Old::Content {
                reader: &mut bytes,
                link: false,
            },
            _ => Old::Absent,
        };
        let mode = if state.is_some_and(|s| s.starts_with(SYMLINK_HASH_PREFIX)) {
            None
        } else {
            pre.mode
        };
        self.insert_pending(p, old, mode, &read_err).map(|r| r.id)
    }

    /// Put `path` back as it was before `target`, from `current` (its state hash now, checked
    /// again before anything is removed): a file's bytes and mode, a symlink, a directory, or
    /// nothing. Returns (removed, bytes, mode).
    pub(super) fn restore_entry(
        &self,
        ws: &Workspace,
        path: &RelPath,
        target: &Change,
        current: Option<&str>,
        expect: Expect,
    ) -> Result<(bool, u64, Option<u32>), ToolError> {
        let now = EntryKind::of_hash(current);
        match target.old_kind() {
            EntryKind::Absent => match now {
                EntryKind::File => self.remove_if(ws, path, current).map(|()| (true, 0, None)),
                _ => remove_entry(ws, path, current).map(|()| (true, 0, None)),
            },
            EntryKind::File => {
                let expect = if matches!(now, EntryKind::Symlink | EntryKind::Dir) {
                    remove_entry(ws, path, current)?;
                    Expect::Missing
                } else {
                    expect
                };
                let mut reader = ChunkReader::new(&self.conn, target);
                ws.write_atomic_from(path, &mut reader, &expect, target.old_mode)
                    .map(|o| (false, o.bytes, Some(o.mode)))
            }
            EntryKind::Symlink => {
                let mut link = Vec::new();
                ChunkReader::new(&self.conn, target)
                    .read_to_end(&mut link)
                    .map_err(|e| ws.map_err(e, path))?;
                if now == EntryKind::Dir {
                    remove_entry(ws, path, current)?;
                } else {
                    recheck(ws, path, current)?;
                }
                make_symlink(ws, path, &link)?;
                Ok((false, link.len() as u64, None))
            }
            EntryKind::Dir => {
                if now != EntryKind::Dir && now != EntryKind::Absent {
                    remove_entry(ws, path, current)?;
                }
                let mode = target.old_mode.unwrap_or(0o755);
                make_dir(ws, path, mode, now == EntryKind::Dir)?;
                Ok((false, 0, Some(mode)))
            }
        }
    }

    /// Remove `path` if it still has hash `expect` (`None`: it is already gone).
    pub(super) fn remove_if(
        &self,
        ws: &Workspace,
        path: &RelPath,
        expect: Option<&str>,
    ) -> Result<(), ToolError> {
        let Some(expect) = expect else {
            return Ok(());
        };
        // A narrow window remains between this check and the unlink (see the module docs of
        // confine.rs: remove_file takes no expectation yet).
        if ws.hash_of(path)?.as_deref() != Some(expect) {
            return Err(ToolError::StaleRead {
                path: path.to_string(),
            });
        }
        ws.remove_file(path)
    }
}

/// Whether `e` says the path is not there (or a parent is not a directory).
pub(super) fn is_absent(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR)
}

/// The state of `rel` now, not following a final symlink: its state hash (see
/// [`EntryKind::of_hash`]; `None`: absent) and permission bits (`None` for a symlink).
pub fn state_at(
    ws: &Workspace,
    rel: &RelPath,
) -> Result<(Option<ContentHash>, Option<u32>), ToolError> {
    use cap_std::fs::PermissionsExt;
    let meta = match ws.dir().symlink_metadata(rel.as_path()) {
        Ok(m) => m,
        Err(e) if is_absent(&e) => return Ok((None, None)),
        Err(e) => return Err(ws.map_err(e, rel)),
    };
    let mode = meta.permissions().mode() & 0o7777;
    if meta.file_type().is_symlink() {
        return Ok((Some(symlink_hash(&read_link(ws, rel)?)), None));
    }
    if meta.is_dir() {
        return Ok((Some(DIR_HASH.to_string()), Some(mode)));
    }
    Ok((ws.hash_of(rel)?, Some(mode)))
}

/// The target of the symlink `rel`, as bytes (absolute or dangling targets included).
pub fn read_link(ws: &Workspace, rel: &RelPath) -> Result<Vec<u8>, ToolError> {
    let dir = ws.open_dir(&rel.parent())?;
    rustix::fs::readlinkat(&dir, rel.file_name(), Vec::new())
        .map(|t| t.into_bytes())
        .map_err(|e| ws.map_err(e.into(), rel))
}

/// Refuse (`StaleRead`) unless `rel`'s state hash is still `expect`.
pub(super) fn recheck(
    ws: &Workspace,
    rel: &RelPath,
    expect: Option<&str>,
) -> Result<(), ToolError> {
    if state_at(ws, rel)?.0.as_deref() == expect {
        Ok(())
    } else {
        Err(ToolError::StaleRead {
            path: rel.to_string(),
        })
    }
}

/// Remove the file, symlink or (empty) directory `rel` if its state hash is still `expect`.
pub(super) fn remove_entry(
    ws: &Workspace,
    rel: &RelPath,
    expect: Option<&str>,
) -> Result<(), ToolError> {
    let Some(expect) = expect else {
        return Ok(());
    };
    recheck(ws, rel, Some(expect))?;
    ws.check_protected(rel, true)?;
    let dir = ws.open_dir(&rel.parent())?;
    let removed = if expect == DIR_HASH {
        dir.remove_dir(rel.file_name())
    } else {
        dir.remove_file(rel.file_name())
    };
    removed.map_err(|e| {
        if e.raw_os_error() == Some(libc::ENOTEMPTY) {
            ToolError::Conflict(format!(
                "{rel} is a directory that is not empty: it holds entries the change did not make; move them away and retry"
            ))
        } else {
            ws.map_err(e, rel)
        }
    })
}

/// Make `rel` a symlink to `link` (in place of a file or symlink there): made under a
/// temporary name and renamed over, so the path is never missing.
pub(super) fn make_symlink(ws: &Workspace, rel: &RelPath, link: &[u8]) -> Result<(), ToolError> {
    ws.check_protected(rel, true)?;
    let parent = rel.parent();
    if !parent.is_root() {
        ws.dir()
            .create_dir_all(parent.as_path())
            .map_err(|e| ws.map_err(e, &parent))?;
    }
    let dir = ws.open_dir(&parent)?;
    let tmp = format!(".{}.toolyard-{}.tmp", rel.file_name(), std::process::id());
    let io = |e: rustix::io::Errno| ws.map_err(e.into(), rel);
    let _ = rustix::fs::unlinkat(&dir, tmp.as_str(), rustix::fs::AtFlags::empty());
    rustix::fs::symlinkat(link, &dir, tmp.as_str()).map_err(io)?;
    rustix::fs::renameat(&dir, tmp.as_str(), &dir, rel.file_name()).map_err(|e| {
        let _ = rustix::fs::unlinkat(&dir, tmp.as_str(), rustix::fs::AtFlags::empty());
        io(e)
    })
}

/// Make `rel` a directory of `mode` (or, `exists`, set the mode of the one there).
pub(super) fn make_dir(
    ws: &Workspace,
    rel: &RelPath,
    mode: u32,
    exists: bool,
) -> Result<(), ToolError> {
    use cap_std::fs::PermissionsExt;
    ws.check_protected(rel, true)?;
    if !exists {
        ws.dir()
            .create_dir_all(rel.as_path())
            .map_err(|e| ws.map_err(e, rel))?;
    }
    ws.dir()
        .set_permissions(rel.as_path(), cap_std::fs::Permissions::from_mode(mode))
        .map_err(|e| ws.map_err(e, rel))
}

/// Put `rel` in the state `target` (a state hash, see [`EntryKind::of_hash`]; `None`: absent)
/// with `content` (a file's bytes or a symlink's target) and `mode`, only if its state is
/// still `expect`: the compare-and-swap of an undo done where the files are (a remote
/// runner). A changed path is refused with `StaleRead`.
pub fn restore_state(
    ws: &Workspace,
    rel: &RelPath,
    expect: Option<&str>,
    target: Option<&str>,
    content: &[u8],
    mode: Option<u32>,
) -> Result<(), ToolError> {
    recheck(ws, rel, expect)?;
    let now = EntryKind::of_hash(expect);
    match EntryKind::of_hash(target) {
        EntryKind::Absent => remove_entry(ws, rel, expect),
        EntryKind::File => {
            let cas = match now {
                EntryKind::Symlink | EntryKind::Dir => {
                    remove_entry(ws, rel, expect)?;
                    Expect::Missing
                }
                EntryKind::File => Expect::Hash(expect.unwrap_or_default().to_string()),
                EntryKind::Absent => Expect::Missing,
            };
            ws.write_atomic_from(rel, &mut &content[..], &cas, mode)
                .map(drop)
        }
        EntryKind::Symlink => {
            if now == EntryKind::Dir {
                remove_entry(ws, rel, expect)?;
            }
            make_symlink(ws, rel, content)
        }
        EntryKind::Dir => {
            if now != EntryKind::Dir && now != EntryKind::Absent {
                remove_entry(ws, rel, expect)?;
            }
            make_dir(ws, rel, mode.unwrap_or(0o755), now == EntryKind::Dir)
        }
    }
}
