//! Where an admitted call runs: one decision, made once per call by [`Placer::place`] from the
//! engine table ([`toolyard_core::Engine`]) and the call's own arguments. Nothing after it asks
//! again: the executors run what they are handed.

use serde_json::Value;
use toolyard_core::engine::SMALL_WRITE_BYTES;
use toolyard_core::{Bound, Lane, Site, ToolError, ToolSpec};
use toolyard_dialects::DialectTool;
use toolyard_tools::ToolEnv;

use crate::router::Router;

/// Where one call runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// In this (server) process. `inline`: on the request's own task, whose thread hands the
    /// runtime's other tasks over while the call blocks (bounded work: a read, a small write
    /// with nothing else in flight); else on a task of its own, abandoned at its backstop.
    InServer {
        /// Whether the call runs on the request's own task.
        inline: bool,
    },
    /// In the runner of this lane (its catalog lane, or the one its process id names).
    Lane(Lane),
    /// In every lane whose runner runs, the answers merged (`process_list`).
    EveryLane,
}

/// What placing a call looks at: the lanes (when calls run in them), the workspace, and how
/// many calls run now.
pub(crate) struct Placer<'a> {
    pub(crate) router: Option<&'a Router>,
    pub(crate) env: &'a ToolEnv,
    /// Calls running now, this one included.
    pub(crate) in_flight: usize,
}

impl Placer<'_> {
    /// Where a call of `entry` (catalog entry `spec`) with `args` runs, for `session`; an
    /// unknown or lost process id is an error here, before anything runs.
    pub(crate) fn place(
        &self,
        entry: &DialectTool,
        spec: &ToolSpec,
        session: &str,
        args: &Value,
    ) -> Result<Placement, ToolError> {
        let Some(router) = self.router else {
            // Inline: everything runs in this process.
            return Ok(Placement::InServer {
                inline: self.is_bounded(entry, args),
            });
        };
        Ok(match entry.engine.site() {
            Site::EveryLane => Placement::EveryLane,
            Site::ByProcessId => {
                let id = entry.shape.process_id_of(args);
                let unknown = || {
                    ToolError::NotFound(format!(
                        "no process `{id}` in this session: process ids look like `net-3`, as run_command returned them in data.process_id; see process_list"
                    ))
                };
                let lane: Lane = toolyard_tools::process::lane_of(id)
                    .and_then(|l| l.parse().ok())
                    .ok_or_else(unknown)?;
                if router.is_lost(session, id) {
                    return Err(ToolError::Unavailable(format!(
                        "process `{id}` is lost: the {lane} runner that held it stopped, and every process it ran was killed; start the command again"
                    )));
                }
                Placement::Lane(lane)
            }
            _ if entry.engine.runs_in_server(router.is_remote()) => Placement::InServer {
                inline: self.is_bounded(entry, args),
            },
            _ => Placement::Lane(spec.lane),
        })
    }

    /// Whether a call in this process is bounded, so it may run on the request's own task: its
    /// engine's work is bounded by its output cap ([`Bound::Prompt`]), or it is a small write
    /// ([`Bound::SmallWrite`]: the file at its path argument and every string argument at most
    /// [`SMALL_WRITE_BYTES`]) with no other call in flight and no language server to wait for.
    /// A 50 MB edit runs on a task of its own, and so do writes in flight together, whose
    /// fsyncs overlap there.
    fn is_bounded(&self, entry: &DialectTool, args: &Value) -> bool {
        match entry.engine.bound() {
            Bound::Prompt => true,
            Bound::SmallWrite => {
                let args = args.as_object();
                self.in_flight <= 1
                    && args.is_some_and(|a| self.is_small_write(entry, a))
                    && !toolyard_tools::lsp::may_wait(self.env, entry.engine.name(), args)
            }
            Bound::Open => false,
        }
    }

    /// Whether `args` name a file of at most [`SMALL_WRITE_BYTES`] (or none yet) and carry no
    /// longer string.
    fn is_small_write(&self, entry: &DialectTool, args: &serde_json::Map<String, Value>) -> bool {
        let small = |v: &Value| v.as_str().is_none_or(|s| s.len() <= SMALL_WRITE_BYTES);
        let Some(path) = entry
            .shape
            .path
            .and_then(|k| args.get(k))
            .and_then(Value::as_str)
        else {
            return false;
        };
        let ws = &self.env.workspace;
        args.values().all(small)
            && ws
                .locate(path, ws.root())
                .and_then(|rel| ws.metadata(&rel))
                .is_ok_and(|m| m.is_none_or(|m| m.len() <= SMALL_WRITE_BYTES as u64))
    }
}
