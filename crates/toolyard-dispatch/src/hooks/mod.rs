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

mod command;
mod config;
mod git;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolyard_core::{Annotations, Catalog, Engine, ToolError, ToolResult};

use command::PreVerdict;
use config::{CommandHook, timeout_of};
pub use config::{
    CommandHookConfig, DEFAULT_COMMIT_MESSAGE, DEFAULT_HOOK_TIMEOUT_MS, HookConfigError,
    HooksConfig, PostToolsConfig,
};

/// Characters of a hook's message shown in a result note.
const NOTE_LIMIT: usize = 4000;

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

#[cfg(test)]
mod tests {
    use super::command::{Decision, json_decision};
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
