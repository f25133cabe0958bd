//! Resource limits of the `heavy` lane: rlimits always, cgroup v2 limits where delegated.

use nix::sys::resource::{Resource, setrlimit};

use super::LaneLimits;
use super::report::{FeatureStatus, SandboxReport};
use crate::tree::own_cgroup_v2_dir;

/// Set the rlimits of `limits` on this process (inherited by every command).
pub(crate) fn apply_rlimits(limits: &LaneLimits, report: &mut SandboxReport) {
    let mut done = Vec::new();
    let mut failed = Vec::new();
    let mut set = |resource: Resource, value: Option<u64>, label: &str| {
        let Some(v) = value else { return };
        match setrlimit(resource, v, v) {
            Ok(()) => done.push(format!("{label}={v}")),
            Err(e) => failed.push(format!("{label}: {e}")),
        }
    };
    // RLIMIT_DATA rather than RLIMIT_AS: it counts memory used, not address space reserved
    // (runtimes like Go and the JVM reserve far more than they use).
    set(
        Resource::RLIMIT_DATA,
        limits.memory_mb.map(|mb| mb.saturating_mul(1024 * 1024)),
        "data bytes",
    );
    set(Resource::RLIMIT_NPROC, limits.max_processes, "processes");
    set(
        Resource::RLIMIT_CPU,
        limits.cpu_seconds,
        "cpu seconds per process",
    );
    let mut detail = done.join(", ");
    if limits.max_processes.is_some() && super::net::is_root() {
        detail.push_str(" (RLIMIT_NPROC does not bind root; it counts all processes of the user)");
    }
    let status = match (done.is_empty(), failed.is_empty()) {
        (true, true) => FeatureStatus::NotRequested,
        (_, true) => FeatureStatus::Enforced,
        (true, false) => FeatureStatus::NotEnforced,
        (false, false) => FeatureStatus::Partial,
    };
    if !failed.is_empty() {
        detail.push_str(&format!("; failed: {}", failed.join(", ")));
    }
    report.add("rlimits", status, detail);
}

/// Put this process in a child cgroup with memory and pids limits, when a delegated cgroup
/// with those controllers exists.
pub(crate) fn apply_cgroup(limits: &LaneLimits, report: &mut SandboxReport) {
    match try_cgroup(limits) {
        Ok(detail) => report.add("cgroup-limits", FeatureStatus::Enforced, detail),
        Err(why) => report.add("cgroup-limits", FeatureStatus::NotEnforced, why),
    }
}

fn try_cgroup(limits: &LaneLimits) -> Result<String, String> {
    let dir = own_cgroup_v2_dir().ok_or("no cgroup v2 hierarchy is mounted")?;
    let available = std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
    let mut wanted = Vec::new();
    if limits.memory_mb.is_some() {
        wanted.push("memory");
    }
    if limits.max_processes.is_some() {
        wanted.push("pids");
    }
    if wanted.is_empty() {
        return Err("no memory or process limit configured".into());
    }
    let missing: Vec<_> = wanted
        .iter()
        .filter(|c| !available.split_whitespace().any(|a| a == **c))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "controllers {missing:?} are not available in {} (available: {:?}); rlimits only",
            dir.display(),
            available.trim()
        ));
    }
    // A cgroup with processes cannot enable controllers for its children ("no internal
    // processes"), so move into the leaf first, then enable, then set the limits.
    let leaf = dir.join(format!("toolyard-heavy-{}", std::process::id()));
    std::fs::create_dir_all(&leaf).map_err(|e| format!("cannot create {}: {e}", leaf.display()))?;
    std::fs::write(leaf.join("cgroup.procs"), "0")
        .map_err(|e| format!("cannot move into {}: {e}", leaf.display()))?;
    let enable: String = wanted.iter().map(|c| format!("+{c} ")).collect();
    std::fs::write(dir.join("cgroup.subtree_control"), enable.trim())
        .map_err(|e| format!("cannot enable {wanted:?} in {}: {e}", dir.display()))?;
    let mut done = Vec::new();
    if let Some(mb) = limits.memory_mb {
        let bytes = mb.saturating_mul(1024 * 1024).to_string();
        std::fs::write(leaf.join("memory.max"), &bytes)
            .map_err(|e| format!("cannot set memory.max: {e}"))?;
        done.push(format!("memory.max={bytes}"));
    }
    if let Some(n) = limits.max_processes {
        std::fs::write(leaf.join("pids.max"), n.to_string())
            .map_err(|e| format!("cannot set pids.max: {e}"))?;
        done.push(format!("pids.max={n}"));
    }
    Ok(format!("{} in {}", done.join(", "), leaf.display()))
}
