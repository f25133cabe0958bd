//! The near misses `edit_file` forgives when old_string is not found exactly: line endings,
//! trailing space, indentation (the new text re-indented by the same offset) and blank lines at
//! its edges, each applied only where it picks out one place.

use toolyard_core::ToolError;

use super::{Replacement, capitalized, line_of, numbered_lines, span, ws_words};

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

    /// What the result says was forgiven, and what became of new_string's indentation.
    fn note(self, frame: Option<Frame>) -> &'static str {
        match (self, frame) {
            (Slack::LineEndings, _) => "matched ignoring line endings",
            (Slack::TrailingSpace, _) => "matched ignoring trailing whitespace",
            (Slack::Indentation, Some(Frame::File)) => {
                "matched ignoring a uniform indentation offset; new_string was already at the \
                 file's indentation, so it was written as sent"
            }
            (Slack::Indentation, _) => {
                "matched ignoring a uniform indentation offset; new_string was re-indented by \
                 the same offset"
            }
            (Slack::BlankLines, None) => "matched ignoring blank lines",
            (Slack::BlankLines, Some(Frame::File)) => {
                "matched ignoring blank lines and indentation; new_string was already at the \
                 file's indentation, so it was written as sent"
            }
            (Slack::BlankLines, Some(Frame::Sent)) => {
                "matched ignoring blank lines and indentation; new_string was re-indented by the \
                 same offset"
            }
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
pub(crate) enum Shift {
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

pub(super) fn is_blank(s: &str) -> bool {
    s.trim().is_empty()
}

/// The leading spaces and tabs of `s`.
pub(crate) fn indent_of(s: &str) -> &str {
    &s[..s.len() - s.trim_start_matches([' ', '\t']).len()]
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
pub(super) type Edited = (Vec<u8>, Vec<Replacement>);

/// A near-miss match: file lines `first..=last`, the file line each old line matched (`None`
/// for a blank old line the blank-lines level skipped), and the indentation shift.
struct NearMatch {
    first: usize,
    last: usize,
    map: Vec<Option<usize>>,
    shift: Shift,
}

impl NearMatch {
    /// The place, for telling matches apart across levels: the file line the first non-blank
    /// line of old_string matched.
    fn key(&self, old: &[&str]) -> usize {
        old.iter()
            .position(|l| !is_blank(l))
            .and_then(|k| self.map[k])
            .unwrap_or(self.first)
    }
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
                    map: (i..i + k).map(Some).collect(),
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
            let mut next = taken.iter().copied();
            let map = old
                .iter()
                .map(|l| if is_blank(l) { None } else { next.next() })
                .collect();
            found.push(NearMatch {
                first: i,
                last: p - 1,
                map,
                shift,
            });
        }
    }
    found
}

/// How the indentation of the lines a model sent relates to that of the file lines they
/// matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Indent {
    /// One shift for every line (`Shift::Same`: none).
    Shift(Shift),
    /// Each `sent` unit of indentation (e.g. four spaces) stands for one `file` unit (a tab).
    Units {
        /// One level as the model sent it.
        sent: String,
        /// One level in the file.
        file: String,
    },
}

impl Indent {
    /// The model's indentation `ws` as the file would have it; None when it does not convert
    /// (a tab where the file's offset is in spaces, a part of a level).
    pub(crate) fn convert(&self, ws: &str) -> Option<String> {
        match self {
            Indent::Shift(Shift::Same) => Some(ws.to_string()),
            Indent::Shift(Shift::Add(p)) => Some(format!("{p}{ws}")),
            Indent::Shift(Shift::Remove(p)) => match ws.strip_prefix(p.as_str()) {
                Some(rest) => Some(rest.to_string()),
                // Less indented than the offset: it drops what indentation it has.
                None if p.starts_with(ws) => Some(String::new()),
                None => None,
            },
            Indent::Units { sent, file } => {
                let n = ws.len() / sent.len();
                (sent.repeat(n) == ws).then(|| file.repeat(n))
            }
        }
    }

    /// A line the model sent, re-indented as the file has it (blank lines as sent).
    pub(crate) fn apply(&self, line: &str) -> Option<String> {
        if is_blank(line) {
            return Some(line.to_string());
        }
        let ws = indent_of(line);
        Some(format!("{}{}", self.convert(ws)?, &line[ws.len()..]))
    }

    /// What the re-indentation did, for the result ("indented 4 spaces more").
    pub(crate) fn describe(&self) -> String {
        match self {
            Indent::Shift(Shift::Same) => "left as sent".into(),
            Indent::Shift(Shift::Add(p)) => format!("indented {} more", ws_words(p)),
            Indent::Shift(Shift::Remove(p)) => format!("indented {} less", ws_words(p)),
            Indent::Units { sent, file } => format!(
                "re-indented with {} for each {} of theirs",
                ws_words(file),
                ws_words(sent)
            ),
        }
    }
}

