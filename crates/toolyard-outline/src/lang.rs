//! The languages, and what counts as a symbol in each grammar's tree.

use tree_sitter::Node;

use crate::{Symbol, one_line, text_of};

/// A language with a grammar here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Lang {
    /// Rust.
    Rust,
    /// Python.
    Python,
    /// JavaScript (and JSX).
    JavaScript,
    /// TypeScript.
    TypeScript,
    /// TypeScript with JSX.
    Tsx,
    /// Go.
    Go,
    /// C (and its headers).
    C,
    /// Java.
    Java,
}

/// Each language's name and file extensions: the one table.
const TABLE: &[(Lang, &str, &[&str])] = &[
    (Lang::Rust, "rust", &["rs"]),
    (Lang::Python, "python", &["py", "pyi"]),
    (Lang::JavaScript, "javascript", &["js", "mjs", "cjs", "jsx"]),
    (Lang::TypeScript, "typescript", &["ts", "mts", "cts"]),
    (Lang::Tsx, "tsx", &["tsx"]),
    (Lang::Go, "go", &["go"]),
    (Lang::C, "c", &["c", "h"]),
    (Lang::Java, "java", &["java"]),
];

impl Lang {
    /// The language of a path, by its extension.
    pub fn of_path(path: &str) -> Option<Lang> {
        let ext = std::path::Path::new(path).extension()?.to_str()?;
        TABLE
            .iter()
            .find(|(_, _, exts)| exts.contains(&ext))
            .map(|(l, _, _)| *l)
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        TABLE
            .iter()
            .find(|(l, _, _)| *l == self)
            .map_or("?", |(_, n, _)| n)
    }

    /// Every extension a grammar here covers (`.rs, .py, ...`), for messages.
    pub fn all_extensions() -> String {
        TABLE
            .iter()
            .flat_map(|(_, _, exts)| exts.iter())
            .map(|e| format!(".{e}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    pub(crate) fn grammar(self) -> tree_sitter::Language {
        match self {
            Lang::Rust => tree_sitter_rust::LANGUAGE.into(),
            Lang::Python => tree_sitter_python::LANGUAGE.into(),
            Lang::JavaScript => tree_sitter_javascript::LANGUAGE.into(),
            Lang::TypeScript => tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
            Lang::Tsx => tree_sitter_typescript::LANGUAGE_TSX.into(),
            Lang::Go => tree_sitter_go::LANGUAGE.into(),
            Lang::C => tree_sitter_c::LANGUAGE.into(),
            Lang::Java => tree_sitter_java::LANGUAGE.into(),
        }
    }
}

/// Where a node stands: at the top of the file, or inside a type (its functions are methods).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Top,
    InType,
    /// Inside a module or namespace (functions stay functions; no variables listed).
    Nested,
}

/// A symbol found at a node, before its children are walked.
struct Def<'t> {
    kind: &'static str,
    name: String,
    /// The node whose lines are the symbol's.
    range: Node<'t>,
    /// Where its signature starts (a byte offset).
    sig_from: usize,
    /// Where its signature ends (the start of its body, or the end of its first line).
    sig_to: usize,
    /// The node whose named children are its members, and where they stand.
    members: Option<(Node<'t>, Place)>,
}

/// The symbols under `root`.
pub(crate) fn symbols(lang: Lang, root: Node<'_>, src: &str) -> Vec<Symbol> {
    let mut out = Vec::new();
    walk(lang, root, src, Place::Top, &mut out);
    out
}

fn walk(lang: Lang, parent: Node<'_>, src: &str, place: Place, out: &mut Vec<Symbol>) {
    let mut cursor = parent.walk();
    let children: Vec<Node<'_>> = parent.named_children(&mut cursor).collect();
    for node in children {
        let defs = defs_at(lang, node, src, place);
        if defs.is_empty() {
            if transparent(lang, node.kind()) {
                walk(lang, node, src, place, out);
            }
            continue;
        }
        for d in defs {
            let mut children = Vec::new();
            if let Some((members, p)) = d.members {
                walk(lang, members, src, p, &mut children);
            }
            out.push(Symbol {
                kind: d.kind,
                name: d.name,
                start_line: d.range.start_position().row + 1,
                end_line: end_line(d.range),
                signature: one_line(src, d.sig_from, d.sig_to),
                children,
            });
        }
    }
}

/// The last line of a node (a node ending at a line's column 0 ends on the line before).
fn end_line(n: Node<'_>) -> usize {
    let end = n.end_position();
    if end.column == 0 && end.row > n.start_position().row {
        end.row
    } else {
        end.row + 1
    }
}

/// Nodes that hold symbols without being one (`export ...`, `#ifndef` guards).
fn transparent(lang: Lang, kind: &str) -> bool {
    match lang {
        Lang::JavaScript | Lang::TypeScript | Lang::Tsx => {
            matches!(kind, "export_statement" | "ambient_declaration")
        }
        Lang::C => matches!(
            kind,
            "preproc_ifdef"
                | "preproc_if"
                | "preproc_else"
                | "preproc_elif"
                | "preproc_elifdef"
                | "linkage_specification"
                | "declaration_list"
        ),
        Lang::Go => matches!(kind, "var_spec_list" | "const_spec_list"),
        Lang::Java => kind == "enum_body_declarations",
        Lang::Rust | Lang::Python => false,
    }
}

fn field<'t>(n: Node<'t>, name: &str) -> Option<Node<'t>> {
    n.child_by_field_name(name)
}

