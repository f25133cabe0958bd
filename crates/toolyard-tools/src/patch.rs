//! The engine of Codex's `apply_patch`: the patch format parsed as leniently as Codex parses it,
//! planned against the workspace (every hunk of every file checked before anything is written),
//! then applied with every file journaled, all files or none.
//!
//! Where Toolyard is stricter than Codex: when the old lines of a chunk (or an `@@` anchor) match
//! more than one place at the first matching pass, Codex takes the first; Toolyard refuses and
//! names the candidate lines. A patch that fails anywhere changes nothing (Codex's standalone
//! binary keeps the files it wrote before the failure).

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

use toolyard_core::{ToolContext, ToolError};
use toolyard_workspace::{Expect, RelPath, hash_bytes};

use crate::ToolEnv;
use crate::files::{commit_write_in, nearest_windows, reindent_like};

const BEGIN: &str = "*** Begin Patch";
const END: &str = "*** End Patch";
const ADD: &str = "*** Add File: ";
const DELETE: &str = "*** Delete File: ";
const UPDATE: &str = "*** Update File: ";
const MOVE: &str = "*** Move to: ";
const END_OF_FILE: &str = "*** End of File";
const ENVIRONMENT: &str = "*** Environment ID: ";

/// The tool name journal entries carry.
const TOOL: &str = "apply_patch";

/// One file operation of a patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hunk {
    /// Create `path` (overwriting it if it exists) with `contents`.
    Add {
        /// The path as the patch spells it.
        path: String,
        /// The new content (every `+` line, each ending in `\n`).
        contents: String,
    },
    /// Remove the file `path`.
    Delete {
        /// The path as the patch spells it.
        path: String,
    },
    /// Change `path` chunk by chunk, then move it to `move_to` when given.
    Update {
        /// The path as the patch spells it.
        path: String,
        /// `*** Move to:`: where the changed file goes.
        move_to: Option<String>,
        /// The `@@` sections, in file order.
        chunks: Vec<Chunk>,
    },
}

/// One `@@` section of an update.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Chunk {
    /// The `@@ <line>` anchor: a line the chunk comes after.
    pub context: Option<String>,
    /// Context and removed lines, as they are in the file.
    pub old_lines: Vec<String>,
    /// Context and added lines, as they will be.
    pub new_lines: Vec<String>,
    /// `*** End of File`: the old lines end the file.
    pub end_of_file: bool,
}

fn invalid(message: impl Into<String>) -> ToolError {
    ToolError::InvalidArguments(format!("Invalid patch: {}", message.into()))
}

fn invalid_hunk(line: usize, message: impl Into<String>) -> ToolError {
    ToolError::InvalidArguments(format!(
        "Invalid patch hunk on line {line}: {}",
        message.into()
    ))
}

/// Parse a patch as Codex does (lenient mode): the text is trimmed, `\r` line ends dropped,
/// marker lines compared trimmed, and a `<<'EOF'` heredoc wrapper removed.
pub fn parse_patch(text: &str) -> Result<Vec<Hunk>, ToolError> {
    let all: Vec<&str> = text.trim().lines().collect();
    let lines = match check_boundaries(&all) {
        Ok(()) => &all[..],
        Err(e) => {
            // `apply_patch <<'EOF' ... EOF` pasted whole, as models also send it.
            let heredoc = all.len() >= 4
                && matches!(all[0].trim(), "<<EOF" | "<<'EOF'" | "<<\"EOF\"")
                && all.last().is_some_and(|l| l.trim_end().ends_with("EOF"));
            if !heredoc {
                return Err(e);
            }
            let inner = &all[1..all.len() - 1];
            check_boundaries(inner)?;
            inner
        }
    };
    let mut body = &lines[1..lines.len() - 1];
    let mut line_number = 2;
    // One environment only: an environment id names nothing here.
    if body
        .first()
        .is_some_and(|l| l.trim().starts_with(ENVIRONMENT))
    {
        body = &body[1..];
        line_number += 1;
    }
    let mut hunks = Vec::new();
    while !body.is_empty() {
        let (hunk, used) = parse_hunk(body, line_number)?;
        hunks.push(hunk);
        line_number += used;
        body = &body[used..];
    }
    Ok(hunks)
}

