//! Protected paths in the file tools: writes to git hooks and config are refused with a clear
//! error, reads still work, normal files and Toolyard's own artifacts are still written.

use std::fs;
use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};
use toolyard_core::{Catalog, Tool, ToolContext, ToolError, ToolResult};
use toolyard_dialects::{self as dialect, Dialect};
use toolyard_tools::ToolEnv;

struct Fixture {
    _tmp: tempfile::TempDir,
    ws: std::path::PathBuf,
    tools: Vec<Arc<dyn Tool>>,
}

impl Fixture {
    fn new(catalog: Catalog) -> Result<Self, ToolError> {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        let state = tmp.path().join("state");
        fs::create_dir_all(ws.join(".git/hooks")).unwrap();
        fs::write(ws.join(".git/config"), "[core]\n\tbare = false\n").unwrap();
        fs::write(ws.join("notes.txt"), "hello world\n").unwrap();
        let env = Arc::new(ToolEnv::open_with_state(&ws, catalog, Some(&state))?);
        let tools = dialect::tools(&env, Dialect::Loopr)?
            .into_iter()
            .map(|t| t.tool)
            .collect();
        Ok(Self {
            _tmp: tmp,
            ws,
            tools,
        })
    }

    async fn call(&self, name: &str, args: Value) -> Result<ToolResult, ToolError> {
        let tool = self.tools.iter().find(|t| t.name() == name).unwrap();
        let ctx = ToolContext::new(self.ws.canonicalize().unwrap(), "s1");
        tool.invoke(args, &ctx).await
    }
}

fn refused(result: Result<ToolResult, ToolError>, path: &str) -> String {
    match result {
        Err(e @ ToolError::Blocked { .. }) => {
            let text = e.to_string();
            assert!(text.contains(path), "names {path}: {text}");
            assert!(text.contains("runs code outside the sandbox"), "{text}");
            text
        }
        other => panic!("expected a refusal for {path}, got {other:?}"),
    }
}

#[tokio::test]
async fn writing_a_git_hook_is_refused() {
    let f = Fixture::new(Catalog::builtin()).unwrap();
    let result = f
        .call(
            "write_file",
            json!({"path": ".git/hooks/pre-commit", "content": "#!/bin/sh\nevil\n"}),
        )
        .await;
    refused(result, ".git/hooks");
    assert!(!f.ws.join(".git/hooks/pre-commit").exists());
}

#[tokio::test]
async fn editing_git_config_is_refused_but_reading_it_works() {
    let f = Fixture::new(Catalog::builtin()).unwrap();
    let read = f
        .call("read_file", json!({"path": ".git/config"}))
        .await
        .expect("read_file still reads a protected path");
    assert!(format!("{read:?}").contains("bare = false"));
    let result = f
        .call(
            "edit_file",
            json!({"path": ".git/config", "old_string": "bare = false", "new_string": "fsmonitor = ./x"}),
        )
        .await;
    refused(result, ".git/config");
    assert_eq!(
        fs::read_to_string(f.ws.join(".git/config")).unwrap(),
        "[core]\n\tbare = false\n"
    );
}

#[tokio::test]
async fn normal_files_and_artifacts_are_still_written() {
    let f = Fixture::new(Catalog::builtin()).unwrap();
    f.call(
        "write_file",
        json!({"path": "src/lib.rs", "content": "pub fn f() {}\n"}),
    )
    .await
    .expect("a normal file is written");
    f.call("read_file", json!({"path": "notes.txt"}))
        .await
        .unwrap();
    f.call(
        "edit_file",
        json!({"path": "notes.txt", "old_string": "world", "new_string": "there"}),
    )
    .await
    .expect("a normal file is edited");
    assert_eq!(
        fs::read_to_string(f.ws.join("notes.txt")).unwrap(),
        "hello there\n"
    );
    // `.toolyard` is protected, but Toolyard's own artifact tools write beneath it.
    f.call(
        "create_plan",
        json!({
            "title": "Ship it",
            "overview": "Ship the thing.",
            "specs": [{"name": "one", "title": "One", "description": "The first."}]
        }),
    )
    .await
    .expect("create_plan writes .toolyard/artifacts");
    assert!(has_file_under(&f.ws.join(".toolyard/artifacts")));
    let result = f
        .call(
            "write_file",
            json!({"path": ".toolyard/catalog.toml", "content": "[hooks]\n"}),
        )
        .await;
    refused(result, ".toolyard");
}

fn has_file_under(dir: &Path) -> bool {
    fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            let p = e.path();
            p.is_file() || has_file_under(&p)
        })
    })
}

#[tokio::test]
async fn the_catalog_list_replaces_the_defaults_and_a_bad_section_is_named() {
    let catalog =
        Catalog::parse_over_builtin("[sandbox]\nprotected_paths = [\"Makefile\"]\n", "c.toml")
            .unwrap();
    let f = Fixture::new(catalog).unwrap();
    refused(
        f.call(
            "write_file",
            json!({"path": "Makefile", "content": "all:\n"}),
        )
        .await,
        "Makefile",
    );
    f.call(
        "write_file",
        json!({"path": ".git/hooks/pre-commit", "content": "allowed by this catalog\n"}),
    )
    .await
    .expect("not in the custom list");

    let catalog =
        Catalog::parse_over_builtin("[sandbox]\nprotected_paths = \"Makefile\"\n", "c.toml")
            .unwrap();
    match Fixture::new(catalog) {
        Err(ToolError::InvalidArguments(text)) => {
            // The value at fault, by line and column, in its section.
            assert!(text.contains("line 2, column 19: [sandbox]"), "{text}")
        }
        Err(other) => panic!("expected InvalidArguments, got {other:?}"),
        Ok(_) => panic!("expected a bad [sandbox] section to be refused"),
    }
}
