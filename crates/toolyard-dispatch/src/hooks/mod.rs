//! Hooks: the user's own commands and actions around every call, configured in the catalog's
//! `[hooks]` section. They are a layer around the call (see [`Hooks::around`]): the dispatcher
//! runs the pre-tool hooks, then the call (inline or in its lane), then the post-tool hooks and
//! the post-tools actions; a tool knows nothing of them.
//!
//! - **pre-tool / post-tool command hooks**, in the form of Claude Code's hooks: a `matcher`
//!   (a regular expression that must match the whole tool name; `""` or `"*"` match every tool)
//!   and a `command`, run with `sh -c` in the workspace root, in the server process, with the
//!   call as JSON on its stdin (`hook_event_name`, `session_id`, `tool_name`, `tool_input`,
//!   `cwd`, `call_id`, and for post-tool hooks `tool_response`, the call's [`ToolResult`]).
//!   Exit 0 allows; its stdout may be a JSON reply, `{"decision": "block"|"approve", "reason"}`
//!   or `{"hookSpecificOutput": {"permissionDecision": "allow"|"deny"|"ask",
//!   "permissionDecisionReason"}}` (`ask` is a deny: there is nobody to ask). Exit 2 blocks a
//!   pre-tool call with the hook's stderr as the error the model reads; after the call, exit 2
//!   hands the stderr to the model as feedback. Any other exit, or a timeout (the hook's whole
//!   process tree is killed), is reported in the result and does not block. Hooks and git run
//!   through `toolyard_exec::run`, as commands do: its tree kill reaches what they start.
//! - **post-tools**: after a mutating call (file tools, undo, artifacts, command tools; see
//!   [`is_mutating`]), an optional command and the built-in `auto_commit`, which commits what
//!   the call changed to git with a message naming the tool and the call id. File tools commit
//!   exactly their `files_changed`; command tools report no files, so the repository's status is
//!   taken before and after the call and the paths that changed in between are committed (and
//!   reported as the call's `files_changed`). A file that was already dirty (modified, staged or
//!   untracked) before the call is never committed, since the commit would take the user's own
//!   edits with the agent's: it is left out and named in the report (`left_out`).
//!
//! Whatever a hook does after the call, the call's work stands: a failing hook never undoes it
//! and never turns success into failure; it adds a note to `output` and an entry to
//! `data.hooks`.
//!
//! ```toml
//! [[hooks.pre_tool]]
//! matcher = "edit_file|write_file"
//! command = "/home/me/bin/check-edit.sh"
//! timeout_ms = 10000
//!
//! [hooks.post_tools]
//! auto_commit = true
//! ```

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsStr;
use std::future::Future;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolyard_core::{Annotations, Catalog, Engine, ToolError, ToolResult};
use toolyard_exec::{EnvPolicy, ExecConfig, ExecRequest};

/// A command hook's time limit when its entry sets none (Claude Code's default, 60 s).
pub const DEFAULT_HOOK_TIMEOUT_MS: u64 = 60_000;
/// The default commit message of `auto_commit`; `{tool}`, `{call_id}`, `{session}` and
/// `{files}` (comma-separated) are replaced.
pub const DEFAULT_COMMIT_MESSAGE: &str = "toolyard: {tool} (call {call_id})";

/// Bytes of a hook's stdout or stderr kept; the rest is read and dropped.
const CAPTURE_LIMIT: usize = 64 * 1024;
/// Bytes of git's stdout kept (a status of many paths); the rest is read and dropped.
const GIT_OUTPUT_LIMIT: usize = 16 << 20;
/// Characters of a hook's message shown in a result note.
const NOTE_LIMIT: usize = 4000;

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

/// One call as the hooks see it.
#[derive(Debug, Clone)]
pub struct HookCall {
    /// The session.
    pub session: String,
    /// The tool's name in the dispatcher's dialect (what matchers see).
    pub tool: String,
    /// The engine it runs under.
    pub engine: Engine,
    /// The call's id.
    pub call_id: String,
    /// Its arguments.
    pub args: Value,
    /// The tool's annotations.
    pub annotations: Annotations,
}

/// Whether a call may change the workspace: the tool is not read-only, and its engine
/// [changes files](Engine::changes_files) or it says it is destructive (`complete_task`, which
/// only writes Toolyard's own state, is neither). A read-only tool is trusted: a read-only
/// tool under the `run_command` engine must not trigger a commit.
pub fn is_mutating(engine: Engine, annotations: Annotations) -> bool {
    !annotations.read_only && (engine.changes_files() || annotations.destructive)
}

/// How one hook went, as reported in `data.hooks`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HookStatus {
    /// It ran and had nothing to say (auto-commit: it committed).
    Ok,
    /// It blocked the call.
    Blocked,
    /// It handed the model feedback (post-tool exit 2 or a JSON reason).
    Feedback,
    /// Nothing to do (auto-commit: no change to commit).
    Skipped,
    /// It failed (non-zero exit, could not start, git error); the call was not affected.
    Failed,
    /// It ran past its time limit and was killed.
    TimedOut,
}

/// One hook's report.
#[derive(Debug, Clone, Serialize)]
pub struct HookReport {
    /// `pre_tool`, `post_tool` or `post_tools`.
    pub event: &'static str,
    /// The command, or `auto_commit`.
    pub hook: String,
    /// How it went.
    pub status: HookStatus,
    /// Its exit code, for a command that exited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// What it said (stderr, a JSON reason, or the error).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The commit `auto_commit` made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The files `auto_commit` committed (workspace-relative).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
    /// The files the call changed that `auto_commit` left out because they had uncommitted
    /// changes before the call (workspace-relative).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<String>,
}

