//! Recovery: the owner lock, and settling the changes a killed process left pending.

use super::*;

impl Journal {
    /// Take the journal's owner lock as [`Journal::recover`] does, without looking at any
    /// file: the changes left pending when no other process has the journal open (a dead
    /// process left them, for the caller to settle from where the files are, with
    /// [`Journal::settle_from_hash`]), none otherwise.
    pub fn adopt_pending(&self) -> Result<Vec<Change>, ToolError> {
        self.with_owner(|| {
            let mut pending = self.list(&ChangeFilter {
                status: Some(ChangeStatus::Pending),
                ..ChangeFilter::default()
            })?;
            pending.reverse();
            Ok(pending)
        })
    }

    /// Settle the pending change `id` from its file's hash `current` (`None`: absent), as
    /// recovery does: done if it is the new content, failed otherwise.
    pub fn settle_from_hash(
        &self,
        id: ChangeId,
        current: Option<&str>,
    ) -> Result<Change, ToolError> {
        let change = self.get(id)?;
        if change.status != ChangeStatus::Pending {
            return Ok(change);
        }
        let landed = current == change.new_hash.as_deref();
        if landed {
            self.mark_done(id)?;
        } else {
            self.mark_failed(id)?;
        }
        tracing::info!(change = %id, path = %change.path, landed, "settled a pending change");
        self.get(id)
    }

    /// Settle the changes left `pending` by a crash: done if the file now has the new content,
    /// failed otherwise (the write never landed, the file has its old content), and remove the
    /// temp files those writes left. Call it at startup, before writes begin.
    ///
    /// A pending change may as well be a write in flight in another process, so this runs only
    /// when no other process has recovered the journal and is still alive: it takes
    /// `owner.lock` in the state directory exclusively, settles, and then holds the lock shared
    /// for as long as this `Journal` lives. When another process holds it, this one settles
    /// nothing (returns no changes), takes its share, and deletes nobody's temp files.
    pub fn recover(&self, ws: &Workspace) -> Result<Vec<Change>, ToolError> {
        self.with_owner(|| self.settle(ws))
    }

    /// Run `work` if no other process holds the owner lock (else return nothing), then hold
    /// the lock shared for as long as this `Journal` lives.
    pub(super) fn with_owner(
        &self,
        work: impl FnOnce() -> Result<Vec<Change>, ToolError>,
    ) -> Result<Vec<Change>, ToolError> {
        let mut owner = db::lock(&self.owner);
        let file = match owner.take() {
            Some(f) => f,
            None => open_owner_lock(&self.owner_path)?,
        };
        let lock_err = |source: io::Error| RecordsError::Lock {
            path: self.owner_path.clone(),
            source,
        };
        let alone = flock(&file, libc::LOCK_EX | libc::LOCK_NB).map_err(lock_err)?;
        let settled = if alone {
            work()
        } else {
            tracing::info!(lock = %self.owner_path.display(), "another Toolyard process has the journal open; leaving its pending changes to it");
            Ok(Vec::new())
        };
        // Shared from now on: a later process must not settle this one's writes in flight.
        share_owner_lock(&file, &self.owner_path);
        *owner = Some(file);
        settled
    }

    pub(super) fn settle(&self, ws: &Workspace) -> Result<Vec<Change>, ToolError> {
        let mut pending = self.list(&ChangeFilter {
            status: Some(ChangeStatus::Pending),
            ..ChangeFilter::default()
        })?;
        pending.reverse();
        let mut settled = Vec::with_capacity(pending.len());
        for change in pending {
            let current = ws
                .relative(&change.path, ws.root())
                .and_then(|p| state_at(ws, &p))
                .map(|(hash, _)| hash);
            let landed = match current {
                Ok(h) => h == change.new_hash,
                Err(e) => {
                    tracing::warn!(change = %change.id, path = %change.path, error = %e, "cannot read the file of a pending change; marking it failed");
                    false
                }
            };
            if landed {
                self.mark_done(change.id)?;
            } else {
                self.mark_failed(change.id)?;
            }
            remove_stale_temps(ws, &change.path);
            tracing::info!(change = %change.id, path = %change.path, landed, "settled a pending change");
            settled.push(self.get(change.id)?);
        }
        Ok(settled)
    }
}

/// Open (creating it) the lock file owners of the journal share.
pub(super) fn open_owner_lock(path: &std::path::Path) -> Result<File, ToolError> {
    use std::os::unix::fs::OpenOptionsExt;
    // std opens with O_CLOEXEC: commands this process starts never inherit the lock.
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(|source| {
            RecordsError::Open {
                path: path.to_path_buf(),
                source,
            }
            .into()
        })
}

/// Hold `file` shared, waiting (bounded) while another process holds it to recover. Best
/// effort: without the share this process's writes in flight are merely unprotected.
pub(super) fn share_owner_lock(file: &File, path: &std::path::Path) {
    let started = Instant::now();
    loop {
        match flock(file, libc::LOCK_SH | libc::LOCK_NB) {
            Ok(true) => return,
            Ok(false) if started.elapsed() < OWNER_WAIT => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(false) => {
                tracing::warn!(lock = %path.display(), "another process has held the journal's owner lock for long; going on without it");
                return;
            }
            Err(e) => {
                tracing::warn!(lock = %path.display(), error = %e, "cannot share the journal's owner lock");
                return;
            }
        }
    }
}

/// Remove the temp files a write killed before its rename left next to `path` (named by
/// `Workspace::write_atomic_from` as `.NAME.toolyard-*.tmp`). Best effort: they are only litter.
pub fn remove_stale_temps(ws: &Workspace, path: &str) {
    let Ok(target) = ws
        .relative(path, ws.root())
        .and_then(|rel| ws.resolve(&rel, true))
    else {
        return;
    };
    let prefix = format!(".{}.toolyard-", target.file_name());
    let Ok(dir) = ws.open_dir(&target.parent()) else {
        return;
    };
    let Ok(entries) = dir.entries() else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        if name.starts_with(&prefix) && name.ends_with(".tmp") {
            match dir.remove_file(name) {
                Ok(()) => {
                    tracing::info!(path = %target.parent().join(name), "removed a crashed write's temp file")
                }
                Err(e) => tracing::debug!(name, error = %e, "cannot remove temp file"),
            }
        }
    }
}
