//! `toolyard`: the command line. Every subcommand is a thin front door over the crates.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use toolyard_core::{Catalog, SchemaFormat};
use toolyard_dialects::Dialect;
use toolyard_dispatch::{CallRequest, Config, Dispatcher, DispatcherConfig, Mode};

/// Print a line to stdout, returning the error (a closed pipe among them) instead of panicking.
/// What it prints passes through [`printable`]: no terminal control sequence reaches the
/// terminal from a tool's output, a file name or a journal entry.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), "{}", $crate::print::printable(&format!($($arg)*)))?
    }};
}

mod doctor;
mod host;
mod journal;
mod print;
mod secrets;
mod serve;
mod workspace;

use print::{json_printable, printable};

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
    /// Run a program (a language server) in the no-net lane's sandbox with the heavy lane's
    /// limits (started by the server, not by hand).
    #[command(hide = true)]
    LaneExec(LaneExecCmd),
    /// List journaled changes, newest first.
    Log(LogArgs),
    /// Undo a journaled change (default: the newest one not yet undone).
    Undo(UndoArgs),
    /// List the plans, specs and phases the artifact tools stored.
    Artifacts(WorkspaceArgs),
    /// Bring a remote runner's workspace in, or its changes out as a patch ([remote] catalogs).
    #[command(subcommand)]
    Workspace(WorkspaceCmd),
    /// Hold CLI sessions' background processes between calls (started by `call`, not by hand).
    #[command(hide = true)]
    SessionHost(host::HostArgs),
}

#[derive(Args)]
struct WorkspaceArgs {
    /// The workspace root (default: the git repository holding the current directory, else the
    /// current directory).
    #[arg(long, short = 'w')]
    workspace: Option<PathBuf>,
}

#[derive(Subcommand)]
enum WorkspaceCmd {
    /// Fill the remote runner's workspace from a git revision or a local directory.
    Import(ImportArgs),
    /// Print the remote runner's workspace changes as a patch (`git apply` applies it).
    Export(ExportArgs),
}

#[derive(Args)]
#[group(id = "source", required = true, multiple = false)]
struct ImportSource {
    /// Clone this git URL (or a path where the runner runs) into the runner's empty workspace.
    #[arg(long, requires = "rev")]
    from_git: Option<String>,
    /// Send this directory (on this machine) over the link, as a tar archive.
    #[arg(long)]
    from_dir: Option<PathBuf>,
}

#[derive(Args)]
struct ImportArgs {
    #[command(flatten)]
    source: ImportSource,
    /// The revision to check out (a commit, tag or branch), with --from-git.
    #[arg(long)]
    rev: Option<String>,
    /// The session whose runner gets the workspace (with a `{session}` template).
    #[arg(long, default_value = "cli")]
    session: String,
    /// The time limit in seconds.
    #[arg(long, default_value_t = 600)]
    timeout_s: u64,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct ExportArgs {
    /// The revision to diff against (default: the one `workspace import --from-git` checked
    /// out, else HEAD).
    #[arg(long)]
    base: Option<String>,
    /// The session whose runner's workspace to export.
    #[arg(long, default_value = "cli")]
    session: String,
    /// The time limit in seconds.
    #[arg(long, default_value_t = 600)]
    timeout_s: u64,
    #[command(flatten)]
    common: Common,
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
    /// A catalog.toml: with a [remote] command, the files are the runner's, so nothing is
    /// settled against this disk.
    #[arg(long, env = "TOOLYARD_CATALOG")]
    catalog: Option<PathBuf>,
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
    /// A catalog.toml: with a [remote] command, the undo restores the file on the runner.
    #[arg(long, env = "TOOLYARD_CATALOG")]
    catalog: Option<PathBuf>,
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
    /// The state directory, when not the workspace's default one.
    #[arg(long)]
    state_dir: Option<PathBuf>,
}

#[derive(Args)]
struct LaneExecCmd {
    /// The workspace root.
    #[arg(long)]
    workspace: PathBuf,
    /// The catalog file.
    #[arg(long)]
    catalog: Option<PathBuf>,
    /// The state directory, when not the workspace's default one.
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// The program and its arguments, after `--`.
    #[arg(last = true, required = true)]
    argv: Vec<std::ffi::OsString>,
}

/// Options every subcommand that opens a workspace shares.
#[derive(Args, Clone)]
pub struct Common {
    /// The workspace root (default: the git repository holding the current directory, else the
    /// current directory).
    #[arg(long, short = 'w')]
    pub workspace: Option<PathBuf>,
    /// A catalog.toml laid over the built-in catalog.
    #[arg(long, env = "TOOLYARD_CATALOG")]
    pub catalog: Option<PathBuf>,
    /// Tool vocabulary: loopr (seed 000), loom (seeds 003/004), loom-py (seed 002), codex
    /// (OpenAI Codex CLI: apply_patch), anthropic (Anthropic's str_replace_based_edit_tool,
    /// str_replace_editor and bash), gemini (Gemini CLI: read_file, replace, run_shell_command,
    /// ...) or claude-code (Claude Code's Read, Write, Edit, MultiEdit, Glob, Grep, Bash, ...).
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
    /// The session: reads recorded under one session let later calls of it edit, and its
    /// background processes and shell stay reachable by later calls of it (in a session host).
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
    // SAFETY: the first thing in main, before any thread exists.
    unsafe { secrets::hide() };
    // stdout belongs to the tool output (and to the MCP transport): logs go to stderr.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // Colour only for a person at a terminal: clients save this log to files.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TOOLYARD_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        // `toolyard tools | head -1`: the reader has all it wants; end quietly, as `cat` does.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("toolyard: {}", printable(&report(&e)));
            ExitCode::from(2)
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// The error and its causes, each said once: a cause its context already quotes is dropped.
fn report(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let line = cause.to_string();
        if text.contains(&line) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&line);
    }
    text
}

