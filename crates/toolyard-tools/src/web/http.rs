//! HTTP plumbing shared by web_search and oracle: retries with backoff, bounded bodies, and
//! error messages a model can act on.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use reqwest::{RequestBuilder, Response, StatusCode};
use tokio_util::sync::CancellationToken;
use toolyard_core::ToolError;

/// Looks up an environment variable (injectable so tests never depend on the real environment).
pub type EnvLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The process environment; empty values count as unset.
pub fn process_env() -> EnvLookup {
    Arc::new(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()))
}

/// What a service tool still needs before it can work ([`toolyard_core::Tool::needs`]): the
/// message of its configuration's error, else of `choose`'s (which endpoint or provider a
/// call would use); `None` when both succeed.
pub(crate) fn needs_of<C, R>(
    config: &Result<C, ToolError>,
    choose: impl FnOnce(&C) -> Result<R, ToolError>,
) -> Option<String> {
    let problem = match config {
        Err(e) => e.clone(),
        Ok(c) => choose(c).err()?,
    };
    Some(match problem {
        ToolError::Unavailable(m) | ToolError::InvalidArguments(m) => m,
        other => other.to_string(),
    })
}

/// The most bytes read from an API response (search results, a model's answer).
pub(crate) const MAX_API_BODY: usize = 8 * 1024 * 1024;

/// How an API call retries.
#[derive(Debug, Clone)]
pub(crate) struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// The first backoff delay.
    pub base: Duration,
    /// The longest single wait.
    pub max: Duration,
}

impl RetryPolicy {
    /// The wait before retry number `attempt` (0-based): `base * 2^attempt`, capped, with
    /// jitter in its upper half so clients that failed together do not retry together.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let exp = self
            .base
            .saturating_mul(2u32.saturating_pow(attempt.min(16)))
            .min(self.max);
        let half = exp / 2;
        let jitter_ms = fastrand::u64(0..=half.as_millis() as u64);
        half + Duration::from_millis(jitter_ms)
    }
}

/// Parse a Retry-After value: delta-seconds or an HTTP date (relative to `now`).
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// What a service is called in messages, and what to tell the user when it refuses the key.
pub(crate) struct Service<'a> {
    /// E.g. "Serper".
    pub name: &'a str,
    /// E.g. "check SERPER_API_KEY".
    pub auth_hint: &'a str,
}

/// Send the request `build` makes, retrying on 429, 5xx and connection failures with
/// exponential backoff (honoring Retry-After); return the body of the first 2xx answer.
pub(crate) async fn send_with_retry(
    service: &Service<'_>,
    policy: &RetryPolicy,
    cancel: &CancellationToken,
    timeout: Duration,
    build: impl Fn() -> RequestBuilder,
) -> Result<Vec<u8>, ToolError> {
    let mut attempt = 0u32;
    loop {
        let sent = tokio::select! {
            r = build().timeout(timeout).send() => r,
            _ = cancel.cancelled() => return Err(ToolError::Cancelled),
        };
        let (retry_err, wait) = match sent {
            Ok(resp) if resp.status().is_success() => {
                return read_capped(resp, MAX_API_BODY, cancel)
                    .await
                    .map(|(b, _)| b)
                    .map_err(|e| reqwest_error(service.name, e, timeout));
            }
            Ok(resp) => {
                let status = resp.status();
                let retry_after = resp
                    .headers()
                    .get(reqwest::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| parse_retry_after(v, SystemTime::now()));
                let body = read_capped(resp, 2048, cancel)
                    .await
                    .map(|(b, _)| b)
                    .unwrap_or_default();
                let err = status_error(service, status, &body);
                if !(status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error()) {
                    return Err(err);
                }
                (err, retry_after)
            }
            Err(e) if e.is_connect() => (reqwest_error(service.name, e, timeout), None),
            Err(e) => return Err(reqwest_error(service.name, e, timeout)),
        };
        if attempt >= policy.max_retries {
            return Err(match retry_err {
                ToolError::Upstream(m) => {
                    ToolError::Upstream(format!("{m} (gave up after {} attempts)", attempt + 1))
                }
                other => other,
            });
        }
        let wait = wait
            .map(|w| w.min(policy.max))
            .unwrap_or_else(|| policy.backoff(attempt));
        tracing::debug!(service = service.name, attempt, ?wait, error = %retry_err, "retrying");
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = cancel.cancelled() => return Err(ToolError::Cancelled),
        }
        attempt += 1;
    }
}