fn name_of(n: Node<'_>, src: &str) -> Option<String> {
    field(n, "name")
        .and_then(|f| text_of(f, src))
        .map(str::to_string)
}

/// Where the signature of `n` ends: at its body when the body is a braced block (or a Python
/// block), else at the end of its first line.
fn sig_end(lang: Lang, n: Node<'_>, body: Option<Node<'_>>, src: &str) -> usize {
    if let Some(b) = body {
        let braced = src
            .get(b.start_byte()..)
            .is_some_and(|t| t.starts_with('{'));
        if braced || lang == Lang::Python {
            return b.start_byte();
        }
    }
    let text = text_of(n, src).unwrap_or_default();
    n.start_byte() + text.find('\n').unwrap_or(text.len())
}

/// A plain symbol: named by its `name` field, its signature up to its `body` field.
fn simple<'t>(
    lang: Lang,
    n: Node<'t>,
    src: &str,
    kind: &'static str,
    members: Option<Place>,
) -> Option<Def<'t>> {
    let name = name_of(n, src)?;
    let body = field(n, "body");
    Some(Def {
        kind,
        name,
        range: n,
        sig_from: n.start_byte(),
        sig_to: sig_end(lang, n, body, src),
        members: members.and_then(|p| body.map(|b| (b, p))),
    })
}

