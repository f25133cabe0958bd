//! `edit_file`: exact string replacement that keeps every other byte, with errors that show the
//! model where to look.

use std::sync::Arc;

use async_trait::async_trait;
use memchr::memmem;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use toolyard_core::{Annotations, ToolContext, ToolError, ToolResult, TypedTool};

use super::{commit_write, expect_for_write};
use crate::ToolEnv;

/// Arguments of `edit_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditFileArgs {
    /// File path, relative to the workspace root (or absolute inside it).
    pub path: String,
    /// The exact text to find (copy it from read_file's output, without the line numbers).
    pub old_string: String,
    /// The text to put in its place.
    pub new_string: String,
    /// Replace every occurrence instead of requiring exactly one (default false).
    #[serde(default)]
    pub replace_all: bool,
}

/// One replacement made in a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Replacement {
    /// Byte offset of the new text in the new content.
    pub offset: usize,
    /// Length of the new text in bytes.
    pub len: usize,
    /// 1-indexed line where the new text starts.
    pub line: usize,
    /// Which difference was forgiven when old_string did not match exactly (e.g. "matched
    /// ignoring trailing whitespace"); None for an exact match.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forgiven: Option<&'static str>,
}

/// Replace `old` by `new` in `content` (once, or everywhere with `replace_all`), byte-exactly.
/// When the file uses CRLF and `old` has bare `\n`, both strings are matched in CRLF form, so
/// line endings survive. When there is no exact match, near misses are tried in order (line
/// endings, trailing whitespace, a uniform indentation offset, blank lines) and the first level
/// that matches is applied only if it matches exactly one place. Errors carry a message that
/// shows the nearest candidate lines.
pub fn apply_edit(
    path: &str,
    content: &[u8],
    old: &str,
    new: &str,
    replace_all: bool,
) -> Result<(Vec<u8>, Vec<Replacement>), ToolError> {
    if old.is_empty() {
        return Err(ToolError::InvalidArguments(
            "old_string is empty; to create or replace a whole file use write_file".into(),
        ));
    }
    if old == new {
        return Err(ToolError::InvalidArguments(
            "old_string and new_string are identical; there is nothing to change".into(),
        ));
    }
    let (old_b, new_b) = (old.as_bytes().to_vec(), new.as_bytes().to_vec());
    let mut positions: Vec<usize> = memmem::find_iter(content, &old_b).collect();
    let (mut old_b, mut new_b) = (old_b, new_b);
    let mut forgiven = None;
    if positions.is_empty() && uses_crlf(content) && old.contains('\n') && !old.contains("\r\n") {
        old_b = to_crlf(old).into_bytes();
        new_b = to_crlf(new).into_bytes();
        positions = memmem::find_iter(content, &old_b).collect();
        forgiven = Some(Slack::LineEndings.note());
    }
    // find_iter yields overlapping matches; keep non-overlapping ones, left to right.
    let mut distinct = Vec::with_capacity(positions.len());
    let mut next_free = 0;
    for p in positions {
        if p >= next_free {
            distinct.push(p);
            next_free = p + old_b.len();
        }
    }
    match distinct.len() {
        0 => {
            return match forgive(path, content, old, new)? {
                Some(done) => Ok(done),
                None => Err(not_found(path, content, old)),
            };
        }
        1 => {}
        n if !replace_all => {
            let lines: Vec<String> = distinct
                .iter()
                .take(20)
                .map(|&p| line_of(content, p).to_string())
                .collect();
            return Err(ToolError::Conflict(format!(
                "old_string occurs {n} times in {path} (at lines {}); include more surrounding \
                 lines to make it unique, or set replace_all to true to change every one",
                lines.join(", ")
            )));
        }
        _ => {}
    }
    let mut out = Vec::with_capacity(content.len() + distinct.len() * new_b.len());
    let mut reps = Vec::with_capacity(distinct.len());
    let mut last = 0;
    for p in distinct {
        out.extend_from_slice(&content[last..p]);
        reps.push(Replacement {
            offset: out.len(),
            len: new_b.len(),
            line: 0,
            forgiven,
        });
        out.extend_from_slice(&new_b);
        last = p + old_b.len();
    }
    out.extend_from_slice(&content[last..]);
    for r in &mut reps {
        r.line = line_of(&out, r.offset);
    }
    Ok((out, reps))
}

