//! The artifact tools of seed 000: `create_plan`, `create_spec`, `create_phase`. Their output is
//! structured (typed arguments, checked), never parsed from Markdown.
//!
//! Artifacts live in the workspace under [`ARTIFACTS_DIR`]: `plans/<name>.json`,
//! `specs/<name>.json`, `phases/<name>.json`, each with a rendered `<name>.md` beside it. The
//! JSON is `{"version": 1, "kind", "name", "artifact": <the tool's arguments>}`. Names are
//! stable: a spec or phase is named by its `name` field, a plan by the slug of its title, and
//! creating one again with the same name replaces it.

use std::marker::PhantomData;
use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Value, json};
use toolyard_core::{
    Annotations, Tool, ToolContext, ToolError, ToolInfo, ToolResult, Typed, TypedTool,
};
use toolyard_workspace::{Expect, Workspace};

use crate::ToolEnv;

/// Where artifacts are stored, relative to the workspace root.
pub const ARTIFACTS_DIR: &str = ".toolyard/artifacts";

/// The JSON Schema pattern of an artifact name.
const NAME_PATTERN: &str = "^[a-z0-9][a-z0-9_-]{0,63}$";

/// A plan: an overview and the specs it breaks into (seed 000's `create_plan`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// The plan's title; its slug names the plan's files.
    pub title: String,
    /// What the plan achieves and how.
    pub overview: String,
    /// The specs, in order.
    #[schemars(length(min = 1))]
    pub specs: Vec<PlanSpec>,
}

/// One spec of a plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanSpec {
    /// A file-safe name: lowercase letters, digits, `-` and `_`.
    #[schemars(regex(pattern = NAME_PATTERN))]
    pub name: String,
    /// The spec's title.
    pub title: String,
    /// What the spec covers.
    pub description: String,
    /// Names of specs of this plan that must be done first.
    #[serde(default)]
    pub dependencies: Vec<String>,
}

/// A spec: an overview and its 3 to 7 phases (seed 000's `create_spec`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// A file-safe name: lowercase letters, digits, `-` and `_`.
    #[schemars(regex(pattern = NAME_PATTERN))]
    pub name: String,
    /// The spec's title.
    pub title: String,
    /// What the spec builds and why.
    pub overview: String,
    /// The phases, in order: 3 to 7 of them.
    #[schemars(length(min = 3, max = 7))]
    pub phases: Vec<SpecPhase>,
}

/// One phase of a spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SpecPhase {
    /// A file-safe name: lowercase letters, digits, `-` and `_`.
    #[schemars(regex(pattern = NAME_PATTERN))]
    pub name: String,
    /// The phase's title.
    pub title: String,
    /// What the phase does.
    pub description: String,
    /// How to check the phase is done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation: Option<String>,
}

/// A phase: an objective, its tasks and the command that validates it (seed 000's
/// `create_phase`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Phase {
    /// A file-safe name: lowercase letters, digits, `-` and `_`.
    #[schemars(regex(pattern = NAME_PATTERN))]
    pub name: String,
    /// The phase's title.
    pub title: String,
    /// What the phase achieves.
    pub objective: String,
    /// The tasks, in order.
    #[schemars(length(min = 1))]
    pub tasks: Vec<PhaseTask>,
    /// The shell command that proves the phase is done (e.g. `cargo test -p foo`).
    #[schemars(length(min = 1))]
    pub validation_command: String,
}

/// One task of a phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PhaseTask {
    /// What to do.
    pub description: String,
    /// The workspace-relative file it touches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// What happens to the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<TaskAction>,
}

/// What a task does to its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TaskAction {
    /// A new file.
    Create,
    /// An existing file changes.
    Modify,
    /// The file goes away.
    Delete,
}

impl TaskAction {
    fn as_str(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Modify => "modify",
            Self::Delete => "delete",
        }
    }
}

