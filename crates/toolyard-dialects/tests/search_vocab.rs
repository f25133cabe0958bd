//! The hints of every dialect's grep and glob name only parameters that dialect's tool has, and
//! following them reaches what they name; the hidden-files note counts exactly the hidden files
//! that would have matched.

use std::collections::BTreeSet;
use std::fs;
use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{Value, json};
use toolyard_core::{Tool, ToolContext, ToolResult};
use toolyard_dialects::Dialect;

mod common;

/// Every search parameter name some dialect has: a hint may name one only if its tool has it.
const PARAMETERS: &[&str] = &[
    "hidden",
    "path",
    "file_pattern",
    "type",
    "head_limit",
    "glob",
    "dir_path",
    "include_pattern",
    "total_max_matches",
    "pattern",
];

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

/// The parameter names (of [`PARAMETERS`]) that the hints in `text` (what follows `; ` in each
/// bracketed note) name as words.
fn named(text: &str) -> BTreeSet<&'static str> {
    let hints: String = text
        .lines()
        .filter_map(|l| l.split_once("; ").map(|(_, hint)| hint))
        .collect::<Vec<_>>()
        .join(" ");
    let words: BTreeSet<&str> = hints
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .collect();
    // `hidden` is also a plain word; as the parameter it is given a value (`hidden: true`).
    PARAMETERS
        .iter()
        .copied()
        .filter(|p| {
            if *p == "hidden" {
                hints.contains("hidden:")
            } else {
                words.contains(p)
            }
        })
        .collect()
}

fn properties(t: &Arc<dyn Tool>) -> BTreeSet<String> {
    t.input_schema()["properties"]
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default()
}

/// One search tool of one dialect: its call for a pattern, and the call its hidden hint asks
/// for (given the hidden file the note names first).
struct Case {
    dialect: Dialect,
    name: &'static str,
    search: fn(&str) -> Value,
    follow: fn(&str) -> Value,
}

const CASES: &[Case] = &[
    Case {
        dialect: Dialect::Loopr,
        name: "grep",
        search: |p| json!({"pattern": p}),
        follow: |_| json!({"pattern": "needle", "hidden": true}),
    },
    Case {
        dialect: Dialect::Loopr,
        name: "glob",
        search: |_| json!({"pattern": "*.yml"}),
        follow: |_| json!({"pattern": "*.yml", "hidden": true}),
    },
    Case {
        dialect: Dialect::ClaudeCode,
        name: "Grep",
        search: |p| json!({"pattern": p, "output_mode": "content"}),
        follow: |_| json!({"pattern": "needle", "glob": ".github/**", "output_mode": "content"}),
    },
    Case {
        dialect: Dialect::ClaudeCode,
        name: "Glob",
        search: |_| json!({"pattern": "*.yml"}),
        follow: |_| json!({"pattern": ".github/**"}),
    },
    Case {
        dialect: Dialect::Gemini,
        name: "grep_search",
        search: |p| json!({"pattern": p}),
        follow: |_| json!({"pattern": "needle", "include_pattern": ".github/**"}),
    },
    Case {
        dialect: Dialect::Gemini,
        name: "glob",
        search: |_| json!({"pattern": "*.yml"}),
        follow: |_| json!({"pattern": ".github/**"}),
    },
    Case {
        dialect: Dialect::LoomPy,
        name: "search_files",
        search: |p| json!({"pattern": p}),
        follow: |file| json!({"pattern": "needle", "path": file}),
    },
];

