//! The catalog (`catalog.toml`, seed 000's format): each tool's lane, time limit, output limit
//! and description, and the profiles (seed 000's loop types) that say which tools a loop gets.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The built-in catalog, seed 000's table.
pub const DEFAULT_CATALOG: &str = include_str!("default_catalog.toml");

/// The output limit of a tool whose catalog entry names none: a whole result (as MCP clients
/// count it, JSON-escaped in `structuredContent`) stays well under Claude Code's ~50,000
/// characters, past which it shows the model only a 2 KB preview.
pub const DEFAULT_MAX_OUTPUT_BYTES: u64 = 30_000;

/// The profile that holds every tool of the catalog.
pub const ALL_PROFILE: &str = "all";

/// A runner lane: the sandbox a tool runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Lane {
    /// No network at all.
    #[serde(rename = "no-net")]
    NoNet,
    /// Network allowed.
    #[serde(rename = "net")]
    Net,
    /// Network plus resource limits and a concurrency limit.
    #[serde(rename = "heavy")]
    Heavy,
}

impl Lane {
    /// Every lane.
    pub const ALL: [Lane; 3] = [Lane::NoNet, Lane::Net, Lane::Heavy];

    /// The lane's name as the catalog spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Lane::NoNet => "no-net",
            Lane::Net => "net",
            Lane::Heavy => "heavy",
        }
    }
}

impl std::fmt::Display for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Lane {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "no-net" => Ok(Lane::NoNet),
            "net" => Ok(Lane::Net),
            "heavy" => Ok(Lane::Heavy),
            other => Err(format!(
                "unknown lane `{other}`; expected no-net, net or heavy"
            )),
        }
    }
}

/// One tool's catalog entry, after merging the file over the built-in table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolSpec {
    /// The lane it runs in.
    pub lane: Lane,
    /// Its default time limit.
    pub timeout_ms: u64,
    /// The most a call may ask for (`timeout_ms` argument ceiling).
    pub max_timeout_ms: u64,
    /// The most output bytes the model gets.
    pub max_output_bytes: u64,
    /// The description shown to the model, when the catalog file sets one.
    pub description: Option<String>,
}

impl ToolSpec {
    /// The default time limit as a duration.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }
}

/// A catalog could not be used; the message names the line where it can.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// The file could not be read.
    #[error("cannot read catalog {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid (syntax, unknown key, wrong type): toml's message names the line.
    #[error("invalid catalog {origin}: {message}")]
    Invalid {
        /// The file, or "built-in".
        origin: String,
        /// What is wrong and where.
        message: String,
    },
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogFile {
    #[serde(default)]
    tools: BTreeMap<String, ToolEntry>,
    #[serde(default)]
    profiles: BTreeMap<String, ProfileEntry>,
    policy: Option<toml::Value>,
    sandbox: Option<toml::Value>,
    lanes: Option<toml::Value>,
    exec: Option<toml::Value>,
    hooks: Option<toml::Value>,
    journal: Option<toml::Value>,
    web: Option<toml::Value>,
    oracle: Option<toml::Value>,
    project: Option<toml::Value>,
}

