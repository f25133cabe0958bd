//! apply_patch never lands wrong: context lines keep the file's own bytes, added lines take the
//! indentation of the lines around them, a match with mixed indentation offsets or one that a
//! looser pass finds elsewhere too is refused with the current lines, and a success shows the
//! changed lines with their numbers and what was forgiven.

use std::fs;
use std::path::PathBuf;
use std::sync::Arc;

use proptest::prelude::*;
use serde_json::json;
use toolyard_core::{Tool, ToolContext, ToolError, ToolResult};
use toolyard_dialects::Dialect;
use toolyard_tools::patch;

mod common;

struct Fixture {
    _w: common::DialectWorkspace,
    ws: PathBuf,
    tool: Arc<dyn Tool>,
}

impl Fixture {
    fn new(files: &[(&str, &str)]) -> Self {
        let w = common::DialectWorkspace::new(Dialect::Codex, files);
        let tool = w
            .tools
            .iter()
            .find(|t| t.name() == "apply_patch")
            .unwrap()
            .clone();
        Self {
            ws: w.ws.clone(),
            _w: w,
            tool,
        }
    }

    async fn patch(&self, text: &str) -> Result<ToolResult, ToolError> {
        let ctx = ToolContext::new(&self.ws, "s1");
        self.tool.invoke(json!({ "input": text }), &ctx).await
    }

    fn read(&self, p: &str) -> String {
        fs::read_to_string(self.ws.join(p)).unwrap()
    }

    fn write(&self, p: &str, text: &str) {
        fs::write(self.ws.join(p), text).unwrap();
    }
}

/// The refusal's text, or a panic naming what was applied instead.
fn refused(r: Result<ToolResult, ToolError>) -> String {
    match r {
        Err(e) => e.to_string(),
        Ok(r) if !r.success => r.output,
        Ok(r) => panic!("expected a refusal, got: {}", r.output),
    }
}

fn applied(r: Result<ToolResult, ToolError>) -> String {
    match r {
        Ok(r) if r.success => r.output,
        Ok(r) => panic!("expected a success, got: {}", r.output),
        Err(e) => panic!("expected a success, got: {e}"),
    }
}

#[tokio::test]
async fn context_indented_by_different_amounts_is_refused_with_the_current_lines() {
    // The report's reproduction: `}` matches at offset 0, the t! lines at offset 3.
    let text = "mod tests {\n    t!(a: 1);\n    t!(b: 2);\n}\n";
    let f = Fixture::new(&[("m.rs", text)]);
    let r = f
        .patch("*** Begin Patch\n*** Update File: m.rs\n@@\n  t!(a: 1);\n  t!(b: 2);\n+  t!(c: 3);\n }\n*** End Patch\n")
        .await;
    match r {
        Ok(r) if r.success => {
            // Applied: only correctly.
            assert_eq!(
                f.read("m.rs"),
                "mod tests {\n    t!(a: 1);\n    t!(b: 2);\n    t!(c: 3);\n}\n",
                "{}",
                r.output
            );
        }
        r => {
            let e = refused(r);
            assert_eq!(f.read("m.rs"), text, "a refusal leaves the file as it was");
            assert!(e.contains("     2|    t!(a: 1);"), "{e}");
            assert!(e.contains("     4|}"), "{e}");
            assert!(
                e.contains("line 2 has 4 spaces where the patch has 1 space"),
                "{e}"
            );
            assert!(e.contains("line 4 is indented as in the patch"), "{e}");
        }
    }
}

#[tokio::test]
async fn context_lines_keep_the_file_s_trailing_spaces() {
    let f = Fixture::new(&[("n.md", "Title  \nold\nend  \n")]);
    let out = applied(
        f.patch(
            "*** Begin Patch\n*** Update File: n.md\n@@\n Title\n-old\n+new\n end\n*** End Patch",
        )
        .await,
    );
    assert_eq!(f.read("n.md"), "Title  \nnew\nend  \n");
    assert!(
        out.contains(
            "n.md: The chunk matched ignoring trailing whitespace; the lines it keeps were left \
             as the file has them. Check the lines below."
        ),
        "{out}"
    );
    assert!(out.contains("     2|new"), "{out}");
}

