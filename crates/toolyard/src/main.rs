//! `toolyard`: the command line. Every subcommand is a thin front door over the crates.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use toolyard_core::{Catalog, SchemaFormat};
use toolyard_dialects::Dialect;
use toolyard_dispatch::{CallRequest, Dispatcher, DispatcherConfig, Mode};

mod host;
mod serve;

/// Secret environment values kept out of `/proc/PID/environ` whole.
mod secrets {
    use std::ffi::OsString;
    use std::io::Read as _;
    use std::os::fd::{AsRawFd as _, FromRawFd as _};
    use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
    use std::os::unix::process::CommandExt as _;

    /// Set in the re-executed process: the descriptor holding the secret variables.
    const HIDDEN_ENV_FD: &str = "TOOLYARD_HIDDEN_ENV_FD";

    /// The name the descriptor's memory file carries (checked before reading it).
    const MEMFD_NAME: &str = "toolyard-env";

    /// Keep the values of secret-looking variables (names the command environment scrubs)
    /// out of this process's `/proc/PID/environ`, which same-user processes may read even of a
    /// non-dumpable process: when there are any, the process executes itself again without
    /// them, handing them over in a memory file that the new image reads into its heap
    /// environment and closes. The block `/proc` shows then has no trace of them, not even
    /// their length (masking them in place left a `*` per character). Where that fails, they
    /// are masked in place.
    ///
    /// # Safety
    /// Call first in `main`, while the process has one thread (it sets environment variables).
    pub(crate) unsafe fn hide() {
        if let Some(fd) = std::env::var_os(HIDDEN_ENV_FD) {
            // SAFETY: single-threaded, per this function's contract.
            unsafe {
                std::env::remove_var(HIDDEN_ENV_FD);
                restore(&fd);
            }
            return;
        }
        let policy = toolyard_exec::EnvPolicy::default();
        let secret: Vec<(OsString, OsString)> = std::env::vars_os()
            .filter(|(k, _)| k.to_str().is_some_and(|k| policy.is_scrubbed(k)))
            .collect();
        if secret.is_empty() {
            return;
        }
        // Returns only when the exec failed: then mask them where they are.
        let _ = reexec_without(&secret);
        // SAFETY: single-threaded, per this function's contract.
        unsafe { toolyard_exec::hide_secrets_from_proc() };
    }

    fn reexec_without(secret: &[(OsString, OsString)]) -> std::io::Result<()> {
        let name = std::ffi::CString::new(MEMFD_NAME).map_err(std::io::Error::other)?;
        // SAFETY: memfd_create with a valid name; no close-on-exec, so the new image has it.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), 0) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor, owned from here.
        let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
        let mut blob = Vec::new();
        for (k, v) in secret {
            blob.extend_from_slice(k.as_bytes());
            blob.push(b'=');
            blob.extend_from_slice(v.as_bytes());
            blob.push(0);
        }
        std::io::Write::write_all(&mut file, &blob)?;
        let mut args = std::env::args_os();
        let argv0 = args.next().unwrap_or_else(|| "toolyard".into());
        let err = std::process::Command::new("/proc/self/exe")
            .arg0(argv0)
            .args(args)
            .env_clear()
            .envs(std::env::vars_os().filter(|(k, _)| !secret.iter().any(|(s, _)| s == k)))
            .env(HIDDEN_ENV_FD, file.as_raw_fd().to_string())
            .exec();
        Err(err)
    }

