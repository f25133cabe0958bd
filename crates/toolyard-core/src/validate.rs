//! Checking a call's arguments against the tool's advertised JSON Schema before it runs.

use std::any::TypeId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::paths::LocationSegment;
use jsonschema::{Draft, ValidationError, Validator};
use serde_json::Value;

use crate::ToolError;
use crate::sync::lock;

/// The argument through which a call asks for its own time limit, in milliseconds (the
/// validator notes whether a schema takes it; `time_limit` reads it).
pub const TIMEOUT_ARG: &str = "timeout_ms";

/// Longest rendering of a wrong value inside a message; a model sent it, it need not read it back.
const MAX_SHOWN: usize = 80;

/// A tool's input schema, compiled once, that explains every mismatch of a call at once.
pub struct ArgValidator {
    validator: Validator,
    /// `name (required)` or `name`, for the "takes" hint.
    arguments: Vec<String>,
    has_timeout: bool,
}

impl std::fmt::Debug for ArgValidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArgValidator")
            .field("arguments", &self.arguments)
            .finish_non_exhaustive()
    }
}

impl ArgValidator {
    /// Compile `schema` (draft 2020-12; formats are annotations, never reasons to refuse).
    pub fn new(schema: &Value) -> Result<Self, String> {
        let validator = jsonschema::options()
            .with_draft(Draft::Draft202012)
            .should_validate_formats(false)
            .build(schema)
            .map_err(|e| e.to_string())?;
        let required: Vec<&str> = schema["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let props = schema["properties"].as_object();
        let mut arguments: Vec<String> = props
            .map(|p| {
                p.keys()
                    .map(|k| {
                        if required.contains(&k.as_str()) {
                            format!("{k} (required)")
                        } else {
                            k.clone()
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        // Required arguments first: they are the ones a model must not forget.
        arguments.sort_by_key(|a| !a.ends_with("(required)"));
        Ok(Self {
            validator,
            arguments,
            has_timeout: props.is_some_and(|p| p.contains_key(TIMEOUT_ARG)),
        })
    }

    /// Check `args` for `tool` (`null` counts as `{}`); the error lists every problem, each
    /// naming its argument, then what the tool takes.
    pub fn check(&self, tool: &str, args: &Value) -> Result<(), ToolError> {
        let problems = self.problems(args);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(self.refusal(tool, &problems))
        }
    }

    /// Every problem of `args`, one line each, starting with the argument's path.
    pub fn problems(&self, args: &Value) -> Vec<String> {
        let empty = Value::Object(Default::default());
        let args = if args.is_null() { &empty } else { args };
        let mut problems: Vec<String> = Vec::new();
        for e in self.validator.iter_errors(args) {
            problems.extend(describe(&e));
        }
        problems
    }

    /// Whether the tool takes [`TIMEOUT_ARG`], its own time limit (see [`crate::time_limit`]).
    pub fn takes_timeout(&self) -> bool {
        self.has_timeout
    }

    /// The error refusing a call of `tool` for `problems`: all of them, then what it takes.
    pub fn refusal(&self, tool: &str, problems: &[String]) -> ToolError {
        let count = match problems.len() {
            1 => "1 argument is wrong".to_string(),
            n => format!("{n} arguments are wrong"),
        };
        let takes = if self.arguments.is_empty() {
            "no arguments".to_string()
        } else {
            self.arguments.join(", ")
        };
        ToolError::InvalidArguments(format!(
            "`{tool}` was not run: {count}: {}. Fix {} and call again; `{tool}` takes {takes}.",
            problems.join("; "),
            if problems.len() == 1 { "it" } else { "them" },
        ))
    }
}

/// One line per problem in `e`, each starting with the argument's path.
fn describe(e: &ValidationError<'_>) -> Vec<String> {
    let at = path_of(e);
    let join = |name: &str| {
        if at.is_empty() {
            name.to_string()
        } else {
            format!("{at}.{name}")
        }
    };
    let shown = render(e.instance());
    match e.kind() {
        ValidationErrorKind::Required { property } => {
            let name = property
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| property.to_string());
            vec![format!("{}: missing; it is required", join(&name))]
        }
        ValidationErrorKind::AdditionalProperties { unexpected }
        | ValidationErrorKind::UnevaluatedProperties { unexpected } => unexpected
            .iter()
            .map(|u| {
                format!(
                    "{}: not an argument of this tool (check the spelling)",
                    join(u)
                )
            })
            .collect(),
        ValidationErrorKind::Type { kind } => {
            let want = match kind {
                TypeKind::Single(t) => format!("{t}"),
                TypeKind::Multiple(ts) => {
                    // `null` is how an optional argument is spelled; asking for it helps nobody.
                    let ts: Vec<String> = ts
                        .iter()
                        .map(|t| t.to_string())
                        .filter(|t| t != "null")
                        .collect();
                    ts.join(" or ")
                }
            };
            vec![format!("{}{shown} is not of type {want}", prefix(&at))]
        }
        ValidationErrorKind::AnyOf { context } | ValidationErrorKind::OneOfNotValid { context } => {
            let mut allowed = Vec::new();
            if choices(context, &mut allowed) {
                return vec![format!(
                    "{}{shown} is not one of {}",
                    prefix(&at),
                    allowed.join(", ")
                )];
            }
            // Each alternative's first complaint, without repeating the path.
            let lead = prefix(&at);
            let forms: Vec<String> = context
                .iter()
                .filter_map(|branch| branch.first())
                .flat_map(|b| describe(b))
                .map(|m| m.strip_prefix(&lead).map(str::to_string).unwrap_or(m))
                .collect();
            vec![format!(
                "{lead}{shown} matches none of the accepted forms ({})",
                forms.join(" | ")
            )]
        }
        _ => vec![format!("{}{}", prefix(&at), e.masked_with(shown))],
    }
}

/// Whether the alternatives are a choice of constants (an enum, maybe optional); if so, fill
/// `allowed` with them.
fn choices(context: &[Vec<ValidationError<'static>>], allowed: &mut Vec<String>) -> bool {
    context.iter().flatten().all(|e| match e.kind() {
        ValidationErrorKind::Constant { expected_value } => {
            allowed.push(expected_value.to_string());
            true
        }
        ValidationErrorKind::Enum { options } => {
            let Some(options) = options.as_array() else {
                return false;
            };
            allowed.extend(options.iter().map(Value::to_string));
            true
        }
        // `null` is how an optional argument is spelled, not a value to suggest.
        ValidationErrorKind::Type {
            kind: TypeKind::Single(t),
        } => t.to_string() == "null",
        ValidationErrorKind::AnyOf { context } | ValidationErrorKind::OneOfNotValid { context } => {
            choices(context, allowed)
        }
        _ => false,
    })
}

fn prefix(at: &str) -> String {
    if at.is_empty() {
        "arguments: ".into()
    } else {
        format!("{at}: ")
    }
}

/// The instance path as a model writes it: `edits[0].old_string`.
fn path_of(e: &ValidationError<'_>) -> String {
    let mut out = String::new();
    for seg in e.instance_path() {
        match seg {
            LocationSegment::Property(p) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(&p);
            }
            LocationSegment::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// A short JSON rendering of a value.
fn render(v: &Value) -> String {
    let s = v.to_string();
    if s.len() <= MAX_SHOWN {
        return s;
    }
    let mut end = MAX_SHOWN;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &s[..end], s.len())
}

/// The validator of a typed tool's argument type, compiled on first use and shared after.
pub(crate) fn cached(
    key: TypeId,
    schema: impl FnOnce() -> Value,
) -> Result<Arc<ArgValidator>, String> {
    static CACHE: OnceLock<Mutex<HashMap<TypeId, Arc<ArgValidator>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    // A poisoned lock only means another thread panicked mid-insert; the map is still sound.
    let mut map = lock(cache);
    if let Some(v) = map.get(&key) {
        return Ok(v.clone());
    }
    let v = Arc::new(ArgValidator::new(&schema())?);
    map.insert(key, v.clone());
    Ok(v)
}
