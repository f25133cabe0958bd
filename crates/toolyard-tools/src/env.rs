//! The services every built-in tool shares for one workspace.

use std::path::Path;
use std::sync::Arc;

use toolyard_core::{Catalog, ToolError};
use toolyard_exec::protect::{self, Protected};
use toolyard_exec::sandbox::SandboxConfig;
use toolyard_records::{Journal, JournalConfig, Ledger};
use toolyard_workspace::{Protection, RelPath, StateDir, Workspace};

use toolyard_records::{LocalRecords, Records};

/// What the built-in tools of one workspace share: the confined workspace, Toolyard's state
/// directory for it, the catalog (limits, provider settings), and the session records.
pub struct ToolEnv {
    /// The confined workspace.
    pub workspace: Arc<Workspace>,
    /// Toolyard's state directory for this workspace (outside it).
    pub state: StateDir,
    /// The merged catalog.
    pub catalog: Catalog,
    /// Read ledger and journal (local, or through the runner's link to the server).
    pub records: Arc<dyn Records>,
    /// The same records when this process keeps them itself (the server, not a runner).
    pub local: Option<Arc<LocalRecords>>,
    /// The workspace's language servers (the server process sets them; `None` elsewhere).
    pub lsp: Option<Arc<toolyard_lsp::Manager>>,
}

impl std::fmt::Debug for ToolEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolEnv")
            .field("workspace", &self.workspace.root())
            .field("state", &self.state.path())
            .finish_non_exhaustive()
    }
}

impl ToolEnv {
    /// Open the workspace at `root` with its state directory, `catalog`, and records kept in
    /// this process.
    pub fn open(root: &Path, catalog: Catalog) -> Result<Self, ToolError> {
        Self::open_with_state(root, catalog, None)
    }

    /// Like [`ToolEnv::open`], with the state directory at `state_dir` when given (else the
    /// workspace's default one).
    pub fn open_with_state(
        root: &Path,
        catalog: Catalog,
        state_dir: Option<&Path>,
    ) -> Result<Self, ToolError> {
        Self::open_server(root, catalog, state_dir, true)
    }

    /// Like [`ToolEnv::open_with_state`] for a server whose files live with a remote runner:
    /// nothing reads or settles the workspace on this disk (its pending changes are the
    /// runner's to settle).
    pub fn open_for_remote(
        root: &Path,
        catalog: Catalog,
        state_dir: Option<&Path>,
    ) -> Result<Self, ToolError> {
        Self::open_server(root, catalog, state_dir, false)
    }

    fn open_server(
        root: &Path,
        catalog: Catalog,
        state_dir: Option<&Path>,
        recover: bool,
    ) -> Result<Self, ToolError> {
        let (workspace, state) = confined(root, state_dir, &catalog)?;
        let workspace = Arc::new(workspace);
        let journal_config: JournalConfig = catalog
            .section("journal")
            .map_err(|e| ToolError::InvalidArguments(e.to_string()))?;
        let journal = Journal::open_with(&state, &journal_config)?;
        // Settle writes a killed process left pending, before this one writes anything.
        if recover {
            journal.recover(&workspace)?;
        }
        let records = Arc::new(LocalRecords::new(
            workspace.clone(),
            Ledger::open(&state)?,
            journal,
        ));
        Ok(Self {
            workspace,
            state,
            catalog,
            records: records.clone(),
            local: Some(records),
            lsp: None,
        })
    }

    /// The same workspace with `records` in place of the local ones (a runner process).
    pub fn with_records(
        root: &Path,
        state: StateDir,
        catalog: Catalog,
        records: Arc<dyn Records>,
    ) -> Result<Self, ToolError> {
        let mut workspace = Workspace::open(root)?;
        state.protect(&mut workspace);
        // A runner's file tools must refuse protected paths as the server's do.
        protect_configured(&mut workspace, &catalog)?;
        Ok(Self {
            workspace: Arc::new(workspace),
            state,
            catalog,
            records,
            local: None,
            lsp: None,
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

/// The workspace at `root` and its state directory, hidden from the file tools when inside,
/// with the catalog's protected paths read-only to them.
fn confined(
    root: &Path,
    state_dir: Option<&Path>,
    catalog: &Catalog,
) -> Result<(Workspace, StateDir), ToolError> {
    let mut workspace = Workspace::open(root)?;
    let state = match state_dir {
        Some(dir) => StateDir::at(dir, workspace.root())?,
        None => StateDir::for_workspace(workspace.root())?,
    };
    state.protect(&mut workspace);
    protect_configured(&mut workspace, catalog)?;
    Ok((workspace, state))
}

/// Make the `[sandbox] protected_paths` (or the default list) read-only to the file tools:
/// they run code outside the sandbox, so only the user changes them.
fn protect_configured(workspace: &mut Workspace, catalog: &Catalog) -> Result<(), ToolError> {
    let sandbox: SandboxConfig = catalog
        .section("sandbox")
        .map_err(|e| ToolError::InvalidArguments(e.to_string()))?;
    let list = protect::configured(&sandbox);
    for rel in Protected::new(workspace.root(), &list, &[]).relative() {
        workspace.protect(
            RelPath::from_normalized(&rel),
            Protection::ReadOnly,
            "runs code outside the sandbox (git hooks, editor and agent configuration, shell start-up files)",
        );
    }
    for rel in protect::UNPROTECTED {
        workspace.allow_writes(RelPath::from_normalized(rel));
    }
    Ok(())
}
