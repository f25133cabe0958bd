//! Lane sandboxes, applied once to a runner process in `main`, before any thread starts, and
//! inherited by every command it runs.
//!
//! | lane | what is enforced |
//! |---|---|
//! | all | Landlock: writes only in the workspace, the private temp dir and `extra_write`; reads everywhere except the denied secret paths; Landlock scopes (no signals or abstract-socket connections outside the sandbox); `no_new_privs` |
//! | `no-net` | a new network namespace (with a user namespace when not root with CAP_SYS_ADMIN): only a private loopback; a seccomp filter allowing only AF_UNIX sockets where no namespace can be made; fails closed unless `allow_unsandboxed_no_net` |
//! | `net` | every connection through Toolyard's egress gate when the server gave one (`egress`): a network namespace with only a loopback, where a forwarder reaches the gate; else Landlock TCP-connect and seccomp rules |
//! | `heavy` | like `net`, plus rlimits (data size, processes, CPU seconds) and cgroup v2 memory / pids limits where a delegated cgroup has those controllers; `slots` for the runner |
//!
//! ```no_run
//! use toolyard_core::Lane;
//! use toolyard_exec::sandbox::{self, LanePolicy};
//!
//! // In the runner's main, before building the tokio runtime:
//! let policy = LanePolicy::new(Lane::NoNet, "/work/project".into(), "/tmp/toolyard-no-net".into());
//! let report = sandbox::apply(&policy).expect("sandbox");
//! eprintln!("{report}");
//! ```

pub mod egress;
pub mod explain;
mod fs;
mod hold;
mod homes;
mod limits;
mod net;
mod report;

use std::path::{Path, PathBuf};

use serde::Deserialize;
use toolyard_core::Lane;

use crate::domain;
use crate::tree::IdMaps;
pub use report::{FeatureReport, FeatureStatus, SandboxReport};

/// Set to `1` to skip the network namespaces (of `no-net`, and of the net lanes' egress gate),
/// e.g. to test the seccomp and Landlock fallbacks.
pub const SKIP_NETNS_ENV: &str = "TOOLYARD_SANDBOX_SKIP_NETNS";

/// Secret locations whose reads are denied by default (`~` is the home directory).
pub const DEFAULT_DENY_READ: &[&str] = &[
    "~/.ssh",
    "~/.aws",
    "~/.gnupg",
    "~/.config/gh",
    "~/.netrc",
    "~/.docker",
    "~/.kube",
    "~/.config/gcloud",
    "~/.azure",
    "~/.npmrc",
    "~/.pypirc",
    "~/.git-credentials",
    "~/.cargo/credentials.toml",
    "~/.cargo/credentials",
];

/// The `[sandbox]` catalog section.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxConfig {
    /// Paths whose reads are denied; replaces [`DEFAULT_DENY_READ`] when set.
    #[serde(default)]
    pub deny_read: Option<Vec<String>>,
    /// More trees that commands may write (e.g. `~/.cargo`).
    #[serde(default)]
    pub extra_write: Vec<String>,
    /// Let `no-net` run without network isolation when the kernel cannot provide it.
    #[serde(default)]
    pub allow_unsandboxed_no_net: bool,
    /// Workspace-relative paths commands and file tools may not create, change or delete;
    /// replaces `protect::DEFAULT_PROTECTED` when set.
    #[serde(default)]
    pub protected_paths: Option<Vec<String>>,
    /// Point build tools and package managers (cargo, pip, npm, go, gradle, maven, ccache,
    /// XDG caches) at private writable homes of this workspace (default `true`); `false`
    /// leaves them at the user's own, which commands can then only read.
    #[serde(default)]
    pub private_caches: Option<bool>,
}

/// Resource limits of a lane (`[lanes.heavy]` in the catalog); unset fields take the lane's
/// defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaneLimits {
    /// Data size limit per process (RLIMIT_DATA) and cgroup memory.max, in MiB.
    #[serde(default)]
    pub memory_mb: Option<u64>,
    /// Process limit (RLIMIT_NPROC, and cgroup pids.max).
    #[serde(default)]
    pub max_processes: Option<u64>,
    /// CPU time limit per process (RLIMIT_CPU), in seconds.
    #[serde(default)]
    pub cpu_seconds: Option<u64>,
    /// How many calls the lane's runner runs at once.
    #[serde(default)]
    pub slots: Option<usize>,
}

