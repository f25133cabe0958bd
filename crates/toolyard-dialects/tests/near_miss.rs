//! edit_file's near-miss forgiveness over a corpus cut from real source: each slip kind applies
//! exactly as the exact edit would (and says so), each forbidden difference refuses, ambiguity
//! refuses, and an exact match behaves as it did before forgiveness existed. Then the same
//! corpus through every dialect's edit tool, each attempt counted as applied, guided or
//! unguided (see [`Outcome`]), with the slips models make in a patch's context lines added
//! (trailing spaces dropped, tabs and spaces swapped, indentation off by one level or by
//! different amounts): 0 wrong.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{Value, json};
use toolyard_core::{Tool, ToolContext};
use toolyard_dialects::Dialect;
use toolyard_tools::files::{apply_edit, read_tracked};
use toolyard_tools::patch;

mod common;

const CORPUS: &[(&str, &str)] = &[
    ("rust", include_str!("near_miss/edit_excerpt.rs")),
    ("python", include_str!("near_miss/textwrap.py")),
    ("c (tabs)", include_str!("near_miss/hello.c")),
    ("javascript", include_str!("near_miss/server.js")),
    ("javascript crlf", include_str!("near_miss/client_crlf.js")),
    ("toml", include_str!("near_miss/tools.toml")),
    ("markdown", include_str!("near_miss/readme.md")),
    // gjson 0.8.1 (MIT): its README (lines 216-310: trailing spaces, tab-indented code) and
    // its Go parity CLI (tab-indented).
    (
        "markdown, trailing spaces",
        include_str!("near_miss/gjson_readme.md"),
    ),
    ("go (tabs)", include_str!("near_miss/main.go")),
];

/// The slips the engine forgives. The two indentation slips differ in new_string: written at
/// the same slipped indentation as old_string, or at the file's own.
const SLIPS: &[&str] = &[
    "line endings",
    "trailing whitespace",
    "indentation, new slipped too",
    "indentation, new as in the file",
    "blank lines",
];
const FORBIDDEN: &[&str] = &["identifier", "quote", "missing line", "missing comma"];

/// Lines of `s` with their terminators.
fn lines_of(s: &str) -> Vec<&str> {
    s.split_inclusive('\n').collect()
}

fn body(l: &str) -> &str {
    l.trim_end_matches(['\n', '\r'])
}

fn eol(l: &str) -> &str {
    &l[body(l).len()..]
}

/// old_string as a model would mistype it for `kind`; None when the slip does not apply here.
fn slip(kind: &str, old: &str, crlf: bool) -> Option<String> {
    let ls = lines_of(old);
    let out = match kind {
        "line endings" if crlf => old.replace("\r\n", "\n"),
        "line endings" => old.replace('\n', "\r\n"),
        "trailing whitespace" => ls
            .iter()
            .map(|l| format!("{}  {}", body(l), eol(l)))
            .collect(),
        "indentation, new slipped too" | "indentation, new as in the file" => {
            let pad = if old.contains("\n\t") || old.starts_with('\t') {
                "\t"
            } else {
                "    "
            };
            ls.iter()
                .map(|l| {
                    if body(l).trim().is_empty() {
                        l.to_string()
                    } else {
                        format!("{pad}{l}")
                    }
                })
                .collect()
        }
        "blank lines" => {
            // Drop the first blank line, or add one after the first line.
            match ls.iter().position(|l| body(l).trim().is_empty()) {
                Some(i) if i > 0 && i + 1 < ls.len() => {
                    let mut v = ls.clone();
                    v.remove(i);
                    v.concat()
                }
                _ if ls.len() > 1 => {
                    let nl = eol(ls[0]).to_string();
                    let mut v: Vec<String> = ls.iter().map(|s| s.to_string()).collect();
                    v.insert(1, nl);
                    v.concat()
                }
                _ => return None,
            }
        }
        _ => unreachable!(),
    };
    (out != old).then_some(out)
}

/// new_string as the model sends it with the slip: shifted like old_string, or (new as in the
/// file, and the other slips) as the file has it.
fn slip_new(kind: &str, new: &str, crlf: bool) -> String {
    match kind {
        "indentation, new slipped too" | "line endings" => {
            slip(kind, new, crlf).unwrap_or_else(|| new.into())
        }
        _ => new.into(),
    }
}

