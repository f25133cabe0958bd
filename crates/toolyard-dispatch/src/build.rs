//! Building a [`Dispatcher`]: one step per thing it needs, in the order they depend on each
//! other. Every check happens here, so a mistake fails the start, not a call.

use std::collections::BTreeMap;
use std::sync::Arc;

use toolyard_core::{Catalog, Engine, Lane, ToolError, ToolSpec};
use toolyard_dialects::DialectTool;
use toolyard_policy::CommandPolicy;
use toolyard_tools::ToolEnv;

use crate::config::Config;
use crate::dispatcher::{Dispatcher, DispatcherConfig, Mode, Parts};
use crate::execute::{InProcess, Lanes};
use crate::hooks::Hooks;
use crate::link::{CommandLink, RemoteConfig, RunnerLink, RunnerSpawn};
use crate::router::Router;

impl Dispatcher {
    /// Open the workspace and build the dialect's tools, filtered by the profile.
    pub fn new(config: DispatcherConfig) -> Result<Self, ToolError> {
        Self::builder(config).build()
    }

    /// A builder for a dispatcher serving `config`.
    pub fn builder(config: DispatcherConfig) -> DispatcherBuilder {
        DispatcherBuilder::new(config)
    }

    /// Like [`Dispatcher::new`], with runners reached through `link` when given (a link built
    /// outside this crate, such as the Kubernetes one of `toolyard-remote`).
    pub fn with_link(
        config: DispatcherConfig,
        link: Option<Arc<dyn RunnerLink>>,
    ) -> Result<Self, ToolError> {
        Self::builder(config).link(link).build()
    }
}

/// Builds a [`Dispatcher`] from its configuration (see [`Dispatcher::builder`]).
pub struct DispatcherBuilder {
    config: DispatcherConfig,
    link: Option<Arc<dyn RunnerLink>>,
}

impl DispatcherBuilder {
    pub(crate) fn new(config: DispatcherConfig) -> Self {
        Self { config, link: None }
    }

    /// Reach the runners through `link` (one built outside this crate, such as the Kubernetes
    /// one of `toolyard-remote`), not the catalog's `[remote]` command or a local spawn.
    pub fn link(mut self, link: Option<Arc<dyn RunnerLink>>) -> Self {
        self.link = link;
        self
    }

    /// Check the catalog, open the workspace, build the dialect's tools (filtered by the
    /// profile), the command policy, the hooks and the router.
    pub fn build(self) -> Result<Dispatcher, ToolError> {
        let config = self.config;
        // Every section now, so a mistake fails the start, not the first call that reads it.
        let sections = crate::check_catalog(&config.catalog).map_err(invalid)?;
        let remote = remote_link(&config, &sections.remote, self.link)?;
        let env = Arc::new(open_env(&config, &sections, remote.as_deref())?);
        let tools = served_tools(&config, &env)?;
        let specs = specs_of(&config.catalog, &tools)?;
        let policy = CommandPolicy::new(&sections.policy)
            .map_err(|e| ToolError::InvalidArguments(format!("catalog [policy]: {e}")))?;
        let hooks = Hooks::new(&sections.hooks, env.workspace.root())?;
        let lanes = router(&config, &env, remote).map(|router| Lanes { router });
        Ok(Dispatcher::from_parts(Parts {
            in_process: InProcess { env },
            tools,
            specs,
            policy,
            config,
            lanes,
            hooks: (!hooks.is_empty()).then_some(hooks),
            sections,
        }))
    }
}

fn invalid(e: impl std::fmt::Display) -> ToolError {
    ToolError::InvalidArguments(e.to_string())
}

/// The link to the runners when they are elsewhere: `link` when given, else the catalog's
/// `[remote]` command.
fn remote_link(
    config: &DispatcherConfig,
    remote: &RemoteConfig,
    link: Option<Arc<dyn RunnerLink>>,
) -> Result<Option<Arc<dyn RunnerLink>>, ToolError> {
    if remote.kubernetes.is_some() && link.is_none() {
        return Err(ToolError::InvalidArguments(
            crate::remote_kube::NEEDS_KUBE_BUILD.into(),
        ));
    }
    let remote: Option<Arc<dyn RunnerLink>> = match link {
        Some(link) => Some(link),
        None => CommandLink::from_config(remote).map(|c| Arc::new(c) as Arc<dyn RunnerLink>),
    };
    if remote.is_some() && config.mode == Mode::Inline {
        return Err(ToolError::InvalidArguments(
            "the catalog's [remote] command runs the tools on a remote runner, but this server runs them inline (--inline); drop --inline, or the [remote] section".into(),
        ));
    }
    Ok(remote)
}

