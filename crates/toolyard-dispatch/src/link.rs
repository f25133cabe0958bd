//! Runner links: how the router reaches the runner of a lane. A link is any byte stream that
//! carries the job protocol ([`toolyard_runner::protocol`]) to a fresh `toolyard runner`:
//! today's local child process ([`RunnerSpawn`]), or a *command link*, an argv template from
//! the catalog's `[remote]` section whose standard input and output reach a runner somewhere
//! else (`podman exec -i`, `kubectl exec -i`, `ssh`).
//!
//! What the router assumes of a link: it delivers lines in order, both ways, and its end (EOF,
//! a killed process) means the runner is gone. Everything else (versions, liveness, frame size)
//! the protocol checks itself.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::process::{Child, Command};
use toolyard_core::{Catalog, Lane, ToolError};
use toolyard_egress::{Gate, NetworkConfig, Policy};
use toolyard_exec::sandbox::egress::SOCKET_ENV;
use toolyard_runner::protocol::DEFAULT_HEARTBEAT_MS;

use crate::remote_kube::KubernetesConfig;
pub use crate::template::CommandTemplate;

/// The two ends of a fresh link to a runner, and what to kill to end it.
pub struct LinkIo {
    /// The runner's output (its protocol lines).
    pub reader: Box<dyn AsyncRead + Send + Unpin>,
    /// The runner's input.
    pub writer: Box<dyn AsyncWrite + Send + Unpin>,
    /// The link's diagnostics (the runner's or the link command's stderr), for the log.
    pub stderr: Option<Box<dyn AsyncRead + Send + Unpin>>,
    /// The local process behind the link, killed when the link is declared dead.
    pub child: Option<Child>,
    /// The egress gate of this runner's commands, when the link started one (local net and
    /// heavy runners): it serves as long as the runner's connection is kept.
    pub egress: Option<Arc<LaneGate>>,
}

/// A gate for one runner and the private directory of its socket.
#[derive(Debug)]
pub struct LaneGate {
    /// The gate (dropped first: it removes its socket).
    pub gate: Gate,
    _dir: tempfile::TempDir,
}

impl LaneGate {
    /// Start a gate applying `catalog`'s `[network]` on a socket in a new private directory
    /// (mode 0700, under the server's temp dir). Call inside a tokio runtime.
    pub fn start(catalog: &Catalog, lane: Lane) -> Result<Self, ToolError> {
        let config: NetworkConfig = catalog
            .section("network")
            .map_err(|e| ToolError::InvalidArguments(e.to_string()))?;
        let dir = tempfile::Builder::new()
            .prefix("toolyard-egress-")
            .tempdir()
            .map_err(|e| ToolError::Io(format!("cannot make the egress gate's directory: {e}")))?;
        let path = dir.path().join(format!("{lane}.sock"));
        let gate = Gate::start(&path, Policy::new(config)).map_err(|e| {
            ToolError::Io(format!(
                "cannot start the egress gate on {}: {e}",
                path.display()
            ))
        })?;
        Ok(Self { gate, _dir: dir })
    }

    /// The `network:` line for what the gate decided at or after `since`.
    pub fn summary_since(&self, since: std::time::Instant) -> Option<String> {
        toolyard_egress::summarize(&self.gate.events_since(since))
    }
}

/// A way to reach runners.
#[async_trait]
pub trait RunnerLink: Send + Sync {
    /// Start a fresh runner of `lane` for the session whose file-name-safe token is `session`
    /// (see [`session_token`]) and return its link.
    async fn open(&self, lane: Lane, session: &str) -> Result<LinkIo, ToolError>;
    /// Whether each session gets its own runners (else one runner per lane serves all).
    fn per_session(&self) -> bool;
    /// Whether the runner's workspace is elsewhere: then the server never reads its own disk
    /// for the file tools or the journal, and runners ship pre-images.
    fn is_remote(&self) -> bool;
    /// The heartbeat period.
    fn heartbeat(&self) -> Duration;
    /// What the link is, for errors (`the local runner`, `the [remote] command podman`).
    fn describe(&self) -> String;
    /// The session whose token is `session` ended and its runners were closed: release what
    /// the link placed for it (a pod). Only called when [`RunnerLink::per_session`].
    async fn end_session(&self, _session: &str) {}
    /// The server is stopping: release everything the link placed.
    async fn shutdown(&self) {}
}

