//! # toolyard-workspace
//!
//! The workspace a model may touch, and nothing else: every path is resolved beneath the
//! workspace root and opened with `openat2(RESOLVE_BENEATH)` (through `cap-std`), so `..`,
//! absolute paths and symlinks cannot lead outside, not even when a symlink is swapped in while
//! a call runs. Writes are atomic and keep the file's mode. Around that: the [`StateDir`] where
//! Toolyard keeps its own files (the journal and read ledger in it are `toolyard-records`').

mod confine;
mod hash;
mod lock;
mod state;

pub use confine::{Expect, Protection, RelPath, Staged, Workspace, WriteOutcome};
pub use hash::{ContentHash, hash_bytes, hash_reader};
pub use lock::flock;
pub use state::StateDir;
