//! The codex dialect's `apply_patch`: Codex's texts, the stricter matching (ambiguity refused,
//! nearest lines shown), all-or-nothing application, confinement, and undo through the journal.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;
use toolyard_core::{Tool, ToolContext, ToolError, ToolResult};
use toolyard_dialects::Dialect;
use toolyard_tools::ToolEnv;
use toolyard_tools::patch;

mod common;

struct Fixture {
    tmp: tempfile::TempDir,
    ws: PathBuf,
    env: Arc<ToolEnv>,
    tools: Vec<Arc<dyn Tool>>,
}

impl Fixture {
    fn new(files: &[(&str, &str)]) -> Self {
        let common::DialectWorkspace {
            tmp,
            ws,
            env,
            tools,
        } = common::DialectWorkspace::new(Dialect::Codex, files);
        Self {
            tmp,
            ws,
            env,
            tools,
        }
    }

    fn ctx(&self, call: &str) -> ToolContext {
        let mut ctx = ToolContext::new(&self.ws, "s1");
        ctx.call_id = call.into();
        ctx
    }

    async fn call(&self, name: &str, args: serde_json::Value) -> Result<ToolResult, ToolError> {
        let tool = self.tools.iter().find(|t| t.name() == name).unwrap();
        let call = format!("call-{}", fastrand_id());
        tool.invoke(args, &self.ctx(&call)).await
    }

    async fn patch(&self, text: &str) -> Result<ToolResult, ToolError> {
        self.call("apply_patch", json!({ "input": text })).await
    }

    fn read(&self, p: &str) -> Option<String> {
        fs::read_to_string(self.ws.join(p)).ok()
    }

    /// Every entry under the workspace, with file contents, for "nothing changed" checks.
    fn snapshot(&self) -> Vec<(String, Option<Vec<u8>>)> {
        fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, Option<Vec<u8>>)>) {
            for e in fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                if p.is_dir() {
                    out.push((rel, None));
                    walk(root, &p, out);
                } else {
                    out.push((rel, Some(fs::read(&p).unwrap())));
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.ws, &self.ws, &mut out);
        out.sort();
        out
    }
}

fn fastrand_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(1);
    N.fetch_add(1, Ordering::Relaxed)
}

fn err_text(r: Result<ToolResult, ToolError>) -> String {
    match r {
        Err(e) => e.to_string(),
        Ok(r) => panic!("expected an error, got {}", r.output),
    }
}

#[tokio::test]
async fn success_lists_added_modified_and_deleted_files_as_codex_does() {
    let f = Fixture::new(&[
        ("modify.txt", "line1\nline2\n"),
        ("delete.txt", "obsolete\n"),
        ("old/name.txt", "old content\n"),
    ]);
    let out = f
        .patch(
            "*** Begin Patch\n*** Add File: nested/new.txt\n+created\n*** Delete File: delete.txt\n\
             *** Update File: modify.txt\n@@\n-line2\n+changed\n*** Update File: old/name.txt\n\
             *** Move to: renamed/name.txt\n@@\n-old content\n+new content\n*** End Patch\n",
        )
        .await
        .unwrap();
    assert!(out.success);
    // Codex's summary first, as Codex words it; then each updated file's changed lines.
    let (summary, shown) = out.output.split_once("\n\n").unwrap();
    assert_eq!(
        summary,
        "Success. Updated the following files:\nA nested/new.txt\nM modify.txt\nM renamed/name.txt\nD delete.txt"
    );
    assert_eq!(
        shown,
        "modify.txt:\n     1|line1\n     2|changed\n\nrenamed/name.txt:\n     1|new content"
    );
    assert_eq!(f.read("nested/new.txt").unwrap(), "created\n");
    assert_eq!(f.read("modify.txt").unwrap(), "line1\nchanged\n");
    assert_eq!(f.read("renamed/name.txt").unwrap(), "new content\n");
    assert_eq!(f.read("old/name.txt"), None);
    assert_eq!(f.read("delete.txt"), None);
    let mut changed = out.files_changed.clone();
    changed.sort();
    assert_eq!(
        changed,
        [
            "delete.txt",
            "modify.txt",
            "nested/new.txt",
            "old/name.txt",
            "renamed/name.txt"
        ]
    );
}

