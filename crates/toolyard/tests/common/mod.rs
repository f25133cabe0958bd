//! What the end-to-end tests share.

use std::path::PathBuf;

/// The binary under test: `TOOLYARD_TEST_BIN` when set (a copy another user may run, see
/// tests/confined/run.sh, or the build of an older commit), else the one cargo built.
pub fn toolyard_bin() -> PathBuf {
    std::env::var_os("TOOLYARD_TEST_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_toolyard")))
}
