//! The `[hooks]` section as the catalog states it, and its command hooks compiled.

use std::time::Duration;

use regex::Regex;
use serde::Deserialize;
use toolyard_core::ToolError;

/// A command hook's time limit when its entry sets none (Claude Code's default, 60 s).
pub const DEFAULT_HOOK_TIMEOUT_MS: u64 = 60_000;
/// The default commit message of `auto_commit`; `{tool}`, `{call_id}`, `{session}` and
/// `{files}` (comma-separated) are replaced.
pub const DEFAULT_COMMIT_MESSAGE: &str = "toolyard: {tool} (call {call_id})";

/// The catalog's `[hooks]` section.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HooksConfig {
    /// `[[hooks.pre_tool]]`: commands run before a matching call; one may block it.
    #[serde(default)]
    pub pre_tool: Vec<CommandHookConfig>,
    /// `[[hooks.post_tool]]`: commands run after a matching call.
    #[serde(default)]
    pub post_tool: Vec<CommandHookConfig>,
    /// `[hooks.post_tools]`: what runs after every mutating call.
    #[serde(default)]
    pub post_tools: PostToolsConfig,
}

/// One pre-tool or post-tool command hook.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandHookConfig {
    /// A regular expression matched against the whole tool name; `""` or `"*"`: every tool.
    #[serde(default)]
    pub matcher: String,
    /// The shell command (`sh -c`, in the workspace root, the call as JSON on stdin).
    pub command: String,
    /// Its time limit; past it the hook's process group is killed.
    pub timeout_ms: Option<u64>,
}

/// `[hooks.post_tools]`: actions after a mutating call. Off by default.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostToolsConfig {
    /// Commit what the call changed to git (seed 004's PostToolsHook).
    #[serde(default)]
    pub auto_commit: bool,
    /// The commit message template (default [`DEFAULT_COMMIT_MESSAGE`]).
    pub message: Option<String>,
    /// A command run after every mutating call, before the commit (`sh -c`, JSON on stdin).
    pub command: Option<String>,
    /// Time limit of the command and of each git step.
    pub timeout_ms: Option<u64>,
    /// Let git run programs the repository's own `.git/config` names (filters, fsmonitor):
    /// off by default, because a sandboxed command can write `.git/config` and auto-commit runs
    /// git in the unsandboxed server process.
    #[serde(default)]
    pub trust_repo_config: bool,
}

/// The `[hooks]` section is invalid; the message names the entry.
#[derive(Debug, thiserror::Error)]
pub enum HookConfigError {
    /// The catalog section did not deserialize.
    #[error(transparent)]
    Catalog(#[from] toolyard_core::CatalogError),
    /// A matcher is not a valid regular expression.
    #[error(
        "[[hooks.{event}]] entry {index}: matcher {matcher:?} is not a valid regular expression: {source}"
    )]
    Matcher {
        /// `pre_tool` or `post_tool`.
        event: &'static str,
        /// 1-based entry number.
        index: usize,
        /// The matcher.
        matcher: String,
        /// Why.
        source: Box<regex::Error>,
    },
    /// A command is empty.
    #[error("[hooks.{event}] entry {index}: command is empty")]
    EmptyCommand {
        /// `pre_tool`, `post_tool` or `post_tools`.
        event: &'static str,
        /// 1-based entry number.
        index: usize,
    },
    /// A time limit of zero.
    #[error("[hooks.{event}] entry {index}: timeout_ms must be greater than 0")]
    ZeroTimeout {
        /// `pre_tool`, `post_tool` or `post_tools`.
        event: &'static str,
        /// 1-based entry number.
        index: usize,
    },
}

impl From<HookConfigError> for ToolError {
    fn from(e: HookConfigError) -> Self {
        ToolError::InvalidArguments(e.to_string())
    }
}

/// A compiled command hook.
#[derive(Debug)]
pub(super) struct CommandHook {
    matcher: Option<Regex>,
    pub(super) command: String,
    pub(super) timeout: Duration,
}

impl CommandHook {
    pub(super) fn compile(
        event: &'static str,
        index: usize,
        c: &CommandHookConfig,
    ) -> Result<Self, HookConfigError> {
        if c.command.trim().is_empty() {
            return Err(HookConfigError::EmptyCommand { event, index });
        }
        let matcher = match c.matcher.trim() {
            "" | "*" => None,
            m => Some(Regex::new(&format!("^(?:{m})$")).map_err(|source| {
                HookConfigError::Matcher {
                    event,
                    index,
                    matcher: c.matcher.clone(),
                    source: Box::new(source),
                }
            })?),
        };
        Ok(Self {
            matcher,
            command: c.command.clone(),
            timeout: timeout_of(event, index, c.timeout_ms)?,
        })
    }

    pub(super) fn matches(&self, tool: &str) -> bool {
        self.matcher.as_ref().is_none_or(|m| m.is_match(tool))
    }
}

pub(super) fn timeout_of(
    event: &'static str,
    index: usize,
    ms: Option<u64>,
) -> Result<Duration, HookConfigError> {
    match ms {
        Some(0) => Err(HookConfigError::ZeroTimeout { event, index }),
        Some(ms) => Ok(Duration::from_millis(ms)),
        None => Ok(Duration::from_millis(DEFAULT_HOOK_TIMEOUT_MS)),
    }
}
