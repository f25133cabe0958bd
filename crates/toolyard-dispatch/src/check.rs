//! Checking a whole catalog at start, each section as the crate that reads it reads it, so a
//! mistake anywhere fails the load (with its line and column) instead of the first call.

use toolyard_core::{Catalog, CatalogError};
use toolyard_exec::ExecConfig;
use toolyard_exec::background::ProcessesConfig;
use toolyard_exec::sandbox::{LanesConfig, SandboxConfig};
use toolyard_policy::{CommandPolicy, PolicyConfig};
use toolyard_records::JournalConfig;
use toolyard_tools::command::ProjectConfig;
use toolyard_tools::oracle::OracleConfig;
use toolyard_tools::web::WebConfig;

use crate::HooksConfig;
use crate::link::RemoteConfig;

/// Check every section of `catalog` (`[policy]`, `[sandbox]`, `[lanes]`, `[exec]`, `[hooks]`,
/// `[journal]`, `[web]`, `[oracle]`, `[project]`, `[processes]`, `[remote]`, `[network]`) and the policy's patterns; the error lists
/// every mistake found, one a line. The tools and profiles were checked when it was parsed.
pub fn check_catalog(catalog: &Catalog) -> Result<(), CatalogError> {
    let checks: [Result<(), CatalogError>; 13] = [
        catalog.check_section::<PolicyConfig>("policy"),
        catalog.check_section::<SandboxConfig>("sandbox"),
        catalog.check_section::<LanesConfig>("lanes"),
        catalog.check_section::<ExecConfig>("exec"),
        catalog.check_section::<HooksConfig>("hooks"),
        catalog.check_section::<JournalConfig>("journal"),
        catalog.check_section::<WebConfig>("web"),
        catalog.check_section::<OracleConfig>("oracle"),
        catalog.check_section::<ProjectConfig>("project"),
        catalog.check_section::<ProcessesConfig>("processes"),
        catalog.check_section::<RemoteConfig>("remote"),
        catalog.check_section::<toolyard_lsp::LspConfig>("lsp"),
        catalog.check_section::<toolyard_egress::NetworkConfig>("network"),
    ];
    let mut messages: Vec<String> = checks
        .into_iter()
        .filter_map(Result::err)
        .map(|e| match e {
            CatalogError::Invalid { message, .. } => message,
            other => other.to_string(),
        })
        .collect();
    // A policy that deserializes can still hold a pattern that does not compile.
    if let Ok(policy) = catalog.section::<PolicyConfig>("policy")
        && let Err(e) = CommandPolicy::new(&policy)
    {
        messages.push(e.to_string());
    }
    // Zero would end every CLI session between two calls.
    if let Ok(p) = catalog.section::<ProcessesConfig>("processes")
        && p.idle_timeout_s == 0
    {
        messages.push(
            "[processes] idle_timeout_s must be at least 1 (seconds without a call before a \
             session's processes are killed); the default is 1800"
                .into(),
        );
    }
    // Two links for the same runners: which one would run them is not obvious, so neither.
    if let Ok(r) = catalog.section::<RemoteConfig>("remote")
        && r.command.is_some()
        && r.kubernetes.is_some()
    {
        messages.push(
            "[remote] sets both `command` and [remote.kubernetes]: keep one (the command link \
             runs an argv per runner; the Kubernetes link places a pod per session)"
                .into(),
        );
    }
    if messages.is_empty() {
        return Ok(());
    }
    Err(CatalogError::Invalid {
        origin: catalog.origin().to_string(),
        message: messages.join("\n"),
    })
}
