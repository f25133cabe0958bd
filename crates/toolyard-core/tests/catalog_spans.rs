//! A catalog mistake anywhere fails at load, with the line and column of the mistake itself.

use serde::Deserialize;
use toolyard_core::Catalog;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[allow(dead_code)]
struct Web {
    allow_private: bool,
    search: Search,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[allow(dead_code)]
struct Search {
    provider: Option<Provider>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Provider {
    Brave,
    Serper,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[allow(dead_code)]
struct Policy {
    deny: Vec<String>,
}

fn load(text: &str) -> Catalog {
    Catalog::parse_over_builtin(text, "c.toml").unwrap()
}

#[test]
fn a_bad_web_key_names_its_own_line_and_column() {
    let c =
        load("[tools.grep]\ntimeout_ms = 5000\n\n[web]\nallow_private = true\n  proxi = \"x\"\n");
    let err = c.check_section::<Web>("web").unwrap_err().to_string();
    assert!(err.contains("c.toml"), "{err}");
    assert!(err.contains("line 6, column 3"), "{err}");
    assert!(err.contains("proxi"), "{err}");
    assert!(err.contains("[web]"), "{err}");
    // The section deserializes the same way when a tool asks for it.
    let err = c.section::<Web>("web").unwrap_err().to_string();
    assert!(err.contains("line 6, column 3"), "{err}");
}

#[test]
fn a_bad_policy_value_names_its_own_line_and_column() {
    let c = load("[policy]\n\ndeny = 5\n");
    let err = c.check_section::<Policy>("policy").unwrap_err().to_string();
    assert!(err.contains("line 3, column 8"), "{err}");
    assert!(err.contains("[policy]"), "{err}");
}

#[test]
fn a_nested_value_and_a_dotted_key_are_located_too() {
    let c = load("[web.search]\nprovider = \"bing\"\n");
    let err = c.check_section::<Web>("web").unwrap_err().to_string();
    assert!(err.contains("line 2, column 12"), "{err}");
    assert!(err.contains("bing"), "{err}");

    let c = load("web.allow_private = \"yes\"\n");
    let err = c.check_section::<Web>("web").unwrap_err().to_string();
    assert!(err.contains("line 1, column 21"), "{err}");
}

#[test]
fn good_and_absent_sections_pass() {
    let c = load("[web]\nallow_private = true\n[web.search]\nprovider = \"brave\"\n");
    c.check_section::<Web>("web").unwrap();
    assert!(c.section::<Web>("web").unwrap().allow_private);
    c.check_section::<Policy>("policy").unwrap();
    assert!(c.section::<Policy>("policy").unwrap().deny.is_empty());
}

#[test]
fn an_unknown_tool_fails_at_load_with_a_suggestion() {
    let err = Catalog::parse_over_builtin("\n[tools.grpe]\nlane = \"no-net\"\n", "c.toml")
        .unwrap_err()
        .to_string();
    assert!(err.contains("line 2, column 8"), "{err}");
    assert!(err.contains("did you mean `grep`?"), "{err}");
}

#[test]
fn tool_entry_mistakes_point_at_the_value() {
    let err = Catalog::parse_over_builtin(
        "[tools.grep]\nlane = \"no-net\"\ntimeout_ms = 0\n",
        "c.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("line 3, column 14"), "{err}");
    let err = Catalog::parse_over_builtin(
        "[tools.grep]\ntimeout_ms = 9000\nmax_timeout_ms = 10\n",
        "c.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("line 3, column 18"), "{err}");
    assert!(err.contains("9000"), "{err}");
}

#[test]
fn a_profile_naming_an_unknown_tool_points_at_the_name() {
    let err = Catalog::parse_over_builtin(
        "[profiles.mine]\ntools = [\"read_file\", \"gerp\"]\n",
        "c.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("line 2, column 23"), "{err}");
    assert!(err.contains("did you mean `grep`?"), "{err}");
}

#[test]
fn syntax_and_unknown_keys_say_line_and_column() {
    let err = Catalog::parse_over_builtin("[tools.grep]\n  timeout = 5\n", "c.toml")
        .unwrap_err()
        .to_string();
    assert!(err.contains("line 2, column 3"), "{err}");
}
