//! The executors: what runs an admitted, placed call. [`InProcess`] runs it in this process,
//! [`Lanes`] in a lane's runner (or every lane's, merged). Each is a value the dispatcher holds;
//! neither decides where a call goes (placing did).

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use toolyard_core::blocking::on_blocking_thread;
use toolyard_core::{Lane, ProgressSink, Tool, ToolContext, ToolError, ToolResult, ToolSpec};
use toolyard_runner::protocol::Job;
use toolyard_tools::ToolEnv;

use crate::request::CallRequest;
use crate::router::Router;

/// Runs calls in this process, on the workspace's path confinement.
pub(crate) struct InProcess {
    pub(crate) env: Arc<ToolEnv>,
}

impl InProcess {
    /// Run `tool` with the call's arguments and context. `inline`: on this task, its thread
    /// handing the runtime's other tasks over while it blocks; else on a task of its own. File
    /// I/O, hashing and SQLite block either way, so no async thread (a ping, another session's
    /// call) ever waits behind the call.
    pub(crate) async fn run(
        &self,
        tool: Arc<dyn Tool>,
        req: CallRequest,
        call_id: String,
        (limit, spec): (Duration, &ToolSpec),
        inline: bool,
    ) -> ToolResult {
        let ctx = self.context(req.session, call_id, req.cancel, req.progress, limit, spec);
        let args = req.args;
        let bound = backstop(&ctx, limit);
        let cancel = ctx.cancel.clone();
        let handle = tokio::runtime::Handle::current();
        let multi_thread = handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread;
        if inline && multi_thread {
            // Bounded work: no task of its own, no hand-off. Should the file system hang, the
            // runtime's other tasks go on on another thread meanwhile.
            let run = async { tool.invoke_checked(args, &ctx).await.into() };
            return tokio::task::block_in_place(|| {
                on_blocking_thread(|| handle.block_on(settle(run, &cancel, bound)))
            });
        }
        let work = if multi_thread {
            // This worker hands its other tasks over and runs the call itself: one thread
            // hand-off fewer than the blocking pool.
            tokio::spawn(async move {
                tokio::task::block_in_place(|| {
                    on_blocking_thread(|| handle.block_on(tool.invoke_checked(args, &ctx)))
                })
            })
        } else {
            tokio::task::spawn_blocking(move || {
                on_blocking_thread(|| handle.block_on(tool.invoke_checked(args, &ctx)))
            })
        };
        let joined = async {
            match work.await {
                Ok(r) => r.into(),
                Err(e) => ToolError::Io(format!("the call failed: {e}")).into(),
            }
        };
        settle(joined, &cancel, bound).await
    }

    /// The context of a call that runs in this process.
    fn context(
        &self,
        session: String,
        call_id: String,
        cancel: CancellationToken,
        progress: Option<ProgressSink>,
        limit: Duration,
        spec: &ToolSpec,
    ) -> ToolContext {
        ToolContext {
            call_id,
            cancel,
            progress: progress.unwrap_or_else(|| Arc::new(|_| {})),
            timeout: limit,
            max_timeout: Duration::from_millis(spec.max_timeout_ms),
            max_output_bytes: spec.max_output_bytes as usize,
            ..ToolContext::new(self.env.workspace.root(), session)
        }
    }
}

/// Runs calls in the lanes' runners, through the router.
pub(crate) struct Lanes {
    pub(crate) router: Arc<Router>,
}

impl Lanes {
    /// Run `job` in `lane`'s runner; `mutating` when the call may change files (the router
    /// settles a lost runner's changes).
    pub(crate) async fn run(
        &self,
        lane: Lane,
        job: Job,
        req_cancel: CancellationToken,
        progress: Option<ProgressSink>,
        mutating: bool,
    ) -> ToolResult {
        let progress = progress.unwrap_or_else(|| Arc::new(|_| {}));
        self.router
            .submit_with(lane, job, req_cancel, progress, mutating)
            .await
    }

    /// Run `job` (a `process_list`) in every lane whose runner runs for its session, the
    /// processes merged.
    pub(crate) async fn every(&self, job: Job, cancel: CancellationToken) -> ToolResult {
        let mut rows: Vec<Value> = Vec::new();
        let mut text = String::new();
        for lane in self.router.live_lanes_for(&job.session).await {
            let r = self
                .router
                .submit(lane, job.clone(), cancel.clone(), Arc::new(|_| {}))
                .await;
            if let Some(Value::Array(a)) = r.data.as_ref().and_then(|d| d.get("processes")) {
                rows.extend(a.iter().cloned());
                if !a.is_empty() {
                    text.push_str(&r.output);
                }
            }
        }
        if rows.is_empty() {
            text = "no processes in this session\n".into();
        }
        ToolResult::ok(text).with_data(serde_json::json!({ "processes": rows }))
    }
}

/// How long an in-process call may take before it is abandoned: tools stop within `limit`
/// themselves; this, past the longest wait a call may ask for, only catches one that hangs.
fn backstop(ctx: &ToolContext, limit: Duration) -> Duration {
    ctx.max_timeout.max(limit) + Duration::from_secs(5)
}

/// `work`'s result, unless `cancel` fires or `bound` passes first.
async fn settle(
    work: impl std::future::Future<Output = ToolResult>,
    cancel: &CancellationToken,
    bound: Duration,
) -> ToolResult {
    tokio::select! {
        r = work => r,
        _ = cancel.cancelled() => ToolError::Cancelled.into(),
        _ = tokio::time::sleep(bound) => ToolError::Timeout { ms: millis(bound) }.into(),
    }
}

/// `d` in whole milliseconds, for the job protocol.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
