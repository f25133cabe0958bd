//! edit_file's near-miss forgiveness over a corpus cut from real source: each slip kind applies
//! exactly as the exact edit would (and says so), each forbidden difference refuses, ambiguity
//! refuses, and an exact match behaves as it did before forgiveness existed.

use proptest::prelude::*;
use toolyard_tools::files::apply_edit;

const CORPUS: &[(&str, &str)] = &[
    ("rust", include_str!("near_miss/edit_excerpt.rs")),
    ("python", include_str!("near_miss/textwrap.py")),
    ("c (tabs)", include_str!("near_miss/hello.c")),
    ("javascript", include_str!("near_miss/server.js")),
    ("javascript crlf", include_str!("near_miss/client_crlf.js")),
    ("toml", include_str!("near_miss/tools.toml")),
    ("markdown", include_str!("near_miss/readme.md")),
];

const SLIPS: &[&str] = &[
    "line endings",
    "trailing whitespace",
    "indentation",
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
        "indentation" => {
            let pad = if old.contains("\n\t") { "\t" } else { "    " };
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

/// The same edit with the model's indentation: new_string shifted like old_string was.
fn slip_new(kind: &str, new: &str, crlf: bool) -> String {
    match kind {
        "indentation" | "line endings" => slip(kind, new, crlf).unwrap_or_else(|| new.into()),
        _ => new.into(),
    }
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
                match apply_edit("f", text.as_bytes(), &o, &n, false) {
                    Ok((out, reps)) if out == want && reps[0].forgiven.is_some() => {
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
/// occurrences left to right; one, or all with replace_all.
fn reference(content: &str, old: &str, new: &str, all: bool) -> Option<String> {
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