fn check_boundaries(lines: &[&str]) -> Result<(), ToolError> {
    if lines.first().map(|l| l.trim()) != Some(BEGIN) {
        return Err(invalid(
            "The first line of the patch must be '*** Begin Patch'",
        ));
    }
    if lines.len() < 2 || lines.last().map(|l| l.trim()) != Some(END) {
        return Err(invalid(
            "The last line of the patch must be '*** End Patch'",
        ));
    }
    Ok(())
}

fn parse_hunk(lines: &[&str], line_number: usize) -> Result<(Hunk, usize), ToolError> {
    let first = lines[0].trim();
    if let Some(path) = first.strip_prefix(ADD) {
        let mut contents = String::new();
        let mut used = 1;
        for line in &lines[1..] {
            let Some(text) = line.strip_prefix('+') else {
                break;
            };
            contents.push_str(text);
            contents.push('\n');
            used += 1;
        }
        return Ok((
            Hunk::Add {
                path: path.to_string(),
                contents,
            },
            used,
        ));
    }
    if let Some(path) = first.strip_prefix(DELETE) {
        return Ok((
            Hunk::Delete {
                path: path.to_string(),
            },
            1,
        ));
    }
    if let Some(path) = first.strip_prefix(UPDATE) {
        let mut rest = &lines[1..];
        let mut used = 1;
        let move_to = rest
            .first()
            .and_then(|l| l.trim().strip_prefix(MOVE))
            .map(str::to_string);
        if move_to.is_some() {
            rest = &rest[1..];
            used += 1;
        }
        let mut chunks = Vec::new();
        while !rest.is_empty() {
            // Blank lines may separate chunks.
            if rest[0].trim().is_empty() {
                rest = &rest[1..];
                used += 1;
                continue;
            }
            if rest[0].trim_start().starts_with("***") {
                break;
            }
            let (chunk, n) = parse_chunk(rest, line_number + used, chunks.is_empty())?;
            chunks.push(chunk);
            used += n;
            rest = &rest[n..];
        }
        if chunks.is_empty() {
            return Err(invalid_hunk(
                line_number,
                format!("Update file hunk for path '{path}' is empty"),
            ));
        }
        return Ok((
            Hunk::Update {
                path: path.to_string(),
                move_to,
                chunks,
            },
            used,
        ));
    }
    Err(invalid_hunk(
        line_number,
        format!(
            "'{first}' is not a valid hunk header. Valid hunk headers: '*** Add File: {{path}}', \
             '*** Delete File: {{path}}', '*** Update File: {{path}}'"
        ),
    ))
}