/// The lines, in the file before the edit, where each replacement of a `replace_all` edit of
/// `old` by `new` started (`reps` count lines in the edited file): for naming the places when
/// several match but one was meant.
pub fn lines_before(reps: &[Replacement], old: &str, new: &str) -> Vec<usize> {
    // Each earlier replacement shifted later ones by the difference in line count.
    let delta = new.matches('\n').count() as i64 - old.matches('\n').count() as i64;
    reps.iter()
        .enumerate()
        .map(|(k, r)| usize::try_from(r.line as i64 - k as i64 * delta).unwrap_or(1))
        .collect()
}

/// A difference forgiven when old_string is not found exactly, tried in this order; each level
/// also forgives the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slack {
    LineEndings,
    TrailingSpace,
    Indentation,
    BlankLines,
}

impl Slack {
    const ALL: [Slack; 4] = [
        Slack::LineEndings,
        Slack::TrailingSpace,
        Slack::Indentation,
        Slack::BlankLines,
    ];

    /// What the result says was forgiven.
    fn note(self) -> &'static str {
        match self {
            Slack::LineEndings => "matched ignoring line endings",
            Slack::TrailingSpace => "matched ignoring trailing whitespace",
            Slack::Indentation => "matched ignoring a uniform indentation offset",
            Slack::BlankLines => "matched ignoring blank lines",
        }
    }

    /// The difference named in a refusal.
    fn what(self) -> &'static str {
        match self {
            Slack::LineEndings => "line endings",
            Slack::TrailingSpace => "trailing whitespace",
            Slack::Indentation => "indentation",
            Slack::BlankLines => "blank lines",
        }
    }
}

/// How the matched file text is indented relative to old_string.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Shift {
    /// Same indentation.
    Same,
    /// The file has this prefix in front of every non-blank line of old_string.
    Add(String),
    /// old_string has this prefix in front of every non-blank line of the file.
    Remove(String),
}

/// One line of the file: byte range of its text (without terminator) and where the next starts.
struct FileLine<'a> {
    start: usize,
    end: usize,
    next: usize,
    text: &'a str,
    crlf: bool,
}

fn is_blank(s: &str) -> bool {
    s.trim().is_empty()
}

/// Lines of `text` (which starts at byte `base` of the file), with their ranges.
fn file_lines(text: &str, base: usize) -> Vec<FileLine<'_>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < text.len() {
        let (end, next) = match text[at..].find('\n') {
            Some(i) => (at + i, at + i + 1),
            None => (text.len(), text.len()),
        };
        let crlf = next > end && end > at && text.as_bytes()[end - 1] == b'\r';
        let body_end = if crlf { end - 1 } else { end };
        out.push(FileLine {
            start: base + at,
            end: base + body_end,
            next: base + next,
            text: &text[at..body_end],
            crlf,
        });
        at = next;
    }
    out
}

/// Compare one file line with one old_string line at `level`; the indentation shift it implies.
fn line_shift(level: Slack, file: &str, old: &str) -> Option<Shift> {
    if level == Slack::LineEndings {
        return (file == old).then_some(Shift::Same);
    }
    let (f, o) = (file.trim_end(), old.trim_end());
    if f == o {
        return Some(Shift::Same);
    }
    if level == Slack::TrailingSpace || f.is_empty() || o.is_empty() {
        return None;
    }
    if let Some(p) = f.strip_suffix(o)
        && p.chars().all(|c| c == ' ' || c == '\t')
    {
        return Some(Shift::Add(p.to_string()));
    }
    if let Some(p) = o.strip_suffix(f)
        && p.chars().all(|c| c == ' ' || c == '\t')
    {
        return Some(Shift::Remove(p.to_string()));
    }
    None
}

