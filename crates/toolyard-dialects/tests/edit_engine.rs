//! The edit engine every dialect shares never lands an edit wrong: a near miss is applied only
//! when no other place matches at any level, new text is re-indented only when it shows it was
//! written at the slipped indentation, overlapping occurrences count, a CRLF file edited with
//! `\n` is an exact match, a match inside a line's indentation is flagged, read-before-write
//! refusals show the lines and count as the read, and loopr's edit_file takes several edits.

use std::fs;
use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{Value, json};
use toolyard_core::{Tool, ToolContext, ToolResult};
use toolyard_dialects::Dialect;
use toolyard_tools::files::{apply_edit, read_tracked};

mod common;

struct Fixture {
    w: common::DialectWorkspace,
}

impl Fixture {
    fn new(dialect: Dialect, files: &[(&str, &str)]) -> Self {
        Self {
            w: common::DialectWorkspace::new(dialect, files),
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

    fn ctx(&self) -> ToolContext {
        ToolContext::new(&self.w.ws, "s1")
    }

    async fn call(&self, name: &str, args: Value) -> ToolResult {
        match self.tool(name).invoke(args, &self.ctx()).await {
            Ok(r) => r,
            Err(e) => ToolResult::from(e),
        }
    }

    async fn read_first(&self, p: &str) {
        read_tracked(&self.w.env, &self.ctx(), p).await.unwrap();
    }

    fn read(&self, p: &str) -> String {
        fs::read_to_string(self.w.ws.join(p)).unwrap()
    }

    fn write(&self, p: &str, text: &str) {
        fs::write(self.w.ws.join(p), text).unwrap();
    }
}

#[track_caller]
fn failed(r: &ToolResult) -> &str {
    assert!(!r.success, "expected a failure, got {}", r.output);
    &r.output
}

#[track_caller]
fn ok(r: &ToolResult) -> &str {
    assert!(r.success, "expected success, got {}", r.output);
    &r.output
}

/// Each dialect's edit tool and how it is called with (path, old, new).
fn edit_call(dialect: Dialect, old: &str, new: &str) -> (&'static str, Value) {
    match dialect {
        Dialect::Loopr => (
            "edit_file",
            json!({"path": "f", "old_string": old, "new_string": new}),
        ),
        Dialect::ClaudeCode => (
            "Edit",
            json!({"file_path": "f", "old_string": old, "new_string": new}),
        ),
        Dialect::Gemini => (
            "replace",
            json!({"file_path": "f", "old_string": old, "new_string": new}),
        ),
        Dialect::Anthropic => (
            "str_replace_based_edit_tool",
            json!({"command": "str_replace", "path": "f", "old_str": old, "new_str": new}),
        ),
        _ => unreachable!(),
    }
}

const DIALECTS: [Dialect; 4] = [
    Dialect::Loopr,
    Dialect::ClaudeCode,
    Dialect::Anthropic,
    Dialect::Gemini,
];

#[tokio::test]
async fn a_near_miss_that_a_later_level_matches_elsewhere_is_refused_in_every_dialect() {
    // The audit's R09: the model copies Session.reset and drops its blank line; the same text
    // matches Outer.Cache.reset ignoring indentation, an earlier level.
    let text = "class Outer:\n    class Cache:\n        def reset(self):\n            self.count = 0\n            self.items = []\n\nclass Session:\n    def reset(self):\n        self.count = 0\n\n        self.items = []\n";
    let old = "    def reset(self):\n        self.count = 0\n        self.items = []";
    let new = format!("{old}\n        self.closed = True");
    for dialect in DIALECTS {
        let f = Fixture::new(dialect, &[("f", text)]);
        f.read_first("f").await;
        let (tool, args) = edit_call(dialect, old, &new);
        let r = f.call(tool, args).await;
        let e = failed(&r);
        assert_eq!(f.read("f"), text, "{dialect:?}: {e}");
        assert!(
            e.contains("     3|        def reset(self):"),
            "{dialect:?}: {e}"
        );
        assert!(
            e.contains("     8|    def reset(self):"),
            "{dialect:?}: {e}"
        );
    }
}

#[test]
fn old_text_one_level_off_with_new_text_at_the_file_s_level_is_written_as_sent() {
    let content = "impl A {\n    fn a() {\n        x();\n    }\n}\n";
    let (out, reps) = apply_edit(
        "f",
        content.as_bytes(),
        "fn a() {\n    x();\n}",
        "    fn a() {\n        x();\n        y();\n    }",
        false,
    )
    .unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "impl A {\n    fn a() {\n        x();\n        y();\n    }\n}\n"
    );
    assert!(reps[0].forgiven.unwrap().contains("written as sent"));
}

#[test]
fn new_text_at_the_slipped_level_is_shifted_like_the_old_text() {
    let content = "impl A {\n    fn a() {\n        x();\n    }\n}\n";
    let (out, reps) = apply_edit(
        "f",
        content.as_bytes(),
        "fn a() {\n    x();\n}",
        "fn a() {\n    x();\n    y();\n}",
        false,
    )
    .unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "impl A {\n    fn a() {\n        x();\n        y();\n    }\n}\n"
    );
    assert!(reps[0].forgiven.unwrap().contains("re-indented"));
}

