//! `web_search`: one query through Serper, Google Custom Search, Brave, SearxNG or a Loom-style
//! server proxy, results normalised to `{title, url, snippet}`.

use std::time::Duration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use toolyard_core::{Annotations, ToolContext, ToolError, ToolInfo, ToolResult, TypedTool};

use super::http::{EnvLookup, RetryPolicy, Service, needs_of, parse_json, send_with_retry};
use super::{ProviderConfig, WebConfig};

const SERPER_URL: &str = "https://google.serper.dev/search";
const GOOGLE_URL: &str = "https://www.googleapis.com/customsearch/v1";
const BRAVE_URL: &str = "https://api.search.brave.com/res/v1/web/search";
const DEFAULT_RESULTS: u32 = 5;
const MAX_RESULTS: u32 = 10;

/// A search provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// Serper (POST google.serper.dev/search, header X-API-KEY).
    Serper,
    /// Google Custom Search JSON API (GET customsearch/v1?key&cx&q&num).
    Google,
    /// Brave Search API (GET res/v1/web/search?q&count, header X-Subscription-Token).
    Brave,
    /// A SearxNG instance (GET {url}/search?q&format=json).
    Searxng,
    /// A Loom-style server proxy (POST {url}/proxy/cse with {query, max_results}).
    Proxy,
}

impl Provider {
    /// Its name as the catalog spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Serper => "serper",
            Self::Google => "google",
            Self::Brave => "brave",
            Self::Searxng => "searxng",
            Self::Proxy => "proxy",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::Serper => "Serper",
            Self::Google => "Google Custom Search",
            Self::Brave => "Brave Search",
            Self::Searxng => "SearxNG",
            Self::Proxy => "the search proxy",
        }
    }

    /// What to set to configure it.
    fn setup_hint(self) -> &'static str {
        match self {
            Self::Serper => "set SERPER_API_KEY (or [web.serper] api_key)",
            Self::Google => {
                "set GOOGLE_API_KEY and GOOGLE_CSE_ID (or [web.google] api_key and cse_id)"
            }
            Self::Brave => "set BRAVE_API_KEY (or [web.brave] api_key)",
            Self::Searxng => "set SEARXNG_URL (or [web.searxng] url) to the instance's base URL",
            Self::Proxy => {
                "set TOOLYARD_PROXY_URL (or [web.proxy] url) to the server's base URL, and TOOLYARD_PROXY_TOKEN if it wants one"
            }
        }
    }

    const ALL: [Provider; 5] = [
        Self::Serper,
        Self::Google,
        Self::Brave,
        Self::Searxng,
        Self::Proxy,
    ];
}

/// One normalised search result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SearchHit {
    /// The page title.
    pub title: String,
    /// The page URL.
    pub url: String,
    /// A short excerpt (may be empty).
    pub snippet: String,
}

/// web_search's structured data; its output schema is derived from it.
#[derive(Debug, Serialize, JsonSchema)]
struct SearchData {
    query: String,
    provider: Provider,
    results: Vec<SearchHit>,
}

/// Arguments of web_search.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebSearchArgs {
    /// What to search for, in natural language or with search operators.
    pub query: String,
    /// How many results to return (default 5, at most 10).
    #[schemars(range(min = 1, max = 10))]
    pub max_results: Option<u32>,
}

/// A provider with everything needed to call it.
#[derive(Debug, Clone)]
struct Ready {
    provider: Provider,
    key: Option<String>,
    cse_id: Option<String>,
    url: String,
    /// Bearer token for the proxy.
    token: Option<String>,
}

/// The web_search tool.
pub struct WebSearch {
    config: Result<WebConfig, ToolError>,
    env: EnvLookup,
    client: reqwest::Client,
}

impl WebSearch {
    /// A web_search configured by `config`, reading keys through `env` where the catalog has none.
    pub fn new(config: Result<WebConfig, ToolError>, env: EnvLookup) -> Self {
        Self {
            config,
            env,
            client: reqwest::Client::new(),
        }
    }

    fn key(&self, p: &ProviderConfig, default_env: &str) -> Option<String> {
        p.api_key
            .clone()
            .filter(|k| !k.trim().is_empty())
            .or_else(|| (self.env)(p.api_key_env.as_deref().unwrap_or(default_env)))
    }

