//! # toolyard-runner
//!
//! The layers every call passes through, whatever door it came in by (MCP, CLI, Rust):
//! the [`Dispatcher`] (dialect and profile, argument validation, hooks), then the router that
//! sends the call to the runner of its catalog lane, or runs it in process (`inline`).

mod check;
mod dispatcher;
pub mod hooks;
pub mod link;
pub mod process;
pub mod protocol;
pub mod router;

pub use check::check_catalog;
pub use dispatcher::{CallRequest, Dispatcher, DispatcherConfig, Mode};
pub use hooks::{HookCall, Hooks, HooksConfig};
pub use link::{CommandLink, RemoteConfig, RunnerLink, RunnerSpawn};
pub use process::{RunnerArgs, runner_main};
pub use router::Router;