#[test]
fn new_text_indented_neither_way_is_refused_with_the_current_lines() {
    let content = "impl A {\n    fn a() {\n        x();\n    }\n}\n";
    let e = apply_edit(
        "f",
        content.as_bytes(),
        "fn a() {\n    x();\n}",
        "  fn a() {\n      x();\n      y();\n  }",
        false,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("indented neither like the old text nor like the file"),
        "{e}"
    );
    assert!(e.contains("     3|        x();"), "{e}");
    // A shared line at the file's level but a first line at the slipped one: wrapping a line
    // in a block one level deeper could mean either, so it is refused.
    let e = apply_edit(
        "f",
        content.as_bytes(),
        "    x();\n}",
        "    if ok {\n        x();\n    }\n}",
        false,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("like the file in one place and like the old text"),
        "{e}"
    );
}

#[test]
fn overlapping_occurrences_make_old_string_ambiguous() {
    let e = apply_edit("f", b"aaa\n", "aa", "b", false)
        .unwrap_err()
        .to_string();
    assert!(e.contains("places that overlap"), "{e}");
    // The audit's L1: "unique" when counted without overlaps, applied to lines 1-2.
    let e = apply_edit("f", b"- a\n- a\n- a\n", "a\n- a", "b", false)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("one at line 1, another starting inside it at line 2"),
        "{e}"
    );
    // replace_all too: which of them it would change depends on the search order. The
    // dialects ask with replace_all and count the places themselves, so this is their rule too.
    assert!(apply_edit("f", b"aaa\n", "aa", "b", true).is_err());
    // Occurrences that only touch do not overlap.
    let (out, reps) = apply_edit("f", b"abab\n", "ab", "c", true).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out, b"cc\n");
    assert_eq!(reps.len(), 2);
}

#[tokio::test]
async fn a_crlf_file_edited_with_newlines_is_an_exact_match() {
    let f = Fixture::new(Dialect::Loopr, &[("f", "one\r\ntwo\r\nthree\r\n")]);
    f.read_first("f").await;
    let r = f
        .call(
            "edit_file",
            json!({"path": "f", "old_string": "one\ntwo", "new_string": "one\n2"}),
        )
        .await;
    let out = ok(&r);
    assert_eq!(f.read("f"), "one\r\n2\r\nthree\r\n");
    assert!(!out.contains("not found"), "{out}");
    assert!(!out.contains("line endings"), "{out}");
    let (_, reps) = apply_edit("f", b"a\r\nb\r\n", "a\nb", "a\nc", false).unwrap();
    assert_eq!(reps[0].forgiven, None);
}

