//! # toolyard-dispatch
//!
//! The server half of Toolyard: the one path of every call, whatever door it came in by (MCP,
//! CLI, the session host, Rust). [`Dispatcher::call`] admits it (the tool, its setup, argument validation, the time limit,
//! the command policy: see `layers.rs`), places it once ([`Placement`]: in this process, inline
//! or on a task of its own, a lane's runner, every lane) and executes it there, with the hooks
//! around placing and executing when any are configured. The router and its links reach the
//! lanes' runner processes (`toolyard-runner`) over the job protocol.

mod build;
mod check;
mod config;
mod dispatcher;
mod execute;
pub mod hooks;
mod layers;
pub mod link;
mod lsp;
pub mod network_request;
mod place;
mod remote;
pub mod remote_kube;
mod repeats;
mod request;
pub mod router;
mod template;

pub use build::DispatcherBuilder;
pub use check::check_catalog;
pub use config::Config;
pub use dispatcher::{Dispatcher, DispatcherConfig, Mode};
pub use hooks::{HookCall, Hooks, HooksConfig};
pub use link::{CommandLink, LinkIo, RemoteConfig, RunnerLink, RunnerSpawn};
pub use place::Placement;
pub use remote::Export;
pub use request::CallRequest;
pub use router::Router;