#[tokio::test]
async fn every_dialects_hints_name_its_own_parameters_and_work() {
    for case in CASES {
        let label = format!("{} {}", case.dialect, case.name);
        let mut files: Vec<(String, String)> = vec![
            (".github/workflows/ci.yml".into(), "needle\n".into()),
            ("visible.yml".into(), "needle\n".into()),
        ];
        // Enough matches in enough files to overflow every default.
        for i in 0..260 {
            files.push((format!("src/f{i:03}.txt"), "e\n".repeat(i % 3 + 1)));
        }
        let refs: Vec<(&str, &str)> = files
            .iter()
            .map(|(p, c)| (p.as_str(), c.as_str()))
            .collect();
        let w = common::DialectWorkspace::new(case.dialect, &refs);
        let props = properties(&tool(&w, case.name));

        let r = call(&w, case.name, (case.search)("needle")).await;
        assert!(r.success, "{label}: {}", r.output);
        let note = r
            .output
            .lines()
            .find(|l| l.contains("hidden file"))
            .unwrap_or_else(|| panic!("{label}: no hidden note in {}", r.output));
        assert!(note.contains(".github/workflows/ci.yml"), "{label}: {note}");
        for p in named(note) {
            assert!(
                props.contains(p),
                "{label}: the note names `{p}`, which the tool does not have: {note}"
            );
        }
        // Following the hint finds the hidden file.
        let r = call(&w, case.name, (case.follow)(".github/workflows/ci.yml")).await;
        assert!(r.success, "{label}: {}", r.output);
        assert!(
            r.output.contains(".github/workflows/ci.yml"),
            "{label}: following the hint: {}",
            r.output
        );

        // An overflow's hint too.
        let r = call(&w, case.name, (case.search)("e")).await;
        if case.name.to_lowercase().contains("glob") {
            continue;
        }
        let foot: String = r
            .output
            .lines()
            .filter(|l| l.starts_with('['))
            .collect::<Vec<_>>()
            .join("\n");
        assert!(foot.contains("not shown"), "{label}: {}", r.output);
        for p in named(&foot) {
            assert!(
                props.contains(p),
                "{label}: the footer names `{p}`, which the tool does not have: {foot}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// grep's note counts exactly the hidden files (below the search root, outside .git and
    /// node_modules) that hold a match, and names the first of them by path; glob's the hidden
    /// files whose name matches.
    #[test]
    fn the_hidden_note_counts_exactly_the_hidden_files_that_would_match(
        tree in proptest::collection::btree_map(
            proptest::collection::vec(
                proptest::sample::select(vec!["a", "b", ".h", ".g", ".git", "node_modules"]),
                0..3,
            )
            .prop_flat_map(|dirs| {
                (Just(dirs), proptest::sample::select(vec!["x.rs", ".y.rs", "z.txt"]))
            }),
            any::<bool>(),
            0..8,
        ),
    ) {
        let files: Vec<(String, &str)> = tree
            .iter()
            .map(|((dirs, name), needle)| {
                let mut p = dirs.join("/");
                if !p.is_empty() {
                    p.push('/');
                }
                p.push_str(name);
                (p, if *needle { "a needle\n" } else { "hay\n" })
            })
            .collect();
        // A file and a directory of the same name cannot both exist: keep the first.
        let mut kept: Vec<(String, &str)> = Vec::new();
        for (p, c) in files {
            let clash = kept.iter().any(|(q, _)| {
                q.starts_with(&format!("{p}/")) || p.starts_with(&format!("{q}/")) || *q == p
            });
            if !clash {
                kept.push((p, c));
            }
        }
        let never = |p: &str| p.split('/').any(|c| c == ".git" || c == "node_modules");
        let hidden = |p: &str| p.split('/').any(|c| c.starts_with('.'));
        let mut want_grep: Vec<&str> = kept
            .iter()
            .filter(|(p, c)| !never(p) && hidden(p) && c.contains("needle"))
            .map(|(p, _)| p.as_str())
            .collect();
        want_grep.sort();
        let mut want_glob: Vec<&str> = kept
            .iter()
            .filter(|(p, _)| !never(p) && hidden(p) && p.ends_with(".rs"))
            .map(|(p, _)| p.as_str())
            .collect();
        want_glob.sort();

        let refs: Vec<(&str, &str)> = kept.iter().map(|(p, c)| (p.as_str(), *c)).collect();
        let w = common::DialectWorkspace::new(Dialect::Loopr, &refs);
        fs::create_dir_all(&w.ws).expect("ws");
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
        for (name, args, want) in [
            ("grep", json!({"pattern": "needle"}), &want_grep),
            ("glob", json!({"pattern": "*.rs"}), &want_glob),
        ] {
            let r = rt.block_on(call(&w, name, args));
            prop_assert!(r.success, "{}", r.output);
            let data = r.data.clone().unwrap_or_default();
            prop_assert_eq!(data["hidden_skipped"].as_u64(), Some(want.len() as u64), "{}: {}", name, r.output);
            let shown: Vec<&str> = want.iter().take(5).copied().collect();
            prop_assert_eq!(&data["hidden_matching"], &json!(shown), "{}", name);
            prop_assert_eq!(r.output.contains("hidden file"), !want.is_empty(), "{}: {}", name, r.output);
        }
    }
}
