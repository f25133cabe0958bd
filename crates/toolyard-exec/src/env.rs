//! The environment a command sees: the runner's own, minus secrets, plus what a command
//! without a terminal needs so nothing waits for a person, plus configured values.

use std::collections::BTreeMap;
use std::ffi::OsString;

use serde::Deserialize;

/// Environment names scrubbed by default (glob patterns, matched case-insensitively).
pub const DEFAULT_SCRUB: &[&str] = &[
    "*_TOKEN",
    "*_TOKENS",
    "*_KEY",
    "*_KEYS",
    "*_APIKEY",
    "*_SECRET",
    "*_SECRETS",
    "*_PASSWORD",
    "*_PASSWD",
    "*_PASSPHRASE",
    "*_CREDENTIALS",
    "*_CREDENTIAL",
    "*_AUTH",
    "*_AUTH_TOKEN",
    "*_COOKIE",
    "*_DSN",
    "*_DATABASE_URL",
    "DATABASE_URL",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "AWS_*",
    "AZURE_*",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GCP_*",
    "GITHUB_TOKEN",
    "GH_TOKEN",
    "ANTHROPIC_*",
    "OPENAI_*",
    "GEMINI_*",
    "MISTRAL_*",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "NPM_CONFIG__AUTH*",
    "DOCKER_AUTH_CONFIG",
    "VAULT_*",
    "SSH_AUTH_SOCK",
    "GPG_AGENT_INFO",
];

/// What an editor started by a command without a terminal runs: a message naming the flags that
/// avoid the editor, and failure, at once. A shell snippet, as git runs `$GIT_EDITOR "$@"` with
/// `sh -c` (so does nearly every tool that starts `$EDITOR`); `false` ignores the file names
/// appended to it.
const NO_EDITOR: &str = "echo 'toolyard: no editor without a terminal; give the text as an argument: git commit -m MESSAGE (--amend --no-edit keeps it), git tag -m MESSAGE, git merge/revert --no-edit; or prefix GIT_EDITOR=true to keep the default message' >&2; false";

/// Variables set for a command without a terminal, so that nothing it starts waits for a
/// person: editors and credential prompts fail at once, pagers print straight through, and
/// tools see no terminal (and no colours). The host's own values (`TERM=xterm`, `EDITOR=vim`)
/// describe the person's terminal, not the command's, so these replace them; the catalog's
/// `[exec] set` replaces these.
pub const NO_TERMINAL: &[(&str, &str)] = &[
    ("TERM", "dumb"),
    ("GIT_EDITOR", NO_EDITOR),
    ("GIT_SEQUENCE_EDITOR", NO_EDITOR),
    ("EDITOR", NO_EDITOR),
    ("VISUAL", NO_EDITOR),
    ("PAGER", "cat"),
    ("GIT_PAGER", "cat"),
    ("MANPAGER", "cat"),
    ("SYSTEMD_PAGER", "cat"),
    ("GH_PAGER", "cat"),
    // The AWS CLI pages through less unless this is empty.
    ("AWS_PAGER", ""),
    ("GIT_TERMINAL_PROMPT", "0"),
    // Credentials asked through a helper program: `false` answers nothing, at once.
    ("GIT_ASKPASS", "false"),
    ("SSH_ASKPASS", "false"),
    ("GCM_INTERACTIVE", "never"),
    ("GH_PROMPT_DISABLED", "1"),
    ("DEBIAN_FRONTEND", "noninteractive"),
    ("PIP_NO_INPUT", "1"),
    ("NPM_CONFIG_YES", "true"),
    ("NO_COLOR", "1"),
    ("CARGO_TERM_COLOR", "never"),
];

/// Variables of the host's environment no command inherits (the catalog's `[exec] set` may
/// still set them): a backtrace on every failing test is noise a model pays for.
/// [`ANSWER_AFTER_ENV`] is `toolyard call`'s own setting, not one for a Toolyard the command
/// starts.
pub const NOT_INHERITED: &[&str] = &["RUST_BACKTRACE", "RUST_LIB_BACKTRACE", ANSWER_AFTER_ENV];

/// Environment variable that replaces `[exec] answer_after_ms` (`0`: never). `toolyard call`
/// sets it to 0: its one-shot calls have no client time limit, and a process handed back by
/// one would end with the call.
pub const ANSWER_AFTER_ENV: &str = "TOOLYARD_ANSWER_AFTER_MS";