impl HookReport {
    fn new(event: &'static str, hook: &str, status: HookStatus) -> Self {
        Self {
            event,
            hook: hook.to_string(),
            status,
            exit_code: None,
            message: None,
            commit: None,
            files: Vec::new(),
            left_out: Vec::new(),
        }
    }

    /// The line for the model, if this report is worth one (failures and feedback).
    fn note(&self) -> Option<String> {
        let who = if self.hook == "auto_commit" {
            "auto_commit".to_string()
        } else {
            format!("{} hook `{}`", self.event, self.hook)
        };
        let msg = self.message.as_deref().map(clip).unwrap_or_default();
        match self.status {
            // The model should know its change to those files is not in any commit.
            HookStatus::Ok | HookStatus::Skipped if !self.left_out.is_empty() => {
                Some(format!("{who}: {msg}"))
            }
            HookStatus::Ok | HookStatus::Skipped | HookStatus::Blocked => None,
            HookStatus::Feedback => Some(format!("{who} says: {msg}")),
            HookStatus::Failed => Some(match self.exit_code {
                Some(code) => format!("{who} failed (exit {code}): {msg}"),
                None => format!("{who} failed: {msg}"),
            }),
            HookStatus::TimedOut => Some(format!("{who} {msg}")),
        }
    }
}

/// A compiled command hook.
#[derive(Debug)]
struct CommandHook {
    matcher: Option<Regex>,
    command: String,
    timeout: Duration,
}

