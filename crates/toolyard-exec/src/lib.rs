//! # toolyard-exec
//!
//! Processes for Toolyard: run a command in the workspace with a timeout that kills the whole
//! process tree, bounded head-and-tail capture, lane sandboxes (Landlock, seccomp, namespaces,
//! rlimits), and the command policy that refuses obviously destructive commands.

pub mod policy;