impl<'de> Deserialize<'de> for TaskAction {
    // Hand-written so the message reads as a sentence a model can act on.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        match s.trim().to_ascii_lowercase().as_str() {
            "create" => Ok(Self::Create),
            "modify" => Ok(Self::Modify),
            "delete" => Ok(Self::Delete),
            _ => Err(serde::de::Error::custom(format!(
                "expected create, modify or delete, got {s:?}"
            ))),
        }
    }
}

/// The three kinds of artifact.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum ArtifactKind {
    /// A plan (`create_plan`).
    Plan,
    /// A spec (`create_spec`).
    Spec,
    /// A phase (`create_phase`).
    Phase,
}

impl ArtifactKind {
    /// Every kind, in listing order.
    pub const ALL: [ArtifactKind; 3] = [Self::Plan, Self::Spec, Self::Phase];

    /// The kind's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Plan => "plan",
            Self::Spec => "spec",
            Self::Phase => "phase",
        }
    }

    /// Its folder under [`ARTIFACTS_DIR`].
    pub fn dir(self) -> &'static str {
        match self {
            Self::Plan => "plans",
            Self::Spec => "specs",
            Self::Phase => "phases",
        }
    }

    /// The workspace-relative paths of the JSON and Markdown files of artifact `name`.
    pub fn paths(self, name: &str) -> (String, String) {
        let base = format!("{ARTIFACTS_DIR}/{}/{name}", self.dir());
        (format!("{base}.json"), format!("{base}.md"))
    }
}

/// An artifact type: its kind, name, checks and rendering.
pub trait Artifact: Serialize + DeserializeOwned + JsonSchema + Send + Sync + 'static {
    /// Which kind it is.
    const KIND: ArtifactKind;
    /// Its stable name (the file stem).
    fn artifact_name(&self) -> Result<String, ToolError>;
    /// Every violation of seed 000's rules, each naming its field.
    fn problems(&self) -> Vec<String>;
    /// A Markdown rendering for a person.
    fn to_markdown(&self) -> String;
    /// Its title.
    fn title(&self) -> &str;
    /// A short count of its parts ("4 phases").
    fn parts(&self) -> String;
}

/// Check `a`: `Ok` or one error listing every problem.
pub fn validate<A: Artifact>(a: &A) -> Result<(), ToolError> {
    let problems = a.problems();
    match problems.len() {
        0 => Ok(()),
        1 => Err(ToolError::InvalidArguments(problems.join(""))),
        n => Err(ToolError::InvalidArguments(format!(
            "{n} problems: {}",
            problems.join("; ")
        ))),
    }
}

/// The file-safe slug of `title` (lowercase ASCII letters and digits joined by `-`, at most
/// 64 characters).
pub fn slug(title: &str) -> String {
    let mut out = String::new();
    for c in title.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    let mut out: String = out.trim_end_matches('-').chars().take(64).collect();
    while out.ends_with('-') {
        out.pop();
    }
    out
}

fn check_name(field: &str, name: &str, problems: &mut Vec<String>) {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric());
    if !ok {
        let suggestion = slug(name);
        let hint = if suggestion.is_empty() || suggestion == name {
            String::new()
        } else {
            format!(", e.g. {suggestion:?}")
        };
        problems.push(format!(
            "{field}: {name:?} is not a safe file name; use 1 to 64 lowercase letters, digits, '-' and '_', starting with a letter or digit{hint}"
        ));
    }
}

fn check_text(field: &str, text: &str, problems: &mut Vec<String>) {
    if text.trim().is_empty() {
        problems.push(format!("{field}: must not be empty"));
    }
}

fn check_unique<'a>(list: &str, names: impl Iterator<Item = &'a str>, problems: &mut Vec<String>) {
    let mut seen = std::collections::BTreeSet::new();
    for (i, n) in names.enumerate() {
        if !seen.insert(n) {
            problems.push(format!(
                "{list}[{i}].name: {n:?} is used twice; names must be unique"
            ));
        }
    }
}