/// The error for a non-2xx answer, with the start of its body.
pub(crate) fn status_error(service: &Service<'_>, status: StatusCode, body: &[u8]) -> ToolError {
    let snippet = body_snippet(body);
    let detail = if snippet.is_empty() {
        String::new()
    } else {
        format!(": {snippet}")
    };
    match status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => ToolError::Unavailable(format!(
            "{} refused the request (HTTP {status}){detail}; {}",
            service.name, service.auth_hint
        )),
        StatusCode::TOO_MANY_REQUESTS => ToolError::Upstream(format!(
            "{} is rate-limiting requests (HTTP 429){detail}; wait and try again",
            service.name
        )),
        _ => ToolError::Upstream(format!("{} answered HTTP {status}{detail}", service.name)),
    }
}

/// The first 300 characters of a body, on one line.
pub(crate) fn body_snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut s: String = one_line.chars().take(300).collect();
    if one_line.chars().count() > 300 {
        s.push('…');
    }
    s
}

/// Read at most `cap` bytes of `resp`'s body, streaming; the flag says whether more was left.
pub(crate) async fn read_capped(
    mut resp: Response,
    cap: usize,
    cancel: &CancellationToken,
) -> Result<(Vec<u8>, bool), reqwest::Error> {
    let mut buf = Vec::new();
    loop {
        let chunk = tokio::select! {
            c = resp.chunk() => c?,
            _ = cancel.cancelled() => return Ok((buf, true)),
        };
        let Some(chunk) = chunk else {
            return Ok((buf, false));
        };
        let room = cap.saturating_sub(buf.len());
        if chunk.len() > room {
            buf.extend_from_slice(&chunk[..room]);
            // Dropping the response closes the connection: the rest is never downloaded.
            return Ok((buf, true));
        }
        buf.extend_from_slice(&chunk);
    }
}

/// A reqwest failure as a ToolError: timeouts as `Timeout`, the rest with the cause chain.
pub(crate) fn reqwest_error(service: &str, e: reqwest::Error, timeout: Duration) -> ToolError {
    if e.is_timeout() {
        return ToolError::Timeout {
            ms: timeout.as_millis() as u64,
        };
    }
    let what = if e.is_connect() {
        "could not connect"
    } else if e.is_decode() || e.is_body() {
        "failed while reading the answer"
    } else {
        "request failed"
    };
    ToolError::Upstream(format!("{service}: {what}: {}", error_chain(&e)))
}

/// An error and its sources, joined with ": ".
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(s) = cur {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        cur = s.source();
    }
    parts.join(": ")
}

/// Parse `body` as JSON of type `T`, or say clearly that the service answered something else.
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(
    service: &str,
    body: &[u8],
) -> Result<T, ToolError> {
    serde_json::from_slice(body).map_err(|e| {
        ToolError::Upstream(format!(
            "{service} returned a response that is not the expected JSON ({e}): {}",
            body_snippet(body)
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_seconds_and_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(parse_retry_after("7", now), Some(Duration::from_secs(7)));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(30));
        assert_eq!(
            parse_retry_after(&later, now),
            Some(Duration::from_secs(30))
        );
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(30));
        assert_eq!(parse_retry_after(&earlier, now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("soon", now), None);
    }

    #[test]
    fn backoff_doubles_within_bounds() {
        let p = RetryPolicy {
            max_retries: 5,
            base: Duration::from_millis(100),
            max: Duration::from_millis(1000),
        };
        for attempt in 0..8 {
            let exp = (100u64 << attempt).min(1000);
            let d = p.backoff(attempt).as_millis() as u64;
            assert!(d >= exp / 2 && d <= exp, "attempt {attempt}: {d}");
        }
    }
}
