//! A command's request for more network, approved by the user before the call is placed on a
//! lane.
//!
//! A command tool may carry `network: {hosts, reason}` (see
//! [`toolyard_tools::network_ask::NetworkAsk`]): hosts the catalog's `[network]` refuses. The
//! admission step ([`admit`]) checks the request, and asks the user through the call's
//! [`Approver`] (the MCP server's asks through the client's elicitation; the CLI has none, so it
//! cannot ask). The user allows the hosts for this call, for this session, or always for this
//! workspace (kept in the state directory, which commands can neither read nor write), or
//! denies. Nothing in the call's arguments or the workspace grants a request: only the answer
//! of the approver, which the front door (not the model) provides.
//!
//! A grant applies in the lane's egress gate: while the call runs, the gate lets the approved
//! hosts through as if `[network] allow` named them, and the `network:` line says they were
//! allowed by approval. Every call of a gated lane carries its session's and the workspace's
//! approvals too, whether or not it asks. Precision: the gate serves every session's commands
//! of the lane and cannot tell them apart, so a call running at the same time in the same lane
//! sees the approved hosts too; a background process started by the call keeps them only
//! while a call of its lane runs.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolyard_core::{Engine, Lane, ToolError};
use toolyard_egress::{Grant, Held, NetworkConfig, Pattern, Policy, Scope, Standing};
use toolyard_tools::network_ask::NetworkAsk;

use crate::link::LaneGate;

/// The argument that carries a request.
pub const ARG: &str = "network";

/// The file in the workspace's state directory that keeps "always" approvals.
pub const STORE_FILE: &str = "network-approvals.json";

/// What the user is asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    /// The tool called.
    pub tool: String,
    /// The command line the call carries, if any.
    pub command: Option<String>,
    /// The lane it runs in.
    pub lane: Lane,
    /// The hosts that need an approval.
    pub hosts: Vec<String>,
    /// The model's reason.
    pub reason: String,
}

impl Question {
    /// The text shown to the user.
    pub fn message(&self) -> String {
        let mut m = format!(
            "A command asks to reach hosts this workspace's [network] does not allow: {}.\n\
             Reason given by the model: {}\nTool: {} (lane {})",
            self.hosts.join(", "),
            self.reason,
            self.tool,
            self.lane
        );
        if let Some(c) = &self.command {
            m.push_str(&format!("\nCommand: {c}"));
        }
        m.push_str("\nAllow these hosts?");
        m
    }
}

/// The user's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Allowed, for how long.
    Allow(Scope),
    /// Denied.
    Deny,
}

impl Answer {
    /// The answer a form's choice names (`call`, `session`, `always`, `deny`).
    pub fn from_choice(choice: &str) -> Option<Self> {
        CHOICES
            .iter()
            .find(|(c, _, _)| *c == choice)
            .map(|(_, _, a)| *a)
    }
}

/// The choices the user is offered: the value a form sends, its title, the answer.
pub const CHOICES: [(&str, &str, Answer); 4] = [
    ("call", "Allow for this call", Answer::Allow(Scope::Call)),
    (
        "session",
        "Allow for this session",
        Answer::Allow(Scope::Session),
    ),
    (
        "always",
        "Always allow for this workspace",
        Answer::Allow(Scope::Always),
    ),
    ("deny", "Deny", Answer::Deny),
];

/// Why an approver gave no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unanswered {
    /// It cannot ask the user: why (said in the refusal).
    CannotAsk(String),
    /// The user declined or dismissed the question.
    Dismissed(String),
    /// The question goes to the client with the call's answer, which comes back with the
    /// client's retry (MCP 2026-07-28's input-required result): the call stops here.
    Pending,
}

/// Asks the user whether a command may reach hosts: provided per call by the front door.
#[async_trait]
pub trait Approver: Send + Sync {
    /// Ask `question`.
    async fn ask(&self, question: &Question) -> Result<Answer, Unanswered>;
}

/// An approver that cannot ask anyone (the CLI): every request is refused, saying why.
#[derive(Debug, Clone)]
pub struct CannotAsk(pub String);

#[async_trait]
impl Approver for CannotAsk {
    async fn ask(&self, _: &Question) -> Result<Answer, Unanswered> {
        Err(Unanswered::CannotAsk(self.0.clone()))
    }
}

