//! The engine of Codex's `apply_patch`: the patch format parsed as leniently as Codex parses it,
//! planned against the workspace (every hunk of every file checked before anything is written),
//! then applied with every file journaled, all files or none.
//!
//! Where Toolyard is stricter than Codex: when the old lines of a chunk (or an `@@` anchor) match
//! more than one place at the first matching pass, Codex takes the first; Toolyard refuses and
//! names the candidate lines, and a match found only by a forgiving pass is taken only when no
//! other place matches at any pass. Context lines keep the file's own bytes (Codex writes the
//! patch's), added lines are re-indented like the context around them, a match whose
//! indentation differs by different amounts from line to line is refused, and a success shows
//! the changed lines. A patch that fails anywhere changes nothing (Codex's standalone binary
//! keeps the files it wrote before the failure).

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

use toolyard_core::{ToolContext, ToolError};
use toolyard_workspace::{Expect, RelPath, hash_bytes};

use crate::ToolEnv;
use crate::files::{
    Frame, Indent, MixedIndent, Shift, capitalized, commit_write_in, indent_of, indent_relation,
    judge_frame, numbered_lines, shared_lines, span, ws_words,
};

mod parse;
mod seek;

use parse::{ADD, DELETE, MOVE, TOOL, UPDATE, invalid};
pub use parse::{Chunk, Hunk, PatchLine, parse_patch};
use seek::{Pass, Seek, ambiguous, nearest, seek};

/// A file's text after a patch, and what to show of the change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patched {
    /// The new text, ending in a newline.
    pub text: String,
    /// The changed places: 0-based first line in the new text and how many lines the chunk's
    /// lines take there.
    pub regions: Vec<(usize, usize)>,
    /// What was forgiven or adjusted, per chunk that needed it.
    pub notes: Vec<String>,
}

impl Patched {
    /// The changed places, numbered (a line of context around each), after what was forgiven:
    /// for the success text.
    pub fn show(&self, path: &str) -> String {
        let lines: Vec<&str> = self.text.lines().collect();
        let mut out = format!("{path}:");
        for note in &self.notes {
            out.push(' ');
            out.push_str(note);
        }
        if !self.notes.is_empty() {
            out.push_str(" Check the lines below.");
        }
        let mut shown: Vec<(usize, usize)> = Vec::new();
        for &(first, n) in &self.regions {
            let (from, to) = if n == 0 {
                (first.saturating_sub(2), (first + 2).min(lines.len()))
            } else {
                (first.saturating_sub(1), (first + n + 1).min(lines.len()))
            };
            match shown.last_mut() {
                Some(last) if from <= last.1 => last.1 = last.1.max(to),
                _ => shown.push((from, to)),
            }
        }
        for &(from, to) in shown.iter().take(SHOW_PLACES) {
            out.push('\n');
            let n = to - from;
            out.push_str(&numbered_lines(&lines, from, n.min(SHOW_LINES)));
            if n > SHOW_LINES {
                out.push_str(&format!("[... {} more changed lines]\n", n - SHOW_LINES));
            }
        }
        if shown.len() > SHOW_PLACES {
            out.push_str(&format!(
                "\n[... and {} more changed places]\n",
                shown.len() - SHOW_PLACES
            ));
        }
        out.trim_end().to_string()
    }
}

/// Changed places shown per file in a success.
const SHOW_PLACES: usize = 4;
/// Lines shown per changed place.
const SHOW_LINES: usize = 24;

