//! Where a chunk's old lines are in a file: exactly, or at a forgiving pass (trailing space,
//! all surrounding space, look-alike punctuation), and the errors that name the candidates.

use std::borrow::Cow;

use toolyard_core::ToolError;

use crate::files::{nearest_windows, numbered_lines, span};

/// The four ways Codex compares a line of the patch with a line of the file, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pass {
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
    pub(super) fn key<'a>(self, s: &'a str) -> Cow<'a, str> {
        match self {
            Pass::Exact => Cow::Borrowed(s),
            Pass::TrailingWhitespace => Cow::Borrowed(s.trim_end()),
            Pass::SurroundingWhitespace => Cow::Borrowed(s.trim()),
            Pass::Punctuation => Cow::Owned(s.trim().chars().map(plain_char).collect()),
        }
    }

    pub(super) fn describe(self) -> &'static str {
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
pub(super) enum Seek {
    /// One place (0-based start), found at this pass.
    At(usize, Pass),
    /// Several places (0-based starts, at most a few), each with the first pass that matched it.
    Ambiguous(Vec<(usize, Pass)>),
    Missing,
}

/// Most places collected per pass.
const MAX_HITS: usize = 6;

/// Codex's `seek_sequence` from `start` (from the last possible window when `eof`): the first
/// pass that matches anywhere decides, with Toolyard's checks. With `unique` (no `@@` anchor),
/// more than one window at that pass is `Ambiguous`, and so is a match by a forgiving pass when
/// another place matches at any pass. After an anchor (`unique` false) the first match wins, as
/// in Codex, unless a looser pass matches a place between the anchor and it.
pub(super) fn seek<S: AsRef<str>>(
    lines: &[String],
    pattern: &[S],
    start: usize,
    eof: bool,
    unique: bool,
) -> Seek {
    if pattern.is_empty() {
        return Seek::At(start, Pass::Exact);
    }
    if pattern.len() > lines.len() {
        return Seek::Missing;
    }
    let last = lines.len() - pattern.len();
    let from = if eof { last } else { start };
    if from > last {
        return Seek::Missing;
    }
    // Each place with the first pass that matched it, in pass order.
    let mut found: Vec<(usize, Pass)> = Vec::new();
    let mut winner: Option<(Pass, Vec<usize>)> = None;
    for pass in PASSES {
        let want: Vec<Cow<str>> = pattern.iter().map(|p| pass.key(p.as_ref())).collect();
        let have: Vec<Cow<str>> = lines[from..].iter().map(|l| pass.key(l)).collect();
        let mut hits = Vec::new();
        for i in 0..=(last - from) {
            if have[i..i + want.len()] == want[..] {
                hits.push(from + i);
                if hits.len() == MAX_HITS {
                    break;
                }
            }
        }
        for &h in &hits {
            if !found.iter().any(|f| f.0 == h) {
                found.push((h, pass));
            }
        }
        if winner.is_none() && !hits.is_empty() {
            // An exact match is what the model wrote: no looser pass can overrule it.
            if pass == Pass::Exact && (!unique || hits.len() == 1) {
                return Seek::At(hits[0], pass);
            }
            winner = Some((pass, hits));
        }
    }
    let Some((pass, hits)) = winner else {
        return Seek::Missing;
    };
    let chosen = hits[0];
    if unique && hits.len() > 1 {
        return Seek::Ambiguous(hits.into_iter().map(|h| (h, pass)).collect());
    }
    let rivals: Vec<(usize, Pass)> = found
        .into_iter()
        .filter(|&(h, _)| h != chosen && (unique || h < chosen))
        .collect();
    if rivals.is_empty() {
        return Seek::At(chosen, pass);
    }
    let mut all = vec![(chosen, pass)];
    all.extend(rivals);
    all.sort_unstable_by_key(|p| p.0);
    Seek::Ambiguous(all)
}

/// The windows of the file most like `pattern` (up to three), numbered, for a "not found" error.
pub(super) fn nearest<S: AsRef<str>>(path: &str, lines: &[String], pattern: &[S]) -> String {
    if lines.is_empty() {
        return format!("{path} is empty.");
    }
    let file: Vec<&str> = lines.iter().map(String::as_str).collect();
    let old: Vec<&str> = pattern.iter().map(AsRef::as_ref).collect();
    let found = nearest_windows(&file, &old, 3);
    let Some(&(first, last)) = found.first() else {
        return format!(
            "No lines of {path} look like them. Its first lines are:\n{}",
            numbered_lines(lines, 0, pattern.len().clamp(5, 12))
        );
    };
    let show = |first: usize, last: usize| numbered_lines(lines, first, (last - first + 1).min(12));
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
        out.push_str(&format!("Also like them, {}:\n", span(f + 1, l + 1)));
        out.push_str(&show(f, l));
    }
    out
}

/// The refusal of lines that match several places: each place numbered, with the pass that
/// matched it.
pub(super) fn ambiguous(
    path: &str,
    what: &str,
    shown: &str,
    lines: &[String],
    len: usize,
    places: &[(usize, Pass)],
) -> ToolError {
    let at: Vec<String> = places.iter().map(|h| (h.0 + 1).to_string()).collect();
    let more = if places.len() >= MAX_HITS {
        " and more"
    } else {
        ""
    };
    let passes: Vec<Pass> = places.iter().map(|p| p.1).collect();
    let how = if passes.iter().all(|&p| p == passes[0]) {
        format!("({})", passes[0].describe())
    } else {
        "(at different passes)".to_string()
    };
    let mut msg = format!(
        "Ambiguous patch for {path}: {what} match {} places {how}, starting at lines {}{more}:\n\
         {shown}\n",
        if places.len() >= MAX_HITS {
            format!("{MAX_HITS} or more")
        } else {
            places.len().to_string()
        },
        at.join(", ")
    );
    for &(h, pass) in places.iter().take(4) {
        msg.push_str(&format!(
            "\nAt {} ({}):\n{}",
            span(h + 1, h + len),
            pass.describe(),
            numbered_lines(lines, h, len.min(6))
        ));
    }
    msg.push_str(
        "\nCodex would change the first it finds; Toolyard refuses to guess. Add context lines, \
         or an `@@ <line>` header naming a line just above the change, and copy them exactly, \
         so they match one place.",
    );
    ToolError::Conflict(msg)
}
