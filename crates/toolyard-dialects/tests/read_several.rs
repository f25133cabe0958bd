//! `read_file` of several files or ranges in one call (`paths`, `reads`): each after a
//! `==> path <==` line, sharing the output budget, each counted as read for a later edit, a
//! failing one reported in its place.

use std::sync::Arc;

use proptest::prelude::*;
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

async fn call_with(
    w: &common::DialectWorkspace,
    name: &str,
    args: Value,
    budget: usize,
) -> ToolResult {
    let mut ctx = ToolContext::new(&w.ws, "s1");
    ctx.max_output_bytes = budget;
    ToolResult::from(tool(w, name).invoke(args, &ctx).await)
}

async fn call(w: &common::DialectWorkspace, name: &str, args: Value) -> ToolResult {
    call_with(w, name, args, 30_000).await
}

/// `lines` numbered from `first` as read_file shows them.
fn numbered(lines: &[&str], first: usize) -> String {
    lines
        .iter()
        .enumerate()
        .map(|(i, l)| format!("{:>6}|{l}\n", first + i))
        .collect()
}

#[tokio::test]
async fn paths_reads_each_file_under_its_header_and_each_counts_as_read() {
    let w = common::DialectWorkspace::new(
        Dialect::Loopr,
        &[
            ("a.rs", "fn a() {}\n"),
            ("b/c.rs", "one\ntwo\n"),
            ("d.rs", "d\n"),
        ],
    );
    let r = call(&w, "read_file", json!({"paths": ["a.rs", "b/c.rs"]})).await;
    assert!(r.success, "{}", r.output);
    assert_eq!(
        r.output,
        format!(
            "==> a.rs <==\n{}\n==> b/c.rs <==\n{}",
            numbered(&["fn a() {}"], 1),
            numbered(&["one", "two"], 1)
        )
    );
    let data = r.data.clone().unwrap_or_default();
    assert_eq!(data["read"], 2);
    assert_eq!(data["files"][1]["path"], "b/c.rs");
    // Both were read: both may be written; d.rs was not.
    for p in ["a.rs", "b/c.rs"] {
        let r = call(&w, "write_file", json!({"path": p, "content": "x\n"})).await;
        assert!(r.success, "{p}: {}", r.output);
    }
    let r = call(&w, "write_file", json!({"path": "d.rs", "content": "x\n"})).await;
    assert!(!r.success, "{}", r.output);
}

#[tokio::test]
async fn reads_takes_ranges_with_the_calls_offset_and_limit_as_defaults() {
    let body: String = (1..=50).map(|i| format!("l{i}\n")).collect();
    let w = common::DialectWorkspace::new(Dialect::Loopr, &[("f.txt", &body), ("g.txt", &body)]);
    let r = call(
        &w,
        "read_file",
        json!({"limit": 2, "reads": [
            {"path": "f.txt", "offset": 10},
            {"path": "g.txt", "offset": 49, "limit": 5},
            {"path": "f.txt"},
        ]}),
    )
    .await;
    assert!(r.success, "{}", r.output);
    assert_eq!(
        r.output,
        format!(
            "==> f.txt <==\n{}[f.txt has 50 lines; showing lines 10-11; continue with offset=12]\n\
             \n==> g.txt <==\n{}\n==> f.txt <==\n{}[f.txt has 50 lines; showing lines 1-2; continue with offset=3]\n",
            numbered(&["l10", "l11"], 10),
            numbered(&["l49", "l50"], 49),
            numbered(&["l1", "l2"], 1),
        )
    );
}

#[tokio::test]
async fn a_file_that_fails_is_reported_in_its_place() {
    let w = common::DialectWorkspace::new(Dialect::Loopr, &[("a.txt", "a\n")]);
    let r = call(
        &w,
        "read_file",
        json!({"paths": ["missing.txt", "a.txt", "../out"]}),
    )
    .await;
    assert!(r.success, "{}", r.output);
    let sections: Vec<&str> = r.output.split("\n==> ").collect();
    assert_eq!(sections.len(), 3, "{}", r.output);
    assert!(
        sections[0].starts_with("==> missing.txt <==\nError: "),
        "{}",
        r.output
    );
    assert!(
        sections[1].starts_with("a.txt <==\n     1|a\n"),
        "{}",
        r.output
    );
    assert!(
        sections[2].contains("outside the workspace"),
        "{}",
        r.output
    );
    let data = r.data.clone().unwrap_or_default();
    assert_eq!(data["read"], 1);
    assert_eq!(data["failed"], 2);
    assert_eq!(data["files"][0]["error_kind"], "file_not_found");
    // All failing: the call fails.
    let r = call(&w, "read_file", json!({"paths": ["x", "y"]})).await;
    assert!(!r.success, "{}", r.output);
}

