//! What a change's result says: the problems a check found, listed and capped, and the
//! waits behind them.

use super::*;

pub(super) enum Wait {
    Server {
        rel: String,
        server: Arc<Server>,
        version: i64,
        seq: u64,
        before: Option<(Vec<Diag>, Arc<str>)>,
        text: String,
        others: HashMap<String, Published>,
    },
    Check {
        rel: String,
        checker: Arc<Checker>,
        generation: u64,
        before: Option<(Vec<Diag>, Arc<str>)>,
        others: HashMap<String, Vec<Diag>>,
    },
}

/// What the server last said about `rel` as it had it, if it said it for that version.
pub(super) fn before_of(server: &Server, rel: &str) -> Option<(Vec<Diag>, Arc<str>)> {
    let doc = server.doc(rel)?;
    let p = server.published(rel)?;
    p.version
        .is_none_or(|v| v == doc.version)
        .then_some((p.items, doc.text))
}

pub(super) fn still_checking(rel: &str, who: &str, ms: u128) -> String {
    format!(
        "{rel}: {who} is still checking: no diagnostics for this version within {ms} ms. This is not a clean result; call diagnostics {{\"path\": \"{rel}\"}} later to see its problems."
    )
}

pub(super) fn cap_vec(mut v: Vec<String>) -> Vec<String> {
    if v.len() > MAX_OTHERS {
        let more = v.len() - MAX_OTHERS;
        v.truncate(MAX_OTHERS);
        v.push(format!("and {more} more"));
    }
    v
}

pub(super) fn cap_list(v: Vec<String>) -> String {
    cap_vec(v).join(", ")
}

/// Every problem of one file.
pub(super) fn list(rel: &str, who: &str, items: &[Diag], text: &str) -> String {
    if items.is_empty() {
        return format!("{rel}: no problems ({who} checked this version)");
    }
    let mut out = format!(
        "{rel}: {} problem(s) ({who} checked this version):",
        items.len()
    );
    for d in items.iter().take(MAX_LISTED * 2) {
        out.push_str(&format!("\n  {}", d.render(rel, Some(text))));
    }
    if items.len() > MAX_LISTED * 2 {
        out.push_str(&format!(
            "\n  ... and {} more",
            items.len() - MAX_LISTED * 2
        ));
    }
    out
}

/// What a change did to one file's problems.
pub(super) fn report(
    rel: &str,
    who: &str,
    before: Option<(Vec<Diag>, Arc<str>)>,
    after: &[Diag],
    text: &str,
) -> String {
    let Some((before, before_text)) = before else {
        if after.is_empty() {
            return format!("{rel}: no problems ({who} checked this version)");
        }
        let mut out = format!(
            "{rel}: {} problem(s) ({who} checked this version; its first look at this file, so some may predate this change):",
            after.len()
        );
        for d in after.iter().take(MAX_LISTED) {
            out.push_str(&format!("\n  {}", d.render(rel, Some(text))));
        }
        if after.len() > MAX_LISTED {
            out.push_str(&format!("\n  ... and {} more", after.len() - MAX_LISTED));
        }
        return out;
    };
    if before.is_empty() && after.is_empty() {
        return format!("{rel}: no problems ({who} checked this version)");
    }
    let (new, resolved) = diff(&before, Some(&before_text), after, Some(text));
    let kept = after.len() - new.len();
    let mut out = String::new();
    if new.is_empty() {
        out.push_str(&format!(
            "{rel}: no new problems ({who} checked this version)"
        ));
    } else {
        out.push_str(&format!(
            "{rel}: {} new problem(s) ({who} checked this version):",
            new.len()
        ));
        for d in new.iter().take(MAX_LISTED) {
            out.push_str(&format!("\n  {}", d.render(rel, Some(text))));
        }
        if new.len() > MAX_LISTED {
            out.push_str(&format!("\n  ... and {} more", new.len() - MAX_LISTED));
        }
    }
    if !resolved.is_empty() {
        let shown: Vec<String> = resolved
            .iter()
            .take(MAX_LISTED)
            .map(|d| {
                format!(
                    "{rel}:{} {}: {}",
                    d.line + 1,
                    d.severity_name(),
                    d.message.lines().next().unwrap_or_default()
                )
            })
            .collect();
        out.push_str(&format!(
            "\n  resolved {} problem(s): {}",
            resolved.len(),
            shown.join("; ")
        ));
    }
    if kept > 0 {
        out.push_str(&format!(
            "\n  {kept} problem(s) the file already had are not repeated (diagnostics {{\"path\": \"{rel}\"}} lists them)"
        ));
    } else if new.is_empty() {
        out.push_str("; none are left");
    }
    out
}

/// Apply LSP `TextEdit`s (0-based lines, UTF-16 columns) to `text`.
pub fn apply_text_edits(text: &str, edits: &[Value]) -> Result<String, String> {
    let line_starts: Vec<usize> = std::iter::once(0)
        .chain(text.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    let offset = |pos: &Value| -> Result<usize, String> {
        let line = pos
            .get("line")
            .and_then(Value::as_u64)
            .ok_or("an edit without a line")? as usize;
        let ch = pos
            .get("character")
            .and_then(Value::as_u64)
            .ok_or("an edit without a character")? as usize;
        let Some(&start) = line_starts.get(line) else {
            return Ok(text.len());
        };
        let end = line_starts.get(line + 1).copied().unwrap_or(text.len());
        let mut units = 0;
        for (i, c) in text[start..end].char_indices() {
            if units >= ch || c == '\n' {
                return Ok(start + i);
            }
            units += c.len_utf16();
        }
        Ok(end)
    };
    let mut spans: Vec<(usize, usize, String)> = Vec::new();
    for e in edits {
        let range = e.get("range").ok_or("an edit without a range")?;
        let a = offset(range.get("start").ok_or("an edit without a start")?)?;
        let b = offset(range.get("end").ok_or("an edit without an end")?)?;
        let new = e
            .get("newText")
            .and_then(Value::as_str)
            .ok_or("an edit without newText")?;
        if b < a {
            return Err("an edit whose end is before its start".into());
        }
        spans.push((a, b, new.to_string()));
    }
    spans.sort_by_key(|s| (s.0, s.1));
    for w in spans.windows(2) {
        if w[1].0 < w[0].1 {
            return Err("the server's edits overlap".into());
        }
    }
    let mut out = text.to_string();
    for (a, b, new) in spans.into_iter().rev() {
        out.replace_range(a..b, &new);
    }
    Ok(out)
}