impl CommandHook {
    fn compile(
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

    fn matches(&self, tool: &str) -> bool {
        self.matcher.as_ref().is_none_or(|m| m.is_match(tool))
    }
}

fn timeout_of(
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

/// The hooks of one workspace, compiled from `[hooks]`; cheap to share.
#[derive(Debug)]
pub struct Hooks {
    root: PathBuf,
    pre: Vec<CommandHook>,
    post: Vec<CommandHook>,
    post_command: Option<CommandHook>,
    auto_commit: bool,
    message: String,
    git_timeout: Duration,
    trust_repo_config: bool,
    /// One git operation at a time: concurrent commits would fight over `index.lock`.
    git_lock: tokio::sync::Mutex<()>,
}

impl Hooks {
    /// No hooks at all.
    pub fn none(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
            pre: Vec::new(),
            post: Vec::new(),
            post_command: None,
            auto_commit: false,
            message: DEFAULT_COMMIT_MESSAGE.into(),
            git_timeout: Duration::from_millis(DEFAULT_HOOK_TIMEOUT_MS),
            trust_repo_config: false,
            git_lock: tokio::sync::Mutex::new(()),
        }
    }

    /// The hooks of `catalog`'s `[hooks]` section, run in the workspace at `root`.
    pub fn from_catalog(catalog: &Catalog, root: &Path) -> Result<Self, HookConfigError> {
        let config: HooksConfig = catalog.section("hooks")?;
        Self::new(&config, root)
    }

    /// Compile `config` for the workspace at `root`.
    pub fn new(config: &HooksConfig, root: &Path) -> Result<Self, HookConfigError> {
        let compile = |event, list: &[CommandHookConfig]| {
            list.iter()
                .enumerate()
                .map(|(i, c)| CommandHook::compile(event, i + 1, c))
                .collect::<Result<Vec<_>, _>>()
        };
        let pt = &config.post_tools;
        let post_command = match &pt.command {
            Some(command) => Some(CommandHook::compile(
                "post_tools",
                1,
                &CommandHookConfig {
                    matcher: String::new(),
                    command: command.clone(),
                    timeout_ms: pt.timeout_ms,
                },
            )?),
            None => None,
        };
        Ok(Self {
            pre: compile("pre_tool", &config.pre_tool)?,
            post: compile("post_tool", &config.post_tool)?,
            post_command,
            auto_commit: pt.auto_commit,
            message: pt
                .message
                .clone()
                .unwrap_or_else(|| DEFAULT_COMMIT_MESSAGE.into()),
            git_timeout: timeout_of("post_tools", 1, pt.timeout_ms)?,
            trust_repo_config: pt.trust_repo_config,
            ..Self::none(root)
        })
    }

    /// Whether no hook is configured (the dispatcher then skips this layer).
    pub fn is_empty(&self) -> bool {
        self.pre.is_empty() && self.post.is_empty() && !self.post_tools_on()
    }

    fn post_tools_on(&self) -> bool {
        self.auto_commit || self.post_command.is_some()
    }

    /// Run `call` (the future `run`) inside the hooks: pre-tool hooks (a block returns
    /// `ToolError::Blocked` and `run` never starts), the call, post-tool hooks, then, for a
    /// mutating call, the post-tools command and auto-commit. Reports land in the result.
    pub async fn around<F>(&self, call: &HookCall, cancel: &CancellationToken, run: F) -> ToolResult
    where
        F: Future<Output = ToolResult>,
    {
        let mut reports = Vec::new();
        for hook in self.pre.iter().filter(|h| h.matches(&call.tool)) {
            let input = self.event_json("PreToolUse", call, None);
            let (report, verdict) = self.run_pre(hook, &input, cancel).await;
            match verdict {
                PreVerdict::Allow => {}
                PreVerdict::Cancelled => return ToolError::Cancelled.into(),
                PreVerdict::Block(reason) => {
                    tracing::info!(tool = %call.tool, call = %call.call_id, hook = %hook.command, "pre_tool hook blocked the call");
                    reports.push(report);
                    let mut result: ToolResult = ToolError::Blocked {
                        rule: format!("pre_tool hook `{}`", hook.command),
                        reason,
                    }
                    .into();
                    attach(&mut result, reports);
                    return result;
                }
            }
            reports.extend(report.worth_keeping());
        }

        let mutating = is_mutating(call.engine, call.annotations);
        let reports_files = call.engine.reports_changed_files();
        // What was dirty before the call is the user's: it never goes into a commit. A command
        // reports no files, so its snapshot also hashes them: what it changed is what differs
        // between now and the end of the call.
        let before = if self.auto_commit && mutating {
            Some(self.snapshot(!reports_files).await)
        } else {
            None
        };

        let mut result = run.await;

        for hook in self.post.iter().filter(|h| h.matches(&call.tool)) {
            let input = self.event_json("PostToolUse", call, Some(&result));
            reports.extend(self.run_post(hook, "post_tool", &input).await);
        }
        if mutating && self.post_tools_on() {
            if let Some(hook) = &self.post_command {
                let input = self.event_json("PostTools", call, Some(&result));
                reports.extend(self.run_post(hook, "post_tools", &input).await);
            }
            if let Some(before) = before {
                let report = self
                    .auto_commit(call, &mut result, reports_files, before)
                    .await;
                reports.push(report);
            }
        }
        attach(&mut result, reports);
        result
    }

    fn event_json(&self, event: &str, call: &HookCall, response: Option<&ToolResult>) -> Vec<u8> {
        let mut v = json!({
            "hook_event_name": event,
            "session_id": call.session,
            "tool_name": call.tool,
            "tool_input": call.args,
            "cwd": self.root,
            "call_id": call.call_id,
        });
        if let Some(r) = response {
            v["tool_response"] = serde_json::to_value(r).unwrap_or(Value::Null);
            v["files_changed"] = json!(r.files_changed);
        }
        serde_json::to_vec(&v).unwrap_or_default()
    }

    async fn run_hook(
        &self,
        hook: &CommandHook,
        event: &str,
        input: &[u8],
        cancel: Option<&CancellationToken>,
    ) -> Result<ProcOutput, ToolError> {
        let root = self.root.display().to_string();
        let set = BTreeMap::from([
            ("TOOLYARD_WORKSPACE".to_string(), root.clone()),
            ("TOOLYARD_HOOK_EVENT".to_string(), event.to_string()),
            // Hooks written for Claude Code find their scripts through it.
            ("CLAUDE_PROJECT_DIR".to_string(), root),
        ]);
        // The user's own command, as their shell would run it: nothing scrubbed.
        let env = EnvPolicy::from_config(&ExecConfig {
            scrub: Some(Vec::new()),
            keep: Vec::new(),
            set,
            ..ExecConfig::default()
        });
        let req = Run {
            command: hook.command.clone(),
            cwd: &self.root,
            env,
            input: input.to_vec(),
            timeout: hook.timeout,
            cancel,
            stdout_limit: CAPTURE_LIMIT,
        };
        run_process(req).await
    }

    async fn run_pre(
        &self,
        hook: &CommandHook,
        input: &[u8],
        cancel: &CancellationToken,
    ) -> (HookReport, PreVerdict) {
        let out = self.run_hook(hook, "PreToolUse", input, Some(cancel)).await;
        let mut report = HookReport::new("pre_tool", &hook.command, HookStatus::Ok);
        let out = match out {
            Ok(o) => o,
            Err(e) => {
                report.status = HookStatus::Failed;
                report.message = Some(format!("could not start: {e}"));
                return (report, PreVerdict::Allow);
            }
        };
        if out.cancelled {
            return (report, PreVerdict::Cancelled);
        }
        if out.timed_out {
            report.status = HookStatus::TimedOut;
            report.message = Some(timed_out_message(hook.timeout));
            return (report, PreVerdict::Allow);
        }
        report.exit_code = out.exit_code;
        let stderr = text(&out.stderr);
        match report.exit_code {
            Some(0) => match json_decision(&out.stdout) {
                Some(Decision::Block(reason)) => {
                    report.status = HookStatus::Blocked;
                    report.message = Some(reason.clone());
                    (report, PreVerdict::Block(reason))
                }
                Some(Decision::Feedback(_)) | None => (report, PreVerdict::Allow),
            },
            Some(2) => {
                let reason = if stderr.is_empty() {
                    "the hook exited with status 2 and gave no reason".to_string()
                } else {
                    stderr
                };
                report.status = HookStatus::Blocked;
                report.message = Some(reason.clone());
                (report, PreVerdict::Block(reason))
            }
            _ => {
                report.status = HookStatus::Failed;
                report.message = Some(failure_message(&out, stderr));
                (report, PreVerdict::Allow)
            }
        }
    }

    async fn run_post(
        &self,
        hook: &CommandHook,
        event: &'static str,
        input: &[u8],
    ) -> Option<HookReport> {
        let name = if event == "post_tool" {
            "PostToolUse"
        } else {
            "PostTools"
        };
        // No cancel: the call has finished, and its follow-up (a commit) should not be lost.
        let out = self.run_hook(hook, name, input, None).await;
        let mut report = HookReport::new(event, &hook.command, HookStatus::Ok);
        let out = match out {
            Ok(o) => o,
            Err(e) => {
                return Some(
                    report.status_msg(HookStatus::Failed, format!("could not start: {e}")),
                );
            }
        };
        if out.timed_out {
            return Some(report.status_msg(HookStatus::TimedOut, timed_out_message(hook.timeout)));
        }
        report.exit_code = out.exit_code;
        let stderr = text(&out.stderr);
        match report.exit_code {
            Some(0) => match json_decision(&out.stdout) {
                Some(Decision::Block(reason) | Decision::Feedback(reason)) => {
                    Some(report.status_msg(HookStatus::Feedback, reason))
                }
                None => None,
            },
            Some(2) => {
                let msg = if stderr.is_empty() {
                    "(exit 2, no message)".to_string()
                } else {
                    stderr
                };
                Some(report.status_msg(HookStatus::Feedback, msg))
            }
            _ => {
                let msg = failure_message(&out, stderr);
                Some(report.status_msg(HookStatus::Failed, msg))
            }
        }
    }

    /// The dirty paths of the repository (inside the workspace), and with `hash` their
    /// content now (without, every content is `None`: only the paths are wanted).
    async fn snapshot(&self, hash: bool) -> Result<Snapshot, String> {
        let _guard = self.git_lock.lock().await;
        let repo = self.repo().await?;
        let dirty = repo.status(&self.root).await?;
        if !hash {
            return Ok(dirty.into_iter().map(|p| (p, None)).collect());
        }
        let top = repo.top.clone();
        tokio::task::spawn_blocking(move || {
            dirty
                .into_iter()
                .map(|p| {
                    let h = content_hash(&top, &p);
                    (p, h)
                })
                .collect()
        })
        .await
        .map_err(|e| format!("hashing the changed files failed: {e}"))
    }

    /// Commit what the call changed, leaving out every path that was dirty before it (`before`):
    /// those hold the user's uncommitted work, which a `toolyard:` commit must never take.
    async fn auto_commit(
        &self,
        call: &HookCall,
        result: &mut ToolResult,
        reports_files: bool,
        before: Result<Snapshot, String>,
    ) -> HookReport {
        let report = HookReport::new("post_tools", "auto_commit", HookStatus::Ok);
        let before = match before {
            Ok(b) => b,
            Err(e) => return report.status_msg(HookStatus::Failed, e),
        };
        let _guard = self.git_lock.lock().await;
        let repo = match self.repo().await {
            Ok(r) => r,
            Err(e) => return report.status_msg(HookStatus::Failed, e),
        };
        let dirty = match repo.status(&self.root).await {
            Ok(d) => d,
            Err(e) => return report.status_msg(HookStatus::Failed, e),
        };
        let (paths, left_out): (Vec<Vec<u8>>, Vec<Vec<u8>>) = if reports_files {
            let wanted: HashSet<Vec<u8>> = result
                .files_changed
                .iter()
                .map(|f| [repo.prefix.as_slice(), f.as_bytes()].concat())
                .collect();
            dirty
                .into_iter()
                .filter(|p| wanted.contains(p))
                .partition(|p| !before.contains_key(p))
        } else {
            let top = repo.top.clone();
            let changed = tokio::task::spawn_blocking(move || {
                let mut fresh = Vec::new();
                let mut again = Vec::new();
                for p in dirty {
                    match before.get(&p) {
                        None => fresh.push(p),
                        Some(h) if content_hash(&top, &p) != *h => again.push(p),
                        // Dirty before and untouched by the call: not its change.
                        Some(_) => {}
                    }
                }
                (fresh, again)
            })
            .await;
            match changed {
                Ok((fresh, again)) => {
                    if result.files_changed.is_empty() {
                        result.files_changed = fresh
                            .iter()
                            .chain(&again)
                            .map(|p| repo.workspace_relative(p))
                            .collect();
                    }
                    (fresh, again)
                }
                Err(e) => {
                    return report.status_msg(
                        HookStatus::Failed,
                        format!("hashing the changed files failed: {e}"),
                    );
                }
            }
        };
        let mut report = report;
        report.left_out = left_out
            .iter()
            .map(|p| repo.workspace_relative(p))
            .collect();
        let left_note = left_out_message(&report.left_out);
        let files: Vec<String> = paths.iter().map(|p| repo.workspace_relative(p)).collect();
        if paths.is_empty() {
            let msg = match left_note {
                Some(note) => format!("{note}; nothing else to commit"),
                None => "no change to commit".into(),
            };
            return report.status_msg(HookStatus::Skipped, msg);
        }
        report.message = left_note;
        let message = self
            .message
            .replace("{tool}", &call.tool)
            .replace("{call_id}", &call.call_id)
            .replace("{session}", &call.session)
            .replace("{files}", &files.join(", "));
        let mut list = Vec::new();
        for p in &paths {
            list.extend_from_slice(p);
            list.push(0);
        }
        let add = ["add", "-A", "--pathspec-from-file=-", "--pathspec-file-nul"];
        if let Err(e) = repo.git(&add, list.clone()).await {
            return report.status_msg(HookStatus::Failed, e);
        }
        // `--only` (implied by the paths) leaves anything the user had staged out of the commit.
        let commit = [
            "commit",
            "--quiet",
            "-m",
            message.as_str(),
            "--pathspec-from-file=-",
            "--pathspec-file-nul",
        ];
        if let Err(e) = repo.git(&commit, list).await {
            return report.status_msg(HookStatus::Failed, e);
        }
        let head = repo
            .git(&["rev-parse", "HEAD"], Vec::new())
            .await
            .map(|o| o.trim().to_string())
            .ok();
        tracing::info!(tool = %call.tool, call = %call.call_id, commit = ?head, files = files.len(), left_out = report.left_out.len(), "auto-committed");
        report.commit = head;
        report.files = files;
        report
    }

    /// The git repository holding the workspace, checked for configuration that would make
    /// git run programs the model could have planted.
    async fn repo(&self) -> Result<Repo, String> {
        let probe = Repo {
            top: self.root.clone(),
            prefix: Vec::new(),
            timeout: self.git_timeout,
        };
        let out = probe
            .git(&["rev-parse", "--show-toplevel", "--show-prefix"], Vec::new())
            .await
            .map_err(|e| {
                format!(
                    "the workspace {} is not in a git repository, so nothing was committed (run `git init` there, or turn auto_commit off): {e}",
                    self.root.display()
                )
            })?;
        let mut lines = out.lines();
        let repo = Repo {
            top: PathBuf::from(lines.next().unwrap_or_default()),
            prefix: lines.next().unwrap_or_default().as_bytes().to_vec(),
            timeout: self.git_timeout,
        };
        if !self.trust_repo_config {
            let keys = repo
                .git(
                    &["config", "--local", "--includes", "--name-only", "--list"],
                    Vec::new(),
                )
                .await
                .unwrap_or_default();
            if let Some(key) = keys.lines().find(|k| runs_a_program(k)) {
                return Err(format!(
                    "the repository's own config sets `{key}`, which makes git run a program; auto_commit runs git outside the sandbox, so it refuses (remove the setting, or set trust_repo_config = true in [hooks.post_tools] if you wrote it)"
                ));
            }
        }
        Ok(repo)
    }
}

impl HookReport {
    fn status_msg(mut self, status: HookStatus, message: impl Into<String>) -> Self {
        self.status = status;
        self.message = Some(message.into());
        self
    }

