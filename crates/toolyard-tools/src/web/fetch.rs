//! `web_fetch`: one URL as clean Markdown (or JSON / text), paged, cached, behind the SSRF guard.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use reqwest::header::{ACCEPT, CONTENT_TYPE, LOCATION};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use toolyard_core::{Annotations, ToolContext, ToolError, ToolInfo, ToolResult, TypedTool};
use url::{Host, Url};

use super::WebConfig;
use super::convert::html_to_markdown;
use super::guard::Guard;
use super::http::{body_snippet, read_capped, reqwest_error};

const DEFAULT_USER_AGENT: &str = concat!(
    "Mozilla/5.0 (compatible; toolyard/",
    env!("CARGO_PKG_VERSION"),
    "; +https://example.invalid/toolyard)"
);
const DEFAULT_TTL_SECS: u64 = 15 * 60;
const DEFAULT_MAX_REDIRECTS: u32 = 10;
const DEFAULT_MAX_BYTES: u64 = 5 * 1024 * 1024;
const DEFAULT_TIMEOUT_MS: u64 = 20_000;
const DEFAULT_MAX_LENGTH: usize = 20_000;
/// Pages kept in the cache at most (oldest evicted first).
const CACHE_ENTRIES: usize = 64;
/// Bytes of the output budget kept for the paging hint and notes.
const HINT_ROOM: usize = 512;

/// Arguments of web_fetch.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebFetchArgs {
    /// The http(s) URL to fetch.
    pub url: String,
    /// Most characters to return (default 20000); longer content is paged.
    #[schemars(range(min = 1))]
    pub max_length: Option<usize>,
    /// Character offset to start from, for reading the next page (default 0).
    #[serde(default)]
    pub start_index: usize,
    /// Return the page as it came (HTML source) instead of converting it to Markdown.
    #[serde(default)]
    pub raw: bool,
}

/// What a page's content type makes of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Html,
    Json,
    Text,
}

/// A fetched and converted page, as cached.
#[derive(Debug)]
struct Page {
    final_url: String,
    redirects: Vec<String>,
    status: u16,
    content_type: String,
    format: Format,
    text: String,
    download_truncated: bool,
    bytes: usize,
}

/// What a page's text is.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Format {
    Markdown,
    Html,
    Json,
    Text,
}

/// web_fetch's structured data; its output schema is derived from it.
#[derive(Debug, Serialize, JsonSchema)]
struct FetchData {
    url: String,
    final_url: String,
    // Always written, but the schema has never promised it.
    #[schemars(skip_serializing_if = "Vec::is_empty")]
    redirects: Vec<String>,
    status: u16,
    content_type: String,
    format: Format,
    start_index: usize,
    end_index: usize,
    total_chars: usize,
    next_start_index: Option<usize>,
    download_truncated: bool,
    cached: bool,
}

#[derive(Debug)]
struct Settings {
    guard: Guard,
    user_agent: String,
    ttl: Duration,
    max_redirects: u32,
    max_bytes: usize,
    timeout: Duration,
    default_max_length: usize,
}

impl Settings {
    fn from_config(c: &WebConfig) -> Result<Self, ToolError> {
        let guard = Guard::new(c.allow_private, &c.allowed_hosts)
            .map_err(|e| ToolError::InvalidArguments(format!("[web] {e}")))?;
        Ok(Self {
            guard,
            user_agent: c
                .user_agent
                .clone()
                .unwrap_or_else(|| DEFAULT_USER_AGENT.to_string()),
            ttl: Duration::from_secs(c.cache_ttl_secs.unwrap_or(DEFAULT_TTL_SECS)),
            max_redirects: c.max_redirects.unwrap_or(DEFAULT_MAX_REDIRECTS),
            max_bytes: c.max_download_bytes.unwrap_or(DEFAULT_MAX_BYTES) as usize,
            timeout: Duration::from_millis(c.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS)),
            default_max_length: c.default_max_length.unwrap_or(DEFAULT_MAX_LENGTH).max(1),
        })
    }
}

