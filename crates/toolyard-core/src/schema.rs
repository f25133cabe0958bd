//! Tool definitions and their export to the three formats model APIs take.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::{Annotations, Tool};

/// The JSON Schema (draft 2020-12, self-contained) of `T`, as a tool's `input_schema`.
pub fn schema_of<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft2020_12()
        .with(|s| s.inline_subschemas = true)
        .into_generator();
    let schema = generator.into_root_schema_for::<T>();
    let mut value = schema.to_value();
    if let Value::Object(map) = &mut value {
        // The title is the Rust type's name, which means nothing to a model.
        map.remove("title");
        map.remove("$schema");
        if !map.contains_key("properties") && map.get("type") == Some(&json!("object")) {
            map.insert("properties".into(), Value::Object(Map::new()));
        }
    }
    clean_formats(&mut value);
    value
}

/// The JSON Schema of `T` as a tool's output schema (its `data`): what `T` serializes to
/// (every field it always writes is required, an `Option` one as `[T, "null"]`), inlined,
/// enums as plain `{type, enum}`. It states the shape only, as clients were always given it:
/// no descriptions, and no integer widths (schemars' `format` with its `minimum`/`maximum`).
pub fn output_schema_of<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft2020_12()
        .for_serialize()
        .with(|s| s.inline_subschemas = true)
        .into_generator();
    let mut value = generator.into_root_schema_for::<T>().to_value();
    flatten_enums(&mut value);
    shape_only(&mut value);
    if let Value::Object(map) = &mut value {
        map.remove("$schema");
    }
    value
}

/// Every way `data`, a result's structured data, does not conform to `tool`'s declared output
/// schema (none when it declares none).
pub fn output_problems(tool: &dyn Tool, data: &Value) -> Vec<String> {
    let Some(schema) = tool.output_schema() else {
        return Vec::new();
    };
    match crate::ArgValidator::new(&schema) {
        Ok(v) => v.problems(data),
        Err(e) => vec![format!(
            "{}: its output schema does not compile: {e}",
            tool.name()
        )],
    }
}

/// Drop every `description` and `title`, and each integer width with the range it implies.
fn shape_only(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            for key in ["description", "title"] {
                if map.get(key).is_some_and(Value::is_string) {
                    map.remove(key);
                }
            }
            let width = map
                .get("format")
                .and_then(Value::as_str)
                .is_some_and(|f| f.starts_with("int") || f.starts_with("uint"));
            if width {
                for key in ["format", "minimum", "maximum"] {
                    map.remove(key);
                }
            }
            map.values_mut().for_each(shape_only);
        }
        Value::Array(items) => items.iter_mut().for_each(shape_only),
        _ => {}
    }
}

/// The input schema as clients are given it (`tools/list`, `toolyard tools`): non-standard
/// formats dropped, documented enums flattened ([`flatten_enums`]), and each optional
/// top-level argument marked `"nullable": true`. The last is OpenAPI's keyword, which JSON
/// Schema validators ignore: smolagents (through mcpadapt) ignores `required` and treats every
/// argument without it as required, refusing a call that leaves one out. The arguments are
/// still validated against the tool's own schema, which accepts the same values.
pub fn client_form(schema: &mut Value) {
    clean_formats(schema);
    flatten_enums(schema);
    let required: Vec<Value> = schema
        .get("required")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(Value::Object(props)) = schema.get_mut("properties") {
        for (name, prop) in props.iter_mut() {
            if let Value::Object(p) = prop
                && !required.iter().any(|r| r == name)
            {
                p.entry("nullable").or_insert(Value::Bool(true));
            }
        }
    }
}

/// Rewrite schemars' form of a documented enum, `oneOf: [{const, type, description}...]` (and
/// an optional one's `anyOf: [{oneOf: ...}, {type: null}]`), as a plain `{type, enum}` whose
/// description lists each value's (an optional one: `type: [T, "null"]`, null in `enum`):
/// clients that read only `type` and `enum` cannot read the nested form, and smolagents
/// crashed on its `anyOf` branch without a `type`.
pub fn flatten_enums(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            // This node first: its `anyOf` branch still has the `oneOf` to recognise.
            flatten_enum_here(map);
            map.values_mut().for_each(flatten_enums);
        }
        Value::Array(items) => items.iter_mut().for_each(flatten_enums),
        _ => {}
    }
}

