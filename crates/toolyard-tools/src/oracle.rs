//! `oracle`: ask a second model, through any OpenAI-compatible chat-completions endpoint or a
//! Loom-style server proxy (POST `{proxy_url}/proxy/openai/complete`).
//!
//! ```toml
//! [oracle]
//! base_url = "https://api.openai.com/v1"   # or TOOLYARD_ORACLE_BASE_URL
//! model = "gpt-4.1"                        # or TOOLYARD_ORACLE_MODEL
//! api_key_env = "OPENAI_API_KEY"           # default: TOOLYARD_ORACLE_API_KEY, then OPENAI_API_KEY
//! # proxy_url = "https://loom.example"     # or TOOLYARD_PROXY_URL; used when no base_url is set
//! ```

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolyard_core::{
    Annotations, Tool, ToolContext, ToolError, ToolInfo, ToolResult, Typed, TypedTool,
};

use crate::ToolEnv;
use crate::web::http::{EnvLookup, RetryPolicy, Service, needs_of, parse_json, send_with_retry};

const DEFAULT_SYSTEM_PROMPT: &str = "You are an expert consultant to a coding agent. Answer the \
question directly and precisely; say so when you are unsure. Prefer concrete code and steps.";
const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";

/// The catalog's `[oracle]` section.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct OracleConfig {
    /// Base URL of an OpenAI-compatible API (…/v1); or TOOLYARD_ORACLE_BASE_URL. Defaults to
    /// OpenAI's when only an API key is found.
    pub base_url: Option<String>,
    /// The model to ask; or TOOLYARD_ORACLE_MODEL.
    pub model: Option<String>,
    /// The environment variable holding the API key (default: TOOLYARD_ORACLE_API_KEY, then
    /// OPENAI_API_KEY). Local servers that want no key need none.
    pub api_key_env: Option<String>,
    /// A Loom-style server proxy's base URL (or TOOLYARD_PROXY_URL), used when no base_url is
    /// set; its bearer token comes from TOOLYARD_PROXY_TOKEN.
    pub proxy_url: Option<String>,
    /// The system prompt sent before the question.
    pub system_prompt: Option<String>,
    /// Most tokens of the answer.
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    pub temperature: Option<f32>,
    /// Time limit of one request, in ms (default 120000).
    pub timeout_ms: Option<u64>,
    /// Retries after a 429, a 5xx or a failed connection (default 2).
    pub max_retries: Option<u32>,
    /// First backoff delay in ms (default 1000).
    pub backoff_base_ms: Option<u64>,
}

/// Arguments of oracle.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OracleArgs {
    /// The question for the second model, self-contained.
    pub question: String,
    /// Background it needs: code, errors, what was tried.
    pub context: Option<String>,
}

/// oracle's structured data; its output schema is derived from it.
#[derive(Debug, Serialize, JsonSchema)]
struct OracleData {
    answer: String,
    model: String,
    via: Via,
    finish_reason: Option<String>,
}

/// Which way a question went: to the model's API itself, or through the proxy.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Via {
    Direct,
    Proxy,
}

/// Where the question goes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Route {
    /// POST {base_url}/chat/completions.
    Direct {
        base_url: String,
        key: Option<String>,
    },
    /// POST {proxy_url}/proxy/openai/complete.
    Proxy { url: String, token: Option<String> },
}

/// The oracle tool.
pub struct Oracle {
    config: Result<OracleConfig, ToolError>,
    env: EnvLookup,
    client: reqwest::Client,
}

impl Oracle {
    /// An oracle configured by `config`, reading settings through `env` where the catalog has none.
    pub fn new(config: Result<OracleConfig, ToolError>, env: EnvLookup) -> Self {
        Self {
            config,
            env,
            client: reqwest::Client::new(),
        }
    }