fn parse_chunk(
    lines: &[&str],
    line_number: usize,
    first_chunk: bool,
) -> Result<(Chunk, usize), ToolError> {
    let head = lines[0].trim_end();
    let (context, start) = if head == "@@" {
        (None, 1)
    } else if let Some(ctx) = head.strip_prefix("@@ ") {
        (Some(ctx.to_string()), 1)
    } else {
        if !first_chunk {
            return Err(invalid_hunk(
                line_number,
                format!(
                    "Expected update hunk to start with a @@ context marker, got: '{}'",
                    lines[0]
                ),
            ));
        }
        (None, 0)
    };
    if start >= lines.len() {
        return Err(invalid_hunk(
            line_number + 1,
            "Update hunk does not contain any lines",
        ));
    }
    let mut chunk = Chunk {
        context,
        ..Chunk::default()
    };
    let mut used = 0;
    for line in &lines[start..] {
        if line.trim() == END_OF_FILE {
            if used == 0 {
                return Err(invalid_hunk(
                    line_number + 1,
                    "Update hunk does not contain any lines",
                ));
            }
            chunk.end_of_file = true;
            used += 1;
            break;
        }
        let mut chars = line.chars();
        match chars.next() {
            // An empty line inside a hunk is an empty context line.
            None => {
                chunk.old_lines.push(String::new());
                chunk.new_lines.push(String::new());
            }
            Some(' ') => {
                chunk.old_lines.push(chars.as_str().to_string());
                chunk.new_lines.push(chars.as_str().to_string());
            }
            Some('+') => chunk.new_lines.push(chars.as_str().to_string()),
            Some('-') => chunk.old_lines.push(chars.as_str().to_string()),
            Some(_) => {
                if used == 0 {
                    return Err(invalid_hunk(
                        line_number + 1,
                        format!(
                            "Unexpected line found in update hunk: '{line}'. Every line should \
                             start with ' ' (context line), '+' (added line), or '-' (removed line)"
                        ),
                    ));
                }
                // The start of the next chunk or hunk.
                break;
            }
        }
        used += 1;
    }
    Ok((chunk, used + start))
}

/// The four ways Codex compares a line of the patch with a line of the file, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    Exact,
    TrailingWhitespace,
    SurroundingWhitespace,
    Punctuation,
}

const PASSES: [Pass; 4] = [
    Pass::Exact,
    Pass::TrailingWhitespace,
    Pass::SurroundingWhitespace,
    Pass::Punctuation,
];

impl Pass {
    fn key<'a>(self, s: &'a str) -> Cow<'a, str> {
        match self {
            Pass::Exact => Cow::Borrowed(s),
            Pass::TrailingWhitespace => Cow::Borrowed(s.trim_end()),
            Pass::SurroundingWhitespace => Cow::Borrowed(s.trim()),
            Pass::Punctuation => Cow::Owned(s.trim().chars().map(plain_char).collect()),
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Pass::Exact => "exactly",
            Pass::TrailingWhitespace => "ignoring trailing whitespace",
            Pass::SurroundingWhitespace => "ignoring leading and trailing whitespace",
            Pass::Punctuation => "with typographic quotes, dashes and spaces made plain",
        }
    }
}

/// Codex's `normalise`: typographic dashes, quotes and spaces as their ASCII forms.
fn plain_char(c: char) -> char {
    match c {
        '\u{2010}'..='\u{2015}' | '\u{2212}' => '-',
        '\u{2018}'..='\u{201B}' => '\'',
        '\u{201C}'..='\u{201F}' => '"',
        '\u{00A0}' | '\u{2002}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}' => ' ',
        other => other,
    }
}

/// Where a sequence of lines was found.
#[derive(Debug, PartialEq, Eq)]
enum Seek {
    At(usize),
    /// Several windows match at `Pass` (0-based starts, at most a few).
    Ambiguous(Pass, Vec<usize>),
    Missing,
}

/// Codex's `seek_sequence`: the first pass that matches anywhere from `start` (from the last
/// possible window when `eof`) decides. With `unique`, more than one window at that pass is
/// `Ambiguous` instead of the first.
fn seek(lines: &[String], pattern: &[String], start: usize, eof: bool, unique: bool) -> Seek {
    if pattern.is_empty() {
        return Seek::At(start);
    }
    if pattern.len() > lines.len() {
        return Seek::Missing;
    }
    let last = lines.len() - pattern.len();
    let from = if eof { last } else { start };
    if from > last {
        return Seek::Missing;
    }
    for pass in PASSES {
        let want: Vec<Cow<str>> = pattern.iter().map(|p| pass.key(p)).collect();
        let have: Vec<Cow<str>> = lines[from..].iter().map(|l| pass.key(l)).collect();
        let mut hits = Vec::new();
        for i in 0..=(last - from) {
            if have[i..i + want.len()] == want[..] {
                hits.push(from + i);
                if !unique || hits.len() == 5 {
                    break;
                }
            }
        }
        match hits.len() {
            0 => continue,
            1 => return Seek::At(hits[0]),
            _ if !unique => return Seek::At(hits[0]),
            _ => return Seek::Ambiguous(pass, hits),
        }
    }
    Seek::Missing
}