    /// Keep a pre-tool report in `data.hooks` only when it has something to say.
    fn worth_keeping(self) -> Option<Self> {
        (self.status != HookStatus::Ok).then_some(self)
    }
}

/// Git configuration keys (lower case, as `git config --list` prints them) that make git
/// status / add / commit run a program.
fn runs_a_program(key: &str) -> bool {
    // Hooks, fsmonitor and signing are switched off on the command line (`Repo::run`); a
    // filter driver (run by status and add on every file its attributes name) cannot be.
    toolyard_exec::protect::git_program(key, "") == Some(toolyard_exec::protect::GitProgram::Filter)
}

/// What a pre-tool hook decided.
enum PreVerdict {
    Allow,
    Block(String),
    Cancelled,
}

/// A JSON reply's decision.
enum Decision {
    Block(String),
    Feedback(String),
}

/// Read a hook's stdout as a JSON reply, in either the plain (`decision`) or Claude Code's
/// (`hookSpecificOutput`) form; `None` when it is not one or says allow.
fn json_decision(stdout: &[u8]) -> Option<Decision> {
    let v: Value = serde_json::from_slice(stdout.trim_ascii()).ok()?;
    let reason =
        |v: &Value, key: &str| v.get(key).and_then(Value::as_str).unwrap_or("").to_string();
    if let Some(h) = v.get("hookSpecificOutput") {
        match h.get("permissionDecision").and_then(Value::as_str) {
            Some("deny") => {
                return Some(Decision::Block(or_default(reason(
                    h,
                    "permissionDecisionReason",
                ))));
            }
            // Nobody can be asked: an agent's tool server runs unattended.
            Some("ask") => {
                return Some(Decision::Block(format!(
                    "{} (the hook asked for confirmation, which Toolyard cannot get)",
                    or_default(reason(h, "permissionDecisionReason"))
                )));
            }
            _ => {}
        }
        if let Some(ctx) = h.get("additionalContext").and_then(Value::as_str) {
            return Some(Decision::Feedback(ctx.to_string()));
        }
    }
    match v.get("decision").and_then(Value::as_str) {
        Some("block") => Some(Decision::Block(or_default(reason(&v, "reason")))),
        _ if v.get("continue") == Some(&Value::Bool(false)) => {
            Some(Decision::Block(or_default(reason(&v, "stopReason"))))
        }
        _ => None,
    }
}

fn or_default(reason: String) -> String {
    if reason.trim().is_empty() {
        "the hook gave no reason".into()
    } else {
        reason
    }
}

/// Add the reports to `result`: a note per failure or feedback at the end of `output`, and
/// every report under `data.hooks` (when `data` is an object or absent).
fn attach(result: &mut ToolResult, reports: Vec<HookReport>) {
    if reports.is_empty() {
        return;
    }
    let notes: Vec<String> = reports.iter().filter_map(HookReport::note).collect();
    if !notes.is_empty() {
        if !result.output.is_empty() && !result.output.ends_with('\n') {
            result.output.push('\n');
        }
        result.output.push_str("\n[hooks]\n");
        for n in notes {
            result.output.push_str(&n);
            result.output.push('\n');
        }
    }
    let list = serde_json::to_value(&reports).unwrap_or(Value::Null);
    match &mut result.data {
        Some(Value::Object(map)) => {
            map.insert("hooks".into(), list);
        }
        None => result.data = Some(json!({ "hooks": list })),
        // A dialect's own non-object shape stays as it is; the notes in `output` still say it.
        Some(_) => {}
    }
}

fn clip(s: &str) -> String {
    let s = s.trim();
    if s.chars().count() <= NOTE_LIMIT {
        return s.to_string();
    }
    let head: String = s.chars().take(NOTE_LIMIT).collect();
    format!("{head}... (cut)")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).trim().to_string()
}