/// Match old lines against file lines pairwise: blank against blank, the rest by `line_shift`,
/// all with one and the same shift.
fn pairs_match<'a>(level: Slack, pairs: impl Iterator<Item = (&'a str, &'a str)>) -> Option<Shift> {
    let mut shift = Shift::Same;
    let mut seen = false;
    for (f, o) in pairs {
        if level != Slack::LineEndings && (is_blank(f) || is_blank(o)) {
            if is_blank(f) && is_blank(o) {
                continue;
            }
            return None;
        }
        let s = line_shift(level, f, o)?;
        if !seen {
            shift = s;
            seen = true;
        } else if s != shift {
            return None;
        }
    }
    Some(shift)
}

/// The new content and the replacements made in it.
type Edited = (Vec<u8>, Vec<Replacement>);

/// A near-miss match: file lines `first..=last` and the shift to apply to new_string.
struct NearMatch {
    first: usize,
    last: usize,
    shift: Shift,
}

/// Every place `old` (split in lines) matches the file at `level`.
fn near_matches(level: Slack, lines: &[FileLine<'_>], old: &[&str]) -> Vec<NearMatch> {
    let mut found = Vec::new();
    if level != Slack::BlankLines {
        let k = old.len();
        if k == 0 || k > lines.len() {
            return found;
        }
        for i in 0..=lines.len() - k {
            let pairs = lines[i..i + k]
                .iter()
                .map(|l| l.text)
                .zip(old.iter().copied());
            if let Some(shift) = pairs_match(level, pairs) {
                found.push(NearMatch {
                    first: i,
                    last: i + k - 1,
                    shift,
                });
            }
        }
        return found;
    }
    // Blank lines: the non-blank lines in order, any number of blank lines between them.
    let wanted: Vec<&str> = old.iter().copied().filter(|l| !is_blank(l)).collect();
    let Some(&head) = wanted.first() else {
        return found;
    };
    for i in 0..lines.len() {
        if line_shift(level, lines[i].text, head).is_none() {
            continue;
        }
        let mut taken = Vec::with_capacity(wanted.len());
        let mut p = i;
        for _ in &wanted {
            while p < lines.len() && is_blank(lines[p].text) {
                p += 1;
            }
            if p == lines.len() {
                break;
            }
            taken.push(p);
            p += 1;
        }
        if taken.len() != wanted.len() {
            break;
        }
        // Blank lines at old_string's edges stand for blank lines (or the file's edge) there,
        // never for a line of text.
        let edge_ok = |blank_in_old: bool, neighbour: Option<&FileLine<'_>>| {
            !blank_in_old || neighbour.is_none_or(|l| is_blank(l.text))
        };
        let lead = old.first().is_some_and(|l| is_blank(l));
        let trail = old.last().is_some_and(|l| is_blank(l));
        if !edge_ok(lead, i.checked_sub(1).and_then(|j| lines.get(j)))
            || !edge_ok(trail, lines.get(p))
        {
            continue;
        }
        let pairs = taken
            .iter()
            .map(|&t| lines[t].text)
            .zip(wanted.iter().copied());
        if let Some(shift) = pairs_match(level, pairs) {
            found.push(NearMatch {
                first: i,
                last: p - 1,
                shift,
            });
        }
    }
    found
}

