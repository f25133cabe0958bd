//! `sh -c COMMAND` in a PID namespace of its own, prepared one way for a foreground command and
//! a background process alike, and how the status it ends with reads.

use std::ffi::{CString, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

use crate::error::ExecError;
use crate::tree::{self, Mechanism, NsSpawned, NsStdio};

/// How long a timed-out command has between SIGTERM and SIGKILL: enough for git or a package
/// manager to remove its lock files and for a test runner to print its summary, short next
/// to any time limit a model sets.
pub const TERM_GRACE: Duration = Duration::from_secs(2);

/// `sh -c COMMAND` with its whole environment and working directory, as C strings made before
/// any fork.
pub(crate) struct ShellCommand {
    /// `/bin/sh`, `-c`, the command.
    args: [CString; 3],
    /// `NAME=value` strings.
    env: Vec<CString>,
    cwd: CString,
    /// The working directory as a path, for errors.
    dir: PathBuf,
}

impl ShellCommand {
    /// `sh -c command` in `cwd` with exactly `env`; a NUL byte in any of them is an invalid
    /// argument that says which.
    pub(crate) fn new(
        command: &str,
        cwd: &Path,
        env: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Result<Self, ExecError> {
        let c = |s: &[u8], what: &'static str| CString::new(s).map_err(|_| ExecError::Nul(what));
        let args = [
            CString::from(c"/bin/sh"),
            CString::from(c"-c"),
            c(command.as_bytes(), "the command")?,
        ];
        let env = env
            .into_iter()
            .map(|(k, v)| {
                let mut kv = k.into_vec();
                kv.push(b'=');
                kv.extend_from_slice(v.as_bytes());
                c(&kv, "an environment variable")
            })
            .collect::<Result<Vec<_>, _>>()?;
        let cwd_path = cwd;
        let cwd = c(cwd.as_os_str().as_bytes(), "the working directory")?;
        Ok(Self {
            args,
            env,
            cwd,
            dir: cwd_path.to_path_buf(),
        })
    }

    /// Start it as PID 2 of a new PID namespace (inside a new user namespace with `user_ns`)
    /// with the given standard descriptors; with `die_with_parent` the tree dies with the
    /// thread that spawned it.
    pub(crate) fn spawn(
        &self,
        stdio: NsStdio,
        user_ns: bool,
        die_with_parent: bool,
    ) -> Result<NsSpawned, ExecError> {
        let cmd = tree::NsCommand {
            program: &self.args[0],
            args: &self.args,
            env: &self.env,
            cwd: &self.cwd,
            stdio: Some(stdio),
            die_with_parent,
        };
        tree::spawn_in_pid_namespace(&cmd, user_ns).map_err(|source| ExecError::Start {
            cwd: self.dir.clone(),
            source,
        })
    }
}

/// For a PID-namespace mechanism, whether it needs a user namespace too (`None`: another
/// mechanism).
pub(crate) fn user_ns(mechanism: &Mechanism) -> Option<bool> {
    match mechanism {
        Mechanism::PidNamespace => Some(false),
        Mechanism::UserPidNamespace => Some(true),
        _ => None,
    }
}

/// The exit code of `status` and the name of the signal that ended it (`SIGKILL`, or
/// `signal N` for a number without a name).
pub(crate) fn exit_of(status: ExitStatus) -> (Option<i32>, Option<String>) {
    let signal = status
        .signal()
        .map(|n| match nix::sys::signal::Signal::try_from(n) {
            Ok(s) => s.as_str().to_string(),
            Err(_) => format!("signal {n}"),
        });
    (status.code(), signal)
}
