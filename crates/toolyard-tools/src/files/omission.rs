//! The omission guard: a change that puts a placeholder such as `// ... rest of code
//! unchanged` where real code stood would delete that code, and every peer's users have lost
//! work to it. Each edit and write tool checks its new content against the old before writing.

use toolyard_core::ToolError;

/// Comment openers a placeholder line starts with.
const OPENERS: &[&str] = &["//", "#", "/*", "<!--", "--", ";", "{/*", "*", "%", "'"];
/// Comment closers stripped from its end.
const CLOSERS: &[&str] = &["*/}", "*/", "-->"];
/// Phrases that mark a comment as standing for code left out.
const PHRASES: &[&str] = &[
    "rest of",
    "existing code",
    "existing implementation",
    "unchanged",
    "remains the same",
    "remain the same",
    "same as before",
    "previous code",
    "other methods",
    "other code",
    "code here",
    "as before",
    "omitted",
    "for brevity",
    "keep existing",
    "no changes",
];
/// The largest old or new content checked (larger files are data, not code being edited).
pub(crate) const MAX_CHECKED: usize = 4 << 20;
/// Lines of code the change must remove before a placeholder counts as standing for them.
const MIN_REMOVED: usize = 2;

/// Refuse `new` (the whole new content of `path`) when it brings a placeholder line that `old`
/// did not have while code lines of `old` are gone. A new file is never refused.
pub(crate) fn check(path: &str, old: &[u8], new: &[u8]) -> Result<(), ToolError> {
    let (Ok(old), Ok(new)) = (std::str::from_utf8(old), std::str::from_utf8(new)) else {
        return Ok(());
    };
    let old_lines: Vec<&str> = old.lines().collect();
    let removed = removed_code_lines(&old_lines, new);
    if removed < MIN_REMOVED {
        return Ok(());
    }
    let python_stubs = old_lines.iter().any(|l| is_lone_ellipsis(l));
    for (n, line) in new.lines().enumerate() {
        let strong = is_phrase_placeholder(line);
        if !(strong || is_lone_ellipsis(line) && !python_stubs) {
            continue;
        }
        let count = |text: &str| text.lines().filter(|l| l.trim() == line.trim()).count();
        if count(new) <= count(old) {
            continue;
        }
        return Err(ToolError::InvalidArguments(format!(
            "line {} of the new content of {path} is an omission placeholder (`{}`) where {removed} \
             lines of code stood: writing it would delete that code. Write the code out in full; \
             with edit_file, put in old_string only the lines that change, so the rest stays as it is.",
            n + 1,
            line.trim()
        )));
    }
    Ok(())
}

/// How many non-blank lines of `old` (counted with their repeats) `new` no longer has.
fn removed_code_lines(old: &[&str], new: &str) -> usize {
    let mut left: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for line in new.lines() {
        *left.entry(line.trim()).or_default() += 1;
    }
    old.iter()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty())
        .filter(|l| match left.get_mut(l) {
            Some(n) if *n > 0 => {
                *n -= 1;
                false
            }
            _ => true,
        })
        .count()
}

/// The text of a comment line without its markers, if `line` is a comment.
fn comment_body(line: &str) -> Option<&str> {
    let t = line.trim();
    let opener = OPENERS.iter().find(|o| t.starts_with(**o))?;
    let mut body = &t[opener.len()..];
    for closer in CLOSERS {
        body = body.strip_suffix(closer).unwrap_or(body);
    }
    Some(body.trim())
}

/// `// ... rest of code unchanged`, `# existing code here`, `/* ... */`.
fn is_phrase_placeholder(line: &str) -> bool {
    let Some(body) = comment_body(line) else {
        return false;
    };
    let lower = body.to_lowercase();
    let dotted = lower.contains("...") || lower.contains('…');
    PHRASES.iter().any(|p| lower.contains(p)) && (dotted || lower.len() < 60)
        || dotted
            && lower
                .trim_matches(|c: char| c == '.' || c == '…' || c.is_whitespace())
                .is_empty()
}

/// A line that is only `...` (or `…`), bare or in a comment.
fn is_lone_ellipsis(line: &str) -> bool {
    let body = comment_body(line).unwrap_or(line.trim());
    matches!(body, "..." | "…" | "...." | "......")
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD: &str = "fn a() {\n    let x = 1;\n    let y = 2;\n    x + y\n}\n\nfn b() {}\n";

    #[test]
    fn a_placeholder_replacing_code_is_refused_with_its_line() {
        for placeholder in [
            "    // ... rest of code unchanged",
            "    # existing code here",
            "    ...",
            "    /* ... */",
            "    // ...",
        ] {
            let new = format!("fn a() {{\n{placeholder}\n}}\n\nfn b() {{}}\n");
            let e = check("src/a.rs", OLD.as_bytes(), new.as_bytes())
                .expect_err(placeholder)
                .to_string();
            assert!(e.contains("line 2 of the new content of src/a.rs"), "{e}");
            assert!(e.contains("3 lines of code"), "{e}");
        }
    }

    #[test]
    fn real_code_and_real_comments_pass() {
        let cases = [
            // A comment that is only a comment, added beside code.
            "fn a() {\n    // the rest of the setup is in b()\n    let x = 1;\n    let y = 2;\n    x + y\n}\n\nfn b() {}\n",
            // Code removed without any placeholder.
            "fn a() {\n    3\n}\n\nfn b() {}\n",
            // A placeholder that was there already.
            OLD,
        ];
        for new in cases {
            assert!(
                check("a.rs", OLD.as_bytes(), new.as_bytes()).is_ok(),
                "{new}"
            );
        }
        // Python stubs use a lone `...` as code.
        let old = "class P:\n    def a(self): ...\n    def b(self):\n        ...\n    def c(self):\n        return 1\n        pass\n";
        let new = "class P:\n    def a(self): ...\n    def b(self):\n        ...\n    def c(self):\n        ...\n";
        assert!(check("p.pyi", old.as_bytes(), new.as_bytes()).is_ok());
        // A new file is never refused (the caller passes no old content).
        assert!(check("n.rs", b"", b"// ... rest of code unchanged\n").is_ok());
    }
}
