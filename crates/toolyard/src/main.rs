//! `toolyard`: the command line. Every subcommand is a thin front door over the crates.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use toolyard_core::{Catalog, SchemaFormat};
use toolyard_runner::{CallRequest, Dispatcher, DispatcherConfig, Mode};
use toolyard_tools::Dialect;

mod serve;

/// Toolyard: safe, fast, faithful tools for LLM coding agents.
#[derive(Parser)]
#[command(name = "toolyard", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Action,
}

#[derive(Subcommand)]
enum Action {
    /// Serve the tools over MCP (stdio, or streamable HTTP with --http).
    Serve(serve::ServeArgs),
    /// Call one tool and print its output (exit 1 when the tool reports an error).
    Call(CallArgs),
    /// Print the tool definitions.
    Tools(ToolsArgs),
    /// Decide whether the command policy allows a shell command (exit 0 allowed, 3 blocked).
    CheckCommand(CheckArgs),
    /// Say what this machine's kernel lets Toolyard enforce, lane by lane.
    Doctor(DoctorArgs),
    /// Serve jobs for one lane over stdin/stdout (started by the router, not by hand).
    Runner(RunnerCmd),
    /// List journaled changes, newest first.
    Log(LogArgs),
    /// Undo a journaled change (default: the newest one not yet undone).
    Undo(UndoArgs),
    /// List the plans, specs and phases the artifact tools stored.
    Artifacts(WorkspaceArgs),
}

#[derive(Args)]
struct WorkspaceArgs {
    /// The workspace root (default: the current directory).
    #[arg(long, short = 'w', default_value = ".")]
    workspace: PathBuf,
}

#[derive(Args)]
struct LogArgs {
    /// Only this file (workspace-relative).
    path: Option<String>,
    /// Only this session's changes.
    #[arg(long)]
    session: Option<String>,
    /// At most this many changes.
    #[arg(long, default_value_t = 50)]
    limit: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    ws: WorkspaceArgs,
}

#[derive(Args)]
struct UndoArgs {
    /// The change to undo (see `toolyard log`).
    change_id: Option<i64>,
    /// Undo the last change of this session instead of the newest of all.
    #[arg(long)]
    session: Option<String>,
    /// Undo even if the file changed since that change.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    ws: WorkspaceArgs,
}

#[derive(Args)]
struct CheckArgs {
    /// The shell command to check.
    command: String,
    /// A catalog.toml whose [policy] section adds rules.
    #[arg(long, env = "TOOLYARD_CATALOG")]
    catalog: Option<PathBuf>,
}

#[derive(Args)]
struct DoctorArgs {
    /// A catalog.toml laid over the built-in catalog.
    #[arg(long, env = "TOOLYARD_CATALOG")]
    catalog: Option<PathBuf>,
}

#[derive(Args)]
struct RunnerCmd {
    /// The lane: no-net, net or heavy.
    #[arg(long)]
    lane: toolyard_core::Lane,
    /// The workspace root.
    #[arg(long)]
    workspace: PathBuf,
    /// The catalog file.
    #[arg(long)]
    catalog: Option<PathBuf>,
}

/// Options every subcommand that opens a workspace shares.
#[derive(Args, Clone)]
pub struct Common {
    /// The workspace root (default: the current directory).
    #[arg(long, short = 'w', default_value = ".")]
    pub workspace: PathBuf,
    /// A catalog.toml laid over the built-in catalog.
    #[arg(long, env = "TOOLYARD_CATALOG")]
    pub catalog: Option<PathBuf>,
    /// Tool vocabulary: loopr (seed 000), loom (seeds 003/004) or loom-py (seed 002).
    #[arg(long, default_value = "loopr")]
    pub dialect: Dialect,
    /// Tool set: all, or a loop type of the catalog (plan, spec, phase, code).
    #[arg(long, default_value = "all")]
    pub profile: String,
    /// Run tools in this process instead of sandboxed runner processes (no sandbox).
    #[arg(long)]
    pub inline: bool,
}

#[derive(Args)]
struct CallArgs {
    /// The tool's name.
    tool: String,
    /// Its arguments as a JSON object, or `-` to read them from standard input.
    args: Option<String>,
    /// The session: reads recorded under one session let later calls of it edit.
    #[arg(long, default_value = "cli")]
    session: String,
    /// Print the whole ToolResult as JSON instead of the model-facing output.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct ToolsArgs {
    /// Print JSON definitions in this format: openai, anthropic or mcp.
    #[arg(long)]
    format: Option<SchemaFormat>,
    /// Show every tool, also those that are not listed until configured, with what they need.
    #[arg(long)]
    all: bool,
    #[command(flatten)]
    common: Common,
}