impl Artifact for Plan {
    const KIND: ArtifactKind = ArtifactKind::Plan;

    fn artifact_name(&self) -> Result<String, ToolError> {
        let s = slug(&self.title);
        if s.is_empty() {
            return Err(ToolError::InvalidArguments(
                "title: needs at least one ASCII letter or digit, since its slug names the plan's files".into(),
            ));
        }
        Ok(s)
    }

    fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        check_text("title", &self.title, &mut p);
        if !self.title.trim().is_empty() && slug(&self.title).is_empty() {
            p.push("title: needs at least one ASCII letter or digit, since its slug names the plan's files".into());
        }
        check_text("overview", &self.overview, &mut p);
        if self.specs.is_empty() {
            p.push("specs: a plan has at least one spec, got 0".into());
        }
        let names: Vec<&str> = self.specs.iter().map(|s| s.name.as_str()).collect();
        for (i, s) in self.specs.iter().enumerate() {
            check_name(&format!("specs[{i}].name"), &s.name, &mut p);
            check_text(&format!("specs[{i}].title"), &s.title, &mut p);
            check_text(&format!("specs[{i}].description"), &s.description, &mut p);
            for (j, d) in s.dependencies.iter().enumerate() {
                if d == &s.name {
                    p.push(format!(
                        "specs[{i}].dependencies[{j}]: a spec cannot depend on itself"
                    ));
                } else if !names.contains(&d.as_str()) {
                    p.push(format!(
                        "specs[{i}].dependencies[{j}]: {d:?} is not a spec of this plan; known: {}",
                        names.join(", ")
                    ));
                }
            }
        }
        check_unique("specs", names.iter().copied(), &mut p);
        p
    }

    fn to_markdown(&self) -> String {
        let mut md = format!(
            "# Plan: {}\n\n{}\n\n## Specs\n",
            self.title.trim(),
            self.overview.trim()
        );
        for (i, s) in self.specs.iter().enumerate() {
            md.push_str(&format!(
                "\n### {}. {} (`{}`)\n\n{}\n",
                i + 1,
                s.title.trim(),
                s.name,
                s.description.trim()
            ));
            if !s.dependencies.is_empty() {
                let deps: Vec<String> = s.dependencies.iter().map(|d| format!("`{d}`")).collect();
                md.push_str(&format!("\nDepends on: {}\n", deps.join(", ")));
            }
        }
        md
    }

    fn title(&self) -> &str {
        &self.title
    }

    fn parts(&self) -> String {
        plural(self.specs.len(), "spec")
    }
}

impl Artifact for Spec {
    const KIND: ArtifactKind = ArtifactKind::Spec;

    fn artifact_name(&self) -> Result<String, ToolError> {
        Ok(self.name.clone())
    }

    fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        check_name("name", &self.name, &mut p);
        check_text("title", &self.title, &mut p);
        check_text("overview", &self.overview, &mut p);
        let n = self.phases.len();
        if !(3..=7).contains(&n) {
            p.push(format!("phases: a spec has 3 to 7 phases, got {n}"));
        }
        for (i, ph) in self.phases.iter().enumerate() {
            check_name(&format!("phases[{i}].name"), &ph.name, &mut p);
            check_text(&format!("phases[{i}].title"), &ph.title, &mut p);
            check_text(&format!("phases[{i}].description"), &ph.description, &mut p);
            if let Some(v) = &ph.validation
                && v.trim().is_empty()
            {
                p.push(format!(
                    "phases[{i}].validation: is empty; leave it out or say how to check the phase"
                ));
            }
        }
        check_unique(
            "phases",
            self.phases.iter().map(|p| p.name.as_str()),
            &mut p,
        );
        p
    }

    fn to_markdown(&self) -> String {
        let mut md = format!(
            "# Spec: {}\n\nName: `{}`\n\n## Overview\n\n{}\n\n## Phases\n",
            self.title.trim(),
            self.name,
            self.overview.trim()
        );
        for (i, ph) in self.phases.iter().enumerate() {
            md.push_str(&format!(
                "\n### Phase {}: {} (`{}`)\n\n{}\n",
                i + 1,
                ph.title.trim(),
                ph.name,
                ph.description.trim()
            ));
            if let Some(v) = &ph.validation {
                md.push_str(&format!("\n**Validation:** {}\n", v.trim()));
            }
        }
        md
    }

    fn title(&self) -> &str {
        &self.title
    }

    fn parts(&self) -> String {
        plural(self.phases.len(), "phase")
    }
}