/// Lines the model sent (`new`) re-indented the way the indentation of `old` differs from that
/// of the file lines it matched (`file`): `Ok(None)` when it does not differ, `Ok(Some(..))`
/// when every non-blank line differs by one and the same offset. When the offsets differ from
/// line to line the lines are left as sent (Codex's whitespace-blind pass), unless a line of
/// only brackets and punctuation (`}`, `));`) is one whose indentation differs: such a line is
/// known only by its indentation, so the match may be other lines than meant (a line missing
/// between braces) and `Err(())` refuses it. apply_patch's whitespace-blind passes use it.
pub(crate) fn reindent_like(
    file: &[&str],
    old: &[&str],
    new: &[String],
) -> Result<Option<Vec<String>>, ()> {
    let lead = |s: &str| -> usize { s.len() - s.trim_start_matches([' ', '\t']).len() };
    let mut shift: Option<Shift> = None;
    let mut uniform = true;
    let mut bare_moved = false;
    for (f, o) in file.iter().zip(old) {
        if is_blank(f) || is_blank(o) {
            continue;
        }
        let (fi, oi) = (&f[..lead(f)], &o[..lead(o)]);
        if fi != oi && !f.chars().any(char::is_alphanumeric) {
            bare_moved = true;
        }
        let s = if fi == oi {
            Shift::Same
        } else if let Some(p) = fi.strip_suffix(oi) {
            Shift::Add(p.to_string())
        } else if let Some(p) = oi.strip_suffix(fi) {
            Shift::Remove(p.to_string())
        } else {
            uniform = false;
            continue;
        };
        match &shift {
            None => shift = Some(s),
            Some(prev) if *prev != s => uniform = false,
            Some(_) => {}
        }
    }
    match shift {
        _ if !uniform && bare_moved => Err(()),
        Some(shift) if uniform && shift != Shift::Same => {
            Ok(Some(new.iter().map(|l| reshape(l, &shift, "\n")).collect()))
        }
        _ => Ok(None),
    }
}

/// new_string re-indented by `shift`, with the file's line ending.
fn reshape(new: &str, shift: &Shift, eol: &str) -> String {
    let lines: Vec<String> = new
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .map(|l| match shift {
            _ if is_blank(l) => l.to_string(),
            Shift::Same => l.to_string(),
            Shift::Add(p) => format!("{p}{l}"),
            Shift::Remove(p) => match l.strip_prefix(p.as_str()) {
                Some(rest) => rest.to_string(),
                // Less indented than the offset: drop what indentation it has.
                None => {
                    let ws = l.len() - l.trim_start_matches([' ', '\t']).len();
                    if p.starts_with(&l[..ws]) {
                        l[ws..].to_string()
                    } else {
                        l.to_string()
                    }
                }
            },
        })
        .collect();
    lines.join(eol)
}

/// Try the near-miss levels in order. Ok(None) when none matches anywhere; an error when the
/// first level that matches matches more than one place.
fn forgive(path: &str, content: &[u8], old: &str, new: &str) -> Result<Option<Edited>, ToolError> {
    // Only text: a non-UTF-8 file gets no guessing.
    let Ok(text) = std::str::from_utf8(content) else {
        return Ok(None);
    };
    if is_blank(old) {
        return Ok(None);
    }
    let base = if text.starts_with('\u{FEFF}') { 3 } else { 0 };
    let lines = file_lines(&text[base..], base);
    let old_ends_nl = old.ends_with('\n');
    let mut old_lines: Vec<&str> = old
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    if old_ends_nl {
        old_lines.pop();
    }
    for level in Slack::ALL {
        let found = near_matches(level, &lines, &old_lines);
        let m = match found.len() {
            0 => continue,
            1 => &found[0],
            n => {
                let at: Vec<String> = found
                    .iter()
                    .take(20)
                    .map(|m| (m.first + 1).to_string())
                    .collect();
                return Err(ToolError::Conflict(format!(
                    "old_string was not found exactly in {path}; ignoring {} it matches {n} \
                     places (at lines {}), so nothing was changed. Copy the exact text from \
                     read_file and include more surrounding lines to make it unique",
                    level.what(),
                    at.join(", ")
                )));
            }
        };
        let (first, last) = (&lines[m.first], &lines[m.last]);
        let eol = if first.crlf { "\r\n" } else { "\n" };
        let mut new_text = new;
        if level == Slack::BlankLines {
            // Blank lines at old_string's edges were not matched; drop the same ones from new.
            for _ in old_lines.iter().take_while(|l| is_blank(l)) {
                match new_text.split_once('\n') {
                    Some((h, rest)) if is_blank(h) => new_text = rest,
                    _ => break,
                }
            }
            for _ in old_lines.iter().rev().take_while(|l| is_blank(l)) {
                let nl = usize::from(old_ends_nl && new_text.ends_with('\n'));
                let body = &new_text[..new_text.len() - nl];
                match body.rsplit_once('\n') {
                    Some((rest, tail)) if is_blank(tail) => {
                        new_text = &new_text[..rest.len() + nl];
                    }
                    _ => break,
                }
            }
        }
        let end = if old_ends_nl { last.next } else { last.end };
        // The file's missing final newline stays missing.
        if old_ends_nl && last.next == last.end {
            new_text = new_text.strip_suffix('\n').unwrap_or(new_text);
            new_text = new_text.strip_suffix('\r').unwrap_or(new_text);
        }
        let replacement = reshape(new_text, &m.shift, eol);
        let mut out = Vec::with_capacity(content.len() + replacement.len());
        out.extend_from_slice(&content[..first.start]);
        let offset = out.len();
        out.extend_from_slice(replacement.as_bytes());
        out.extend_from_slice(&content[end..]);
        let line = line_of(&out, offset);
        return Ok(Some((
            out,
            vec![Replacement {
                offset,
                len: replacement.len(),
                line,
                forgiven: Some(level.note()),
            }],
        )));
    }
    Ok(None)
}