impl LaneLimits {
    /// The defaults of `lane`: the heavy lane is limited, the others are not.
    pub fn defaults(lane: Lane) -> Self {
        match lane {
            Lane::Heavy => Self {
                memory_mb: Some(8192),
                max_processes: Some(4096),
                cpu_seconds: Some(3600),
                slots: Some(2),
            },
            Lane::NoNet | Lane::Net => Self {
                slots: Some(8),
                ..Self::default()
            },
        }
    }

    /// These limits with unset fields taken from `defaults`.
    pub fn or(self, defaults: Self) -> Self {
        Self {
            memory_mb: self.memory_mb.or(defaults.memory_mb),
            max_processes: self.max_processes.or(defaults.max_processes),
            cpu_seconds: self.cpu_seconds.or(defaults.cpu_seconds),
            slots: self.slots.or(defaults.slots),
        }
    }

    /// How many calls run at once (at least 1).
    pub fn slots(&self) -> usize {
        self.slots.unwrap_or(1).max(1)
    }
}

/// The `[lanes]` catalog section: limits per lane.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LanesConfig {
    /// `[lanes.no-net]`.
    #[serde(default, rename = "no-net")]
    pub no_net: Option<LaneLimits>,
    /// `[lanes.net]`.
    #[serde(default)]
    pub net: Option<LaneLimits>,
    /// `[lanes.heavy]`.
    #[serde(default)]
    pub heavy: Option<LaneLimits>,
}

impl LanesConfig {
    /// The limits of `lane`, defaults filled in.
    pub fn limits(&self, lane: Lane) -> LaneLimits {
        let set = match lane {
            Lane::NoNet => self.no_net,
            Lane::Net => self.net,
            Lane::Heavy => self.heavy,
        };
        set.unwrap_or_default().or(LaneLimits::defaults(lane))
    }
}

/// Everything [`apply`] needs to sandbox a runner of one lane.
#[derive(Debug, Clone)]
pub struct LanePolicy {
    /// The lane.
    pub lane: Lane,
    /// The workspace root (writable).
    pub workspace: PathBuf,
    /// The runner's private temp dir (writable; created when missing; becomes `TMPDIR`).
    pub temp_dir: PathBuf,
    /// Where the private homes of build tools live (writable, shared by the workspace's lanes;
    /// `None`: tools keep the user's own homes, read-only).
    pub cache_dir: Option<PathBuf>,
    /// Toolyard's state (the tree of every workspace's state): commands may neither read nor
    /// write it, also when the workspace holds it (but the temp dir and the caches within it).
    pub state_dir: Option<PathBuf>,
    /// Trees the runner itself writes and its commands may not (saved outputs, quarantine).
    pub runner_write: Vec<PathBuf>,
    /// Trees in the state directory its commands may still read (the saved outputs, which a
    /// model whose only tool is a shell reads with `sed`).
    pub command_read: Vec<PathBuf>,
    /// Existing protected paths, held read-only for the runner and its commands.
    pub read_only: Vec<PathBuf>,
    /// Paths beneath a read-only one that stay writable (Toolyard's artifacts).
    pub keep_writable: Vec<PathBuf>,
    /// The `[sandbox]` section.
    pub config: SandboxConfig,
    /// The lane's limits (used by `heavy`).
    pub limits: LaneLimits,
}

impl LanePolicy {
    /// A policy with the default configuration and the lane's default limits.
    pub fn new(lane: Lane, workspace: PathBuf, temp_dir: PathBuf) -> Self {
        Self {
            lane,
            workspace,
            temp_dir,
            cache_dir: None,
            state_dir: None,
            runner_write: Vec::new(),
            command_read: Vec::new(),
            read_only: Vec::new(),
            keep_writable: Vec::new(),
            config: SandboxConfig::default(),
            limits: LaneLimits::defaults(lane),
        }
    }
}