fn main() -> ExitCode {
    // stdout belongs to the tool output (and to the MCP transport): logs go to stderr.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TOOLYARD_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("toolyard: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Action::Serve(args) => serve::serve(args),
        Action::Call(args) => runtime()?.block_on(call(args)),
        Action::Tools(args) => tools(args),
        Action::CheckCommand(args) => check_command(args),
        Action::Doctor(args) => doctor(args),
        Action::Log(args) => log(args),
        Action::Undo(args) => undo(args),
        Action::Artifacts(args) => artifacts(args),
        Action::Runner(args) => {
            // Sandboxes itself before any thread exists: no runtime may start before this.
            toolyard_runner::runner_main(toolyard_runner::RunnerArgs {
                lane: args.lane,
                workspace: args.workspace,
                catalog: args.catalog,
            })
            .map_err(|e| anyhow::anyhow!("{e}"))?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

pub(crate) fn load_catalog(path: Option<&Path>) -> Result<Catalog> {
    match path {
        Some(p) => Ok(Catalog::load(p)?),
        None => Ok(Catalog::builtin()),
    }
}

pub(crate) fn dispatcher(common: &Common) -> Result<Dispatcher> {
    let mut config = DispatcherConfig::new(&common.workspace);
    config.catalog = load_catalog(common.catalog.as_deref())?;
    config.dialect = common.dialect;
    config.profile = common.profile.clone();
    config.catalog_path = common.catalog.clone();
    if !common.inline {
        config.mode = Mode::Lanes {
            exe: std::env::current_exe().context("cannot find the toolyard executable")?,
        };
    }
    Dispatcher::new(config).map_err(|e| anyhow::anyhow!("{e}"))
}

async fn call(args: CallArgs) -> Result<ExitCode> {
    let raw = match args.args.as_deref() {
        None => "{}".to_string(),
        Some("-") => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .context("cannot read arguments from standard input")?;
            s
        }
        Some(s) => s.to_string(),
    };
    let json: serde_json::Value = serde_json::from_str(&raw).with_context(|| {
        format!("the arguments are not valid JSON: {raw:.200}; pass a JSON object like '{{\"path\": \"README.md\"}}'")
    })?;
    if !json.is_object() {
        bail!("the arguments must be a JSON object, like '{{\"path\": \"README.md\"}}'");
    }
    let dispatcher = dispatcher(&args.common)?;
    let result = dispatcher
        .call(CallRequest::new(args.session, args.tool, json))
        .await;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        print!("{}", result.output);
        if !result.output.ends_with('\n') {
            println!();
        }
    }
    Ok(if result.success {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn tools(args: ToolsArgs) -> Result<ExitCode> {
    let dispatcher = dispatcher(&args.common)?;
    // Without --all, only the tools that can work: what tools/list shows.
    let entries: Vec<_> = dispatcher
        .all_definitions()
        .into_iter()
        .filter(|(_, need)| args.all || need.is_none())
        .collect();
    match args.format {
        Some(format) => {
            let defs: Vec<_> = entries.into_iter().map(|(d, _)| d).collect();
            let json = toolyard_core::export(&defs, format);
            println!("{}", serde_json::to_string_pretty(&json)?);
        }
        None => {
            println!(
                "{} tools (dialect {}, profile {}):",
                entries.len(),
                args.common.dialect,
                args.common.profile
            );
            for (d, need) in &entries {
                let lane = dispatcher
                    .spec_of(&d.name)
                    .map(|s| s.lane.to_string())
                    .unwrap_or_default();
                let first = d.description.split(". ").next().unwrap_or("");
                println!("  {:<22} {:<7} {}", d.name, lane, first);
                if let Some(need) = need {
                    println!("  {:<22} {:<7} UNAVAILABLE (not listed): {need}", "", "");
                }
            }
            let hidden = dispatcher.all_definitions().len() - dispatcher.definitions().len();
            if !args.all && hidden > 0 {
                println!("({hidden} more need configuring; see them with --all)");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn check_command(args: CheckArgs) -> Result<ExitCode> {
    use toolyard_exec::policy::{CommandPolicy, Decision, PolicyConfig};
    let catalog = load_catalog(args.catalog.as_deref())?;
    let config: PolicyConfig = catalog.section("policy")?;
    let policy = CommandPolicy::new(&config)?;
    match policy.check(&args.command) {
        Decision::Allow => {
            println!("allowed");
            Ok(ExitCode::SUCCESS)
        }
        Decision::Block { rule, reason } => {
            println!("blocked by rule `{rule}`: {reason}");
            Ok(ExitCode::from(3))
        }
    }
}

fn doctor(args: DoctorArgs) -> Result<ExitCode> {
    let catalog = load_catalog(args.catalog.as_deref())?;
    let sandbox: toolyard_exec::sandbox::SandboxConfig = catalog.section("sandbox")?;
    println!("catalog: {}", catalog.origin());
    println!(
        "process-tree kill: {}",
        toolyard_exec::tree_kill_mechanism()
    );
    println!("{}", toolyard_exec::sandbox::probe());
    println!(
        "no-net without a network namespace: {}",
        if sandbox.allow_unsandboxed_no_net {
            "runs anyway (catalog [sandbox] allow_unsandboxed_no_net = true)"
        } else {
            "refuses to start (fails closed)"
        }
    );
    Ok(ExitCode::SUCCESS)
}

/// The workspace's journal, with interrupted writes settled first.
fn journal(ws: &Path) -> Result<(toolyard_workspace::Workspace, toolyard_workspace::Journal)> {
    let workspace = toolyard_workspace::Workspace::open(ws).map_err(|e| anyhow::anyhow!("{e}"))?;
    let state = toolyard_workspace::StateDir::for_workspace(workspace.root())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let journal = toolyard_workspace::Journal::open(&state).map_err(|e| anyhow::anyhow!("{e}"))?;
    journal
        .recover(&workspace)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok((workspace, journal))
}

fn log(args: LogArgs) -> Result<ExitCode> {
    let (_ws, journal) = journal(&args.ws.workspace)?;
    let changes = journal
        .list(&toolyard_workspace::ChangeFilter {
            session: args.session,
            path: args.path,
            status: None,
            limit: Some(args.limit),
        })
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&changes)?);
        return Ok(ExitCode::SUCCESS);
    }
    if changes.is_empty() {
        println!("no changes recorded");
    }
    for c in changes {
        let what = match (&c.undoes, c.existed) {
            (Some(u), _) => format!("undo of #{}", u.0),
            (None, false) => "created".to_string(),
            (None, true) => "modified".to_string(),
        };
        let undone = c
            .undone_by
            .map(|u| format!(" (undone by #{})", u.0))
            .unwrap_or_default();
        println!(
            "#{:<5} {} {:<8} {:<12} {:<10} {} [{}]{}",
            c.id.0, c.time, c.status, c.tool, what, c.path, c.session, undone
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn undo(args: UndoArgs) -> Result<ExitCode> {
    let (ws, journal) = journal(&args.ws.workspace)?;
    let id = match (args.change_id, &args.session) {
        (Some(id), _) => toolyard_workspace::ChangeId(id),
        (None, Some(s)) => journal
            .last_of_session(s)
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .map(|c| c.id)
            .context("that session has no change left to undo")?,
        (None, None) => journal
            .list(&toolyard_workspace::ChangeFilter {
                status: Some(toolyard_workspace::ChangeStatus::Done),
                ..Default::default()
            })
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .into_iter()
            .find(|c| c.undone_by.is_none() && c.undoes.is_none())
            .map(|c| c.id)
            .context("no change left to undo")?,
    };
    match journal.undo(&ws, id, "cli", "cli-undo", args.force) {
        Ok(out) => {
            let what = if out.removed { "removed" } else { "restored" };
            println!(
                "undid change #{}: {what} {} (this undo is change #{})",
                id.0, out.path, out.undo.0
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("toolyard: {e}");
            Ok(ExitCode::from(1))
        }
    }
}

fn artifacts(args: WorkspaceArgs) -> Result<ExitCode> {
    let ws =
        toolyard_workspace::Workspace::open(&args.workspace).map_err(|e| anyhow::anyhow!("{e}"))?;
    let list =
        toolyard_tools::artifacts::list_artifacts(&ws).map_err(|e| anyhow::anyhow!("{e}"))?;
    if list.is_empty() {
        println!("no artifacts in {}", ws.root().display());
    }
    for a in list {
        println!("{}", serde_json::to_string(&a)?);
    }
    Ok(ExitCode::SUCCESS)
}