#[tokio::test]
async fn an_exact_match_inside_a_line_s_indentation_that_adds_lines_is_placed_and_said() {
    // The report's §13: old_string with 2 spaces matched the end of a 4-space indentation.
    let text = "mod t {\n    t!(a);\n}\n";
    let f = Fixture::new(Dialect::Loopr, &[("f", text)]);
    f.read_first("f").await;
    let r = f
        .call(
            "edit_file",
            json!({"path": "f", "old_string": "  t!(a);", "new_string": "  t!(a);\n  t!(b);"}),
        )
        .await;
    let out = ok(&r);
    assert_eq!(f.read("f"), "mod t {\n    t!(a);\n    t!(b);\n}\n", "{out}");
    assert!(
        out.contains(
            "old_string matched starting inside the indentation of line 2 (the line is indented \
             with 4 spaces, old_string starts with 2 spaces); the lines new_string adds were \
             indented like the lines next to them"
        ),
        "{out}"
    );
    // new_string at the file's own indentation replaces the whole line as sent.
    f.write("f", text);
    f.read_first("f").await;
    let r = f
        .call(
            "edit_file",
            json!({"path": "f", "old_string": "  t!(a);", "new_string": "    t!(a);\n    t!(b);"}),
        )
        .await;
    assert!(
        ok(&r).contains("replaced the whole line as sent"),
        "{}",
        r.output
    );
    assert_eq!(f.read("f"), "mod t {\n    t!(a);\n    t!(b);\n}\n");
    // Indented neither way: refused, the file as it was.
    f.write("f", text);
    f.read_first("f").await;
    let r = f
        .call(
            "edit_file",
            json!({"path": "f", "old_string": "  t!(a);", "new_string": " t!(a);\n t!(b);"}),
        )
        .await;
    let e = failed(&r);
    assert!(e.contains("     2|    t!(a);"), "{e}");
    assert_eq!(f.read("f"), text);
    // Adding no line, the same match is a plain exact edit.
    let r = f
        .call(
            "edit_file",
            json!({"path": "f", "old_string": "  t!(a);", "new_string": "  t!(c);"}),
        )
        .await;
    assert!(!ok(&r).contains("inside the indentation"));
    assert_eq!(f.read("f"), "mod t {\n    t!(c);\n}\n");
    // Several lines: the ones after the first matched the file as they are, so an added line
    // at the first line's short indentation could mean either level, and is refused...
    let text = "fn f() {\n    let a = 1;\nlet_top();\n";
    f.write("f", text);
    f.read_first("f").await;
    let r = f
        .call(
            "edit_file",
            json!({"path": "f", "old_string": "  let a = 1;\nlet_top();", "new_string": "  let a = 1;\n  let b = 2;\nlet_top();"}),
        )
        .await;
    assert!(
        failed(&r).contains("unclear whether that line belongs"),
        "{}",
        r.output
    );
    assert_eq!(f.read("f"), text);
    // ...while one at the other lines' indentation is theirs: a plain exact edit, as is an
    // old_string that starts at a line's text (how models usually cut it).
    let r = f
        .call(
            "edit_file",
            json!({"path": "f", "old_string": "  let a = 1;\nlet_top();", "new_string": "  let a = 1;\nlet_mid();\nlet_top();"}),
        )
        .await;
    ok(&r);
    assert_eq!(
        f.read("f"),
        "fn f() {\n    let a = 1;\nlet_mid();\nlet_top();\n"
    );
    let r = f
        .call(
            "edit_file",
            json!({"path": "f", "old_string": "fn f() {\n    let a = 1;", "new_string": "fn f() {\n    let z = 0;\n    let a = 1;"}),
        )
        .await;
    ok(&r);
    assert!(
        f.read("f")
            .starts_with("fn f() {\n    let z = 0;\n    let a = 1;\n")
    );
    // With replace_all each place is only flagged.
    let (_, reps) = apply_edit("f", b"  x\n  x\n", " x", " x\n y", true).unwrap();
    assert!(reps.iter().all(|r| {
        r.warning
            .as_deref()
            .is_some_and(|w| w.contains("may be indented too little"))
    }));
}

#[tokio::test]
async fn an_edit_of_an_unread_file_shows_the_lines_there_and_the_retry_applies() {
    let mut text = String::new();
    for n in 1..=60 {
        text.push_str(&format!("line {n}\n"));
    }
    let f = Fixture::new(Dialect::Loopr, &[("f", &text)]);
    let edit = json!({"path": "f", "old_string": "line 40\n", "new_string": "line forty\n"});
    let r = f.call("edit_file", edit.clone()).await;
    let e = failed(&r);
    assert!(e.contains("f has not been read in this session"), "{e}");
    assert!(e.contains("    40|line 40"), "{e}");
    assert!(
        e.contains("    37|line 37") && e.contains("    43|line 43"),
        "{e}"
    );
    assert!(!e.contains("     1|line 1\n"), "{e}");
    assert!(e.contains("[f has 60 lines; shown: lines 37-43]"), "{e}");
    assert_eq!(r.error_kind.as_deref(), Some("not_read"));
    assert_eq!(f.read("f"), text);
    ok(&f.call("edit_file", edit).await);
    assert!(f.read("f").contains("line forty\n"));
    // Changed on disk since: the same, around the place the edit aims at.
    f.write("f", &text.replace("line 10\n", "line ten\n"));
    let edit = json!({"path": "f", "old_string": "line ten", "new_string": "line 10"});
    let r = f.call("edit_file", edit.clone()).await;
    let e = failed(&r);
    assert!(
        e.contains("changed on disk since this session last read it"),
        "{e}"
    );
    assert!(e.contains("    10|line ten"), "{e}");
    assert_eq!(r.error_kind.as_deref(), Some("stale_read"));
    ok(&f.call("edit_file", edit).await);
}