/// `lines` numbered for the model, `first` being 0-based.
fn numbered(lines: &[String], first: usize, count: usize) -> String {
    lines
        .iter()
        .enumerate()
        .skip(first)
        .take(count)
        .map(|(i, l)| format!("{:>6}|{l}\n", i + 1))
        .collect()
}

/// The windows of the file most like `pattern` (up to three), numbered, for a "not found" error.
fn nearest(path: &str, lines: &[String], pattern: &[String]) -> String {
    if lines.is_empty() {
        return format!("{path} is empty.");
    }
    let file: Vec<&str> = lines.iter().map(String::as_str).collect();
    let old: Vec<&str> = pattern.iter().map(String::as_str).collect();
    let found = nearest_windows(&file, &old, 3);
    let Some(&(first, last)) = found.first() else {
        return format!(
            "No lines of {path} look like them. Its first lines are:\n{}",
            numbered(lines, 0, pattern.len().clamp(5, 12))
        );
    };
    let show = |first: usize, last: usize| numbered(lines, first, (last - first + 1).min(12));
    let mut out = if first == last {
        format!("The nearest line in {path} is line {}:\n", first + 1)
    } else {
        format!(
            "The nearest lines in {path} are {}-{}:\n",
            first + 1,
            last + 1
        )
    };
    out.push_str(&show(first, last));
    for &(f, l) in &found[1..] {
        out.push_str(&format!("Also like them, lines {}-{}:\n", f + 1, l + 1));
        out.push_str(&show(f, l));
    }
    out
}

fn ambiguous(path: &str, what: &str, shown: &str, pass: Pass, hits: &[usize]) -> ToolError {
    let at: Vec<String> = hits.iter().map(|h| (h + 1).to_string()).collect();
    let more = if hits.len() >= 5 { " and more" } else { "" };
    ToolError::Conflict(format!(
        "Ambiguous patch for {path}: {what} match {} places ({}), starting at lines {}{more}:\n\
         {shown}\nCodex would change the first; Toolyard refuses to guess. Add context lines, or \
         an `@@ <line>` header naming a line just above the change, so they match one place.",
        if hits.len() >= 5 {
            "5 or more".to_string()
        } else {
            hits.len().to_string()
        },
        pass.describe(),
        at.join(", ")
    ))
}