impl Artifact for Phase {
    const KIND: ArtifactKind = ArtifactKind::Phase;

    fn artifact_name(&self) -> Result<String, ToolError> {
        Ok(self.name.clone())
    }

    fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        check_name("name", &self.name, &mut p);
        check_text("title", &self.title, &mut p);
        check_text("objective", &self.objective, &mut p);
        if self.tasks.is_empty() {
            p.push("tasks: a phase has at least one task, got 0".into());
        }
        for (i, t) in self.tasks.iter().enumerate() {
            check_text(&format!("tasks[{i}].description"), &t.description, &mut p);
            if let Some(f) = &t.file {
                let escapes = f.starts_with('/') || f.split(['/', '\\']).any(|c| c == "..");
                if f.trim().is_empty() {
                    p.push(format!(
                        "tasks[{i}].file: is empty; leave it out or name a file"
                    ));
                } else if escapes {
                    p.push(format!(
                        "tasks[{i}].file: {f:?} must be a path relative to the workspace, without '..'"
                    ));
                }
            }
        }
        if self.validation_command.trim().is_empty() {
            p.push(
                "validation_command: must not be empty; give the command that proves the phase is done (e.g. \"cargo test\")".into(),
            );
        }
        p
    }

    fn to_markdown(&self) -> String {
        let mut md = format!(
            "# Phase: {}\n\nName: `{}`\n\n## Objective\n\n{}\n\n## Tasks\n\n",
            self.title.trim(),
            self.name,
            self.objective.trim()
        );
        for (i, t) in self.tasks.iter().enumerate() {
            let mut line = format!("{}. ", i + 1);
            if let Some(a) = t.action {
                line.push_str(&format!("**{}** ", a.as_str()));
            }
            if let Some(f) = &t.file {
                line.push_str(&format!("`{f}`: "));
            }
            line.push_str(t.description.trim());
            md.push_str(&line);
            md.push('\n');
        }
        // A fence longer than any backtick run inside keeps the command intact.
        let fence = "`".repeat(longest_backtick_run(&self.validation_command).max(2) + 1);
        md.push_str(&format!(
            "\n## Validation\n\n{fence}sh\n{}\n{fence}\n",
            self.validation_command.trim()
        ));
        md
    }

    fn title(&self) -> &str {
        &self.title
    }

    fn parts(&self) -> String {
        plural(self.tasks.len(), "task")
    }
}