fn defs_at<'t>(lang: Lang, n: Node<'t>, src: &str, place: Place) -> Vec<Def<'t>> {
    let one = |d: Option<Def<'t>>| d.into_iter().collect::<Vec<_>>();
    let func = if place == Place::InType {
        "method"
    } else {
        "function"
    };
    match lang {
        Lang::Rust => one(match n.kind() {
            "function_item" | "function_signature_item" => simple(lang, n, src, func, None),
            "struct_item" => simple(lang, n, src, "struct", None),
            "enum_item" => simple(lang, n, src, "enum", None),
            "union_item" => simple(lang, n, src, "union", None),
            "trait_item" => simple(lang, n, src, "trait", Some(Place::InType)),
            "mod_item" => simple(lang, n, src, "module", Some(Place::Nested)),
            "const_item" => simple(lang, n, src, "constant", None),
            "static_item" => simple(lang, n, src, "static", None),
            "type_item" | "associated_type" => simple(lang, n, src, "type", None),
            "macro_definition" => simple(lang, n, src, "macro", None),
            "impl_item" => {
                let ty = field(n, "type").and_then(|t| text_of(t, src));
                let tr = field(n, "trait").and_then(|t| text_of(t, src));
                ty.map(|ty| {
                    let body = field(n, "body");
                    Def {
                        kind: "impl",
                        name: match tr {
                            Some(tr) => format!("{tr} for {ty}"),
                            None => ty.to_string(),
                        },
                        range: n,
                        sig_from: n.start_byte(),
                        sig_to: sig_end(lang, n, body, src),
                        members: body.map(|b| (b, Place::InType)),
                    }
                })
            }
            _ => None,
        }),
        Lang::Python => match n.kind() {
            "function_definition" => one(simple(lang, n, src, func, None)),
            "class_definition" => one(simple(lang, n, src, "class", Some(Place::InType))),
            "decorated_definition" => {
                // The decorators' lines belong to it; its signature is the `def` line.
                let Some(inner) = field(n, "definition") else {
                    return Vec::new();
                };
                let mut defs = defs_at(lang, inner, src, place);
                for d in &mut defs {
                    d.range = n;
                }
                defs
            }
            "expression_statement" if place == Place::Top => {
                let Some(a) = n.named_child(0).filter(|a| a.kind() == "assignment") else {
                    return Vec::new();
                };
                let Some(left) = field(a, "left").filter(|l| l.kind() == "identifier") else {
                    return Vec::new();
                };
                one(text_of(left, src).map(|name| Def {
                    kind: "variable",
                    name: name.to_string(),
                    range: n,
                    sig_from: n.start_byte(),
                    sig_to: sig_end(lang, n, None, src),
                    members: None,
                }))
            }
            _ => Vec::new(),
        },
        Lang::JavaScript | Lang::TypeScript | Lang::Tsx => match n.kind() {
            "function_declaration" | "generator_function_declaration" | "function_signature" => {
                one(simple(lang, n, src, "function", None))
            }
            "class_declaration" | "abstract_class_declaration" => {
                one(simple(lang, n, src, "class", Some(Place::InType)))
            }
            "method_definition" | "method_signature" | "abstract_method_signature" => {
                one(simple(lang, n, src, "method", None))
            }
            "interface_declaration" => one(simple(lang, n, src, "interface", Some(Place::InType))),
            "type_alias_declaration" => one(simple(lang, n, src, "type", None)),
            "enum_declaration" => one(simple(lang, n, src, "enum", None)),
            "internal_module" | "module" => {
                one(simple(lang, n, src, "namespace", Some(Place::Nested)))
            }
            "lexical_declaration" | "variable_declaration" => js_variables(lang, n, src, place),
            // `namespace X {}` is an expression in TypeScript's grammar.
            "expression_statement" => match n.named_child(0) {
                Some(ns) if ns.kind() == "internal_module" => defs_at(lang, ns, src, place),
                _ => Vec::new(),
            },
            _ => Vec::new(),
        },
        Lang::Go => match n.kind() {
            "function_declaration" => one(simple(lang, n, src, "function", None)),
            "method_declaration" => one(simple(lang, n, src, "method", None)),
            "type_declaration" => {
                let mut c = n.walk();
                let specs: Vec<Node<'t>> = n
                    .named_children(&mut c)
                    .filter(|s| matches!(s.kind(), "type_spec" | "type_alias"))
                    .collect();
                specs
                    .into_iter()
                    .filter_map(|s| {
                        let kind = match field(s, "type").map(|t| t.kind()) {
                            Some("struct_type") => "struct",
                            Some("interface_type") => "interface",
                            _ => "type",
                        };
                        // `type Point struct {`: the declaration's line, when the spec is on it.
                        let from = if s.start_position().row == n.start_position().row {
                            n.start_byte()
                        } else {
                            s.start_byte()
                        };
                        Some(Def {
                            kind,
                            name: name_of(s, src)?,
                            range: if from == n.start_byte() { n } else { s },
                            sig_from: from,
                            sig_to: sig_end(lang, s, None, src),
                            members: None,
                        })
                    })
                    .collect()
            }
            "const_declaration" | "var_declaration" if place == Place::Top => {
                let kind = if n.kind() == "const_declaration" {
                    "constant"
                } else {
                    "variable"
                };
                let mut specs = Vec::new();
                go_specs(n, &mut specs);
                specs
                    .into_iter()
                    .filter_map(|s| {
                        Some(Def {
                            kind,
                            name: name_of(s, src)?,
                            range: s,
                            sig_from: s.start_byte(),
                            sig_to: sig_end(lang, s, None, src),
                            members: None,
                        })
                    })
                    .collect()
            }
            _ => Vec::new(),
        },
        Lang::C => one(match n.kind() {
            "function_definition" => {
                let name = field(n, "declarator").and_then(|d| declarator_name(d, src));
                name.map(|name| {
                    let body = field(n, "body");
                    Def {
                        kind: "function",
                        name,
                        range: n,
                        sig_from: n.start_byte(),
                        sig_to: sig_end(lang, n, body, src),
                        members: None,
                    }
                })
            }
            "declaration" if place == Place::Top => {
                let d = field(n, "declarator");
                let is_fn = d.is_some_and(has_function_declarator);
                d.and_then(|d| declarator_name(d, src)).map(|name| Def {
                    kind: if is_fn { "function" } else { "variable" },
                    name,
                    range: n,
                    sig_from: n.start_byte(),
                    sig_to: n.end_byte(),
                    members: None,
                })
            }
            "struct_specifier" | "union_specifier" | "enum_specifier"
                if field(n, "body").is_some() =>
            {
                let kind = match n.kind() {
                    "struct_specifier" => "struct",
                    "union_specifier" => "union",
                    _ => "enum",
                };
                simple(lang, n, src, kind, None)
            }
            "type_definition" => {
                let ty = field(n, "type");
                let kind = match ty.map(|t| t.kind()) {
                    Some("struct_specifier") => "struct",
                    Some("union_specifier") => "union",
                    Some("enum_specifier") => "enum",
                    _ => "type",
                };
                let body = ty.and_then(|t| field(t, "body"));
                field(n, "declarator")
                    .and_then(|d| declarator_name(d, src))
                    .map(|name| Def {
                        kind,
                        name,
                        range: n,
                        sig_from: n.start_byte(),
                        sig_to: sig_end(lang, n, body, src),
                        members: None,
                    })
            }
            "preproc_def" | "preproc_function_def" => simple(lang, n, src, "macro", None),
            _ => None,
        }),
        Lang::Java => one(match n.kind() {
            "class_declaration" => simple(lang, n, src, "class", Some(Place::InType)),
            "record_declaration" => simple(lang, n, src, "record", Some(Place::InType)),
            "interface_declaration" | "annotation_type_declaration" => {
                simple(lang, n, src, "interface", Some(Place::InType))
            }
            "enum_declaration" => simple(lang, n, src, "enum", Some(Place::InType)),
            "method_declaration" => simple(lang, n, src, "method", None),
            "constructor_declaration" | "compact_constructor_declaration" => {
                simple(lang, n, src, "constructor", None)
            }
            _ => None,
        }),
    }
}

