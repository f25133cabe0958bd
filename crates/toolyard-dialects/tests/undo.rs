//! `undo` through the loopr tools: a file already back to its content from before a change
//! (a formatter undid the edit) is marked undone without a write instead of refused, and every
//! undo names the call that takes it back (`undo {"change_id": N}`).

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{Value, json};
use toolyard_core::{Tool, ToolContext, ToolResult};
use toolyard_dialects::Dialect;

mod common;

struct Fixture {
    w: common::DialectWorkspace,
    calls: std::sync::atomic::AtomicU64,
}

impl Fixture {
    fn new(dialect: Dialect, files: &[(&str, &str)]) -> Self {
        Self {
            w: common::DialectWorkspace::new(dialect, files),
            calls: Default::default(),
        }
    }

    fn tool(&self, name: &str) -> Arc<dyn Tool> {
        self.w
            .tools
            .iter()
            .find(|t| t.name() == name)
            .unwrap_or_else(|| panic!("no tool {name}"))
            .clone()
    }

    async fn call(&self, name: &str, args: Value) -> ToolResult {
        let n = self
            .calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut ctx = ToolContext::new(&self.w.ws, "s1");
        ctx.call_id = format!("c{n}");
        ToolResult::from(self.tool(name).invoke(args, &ctx).await)
    }

    fn read(&self, rel: &str) -> Option<String> {
        fs::read_to_string(self.w.ws.join(rel)).ok()
    }

    fn put(&self, rel: &str, content: &str) {
        fs::write(self.w.ws.join(rel), content).expect("write");
    }

    /// Read then write `rel` through the tools; the change's id.
    async fn change(&self, rel: &str, content: &str) -> i64 {
        let r = self.call("read_file", json!({"path": rel})).await;
        assert!(r.success || !self.w.ws.join(rel).exists(), "{}", r.output);
        let r = self
            .call("write_file", json!({"path": rel, "content": content}))
            .await;
        assert!(r.success, "{}", r.output);
        self.w
            .env
            .local
            .as_ref()
            .expect("local records")
            .journal
            .last_of_session("s1")
            .expect("journal")
            .expect("the change")
            .id
            .0
    }
}