/// Cached pages by (URL, raw), with the time they were fetched.
type PageCache = HashMap<(String, bool), (Instant, Arc<Page>)>;

/// The web_fetch tool; holds its 15-minute page cache.
pub struct WebFetch {
    settings: Result<Settings, ToolError>,
    cache: Mutex<PageCache>,
}

impl WebFetch {
    /// A web_fetch configured by `config` (an `Err` makes every call fail with it).
    pub fn new(config: Result<WebConfig, ToolError>) -> Self {
        Self {
            settings: config.and_then(|c| Settings::from_config(&c)),
            cache: Mutex::new(HashMap::new()),
        }
    }

    fn cached(&self, key: &(String, bool), ttl: Duration) -> Option<Arc<Page>> {
        let cache = self.cache.lock().ok()?;
        cache
            .get(key)
            .filter(|(at, _)| at.elapsed() < ttl)
            .map(|(_, p)| p.clone())
    }

    fn store(&self, key: (String, bool), page: Arc<Page>, ttl: Duration) {
        let Ok(mut cache) = self.cache.lock() else {
            return;
        };
        cache.retain(|_, (at, _)| at.elapsed() < ttl);
        if cache.len() >= CACHE_ENTRIES
            && let Some(oldest) = cache
                .iter()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(k, _)| k.clone())
        {
            cache.remove(&oldest);
        }
        cache.insert(key, (Instant::now(), page));
    }
}

#[async_trait]
impl TypedTool for WebFetch {
    type Args = WebFetchArgs;

    fn info(&self) -> ToolInfo<'_> {
        let description = "Fetch a URL and return its main content as Markdown (JSON and plain text as they are). \
         Long pages come in parts: call again with the start_index the result names. \
         Internal and private addresses are refused.";
        ToolInfo::new("web_fetch", description, Annotations::WEB).output::<FetchData>()
    }

    async fn run(&self, args: WebFetchArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let s = self.settings.as_ref().map_err(Clone::clone)?;
        let url = parse_url(&args.url)?;
        let key = (url.to_string(), args.raw);
        let (page, cached) = match self.cached(&key, s.ttl) {
            Some(p) => (p, true),
            None => {
                let page = Arc::new(fetch(s, url.clone(), args.raw, &ctx.cancel).await?);
                self.store(key, page.clone(), s.ttl);
                (page, false)
            }
        };
        tracing::debug!(url = %url, cached, bytes = page.bytes, "web_fetch");

        let budget = ctx.max_output_bytes.saturating_sub(HINT_ROOM).max(1);
        let max_chars = args.max_length.unwrap_or(s.default_max_length).max(1);
        let total = page.text.chars().count();
        if args.start_index > 0 && args.start_index >= total {
            return Err(ToolError::InvalidArguments(format!(
                "start_index {} is past the end of the content ({total} characters)",
                args.start_index
            )));
        }
        let (slice, taken) = window(&page.text, args.start_index, max_chars, budget);
        let end = args.start_index + taken;
        let next = (end < total).then_some(end);

        let mut out = String::new();
        if page.final_url != url.as_str() {
            out.push_str(&format!("[redirected to {}]\n\n", page.final_url));
        }
        out.push_str(slice);
        if !out.ends_with('\n') {
            out.push('\n');
        }
        if let Some(n) = next {
            out.push_str(&format!(
                "\n[showing characters {}-{end} of {total}; call web_fetch with start_index={n} to read more]\n",
                args.start_index
            ));
        }
        if page.download_truncated {
            out.push_str(&format!(
                "\n[the page is larger than the download cap of {} bytes; only its first {} bytes were fetched]\n",
                s.max_bytes, page.bytes
            ));
        }
        let data = FetchData {
            url: url.to_string(),
            final_url: page.final_url.clone(),
            redirects: page.redirects.clone(),
            status: page.status,
            content_type: page.content_type.clone(),
            format: page.format,
            start_index: args.start_index,
            end_index: end,
            total_chars: total,
            next_start_index: next,
            download_truncated: page.download_truncated,
            cached,
        };
        Ok(ToolResult::ok(out).with_data(serde_json::to_value(data)?))
    }
}