    fn route(&self, c: &OracleConfig) -> Result<(Route, String), ToolError> {
        let key = match &c.api_key_env {
            Some(var) => (self.env)(var),
            None => (self.env)("TOOLYARD_ORACLE_API_KEY").or_else(|| (self.env)("OPENAI_API_KEY")),
        };
        let base_url = c
            .base_url
            .clone()
            .or_else(|| (self.env)("TOOLYARD_ORACLE_BASE_URL"));
        let proxy = c
            .proxy_url
            .clone()
            .or_else(|| (self.env)("TOOLYARD_PROXY_URL"));
        let route = match (base_url, proxy, &key) {
            (Some(base_url), _, _) => Route::Direct { base_url, key },
            (None, Some(url), _) => Route::Proxy {
                url,
                token: (self.env)("TOOLYARD_PROXY_TOKEN"),
            },
            (None, None, Some(_)) => Route::Direct {
                base_url: OPENAI_BASE_URL.into(),
                key,
            },
            (None, None, None) => {
                return Err(ToolError::Unavailable(
                    "oracle is not configured: set TOOLYARD_ORACLE_BASE_URL (an OpenAI-compatible API, e.g. https://api.openai.com/v1), TOOLYARD_ORACLE_MODEL and TOOLYARD_ORACLE_API_KEY (or OPENAI_API_KEY); or [oracle] base_url, model and api_key_env in the catalog; or a server proxy with TOOLYARD_PROXY_URL / [oracle] proxy_url".into(),
                ));
            }
        };
        let model = c
            .model
            .clone()
            .or_else(|| (self.env)("TOOLYARD_ORACLE_MODEL"))
            .ok_or_else(|| {
                ToolError::Unavailable(
                    "oracle has an endpoint but no model: set TOOLYARD_ORACLE_MODEL or [oracle] model".into(),
                )
            })?;
        Ok((route, model))
    }
}

/// The user message: the question, then the context when there is one.
fn user_message(args: &OracleArgs) -> String {
    match args
        .context
        .as_deref()
        .map(str::trim)
        .filter(|c| !c.is_empty())
    {
        Some(ctx) => format!("{}\n\n# Context\n\n{ctx}", args.question.trim()),
        None => args.question.trim().to_string(),
    }
}

/// The answer text of an OpenAI chat-completions response or a Loom proxy response.
fn answer_of(body: &[u8], service: &str) -> Result<(String, Option<String>), ToolError> {
    #[derive(Deserialize)]
    struct Message {
        content: Option<Value>,
    }
    #[derive(Deserialize)]
    struct Choice {
        message: Message,
        finish_reason: Option<String>,
    }
    #[derive(Deserialize)]
    struct Completion {
        #[serde(default)]
        choices: Vec<Choice>,
        // Loom's proxy answers {message, finish_reason} without choices.
        message: Option<Message>,
        finish_reason: Option<String>,
    }
    let c: Completion = parse_json(service, body)?;
    let (message, finish) = match c.choices.into_iter().next() {
        Some(ch) => (Some(ch.message), ch.finish_reason),
        None => (c.message, c.finish_reason),
    };
    let content = message.and_then(|m| m.content).ok_or_else(|| {
        ToolError::Upstream(format!(
            "{service} answered without choices[0].message.content: {}",
            crate::web::http::body_snippet(body)
        ))
    })?;
    let text = match content {
        Value::String(s) => s,
        // Content as a list of parts: keep the text ones.
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        other => other.to_string(),
    };
    Ok((text, finish))
}