/// The error of a call that stopped because its question went to the client (the MCP server
/// answers the call with the question instead).
pub const PENDING: &str = "waiting for the user's answer to the call's network request";

tokio::task_local! {
    /// The approvals the call running in this task carries to its lane's gate.
    static CARRIED: RefCell<Option<Arc<[Grant]>>>;
}

/// Run `call` (a dispatcher call) with room for the approvals its admission grants.
pub(crate) fn scope<F: Future>(call: F) -> impl Future<Output = F::Output> {
    CARRIED.scope(RefCell::new(None), call)
}

/// Hold the approvals the current call carries on `gate` until the returned guard drops.
pub(crate) fn hold(gate: Option<&LaneGate>) -> Option<Held> {
    let grants = CARRIED.try_with(|c| c.borrow().clone()).ok().flatten()?;
    Some(gate?.gate.grants().hold(grants))
}

/// Session approvals, per state directory and session.
type Sessions = Mutex<HashMap<(PathBuf, String), Vec<Pattern>>>;
static SESSIONS: LazyLock<Sessions> = LazyLock::new(Sessions::default);

/// Forget the approvals of `session` (it ended).
pub(crate) fn end_session(state: &Path, session: &str) {
    if let Ok(mut s) = SESSIONS.lock() {
        s.remove(&(state.to_path_buf(), session.to_string()));
    }
}

/// The call being admitted.
pub(crate) struct Call<'a> {
    /// The tool's name in the dialect.
    pub(crate) tool: &'a str,
    /// The session calling it.
    pub(crate) session: &'a str,
    /// Its arguments.
    pub(crate) args: &'a Value,
    /// Who may ask the user (`None`: nobody can).
    pub(crate) approver: Option<&'a dyn Approver>,
}

/// What admission needs to know of a served tool and its dispatcher.
pub(crate) struct Served<'a> {
    /// The tool's engine.
    pub(crate) engine: Engine,
    /// The lane its catalog entry runs it in.
    pub(crate) lane: Lane,
    /// Whether its commands go through an egress gate here (lanes, not inline, not `[remote]`).
    pub(crate) gated: bool,
    /// The workspace's state directory.
    pub(crate) state: &'a Path,
    /// The catalog's `[network]`.
    pub(crate) network: &'a NetworkConfig,
    /// Where the catalog was read from, for the line a refusal names.
    pub(crate) catalog_path: Option<&'a Path>,
}

