//! Shell-style globs (`*`, `?`, `[a-z]`, `[!x]`) shared by path checks and user rules.

/// One element of a compiled glob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum G {
    /// A literal character.
    Lit(char),
    /// `*`: any run of characters, also none.
    Star,
    /// `?`: exactly one character.
    One,
    /// `[...]`: one character from (or, negated, not from) the ranges.
    Class {
        neg: bool,
        ranges: Vec<(char, char)>,
    },
}

/// Compile `(char, is_meta)` pairs; `is_meta` is false for quoted or escaped characters.
/// An unclosed `[` is an error in `strict` mode and a literal otherwise (as in the shell).
pub(crate) fn compile(chars: &[(char, bool)], strict: bool) -> Result<Vec<G>, String> {
    let mut out = Vec::with_capacity(chars.len());
    let mut i = 0;
    while i < chars.len() {
        let (c, meta) = chars[i];
        match (c, meta) {
            ('*', true) => {
                // Consecutive stars mean the same as one.
                if out.last() != Some(&G::Star) {
                    out.push(G::Star);
                }
            }
            ('?', true) => out.push(G::One),
            ('[', true) => match class(chars, i + 1) {
                Some((g, next)) => {
                    out.push(g);
                    i = next;
                    continue;
                }
                None if strict => return Err("unclosed `[` in a glob".to_string()),
                None => out.push(G::Lit('[')),
            },
            _ => out.push(G::Lit(c)),
        }
        i += 1;
    }
    Ok(out)
}

/// Parse a class starting after `[`; returns the class and the index after `]`.
fn class(chars: &[(char, bool)], mut i: usize) -> Option<(G, usize)> {
    let mut neg = false;
    if let Some(&(c, true)) = chars.get(i)
        && (c == '!' || c == '^')
    {
        neg = true;
        i += 1;
    }
    let mut ranges = Vec::new();
    let mut first = true;
    while let Some(&(c, meta)) = chars.get(i) {
        if c == ']' && meta && !first {
            return Some((G::Class { neg, ranges }, i + 1));
        }
        first = false;
        match (chars.get(i + 1), chars.get(i + 2)) {
            (Some(&('-', _)), Some(&(hi, _))) if hi != ']' => {
                ranges.push((c, hi));
                i += 3;
            }
            _ => {
                ranges.push((c, c));
                i += 1;
            }
        }
    }
    None
}

fn one(g: &G, c: char) -> bool {
    match g {
        G::Lit(l) => *l == c,
        G::Star | G::One => true,
        G::Class { neg, ranges } => ranges.iter().any(|(a, b)| *a <= c && c <= *b) != *neg,
    }
}

/// Whether `p` matches all of `s` (iterative, no recursion: safe on any input).
pub(crate) fn matches(p: &[G], s: &str) -> bool {
    let s: Vec<char> = s.chars().collect();
    let (mut pi, mut si) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        match p.get(pi) {
            Some(G::Star) => {
                star = Some((pi, si));
                pi += 1;
            }
            Some(g) if one(g, s[si]) => {
                pi += 1;
                si += 1;
            }
            _ => match star {
                Some((sp, ss)) => {
                    pi = sp + 1;
                    si = ss + 1;
                    star = Some((sp, ss + 1));
                }
                None => return false,
            },
        }
    }
    p[pi.min(p.len())..].iter().all(|g| *g == G::Star)
}

/// Whether the glob is only stars (it then also matches words Toolyard cannot see into).
pub(crate) fn only_stars(p: &[G]) -> bool {
    !p.is_empty() && p.iter().all(|g| *g == G::Star)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(s: &str) -> Vec<G> {
        let chars: Vec<(char, bool)> = s.chars().map(|c| (c, true)).collect();
        compile(&chars, true).unwrap()
    }

    #[test]
    fn globs_match_like_the_shell() {
        assert!(matches(&g("*"), ""));
        assert!(matches(&g("/tmp/scratch*"), "/tmp/scratch-1"));
        assert!(!matches(&g("/tmp/scratch*"), "/tmp/other"));
        assert!(matches(&g("u?r"), "usr"));
        assert!(matches(&g("[a-c]x"), "bx"));
        assert!(!matches(&g("[!a-c]x"), "bx"));
        assert!(matches(&g("*.o"), "a.b.o"));
        assert!(!matches(&g("*.o"), "a.b.c"));
        assert!(compile(&[('[', true)], true).is_err());
    }
}
