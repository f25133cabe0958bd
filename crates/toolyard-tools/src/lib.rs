//! # toolyard-tools
//!
//! The built-in tools (files, search, commands, web, oracle, artifacts) and the dialects that
//! name them for each seed. A tool knows nothing of MCP, lanes or hooks: it gets typed
//! arguments and a [`toolyard_core::ToolContext`], and shares a [`ToolEnv`] with its siblings.

mod env;
pub mod files;
pub mod search;
pub mod web;

pub use env::ToolEnv;