/// Indentation that differs between the file and the lines sent, and not in one way.
#[derive(Debug)]
pub(crate) struct MixedIndent {
    /// A line of only brackets and punctuation (`}`, `));`) is among those that differ: such a
    /// line is known only by its indentation, so the match may be other lines than meant.
    pub(crate) bare_moved: bool,
}

/// How `sent` lines are indented relative to the `file` lines they matched, pairwise (blank
/// lines do not count): one shift for all, one unit for another (tabs for spaces), or mixed.
pub(crate) fn indent_relation(file: &[&str], sent: &[&str]) -> Result<Indent, MixedIndent> {
    let mut shift: Option<Shift> = None;
    let mut uniform = true;
    let mut bare_moved = false;
    let mut pairs = Vec::new();
    for (f, o) in file.iter().zip(sent) {
        if is_blank(f) || is_blank(o) {
            continue;
        }
        let (fi, oi) = (indent_of(f), indent_of(o));
        pairs.push((fi, oi));
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
    if uniform {
        return Ok(Indent::Shift(shift.unwrap_or(Shift::Same)));
    }
    units(&pairs).ok_or(MixedIndent { bare_moved })
}

/// Tabs in the file where the model sent spaces (or the reverse), the same number of the one
/// for each of the other on every line.
fn units(pairs: &[(&str, &str)]) -> Option<Indent> {
    let kind = |s: &str| -> Option<Option<char>> {
        let mut cs = s.chars();
        match cs.next() {
            None => Some(None),
            Some(c) => cs.all(|d| d == c).then_some(Some(c)),
        }
    };
    let (mut fc, mut sc, mut ratio) = (None, None, None);
    for &(f, s) in pairs {
        let (Some(fk), Some(sk)) = (kind(f), kind(s)) else {
            return None;
        };
        match (fk, sk) {
            (None, None) => continue,
            (Some(a), Some(b)) => {
                if *fc.get_or_insert(a) != a || *sc.get_or_insert(b) != b || a == b {
                    return None;
                }
                let (long, short) = if a == '\t' {
                    (s.len(), f.len())
                } else {
                    (f.len(), s.len())
                };
                if long % short != 0 || *ratio.get_or_insert(long / short) != long / short {
                    return None;
                }
            }
            _ => return None,
        }
    }
    let (f, s, n) = (fc?, sc?, ratio?);
    let (file, sent) = if f == '\t' {
        ("\t".to_string(), " ".repeat(n))
    } else {
        (" ".repeat(n), "\t".to_string())
    };
    debug_assert!(s != f);
    Some(Indent::Units { sent, file })
}

/// Which indentation the model wrote its new lines at, when its old lines matched the file only
/// with their indentation changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Frame {
    /// At the file's own: write them as sent.
    File,
    /// At the indentation it sent the old lines at: re-indent them the same way.
    Sent,
}

