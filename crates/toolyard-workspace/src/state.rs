//! Toolyard's state directory: outside the workspace, one per workspace.

use std::path::{Path, PathBuf};

use toolyard_core::ToolError;

/// Where Toolyard keeps its own files for one workspace: the database (read ledger and
/// journal), saved command outputs, runner temp dirs. It is never inside the workspace, so the
/// model's file tools cannot reach it.
#[derive(Debug, Clone)]
pub struct StateDir {
    path: PathBuf,
}

impl StateDir {
    /// The state directory of the workspace at `root` (canonical): under `$TOOLYARD_STATE_DIR`,
    /// else `$XDG_STATE_HOME/toolyard`, else `~/.local/state/toolyard`, in
    /// `workspaces/<name>-<hash of the root path>`.
    pub fn for_workspace(root: &Path) -> Result<Self, ToolError> {
        let base = if let Some(dir) = std::env::var_os("TOOLYARD_STATE_DIR") {
            PathBuf::from(dir)
        } else if let Some(dir) = std::env::var_os("XDG_STATE_HOME") {
            PathBuf::from(dir).join("toolyard")
        } else if let Some(home) = std::env::var_os("HOME") {
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
        Self::at(&path, root)
    }

    /// Use `path` as the state directory of the workspace at `root`; it may not lie inside it.
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
        if path.starts_with(root) {
            return Err(ToolError::InvalidArguments(format!(
                "the state directory {} lies inside the workspace {}; set TOOLYARD_STATE_DIR to a directory outside it",
                path.display(),
                root.display()
            )));
        }
        restrict(&path);
        Ok(Self { path })
    }

    /// The directory itself.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The SQLite database (read ledger and journal).
    pub fn db_path(&self) -> PathBuf {
        self.path.join("state.db")
    }

    /// Where full command outputs are saved, one file per call.
    pub fn outputs_dir(&self) -> PathBuf {
        self.sub("outputs")
    }

    /// Private temp directories for runners.
    pub fn tmp_dir(&self) -> PathBuf {
        self.sub("tmp")
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
    fn state_dir_inside_workspace_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        let e = StateDir::at(&root.join(".state"), &root).unwrap_err();
        assert!(e.to_string().contains("TOOLYARD_STATE_DIR"), "{e}");
    }
}