/// The slips of a patch's context lines, as models make them (the 55 patch near misses of the
/// report: trailing spaces dropped, tabs turned into spaces or spaces into tabs), and
/// indentation off by one level or by different amounts.
const CONTEXT_SLIPS: &[&str] = &[
    "context without trailing spaces",
    "context with tabs as spaces",
    "context with spaces as tabs",
    "context one level off",
    "context indented by mixed amounts",
];

/// The window's lines (bodies, without line endings) with a context slip; None when the slip
/// changes nothing here.
fn context_slip(kind: &str, lines: &[&str]) -> Option<Vec<String>> {
    let indent = |l: &str| l.len() - l.trim_start_matches([' ', '\t']).len();
    let out: Vec<String> = match kind {
        "context without trailing spaces" => {
            lines.iter().map(|l| l.trim_end().to_string()).collect()
        }
        "context with tabs as spaces" => lines
            .iter()
            .map(|l| {
                let n = indent(l);
                format!("{}{}", l[..n].replace('\t', "    "), &l[n..])
            })
            .collect(),
        "context with spaces as tabs" => lines
            .iter()
            .map(|l| {
                let n = indent(l);
                if l[..n].contains('\t') {
                    return l.to_string();
                }
                format!("{}{}{}", "\t".repeat(n / 4), " ".repeat(n % 4), &l[n..])
            })
            .collect(),
        "context one level off" => {
            let pad = if lines.iter().any(|l| l.starts_with('\t')) {
                "\t"
            } else {
                "    "
            };
            lines
                .iter()
                .map(|l| {
                    if l.trim().is_empty() {
                        l.to_string()
                    } else {
                        format!("{pad}{l}")
                    }
                })
                .collect()
        }
        "context indented by mixed amounts" => {
            // The report's slip: every indented line at one space, the others as they are.
            let levels: std::collections::BTreeSet<usize> = lines
                .iter()
                .filter(|l| !l.trim().is_empty())
                .map(|l| indent(l))
                .collect();
            if levels.len() < 2 {
                return None;
            }
            lines
                .iter()
                .map(|l| {
                    let n = indent(l);
                    if n == 0 || l.trim().is_empty() {
                        l.to_string()
                    } else {
                        format!(" {}", &l[n..])
                    }
                })
                .collect()
        }
        _ => unreachable!(),
    };
    (out.iter().zip(lines).any(|(a, b)| a != b)).then_some(out)
}

/// old_string with a difference that must never be forgiven; None when not applicable.
fn forbid(kind: &str, old: &str) -> Option<String> {
    let out = match kind {
        "identifier" => {
            // Change one letter of the first word of 4+ letters.
            let mut start = None;
            let b = old.as_bytes();
            let mut run = 0;
            for (i, c) in b.iter().enumerate() {
                if c.is_ascii_alphabetic() || *c == b'_' {
                    run += 1;
                    if run == 4 {
                        start = Some(i);
                        break;
                    }
                } else {
                    run = 0;
                }
            }
            let i = start?;
            let mut s = old.to_string();
            let c = if b[i] == b'q' { "z" } else { "q" };
            s.replace_range(i..i + 1, c);
            s
        }
        "quote" => {
            if old.contains('"') {
                old.replacen('"', "'", 1)
            } else if old.contains('\'') {
                old.replacen('\'', "\"", 1)
            } else {
                return None;
            }
        }
        "missing line" => {
            let ls = lines_of(old);
            let i = (1..ls.len().saturating_sub(1)).find(|&i| !body(ls[i]).trim().is_empty())?;
            let mut v = ls.clone();
            v.remove(i);
            v.concat()
        }
        "missing comma" => {
            if !old.contains(',') {
                return None;
            }
            old.replacen(',', "", 1)
        }
        _ => unreachable!(),
    };
    (out != old).then_some(out)
}

#[derive(Default)]
struct Tally {
    applied_right: usize,
    refused_ambiguous: usize,
    refused_other: usize,
    wrong: usize,
}

