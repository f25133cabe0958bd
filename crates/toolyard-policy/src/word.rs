//! A shell word after quote removal: literal characters, the home directory, and the parts
//! whose value is only known when the command runs (variables, substitutions).

/// One piece of a word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tok {
    /// A character; `true` when it was quoted or escaped (so it is not a glob or a separator).
    Ch(char, bool),
    /// `~`, `~user` or `$HOME` at the start of a word.
    Home,
    /// A part whose value is not known statically.
    Dyn(Dyn),
}

/// A part of a word that only has a value at run time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Dyn {
    /// What produces it.
    pub kind: DynKind,
    /// Its source text (`$X`, `${X:-a}`, `$(date)`), for messages and for re-parsing.
    pub src: String,
}

/// Where a dynamic part's value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DynKind {
    /// A parameter expansion of the named variable.
    Var(String),
    /// `$(...)`, backticks, or `<(...)` / `>(...)` when `process`.
    Subst {
        /// Its commands download something (curl, wget, ...).
        downloads: bool,
        /// It is a single well-known command whose output is not code (date, pwd, ...).
        safe: bool,
        /// It is a process substitution (the word is a /dev/fd path).
        process: bool,
    },
    /// Arithmetic and anything else.
    Other,
}

/// A word of a simple command, after quote removal and brace expansion.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Word {
    pub toks: Vec<Tok>,
}

impl Word {
    /// A word made of literal (quoted) text.
    pub fn lit(s: &str) -> Self {
        Word {
            toks: s.chars().map(|c| Tok::Ch(c, true)).collect(),
        }
    }

    /// The text when the word has no dynamic part and no home prefix.
    pub fn literal(&self) -> Option<String> {
        self.toks
            .iter()
            .map(|t| match t {
                Tok::Ch(c, _) => Some(*c),
                _ => None,
            })
            .collect()
    }

    /// The text with `~` for the home directory, when nothing else is dynamic.
    pub fn name_text(&self) -> Option<String> {
        let mut s = String::new();
        for t in &self.toks {
            match t {
                Tok::Ch(c, _) => s.push(*c),
                Tok::Home => s.push('~'),
                Tok::Dyn(_) => return None,
            }
        }
        Some(s)
    }

    /// Whether the word starts with a dynamic part (so it could expand to anything, options too).
    pub fn starts_dynamic(&self) -> bool {
        matches!(self.toks.first(), Some(Tok::Dyn(_)))
    }

    /// Whether any command substitution in the word downloads something.
    pub fn downloads(&self) -> bool {
        self.toks.iter().any(|t| {
            matches!(
                t,
                Tok::Dyn(Dyn {
                    kind: DynKind::Subst {
                        downloads: true,
                        ..
                    },
                    ..
                })
            )
        })
    }

    /// `Some(downloads)` when the word is exactly one process substitution `<(...)`.
    pub fn process_subst(&self) -> Option<bool> {
        match self.toks.as_slice() {
            [
                Tok::Dyn(Dyn {
                    kind:
                        DynKind::Subst {
                            process: true,
                            downloads,
                            ..
                        },
                    ..
                }),
            ] => Some(*downloads),
            _ => None,
        }
    }

    /// The literal text if the word is an option (`-x`, `--long`), not a lone `-`.
    pub fn option(&self) -> Option<String> {
        self.literal().filter(|t| t.len() > 1 && t.starts_with('-'))
    }

    /// A readable rendering: literal text, `~`, and the source of dynamic parts.
    pub fn lossy(&self) -> String {
        let mut s = String::new();
        for t in &self.toks {
            match t {
                Tok::Ch(c, _) => s.push(*c),
                Tok::Home => s.push('~'),
                Tok::Dyn(d) => s.push_str(&d.src),
            }
        }
        s
    }

    /// The part after the first `=` (for `of=/dev/sda`), when the text before it is literal.
    pub fn value_after(&self, key: &str) -> Option<Word> {
        let n = key.chars().count();
        let head: String = self
            .toks
            .iter()
            .take(n)
            .map(|t| match t {
                Tok::Ch(c, _) => *c,
                _ => '\0',
            })
            .collect();
        (head == key).then(|| Word {
            toks: self.toks[n..].to_vec(),
        })
    }
}

/// `a b c` from words, for messages (shortened to stay readable).
pub(crate) fn show(words: &[Word]) -> String {
    let s = words.iter().map(Word::lossy).collect::<Vec<_>>().join(" ");
    shorten(&s, 160)
}

/// Cut `s` to about `max` characters with an ellipsis.
pub(crate) fn shorten(s: &str, max: usize) -> String {
    let s = s.trim();
    if s.chars().count() <= max {
        return s.to_string();
    }
    let cut: String = s.chars().take(max).collect();
    format!("{cut}…")
}

/// The last path component of a command name (`/usr/bin/rm` → `rm`).
pub(crate) fn basename(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}