#[tokio::test]
async fn two_matching_windows_are_refused_with_their_line_numbers() {
    let text = "fn a() {\n    x += 1;\n}\nfn b() {\n    x += 1;\n}\n";
    let f = Fixture::new(&[("lib.rs", text)]);
    let before = f.snapshot();
    let e = err_text(
        f.patch("*** Begin Patch\n*** Update File: lib.rs\n@@\n-    x += 1;\n+    x += 2;\n*** End Patch")
            .await,
    );
    assert!(e.contains("Ambiguous patch for lib.rs"), "{e}");
    assert!(e.contains("starting at lines 2, 5"), "{e}");
    assert!(e.contains("Codex would change the first"), "{e}");
    assert_eq!(f.snapshot(), before);
    // An @@ anchor says which one: the first match after it, as Codex.
    f.patch("*** Begin Patch\n*** Update File: lib.rs\n@@ fn b() {\n-    x += 1;\n+    x += 2;\n*** End Patch")
        .await
        .unwrap();
    assert_eq!(
        f.read("lib.rs").unwrap(),
        "fn a() {\n    x += 1;\n}\nfn b() {\n    x += 2;\n}\n"
    );
}

#[tokio::test]
async fn ambiguity_is_judged_at_the_first_pass_that_matches() {
    // Exact matches once (line 3); trimmed it would match twice: the exact pass decides.
    let f = Fixture::new(&[("a.txt", "  v = 1\nw\nv = 1\n")]);
    f.patch("*** Begin Patch\n*** Update File: a.txt\n@@\n-v = 1\n+v = 2\n*** End Patch")
        .await
        .unwrap();
    assert_eq!(f.read("a.txt").unwrap(), "  v = 1\nw\nv = 2\n");
}

#[tokio::test]
async fn missing_lines_are_reported_with_the_nearest_real_lines() {
    let f = Fixture::new(&[(
        "calc.py",
        "import os\n\ndef compute(x):\n    return x + 1\n\nprint(compute(2))\n",
    )]);
    let e = err_text(
        f.patch(
            "*** Begin Patch\n*** Update File: calc.py\n@@\n def compute(y):\n-    return y + 1\n+    return y + 2\n*** End Patch",
        )
        .await,
    );
    assert!(
        e.contains("Failed to find expected lines in calc.py:\ndef compute(y):\n    return y + 1"),
        "{e}"
    );
    assert!(e.contains("The nearest lines in calc.py are 3-4:"), "{e}");
    assert!(
        e.contains("     3|def compute(x):\n     4|    return x + 1"),
        "{e}"
    );
}

#[tokio::test]
async fn typographic_punctuation_and_whitespace_passes_match() {
    let f = Fixture::new(&[(
        "doc.md",
        "Title\n\u{201C}quoted\u{201D} \u{2014} dash   \n  indented\n",
    )]);
    let out = f
        .patch(
            "*** Begin Patch\n*** Update File: doc.md\n@@\n Title\n-\"quoted\" - dash\n-  indented\n+plain\n*** End Patch",
        )
        .await
        .unwrap();
    assert_eq!(f.read("doc.md").unwrap(), "Title\nplain\n");
    assert!(
        out.output.contains(
            "doc.md: The chunk matched with typographic quotes, dashes and spaces made plain."
        ),
        "{}",
        out.output
    );
}

#[tokio::test]
async fn a_failing_hunk_leaves_every_file_untouched_and_names_the_file() {
    // Scenario 015's patch: Codex's standalone binary keeps created.txt; Toolyard does not.
    let f = Fixture::new(&[("keep.txt", "k\n")]);
    let before = f.snapshot();
    let e = err_text(
        f.patch("*** Begin Patch\n*** Add File: created.txt\n+hello\n*** Update File: missing.txt\n@@\n-old\n+new\n*** End Patch\n")
            .await,
    );
    assert!(
        e.contains("Failed to read file to update missing.txt: No such file or directory"),
        "{e}"
    );
    assert_eq!(f.snapshot(), before);
}

#[tokio::test]
async fn a_change_behind_the_patch_between_check_and_write_rolls_back_the_written_files() {
    let f = Fixture::new(&[("a.txt", "a\n"), ("b.txt", "b\n")]);
    let hunks = patch::parse_patch(
        "*** Begin Patch\n*** Update File: a.txt\n@@\n-a\n+A\n*** Update File: b.txt\n@@\n-b\n+B\n*** End Patch",
    )
    .unwrap();
    let ctx = f.ctx("call-race");
    let plan = patch::plan(&f.env, &f.ws, &hunks).unwrap();
    // Someone else changes b.txt after the patch was checked.
    fs::write(f.ws.join("b.txt"), "b changed\n").unwrap();
    let e = patch::apply(&f.env, &ctx, &plan)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("apply_patch stopped at b.txt"), "{e}");
    assert!(e.contains("restored, so the workspace is as before"), "{e}");
    assert_eq!(f.read("a.txt").unwrap(), "a\n");
    assert_eq!(f.read("b.txt").unwrap(), "b changed\n");
}