#[tokio::test]
async fn a_write_over_an_unread_file_shows_its_head() {
    let f = Fixture::new(Dialect::Loopr, &[("f", "keep me\nand me\n")]);
    let r = f
        .call("write_file", json!({"path": "f", "content": "new\n"}))
        .await;
    let e = failed(&r);
    assert!(e.contains("f has not been read in this session"), "{e}");
    assert!(e.contains("     1|keep me\n     2|and me"), "{e}");
    assert_eq!(f.read("f"), "keep me\nand me\n");
    // A binary file is named as one, not shown.
    fs::write(f.w.ws.join("b.bin"), [0u8, 159, 146, 150, 0, 1, 2]).unwrap();
    let r = f
        .call("write_file", json!({"path": "b.bin", "content": "x"}))
        .await;
    assert!(
        failed(&r).contains("It is a binary file (7 bytes)"),
        "{}",
        r.output
    );
}

#[tokio::test]
async fn several_edits_in_one_call_apply_in_order_all_or_none() {
    let text = "alpha\nbeta\ngamma\ndelta\n";
    let f = Fixture::new(Dialect::Loopr, &[("f", text)]);
    f.read_first("f").await;
    let r = f
        .call(
            "edit_file",
            json!({"path": "f", "edits": [
                {"old_string": "beta", "new_string": "beta\nbeta2"},
                {"old_string": "missing", "new_string": "x"},
            ]}),
        )
        .await;
    let e = failed(&r);
    assert!(e.contains("edit 2 of 2"), "{e}");
    assert!(e.contains("no edit was applied"), "{e}");
    assert_eq!(f.read("f"), text);
    let r = f
        .call(
            "edit_file",
            json!({"path": "f", "edits": [
                {"old_string": "alpha", "new_string": "ALPHA\nalpha2"},
                {"old_string": "delta", "new_string": "DELTA"},
                {"old_string": "ALPHA", "new_string": "A"},
            ]}),
        )
        .await;
    let out = ok(&r);
    assert_eq!(f.read("f"), "A\nalpha2\nbeta\ngamma\nDELTA\n");
    assert!(
        out.starts_with("Edited f: 3 edits, 3 replacements."),
        "{out}"
    );
    // The changed lines, numbered as the file is now.
    assert!(out.contains("     1|A\n     2|alpha2"), "{out}");
    assert!(out.contains("     5|DELTA"), "{out}");
    assert_eq!(r.data.as_ref().unwrap()["lines"], json!([1, 5]));
    // Both shapes at once, or neither, is a clear error.
    let r = f
        .call(
            "edit_file",
            json!({"path": "f", "old_string": "A", "new_string": "B", "edits": [{"old_string": "A", "new_string": "B"}]}),
        )
        .await;
    assert!(failed(&r).contains("not both"), "{}", r.output);
    let r = f.call("edit_file", json!({"path": "f"})).await;
    assert!(failed(&r).contains("old_string is missing"), "{}", r.output);
    // The schema documents it.
    let schema = f.tool("edit_file").input_schema();
    let edits = &schema["properties"]["edits"];
    assert!(
        edits["description"]
            .as_str()
            .unwrap()
            .contains("none is applied")
    );
    assert!(edits.to_string().contains("old_string"));
}

#[test]
fn a_whitespace_hint_for_one_line_names_one_line() {
    let e = apply_edit("f", b"if x {\n\tdo_it();\n}\n", "    do_it();", "z", false)
        .unwrap_err()
        .to_string();
    assert!(e.contains("Line 2 matches it except for whitespace"), "{e}");
}

