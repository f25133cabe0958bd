//! # toolyard-tools
//!
//! The built-in engine tools (files, search, commands, web, oracle, artifacts): the loopr
//! vocabulary, which `toolyard-dialects` names for each seed. A tool knows nothing of MCP,
//! lanes or hooks: it gets typed arguments and a [`toolyard_core::ToolContext`], and shares a
//! [`ToolEnv`] with its siblings.

pub mod artifacts;
pub mod capture;
pub mod command;
pub mod custom;
mod env;
pub mod files;
pub mod lsp;
pub mod network_ask;
pub mod oracle;
pub mod patch;
pub mod search;
pub mod task;
pub mod undo;
pub mod web;

pub use command::process;
pub use env::ToolEnv;