#[test]
fn corpus_slips_apply_and_forbidden_differences_refuse() {
    let mut rows: Vec<(String, String, Tally)> = Vec::new();
    let mut failures = Vec::new();
    for (lang, text) in CORPUS {
        let crlf = text.contains("\r\n");
        let ls = lines_of(text);
        let mut slips: Vec<Tally> = SLIPS.iter().map(|_| Tally::default()).collect();
        let mut forbids: Vec<Tally> = FORBIDDEN.iter().map(|_| Tally::default()).collect();
        for start in (0..ls.len().saturating_sub(4)).step_by(2) {
            let old: String = ls[start..start + 4].concat();
            // Leave off the last terminator, as models usually do.
            let old = old.trim_end_matches(['\r', '\n']).to_string();
            // Models copy from a line of text to a line of text.
            let edge_blank =
                body(ls[start]).trim().is_empty() || body(ls[start + 3]).trim().is_empty();
            if edge_blank || text.matches(old.as_str()).count() != 1 {
                continue;
            }
            let first = body(ls[start]);
            let indent = &first[..first.len() - first.trim_start().len()];
            let nl = if crlf { "\r\n" } else { "\n" };
            let new = format!("{first}{nl}{indent}INSERTED_LINE{}", &old[first.len()..]);
            let Ok((want, _)) = apply_edit("f", text.as_bytes(), &old, &new, false) else {
                panic!("exact edit failed in {lang} at line {}", start + 1);
            };
            for (k, kind) in SLIPS.iter().enumerate() {
                let Some(o) = slip(kind, &old, crlf) else {
                    continue;
                };
                let n = slip_new(kind, &new, crlf);
                let t = &mut slips[k];
                // `\n` sent for a CRLF file is an exact match: nothing to say was forgiven.
                let exact = *kind == "line endings" && crlf;
                match apply_edit("f", text.as_bytes(), &o, &n, false) {
                    Ok((out, reps)) if out == want && reps[0].forgiven.is_some() != exact => {
                        t.applied_right += 1
                    }
                    Ok(_) => {
                        t.wrong += 1;
                        failures.push(format!("{lang} line {} {kind}: applied wrongly", start + 1));
                    }
                    Err(e) if e.to_string().contains("places (at lines") => {
                        t.refused_ambiguous += 1
                    }
                    Err(e) => {
                        t.refused_other += 1;
                        failures.push(format!("{lang} line {} {kind}: refused: {e}", start + 1));
                    }
                }
            }
            for (k, kind) in FORBIDDEN.iter().enumerate() {
                let Some(o) = forbid(kind, &old) else {
                    continue;
                };
                if text.contains(o.as_str()) {
                    continue;
                }
                let t = &mut forbids[k];
                match apply_edit("f", text.as_bytes(), &o, &new, false) {
                    Ok(_) => {
                        t.wrong += 1;
                        failures.push(format!("{lang} line {} {kind}: applied", start + 1));
                    }
                    Err(_) => t.refused_other += 1,
                }
            }
        }
        for (k, t) in slips.into_iter().enumerate() {
            rows.push((lang.to_string(), format!("slip: {}", SLIPS[k]), t));
        }
        for (k, t) in forbids.into_iter().enumerate() {
            rows.push((lang.to_string(), format!("forbidden: {}", FORBIDDEN[k]), t));
        }
    }
    println!("| corpus | case | applied correctly | refused (ambiguous) | refused | wrong |");
    println!("|---|---|---|---|---|---|");
    let mut total_slip = Tally::default();
    let mut total_forbid = Tally::default();
    for (lang, case, t) in &rows {
        println!(
            "| {lang} | {case} | {} | {} | {} | {} |",
            t.applied_right, t.refused_ambiguous, t.refused_other, t.wrong
        );
        let tot = if case.starts_with("slip") {
            &mut total_slip
        } else {
            &mut total_forbid
        };
        tot.applied_right += t.applied_right;
        tot.refused_ambiguous += t.refused_ambiguous;
        tot.refused_other += t.refused_other;
        tot.wrong += t.wrong;
    }
    let n_slip = total_slip.applied_right
        + total_slip.refused_ambiguous
        + total_slip.refused_other
        + total_slip.wrong;
    let n_forbid = total_forbid.refused_other + total_forbid.wrong;
    println!(
        "\nslips: {}/{n_slip} applied correctly, {} refused as ambiguous, {} refused otherwise, {} wrong",
        total_slip.applied_right,
        total_slip.refused_ambiguous,
        total_slip.refused_other,
        total_slip.wrong
    );
    println!(
        "forbidden: {}/{n_forbid} refused correctly, {} applied",
        total_forbid.refused_other, total_forbid.wrong
    );
    assert!(
        n_slip > 100 && n_forbid > 100,
        "corpus too small: {n_slip} {n_forbid}"
    );
    assert_eq!(total_slip.wrong + total_forbid.wrong, 0, "{failures:#?}");
    assert_eq!(total_slip.refused_other, 0, "{failures:#?}");
}

