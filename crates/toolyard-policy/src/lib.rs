//! The command policy: decides on the parsed command (tree-sitter-bash), not on its text.
//!
//! [`CommandPolicy::check`] parses the command line once, walks every simple command in it
//! (pipelines, lists, subshells, `{ }` groups, functions, if/while/for/case bodies, command and
//! process substitutions, heredocs fed to a shell), strips wrappers (`sudo`, `doas`, `env`,
//! `nice`, `nohup`, `timeout`, `xargs`, `command`, `exec`, `busybox`, `stdbuf`, `ionice`,
//! `time`, `setsid`, `flock`, `ssh host`, ...), re-parses nested shell code (`sh -c`, `bash -c`,
//! `eval`, `su -c`, `echo '...' | sh`, heredocs) and applies the built-in blocklist and the
//! user's rules to each command it finds. The policy guards against accidents and obvious
//! attacks; the lane sandbox is the real boundary.
//!
//! Built-in rule ids: `rm-root`, `rm-home`, `rm-system-dir`, `chmod-root`, `chown-root`,
//! `find-delete-root`, `mkfs`, `dd-device`, `dev-write`, `download-exec`, `fork-bomb`,
//! `dynamic-command`, `dynamic-target`, plus `too-deep`, `too-large` and `unparsable` for input
//! Toolyard refuses to guess about. User deny rules block as `user-deny:N` (1-based).
//!
//! Decisions:
//! - Protected targets (recursive `rm`, `chmod -R`, `chown -R`, `find -delete`, also via
//!   `find -exec`): `/` and anything matching at the top level (`/*`, `/u*`), the system
//!   directories `/bin /boot /dev /etc /lib* /media /mnt /nix /opt /proc /run /sbin /snap /srv
//!   /sys /usr /var` and key children (`/usr/lib`, `/var/lib`, ...), homes (`~`, `$HOME`, `~/*`,
//!   `/home/*`, `/root`, `/Users/*`), after `.`/`..`/`//` normalisation and brace expansion.
//!   Relative paths are allowed (the sandbox keeps writes in the workspace), except after a
//!   literal `cd` into a protected place (`cd / && rm -rf *`). `/tmp` is not protected.
//! - Unanalysable where it matters is blocked: a command name with a variable or substitution
//!   (`dynamic-command`); shell code assembled at run time (`eval "$(...)"`, `sh -c "$X"` when
//!   `X` is set by the same command line, `base64 -d | sh`, `bash <(...)`); the target of a
//!   destructive command that starts with a variable or substitution and has nothing literal
//!   after it (`rm -rf "$DIR"`, `$DIR/*`, `$(pwd)/..`) or would be protected if it were empty
//!   (`$PREFIX/usr`) (`dynamic-target`). A variable-prefixed path with a literal subdirectory
//!   (`rm -rf "$TMPDIR/foo"`) is allowed, as are substitutions in harmless places (arguments of
//!   other commands, `$(date)`/`$(pwd)`-style data spliced into `sh -c`), non-recursive `rm`
//!   of variables, redirections to a variable (`> "$OUT"`) and `xargs` fed by unknown input.
//! - Environment variables spliced into nested code stay variables (`bash -c "cd $DIR && make"`
//!   is checked as `cd $DIR && make`); a heredoc or here-string fed to a shell is checked as a
//!   script, a quoted-delimiter heredoc verbatim.
//! - A parse error is not a block by itself: the parts that parsed, and loose words inside
//!   error regions, are checked, so a visible `rm -rf /` is still caught.
//! - Nesting deeper than the limits (syntax depth, nested scripts) is blocked (`too-deep`),
//!   commands over [`MAX_COMMAND_BYTES`] too (`too-large`).

mod analyze;
mod block;
mod commands;
mod glob;
mod paths;
mod rules;
mod word;

use std::cell::RefCell;

use serde::{Deserialize, Serialize};
use tree_sitter::{Parser, Tree};

use rules::Pattern;

/// Commands longer than this are refused (a heredoc that big belongs in write_file).
pub const MAX_COMMAND_BYTES: usize = 256 * 1024;

