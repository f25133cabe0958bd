//! What `grep` makes of the matches its walk collected: sorted and cut to the limits, then
//! rendered as `path:line:text` with a footer that says what was left out.

use super::{Collected, GrepLimits, GrepLine, GrepOutcome};
use crate::search::Vocab;
use crate::search::walk::HiddenSkipped;

/// Sort by path and cut to the limits (whole files first, then lines).
pub(super) fn select(mut c: Collected, limits: Option<GrepLimits>, context: usize) -> GrepOutcome {
    c.files.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    let mut outcome = GrepOutcome {
        files: Vec::new(),
        total_files: c.total_files,
        total_matches: c.total_matches,
        searched_files: c.searched,
        hidden: HiddenSkipped::default(),
        top_files: c.top_files(),
    };
    let Some(limits) = limits else {
        outcome.files = c.files;
        return outcome;
    };
    let mut budget = limits.max_lines as u64;
    for mut file in c.files {
        if outcome.files.len() >= limits.max_files || budget == 0 {
            break;
        }
        let stored = file.lines.iter().filter(|l| l.is_match).count() as u64;
        if stored > budget {
            cut_after_matches(&mut file.lines, budget, context);
            budget = 0;
        } else {
            budget -= stored;
        }
        outcome.files.push(file);
    }
    outcome
}

/// Sort by path and keep the first `max_files` files (no lines were kept).
pub(super) fn select_files(mut c: Collected, limits: Option<GrepLimits>) -> GrepOutcome {
    c.files.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    if let Some(l) = limits {
        c.files.truncate(l.max_files);
    }
    let top_files = c.top_files();
    GrepOutcome {
        files: c.files,
        total_files: c.total_files,
        total_matches: c.total_matches,
        searched_files: c.searched,
        hidden: HiddenSkipped::default(),
        top_files,
    }
}

/// Keep the first `n` matching lines and the context that follows the last of them.
pub(super) fn cut_after_matches(lines: &mut Vec<GrepLine>, n: u64, context: usize) {
    let mut seen = 0;
    let mut last_match = None;
    let mut end = lines.len();
    for (i, l) in lines.iter().enumerate() {
        if l.is_match {
            if seen == n {
                end = i;
                break;
            }
            seen += 1;
            last_match = Some(l.number);
        }
    }
    lines.truncate(end);
    if let Some(last) = last_match {
        while lines
            .last()
            .is_some_and(|l| !l.is_match && (l.gap_before || l.number > last + context as u64))
        {
            lines.pop();
        }
    }
}

/// The model-facing text of an outcome: `path:line:text`, `path-line-text`, `--` gaps.
pub fn render(outcome: &GrepOutcome, context: usize) -> String {
    let mut out = String::new();
    for (i, file) in outcome.files.iter().enumerate() {
        if context > 0 && i > 0 {
            out.push_str("--\n");
        }
        for line in &file.lines {
            if line.gap_before {
                out.push_str("--\n");
            }
            let sep = if line.is_match { ':' } else { '-' };
            out.push_str(&file.path);
            out.push(sep);
            out.push_str(&line.number.to_string());
            out.push(sep);
            out.push_str(&line.text);
            out.push('\n');
        }
    }
    out
}

/// The footer that says what was left out, if anything, and where the matches are.
pub(super) fn footer(outcome: &GrepOutcome, vocab: &Vocab) -> Option<String> {
    let shown = outcome.shown_matches();
    if shown >= outcome.total_matches {
        return None;
    }
    let fully_shown = outcome
        .files
        .iter()
        .filter(|f| f.lines.iter().filter(|l| l.is_match).count() as u64 == f.match_count)
        .count() as u64;
    let more_files = outcome.total_files - fully_shown;
    let mut text = format!(
        "[{} more matches in {} files not shown ({} matches in {} files in all); {}]",
        outcome.total_matches - shown,
        more_files,
        outcome.total_matches,
        outcome.total_files,
        vocab.narrow
    );
    if let Some(table) = per_file_table(outcome) {
        text.push('\n');
        text.push_str(&table);
    }
    Some(text)
}

/// Where the matches are: a `path: count` line for each of the files with the most, and the
/// rest summed; `None` for a single file.
pub fn per_file_table(outcome: &GrepOutcome) -> Option<String> {
    if outcome.total_files < 2 || outcome.top_files.is_empty() {
        return None;
    }
    // Rows indented inside the brackets, so none reads as a match line.
    let mut rows: Vec<String> = outcome
        .top_files
        .iter()
        .map(|(path, n)| format!("  {path}: {n}"))
        .collect();
    let listed: u64 = outcome.top_files.iter().map(|(_, n)| n).sum();
    let others = outcome.total_files - outcome.top_files.len() as u64;
    if others > 0 {
        rows.push(format!(
            "  {others} other file{}: {}",
            if others == 1 { "" } else { "s" },
            outcome.total_matches - listed
        ));
    }
    Some(format!(
        "[matching lines per file, most first:\n{}]",
        rows.join("\n")
    ))
}