fn longest_backtick_run(s: &str) -> usize {
    s.split(|c| c != '`').map(str::len).max().unwrap_or(0)
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// The stored JSON of artifact `a` named `name`.
pub fn to_stored_json<A: Artifact>(a: &A, name: &str) -> Result<Value, ToolError> {
    Ok(json!({
        "version": 1,
        "kind": A::KIND.as_str(),
        "name": name,
        "artifact": serde_json::to_value(a)?,
    }))
}

/// Read back the artifact of stored JSON `value`.
pub fn from_stored_json<A: Artifact>(value: &Value) -> Result<A, ToolError> {
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or("");
    if kind != A::KIND.as_str() {
        return Err(ToolError::Serialization(format!(
            "expected a stored {}, found kind {kind:?}",
            A::KIND.as_str()
        )));
    }
    let inner = value.get("artifact").ok_or_else(|| {
        ToolError::Serialization("stored artifact has no `artifact` field".into())
    })?;
    Ok(serde_json::from_value(inner.clone())?)
}

/// Check `a`, then write its JSON and Markdown under the workspace; returns the two
/// workspace-relative paths and whether the artifact is new.
pub fn store<A: Artifact>(ws: &Workspace, a: &A) -> Result<(String, String, bool), ToolError> {
    validate(a)?;
    let name = a.artifact_name()?;
    let (json_path, md_path) = A::KIND.paths(&name);
    let mut json_text = serde_json::to_string_pretty(&to_stored_json(a, &name)?)?;
    json_text.push('\n');
    let json_rel = ws.relative(&json_path, ws.root())?;
    let md_rel = ws.relative(&md_path, ws.root())?;
    let outcome = ws.write_atomic(&json_rel, json_text.as_bytes(), &Expect::Any)?;
    ws.write_atomic(&md_rel, a.to_markdown().as_bytes(), &Expect::Any)?;
    Ok((json_path, md_path, outcome.created))
}

/// One stored artifact, as `toolyard artifacts` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ArtifactInfo {
    /// Plan, spec or phase.
    pub kind: ArtifactKind,
    /// Its name (the file stem).
    pub name: String,
    /// Its title ("" when the file could not be read).
    pub title: String,
    /// A short count of its parts ("4 phases").
    pub parts: String,
    /// The JSON file, relative to the workspace root.
    pub path: String,
    /// The Markdown file, relative to the workspace root.
    pub markdown_path: String,
    /// Why the file could not be read, when it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// Every artifact stored in the workspace, plans first, then specs, then phases, by name.
pub fn list_artifacts(ws: &Workspace) -> Result<Vec<ArtifactInfo>, ToolError> {
    let mut out = Vec::new();
    for kind in ArtifactKind::ALL {
        let dir_path = format!("{ARTIFACTS_DIR}/{}", kind.dir());
        let rel = ws.relative(&dir_path, ws.root())?;
        if ws.metadata(&rel)?.is_none() {
            continue;
        }
        let dir = ws.open_dir(&rel)?;
        let mut names = Vec::new();
        for entry in dir.entries().map_err(|e| ws.map_err(e, &rel))? {
            let entry = entry.map_err(|e| ws.map_err(e, &rel))?;
            let file_name = entry.file_name().to_string_lossy().into_owned();
            if let Some(stem) = file_name.strip_suffix(".json")
                && !stem.starts_with('.')
            {
                names.push(stem.to_string());
            }
        }
        names.sort();
        for name in names {
            let (path, markdown_path) = kind.paths(&name);
            let info = match read_info(ws, kind, &path) {
                Ok((title, parts)) => ArtifactInfo {
                    kind,
                    name,
                    title,
                    parts,
                    path,
                    markdown_path,
                    problem: None,
                },
                Err(e) => ArtifactInfo {
                    kind,
                    name,
                    title: String::new(),
                    parts: String::new(),
                    path,
                    markdown_path,
                    problem: Some(e.to_string()),
                },
            };
            out.push(info);
        }
    }
    Ok(out)
}

fn read_info(
    ws: &Workspace,
    kind: ArtifactKind,
    path: &str,
) -> Result<(String, String), ToolError> {
    let rel = ws.relative(path, ws.root())?;
    let value: Value = serde_json::from_slice(&ws.read(&rel)?)?;
    fn info<A: Artifact>(v: &Value) -> Result<(String, String), ToolError> {
        let a: A = from_stored_json(v)?;
        Ok((a.title().to_string(), a.parts()))
    }
    match kind {
        ArtifactKind::Plan => info::<Plan>(&value),
        ArtifactKind::Spec => info::<Spec>(&value),
        ArtifactKind::Phase => info::<Phase>(&value),
    }
}

/// The tool that creates artifacts of type `A`.
pub struct CreateArtifact<A> {
    workspace: Arc<Workspace>,
    _kind: PhantomData<fn() -> A>,
}

impl<A> CreateArtifact<A> {
    /// A tool writing into `workspace`.
    pub fn new(workspace: Arc<Workspace>) -> Self {
        Self {
            workspace,
            _kind: PhantomData,
        }
    }
}

#[async_trait]
impl<A: Artifact> TypedTool for CreateArtifact<A> {
    type Args = A;

    fn info(&self) -> ToolInfo<'_> {
        let name = match A::KIND {
            ArtifactKind::Plan => "create_plan",
            ArtifactKind::Spec => "create_spec",
            ArtifactKind::Phase => "create_phase",
        };
        let description = match A::KIND {
            ArtifactKind::Plan => {
                "Create a plan with its specs (structured output, stored as JSON and Markdown under .toolyard/artifacts/plans). The title's slug names it; creating it again replaces it."
            }
            ArtifactKind::Spec => {
                "Create a spec with 3 to 7 phases (structured output, stored as JSON and Markdown under .toolyard/artifacts/specs). Its name names it; creating it again replaces it."
            }
            ArtifactKind::Phase => {
                "Create a phase with its tasks (action: create, modify or delete) and a validation_command (structured output, stored under .toolyard/artifacts/phases). Its name names it."
            }
        };
        let annotations = Annotations {
            read_only: false,
            destructive: true,
            idempotent: true,
            open_world: false,
        };
        ToolInfo::new(name, description, annotations)
            .output::<StoredData>()
            // `store` validates every schema rule, all problems at once, in better words.
            .checks_own_args()
    }

    async fn run(&self, args: A, _ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let workspace = self.workspace.clone();
        let artifact = serde_json::to_value(&args)?;
        let parts = args.parts();
        let (name, (path, md_path, created)) = tokio::task::spawn_blocking(move || {
            let name = args.artifact_name()?;
            store(&workspace, &args).map(|r| (name, r))
        })
        .await
        .map_err(|e| ToolError::Io(format!("storing the artifact failed: {e}")))??;
        let kind = A::KIND.as_str();
        let verb = if created { "Created" } else { "Replaced" };
        let output = format!("{verb} {kind} `{name}` ({parts}): {path}, rendered in {md_path}");
        let data = StoredData {
            kind: A::KIND,
            name,
            path: path.clone(),
            markdown_path: md_path.clone(),
            created,
            artifact,
        };
        Ok(ToolResult::ok(output)
            .with_data(serde_json::to_value(data)?)
            .with_files_changed(vec![path, md_path]))
    }
}

/// The structured data of create_plan, create_spec and create_phase; their output schema is
/// derived from it.
#[derive(Debug, Serialize, JsonSchema)]
struct StoredData {
    kind: ArtifactKind,
    name: String,
    path: String,
    markdown_path: String,
    created: bool,
    #[schemars(schema_with = "any_object")]
    artifact: Value,
}

/// The schema of a JSON object of any shape (the artifact as stored).
fn any_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "object"})
}

/// create_plan, create_spec and create_phase for `env`'s workspace.
pub fn tools(env: Arc<ToolEnv>) -> Vec<Arc<dyn Tool>> {
    let ws = &env.workspace;
    vec![
        Arc::new(Typed(CreateArtifact::<Plan>::new(ws.clone()))),
        Arc::new(Typed(CreateArtifact::<Spec>::new(ws.clone()))),
        Arc::new(Typed(CreateArtifact::<Phase>::new(ws.clone()))),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_file_safe() {
        assert_eq!(slug("Add OAuth Login!"), "add-oauth-login");
        assert_eq!(slug("  --Ünïcode  title--"), "n-code-title");
        assert_eq!(slug("日本語"), "");
        assert!(slug(&"a ".repeat(100)).len() <= 64);
    }
}