/// The `[policy]` section of catalog.toml.
///
/// A rule is a pattern of shell-like words matched against every simple command Toolyard finds
/// in a command line, after wrappers are stripped (`sudo git push` is also checked as
/// `git push`), quotes removed and the command reduced to its last path component
/// (`/usr/bin/rm` is `rm`). The first word matches the command name; each later word is a
/// glob (`*`, `?`, `[a-z]`) over exactly one argument; `**` matches any number of arguments,
/// also none. The whole command must match, so end with `**` to match longer commands.
/// Absolute paths in arguments are normalised first (`/tmp//a/../b` is `/tmp/b`); an argument
/// containing a variable or substitution only matches `*` or `**`.
///
/// `deny` rules add blocks (rule id `user-deny:N`, 1-based, with the pattern and the optional
/// reason in the message); they apply even with `builtin = false`. `allow` rules exempt a
/// matching command from the built-in blocklist (nested `sh -c` code inside it is still checked;
/// deny rules still apply). `builtin = false` turns the built-in blocklist off.
///
/// ```toml
/// [policy]
/// builtin = true
/// deny = [
///   "git push ** --force **",
///   { pattern = "git push ** -f **", reason = "Force-pushing rewrites shared history; push normally." },
///   "npm publish **",
/// ]
/// allow = ["rm -rf /tmp/scratch*", "curl -fsSL https://sh.rustup.rs"]
/// ```
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicyConfig {
    /// Keep the built-in blocklist (default true).
    pub builtin: bool,
    /// Patterns exempted from the built-in blocklist.
    pub allow: Vec<RuleEntry>,
    /// Patterns that are blocked.
    pub deny: Vec<RuleEntry>,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        Self {
            builtin: true,
            allow: Vec::new(),
            deny: Vec::new(),
        }
    }
}

/// One rule: a pattern string, or a table with a pattern and a reason for the model.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum RuleEntry {
    /// `"git push ** --force **"`.
    Pattern(String),
    /// `{ pattern = "...", reason = "..." }`.
    Detailed(DetailedRule),
}

/// The table form of a rule.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DetailedRule {
    /// The word pattern.
    pub pattern: String,
    /// Said to the model when the rule blocks.
    #[serde(default)]
    pub reason: Option<String>,
}

impl RuleEntry {
    /// The pattern text.
    pub fn pattern(&self) -> &str {
        match self {
            RuleEntry::Pattern(p) => p,
            RuleEntry::Detailed(d) => &d.pattern,
        }
    }

    /// The custom reason, if any.
    pub fn reason(&self) -> Option<&str> {
        match self {
            RuleEntry::Pattern(_) => None,
            RuleEntry::Detailed(d) => d.reason.as_deref(),
        }
    }
}

impl From<&str> for RuleEntry {
    fn from(p: &str) -> Self {
        RuleEntry::Pattern(p.to_string())
    }
}

/// A policy could not be built from its configuration.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// A rule pattern is invalid; names the list, the 1-based index and the pattern.
    #[error("[policy] {list} rule {index} (`{pattern}`): {message}")]
    InvalidRule {
        /// `allow` or `deny`.
        list: &'static str,
        /// 1-based position in the list.
        index: usize,
        /// The pattern as written.
        pattern: String,
        /// What is wrong.
        message: String,
    },
}

/// The outcome of a check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    /// The command may run.
    Allow,
    /// The command must not run.
    Block {
        /// Stable id of the rule, e.g. `rm-root` or `user-deny:3`.
        rule: String,
        /// A sentence for the model: what was found and what to do instead.
        reason: String,
    },
}

impl Decision {
    /// Whether the command may run.
    pub fn is_allowed(&self) -> bool {
        matches!(self, Decision::Allow)
    }

    /// The blocking rule id, if blocked.
    pub fn rule(&self) -> Option<&str> {
        match self {
            Decision::Allow => None,
            Decision::Block { rule, .. } => Some(rule),
        }
    }
}

/// The compiled command policy; cheap to share (`Send + Sync`), `check` takes `&self`.
#[derive(Debug, Clone)]
pub struct CommandPolicy {
    builtin: bool,
    allow: Vec<Pattern>,
    deny: Vec<(Pattern, Option<String>)>,
}

impl Default for CommandPolicy {
    fn default() -> Self {
        Self {
            builtin: true,
            allow: Vec::new(),
            deny: Vec::new(),
        }
    }
}