/// The admission step: check the call's `network` request, ask the user when the catalog does
/// not already let the hosts through, and leave the call's approvals (this call's, its
/// session's, the workspace's) for its lane's gate. A refusal is an error naming the catalog
/// line that would allow the hosts; the command does not run.
pub(crate) async fn admit(served: Option<Served<'_>>, req: Call<'_>) -> Result<(), ToolError> {
    let Some(d) = served else {
        return Ok(());
    };
    let engine = d.engine;
    // A catalog command tool's arguments are its own: one may be called `network`.
    let takes = engine.runs_commands() && engine != Engine::Custom;
    let ask = match req.args.get(ARG).filter(|_| takes) {
        None | Some(Value::Null) => None,
        Some(v) => Some(parse(v)?),
    };
    let gated = d.lane != Lane::NoNet && d.gated;
    if let Some(ask) = &ask
        && d.lane == Lane::NoNet
    {
        return Err(ToolError::InvalidArguments(format!(
            "`network` asks for {}, but `{}` runs in the no-net lane, which has no network at all; use run_command (lane net) for a command that needs the network",
            ask.0
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            req.tool
        )));
    }
    if !gated {
        // Inline, the command has the user's own network; a [remote] runner has the
        // container's: no gate here to open.
        return Ok(());
    }
    let state = d.state.to_path_buf();
    let key = (state.clone(), req.session.to_string());
    let session: Vec<Pattern> = SESSIONS
        .lock()
        .ok()
        .and_then(|s| s.get(&key).cloned())
        .unwrap_or_default();
    let always = Store::load(&state).patterns();
    // The hosts approved now, under the scope the user chose.
    let mut approved: Vec<Grant> = Vec::new();
    if let Some((patterns, reason)) = ask {
        let policy = Policy::new(d.network.clone());
        let mut need = Vec::new();
        for p in patterns {
            match policy.standing(&p) {
                Standing::Allowed => {}
                Standing::Refused(why) => {
                    return Err(ToolError::Blocked {
                        rule: "the catalog's [network]".into(),
                        reason: format!("{why}. The command did not run."),
                    });
                }
                Standing::NeedsApproval => {
                    if !session.iter().chain(&always).any(|g| g.covers(&p)) {
                        need.push(p);
                    }
                }
            }
        }
        if !need.is_empty() {
            let question = Question {
                tool: req.tool.to_string(),
                command: engine.shape().command_of(req.args).map(str::to_string),
                lane: d.lane,
                hosts: need.iter().map(ToString::to_string).collect(),
                reason: reason.clone(),
            };
            let answer = match req.approver {
                Some(a) => a.ask(&question).await,
                None => Err(Unanswered::CannotAsk(
                    "this front door cannot ask the user (the CLI, or an embedding without an approver)".into(),
                )),
            };
            match answer {
                Ok(Answer::Allow(scope)) => {
                    match scope {
                        Scope::Call => {}
                        Scope::Session => {
                            if let Ok(mut s) = SESSIONS.lock() {
                                s.entry(key).or_default().extend(need.iter().cloned());
                            }
                        }
                        Scope::Always => Store::add(&state, &need, &reason)?,
                    }
                    approved = need
                        .into_iter()
                        .map(|pattern| Grant { pattern, scope })
                        .collect();
                }
                Ok(Answer::Deny) => {
                    return Err(refusal(d.catalog_path, &need, "the user denied it"));
                }
                Err(Unanswered::CannotAsk(why)) | Err(Unanswered::Dismissed(why)) => {
                    return Err(refusal(d.catalog_path, &need, &why));
                }
                Err(Unanswered::Pending) => return Err(ToolError::Unavailable(PENDING.into())),
            }
        }
    }
    let grants: Vec<Grant> = approved
        .into_iter()
        .chain(session.into_iter().map(|pattern| Grant {
            pattern,
            scope: Scope::Session,
        }))
        .chain(always.into_iter().map(|pattern| Grant {
            pattern,
            scope: Scope::Always,
        }))
        .collect();
    if !grants.is_empty() {
        let grants: Arc<[Grant]> = Arc::from(grants);
        let _ = CARRIED.try_with(|c| *c.borrow_mut() = Some(grants));
    }
    Ok(())
}

/// The request `v` carries, checked: its host patterns and its reason.
fn parse(v: &Value) -> Result<(Vec<Pattern>, String), ToolError> {
    let ask: NetworkAsk = serde_json::from_value(v.clone()).map_err(|e| {
        ToolError::InvalidArguments(format!(
            "`network` must be {{\"hosts\": [\"github.com\", ...], \"reason\": \"why the command needs them\"}}: {e}"
        ))
    })?;
    let reason = ask.reason.trim().to_string();
    if reason.is_empty() {
        return Err(ToolError::InvalidArguments(
            "`network.reason` is empty: say in a sentence why the command needs these hosts; the user reads it before approving".into(),
        ));
    }
    if ask.hosts.is_empty() || ask.hosts.len() > toolyard_tools::network_ask::MAX_HOSTS {
        return Err(ToolError::InvalidArguments(format!(
            "`network.hosts` names {} hosts: give 1 to {}",
            ask.hosts.len(),
            toolyard_tools::network_ask::MAX_HOSTS
        )));
    }
    let mut patterns = Vec::new();
    for (i, h) in ask.hosts.iter().enumerate() {
        let p = Pattern::parse(h)
            .map_err(|e| ToolError::InvalidArguments(format!("`network.hosts[{i}]`: {e}")))?;
        if !patterns.contains(&p) {
            patterns.push(p);
        }
    }
    Ok((patterns, reason))
}

/// The refusal of `hosts`: why, and the catalog line that lets them through without asking.
fn refusal(catalog_path: Option<&Path>, hosts: &[Pattern], why: &str) -> ToolError {
    let list: Vec<String> = hosts.iter().map(|h| format!("\"{h}\"")).collect();
    let catalog = catalog_path.map_or_else(
        || "your catalog.toml".to_string(),
        |p| p.display().to_string(),
    );
    ToolError::Blocked {
        rule: "the network request".into(),
        reason: format!(
            "{} not approved: {why}. The command did not run. [network] allow = [..., {}] in {catalog} lets them through without asking; or run the command without them",
            list.join(", "),
            list.join(", ")
        ),
    }
}