/// The workspace a subcommand works on: the one given (which must be a directory), else the git
/// repository holding the current directory (so `log` and `undo` in `src/` see the changes made
/// from the root), else the current directory.
pub(crate) fn workspace_root(given: Option<&Path>) -> Result<PathBuf> {
    if let Some(dir) = given {
        return match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => Ok(dir.to_path_buf()),
            Ok(_) => bail!(
                "the workspace {} is not a directory; pass -w with the project's directory",
                dir.display()
            ),
            Err(e) => bail!(
                "the workspace {} cannot be opened ({e}); pass -w with an existing directory",
                dir.display()
            ),
        };
    }
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    Ok(cwd
        .ancestors()
        .find(|d| d.join(".git").exists())
        .unwrap_or(&cwd)
        .to_path_buf())
}

fn run(cli: Cli) -> Result<ExitCode> {
    if matches!(cli.command, Action::Call(_)) {
        // A one-shot call has no client that gives up on it, and a command answered while
        // running would end with this process: wait for every command (the session host it
        // starts inherits this).
        // SAFETY: no other thread exists yet (the runtime starts below).
        unsafe { std::env::set_var(toolyard_tools::command::ANSWER_AFTER_ENV, "0") };
    }
    if matches!(
        cli.command,
        Action::Serve(_) | Action::Call(_) | Action::SessionHost(_)
    ) {
        // This process holds the user's secrets and runs the runners: no command may read
        // its environment or memory through /proc.
        toolyard_exec::sandbox::make_non_dumpable();
    }
    match cli.command {
        Action::Serve(args) => serve::serve(args),
        Action::Call(args) => runtime()?.block_on(call(args)),
        Action::Tools(args) => tools(args),
        Action::CheckCommand(args) => doctor::check_command(args),
        Action::Doctor(args) => doctor::doctor(args),
        Action::Log(args) => journal::log(args),
        Action::Undo(args) => journal::undo(args),
        Action::Artifacts(args) => workspace::artifacts(args),
        Action::Workspace(cmd) => runtime()?.block_on(workspace::workspace(cmd)),
        Action::SessionHost(args) => host::host_main(args),
        Action::LaneExec(args) => {
            // Sandboxes itself before any thread exists, as a runner does.
            let code = toolyard_runner::lane_exec(toolyard_runner::LaneExecArgs {
                workspace: args.workspace,
                catalog: args.catalog,
                state_dir: args.state_dir,
                argv: args.argv,
            })
            .map_err(|e| anyhow::anyhow!("{e}"))?;
            Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
        }
        Action::Runner(args) => {
            // Sandboxes itself before any thread exists: no runtime may start before this.
            toolyard_runner::runner_main(toolyard_runner::RunnerArgs {
                lane: args.lane,
                workspace: args.workspace,
                catalog: args.catalog,
                state_dir: args.state_dir,
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

/// The catalog, every section checked (a mistake anywhere stops every subcommand at once), and
/// its sections parsed into their types.
pub(crate) fn load_config(path: Option<&Path>) -> Result<(Catalog, Config)> {
    let catalog = match path {
        // Absolute, so runners (started elsewhere) and the protected paths name the same file.
        Some(p) => {
            Catalog::load(&std::path::absolute(p).context("cannot resolve the catalog path")?)?
        }
        None => Catalog::builtin(),
    };
    let config = toolyard_dispatch::check_catalog(&catalog)?;
    Ok((catalog, config))
}

pub(crate) fn dispatcher(common: &Common) -> Result<Dispatcher> {
    dispatcher_with_state(common, None)
}

/// A dispatcher whose state lives in `state_dir` when given (else the workspace's own).
fn dispatcher_with_state(common: &Common, state_dir: Option<&Path>) -> Result<Dispatcher> {
    let mut config = DispatcherConfig::new(workspace_root(common.workspace.as_deref())?);
    config.state_dir = state_dir.map(Path::to_path_buf);
    config.catalog = load_config(common.catalog.as_deref())?.0;
    config.dialect = common.dialect;
    config.profile = common.profile.clone();
    config.catalog_path = common
        .catalog
        .as_deref()
        .map(std::path::absolute)
        .transpose()
        .context("cannot resolve the catalog path")?;
    if !common.inline {
        config.mode = Mode::Lanes {
            exe: std::env::current_exe().context("cannot find the toolyard executable")?,
        };
    }
    // A link placed by an engine ([remote.kubernetes]), when the catalog asks for one.
    let link = toolyard_remote::link_for(&config.catalog, config.catalog_path.as_deref())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Dispatcher::with_link(config, link).map_err(|e| anyhow::anyhow!("{e}"))
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
    // A process that outlives this call lives in the session host, where later calls reach it.
    let net_lane = !dispatcher.runs_in_server(&args.tool)
        && dispatcher
            .spec_of(&args.tool)
            .is_some_and(|s| s.lane != toolyard_core::Lane::NoNet);
    // The dispatcher answers from its engine table and the tool's argument shape, so every
    // dialect's form is covered.
    let result = if dispatcher.outlives_call(&args.tool, &json) {
        host::call(&args.common, &dispatcher, args.session, args.tool, json).await?
    } else if net_lane
        && let Some(result) =
            host::call_if_running(&args.common, &dispatcher, &args.session, &args.tool, &json)
                .await?
    {
        // The net lanes' commands see the servers the host's processes listen on only in its
        // runners' network namespaces.
        result
    } else {
        dispatcher
            .call(CallRequest::new(args.session, args.tool, json))
            .await
    };
    if args.json {
        out!("{}", json_printable(serde_json::to_string_pretty(&result)?));
    } else {
        out!(
            "{}",
            result.output.strip_suffix('\n').unwrap_or(&result.output)
        );
    }
    Ok(if result.success {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn tools(args: ToolsArgs) -> Result<ExitCode> {
    // Listing reads no state: a throwaway state directory keeps the user's untouched.
    let scratch = tempfile::tempdir().context("cannot create a temporary directory")?;
    let dispatcher = dispatcher_with_state(&args.common, Some(scratch.path()))?;
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
            out!("{}", json_printable(serde_json::to_string_pretty(&json)?));
        }
        None => {
            out!(
                "{} tools (dialect {}, profile {}):",
                entries.len(),
                args.common.dialect,
                args.common.profile
            );
            for (d, need) in &entries {
                let lane = if dispatcher.runs_in_server(&d.name) {
                    "server".to_string()
                } else if dispatcher.runs_in_process_lane(&d.name) {
                    "by id".to_string()
                } else {
                    dispatcher
                        .spec_of(&d.name)
                        .map(|s| s.lane.to_string())
                        .unwrap_or_default()
                };
                let first = d.description.split(". ").next().unwrap_or("");
                out!("  {:<22} {:<7} {}", d.name, lane, first);
                if let Some(need) = need {
                    out!("  {:<22} {:<7} UNAVAILABLE (not listed): {need}", "", "");
                }
            }
            let hidden = dispatcher.all_definitions().len() - dispatcher.definitions().len();
            if !args.all && hidden > 0 {
                out!("({hidden} more need configuring; see them with --all)");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether `catalog` reaches its runners through a `[remote]` link: then the files are the
/// runner's, and nothing may be read or settled on this disk.
fn is_remote(config: &Config) -> bool {
    toolyard_dispatch::CommandLink::from_config(&config.remote).is_some()
}
