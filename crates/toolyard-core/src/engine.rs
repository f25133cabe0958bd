//! The one table of facts about tools: [`Engine`], one variant per built-in catalog entry
//! (`[tools.NAME]` of `default_catalog.toml`), with what the rest of the code asks of a tool as
//! methods. Every dialect tool runs under one engine (claude-code's `Bash` under
//! [`Engine::RunCommand`]) and takes its lane, limits and facts from it; the shape of its own
//! arguments (which one carries the command line, the path, the process id) is its
//! [`CallShape`], declared next to the tool.
//!
//! Adding an engine: a variant here, its place in [`Engine::BUILTIN`] (and the array's
//! length), its arm in [`Engine::name`] and its row in [`Engine::facts`] (both exhaustive: the
//! compiler points at them), its `[tools.NAME]` entry in `default_catalog.toml`, and the tool
//! itself in `toolyard-tools`. A test fails when an engine has no catalog entry or a dialect
//! tool no engine.

use std::fmt;
use std::str::FromStr;

/// A tool engine: what a served tool runs under, its catalog entry and its facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Engine {
    /// `read_file`.
    ReadFile,
    /// `write_file`.
    WriteFile,
    /// `edit_file`.
    EditFile,
    /// `list_directory`.
    ListDirectory,
    /// `glob`.
    Glob,
    /// `grep`.
    Grep,
    /// `run_command`.
    RunCommand,
    /// `run_command_isolated`.
    RunCommandIsolated,
    /// `web_fetch`.
    WebFetch,
    /// `web_search`.
    WebSearch,
    /// `build`.
    Build,
    /// `test`.
    Test,
    /// `validate`.
    Validate,
    /// `complete_task`.
    CompleteTask,
    /// `create_plan`.
    CreatePlan,
    /// `create_spec`.
    CreateSpec,
    /// `create_phase`.
    CreatePhase,
    /// `undo`.
    Undo,
    /// `oracle`.
    Oracle,
    /// `process_output`.
    ProcessOutput,
    /// `process_input`.
    ProcessInput,
    /// `process_kill`.
    ProcessKill,
    /// `process_list`.
    ProcessList,
    /// `shell`.
    Shell,
    /// `diagnostics`.
    Diagnostics,
    /// `lsp`.
    Lsp,
    /// `rename_symbol`.
    RenameSymbol,
    /// `outline`.
    Outline,
    /// A command tool the catalog declares (`[tools.NAME]` with `command`): its entry is keyed
    /// by its own name, and it runs its argv in its lane's runner.
    Custom,
    /// A Rust tool an embedder registered on the dispatcher: it runs in the server process,
    /// under the limits it was registered with.
    Embedded,
}

/// Where an engine's calls run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Site {
    /// Always in the server process: it touches only Toolyard's own state (or is an
    /// embedder's Rust tool).
    Server,
    /// In the server process, on the workspace's path confinement; in the lane's runner when
    /// the workspace is remote (a `[remote]` link), since the server never touches its files.
    Files,
    /// In the runner of its catalog lane.
    Lane,
    /// In the runner of the lane its process id names (`net-3`), whatever its catalog lane.
    ByProcessId,
    /// In every lane whose runner runs, merged.
    EveryLane,
}

/// How much work one call of an engine may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// Bounded by its output cap (one window of one file, two levels of a directory): it may
    /// run on the request's own thread.
    Prompt,
    /// A write: bounded when what it writes is small ([`SMALL_WRITE_BYTES`]).
    SmallWrite,
    /// Open-ended (a walk, a command, the network).
    Open,
}

/// Whether a call of an engine may leave something running past its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outlives {
    /// Never.
    Never,
    /// Always: it starts or reaches a process (the persistent shell, the process tools).
    Always,
    /// When its arguments ask (a background or yielding command; see [`CallShape`]).
    WhenAsked,
}

/// The largest file, and argument, of a [`Bound::SmallWrite`] call that may still run on the
/// request's own thread: one that takes well under a millisecond.
pub const SMALL_WRITE_BYTES: usize = 256 * 1024;

