//! The command hooks: each run with `sh -c` in the workspace root, the call as JSON on its
//! stdin, and what its exit status and reply decide.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use toolyard_core::ToolError;
use toolyard_exec::{EnvPolicy, ExecConfig, ExecRequest};

use super::config::CommandHook;
use super::{HookReport, HookStatus, Hooks};

/// Bytes of a hook's stdout or stderr kept; the rest is read and dropped.
const CAPTURE_LIMIT: usize = 64 * 1024;

impl Hooks {
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

    pub(super) async fn run_pre(
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

    pub(super) async fn run_post(
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
}

/// What a pre-tool hook decided.
pub(super) enum PreVerdict {
    Allow,
    Block(String),
    Cancelled,
}

/// A JSON reply's decision.
pub(super) enum Decision {
    Block(String),
    Feedback(String),
}

/// Read a hook's stdout as a JSON reply, in either the plain (`decision`) or Claude Code's
/// (`hookSpecificOutput`) form; `None` when it is not one or says allow.
pub(super) fn json_decision(stdout: &[u8]) -> Option<Decision> {
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

pub(super) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).trim().to_string()
}

pub(super) fn timed_out_message(limit: Duration) -> String {
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

/// How a process ended.
pub(super) struct ProcOutput {
    pub(super) exit_code: Option<i32>,
    /// The signal that ended it, e.g. `SIGKILL`.
    pub(super) signal: Option<String>,
    pub(super) stdout: Vec<u8>,
    pub(super) stderr: Vec<u8>,
    pub(super) timed_out: bool,
    pub(super) cancelled: bool,
}

/// One hook or git process to run.
pub(super) struct Run<'a> {
    /// The shell command line (`sh -c`).
    pub(super) command: String,
    pub(super) cwd: &'a Path,
    pub(super) env: EnvPolicy,
    /// Written to its stdin (empty: stdin is /dev/null).
    pub(super) input: Vec<u8>,
    pub(super) timeout: Duration,
    pub(super) cancel: Option<&'a CancellationToken>,
    /// Bytes of stdout kept exactly.
    pub(super) stdout_limit: usize,
}

/// Run `run.command` through `toolyard_exec::run`, as commands are run: past its time limit
/// (or on cancel) its whole process tree is killed, `setsid` descendants included.
pub(super) async fn run_process(run: Run<'_>) -> Result<ProcOutput, ToolError> {
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
