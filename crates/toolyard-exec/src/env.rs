//! The environment a command sees: the runner's own, minus secrets, plus configured values.

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

/// The `[exec]` catalog section: how the environment of commands is built.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecConfig {
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

    /// Whether a variable called `name` is removed.
    pub fn is_scrubbed(&self, name: &str) -> bool {
        let hit = |patterns: &[String]| patterns.iter().any(|p| glob_match(p, name));
        hit(&self.scrub) && !hit(&self.keep)
    }

    /// The environment a command gets, given the runner's own.
    pub fn build(
        &self,
        vars: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Vec<(OsString, OsString)> {
        let mut out: BTreeMap<OsString, OsString> = vars
            .into_iter()
            // A name that is not UTF-8 cannot be matched reliably, so it is dropped.
            .filter(|(k, _)| k.to_str().is_some_and(|k| !self.is_scrubbed(k)))
            .collect();
        for (k, v) in &self.set {
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

    #[test]
    fn keep_and_set_override_the_scrub_list() {
        let cfg = ExecConfig {
            scrub: None,
            keep: vec!["CI_JOB_TOKEN".into()],
            set: [("LANG".to_string(), "C".to_string())].into(),
        };
        let env = EnvPolicy::from_config(&cfg).build([
            ("CI_JOB_TOKEN".into(), "x".into()),
            ("NPM_TOKEN".into(), "y".into()),
            ("LANG".into(), "fr".into()),
        ]);
        let names: Vec<_> = env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        assert_eq!(
            names,
            vec![
                ("CI_JOB_TOKEN".into(), "x".into()),
                ("LANG".into(), "C".into())
            ]
        );
    }
}