impl Engine {
    /// Every engine with a built-in catalog entry, in the catalog's order.
    pub const BUILTIN: [Engine; 28] = [
        Engine::ReadFile,
        Engine::WriteFile,
        Engine::EditFile,
        Engine::ListDirectory,
        Engine::Glob,
        Engine::Grep,
        Engine::RunCommand,
        Engine::RunCommandIsolated,
        Engine::WebFetch,
        Engine::WebSearch,
        Engine::Build,
        Engine::Test,
        Engine::Validate,
        Engine::CompleteTask,
        Engine::CreatePlan,
        Engine::CreateSpec,
        Engine::CreatePhase,
        Engine::Undo,
        Engine::Oracle,
        Engine::ProcessOutput,
        Engine::ProcessInput,
        Engine::ProcessKill,
        Engine::ProcessList,
        Engine::Shell,
        Engine::Diagnostics,
        Engine::Lsp,
        Engine::RenameSymbol,
        Engine::Outline,
    ];

    /// Its catalog key (`custom` and `embedded` for the two kinds without a built-in entry).
    pub const fn name(self) -> &'static str {
        match self {
            Engine::ReadFile => "read_file",
            Engine::WriteFile => "write_file",
            Engine::EditFile => "edit_file",
            Engine::ListDirectory => "list_directory",
            Engine::Glob => "glob",
            Engine::Grep => "grep",
            Engine::RunCommand => "run_command",
            Engine::RunCommandIsolated => "run_command_isolated",
            Engine::WebFetch => "web_fetch",
            Engine::WebSearch => "web_search",
            Engine::Build => "build",
            Engine::Test => "test",
            Engine::Validate => "validate",
            Engine::CompleteTask => "complete_task",
            Engine::CreatePlan => "create_plan",
            Engine::CreateSpec => "create_spec",
            Engine::CreatePhase => "create_phase",
            Engine::Undo => "undo",
            Engine::Oracle => "oracle",
            Engine::ProcessOutput => "process_output",
            Engine::ProcessInput => "process_input",
            Engine::ProcessKill => "process_kill",
            Engine::ProcessList => "process_list",
            Engine::Shell => "shell",
            Engine::Diagnostics => "diagnostics",
            Engine::Lsp => "lsp",
            Engine::RenameSymbol => "rename_symbol",
            Engine::Outline => "outline",
            Engine::Custom => "custom",
            Engine::Embedded => "embedded",
        }
    }

    /// The built-in engine whose catalog key is `name`.
    pub fn builtin(name: &str) -> Option<Engine> {
        Engine::BUILTIN.into_iter().find(|e| e.name() == name)
    }

    /// Whether it has an entry of its own in the built-in catalog.
    pub const fn is_builtin(self) -> bool {
        !matches!(self, Engine::Custom | Engine::Embedded)
    }

    /// Its row of the table: every fact about it, in one place. A new engine adds one row;
    /// the match is exhaustive, so a forgotten one does not build.
    pub const fn facts(self) -> Facts {
        use Engine::*;
        const FILES: Facts = Facts {
            site: Site::Files,
            ..Facts::NONE
        };
        const WRITE: Facts = Facts {
            site: Site::Files,
            bound: Bound::SmallWrite,
            changes_files: true,
            reports_changed_files: true,
            shape: CallShape {
                path: Some("path"),
                ..CallShape::NONE
            },
            ..Facts::NONE
        };
        const COMMAND: Facts = Facts {
            changes_files: true,
            runs_commands: true,
            open_world: true,
            shape: CallShape {
                command: Some("command"),
                ..CallShape::NONE
            },
            ..Facts::NONE
        };
        const RUN: Facts = Facts {
            outlives_call: Outlives::WhenAsked,
            shape: CallShape {
                command: Some("command"),
                background: &["background", "tty"],
                yields: &["yield_ms"],
                ..CallShape::NONE
            },
            ..COMMAND
        };
        const ARTIFACT: Facts = Facts {
            changes_files: true,
            reports_changed_files: true,
            ..Facts::NONE
        };
        const BY_ID: Facts = Facts {
            site: Site::ByProcessId,
            outlives_call: Outlives::Always,
            shape: CallShape {
                process_id: Some("process_id"),
                ..CallShape::NONE
            },
            ..Facts::NONE
        };
        match self {
            ReadFile | ListDirectory => Facts {
                bound: Bound::Prompt,
                ..FILES
            },
            WriteFile | EditFile => WRITE,
            Glob | Grep => FILES,
            RunCommand => RUN,
            // Its lane has no network: it reaches nothing outside the workspace.
            RunCommandIsolated => Facts {
                open_world: false,
                ..RUN
            },
            Build | Test | Validate => COMMAND,
            WebFetch | WebSearch | Oracle => Facts {
                open_world: true,
                ..Facts::NONE
            },
            CompleteTask => Facts {
                site: Site::Server,
                ..Facts::NONE
            },
            CreatePlan | CreateSpec | CreatePhase => ARTIFACT,
            Undo => Facts {
                site: Site::Server,
                ..ARTIFACT
            },
            ProcessOutput | ProcessKill => BY_ID,
            // What it types into a process may do anything a command does.
            ProcessInput => Facts {
                open_world: true,
                ..BY_ID
            },
            // The language servers belong to the server process (one per workspace and
            // language, shared by its sessions), which starts them sandboxed.
            Diagnostics | Lsp => Facts {
                site: Site::Server,
                language_servers: true,
                ..Facts::NONE
            },
            // Its server is the first choice, its grammars the fallback: where the files are
            // (with a runner, for a remote workspace), it needs no server.
            Outline => Facts {
                site: Site::Files,
                language_servers: true,
                ..Facts::NONE
            },
            RenameSymbol => Facts {
                site: Site::Server,
                changes_files: true,
                reports_changed_files: true,
                language_servers: true,
                ..Facts::NONE
            },
            ProcessList => Facts {
                site: Site::EveryLane,
                outlives_call: Outlives::Always,
                ..Facts::NONE
            },
            // Its effects are the session's shell's, not one call's: no post-tools commit.
            Shell => Facts {
                changes_files: false,
                outlives_call: Outlives::Always,
                ..COMMAND
            },
            // Its argv is its command (no argument carries one).
            Custom => Facts {
                shape: CallShape::NONE,
                ..COMMAND
            },
            // Not read-only means it changes files; it names them in `files_changed`.
            Embedded => Facts {
                site: Site::Server,
                ..ARTIFACT
            },
        }
    }

    /// Where its calls run.
    pub const fn site(self) -> Site {
        self.facts().site
    }

    /// Whether its calls run in the server process, `remote` saying whether the workspace is
    /// on the runners' side of a `[remote]` link.
    pub const fn runs_in_server(self, remote: bool) -> bool {
        match self.site() {
            Site::Server => true,
            Site::Files => !remote,
            Site::Lane | Site::ByProcessId | Site::EveryLane => false,
        }
    }

    /// Whether it runs in the lane its process id names, or in every lane.
    pub const fn runs_in_process_lane(self) -> bool {
        matches!(self.site(), Site::ByProcessId | Site::EveryLane)
    }

    /// Whether it is a process tool: it reaches a background process by its id.
    pub const fn is_process_tool(self) -> bool {
        matches!(self.site(), Site::ByProcessId)
    }

    /// How much work one call may be.
    pub const fn bound(self) -> Bound {
        self.facts().bound
    }

    /// Whether its calls may change the workspace, whatever its tools' annotations say (a
    /// read-only tool is still trusted: see the hooks' `is_mutating`).
    pub const fn changes_files(self) -> bool {
        self.facts().changes_files
    }

    /// Whether its results name exactly the files it changed (`files_changed`); a command's
    /// changes are found by comparing the workspace before and after instead.
    pub const fn reports_changed_files(self) -> bool {
        self.facts().reports_changed_files
    }

    /// Whether its calls run a command: one an argument carries (see [`CallShape::command`]),
    /// or, for a catalog command tool, its argv.
    pub const fn runs_commands(self) -> bool {
        self.facts().runs_commands
    }

    /// Whether it is one of the language-server tools (`diagnostics`, `lsp`, ...), which
    /// every dialect with a place for them shares.
    pub const fn asks_language_servers(self) -> bool {
        self.facts().language_servers
    }

    /// Whether a call may leave something running past its answer.
    pub const fn outlives_call(self) -> Outlives {
        self.facts().outlives_call
    }

    /// Whether its calls may reach outside the workspace (the network, another model): its
    /// tools' `openWorldHint`.
    pub const fn open_world(self) -> bool {
        self.facts().open_world
    }

    /// The shape of its engine tool's own arguments (the loopr vocabulary); a dialect tool
    /// whose arguments differ declares its own.
    pub const fn shape(self) -> CallShape {
        self.facts().shape
    }
}

