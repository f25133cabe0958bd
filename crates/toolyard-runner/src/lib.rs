//! # toolyard-runner
//!
//! The layers every call passes through, whatever door it came in by (MCP, CLI, Rust):
//! the [`Dispatcher`] applies them in order (the tool, its setup, argument validation, the time
//! limit, the command policy: see `layers.rs`), then the hooks around the execution, which the
//! router sends to the runner of the call's catalog lane, or runs in process.

mod check;
mod dispatcher;
pub mod hooks;
mod internal;
mod lane_exec;
mod layers;
pub mod link;
mod lsp;
pub mod network_request;
pub mod process;
pub mod protocol;
mod remote;
pub mod remote_kube;
mod repeats;
pub mod router;

pub use check::check_catalog;
pub use dispatcher::{CallRequest, Dispatcher, DispatcherConfig, Mode};
pub use hooks::{HookCall, Hooks, HooksConfig};
pub use lane_exec::{LaneExecArgs, lane_exec};
pub use link::{CommandLink, LinkIo, RemoteConfig, RunnerLink, RunnerSpawn};
pub use process::{RunnerArgs, runner_main};
pub use remote::Export;
pub use router::Router;