/// The file's text with `chunks` applied (Codex's `compute_replacements` and
/// `apply_replacements`), ending in a newline. A CRLF file stays CRLF, a BOM stays.
pub fn apply_chunks(path: &str, original: &str, chunks: &[Chunk]) -> Result<String, ToolError> {
    let (bom, text) = match original.strip_prefix('\u{FEFF}') {
        Some(rest) => ("\u{FEFF}", rest),
        None => ("", original),
    };
    let crlf = text.contains("\r\n") && !text.replace("\r\n", "").contains('\n');
    let eol = if crlf { "\r\n" } else { "\n" };
    let mut lines: Vec<String> = text
        .split('\n')
        .map(|l| {
            if crlf {
                l.strip_suffix('\r').unwrap_or(l).to_string()
            } else {
                l.to_string()
            }
        })
        .collect();
    if lines.last().is_some_and(String::is_empty) {
        lines.pop();
    }
    let mut replacements: Vec<(usize, usize, Vec<String>)> = Vec::new();
    let mut cursor = 0;
    for chunk in chunks {
        if let Some(ctx) = &chunk.context {
            match seek(&lines, std::slice::from_ref(ctx), cursor, false, true) {
                Seek::At(i) => cursor = i + 1,
                Seek::Ambiguous(pass, hits) => {
                    return Err(ambiguous(path, "the @@ line", ctx, pass, &hits));
                }
                Seek::Missing => {
                    return Err(ToolError::Conflict(format!(
                        "Failed to find context '{ctx}' in {path}\n{}",
                        nearest(path, &lines, std::slice::from_ref(ctx))
                    )));
                }
            }
        }
        if chunk.old_lines.is_empty() {
            // Codex appends a chunk of only `+` lines at the end of the file (before a final
            // blank line), whatever its `@@` anchor says.
            let at = if lines.last().is_some_and(String::is_empty) {
                lines.len() - 1
            } else {
                lines.len()
            };
            replacements.push((at, 0, chunk.new_lines.clone()));
            continue;
        }
        // After an `@@` anchor the model has said where: the first match after it, as Codex.
        let unique = chunk.context.is_none();
        let mut old: &[String] = &chunk.old_lines;
        let mut new: &[String] = &chunk.new_lines;
        let mut found = seek(&lines, old, cursor, chunk.end_of_file, unique);
        if found == Seek::Missing && old.last().is_some_and(String::is_empty) {
            // The patch's final empty line may stand for the file's final newline.
            old = &old[..old.len() - 1];
            if new.last().is_some_and(String::is_empty) {
                new = &new[..new.len() - 1];
            }
            found = seek(&lines, old, cursor, chunk.end_of_file, unique);
        }
        match found {
            Seek::At(i) => {
                // Matched ignoring leading whitespace with one uniform offset: the new lines
                // were written with the same offset, so they take the file's indentation.
                let file: Vec<&str> = lines[i..i + old.len()].iter().map(String::as_str).collect();
                let old_s: Vec<&str> = old.iter().map(String::as_str).collect();
                let new = match reindent_like(&file, &old_s, new) {
                    Ok(shifted) => shifted.unwrap_or_else(|| new.to_vec()),
                    Err(()) => {
                        return Err(ToolError::Conflict(format!(
                            "Failed to find expected lines in {path}:\n{}\n\nLines {}-{} have \
                             the same text but lines of only brackets differ in indentation, \
                             and by different amounts, so they may not be the lines meant (a \
                             line may be missing). {}Copy the context and - lines exactly from the current \
                             file.",
                            chunk.old_lines.join("\n"),
                            i + 1,
                            i + old.len(),
                            nearest(path, &lines, &chunk.old_lines)
                        )));
                    }
                };
                replacements.push((i, old.len(), new));
                cursor = i + old.len();
            }
            Seek::Ambiguous(pass, hits) => {
                return Err(ambiguous(
                    path,
                    "the expected lines",
                    &chunk.old_lines.join("\n"),
                    pass,
                    &hits,
                ));
            }
            Seek::Missing => {
                let mut msg = format!(
                    "Failed to find expected lines in {path}:\n{}\n\n{}",
                    chunk.old_lines.join("\n"),
                    nearest(path, &lines, &chunk.old_lines)
                );
                if cursor > 0 {
                    msg.push_str(&format!(
                        "(Chunks must follow file order: this one was searched from line {} on.)\n",
                        cursor + 1
                    ));
                }
                if chunk.end_of_file {
                    msg.push_str("(`*** End of File`: the lines must be the file's last ones.)\n");
                }
                msg.push_str("Copy the context and - lines exactly from the current file.");
                return Err(ToolError::Conflict(msg));
            }
        }
    }
    replacements.sort_by_key(|r| r.0);
    for (at, len, new) in replacements.into_iter().rev() {
        lines.splice(at..at + len, new);
    }
    let mut out = String::from(bom);
    for line in &lines {
        out.push_str(line);
        out.push_str(eol);
    }
    Ok(out)
}