    /// Read the secret variables back from descriptor `fd` (only the memory file made above)
    /// and close it.
    unsafe fn restore(fd: &std::ffi::OsStr) {
        let Some(fd) = fd.to_str().and_then(|s| s.parse::<i32>().ok()) else {
            return;
        };
        let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap_or_default();
        if fd < 3
            || !link
                .as_os_str()
                .as_bytes()
                .starts_with(format!("/memfd:{MEMFD_NAME}").as_bytes())
        {
            return;
        }
        // SAFETY: the descriptor is the memory file our previous image left open for us.
        let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
        let mut blob = Vec::new();
        if std::io::Seek::rewind(&mut file).is_err() || file.read_to_end(&mut blob).is_err() {
            return;
        }
        for entry in blob.split(|&b| b == 0).filter(|e| !e.is_empty()) {
            let Some(eq) = entry.iter().position(|&b| b == b'=') else {
                continue;
            };
            let (k, v) = (&entry[..eq], &entry[eq + 1..]);
            // SAFETY: single-threaded, per the caller's contract; the values go to the heap
            // environment, not the block /proc shows.
            unsafe {
                std::env::set_var(
                    OsString::from_vec(k.to_vec()),
                    OsString::from_vec(v.to_vec()),
                )
            };
        }
    }
}

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

/// Print a line to stdout, returning the error (a closed pipe among them) instead of panicking.
/// What it prints passes through [`printable`]: no terminal control sequence reaches the
/// terminal from a tool's output, a file name or a journal entry.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), "{}", printable(&format!($($arg)*)))?
    }};
}

/// `text` safe to print to a terminal: escape sequences (CSI, OSC such as the clipboard's OSC
/// 52, DCS, ...) and C0/C1 control characters are dropped, a carriage return not ending a line
/// becomes a line break (so nothing is overwritten in place), and tabs and newlines stay.
pub(crate) fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    let clean = |c: char| c == '\n' || c == '\t' || !(c.is_control() || c == '\u{7f}');
    if text.chars().all(clean) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' | '\t' => out.push(c),
            // A lone carriage return would overwrite the line in place: a line break instead.
            '\r' if chars.peek() != Some(&'\n') => out.push('\n'),
            '\r' => {}
            // ESC and its 8-bit forms: skip the whole sequence.
            '\u{1b}' => match chars.next() {
                Some('[') => skip_csi(&mut chars),
                Some(']' | 'P' | 'X' | '^' | '_') => skip_string(&mut chars),
                // Two-character escapes (ESC 7, ESC c, ...) and nF sequences: skip their
                // intermediate bytes and the final one.
                Some(' '..='/') => {
                    for n in chars.by_ref() {
                        if !(' '..='/').contains(&n) {
                            break;
                        }
                    }
                }
                _ => {}
            },
            '\u{9b}' => skip_csi(&mut chars),
            '\u{9d}' | '\u{90}' | '\u{98}' | '\u{9e}' | '\u{9f}' => skip_string(&mut chars),
            c if clean(c) => out.push(c),
            _ => {}
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Skip a CSI sequence's parameters and intermediates up to its final byte.
fn skip_csi(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    for c in chars.by_ref() {
        if ('\u{40}'..='\u{7e}').contains(&c) || !(' '..='\u{7e}').contains(&c) {
            break;
        }
    }
}

/// Skip a control string (OSC, DCS, SOS, PM, APC) up to its terminator: BEL, ST (ESC \\) or
/// the 8-bit ST.
fn skip_string(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    while let Some(c) = chars.next() {
        match c {
            '\u{7}' | '\u{9c}' => break,
            '\u{1b}' => {
                if chars.peek() == Some(&'\\') {
                    chars.next();
                }
                break;
            }
            _ => {}
        }
    }
}

