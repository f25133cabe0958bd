//! `edit_file`: exact string replacement that keeps every other byte, with errors that show the
//! model where to look.

use std::sync::Arc;

use async_trait::async_trait;
use memchr::memmem;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use toolyard_core::{Annotations, ToolContext, ToolError, ToolInfo, ToolResult, TypedTool};

use super::{Aim, commit_write, expect_for_write, is_read_refusal, refuse_unread};
use crate::ToolEnv;

mod forgive;

use forgive::{Edited, forgive, is_blank};
pub(crate) use forgive::{
    Frame, Indent, MixedIndent, Shift, indent_of, indent_relation, judge_frame, shared_lines,
};

/// Arguments of one `edit_file` replacement (the shape loom-py's `edit_file` forwards).
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

/// One replacement of a multi-edit `edit_file` call.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditOp {
    /// The exact text to find, in the file as the edits before this one left it.
    pub old_string: String,
    /// The text to put in its place.
    pub new_string: String,
    /// Replace every occurrence instead of requiring exactly one (default false).
    #[serde(default)]
    pub replace_all: bool,
}

/// Arguments of the `edit_file` tool: one replacement (`old_string`, `new_string`,
/// `replace_all`), or several of one file in `edits`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditFileCall {
    /// File path, relative to the workspace root (or absolute inside it).
    pub path: String,
    /// The exact text to find (copy it from read_file's output, without the line numbers).
    /// Required unless `edits` is given.
    pub old_string: Option<String>,
    /// The text to put in its place. Required unless `edits` is given.
    pub new_string: Option<String>,
    /// Replace every occurrence instead of requiring exactly one (default false).
    #[serde(default)]
    pub replace_all: bool,
    /// Several edits of this file in one call, instead of old_string/new_string: a list of
    /// {old_string, new_string, replace_all?}, each applied to the result of the one before;
    /// if any of them fails, none is applied and the file is untouched.
    #[schemars(length(min = 1))]
    pub edits: Option<Vec<EditOp>>,
}

impl EditFileCall {
    /// The edits this call asks for, or an error naming the argument that is wrong.
    fn into_ops(self) -> Result<(String, Vec<EditOp>), ToolError> {
        let single = self.old_string.is_some() || self.new_string.is_some();
        match self.edits {
            Some(_) if single || self.replace_all => Err(ToolError::InvalidArguments(
                "give either old_string/new_string (and replace_all) or edits, not both; with \
                 edits, put each replacement's old_string, new_string and replace_all inside it"
                    .into(),
            )),
            Some(edits) if edits.is_empty() => Err(ToolError::InvalidArguments(
                "edits is empty; give at least one {old_string, new_string}".into(),
            )),
            Some(edits) => Ok((self.path, edits)),
            None => match (self.old_string, self.new_string) {
                (Some(old_string), Some(new_string)) => Ok((
                    self.path,
                    vec![EditOp {
                        old_string,
                        new_string,
                        replace_all: self.replace_all,
                    }],
                )),
                (None, _) => Err(ToolError::InvalidArguments(
                    "old_string is missing: give old_string and new_string, or several \
                     {old_string, new_string} in edits"
                        .into(),
                )),
                (_, None) => Err(ToolError::InvalidArguments(
                    "new_string is missing: give the text to put in place of old_string (an \
                     empty string deletes it)"
                        .into(),
                )),
            },
        }
    }
}

/// One replacement made in a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Replacement {
    /// Byte offset of the new text in the new content.
    pub offset: usize,
    /// Length of the new text in bytes.
    pub len: usize,
    /// Length in bytes of the text it replaced (in the content before the edit).
    pub replaced: usize,
    /// 1-indexed line where the new text starts.
    pub line: usize,
    /// Which difference was forgiven when old_string did not match exactly (e.g. "matched
    /// ignoring trailing whitespace"); None for an exact match.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forgiven: Option<&'static str>,
    /// Something about an exact match the model should check (it began inside a line's
    /// indentation, so added lines may be indented wrongly).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

