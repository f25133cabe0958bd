//! The catalog (`catalog.toml`, seed 000's format): each tool's lane, time limit, output limit
//! and description, and the profiles (seed 000's loop types) that say which tools a loop gets.

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::de::{DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use toml::Spanned;

use crate::engine::Engine;

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
    /// An entry in `lane` with the default time limit `timeout_ms`, a ceiling of ten minutes
    /// (or the limit, if longer) and the default output limit: what a catalog entry that sets
    /// only these gets.
    pub fn new(lane: Lane, timeout_ms: u64) -> Self {
        Self {
            lane,
            timeout_ms,
            max_timeout_ms: timeout_ms.max(600_000),
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            description: None,
        }
    }

    /// The default time limit as a duration.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }
}

/// A catalog could not be used; the message names the line and column where it can.
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
    /// The file is not valid (syntax, unknown key or tool, wrong type): `line L, column C: ...`
    /// for each mistake, one a line.
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
#[allow(dead_code)] // the other sections are fields only so that they are accepted
struct CatalogFile {
    #[serde(default)]
    tools: BTreeMap<Spanned<String>, ToolEntry>,
    #[serde(default)]
    profiles: BTreeMap<Spanned<String>, ProfileEntry>,
    // The other sections belong to other crates: they are read from the text on demand
    // (`Catalog::section`), so their errors keep their own line and column.
    policy: Option<IgnoredAny>,
    sandbox: Option<IgnoredAny>,
    lanes: Option<IgnoredAny>,
    exec: Option<IgnoredAny>,
    hooks: Option<IgnoredAny>,
    journal: Option<IgnoredAny>,
    web: Option<IgnoredAny>,
    oracle: Option<IgnoredAny>,
    project: Option<IgnoredAny>,
    processes: Option<IgnoredAny>,
    remote: Option<IgnoredAny>,
    lsp: Option<IgnoredAny>,
    network: Option<IgnoredAny>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolEntry {
    lane: Option<Lane>,
    timeout_ms: Option<Spanned<u64>>,
    max_timeout_ms: Option<Spanned<u64>>,
    max_output_bytes: Option<u64>,
    description: Option<String>,
    enabled: Option<bool>,
    /// A tool of the file's own: the argv it runs (see [`CustomTool`]).
    command: Option<Spanned<Vec<Spanned<String>>>>,
    /// A tool of the file's own: the JSON Schema of its arguments.
    parameters: Option<Spanned<toml::Value>>,
}

/// One element of a catalog command tool's argv.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum ArgvPart {
    /// Passed as written.
    Literal(String),
    /// `{name}`: the argument `name`'s value, as one whole argv element (a string as is, a
    /// number or boolean as JSON writes it); left out when the call does not give it.
    Param(String),
}

/// A tool the catalog file declares (`[tools.NAME]` with `command`): it runs `command` as an
/// argv (no shell) in its lane's runner, its arguments checked against `parameters` first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CustomTool {
    /// Its name, the same in every dialect.
    pub name: String,
    /// The description shown to the model.
    pub description: String,
    /// The argv, placeholders marked.
    pub command: Vec<ArgvPart>,
    /// The JSON Schema of its arguments (an object schema; `additionalProperties` is `false`
    /// unless the file says otherwise, so a misspelt argument is refused, not ignored).
    pub parameters: serde_json::Value,
}

impl CustomTool {
    /// The argv of a call with `args` (already checked against [`CustomTool::parameters`]):
    /// each placeholder is replaced by its argument's value as one whole element, or left out
    /// when the argument is absent or null.
    pub fn argv(&self, args: &serde_json::Value) -> Result<Vec<String>, String> {
        let mut argv = Vec::with_capacity(self.command.len());
        for part in &self.command {
            match part {
                ArgvPart::Literal(s) => argv.push(s.clone()),
                ArgvPart::Param(name) => match args.get(name) {
                    None | Some(serde_json::Value::Null) => {}
                    Some(serde_json::Value::String(s)) => argv.push(s.clone()),
                    Some(v @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_))) => {
                        argv.push(v.to_string())
                    }
                    Some(_) => {
                        return Err(format!(
                            "argument `{name}` must be a string, number or boolean: it fills \
                             one argument of the command"
                        ));
                    }
                },
            }
        }
        if let Some(bad) = argv.iter().find(|a| a.contains('\0')) {
            return Err(format!(
                "an argument holds a NUL byte, which no command argument can: {:?}",
                bad.replace('\0', "\\0")
            ));
        }
        Ok(argv)
    }

    /// The call's argv as one shell-quoted line, for the command policy and for people to
    /// read (it is never run as shell text).
    pub fn command_line(&self, args: &serde_json::Value) -> Result<String, String> {
        Ok(self
            .argv(args)?
            .iter()
            .map(|a| shell_quote(a))
            .collect::<Vec<_>>()
            .join(" "))
    }
}

