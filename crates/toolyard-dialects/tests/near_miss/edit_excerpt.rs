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

    let probe = old_lines
        .iter()
        .map(|l| l.trim())
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let mut scored: Vec<(f64, usize)> = lines
        .iter()
        .enumerate()
        .take(200_000)
        .filter(|(_, l)| l.len() <= 1000)
        .map(|(i, l)| (strsim::normalized_levenshtein(l.trim(), probe), i))
        .filter(|(s, _)| *s >= 0.4)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let span = old_lines.len().clamp(1, 6);
    let mut shown: Vec<usize> = Vec::new();
    for (_, i) in scored {
        if shown.len() == 3 {
            break;
        }
        if shown.iter().any(|&s| s.abs_diff(i) < span) {
            continue;
        }
        shown.push(i);
    }
    if shown.is_empty() {
        msg.push_str(" No similar lines found; read the file again with read_file to see its current content.");
    } else {
        msg.push_str(" The closest lines are:");
        for i in shown {
            msg.push('\n');
            for (n, l) in lines.iter().enumerate().skip(i).take(span) {
                msg.push_str(&format!("\n{:>6}|{}", n + 1, l));
            }
        }
    }
    ToolError::NotFound(msg)
}