#[tokio::test]
async fn context_sent_with_spaces_keeps_the_file_s_tabs_and_added_lines_take_tabs() {
    let f = Fixture::new(&[("f.c", "int f() {\n\tint a = 1;\n\tint b = 2;\n}\n")]);
    let out = applied(
        f.patch("*** Begin Patch\n*** Update File: f.c\n@@\n int f() {\n     int a = 1;\n+    int c = 3;\n     int b = 2;\n*** End Patch")
            .await,
    );
    assert_eq!(
        f.read("f.c"),
        "int f() {\n\tint a = 1;\n\tint c = 3;\n\tint b = 2;\n}\n"
    );
    assert!(
        out.contains("re-indented with 1 tab for each 4 spaces"),
        "{out}"
    );
    // And the reverse: a space-indented file, a patch written with tabs.
    f.write("g.py", "def g():\n    a = 1\n    b = 2\n");
    applied(
        f.patch("*** Begin Patch\n*** Update File: g.py\n@@\n def g():\n \ta = 1\n+\tc = 3\n \tb = 2\n*** End Patch")
            .await,
    );
    assert_eq!(
        f.read("g.py"),
        "def g():\n    a = 1\n    c = 3\n    b = 2\n"
    );
}

#[tokio::test]
async fn a_uniform_offset_re_indents_the_added_lines_and_keeps_the_context() {
    let text = "impl A {\n    fn a() {\n        x();\n    }\n}\n";
    let f = Fixture::new(&[("a.rs", text)]);
    let out = applied(
        f.patch("*** Begin Patch\n*** Update File: a.rs\n@@\n fn a() {\n     x();\n+    y();\n }\n*** End Patch")
            .await,
    );
    assert_eq!(
        f.read("a.rs"),
        "impl A {\n    fn a() {\n        x();\n        y();\n    }\n}\n"
    );
    assert!(
        out.contains("the added lines were indented 4 spaces more, like the lines around them"),
        "{out}"
    );
    assert!(out.contains("     4|        y();"), "{out}");
}

#[tokio::test]
async fn removed_lines_one_level_off_with_added_lines_at_the_file_s_level_are_written_as_sent() {
    let text = "class A:\n    def f(self):\n        return 1\n";
    let f = Fixture::new(&[("a.py", text)]);
    applied(
        f.patch("*** Begin Patch\n*** Update File: a.py\n@@\n-    return 1\n+        return 2\n*** End Patch")
            .await,
    );
    assert_eq!(
        f.read("a.py"),
        "class A:\n    def f(self):\n        return 2\n"
    );
}

#[tokio::test]
async fn a_forgiving_match_is_refused_when_another_place_matches_at_a_looser_pass() {
    // The audit's R09b: the model means hello()'s line (typographic quotes in the file); the
    // whitespace pass matches Farewell.bye's line first. Codex would change bye's.
    let text = "def hello():\n    msg = \u{201C}Don't panic\u{201D}\n\nclass Farewell:\n    def bye(self):\n        msg = \"Don't panic\"\n";
    let f = Fixture::new(&[("greet.py", text)]);
    let e = refused(
        f.patch("*** Begin Patch\n*** Update File: greet.py\n@@\n-    msg = \"Don't panic\"\n+    msg = \"Keep calm\"\n*** End Patch")
            .await,
    );
    assert_eq!(f.read("greet.py"), text);
    assert!(e.contains("Ambiguous patch for greet.py"), "{e}");
    assert!(
        e.contains("     2|    msg = \u{201C}Don't panic\u{201D}"),
        "{e}"
    );
    assert!(e.contains("     6|        msg = \"Don't panic\""), "{e}");
}

#[tokio::test]
async fn an_exact_success_shows_the_changed_lines_with_their_numbers() {
    let f = Fixture::new(&[("l.txt", "a\nb\nc\nd\ne\n")]);
    let out = applied(
        f.patch("*** Begin Patch\n*** Update File: l.txt\n@@\n c\n-d\n+D\n*** End Patch")
            .await,
    );
    assert_eq!(
        out,
        "Success. Updated the following files:\nM l.txt\n\nl.txt:\n     2|b\n     3|c\n     4|D\n     5|e"
    );
}

