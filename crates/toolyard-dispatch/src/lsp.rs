//! The dispatcher's language servers: built from the catalog's `[lsp]`, started through
//! `toolyard lane-exec` when calls run in lanes, and the diagnostics step after each call.

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;
use toolyard_core::ToolResult;
use toolyard_lsp::{Launcher, LspConfig, Manager};
use toolyard_tools::ToolEnv;

use crate::{DispatcherConfig, Mode};

/// The language-server manager of a dispatcher: sandboxed like the no-net lane (with the heavy
/// lane's limits) when calls run in lanes, plain children when they run inline.
pub(crate) fn manager(config: &DispatcherConfig, lsp: &LspConfig, root: &Path) -> Arc<Manager> {
    let launcher = match &config.mode {
        Mode::Inline => Launcher::Direct,
        Mode::Lanes { exe } => Launcher::Sandboxed {
            exe: exe.clone(),
            workspace: root.to_path_buf(),
            catalog: config.catalog_path.clone(),
            state_dir: config.state_dir.clone(),
        },
    };
    Manager::new(root, lsp.clone(), launcher)
}

/// `result` with what its call did to the problems of the files it changed (see
/// [`toolyard_tools::lsp::after_call`]), on a thread that may block: the wait for a server
/// never holds an async thread.
pub(crate) async fn with_diagnostics(
    env: &Arc<ToolEnv>,
    (engine, session, args): (&'static str, String, Value),
    mut result: ToolResult,
) -> ToolResult {
    if env.lsp.is_none() {
        return result;
    }
    if !toolyard_tools::lsp::may_block(engine, &result) {
        toolyard_tools::lsp::after_call(env, engine, &session, &args, &mut result);
        return result;
    }
    let env = env.clone();
    let saved = result.clone();
    match tokio::task::spawn_blocking(move || {
        toolyard_tools::lsp::after_call(&env, engine, &session, &args, &mut result);
        result
    })
    .await
    {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "the diagnostics step failed");
            saved
        }
    }
}
