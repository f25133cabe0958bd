//! The services every built-in tool shares for one workspace.

use std::path::Path;

use toolyard_core::{Catalog, ToolError};
use toolyard_workspace::{StateDir, Workspace};

/// What the built-in tools of one workspace share: the confined workspace, Toolyard's state
/// directory for it, and the catalog (limits, provider settings).
#[derive(Debug)]
pub struct ToolEnv {
    /// The confined workspace.
    pub workspace: Workspace,
    /// Toolyard's state directory for this workspace (outside it).
    pub state: StateDir,
    /// The merged catalog.
    pub catalog: Catalog,
}

impl ToolEnv {
    /// Open the workspace at `root` with its state directory and `catalog`.
    pub fn open(root: &Path, catalog: Catalog) -> Result<Self, ToolError> {
        let workspace = Workspace::open(root)?;
        let state = StateDir::for_workspace(workspace.root())?;
        Ok(Self {
            workspace,
            state,
            catalog,
        })
    }

    /// The catalog's output limit for `tool`.
    pub fn max_output(&self, tool: &str) -> usize {
        self.catalog
            .tool(tool)
            .map(|t| t.max_output_bytes)
            .unwrap_or(toolyard_core::DEFAULT_MAX_OUTPUT_BYTES) as usize
    }
}
