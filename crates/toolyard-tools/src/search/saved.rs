//! Saved command outputs: the full output of a command whose answer was cut is kept in
//! `$STATE/outputs/<call_id>.log` (a background process's in `<call_id>-process.log`), and the
//! cut answer says "full output in PATH". `read_file` and `grep` accept that exact path, or
//! `output:<id>`, and read it there, still confined: only a plain file name directly inside
//! this workspace's own outputs directory, opened without following a symlink (neither the
//! directory nor the file), and only a regular file.

use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};
use toolyard_core::ToolError;

use crate::ToolEnv;

/// The prefix of the short form of a saved output's name: `output:<call id>`.
pub const PREFIX: &str = "output:";

/// A saved command output a call named, open for reading.
#[derive(Debug)]
pub struct SavedOutput {
    /// The path as the call gave it (shown in answers).
    pub shown: String,
    /// Its full path.
    pub path: PathBuf,
    /// The open file.
    pub file: File,
}

/// If `arg` names one of this workspace's saved command outputs (its path as a note gave it,
/// or `output:<id>`), that output, opened; `Ok(None)` when `arg` names something else (a
/// workspace path, for the caller to resolve as usual). A name in the outputs directory that
/// is not a saved output's, or one that does not exist, is an error saying so.
pub fn open(env: &ToolEnv, arg: &str) -> Result<Option<SavedOutput>, ToolError> {
    let dir = env.state.outputs_dir();
    let name = if let Some(id) = arg.strip_prefix(PREFIX) {
        if id.ends_with(".log") {
            id.to_string()
        } else {
            format!("{id}.log")
        }
    } else {
        let p = Path::new(arg);
        if !p.is_absolute() || p.parent() != Some(dir.as_path()) {
            return Ok(None);
        }
        match p.file_name().and_then(OsStr::to_str) {
            Some(n) => n.to_string(),
            None => return Ok(None),
        }
    };
    if !is_output_name(&name) {
        return Err(ToolError::InvalidArguments(format!(
            "{arg} does not name a saved command output: those are `output:<id>` or the path a \
             cut command output gave (`{}/<id>.log`)",
            dir.display()
        )));
    }
    let path = dir.join(&name);
    let file = open_beneath(&dir, &name).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => ToolError::NotFound(format!(
            "no saved output {arg}: it was never written (the command's output was not cut) \
             or has been pruned since; run the command again"
        )),
        _ => ToolError::Io(format!("cannot open the saved output {arg}: {e}")),
    })?;
    Ok(Some(SavedOutput {
        shown: arg.to_string(),
        path,
        file,
    }))
}

/// The bytes of the saved output `arg` names (see [`open`]), for a dialect's read that shows
/// a whole file its own way; `Ok(None)` when `arg` names none.
pub fn read_all(env: &ToolEnv, arg: &str) -> Result<Option<Vec<u8>>, ToolError> {
    use std::io::Read;
    let Some(mut saved) = open(env, arg)? else {
        return Ok(None);
    };
    let mut bytes = Vec::new();
    // The exec layer caps a saved output at 64 MiB (and a line saying so); this bounds a file
    // that grew past that some other way.
    (&mut saved.file)
        .take(MAX_READ_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| ToolError::Io(format!("reading the saved output {arg}: {e}")))?;
    Ok(Some(bytes))
}

/// The most of one saved output a whole-file read takes.
const MAX_READ_BYTES: u64 = 64 << 20;

/// A saved output's file name: the sanitized call id the exec layer writes, `.log`.
fn is_output_name(name: &str) -> bool {
    let Some(stem) = name.strip_suffix(".log") else {
        return false;
    };
    !stem.is_empty()
        && !stem.starts_with('.')
        && stem
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// `name` in `dir`, neither followed through a symlink, and only a regular file (opened
/// non-blocking, so a FIFO cannot hang the read; then made blocking again).
fn open_beneath(dir: &Path, name: &str) -> std::io::Result<File> {
    let dir_fd = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let fd = rustix::fs::openat(
        &dir_fd,
        OsStr::from_bytes(name.as_bytes()),
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )?;
    let st = rustix::fs::fstat(&fd)?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(std::io::Error::other("not a regular file"));
    }
    let flags = rustix::fs::fcntl_getfl(&fd)?;
    rustix::fs::fcntl_setfl(&fd, flags - OFlags::NONBLOCK)?;
    Ok(File::from(fd))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_log_names_are_outputs() {
        for ok in ["28460-0.log", "call_1.log", "a.b.log", "x-process.log"] {
            assert!(is_output_name(ok), "{ok}");
        }
        for bad in [
            ".log",
            "..log",
            ".hidden.log",
            "state.db",
            "a/b.log",
            "../x.log",
            "x.log/",
            "x y.log",
        ] {
            assert!(!is_output_name(bad), "{bad}");
        }
    }
}
