//! A directory's outline: its files' top-level symbols, most referenced first, within a budget.

use std::collections::HashMap;
use std::path::Path;

use crate::{Lang, Symbol, outline_and_identifiers};

/// Directories never walked: version control, dependencies, build output, caches.
const SKIP_DIRS: &[&str] = &[
    "node_modules",
    "target",
    "build",
    "dist",
    "out",
    "vendor",
    "__pycache__",
    "venv",
];
/// How deep the walk goes below the directory.
const MAX_DEPTH: usize = 12;
/// Source files read at most.
const MAX_FILES: usize = 2000;
/// A file larger than this is left out (generated code, bundles).
const MAX_FILE_BYTES: u64 = 1024 * 1024;
/// Bytes read at most, over all files.
const MAX_TOTAL_BYTES: u64 = 32 * 1024 * 1024;
/// Files named in the note on what was left out.
const NAMED_LEFT_OUT: usize = 8;

/// A directory's outline.
#[derive(Debug, Clone)]
pub struct DirOutline {
    /// The text for the model.
    pub text: String,
    /// Source files outlined.
    pub files: usize,
    /// Top-level symbols found.
    pub symbols: usize,
    /// Of those, shown within the budget.
    pub shown: usize,
}

struct Ranked {
    path: String,
    symbol: Symbol,
    refs: usize,
}

/// The outline of `dir` (workspace-relative, `""` for the root) under `root`: the top-level
/// symbols of its source files with a grammar here, ranked by how often each name occurs as an
/// identifier across those files (its definitions aside), cut to `budget` characters with a
/// note of what was left out and how to see it.
pub fn outline_dir(root: &Path, dir: &str, budget: usize) -> DirOutline {
    let mut files = Vec::new();
    let mut limits = Limits::default();
    walk(root, &root.join(dir), 0, &mut files, &mut limits);
    files.sort();
    let mut totals: HashMap<String, usize> = HashMap::new();
    let mut defs: HashMap<String, usize> = HashMap::new();
    let mut found: Vec<(String, Vec<Symbol>)> = Vec::new();
    let mut langs: Vec<&'static str> = Vec::new();
    for (rel, lang) in &files {
        let Ok(bytes) = std::fs::read(root.join(rel)) else {
            continue;
        };
        let text = String::from_utf8_lossy(&bytes);
        let Ok((symbols, counts)) = outline_and_identifiers(*lang, &text) else {
            continue;
        };
        for (name, n) in counts {
            *totals.entry(name).or_insert(0) += n;
        }
        count_defs(&symbols, &mut defs);
        if !langs.contains(&lang.name()) {
            langs.push(lang.name());
        }
        found.push((rel.clone(), symbols));
    }
    let outlined = found.len();
    let mut ranked: Vec<Ranked> = found
        .into_iter()
        .flat_map(|(path, symbols)| {
            symbols
                .into_iter()
                // An impl block is no name of its own; its type is listed.
                .filter(|s| s.kind != "impl")
                .map(move |s| (path.clone(), s))
        })
        .map(|(path, symbol)| {
            let refs = totals
                .get(&symbol.name)
                .copied()
                .unwrap_or(0)
                .saturating_sub(defs.get(&symbol.name).copied().unwrap_or(0));
            Ranked { path, symbol, refs }
        })
        .collect();
    ranked.sort_by(|a, b| {
        b.refs
            .cmp(&a.refs)
            .then_with(|| a.path.cmp(&b.path))
            .then_with(|| a.symbol.start_line.cmp(&b.symbol.start_line))
    });
    let shown_dir = if dir.is_empty() { "." } else { dir };
    if ranked.is_empty() {
        let text = if outlined == 0 {
            format!(
                "{shown_dir}: no source files with a grammar here (outlines cover {}){}",
                Lang::all_extensions(),
                limits.note()
            )
        } else {
            format!(
                "{shown_dir}: no top-level symbols in its {outlined} source file(s){}",
                limits.note()
            )
        };
        return DirOutline {
            text,
            files: outlined,
            symbols: 0,
            shown: 0,
        };
    }
    let mut text = format!(
        "{shown_dir}: {} top-level symbols in {outlined} file(s) ({}), most referenced first (refs: how often the name occurs as an identifier in these files, its definitions aside):\n",
        ranked.len(),
        langs.join(", ")
    );
    let mut shown = 0;
    for r in &ranked {
        let mut line = format!(
            "{} {}  {}:{}  ({} refs)",
            r.symbol.kind,
            r.symbol.name,
            r.path,
            r.symbol.lines(),
            r.refs
        );
        if !r.symbol.signature.is_empty() {
            line.push_str("  ");
            line.push_str(&r.symbol.signature);
        }
        if text.len() + line.len() + 1 > budget && shown > 0 {
            break;
        }
        text.push_str(&line);
        text.push('\n');
        shown += 1;
    }
    if shown < ranked.len() {
        let mut left: Vec<&str> = Vec::new();
        for r in &ranked[shown..] {
            if !left.contains(&r.path.as_str()) {
                left.push(&r.path);
            }
        }
        let mut names: Vec<String> = left
            .iter()
            .take(NAMED_LEFT_OUT)
            .map(|p| p.to_string())
            .collect();
        if left.len() > NAMED_LEFT_OUT {
            names.push(format!("{} more", left.len() - NAMED_LEFT_OUT));
        }
        text.push_str(&format!(
            "... {} less referenced symbol(s) left out, from {} file(s): {}. outline {{\"path\": FILE}} lists one file's symbols whole (with methods); outline a subdirectory for fewer files.\n",
            ranked.len() - shown,
            left.len(),
            names.join(", ")
        ));
    }
    text.push_str(limits.note().trim_start_matches('\n'));
    DirOutline {
        text: text.trim_end().to_string(),
        files: outlined,
        symbols: ranked.len(),
        shown,
    }
}

