//! The catalog's sections, each parsed once into its crate's type when the dispatcher is
//! built (and checked, all of them, by `check_catalog`), so no call deserializes one again.
//! [`Config`] is the one list of sections beside `toolyard-core`'s file format, which names
//! them for its own parse; a test keeps the two the same.

use toolyard_core::{Catalog, CatalogError};
use toolyard_egress::NetworkConfig;
use toolyard_exec::ExecConfig;
use toolyard_exec::background::ProcessesConfig;
use toolyard_exec::sandbox::{LanesConfig, SandboxConfig};
use toolyard_lsp::LspConfig;
use toolyard_policy::PolicyConfig;
use toolyard_records::JournalConfig;
use toolyard_tools::command::ProjectConfig;
use toolyard_tools::oracle::OracleConfig;
use toolyard_tools::web::WebConfig;

use crate::hooks::HooksConfig;
use crate::link::RemoteConfig;

/// One field per catalog section, named as the section is, and what parses them.
macro_rules! sections {
    ($($(#[$doc:meta])* $name:ident: $ty:ty,)*) => {
        /// Every section of the catalog besides `[tools]` and `[profiles]`, typed.
        pub struct Config {
            $($(#[$doc])* pub $name: $ty,)*
        }

        /// The sections that parsed, and why the others did not.
        pub(crate) struct Parsed {
            $(pub(crate) $name: Option<$ty>,)*
            /// One message per section that did not parse, with its line and column.
            pub(crate) errors: Vec<String>,
        }

        impl Config {
            /// The sections' names, as the catalog writes them.
            pub const SECTIONS: &[&str] = &[$(stringify!($name)),*];

            /// Each section of `catalog` that parses (its default when absent), and a message
            /// for each that does not.
            pub(crate) fn parse(catalog: &Catalog) -> Parsed {
                let mut errors = Vec::new();
                let mut read = |e: CatalogError| errors.push(match e {
                    CatalogError::Invalid { message, .. } => message,
                    other => other.to_string(),
                });
                $(let $name = catalog.section::<$ty>(stringify!($name)).map_err(&mut read).ok();)*
                Parsed { $($name,)* errors }
            }
        }

        impl Parsed {
            /// The whole configuration, when every section parsed.
            pub(crate) fn complete(self) -> Option<Config> {
                Some(Config { $($name: self.$name?,)* })
            }
        }
    };
}

sections! {
    /// `[policy]`: the command policy.
    policy: PolicyConfig,
    /// `[sandbox]`: the lanes' sandboxes.
    sandbox: SandboxConfig,
    /// `[lanes]`: the lanes' own settings.
    lanes: LanesConfig,
    /// `[exec]`: how commands run (environment, terminal).
    exec: ExecConfig,
    /// `[hooks]`: the user's commands around calls.
    hooks: HooksConfig,
    /// `[journal]`: what the journal keeps.
    journal: JournalConfig,
    /// `[web]`: the web tools.
    web: WebConfig,
    /// `[oracle]`: the oracle tool.
    oracle: OracleConfig,
    /// `[project]`: the project's own commands.
    project: ProjectConfig,
    /// `[processes]`: background processes and idle sessions.
    processes: ProcessesConfig,
    /// `[remote]`: where the runners are (a command link, a Kubernetes link).
    remote: RemoteConfig,
    /// `[lsp]`: the language servers.
    lsp: LspConfig,
    /// `[network]`: the net lane's egress policy.
    network: NetworkConfig,
}

impl Config {
    /// How long a session may go without a call before its processes end.
    pub fn idle_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.processes.idle_timeout_s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sections_are_the_ones_the_catalog_file_accepts() {
        // Each is a section the file format knows ...
        for name in Config::SECTIONS {
            let text = format!("[{name}]\n");
            Catalog::parse_over_builtin(&text, "c.toml")
                .unwrap_or_else(|e| panic!("[{name}] is refused by the catalog: {e}"));
        }
        // ... and the file format knows no other: its refusal of an unknown one lists them.
        let Err(e) = Catalog::parse_over_builtin("[no_such_section]\n", "c.toml") else {
            panic!("an unknown section is accepted");
        };
        let e = e.to_string();
        let listed = e.split("expected one of").nth(1).unwrap_or_default();
        let mut known: Vec<&str> = listed
            .split(',')
            .map(|s| s.trim().trim_matches('`'))
            .filter(|s| !s.is_empty() && *s != "tools" && *s != "profiles")
            .collect();
        known.sort_unstable();
        let mut ours = Config::SECTIONS.to_vec();
        ours.sort_unstable();
        assert_eq!(known, ours, "{e}");
    }
}
