//! The catalog is checked whole at start: a mistake in any section fails the load with the
//! line and column of the mistake itself.

use toolyard_core::Catalog;
use toolyard_dispatch::{Dispatcher, DispatcherConfig, check_catalog};

fn catalog(text: &str) -> Catalog {
    Catalog::parse_over_builtin(text, "c.toml").unwrap()
}

#[test]
fn a_bad_web_key_and_a_bad_policy_value_each_name_their_line() {
    let c = catalog(
        "[policy]\ndeny = 5\n\n[web]\nallow_private = true\nproxi = \"http://p\"\n\n[hooks]\npre_tools = []\n",
    );
    let err = check_catalog(&c).err().expect("refused").to_string();
    assert!(err.contains("c.toml"), "{err}");
    assert!(
        err.contains("line 2, column 8: [policy]"),
        "policy value not located: {err}"
    );
    assert!(
        err.contains("line 6, column 1: [web]: unknown field `proxi`"),
        "web key not located: {err}"
    );
    assert!(
        err.contains("line 9, column 1: [hooks]: unknown field `pre_tools`"),
        "{err}"
    );
    assert!(err.contains("did you mean `pre_tool`?"), "{err}");
}

#[test]
fn good_catalogs_pass() {
    check_catalog(&Catalog::builtin()).unwrap();
    check_catalog(&catalog(
        "[web]\nallow_private = true\n[web.serper]\napi_key = \"k\"\n[oracle]\nmodel = \"m\"\n[project]\ntest = \"make check\"\n",
    ))
    .unwrap();
}

#[test]
fn a_policy_pattern_that_does_not_compile_fails_too() {
    let c = catalog("[policy]\ndeny = [\"[\"]\n");
    let err = check_catalog(&c).err().expect("refused").to_string();
    assert!(err.contains("[policy] deny rule 1"), "{err}");
}

#[test]
fn a_dispatcher_refuses_a_catalog_with_a_bad_section_at_start() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut config = DispatcherConfig::new(ws.path());
    config.state_dir = Some(state.path().to_path_buf());
    config.catalog = catalog("[oracle]\nmodle = \"m\"\n");
    let err = Dispatcher::new(config)
        .err()
        .expect("a bad [oracle] must fail the start");
    assert!(
        err.to_string().contains("line 2, column 1: [oracle]"),
        "{err}"
    );
    assert!(err.to_string().contains("did you mean `model`?"), "{err}");
}

#[test]
fn a_bad_remote_section_fails_the_check_with_its_line() {
    let c = catalog("[remote]\ncommand = [\"ssh\", \"{host}\"]\nheartbeat_ms = 1\n");
    let err = check_catalog(&c).err().expect("refused").to_string();
    assert!(err.contains("line 2, column 11: [remote]"), "{err}");
    assert!(err.contains("unknown placeholder `{host}`"), "{err}");
    check_catalog(&catalog(
        "[remote]\ncommand = [\"ssh\", \"h\", \"toolyard\", \"runner\", \"--lane\", \"{lane}\", \"--workspace\", \"/w/{session}\"]\nheartbeat_ms = 2000\n",
    ))
    .unwrap();
}

#[test]
fn the_processes_idle_timeout_is_checked() {
    check_catalog(&catalog("[processes]\nidle_timeout_s = 60\n")).unwrap();
    let err = check_catalog(&catalog("[processes]\nidle_timeout_s = \"1h\"\n"))
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("[processes]"), "{err}");
    let err = check_catalog(&catalog("[processes]\nidle_timeout_s = 0\n"))
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("idle_timeout_s must be at least 1"), "{err}");
}