/// JSON text (from serde_json, which escapes only C0 controls) with DEL and the C1 controls
/// escaped too: they can only stand inside strings, where `\u00XX` means the same.
fn json_printable(json: String) -> String {
    if !json.chars().any(|c| ('\u{7f}'..='\u{9f}').contains(&c)) {
        return json;
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if ('\u{7f}'..='\u{9f}').contains(&c) {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
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
        Action::CheckCommand(args) => check_command(args),
        Action::Doctor(args) => doctor(args),
        Action::Log(args) => log(args),
        Action::Undo(args) => undo(args),
        Action::Artifacts(args) => artifacts(args),
        Action::Workspace(cmd) => runtime()?.block_on(workspace(cmd)),
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

/// The catalog, every section checked: a mistake anywhere stops every subcommand at once.
pub(crate) fn load_catalog(path: Option<&Path>) -> Result<Catalog> {
    let catalog = match path {
        // Absolute, so runners (started elsewhere) and the protected paths name the same file.
        Some(p) => {
            Catalog::load(&std::path::absolute(p).context("cannot resolve the catalog path")?)?
        }
        None => Catalog::builtin(),
    };
    toolyard_dispatch::check_catalog(&catalog)?;
    Ok(catalog)
}

pub(crate) fn dispatcher(common: &Common) -> Result<Dispatcher> {
    dispatcher_with_state(common, None)
}

/// A dispatcher whose state lives in `state_dir` when given (else the workspace's own).
fn dispatcher_with_state(common: &Common, state_dir: Option<&Path>) -> Result<Dispatcher> {
    let mut config = DispatcherConfig::new(workspace_root(common.workspace.as_deref())?);
    config.state_dir = state_dir.map(Path::to_path_buf);
    config.catalog = load_catalog(common.catalog.as_deref())?;
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

fn check_command(args: CheckArgs) -> Result<ExitCode> {
    use toolyard_policy::{CommandPolicy, Decision, PolicyConfig};
    let catalog = load_catalog(args.catalog.as_deref())?;
    let config: PolicyConfig = catalog.section("policy")?;
    let policy = CommandPolicy::new(&config)?;
    match policy.check(&args.command) {
        Decision::Allow => {
            out!("allowed");
            Ok(ExitCode::SUCCESS)
        }
        Decision::Block { rule, reason } => {
            out!("blocked by rule `{rule}`: {reason}");
            Ok(ExitCode::from(3))
        }
    }
}

fn doctor(args: DoctorArgs) -> Result<ExitCode> {
    let catalog = load_catalog(args.catalog.as_deref())?;
    let sandbox: toolyard_exec::sandbox::SandboxConfig = catalog.section("sandbox")?;
    let probe = toolyard_exec::sandbox::probe();
    out!("catalog: {}", catalog.origin());
    out!(
        "process-tree kill: {}",
        toolyard_exec::tree_kill_mechanism()
    );
    out!("{probe}");
    out!("what holds here, lane by lane:");
    out!(
        "  no-net: {}",
        toolyard_exec::sandbox::no_net_here(&probe, &sandbox)
    );
    out!(
        "  net:    {}",
        toolyard_exec::sandbox::egress::net_here(&probe)
    );
    out!("  heavy:  like net, plus the rlimits and cgroup limits above where available");
    let network: toolyard_egress::NetworkConfig = catalog.section("network")?;
    out!("  [network]: {}", network.describe());
    out!(
        "  network requests: a command tool's `network: {{hosts, reason}}` gets hosts [network] \
         refuses only when you approve them through your MCP client (elicitation: this call, \
         this session, or always for this workspace, kept in the state directory's {}, which \
         commands can neither read nor write); refused, with the catalog line to add, where the \
         client cannot ask (the CLI, a client without elicitation); an approval never lifts \
         [network] deny or the internal addresses",
        toolyard_dispatch::network_request::STORE_FILE
    );
    out!(
        "  [remote] runners: no gate (the container's or pod's own network applies; [network] \
         and approvals do not)"
    );
    out!(
        "  every lane: writes only in the workspace, the runner's temp dir and the private tool \
         caches (Landlock; renames and links across directories work), Toolyard's state \
         neither readable nor writable by commands, secrets scrubbed from the environment, each \
         command in its own Landlock domain with no capabilities, the runner and server \
         non-dumpable"
    );
    let protected = toolyard_exec::protect::configured(&sandbox);
    let held = probe.features.iter().any(|f| {
        f.name == "protected-read-only"
            && f.status == toolyard_exec::sandbox::FeatureStatus::Available
    });
    let how = if held {
        "those that exist when a runner starts are read-only for its commands (git's config \
         stays writable, but a change to a key that runs a program is undone); the others are \
         checked after every command and what a command made there is undone"
    } else {
        "no mount namespace here, so they are checked after every command and a change is \
         undone"
    };
    out!(
        "protected paths ({}): {how} (what is undone is moved to the state directory's \
         quarantine and the model told); the file tools refuse to write them; [sandbox] \
         protected_paths replaces the list",
        protected.join(", ")
    );
    out!(
        "with --inline: nothing is sandboxed; commands run with your full access to files and \
         network, and only the file tools' paths are confined to the workspace"
    );
    let lsp: toolyard_lsp::LspConfig = catalog.section("lsp")?;
    let lsp = toolyard_lsp::Manager::new(Path::new("/"), lsp, toolyard_lsp::Launcher::Direct);
    out!(
        "language servers (started on first need, sandboxed as the no-net lane with the heavy lane's limits; [lsp] in the catalog):"
    );
    for line in lsp.doctor_lines() {
        out!("  {line}");
    }
    if is_remote(&catalog)? {
        remote_doctor(&args)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Start each lane's runner through the catalog's [remote] link and print what its sandbox
/// enforces, as its `ready` said: the report above is this machine's, not the runners'.
fn remote_doctor(args: &DoctorArgs) -> Result<()> {
    // The link needs a server workspace and state only to exist: throwaway ones.
    let scratch = tempfile::tempdir().context("cannot create a temporary directory")?;
    let ws = scratch.path().join("ws");
    std::fs::create_dir(&ws).context("cannot create a temporary directory")?;
    let common = Common {
        workspace: Some(ws),
        catalog: args.catalog.clone(),
        dialect: Dialect::Loopr,
        profile: toolyard_core::ALL_PROFILE.into(),
        inline: false,
    };
    let state = scratch.path().join("state");
    let d = dispatcher_with_state(&common, Some(&state))?;
    out!("remote runners ([remote] command), lane by lane, as each runner reports:");
    let reports = runtime()?.block_on(d.remote_sandbox_reports("doctor"));
    for (lane, report) in reports {
        match report {
            Ok(text) => {
                out!("  {lane}:");
                for line in text.lines() {
                    out!("    {line}");
                }
            }
            Err(e) => out!("  {lane}: NOT REACHED: {e}"),
        }
    }
    Ok(())
}

/// Whether `catalog` reaches its runners through a `[remote]` link: then the files are the
/// runner's, and nothing may be read or settled on this disk.
fn is_remote(catalog: &Catalog) -> Result<bool> {
    let remote: toolyard_dispatch::RemoteConfig = catalog.section("remote")?;
    Ok(toolyard_dispatch::CommandLink::from_config(&remote).is_some())
}

/// The workspace's journal, with interrupted writes settled first when the files are on this
/// disk (with a `remote` link they are settled by the runner's next start).
fn journal(
    ws: Option<&Path>,
    remote: bool,
) -> Result<(toolyard_workspace::Workspace, toolyard_records::Journal)> {
    let workspace = toolyard_workspace::Workspace::open(&workspace_root(ws)?)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let state = toolyard_workspace::StateDir::for_workspace(workspace.root())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let journal = toolyard_records::Journal::open(&state).map_err(|e| anyhow::anyhow!("{e}"))?;
    if !remote {
        journal
            .recover(&workspace)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    Ok((workspace, journal))
}

fn log(args: LogArgs) -> Result<ExitCode> {
    let remote = is_remote(&load_catalog(args.catalog.as_deref())?)?;
    let (ws, journal) = journal(args.ws.workspace.as_deref(), remote)?;
    let changes = journal
        .list(&toolyard_records::ChangeFilter {
            session: args.session.clone(),
            path: args.path,
            status: None,
            limit: Some(args.limit),
        })
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    if args.json {
        out!(
            "{}",
            json_printable(serde_json::to_string_pretty(&changes)?)
        );
        return Ok(ExitCode::SUCCESS);
    }
    out!("changes in the workspace {}:", ws.root().display());
    if changes.is_empty() {
        out!("none recorded");
    }
    for c in changes {
        use toolyard_records::EntryKind;
        let mut what = match (&c.undoes, c.existed, &c.new_hash) {
            (Some(u), _, _) => format!("undo of #{}", u.0),
            (None, false, _) => "created".to_string(),
            (None, true, None) => "removed".to_string(),
            (None, true, Some(_)) if c.old_hash == c.new_hash => "mode".to_string(),
            (None, true, Some(_)) => "modified".to_string(),
        };
        let kind = match c.new_kind() {
            EntryKind::Absent => c.old_kind(),
            k => k,
        };
        if matches!(kind, EntryKind::Symlink | EntryKind::Dir) {
            what.push_str(&format!(" ({})", kind.noun()));
        }
        let mut undone = c
            .undone_by
            .map(|u| format!(" (undone by #{})", u.0))
            .unwrap_or_default();
        if let Some(g) = c.group {
            undone.push_str(&format!(" (group #{}: undone together)", g.0));
        }
        out!(
            "#{:<5} {} {:<8} {:<12} {:<10} {} [{}]{}",
            c.id.0,
            c.time,
            c.status,
            c.tool,
            what,
            c.path,
            c.session,
            undone
        );
    }
    // What commands changed, with what they changed out of scope (not undoable, and why).
    let commands = journal
        .commands(args.session.as_deref(), args.limit)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    if !commands.is_empty() {
        out!("commands that changed files:");
    }
    for c in commands {
        let undo = match c.first {
            Some(first) => format!(
                "{} change(s) from #{}, undone together (`toolyard undo {}`)",
                c.changes, first.0, first.0
            ),
            None => "nothing undoable".to_string(),
        };
        out!(
            "{} {} [{}] {}: {}",
            c.time,
            c.tool,
            c.session,
            printable(&c.command),
            undo
        );
        for s in &c.skipped {
            out!("    not undoable: {} ({})", printable(&s.path), s.reason);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn undo(args: UndoArgs) -> Result<ExitCode> {
    let remote = is_remote(&load_catalog(args.catalog.as_deref())?)?;
    let (ws, journal) = journal(args.ws.workspace.as_deref(), remote)?;
    let id = match (args.change_id, &args.session) {
        (Some(id), _) => toolyard_records::ChangeId(id),
        (None, Some(s)) => journal
            .last_of_session(s)
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .map(|c| c.id)
            .with_context(|| {
                format!(
                    "the session {s} has no change left to undo in the workspace {}",
                    ws.root().display()
                )
            })?,
        (None, None) => journal
            .list(&toolyard_records::ChangeFilter {
                status: Some(toolyard_records::ChangeStatus::Done),
                ..Default::default()
            })
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .into_iter()
            .find(|c| c.undone_by.is_none() && c.undoes.is_none())
            .map(|c| c.id)
            .with_context(|| {
                format!(
                    "no change left to undo in the workspace {}",
                    ws.root().display()
                )
            })?,
    };
    // The one undo: the changes one call made together (an apply_patch) are undone together,
    // on this disk or, when the runner holds the files, through a dispatcher, which reaches it.
    // Lives while the undo runs: the records reach the runner through its router.
    let dispatcher;
    let records = if remote {
        drop(journal);
        let common = Common {
            workspace: args.ws.workspace.clone(),
            catalog: args.catalog.clone(),
            dialect: Dialect::Loopr,
            profile: toolyard_core::ALL_PROFILE.into(),
            inline: false,
        };
        dispatcher = self::dispatcher(&common)?;
        dispatcher
            .env()
            .local
            .clone()
            .context("internal: the server keeps no journal")?
    } else {
        let state = toolyard_workspace::StateDir::for_workspace(ws.root())
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let ledger = toolyard_records::Ledger::open(&state).map_err(|e| anyhow::anyhow!("{e}"))?;
        std::sync::Arc::new(toolyard_records::LocalRecords::new(
            std::sync::Arc::new(ws),
            ledger,
            journal,
        ))
    };
    let undone = runtime()?.block_on(records.undo(id, "cli", "cli-undo", args.force));
    match undone {
        Ok(undone) => {
            for out in &undone {
                if out.already {
                    out!(
                        "undid change #{}: {} was already as before it, so nothing was written (this undo is change #{}; there is nothing to redo)",
                        out.undone.0,
                        out.path,
                        out.undo.0
                    );
                    continue;
                }
                let what = if out.removed { "removed" } else { "restored" };
                out!(
                    "undid change #{}: {what} {} (this undo is change #{}; `toolyard undo {}` redoes it)",
                    out.undone.0,
                    out.path,
                    out.undo.0,
                    out.undo.0
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("toolyard: {}", printable(&e.to_string()));
            Ok(ExitCode::from(1))
        }
    }
}

async fn workspace(cmd: WorkspaceCmd) -> Result<ExitCode> {
    match cmd {
        WorkspaceCmd::Import(args) => {
            let d = dispatcher(&args.common)?;
            let limit = std::time::Duration::from_secs(args.timeout_s);
            let done = match (&args.source.from_git, &args.source.from_dir, &args.rev) {
                (Some(url), _, Some(rev)) => d
                    .hydrate_git(&args.session, url, rev, limit)
                    .await
                    .map(|head| format!("checked out {head} of {url} in the runner's workspace")),
                (_, Some(dir), _) => d.hydrate_dir(&args.session, dir, limit).await.map(|n| {
                    format!(
                        "unpacked {n} entries of {} in the runner's workspace",
                        dir.display()
                    )
                }),
                _ => bail!("give --from-git URL --rev REV, or --from-dir DIR"),
            };
            match done {
                Ok(text) => {
                    eprintln!("toolyard: {}", printable(&text));
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    eprintln!("toolyard: {}", printable(&e.to_string()));
                    Ok(ExitCode::from(1))
                }
            }
        }
        WorkspaceCmd::Export(args) => {
            let d = dispatcher(&args.common)?;
            let limit = std::time::Duration::from_secs(args.timeout_s);
            match d.export(&args.session, args.base.as_deref(), limit).await {
                Ok(export) => {
                    use std::io::Write as _;
                    let mut out = std::io::stdout().lock();
                    out.write_all(&export.patch)?;
                    out.flush()?;
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    eprintln!("toolyard: {}", printable(&e.to_string()));
                    Ok(ExitCode::from(1))
                }
            }
        }
    }
}

fn artifacts(args: WorkspaceArgs) -> Result<ExitCode> {
    let ws = toolyard_workspace::Workspace::open(&workspace_root(args.workspace.as_deref())?)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let list =
        toolyard_tools::artifacts::list_artifacts(&ws).map_err(|e| anyhow::anyhow!("{e}"))?;
    if list.is_empty() {
        out!("no artifacts in {}", ws.root().display());
    }
    for a in list {
        out!("{}", json_printable(serde_json::to_string(&a)?));
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn printable_leaves_no_control_character_but_newline_and_tab(s in any::<String>()) {
            let p = printable(&s);
            prop_assert!(p.chars().all(|c| c == '\n' || c == '\t' || !c.is_control()), "{p:?}");
        }

        #[test]
        fn printable_keeps_text_without_controls(s in "[^\\p{Cc}]*") {
            prop_assert_eq!(printable(&s), s.as_str());
        }

        #[test]
        fn json_printable_escapes_c1_and_keeps_the_value(s in any::<String>()) {
            let json = json_printable(serde_json::to_string(&s).unwrap());
            prop_assert!(!json.chars().any(|c| c.is_control()), "{json:?}");
            prop_assert_eq!(serde_json::from_str::<String>(&json).unwrap(), s);
        }
    }

    #[test]
    fn printable_drops_whole_sequences_and_keeps_the_text_around_them() {
        let cases = [
            ("a\u{1b}]52;c;ZXZpbA==\u{7}b", "ab"),
            ("a\u{1b}[1;31mred\u{1b}[0m", "ared"),
            ("a\u{1b}]0;title\u{1b}\\b", "ab"),
            ("a\u{9b}2Jb", "ab"),
            ("50%\r100%\r\n", "50%\n100%\n"),
            ("x\u{8}\u{8}y\tz", "xy\tz"),
            ("a\u{1b}(Bb", "ab"),
        ];
        for (raw, shown) in cases {
            assert_eq!(printable(raw), shown, "{raw:?}");
        }
    }
}
