//! Words: a word node of the syntax tree evaluated into the words a command would get
//! (quotes removed, escapes resolved, substitutions marked, braces expanded).

use super::*;

impl Analyzer<'_> {
    /// Evaluate a word node into words (brace expansion can give several).
    pub(super) fn words(&mut self, n: Node, src: &str, facts: &mut Facts) -> R<Vec<Word>> {
        let mut toks = Vec::new();
        self.word_toks(n, src, facts, &mut toks)?;
        word::mark_home(&mut toks);
        Ok(word::brace_expand(toks)
            .into_iter()
            .map(|toks| Word { toks })
            .collect())
    }

    pub(super) fn word_toks(
        &mut self,
        n: Node,
        src: &str,
        facts: &mut Facts,
        out: &mut Vec<Tok>,
    ) -> R<()> {
        self.enter()?;
        let r = self.word_toks_inner(n, src, facts, out);
        self.leave();
        r
    }

    fn word_toks_inner(
        &mut self,
        n: Node,
        src: &str,
        facts: &mut Facts,
        out: &mut Vec<Tok>,
    ) -> R<()> {
        let t = text(n, src);
        match n.kind() {
            "word" => push_unquoted(t, out),
            "raw_string" => {
                let inner = t.strip_prefix('\'').unwrap_or(t);
                let inner = inner.strip_suffix('\'').unwrap_or(inner);
                out.extend(inner.chars().map(|c| Tok::Ch(c, true)));
            }
            "ansi_c_string" => {
                let inner = t.strip_prefix("$'").unwrap_or(t);
                let inner = inner.strip_suffix('\'').unwrap_or(inner);
                out.extend(
                    word::decode_c_escapes(inner)
                        .chars()
                        .map(|c| Tok::Ch(c, true)),
                );
            }
            "string" => self.gapped(n, src, facts, out, dq_unescape)?,
            "translated_string" | "concatenation" | "command_name" => {
                for (k, _) in kids(n) {
                    if k.is_named() {
                        self.word_toks(k, src, facts, out)?;
                    } else if k.kind() != "$" {
                        push_unquoted(text(k, src), out);
                    }
                }
            }
            "simple_expansion" | "expansion" => {
                let mut name = String::new();
                for k in named(n) {
                    match k.kind() {
                        "variable_name" | "special_variable_name" if name.is_empty() => {
                            name = text(k, src).to_string();
                        }
                        // `${X:-$(cmd)}` runs `cmd`.
                        _ => *facts |= self.node(k, src, &Flow::Inherit)?.facts,
                    }
                }
                out.push(Tok::Dyn(Dyn {
                    kind: DynKind::Var(name),
                    src: t.to_string(),
                }));
            }
            "command_substitution" | "process_substitution" => {
                let (f, safe) = self.subst(n, src)?;
                *facts |= f;
                out.push(Tok::Dyn(Dyn {
                    kind: DynKind::Subst {
                        downloads: f.downloads,
                        safe,
                        process: n.kind() == "process_substitution",
                    },
                    src: t.to_string(),
                }));
            }
            "number"
            | "brace_expression"
            | "variable_name"
            | "extglob_pattern"
            | "regex"
            | "test_operator"
            | "special_variable_name"
                if n.named_child_count() == 0 =>
            {
                push_unquoted(t, out)
            }
            _ => {
                *facts |= self.children(n, src, &Flow::Inherit)?.facts;
                out.push(Tok::Dyn(Dyn {
                    kind: DynKind::Other,
                    src: t.to_string(),
                }));
            }
        }
        Ok(())
    }

    /// A node whose literal text lies between its children (double-quoted strings, heredoc
    /// bodies): gaps and content nodes are literal, named children are expansions.
    pub(super) fn gapped(
        &mut self,
        n: Node,
        src: &str,
        facts: &mut Facts,
        out: &mut Vec<Tok>,
        unescape: fn(&str, &mut Vec<Tok>),
    ) -> R<()> {
        let mut pos = n.start_byte();
        let end = n.end_byte();
        for (k, _) in kids(n) {
            if k.start_byte() > pos {
                unescape(src.get(pos..k.start_byte()).unwrap_or(""), out);
            }
            match k.kind() {
                "\"" => {}
                "string_content" | "heredoc_content" => unescape(text(k, src), out),
                _ if k.is_named() => self.word_toks(k, src, facts, out)?,
                _ => unescape(text(k, src), out),
            }
            pos = pos.max(k.end_byte());
        }
        if end > pos {
            unescape(src.get(pos..end).unwrap_or(""), out);
        }
        Ok(())
    }
}

pub(super) fn push_unquoted(t: &str, out: &mut Vec<Tok>) {
    let mut it = t.chars();
    while let Some(c) = it.next() {
        if c == '\\' {
            match it.next() {
                Some('\n') => {}
                Some(d) => out.push(Tok::Ch(d, true)),
                None => out.push(Tok::Ch('\\', true)),
            }
        } else {
            out.push(Tok::Ch(c, false));
        }
    }
}

/// Backslash rules inside `"..."`: only `$ ` " \` and newline are escapable.
pub(super) fn dq_unescape(t: &str, out: &mut Vec<Tok>) {
    unescape_some(t, out, &['$', '`', '"', '\\']);
}

/// Backslash rules in an unquoted heredoc body.
pub(super) fn heredoc_unescape(t: &str, out: &mut Vec<Tok>) {
    unescape_some(t, out, &['$', '`', '\\']);
}

pub(super) fn unescape_some(t: &str, out: &mut Vec<Tok>, escapable: &[char]) {
    let mut it = t.chars().peekable();
    while let Some(c) = it.next() {
        if c == '\\' {
            match it.peek() {
                Some('\n') => {
                    it.next();
                }
                Some(d) if escapable.contains(d) => {
                    out.push(Tok::Ch(*d, true));
                    it.next();
                }
                _ => out.push(Tok::Ch('\\', true)),
            }
        } else {
            out.push(Tok::Ch(c, true));
        }
    }
}