/// The change id in a `undo {"change_id": N}` hint of `text`.
fn hinted_id(text: &str) -> i64 {
    let at = text
        .find("undo {\"change_id\": ")
        .unwrap_or_else(|| panic!("no redo hint in {text}"));
    text[at + "undo {\"change_id\": ".len()..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap_or_else(|_| panic!("no id in the hint of {text}"))
}

#[tokio::test]
async fn undo_of_a_change_already_reverted_outside_says_so_and_writes_nothing() {
    let f = Fixture::new(Dialect::Loopr, &[("s.rs", "first = true;\n")]);
    let id = f.change("s.rs", "first=true;\n").await;
    // A formatter puts back exactly what was there before the change.
    f.put("s.rs", "first = true;\n");
    let inode = fs::metadata(f.w.ws.join("s.rs")).expect("meta").ino();
    let r = f.call("undo", json!({})).await;
    assert!(r.success, "{}", r.output);
    assert!(
        r.output
            .contains(&format!("s.rs was already as before change #{id}")),
        "{}",
        r.output
    );
    assert!(r.output.contains("nothing was written"), "{}", r.output);
    assert!(r.files_changed.is_empty(), "{:?}", r.files_changed);
    assert_eq!(r.data.as_ref().expect("data")["already"], true);
    // Nothing was written: same content, same file.
    assert_eq!(f.read("s.rs").as_deref(), Some("first = true;\n"));
    assert_eq!(
        fs::metadata(f.w.ws.join("s.rs")).expect("meta").ino(),
        inode
    );
    // It is marked undone: the session has nothing left to undo, and undoing it again is
    // refused as already undone.
    let r = f.call("undo", json!({})).await;
    assert!(
        !r.success && r.output.contains("no change left"),
        "{}",
        r.output
    );
    let r = f.call("undo", json!({"change_id": id})).await;
    assert!(
        !r.success && r.output.contains("already undone"),
        "{}",
        r.output
    );
}

#[tokio::test]
async fn a_created_file_already_removed_is_marked_undone() {
    let f = Fixture::new(Dialect::Loopr, &[]);
    let id = f.change("new.txt", "hi\n").await;
    fs::remove_file(f.w.ws.join("new.txt")).expect("rm");
    let r = f.call("undo", json!({"change_id": id})).await;
    assert!(r.success, "{}", r.output);
    assert!(
        r.output
            .contains(&format!("new.txt was already as before change #{id}")),
        "{}",
        r.output
    );
    assert!(f.read("new.txt").is_none());
}

#[tokio::test]
async fn a_file_changed_to_something_else_is_still_refused() {
    let f = Fixture::new(Dialect::Loopr, &[("a.txt", "one\n")]);
    f.change("a.txt", "two\n").await;
    f.put("a.txt", "three\n");
    let r = f.call("undo", json!({})).await;
    assert!(!r.success, "{}", r.output);
    assert!(r.output.contains("changed since change"), "{}", r.output);
    assert_eq!(f.read("a.txt").as_deref(), Some("three\n"));
}

#[tokio::test]
async fn the_redo_hint_names_the_undo_and_taking_it_redoes() {
    for dialect in [
        Dialect::Loopr,
        Dialect::Loom,
        Dialect::LoomPy,
        Dialect::Codex,
        Dialect::Gemini,
    ] {
        let f = Fixture::new(Dialect::Loopr, &[("a.txt", "one\n")]);
        let id = f.change("a.txt", "two\n").await;
        let undo = Fixture {
            w: common::DialectWorkspace {
                tmp: tempfile::tempdir().expect("tmp"),
                ws: f.w.ws.clone(),
                env: f.w.env.clone(),
                tools: toolyard_dialects::tools(&f.w.env, dialect)
                    .expect("tools")
                    .into_iter()
                    .map(|t| t.tool)
                    .collect(),
            },
            calls: std::sync::atomic::AtomicU64::new(1000),
        };
        let r = undo.call("undo", json!({"change_id": id})).await;
        assert!(r.success, "{dialect}: {}", r.output);
        assert_eq!(f.read("a.txt").as_deref(), Some("one\n"));
        let redo = hinted_id(&r.output);
        assert!(
            r.output
                .contains(&format!("undo {{\"change_id\": {redo}}} to redo")),
            "{dialect}: {}",
            r.output
        );
        // The hint is the call: it redoes the change.
        let r = undo.call("undo", json!({"change_id": redo})).await;
        assert!(r.success, "{dialect}: {}", r.output);
        assert_eq!(f.read("a.txt").as_deref(), Some("two\n"), "{dialect}");
        let again = hinted_id(&r.output);
        assert!(
            r.output
                .contains(&format!("undo {{\"change_id\": {again}}} to revert again")),
            "{dialect}: {}",
            r.output
        );
    }
}

#[tokio::test]
async fn a_group_undo_names_the_undo_that_redoes_the_whole_group() {
    let f = Fixture::new(Dialect::Codex, &[("a.txt", "one\n"), ("b.txt", "two\n")]);
    let r = f
        .call(
            "apply_patch",
            json!({"input": "*** Begin Patch\n*** Update File: a.txt\n@@\n-one\n+uno\n*** Update File: b.txt\n@@\n-two\n+dos\n*** End Patch"}),
        )
        .await;
    assert!(r.success, "{}", r.output);
    let r = f.call("undo", json!({})).await;
    assert!(r.success, "{}", r.output);
    assert_eq!(f.read("a.txt").as_deref(), Some("one\n"));
    assert!(r.output.contains("to redo (all of them)"), "{}", r.output);
    let r = f
        .call("undo", json!({"change_id": hinted_id(&r.output)}))
        .await;
    assert!(r.success, "{}", r.output);
    assert_eq!(f.read("a.txt").as_deref(), Some("uno\n"));
    assert_eq!(f.read("b.txt").as_deref(), Some("dos\n"));
}

#[tokio::test]
async fn anthropic_undo_edit_of_a_file_already_as_before_says_so() {
    let f = Fixture::new(Dialect::Anthropic, &[("f.py", "x = 1\n")]);
    let tool = "str_replace_editor";
    let path = f.w.ws.join("f.py").display().to_string();
    let r = f.call(tool, json!({"command": "view", "path": path})).await;
    assert!(r.success, "{}", r.output);
    let r = f
        .call(
            tool,
            json!({"command": "str_replace", "path": path, "old_str": "x = 1", "new_str": "x=1"}),
        )
        .await;
    assert!(r.success, "{}", r.output);
    f.put("f.py", "x = 1\n");
    let r = f
        .call(tool, json!({"command": "undo_edit", "path": path}))
        .await;
    assert!(r.success, "{}", r.output);
    assert!(
        r.output
            .contains("already had its content from before that edit"),
        "{}",
        r.output
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Whatever the file holds when undo is called: the file from before the change (marked
    /// undone, not written), the change's own content (restored), or anything else (refused,
    /// untouched). An undo never loses content it was not told to.
    #[test]
    fn undo_restores_marks_or_refuses_by_what_the_file_holds(
        before in "[a-c]{0,3}",
        after in "[a-c]{0,3}",
        now in prop_oneof![Just(None), "[a-c]{0,3}".prop_map(Some)],
    ) {
        prop_assume!(before != after);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
        rt.block_on(async {
            let f = Fixture::new(Dialect::Loopr, &[("p.txt", before.as_str())]);
            f.change("p.txt", &after).await;
            let now = now.unwrap_or_else(|| after.clone());
            f.put("p.txt", &now);
            let r = f.call("undo", json!({})).await;
            let held = f.read("p.txt").unwrap_or_default();
            if now == after || now == before {
                prop_assert!(r.success, "{}", r.output);
                prop_assert_eq!(&held, &before);
                prop_assert_eq!(
                    r.output.contains("already as before"),
                    now == before,
                    "{}",
                    r.output
                );
            } else {
                prop_assert!(!r.success, "{}", r.output);
                prop_assert_eq!(&held, &now);
            }
            Ok(())
        })?;
    }
}