#[async_trait]
impl TypedTool for Oracle {
    type Args = OracleArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new(
            "oracle",
            "Ask a second, independent model for advice: a review, a hard bug, a design choice. \
         Give a self-contained question and the context it needs; it cannot see the workspace.",
            Annotations {
                idempotent: false,
                ..Annotations::WEB
            },
        )
        .output::<OracleData>()
    }

    fn needs(&self) -> Option<String> {
        needs_of(&self.config, |c| self.route(c))
    }

    async fn run(&self, args: OracleArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let c = self.config.as_ref().map_err(Clone::clone)?;
        if args.question.trim().is_empty() {
            return Err(ToolError::InvalidArguments(
                "question is empty; ask something".into(),
            ));
        }
        let (route, model) = self.route(c)?;
        let mut messages = Vec::new();
        let system = c.system_prompt.as_deref().unwrap_or(DEFAULT_SYSTEM_PROMPT);
        if !system.trim().is_empty() {
            messages.push(json!({"role": "system", "content": system}));
        }
        messages.push(json!({"role": "user", "content": user_message(&args)}));
        let mut body = json!({"model": model, "messages": messages});
        if let Some(t) = c.max_tokens {
            body["max_tokens"] = json!(t);
        }
        if let Some(t) = c.temperature {
            body["temperature"] = json!(t);
        }
        let policy = RetryPolicy {
            max_retries: c.max_retries.unwrap_or(2),
            base: Duration::from_millis(c.backoff_base_ms.unwrap_or(1000)),
            max: Duration::from_secs(30),
        };
        let timeout = Duration::from_millis(c.timeout_ms.unwrap_or(120_000));
        let (url, bearer, via, name, hint) = match &route {
            Route::Direct { base_url, key } => (
                format!("{}/chat/completions", base_url.trim_end_matches('/')),
                key.clone(),
                Via::Direct,
                "the oracle model API",
                "set TOOLYARD_ORACLE_API_KEY or OPENAI_API_KEY (or [oracle] api_key_env) to a valid key",
            ),
            Route::Proxy { url, token } => (
                format!("{}/proxy/openai/complete", url.trim_end_matches('/')),
                token.clone(),
                Via::Proxy,
                "the oracle proxy",
                "set TOOLYARD_PROXY_TOKEN to a token the server accepts",
            ),
        };
        let service = Service {
            name,
            auth_hint: hint,
        };
        tracing::debug!(via = ?via, model = %model, "oracle");
        let answer_body = send_with_retry(&service, &policy, &ctx.cancel, timeout, || {
            let req = self.client.post(&url).json(&body);
            match &bearer {
                Some(k) => req.bearer_auth(k),
                None => req,
            }
        })
        .await?;
        let (answer, finish_reason) = answer_of(&answer_body, name)?;
        let mut out = answer.clone();
        if finish_reason.as_deref() == Some("length") {
            out.push_str("\n\n[the answer was cut off at the model's token limit]");
        }
        let data = OracleData {
            answer,
            model,
            via,
            finish_reason,
        };
        Ok(ToolResult::ok(out).with_data(serde_json::to_value(data)?))
    }
}

/// The oracle tool configured from `env`'s catalog (`[oracle]`) and the process environment.
pub fn tools(env: Arc<ToolEnv>) -> Vec<Arc<dyn Tool>> {
    let config = env
        .catalog
        .section::<OracleConfig>("oracle")
        .map_err(|e| ToolError::InvalidArguments(e.to_string()));
    vec![Arc::new(Typed(Oracle::new(
        config,
        crate::web::process_env(),
    )))]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> EnvLookup {
        Arc::new(move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn route_prefers_base_url_then_proxy_then_openai() {
        let o = Oracle::new(
            Ok(OracleConfig::default()),
            env_of(&[
                ("TOOLYARD_ORACLE_BASE_URL", "http://b/v1"),
                ("TOOLYARD_PROXY_URL", "http://p"),
                ("TOOLYARD_ORACLE_MODEL", "m"),
            ]),
        );
        let c = OracleConfig::default();
        assert!(matches!(o.route(&c).unwrap().0, Route::Direct { .. }));
        let o = Oracle::new(
            Ok(c.clone()),
            env_of(&[
                ("TOOLYARD_PROXY_URL", "http://p"),
                ("TOOLYARD_ORACLE_MODEL", "m"),
            ]),
        );
        assert!(matches!(o.route(&c).unwrap().0, Route::Proxy { .. }));
        let o = Oracle::new(
            Ok(c.clone()),
            env_of(&[("OPENAI_API_KEY", "k"), ("TOOLYARD_ORACLE_MODEL", "m")]),
        );
        assert_eq!(
            o.route(&c).unwrap().0,
            Route::Direct {
                base_url: OPENAI_BASE_URL.into(),
                key: Some("k".into())
            }
        );
    }

    #[test]
    fn content_parts_are_joined() {
        let body = br#"{"choices":[{"message":{"content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}}]}"#;
        assert_eq!(answer_of(body, "x").unwrap().0, "ab");
        let loom = br#"{"message":{"role":"assistant","content":"hi"},"finish_reason":"end_turn"}"#;
        assert_eq!(
            answer_of(loom, "x").unwrap(),
            ("hi".into(), Some("end_turn".into()))
        );
    }
}
