//! # toolyard-runner
//!
//! The runner process, and only that: `toolyard runner --lane L` sandboxes itself for its lane
//! and serves the jobs a router sends it over the job protocol ([`protocol`]), plus
//! `toolyard lane-exec` (one command in a lane's sandbox). The server that sends the jobs is
//! `toolyard-dispatch`.

mod internal;
mod lane_exec;
mod pre_image;
pub mod process;
pub mod protocol;

pub use lane_exec::{LaneExecArgs, lane_exec};
pub use process::{RunnerArgs, runner_main};