/// The facts about one engine: its row of [`Engine::facts`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    /// Where its calls run.
    pub site: Site,
    /// How much work one call may be.
    pub bound: Bound,
    /// Whether its calls may change the workspace.
    pub changes_files: bool,
    /// Whether its results name exactly the files it changed.
    pub reports_changed_files: bool,
    /// Whether its calls run a command.
    pub runs_commands: bool,
    /// Whether a call may leave something running past its answer.
    pub outlives_call: Outlives,
    /// Whether it asks the workspace's language servers.
    pub language_servers: bool,
    /// Whether its calls may reach outside the workspace.
    pub open_world: bool,
    /// The shape of its engine tool's arguments.
    pub shape: CallShape,
}

impl Facts {
    /// An engine that runs in its lane, open-ended, changes nothing, runs no command and
    /// leaves nothing behind: what a row starts from.
    pub const NONE: Facts = Facts {
        site: Site::Lane,
        bound: Bound::Open,
        changes_files: false,
        reports_changed_files: false,
        runs_commands: false,
        outlives_call: Outlives::Never,
        language_servers: false,
        open_world: false,
        shape: CallShape::NONE,
    };
}

/// Which of a tool's arguments carry what the layers ask about a call, declared beside the
/// tool (a dialect's names differ: claude-code's `file_path`, codex's `cmd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallShape {
    /// The argument carrying the command line the command policy checks.
    pub command: Option<&'static str>,
    /// The argument naming the file a write changes (to tell a small write).
    pub path: Option<&'static str>,
    /// The argument naming the background process the call reaches.
    pub process_id: Option<&'static str>,
    /// Boolean arguments that, when true, leave the command running past the call.
    pub background: &'static [&'static str],
    /// Arguments that, when given, let the call answer while its command runs on.
    pub yields: &'static [&'static str],
    /// Whether the call may answer while its command runs on even without those (Codex's
    /// `exec_command` yields after its default `yield_time_ms`).
    pub yields_by_default: bool,
}