/// [`flatten_enums`] of one schema object, not its children.
fn flatten_enum_here(map: &mut Map<String, Value>) {
    // The documented enum: this schema's own `oneOf` (a required enum), or that of the
    // one branch of an `anyOf` beside `null` (an optional one).
    let nullable = map.contains_key("anyOf");
    let only = match map.get("anyOf") {
        Some(Value::Array(branches)) => {
            let mut inner = branches
                .iter()
                .filter(|b| b.get("type") != Some(&json!("null")));
            match (inner.next(), inner.next()) {
                (Some(only), None) => only.clone(),
                _ => return,
            }
        }
        Some(_) => return,
        None if map.contains_key("oneOf") => Value::Object(map.clone()),
        None => return,
    };
    let Some(Value::Array(values)) = only.get("oneOf") else {
        return;
    };
    let mut consts = Vec::new();
    let mut notes = Vec::new();
    let mut kind = None;
    for v in values {
        let (Some(c), Some(t)) = (v.get("const"), v.get("type")) else {
            return;
        };
        if kind.get_or_insert(t) != &t {
            return;
        }
        if let Some(d) = v.get("description").and_then(Value::as_str) {
            notes.push(format!("`{}`: {d}", c.as_str().unwrap_or(&c.to_string())));
        }
        consts.push(c.clone());
    }
    let Some(kind) = kind.cloned() else {
        return;
    };
    let head = map
        .get("description")
        .or_else(|| only.get("description"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .trim_end()
        .to_string();
    let description = [head, notes.join(" ")]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    map.remove("anyOf");
    map.remove("oneOf");
    // An optional enum still takes null (what the argument validation checks), as every
    // other optional argument's `["string", "null"]` does.
    let kind = if nullable {
        consts.push(Value::Null);
        json!([kind, "null"])
    } else {
        kind
    };
    map.insert("type".into(), kind);
    map.insert("enum".into(), Value::Array(consts));
    if !description.is_empty() {
        map.insert("description".into(), Value::String(description));
    }
}

/// The `format` values JSON Schema 2020-12 defines; schemars adds its own (`uint64`, `int32`,
/// `double`, ...) that strict clients reject as unknown.
const STANDARD_FORMATS: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// Drop every non-standard `format` keyword in `schema` (the integer ranges stay as
/// `minimum` / `maximum`).
pub fn clean_formats(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            // A string value is the keyword; a property *named* format has a schema (an object).
            if map
                .get("format")
                .and_then(Value::as_str)
                .is_some_and(|f| !STANDARD_FORMATS.contains(&f))
            {
                map.remove("format");
            }
            map.values_mut().for_each(clean_formats);
        }
        Value::Array(items) => items.iter_mut().for_each(clean_formats),
        _ => {}
    }
}

/// Everything a model API needs to know about one tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// The tool's name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON Schema of the arguments.
    pub input_schema: Value,
    /// JSON Schema of the structured result (MCP's `structuredContent`): the
    /// [`result_envelope_schema`], or the tool's own data schema when its result is its data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Whether the structured result is the tool's `data` itself (see `Tool::result_is_data`)
    /// rather than the envelope around the text.
    #[serde(default)]
    pub result_is_data: bool,
    /// Behaviour hints.
    pub annotations: Annotations,
    /// The tool's grammar-constrained raw-text form, for the APIs that have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub freeform: Option<Freeform>,
    /// The Anthropic API built-in tool type this tool implements (`text_editor_20250728`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anthropic_type: Option<String>,
}

/// A freeform (raw text, grammar-constrained) form of a tool: OpenAI's custom tools. The model
/// writes the text itself; a client passes it on as the tool's single string argument.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Freeform {
    /// The description the model sees in this form.
    pub description: String,
    /// The grammar's syntax (`lark` or `regex`).
    pub syntax: String,
    /// The grammar.
    pub definition: String,
}

/// The schema of the structured form of every result that is not its own data: the text for the
/// model (`output`, the same text as the content block) beside what programs read.
pub fn result_envelope_schema(data: Option<Value>) -> Value {
    json!({
        "type": "object",
        "properties": {
            "output": {
                "type": "string",
                "description": "The result for the model, exactly as the text content shows it"
            },
            "success": {"type": "boolean"},
            "files_changed": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Workspace-relative paths this call changed"
            },
            "data": data.unwrap_or_else(|| json!({
                "type": "object",
                "description": "Metadata (counts, flags, exit status); never a copy of output"
            })),
            "error": {"type": "string"},
            "error_kind": {"type": "string"}
        },
        "required": ["output", "success", "files_changed"]
    })
}