fn uses_crlf(content: &[u8]) -> bool {
    memmem::find(content, b"\r\n").is_some()
}

fn to_crlf(s: &str) -> String {
    s.replace("\r\n", "\n").replace('\n', "\r\n")
}

/// 1-indexed line number of byte `offset`.
fn line_of(content: &[u8], offset: usize) -> usize {
    memchr::memchr_iter(b'\n', &content[..offset]).count() + 1
}

/// The places of `lines` most like `old`, best first, at most `max`, never overlapping: each as
/// (first line, last line), 0-based. A window is scored on old's non-blank lines against the
/// file's next non-blank lines (so a blank line more or less does not move it), each line
/// weighted by its length, so a long line that matches counts for more than a lone brace.
pub(crate) fn nearest_windows(lines: &[&str], old: &[&str], max: usize) -> Vec<(usize, usize)> {
    let probe: Vec<&str> = old
        .iter()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty())
        .take(8)
        .collect();
    if probe.is_empty() {
        return Vec::new();
    }
    let weight = |p: &str| p.chars().count().clamp(2, 40) as f64;
    let total: f64 = probe.iter().map(|p| weight(p)).sum();
    let mut scored: Vec<(f64, usize, usize)> = Vec::new();
    for i in 0..lines.len().min(20_000) {
        if is_blank(lines[i]) {
            continue;
        }
        let mut score = 0.0;
        let mut at = i;
        let mut last = i;
        for p in &probe {
            while at < lines.len() && is_blank(lines[at]) {
                at += 1;
            }
            let Some(l) = lines.get(at) else {
                break;
            };
            if l.len() <= 500 {
                score += weight(p) * strsim::normalized_levenshtein(l.trim(), p);
            }
            last = at;
            at += 1;
        }
        let score = score / total;
        if score >= 0.4 {
            scored.push((score, i, last));
        }
    }
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut shown: Vec<(usize, usize)> = Vec::new();
    for (_, first, last) in scored {
        if shown.len() == max {
            break;
        }
        if shown.iter().any(|&(f, l)| first <= l && f <= last) {
            continue;
        }
        shown.push((first, last));
    }
    shown
}