/// A local child process: `EXE runner --lane L --workspace W`.
#[derive(Debug, Clone)]
pub struct RunnerSpawn {
    /// The `toolyard` executable (it has the `runner` subcommand).
    pub exe: PathBuf,
    /// The workspace root.
    pub workspace: PathBuf,
    /// The catalog file the runners load, if not the built-in one.
    pub catalog: Option<PathBuf>,
    /// The state directory, when not the workspace's default one.
    pub state_dir: Option<PathBuf>,
}

#[async_trait]
impl RunnerLink for RunnerSpawn {
    async fn open(&self, lane: Lane, _session: &str) -> Result<LinkIo, ToolError> {
        let mut cmd = Command::new(&self.exe);
        cmd.arg("runner")
            .arg("--lane")
            .arg(lane.as_str())
            .arg("--workspace")
            .arg(&self.workspace);
        if let Some(c) = &self.catalog {
            cmd.arg("--catalog").arg(c);
        }
        if let Some(s) = &self.state_dir {
            cmd.arg("--state-dir").arg(s);
        }
        // The net lanes' commands reach the network only through a gate run here, outside
        // every sandbox.
        let egress = if lane == Lane::NoNet {
            None
        } else {
            let catalog = match &self.catalog {
                Some(p) => {
                    Catalog::load(p).map_err(|e| ToolError::InvalidArguments(e.to_string()))?
                }
                None => Catalog::builtin(),
            };
            let gate = LaneGate::start(&catalog, lane)?;
            cmd.env(SOCKET_ENV, gate.gate.path());
            Some(Arc::new(gate))
        };
        let mut io = spawn(cmd, lane, &self.exe.display().to_string())?;
        io.egress = egress;
        Ok(io)
    }

    fn per_session(&self) -> bool {
        false
    }

    fn is_remote(&self) -> bool {
        false
    }

    fn heartbeat(&self) -> Duration {
        Duration::from_millis(DEFAULT_HEARTBEAT_MS)
    }

    fn describe(&self) -> String {
        "the local runner".into()
    }
}

/// The catalog's `[remote]` section.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteConfig {
    /// The argv whose stdin and stdout reach a runner; `{lane}` and `{session}` expand.
    pub command: Option<CommandTemplate>,
    /// The heartbeat period in milliseconds (default 5000).
    pub heartbeat_ms: Option<HeartbeatMs>,
    /// `[remote.kubernetes]`: a pod per session (the link is in crate `toolyard-remote`).
    pub kubernetes: Option<KubernetesConfig>,
}

/// A heartbeat period in milliseconds, between 50 ms and 10 minutes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatMs(pub u64);

impl<'de> Deserialize<'de> for HeartbeatMs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let ms = u64::deserialize(d)?;
        if !(50..=600_000).contains(&ms) {
            return Err(D::Error::custom(format!(
                "heartbeat_ms = {ms} is out of range: use 50 to 600000 (default {DEFAULT_HEARTBEAT_MS})"
            )));
        }
        Ok(Self(ms))
    }
}

/// A command link: runs the catalog's argv template, with nothing added, for each runner.
#[derive(Debug, Clone)]
pub struct CommandLink {
    /// The template.
    pub argv: Vec<String>,
    /// The heartbeat period.
    pub heartbeat: Duration,
}

impl CommandLink {
    /// The link the catalog's `[remote]` section describes, if it sets a command.
    pub fn from_config(config: &RemoteConfig) -> Option<Self> {
        let argv = config.command.as_ref()?.0.clone();
        let ms = config.heartbeat_ms.map_or(DEFAULT_HEARTBEAT_MS, |h| h.0);
        Some(Self {
            argv,
            heartbeat: Duration::from_millis(ms),
        })
    }

    /// The argv for `lane` and the session token `session`.
    pub fn expand(&self, lane: Lane, session: &str) -> Vec<String> {
        self.argv
            .iter()
            .map(|a| {
                a.replace("{lane}", lane.as_str())
                    .replace("{session}", session)
            })
            .collect()
    }
}

#[async_trait]
impl RunnerLink for CommandLink {
    async fn open(&self, lane: Lane, session: &str) -> Result<LinkIo, ToolError> {
        let argv = self.expand(lane, session);
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| ToolError::InvalidArguments("[remote] command is empty".into()))?;
        let mut cmd = Command::new(program);
        cmd.args(args);
        spawn(cmd, lane, &format!("[remote] command `{program}`"))
    }

    fn per_session(&self) -> bool {
        self.argv.iter().any(|a| a.contains("{session}"))
    }

    fn is_remote(&self) -> bool {
        true
    }

    fn heartbeat(&self) -> Duration {
        self.heartbeat
    }

    fn describe(&self) -> String {
        format!(
            "the [remote] command `{}`",
            self.argv.first().map(String::as_str).unwrap_or_default()
        )
    }
}

