//! Saved full outputs: a cut command's whole output (and a background process's log) written
//! to a private file, capped, with the directory kept within its limits.

use std::fs::File;
use std::io::Write as _;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

/// Where one saved output (a cut command's, a background process's log) stops growing.
pub(crate) const MAX_SAVED_BYTES: u64 = 64 << 20;

/// How the saved full outputs are kept bounded. Checked each time a new one is written (so
/// cheaply: one directory listing): files older than `max_age` go, then the oldest until the
/// others number fewer than `max_files` and leave room for the new one at its cap within
/// `max_total_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpillLimits {
    /// A saved output older than this is deleted.
    pub max_age: Duration,
    /// Most files kept in the directory, the new one included.
    pub max_files: usize,
    /// Most bytes kept in the directory, the new one (at its cap) included.
    pub max_total_bytes: u64,
    /// One saved output stops growing here; a line at its end says the rest was not saved.
    pub max_file_bytes: u64,
}

impl Default for SpillLimits {
    /// 24 hours, 100 files, 256 MiB in all, 64 MiB per file.
    fn default() -> Self {
        Self {
            max_age: Duration::from_secs(24 * 3600),
            max_files: 100,
            max_total_bytes: 256 << 20,
            max_file_bytes: MAX_SAVED_BYTES,
        }
    }
}

/// The full output: kept in memory while it fits the limit, then streamed to a file.
pub(crate) enum Spill {
    Off,
    Pending {
        path: PathBuf,
        limits: SpillLimits,
        buffered: Vec<u8>,
    },
    Writing {
        path: PathBuf,
        file: File,
        /// Bytes still allowed in the file; at 0 the rest of the output is dropped.
        room: u64,
    },
    Failed,
}

impl Spill {
    pub(crate) fn push(&mut self, chunk: &[u8], overflow: bool) {
        match self {
            Spill::Off | Spill::Failed => {}
            Spill::Pending {
                path,
                limits,
                buffered,
            } => {
                if !overflow {
                    buffered.extend_from_slice(chunk);
                    return;
                }
                if let Some(dir) = path.parent() {
                    prune_spills(dir, limits, SystemTime::now());
                }
                let room = limits.max_file_bytes;
                let opened = create_spill(path).and_then(|file| {
                    let mut writing = Spill::Writing {
                        path: path.clone(),
                        file,
                        room,
                    };
                    writing.write(buffered)?;
                    writing.write(chunk)?;
                    Ok(writing)
                });
                *self = match opened {
                    Ok(writing) => writing,
                    Err(e) => {
                        tracing::warn!(path = %path.display(), error = %e, "cannot write the spill file");
                        let _ = std::fs::remove_file(&*path);
                        Spill::Failed
                    }
                };
            }
            Spill::Writing { path, .. } => {
                let path = path.clone();
                if let Err(e) = self.write(chunk) {
                    tracing::warn!(path = %path.display(), error = %e, "cannot write the spill file");
                    let _ = std::fs::remove_file(&path);
                    *self = Spill::Failed;
                }
            }
        }
    }

    /// Append to the file up to its cap; the write that reaches the cap ends it with a note.
    fn write(&mut self, chunk: &[u8]) -> std::io::Result<()> {
        let Spill::Writing { file, room, .. } = self else {
            return Ok(());
        };
        if *room == 0 || chunk.is_empty() {
            return Ok(());
        }
        let take = usize::try_from(*room).map_or(chunk.len(), |r| r.min(chunk.len()));
        file.write_all(&chunk[..take])?;
        *room -= take as u64;
        if *room == 0 {
            file.write_all(b"\n[toolyard: the output beyond this point was not saved]\n")?;
        }
        Ok(())
    }

    /// The file to go on writing the whole output to, for a command that keeps running past
    /// the call: the spill file, made now if the output still fitted in memory.
    pub(crate) fn into_log(self) -> Option<(PathBuf, File)> {
        match self {
            Spill::Pending {
                path,
                limits,
                buffered,
            } => {
                if let Some(dir) = path.parent() {
                    prune_spills(dir, &limits, SystemTime::now());
                }
                let made = create_spill(&path).and_then(|mut file| {
                    file.write_all(&buffered)?;
                    Ok(file)
                });
                match made {
                    Ok(file) => Some((path, file)),
                    Err(e) => {
                        tracing::warn!(path = %path.display(), error = %e, "cannot write the output file");
                        let _ = std::fs::remove_file(&path);
                        None
                    }
                }
            }
            Spill::Writing { path, file, .. } => Some((path, file)),
            Spill::Off | Spill::Failed => None,
        }
    }

    /// The spill file, when the output outgrew memory and was saved whole (or up to its cap).
    pub(crate) fn finish(self) -> Option<PathBuf> {
        match self {
            Spill::Writing { path, mut file, .. } => match file.flush() {
                Ok(()) => Some(path),
                Err(_) => None,
            },
            _ => None,
        }
    }
}

/// Create the spill file afresh and private. Commands may write in its directory, so whatever
/// sits at its name (a link planted there, say) is removed, never followed.
fn create_spill(path: &std::path::Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    // create_new (O_EXCL) fails on anything at the name, a link included.
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

/// Keep `dir` within `limits` before a new spill file is written there: delete files older
/// than `max_age`, then the oldest until the rest number under `max_files` and, with room for
/// the new file at its cap, fit `max_total_bytes`. Best effort: a file that cannot be deleted
/// (or a concurrent call's) is only left behind.
fn prune_spills(dir: &std::path::Path, limits: &SpillLimits, now: SystemTime) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut files: Vec<(SystemTime, u64, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            // Commands may write here too: never follow a link, never enter a directory.
            let meta = e.path().symlink_metadata().ok()?;
            if meta.is_dir() {
                return None;
            }
            let modified = meta.modified().unwrap_or(now);
            Some((modified, meta.len(), e.path()))
        })
        .collect();
    // Newest first.
    files.sort_by_key(|f| std::cmp::Reverse(f.0));
    let budget = limits.max_total_bytes.saturating_sub(limits.max_file_bytes);
    let mut kept_bytes = 0u64;
    let mut kept = 0usize;
    for (modified, len, path) in files {
        let too_old = now
            .duration_since(modified)
            .is_ok_and(|age| age > limits.max_age);
        let fits = kept + 1 < limits.max_files && kept_bytes.saturating_add(len) <= budget;
        if !too_old && fits {
            kept += 1;
            kept_bytes += len;
            continue;
        }
        match std::fs::remove_file(&path) {
            Ok(()) => tracing::debug!(path = %path.display(), too_old, "removed a saved output"),
            Err(e) => {
                tracing::debug!(path = %path.display(), error = %e, "cannot remove a saved output")
            }
        }
    }
}

/// `call_id` made safe as a file name.
pub(crate) fn file_safe(id: &str) -> String {
    let s: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.starts_with('.') {
        format!("call{s}")
    } else {
        s
    }
}