/// What a patch will do, checked against the workspace before anything is written.
#[derive(Debug)]
pub struct Plan {
    /// Files to write, each with the content it must still have.
    writes: Vec<(RelPath, Vec<u8>, Expect)>,
    /// Files to remove, each with the content hash it must still have.
    removals: Vec<(RelPath, String)>,
    added: Vec<String>,
    modified: Vec<String>,
    deleted: Vec<String>,
}

impl Plan {
    /// Codex's summary: `A`, then `M` (a move's destination), then `D` lines, paths as the
    /// patch spells them.
    pub fn summary(&self) -> String {
        let mut s = String::from("Success. Updated the following files:");
        for (tag, paths) in [
            ("A", &self.added),
            ("M", &self.modified),
            ("D", &self.deleted),
        ] {
            for p in paths {
                s.push_str(&format!("\n{tag} {p}"));
            }
        }
        s
    }

    /// Paths added, modified and deleted, as the patch spells them.
    pub fn lists(&self) -> [&[String]; 3] {
        [&self.added, &self.modified, &self.deleted]
    }
}

/// What is at a path, in the planned state of the workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    Missing,
    Dir,
    File(Vec<u8>),
}

/// The workspace as the patch leaves it, one hunk at a time, before any write.
struct Overlay<'a> {
    env: &'a ToolEnv,
    cwd: &'a Path,
    original: HashMap<RelPath, Entry>,
    current: HashMap<RelPath, Entry>,
    order: Vec<RelPath>,
}

impl Overlay<'_> {
    fn locate(&self, path: &str, header: &str) -> Result<RelPath, ToolError> {
        if path.trim().is_empty() {
            return Err(invalid(format!("'{header}' needs a file path after it")));
        }
        let rel = self.env.workspace.locate(path, self.cwd)?;
        if rel.is_root() {
            return Err(invalid(format!(
                "'{header}{path}' names the workspace root; give a file path"
            )));
        }
        // Refuse a protected path now, not halfway through the writes.
        self.env.workspace.check_protected(&rel, true)?;
        Ok(rel)
    }

    fn get(&mut self, rel: &RelPath) -> Result<Entry, ToolError> {
        if let Some(e) = self.current.get(rel) {
            return Ok(e.clone());
        }
        let ws = &self.env.workspace;
        let entry = match ws.metadata(rel)? {
            None => Entry::Missing,
            Some(m) if m.is_dir() => Entry::Dir,
            Some(_) => Entry::File(ws.read(rel)?),
        };
        self.original.insert(rel.clone(), entry.clone());
        self.current.insert(rel.clone(), entry.clone());
        self.order.push(rel.clone());
        Ok(entry)
    }

    fn set(&mut self, rel: &RelPath, entry: Entry) -> Result<(), ToolError> {
        self.get(rel)?;
        self.current.insert(rel.clone(), entry);
        Ok(())
    }
}