impl CallShape {
    /// No argument the layers look at.
    pub const NONE: CallShape = CallShape {
        command: None,
        path: None,
        process_id: None,
        background: &[],
        yields: &[],
        yields_by_default: false,
    };

    /// Every argument name it declares.
    pub fn names(&self) -> impl Iterator<Item = &'static str> {
        [self.command, self.path, self.process_id]
            .into_iter()
            .flatten()
            .chain(self.background.iter().copied())
            .chain(self.yields.iter().copied())
    }

    /// The command line `args` carry, if any.
    pub fn command_of<'a>(&self, args: &'a serde_json::Value) -> Option<&'a str> {
        self.command
            .and_then(|k| args.get(k))
            .and_then(serde_json::Value::as_str)
    }

    /// The path `args` name, if any.
    pub fn path_of<'a>(&self, args: &'a serde_json::Value) -> Option<&'a str> {
        self.path
            .and_then(|k| args.get(k))
            .and_then(serde_json::Value::as_str)
    }

    /// The process id `args` name ("" when none).
    pub fn process_id_of<'a>(&self, args: &'a serde_json::Value) -> &'a str {
        self.process_id
            .and_then(|k| args.get(k))
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
    }

    /// Whether `args` ask the command to go on past the call.
    pub fn asks_to_outlive(&self, args: &serde_json::Value) -> bool {
        let on = |k: &&str| args.get(*k).and_then(serde_json::Value::as_bool) == Some(true);
        let given = |k: &&str| args.get(*k).is_some_and(|v| !v.is_null());
        self.yields_by_default || self.background.iter().any(on) || self.yields.iter().any(given)
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Engine {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Engine::builtin(s).ok_or_else(|| format!("no engine `{s}`"))
    }
}