fn timed_out_message(limit: Duration) -> String {
    format!(
        "timed out after {} ms; its whole process tree was killed",
        limit.as_millis()
    )
}

fn failure_message(out: &ProcOutput, stderr: String) -> String {
    if !stderr.is_empty() {
        return stderr;
    }
    let stdout = text(&out.stdout);
    if !stdout.is_empty() {
        return stdout;
    }
    match &out.signal {
        Some(sig) => format!("killed by signal {sig}"),
        None => "no output".into(),
    }
}

/// What auto-commit says of the files it left out, if any.
fn left_out_message(left_out: &[String]) -> Option<String> {
    let (had, them, stays) = match left_out.len() {
        0 => return None,
        1 => ("it had", "it", "it stays"),
        _ => ("they had", "them", "they stay"),
    };
    Some(format!(
        "left out {}: {had} uncommitted changes before the call, and committing {them} would \
         take the user's own edits too; {stays} uncommitted",
        left_out.join(", ")
    ))
}

/// The content of `top/path` now, for comparing before and after a command: the bytes' hash
/// for a file, the target for a symlink, `None` when it does not exist.
fn content_hash(top: &Path, path: &[u8]) -> Option<String> {
    let full = top.join(OsStr::from_bytes(path));
    let meta = std::fs::symlink_metadata(&full).ok()?;
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(&full).ok()?;
        return Some(format!("link:{}", target.display()));
    }
    if !meta.is_file() {
        // A FIFO or device would block or be endless; its type and size are what can change.
        return Some(format!("other:{:?}:{}", meta.file_type(), meta.len()));
    }
    let file = std::fs::File::open(&full).ok()?;
    toolyard_workspace::hash_reader(file).ok()
}