/// `s` as one shell word: as is when it holds only characters no shell treats specially.
pub fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileEntry {
    tools: Vec<Spanned<String>>,
}

/// The merged catalog: tools, profiles and the other sections.
#[derive(Debug, Clone)]
pub struct Catalog {
    tools: BTreeMap<String, ToolSpec>,
    /// The file's own command tools (their specs are in `tools` too).
    custom: BTreeMap<String, CustomTool>,
    profiles: BTreeMap<String, Vec<String>>,
    /// The file's text: sections are deserialized from it, spans and all.
    text: Arc<str>,
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
    /// Every mistake of the tools and profiles is reported with the line and column of the key
    /// or value at fault; the other sections are checked with [`Catalog::check_section`].
    pub fn parse_over_builtin(text: &str, origin: &str) -> Result<Self, CatalogError> {
        let invalid = |message: String| CatalogError::Invalid {
            origin: origin.to_string(),
            message,
        };
        // `line L, column C: ` for a span of the file.
        let at = |span: Option<Range<usize>>| -> String {
            span.map(|s| format!("{}: ", line_col(text, s.start)))
                .unwrap_or_default()
        };
        let base: CatalogFile =
            toml::from_str(DEFAULT_CATALOG).map_err(|e| CatalogError::Invalid {
                origin: "built-in".into(),
                message: located(DEFAULT_CATALOG, &e),
            })?;
        let file: CatalogFile = toml::from_str(text).map_err(|e| invalid(located(text, &e)))?;
        check_builtin(&base)?;

        let mut entries: BTreeMap<String, ToolEntry> = base
            .tools
            .into_iter()
            .map(|(name, mut e)| {
                // The built-in descriptions are seed 000's one-liners; the tools' own are
                // richer, so only a description the file sets replaces a tool's.
                e.description = None;
                (name.into_inner(), e)
            })
            .collect();
        let known: Vec<String> = entries.keys().cloned().collect();
        // The file's own entries, with the span of their name, to point at their mistakes.
        let mut written: BTreeMap<String, (Range<usize>, ToolEntry)> = BTreeMap::new();
        // The file's own command tools; their limits are checked with the built-in entries'.
        let mut custom: BTreeMap<String, CustomTool> = BTreeMap::new();
        let mut added: BTreeMap<String, (Range<usize>, ToolEntry)> = BTreeMap::new();
        for (name, over) in file.tools {
            let span = name.span();
            let name = name.into_inner();
            let Some(e) = entries.get_mut(&name) else {
                if over.command.is_some() {
                    let tool = custom_tool(&name, &over).map_err(|m| {
                        invalid(format!("{}[tools.{name}]: {m}", at(Some(span.clone()))))
                    })?;
                    custom.insert(name.clone(), tool);
                    added.insert(name, (span, over));
                    continue;
                }
                return Err(invalid(format!(
                    "{}[tools.{name}]: Toolyard has no tool `{name}`{}; the tools are: {}; to \
                     declare a tool of your own, give it a `command`",
                    at(Some(span)),
                    did_you_mean(&name, known.iter().map(String::as_str)),
                    known.join(", ")
                )));
            };
            if let Some(c) = &over.command {
                return Err(invalid(format!(
                    "{}[tools.{name}]: `{name}` is a built-in tool, so it takes no `command`; \
                     declare a tool of your own under another name",
                    at(Some(c.span()))
                )));
            }
            if let Some(p) = &over.parameters {
                return Err(invalid(format!(
                    "{}[tools.{name}]: `parameters` declares the arguments of a tool with a \
                     `command`; `{name}` is built in and keeps its own",
                    at(Some(p.span()))
                )));
            }
            e.lane = over.lane.or(e.lane);
            e.timeout_ms = over.timeout_ms.clone().or(e.timeout_ms.take());
            e.max_timeout_ms = over.max_timeout_ms.clone().or(e.max_timeout_ms.take());
            e.max_output_bytes = over.max_output_bytes.or(e.max_output_bytes);
            e.description = over.description.clone();
            e.enabled = over.enabled.or(e.enabled);
            written.insert(name, (span, over));
        }

        for (name, (span, e)) in added {
            entries.insert(name.clone(), e.clone());
            written.insert(name, (span, e));
        }
        let mut tools = BTreeMap::new();
        for (name, e) in entries {
            if e.enabled == Some(false) {
                custom.remove(&name);
            }
            if e.enabled == Some(false) {
                continue;
            }
            let mine = written.get(&name);
            let key_span = mine.map(|(s, _)| s.clone());
            let span_of = |f: fn(&ToolEntry) -> Option<&Spanned<u64>>| {
                mine.and_then(|(_, w)| f(w)).map(|v| v.span())
            };
            let lane = e.lane.ok_or_else(|| {
                invalid(format!(
                    "{}[tools.{name}] has no `lane`; set lane = \"no-net\", \"net\" or \"heavy\"",
                    at(key_span.clone())
                ))
            })?;
            let timeout_ms = e.timeout_ms.as_ref().map_or(30_000, |t| *t.get_ref());
            if timeout_ms == 0 {
                return Err(invalid(format!(
                    "{}[tools.{name}] timeout_ms must be greater than 0; give the default time \
                     limit in milliseconds",
                    at(span_of(|w| w.timeout_ms.as_ref()).or(key_span))
                )));
            }
            let max_timeout_ms = e
                .max_timeout_ms
                .as_ref()
                .map_or(timeout_ms.max(600_000), |t| *t.get_ref());
            if max_timeout_ms < timeout_ms {
                let span = span_of(|w| w.max_timeout_ms.as_ref())
                    .or_else(|| span_of(|w| w.timeout_ms.as_ref()))
                    .or(key_span);
                return Err(invalid(format!(
                    "{}[tools.{name}] max_timeout_ms ({max_timeout_ms}) is below timeout_ms \
                     ({timeout_ms}); raise max_timeout_ms or lower timeout_ms",
                    at(span)
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

        // A built-in profile may name a tool the file disabled: it is dropped quietly.
        let mut profiles: BTreeMap<String, Vec<String>> = base
            .profiles
            .into_iter()
            .map(|(k, v)| {
                let list = v
                    .tools
                    .into_iter()
                    .map(Spanned::into_inner)
                    .filter(|t| tools.contains_key(t))
                    .collect();
                (k.into_inner(), list)
            })
            .collect();
        // A profile the file writes must name tools the catalog serves.
        for (name, p) in file.profiles {
            if name.get_ref() == ALL_PROFILE {
                return Err(invalid(format!(
                    "{}profile `all` is every tool of the catalog and cannot be redefined; disable a tool with enabled = false instead",
                    at(Some(name.span()))
                )));
            }
            let mut list = Vec::with_capacity(p.tools.len());
            for t in p.tools {
                if !tools.contains_key(t.get_ref()) {
                    let why = if known.contains(t.get_ref()) {
                        ", which this catalog disables (enabled = false)".to_string()
                    } else {
                        format!(
                            ", which the catalog does not have{}",
                            did_you_mean(t.get_ref(), tools.keys().map(String::as_str))
                        )
                    };
                    return Err(invalid(format!(
                        "{}profile `{}` names `{}`{why}; known tools: {}",
                        at(Some(t.span())),
                        name.get_ref(),
                        t.get_ref(),
                        tools.keys().cloned().collect::<Vec<_>>().join(", ")
                    )));
                }
                list.push(t.into_inner());
            }
            profiles.insert(name.into_inner(), list);
        }

        Ok(Self {
            tools,
            custom,
            profiles,
            text: Arc::from(text),
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

    /// The entry of a built-in `engine`; `None` only when the file disables it (then no tool
    /// runs under it).
    pub fn spec(&self, engine: Engine) -> Option<&ToolSpec> {
        self.tools.get(engine.name())
    }

    /// The command tools the file declares, by name.
    pub fn custom_tools(&self) -> &BTreeMap<String, CustomTool> {
        &self.custom
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

    /// Whether the file has the top-level section `name` (e.g. `[web]`, or a `web.x` key).
    pub fn has_section(&self, name: &str) -> bool {
        matches!(self.read_section::<IgnoredAny>(name), Ok(Some(_)))
    }

    /// Deserialize the top-level section `name` (default when absent), e.g. `[policy]`.
    /// An error names the line and column of the key or value at fault.
    pub fn section<T: DeserializeOwned + Default>(&self, name: &str) -> Result<T, CatalogError> {
        Ok(self.read_section(name)?.unwrap_or_default())
    }

    /// Check that the section `name`, when present, deserializes as `T`: call it at start for
    /// every section, so a mistake fails the load instead of the first call that reads it.
    pub fn check_section<T: DeserializeOwned>(&self, name: &str) -> Result<(), CatalogError> {
        self.read_section::<T>(name).map(|_| ())
    }

    fn read_section<T: DeserializeOwned>(&self, name: &str) -> Result<Option<T>, CatalogError> {
        let invalid = |message: String| CatalogError::Invalid {
            origin: self.origin.clone(),
            message,
        };
        let de =
            toml::Deserializer::parse(&self.text).map_err(|e| invalid(located(&self.text, &e)))?;
        Only::<T> {
            name,
            _t: PhantomData,
        }
        .deserialize(de)
        .map_err(|e| {
            let (place, message) = split_located(&self.text, &e);
            invalid(format!("{place}[{name}]: {message}"))
        })
    }
}

/// The built-in table is keyed by engine: every key names one, and every engine has one (no
/// engine silently runs with default limits).
fn check_builtin(base: &CatalogFile) -> Result<(), CatalogError> {
    let invalid = |message: String| CatalogError::Invalid {
        origin: "built-in".into(),
        message,
    };
    for name in base.tools.keys() {
        if Engine::builtin(name.get_ref()).is_none() {
            return Err(invalid(format!(
                "[tools.{}] names no engine; add its variant to toolyard_core::Engine",
                name.get_ref()
            )));
        }
    }
    for engine in Engine::BUILTIN {
        if !base.tools.keys().any(|k| k.get_ref() == engine.name()) {
            return Err(invalid(format!(
                "engine `{engine}` has no [tools.{engine}] entry; add one to default_catalog.toml"
            )));
        }
    }
    Ok(())
}

/// A file's own command tool from its entry; the error says what is wrong with it.
fn custom_tool(name: &str, e: &ToolEntry) -> Result<CustomTool, String> {
    if crate::engine::Engine::builtin(name).is_some() {
        return Err(format!("`{name}` is a built-in tool; choose another name"));
    }
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(format!(
            "a tool's name is letters, digits, `_` and `-` (what every client accepts); `{name}` \
             is not"
        ));
    }
    let description = e
        .description
        .clone()
        .filter(|d| !d.trim().is_empty())
        .ok_or(
            "a tool with a `command` needs a `description`: the model reads it to choose the tool",
        )?;
    let mut parameters = match &e.parameters {
        None => serde_json::json!({"type": "object", "properties": {}}),
        Some(p) => serde_json::to_value(p.get_ref())
            .map_err(|err| format!("`parameters` is not a JSON Schema: {err}"))?,
    };
    let Some(schema) = parameters.as_object_mut() else {
        return Err("`parameters` must be a table: a JSON Schema of type \"object\"".into());
    };
    if schema.get("type").and_then(serde_json::Value::as_str) != Some("object") {
        return Err(
            "`parameters` must have type = \"object\" (the arguments are one JSON object)".into(),
        );
    }
    schema
        .entry("properties")
        .or_insert_with(|| serde_json::json!({}));
    schema
        .entry("additionalProperties")
        .or_insert(serde_json::Value::Bool(false));
    crate::ArgValidator::new(&parameters)
        .map_err(|err| format!("`parameters` is not a valid JSON Schema: {err}"))?;
    let props = parameters["properties"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let argv = e
        .command
        .as_ref()
        .map(|c| c.get_ref().as_slice())
        .unwrap_or_default();
    if argv.is_empty() {
        return Err("`command` is empty; give the program and its arguments, e.g. [\"ruff\", \"check\", \"{path}\"]".into());
    }
    let mut command = Vec::with_capacity(argv.len());
    for (i, part) in argv.iter().enumerate() {
        let part = part.get_ref();
        match placeholder(part) {
            Some(param) => {
                if i == 0 {
                    return Err(format!(
                        "`command`'s first element is the program; it cannot be the placeholder `{part}`"
                    ));
                }
                let Some(prop) = props.get(param) else {
                    return Err(format!(
                        "`command` uses `{{{param}}}`, which `parameters` does not declare; add it \
                         under properties, or use one of: {}",
                        props.keys().cloned().collect::<Vec<_>>().join(", ")
                    ));
                };
                let scalar = prop
                    .get("type")
                    .and_then(serde_json::Value::as_str)
                    .is_some_and(|t| matches!(t, "string" | "integer" | "number" | "boolean"));
                if !scalar {
                    return Err(format!(
                        "parameter `{param}` fills one argument of the command, so its type must \
                         be string, integer, number or boolean"
                    ));
                }
                command.push(ArgvPart::Param(param.to_string()));
            }
            None => {
                if let Some(inner) = embedded_placeholder(part) {
                    return Err(format!(
                        "`command` element \"{part}\" has `{{{inner}}}` inside it: a placeholder \
                         must be a whole element (its value is one argument, never spliced into \
                         text); split it, e.g. [\"--flag\", \"{{{inner}}}\"]"
                    ));
                }
                command.push(ArgvPart::Literal(part.clone()));
            }
        }
    }
    Ok(CustomTool {
        name: name.to_string(),
        description,
        command,
        parameters,
    })
}

/// `name` when `part` is exactly `{name}` (a placeholder).
fn placeholder(part: &str) -> Option<&str> {
    part.strip_prefix('{')
        .and_then(|p| p.strip_suffix('}'))
        .filter(|n| is_ident(n))
}

/// A `{name}` inside a larger element, which is refused rather than spliced.
fn embedded_placeholder(part: &str) -> Option<&str> {
    let mut rest = part;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let close = after.find('}')?;
        if is_ident(&after[..close]) {
            return Some(&after[..close]);
        }
        rest = after;
    }
    None
}

fn is_ident(s: &str) -> bool {
    !s.is_empty()
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with(|c: char| c.is_ascii_digit())
}

/// Deserializes the one top-level key `name` of a document as `T`, skipping the others.
struct Only<'a, T> {
    name: &'a str,
    _t: PhantomData<T>,
}

impl<'de, T: Deserialize<'de>> DeserializeSeed<'de> for Only<'_, T> {
    type Value = Option<T>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<T>, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, T: Deserialize<'de>> Visitor<'de> for Only<'_, T> {
    type Value = Option<T>;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a table with a `{}` section", self.name)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<T>, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == self.name {
                found = Some(map.next_value::<T>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// `line L, column C` of byte `offset` in `text` (both from 1, columns in characters).
fn line_col(text: &str, offset: usize) -> String {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    format!("line {line}, column {col}")
}

/// A toml error as `line L, column C: message` (with a suggestion for a misspelt key).
fn located(text: &str, e: &toml::de::Error) -> String {
    let (place, message) = split_located(text, e);
    format!("{place}{message}")
}

fn split_located(text: &str, e: &toml::de::Error) -> (String, String) {
    let place = e
        .span()
        .map(|s| format!("{}: ", line_col(text, s.start)))
        .unwrap_or_default();
    let message = e.message().trim_end().to_string();
    let hint = misspelt(&message);
    (place, format!("{message}{hint}"))
}

/// For serde's "unknown field `x`, expected ..." (or variant), the closest expected name.
fn misspelt(message: &str) -> String {
    if !(message.starts_with("unknown field") || message.starts_with("unknown variant")) {
        return String::new();
    }
    let mut names = message.split('`').skip(1).step_by(2);
    let Some(wrong) = names.next() else {
        return String::new();
    };
    did_you_mean(wrong, names)
}

/// ` (did you mean `x`?)` when one of `candidates` is close to `wrong`, else empty.
fn did_you_mean<'a>(wrong: &str, candidates: impl Iterator<Item = &'a str>) -> String {
    candidates
        .map(|c| (strsim::jaro_winkler(wrong, c), c))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| format!(" (did you mean `{c}`?)"))
        .unwrap_or_default()
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
        // The name itself, not the profile's header.
        assert!(err.contains("line 2, column 23"), "{err}");
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

#[cfg(test)]
mod custom_tests {
    use super::*;

    const LINT: &str = r#"
[tools.lint]
lane = "no-net"
description = "Lint one file"
command = ["ruff", "check", "{path}"]
timeout_ms = 60000
parameters = { type = "object", properties = { path = { type = "string" } }, required = ["path"] }
"#;

    fn err(text: &str) -> String {
        Catalog::parse_over_builtin(text, "c.toml")
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn a_command_tool_is_served_with_its_limits_and_schema() {
        let c = Catalog::parse_over_builtin(LINT, "c.toml").unwrap();
        let spec = c.tool("lint").unwrap();
        assert_eq!(spec.lane, Lane::NoNet);
        assert_eq!(spec.timeout_ms, 60_000);
        let t = &c.custom_tools()["lint"];
        assert_eq!(
            t.command,
            vec![
                ArgvPart::Literal("ruff".into()),
                ArgvPart::Literal("check".into()),
                ArgvPart::Param("path".into())
            ]
        );
        assert_eq!(t.parameters["additionalProperties"], false);
        assert!(c.profile("all").unwrap().contains(&"lint".to_string()));
        let argv = t
            .argv(&serde_json::json!({"path": "a b; rm -rf /"}))
            .unwrap();
        assert_eq!(argv, ["ruff", "check", "a b; rm -rf /"]);
        assert_eq!(
            t.command_line(&serde_json::json!({"path": "it's"}))
                .unwrap(),
            r"ruff check 'it'\''s'"
        );
    }

    #[test]
    fn bad_command_tools_are_refused_at_load() {
        let e = err(&LINT.replace("{path}\"]", "{file}\"]"));
        assert!(
            e.contains("`{file}`") && e.contains("does not declare"),
            "{e}"
        );
        let e = err(&LINT.replace("\"{path}\"", "\"--file={path}\""));
        assert!(e.contains("whole element"), "{e}");
        let e = err(&LINT.replace("[tools.lint]", "[tools.read_file]"));
        assert!(e.contains("built-in tool"), "{e}");
        let e = err(&LINT.replace(
            "type = \"object\", properties",
            "type = \"array\", properties",
        ));
        assert!(e.contains("type = \"object\""), "{e}");
        let e = err(&LINT.replace("{ type = \"string\" }", "{ type = \"bogus\" }"));
        assert!(e.contains("not a valid JSON Schema"), "{e}");
        let e = err(&LINT.replace("description = \"Lint one file\"\n", ""));
        assert!(e.contains("needs a `description`"), "{e}");
        let e = err(&LINT.replace("{ type = \"string\" }", "{ type = \"array\" }"));
        assert!(e.contains("one argument of the command"), "{e}");
        let e = err(&LINT.replace("[\"ruff\", \"check\", \"{path}\"]", "[]"));
        assert!(e.contains("`command` is empty"), "{e}");
        // Where it is: the table's line.
        assert!(err(&LINT.replace("{path}\"]", "{file}\"]")).contains("line 2"));
        // An entry without `command` is still an unknown tool, and says how to declare one.
        let e = err("[tools.lnt]\nlane = \"no-net\"\n");
        assert!(
            e.contains("no tool `lnt`") && e.contains("give it a `command`"),
            "{e}"
        );
    }

    #[test]
    fn literal_braces_stay_literal() {
        let c = Catalog::parse_over_builtin(
            &LINT.replace(
                "[\"ruff\", \"check\", \"{path}\"]",
                "[\"find\", \".\", \"-exec\", \"echo\", \"{}\", \";\"]",
            ),
            "c.toml",
        )
        .unwrap();
        assert!(
            c.custom_tools()["lint"]
                .command
                .contains(&ArgvPart::Literal("{}".into()))
        );
    }
}
