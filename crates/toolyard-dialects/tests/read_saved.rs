//! The full output of a cut command (`$STATE/outputs/<id>.log`) is read by `read_file` (and
//! every dialect's read) and searched by `grep`, by the path its note gave or `output:<id>`;
//! nothing else of Toolyard's state is, and no symlink or FIFO there is followed or waited on.

use std::fs;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Value, json};
use toolyard_core::{Tool, ToolContext, ToolResult};
use toolyard_dialects::Dialect;

mod common;

fn tool(w: &common::DialectWorkspace, name: &str) -> Arc<dyn Tool> {
    w.tools
        .iter()
        .find(|t| t.name() == name)
        .unwrap_or_else(|| panic!("no tool {name}"))
        .clone()
}

async fn call(w: &common::DialectWorkspace, name: &str, args: Value) -> ToolResult {
    let ctx = ToolContext::new(&w.ws, "s1");
    ToolResult::from(tool(w, name).invoke(args, &ctx).await)
}

/// A workspace of `dialect` with a saved output `call-7.log` of 3,000 numbered lines; its path.
fn with_output(dialect: Dialect) -> (common::DialectWorkspace, PathBuf) {
    let w = common::DialectWorkspace::new(dialect, &[("src/a.rs", "fn a() {}\n")]);
    let path = w.env.state.outputs_dir().join("call-7.log");
    let body: String = (1..=3000).map(|i| format!("out {i}\n")).collect();
    fs::write(&path, body).expect("write the saved output");
    (w, path)
}

#[tokio::test]
async fn read_file_reads_a_saved_output_by_its_path_or_id() {
    let (w, path) = with_output(Dialect::Loopr);
    let shown = path.display().to_string();
    let r = call(
        &w,
        "read_file",
        json!({"path": shown, "offset": 1500, "limit": 2}),
    )
    .await;
    assert!(r.success, "{}", r.output);
    assert_eq!(
        r.output,
        format!(
            "  1500|out 1500\n  1501|out 1501\n[{shown} has 3000 lines; showing lines 1500-1501; continue with offset=1502]\n"
        )
    );
    let r = call(
        &w,
        "read_file",
        json!({"path": "output:call-7", "offset": 3000}),
    )
    .await;
    assert_eq!(r.output, "  3000|out 3000\n", "{}", r.output);
    // With workspace files in one call.
    let r = call(
        &w,
        "read_file",
        json!({"reads": [{"path": "src/a.rs"}, {"path": "output:call-7", "offset": 2, "limit": 1}]}),
    )
    .await;
    assert!(
        r.output.contains("==> output:call-7 <==\n     2|out 2\n"),
        "{}",
        r.output
    );
}

#[tokio::test]
async fn grep_searches_a_saved_output() {
    let (w, path) = with_output(Dialect::Loopr);
    let shown = path.display().to_string();
    let r = call(
        &w,
        "grep",
        json!({"pattern": "^out 299[89]$", "path": shown}),
    )
    .await;
    assert_eq!(
        r.output,
        format!("{shown}:2998:out 2998\n{shown}:2999:out 2999\n"),
        "{}",
        r.output
    );
    let r = call(
        &w,
        "grep",
        json!({"pattern": "absent", "path": "output:call-7"}),
    )
    .await;
    assert_eq!(
        r.output,
        "No matches for `absent` in output:call-7 (1 files searched).\n"
    );
    let r = call(
        &w,
        "grep",
        json!({"pattern": "out 1", "path": "output:call-7", "output_mode": "count"}),
    )
    .await;
    assert_eq!(r.output, "output:call-7:1111\n");
}

#[tokio::test]
async fn every_dialects_read_reads_a_saved_output() {
    for (dialect, name, args, want) in [
        (
            Dialect::ClaudeCode,
            "Read",
            json!({"file_path": "output:call-7", "offset": 2999}),
            "  2999\tout 2999\n  3000\tout 3000",
        ),
        (
            Dialect::Gemini,
            "read_file",
            json!({"file_path": "output:call-7", "start_line": 3000}),
            "  3000|out 3000\n",
        ),
        (
            Dialect::Anthropic,
            "str_replace_based_edit_tool",
            json!({"command": "view", "path": "output:call-7", "view_range": [3000, -1]}),
            "  3000\tout 3000\n",
        ),
        (
            Dialect::LoomPy,
            "read_file",
            json!({"path": "output:call-7", "line_range": [3000, 3000]}),
            "out 3000\n",
        ),
        (
            Dialect::Loom,
            "read_file",
            json!({"path": "output:call-7"}),
            "out 3000\n",
        ),
    ] {
        let (w, _) = with_output(dialect);
        let r = call(&w, name, args).await;
        assert!(r.success, "{dialect}: {}", r.output);
        let text = if dialect == Dialect::Loom {
            r.data
                .as_ref()
                .map(|d| d["contents"].as_str().unwrap_or("").to_string())
                .unwrap_or_default()
        } else {
            r.output.clone()
        };
        assert!(text.contains(want), "{dialect}: {text}");
    }
}