    /// The provider's settings, or `None` when it is not configured.
    fn ready(&self, c: &WebConfig, provider: Provider) -> Option<Ready> {
        let base = |url: &Option<String>, default: &str| {
            url.clone().unwrap_or_else(|| default.to_string())
        };
        match provider {
            Provider::Serper => Some(Ready {
                provider,
                key: Some(self.key(&c.serper, "SERPER_API_KEY")?),
                cse_id: None,
                url: base(&c.serper.url, SERPER_URL),
                token: None,
            }),
            Provider::Google => Some(Ready {
                provider,
                key: Some(self.key(&c.google, "GOOGLE_API_KEY")?),
                cse_id: Some(
                    c.google
                        .cse_id
                        .clone()
                        .or_else(|| (self.env)("GOOGLE_CSE_ID"))?,
                ),
                url: base(&c.google.url, GOOGLE_URL),
                token: None,
            }),
            Provider::Brave => Some(Ready {
                provider,
                key: Some(self.key(&c.brave, "BRAVE_API_KEY")?),
                cse_id: None,
                url: base(&c.brave.url, BRAVE_URL),
                token: None,
            }),
            Provider::Searxng => Some(Ready {
                provider,
                key: self.key(&c.searxng, "SEARXNG_API_KEY"),
                cse_id: None,
                url: c
                    .searxng
                    .url
                    .clone()
                    .or_else(|| (self.env)("SEARXNG_URL"))?,
                token: None,
            }),
            Provider::Proxy => Some(Ready {
                provider,
                key: None,
                cse_id: None,
                url: c
                    .proxy
                    .url
                    .clone()
                    .or_else(|| (self.env)("TOOLYARD_PROXY_URL"))
                    .or_else(|| (self.env)("LOOM_SERVER_URL"))?,
                token: self.key(&c.proxy, "TOOLYARD_PROXY_TOKEN"),
            }),
        }
    }

    /// The provider to use: the catalog's choice, else the first one configured.
    fn choose(&self, c: &WebConfig) -> Result<Ready, ToolError> {
        if let Some(p) = c.search.provider {
            return self.ready(c, p).ok_or_else(|| {
                ToolError::Unavailable(format!(
                    "web_search: the catalog chose {} ([web.search] provider = \"{}\") but it is not configured; {}",
                    p.label(),
                    p.as_str(),
                    p.setup_hint()
                ))
            });
        }
        Provider::ALL
            .iter()
            .find_map(|p| self.ready(c, *p))
            .ok_or_else(|| {
                let hints: Vec<String> = Provider::ALL
                    .iter()
                    .map(|p| format!("{}: {}", p.label(), p.setup_hint()))
                    .collect();
                ToolError::Unavailable(format!(
                    "web_search has no search provider configured; configure one of them. {}",
                    hints.join("; ")
                ))
            })
    }

    async fn search(
        &self,
        c: &WebConfig,
        r: &Ready,
        query: &str,
        n: u32,
        ctx: &ToolContext,
    ) -> Result<Vec<SearchHit>, ToolError> {
        let policy = RetryPolicy {
            max_retries: c.search.max_retries.unwrap_or(3),
            base: Duration::from_millis(c.search.backoff_base_ms.unwrap_or(500)),
            max: Duration::from_millis(c.search.backoff_max_ms.unwrap_or(10_000)),
        };
        let timeout = Duration::from_millis(c.search.timeout_ms.unwrap_or(15_000));
        let hint = format!("check the key: {}", r.provider.setup_hint());
        let service = Service {
            name: r.provider.label(),
            auth_hint: &hint,
        };
        let key = r.key.clone().unwrap_or_default();
        let n_text = n.to_string();
        let body = match r.provider {
            Provider::Serper => {
                send_with_retry(&service, &policy, &ctx.cancel, timeout, || {
                    self.client
                        .post(&r.url)
                        .header("X-API-KEY", &key)
                        .json(&json!({"q": query, "num": n}))
                })
                .await?
            }
            Provider::Google => {
                let cx = r.cse_id.clone().unwrap_or_default();
                send_with_retry(&service, &policy, &ctx.cancel, timeout, || {
                    self.client.get(&r.url).query(&[
                        ("key", key.as_str()),
                        ("cx", cx.as_str()),
                        ("q", query),
                        ("num", n_text.as_str()),
                    ])
                })
                .await?
            }
            Provider::Brave => {
                send_with_retry(&service, &policy, &ctx.cancel, timeout, || {
                    self.client
                        .get(&r.url)
                        .header("X-Subscription-Token", &key)
                        .header("Accept", "application/json")
                        .query(&[("q", query), ("count", n_text.as_str())])
                })
                .await?
            }
            Provider::Searxng => {
                let url = format!("{}/search", r.url.trim_end_matches('/'));
                send_with_retry(&service, &policy, &ctx.cancel, timeout, || {
                    let req = self
                        .client
                        .get(&url)
                        .query(&[("q", query), ("format", "json")]);
                    match &r.key {
                        Some(k) => req.bearer_auth(k),
                        None => req,
                    }
                })
                .await?
            }
            Provider::Proxy => {
                let url = format!("{}/proxy/cse", r.url.trim_end_matches('/'));
                send_with_retry(&service, &policy, &ctx.cancel, timeout, || {
                    let req = self
                        .client
                        .post(&url)
                        .json(&json!({"query": query, "max_results": n}));
                    match &r.token {
                        Some(t) => req.bearer_auth(t),
                        None => req,
                    }
                })
                .await?
            }
        };
        let mut hits = normalise(r.provider, &body)?;
        hits.truncate(n as usize);
        Ok(hits)
    }
}