/// Start `cmd` with piped stdio; `what` names it in the error.
fn spawn(mut cmd: Command, lane: Lane, what: &str) -> Result<LinkIo, ToolError> {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|e| {
        ToolError::Unavailable(format!(
            "cannot start the {lane} runner ({what}): {e}; check that the program exists and is executable"
        ))
    })?;
    let missing = |pipe: &str| ToolError::Io(format!("the {lane} runner's {pipe} is missing"));
    let writer = child.stdin.take().ok_or_else(|| missing("stdin"))?;
    let reader = child.stdout.take().ok_or_else(|| missing("stdout"))?;
    let stderr = child.stderr.take().ok_or_else(|| missing("stderr"))?;
    Ok(LinkIo {
        reader: Box::new(reader),
        writer: Box::new(writer),
        stderr: Some(Box::new(stderr)),
        child: Some(child),
        egress: None,
    })
}

/// A token for `session` that is safe in a file name, a container or pod name, and distinct
/// per session: its safe characters (at most 40) and 16 hex digits of its hash.
pub fn session_token(session: &str) -> String {
    let safe: String = session
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
        .take(40)
        .collect();
    let digest = toolyard_workspace::hash_bytes(session.as_bytes());
    let digest = &digest[..16];
    if safe.is_empty() {
        format!("s-{digest}")
    } else {
        format!("{safe}-{digest}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolyard_core::Catalog;

    fn remote(text: &str) -> Result<RemoteConfig, String> {
        let catalog = Catalog::parse_over_builtin(text, "c.toml").map_err(|e| e.to_string())?;
        catalog
            .section::<RemoteConfig>("remote")
            .map_err(|e| e.to_string())
    }

    #[test]
    fn session_tokens_are_safe_and_distinct() {
        let ids = ["alice", "a/b", "a_b", "../../etc", "", "ünï côde", "a b"];
        let tokens: Vec<String> = ids.iter().map(|s| session_token(s)).collect();
        for t in &tokens {
            assert!(
                t.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_')),
                "{t}"
            );
            assert!(!t.starts_with('-') && t.len() <= 57, "{t}");
        }
        let distinct: std::collections::HashSet<_> = tokens.iter().collect();
        assert_eq!(distinct.len(), ids.len(), "{tokens:?}");
        assert_eq!(session_token("alice"), session_token("alice"));
    }

    #[test]
    fn the_template_expands_lane_and_session_and_adds_nothing() {
        let c = remote(
            "[remote]\ncommand = [\"ssh\", \"host\", \"toolyard\", \"runner\", \"--lane\", \"{lane}\", \"--workspace\", \"/w/{session}\"]\n",
        )
        .unwrap();
        let link = CommandLink::from_config(&c).unwrap();
        assert!(link.per_session() && link.is_remote());
        assert_eq!(
            link.expand(Lane::NoNet, "s-1"),
            [
                "ssh",
                "host",
                "toolyard",
                "runner",
                "--lane",
                "no-net",
                "--workspace",
                "/w/s-1"
            ]
        );
        let per_lane =
            CommandLink::from_config(&remote("[remote]\ncommand = [\"x\", \"{lane}\"]\n").unwrap())
                .unwrap();
        assert!(!per_lane.per_session());
        assert_eq!(
            per_lane.heartbeat,
            Duration::from_millis(DEFAULT_HEARTBEAT_MS)
        );
        assert!(CommandLink::from_config(&remote("").unwrap()).is_none());
    }

    #[test]
    fn a_bad_remote_section_names_its_line_and_column() {
        let e = remote("[remote]\ncommand = [\"podman\", \"{lanes}\"]\n").unwrap_err();
        // toml locates the array; the message names the argument.
        assert!(e.contains("line 2, column 11"), "{e}");
        assert!(e.contains("unknown placeholder `{lanes}`"), "{e}");
        let e = remote("[remote]\ncommand = []\n").unwrap_err();
        assert!(e.contains("line 2, column 11"), "{e}");
        assert!(e.contains("at least the program"), "{e}");
        let e = remote("[remote]\ncommand = [\"x\"]\nheartbeat_ms = 5\n").unwrap_err();
        assert!(e.contains("line 3, column 16"), "{e}");
        let e = remote("[remote]\ncomand = [\"x\"]\n").unwrap_err();
        assert!(
            e.contains("line 2, column 1") && e.contains("comand"),
            "{e}"
        );
    }
}