/// Dirty repository-relative paths and their content (see [`content_hash`]) before a call.
type Snapshot = HashMap<Vec<u8>, Option<String>>;

/// A git repository, and how to run git in it.
struct Repo {
    top: PathBuf,
    /// The workspace root's path inside the repository, `/`-terminated (empty at the top).
    prefix: Vec<u8>,
    timeout: Duration,
}

impl Repo {
    /// Run `git args` in `cwd` with `stdin`; its stdout (bytes: paths may not be UTF-8), or an
    /// error naming the step.
    async fn run(&self, cwd: &Path, args: &[&str], stdin: Vec<u8>) -> Result<Vec<u8>, String> {
        // Neither a hook nor an fsmonitor the repository names may run outside the sandbox;
        // nothing may prompt; pathspecs are paths, not patterns.
        let fixed = [
            "git",
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.fsmonitor=false",
            "-c",
            "commit.gpgSign=false",
            "--no-optional-locks",
            "--literal-pathspecs",
        ];
        let command = fixed
            .iter()
            .chain(args)
            .map(|a| sh_quote(a))
            .collect::<Vec<_>>()
            .join(" ");
        let env = EnvPolicy::from_config(&ExecConfig {
            scrub: Some(
                ["GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"]
                    .map(String::from)
                    .to_vec(),
            ),
            keep: Vec::new(),
            set: BTreeMap::from([("GIT_TERMINAL_PROMPT".to_string(), "0".to_string())]),
            ..ExecConfig::default()
        });
        let step = args.first().copied().unwrap_or("git");
        let req = Run {
            command,
            cwd,
            env,
            input: stdin,
            timeout: self.timeout,
            cancel: None,
            stdout_limit: GIT_OUTPUT_LIMIT,
        };
        let out = run_process(req)
            .await
            .map_err(|e| format!("cannot run git: {e}"))?;
        if out.timed_out {
            return Err(format!("git {step} {}", timed_out_message(self.timeout)));
        }
        if out.exit_code == Some(0) {
            return Ok(out.stdout);
        }
        let why = text(&out.stderr);
        let why = if why.is_empty() {
            text(&out.stdout)
        } else {
            why
        };
        Err(format!("git {step} failed: {why}"))
    }

    /// Run `git args` at the top of the repository; its stdout as text.
    async fn git(&self, args: &[&str], stdin: Vec<u8>) -> Result<String, String> {
        let out = self.run(&self.top, args, stdin).await?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// Repository-relative paths under `dir` that differ from HEAD or are untracked (not
    /// ignored), one per file.
    async fn status(&self, dir: &Path) -> Result<Vec<Vec<u8>>, String> {
        let args = [
            "status",
            "--porcelain=v1",
            "-z",
            "--untracked-files=all",
            "--",
            ".",
        ];
        let out = self.run(dir, &args, Vec::new()).await?;
        let mut paths = Vec::new();
        let mut entries = out.split(|b| *b == 0).filter(|e| !e.is_empty());
        while let Some(e) = entries.next() {
            if e.len() < 4 {
                continue;
            }
            paths.push(e[3..].to_vec());
            // A rename or copy: the next entry is its source, which changed too.
            if matches!(e[0], b'R' | b'C')
                && let Some(src) = entries.next()
            {
                paths.push(src.to_vec());
            }
        }
        Ok(paths)
    }

    /// A repository-relative path as the workspace names it.
    fn workspace_relative(&self, path: &[u8]) -> String {
        let rel = path.strip_prefix(self.prefix.as_slice()).unwrap_or(path);
        String::from_utf8_lossy(rel).into_owned()
    }
}

/// How a process ended.
struct ProcOutput {
    exit_code: Option<i32>,
    /// The signal that ended it, e.g. `SIGKILL`.
    signal: Option<String>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    timed_out: bool,
    cancelled: bool,
}

/// One hook or git process to run.
struct Run<'a> {
    /// The shell command line (`sh -c`).
    command: String,
    cwd: &'a Path,
    env: EnvPolicy,
    /// Written to its stdin (empty: stdin is /dev/null).
    input: Vec<u8>,
    timeout: Duration,
    cancel: Option<&'a CancellationToken>,
    /// Bytes of stdout kept exactly.
    stdout_limit: usize,
}