#[tokio::test]
async fn no_prior_read_is_needed_and_add_overwrites() {
    let f = Fixture::new(&[("dup.txt", "old\n")]);
    f.patch("*** Begin Patch\n*** Add File: dup.txt\n+new\n*** End Patch")
        .await
        .unwrap();
    assert_eq!(f.read("dup.txt").unwrap(), "new\n");
}

#[tokio::test]
async fn one_undo_reverts_the_whole_patch() {
    let f = Fixture::new(&[("a.txt", "one\n"), ("b.txt", "two\n")]);
    f.patch("*** Begin Patch\n*** Update File: a.txt\n@@\n-one\n+uno\n*** Delete File: b.txt\n*** End Patch")
        .await
        .unwrap();
    assert_eq!(f.read("b.txt"), None);
    let r = f.call("undo", json!({})).await.unwrap();
    assert_eq!(f.read("b.txt").unwrap(), "two\n");
    assert_eq!(f.read("a.txt").unwrap(), "one\n", "{}", r.output);
    assert!(r.output.contains("together"), "{}", r.output);
}

#[tokio::test]
async fn paths_outside_the_workspace_are_refused_and_absolute_inside_accepted() {
    let f = Fixture::new(&[("in.txt", "x\n")]);
    let outside = f.tmp.path().join("outside.txt");
    for path in ["../outside.txt".to_string(), outside.display().to_string()] {
        let e = f
            .patch(&format!(
                "*** Begin Patch\n*** Add File: {path}\n+x\n*** End Patch"
            ))
            .await
            .unwrap_err();
        assert!(matches!(e, ToolError::PathOutsideWorkspace { .. }), "{e}");
    }
    let e = f
        .patch("*** Begin Patch\n*** Update File: in.txt\n*** Move to: ../moved.txt\n@@\n-x\n+y\n*** End Patch")
        .await
        .unwrap_err();
    assert!(matches!(e, ToolError::PathOutsideWorkspace { .. }), "{e}");
    assert!(!outside.exists() && !f.tmp.path().join("moved.txt").exists());
    assert_eq!(f.read("in.txt").unwrap(), "x\n");
    let inside = f.ws.join("in.txt").display().to_string();
    f.patch(&format!(
        "*** Begin Patch\n*** Update File: {inside}\n@@\n-x\n+y\n*** End Patch"
    ))
    .await
    .unwrap();
    assert_eq!(f.read("in.txt").unwrap(), "y\n");
}

#[tokio::test]
async fn crlf_and_bom_survive_an_update() {
    let f = Fixture::new(&[("w.txt", "\u{FEFF}a\r\nb\r\nc\r\n")]);
    f.patch("*** Begin Patch\n*** Update File: w.txt\n@@\n a\n-b\n+B\n*** End Patch")
        .await
        .unwrap();
    assert_eq!(f.read("w.txt").unwrap(), "\u{FEFF}a\r\nB\r\nc\r\n");
}

#[tokio::test]
async fn parse_errors_use_codex_texts() {
    let f = Fixture::new(&[("foo.txt", "stable\n")]);
    let e = err_text(
        f.patch("*** Begin Patch\n*** Update File: foo.txt\n*** End Patch")
            .await,
    );
    assert!(
        e.contains("Invalid patch hunk on line 2: Update file hunk for path 'foo.txt' is empty"),
        "{e}"
    );
    let e = err_text(
        f.patch("*** Begin Patch\n*** Frobnicate File: foo\n*** End Patch")
            .await,
    );
    assert!(e.contains("Invalid patch hunk on line 2: '*** Frobnicate File: foo' is not a valid hunk header. Valid hunk headers: '*** Add File: {path}', '*** Delete File: {path}', '*** Update File: {path}'"), "{e}");
    let e = err_text(
        f.patch("*** Update File: foo.txt\n@@\n-stable\n+x\n*** End Patch")
            .await,
    );
    assert!(
        e.contains("The first line of the patch must be '*** Begin Patch'"),
        "{e}"
    );
    let e = err_text(f.patch("*** Begin Patch\n*** End Patch").await);
    assert!(e.contains("No files were modified."), "{e}");
    assert_eq!(f.read("foo.txt").unwrap(), "stable\n");
}