/// Tilde and `$HOME` at the start of a word become [`Tok::Home`]; elsewhere `$HOME` stays dynamic.
pub(crate) fn mark_home(toks: &mut Vec<Tok>) {
    match toks.first() {
        Some(Tok::Ch('~', false)) => {
            let end = toks
                .iter()
                .position(|t| matches!(t, Tok::Ch('/', _)))
                .unwrap_or(toks.len());
            // `~user` only when the user name is plain unquoted text.
            let plain = toks[1..end].iter().all(|t| {
                matches!(t, Tok::Ch(c, false) if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
            });
            if plain {
                toks.splice(0..end, [Tok::Home]);
            }
        }
        Some(Tok::Dyn(Dyn {
            kind: DynKind::Var(v),
            ..
        })) if v == "HOME" => {
            toks[0] = Tok::Home;
        }
        _ => {}
    }
}

/// Brace expansion (`/{usr,etc}` → `/usr`, `/etc`) over unquoted braces, with a cap on results.
pub(crate) fn brace_expand(toks: Vec<Tok>) -> Vec<Vec<Tok>> {
    let mut out = Vec::new();
    expand_into(toks, 0, &mut out);
    out
}

const MAX_BRACE_WORDS: usize = 64;
const MAX_BRACE_DEPTH: usize = 8;

fn expand_into(toks: Vec<Tok>, depth: usize, out: &mut Vec<Vec<Tok>>) {
    if depth >= MAX_BRACE_DEPTH || out.len() >= MAX_BRACE_WORDS || toks.len() > 4096 {
        out.push(toks);
        return;
    }
    let open = |t: &Tok, c: char| matches!(t, Tok::Ch(x, false) if *x == c);
    for start in 0..toks.len() {
        if !open(&toks[start], '{') {
            continue;
        }
        let mut level = 0usize;
        let mut commas = Vec::new();
        let mut end = None;
        for (j, t) in toks.iter().enumerate().skip(start + 1) {
            if open(t, '{') {
                level += 1;
            } else if open(t, '}') {
                if level == 0 {
                    end = Some(j);
                    break;
                }
                level -= 1;
            } else if open(t, ',') && level == 0 {
                commas.push(j);
            }
        }
        let Some(end) = end else { continue };
        if commas.is_empty() {
            continue;
        }
        let mut bounds = vec![start];
        bounds.extend(&commas);
        bounds.push(end);
        for w in bounds.windows(2) {
            if out.len() >= MAX_BRACE_WORDS {
                return;
            }
            let mut v = toks[..start].to_vec();
            v.extend_from_slice(&toks[w[0] + 1..w[1]]);
            v.extend_from_slice(&toks[end + 1..]);
            expand_into(v, depth + 1, out);
        }
        return;
    }
    out.push(toks);
}

/// Decode the escapes of `$'...'`, `echo -e` and printf formats (`\x72`, `\162`, `\n`, ...).
pub(crate) fn decode_c_escapes(s: &str) -> String {
    let mut out = String::new();
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        if c != '\\' || i >= chars.len() {
            out.push(c);
            continue;
        }
        let e = chars[i];
        i += 1;
        let simple = match e {
            'n' => Some('\n'),
            't' => Some('\t'),
            'r' => Some('\r'),
            'a' => Some('\x07'),
            'b' => Some('\x08'),
            'e' | 'E' => Some('\x1b'),
            'f' => Some('\x0c'),
            'v' => Some('\x0b'),
            '\\' => Some('\\'),
            '\'' => Some('\''),
            '"' => Some('"'),
            '?' => Some('?'),
            _ => None,
        };
        if let Some(s) = simple {
            out.push(s);
            continue;
        }
        let (radix, max) = match e {
            'x' => (16, 2),
            'u' => (16, 4),
            'U' => (16, 8),
            '0'..='7' => {
                i -= 1;
                (8, 3)
            }
            _ => {
                out.push('\\');
                out.push(e);
                continue;
            }
        };
        let digits: String = chars[i..]
            .iter()
            .take(max)
            .take_while(|d| d.is_digit(radix))
            .collect();
        i += digits.chars().count();
        match u32::from_str_radix(&digits, radix)
            .ok()
            .and_then(char::from_u32)
        {
            Some(d) if !digits.is_empty() => out.push(d),
            _ => {
                out.push('\\');
                out.push(e);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unq(s: &str) -> Vec<Tok> {
        s.chars().map(|c| Tok::Ch(c, false)).collect()
    }

    #[test]
    fn braces_expand() {
        let words: Vec<String> = brace_expand(unq("/{usr,etc}/x"))
            .into_iter()
            .map(|t| Word { toks: t }.lossy())
            .collect();
        assert_eq!(words, ["/usr/x", "/etc/x"]);
        assert_eq!(brace_expand(unq("{1..3}")).len(), 1);
        assert_eq!(brace_expand(unq("a{b,{c,d}}")).len(), 3);
    }

    #[test]
    fn c_escapes_decode() {
        assert_eq!(decode_c_escapes(r"\x72\x6d"), "rm");
        assert_eq!(decode_c_escapes(r"\162m"), "rm");
        assert_eq!(decode_c_escapes(r"a\qb\"), r"a\qb\");
    }

    #[test]
    fn home_is_marked() {
        let mut t = unq("~/x");
        mark_home(&mut t);
        assert_eq!(t[0], Tok::Home);
        let mut t = vec![Tok::Ch('~', true)];
        mark_home(&mut t);
        assert_eq!(t[0], Tok::Ch('~', true));
    }
}