/// Run `run.command` through `toolyard_exec::run`, as commands are run: past its time limit
/// (or on cancel) its whole process tree is killed, `setsid` descendants included.
async fn run_process(run: Run<'_>) -> Result<ProcOutput, ToolError> {
    let mut req = ExecRequest::new(run.command, run.cwd);
    // A hook's stdout is its answer (JSON), its stderr the message: apart.
    req.streams = toolyard_exec::Streams::Separate;
    req.timeout = run.timeout;
    req.env = run.env;
    req.max_output_bytes = 2 * CAPTURE_LIMIT;
    req.raw_stdout_limit = run.stdout_limit;
    req.stdin = (!run.input.is_empty()).then_some(run.input);
    if let Some(c) = run.cancel {
        req.cancel = c.child_token();
    }
    let out = toolyard_exec::run(req).await?;
    Ok(ProcOutput {
        exit_code: out.exit_code,
        signal: out.signal,
        stdout: out.raw_stdout,
        stderr: out.stderr.into_bytes(),
        timed_out: out.timed_out,
        cancelled: out.cancelled,
    })
}

/// `s` as one word for `sh`.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(tool: &str, engine: &str) -> HookCall {
        HookCall {
            session: "s1".into(),
            tool: tool.into(),
            engine: Engine::builtin(engine).expect("an engine"),
            call_id: "c1".into(),
            args: json!({"path": "a.txt"}),
            annotations: Annotations::MUTATING,
        }
    }

    fn hooks(toml_text: &str, root: &Path) -> Hooks {
        let catalog = Catalog::parse_over_builtin(toml_text, "test").unwrap();
        Hooks::from_catalog(&catalog, root).unwrap()
    }

    #[test]
    fn no_hooks_section_means_no_hooks() {
        let t = tempfile::tempdir().unwrap();
        assert!(hooks("", t.path()).is_empty());
    }

    #[test]
    fn unknown_keys_and_bad_matchers_are_config_errors() {
        let t = tempfile::tempdir().unwrap();
        let bad = Catalog::parse_over_builtin("[hooks]\npre_tools = []\n", "c.toml").unwrap();
        let e = Hooks::from_catalog(&bad, t.path()).unwrap_err().to_string();
        assert!(e.contains("pre_tools"), "{e}");
        let bad = Catalog::parse_over_builtin(
            "[[hooks.pre_tool]]\nmatcher = \"(\"\ncommand = \"true\"\n",
            "c.toml",
        )
        .unwrap();
        let e = Hooks::from_catalog(&bad, t.path()).unwrap_err().to_string();
        assert!(e.contains("matcher"), "{e}");
        let bad = Catalog::parse_over_builtin(
            "[[hooks.post_tool]]\ncommand = \"true\"\ntimeout_ms = 0\n",
            "c.toml",
        )
        .unwrap();
        assert!(Hooks::from_catalog(&bad, t.path()).is_err());
    }

    #[test]
    fn matchers_match_the_whole_tool_name() {
        let t = tempfile::tempdir().unwrap();
        let h = hooks(
            "[[hooks.pre_tool]]\nmatcher = \"edit_file|write_file\"\ncommand = \"true\"\n\
             [[hooks.pre_tool]]\nmatcher = \"*\"\ncommand = \"true\"\n",
            t.path(),
        );
        assert!(h.pre[0].matches("edit_file"));
        assert!(h.pre[0].matches("write_file"));
        assert!(!h.pre[0].matches("write_file_2"));
        assert!(!h.pre[0].matches("read_file"));
        assert!(h.pre[1].matches("anything"));
    }

    #[test]
    fn mutating_is_decided_by_engine_and_annotations() {
        assert!(is_mutating(Engine::RunCommand, Annotations::COMMAND));
        assert!(is_mutating(Engine::EditFile, Annotations::MUTATING));
        assert!(!is_mutating(Engine::ReadFile, Annotations::READ_ONLY));
        assert!(!is_mutating(Engine::WebFetch, Annotations::WEB));
        assert!(!is_mutating(Engine::RunCommand, Annotations::READ_ONLY));
        let task = Annotations {
            read_only: false,
            destructive: false,
            idempotent: true,
            open_world: false,
        };
        assert!(!is_mutating(Engine::CompleteTask, task));
        // A tool whose engine does not change files still counts by its annotations.
        assert!(is_mutating(Engine::Shell, Annotations::COMMAND));
    }

    #[test]
    fn json_replies_in_both_forms_are_understood() {
        let block = |s: &str| matches!(json_decision(s.as_bytes()), Some(Decision::Block(_)));
        assert!(block(r#"{"decision":"block","reason":"no"}"#));
        assert!(block(
            r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"x"}}"#
        ));
        assert!(block(
            r#"{"hookSpecificOutput":{"permissionDecision":"ask"}}"#
        ));
        assert!(block(r#"{"continue":false,"stopReason":"stop"}"#));
        assert!(json_decision(br#"{"decision":"approve","reason":"fine"}"#).is_none());
        assert!(
            json_decision(br#"{"hookSpecificOutput":{"permissionDecision":"allow"}}"#).is_none()
        );
        assert!(json_decision(b"plain text").is_none());
        match json_decision(br#"{"decision":"block","reason":"use tabs"}"#) {
            Some(Decision::Block(r)) => assert_eq!(r, "use tabs"),
            _ => panic!("expected a block"),
        }
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn a_pre_hook_exiting_2_blocks_and_the_call_never_runs() {
        let t = tempfile::tempdir().unwrap();
        let h = hooks(
            "[[hooks.pre_tool]]\nmatcher = \"write_file\"\ncommand = \"cat > input.json; echo 'not here' >&2; exit 2\"\n",
            t.path(),
        );
        let ran = std::sync::atomic::AtomicBool::new(false);
        let r = rt().block_on(h.around(
            &call("write_file", "write_file"),
            &CancellationToken::new(),
            async {
                ran.store(true, std::sync::atomic::Ordering::SeqCst);
                ToolResult::ok("done")
            },
        ));
        assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
        assert!(!r.success);
        assert_eq!(r.error_kind.as_deref(), Some("blocked"));
        assert!(r.output.contains("not here"), "{}", r.output);
        let input: Value =
            serde_json::from_slice(&std::fs::read(t.path().join("input.json")).unwrap()).unwrap();
        assert_eq!(input["hook_event_name"], "PreToolUse");
        assert_eq!(input["tool_name"], "write_file");
        assert_eq!(input["tool_input"]["path"], "a.txt");
        assert_eq!(input["session_id"], "s1");
        assert_eq!(input["call_id"], "c1");
    }

    #[test]
    fn a_failing_or_slow_hook_is_reported_and_does_not_block() {
        let t = tempfile::tempdir().unwrap();
        let h = hooks(
            "[[hooks.pre_tool]]\ncommand = \"echo oops >&2; exit 1\"\n\
             [[hooks.post_tool]]\ncommand = \"sleep 30\"\ntimeout_ms = 200\n",
            t.path(),
        );
        let r = rt().block_on(h.around(
            &call("read_file", "read_file"),
            &CancellationToken::new(),
            async { ToolResult::ok("content") },
        ));
        assert!(r.success);
        assert!(r.output.starts_with("content"), "{}", r.output);
        assert!(r.output.contains("failed (exit 1): oops"), "{}", r.output);
        assert!(r.output.contains("timed out"), "{}", r.output);
        let reports = &r.data.as_ref().unwrap()["hooks"];
        assert_eq!(reports[0]["status"], "failed");
        assert_eq!(reports[1]["status"], "timed_out");
    }

    /// Live (non-zombie) processes whose command line is `sleep <token>`.
    fn sleepers(token: &str) -> Vec<u32> {
        let needle = format!("sleep\0{token}\0");
        let mut pids = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
                continue;
            };
            let zombie = std::fs::read_to_string(entry.path().join("stat")).is_ok_and(|s| {
                s.rsplit(')')
                    .next()
                    .is_some_and(|r| r.trim_start().starts_with('Z'))
            });
            if !zombie && cmdline.ends_with(needle.as_bytes()) {
                pids.push(pid);
            }
        }
        pids
    }

    #[test]
    fn a_hook_that_times_out_leaves_no_background_child_behind() {
        let t = tempfile::tempdir().unwrap();
        // Numbers no other test uses, to find these sleeps in /proc.
        let plain = format!("{}1", 100_000 + std::process::id());
        let escaped = format!("{}2", 100_000 + std::process::id());
        // One child stays in the hook's process group, one leaves it with setsid.
        let h = hooks(
            &format!(
                "[[hooks.pre_tool]]\ncommand = \"sleep {plain} & setsid sleep {escaped} & sleep 30\"\ntimeout_ms = 500\n"
            ),
            t.path(),
        );
        let r = rt().block_on(h.around(
            &call("read_file", "read_file"),
            &CancellationToken::new(),
            async { ToolResult::ok("content") },
        ));
        assert!(r.success, "a timed-out pre-hook does not block");
        assert_eq!(r.data.as_ref().unwrap()["hooks"][0]["status"], "timed_out");
        // The kill is asynchronous to the reaping of orphans: allow it a bounded moment.
        let until = std::time::Instant::now() + Duration::from_secs(10);
        let left = loop {
            let left = [sleepers(&plain), sleepers(&escaped)].concat();
            if left.is_empty() || std::time::Instant::now() > until {
                break left;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        for pid in &left {
            // SAFETY: a signal to a process this test started.
            unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
        }
        assert!(left.is_empty(), "the hook's children survived: {left:?}");
    }

    #[test]
    fn auto_commit_outside_a_git_repository_says_so() {
        let t = tempfile::tempdir().unwrap();
        let h = hooks("[hooks.post_tools]\nauto_commit = true\n", t.path());
        let r = rt().block_on(h.around(
            &call("write_file", "write_file"),
            &CancellationToken::new(),
            async { ToolResult::ok("wrote").with_files_changed(vec!["a.txt".into()]) },
        ));
        assert!(r.success);
        assert!(r.output.contains("not in a git repository"), "{}", r.output);
    }
}