impl CommandPolicy {
    /// Compile the configuration; an invalid rule is an error naming it.
    pub fn new(config: &PolicyConfig) -> Result<Self, PolicyError> {
        let compile = |list: &'static str, i: usize, e: &RuleEntry| {
            Pattern::parse(e.pattern()).map_err(|message| PolicyError::InvalidRule {
                list,
                index: i + 1,
                pattern: e.pattern().to_string(),
                message,
            })
        };
        let allow = config
            .allow
            .iter()
            .enumerate()
            .map(|(i, e)| compile("allow", i, e))
            .collect::<Result<_, _>>()?;
        let deny = config
            .deny
            .iter()
            .enumerate()
            .map(|(i, e)| Ok((compile("deny", i, e)?, e.reason().map(str::to_string))))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            builtin: config.builtin,
            allow,
            deny,
        })
    }

    /// Decide whether `command` (a `sh -c` command line) may run.
    pub fn check(&self, command: &str) -> Decision {
        let result = if command.len() > MAX_COMMAND_BYTES {
            Err(block::too_large(command.len(), MAX_COMMAND_BYTES))
        } else if bracket_depth(command) > MAX_BRACKET_DEPTH {
            Err(block::too_deep(analyze::MAX_DEPTH))
        } else {
            analyze::Analyzer::run(self, command)
        };
        match result {
            Ok(()) => Decision::Allow,
            Err(b) => {
                tracing::debug!(rule = %b.rule, "command blocked by policy");
                Decision::Block {
                    rule: b.rule,
                    reason: b.reason,
                }
            }
        }
    }
}

thread_local! {
    // Parsers are not Sync; one per thread keeps `check` allocation-light and lock-free.
    static PARSER: RefCell<Option<Parser>> = const { RefCell::new(None) };
}

/// Raw nesting a command may have before it is parsed: tree-sitter recurses in C on deeply
/// nested input and can overflow the stack (a SIGSEGV, not a catchable panic), so such input
/// never reaches the parser.
const MAX_BRACKET_DEPTH: usize = 256;

/// The deepest nesting of `(`/`{`/`[` and backquotes in `src`, counted without regard to
/// quoting (an over-estimate, which only errs towards blocking).
fn bracket_depth(src: &str) -> usize {
    let (mut depth, mut max, mut backquote) = (0usize, 0usize, false);
    for b in src.bytes() {
        match b {
            b'(' | b'{' | b'[' => depth += 1,
            b')' | b'}' | b']' => depth = depth.saturating_sub(1),
            b'`' => {
                backquote = !backquote;
                if backquote {
                    depth += 1;
                } else {
                    depth = depth.saturating_sub(1);
                }
            }
            _ => {}
        }
        max = max.max(depth);
    }
    max
}

/// `src` with every non-ASCII byte replaced by `a`: the same length, so node byte ranges still
/// index the original text. tree-sitter-bash's scanner passes the lookahead character to C's
/// `isdigit`, which is undefined (and crashes with SIGSEGV) for values past 255; bash treats
/// such bytes as word characters, as it does `a`.
fn ascii_shadow(src: &str) -> String {
    src.bytes()
        .map(|b| if b.is_ascii() { b as char } else { 'a' })
        .collect()
}

/// Parse shell code with this thread's parser (created on first use).
fn parse(src: &str) -> Option<Tree> {
    if bracket_depth(src) > MAX_BRACKET_DEPTH {
        return None;
    }
    let shadow;
    let src = if src.is_ascii() {
        src
    } else {
        shadow = ascii_shadow(src);
        &shadow
    };
    PARSER.with(|cell| {
        let fresh = || {
            let mut p = Parser::new();
            p.set_language(&tree_sitter_bash::LANGUAGE.into()).ok()?;
            Some(p)
        };
        match cell.try_borrow_mut() {
            Ok(mut slot) => {
                if slot.is_none() {
                    *slot = fresh();
                }
                let p = slot.as_mut()?;
                p.reset();
                p.parse(src, None)
            }
            // Only reachable on re-entrance; a private parser is still correct.
            Err(_) => fresh()?.parse(src, None),
        }
    })
}
