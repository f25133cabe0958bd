//! The runner process (`toolyard runner --lane L --workspace DIR`): sandbox itself once, then
//! serve jobs from stdin, several at once, until stdin closes.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::sync::{Mutex, Semaphore, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use toolyard_core::{Catalog, Lane, Tool, ToolContext, ToolError, ToolResult};
use toolyard_exec::sandbox::{self, LanePolicy, LanesConfig, SandboxConfig};
use toolyard_tools::records::Records;
use toolyard_tools::{Dialect, ToolEnv};
use toolyard_workspace::{RelPath, StateDir};

use crate::protocol::{FromRunner, Job, LineReader, RecordOp, Reply, ToRunner};

/// What `toolyard runner` is started with.
#[derive(Debug, Clone)]
pub struct RunnerArgs {
    /// The lane whose sandbox to apply.
    pub lane: Lane,
    /// The workspace root.
    pub workspace: PathBuf,
    /// The catalog file, if not the built-in one.
    pub catalog: Option<PathBuf>,
    /// The state directory, when not the workspace's default one.
    pub state_dir: Option<PathBuf>,
}

/// Run a runner: call this from `main` before any other thread exists (the sandbox needs a
/// single-threaded process), it returns when the router closes stdin.
pub fn runner_main(args: RunnerArgs) -> Result<(), ToolError> {
    // Before anything secret is in memory: commands must not read this process's environment.
    sandbox::make_non_dumpable();
    let catalog = match &args.catalog {
        Some(p) => Catalog::load(p).map_err(|e| ToolError::InvalidArguments(e.to_string()))?,
        None => Catalog::builtin(),
    };
    let bad = |e: toolyard_core::CatalogError| ToolError::InvalidArguments(e.to_string());
    let root = args
        .workspace
        .canonicalize()
        .map_err(|e| ToolError::Io(format!("{}: {e}", args.workspace.display())))?;
    let state = match &args.state_dir {
        Some(dir) => StateDir::at(dir, &root)?,
        None => StateDir::for_workspace(&root)?,
    };
    let temp_dir = state
        .tmp_dir()
        .join(format!("{}-{}", args.lane, std::process::id()));
    std::fs::create_dir_all(&temp_dir)
        .map_err(|e| ToolError::Io(format!("{}: {e}", temp_dir.display())))?;
    let mut config: SandboxConfig = catalog.section("sandbox").map_err(bad)?;
    // Commands may write their spill files, nothing else of Toolyard's state.
    config
        .extra_write
        .push(state.outputs_dir().display().to_string());
    // The runner moves what a command did to protected paths here.
    config
        .extra_write
        .push(state.quarantine_dir().display().to_string());
    let lanes: LanesConfig = catalog.section("lanes").map_err(bad)?;
    let mut policy = LanePolicy::new(args.lane, root.clone(), temp_dir.clone());
    policy.config = config;
    policy.limits = lanes.limits(args.lane);
    let slots = policy.limits.slots();
    // SAFETY: no other thread exists yet (the runtime starts below), so nothing can read the
    // environment concurrently; children inherit TMPDIR pointing at the private temp dir.
    unsafe { std::env::set_var("TMPDIR", &temp_dir) };
    let report = sandbox::apply(&policy).map_err(|e| {
        ToolError::Unavailable(format!(
            "the {} lane's sandbox could not be applied: {e}",
            args.lane
        ))
    })?;

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| ToolError::Io(format!("cannot start the runtime: {e}")))?;
    let result = rt.block_on(serve(
        args.lane,
        root,
        state,
        catalog,
        slots,
        report.to_string(),
    ));
    rt.shutdown_timeout(Duration::from_secs(1));
    result
}

/// The environment variable through which the router gives a runner its first process number.
pub const PROCESS_BASE_ENV: &str = "TOOLYARD_PROCESS_BASE";

/// A line writer shared by every task.
type Out = mpsc::UnboundedSender<FromRunner>;

/// [`Records`] kept by the router, asked for over the job protocol.
struct RemoteRecords {
    out: Out,
    next: AtomicU64,
    waiting: Mutex<HashMap<u64, oneshot::Sender<Reply>>>,
}

impl RemoteRecords {
    async fn ask(&self, op: RecordOp) -> Result<Option<i64>, ToolError> {
        let rid = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.waiting.lock().await.insert(rid, tx);
        self.out
            .send(FromRunner::Request { rid, op })
            .map_err(|_| ToolError::Unavailable("the router is gone".into()))?;
        rx.await
            .map_err(|_| {
                ToolError::Unavailable("the router did not answer a records request".into())
            })?
            .into_result()
    }

    async fn answer(&self, rid: u64, reply: Reply) {
        if let Some(tx) = self.waiting.lock().await.remove(&rid) {
            let _ = tx.send(reply);
        }
    }
}

#[async_trait]
impl Records for RemoteRecords {
    async fn record_read(
        &self,
        session: &str,
        path: &RelPath,
        hash: &str,
    ) -> Result<(), ToolError> {
        self.ask(RecordOp::RecordRead {
            session: session.into(),
            path: path.as_str().into(),
            hash: hash.into(),
        })
        .await
        .map(drop)
    }

    async fn check_write(
        &self,
        session: &str,
        path: &RelPath,
        current: &str,
    ) -> Result<(), ToolError> {
        self.ask(RecordOp::CheckWrite {
            session: session.into(),
            path: path.as_str().into(),
            current: current.into(),
        })
        .await
        .map(drop)
    }

    async fn record_write(
        &self,
        session: &str,
        path: &RelPath,
        hash: &str,
    ) -> Result<(), ToolError> {
        self.ask(RecordOp::RecordWrite {
            session: session.into(),
            path: path.as_str().into(),
            hash: hash.into(),
        })
        .await
        .map(drop)
    }

