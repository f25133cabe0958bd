//! The manager against real servers (pyright, typescript-language-server, cargo) where they
//! are on PATH, and against a fake one that never answers.

use std::path::Path;
use std::sync::Arc;

use toolyard_lsp::{Launcher, LspConfig, Manager};

/// Whether `program` is on PATH; where CI installed it (TOOLYARD_LSP_REQUIRE=1), missing
/// is a failure, not a skip.
fn on_path(program: &str) -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()));
    assert!(
        found || std::env::var_os("TOOLYARD_LSP_REQUIRE").is_none(),
        "{program} is not on PATH, and TOOLYARD_LSP_REQUIRE is set"
    );
    found
}

fn manager(root: &Path, config: serde_json::Value) -> Arc<Manager> {
    let config: LspConfig = serde_json::from_value(config).unwrap();
    Manager::new(&root.canonicalize().unwrap(), config, Launcher::Direct)
}

#[test]
fn pyright_reports_a_new_type_error_then_its_fix() {
    if !on_path("pyright-langserver") {
        eprintln!("SKIPPED: pyright-langserver is not on PATH (scripts/test.sh installs it)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("app.py");
    std::fs::write(
        &f,
        "import os\n\ndef f(x: int) -> int:\n    return x\n\nundefined_name\n",
    )
    .unwrap();
    let m = manager(dir.path(), serde_json::json!({"wait_ms": 60000}));
    let first = m.diagnostics_of("s", "app.py");
    assert!(first.contains("app.py:6:1"), "{first}");
    std::fs::write(
        &f,
        "import os\n\ndef f(x: int) -> int:\n    return x\n\nundefined_name\ny: str = f(1)\n",
    )
    .unwrap();
    let r = m.after_change("s", &["app.py".into()]).unwrap();
    assert!(
        r.contains("1 new problem(s)") && r.contains("app.py:7:"),
        "{r}"
    );
    assert!(r.contains("y: str = f(1)"), "the line's text: {r}");
    assert!(
        r.contains("problem(s) the file already had are not repeated"),
        "{r}"
    );
    assert!(
        !r.contains("undefined_name\n"),
        "the old problem is not repeated: {r}"
    );
    std::fs::write(
        &f,
        "import os\n\ndef f(x: int) -> int:\n    return x\n\nundefined_name\ny: int = f(1)\n",
    )
    .unwrap();
    let r = m.after_change("s", &["app.py".into()]).unwrap();
    assert!(
        r.contains("no new problems") && r.contains("resolved 1 problem(s): app.py:7"),
        "{r}"
    );
    m.shutdown();
}

#[test]
fn a_server_that_never_answers_is_still_checking_never_clean() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.py"), "x = 1\n").unwrap();
    let m = manager(
        dir.path(),
        serde_json::json!({"wait_ms": 300, "python": {"command": ["sh", "-c", "cat > /dev/null"]}}),
    );
    let r = m.after_change("s", &["a.py".into()]).unwrap();
    assert!(
        r.contains("still checking") && r.contains("diagnostics {\"path\": \"a.py\"}"),
        "{r}"
    );
    assert!(!r.contains("no problems"), "{r}");
    m.shutdown();
}

#[test]
fn no_server_is_said_once_per_session_and_language() {
    let dir = tempfile::tempdir().unwrap();
    let m = manager(dir.path(), serde_json::json!({"go": {"command": []}}));
    let r = m.after_change("s", &["a.go".into()]).unwrap();
    assert!(r.contains("no language server covers go files"), "{r}");
    assert_eq!(m.after_change("s", &["b.go".into()]), None);
    assert!(m.after_change("t", &["b.go".into()]).is_some());
    assert_eq!(m.after_change("s", &["notes.txt".into()]), None);
}

#[test]
fn cargo_check_reports_a_broken_crate() {
    if !on_path("cargo") {
        eprintln!("SKIPPED: cargo is not on PATH");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("src")).unwrap();
    std::fs::write(
        dir.path().join("Cargo.toml"),
        "[package]\nname = \"t\"\nversion = \"0.1.0\"\nedition = \"2021\"\n[workspace]\n",
    )
    .unwrap();
    let lib = dir.path().join("src/lib.rs");
    std::fs::write(&lib, "pub fn f() -> u32 {\n    1\n}\n").unwrap();
    let m = manager(
        dir.path(),
        serde_json::json!({"wait_ms": 120000, "rust": {"command": []}}),
    );
    let first = m.diagnostics_of("s", "src/lib.rs");
    assert!(first.contains("no problems"), "{first}");
    std::fs::write(&lib, "pub fn f() -> u32 {\n    \"one\"\n}\n").unwrap();
    let r = m.after_change("s", &["src/lib.rs".into()]).unwrap();
    assert!(
        r.contains("src/lib.rs:2:5: error [E0308]") && r.contains("\"one\""),
        "{r}"
    );
}