/// The exact-match path as it was before near misses were forgiven: non-overlapping
/// occurrences left to right; one, or all with replace_all. Occurrences that overlap are
/// refused (which text is meant is unclear).
fn reference(content: &str, old: &str, new: &str, all: bool) -> Option<String> {
    let b = content.as_bytes();
    let starts: Vec<usize> = (0..=b.len().saturating_sub(old.len()))
        .filter(|&i| b[i..].starts_with(old.as_bytes()))
        .collect();
    if starts.windows(2).any(|w| w[1] < w[0] + old.len()) {
        return None;
    }
    let n = content.matches(old).count();
    if n == 0 || (n > 1 && !all) {
        return None;
    }
    Some(content.replace(old, new))
}

proptest! {
    #[test]
    fn an_exact_match_behaves_as_before(
        parts in proptest::collection::vec("[a-z \n]{0,40}", 1..5),
        needle in "[A-Z][A-Z \n]{1,8}[A-Z]",
        new in "[a-zA-Z \n]{0,20}",
        all in any::<bool>(),
    ) {
        prop_assume!(new != needle && !parts.iter().any(|p| p.contains(&needle)));
        let content = parts.join(&needle);
        let got = apply_edit("f", content.as_bytes(), &needle, &new, all);
        match reference(&content, &needle, &new, all) {
            Some(want) => {
                let (out, reps) = got.unwrap();
                prop_assert_eq!(String::from_utf8(out).unwrap(), want);
                prop_assert!(reps.iter().all(|r| r.forgiven.is_none()));
                prop_assert_eq!(reps.len(), content.matches(needle.as_str()).count());
            }
            None => prop_assert!(got.is_err()),
        }
    }
}

/// What one attempted edit came to, as a model sees it.
///
/// - **applied**: the edit landed exactly as intended (the file equals the exact edit's result);
/// - **guided**: refused, the file untouched, and the error shows the intended place (a numbered
///   line of the intended window, or its line number among the places listed), so the model
///   can retry right;
/// - **unguided**: refused, the file untouched, without showing the intended place;
/// - **wrong**: applied anything else (or applied a difference that must never be forgiven);
/// - **changed**: refused but the file changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Applied,
    Guided,
    Unguided,
    Wrong,
    Changed,
}

/// The line numbers an error shows: numbered lines (`    12|text`), and numbers listed after
/// "line"/"lines" (`at lines 3, 7`, `lines 12-15`, `starting at lines 4, 9`).
fn shown_lines(msg: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for l in msg.lines() {
        let t = l.trim_start();
        if let Some((n, _)) = t.split_once(['|', '\u{2192}'])
            && let Ok(n) = n.trim().parse::<usize>()
        {
            out.push(n);
        }
    }
    let lower = msg.to_lowercase();
    for (i, _) in lower.match_indices("line") {
        let rest = &lower[i + 4..];
        let rest = rest.strip_prefix('s').unwrap_or(rest);
        let list: String = rest
            .chars()
            .take_while(|c| c.is_ascii_digit() || matches!(c, ' ' | ',' | '-'))
            .collect();
        for part in list.split([',', ' ']) {
            let mut ends = part.split('-').filter_map(|n| n.parse::<usize>().ok());
            match (ends.next(), ends.next()) {
                (Some(a), Some(b)) if b >= a && b - a < 100 => out.extend(a..=b),
                (Some(a), _) => out.push(a),
                _ => {}
            }
        }
    }
    out
}

