//! `toolyard check-command` and `toolyard doctor`: what the policy and the kernel allow.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};

use toolyard_dialects::Dialect;

use crate::{
    CheckArgs, Common, DoctorArgs, dispatcher_with_state, is_remote, load_config, runtime,
};

pub(crate) fn check_command(args: CheckArgs) -> Result<ExitCode> {
    use toolyard_policy::{CommandPolicy, Decision};
    let (_, config) = load_config(args.catalog.as_deref())?;
    let policy = CommandPolicy::new(&config.policy)?;
    match policy.check(&args.command) {
        Decision::Allow => {
            out!("allowed");
            Ok(ExitCode::SUCCESS)
        }
        Decision::Block { rule, reason } => {
            out!("blocked by rule `{rule}`: {reason}");
            Ok(ExitCode::from(3))
        }
    }
}

pub(crate) fn doctor(args: DoctorArgs) -> Result<ExitCode> {
    let (catalog, config) = load_config(args.catalog.as_deref())?;
    let sandbox = &config.sandbox;
    let probe = toolyard_exec::sandbox::probe();
    out!("catalog: {}", catalog.origin());
    out!(
        "process-tree kill: {}",
        toolyard_exec::tree_kill_mechanism()
    );
    out!("{probe}");
    out!("what holds here, lane by lane:");
    out!(
        "  no-net: {}",
        toolyard_exec::sandbox::no_net_here(&probe, sandbox)
    );
    out!(
        "  net:    {}",
        toolyard_exec::sandbox::egress::net_here(&probe)
    );
    out!("  heavy:  like net, plus the rlimits and cgroup limits above where available");
    let network = &config.network;
    out!("  [network]: {}", network.describe());
    out!(
        "  network requests: a command tool's `network: {{hosts, reason}}` gets hosts [network] \
         refuses only when you approve them through your MCP client (elicitation: this call, \
         this session, or always for this workspace, kept in the state directory's {}, which \
         commands can neither read nor write); refused, with the catalog line to add, where the \
         client cannot ask (the CLI, a client without elicitation); an approval never lifts \
         [network] deny or the internal addresses",
        toolyard_dispatch::network_request::STORE_FILE
    );
    out!(
        "  [remote] runners: no gate (the container's or pod's own network applies; [network] \
         and approvals do not)"
    );
    out!(
        "  every lane: writes only in the workspace, the runner's temp dir and the private tool \
         caches (Landlock; renames and links across directories work), Toolyard's state \
         neither readable nor writable by commands, secrets scrubbed from the environment, each \
         command in its own Landlock domain with no capabilities, the runner and server \
         non-dumpable"
    );
    let protected = toolyard_exec::protect::configured(sandbox);
    let held = probe.features.iter().any(|f| {
        f.name == "protected-read-only"
            && f.status == toolyard_exec::sandbox::FeatureStatus::Available
    });
    let how = if held {
        "those that exist when a runner starts are read-only for its commands (git's config \
         stays writable, but a change to a key that runs a program is undone); the others are \
         checked after every command and what a command made there is undone"
    } else {
        "no mount namespace here, so they are checked after every command and a change is \
         undone"
    };
    out!(
        "protected paths ({}): {how} (what is undone is moved to the state directory's \
         quarantine and the model told); the file tools refuse to write them; [sandbox] \
         protected_paths replaces the list",
        protected.join(", ")
    );
    out!(
        "with --inline: nothing is sandboxed; commands run with your full access to files and \
         network, and only the file tools' paths are confined to the workspace"
    );
    let lsp = toolyard_lsp::Manager::new(
        Path::new("/"),
        config.lsp.clone(),
        toolyard_lsp::Launcher::Direct,
    );
    out!(
        "language servers (started on first need, sandboxed as the no-net lane with the heavy lane's limits; [lsp] in the catalog):"
    );
    for line in lsp.doctor_lines() {
        out!("  {line}");
    }
    if is_remote(&config) {
        remote_doctor(&args)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Start each lane's runner through the catalog's [remote] link and print what its sandbox
/// enforces, as its `ready` said: the report above is this machine's, not the runners'.
fn remote_doctor(args: &DoctorArgs) -> Result<()> {
    // The link needs a server workspace and state only to exist: throwaway ones.
    let scratch = tempfile::tempdir().context("cannot create a temporary directory")?;
    let ws = scratch.path().join("ws");
    std::fs::create_dir(&ws).context("cannot create a temporary directory")?;
    let common = Common {
        workspace: Some(ws),
        catalog: args.catalog.clone(),
        dialect: Dialect::Loopr,
        profile: toolyard_core::ALL_PROFILE.into(),
        inline: false,
    };
    let state = scratch.path().join("state");
    let d = dispatcher_with_state(&common, Some(&state))?;
    out!("remote runners ([remote] command), lane by lane, as each runner reports:");
    let reports = runtime()?.block_on(d.remote_sandbox_reports("doctor"));
    for (lane, report) in reports {
        match report {
            Ok(text) => {
                out!("  {lane}:");
                for line in text.lines() {
                    out!("    {line}");
                }
            }
            Err(e) => out!("  {lane}: NOT REACHED: {e}"),
        }
    }
    Ok(())
}
