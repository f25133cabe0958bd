//! Why a command could not be run: typed, with the `io::Error` kept as the source and the
//! working directory as context, and turned into the model-facing `ToolError` once, where a
//! tool hands it on (`?` in a function returning `ToolError`), with the texts the model has
//! always read.

use std::io;
use std::path::PathBuf;

use toolyard_core::ToolError;

/// A command could not be started, watched or handed over.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The command line is empty (or only blanks).
    #[error("command is empty")]
    EmptyCommand,
    /// The working directory does not exist or is not a directory.
    #[error("working directory {} not found", .0.display())]
    NoDirectory(PathBuf),
    /// The command, its working directory or an environment variable holds a NUL byte; names
    /// which.
    #[error("{0} contains a NUL byte")]
    Nul(&'static str),
    /// `sh -c` could not be started in `cwd`.
    #[error("cannot start `sh -c` in {}: {source}", .cwd.display())]
    Start {
        /// The working directory it was to start in.
        cwd: PathBuf,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
    /// The command's cgroup could not be made.
    #[error("preparing the command's cgroup: {0}")]
    Cgroup(#[source] io::Error),
    /// A step around a started command failed; `doing` says which.
    #[error("{doing}: {source}")]
    Io {
        /// What was being done, e.g. `watching the command`.
        doing: &'static str,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
    /// A state the code never reaches (a bug); says which.
    #[error("internal: {0}")]
    Internal(&'static str),
}

impl ExecError {
    /// The operating system's error behind it, if there is one.
    pub fn io_error(&self) -> Option<&io::Error> {
        match self {
            Self::Start { source, .. } | Self::Cgroup(source) | Self::Io { source, .. } => {
                Some(source)
            }
            _ => None,
        }
    }
}

impl From<ExecError> for ToolError {
    fn from(e: ExecError) -> Self {
        match e {
            ExecError::EmptyCommand => ToolError::InvalidArguments("command is empty".into()),
            ExecError::NoDirectory(path) => ToolError::FileNotFound(path),
            ExecError::Nul(what) => {
                ToolError::InvalidArguments(format!("{what} contains a NUL byte"))
            }
            // The model reads what failed, not where: the working directory is its own.
            ExecError::Start { source, .. } => {
                ToolError::Io(format!("cannot start `sh -c`: {source}"))
            }
            e @ (ExecError::Cgroup(_) | ExecError::Io { .. } | ExecError::Internal(_)) => {
                ToolError::Io(e.to_string())
            }
        }
    }
}