/// Pairs (old line, new line) of non-blank lines with the same text after their indentation,
/// in order (a longest common subsequence; in order, greedily, for very long texts).
pub(crate) fn shared_lines(old: &[&str], new: &[&str]) -> Vec<(usize, usize)> {
    let key = |s: &str| -> Option<String> { (!is_blank(s)).then(|| s.trim().to_string()) };
    let ok: Vec<Option<String>> = old.iter().map(|s| key(s)).collect();
    let nk: Vec<Option<String>> = new.iter().map(|s| key(s)).collect();
    let same = |i: usize, j: usize| ok[i].is_some() && ok[i] == nk[j];
    let (n, m) = (ok.len(), nk.len());
    if n.saturating_mul(m) > 4_000_000 {
        let mut out = Vec::new();
        let mut from = 0;
        for j in 0..m {
            if let Some(i) = (from..n).find(|&i| same(i, j)) {
                out.push((i, j));
                from = i + 1;
            }
        }
        return out;
    }
    // lcs[i][j]: the longest common subsequence of old[i..] and new[j..].
    let mut lcs = vec![0u32; (n + 1) * (m + 1)];
    let at = |i: usize, j: usize| i * (m + 1) + j;
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[at(i, j)] = if same(i, j) {
                lcs[at(i + 1, j + 1)] + 1
            } else {
                lcs[at(i + 1, j)].max(lcs[at(i, j + 1)])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < n && j < m {
        if same(i, j) {
            out.push((i, j));
            i += 1;
            j += 1;
        } else if lcs[at(i + 1, j)] >= lcs[at(i, j + 1)] {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// Judge which indentation new lines were written at from the lines they share with the old
/// lines (`pairs`), and from the first new line when it shares none: a shared line indented as
/// in the file says [`Frame::File`], one indented as the model sent the old line says
/// [`Frame::Sent`]. Lines whose old and file indentation agree say nothing. Any line that says
/// neither, or lines that disagree, make it unclear: the error says why, in words.
pub(crate) fn judge_frame(
    file: &[Option<&str>],
    old: &[&str],
    new: &[&str],
    pairs: &[(usize, usize)],
) -> Result<Frame, String> {
    let (mut as_file, mut as_sent, mut neither) = (None, None, None);
    let mut vote = |k: usize, j: usize| {
        let Some(f) = file.get(k).copied().flatten() else {
            return;
        };
        let (fi, oi, ni) = (indent_of(f), indent_of(old[k]), indent_of(new[j]));
        if fi == oi {
            return;
        }
        let slot = if ni == fi {
            &mut as_file
        } else if ni == oi {
            &mut as_sent
        } else {
            &mut neither
        };
        slot.get_or_insert((k, j));
    };
    for &(k, j) in pairs {
        vote(k, j);
    }
    let first_new = new.iter().position(|l| !is_blank(l));
    let first_old = old.iter().position(|l| !is_blank(l));
    if let (Some(j), Some(k)) = (first_new, first_old)
        && !pairs.iter().any(|p| p.1 == j)
    {
        vote(k, j);
    }
    let says = |(k, j): (usize, usize)| {
        format!(
            "line {} of the new text has {} where the old text has {} and the file {}",
            j + 1,
            ws_words(indent_of(new[j])),
            ws_words(indent_of(old[k])),
            ws_words(indent_of(file[k].unwrap_or(""))),
        )
    };
    match (as_file, as_sent, neither) {
        (_, _, Some(n)) => Err(format!(
            "{}: it is indented neither like the old text nor like the file",
            says(n)
        )),
        (Some(f), Some(s), None) => Err(format!(
            "the new text is indented like the file in one place and like the old text in \
             another ({}; {})",
            says(f),
            says(s)
        )),
        (Some(_), None, None) => Ok(Frame::File),
        (None, _, None) => Ok(Frame::Sent),
    }
}

/// Try the near-miss levels. Ok(None) when none matches anywhere. The first level that matches
/// is applied only when it matches one place and no later level matches another place: an error
/// names the places otherwise.
pub(super) fn forgive(
    path: &str,
    content: &[u8],
    old: &str,
    new: &str,
) -> Result<Option<Edited>, ToolError> {
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
    let found: Vec<(Slack, Vec<NearMatch>)> = Slack::ALL
        .iter()
        .map(|&level| (level, near_matches(level, &lines, &old_lines)))
        .collect();
    let Some(winner) = found.iter().position(|(_, f)| !f.is_empty()) else {
        return Ok(None);
    };
    let level = found[winner].0;
    let all_text: Vec<&str> = lines.iter().map(|l| l.text).collect();
    let m = one_place(path, &found, winner, &old_lines, &all_text)?;
    let (first, last) = (&lines[m.first], &lines[m.last]);
    let eol = if first.crlf { "\r\n" } else { "\n" };
    let mut new_text = new;
    if level == Slack::BlankLines {
        new_text = without_blank_edges(new_text, &old_lines, old_ends_nl);
    }
    let end = if old_ends_nl { last.next } else { last.end };
    // The file's missing final newline stays missing.
    if old_ends_nl && last.next == last.end {
        new_text = new_text.strip_suffix('\n').unwrap_or(new_text);
        new_text = new_text.strip_suffix('\r').unwrap_or(new_text);
    }
    let new_lines: Vec<&str> = new_text
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    let file_of: Vec<Option<&str>> = m.map.iter().map(|o| o.map(|i| lines[i].text)).collect();
    let pairs = shared_lines(&old_lines, &new_lines);
    let indent = Indent::Shift(m.shift.clone());
    let frame = if m.shift == Shift::Same {
        None
    } else {
        let frame = judge_frame(&file_of, &old_lines, &new_lines, &pairs)
            .map_err(|why| unclear_indent(path, &all_text, m, &why))?;
        Some(frame)
    };
    let mut out_lines: Vec<String> = Vec::with_capacity(new_lines.len());
    for (j, l) in new_lines.iter().enumerate() {
        // A line the model kept as it believed it was keeps the file's own bytes.
        let kept = pairs
            .iter()
            .find(|p| p.1 == j)
            .and_then(|&(k, _)| file_of[k].filter(|f| old_lines[k] == *l && *f != old_lines[k]));
        let line = match (kept, frame) {
            (Some(f), _) => f.to_string(),
            (None, Some(Frame::File)) => l.to_string(),
            (None, _) => indent.apply(l).ok_or_else(|| {
                unclear_indent(
                    path,
                    &all_text,
                    m,
                    &format!(
                        "line {} of the new text is indented with {}, which does not take the \
                         offset",
                        j + 1,
                        ws_words(indent_of(l))
                    ),
                )
            })?,
        };
        out_lines.push(line);
    }
    let replacement = out_lines.join(eol);
    let mut out = Vec::with_capacity(content.len() + replacement.len());
    out.extend_from_slice(&content[..first.start]);
    let offset = out.len();
    out.extend_from_slice(replacement.as_bytes());
    out.extend_from_slice(&content[end..]);
    let line = line_of(&out, offset);
    Ok(Some((
        out,
        vec![Replacement {
            offset,
            len: replacement.len(),
            replaced: end - first.start,
            line,
            forgiven: Some(level.note(frame)),
            warning: None,
        }],
    )))
}

/// The one place the first level that matches (`found[winner]`) matches, or the error
/// naming every place when it matches more than one, or a looser level matches elsewhere.
fn one_place<'m>(
    path: &str,
    found: &'m [(Slack, Vec<NearMatch>)],
    winner: usize,
    old_lines: &[&str],
    all_text: &[&str],
) -> Result<&'m NearMatch, ToolError> {
    let (level, matches) = (found[winner].0, &found[winner].1);
    if matches.len() > 1 {
        let at: Vec<String> = matches
            .iter()
            .take(20)
            .map(|m| (m.first + 1).to_string())
            .collect();
        return Err(ToolError::Conflict(format!(
            "old_string was not found exactly in {path}; ignoring {} it matches {} places (at \
             lines {}), so nothing was changed. Copy the exact text from read_file and include \
             more surrounding lines to make it unique",
            level.what(),
            matches.len(),
            at.join(", ")
        )));
    }
    let m = &matches[0];
    // Another place that a looser level matches is a place the model may have meant.
    let key = m.key(old_lines);
    let mut places: Vec<(usize, usize, usize, Slack)> = vec![(key, m.first, m.last, level)];
    for (l, ms) in &found[winner + 1..] {
        for x in ms {
            let k = x.key(old_lines);
            if !places.iter().any(|p| p.0 == k) {
                places.push((k, x.first, x.last, *l));
            }
        }
    }
    if places.len() > 1 {
        let mut msg = format!(
            "old_string was not found exactly in {path}, and it is near {} places, so nothing \
             was changed (the edit could land in the wrong one):",
            places.len()
        );
        for &(_, first, last, l) in places.iter().take(5) {
            msg.push_str(&format!(
                "\n\n{} {} ignoring {}:\n{}",
                capitalized(&span(first + 1, last + 1)),
                if first == last { "matches" } else { "match" },
                l.what(),
                numbered_lines(all_text, first, (last - first + 1).min(8)).trim_end()
            ));
        }
        msg.push_str(
            "\n\nCopy the exact text of the place you mean from read_file, with a line or two \
             more around it if needed to make it unique.",
        );
        return Err(ToolError::Conflict(msg));
    }
    Ok(m)
}

/// `new` without the blank lines at its edges that match old_string's blank edges, which the
/// blank-lines level did not match either.
fn without_blank_edges<'n>(new: &'n str, old_lines: &[&str], old_ends_nl: bool) -> &'n str {
    let mut new_text = new;
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
    new_text
}

/// The refusal when old_string matched only with its indentation changed and new_string does
/// not show which indentation it was written at.
fn unclear_indent(path: &str, lines: &[&str], m: &NearMatch, why: &str) -> ToolError {
    let offset = match &m.shift {
        Shift::Add(p) => format!("{} more than", ws_words(p)),
        Shift::Remove(p) => format!("{} less than", ws_words(p)),
        Shift::Same => "the same as".into(),
    };
    ToolError::Conflict(format!(
        "old_string was not found exactly in {path}; ignoring indentation it matches {} (the \
         file's lines are indented {offset} old_string's), but {why}, so it is unclear which \
         indentation new_string was written at and nothing was changed. The current lines \
         are:\n{}\nSend old_string and new_string again with the file's own indentation, as \
         shown above.",
        span(m.first + 1, m.last + 1),
        numbered_lines(lines, m.first, (m.last - m.first + 1).min(40)).trim_end()
    ))
}