/// One attempted edit: the intended window (1-based lines), old and new as the model sent them.
struct Attempt {
    lang: &'static str,
    case: String,
    lines: (usize, usize),
    old: String,
    new: String,
    /// The file as the exact edit leaves it; None when the edit must be refused.
    want: Option<Vec<u8>>,
    /// The same file as the exact patch leaves it (a patch always ends the file with a newline).
    want_patch: Option<Vec<u8>>,
    /// The patch codex apply_patch gets, when it is not old's lines removed and new's added
    /// (the context slips keep their lines as context).
    patch: Option<String>,
}

/// Every attempt the corpus yields: each slip and forbidden difference over each unique 4-line
/// window, and each line that occurs more than once, aimed at its first occurrence.
fn attempts() -> Vec<Attempt> {
    let mut out = Vec::new();
    for (lang, text) in CORPUS {
        let crlf = text.contains("\r\n");
        let nl = if crlf { "\r\n" } else { "\n" };
        let ls = lines_of(text);
        for start in (0..ls.len().saturating_sub(4)).step_by(2) {
            let old: String = ls[start..start + 4].concat();
            let old = old.trim_end_matches(['\r', '\n']).to_string();
            let edge_blank =
                body(ls[start]).trim().is_empty() || body(ls[start + 3]).trim().is_empty();
            if edge_blank || text.matches(old.as_str()).count() != 1 {
                continue;
            }
            let first = body(ls[start]);
            let indent = &first[..first.len() - first.trim_start().len()];
            let new = format!("{first}{nl}{indent}INSERTED_LINE{}", &old[first.len()..]);
            let want = apply_edit("f", text.as_bytes(), &old, &new, false)
                .expect("the exact edit applies")
                .0;
            let lines = (start + 1, start + 4);
            let exact = Attempt {
                lang,
                case: String::new(),
                lines,
                old: old.clone(),
                new: new.clone(),
                want: None,
                want_patch: None,
                patch: None,
            };
            let hunks = patch::parse_patch(&as_patch(&exact)).expect("the exact patch parses");
            let patch::Hunk::Update { chunks, .. } = &hunks[0] else {
                unreachable!()
            };
            let want_patch = patch::apply_chunks("f", text, chunks)
                .expect("the exact patch applies")
                .text
                .into_bytes();
            for kind in SLIPS {
                if let Some(o) = slip(kind, &old, crlf) {
                    out.push(Attempt {
                        lang,
                        case: format!("slip: {kind}"),
                        lines,
                        old: o,
                        new: slip_new(kind, &new, crlf),
                        want: Some(want.clone()),
                        want_patch: Some(want_patch.clone()),
                        patch: None,
                    });
                }
            }
            // The same insertion as a patch with context lines, each context slip applied to
            // them; the other tools get the same lines as old and new.
            let bodies: Vec<&str> = ls[start..start + 4].iter().map(|l| body(l)).collect();
            for kind in CONTEXT_SLIPS {
                let Some(sent) = context_slip(kind, &bodies) else {
                    continue;
                };
                let pad = &sent[0][..sent[0].len() - sent[0].trim_start().len()];
                let inserted = format!("{pad}INSERTED_LINE");
                let mut p = format!("*** Begin Patch\n*** Update File: f\n@@\n {}\n", sent[0]);
                p.push_str(&format!("+{inserted}\n"));
                for l in &sent[1..] {
                    p.push_str(&format!(" {l}\n"));
                }
                p.push_str("*** End Patch");
                let mut new_lines = vec![sent[0].clone(), inserted];
                new_lines.extend(sent[1..].iter().cloned());
                out.push(Attempt {
                    lang,
                    case: format!("patch: {kind}"),
                    lines,
                    old: sent.join(nl),
                    new: new_lines.join(nl),
                    want: Some(want.clone()),
                    want_patch: Some(want_patch.clone()),
                    patch: Some(p),
                });
            }
            for kind in FORBIDDEN {
                if let Some(o) = forbid(kind, &old)
                    && !text.contains(o.as_str())
                {
                    out.push(Attempt {
                        lang,
                        case: format!("forbidden: {kind}"),
                        lines,
                        old: o,
                        new: new.clone(),
                        want: None,
                        want_patch: None,
                        patch: None,
                    });
                }
            }
        }
        // Ambiguous: a whole line of real text that the file has at several places.
        let mut seen = BTreeMap::new();
        for (i, l) in ls.iter().enumerate() {
            let b = body(l);
            let whole = ls.iter().filter(|m| body(m) == b).count();
            if b.trim().len() >= 3 && whole > 1 && !seen.contains_key(b) {
                seen.insert(b, i);
            }
        }
        for (b, i) in seen {
            out.push(Attempt {
                lang,
                case: "ambiguous".into(),
                lines: (i + 1, i + 1),
                old: b.to_string(),
                new: format!("{b} // CHANGED"),
                want: None,
                want_patch: None,
                patch: None,
            });
        }
    }
    out
}