/// Variables of the host's environment a command without a terminal does not inherit: they
/// say what the person's terminal can do, or force colours into a pipe.
pub const TERMINAL_ONLY: &[&str] = &["COLORTERM", "FORCE_COLOR", "CLICOLOR_FORCE"];

/// Whether a command has a terminal (a pty) or only pipes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Terminal {
    /// Pipes (or /dev/null): [`NO_TERMINAL`] applies.
    None,
    /// A pseudo-terminal: `TERM` as the host has it (else `xterm-256color`), editors allowed.
    Pty,
}

/// `TERM` for a command on a pty when the host sets none.
const PTY_TERM: &str = "xterm-256color";

/// Default of `[exec] answer_after_ms`: just under the 60 s after which many clients give up on
/// a call.
pub const DEFAULT_ANSWER_AFTER_MS: u64 = 50_000;

/// The `[exec]` catalog section: how the environment of commands is built.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecConfig {
    /// A foreground `run_command` (or `build`, `test`, `validate`) still running after this
    /// many milliseconds is answered with its process id and output so far, and keeps running
    /// as a background process (its time limit still applies); 0: never (default
    /// [`DEFAULT_ANSWER_AFTER_MS`]).
    #[serde(default)]
    pub answer_after_ms: Option<u64>,
    /// Glob patterns of names to remove; replaces [`DEFAULT_SCRUB`] when set.
    #[serde(default)]
    pub scrub: Option<Vec<String>>,
    /// Names (glob patterns) kept even when a scrub pattern matches them.
    #[serde(default)]
    pub keep: Vec<String>,
    /// Variables set for every command (after scrubbing).
    #[serde(default)]
    pub set: BTreeMap<String, String>,
}

/// Which variables of the runner's environment a command inherits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvPolicy {
    scrub: Vec<String>,
    keep: Vec<String>,
    set: BTreeMap<String, String>,
}

impl Default for EnvPolicy {
    fn default() -> Self {
        Self::from_config(&ExecConfig::default())
    }
}

impl EnvPolicy {
    /// The policy an `[exec]` section describes.
    pub fn from_config(config: &ExecConfig) -> Self {
        let scrub = match &config.scrub {
            Some(list) => list.clone(),
            None => DEFAULT_SCRUB.iter().map(|s| s.to_string()).collect(),
        };
        Self {
            scrub,
            keep: config.keep.clone(),
            set: config.set.clone(),
        }
    }

    /// A policy that passes the environment through untouched.
    pub fn inherit_all() -> Self {
        Self {
            scrub: Vec::new(),
            keep: Vec::new(),
            set: BTreeMap::new(),
        }
    }

    /// The same policy, with `name` set to `value` in every command's environment.
    pub fn with_var(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.set.insert(name.into(), value.into());
        self
    }

    /// Whether a variable called `name` is removed.
    pub fn is_scrubbed(&self, name: &str) -> bool {
        let hit = |patterns: &[String]| patterns.iter().any(|p| glob_match(p, name));
        hit(&self.scrub) && !hit(&self.keep)
    }

