//! User rules from `[policy]`: word patterns matched against every simple command found.

use super::glob::{self, G};
use super::word::{Tok, Word, basename};

/// One word of a pattern.
#[derive(Debug, Clone)]
enum PWord {
    /// `**`: any number of words, also none.
    Many,
    /// A glob over exactly one word.
    One(Vec<G>),
}

/// A compiled rule pattern such as `git push ** --force **`.
#[derive(Debug, Clone)]
pub(crate) struct Pattern {
    /// The pattern as written.
    pub text: String,
    words: Vec<PWord>,
}

impl Pattern {
    /// Compile a pattern; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let raw = split_words(text)?;
        let Some((first, _)) = raw.split_first() else {
            return Err(
                "the pattern is empty; write a command name and optional argument patterns".into(),
            );
        };
        if is_many(first) {
            return Err("the first word must match the command name, not `**`".into());
        }
        let mut words = Vec::with_capacity(raw.len());
        for (i, w) in raw.iter().enumerate() {
            if is_many(w) {
                words.push(PWord::Many);
                continue;
            }
            // The command name is compared by its last path component (`/bin/rm` is `rm`).
            let w = if i == 0 {
                let cut = w.iter().rposition(|(c, _)| *c == '/').map_or(0, |p| p + 1);
                &w[cut..]
            } else {
                &w[..]
            };
            let g = glob::compile(w, true).map_err(|e| format!("word {}: {e}", i + 1))?;
            words.push(PWord::One(g));
        }
        Ok(Pattern {
            text: text.trim().to_string(),
            words,
        })
    }

    /// Whether the whole simple command (name and every argument) matches.
    pub fn matches(&self, cmd: &[Word]) -> bool {
        let Some((name, args)) = cmd.split_first() else {
            return false;
        };
        let mut rendered: Vec<Option<String>> = Vec::with_capacity(cmd.len());
        rendered.push(name.name_text().map(|n| basename(&n).to_string()));
        rendered.extend(args.iter().map(render));
        let Some((PWord::One(first), rest)) = self.words.split_first() else {
            return false;
        };
        one(first, &rendered[0]) && seq(rest, &rendered[1..])
    }
}

fn is_many(w: &[(char, bool)]) -> bool {
    matches!(w, [('*', true), ('*', true)])
}

fn one(g: &[G], w: &Option<String>) -> bool {
    match w {
        Some(s) => glob::matches(g, s),
        // A word Toolyard cannot see into only matches a pattern word that is all stars.
        None => glob::only_stars(g),
    }
}

/// Wildcard matching of pattern words over command words, `**` spanning any number (DP).
fn seq(p: &[PWord], w: &[Option<String>]) -> bool {
    let mut row = vec![false; w.len() + 1];
    row[0] = true;
    for pw in p {
        let mut next = vec![false; w.len() + 1];
        match pw {
            PWord::Many => {
                let mut any = false;
                for j in 0..=w.len() {
                    any |= row[j];
                    next[j] = any;
                }
            }
            PWord::One(g) => {
                for j in 1..=w.len() {
                    next[j] = row[j - 1] && one(g, &w[j - 1]);
                }
            }
        }
        row = next;
    }
    row[w.len()]
}

/// An argument as rules see it: literal text, `~` for home, absolute paths normalised;
/// `None` when part of it is only known at run time.
fn render(w: &Word) -> Option<String> {
    let mut s = String::new();
    for t in &w.toks {
        match t {
            Tok::Ch(c, _) => s.push(*c),
            Tok::Home => s.push('~'),
            Tok::Dyn(_) => return None,
        }
    }
    if s.starts_with('/') {
        s = normalize_abs(&s);
    }
    Some(s)
}

/// `/tmp//a/./b/../c/` → `/tmp/a/c`.
fn normalize_abs(s: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for p in s.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            _ => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

/// Split like the shell: whitespace separates words, quotes and backslashes make characters
/// literal (the `bool` is "may be a glob character").
fn split_words(text: &str) -> Result<Vec<Vec<(char, bool)>>, String> {
    let mut words = Vec::new();
    let mut cur: Vec<(char, bool)> = Vec::new();
    let mut in_word = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => cur.push((c, false)),
                        None => return Err("unbalanced single quote".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c) => cur.push((c, false)),
                            None => return Err("unbalanced double quote".into()),
                        },
                        Some(c) => cur.push((c, false)),
                        None => return Err("unbalanced double quote".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(c) => cur.push((c, false)),
                    None => return Err("trailing backslash".into()),
                }
            }
            c => {
                in_word = true;
                cur.push((c, true));
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(s: &str) -> Vec<Word> {
        s.split_whitespace().map(Word::lit).collect()
    }

    #[test]
    fn patterns_match_whole_commands() {
        let p = Pattern::parse("git push ** --force **").unwrap();
        assert!(p.matches(&cmd("git push --force")));
        assert!(p.matches(&cmd("/usr/bin/git push origin main --force")));
        assert!(!p.matches(&cmd("git push origin main")));
        let p = Pattern::parse("rm -rf /tmp/scratch*").unwrap();
        assert!(p.matches(&cmd("rm -rf /tmp/scratch1")));
        assert!(p.matches(&cmd("rm -rf /tmp//scratch1/")));
        assert!(!p.matches(&cmd("rm -rf /tmp/scratch1 /")));
        assert!(!p.matches(&cmd("rm -rf /tmp/scratch1/../..")));
        let p = Pattern::parse("'a b' \"*\"").unwrap();
        assert!(p.matches(&[Word::lit("a b"), Word::lit("*")]));
        assert!(!p.matches(&[Word::lit("a b"), Word::lit("x")]));
    }

    #[test]
    fn bad_patterns_are_errors() {
        assert!(Pattern::parse("").is_err());
        assert!(Pattern::parse("** rm").is_err());
        assert!(Pattern::parse("rm 'x").is_err());
        assert!(Pattern::parse("rm [abc").is_err());
    }
}