#[tokio::test]
async fn nothing_else_of_the_state_is_read_and_no_link_is_followed() {
    let (w, path) = with_output(Dialect::Loopr);
    let outputs = path.parent().expect("outputs dir").to_path_buf();
    let state = outputs.parent().expect("state dir").to_path_buf();
    fs::write(state.join("secret.log"), "secret\n").expect("write");
    let outside = w.tmp.path().join("outside.txt");
    fs::write(&outside, "outside\n").expect("write");
    std::os::unix::fs::symlink(&outside, outputs.join("link.log")).expect("symlink");
    std::os::unix::fs::symlink(&state, outputs.join("up.log")).expect("symlink");
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        outputs.join("fifo.log"),
        rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
    )
    .expect("fifo");
    let cases = [
        // Other files of the state: not the outputs directory, so a path outside the workspace.
        (
            state.join("secret.log").display().to_string(),
            "outside the workspace",
        ),
        (
            format!("{}/../secret.log", outputs.display()),
            "outside the workspace",
        ),
        (
            state.join("state.db").display().to_string(),
            "outside the workspace",
        ),
        (
            "output:../secret".into(),
            "does not name a saved command output",
        ),
        ("output:".into(), "does not name a saved command output"),
        (
            "output:.hidden".into(),
            "does not name a saved command output",
        ),
        ("output:nope".into(), "no saved output"),
        // Links in the outputs directory are not followed; a FIFO is not waited on.
        (
            outputs.join("link.log").display().to_string(),
            "cannot open the saved output",
        ),
        ("output:up".into(), "cannot open the saved output"),
        ("output:fifo".into(), "cannot open the saved output"),
        (
            format!("{}/sub/x.log", outputs.display()),
            "outside the workspace",
        ),
    ];
    for (arg, why) in cases {
        for name in ["read_file", "grep"] {
            let args = if name == "grep" {
                json!({"pattern": "secret|outside", "path": arg})
            } else {
                json!({"path": arg})
            };
            let r = call(&w, name, args).await;
            assert!(!r.success, "{name} {arg}: {}", r.output);
            assert!(r.output.contains(why), "{name} {arg}: {}", r.output);
            assert!(
                !r.output.contains("secret\n") && !r.output.contains(":outside"),
                "{}",
                r.output
            );
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]

    /// Whatever path a call gives, built from the pieces an escape would use, read_file and
    /// grep show only the workspace's files and the saved outputs: never another state file,
    /// a file outside, or what a link in the outputs directory points to.
    #[test]
    fn no_path_reaches_other_state_or_outside(
        pieces in proptest::collection::vec(
            proptest::sample::select(vec![
                "output:", "OUTPUTS", "STATE", "/", "../", "./", "secret", "call-7", ".log",
                "link", "state.db", "src/a.rs", "%2e%2e", "\u{0}", "//", "~",
            ]),
            1..7,
        ),
    ) {
        let (w, path) = with_output(Dialect::Loopr);
        let outputs = path.parent().expect("outputs").to_path_buf();
        let state = outputs.parent().expect("state").to_path_buf();
        let _ = fs::write(state.join("secret.log"), "SECRET-STATE\n");
        let _ = fs::write(state.join("secret"), "SECRET-STATE\n");
        let outside = w.tmp.path().join("secret.log");
        let _ = fs::write(&outside, "SECRET-OUTSIDE\n");
        let _ = std::os::unix::fs::symlink(&outside, outputs.join("link.log"));
        let arg: String = pieces
            .iter()
            .map(|p| match *p {
                "OUTPUTS" => outputs.display().to_string(),
                "STATE" => state.display().to_string(),
                other => other.to_string(),
            })
            .collect();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
        for args in [
            json!({"path": arg}),
            json!({"paths": [arg, "src/a.rs"]}),
            json!({"pattern": "SECRET|out 1$|fn", "path": arg}),
        ] {
            let name = if args.get("pattern").is_some() { "grep" } else { "read_file" };
            let r = rt.block_on(call(&w, name, args));
            proptest::prop_assert!(!r.output.contains("SECRET"), "{} {}: {}", name, arg, r.output);
        }
    }
}
