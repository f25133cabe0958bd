//! The walk over the syntax tree: every simple command, with what feeds its stdin.

use std::collections::HashSet;

use tree_sitter::Node;

use super::block::{self, Block};
use super::commands::{self, Inner, InnerStdin, InterpMode, ShellMode};
use super::word::{self, Dyn, DynKind, Tok, Word, basename, show};
use super::{CommandPolicy, parse};

mod scan;
mod words;

use scan::{fork_bomb, prescan};
use words::heredoc_unescape;

/// Deepest syntax nesting followed (nodes, across nested scripts).
pub(crate) const MAX_DEPTH: usize = 100;
/// Deepest nesting of re-parsed shell code (`sh -c 'sh -c ...'`).
pub(crate) const MAX_SCRIPTS: usize = 12;

type R<T> = Result<T, Block>;

/// What a piece of the tree does that matters to its surroundings.
#[derive(Debug, Clone, Copy, Default)]
struct Facts {
    /// Some command in it downloads from the network (and no allow rule covers it).
    downloads: bool,
}

impl std::ops::BitOrAssign for Facts {
    fn bitor_assign(&mut self, o: Self) {
        self.downloads |= o.downloads;
    }
}

/// What flows into a command's stdin (or out of its stdout).
#[derive(Debug, Clone)]
enum Flow {
    /// Nothing known: the caller's stdin (Toolyard runs commands with /dev/null).
    Inherit,
    /// Content downloaded from the network.
    Download,
    /// Known text (a heredoc, a here-string, `echo '...'`).
    Text(Spliced),
    /// A file's content (`< file`, `cat file`): as trusted as running the file.
    File,
    /// Output of some other command.
    Opaque,
}

/// Shell code assembled from words, with the reason it cannot be trusted, if any.
#[derive(Debug, Clone)]
struct Spliced {
    text: String,
    hazard: Option<Hazard>,
}

#[derive(Debug, Clone)]
enum Hazard {
    /// A substitution that downloads becomes code.
    Download,
    /// A value only known at run time becomes code (source text given).
    Unknown(String),
}

#[derive(Debug, Clone)]
struct Out {
    facts: Facts,
    flow: Flow,
    /// The top command matched an allow rule (exempts its redirections too).
    allowed: bool,
}

impl Out {
    fn of(facts: Facts) -> Self {
        Out {
            facts,
            flow: Flow::Opaque,
            allowed: false,
        }
    }
}

/// Children with their field names (cursor walk: linear even for huge nodes).
fn kids<'t>(n: Node<'t>) -> Vec<(Node<'t>, Option<&'static str>)> {
    let mut out = Vec::new();
    let mut c = n.walk();
    if c.goto_first_child() {
        loop {
            out.push((c.node(), c.field_name()));
            if !c.goto_next_sibling() {
                break;
            }
        }
    }
    out
}

fn named(n: Node<'_>) -> Vec<Node<'_>> {
    kids(n)
        .into_iter()
        .map(|(k, _)| k)
        .filter(|k| k.is_named())
        .collect()
}

fn text<'s>(n: Node, src: &'s str) -> &'s str {
    src.get(n.byte_range()).unwrap_or("")
}

/// One check of one command line.
pub(crate) struct Analyzer<'p> {
    policy: &'p CommandPolicy,
    depth: usize,
    scripts: usize,
    /// Variables assigned anywhere in the code seen so far: their values are chosen by the
    /// command itself, so splicing them into shell code is not trusted.
    assigned: HashSet<String>,
    /// The working directory after a literal `cd` (so `cd / && rm -rf *` is seen as `/*`).
    cwd: Option<Vec<Tok>>,
}

impl<'p> Analyzer<'p> {
    /// Check `command`; `Err` is the first block found.
    pub(crate) fn run(policy: &'p CommandPolicy, command: &str) -> Result<(), Block> {
        let mut a = Analyzer {
            policy,
            depth: 0,
            scripts: 0,
            assigned: HashSet::new(),
            cwd: None,
        };
        a.script(command).map(|_| ())
    }