impl PartialEq<&str> for Engine {
    fn eq(&self, other: &&str) -> bool {
        self.name() == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_names_round_trip_and_are_distinct() {
        let mut seen = std::collections::HashSet::new();
        for e in Engine::BUILTIN {
            assert!(e.is_builtin());
            assert_eq!(Engine::builtin(e.name()), Some(e));
            assert!(seen.insert(e.name()), "{e} twice");
        }
        assert_eq!(Engine::builtin("custom"), None);
        assert_eq!(Engine::builtin("embedded"), None);
    }

    fn names(f: impl Fn(Engine) -> bool) -> Vec<&'static str> {
        Engine::BUILTIN
            .into_iter()
            .filter(|e| f(*e))
            .map(Engine::name)
            .collect()
    }

    /// The lists the table replaced (MUTATING_ENGINES, FILE_ENGINES, RUNS_COMMANDS,
    /// PROMPT_TOOLS, SMALL_WRITES, FILE_TOOLS, SERVER_SIDE, PROCESS_TOOLS, the session host's
    /// rules), written out as they were (with the language-server engines, which came after,
    /// where they belong): the table answers each the same.
    #[test]
    fn the_table_answers_what_the_lists_did() {
        assert_eq!(
            names(Engine::changes_files),
            [
                "write_file",
                "edit_file",
                "run_command",
                "run_command_isolated",
                "build",
                "test",
                "validate",
                "create_plan",
                "create_spec",
                "create_phase",
                "undo",
                "rename_symbol"
            ]
        );
        assert_eq!(
            names(Engine::reports_changed_files),
            [
                "write_file",
                "edit_file",
                "create_plan",
                "create_spec",
                "create_phase",
                "undo",
                "rename_symbol"
            ]
        );
        assert_eq!(
            names(Engine::runs_commands),
            [
                "run_command",
                "run_command_isolated",
                "build",
                "test",
                "validate",
                "shell"
            ]
        );
        assert_eq!(
            names(|e| e.bound() == Bound::Prompt),
            ["read_file", "list_directory"]
        );
        assert_eq!(
            names(|e| e.bound() == Bound::SmallWrite),
            ["write_file", "edit_file"]
        );
        assert_eq!(
            names(|e| e.site() == Site::Files),
            [
                "read_file",
                "write_file",
                "edit_file",
                "list_directory",
                "glob",
                "grep",
                "outline"
            ]
        );
        assert_eq!(
            names(|e| e.site() == Site::Server),
            [
                "complete_task",
                "undo",
                "diagnostics",
                "lsp",
                "rename_symbol"
            ]
        );
        assert_eq!(
            names(Engine::asks_language_servers),
            ["diagnostics", "lsp", "rename_symbol", "outline"]
        );
        assert_eq!(
            names(Engine::is_process_tool),
            ["process_output", "process_input", "process_kill"]
        );
        assert_eq!(names(|e| e.site() == Site::EveryLane), ["process_list"]);
        assert_eq!(
            names(|e| e.outlives_call() == Outlives::Always),
            [
                "process_output",
                "process_input",
                "process_kill",
                "process_list",
                "shell"
            ]
        );
        assert_eq!(
            names(|e| e.outlives_call() == Outlives::WhenAsked),
            ["run_command", "run_command_isolated"]
        );
        // What the tools' annotations said (`run_command` alone by its name).
        assert_eq!(
            names(Engine::open_world),
            [
                "run_command",
                "web_fetch",
                "web_search",
                "build",
                "test",
                "validate",
                "oracle",
                "process_input",
                "shell"
            ]
        );
    }

    #[test]
    fn facts_hold_together() {
        for e in Engine::BUILTIN
            .into_iter()
            .chain([Engine::Custom, Engine::Embedded])
        {
            // What reports its files changes files.
            assert!(!e.reports_changed_files() || e.changes_files(), "{e}");
            // Only what runs in the server may run on the request's own thread.
            assert!(e.bound() == Bound::Open || e.site() == Site::Files, "{e}");
            // A command-carrying shape belongs to a command engine.
            assert!(e.shape().command.is_none() || e.runs_commands(), "{e}");
            assert!(e.shape().process_id.is_none() || e.is_process_tool(), "{e}");
            let asks = !(e.shape().background.is_empty() && e.shape().yields.is_empty());
            assert_eq!(e.outlives_call() == Outlives::WhenAsked, asks, "{e}");
        }
    }
}