/// The file's text with `chunks` applied (Codex's `compute_replacements` and
/// `apply_replacements`), ending in a newline. A CRLF file stays CRLF, a BOM stays.
pub fn apply_chunks(path: &str, original: &str, chunks: &[Chunk]) -> Result<Patched, ToolError> {
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
    let mut notes = Vec::new();
    let mut cursor = 0;
    for (n, chunk) in chunks.iter().enumerate() {
        let which = if chunks.len() > 1 {
            format!("chunk {}", n + 1)
        } else {
            "the chunk".to_string()
        };
        if let Some(ctx) = &chunk.context {
            match seek(&lines, std::slice::from_ref(ctx), cursor, false, true) {
                Seek::At(i, _) => cursor = i + 1,
                Seek::Ambiguous(places) => {
                    return Err(ambiguous(path, "the @@ line", ctx, &lines, 1, &places));
                }
                Seek::Missing => {
                    return Err(ToolError::Conflict(format!(
                        "Failed to find context '{ctx}' in {path}\n{}",
                        nearest(path, &lines, std::slice::from_ref(ctx))
                    )));
                }
            }
        }
        let mut ops: Cow<[PatchLine]> = Cow::Borrowed(&chunk.lines);
        if chunk.old_lines().is_empty() {
            // Codex appends a chunk of only `+` lines at the end of the file (before a final
            // blank line), whatever its `@@` anchor says.
            let at = if lines.last().is_some_and(String::is_empty) {
                lines.len() - 1
            } else {
                lines.len()
            };
            let new = chunk.new_lines().iter().map(|l| l.to_string()).collect();
            replacements.push((at, 0, new));
            continue;
        }
        // After an `@@` anchor the model has said where: the first match after it, as Codex.
        let unique = chunk.context.is_none();
        let old = chunk.old_lines();
        let mut found = seek(&lines, &old, cursor, chunk.end_of_file, unique);
        if found == Seek::Missing && old.last().is_some_and(|l| l.is_empty()) {
            // The patch's final empty line may stand for the file's final newline.
            ops = Cow::Owned(without_final_empty(&chunk.lines));
            let old: Vec<&str> = ops.iter().filter_map(PatchLine::before).collect();
            found = seek(&lines, &old, cursor, chunk.end_of_file, unique);
        }
        let old: Vec<&str> = ops.iter().filter_map(PatchLine::before).collect();
        match found {
            Seek::At(i, pass) => {
                let (new, note) = place(path, &lines, i, &ops, pass, &which)?;
                if let Some(note) = note {
                    notes.push(note);
                }
                replacements.push((i, old.len(), new));
                cursor = i + old.len();
            }
            Seek::Ambiguous(places) => {
                return Err(ambiguous(
                    path,
                    "the expected lines",
                    &chunk.old_lines().join("\n"),
                    &lines,
                    old.len(),
                    &places,
                ));
            }
            Seek::Missing => {
                if let Some(at) = already_applied(&lines, chunk) {
                    return Err(ToolError::Conflict(format!(
                        "This patch is already applied to {path}: {which}'s new lines stand at \
                         line {} and its removed lines are gone, so nothing was changed. Read the \
                         file to see it as it is, and send only what still has to change.",
                        at + 1
                    )));
                }
                let mut msg = format!(
                    "Failed to find expected lines in {path}:\n{}\n\n{}",
                    chunk.old_lines().join("\n"),
                    nearest(path, &lines, &chunk.old_lines())
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
    // Where each replacement lands in the new text: earlier ones move it by their growth.
    let mut regions = Vec::with_capacity(replacements.len());
    let mut growth = 0isize;
    for (at, len, new) in &replacements {
        regions.push((at.saturating_add_signed(growth), new.len()));
        growth += new.len() as isize - *len as isize;
    }
    for (at, len, new) in replacements.into_iter().rev() {
        lines.splice(at..at + len, new);
    }
    let mut out = String::from(bom);
    for line in &lines {
        out.push_str(line);
        out.push_str(eol);
    }
    Ok(Patched {
        text: out,
        regions,
        notes,
    })
}

/// Where `chunk`'s result already stands in `lines` (0-based), when its old lines are not
/// there but its new lines are: the patch was applied before.
fn already_applied(lines: &[String], chunk: &Chunk) -> Option<usize> {
    let (old, new) = (chunk.old_lines(), chunk.new_lines());
    if new.is_empty() || old == new || new.iter().all(|l| l.trim().is_empty()) {
        return None;
    }
    match seek(lines, &new, 0, chunk.end_of_file, false) {
        Seek::At(i, _) => Some(i),
        Seek::Ambiguous(places) => places.first().map(|&(i, _)| i),
        Seek::Missing => None,
    }
}

/// `ops` without the final empty old line (and the final empty new line, if the new lines end
/// in one): the retry where a patch's last empty line stood for the file's final newline.
fn without_final_empty(ops: &[PatchLine]) -> Vec<PatchLine> {
    let mut ops: Vec<Option<PatchLine>> = ops.iter().cloned().map(Some).collect();
    let old_at = |l: &Option<PatchLine>| l.as_ref().and_then(|l| l.before().map(str::to_owned));
    let new_at = |l: &Option<PatchLine>| l.as_ref().and_then(|l| l.after().map(str::to_owned));
    let drop_old = ops.iter().rposition(|l| old_at(l).is_some());
    let drop_new = ops
        .iter()
        .rposition(|l| new_at(l).is_some())
        .filter(|&i| new_at(&ops[i]).as_deref() == Some(""));
    // A line that loses its old side is only added, one that loses its new side only removed;
    // one that loses both (a final empty context line) goes.
    let lose = |l: PatchLine, old_side: bool| match (l, old_side) {
        (PatchLine::Context(t), true) => Some(PatchLine::Added(t)),
        (PatchLine::Context(t), false) => Some(PatchLine::Removed(t)),
        (PatchLine::Removed(_), true) | (PatchLine::Added(_), false) => None,
        (other, _) => Some(other),
    };
    if let Some(i) = drop_old {
        ops[i] = ops[i].take().and_then(|l| lose(l, true));
    }
    if let Some(i) = drop_new {
        ops[i] = ops[i].take().and_then(|l| lose(l, false));
    }
    ops.into_iter().flatten().collect()
}

/// The new lines for a chunk whose old lines matched the file at line `i` (0-based) at `pass`:
/// context lines as the file has them, removed lines gone, added lines re-indented the way the
/// model's lines differ from the file's (or as sent, when they show they were written at the
/// file's own indentation). A note says what was forgiven; an error refuses what cannot be
/// placed surely, showing the current lines.
fn place(
    path: &str,
    lines: &[String],
    i: usize,
    ops: &[PatchLine],
    pass: Pass,
    which: &str,
) -> Result<(Vec<String>, Option<String>), ToolError> {
    let old: Vec<&str> = ops.iter().filter_map(PatchLine::before).collect();
    let new: Vec<&str> = ops.iter().filter_map(PatchLine::after).collect();
    let window: Vec<&str> = lines[i..i + old.len()].iter().map(String::as_str).collect();
    let adds = ops
        .iter()
        .any(|l| matches!(l, PatchLine::Added(t) if !t.trim().is_empty()));
    let refuse = |why: String| {
        ToolError::Conflict(format!(
            "Failed to apply {which} to {path}: its lines match {} only {}, but {why}, so \
             nothing was changed. The current lines are:\n{}Copy the context and - lines \
             exactly from these lines, and indent the + lines like them.",
            span(i + 1, i + old.len()),
            pass.describe(),
            numbered_lines(lines, i, old.len().min(40))
        ))
    };
    let indent = if matches!(pass, Pass::Exact | Pass::TrailingWhitespace) {
        Indent::Shift(Shift::Same)
    } else {
        match indent_relation(&window, &old) {
            Ok(indent) => indent,
            Err(MixedIndent { bare_moved }) if adds || bare_moved => {
                return Err(refuse(mixed_why(&window, &old, i, bare_moved)));
            }
            // Nothing to indent: the lines that stay are the file's own.
            Err(_) => Indent::Shift(Shift::Same),
        }
    };
    // Pairs (old index, new index): context lines, and removed lines added back unchanged.
    let mut pairs = Vec::new();
    let (mut removed, mut added) = (Vec::new(), Vec::new());
    let (mut k, mut j) = (0, 0);
    for l in ops {
        match l {
            PatchLine::Context(_) => {
                pairs.push((k, j));
                k += 1;
                j += 1;
            }
            PatchLine::Removed(t) => {
                removed.push((k, t.as_str()));
                k += 1;
            }
            PatchLine::Added(t) => {
                added.push((j, t.as_str()));
                j += 1;
            }
        }
    }
    let r_text: Vec<&str> = removed.iter().map(|r| r.1).collect();
    let a_text: Vec<&str> = added.iter().map(|a| a.1).collect();
    let moved: Vec<(usize, usize)> = shared_lines(&r_text, &a_text)
        .into_iter()
        .map(|(r, a)| (removed[r].0, added[a].0))
        .collect();
    pairs.extend(moved.iter().copied());
    pairs.sort_unstable_by_key(|p| p.1);
    let same = indent == Indent::Shift(Shift::Same);
    let frame = if same || !adds {
        Frame::Sent
    } else {
        let file: Vec<Option<&str>> = window.iter().map(|l| Some(*l)).collect();
        judge_frame(&file, &old, &new, &pairs).map_err(refuse)?
    };
    let mut out = Vec::with_capacity(new.len());
    let mut kept = false;
    let (mut k, mut j) = (0, 0);
    for l in ops {
        match l {
            PatchLine::Context(t) => {
                kept |= window[k] != t;
                out.push(window[k].to_string());
                k += 1;
                j += 1;
            }
            PatchLine::Removed(_) => k += 1,
            PatchLine::Added(t) => {
                // A removed line added back as the model believed it was keeps the file's bytes.
                let back = moved
                    .iter()
                    .find(|p| p.1 == j)
                    .map(|p| p.0)
                    .filter(|&r| old[r] == t && window[r] != t);
                let line = match (back, frame) {
                    (Some(r), _) => {
                        kept = true;
                        window[r].to_string()
                    }
                    (None, Frame::File) => t.clone(),
                    (None, Frame::Sent) => indent.apply(t).ok_or_else(|| {
                        refuse(format!(
                            "the added line {t:?} is indented with {}, which does not convert to \
                             the file's indentation ({})",
                            ws_words(indent_of(t)),
                            indent.describe()
                        ))
                    })?,
                };
                out.push(line);
                j += 1;
            }
        }
    }
    if pass == Pass::Exact {
        return Ok((out, None));
    }
    let mut note = format!("{} matched {}", capitalized(which), pass.describe());
    if kept {
        note.push_str("; the lines it keeps were left as the file has them");
    }
    if adds && !same {
        match frame {
            Frame::File => note.push_str(
                "; the added lines were already at the file's indentation and were written as sent",
            ),
            Frame::Sent => {
                note.push_str(&format!(
                    "; the added lines were {}, like the lines around them",
                    indent.describe()
                ));
            }
        }
    }
    note.push('.');
    Ok((out, Some(note)))
}

/// Why a match with mixed indentation offsets is refused: the lines and their indentation.
fn mixed_why(window: &[&str], old: &[&str], i: usize, bare_moved: bool) -> String {
    let (mut differ, mut same) = (Vec::new(), Vec::new());
    for (n, (f, o)) in window.iter().zip(old).enumerate() {
        if f.trim().is_empty() || o.trim().is_empty() {
            continue;
        }
        let (fi, oi) = (indent_of(f), indent_of(o));
        if fi == oi {
            same.push((i + n + 1).to_string());
        } else if differ.len() < 5 {
            differ.push(format!(
                "line {} has {} where the patch has {}",
                i + n + 1,
                ws_words(fi),
                ws_words(oi)
            ));
        }
    }
    if !same.is_empty() {
        same.truncate(6);
        differ.push(format!(
            "{} indented as in the patch",
            match same.as_slice() {
                [one] => format!("line {one} is"),
                many => format!("lines {} are", many.join(", ")),
            }
        ));
    }
    let what = if bare_moved {
        "their indentation differs from the file's by different amounts, lines of only brackets \
         among them, so they may not be the lines meant (a line may be missing)"
    } else {
        "their indentation differs from the file's by different amounts, so it is unclear how to \
         indent the added lines"
    };
    format!("{what} ({})", differ.join("; "))
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
    /// Each updated file's changed lines, numbered, and what was forgiven.
    shown: Vec<String>,
}

/// Updated files whose changed lines a success shows.
const SHOW_FILES: usize = 8;

impl Plan {
    /// Codex's summary (`A`, then `M` (a move's destination), then `D` lines, paths as the
    /// patch spells them), then, after a blank line, each updated file's changed lines with
    /// their numbers and anything that was forgiven.
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
        for shown in self.shown.iter().take(SHOW_FILES) {
            s.push_str("\n\n");
            s.push_str(shown);
        }
        if self.shown.len() > SHOW_FILES {
            s.push_str(&format!(
                "\n\n[... and {} more updated files]",
                self.shown.len() - SHOW_FILES
            ));
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
    let mut shown = Vec::new();
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
                let patched = apply_chunks(path, &text, chunks)?;
                shown.push(patched.show(move_to.as_deref().unwrap_or(path)));
                let new = patched.text.into_bytes();
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
                    Entry::File(b) => {
                        crate::files::omission::check(rel.as_str(), b, bytes)?;
                        Expect::Hash(hash_bytes(b))
                    }
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
        shown,
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
        assert_eq!(
            seek(&lines, &s(&["foo"]), 0, false, true),
            Seek::At(0, Pass::TrailingWhitespace)
        );
        assert_eq!(
            seek(&lines, &s(&["bar"]), 0, false, true),
            Seek::At(1, Pass::SurroundingWhitespace)
        );
        assert_eq!(
            seek(&lines, &s(&["\"baz\" - x"]), 0, false, true),
            Seek::At(2, Pass::Punctuation)
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
            Seek::Ambiguous(vec![(0, Pass::Exact), (2, Pass::Exact)])
        );
        // Codex's rule, used after an @@ anchor: the first.
        assert_eq!(
            seek(&lines, &s(&["x", "y"]), 0, false, false),
            Seek::At(0, Pass::Exact)
        );
        // An exact unique match wins even if a looser pass would match elsewhere too.
        assert_eq!(
            seek(&lines, &s(&["x "]), 0, false, true),
            Seek::At(4, Pass::Exact)
        );
    }

    #[test]
    fn a_forgiving_match_is_refused_when_a_looser_pass_matches_elsewhere() {
        // Trailing whitespace matches line 1 only; ignoring indentation line 3 matches too.
        let lines = s(&["v = 1  ", "w", "    v = 1"]);
        assert_eq!(
            seek(&lines, &s(&["v = 1"]), 0, false, true),
            Seek::Ambiguous(vec![
                (0, Pass::TrailingWhitespace),
                (2, Pass::SurroundingWhitespace)
            ])
        );
        // After an anchor, a looser match past the chosen one does not count; before it, it does.
        assert_eq!(
            seek(&lines, &s(&["v = 1"]), 0, false, false),
            Seek::At(0, Pass::TrailingWhitespace)
        );
        let lines = s(&["  v = 1", "v = 1  "]);
        assert_eq!(
            seek(&lines, &s(&["v = 1"]), 0, false, false),
            Seek::Ambiguous(vec![
                (0, Pass::SurroundingWhitespace),
                (1, Pass::TrailingWhitespace)
            ])
        );
    }

    fn ops(text: &str) -> Vec<PatchLine> {
        let hunks = parse_patch(&format!(
            "*** Begin Patch\n*** Update File: f\n@@\n{text}\n*** End Patch"
        ))
        .unwrap();
        let Hunk::Update { chunks, .. } = &hunks[0] else {
            unreachable!()
        };
        chunks[0].lines.clone()
    }

    #[test]
    fn the_final_empty_line_retry_drops_one_old_and_one_new_line() {
        use PatchLine::*;
        let c = |t: &str| Context(t.to_string());
        let a = |t: &str| Added(t.to_string());
        let r = |t: &str| Removed(t.to_string());
        assert_eq!(without_final_empty(&[c("x"), c("")]), vec![c("x")]);
        assert_eq!(
            without_final_empty(&[c("x"), c(""), a("y")]),
            vec![c("x"), a(""), a("y")]
        );
        assert_eq!(without_final_empty(&[c("x"), r(""), a("")]), vec![c("x")]);
        assert_eq!(ops(" a\n-b\n+c"), vec![c("a"), r("b"), a("c")]);
    }
}
