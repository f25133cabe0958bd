//! # toolyard-exec
//!
//! Processes for Toolyard: run a command in the workspace with a timeout that kills the whole
//! process tree, bounded head-and-tail capture, lane sandboxes (Landlock, seccomp, namespaces,
//! rlimits). The command policy lives in `toolyard-policy`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), toolyard_exec::ExecError> {
//! use std::time::Duration;
//! use toolyard_exec::exec::{ExecRequest, run};
//!
//! let mut req = ExecRequest::new("cargo build 2>&1 | tail -n 5", "/work/project");
//! req.timeout = Duration::from_secs(300);
//! let outcome = run(req).await?;
//! println!("{}", outcome.model_text());
//! # Ok(()) }
//! ```
//!
//! A runner process applies its lane's sandbox once, in `main`, before any thread starts:
//! see [`sandbox::apply`].

pub mod background;
mod domain;
pub mod env;
mod error;
pub mod exec;
mod fd;
pub mod protect;
pub mod sandbox;
mod spawn;
mod spill;
mod tree;

pub use env::{EnvPolicy, ExecConfig, Terminal, hide_secrets_from_proc};
pub use error::ExecError;
pub use exec::{ExecOutcome, ExecProgress, ExecRequest, Ran, Running, Streams, run, run_or_answer};
pub use tree::{FORCE_MECHANISM_ENV, pid_alive, tree_kill_mechanism};
