//! The content-addressed store of a runner's captures.

use super::*;

/// The content-addressed store: `<dir>/<hash>`, written by temp file and rename.
pub(super) struct Store {
    pub(super) dir: PathBuf,
    pub(super) fd: Option<OwnedFd>,
    pub(super) bytes: u64,
    /// The hashes it holds, with their sizes.
    pub(super) held: HashMap<String, u64>,
}

impl Store {
    pub(super) fn open(dir: PathBuf) -> Self {
        let _ = std::fs::create_dir_all(&dir);
        let fd = rustix::fs::open(
            &dir,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| tracing::warn!(dir = %dir.display(), error = %e, "no store for command undo"))
        .ok();
        // Whatever an earlier process of the same id left is not known: start empty.
        if let Some(fd) = &fd
            && let Ok(entries) = std::fs::read_dir(&dir)
        {
            for e in entries.flatten() {
                let _ = rustix::fs::unlinkat(fd, e.file_name().as_os_str(), AtFlags::empty());
            }
        }
        Self {
            dir,
            fd,
            bytes: 0,
            held: HashMap::new(),
        }
    }

    pub(super) fn has(&self, hash: &str) -> bool {
        self.held.contains_key(hash)
    }

    /// Keep `bytes` (whose hash is `hash`); false when the store is full or unwritable.
    pub(super) fn put(&mut self, hash: &str, bytes: &[u8], max: u64) -> bool {
        if self.has(hash) {
            return true;
        }
        let Some(fd) = &self.fd else { return false };
        if self.bytes + bytes.len() as u64 > max {
            return false;
        }
        let tmp = format!("{hash}.tmp");
        let written = (|| -> std::io::Result<()> {
            let file = rustix::fs::openat(
                fd,
                tmp.as_str(),
                OFlags::WRONLY
                    | OFlags::CREATE
                    | OFlags::TRUNC
                    | OFlags::NOFOLLOW
                    | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            )?;
            let mut file = std::fs::File::from(file);
            file.write_all(bytes)?;
            rustix::fs::renameat(fd, tmp.as_str(), fd, hash)?;
            Ok(())
        })();
        match written {
            Ok(()) => {
                self.bytes += bytes.len() as u64;
                self.held.insert(hash.to_string(), bytes.len() as u64);
                true
            }
            Err(e) => {
                tracing::debug!(dir = %self.dir.display(), error = %e, "cannot store a file's content");
                let _ = rustix::fs::unlinkat(fd, tmp.as_str(), AtFlags::empty());
                false
            }
        }
    }

    pub(super) fn get(&self, hash: &str) -> Option<Vec<u8>> {
        let fd = self.fd.as_ref()?;
        let file = rustix::fs::openat(
            fd,
            hash,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        let mut out = Vec::new();
        std::fs::File::from(file).read_to_end(&mut out).ok()?;
        (toolyard_workspace::hash_bytes(&out) == hash).then_some(out)
    }

    /// Drop every content no snapshot in `keep` names.
    pub(super) fn prune(&mut self, keep: &[&Snapshot]) {
        let Some(fd) = &self.fd else { return };
        let wanted: HashSet<&str> = keep
            .iter()
            .flat_map(|s| s.entries.values())
            .filter(|e| e.stored)
            .filter_map(|e| e.hash.as_deref())
            .collect();
        let gone: Vec<String> = self
            .held
            .keys()
            .filter(|h| !wanted.contains(h.as_str()))
            .cloned()
            .collect();
        for h in gone {
            let _ = rustix::fs::unlinkat(fd, h.as_str(), AtFlags::empty());
            if let Some(n) = self.held.remove(&h) {
                self.bytes -= n;
            }
        }
    }
}