/// The sandbox could not be applied as the policy demands.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// `apply` must run before any other thread exists.
    #[error(
        "the sandbox must be applied before any thread starts, but this process has {threads} threads; call sandbox::apply at the top of main, before building the async runtime"
    )]
    Threaded {
        /// How many threads there were.
        threads: usize,
    },
    /// `no-net` was asked for but the kernel offers no way to enforce it.
    #[error(
        "lane no-net cannot be isolated from the network here ({reason}); set `allow_unsandboxed_no_net = true` in [sandbox] to run it anyway"
    )]
    NoNetUnavailable {
        /// What failed.
        reason: String,
    },
    /// A path of the policy cannot be used.
    #[error("sandbox path {path}: {reason}")]
    Path {
        /// The path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// Landlock refused the ruleset.
    #[error("landlock: {0}")]
    Landlock(String),
    /// The seccomp filter could not be built or loaded.
    #[error("seccomp: {0}")]
    Seccomp(String),
}

/// Make this process non-dumpable: its `/proc/<pid>` files (environment, memory, maps,
/// descriptors) then belong to root and need CAP_SYS_PTRACE, which sandboxed commands lack.
pub fn make_non_dumpable() {
    // SAFETY: prctl with constant arguments.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        tracing::warn!(error = %std::io::Error::last_os_error(), "cannot make this process non-dumpable");
    }
}

/// The protected paths this process holds read-only (none outside a sandboxed runner).
pub fn held_read_only() -> &'static [PathBuf] {
    explain::rules().map_or(&[], |r| r.protected.as_slice())
}

/// Apply `policy` to this process and everything it starts later. Call it once, in `main`,
/// before any thread starts.
pub fn apply(policy: &LanePolicy) -> Result<SandboxReport, SandboxError> {
    let threads = thread_count();
    if threads > 1 {
        return Err(SandboxError::Threaded { threads });
    }
    let mut report = SandboxReport {
        lane: Some(policy.lane),
        features: Vec::new(),
    };
    let home = home_dir();
    let workspace = existing_dir(&policy.workspace)?;
    std::fs::create_dir_all(&policy.temp_dir).map_err(|e| SandboxError::Path {
        path: policy.temp_dir.clone(),
        reason: e.to_string(),
    })?;
    let temp_dir = existing_dir(&policy.temp_dir)?;

    // Namespaces first: unshare(CLONE_NEWUSER) needs the process as it starts.
    let netns = namespaces(policy.lane, &mut report);

    // In the namespaces above (a user namespace gives the right to mount), before Landlock.
    let held = hold_protected(policy, &mut report);

    if policy.lane == Lane::Heavy {
        limits::apply_rlimits(&policy.limits, &mut report);
        limits::apply_cgroup(&policy.limits, &mut report);
    }

    // Decide how commands' trees are killed while the cgroup tree is still writable.
    let runner_only = runner_only_paths(policy, &mut report)?;
    // What commands may write; the runner also writes its cgroup tree and `runner_write`.
    let mut writable = vec![workspace, temp_dir.clone()];
    for extra in &policy.config.extra_write {
        let path = expand_home(extra, home.as_deref());
        match path.canonicalize() {
            Ok(p) => writable.push(p),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "extra_write path skipped")
            }
        }
    }
    let denied = denied_paths(&policy.config, home.as_deref());

    environment(
        policy,
        &temp_dir,
        home.as_deref(),
        &mut writable,
        &mut report,
    );

    let state_tree = landlock(policy, &writable, &runner_only, &denied, &mut report)?;

    let offline = no_net_filter(policy, netns, &mut report)?;
    // After Landlock: the forwarder thread this starts runs in the runner's domain.
    egress::isolate(policy.lane, &mut report);
    explain::record(explain::LaneRules {
        lane: policy.lane,
        writable,
        denied,
        protected: held,
        offline,
        state: state_tree,
    });
    tracing::info!(lane = %policy.lane, "sandbox applied\n{report}");
    Ok(report)
}