    async fn journal_begin(
        &self,
        session: &str,
        call_id: &str,
        tool: &str,
        path: &RelPath,
        new_hash: &str,
    ) -> Result<i64, ToolError> {
        self.ask(RecordOp::JournalBegin {
            session: session.into(),
            call_id: call_id.into(),
            tool: tool.into(),
            path: path.as_str().into(),
            new_hash: new_hash.into(),
        })
        .await?
        .ok_or_else(|| ToolError::Io("the router returned no change id".into()))
    }

    async fn journal_end(&self, change: i64, done: bool) -> Result<(), ToolError> {
        self.ask(RecordOp::JournalEnd { change, done })
            .await
            .map(drop)
    }
}

async fn serve(
    lane: Lane,
    root: PathBuf,
    state: StateDir,
    catalog: Catalog,
    slots: usize,
    sandbox: String,
) -> Result<(), ToolError> {
    let (out, mut out_rx) = mpsc::unbounded_channel::<FromRunner>();
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(msg) = out_rx.recv().await {
            let Ok(mut line) = serde_json::to_vec(&msg) else {
                continue;
            };
            line.push(b'\n');
            if stdout.write_all(&line).await.is_err() || stdout.flush().await.is_err() {
                break;
            }
        }
    });
    let records = Arc::new(RemoteRecords {
        out: out.clone(),
        next: AtomicU64::new(1),
        waiting: Mutex::new(HashMap::new()),
    });
    let env = Arc::new(ToolEnv::with_records(
        &root,
        state,
        catalog,
        records.clone(),
    )?);
    let mut tools: HashMap<(String, String), Arc<dyn Tool>> = HashMap::new();
    for dialect in Dialect::ALL {
        for t in toolyard_tools::dialect::tools(&env, dialect)? {
            tools.insert((dialect.to_string(), t.tool.name().to_string()), t.tool);
        }
    }
    let tools = Arc::new(tools);
    // Process ids name the lane, so the dispatcher routes later calls here; a restarted
    // runner continues the numbering its router gives it, so an old id is never reused.
    let base = std::env::var(PROCESS_BASE_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    toolyard_tools::process::set_lane(lane.as_str(), base);
    let slots = Arc::new(Semaphore::new(slots.max(1)));
    let jobs: Arc<Mutex<HashMap<String, CancellationToken>>> = Arc::default();
    let _ = out.send(FromRunner::Ready {
        lane: lane.to_string(),
        pid: std::process::id(),
        sandbox,
    });

    let mut lines = LineReader::new(BufReader::new(tokio::io::stdin()));
    while let Some(line) = lines.next_line().await {
        let msg: ToRunner = match serde_json::from_str(&line) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(%e, "runner: ignoring a malformed line");
                continue;
            }
        };
        match msg {
            ToRunner::Job(job) => {
                let cancel = CancellationToken::new();
                jobs.lock().await.insert(job.id.clone(), cancel.clone());
                let (out, tools, env, slots, jobs) = (
                    out.clone(),
                    tools.clone(),
                    env.clone(),
                    slots.clone(),
                    jobs.clone(),
                );
                tokio::spawn(async move {
                    let id = job.id.clone();
                    let result = match slots.acquire().await {
                        Ok(_permit) => run_job(&tools, &env, job, cancel, &out).await,
                        Err(_) => {
                            ToolError::Unavailable("the runner is shutting down".into()).into()
                        }
                    };
                    jobs.lock().await.remove(&id);
                    let _ = out.send(FromRunner::Result { id, result });
                });
            }
            ToRunner::Cancel { id } => {
                if let Some(token) = jobs.lock().await.get(&id) {
                    token.cancel();
                }
            }
            ToRunner::Reply { rid, result } => records.answer(rid, result).await,
            ToRunner::EndSession { session } => {
                let n = toolyard_tools::process::end_session(&session);
                tracing::debug!(%session, killed = n, "session ended");
            }
        }
    }
    // Background processes end with the runner's router.
    toolyard_tools::process::kill_all();
    // The router is gone: stop every job (their command trees die with their tokens).
    for token in jobs.lock().await.values() {
        token.cancel();
    }
    drop(out);
    drop(env);
    let _ = tokio::time::timeout(Duration::from_secs(2), writer).await;
    Ok(())
}

async fn run_job(
    tools: &HashMap<(String, String), Arc<dyn Tool>>,
    env: &Arc<ToolEnv>,
    job: Job,
    cancel: CancellationToken,
    out: &Out,
) -> ToolResult {
    let Some(tool) = tools.get(&(job.dialect.clone(), job.tool.clone())) else {
        return ToolError::NotFound(format!(
            "this runner has no tool `{}` in dialect {}",
            job.tool, job.dialect
        ))
        .into();
    };
    let progress_out = out.clone();
    let id = job.id.clone();
    let ctx = ToolContext {
        workspace_root: env.workspace.root().to_path_buf(),
        cwd: env.workspace.root().to_path_buf(),
        session_id: job.session,
        call_id: job.call_id,
        cancel: cancel.clone(),
        progress: Arc::new(move |p| {
            let _ = progress_out.send(FromRunner::Progress {
                id: id.clone(),
                progress: p,
            });
        }),
        timeout: Duration::from_millis(job.timeout_ms),
        max_timeout: Duration::from_millis(job.max_timeout_ms),
        max_output_bytes: job.max_output_bytes as usize,
    };
    tokio::select! {
        r = tool.invoke(job.args, &ctx) => r.into(),
        // A tool that ignores its token still ends here; command tools kill their tree first.
        _ = async { cancel.cancelled().await; tokio::time::sleep(Duration::from_secs(3)).await } => {
            ToolError::Cancelled.into()
        }
    }
}