impl ToolDefinition {
    /// The definition of `tool`, with `description` overriding the tool's own when given.
    pub fn of(tool: &dyn Tool, description: Option<&str>) -> Self {
        let result_is_data = tool.result_is_data() && tool.output_schema().is_some();
        let output_schema = if tool.returns_images() {
            None
        } else if result_is_data {
            tool.output_schema()
        } else {
            Some(result_envelope_schema(tool.output_schema()))
        };
        Self {
            name: tool.name().to_string(),
            description: description.unwrap_or(tool.description()).to_string(),
            input_schema: {
                let mut s = tool.input_schema();
                client_form(&mut s);
                s
            },
            output_schema: output_schema.map(|mut s| {
                clean_formats(&mut s);
                s
            }),
            result_is_data,
            annotations: tool.annotations(),
            freeform: tool.freeform(),
            anthropic_type: tool.anthropic_type().map(str::to_string),
        }
    }

    /// State the catalog's default and ceiling on a `timeout_ms` argument, when the tool has one:
    /// the schema's `maximum` is the ceiling, so a client can check it before calling.
    pub fn with_timeout_limits(mut self, default_ms: u64, max_ms: u64) -> Self {
        if let Some(t) = self
            .input_schema
            .get_mut("properties")
            .and_then(|p| p.get_mut("timeout_ms"))
            .and_then(Value::as_object_mut)
        {
            t.insert("maximum".into(), json!(max_ms));
            let said = t.get("description").and_then(Value::as_str).unwrap_or("");
            let said = said.trim_end_matches('.');
            let sep = if said.is_empty() { "" } else { ". " };
            t.insert(
                "description".into(),
                json!(format!(
                    "{said}{sep}Default {default_ms}, at most {max_ms}."
                )),
            );
        }
        self
    }

    /// OpenAI form: a function tool (`{"type":"function","function":{...}}`), or the custom
    /// tool with its grammar when the tool has a freeform form (one entry per name: the API
    /// refuses two tools of the same name).
    pub fn to_openai(&self) -> Value {
        if let Some(f) = &self.freeform {
            return json!({
                "type": "custom",
                "custom": {
                    "name": self.name,
                    "description": f.description,
                    "format": {
                        "type": "grammar",
                        "grammar": {"syntax": f.syntax, "definition": f.definition}
                    }
                }
            });
        }
        json!({
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.input_schema,
            }
        })
    }

    /// Anthropic tool form (`{"name","description","input_schema"}`), or the schema-less
    /// `{"type","name"}` of a built-in tool the model was trained on.
    pub fn to_anthropic(&self) -> Value {
        if let Some(t) = &self.anthropic_type {
            return json!({"type": t, "name": self.name});
        }
        json!({
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        })
    }

    /// MCP tool form, with annotations and the output schema where there is one.
    pub fn to_mcp(&self) -> Value {
        let mut tool = json!({
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
            "annotations": {
                "readOnlyHint": self.annotations.read_only,
                "destructiveHint": self.annotations.destructive,
                "idempotentHint": self.annotations.idempotent,
                "openWorldHint": self.annotations.open_world,
            }
        });
        if let Some(out) = &self.output_schema {
            tool["outputSchema"] = out.clone();
        }
        tool
    }
}

/// A format that tool definitions can be exported in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaFormat {
    /// OpenAI function tools.
    OpenAi,
    /// Anthropic tools.
    Anthropic,
    /// MCP tools.
    Mcp,
}

impl std::str::FromStr for SchemaFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "openai" => Ok(Self::OpenAi),
            "anthropic" => Ok(Self::Anthropic),
            "mcp" => Ok(Self::Mcp),
            other => Err(format!(
                "unknown format `{other}`; expected openai, anthropic or mcp"
            )),
        }
    }
}

/// Export `defs` as a JSON array in `format`.
pub fn export(defs: &[ToolDefinition], format: SchemaFormat) -> Value {
    Value::Array(
        defs.iter()
            .map(|d| match format {
                SchemaFormat::OpenAi => d.to_openai(),
                SchemaFormat::Anthropic => d.to_anthropic(),
                SchemaFormat::Mcp => d.to_mcp(),
            })
            .collect(),
    )
}