/// The part of `text` from character `start`: at most `max_chars` characters and
/// `max_bytes` bytes; returns it and its length in characters.
fn window(text: &str, start: usize, max_chars: usize, max_bytes: usize) -> (&str, usize) {
    let begin = text
        .char_indices()
        .nth(start)
        .map(|(i, _)| i)
        .unwrap_or(text.len());
    let rest = &text[begin..];
    let mut count = 0;
    let mut end = 0;
    for (i, c) in rest.char_indices() {
        if count == max_chars || i + c.len_utf8() > max_bytes {
            break;
        }
        count += 1;
        end = i + c.len_utf8();
    }
    (&rest[..end], count)
}

fn parse_url(text: &str) -> Result<Url, ToolError> {
    let url = Url::parse(text.trim()).map_err(|e| {
        ToolError::InvalidArguments(format!(
            "url `{text}` is not a valid absolute URL ({e}); give one like https://example.com/page"
        ))
    })?;
    check_scheme(&url)?;
    Ok(url)
}

fn check_scheme(url: &Url) -> Result<(), ToolError> {
    match url.scheme() {
        "http" | "https" => Ok(()),
        other => Err(ToolError::InvalidArguments(format!(
            "web_fetch reads http and https URLs only, not {other}: ({url})"
        ))),
    }
}

/// Fetch `url`, following redirects one hop at a time, each hop through the guard.
async fn fetch(
    s: &Settings,
    url: Url,
    raw: bool,
    cancel: &CancellationToken,
) -> Result<Page, ToolError> {
    let mut current = url;
    let mut redirects = Vec::new();
    for _ in 0..=s.max_redirects {
        let client = pinned_client(s, &current, redirects.len()).await?;
        let host = current.host_str().unwrap_or_default().to_string();
        let sent = tokio::select! {
            r = client
                .get(current.clone())
                .header(ACCEPT, "text/html,application/xhtml+xml,application/json;q=0.9,text/plain;q=0.8,*/*;q=0.5")
                .send() => r,
            _ = cancel.cancelled() => return Err(ToolError::Cancelled),
        };
        let resp = sent.map_err(|e| reqwest_error(&host, e, s.timeout))?;
        let status = resp.status();
        if status.is_redirection()
            && let Some(loc) = resp.headers().get(LOCATION)
        {
            let loc = loc.to_str().map_err(|_| {
                ToolError::Upstream(format!(
                    "{current} redirects to a Location that is not text"
                ))
            })?;
            let next = current.join(loc).map_err(|e| {
                ToolError::Upstream(format!(
                    "{current} redirects to an invalid URL `{loc}`: {e}"
                ))
            })?;
            check_scheme(&next)?;
            redirects.push(next.to_string());
            current = next;
            continue;
        }
        if !status.is_success() {
            let (body, _) = read_capped(resp, 2048, cancel).await.unwrap_or_default();
            let snippet = body_snippet(&body);
            return Err(ToolError::Upstream(format!(
                "GET {current} answered HTTP {status}{}",
                if snippet.is_empty() {
                    String::new()
                } else {
                    format!(": {snippet}")
                }
            )));
        }
        let content_type = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .trim()
            .to_string();
        let declared = if content_type.is_empty() {
            None
        } else {
            Some(classify(&content_type).map_err(|()| refuse(&current, &content_type))?)
        };
        let (body, download_truncated) = read_capped(resp, s.max_bytes, cancel)
            .await
            .map_err(|e| reqwest_error(&host, e, s.timeout))?;
        let sniff = &body[..body.len().min(4096)];
        if content_inspector::inspect(sniff).is_binary() {
            let ct = if content_type.is_empty() {
                "unlabelled binary data"
            } else {
                &content_type
            };
            return Err(refuse(&current, ct));
        }
        let kind = declared.unwrap_or_else(|| sniff_kind(sniff));
        let decoded = decode(&body, &content_type, kind);
        let final_url = current.to_string();
        let (format, text) = match (kind, raw) {
            (Kind::Html, false) => {
                let base = final_url.clone();
                let md =
                    tokio::task::spawn_blocking(move || html_to_markdown(&decoded, Some(&base)))
                        .await
                        .map_err(|e| ToolError::Io(format!("HTML conversion failed: {e}")))?;
                (Format::Markdown, md)
            }
            (Kind::Html, true) => (Format::Html, decoded),
            (Kind::Json, false) => match serde_json::from_str::<Value>(&decoded) {
                // Minified JSON is one enormous line; indented, it pages and reads better.
                Ok(v) => (
                    Format::Json,
                    serde_json::to_string_pretty(&v).unwrap_or(decoded),
                ),
                Err(_) => (Format::Json, decoded),
            },
            (Kind::Json, true) => (Format::Json, decoded),
            (Kind::Text, _) => (Format::Text, decoded),
        };
        return Ok(Page {
            final_url,
            redirects,
            status: status.as_u16(),
            content_type,
            format,
            text,
            download_truncated,
            bytes: body.len(),
        });
    }
    Err(ToolError::Upstream(format!(
        "too many redirects: gave up after {} (the limit is [web] max_redirects = {}); last: {current}",
        redirects.len(),
        s.max_redirects
    )))
}

