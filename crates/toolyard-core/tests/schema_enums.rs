//! The schemas clients get: documented enums as plain `{type, enum}` (smolagents crashed on an
//! `anyOf` branch without a `type`), optional arguments marked `nullable`.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use toolyard_core::schema::{client_form, schema_of};

/// How to show.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
enum Mode {
    /// Every line.
    Content,
    /// Only the paths.
    FilesWithMatches,
}

/// Arguments.
#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)]
struct Args {
    /// Optional mode.
    optional: Option<Mode>,
    /// Required mode.
    required: Mode,
}

/// Every property or `anyOf`/`oneOf` branch reachable in `v` without a `type`.
fn untyped(v: &Value, path: &str, out: &mut Vec<String>) {
    if let Some(props) = v.get("properties").and_then(Value::as_object) {
        for (name, p) in props {
            if p.get("type").is_none() {
                out.push(format!("{path}.{name}"));
            }
            untyped(p, &format!("{path}.{name}"), out);
        }
    }
    for key in ["anyOf", "oneOf"] {
        for (i, b) in v
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            if b.get("type").is_none() {
                out.push(format!("{path}/{key}[{i}]"));
            }
            untyped(b, path, out);
        }
    }
}

#[test]
fn optional_and_required_enums_become_type_and_enum() {
    let mut s = schema_of::<Args>();
    client_form(&mut s);
    let props = &s["properties"];
    assert_eq!(props["required"]["type"], json!("string"));
    assert_eq!(
        props["required"]["enum"],
        json!(["content", "files_with_matches"])
    );
    // Optional: null still allowed, as for every other optional argument.
    assert_eq!(props["optional"]["type"], json!(["string", "null"]));
    assert_eq!(
        props["optional"]["enum"],
        json!(["content", "files_with_matches", null])
    );
    for name in ["optional", "required"] {
        let p = &props[name];
        assert!(
            p.get("anyOf").is_none() && p.get("oneOf").is_none(),
            "{name}: {p}"
        );
        let d = p["description"].as_str().unwrap_or_default();
        assert!(
            d.contains("`content`: Every line.")
                && d.contains("`files_with_matches`: Only the paths."),
            "{name}: the values' documentation is kept: {d}"
        );
    }
    assert!(
        props["optional"]["description"]
            .as_str()
            .is_some_and(|d| d.starts_with("Optional mode."))
    );
    // Optional arguments say so where smolagents looks (it ignores `required`).
    assert_eq!(props["optional"]["nullable"], json!(true));
    assert!(props["required"].get("nullable").is_none());
    let mut missing = Vec::new();
    untyped(&s, "args", &mut missing);
    assert!(missing.is_empty(), "schemas without a type: {missing:?}");
}