/// The tool environment: the workspace (the remote runners' own, when `remote` says so), the
/// records, and the language servers of a local workspace.
fn open_env(
    config: &DispatcherConfig,
    sections: &Config,
    remote: Option<&dyn RunnerLink>,
) -> Result<ToolEnv, ToolError> {
    type Open =
        fn(&std::path::Path, Catalog, Option<&std::path::Path>) -> Result<ToolEnv, ToolError>;
    let is_remote = remote.is_some_and(|l| l.is_remote());
    let open: Open = if is_remote {
        ToolEnv::open_for_remote
    } else {
        ToolEnv::open_with_state
    };
    let mut env = open(
        &config.workspace,
        config.catalog.clone(),
        config.state_dir.as_deref(),
    )?;
    if !is_remote {
        env.lsp = Some(crate::lsp::manager(
            config,
            &sections.lsp,
            env.workspace.root(),
        ));
    }
    Ok(env)
}

/// The dialect's tools the profile allows, by the name each is served under; every schema
/// compiled now (once per tool type), so validation cannot fail later.
fn served_tools(
    config: &DispatcherConfig,
    env: &Arc<ToolEnv>,
) -> Result<BTreeMap<String, DialectTool>, ToolError> {
    let allowed = config
        .catalog
        .profile(&config.profile)
        .map_err(ToolError::InvalidArguments)?;
    let served = toolyard_dialects::tools(env, config.dialect)?;
    toolyard_dialects::custom_clash(&config.catalog, &served, config.dialect)?;
    let tools: BTreeMap<String, DialectTool> = served
        .into_iter()
        .filter(|t| allowed.iter().any(|a| a == t.catalog_name()))
        .map(|t| (t.tool.name().to_string(), t))
        .collect();
    for t in tools.values() {
        t.tool.arg_validator().map_err(|e| {
            ToolError::Io(format!(
                "internal: the input schema of `{}` does not compile: {e}",
                t.tool.name()
            ))
        })?;
    }
    Ok(tools)
}

/// Each served tool's catalog entry, by the name it is served under: every one has one, so
/// none runs with made-up limits.
fn specs_of(
    catalog: &Catalog,
    tools: &BTreeMap<String, DialectTool>,
) -> Result<BTreeMap<String, ToolSpec>, ToolError> {
    let mut specs = BTreeMap::new();
    for (name, t) in tools {
        let spec = catalog.tool(t.catalog_name()).ok_or_else(|| {
            ToolError::Io(format!(
                "internal: `{name}` runs under `{}`, which has no catalog entry",
                t.catalog_name()
            ))
        })?;
        specs.insert(name.clone(), spec.clone());
    }
    Ok(specs)
}

/// The router of the lanes' runners, when calls run in lanes: through `remote`, or runners
/// spawned from this executable. Over a remote link, undo restores and recovery settles on
/// the runner's side.
fn router(
    config: &DispatcherConfig,
    env: &Arc<ToolEnv>,
    remote: Option<Arc<dyn RunnerLink>>,
) -> Option<Arc<Router>> {
    let Mode::Lanes { exe } = &config.mode else {
        return None;
    };
    let link: Arc<dyn RunnerLink> = match remote {
        Some(remote) => remote,
        None => Arc::new(RunnerSpawn {
            exe: exe.clone(),
            workspace: env.workspace.root().to_path_buf(),
            catalog: config.catalog_path.clone(),
            state_dir: config.state_dir.clone(),
        }),
    };
    let router = Arc::new(Router::with_link(link, env.records.clone()));
    if router.is_remote()
        && let Some(local) = &env.local
    {
        let lane = config
            .catalog
            .spec(Engine::EditFile)
            .map_or(Lane::NoNet, |s| s.lane);
        local.set_remote(Arc::new(crate::remote::RouterFiles {
            router: Arc::downgrade(&router),
            lane,
        }));
        let recovery = crate::remote::Recovery::new(local.clone());
        let _ = router.recovery.set(Arc::new(recovery));
    }
    Some(router)
}