/// A client for one hop: no automatic redirects, no proxy, and the host pinned to addresses the
/// guard has checked (any other DNS lookup is refused), so what was judged is what is reached.
async fn pinned_client(s: &Settings, url: &Url, hop: usize) -> Result<reqwest::Client, ToolError> {
    let port = url
        .port_or_known_default()
        .ok_or_else(|| ToolError::InvalidArguments(format!("{url} has no port")))?;
    let blocked = |b: super::guard::Blocked| {
        let context = if hop == 0 {
            String::new()
        } else {
            format!("redirect {hop} to {url}: ")
        };
        ToolError::Blocked {
            rule: "the SSRF guard".into(),
            reason: format!("{context}{b}"),
        }
    };
    let mut builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .user_agent(s.user_agent.as_str())
        .connect_timeout(s.timeout)
        .timeout(s.timeout)
        .dns_resolver(Arc::new(NoLookup));
    match url.host() {
        Some(Host::Ipv4(ip)) => s
            .guard
            .check(&ip.to_string(), IpAddr::V4(ip), port)
            .map_err(blocked)?,
        Some(Host::Ipv6(ip)) => s
            .guard
            .check(&ip.to_string(), IpAddr::V6(ip), port)
            .map_err(blocked)?,
        Some(Host::Domain(name)) => {
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((name, port))
                .await
                .map_err(|e| ToolError::Upstream(format!("could not resolve {name}: {e}")))?
                .collect();
            if addrs.is_empty() {
                return Err(ToolError::Upstream(format!("{name} has no addresses")));
            }
            let allowed = s.guard.filter(name, &addrs).map_err(blocked)?;
            builder = builder.resolve_to_addrs(name, &allowed);
        }
        None => {
            return Err(ToolError::InvalidArguments(format!("{url} has no host")));
        }
    }
    builder
        .build()
        .map_err(|e| ToolError::Io(format!("could not build the HTTP client: {e}")))
}

/// The fallback resolver of a pinned client: every name it may reach was pinned already.
struct NoLookup;

impl reqwest::dns::Resolve for NoLookup {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let name = name.as_str().to_string();
        Box::pin(async move {
            Err(format!("DNS lookup of {name} outside the SSRF guard refused").into())
        })
    }
}