#[tokio::test]
async fn bad_shapes_are_refused_with_what_to_give() {
    let w = common::DialectWorkspace::new(Dialect::Loopr, &[("a.txt", "a\n")]);
    let r = call(&w, "read_file", json!({})).await;
    assert!(
        !r.success && r.output.contains("`paths`") && r.output.contains("`reads`"),
        "{}",
        r.output
    );
    let r = call(&w, "read_file", json!({"paths": []})).await;
    assert!(!r.success && r.output.contains("empty"), "{}", r.output);
    let many: Vec<String> = (0..51).map(|_| "a.txt".to_string()).collect();
    let r = call(&w, "read_file", json!({"paths": many})).await;
    assert!(
        !r.success && r.output.contains("at most 50"),
        "{}",
        r.output
    );
    let r = call(&w, "read_file", json!({"reads": [{"offset": 1}]})).await;
    assert!(!r.success, "{}", r.output);
    // One file in `paths` is read as `path` is.
    let r = call(&w, "read_file", json!({"paths": ["a.txt"]})).await;
    assert_eq!(r.output, "     1|a\n");
    // The schema says how: `path` is no longer required, `paths` and `reads` are documented.
    let schema = tool(&w, "read_file").input_schema();
    let props = &schema["properties"];
    assert!(
        props["paths"]["description"]
            .as_str()
            .unwrap_or("")
            .contains("Several")
    );
    assert!(
        props["reads"]["description"]
            .as_str()
            .unwrap_or("")
            .contains("ranges")
    );
}

#[tokio::test]
async fn several_large_files_share_the_budget_and_each_says_how_to_read_on() {
    let big: String = (1..=2000).map(|i| format!("line number {i}\n")).collect();
    let w = common::DialectWorkspace::new(
        Dialect::Loopr,
        &[("a.txt", &big), ("b.txt", &big), ("c.txt", "short\n")],
    );
    let budget = 12_000;
    let r = call_with(
        &w,
        "read_file",
        json!({"paths": ["c.txt", "a.txt", "b.txt"]}),
        budget,
    )
    .await;
    assert!(r.success, "{}", r.output);
    // What the short file leaves goes to the others; the whole stays near the budget.
    assert!(r.output.len() <= budget + 600, "{} bytes", r.output.len());
    for p in ["a.txt", "b.txt"] {
        assert!(
            r.output
                .contains(&format!("[{p} has 2000 lines; output reached the")),
            "{}",
            r.output
        );
    }
    let a = r.output.split("==> a.txt <==\n").nth(1).unwrap_or("");
    let a = a.split("\n==> ").next().unwrap_or("");
    assert!(
        a.len() > budget / 3,
        "a.txt got {} bytes of {budget}",
        a.len()
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Any set of files and ranges reads, under a budget that fits them, as each range of
    /// each file numbered under its header, with the note that says how to read on.
    #[test]
    fn several_ranges_read_as_each_would_alone(
        files in proptest::collection::vec(proptest::collection::vec("[a-z ]{0,12}", 1..30), 1..4),
        picks in proptest::collection::vec((0usize..4, 1usize..35, 1usize..35), 2..6),
    ) {
        let names: Vec<String> = (0..files.len()).map(|i| format!("f{i}.txt")).collect();
        let bodies: Vec<String> = files.iter().map(|ls| ls.iter().map(|l| format!("{l}\n")).collect()).collect();
        let refs: Vec<(&str, &str)> = names.iter().map(String::as_str).zip(bodies.iter().map(String::as_str)).collect();
        let w = common::DialectWorkspace::new(Dialect::Loopr, &refs);
        let mut reads = Vec::new();
        let mut want = String::new();
        for (k, (f, offset, limit)) in picks.iter().enumerate() {
            let f = f % files.len();
            let lines: Vec<&str> = files[f].iter().map(String::as_str).collect();
            let n = lines.len();
            reads.push(json!({"path": names[f], "offset": offset, "limit": limit}));
            if k > 0 {
                want.push('\n');
            }
            want.push_str(&format!("==> {} <==\n", names[f]));
            if *offset > n {
                want.push_str(&format!(
                    "Error: invalid arguments: offset {offset} is past the end of {}, which has {n} lines\n",
                    names[f]
                ));
                continue;
            }
            let last = (offset + limit - 1).min(n);
            want.push_str(&numbered(&lines[offset - 1..last], *offset));
            if last < n {
                want.push_str(&format!(
                    "[{} has {n} lines; showing lines {offset}-{last}; continue with offset={}]\n",
                    names[f],
                    last + 1
                ));
            }
        }
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
        let r = rt.block_on(call_with(&w, "read_file", json!({"reads": reads}), 1 << 20));
        prop_assert_eq!(&r.output, &want);
    }
}
