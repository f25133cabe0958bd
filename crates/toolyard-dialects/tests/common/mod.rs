//! What the dialect tests share: a temp workspace holding `files`, its own state directory, and
//! one dialect's tools over it.

// Compiled into each test binary, which uses only part of it.
#![allow(dead_code)]

use std::fs;
use std::path::PathBuf;
use std::sync::Arc;

use toolyard_core::{Catalog, Tool};
use toolyard_dialects::{self as dialect, Dialect};
use toolyard_tools::ToolEnv;

/// A workspace with `files` (path, content) and `dialect`'s tools over it.
pub struct DialectWorkspace {
    /// Holds the workspace and the state directory.
    pub tmp: tempfile::TempDir,
    /// The workspace root (canonical).
    pub ws: PathBuf,
    /// The tool environment.
    pub env: Arc<ToolEnv>,
    /// The dialect's tools.
    pub tools: Vec<Arc<dyn Tool>>,
}

impl DialectWorkspace {
    /// Make it: files under `ws/`, state beside it in the temp dir.
    pub fn new(dialect: Dialect, files: &[(&str, &str)]) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        fs::create_dir_all(&ws).unwrap();
        for (p, c) in files {
            let abs = ws.join(p);
            fs::create_dir_all(abs.parent().unwrap()).unwrap();
            fs::write(abs, c).unwrap();
        }
        let ws = ws.canonicalize().unwrap();
        let state = tmp.path().join("state");
        let env =
            Arc::new(ToolEnv::open_with_state(&ws, Catalog::builtin(), Some(&state)).unwrap());
        let tools = dialect::tools(&env, dialect)
            .unwrap()
            .into_iter()
            .map(|t| t.tool)
            .collect();
        Self {
            tmp,
            ws,
            env,
            tools,
        }
    }
}
