//! Toolyard's state directory: outside the workspace, one per workspace.

use std::path::{Path, PathBuf};

use toolyard_core::ToolError;

use crate::{Protection, Workspace};

/// Where Toolyard keeps its own files for one workspace: the database (read ledger and
/// journal), saved command outputs, runner temp dirs. When it lies inside the workspace (a
/// workspace at `~` or `/`), [`StateDir::protect`] hides it from the file tools.
#[derive(Debug, Clone)]
pub struct StateDir {
    path: PathBuf,
    /// The directory holding every workspace's state (`path` itself when given explicitly).
    tree: PathBuf,
}

impl StateDir {
    /// The state directory of the workspace at `root` (canonical): under `$TOOLYARD_STATE_DIR`,
    /// else `$XDG_STATE_HOME/toolyard`, else `~/.local/state/toolyard`, in
    /// `workspaces/<name>-<hash of the root path>`.
    pub fn for_workspace(root: &Path) -> Result<Self, ToolError> {
        // An empty value counts as unset (as XDG says): never the current directory.
        let set = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let base = if let Some(dir) = set("TOOLYARD_STATE_DIR") {
            PathBuf::from(dir)
        } else if let Some(dir) = set("XDG_STATE_HOME") {
            PathBuf::from(dir).join("toolyard")
        } else if let Some(home) = set("HOME") {
            PathBuf::from(home).join(".local/state/toolyard")
        } else {
            std::env::temp_dir().join("toolyard-state")
        };
        let name: String = root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "root".into())
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .take(40)
            .collect();
        let digest = blake3::hash(root.as_os_str().as_encoded_bytes()).to_hex();
        let path = base
            .join("workspaces")
            .join(format!("{name}-{}", &digest[..16]));
        let mut state = Self::at(&path, root)?;
        if let Ok(tree) = base.canonicalize() {
            state.tree = tree;
        }
        Ok(state)
    }

    /// Use `path` as the state directory of the workspace at `root`.
    pub fn at(path: &Path, root: &Path) -> Result<Self, ToolError> {
        std::fs::create_dir_all(path).map_err(|e| {
            ToolError::Io(format!(
                "cannot create state directory {}: {e}",
                path.display()
            ))
        })?;
        let path = path
            .canonicalize()
            .map_err(|e| ToolError::Io(format!("{}: {e}", path.display())))?;
        if path == root || root.starts_with(&path) {
            return Err(ToolError::InvalidArguments(format!(
                "the state directory {} holds the workspace {}; set TOOLYARD_STATE_DIR to a directory outside the workspace",
                path.display(),
                root.display()
            )));
        }
        restrict(&path);
        Ok(Self {
            tree: path.clone(),
            path,
        })
    }

    /// Hide the state directories (of every workspace) from `workspace`'s file tools when they
    /// lie inside it (a workspace at `~` or `/`): the tools can neither read a journal nor forge
    /// one.
    pub fn protect(&self, workspace: &mut Workspace) {
        if let Ok(rest) = self.tree.strip_prefix(workspace.root()) {
            let rel = workspace.relative(&rest.to_string_lossy(), Path::new(""));
            if let Ok(rel) = rel {
                workspace.protect(rel, Protection::Hidden, "is Toolyard's state directory");
            }
        }
    }

    /// The directory holding every workspace's state (this one's own when set explicitly):
    /// what commands may never reach.
    pub fn tree(&self) -> &Path {
        &self.tree
    }

    /// The directory itself.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The SQLite database (read ledger and journal).
    pub fn db_path(&self) -> PathBuf {
        self.path.join("state.db")
    }

    /// The lock every process holding the journal open shares, and the one that recovers it
    /// takes alone (see [`crate::Journal::recover`]).
    pub fn owner_lock_path(&self) -> PathBuf {
        self.path.join("owner.lock")
    }

    /// Where full command outputs are saved, one file per call.
    pub fn outputs_dir(&self) -> PathBuf {
        self.sub("outputs")
    }

    /// Where changes commands made to protected paths are moved (never deleted).
    pub fn quarantine_dir(&self) -> PathBuf {
        self.sub("quarantine")
    }

    /// Private temp directories for runners.
    pub fn tmp_dir(&self) -> PathBuf {
        self.sub("tmp")
    }

    /// The private homes of build tools and package managers, shared by this workspace's lanes.
    pub fn caches_dir(&self) -> PathBuf {
        self.sub("caches")
    }

    fn sub(&self, name: &str) -> PathBuf {
        let p = self.path.join(name);
        let _ = std::fs::create_dir_all(&p);
        p
    }
}

/// Keep the state directory private to its owner (it holds file contents).
fn restrict(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_dir_holding_the_workspace_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        let e = StateDir::at(&root, &root.join("ws")).unwrap_err();
        assert!(e.to_string().contains("TOOLYARD_STATE_DIR"), "{e}");
    }

    #[test]
    fn a_state_dir_inside_the_workspace_is_hidden_from_the_file_tools() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        std::fs::write(root.join("notes.txt"), "mine").unwrap();
        let state = StateDir::at(&root.join(".local/state/toolyard"), &root).unwrap();
        std::fs::write(state.db_path(), "journal").unwrap();
        std::os::unix::fs::symlink(".local/state/toolyard", root.join("link")).unwrap();
        let mut ws = Workspace::open(&root).unwrap();
        state.protect(&mut ws);
        let cwd = Path::new("");
        for path in [
            ".local/state/toolyard/state.db",
            ".local/state/toolyard",
            "./.local/state/x/../toolyard/state.db",
            "link/state.db",
        ] {
            let e = ws.locate(path, cwd).unwrap_err();
            assert!(e.to_string().contains("state directory"), "{path}: {e}");
        }
        let rel = ws.relative("link/state.db", cwd).unwrap();
        assert!(
            ws.write_atomic(&rel, b"forged", &crate::Expect::Any)
                .is_err()
        );
        assert_eq!(std::fs::read(state.db_path()).unwrap(), b"journal");
        // The rest of the workspace, and its siblings, stay usable.
        assert!(ws.locate("notes.txt", cwd).is_ok());
        assert!(ws.locate(".local/state/other", cwd).is_ok());
        assert!(ws.locate(".local/state/toolyard2", cwd).is_ok());
        assert_eq!(ws.hidden_paths(), vec![root.join(".local/state/toolyard")]);
    }
}
