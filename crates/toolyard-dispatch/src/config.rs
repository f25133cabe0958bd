//! The catalog's sections the server side reads, parsed once when the dispatcher is built
//! (after `check_catalog` checked every section), so no call deserializes one again.

use toolyard_core::{Catalog, CatalogError};
use toolyard_exec::background::ProcessesConfig;
use toolyard_lsp::LspConfig;
use toolyard_policy::PolicyConfig;

use crate::link::RemoteConfig;

/// The sections the dispatcher, its front doors and its language servers read.
pub struct Config {
    /// `[remote]`: where the runners are (a command link, a Kubernetes link).
    pub remote: RemoteConfig,
    /// `[policy]`: the command policy.
    pub policy: PolicyConfig,
    /// `[processes]`: background processes and idle sessions.
    pub processes: ProcessesConfig,
    /// `[lsp]`: the language servers.
    pub lsp: LspConfig,
}

impl Config {
    /// Each section of `catalog`, parsed once (its default when absent).
    pub fn of(catalog: &Catalog) -> Result<Self, CatalogError> {
        Ok(Self {
            remote: catalog.section("remote")?,
            policy: catalog.section("policy")?,
            processes: catalog.section("processes")?,
            lsp: catalog.section("lsp")?,
        })
    }

    /// How long a session may go without a call before its processes end.
    pub fn idle_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.processes.idle_timeout_s)
    }
}
