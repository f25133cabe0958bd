//! Web tools: `web_fetch` (a page as clean Markdown, behind an SSRF guard) and `web_search`
//! (Serper, Google Custom Search, Brave, SearxNG or a Loom-style server proxy).
//!
//! Both read the catalog's `[web]` section ([`WebConfig`]); keys may also come from the
//! environment (`SERPER_API_KEY`, `GOOGLE_API_KEY` + `GOOGLE_CSE_ID`, `BRAVE_API_KEY`,
//! `SEARXNG_URL`, `TOOLYARD_PROXY_URL`).
//!
//! ```toml
//! [web]
//! allow_private = false                 # loopback / RFC 1918 / link-local stay blocked
//! allowed_hosts = ["wiki.corp:8443"]    # host, host:port, IP, IP:port or CIDR lifted from the guard
//! user_agent = "toolyard/0.1"
//! cache_ttl_secs = 900
//!
//! [web.search]
//! provider = "serper"                   # serper | google | brave | searxng | proxy (default: the first configured)
//!
//! [web.serper]
//! api_key = "..."                       # or SERPER_API_KEY
//! ```

mod convert;
mod fetch;
pub mod guard;
pub(crate) mod http;
mod search;

use std::sync::Arc;

use serde::Deserialize;
use toolyard_core::{Catalog, Tool, ToolError, Typed};

use crate::ToolEnv;

pub use convert::html_to_markdown;
pub use fetch::{WebFetch, WebFetchArgs};
pub use guard::{AllowEntry, BlockReason, Guard};
pub use http::{EnvLookup, parse_retry_after, process_env};
pub use search::{Provider, SearchHit, WebSearch, WebSearchArgs};

/// The catalog's `[web]` section: fetch limits, the SSRF guard, and the search providers.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct WebConfig {
    /// Allow loopback, private (RFC 1918, ULA), link-local and CGNAT addresses (metadata,
    /// multicast and reserved addresses stay blocked unless listed in `allowed_hosts`).
    #[serde(default)]
    pub allow_private: bool,
    /// Hosts the guard lets through whatever they resolve to: `name`, `name:port`, `IP`,
    /// `IP:port`, `[v6]:port` or a CIDR such as `10.1.0.0/16`.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// The User-Agent header of web_fetch.
    pub user_agent: Option<String>,
    /// How long a fetched page stays cached, in seconds (default 900: 15 minutes).
    pub cache_ttl_secs: Option<u64>,
    /// Redirects followed before giving up (default 10).
    pub max_redirects: Option<u32>,
    /// The most bytes downloaded for one page (default 5 MiB); the rest is not fetched.
    pub max_download_bytes: Option<u64>,
    /// Time limit of one HTTP request of web_fetch, in ms (default 20000).
    pub timeout_ms: Option<u64>,
    /// Characters of page text returned by default (default 20000).
    pub default_max_length: Option<usize>,
    /// Provider choice and retry policy of web_search.
    #[serde(default)]
    pub search: SearchConfig,
    /// Serper (google.serper.dev).
    #[serde(default)]
    pub serper: ProviderConfig,
    /// Google Custom Search JSON API.
    #[serde(default)]
    pub google: ProviderConfig,
    /// Brave Search API.
    #[serde(default)]
    pub brave: ProviderConfig,
    /// A SearxNG instance (its `url` is the instance's base URL).
    #[serde(default)]
    pub searxng: ProviderConfig,
    /// A Loom-style server proxy (its `url` is the server's base URL; POST /proxy/cse).
    #[serde(default)]
    pub proxy: ProviderConfig,
}

/// `[web.search]`: which provider web_search uses and how it retries.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct SearchConfig {
    /// `serper`, `google`, `brave`, `searxng` or `proxy`; unset: the first one configured.
    pub provider: Option<Provider>,
    /// Retries after a 429, a 5xx or a failed connection (default 3).
    pub max_retries: Option<u32>,
    /// First backoff delay in ms, doubled each retry, with jitter (default 500).
    pub backoff_base_ms: Option<u64>,
    /// Longest wait between two attempts in ms, Retry-After included (default 10000).
    pub backoff_max_ms: Option<u64>,
    /// Time limit of one provider request in ms (default 15000).
    pub timeout_ms: Option<u64>,
}

/// One search provider's settings (`[web.serper]`, `[web.google]`, ...).
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// The API key (prefer the provider's environment variable).
    pub api_key: Option<String>,
    /// Read the key from this environment variable instead of the provider's default one.
    pub api_key_env: Option<String>,
    /// The endpoint (Serper, Google, Brave) or base URL (SearxNG, proxy); tests point it at
    /// 127.0.0.1.
    pub url: Option<String>,
    /// Google only: the Programmable Search Engine id (`cx`); or GOOGLE_CSE_ID.
    pub cse_id: Option<String>,
}

impl WebConfig {
    /// The `[web]` section of `catalog`.
    pub fn from_catalog(catalog: &Catalog) -> Result<Self, ToolError> {
        catalog
            .section::<WebConfig>("web")
            .map_err(|e| ToolError::InvalidArguments(e.to_string()))
    }
}

/// web_fetch and web_search configured from `env`'s catalog and the process environment.
pub fn tools(env: Arc<ToolEnv>) -> Vec<Arc<dyn Tool>> {
    let config = WebConfig::from_catalog(&env.catalog);
    tools_with(config, process_env())
}

/// web_fetch and web_search from an explicit configuration (an invalid one makes every call
/// fail with its message) and environment lookup.
pub fn tools_with(config: Result<WebConfig, ToolError>, env: EnvLookup) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(Typed(WebFetch::new(config.clone()))),
        Arc::new(Typed(WebSearch::new(config, env))),
    ]
}