/// Parse a provider's answer into hits (the documented response shape of each).
fn normalise(provider: Provider, body: &[u8]) -> Result<Vec<SearchHit>, ToolError> {
    #[derive(Deserialize)]
    struct Serper {
        organic: Vec<SerperItem>,
    }
    #[derive(Deserialize)]
    struct SerperItem {
        #[serde(default)]
        title: String,
        link: String,
        #[serde(default)]
        snippet: String,
    }
    #[derive(Deserialize)]
    struct Google {
        // Google leaves `items` out when nothing matched.
        #[serde(default)]
        items: Vec<SerperItem>,
    }
    #[derive(Deserialize)]
    struct Brave {
        #[serde(default)]
        web: Option<BraveWeb>,
    }
    #[derive(Deserialize)]
    struct BraveWeb {
        #[serde(default)]
        results: Vec<BraveItem>,
    }
    #[derive(Deserialize)]
    struct BraveItem {
        #[serde(default)]
        title: String,
        url: String,
        #[serde(default)]
        description: String,
    }
    #[derive(Deserialize)]
    struct Searx {
        results: Vec<SearxItem>,
    }
    #[derive(Deserialize)]
    struct SearxItem {
        #[serde(default)]
        title: String,
        url: String,
        #[serde(default)]
        content: String,
    }
    #[derive(Deserialize)]
    struct Proxy {
        results: Vec<SearchHit>,
    }
    let name = provider.label();
    let hits = match provider {
        Provider::Serper => parse_json::<Serper>(name, body)?
            .organic
            .into_iter()
            .map(|i| hit(i.title, i.link, i.snippet))
            .collect(),
        Provider::Google => parse_json::<Google>(name, body)?
            .items
            .into_iter()
            .map(|i| hit(i.title, i.link, i.snippet))
            .collect(),
        Provider::Brave => parse_json::<Brave>(name, body)?
            .web
            .map(|w| w.results)
            .unwrap_or_default()
            .into_iter()
            .map(|i| hit(i.title, i.url, i.description))
            .collect(),
        Provider::Searxng => parse_json::<Searx>(name, body)?
            .results
            .into_iter()
            .map(|i| hit(i.title, i.url, i.content))
            .collect(),
        Provider::Proxy => parse_json::<Proxy>(name, body)?
            .results
            .into_iter()
            .map(|h| hit(h.title, h.url, h.snippet))
            .collect(),
    };
    Ok(hits)
}

/// A hit with tags (Brave marks matches with `<strong>`) and runs of whitespace removed.
fn hit(title: String, url: String, snippet: String) -> SearchHit {
    SearchHit {
        title: clean(&title),
        url: url.trim().to_string(),
        snippet: clean(&snippet),
    }
}

fn clean(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_tag = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            // Only `<` followed by a letter or `/` opens a tag; "a < b" is text.
            '<' if !in_tag
                && chars
                    .peek()
                    .is_some_and(|n| n.is_ascii_alphabetic() || *n == '/') =>
            {
                in_tag = true
            }
            '>' if in_tag => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    let out = out
        .replace("&amp;", "&")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">");
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[async_trait]
impl TypedTool for WebSearch {
    type Args = WebSearchArgs;

    fn info(&self) -> ToolInfo<'_> {
        let description = "Search the web. Returns up to max_results (default 5, at most 10) results, each a title, \
         URL and snippet; read a page with web_fetch.";
        ToolInfo::new("web_search", description, Annotations::WEB).output::<SearchData>()
    }

    fn needs(&self) -> Option<String> {
        needs_of(&self.config, |c| self.choose(c))
    }

    async fn run(&self, args: WebSearchArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let c = self.config.as_ref().map_err(Clone::clone)?;
        let query = args.query.trim();
        if query.is_empty() {
            return Err(ToolError::InvalidArguments(
                "query is empty; say what to search for".into(),
            ));
        }
        let n = args.max_results.unwrap_or(DEFAULT_RESULTS);
        if !(1..=MAX_RESULTS).contains(&n) {
            return Err(ToolError::InvalidArguments(format!(
                "max_results must be 1 to {MAX_RESULTS}, got {n}"
            )));
        }
        let ready = self.choose(c)?;
        tracing::debug!(provider = ready.provider.as_str(), n, "web_search");
        let hits = self.search(c, &ready, query, n, ctx).await?;

        let mut out = if hits.is_empty() {
            format!("No results for \"{query}\".\n")
        } else {
            format!("Results for \"{query}\" ({}):\n", ready.provider.label())
        };
        for (i, h) in hits.iter().enumerate() {
            out.push_str(&format!("\n{}. {}\n   {}\n", i + 1, h.title, h.url));
            if !h.snippet.is_empty() {
                out.push_str(&format!("   {}\n", h.snippet));
            }
        }
        let data = SearchData {
            query: query.to_string(),
            provider: ready.provider,
            results: hits,
        };
        Ok(ToolResult::ok(out).with_data(serde_json::to_value(data)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snippets_lose_tags_and_entities() {
        assert_eq!(
            clean("The <strong>Rust</strong>  &amp; Cargo\n book"),
            "The Rust & Cargo book"
        );
        assert_eq!(clean("a < b"), "a < b");
    }
}
