//! The layers a call meets before it runs, in order, for every front door (MCP, the CLI,
//! Rust) and both execution paths (in the server, in a lane's runner). Each refuses with an
//! error the model can act on; [`admit`] applies them, for [`crate::Dispatcher::call`], before
//! it places the call and executes it (with the hooks, [`crate::Hooks::around`], around both).
//!
//! 1. [`resolve`]: the tool by its name in the dialect; an unknown name is an error listing
//!    the served names, never a fallback to a command tool.
//! 2. [`configured`]: a tool that needs configuring says what, instead of running to fail.
//! 3. [`validate`]: the arguments against the advertised schema, every problem at once. The
//!    runner does not check again (it parses, and a bad argument is an error result).
//! 4. [`time_limit`]: the call's one time limit, passed on in the context or the job.
//! 5. [`command_policy`]: a command a call carries is refused before any hook or runner hop.
//!    The runner checks again where the command runs (see `CommandEnv::admit`): it is the
//!    boundary, and it also sees the commands the call does not carry (a project's default).
//!
//! Read-before-edit is not a layer here: its rule is `files::expect_for_write`, and the write's
//! compare-and-swap (`files::commit_write`) must stay inside the write.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;
use toolyard_core::{TIMEOUT_ARG, ToolError, ToolSpec};
use toolyard_dialects::DialectTool;
use toolyard_policy::CommandPolicy;

/// A call the layers let through: its tool, its catalog entry and its one time limit.
pub(crate) struct Admitted<'a> {
    pub(crate) entry: &'a DialectTool,
    pub(crate) spec: &'a ToolSpec,
    pub(crate) limit: Duration,
}

/// The layers before a call runs, in the order it meets them: the tool, its setup, its
/// arguments, its time limit, the command policy. `spec` is each served tool's catalog entry.
pub(crate) fn admit<'a>(
    tools: &'a BTreeMap<String, DialectTool>,
    policy: &CommandPolicy,
    spec: impl Fn(&'a DialectTool) -> &'a ToolSpec,
    req: &crate::request::CallRequest,
) -> Result<Admitted<'a>, ToolError> {
    let entry = resolve(tools, &req.tool)?;
    configured(entry, &req.tool)?;
    validate(entry, &req.args)?;
    let spec = spec(entry);
    let limit = time_limit(entry, spec, &req.args)?;
    command_policy(policy, entry, &req.args)?;
    Ok(Admitted { entry, spec, limit })
}

/// The served tool called `name`, or the error naming every served tool.
pub(crate) fn resolve<'a>(
    tools: &'a BTreeMap<String, DialectTool>,
    name: &str,
) -> Result<&'a DialectTool, ToolError> {
    tools.get(name).ok_or_else(|| {
        let names: Vec<&str> = tools.keys().map(String::as_str).collect();
        toolyard_core::unknown_tool(name, &names)
    })
}

/// Refuse a tool that is known but not set up (so not listed), saying what to configure.
pub(crate) fn configured(entry: &DialectTool, name: &str) -> Result<(), ToolError> {
    match entry.tool.needs() {
        Some(need) => Err(ToolError::Unavailable(format!(
            "`{name}` is not set up, so it is not listed: {need}; then restart Toolyard"
        ))),
        None => Ok(()),
    }
}

/// Check the arguments against the tool's advertised schema, every problem at once.
pub(crate) fn validate(entry: &DialectTool, args: &Value) -> Result<(), ToolError> {
    entry.tool.check_args(args)
}

/// The call's time limit: its own `timeout_ms` when the tool takes one, else the catalog's
/// default, refused above the catalog's ceiling (see [`toolyard_core::time_limit`]).
pub(crate) fn time_limit(
    entry: &DialectTool,
    spec: &ToolSpec,
    args: &Value,
) -> Result<Duration, ToolError> {
    let takes = entry.tool.arg_validator().is_ok_and(|v| v.takes_timeout());
    let asked = args
        .get(TIMEOUT_ARG)
        .and_then(Value::as_u64)
        .filter(|_| takes);
    toolyard_core::time_limit(
        entry.tool.name(),
        asked,
        spec.timeout(),
        Duration::from_millis(spec.max_timeout_ms),
    )
}

/// Refuse the command a call carries (the argument its shape names, or a catalog command
/// tool's argv) when the catalog's `[policy]` blocks it. The shape is the declaration: a tool
/// that runs no command declares none.
pub(crate) fn command_policy(
    policy: &CommandPolicy,
    entry: &DialectTool,
    args: &Value,
) -> Result<(), ToolError> {
    match entry.command_line(args)? {
        Some(c) => toolyard_tools::command::check_policy(policy, &c),
        None => Ok(()),
    }
}
