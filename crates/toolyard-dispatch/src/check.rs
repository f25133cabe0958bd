//! Checking a whole catalog at start, each section as the crate that reads it reads it, so a
//! mistake anywhere fails the load (with its line and column) instead of the first call.

use toolyard_core::{Catalog, CatalogError};
use toolyard_policy::CommandPolicy;

use crate::config::Config;

/// Check every section of `catalog` (each in [`Config::SECTIONS`]) and what holds across
/// them (the policy's patterns, the idle timeout, one link); the error lists every mistake
/// found, one a line. The tools and profiles were checked when it was parsed. Returns the
/// sections, parsed.
pub fn check_catalog(catalog: &Catalog) -> Result<Config, CatalogError> {
    let parsed = Config::parse(catalog);
    let mut messages = parsed.errors.clone();
    // A policy that deserializes can still hold a pattern that does not compile.
    if let Some(policy) = &parsed.policy
        && let Err(e) = CommandPolicy::new(policy)
    {
        messages.push(e.to_string());
    }
    // Zero would end every CLI session between two calls.
    if let Some(p) = &parsed.processes
        && p.idle_timeout_s == 0
    {
        messages.push(
            "[processes] idle_timeout_s must be at least 1 (seconds without a call before a \
             session's processes are killed); the default is 1800"
                .into(),
        );
    }
    // Two links for the same runners: which one would run them is not obvious, so neither.
    if let Some(r) = &parsed.remote
        && r.command.is_some()
        && r.kubernetes.is_some()
    {
        messages.push(
            "[remote] sets both `command` and [remote.kubernetes]: keep one (the command link \
             runs an argv per runner; the Kubernetes link places a pod per session)"
                .into(),
        );
    }
    if let (true, Some(config)) = (messages.is_empty(), parsed.complete()) {
        return Ok(config);
    }
    Err(CatalogError::Invalid {
        origin: catalog.origin().to_string(),
        message: messages.join("\n"),
    })
}