/// The "not found" error: the nearest candidate lines with their numbers, and a whitespace hint.
fn not_found(path: &str, content: &[u8], old: &str) -> ToolError {
    let text = String::from_utf8_lossy(content);
    let lines: Vec<&str> = text.lines().collect();
    let old_lines: Vec<&str> = old.lines().collect();
    let mut msg = format!("old_string was not found in {path}.");

    let squash = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let old_squashed = squash(old);
    if !old_squashed.is_empty() {
        // A match that differs only in whitespace: say where.
        let first = squash(
            old_lines
                .iter()
                .find(|l| !l.trim().is_empty())
                .unwrap_or(&""),
        );
        if let Some(i) = lines.iter().position(|l| squash(l) == first) {
            let span = old_lines.len().max(1);
            let region = lines[i..(i + span).min(lines.len())].join("\n");
            if squash(&region) == old_squashed {
                msg.push_str(&format!(
                    " Lines {}-{} match it except for whitespace (indentation, tabs or line \
                     endings); copy the exact text from read_file.",
                    i + 1,
                    i + span
                ));
            }
        }
    }

    let shown = nearest_windows(&lines, &old_lines, 3);
    if shown.is_empty() {
        msg.push_str(" No similar lines found; read the file again with read_file to see its current content.");
    } else {
        msg.push_str(" The closest lines are:");
        for (first, last) in shown {
            msg.push('\n');
            let span = (last - first + 1).min(8);
            for (n, l) in lines.iter().enumerate().skip(first).take(span) {
                msg.push_str(&format!("\n{:>6}|{}", n + 1, l));
            }
        }
    }
    ToolError::NotFound(msg)
}

/// `edit_file`: replace an exact string in a file.
pub struct EditFile {
    env: Arc<ToolEnv>,
}

impl EditFile {
    /// The tool over `env`.
    pub fn new(env: Arc<ToolEnv>) -> Self {
        Self { env }
    }
}

#[async_trait]
impl TypedTool for EditFile {
    type Args = EditFileArgs;

    fn name(&self) -> &str {
        "edit_file"
    }

    fn description(&self) -> &str {
        "Replace an exact string in a file. old_string must occur exactly once unless \
         replace_all is true; line endings, BOM and the final newline are kept. The file must \
         have been read with read_file in this session. Shows the changed lines."
    }

    fn annotations(&self) -> Annotations {
        Annotations::MUTATING
    }

    async fn run(&self, args: EditFileArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let ws = &self.env.workspace;
        let rel = ws.locate(&args.path, &ctx.cwd)?;
        let content = ws.read(&rel)?;
        let current = toolyard_workspace::hash_bytes(&content);
        let expect = expect_for_write(&self.env, ctx, &rel, Some(&current)).await?;
        let (new_content, reps) = apply_edit(
            rel.as_str(),
            &content,
            &args.old_string,
            &args.new_string,
            args.replace_all,
        )?;
        let out = commit_write(&self.env, ctx, "edit_file", &rel, &new_content, &expect).await?;
        let text = describe(rel.as_str(), &new_content, &reps);
        Ok(ToolResult::ok(text)
            .with_data(json!({
                "path": out.path.as_str(),
                "replacements": reps.len(),
                "lines": reps.iter().map(|r| r.line).collect::<Vec<_>>(),
                "original_bytes": content.len(),
                "new_bytes": new_content.len(),
            }))
            .with_files_changed(vec![out.path.to_string()]))
    }
}