#[tokio::test]
async fn a_single_line_is_named_as_one_line() {
    let f = Fixture::new(&[("w.txt", "alpha one\nbeta\nalpha two\ngamma\nalpha three\n")]);
    let e = refused(
        f.patch("*** Begin Patch\n*** Update File: w.txt\n@@\n-alpha four\n+x\n*** End Patch")
            .await,
    );
    assert!(e.contains("Also like them, line "), "{e}");
    assert!(!e.contains("lines 3-3") && !e.contains("lines 5-5"), "{e}");
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

/// How the model mistypes a context or removed line's whitespace.
#[derive(Debug, Clone, Copy)]
enum Slip {
    None,
    DropTrailing,
    AddTrailing,
    TabsToSpaces,
    Dedent,
    Indent,
}

fn slip_line(line: &str, slip: Slip) -> String {
    match slip {
        Slip::None => line.to_string(),
        Slip::DropTrailing => line.trim_end().to_string(),
        Slip::AddTrailing => format!("{line}  "),
        Slip::TabsToSpaces => line.replace('\t', "    "),
        Slip::Dedent => line
            .strip_prefix("    ")
            .or_else(|| line.strip_prefix('\t'))
            .unwrap_or(line)
            .to_string(),
        Slip::Indent => format!("  {line}"),
    }
}

fn indent_of(s: &str) -> &str {
    &s[..s.len() - s.trim_start_matches([' ', '\t']).len()]
}

fn slip() -> impl Strategy<Value = Slip> {
    prop_oneof![
        Just(Slip::None),
        Just(Slip::DropTrailing),
        Just(Slip::AddTrailing),
        Just(Slip::TabsToSpaces),
        Just(Slip::Dedent),
        Just(Slip::Indent),
    ]
}

/// A patch of `file` at line `i` (0-based): context, removed, context, context, each line with
/// its slip; an added line after the removed one, indented like the removed line as sent.
fn slipped_patch(file: &[String], i: usize, slips: &[Slip], added: &str) -> String {
    let ctx1 = slip_line(&file[i], slips[0]);
    let gone = slip_line(&file[i + 1], slips[1]);
    let ctx2 = slip_line(&file[i + 2], slips[2]);
    let ctx3 = slip_line(&file[i + 3], slips[3]);
    let indent = indent_of(&gone);
    format!(
        "*** Begin Patch\n*** Update File: p.txt\n@@\n {ctx1}\n-{gone}\n+{indent}{added};\n {ctx2}\n {ctx3}\n*** End Patch"
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// The engine alone, over many more cases: an applied patch keeps every line but the
    /// removed one byte for byte and puts the added line at the removed line's indentation.
    #[test]
    fn the_engine_keeps_context_bytes_and_indents_added_lines_like_the_file(
        file in proptest::collection::vec(file_line(), 6..14),
        at in 0usize..100,
        slips in proptest::collection::vec(slip(), 4),
        added in "[A-Z]{3,6}",
    ) {
        let text: String = file.iter().map(|l| format!("{l}\n")).collect();
        let i = at % (file.len() - 3);
        let hunks = patch::parse_patch(&slipped_patch(&file, i, &slips, &added)).unwrap();
        let patch::Hunk::Update { chunks, .. } = &hunks[0] else { unreachable!() };
        if let Ok(done) = patch::apply_chunks("p.txt", &text, chunks) {
            let lines: Vec<&str> = done.text.lines().collect();
            prop_assert_eq!(lines.len(), file.len());
            for (n, (got, was)) in lines.iter().zip(&file).enumerate() {
                if n == i + 1 {
                    let want = format!("{}{added};", indent_of(&file[i + 1]));
                    prop_assert_eq!(got, &want);
                } else {
                    prop_assert_eq!(got, was, "line {} changed", n + 1);
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Whatever whitespace the model gets wrong in context lines: a refused patch leaves the
    /// file byte for byte as it was; an applied one changed it only where the patch said, the
    /// context lines kept byte for byte, every other line untouched.
    #[test]
    fn context_bytes_never_change_and_a_refusal_changes_nothing(
        file in proptest::collection::vec(file_line(), 6..14),
        at in 0usize..100,
        slips in proptest::collection::vec(slip(), 4),
        added in "[A-Z]{3,6}",
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let text: String = file.iter().map(|l| format!("{l}\n")).collect();
        let f = Fixture::new(&[("p.txt", &text)]);
        let i = at % (file.len() - 3);
        let patch = slipped_patch(&file, i, &slips, &added);
        let r = rt.block_on(f.patch(&patch));
        let after = f.read("p.txt");
        match r {
            Ok(r) if r.success => {
                let lines: Vec<&str> = after.lines().collect();
                prop_assert_eq!(lines.len(), file.len(), "{}", r.output);
                for (n, (got, was)) in lines.iter().zip(&file).enumerate() {
                    if n == i + 1 {
                        // In the removed line's place, at its indentation in the file.
                        let want = format!("{}{added};", indent_of(&file[i + 1]));
                        prop_assert_eq!(got, &want, "{}", r.output);
                    } else {
                        prop_assert_eq!(got, was, "line {} changed: {}", n + 1, r.output);
                    }
                }
            }
            Ok(r) => prop_assert_eq!(&after, &text, "{}", r.output),
            Err(e) => prop_assert_eq!(&after, &text, "{}", e),
        }
    }
}
