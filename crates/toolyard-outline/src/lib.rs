//! # toolyard-outline
//!
//! Outlines from tree-sitter grammars, so an outline never needs a language server: a file's
//! symbols (functions, types, methods, ...) with 1-based line ranges and signatures, and a
//! directory's top-level symbols ranked by how often their names occur as identifiers across
//! its files, within a size budget. Rust, Python, JavaScript, TypeScript (and TSX), Go, C and
//! Java.

mod dir;
mod lang;

use tree_sitter::{Node, Parser};

pub use dir::{DirOutline, outline_dir};
pub use lang::Lang;

/// Characters of a signature kept (the rest is cut with `...`).
const MAX_SIGNATURE: usize = 160;

/// One symbol of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symbol {
    /// What it is: `function`, `method`, `class`, `struct`, ...
    pub kind: &'static str,
    /// Its name (for a Rust `impl`, what it implements: `Display for Point`).
    pub name: String,
    /// First line, 1-based as `read_file` numbers it.
    pub start_line: usize,
    /// Last line, 1-based.
    pub end_line: usize,
    /// Its declaration up to its body, on one line (`pub fn area(&self) -> f64`).
    pub signature: String,
    /// The symbols declared in it (a class's methods).
    pub children: Vec<Symbol>,
}

/// Why a file has no outline.
#[derive(Debug, thiserror::Error)]
pub enum OutlineError {
    /// The grammar could not be loaded (a tree-sitter version mismatch).
    #[error("the {0} grammar could not be loaded: {1}")]
    Grammar(&'static str, String),
    /// The parser gave up.
    #[error("the {0} parser gave up on this file")]
    Parse(&'static str),
}

/// A parsed file: its tree and its text.
struct Parsed<'a> {
    lang: Lang,
    tree: tree_sitter::Tree,
    src: &'a str,
}

fn parse(lang: Lang, src: &str) -> Result<Parsed<'_>, OutlineError> {
    let mut parser = Parser::new();
    parser
        .set_language(&lang.grammar())
        .map_err(|e| OutlineError::Grammar(lang.name(), e.to_string()))?;
    let tree = parser
        .parse(src, None)
        .ok_or(OutlineError::Parse(lang.name()))?;
    Ok(Parsed { lang, tree, src })
}

/// The symbols of `src`, a file in `lang`, nested (a class's methods are its children).
pub fn outline(lang: Lang, src: &str) -> Result<Vec<Symbol>, OutlineError> {
    let p = parse(lang, src)?;
    Ok(lang::symbols(p.lang, p.tree.root_node(), p.src))
}

/// The symbols of `src` and how often each identifier occurs in it (every identifier token:
/// names of functions, types, fields, variables; not words in comments or strings).
pub fn outline_and_identifiers(
    lang: Lang,
    src: &str,
) -> Result<(Vec<Symbol>, std::collections::HashMap<String, usize>), OutlineError> {
    let p = parse(lang, src)?;
    let symbols = lang::symbols(p.lang, p.tree.root_node(), p.src);
    let mut counts = std::collections::HashMap::new();
    let mut cursor = p.tree.walk();
    'walk: loop {
        let node = cursor.node();
        if node.child_count() == 0
            && node.kind().ends_with("identifier")
            && let Some(text) = text_of(node, p.src)
        {
            *counts.entry(text.to_string()).or_insert(0) += 1;
        }
        if cursor.goto_first_child() || cursor.goto_next_sibling() {
            continue;
        }
        loop {
            if !cursor.goto_parent() {
                break 'walk;
            }
            if cursor.goto_next_sibling() {
                break;
            }
        }
    }
    Ok((symbols, counts))
}

/// A file's outline as text, one symbol a line, children indented: `kind name (line a-b)
/// signature`. `depth` limits nesting (1: top level only).
pub fn render(symbols: &[Symbol], depth: usize) -> String {
    fn walk(symbols: &[Symbol], level: usize, depth: usize, out: &mut Vec<String>) {
        for s in symbols {
            out.push(format!("{}{}", "  ".repeat(level), s.line()));
            if level + 1 < depth {
                walk(&s.children, level + 1, depth, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(symbols, 0, depth, &mut out);
    out.join("\n")
}

impl Symbol {
    /// Its line range as `a-b` (or `a` for one line).
    pub fn lines(&self) -> String {
        if self.start_line == self.end_line {
            self.start_line.to_string()
        } else {
            format!("{}-{}", self.start_line, self.end_line)
        }
    }

    /// One line: `kind name (line a-b)  signature`.
    pub fn line(&self) -> String {
        let mut out = format!("{} {} (line {})", self.kind, self.name, self.lines());
        if !self.signature.is_empty() {
            out.push_str("  ");
            out.push_str(&self.signature);
        }
        out
    }
}

fn text_of<'a>(node: Node<'_>, src: &'a str) -> Option<&'a str> {
    src.get(node.start_byte()..node.end_byte())
}

/// `src[from..to]` on one line: whitespace runs collapsed, cut at [`MAX_SIGNATURE`].
fn one_line(src: &str, from: usize, to: usize) -> String {
    let raw = src.get(from..to.max(from)).unwrap_or_default();
    let mut out = String::new();
    for word in raw.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    let trimmed = out
        .trim_end_matches(['{', ':', '=', ' '])
        .trim_end()
        .to_string();
    if trimmed.chars().count() > MAX_SIGNATURE {
        let cut: String = trimmed.chars().take(MAX_SIGNATURE).collect();
        format!("{cut}...")
    } else {
        trimmed
    }
}