    fn enter(&mut self) -> R<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(block::too_deep(MAX_DEPTH));
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }

    /// Refuse with `b` unless the built-in list is off or an allow rule covers the command.
    fn guard(&self, allowed: bool, b: Block) -> R<()> {
        if self.policy.builtin && !allowed {
            Err(b)
        } else {
            Ok(())
        }
    }

    /// Parse and check a piece of shell code.
    fn script(&mut self, code: &str) -> R<Facts> {
        if self.scripts >= MAX_SCRIPTS {
            return Err(block::too_deep(MAX_SCRIPTS));
        }
        let tree = parse(code).ok_or_else(block::unparsable)?;
        self.scripts += 1;
        prescan(tree.root_node(), code, &mut self.assigned);
        let r = self.node(tree.root_node(), code, &Flow::Inherit);
        self.scripts -= 1;
        r.map(|o| o.facts)
    }

    fn node(&mut self, n: Node, src: &str, stdin: &Flow) -> R<Out> {
        self.enter()?;
        let r = match n.kind() {
            "command" => self.command(n, src, stdin),
            "redirected_statement" => self.redirected(n, src, stdin),
            "pipeline" => self.pipeline(&named(n), src, stdin.clone(), None),
            "function_definition" => self.function(n, src),
            "command_substitution" | "process_substitution" => {
                self.subst(n, src).map(|(f, _)| Out::of(f))
            }
            "file_redirect" => {
                let mut facts = Facts::default();
                let (_, pending) = self.file_redirect(n, src, &mut facts)?;
                match pending {
                    Some(b) => self.guard(false, b).map(|_| Out::of(facts)),
                    None => Ok(Out::of(facts)),
                }
            }
            "comment" => Ok(Out::of(Facts::default())),
            "ERROR" => self.error(n, src, stdin),
            _ => self.children(n, src, stdin),
        };
        self.leave();
        r
    }

    /// Walk the named children; the flow of a group is the flow of its last child.
    fn children(&mut self, n: Node, src: &str, stdin: &Flow) -> R<Out> {
        let mut out = Out::of(Facts::default());
        for k in named(n) {
            let o = self.node(k, src, stdin)?;
            out.facts |= o.facts;
            out.flow = o.flow;
        }
        if out.facts.downloads {
            out.flow = Flow::Download;
        }
        Ok(out)
    }

    /// A region the parser could not make sense of: check the statements it recognised, and
    /// treat a run of loose words as a command, so a visible `rm -rf /` is still caught.
    fn error(&mut self, n: Node, src: &str, stdin: &Flow) -> R<Out> {
        let mut facts = Facts::default();
        let mut loose: Vec<Word> = Vec::new();
        for k in named(n) {
            match k.kind() {
                "word" | "string" | "raw_string" | "concatenation" | "ansi_c_string"
                | "simple_expansion" | "expansion" | "number" => {
                    loose.extend(self.words(k, src, &mut facts)?);
                }
                _ => {
                    if !loose.is_empty() {
                        let (f, _) = self.simple(std::mem::take(&mut loose), stdin, false)?;
                        facts |= f;
                    }
                    facts |= self.node(k, src, stdin)?.facts;
                }
            }
        }
        if !loose.is_empty() {
            facts |= self.simple(loose, stdin, false)?.0;
        }
        Ok(Out::of(facts))
    }

    fn pipeline(
        &mut self,
        stages: &[Node],
        src: &str,
        stdin: Flow,
        last_stdin: Option<Flow>,
    ) -> R<Out> {
        let mut flow = stdin;
        let mut tainted = matches!(flow, Flow::Download);
        let mut facts = Facts::default();
        let last = stages.len().saturating_sub(1);
        for (i, st) in stages.iter().enumerate() {
            let mut input = if tainted {
                Flow::Download
            } else {
                flow.clone()
            };
            if i == last
                && let Some(l) = &last_stdin
            {
                input = l.clone();
            }
            let o = self.node(*st, src, &input)?;
            facts |= o.facts;
            tainted |= o.facts.downloads || matches!(o.flow, Flow::Download);
            flow = o.flow;
        }
        Ok(Out {
            facts,
            flow: if tainted { Flow::Download } else { flow },
            allowed: false,
        })
    }

    fn redirected(&mut self, n: Node, src: &str, stdin: &Flow) -> R<Out> {
        let mut facts = Facts::default();
        let mut new_stdin: Option<Flow> = None;
        let mut pending: Vec<Block> = Vec::new();
        let mut continuation: Vec<Node> = Vec::new();
        let mut after: Vec<Node> = Vec::new();
        let mut body = None;
        for (k, field) in kids(n) {
            if field == Some("body") {
                body = Some(k);
                continue;
            }
            match k.kind() {
                "file_redirect" => {
                    let (fl, p) = self.file_redirect(k, src, &mut facts)?;
                    if fl.is_some() {
                        new_stdin = fl;
                    }
                    pending.extend(p);
                }
                "heredoc_redirect" => {
                    let (fl, p, cont, rights) = self.heredoc(k, src, &mut facts)?;
                    new_stdin = Some(fl);
                    pending.extend(p);
                    continuation.extend(cont);
                    after.extend(rights);
                }
                "herestring_redirect" => new_stdin = Some(self.herestring(k, src, &mut facts)?),
                _ if k.is_named() => facts |= self.node(k, src, &Flow::Inherit)?.facts,
                _ => {}
            }
        }
        let out = match body {
            Some(b) if b.kind() == "pipeline" => {
                self.pipeline(&named(b), src, stdin.clone(), new_stdin)?
            }
            Some(b) => self.node(b, src, new_stdin.as_ref().unwrap_or(stdin))?,
            None => Out::of(Facts::default()),
        };
        facts |= out.facts;
        for p in pending {
            self.guard(out.allowed, p)?;
        }
        let mut flow = out.flow;
        // `cat <<EOF | sh`: the parser hangs the rest of the pipeline under the heredoc.
        if !continuation.is_empty() {
            let start = if facts.downloads {
                Flow::Download
            } else {
                flow
            };
            let o = self.pipeline(&continuation, src, start, None)?;
            facts |= o.facts;
            flow = o.flow;
        }
        for r in after {
            let o = self.node(r, src, &Flow::Inherit)?;
            facts |= o.facts;
            flow = o.flow;
        }
        Ok(Out {
            facts,
            flow,
            allowed: out.allowed,
        })
    }

    /// Check a file redirection; returns the stdin it sets (`<`) and a pending device block.
    fn file_redirect(
        &mut self,
        n: Node,
        src: &str,
        facts: &mut Facts,
    ) -> R<(Option<Flow>, Option<Block>)> {
        let mut op = "";
        let mut dests = Vec::new();
        // The grammar has no `<>`: it parses `<` and an ERROR holding `>`.
        let mut read_write = false;
        for (k, field) in kids(n) {
            if field == Some("destination") {
                dests.extend(self.words(k, src, facts)?);
            } else if !k.is_named() {
                op = k.kind();
            } else if k.kind() == "ERROR" && text(k, src).contains('>') {
                read_write = true;
            } else if field != Some("descriptor") {
                *facts |= self.node(k, src, &Flow::Inherit)?.facts;
            }
        }
        let writes = read_write || matches!(op, ">" | ">>" | "&>" | "&>>" | ">|" | "<>" | ">&");
        let mut pending = None;
        if writes && let Some(w) = dests.iter().find(|w| super::paths::unsafe_device(w)) {
            pending = Some(block::dev_write(
                &format!("the redirection `{op} {}`", w.lossy()),
                &w.lossy(),
            ));
        }
        let stdin = (op == "<" && !read_write).then(|| {
            if dests.iter().any(Word::downloads)
                || dests.iter().any(|w| w.process_subst() == Some(true))
            {
                Flow::Download
            } else if dests.iter().any(|w| w.process_subst().is_some()) {
                Flow::Opaque
            } else {
                Flow::File
            }
        });
        Ok((stdin, pending))
    }

    /// A heredoc: the text it feeds, pending device blocks, and the statements the parser
    /// attached to it (the rest of a pipeline, `&& next`).
    #[allow(clippy::type_complexity)]
    fn heredoc<'t>(
        &mut self,
        n: Node<'t>,
        src: &str,
        facts: &mut Facts,
    ) -> R<(Flow, Vec<Block>, Vec<Node<'t>>, Vec<Node<'t>>)> {
        let mut quoted = false;
        let mut body_text = Spliced {
            text: String::new(),
            hazard: None,
        };
        let mut pending = Vec::new();
        let mut cont = Vec::new();
        let mut rights = Vec::new();
        for (k, _) in kids(n) {
            match k.kind() {
                "heredoc_start" => quoted = text(k, src).contains(['\'', '"', '\\']),
                "heredoc_body" => {
                    body_text = if quoted {
                        Spliced {
                            text: text(k, src).to_string(),
                            hazard: None,
                        }
                    } else {
                        let mut toks = Vec::new();
                        self.gapped(k, src, facts, &mut toks, heredoc_unescape)?;
                        self.splice(&[Word { toks }])
                    };
                }
                "heredoc_end" => {}
                "file_redirect" => {
                    let (_, p) = self.file_redirect(k, src, facts)?;
                    pending.extend(p);
                }
                "pipeline" => cont.extend(named(k)),
                _ if k.is_named() => rights.push(k),
                _ => {}
            }
        }
        Ok((Flow::Text(body_text), pending, cont, rights))
    }

    fn herestring(&mut self, n: Node, src: &str, facts: &mut Facts) -> R<Flow> {
        let mut toks = Vec::new();
        for k in named(n) {
            self.word_toks(k, src, facts, &mut toks)?;
        }
        Ok(Flow::Text(self.splice(&[Word { toks }])))
    }

    fn function(&mut self, n: Node, src: &str) -> R<Out> {
        let name = n.child_by_field_name("name").map(|k| text(k, src));
        let body = n.child_by_field_name("body");
        if let (Some(name), Some(body)) = (name, body)
            && fork_bomb(name, body, src)
        {
            self.guard(false, block::fork_bomb(name))?;
        }
        self.children(n, src, &Flow::Inherit)
    }

    /// `$(...)`, backticks, `<(...)`: check the inner code; report whether it downloads and
    /// whether it is a well-known data producer.
    fn subst(&mut self, n: Node, src: &str) -> R<(Facts, bool)> {
        let t = text(n, src);
        let facts = if t.starts_with('`') && t.contains('\\') {
            // Backslashes inside backticks are removed before the inner code is parsed.
            let inner = t.trim_start_matches('`').trim_end_matches('`');
            let inner = inner
                .replace("\\`", "`")
                .replace("\\$", "$")
                .replace("\\\\", "\\");
            self.script(&inner)?
        } else {
            self.children(n, src, &Flow::Inherit)?.facts
        };
        let stmts: Vec<Node> = named(n)
            .into_iter()
            .filter(|k| k.kind() != "comment")
            .collect();
        let safe = match stmts.as_slice() {
            [c] if c.kind() == "command" => {
                let name = c.child_by_field_name("name").map(|k| text(k, src));
                let first = c.child_by_field_name("argument").map(|k| text(k, src));
                name.is_some_and(|nm| commands::is_safe_producer(nm, first))
            }
            _ => false,
        };
        Ok((facts, safe))
    }

    fn command(&mut self, n: Node, src: &str, stdin: &Flow) -> R<Out> {
        let mut facts = Facts::default();
        let mut words = Vec::new();
        let mut stdin = stdin.clone();
        let mut pending = Vec::new();
        for (k, field) in kids(n) {
            match (field, k.kind()) {
                (Some("name"), _) | (Some("argument"), _) => {
                    words.extend(self.words(k, src, &mut facts)?)
                }
                (_, "file_redirect") => {
                    let (fl, p) = self.file_redirect(k, src, &mut facts)?;
                    if let Some(fl) = fl {
                        stdin = fl;
                    }
                    pending.extend(p);
                }
                (_, "herestring_redirect") => stdin = self.herestring(k, src, &mut facts)?,
                (_, "heredoc_redirect") => {
                    let (fl, p, cont, rights) = self.heredoc(k, src, &mut facts)?;
                    stdin = fl;
                    pending.extend(p);
                    for r in cont.into_iter().chain(rights) {
                        facts |= self.node(r, src, &Flow::Inherit)?.facts;
                    }
                }
                _ if k.is_named() => facts |= self.node(k, src, &Flow::Inherit)?.facts,
                _ => {}
            }
        }
        // `! cmd` after an assignment is parsed as a command named `!`.
        if words.first().and_then(Word::literal).as_deref() == Some("!") {
            words.remove(0);
        }
        let allowed = self.policy.allow.iter().any(|p| p.matches(&words));
        let (f, flow) = self.simple(words, &stdin, allowed)?;
        facts |= f;
        for p in pending {
            self.guard(allowed, p)?;
        }
        Ok(Out {
            facts,
            flow,
            allowed,
        })
    }

    /// Check one simple command given as words (recursing through wrappers).
    fn simple(&mut self, words: Vec<Word>, stdin: &Flow, allowed: bool) -> R<(Facts, Flow)> {
        self.enter()?;
        let r = self.simple_inner(words, stdin, allowed);
        self.leave();
        r
    }

    fn simple_inner(&mut self, words: Vec<Word>, stdin: &Flow, allowed: bool) -> R<(Facts, Flow)> {
        let none = Ok((Facts::default(), Flow::Opaque));
        let Some(name) = words.first() else {
            return none;
        };
        for (i, (p, why)) in self.policy.deny.iter().enumerate() {
            if p.matches(&words) {
                return Err(block::user_deny(
                    i + 1,
                    &p.text,
                    why.as_deref(),
                    &show(&words),
                ));
            }
        }
        let allowed = allowed || self.policy.allow.iter().any(|p| p.matches(&words));
        let Some(full) = name.name_text() else {
            self.guard(allowed, block::dynamic_command(&name.lossy()))?;
            return none;
        };
        let base = basename(&full).to_string();
        let args = &words[1..];

        let stdin_words = match stdin {
            Flow::Text(sp) if sp.hazard.is_none() => {
                Some(sp.text.split_whitespace().map(Word::lit).collect())
            }
            _ => None,
        };
        if let Some(inner) = commands::unwrap(&base, args, stdin_words) {
            return match inner {
                Inner::Cmds(cmds, how) => {
                    let inner_stdin = match how {
                        InnerStdin::Same => stdin.clone(),
                        InnerStdin::Consumed => Flow::Inherit,
                    };
                    let mut facts = Facts::default();
                    let mut flow = Flow::Opaque;
                    for c in cmds {
                        let (f, fl) = self.simple(c, &inner_stdin, allowed)?;
                        facts |= f;
                        flow = fl;
                    }
                    Ok((facts, flow))
                }
                Inner::Script(ws) => self.spliced(&ws, &base, allowed),
                Inner::ShellStdin => self.shell_stdin(&base, stdin, allowed),
                Inner::Nothing => none,
            };
        }

        if commands::is_shell(&base) {
            return match commands::shell_mode(args) {
                ShellMode::Command(i) => match args.get(i) {
                    Some(w) => self.spliced(std::slice::from_ref(w), &base, allowed),
                    None => none,
                },
                ShellMode::File(i) => self.script_file(&base, &args[i], stdin, allowed),
                ShellMode::Stdin => self.shell_stdin(&base, stdin, allowed),
            };
        }
        match base.as_str() {
            "eval" => return self.spliced(args, "eval", allowed),
            // `trap 'code' EXIT` runs the code later, like eval.
            "trap" if args.len() >= 2 && args[0].option().is_none() => {
                return self.spliced(&args[..1], "trap", allowed);
            }
            "source" | "." => {
                return match args.first() {
                    Some(w) => self.script_file(&base, w, stdin, allowed),
                    None => none,
                };
            }
            "echo" | "printf" => {
                let printed = commands::printed(&base, args).unwrap_or_default();
                return Ok((Facts::default(), Flow::Text(self.splice(&printed))));
            }
            _ => {}
        }
        if let Some(mode) = commands::interp_mode(&base, args) {
            let downloaded = match mode {
                InterpMode::Code(i) => args.get(i).is_some_and(Word::downloads),
                InterpMode::Other(i) => {
                    args.get(i).is_some_and(|w| w.process_subst() == Some(true))
                }
                InterpMode::Stdin => matches!(stdin, Flow::Download),
            };
            if downloaded {
                self.guard(allowed, block::download_exec(&show(&words)))?;
            }
            return none;
        }
        if commands::is_downloader(&base) {
            // An allowed download is as trusted as a file.
            return Ok(if allowed {
                (Facts::default(), Flow::File)
            } else {
                (Facts { downloads: true }, Flow::Download)
            });
        }
        if matches!(base.as_str(), "cd" | "pushd") {
            let arg = args.iter().find(|w| w.option().is_none());
            self.cwd = super::paths::cd_target(arg, self.cwd.as_deref());
        }
        if let Some(b) = commands::check_builtin(&base, &words, self.cwd.as_deref()) {
            self.guard(allowed, b)?;
        }
        let mut facts = Facts::default();
        if base == "find" {
            for c in commands::find_execs(args) {
                facts |= self.simple(c, &Flow::Inherit, false)?.0;
            }
        }
        let flow = match base.as_str() {
            // These pass their input through (`echo x | tee log | sh`).
            "tee" => stdin.clone(),
            "cat"
                if args
                    .iter()
                    .all(|w| w.option().is_some() || w.literal().as_deref() == Some("-")) =>
            {
                stdin.clone()
            }
            "cat" => Flow::File,
            _ => Flow::Opaque,
        };
        Ok((facts, flow))
    }

    /// A shell reading code from its stdin.
    fn shell_stdin(&mut self, who: &str, stdin: &Flow, allowed: bool) -> R<(Facts, Flow)> {
        match stdin {
            Flow::Download => self.guard(allowed, block::download_exec(who))?,
            Flow::Text(sp) => return self.run_spliced(sp.clone(), who, allowed),
            Flow::Opaque => self.guard(
                allowed,
                block::dynamic_script(who, "the output of another command piped into it"),
            )?,
            Flow::Inherit | Flow::File => {}
        }
        Ok((Facts::default(), Flow::Opaque))
    }

    /// A shell or `source` given a script operand.
    fn script_file(
        &mut self,
        who: &str,
        w: &Word,
        stdin: &Flow,
        allowed: bool,
    ) -> R<(Facts, Flow)> {
        match w.process_subst() {
            Some(true) => self.guard(allowed, block::download_exec(who))?,
            Some(false) => self.guard(
                allowed,
                block::dynamic_script(who, &format!("the process substitution `{}`", w.lossy())),
            )?,
            None if matches!(w.literal().as_deref(), Some("/dev/stdin" | "-")) => {
                return self.shell_stdin(who, stdin, allowed);
            }
            None => {}
        }
        Ok((Facts::default(), Flow::Opaque))
    }

    /// Shell code made of words (`sh -c WORD`, `eval A B`, `ssh host A B`).
    fn spliced(&mut self, words: &[Word], who: &str, allowed: bool) -> R<(Facts, Flow)> {
        let sp = self.splice(words);
        self.run_spliced(sp, who, allowed)
    }

    fn run_spliced(&mut self, sp: Spliced, who: &str, allowed: bool) -> R<(Facts, Flow)> {
        match sp.hazard {
            Some(Hazard::Download) => self.guard(allowed, block::download_exec(who))?,
            Some(Hazard::Unknown(what)) => self.guard(
                allowed,
                block::dynamic_script(
                    who,
                    &format!("`{what}`, whose value is only known when it runs"),
                ),
            )?,
            None => {
                let f = self.script(&sp.text)?;
                return Ok((f, Flow::Opaque));
            }
        }
        Ok((Facts::default(), Flow::Opaque))
    }

    /// Join words into shell code. Values from the environment stay as `$X` (the nested
    /// shell expands them the same way); values set by this command line or produced by
    /// arbitrary commands are hazards because they could smuggle in code.
    fn splice(&self, words: &[Word]) -> Spliced {
        let mut text = String::new();
        let mut hazard = None;
        for (i, w) in words.iter().enumerate() {
            if i > 0 {
                text.push(' ');
            }
            for t in &w.toks {
                match t {
                    Tok::Ch(c, _) => text.push(*c),
                    Tok::Home => text.push('~'),
                    Tok::Dyn(d) => match &d.kind {
                        DynKind::Var(v) if self.assigned.contains(v) => {
                            hazard.get_or_insert(Hazard::Unknown(d.src.clone()));
                        }
                        DynKind::Subst {
                            downloads: true, ..
                        } => hazard = Some(Hazard::Download),
                        DynKind::Subst { safe: false, .. } => {
                            hazard.get_or_insert(Hazard::Unknown(d.src.clone()));
                        }
                        _ => text.push_str(&d.src),
                    },
                }
            }
        }
        Spliced { text, hazard }
    }
}