/// Check every hunk against the workspace (paths confined, files present, every chunk found
/// once) and compute every file's new content. Nothing is written.
pub fn plan(env: &ToolEnv, cwd: &Path, hunks: &[Hunk]) -> Result<Plan, ToolError> {
    if hunks.is_empty() {
        return Err(ToolError::InvalidArguments(
            "No files were modified. The patch has no file operations: put *** Add File, \
             *** Update File or *** Delete File sections between *** Begin Patch and \
             *** End Patch."
                .into(),
        ));
    }
    let mut o = Overlay {
        env,
        cwd,
        original: HashMap::new(),
        current: HashMap::new(),
        order: Vec::new(),
    };
    let (mut added, mut modified, mut deleted) = (Vec::new(), Vec::new(), Vec::new());
    for hunk in hunks {
        match hunk {
            Hunk::Add { path, contents } => {
                let rel = o.locate(path, ADD)?;
                if o.get(&rel)? == Entry::Dir {
                    return Err(ToolError::Conflict(format!(
                        "Failed to write file {path}: it is a directory; add a file inside it"
                    )));
                }
                o.set(&rel, Entry::File(contents.clone().into_bytes()))?;
                added.push(path.clone());
            }
            Hunk::Delete { path } => {
                let rel = o.locate(path, DELETE)?;
                match o.get(&rel)? {
                    Entry::Missing => {
                        return Err(ToolError::NotFound(format!(
                            "Failed to delete file {path}: it does not exist (or an earlier \
                             hunk of this patch removed it); check the path"
                        )));
                    }
                    Entry::Dir => {
                        return Err(ToolError::Conflict(format!(
                            "Failed to delete file {path}: it is a directory; apply_patch \
                             deletes files only, so delete the files inside it one by one"
                        )));
                    }
                    Entry::File(_) => o.set(&rel, Entry::Missing)?,
                }
                deleted.push(path.clone());
            }
            Hunk::Update {
                path,
                move_to,
                chunks,
            } => {
                let rel = o.locate(path, UPDATE)?;
                let bytes = match o.get(&rel)? {
                    Entry::File(b) => b,
                    Entry::Missing => {
                        return Err(ToolError::NotFound(format!(
                            "Failed to read file to update {path}: No such file or directory \
                             (os error 2). Check the path; to create the file use \
                             '*** Add File: {path}'"
                        )));
                    }
                    Entry::Dir => {
                        return Err(ToolError::Conflict(format!(
                            "Failed to read file to update {path}: Is a directory (os error 21)"
                        )));
                    }
                };
                let text = String::from_utf8(bytes).map_err(|_| {
                    ToolError::Conflict(format!(
                        "Failed to read file to update {path}: it is not UTF-8 text; \
                         apply_patch changes text files only"
                    ))
                })?;
                let new = apply_chunks(path, &text, chunks)?.into_bytes();
                match move_to {
                    Some(dest) => {
                        let to = o.locate(dest, MOVE)?;
                        if o.get(&to)? == Entry::Dir {
                            return Err(ToolError::Conflict(format!(
                                "Failed to write file {dest}: it is a directory; move the file \
                                 to a file path"
                            )));
                        }
                        if to != rel {
                            o.set(&rel, Entry::Missing)?;
                        }
                        o.set(&to, Entry::File(new))?;
                        modified.push(dest.clone());
                    }
                    None => {
                        o.set(&rel, Entry::File(new))?;
                        modified.push(path.clone());
                    }
                }
            }
        }
    }
    let (mut writes, mut removals) = (Vec::new(), Vec::new());
    for rel in &o.order {
        let (Some(before), Some(after)) = (o.original.get(rel), o.current.get(rel)) else {
            continue;
        };
        if before == after {
            continue;
        }
        match (before, after) {
            (before, Entry::File(bytes)) => {
                let expect = match before {
                    Entry::File(b) => Expect::Hash(hash_bytes(b)),
                    _ => Expect::Missing,
                };
                writes.push((rel.clone(), bytes.clone(), expect));
            }
            (Entry::File(b), Entry::Missing) => removals.push((rel.clone(), hash_bytes(b))),
            _ => {}
        }
    }
    Ok(Plan {
        writes,
        removals,
        added,
        modified,
        deleted,
    })
}

/// Journal (joining `group`), then remove `rel` if it still has content `hash`; returns the
/// change's id.
async fn commit_remove(
    env: &ToolEnv,
    ctx: &ToolContext,
    rel: &RelPath,
    hash: &str,
    group: Option<i64>,
) -> Result<i64, ToolError> {
    let change = env
        .records
        .journal_begin_removal(&ctx.session_id, &ctx.call_id, TOOL, rel, group)
        .await?;
    let removed = match env.workspace.hash_of(rel) {
        Ok(Some(h)) if h == hash => env.workspace.remove_file(rel),
        Ok(_) => Err(ToolError::StaleRead {
            path: rel.to_string(),
        }),
        Err(e) => Err(e),
    };
    if let Err(mark) = env.records.journal_end(change, removed.is_ok()).await {
        tracing::warn!(%mark, "could not settle a removal in the journal");
    }
    removed.map(|()| change)
}