/// The "always" approvals of one workspace, in its state directory.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Store {
    /// The approved hosts, oldest first.
    hosts: Vec<Stored>,
}

/// One approved host.
#[derive(Debug, Serialize, Deserialize)]
struct Stored {
    host: String,
    reason: String,
}

impl Store {
    fn path(state: &Path) -> PathBuf {
        state.join(STORE_FILE)
    }

    /// The store, empty when there is none; an unreadable one is logged and ignored (it grants
    /// nothing).
    fn load(state: &Path) -> Self {
        let path = Self::path(state);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(path = %path.display(), error = %e, "network approvals unreadable; none apply");
                Self::default()
            }),
            Err(_) => Self::default(),
        }
    }

    fn patterns(&self) -> Vec<Pattern> {
        self.hosts
            .iter()
            .filter_map(|h| Pattern::parse(&h.host).ok())
            .collect()
    }

    /// Add `hosts` (approved for `reason`), written whole to a temporary file then renamed, so
    /// a reader never sees half of it.
    fn add(state: &Path, hosts: &[Pattern], reason: &str) -> Result<(), ToolError> {
        let mut store = Self::load(state);
        for h in hosts {
            if !store.hosts.iter().any(|s| s.host == h.as_str()) {
                store.hosts.push(Stored {
                    host: h.to_string(),
                    reason: reason.to_string(),
                });
            }
        }
        let path = Self::path(state);
        let tmp = state.join(format!(".{STORE_FILE}.{}", std::process::id()));
        let text = serde_json::to_vec_pretty(&store)
            .map_err(|e| ToolError::Serialization(e.to_string()))?;
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| {
                let _ = std::fs::remove_file(&tmp);
                ToolError::Io(format!(
                    "cannot keep the approval in {}: {e}; the command did not run",
                    path.display()
                ))
            })
    }
}

/// The hosts approved always for the workspace whose state directory is `state` (for `doctor`).
pub fn always_approved(state: &Path) -> Vec<String> {
    Store::load(state)
        .hosts
        .into_iter()
        .map(|h| h.host)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_checked_with_errors_that_say_what_to_write() {
        let ok = parse(&serde_json::json!({"hosts": ["registry.test", "*.example.org:443", "registry.test"], "reason": " fetch deps "})).unwrap();
        assert_eq!(ok.0.len(), 2, "duplicates are asked once");
        assert_eq!(ok.1, "fetch deps");
        for (bad, says) in [
            (
                serde_json::json!({"hosts": ["a.test"], "reason": "  "}),
                "network.reason",
            ),
            (
                serde_json::json!({"hosts": [], "reason": "x"}),
                "network.hosts",
            ),
            (
                serde_json::json!({"hosts": ["git*hub.com"], "reason": "x"}),
                "network.hosts[0]",
            ),
            (serde_json::json!({"hosts": ["a.test"]}), "\"reason\""),
            (
                serde_json::json!({"hosts": ["a.test"], "reason": "x", "grant": "always"}),
                "unknown field",
            ),
        ] {
            let e = parse(&bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn the_store_keeps_hosts_once_and_a_broken_one_grants_nothing() {
        let t = tempfile::tempdir().unwrap();
        let p = |h: &str| Pattern::parse(h).unwrap();
        Store::add(t.path(), &[p("a.test"), p("b.test:8080")], "why").unwrap();
        Store::add(t.path(), &[p("a.test")], "again").unwrap();
        assert_eq!(always_approved(t.path()), ["a.test", "b.test:8080"]);
        std::fs::write(t.path().join(STORE_FILE), "{not json").unwrap();
        assert!(Store::load(t.path()).patterns().is_empty());
    }

    #[test]
    fn the_choices_map_to_answers() {
        assert_eq!(
            Answer::from_choice("call"),
            Some(Answer::Allow(Scope::Call))
        );
        assert_eq!(
            Answer::from_choice("always"),
            Some(Answer::Allow(Scope::Always))
        );
        assert_eq!(Answer::from_choice("deny"), Some(Answer::Deny));
        assert_eq!(Answer::from_choice("yes"), None);
    }
}