/// A line of a generated file: indentation (levels of four spaces, or tabs), a word, and
/// sometimes trailing spaces.
fn file_line() -> impl Strategy<Value = String> {
    (
        0usize..3,
        any::<bool>(),
        "[a-z]{2,6}( [a-z]{1,4})?",
        0usize..3,
    )
        .prop_map(|(level, tabs, word, trailing)| {
            let unit = if tabs { "\t" } else { "    " };
            format!("{}{word};{}", unit.repeat(level), " ".repeat(trailing))
        })
}

fn indent_of(s: &str) -> &str {
    &s[..s.len() - s.trim_start_matches([' ', '\t']).len()]
}

/// old_string's lines as the model mistypes them: the same slip on every line.
fn slipped(line: &str, slip: u8) -> String {
    match slip {
        0 => line.to_string(),
        1 => line.trim_end().to_string(),
        2 => format!("{line}  "),
        3 => format!("    {line}"),
        _ => line
            .strip_prefix("    ")
            .or_else(|| line.strip_prefix('\t'))
            .unwrap_or(line)
            .to_string(),
    }
}

/// Whether `slip` changes every non-blank line the same way (a line without indentation
/// cannot lose a level).
fn uniform(lines: &[String], slip: u8) -> bool {
    slip != 4 || lines.iter().all(|l| !indent_of(l).is_empty())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Whatever whitespace slip old_string has, and whichever indentation new_string was
    /// written at (old_string's or the file's): an applied edit inserts the new line at the
    /// file's indentation of its neighbour and leaves every other line byte for byte as it was.
    #[test]
    fn an_applied_near_miss_keeps_every_other_line_and_indents_like_the_file(
        file in proptest::collection::vec(file_line(), 6..14),
        at in 0usize..100,
        slip in 0u8..5,
        new_as_in_file in any::<bool>(),
        word in "[A-Z]{3,6}",
    ) {
        let text: String = file.iter().map(|l| format!("{l}\n")).collect();
        let i = at % (file.len() - 3);
        let window = &file[i..i + 4];
        // A line without indentation cannot lose a level: then the slip adds one.
        let slip = if uniform(window, slip) { slip } else { 3 };
        let old: Vec<String> = window.iter().map(|l| slipped(l, slip)).collect();
        // The model's new text: its first line, the new line after it, its other lines.
        // Only indentation tells the two apart: a trailing-space slip is the same in both.
        let base: Vec<String> = if new_as_in_file && slip >= 3 {
            window.to_vec()
        } else {
            old.clone()
        };
        let mut new = vec![base[0].clone(), format!("{}{word};", indent_of(&base[0]))];
        new.extend(base[1..].iter().cloned());
        if let Ok((out, _)) = apply_edit("f", text.as_bytes(), &old.join("\n"), &new.join("\n"), false) {
            let mut want = file.clone();
            want.insert(i + 1, format!("{}{word};", indent_of(&file[i])));
            let want: String = want.iter().map(|l| format!("{l}\n")).collect();
            prop_assert_eq!(String::from_utf8(out).unwrap(), want);
        }
    }


    /// The report's §13 on one line: old_string starts inside the line's indentation, and
    /// new_string adds a line after it at the indentation old_string has. Applied, the new
    /// line is at the file's indentation of that line; else refused, the file as it was.
    #[test]
    fn a_line_matched_inside_its_indentation_gets_added_lines_at_its_level(
        mut file in proptest::collection::vec(file_line(), 3..8),
        at in 0usize..100,
        cut in 0usize..8,
        unit in prop_oneof![Just("\t"), Just("  "), Just("    ")],
        word in "[A-Z]{3,6}",
    ) {
        let i = at % file.len();
        // The target line has indentation.
        file[i] = format!("{unit}{}", file[i]);
        let text: String = file.iter().map(|l| format!("{l}\n")).collect();
        let whole = indent_of(&file[i]);
        // From the line's start to just before its text: never at the text itself.
        let cut = cut % whole.len();
        let old = file[i][cut..].to_string();
        let new = format!("{old}\n{}{word};", indent_of(&old));
        match apply_edit("f", text.as_bytes(), &old, &new, false) {
            Ok((out, _)) => {
                let mut want = file.clone();
                want.insert(i + 1, format!("{whole}{word};"));
                let want: String = want.iter().map(|l| format!("{l}\n")).collect();
                prop_assert_eq!(String::from_utf8(out).unwrap(), want);
            }
            Err(e) => prop_assert!(e.to_string().contains("old_string"), "{}", e),
        }
    }
}
