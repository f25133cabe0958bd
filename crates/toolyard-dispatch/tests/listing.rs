//! web_search and oracle are listed only when configured; `all_definitions` shows them with
//! what they need, and a call to one says what to configure.

use toolyard_core::Catalog;
use toolyard_dispatch::{CallRequest, Dispatcher, DispatcherConfig};

fn dispatcher(ws: &std::path::Path, catalog: &str) -> Dispatcher {
    let mut config = DispatcherConfig::new(ws);
    config.state_dir = Some(ws.join(".test-state"));
    config.catalog = Catalog::parse_over_builtin(catalog, "c.toml").unwrap();
    Dispatcher::new(config).unwrap()
}

/// Settings that leave both tools unconfigured whatever keys this machine's environment has.
const UNCONFIGURED: &str = r#"
[web.search]
provider = "brave"
[web.brave]
api_key_env = "TOOLYARD_TEST_NEVER_SET_BRAVE"
"#;

#[tokio::test]
async fn unconfigured_tools_are_unlisted_but_known() {
    let ws = tempfile::tempdir().unwrap();
    // SAFETY: the only test of this binary; set before any dispatcher reads the environment.
    unsafe {
        for var in [
            "TOOLYARD_ORACLE_BASE_URL",
            "TOOLYARD_ORACLE_API_KEY",
            "OPENAI_API_KEY",
            "TOOLYARD_PROXY_URL",
        ] {
            std::env::remove_var(var);
        }
    }

    let d = dispatcher(ws.path(), UNCONFIGURED);
    let listed: Vec<String> = d.definitions().into_iter().map(|d| d.name).collect();
    assert!(!listed.contains(&"web_search".to_string()), "{listed:?}");
    assert!(!listed.contains(&"oracle".to_string()), "{listed:?}");
    assert!(listed.contains(&"web_fetch".to_string()), "{listed:?}");

    let all = d.all_definitions();
    assert_eq!(all.len(), listed.len() + 2);
    let need = |name: &str| {
        all.iter()
            .find(|(d, _)| d.name == name)
            .and_then(|(_, n)| n.clone())
            .unwrap_or_else(|| panic!("{name} should need something"))
    };
    assert!(
        need("web_search").contains("TOOLYARD_TEST_NEVER_SET_BRAVE")
            || need("web_search").contains("BRAVE_API_KEY")
    );
    assert!(need("oracle").contains("TOOLYARD_ORACLE_BASE_URL"));

    let r = d
        .call(CallRequest::new(
            "s",
            "web_search",
            serde_json::json!({"query": "x"}),
        ))
        .await;
    assert_eq!(r.error_kind.as_deref(), Some("unavailable"), "{}", r.output);
    assert!(r.output.contains("[web"), "{}", r.output);
    let r = d
        .call(CallRequest::new(
            "s",
            "oracle",
            serde_json::json!({"question": "x"}),
        ))
        .await;
    assert_eq!(r.error_kind.as_deref(), Some("unavailable"), "{}", r.output);
    assert!(
        r.output.contains("TOOLYARD_ORACLE_MODEL") || r.output.contains("TOOLYARD_ORACLE_BASE_URL"),
        "{}",
        r.output
    );

    // Configured in the catalog: listed.
    let d = dispatcher(
        ws.path(),
        "[web.serper]\napi_key = \"k\"\n[oracle]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n",
    );
    let listed: Vec<String> = d.definitions().into_iter().map(|d| d.name).collect();
    assert!(listed.contains(&"web_search".to_string()), "{listed:?}");
    assert!(listed.contains(&"oracle".to_string()), "{listed:?}");
    assert!(d.all_definitions().iter().all(|(_, need)| need.is_none()));
}