impl CatalogFile {
    /// The non-core sections that are present, by name.
    fn take_sections(&mut self) -> Vec<(&'static str, toml::Value)> {
        [
            ("policy", self.policy.take()),
            ("sandbox", self.sandbox.take()),
            ("lanes", self.lanes.take()),
            ("exec", self.exec.take()),
            ("hooks", self.hooks.take()),
            ("journal", self.journal.take()),
            ("web", self.web.take()),
            ("oracle", self.oracle.take()),
            ("project", self.project.take()),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, v)))
        .collect()
    }
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolEntry {
    lane: Option<Lane>,
    timeout_ms: Option<u64>,
    max_timeout_ms: Option<u64>,
    max_output_bytes: Option<u64>,
    description: Option<String>,
    enabled: Option<bool>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileEntry {
    tools: Vec<String>,
}

/// The merged catalog: tools, profiles and the other sections.
#[derive(Debug, Clone)]
pub struct Catalog {
    tools: BTreeMap<String, ToolSpec>,
    profiles: BTreeMap<String, Vec<String>>,
    sections: BTreeMap<String, (toml::Value, String)>,
    origin: String,
}

impl Default for Catalog {
    fn default() -> Self {
        Self::builtin()
    }
}

impl Catalog {
    /// The built-in catalog (seed 000's table).
    pub fn builtin() -> Self {
        Self::parse_over_builtin("", "built-in").unwrap_or_else(|e| {
            // The built-in table is part of the binary and covered by tests.
            panic!("the built-in catalog is invalid: {e}")
        })
    }

    /// Read `path` and lay it over the built-in catalog.
    pub fn load(path: &Path) -> Result<Self, CatalogError> {
        let text = std::fs::read_to_string(path).map_err(|source| CatalogError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse_over_builtin(&text, &path.display().to_string())
    }

    /// Parse `text` (catalog.toml form) and lay it over the built-in catalog, field by field.
    pub fn parse_over_builtin(text: &str, origin: &str) -> Result<Self, CatalogError> {
        let invalid = |message: String| CatalogError::Invalid {
            origin: origin.to_string(),
            message,
        };
        let base: CatalogFile =
            toml::from_str(DEFAULT_CATALOG).map_err(|e| CatalogError::Invalid {
                origin: "built-in".into(),
                message: e.to_string(),
            })?;
        let mut file: CatalogFile = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
        let sections = file.take_sections();

        let mut entries = base.tools;
        // The built-in descriptions are seed 000's one-liners; the tools' own are richer, so
        // only a description the file sets replaces a tool's.
        for e in entries.values_mut() {
            e.description = None;
        }
        for (name, over) in file.tools {
            let merged = match entries.remove(&name) {
                Some(mut e) => {
                    e.lane = over.lane.or(e.lane);
                    e.timeout_ms = over.timeout_ms.or(e.timeout_ms);
                    e.max_timeout_ms = over.max_timeout_ms.or(e.max_timeout_ms);
                    e.max_output_bytes = over.max_output_bytes.or(e.max_output_bytes);
                    e.description = over.description;
                    e.enabled = over.enabled.or(e.enabled);
                    e
                }
                None => over,
            };
            entries.insert(name, merged);
        }

        let mut tools = BTreeMap::new();
        for (name, e) in entries {
            if e.enabled == Some(false) {
                continue;
            }
            let where_ = line_prefix(text, &format!("tools.{name}"));
            let lane = e.lane.ok_or_else(|| {
                invalid(format!(
                    "{where_}[tools.{name}] has no `lane`; set lane = \"no-net\", \"net\" or \"heavy\""
                ))
            })?;
            let timeout_ms = e.timeout_ms.unwrap_or(30_000);
            if timeout_ms == 0 {
                return Err(invalid(format!(
                    "{where_}[tools.{name}] timeout_ms must be greater than 0"
                )));
            }
            let max_timeout_ms = e.max_timeout_ms.unwrap_or(timeout_ms.max(600_000));
            if max_timeout_ms < timeout_ms {
                return Err(invalid(format!(
                    "{where_}[tools.{name}] max_timeout_ms ({max_timeout_ms}) is below timeout_ms ({timeout_ms})"
                )));
            }
            tools.insert(
                name,
                ToolSpec {
                    lane,
                    timeout_ms,
                    max_timeout_ms,
                    max_output_bytes: e.max_output_bytes.unwrap_or(DEFAULT_MAX_OUTPUT_BYTES),
                    description: e.description,
                },
            );
        }

        let mut profiles: BTreeMap<String, Vec<String>> = base
            .profiles
            .into_iter()
            .map(|(k, v)| (k, v.tools))
            .collect();
        for (name, p) in file.profiles {
            if name == ALL_PROFILE {
                return Err(invalid(format!(
                    "{}profile `all` is every tool of the catalog and cannot be redefined; disable a tool with enabled = false instead",
                    line_prefix(text, "profiles.all")
                )));
            }
            profiles.insert(name, p.tools);
        }
        for (name, list) in &mut profiles {
            // A profile may name a tool that the file disabled: drop it quietly from the built-in
            // ones, but a user-written profile naming an unknown tool is an error.
            let user_written = line_of(text, &format!("profiles.{name}")).is_some();
            if let Some(bad) = list
                .iter()
                .find(|t| user_written && !tools.contains_key(*t))
            {
                return Err(invalid(format!(
                    "{}profile `{name}` names `{bad}`, which the catalog does not have; known tools: {}",
                    line_prefix(text, &format!("profiles.{name}")),
                    tools.keys().cloned().collect::<Vec<_>>().join(", ")
                )));
            }
            list.retain(|t| tools.contains_key(t));
        }

        let sections = sections
            .into_iter()
            .map(|(k, v)| (k.to_string(), (v, line_prefix(text, k))))
            .collect();

        Ok(Self {
            tools,
            profiles,
            sections,
            origin: origin.to_string(),
        })
    }

    /// Where this catalog came from (a path, or "built-in").
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The entry of `tool`.
    pub fn tool(&self, tool: &str) -> Option<&ToolSpec> {
        self.tools.get(tool)
    }

    /// Every tool entry, by name.
    pub fn tools(&self) -> &BTreeMap<String, ToolSpec> {
        &self.tools
    }

    /// The names of every profile, `all` included.
    pub fn profile_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.profiles.keys().cloned().collect();
        names.push(ALL_PROFILE.to_string());
        names.sort();
        names
    }

    /// The tools of `profile`; `all` is every tool of the catalog.
    pub fn profile(&self, profile: &str) -> Result<Vec<String>, String> {
        if profile == ALL_PROFILE {
            return Ok(self.tools.keys().cloned().collect());
        }
        self.profiles.get(profile).cloned().ok_or_else(|| {
            format!(
                "unknown profile `{profile}`; available profiles: {}",
                self.profile_names().join(", ")
            )
        })
    }

    /// Deserialize the top-level section `name` (default when absent), e.g. `[policy]`.
    pub fn section<T: DeserializeOwned + Default>(&self, name: &str) -> Result<T, CatalogError> {
        match self.sections.get(name) {
            None => Ok(T::default()),
            Some((value, where_)) => {
                T::deserialize(value.clone()).map_err(|e| CatalogError::Invalid {
                    origin: self.origin.clone(),
                    message: format!("{where_}[{name}]: {e}"),
                })
            }
        }
    }
}

/// `"line N: "` for the table header `[key]` (or `[key.`) in `text`, or empty.
fn line_prefix(text: &str, key: &str) -> String {
    line_of(text, key)
        .map(|n| format!("line {n}: "))
        .unwrap_or_default()
}

fn line_of(text: &str, key: &str) -> Option<usize> {
    text.lines()
        .position(|l| {
            let l = l.trim();
            l == format!("[{key}]")
                || l.starts_with(&format!("[{key}."))
                || l.starts_with(&format!("{key} ="))
        })
        .map(|i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_has_seed_000_table() {
        let c = Catalog::builtin();
        let read = c.tool("read_file").unwrap();
        assert_eq!(read.lane, Lane::NoNet);
        assert_eq!(read.timeout_ms, 10_000);
        assert_eq!(c.tool("run_command").unwrap().lane, Lane::Net);
        assert_eq!(c.tool("build").unwrap().lane, Lane::Heavy);
        // No default lets a result outgrow what MCP clients pass the model whole.
        assert_eq!(read.max_output_bytes, 30_000);
        for (name, spec) in c.tools() {
            let limit = spec.max_output_bytes;
            assert!(limit <= DEFAULT_MAX_OUTPUT_BYTES, "{name}: {limit}");
        }
        assert_eq!(c.profile("plan").unwrap().len(), 6);
        assert!(
            !c.profile("plan")
                .unwrap()
                .contains(&"run_command".to_string())
        );
        assert!(c.profile("code").unwrap().contains(&"build".to_string()));
        assert_eq!(c.profile("all").unwrap().len(), c.tools().len());
    }

    #[test]
    fn file_overrides_field_by_field() {
        let c = Catalog::parse_over_builtin(
            "[tools.grep]\ntimeout_ms = 5000\n[tools.web_fetch]\nenabled = false\n",
            "test",
        )
        .unwrap();
        let grep = c.tool("grep").unwrap();
        assert_eq!(grep.timeout_ms, 5000);
        assert_eq!(grep.lane, Lane::NoNet);
        assert!(c.tool("web_fetch").is_none());
    }

    #[test]
    fn bad_lane_names_the_line() {
        let err = Catalog::parse_over_builtin("\n\n[tools.grep]\nlane = \"fast\"\n", "c.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 4"), "{err}");
        assert!(err.contains("fast"), "{err}");
    }

    #[test]
    fn unknown_key_names_the_line() {
        let err = Catalog::parse_over_builtin("[tools.grep]\ntimeout = 5\n", "c.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 2"), "{err}");
        assert!(err.contains("timeout"), "{err}");
    }

    #[test]
    fn unknown_section_is_an_error() {
        let err = Catalog::parse_over_builtin("\n[polcy]\na = 1\n", "c.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 2"), "{err}");
        assert!(err.contains("polcy"), "{err}");
    }

    #[test]
    fn profile_with_unknown_tool_is_an_error() {
        let err = Catalog::parse_over_builtin(
            "[profiles.mine]\ntools = [\"read_file\", \"nope\"]\n",
            "c.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("line 1"), "{err}");
        assert!(err.contains("nope"), "{err}");
    }

    #[test]
    fn profiles_are_overridable() {
        let c = Catalog::parse_over_builtin("[profiles.plan]\ntools = [\"read_file\"]\n", "c.toml")
            .unwrap();
        assert_eq!(c.profile("plan").unwrap(), vec!["read_file".to_string()]);
        assert!(
            c.profile("nope")
                .unwrap_err()
                .contains("available profiles")
        );
    }

    #[test]
    fn sections_deserialize_with_defaults() {
        #[derive(Deserialize, Default)]
        struct P {
            deny: Vec<String>,
        }
        let c = Catalog::parse_over_builtin("[policy]\ndeny = [\"x\"]\n", "c.toml").unwrap();
        assert_eq!(c.section::<P>("policy").unwrap().deny, vec!["x"]);
        assert!(c.section::<P>("hooks").unwrap().deny.is_empty());
    }
}