/// The namespaces: for `no-net` a network namespace of its own (inside a new user namespace
/// when unprivileged), else a user namespace for per-command PID namespaces. Whether the
/// network namespace was made.
fn namespaces(lane: Lane, report: &mut SandboxReport) -> bool {
    let privileged = net::is_privileged();
    let mut netns = false;
    if lane == Lane::NoNet {
        let maps = (!privileged).then(IdMaps::current);
        let attempt = if std::env::var(SKIP_NETNS_ENV).is_ok_and(|v| v == "1") {
            Err(std::io::Error::other(format!(
                "skipped ({SKIP_NETNS_ENV}=1)"
            )))
        } else {
            net::unshare(libc::CLONE_NEWNET, maps.as_ref())
        };
        match attempt {
            Ok(()) => {
                netns = true;
                let lo = match net::loopback_up() {
                    Ok(()) => "a private loopback only".to_string(),
                    Err(e) => format!("not even a loopback ({e})"),
                };
                let user = if privileged {
                    ""
                } else {
                    " inside a new user namespace"
                };
                report.add(
                    "net-namespace",
                    FeatureStatus::Enforced,
                    format!("new network namespace{user}: {lo}; the host's network and loopback are unreachable"),
                );
            }
            Err(e) => report.add(
                "net-namespace",
                FeatureStatus::NotEnforced,
                format!("cannot create a network namespace: {e}"),
            ),
        }
    } else {
        if !privileged {
            // Our own user namespace lets each command get a PID namespace later on.
            match net::unshare(0, Some(&IdMaps::current())) {
                Ok(()) => report.add(
                    "user-namespace",
                    FeatureStatus::Enforced,
                    "own user namespace (for per-command PID namespaces)",
                ),
                Err(e) => report.add(
                    "user-namespace",
                    FeatureStatus::NotEnforced,
                    format!("cannot create a user namespace: {e}"),
                ),
            }
        }
        report.add(
            "net-namespace",
            FeatureStatus::NotRequested,
            "network allowed",
        );
    }
    netns
}

/// Hold the protected paths read-only in the runner's own mount namespace; the paths held.
fn hold_protected(policy: &LanePolicy, report: &mut SandboxReport) -> Vec<PathBuf> {
    let mut held = Vec::new();
    if !policy.read_only.is_empty() {
        match hold::hold_read_only(&policy.read_only, &policy.keep_writable) {
            Ok(paths) => {
                let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
                report.add(
                    "protected-read-only",
                    FeatureStatus::Enforced,
                    format!(
                        "held read-only in the runner's own mount namespace: {}",
                        names.join(", ")
                    ),
                );
                held = paths;
            }
            Err(e) => report.add(
                "protected-read-only",
                FeatureStatus::NotEnforced,
                format!(
                    "no mount namespace here ({e}): changes to protected paths are undone after \
                     each command instead"
                ),
            ),
        }
    }
    held
}