/// A Codex patch of the attempt: its own, or the old lines removed and the new lines added,
/// under one `@@`.
fn as_patch(a: &Attempt) -> String {
    if let Some(p) = &a.patch {
        return p.clone();
    }
    let mut p = String::from("*** Begin Patch\n*** Update File: f\n@@\n");
    for l in a.old.split('\n') {
        p.push_str(&format!("-{l}\n"));
    }
    for l in a.new.split('\n') {
        p.push_str(&format!("+{l}\n"));
    }
    p.push_str("*** End Patch");
    p
}

/// The dialects' edit tools, and the call each makes of an attempt.
const TOOLS: &[(Dialect, &str, &str)] = &[
    (Dialect::Loopr, "edit_file", "edit_file"),
    (Dialect::ClaudeCode, "Edit", "claude-code Edit"),
    (
        Dialect::Anthropic,
        "str_replace_based_edit_tool",
        "anthropic str_replace",
    ),
    (Dialect::Gemini, "replace", "gemini replace"),
    (Dialect::Codex, "apply_patch", "codex apply_patch"),
];

fn args_for(tool: &str, a: &Attempt) -> Value {
    match tool {
        "edit_file" => json!({"path": "f", "old_string": a.old, "new_string": a.new}),
        "Edit" | "replace" => json!({"file_path": "f", "old_string": a.old, "new_string": a.new}),
        "str_replace_based_edit_tool" => {
            json!({"command": "str_replace", "path": "f", "old_str": a.old, "new_str": a.new})
        }
        "apply_patch" => json!({"input": as_patch(a)}),
        _ => unreachable!(),
    }
}

/// Per (tool, case or language): how many attempts came to each outcome.
type Counts = BTreeMap<(String, String), BTreeMap<Outcome, usize>>;

fn pct(n: usize, of: usize) -> String {
    if of == 0 {
        "-".into()
    } else {
        format!("{:.0}%", 100.0 * n as f64 / of as f64)
    }
}