    /// The environment a command without a terminal gets, given the runner's own.
    pub fn build(
        &self,
        vars: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Vec<(OsString, OsString)> {
        self.build_for(vars, Terminal::None)
    }

    /// The environment a command gets, given the runner's own and whether it has a terminal.
    pub fn build_for(
        &self,
        vars: impl IntoIterator<Item = (OsString, OsString)>,
        terminal: Terminal,
    ) -> Vec<(OsString, OsString)> {
        let dropped = |k: &str| {
            NOT_INHERITED.contains(&k) || (terminal == Terminal::None && TERMINAL_ONLY.contains(&k))
        };
        let mut out: BTreeMap<OsString, OsString> = vars
            .into_iter()
            // A name that is not UTF-8 cannot be matched reliably, so it is dropped.
            .filter(|(k, _)| {
                k.to_str()
                    .is_some_and(|k| !self.is_scrubbed(k) && !dropped(k))
            })
            .collect();
        match terminal {
            Terminal::None => {
                for (k, v) in NO_TERMINAL {
                    out.insert(k.into(), v.into());
                }
            }
            Terminal::Pty => {
                out.entry("TERM".into()).or_insert_with(|| PTY_TERM.into());
            }
        }
        for (k, v) in &self.set {
            out.insert(k.into(), v.into());
        }
        // Last: in a lane behind the egress gate, no other proxy can be reached.
        for (k, v) in crate::sandbox::egress::command_env() {
            out.insert(k.into(), v.into());
        }
        out.into_iter().collect()
    }
}

/// Move the values of secret-looking variables (names on [`DEFAULT_SCRUB`]) out of the block
/// `/proc/<pid>/environ` shows: they are copied to the heap, where this process still reads them
/// with `std::env::var`, and overwritten with `*` in the original block, so a process that may
/// read that file (same user, the kernel allows it even to a non-dumpable process) learns
/// nothing.
///
/// # Safety
/// Call first in `main`, while the process has one thread (it sets environment variables).
pub unsafe fn hide_secrets_from_proc() {
    use std::os::unix::ffi::OsStrExt;
    let policy = EnvPolicy::default();
    let secret: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| k.to_str().is_some_and(|k| policy.is_scrubbed(k)))
        .collect();
    if secret.is_empty() {
        return;
    }
    for (k, v) in &secret {
        // SAFETY: single-threaded, per this function's contract. Removing first makes libc
        // point the variable at a fresh heap copy, not at the original block.
        unsafe {
            std::env::remove_var(k);
            std::env::set_var(k, v);
        }
    }
    let Some((start, end)) = environ_block() else {
        return;
    };
    // SAFETY: [start, end) is this process's initial environment block (on its stack, mapped
    // and writable); after the copies above nothing points into the values overwritten here.
    let block = unsafe { std::slice::from_raw_parts_mut(start as *mut u8, end - start) };
    for entry in block.split_mut(|&b| b == 0) {
        let Some(eq) = entry.iter().position(|&b| b == b'=') else {
            continue;
        };
        if secret.iter().any(|(k, _)| k.as_bytes() == &entry[..eq]) {
            entry[eq + 1..].fill(b'*');
        }
    }
}

/// `env_start` and `env_end` of this process (fields 50 and 51 of `/proc/self/stat`).
fn environ_block() -> Option<(usize, usize)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) may hold spaces: count from the `)` that closes it.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let mut fields = rest.split_whitespace().skip(50 - 3);
    let start = fields.next()?.parse().ok()?;
    let end: usize = fields.next()?.parse().ok()?;
    (start != 0 && end > start).then_some((start, end))
}

/// `*` (any run) and `?` (one character) glob match, ASCII case-insensitive.
fn glob_match(pattern: &str, name: &str) -> bool {
    // Environment names and patterns are ASCII in practice: match their bytes, allocation-free
    // (this runs for every variable and pattern of every command).
    if pattern.is_ascii() && name.is_ascii() {
        return glob_match_upper(pattern.as_bytes(), name.as_bytes(), |c| {
            c.to_ascii_uppercase()
        });
    }
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    glob_match_upper(&p, &n, |c| c.to_ascii_uppercase())
}

