//! What the CLI prints: no terminal control sequence reaches the terminal.

/// `text` safe to print to a terminal: escape sequences (CSI, OSC such as the clipboard's OSC
/// 52, DCS, ...) and C0/C1 control characters are dropped, a carriage return not ending a line
/// becomes a line break (so nothing is overwritten in place), and tabs and newlines stay.
pub(crate) fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    let clean = |c: char| c == '\n' || c == '\t' || !(c.is_control() || c == '\u{7f}');
    if text.chars().all(clean) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' | '\t' => out.push(c),
            // A lone carriage return would overwrite the line in place: a line break instead.
            '\r' if chars.peek() != Some(&'\n') => out.push('\n'),
            '\r' => {}
            // ESC and its 8-bit forms: skip the whole sequence.
            '\u{1b}' => match chars.next() {
                Some('[') => skip_csi(&mut chars),
                Some(']' | 'P' | 'X' | '^' | '_') => skip_string(&mut chars),
                // Two-character escapes (ESC 7, ESC c, ...) and nF sequences: skip their
                // intermediate bytes and the final one.
                Some(' '..='/') => {
                    for n in chars.by_ref() {
                        if !(' '..='/').contains(&n) {
                            break;
                        }
                    }
                }
                _ => {}
            },
            '\u{9b}' => skip_csi(&mut chars),
            '\u{9d}' | '\u{90}' | '\u{98}' | '\u{9e}' | '\u{9f}' => skip_string(&mut chars),
            c if clean(c) => out.push(c),
            _ => {}
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Skip a CSI sequence's parameters and intermediates up to its final byte.
fn skip_csi(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    for c in chars.by_ref() {
        if ('\u{40}'..='\u{7e}').contains(&c) || !(' '..='\u{7e}').contains(&c) {
            break;
        }
    }
}

/// Skip a control string (OSC, DCS, SOS, PM, APC) up to its terminator: BEL, ST (ESC \\) or
/// the 8-bit ST.
fn skip_string(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    while let Some(c) = chars.next() {
        match c {
            '\u{7}' | '\u{9c}' => break,
            '\u{1b}' => {
                if chars.peek() == Some(&'\\') {
                    chars.next();
                }
                break;
            }
            _ => {}
        }
    }
}

/// JSON text (from serde_json, which escapes only C0 controls) with DEL and the C1 controls
/// escaped too: they can only stand inside strings, where `\u00XX` means the same.
pub(crate) fn json_printable(json: String) -> String {
    if !json.chars().any(|c| ('\u{7f}'..='\u{9f}').contains(&c)) {
        return json;
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if ('\u{7f}'..='\u{9f}').contains(&c) {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn printable_leaves_no_control_character_but_newline_and_tab(s in any::<String>()) {
            let p = printable(&s);
            prop_assert!(p.chars().all(|c| c == '\n' || c == '\t' || !c.is_control()), "{p:?}");
        }

        #[test]
        fn printable_keeps_text_without_controls(s in "[^\\p{Cc}]*") {
            prop_assert_eq!(printable(&s), s.as_str());
        }

        #[test]
        fn json_printable_escapes_c1_and_keeps_the_value(s in any::<String>()) {
            let json = json_printable(serde_json::to_string(&s).unwrap());
            prop_assert!(!json.chars().any(|c| c.is_control()), "{json:?}");
            prop_assert_eq!(serde_json::from_str::<String>(&json).unwrap(), s);
        }
    }

    #[test]
    fn printable_drops_whole_sequences_and_keeps_the_text_around_them() {
        let cases = [
            ("a\u{1b}]52;c;ZXZpbA==\u{7}b", "ab"),
            ("a\u{1b}[1;31mred\u{1b}[0m", "ared"),
            ("a\u{1b}]0;title\u{1b}\\b", "ab"),
            ("a\u{9b}2Jb", "ab"),
            ("50%\r100%\r\n", "50%\n100%\n"),
            ("x\u{8}\u{8}y\tz", "xy\tz"),
            ("a\u{1b}(Bb", "ab"),
        ];
        for (raw, shown) in cases {
            assert_eq!(printable(raw), shown, "{raw:?}");
        }
    }
}