/// One row per case (or language), one column per tool: `applied / guided / unguided` in %.
fn print_table(title: &str, counts: &Counts) {
    let keys: std::collections::BTreeSet<&String> = counts.keys().map(|(_, k)| k).collect();
    println!(
        "\n| {title} | n |{}",
        TOOLS
            .iter()
            .map(|t| format!(" {} |", t.2))
            .collect::<String>()
    );
    println!("|---|---:|{}", "---|".repeat(TOOLS.len()));
    for key in keys {
        let mut n = 0;
        let mut cells = String::new();
        for (_, _, label) in TOOLS {
            let Some(c) = counts.get(&(label.to_string(), key.clone())) else {
                cells.push_str(" - |");
                continue;
            };
            let total: usize = c.values().sum();
            n = n.max(total);
            let get = |o| c.get(&o).copied().unwrap_or(0);
            let mut cell = format!(
                " {} / {} / {}",
                pct(get(Outcome::Applied), total),
                pct(get(Outcome::Guided), total),
                pct(get(Outcome::Unguided), total)
            );
            for (o, what) in [(Outcome::Wrong, "wrong"), (Outcome::Changed, "changed")] {
                if get(o) > 0 {
                    cell.push_str(&format!(" ({} {what})", get(o)));
                }
            }
            cells.push_str(&cell);
            cells.push_str(" |");
        }
        println!("| {key} | {n} |{cells}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dialect_edit_tool_applies_guides_or_refuses_over_the_corpus() {
    let attempts = attempts();
    let mut by_case: Counts = BTreeMap::new();
    let mut by_lang: Counts = BTreeMap::new();
    let mut bad = Vec::new();
    for (dialect, tool_name, label) in TOOLS {
        let w = common::DialectWorkspace::new(*dialect, &[("f", "")]);
        let tool: Arc<dyn Tool> = w
            .tools
            .iter()
            .find(|t| t.name() == *tool_name)
            .unwrap()
            .clone();
        let path = w.ws.join("f");
        let mut current: Option<&str> = None;
        for (k, a) in attempts.iter().enumerate() {
            let text = CORPUS.iter().find(|(l, _)| *l == a.lang).unwrap().1;
            let mut ctx = ToolContext::new(&w.ws, "s");
            ctx.call_id = format!("c{k}");
            if current != Some(text) || std::fs::read(&path).unwrap() != text.as_bytes() {
                std::fs::write(&path, text).unwrap();
                current = Some(text);
            }
            read_tracked(&w.env, &ctx, "f").await.unwrap();
            let got = tool.invoke(args_for(tool_name, a), &ctx).await;
            let after = std::fs::read(&path).unwrap();
            let refusal = match got {
                Ok(r) if r.success => None,
                Ok(r) => Some(r.output),
                Err(e) => Some(e.to_string()),
            };
            let want = if *tool_name == "apply_patch" {
                &a.want_patch
            } else {
                &a.want
            };
            let outcome = match (&refusal, want) {
                (None, Some(want)) if after == *want => Outcome::Applied,
                (None, _) => Outcome::Wrong,
                (Some(_), _) if after != text.as_bytes() => Outcome::Changed,
                (Some(msg), _) => {
                    let (s, e) = a.lines;
                    if shown_lines(msg).iter().any(|n| (s..=e).contains(n)) {
                        Outcome::Guided
                    } else {
                        Outcome::Unguided
                    }
                }
            };
            if matches!(outcome, Outcome::Wrong | Outcome::Changed) {
                bad.push(format!(
                    "{label}: {} {} lines {:?}: {outcome:?}",
                    a.lang, a.case, a.lines
                ));
            }
            if outcome == Outcome::Unguided && std::env::var_os("NEAR_MISS_SHOW").is_some() {
                println!(
                    "UNGUIDED {label} {} {} {:?}: {}",
                    a.lang,
                    a.case,
                    a.lines,
                    refusal.as_deref().unwrap_or("")
                );
            }
            *by_case
                .entry((label.to_string(), a.case.clone()))
                .or_default()
                .entry(outcome)
                .or_default() += 1;
            *by_lang
                .entry((label.to_string(), a.lang.to_string()))
                .or_default()
                .entry(outcome)
                .or_default() += 1;
        }
    }
    print_table("case", &by_case);
    print_table("language", &by_lang);
    let total = |o: Outcome| -> usize {
        by_case
            .values()
            .map(|c| c.get(&o).copied().unwrap_or(0))
            .sum()
    };
    println!(
        "\nall tools: {} attempts; applied {}, guided {}, unguided {}, wrong {}, changed on refusal {}",
        attempts.len() * TOOLS.len(),
        total(Outcome::Applied),
        total(Outcome::Guided),
        total(Outcome::Unguided),
        total(Outcome::Wrong),
        total(Outcome::Changed)
    );
    assert!(
        attempts.len() > 1000,
        "corpus too small: {}",
        attempts.len()
    );
    assert!(bad.is_empty(), "{bad:#?}");
    // Every refusal shows the intended place among the nearest candidates.
    assert_eq!(
        total(Outcome::Unguided),
        0,
        "rerun with NEAR_MISS_SHOW=1 to see them"
    );
}