/// The glob match over any characters, comparing them through `upper`.
fn glob_match_upper<T: Copy + PartialEq + From<u8>>(
    p: &[T],
    n: &[T],
    upper: impl Fn(T) -> T,
) -> bool {
    let (star_c, any_c) = (T::from(b'*'), T::from(b'?'));
    let (mut pi, mut ni) = (0, 0);
    // Position of the last `*` and the name index it was tried at, for backtracking.
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == any_c || upper(p[pi]) == upper(n[ni])) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == star_c {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == star_c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_matches_suffix_prefix_and_exact() {
        assert!(glob_match("*_TOKEN", "GITHUB_TOKEN"));
        assert!(glob_match("*_token", "npm_Token"));
        assert!(glob_match("AWS_*", "AWS_SECRET_ACCESS_KEY"));
        assert!(glob_match("a?c", "abc"));
        assert!(!glob_match("*_TOKEN", "TOKENIZERS_PARALLELISM"));
        assert!(!glob_match("AWS_*", "PATH"));
    }

    #[test]
    fn default_policy_scrubs_secrets_and_keeps_the_rest() {
        let p = EnvPolicy::default();
        for secret in [
            "GITHUB_TOKEN",
            "OPENAI_API_KEY",
            "AWS_ACCESS_KEY_ID",
            "MY_PASSWORD",
            "ANTHROPIC_BASE_URL",
        ] {
            assert!(p.is_scrubbed(secret), "{secret}");
        }
        for plain in [
            "PATH",
            "HOME",
            "LANG",
            "CARGO_HOME",
            "TOKENIZERS_PARALLELISM",
        ] {
            assert!(!p.is_scrubbed(plain), "{plain}");
        }
    }

    fn value(env: &[(OsString, OsString)], name: &str) -> Option<String> {
        env.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.to_string_lossy().into_owned())
    }

    #[test]
    fn a_command_without_a_terminal_gets_no_editor_pager_or_prompt() {
        let host = [
            ("TERM".into(), "xterm".into()),
            ("EDITOR".into(), "vim".into()),
            ("RUST_BACKTRACE".into(), "1".into()),
            ("COLORTERM".into(), "truecolor".into()),
            ("PATH".into(), "/usr/bin".into()),
        ];
        let env = EnvPolicy::default().build(host.clone());
        assert_eq!(value(&env, "TERM").as_deref(), Some("dumb"));
        assert_eq!(value(&env, "PAGER").as_deref(), Some("cat"));
        assert_eq!(value(&env, "GIT_TERMINAL_PROMPT").as_deref(), Some("0"));
        assert!(value(&env, "EDITOR").unwrap().contains("git commit -m"));
        assert_eq!(value(&env, "RUST_BACKTRACE"), None);
        assert_eq!(value(&env, "COLORTERM"), None);
        assert_eq!(value(&env, "PATH").as_deref(), Some("/usr/bin"));
        // On a terminal: the host's TERM and editor, still no backtraces.
        let env = EnvPolicy::default().build_for(host, Terminal::Pty);
        assert_eq!(value(&env, "TERM").as_deref(), Some("xterm"));
        assert_eq!(value(&env, "EDITOR").as_deref(), Some("vim"));
        assert_eq!(value(&env, "COLORTERM").as_deref(), Some("truecolor"));
        assert_eq!(value(&env, "RUST_BACKTRACE"), None);
        let env = EnvPolicy::default().build_for([], Terminal::Pty);
        assert_eq!(value(&env, "TERM").as_deref(), Some(PTY_TERM));
    }

    #[test]
    fn the_catalog_set_wins_over_the_terminal_defaults() {
        let cfg = ExecConfig {
            set: [
                ("GIT_EDITOR".to_string(), "my-editor".to_string()),
                ("RUST_BACKTRACE".to_string(), "full".to_string()),
            ]
            .into(),
            ..ExecConfig::default()
        };
        let env = EnvPolicy::from_config(&cfg).build([("RUST_BACKTRACE".into(), "1".into())]);
        assert_eq!(value(&env, "GIT_EDITOR").as_deref(), Some("my-editor"));
        assert_eq!(value(&env, "RUST_BACKTRACE").as_deref(), Some("full"));
        assert_eq!(value(&env, "TERM").as_deref(), Some("dumb"));
    }

    #[test]
    fn the_editor_stub_fails_at_once_naming_the_flag_as_git_runs_it() {
        // As git runs $GIT_EDITOR: `sh -c '<editor> "$@"' <editor> FILE`.
        let out = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(format!("{NO_EDITOR} \"$@\""))
            .arg(NO_EDITOR)
            .arg("/nonexistent/COMMIT_EDITMSG")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("git commit -m") && err.contains("--no-edit"),
            "{err}"
        );
    }

    #[test]
    fn keep_and_set_override_the_scrub_list() {
        let cfg = ExecConfig {
            answer_after_ms: None,
            scrub: None,
            keep: vec!["CI_JOB_TOKEN".into()],
            set: [("LANG".to_string(), "C".to_string())].into(),
        };
        let env = EnvPolicy::from_config(&cfg).build([
            ("CI_JOB_TOKEN".into(), "x".into()),
            ("NPM_TOKEN".into(), "y".into()),
            ("LANG".into(), "fr".into()),
        ]);
        assert_eq!(value(&env, "CI_JOB_TOKEN").as_deref(), Some("x"));
        assert_eq!(value(&env, "NPM_TOKEN"), None);
        assert_eq!(value(&env, "LANG").as_deref(), Some("C"));
    }
}