/// `const f = () => ...`, `let x = 1`: functions and classes anywhere, variables at the top.
fn js_variables<'t>(lang: Lang, n: Node<'t>, src: &str, place: Place) -> Vec<Def<'t>> {
    let constant = text_of(n, src).is_some_and(|t| t.starts_with("const"));
    let mut c = n.walk();
    let declarators: Vec<Node<'t>> = n
        .named_children(&mut c)
        .filter(|d| d.kind() == "variable_declarator")
        .collect();
    declarators
        .into_iter()
        .filter_map(|d| {
            let name = field(d, "name").filter(|x| x.kind() == "identifier")?;
            let name = text_of(name, src)?.to_string();
            let value = field(d, "value");
            let (kind, body, members) = match value.map(|v| v.kind()) {
                Some(
                    "arrow_function" | "function_expression" | "function" | "generator_function",
                ) => ("function", value.and_then(|v| field(v, "body")), None),
                Some("class") => {
                    let b = value.and_then(|v| field(v, "body"));
                    ("class", b, b.map(|b| (b, Place::InType)))
                }
                _ if place == Place::Top => {
                    (if constant { "constant" } else { "variable" }, None, None)
                }
                _ => return None,
            };
            Some(Def {
                kind,
                name,
                range: n,
                sig_from: n.start_byte(),
                sig_to: sig_end(lang, n, body, src),
                members,
            })
        })
        .collect()
}

/// The `const_spec` / `var_spec` nodes of a Go declaration (grouped ones included).
fn go_specs<'t>(n: Node<'t>, out: &mut Vec<Node<'t>>) {
    let mut c = n.walk();
    for ch in n.named_children(&mut c) {
        match ch.kind() {
            "const_spec" | "var_spec" => out.push(ch),
            "var_spec_list" | "const_spec_list" => go_specs(ch, out),
            _ => {}
        }
    }
}

/// The name a C declarator declares (through pointers, arrays, parentheses, function types).
fn declarator_name(mut d: Node<'_>, src: &str) -> Option<String> {
    for _ in 0..16 {
        match d.kind() {
            "identifier" | "field_identifier" | "type_identifier" | "primitive_type" => {
                return text_of(d, src).map(str::to_string);
            }
            _ => {
                d = match field(d, "declarator") {
                    Some(inner) => inner,
                    None => d.named_child(0)?,
                };
            }
        }
    }
    None
}

fn has_function_declarator(mut d: Node<'_>) -> bool {
    for _ in 0..16 {
        if d.kind() == "function_declarator" {
            return true;
        }
        match field(d, "declarator") {
            Some(inner) => d = inner,
            None => return false,
        }
    }
    false
}