/// Undo the changes this call made so far (the journal group of its first change `first`);
/// returns why they could not be, if so.
async fn roll_back(env: &ToolEnv, ctx: &ToolContext, first: i64) -> Option<String> {
    match env
        .records
        .roll_back_call(&ctx.session_id, &ctx.call_id, first)
        .await
    {
        Ok(_) => None,
        Err(e) => {
            tracing::warn!(error = %e, "could not roll back a patch's changes");
            Some(e.to_string())
        }
    }
}

/// Write every file of `plan` (each under a compare-and-swap on the content the plan saw),
/// then remove the files it deletes, all journaled as one group (one undo reverts the whole
/// patch). If one fails, the ones already changed are restored from the journal. Returns the
/// workspace-relative paths changed.
pub async fn apply(
    env: &ToolEnv,
    ctx: &ToolContext,
    plan: &Plan,
) -> Result<Vec<String>, ToolError> {
    let mut group: Option<i64> = None;
    let mut changed = Vec::new();
    let mut failure = None;
    for (rel, bytes, expect) in &plan.writes {
        match commit_write_in(env, ctx, TOOL, rel, bytes, expect, group).await {
            Ok((out, id)) => {
                group.get_or_insert(id);
                changed.push(out.path.to_string());
            }
            Err(e) => {
                failure = Some((rel.clone(), e));
                break;
            }
        }
    }
    if failure.is_none() {
        for (rel, hash) in &plan.removals {
            match commit_remove(env, ctx, rel, hash, group).await {
                Ok(id) => {
                    group.get_or_insert(id);
                    changed.push(rel.to_string());
                }
                Err(e) => {
                    failure = Some((rel.clone(), e));
                    break;
                }
            }
        }
    }
    let Some((rel, e)) = failure else {
        return Ok(changed);
    };
    let Some(first) = group.filter(|_| !changed.is_empty()) else {
        return Err(e);
    };
    let outcome = match roll_back(env, ctx, first).await {
        None => "The files it had already changed were restored, so the workspace is as before"
            .to_string(),
        Some(why) => format!(
            "Restoring the files it had already changed ({}) failed: {why}; see `toolyard log`",
            changed.join(", ")
        ),
    };
    Err(ToolError::Conflict(format!(
        "apply_patch stopped at {rel}: {e}. {outcome}. Check the file's current content and \
         send the patch again."
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn seek_passes_in_order() {
        let lines = s(&["foo   ", "  bar", "\u{201C}baz\u{201D} \u{2014} x"]);
        assert_eq!(seek(&lines, &s(&["foo"]), 0, false, true), Seek::At(0));
        assert_eq!(seek(&lines, &s(&["bar"]), 0, false, true), Seek::At(1));
        assert_eq!(
            seek(&lines, &s(&["\"baz\" - x"]), 0, false, true),
            Seek::At(2)
        );
        assert_eq!(
            seek(&lines, &s(&["a", "b", "c", "d"]), 0, false, true),
            Seek::Missing
        );
    }

    #[test]
    fn seek_refuses_two_windows_at_the_first_matching_pass() {
        let lines = s(&["x", "y", "x", "y", "x "]);
        assert_eq!(
            seek(&lines, &s(&["x", "y"]), 0, false, true),
            Seek::Ambiguous(Pass::Exact, vec![0, 2])
        );
        // Codex's rule, used after an @@ anchor: the first.
        assert_eq!(seek(&lines, &s(&["x", "y"]), 0, false, false), Seek::At(0));
        // An exact unique match wins even if a looser pass would match elsewhere too.
        assert_eq!(seek(&lines, &s(&["x "]), 0, false, true), Seek::At(4));
    }
}