#[tokio::test]
async fn a_heredoc_wrapper_is_accepted() {
    let f = Fixture::new(&[("foo.txt", "old\n")]);
    f.patch(
        "<<'EOF'\n*** Begin Patch\n*** Update File: foo.txt\n@@\n-old\n+new\n*** End Patch\nEOF\n",
    )
    .await
    .unwrap();
    assert_eq!(f.read("foo.txt").unwrap(), "new\n");
}

#[test]
fn chunks_must_follow_file_order_and_end_of_file_anchors_at_the_end() {
    let c = |old: &[&str], new: &[&str], eof: bool| patch::Chunk {
        context: None,
        lines: old
            .iter()
            .map(|s| patch::PatchLine::Removed(s.to_string()))
            .chain(new.iter().map(|s| patch::PatchLine::Added(s.to_string())))
            .collect(),
        end_of_file: eof,
    };
    let out = patch::apply_chunks("t", "x\ny\nx\n", &[c(&["x"], &["X"], true)]).unwrap();
    assert_eq!(out.text, "x\ny\nX\n");
    let e = patch::apply_chunks(
        "t",
        "a\nb\nc\n",
        &[c(&["c"], &["C"], false), c(&["a"], &["A"], false)],
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("searched from line 4 on"), "{e}");
}

#[tokio::test]
async fn a_one_line_miss_names_the_nearest_line() {
    let f = Fixture::new(&[("x.json", "{\"a\":1}\n")]);
    let e = err_text(
        f.patch(
            "*** Begin Patch\n*** Update File: x.json\n@@\n-{\"a\": 1}\n+{\"a\": 2}\n*** End Patch",
        )
        .await,
    );
    assert!(
        e.contains("The nearest line in x.json is line 1:\n     1|{\"a\":1}"),
        "{e}"
    );
}

#[tokio::test]
async fn a_change_may_join_and_roll_back_only_its_own_call_s_group() {
    // A runner's records requests name a group by change id: one of another call (or another
    // session) is refused, so a runner cannot tie its change to, or roll back, someone else's.
    let f = Fixture::new(&[("a.txt", "a\n"), ("b.txt", "b\n")]);
    let hunks = patch::parse_patch(
        "*** Begin Patch\n*** Update File: a.txt\n@@\n-a\n+A\n*** Update File: b.txt\n@@\n-b\n+B\n*** End Patch",
    )
    .unwrap();
    let plan = patch::plan(&f.env, &f.ws, &hunks).unwrap();
    patch::apply(&f.env, &f.ctx("call-a"), &plan).await.unwrap();
    let first = f
        .env
        .local
        .as_ref()
        .unwrap()
        .journal
        .last_of_session("s1")
        .unwrap()
        .unwrap()
        .group
        .unwrap()
        .0;
    let rel = toolyard_workspace::RelPath::from_normalized("b.txt");
    let refused = |r: Result<i64, ToolError>| {
        let e = r.unwrap_err();
        assert!(matches!(e, ToolError::Blocked { .. }), "{e}");
        assert!(
            e.to_string()
                .contains("a call may only group its own changes"),
            "{e}"
        );
    };
    let records = &f.env.records;
    refused(
        records
            .journal_begin_grouped("s1", "call-b", "apply_patch", &rel, "h", Some(first))
            .await,
    );
    refused(
        records
            .journal_begin_removal("s2", "call-a", "apply_patch", &rel, Some(first))
            .await,
    );
    let pre = toolyard_records::PreImage {
        content: Some(b"B\n"),
        mode: Some(0o644),
    };
    refused(
        records
            .journal_begin_preimage("s1", "call-b", "apply_patch", &rel, None, Some(first), pre)
            .await,
    );
    let e = records
        .roll_back_call("s1", "call-b", first)
        .await
        .unwrap_err();
    assert!(matches!(e, ToolError::Blocked { .. }), "{e}");
    assert_eq!(f.read("a.txt").unwrap(), "A\n");
    assert_eq!(f.read("b.txt").unwrap(), "B\n");
    // Its own call may.
    let undone = records.roll_back_call("s1", "call-a", first).await.unwrap();
    assert_eq!(undone.len(), 2);
    assert_eq!(f.read("a.txt").unwrap(), "a\n");
    assert_eq!(f.read("b.txt").unwrap(), "b\n");
}
