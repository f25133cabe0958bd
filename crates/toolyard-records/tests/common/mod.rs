//! Shared setup for the integration tests: a workspace and its state directory side by side.
#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use toolyard_records::{ChangeId, Journal, NewChange};
use toolyard_workspace::{Expect, RelPath, StateDir, Workspace, hash_bytes};

/// A temporary workspace (`ws/`) and state directory (`state/`).
pub struct Fixture {
    _tmp: tempfile::TempDir,
    pub ws: Workspace,
    pub state: StateDir,
}

impl Fixture {
    pub fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("ws")).unwrap();
        let ws = Workspace::open(&tmp.path().join("ws")).unwrap();
        let state = StateDir::at(&tmp.path().join("state"), ws.root()).unwrap();
        Self {
            _tmp: tmp,
            ws,
            state,
        }
    }

    pub fn rel(&self, p: &str) -> RelPath {
        self.ws.relative(p, self.ws.root()).unwrap()
    }

    pub fn abs(&self, p: &str) -> PathBuf {
        self.ws.root().join(p)
    }

    /// Put a file in place behind Toolyard's back (as a user or a command would).
    pub fn put(&self, p: &str, bytes: &[u8], mode: u32) {
        let abs = self.abs(p);
        if let Some(dir) = abs.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(&abs, bytes).unwrap();
        std::fs::set_permissions(&abs, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    pub fn bytes(&self, p: &str) -> Option<Vec<u8>> {
        std::fs::read(self.abs(p)).ok()
    }

    pub fn mode(&self, p: &str) -> u32 {
        std::fs::metadata(self.abs(p)).unwrap().permissions().mode() & 0o7777
    }

    /// A journaled write of `bytes` over whatever `p` holds now, as a tool would make it.
    pub fn write(&self, j: &Journal, session: &str, p: &str, bytes: &[u8]) -> ChangeId {
        self.write_in(j, session, p, bytes, None)
    }

    /// [`Fixture::write`] joining the journal group of change `group`.
    pub fn write_in(
        &self,
        j: &Journal,
        session: &str,
        p: &str,
        bytes: &[u8],
        group: Option<ChangeId>,
    ) -> ChangeId {
        let rel = self.rel(p);
        let expect = match self.ws.hash_of(&rel).unwrap() {
            Some(h) => Expect::Hash(h),
            None => Expect::Missing,
        };
        let new_hash = hash_bytes(bytes);
        let change = NewChange {
            session,
            call_id: "call",
            tool: "write_file",
            path: &rel,
            new_hash: &new_hash,
            group,
        };
        j.apply(&self.ws, change, &mut &bytes[..], &expect, None)
            .unwrap()
            .0
    }
}