/// "Edited PATH: N replacements" and the changed regions with line numbers and two lines of
/// context (the first three regions).
fn describe(path: &str, content: &[u8], reps: &[Replacement]) -> String {
    let text = String::from_utf8_lossy(content);
    let lines: Vec<&str> = text.lines().collect();
    let n = reps.len();
    let mut out = format!(
        "Edited {path}: {n} replacement{}.",
        if n == 1 { "" } else { "s" }
    );
    if let Some(note) = reps.iter().find_map(|r| r.forgiven) {
        out.push_str(&format!(
            " old_string was not found exactly; {note}. Check the lines below."
        ));
    }
    for r in reps.iter().take(3) {
        let new_lines = content[r.offset..r.offset + r.len]
            .iter()
            .filter(|&&b| b == b'\n')
            .count();
        let from = r.line.saturating_sub(3);
        let to = (r.line + new_lines + 2).min(lines.len());
        out.push('\n');
        for (i, l) in lines.iter().enumerate().take(to).skip(from) {
            out.push_str(&format!(
                "\n{:>6}|{}",
                i + 1,
                l.strip_suffix('\r').unwrap_or(l)
            ));
        }
    }
    if n > 3 {
        out.push_str(&format!("\n\n... and {} more replacements", n - 3));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn crlf_bom_and_missing_final_newline_survive() {
        let content = b"\xEF\xBB\xBFfn a() {\r\n    1\r\n}";
        let (out, reps) =
            apply_edit("f", content, "fn a() {\n    1", "fn a() {\n    2", false).unwrap();
        assert_eq!(out, b"\xEF\xBB\xBFfn a() {\r\n    2\r\n}");
        assert_eq!(reps[0].line, 1);
    }

    #[test]
    fn not_found_shows_the_nearest_lines_with_numbers() {
        let content = b"alpha\nfn compute(x: u32) -> u32 {\n    x + 1\n}\n";
        let e = apply_edit("f.rs", content, "fn compute(x: u64) -> u64 {", "y", false).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("     2|fn compute(x: u32) -> u32 {"), "{msg}");
    }

    #[test]
    fn whitespace_only_difference_is_named() {
        let content = b"if x {\n\tdo_it();\n}\n";
        let e = apply_edit("f", content, "if x {\n    do_it();\n}", "z", false).unwrap_err();
        assert!(e.to_string().contains("except for whitespace"), "{e}");
    }

    #[test]
    fn several_matches_need_replace_all() {
        let content = b"a\nx\nb\nx\n";
        let e = apply_edit("f", content, "x", "y", false).unwrap_err();
        assert!(e.to_string().contains("2 times"), "{e}");
        assert!(e.to_string().contains("lines 2, 4"), "{e}");
        let (out, reps) = apply_edit("f", content, "x", "y", true).unwrap();
        assert_eq!(out, b"a\ny\nb\ny\n");
        assert_eq!(reps.len(), 2);
    }

    #[test]
    fn trailing_whitespace_is_forgiven_and_named() {
        let content = b"fn a() {   \n    x();\n}\n";
        let (out, reps) = apply_edit(
            "f",
            content,
            "fn a() {\n    x();",
            "fn a() {\n    y();",
            false,
        )
        .unwrap();
        assert_eq!(out, b"fn a() {\n    y();\n}\n");
        assert_eq!(
            reps[0].forgiven,
            Some("matched ignoring trailing whitespace")
        );
    }

    #[test]
    fn indentation_offset_is_forgiven_and_new_is_reindented() {
        let content = b"mod m {\n\tfn a() {\n\t\tx();\n\t}\n}\n";
        let (out, reps) = apply_edit(
            "f",
            content,
            "fn a() {\n\tx();\n}",
            "fn a() {\n\ty();\n\tz();\n}",
            false,
        )
        .unwrap();
        assert_eq!(out, b"mod m {\n\tfn a() {\n\t\ty();\n\t\tz();\n\t}\n}\n");
        assert_eq!(reps[0].line, 2);
        assert!(reps[0].forgiven.unwrap().contains("indentation"));
    }

    #[test]
    fn a_level_that_matches_twice_refuses_with_lines() {
        let content = b"a() {\n  b();\n}\nc() {\n  b();\n}\n";
        let e = apply_edit("f", content, "  b(); \n}", "  d();\n}", false).unwrap_err();
        assert!(e.to_string().contains("lines 2, 5"), "{e}");
    }

    proptest! {
        #[test]
        fn unique_edit_changes_exactly_that_region(
            before in "[a-z \n]{0,200}", needle in "[A-Z]{3,10}", after in "[a-z \n]{0,200}",
            replacement in "[a-zA-Z \n]{0,30}",
        ) {
            prop_assume!(replacement != needle);
            let content = format!("{before}{needle}{after}");
            let (out, reps) = apply_edit("f", content.as_bytes(), &needle, &replacement, false).unwrap();
            prop_assert_eq!(out, format!("{before}{replacement}{after}").into_bytes());
            prop_assert_eq!(reps.len(), 1);
            prop_assert_eq!(reps[0].line, before.matches('\n').count() + 1);
        }
    }
}