/// Replace `old` by `new` in `content` (once, or everywhere with `replace_all`), byte-exactly.
/// When the file uses CRLF and `old` has bare `\n`, both strings are matched in CRLF form, so
/// line endings survive (that is an exact match: the model cannot see line endings). Overlapping
/// occurrences count when judging whether `old` is unique. When there is no exact match, near
/// misses are tried (line endings, trailing whitespace, a uniform indentation offset, blank
/// lines) and applied only if exactly one place matches at any of them. Errors carry a message
/// that shows the nearest candidate lines.
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
    let (mut old_b, mut new_b) = (old.as_bytes().to_vec(), new.as_bytes().to_vec());
    if memmem::find(content, &old_b).is_none()
        && uses_crlf(content)
        && old.contains('\n')
        && !old.contains("\r\n")
    {
        old_b = to_crlf(old).into_bytes();
        new_b = to_crlf(new).into_bytes();
    }
    // Non-overlapping occurrences, left to right: the ones replace_all replaces.
    let distinct: Vec<usize> = memmem::find_iter(content, &old_b).collect();
    if distinct.is_empty() {
        return match forgive(path, content, old, new)? {
            Some(done) => Ok(done),
            None => Err(already_applied(path, content, &new_b)
                .unwrap_or_else(|| not_found(path, content, old))),
        };
    }
    // `aa` occurs twice in `aaa`: overlapping occurrences leave unclear which text is meant,
    // with replace_all too (which ones it would change depends on the order of the search).
    if let Some((first, second)) = first_overlap(content, &old_b) {
        return Err(ToolError::Conflict(format!(
            "old_string occurs at places that overlap in {path} (one at line {}, another \
             starting inside it at line {}), so it is unclear which text to change and nothing \
             was changed. Include more surrounding text to make it unique",
            line_of(content, first),
            line_of(content, second)
        )));
    }
    if !replace_all && distinct.len() > 1 {
        let shown: Vec<String> = distinct
            .iter()
            .take(20)
            .map(|&p| line_of(content, p).to_string())
            .collect();
        return Err(ToolError::Conflict(format!(
            "old_string occurs {} times in {path} (at {}); include more surrounding lines to \
             make it unique, or set replace_all to true to change every one",
            distinct.len(),
            lines_word(&shown)
        )));
    }
    // One place (dialects ask with replace_all and count the places themselves).
    if distinct.len() == 1 {
        // Both are text: they came from &str (CRLF added at most).
        let (o, n) = (
            std::str::from_utf8(&old_b).unwrap_or(old),
            std::str::from_utf8(&new_b).unwrap_or(new),
        );
        if let Some(done) = partial_indent(content, distinct[0], o, n)? {
            return Ok(done);
        }
    }
    let mut out = Vec::with_capacity(content.len() + distinct.len() * new_b.len());
    let mut reps = Vec::with_capacity(distinct.len());
    let mut last = 0;
    for &p in &distinct {
        out.extend_from_slice(&content[last..p]);
        reps.push(Replacement {
            offset: out.len(),
            len: new_b.len(),
            replaced: old_b.len(),
            line: 0,
            forgiven: None,
            // replace_all: each place is flagged, none re-indented.
            warning: inside_indentation(content, p, old, new).map(|(_, whole, _)| {
                format!(
                    "{}; the lines new_string adds may be indented too little. Check them \
                     below; if they are wrong, edit again with the line's whole indentation in \
                     old_string and new_string.",
                    inside_words(line_of(content, p), whole, old)
                )
            }),
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

/// The first two occurrences of `needle` in `hay` that overlap (the second starts before the
/// first ends), if any.
fn first_overlap(hay: &[u8], needle: &[u8]) -> Option<(usize, usize)> {
    let finder = memmem::Finder::new(needle);
    let mut prev: Option<usize> = None;
    let mut at = 0;
    while let Some(i) = hay.get(at..).and_then(|h| finder.find(h)) {
        let start = at + i;
        if let Some(p) = prev
            && start < p + needle.len()
        {
            return Some((p, start));
        }
        prev = Some(start);
        at = start + 1;
    }
    None
}

/// "line 3" or "lines 3, 7" for line numbers already formatted.
fn lines_word(shown: &[String]) -> String {
    match shown {
        [one] => format!("line {one}"),
        _ => format!("lines {}", shown.join(", ")),
    }
}

/// Where an exact match at `p` begins inside its line's indentation while new_string adds
/// lines: (the line's start, its whole indentation, the part of it before `p`). The model
/// likely copied only part of the indentation (old_string `"  x"` matched the end of `"    x"`),
/// so the lines it adds carry too little of it.
fn inside_indentation<'a>(
    content: &'a [u8],
    p: usize,
    old: &str,
    new: &str,
) -> Option<(usize, &'a str, &'a str)> {
    if !old.starts_with([' ', '\t']) || new.matches('\n').count() <= old.matches('\n').count() {
        return None;
    }
    let line_start = memchr::memrchr(b'\n', &content[..p]).map_or(0, |i| i + 1);
    let before = &content[line_start..p];
    if before.is_empty() || !before.iter().all(|&b| b == b' ' || b == b'\t') {
        return None;
    }
    let whole = content[line_start..]
        .iter()
        .take_while(|&&b| b == b' ' || b == b'\t')
        .count();
    let whole = std::str::from_utf8(&content[line_start..line_start + whole]).ok()?;
    let before = std::str::from_utf8(before).ok()?;
    Some((line_start, whole, before))
}

/// The words that say an exact match began inside line `line`'s indentation.
fn inside_words(line: usize, whole: &str, old: &str) -> String {
    format!(
        "old_string matched starting inside the indentation of line {line} (the line is \
         indented with {}, old_string starts with {})",
        ws_words(whole),
        ws_words(indent_of(old)),
    )
}

/// An exact match at `p` that begins inside its line's indentation, where new_string adds
/// lines: placed by the indentation new_string shows it was written at. At the file's own, it
/// replaces the whole line as sent. At old_string's: when old_string is one line, the lines
/// new_string adds are indented like it (by the indentation it left out); when it has more
/// lines, those matched the file as they are, so the added lines are the file's as sent, unless
/// one is at the first line's short indentation and no other line of old_string's, which could
/// mean either level and is refused. Unclear indentation is refused with the current lines.
/// None when the match is not such a match, or is a plain exact edit after all.
fn partial_indent(
    content: &[u8],
    p: usize,
    old: &str,
    new: &str,
) -> Result<Option<Edited>, ToolError> {
    let Some((start, whole, before)) = inside_indentation(content, p, old, new) else {
        return Ok(None);
    };
    let Ok(text) = std::str::from_utf8(content) else {
        return Ok(None);
    };
    let line = text[start..].split('\n').next().unwrap_or("");
    let (line, crlf) = match line.strip_suffix('\r') {
        Some(l) => (l, true),
        None => (line, false),
    };
    let split = |s: &'_ str| -> Vec<String> {
        s.split('\n')
            .map(|l| l.strip_suffix('\r').unwrap_or(l).to_string())
            .collect()
    };
    let (old_lines, new_lines) = (split(old), split(new));
    let old_l: Vec<&str> = old_lines.iter().map(String::as_str).collect();
    let new_l: Vec<&str> = new_lines.iter().map(String::as_str).collect();
    // Past its first line, old_string matched the file's lines as they are.
    let file_of: Vec<Option<&str>> = std::iter::once(Some(line))
        .chain(old_l[1..].iter().map(|l| Some(*l)))
        .collect();
    let pairs = shared_lines(&old_l, &new_l);
    let n = line_of(content, p);
    let frame = judge_frame(&file_of, &old_l, &new_l, &pairs).map_err(|why| {
        let lines: Vec<&str> = text.lines().collect();
        ToolError::Conflict(format!(
            "{}, and {why}, so it is unclear which indentation new_string was written at and \
             nothing was changed. The current lines are:\n{}\nSend old_string and new_string \
             again with the file's own indentation, as shown above.",
            inside_words(n, whole, old),
            numbered_lines(&lines, n - 1, old_l.len().min(40)).trim_end()
        ))
    })?;
    let eol = if crlf { "\r\n" } else { "\n" };
    let body_lines = old.trim_end_matches(['\n', '\r']).matches('\n').count() + 1;
    if frame == Frame::Sent && body_lines > 1 {
        // The lines after the first matched the file as they are: the model knows their
        // indentation, so its added lines are the file's, unless one sits at the first line's
        // short indentation, which no other line of old_string has.
        let short = indent_of(old_l[0]);
        let others_use = old_l[1..]
            .iter()
            .any(|l| !is_blank(l) && indent_of(l) == short);
        let odd = (0..new_l.len()).find(|&j| {
            !is_blank(new_l[j]) && !pairs.iter().any(|q| q.1 == j) && indent_of(new_l[j]) == short
        });
        return match odd {
            Some(j) if !others_use => {
                let lines: Vec<&str> = text.lines().collect();
                Err(ToolError::Conflict(format!(
                    "{}, and line {} of new_string is indented with {} like old_string's first \
                     line, while its other lines matched the file as they are, so it is unclear \
                     whether that line belongs at the first line's level or at {} and nothing \
                     was changed. The current lines are:\n{}\nSend old_string and new_string \
                     again with the file's own indentation, as shown above.",
                    inside_words(n, whole, old),
                    j + 1,
                    ws_words(short),
                    ws_words(short),
                    numbered_lines(&lines, n - 1, old_l.len().min(40)).trim_end()
                )))
            }
            _ => Ok(None),
        };
    }
    let (from, replacement, note) = match frame {
        Frame::File => (
            start,
            new_lines.join(eol),
            "new_string was already at the file's indentation, so it replaced the whole line as \
             sent"
                .to_string(),
        ),
        Frame::Sent => {
            // Each old line's offset from the file: the first lacks `before`, the rest none.
            let offset = |k: usize| {
                if k == 0 {
                    Indent::Shift(Shift::Add(before.to_string()))
                } else {
                    Indent::Shift(Shift::Same)
                }
            };
            let mut anchor = 0;
            let mut out = Vec::with_capacity(new_lines.len());
            for (j, l) in new_l.iter().enumerate() {
                if let Some(&(k, _)) = pairs.iter().find(|q| q.1 == j) {
                    anchor = k;
                }
                // The first line keeps the indentation the file has before the match.
                let shaped = if j == 0 {
                    Some(l.to_string())
                } else {
                    offset(anchor).apply(l)
                };
                out.push(shaped.unwrap_or_else(|| l.to_string()));
            }
            (
                p,
                out.join(eol),
                format!(
                    "the lines new_string adds were indented like the lines next to them ({} \
                     more next to old_string's first line)",
                    ws_words(before)
                ),
            )
        }
    };
    let end = p + old.len();
    let mut out = Vec::with_capacity(content.len() + replacement.len());
    out.extend_from_slice(&content[..from]);
    let offset = out.len();
    out.extend_from_slice(replacement.as_bytes());
    out.extend_from_slice(&content[end..]);
    let line = line_of(&out, offset);
    Ok(Some((
        out,
        vec![Replacement {
            offset,
            len: replacement.len(),
            replaced: end - from,
            line,
            forgiven: None,
            warning: Some(format!(
                "{}; {note}. Check the lines below.",
                inside_words(n, whole, old)
            )),
        }],
    )))
}

/// Indentation in words: "4 spaces", "1 tab", "2 tabs and 1 space", "no indentation".
pub(crate) fn ws_words(ws: &str) -> String {
    let tabs = ws.matches('\t').count();
    let spaces = ws.matches(' ').count();
    let plural = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    match (tabs, spaces) {
        (0, 0) => "no indentation".into(),
        (0, s) => plural(s, "space"),
        (t, 0) => plural(t, "tab"),
        (t, s) => format!("{} and {}", plural(t, "tab"), plural(s, "space")),
    }
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

/// "line 7" or "lines 7-9" (1-indexed, inclusive).
pub(crate) fn span(first: usize, last: usize) -> String {
    if first >= last {
        format!("line {first}")
    } else {
        format!("lines {first}-{last}")
    }
}

/// `s` with its first letter in upper case.
pub(crate) fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

/// `count` lines of `lines` from `first` (0-based), numbered as read_file numbers them, each
/// ending in a newline.
pub(crate) fn numbered_lines<S: AsRef<str>>(lines: &[S], first: usize, count: usize) -> String {
    lines
        .iter()
        .enumerate()
        .skip(first)
        .take(count)
        .map(|(i, l)| {
            let l = l.as_ref();
            format!("{:>6}|{}\n", i + 1, l.strip_suffix('\r').unwrap_or(l))
        })
        .collect()
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

/// When `old` is gone but `new` stands in the file once, the edit was most likely made already
/// (a retried call, or one sent twice): say so instead of "not found", so the model does not
/// go hunting for text it already replaced. A `new` of blank lines alone proves nothing.
fn already_applied(path: &str, content: &[u8], new: &[u8]) -> Option<ToolError> {
    if new.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    let mut at = memmem::find_iter(content, new);
    let first = at.next()?;
    if at.next().is_some() {
        return None;
    }
    Some(ToolError::Conflict(format!(
        "This edit is already applied to {path}: old_string is not in the file and new_string \
         stands at line {}, so nothing was changed. Read the file to see it as it is, and send \
         only what still has to change.",
        line_of(content, first)
    )))
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
                let (first, last) = (i + 1, i + span);
                msg.push_str(&format!(
                    " {} {} it except for whitespace (indentation, tabs or line endings); copy \
                     the exact text from read_file.",
                    capitalized(&self::span(first, last)),
                    if first == last { "matches" } else { "match" },
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

    /// One replacement, as loom-py's `edit_file` forwards it.
    pub async fn run(
        &self,
        args: EditFileArgs,
        ctx: &ToolContext,
    ) -> Result<ToolResult, ToolError> {
        let op = EditOp {
            old_string: args.old_string,
            new_string: args.new_string,
            replace_all: args.replace_all,
        };
        self.edit(&args.path, &[op], ctx).await
    }

    /// Apply `ops` in order to the file at `path`, all or none, in one journaled write.
    async fn edit(
        &self,
        path: &str,
        ops: &[EditOp],
        ctx: &ToolContext,
    ) -> Result<ToolResult, ToolError> {
        let ws = &self.env.workspace;
        let rel = ws.locate(path, &ctx.cwd)?;
        let content = ws.read(&rel)?;
        let current = toolyard_workspace::hash_bytes(&content);
        let expect = match expect_for_write(&self.env, ctx, &rel, Some(&current)).await {
            Ok(expect) => expect,
            Err(e) if is_read_refusal(&e) => {
                let aims: Vec<&str> = ops.iter().map(|o| o.old_string.as_str()).collect();
                return refuse_unread(&self.env, ctx, &rel, &content, Aim::Texts(&aims), e).await;
            }
            Err(e) => return Err(e),
        };
        let mut next = content.clone();
        // Where each edit's new text is, in the content as it stands after the last edit.
        let mut regions: Vec<(usize, usize)> = Vec::new();
        let mut notes: Vec<String> = Vec::new();
        let mut count = 0;
        for (i, op) in ops.iter().enumerate() {
            let (edited, reps) = apply_edit(
                rel.as_str(),
                &next,
                &op.old_string,
                &op.new_string,
                op.replace_all,
            )
            .map_err(|e| which_edit(e, i, ops.len()))?;
            regions = carry(&regions, &reps);
            regions.extend(reps.iter().map(|r| (r.offset, r.len)));
            regions = merged(regions);
            let label = if ops.len() > 1 {
                format!("edit {}: ", i + 1)
            } else {
                String::new()
            };
            if let Some(note) = reps.iter().find_map(|r| r.forgiven) {
                notes.push(format!(
                    "{label}old_string was not found exactly; {note}. Check the lines below."
                ));
            }
            notes.extend(
                reps.iter()
                    .filter_map(|r| r.warning.as_ref())
                    .map(|w| format!("{label}{w}")),
            );
            count += reps.len();
            next = edited;
        }
        let out = commit_write(&self.env, ctx, "edit_file", &rel, &next, &expect).await?;
        let lines: Vec<usize> = regions.iter().map(|&(o, _)| line_of(&next, o)).collect();
        let text = describe(rel.as_str(), &next, ops.len(), count, &regions, &notes);
        Ok(ToolResult::ok(text)
            .with_data(json!({
                "path": out.path.as_str(),
                "edits": ops.len(),
                "replacements": count,
                "lines": lines,
                "original_bytes": content.len(),
                "new_bytes": next.len(),
            }))
            .with_files_changed(vec![out.path.to_string()]))
    }
}

/// An error of edit `i` of `n`, saying which one when there are several.
fn which_edit(e: ToolError, i: usize, n: usize) -> ToolError {
    if n == 1 {
        return e;
    }
    let tag = |m: String| format!("edit {} of {n}: {m} (no edit was applied)", i + 1);
    match e {
        ToolError::NotFound(m) => ToolError::NotFound(tag(m)),
        ToolError::Conflict(m) => ToolError::Conflict(tag(m)),
        ToolError::InvalidArguments(m) => ToolError::InvalidArguments(tag(m)),
        e => e,
    }
}

/// `regions` (offset, length) sorted, the ones that overlap or touch made one.
fn merged(mut regions: Vec<(usize, usize)>) -> Vec<(usize, usize)> {
    regions.sort_unstable();
    let mut out: Vec<(usize, usize)> = Vec::with_capacity(regions.len());
    for (o, l) in regions {
        match out.last_mut() {
            Some(last) if o <= last.0 + last.1 => last.1 = (o + l).max(last.0 + last.1) - last.0,
            _ => out.push((o, l)),
        }
    }
    out
}

/// `regions` (offset, length) of the content before an edit, moved to where they are after it
/// (`reps` are the edit's replacements): a region the edit overlapped grows to cover it.
fn carry(regions: &[(usize, usize)], reps: &[Replacement]) -> Vec<(usize, usize)> {
    // Each replacement as (old start, old end, new start, new end).
    let mut moved = 0isize;
    let spans: Vec<(usize, usize, usize, usize)> = reps
        .iter()
        .map(|r| {
            let old_start = r.offset.saturating_add_signed(-moved);
            moved += r.len as isize - r.replaced as isize;
            (
                old_start,
                old_start + r.replaced,
                r.offset,
                r.offset + r.len,
            )
        })
        .collect();
    regions
        .iter()
        .map(|&(o, l)| {
            let end = o + l;
            let mut delta = 0isize;
            let (mut lo, mut hi) = (usize::MAX, 0);
            for &(os, oe, ns, ne) in &spans {
                if oe <= o {
                    delta += (ne - ns) as isize - (oe - os) as isize;
                } else if os >= end {
                    break;
                } else {
                    lo = lo.min(ns);
                    hi = hi.max(ne);
                }
            }
            let start = o.saturating_add_signed(delta);
            if lo == usize::MAX {
                (start, l)
            } else {
                let s = start.min(lo);
                (s, (start + l).max(hi) - s)
            }
        })
        .collect()
}

#[async_trait]
impl TypedTool for EditFile {
    type Args = EditFileCall;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new(
            "edit_file",
            "Replace an exact string in a file. old_string must occur exactly once unless \
         replace_all is true; line endings, BOM and the final newline are kept. Several edits \
         of one file go in one call as edits: [{old_string, new_string, replace_all?}, ...], \
         applied in order, all or none. The file must have been read with read_file in this \
         session. Shows the changed lines.",
            Annotations::MUTATING,
        )
    }

    async fn run(&self, args: EditFileCall, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let (path, ops) = args.into_ops()?;
        self.edit(&path, &ops, ctx).await
    }
}

/// "Edited PATH: N replacements", what was forgiven or should be checked, and the changed
/// regions with line numbers and two lines of context (the first few).
fn describe(
    path: &str,
    content: &[u8],
    edits: usize,
    count: usize,
    regions: &[(usize, usize)],
    notes: &[String],
) -> String {
    let text = String::from_utf8_lossy(content);
    let lines: Vec<&str> = text.lines().collect();
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    let mut out = if edits > 1 {
        format!(
            "Edited {path}: {edits} edits, {count} replacement{}.",
            plural(count)
        )
    } else {
        format!("Edited {path}: {count} replacement{}.", plural(count))
    };
    for note in notes {
        out.push(' ');
        out.push_str(note);
    }
    // Line ranges (0-based, end exclusive) to show, overlapping ones merged.
    let mut shown: Vec<(usize, usize)> = Vec::new();
    for &(offset, len) in regions {
        let first = line_of(content, offset) - 1;
        let new_lines = content[offset..offset + len]
            .iter()
            .filter(|&&b| b == b'\n')
            .count();
        let (from, to) = (
            first.saturating_sub(2),
            (first + new_lines + 3).min(lines.len()),
        );
        match shown.last_mut() {
            Some(last) if from <= last.1 => last.1 = last.1.max(to),
            _ => shown.push((from, to)),
        }
    }
    let max = if edits > 1 { edits.clamp(3, 8) } else { 3 };
    for &(from, to) in shown.iter().take(max) {
        out.push('\n');
        out.push('\n');
        out.push_str(numbered_lines(&lines, from, to - from).trim_end_matches('\n'));
    }
    if shown.len() > max {
        out.push_str(&format!(
            "\n\n... and {} more changed places",
            shown.len() - max
        ));
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
    fn an_edit_whose_new_text_already_stands_is_said_to_be_applied() {
        let content = b"fn a() {}\nfn b() { 2 }\nfn c() {}\n";
        let err = apply_edit("m.rs", content, "fn b() { 1 }", "fn b() { 2 }", false).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("already applied to m.rs"), "{msg}");
        assert!(msg.contains("line 2"), "{msg}");
        // Not when the new text is not there, or stands in more than one place.
        let err = apply_edit("m.rs", content, "fn z() {}", "fn y() {}", false).unwrap_err();
        assert!(!err.to_string().contains("already applied"), "{err}");
        let twice = b"x = 2\nx = 2\n";
        let err = apply_edit("m.rs", twice, "x = 1", "x = 2", false).unwrap_err();
        assert!(!err.to_string().contains("already applied"), "{err}");
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
        // The line the model kept as it believed it was keeps the file's own bytes.
        assert_eq!(out, b"fn a() {   \n    y();\n}\n");
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