/// What a declared content type makes of the body; `Err` for types web_fetch refuses.
fn classify(content_type: &str) -> Result<Kind, ()> {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let (top, sub) = essence.split_once('/').unwrap_or((essence.as_str(), ""));
    match (top, sub) {
        ("text", "html") | ("application", "xhtml+xml") => Ok(Kind::Html),
        ("application", "json") => Ok(Kind::Json),
        (_, s) if s.ends_with("+json") => Ok(Kind::Json),
        ("text", _) => Ok(Kind::Text),
        (_, s) if s.ends_with("+xml") => Ok(Kind::Text),
        (
            "application",
            "xml" | "javascript" | "x-javascript" | "ecmascript" | "yaml" | "x-yaml" | "toml"
            | "x-toml" | "x-sh" | "sql" | "graphql" | "x-ndjson" | "csv",
        ) => Ok(Kind::Text),
        _ => Err(()),
    }
}

fn sniff_kind(head: &[u8]) -> Kind {
    let text = String::from_utf8_lossy(head).to_ascii_lowercase();
    let trimmed = text.trim_start();
    if trimmed.starts_with("<!doctype html")
        || trimmed.starts_with("<html")
        || text.contains("<body")
    {
        Kind::Html
    } else if trimmed.starts_with('{') || trimmed.starts_with('[') {
        Kind::Json
    } else {
        Kind::Text
    }
}

fn refuse(url: &Url, content_type: &str) -> ToolError {
    ToolError::Binary {
        path: url.to_string(),
        detail: format!(
            "content type {content_type}; web_fetch returns only HTML (as Markdown), JSON and text"
        ),
    }
}

/// Decode `body` by the charset of the content type (or an HTML meta tag), else UTF-8;
/// a BOM wins over both.
fn decode(body: &[u8], content_type: &str, kind: Kind) -> String {
    let label = charset_param(content_type).or_else(|| {
        (kind == Kind::Html)
            .then(|| meta_charset(&body[..body.len().min(2048)]))
            .flatten()
    });
    let encoding = label
        .and_then(|l| encoding_rs::Encoding::for_label(l.as_bytes()))
        .unwrap_or(encoding_rs::UTF_8);
    encoding.decode(body).0.into_owned()
}

fn charset_param(content_type: &str) -> Option<String> {
    content_type.split(';').skip(1).find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("charset")
            .then(|| v.trim().trim_matches('"').to_string())
    })
}

fn meta_charset(head: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(head).to_ascii_lowercase();
    let at = text.find("charset=")? + "charset=".len();
    let value: String = text[at..]
        .trim_start_matches(['"', '\''])
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect();
    (!value.is_empty()).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_are_classified() {
        assert_eq!(classify("text/html; charset=utf-8"), Ok(Kind::Html));
        assert_eq!(classify("application/problem+json"), Ok(Kind::Json));
        assert_eq!(classify("text/plain"), Ok(Kind::Text));
        assert_eq!(classify("application/rss+xml"), Ok(Kind::Text));
        assert!(classify("image/png").is_err());
        assert!(classify("application/pdf").is_err());
        assert!(classify("application/octet-stream").is_err());
    }

    #[test]
    fn window_respects_chars_and_bytes() {
        assert_eq!(window("héllo", 1, 3, 100), ("éll", 3));
        assert_eq!(window("héllo", 0, 10, 2), ("h", 1));
        assert_eq!(window("abc", 5, 10, 100), ("", 0));
    }

    #[test]
    fn charset_from_header_or_meta() {
        assert_eq!(
            charset_param("text/html; charset=\"ISO-8859-1\""),
            Some("ISO-8859-1".into())
        );
        assert_eq!(
            meta_charset(b"<meta charset=\"windows-1252\">"),
            Some("windows-1252".into())
        );
        assert_eq!(
            decode(b"caf\xe9", "text/plain; charset=latin1", Kind::Text),
            "café"
        );
    }
}
