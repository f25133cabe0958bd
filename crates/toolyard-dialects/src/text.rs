//! Files shown as `cat -n` shows them, the view Anthropic's editor and Claude Code's `Read`
//! give the model.

/// The file's lines as `cat -n` counts them: a final newline ends the last line, it does not
/// start another; a line's `\r` is not shown.
pub(crate) fn lines_of(text: &str) -> Vec<&str> {
    if text.is_empty() {
        return Vec::new();
    }
    let body = text.strip_suffix('\n').unwrap_or(text);
    body.split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect()
}

/// `lines` as `cat -n` prints them, numbered from `first`; with `cut`, a line is cut after
/// that many characters. Tabs are left as they are.
pub(crate) fn numbered(lines: &[&str], first: usize, cut: Option<usize>) -> String {
    lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let l = match cut.and_then(|max| l.char_indices().nth(max)) {
                Some((at, _)) => &l[..at],
                None => l,
            };
            format!("{:6}\t{l}", i + first)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_counted_like_cat_n() {
        assert_eq!(lines_of("a\nb\n"), vec!["a", "b"]);
        assert_eq!(lines_of("a\nb"), vec!["a", "b"]);
        assert_eq!(lines_of("a\r\n\tb\r\n"), vec!["a", "\tb"]);
        assert!(lines_of("").is_empty());
    }
}