/// The tree-kill mechanism, decided while the cgroup tree is still writable, and what only
/// the runner writes: its cgroup tree and `runner_write`.
fn runner_only_paths(
    policy: &LanePolicy,
    report: &mut SandboxReport,
) -> Result<Vec<PathBuf>, SandboxError> {
    let mechanism = crate::tree::mechanism();
    let mut runner_only = Vec::new();
    if let crate::tree::Mechanism::Cgroup(dir) = mechanism {
        runner_only.push(dir.clone());
    }
    for path in &policy.runner_write {
        std::fs::create_dir_all(path).map_err(|e| SandboxError::Path {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        runner_only.push(existing_dir(path)?);
    }
    report.add(
        "tree-kill",
        match mechanism {
            crate::tree::Mechanism::ProcessGroup => FeatureStatus::Partial,
            _ => FeatureStatus::Enforced,
        },
        format!(
            "{} (a timed-out or cancelled command's whole tree is killed)",
            mechanism_note(mechanism)
        ),
    );
    Ok(runner_only)
}

/// The commands' environment: their temp dir, and private homes for build tools' caches
/// (made writable). Called only from `apply`, single-threaded.
fn environment(
    policy: &LanePolicy,
    temp_dir: &Path,
    home: Option<&Path>,
    writable: &mut Vec<PathBuf>,
    report: &mut SandboxReport,
) {
    // SAFETY: `apply` checked that this process is single-threaded, so nothing reads the
    // environment concurrently.
    unsafe {
        for var in ["TMPDIR", "TMP", "TEMP"] {
            std::env::set_var(var, temp_dir);
        }
    }
    match policy.cache_dir.as_ref() {
        Some(caches) if policy.config.private_caches != Some(false) => {
            let vars = homes::prepare(caches, home);
            // SAFETY: single-threaded, as above.
            unsafe {
                for (var, path) in &vars {
                    std::env::set_var(var, path);
                }
                std::env::set_var(
                    "MAVEN_OPTS",
                    homes::maven_opts(caches, std::env::var_os("MAVEN_OPTS")),
                );
            }
            match caches.canonicalize() {
                Ok(c) => writable.push(c),
                Err(e) => {
                    tracing::warn!(path = %caches.display(), error = %e, "caches dir skipped")
                }
            }
            let names: Vec<&str> = vars.iter().map(|(v, _)| *v).collect();
            report.add(
                "tool-caches",
                FeatureStatus::Enforced,
                format!(
                    "private writable homes under {} ({}, MAVEN_OPTS); the user's own are read-only",
                    caches.display(),
                    names.join(", ")
                ),
            );
        }
        _ => report.add(
            "tool-caches",
            FeatureStatus::NotRequested,
            "build tools keep the user's homes, read-only ([sandbox] private_caches = false)",
        ),
    }
}

/// Landlock for the runner and the nested domain for its commands, then no_new_privs; the
/// state directory commands cannot reach, if any.
fn landlock(
    policy: &LanePolicy,
    writable: &[PathBuf],
    runner_only: &[PathBuf],
    denied: &[PathBuf],
    report: &mut SandboxReport,
) -> Result<Option<PathBuf>, SandboxError> {
    let mut command_denied = denied.to_vec();
    let state_tree = policy.state_dir.as_deref().map(existing_dir).transpose()?;
    command_denied.extend(state_tree.clone());
    let command_readable: Vec<PathBuf> = policy
        .command_read
        .iter()
        .filter_map(|p| p.canonicalize().ok())
        .collect();
    let command_layer = fs::command_layer(writable, &command_denied, &command_readable);
    let runner_writable: Vec<PathBuf> = writable.iter().chain(runner_only).cloned().collect();
    let fs = fs::restrict(&runner_writable, denied)?;
    report.add("landlock-fs", fs.status, fs.detail);
    match command_layer {
        Some(layer) if fs.status != FeatureStatus::NotEnforced => {
            domain::set_command_layer(layer);
            report.add(
                "command-domain",
                FeatureStatus::Enforced,
                "each command in a nested Landlock domain: no ptrace, /proc descriptors, \
                 environment or memory of its runner or the server",
            );
            if let Some(state) = &policy.state_dir {
                report.add(
                    "state-hidden",
                    FeatureStatus::Enforced,
                    format!(
                        "commands can neither read nor write Toolyard's state in {} (but their \
                         temp dir and tool caches there, and the saved outputs, read-only)",
                        state.display()
                    ),
                );
            }
            report.add(
                "no-capabilities",
                FeatureStatus::Enforced,
                "commands run with no capabilities, even as root (no device nodes, no network \
                 or mount changes), and no device node can be made in a writable tree",
            );
        }
        _ => report.add(
            "command-domain",
            FeatureStatus::NotEnforced,
            "no Landlock: a command could reach its runner through /proc",
        ),
    }
    report.add(
        "landlock-scope",
        fs.scope_status,
        "no signals to, and no abstract unix sockets of, processes outside the sandbox",
    );
    // Landlock's restrict_self sets no_new_privs; make sure of it even without Landlock.
    // SAFETY: prctl with constant arguments.
    let nnp = fs.no_new_privs || unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } == 0;
    report.add(
        "no_new_privs",
        if nnp {
            FeatureStatus::Enforced
        } else {
            FeatureStatus::NotEnforced
        },
        "setuid binaries and file capabilities grant nothing",
    );
    Ok(state_tree)
}

/// For `no-net` without a network namespace, the seccomp socket filter (or a refusal to
/// start, unless unsandboxed no-net is allowed). Whether the lane is offline.
fn no_net_filter(
    policy: &LanePolicy,
    netns: bool,
    report: &mut SandboxReport,
) -> Result<bool, SandboxError> {
    let mut offline = netns;
    if policy.lane == Lane::NoNet {
        if netns {
            report.add(
                "seccomp-net",
                FeatureStatus::NotRequested,
                "the network namespace isolates already",
            );
        } else {
            let applied = net::socket_filter().and_then(|prog| {
                seccompiler::apply_filter_all_threads(&prog).map_err(|e| e.to_string())
            });
            match applied {
                Ok(()) => {
                    offline = true;
                    report.add(
                        "seccomp-net",
                        FeatureStatus::Enforced,
                        "socket() allows only AF_UNIX; io_uring refused",
                    )
                }
                Err(e) if policy.config.allow_unsandboxed_no_net => {
                    tracing::warn!(error = %e, "no-net runs WITHOUT network isolation (allow_unsandboxed_no_net)");
                    report.add(
                        "seccomp-net",
                        FeatureStatus::NotEnforced,
                        format!("{e}; network NOT isolated (allow_unsandboxed_no_net = true)"),
                    );
                }
                Err(e) => {
                    return Err(SandboxError::NoNetUnavailable {
                        reason: format!("no network namespace, and seccomp failed: {e}"),
                    });
                }
            }
        }
    }
    Ok(offline)
}

/// How `no-net` isolates here, judged from a [`probe`]: the network namespace, else the
/// seccomp socket filter, else it refuses to start (or runs unisolated when allowed).
pub fn no_net_here(probe: &SandboxReport, config: &SandboxConfig) -> String {
    let available = |name: &str| {
        probe
            .features
            .iter()
            .any(|f| f.name == name && f.status == FeatureStatus::Available)
    };
    if available("net-namespace") {
        "a network namespace of its own (private loopback only)".into()
    } else if available("seccomp-net") {
        "no network namespace here: the seccomp filter lets socket() make only AF_UNIX sockets"
            .into()
    } else if config.allow_unsandboxed_no_net {
        "NOT ISOLATED: neither a namespace nor seccomp works here, and [sandbox] \
         allow_unsandboxed_no_net = true lets it run anyway"
            .into()
    } else {
        "refuses to start: neither a network namespace nor the seccomp filter works here \
         (fails closed)"
            .into()
    }
}

/// What this kernel can enforce, without applying anything to this process.
pub fn probe() -> SandboxReport {
    let mut report = SandboxReport::default();
    let abi = fs::kernel_abi();
    if abi > 0 {
        report.add(
            "landlock-fs",
            FeatureStatus::Available,
            format!("Landlock ABI {abi}"),
        );
        let scope = if abi >= 6 {
            FeatureStatus::Available
        } else {
            FeatureStatus::Unavailable
        };
        report.add("landlock-scope", scope, "needs Landlock ABI 6");
        report.add(
            "command-domain",
            FeatureStatus::Available,
            "each command in a nested Landlock domain: no ptrace, /proc descriptors or memory \
             of its runner or the server",
        );
        report.add(
            "no-capabilities",
            FeatureStatus::Available,
            "commands run with no capabilities, even as root: no device nodes, no network or \
             mount changes",
        );
    } else {
        report.add(
            "landlock-fs",
            FeatureStatus::Unavailable,
            "Landlock is not supported or not enabled by this kernel",
        );
        report.add(
            "command-domain",
            FeatureStatus::Unavailable,
            "needs Landlock: a command could reach its runner through /proc",
        );
    }
    let privileged = net::is_privileged();
    let ns = if privileged {
        "CLONE_NEWNET"
    } else {
        "CLONE_NEWUSER|CLONE_NEWNET"
    };
    let maps = (!privileged).then(IdMaps::current);
    match in_child(move || net::unshare(libc::CLONE_NEWNET, maps.as_ref())) {
        Ok(()) => report.add(
            "net-namespace",
            FeatureStatus::Available,
            format!("{ns} works"),
        ),
        Err(e) => report.add(
            "net-namespace",
            FeatureStatus::Unavailable,
            format!("{ns}: {e}"),
        ),
    }
    let maps = (!privileged).then(IdMaps::current);
    match in_child(move || {
        net::unshare(0, maps.as_ref())?;
        hold::hold_read_only(&[], &[]).map(|_| ())
    }) {
        Ok(()) => report.add(
            "protected-read-only",
            FeatureStatus::Available,
            "a mount namespace per runner: existing protected paths held read-only",
        ),
        Err(e) => report.add(
            "protected-read-only",
            FeatureStatus::Unavailable,
            format!("no mount namespace ({e}): protected paths are undone after each command"),
        ),
    }
    let seccomp = net::socket_filter()
        .map_err(std::io::Error::other)
        .and_then(|prog| {
            in_child(move || seccompiler::apply_filter(&prog).map_err(std::io::Error::other))
        });
    match seccomp {
        Ok(()) => report.add(
            "seccomp-net",
            FeatureStatus::Available,
            "socket family filter loads",
        ),
        Err(e) => report.add("seccomp-net", FeatureStatus::Unavailable, e.to_string()),
    }
    report.add(
        "tree-kill",
        FeatureStatus::Available,
        mechanism_note(crate::tree::mechanism()),
    );
    match crate::tree::own_cgroup_v2_dir() {
        Some(dir) => {
            let controllers =
                std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
            let has = |c: &str| controllers.split_whitespace().any(|a| a == c);
            let status = if has("memory") && has("pids") {
                FeatureStatus::Available
            } else {
                FeatureStatus::Unavailable
            };
            report.add(
                "cgroup-limits",
                status,
                format!("{} controllers: {}", dir.display(), controllers.trim()),
            );
        }
        None => report.add(
            "cgroup-limits",
            FeatureStatus::Unavailable,
            "no cgroup v2 hierarchy",
        ),
    }
    report.add(
        "rlimits",
        FeatureStatus::Available,
        "RLIMIT_DATA, RLIMIT_NPROC, RLIMIT_CPU",
    );
    report
}

fn mechanism_note(m: &crate::tree::Mechanism) -> String {
    use crate::tree::Mechanism;
    match m {
        Mechanism::PidNamespace => "a PID namespace per command".into(),
        Mechanism::UserPidNamespace => "a user and PID namespace per command".into(),
        Mechanism::Cgroup(dir) => {
            format!("a cgroup per command under {} (cgroup.kill)", dir.display())
        }
        Mechanism::ProcessGroup => {
            "process group only: descendants that call setsid can survive".into()
        }
    }
}

/// Run `test` in a forked child (via a spawn of `/bin/true`) so this process stays untouched.
fn in_child<F>(test: F) -> std::io::Result<()>
where
    F: Fn() -> std::io::Result<()> + Send + Sync + 'static,
{
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new("/bin/true");
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: the tests only make syscalls on data prepared before the fork.
    unsafe {
        cmd.pre_exec(test);
    }
    let status = cmd.status()?;
    if status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "test child ended with {status}"
        )))
    }
}

fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|d| d.count())
        .unwrap_or(1)
}

fn existing_dir(path: &Path) -> Result<PathBuf, SandboxError> {
    let p = path.canonicalize().map_err(|e| SandboxError::Path {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    if !p.is_dir() {
        return Err(SandboxError::Path {
            path: p,
            reason: "not a directory".into(),
        });
    }
    Ok(p)
}

fn home_dir() -> Option<PathBuf> {
    if let Some(h) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        return Some(PathBuf::from(h));
    }
    nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map(|u| u.dir)
}

fn expand_home(path: &str, home: Option<&Path>) -> PathBuf {
    match (path.strip_prefix("~/"), home) {
        (Some(rest), Some(home)) => home.join(rest),
        _ if path == "~" => home
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from(path)),
        _ => PathBuf::from(path),
    }
}

/// The denied paths, as given and with symlinks resolved (the target is what must be hidden).
fn denied_paths(config: &SandboxConfig, home: Option<&Path>) -> Vec<PathBuf> {
    let list: Vec<String> = match &config.deny_read {
        Some(l) => l.clone(),
        None => DEFAULT_DENY_READ.iter().map(|s| s.to_string()).collect(),
    };
    let mut out = Vec::new();
    for item in list {
        let path = expand_home(&item, home);
        if !path.is_absolute() {
            tracing::warn!(path = %item, "deny_read path is not absolute; skipped");
            continue;
        }
        // Also under the resolved home, so a symlinked home is covered when the entry is absent.
        if let Some(home) = home
            && let (Ok(rel), Ok(real_home)) = (path.strip_prefix(home), home.canonicalize())
        {
            out.push(real_home.join(rel));
        }
        if let Ok(real) = path.canonicalize() {
            out.push(real);
        }
        out.push(path);
    }
    out.sort();
    out.dedup();
    out
}
