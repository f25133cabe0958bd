//! `toolyard lane-exec --workspace W -- ARGV...`: run one program (a language server, a check
//! command) inside the `no-net` lane's sandbox with the `heavy` lane's resource limits, as a
//! runner would run a command: language servers run project code (build scripts, proc macros,
//! plugins), so they get no network, no secrets and no writes outside the workspace.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;

use toolyard_core::{Catalog, Lane, ToolError};
use toolyard_exec::sandbox::{self, LaneLimits, LanesConfig};
use toolyard_exec::{EnvPolicy, ExecConfig};
use toolyard_workspace::StateDir;

use crate::process::{RunnerTempDir, lane_policy};

/// What `toolyard lane-exec` is started with.
#[derive(Debug, Clone)]
pub struct LaneExecArgs {
    /// The workspace root (the program's working directory, and all it may write).
    pub workspace: PathBuf,
    /// The catalog file, if not the built-in one.
    pub catalog: Option<PathBuf>,
    /// The state directory, when not the workspace's default one.
    pub state_dir: Option<PathBuf>,
    /// The program and its arguments.
    pub argv: Vec<OsString>,
}

/// Sandbox this process as a `no-net` runner (with the `heavy` lane's limits), then run `argv`
/// with the lane's scrubbed environment and return its exit code. Call it from `main` before
/// any other thread exists. The program is a child, not an `exec`: the private temp dir is
/// removed when this process ends.
pub fn lane_exec(args: LaneExecArgs) -> Result<i32, ToolError> {
    sandbox::make_non_dumpable();
    let bad = |e: toolyard_core::CatalogError| ToolError::InvalidArguments(e.to_string());
    let Some((program, rest)) = args.argv.split_first() else {
        return Err(ToolError::InvalidArguments(
            "lane-exec: no program given after `--`".into(),
        ));
    };
    let catalog = match &args.catalog {
        Some(p) => Catalog::load(p).map_err(bad)?,
        None => Catalog::builtin(),
    };
    let root = args
        .workspace
        .canonicalize()
        .map_err(|e| ToolError::Io(format!("{}: {e}", args.workspace.display())))?;
    let state = match &args.state_dir {
        Some(dir) => StateDir::at(dir, &root)?,
        None => StateDir::for_workspace(&root)?,
    };
    let temp = RunnerTempDir::claim(&state.tmp_dir(), Lane::NoNet)?;
    let mut policy = lane_policy(
        Lane::NoNet,
        &root,
        &state,
        &catalog,
        args.catalog.as_deref(),
        temp.path(),
    )?;
    let lanes: LanesConfig = catalog.section("lanes").map_err(bad)?;
    policy.limits = lanes.limits(Lane::Heavy);
    let exec: ExecConfig = catalog.section("exec").map_err(bad)?;
    let report = sandbox::apply(&policy).map_err(|e| {
        ToolError::Unavailable(format!(
            "the no-net lane's sandbox could not be applied: {e}"
        ))
    })?;
    tracing::debug!(%report, "lane-exec sandboxed");
    set_rlimits(&policy.limits);
    // After `apply`: it points TMPDIR and the tool caches at the lane's private ones.
    let env = EnvPolicy::from_config(&exec).build(std::env::vars_os());
    let status = std::process::Command::new(program)
        .args(rest)
        .env_clear()
        .envs(env)
        .current_dir(&root)
        .status()
        .map_err(|e| {
            ToolError::NotFound(format!(
                "lane-exec: cannot start {}: {e}",
                program.to_string_lossy()
            ))
        })?;
    drop(temp);
    Ok(status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

/// The heavy lane's rlimits on this process (the sandbox applies them only to a `heavy` runner;
/// they are inherited by the program).
fn set_rlimits(limits: &LaneLimits) {
    let set = |resource, value: Option<u64>| {
        if let Some(v) = value {
            let lim = libc::rlimit {
                rlim_cur: v,
                rlim_max: v,
            };
            // SAFETY: setrlimit with a valid struct.
            if unsafe { libc::setrlimit(resource, &lim) } != 0 {
                tracing::warn!(error = %std::io::Error::last_os_error(), "lane-exec: an rlimit could not be set");
            }
        }
    };
    set(
        libc::RLIMIT_DATA,
        limits.memory_mb.map(|mb| mb.saturating_mul(1024 * 1024)),
    );
    set(libc::RLIMIT_NPROC, limits.max_processes);
    set(libc::RLIMIT_CPU, limits.cpu_seconds);
}