fn count_defs(symbols: &[Symbol], defs: &mut HashMap<String, usize>) {
    for s in symbols {
        *defs.entry(s.name.clone()).or_insert(0) += 1;
        count_defs(&s.children, defs);
    }
}

/// What the walk left out.
#[derive(Default)]
struct Limits {
    bytes: u64,
    too_big: Vec<String>,
    truncated: bool,
}

impl Limits {
    fn note(&self) -> String {
        let mut out = String::new();
        if !self.too_big.is_empty() {
            out.push_str(&format!(
                "\nnot outlined (over {} KiB): {}",
                MAX_FILE_BYTES / 1024,
                self.too_big
                    .iter()
                    .take(NAMED_LEFT_OUT)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            if self.too_big.len() > NAMED_LEFT_OUT {
                out.push_str(&format!(
                    " and {} more",
                    self.too_big.len() - NAMED_LEFT_OUT
                ));
            }
        }
        if self.truncated {
            out.push_str(&format!(
                "\nonly the first {MAX_FILES} source files (or {} MiB) were read; outline a subdirectory for the rest",
                MAX_TOTAL_BYTES / 1024 / 1024
            ));
        }
        out
    }
}

fn walk(root: &Path, dir: &Path, depth: usize, out: &mut Vec<(String, Lang)>, limits: &mut Limits) {
    if depth > MAX_DEPTH {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        if limits.truncated {
            return;
        }
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || SKIP_DIRS.contains(&name.as_str()) {
            continue;
        }
        // Not followed: a symlink may lead out of the workspace.
        let Ok(t) = e.file_type() else { continue };
        let path = e.path();
        if t.is_dir() {
            walk(root, &path, depth + 1, out, limits);
            continue;
        }
        if !t.is_file() {
            continue;
        }
        let Ok(rel) = path.strip_prefix(root) else {
            continue;
        };
        let rel = rel.to_string_lossy().into_owned();
        let Some(lang) = Lang::of_path(&rel) else {
            continue;
        };
        let len = e.metadata().map(|m| m.len()).unwrap_or(0);
        if len > MAX_FILE_BYTES {
            limits.too_big.push(rel);
            continue;
        }
        if out.len() >= MAX_FILES || limits.bytes + len > MAX_TOTAL_BYTES {
            limits.truncated = true;
            return;
        }
        limits.bytes += len;
        out.push((rel, lang));
    }
}
