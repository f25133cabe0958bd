//! The MCP conformance suite's fixtures (`@modelcontextprotocol/conformance`, server mode): the
//! "everything server" tools, resources and prompts its scenarios call by name.
//!
//! Compiled only with the `conformance` feature and served only when
//! `TOOLYARD_MCP_CONFORMANCE=1`; no normal build or run of Toolyard contains them. Results are
//! built from JSON literals because that is the shape the suite checks, byte for byte.

#![allow(deprecated)] // logging and sampling are deprecated by SEP-2577 but still tested.

use std::collections::HashSet;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, CompleteRequestParams, CompleteResult,
    CreateMessageRequestParams, ElicitRequestParams, GetPromptRequestParams, GetPromptResponse,
    GetPromptResult, Implementation, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, LoggingLevel, LoggingMessageNotificationParam, ProgressNotificationParam,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, ServerCapabilities,
    ServerConfig, SetLevelRequestParams, SubscribeRequestParams, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::Mutex;

/// A 1x1 red PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
/// An empty WAV file.
const WAV: &str = "UklGRiQAAABXQVZFZm10IBAAAAABAAEARKwAAIhYAQACABAAZGF0YQAAAAA=";

/// Per-connection fixture state: the log level and the subscribed URIs.
#[derive(Default)]
pub(crate) struct FixtureState {
    level: Mutex<Option<LoggingLevel>>,
    subscriptions: Mutex<HashSet<String>>,
}

fn parse<T: DeserializeOwned>(v: Value) -> Result<T, McpError> {
    serde_json::from_value(v).map_err(|e| McpError::internal_error(format!("fixture: {e}"), None))
}

/// The everything-server identity and capabilities the suite expects.
pub(crate) fn server_info() -> ServerConfig {
    let caps = ServerCapabilities::builder()
        .enable_tools()
        .enable_tool_list_changed()
        .enable_resources()
        .enable_resources_subscribe()
        .enable_resources_list_changed()
        .enable_prompts()
        .enable_prompts_list_changed()
        .enable_logging()
        .enable_completions()
        .build();
    ServerConfig::new(caps).with_server_info(Implementation::new(
        "toolyard-conformance",
        env!("CARGO_PKG_VERSION"),
    ))
}

const NO_ARGS: &[&str] = &[
    "test_simple_text",
    "test_image_content",
    "test_audio_content",
    "test_embedded_resource",
    "test_multiple_content_types",
    "test_tool_with_logging",
    "test_tool_with_progress",
    "test_error_handling",
    "test_reconnection",
    "test_elicitation_sep1034_defaults",
    "test_elicitation_sep1330_enums",
];

/// Whether `name` is one of the fixture tools.
pub(crate) fn is_fixture_tool(name: &str) -> bool {
    NO_ARGS.contains(&name)
        || matches!(
            name,
            "test_sampling" | "test_elicitation" | "json_schema_2020_12_tool"
        )
}

/// The fixture tools' definitions.
pub(crate) fn tools() -> Vec<Tool> {
    let empty = json!({"type": "object", "properties": {}});
    let mut defs: Vec<Value> = NO_ARGS
        .iter()
        .map(|n| json!({"name": n, "description": format!("Conformance fixture {n}"), "inputSchema": empty}))
        .collect();
    defs.push(json!({"name": "test_sampling", "description": "Conformance fixture test_sampling",
        "inputSchema": {"type": "object", "properties": {"prompt": {"type": "string"}}, "required": ["prompt"]}}));
    defs.push(json!({"name": "test_elicitation", "description": "Conformance fixture test_elicitation",
        "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}}));
    defs.push(json!({"name": "json_schema_2020_12_tool", "description": "Tool with JSON Schema 2020-12 features",
        "inputSchema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {"address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
            "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
            "additionalProperties": false
        }}));
    defs.into_iter()
        .filter_map(|d| serde_json::from_value(d).ok())
        .collect()
}

fn text(t: impl Into<String>) -> Value {
    json!({"content": [{"type": "text", "text": t.into()}]})
}

/// Run one fixture tool.
pub(crate) async fn call_tool(
    state: &FixtureState,
    request: CallToolRequestParams,
    ctx: RequestContext<RoleServer>,
) -> Result<CallToolResult, McpError> {
    let args = request.arguments.unwrap_or_default();
    let result = match request.name.as_ref() {
        "test_simple_text" => text("This is a simple text response for testing."),
        "test_image_content" => {
            json!({"content": [{"type": "image", "data": PNG, "mimeType": "image/png"}]})
        }
        "test_audio_content" => {
            json!({"content": [{"type": "audio", "data": WAV, "mimeType": "audio/wav"}]})
        }
        "test_embedded_resource" => json!({"content": [{"type": "resource", "resource": {
            "uri": "test://embedded-resource", "mimeType": "text/plain",
            "text": "This is an embedded resource content."}}]}),
        "test_multiple_content_types" => json!({"content": [
            {"type": "text", "text": "Multiple content types test:"},
            {"type": "image", "data": PNG, "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "test://mixed-content-resource",
                "mimeType": "application/json", "text": "{\"test\":\"data\",\"value\":123}"}}]}),
        "test_tool_with_logging" => {
            for (i, msg) in [
                "Tool execution started",
                "Tool processing data",
                "Tool execution completed",
            ]
            .iter()
            .enumerate()
            {
                if i > 0 {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                log(state, &ctx, LoggingLevel::Info, msg).await;
            }
            text("Logging test completed")
        }
        "test_tool_with_progress" => {
            let token = ctx.meta.get_progress_token();
            for (i, p) in [0.0, 50.0, 100.0].into_iter().enumerate() {
                if i > 0 {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                if let Some(t) = &token {
                    let param = ProgressNotificationParam::new(t.clone(), p).with_total(100.0);
                    let _ = ctx.peer.notify_progress(param).await;
                }
            }
            text("Progress test completed")
        }
        "test_error_handling" => json!({"isError": true, "content": [{"type": "text",
            "text": "This tool intentionally returns an error for testing"}]}),
        "test_reconnection" => {
            tokio::time::sleep(Duration::from_millis(100)).await;
            text("Reconnection test completed successfully")
        }
        "test_sampling" => {
            let prompt = args.get("prompt").and_then(Value::as_str).unwrap_or("Hello");
            let params: CreateMessageRequestParams = parse(json!({
                "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
                "maxTokens": 100
            }))?;
            match ctx.peer.create_message(params).await {
                Ok(r) => {
                    let v = serde_json::to_value(&r).unwrap_or_default();
                    let t = v["content"]["text"]
                        .as_str()
                        .or_else(|| v["content"][0]["text"].as_str())
                        .unwrap_or("")
                        .to_string();
                    text(format!("LLM response: {t}"))
                }
                Err(e) => json!({"isError": true, "content": [{"type": "text", "text": format!("Sampling error: {e}")}]}),
            }
        }
        "test_elicitation" => {
            let message = args
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("Please provide your information");
            elicit(&ctx, message, json!({
                "type": "object",
                "properties": {
                    "username": {"type": "string", "description": "User's response"},
                    "email": {"type": "string", "description": "User's email address"}
                },
                "required": ["username", "email"]
            }), "User response").await?
        }
        "test_elicitation_sep1034_defaults" => {
            elicit(&ctx, "Please review and update the form fields with defaults", json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "User name", "default": "John Doe"},
                    "age": {"type": "integer", "description": "User age", "default": 30},
                    "score": {"type": "number", "description": "User score", "default": 95.5},
                    "status": {"type": "string", "description": "User status",
                        "enum": ["active", "inactive", "pending"], "default": "active"},
                    "verified": {"type": "boolean", "description": "Verification status", "default": true}
                },
                "required": []
            }), "Elicitation completed").await?
        }
        "test_elicitation_sep1330_enums" => {
            elicit(&ctx, "Please select options", json!({
                "type": "object",
                "properties": {
                    "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
                    "titledSingle": {"type": "string", "oneOf": [
                        {"const": "value1", "title": "First Option"},
                        {"const": "value2", "title": "Second Option"},
                        {"const": "value3", "title": "Third Option"}]},
                    "legacyEnum": {"type": "string", "enum": ["opt1", "opt2", "opt3"],
                        "enumNames": ["Option One", "Option Two", "Option Three"]},
                    "untitledMulti": {"type": "array", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
                    "titledMulti": {"type": "array", "items": {"anyOf": [
                        {"const": "value1", "title": "First Choice"},
                        {"const": "value2", "title": "Second Choice"},
                        {"const": "value3", "title": "Third Choice"}]}}
                },
                "required": []
            }), "Elicitation completed").await?
        }
        "json_schema_2020_12_tool" => text(format!(
            "Received: {}",
            serde_json::to_string(&args).unwrap_or_default()
        )),
        other => {
            return Err(McpError::invalid_params(
                format!("unknown fixture tool {other}"),
                None,
            ));
        }
    };
    parse(result)
}

async fn elicit(
    ctx: &RequestContext<RoleServer>,
    message: &str,
    schema: Value,
    label: &str,
) -> Result<Value, McpError> {
    let params: ElicitRequestParams = parse(json!({
        "mode": "form", "message": message, "requestedSchema": schema
    }))
    .or_else(|_| parse(json!({"message": message, "requestedSchema": schema})))?;
    Ok(match ctx.peer.create_elicitation(params).await {
        Ok(r) => {
            let v = serde_json::to_value(&r).unwrap_or_default();
            text(format!(
                "{label}: action={}, content={}",
                v["action"].as_str().unwrap_or("unknown"),
                v.get("content").cloned().unwrap_or(Value::Null)
            ))
        }
        Err(e) => {
            json!({"isError": true, "content": [{"type": "text", "text": format!("Elicitation error: {e}")}]})
        }
    })
}

fn rank(l: LoggingLevel) -> u8 {
    match l {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

async fn log(
    state: &FixtureState,
    ctx: &RequestContext<RoleServer>,
    level: LoggingLevel,
    msg: &str,
) {
    let min = *state.level.lock().await;
    if min.is_some_and(|m| rank(level) < rank(m)) {
        return;
    }
    let param =
        LoggingMessageNotificationParam::new(level, json!(msg)).with_logger("toolyard-conformance");
    let _ = ctx.peer.notify_logging_message(param).await;
}

/// `logging/setLevel`.
pub(crate) async fn set_level(
    state: &FixtureState,
    request: SetLevelRequestParams,
) -> Result<(), McpError> {
    *state.level.lock().await = Some(request.level);
    Ok(())
}

/// `resources/subscribe` (and, with `on` false, unsubscribe).
pub(crate) async fn subscribe(
    state: &FixtureState,
    request: SubscribeRequestParams,
    on: bool,
) -> Result<(), McpError> {
    let mut subs = state.subscriptions.lock().await;
    if on {
        subs.insert(request.uri);
    } else {
        subs.remove(&request.uri);
    }
    Ok(())
}

/// `resources/list`.
pub(crate) fn list_resources(enabled: bool) -> ListResourcesResult {
    if !enabled {
        return ListResourcesResult::default();
    }
    parse(json!({"resources": [
        {"uri": "test://static-text", "name": "Static Text Resource",
         "description": "A static text resource for testing", "mimeType": "text/plain"},
        {"uri": "test://static-binary", "name": "Static Binary Resource",
         "description": "A static binary resource (image) for testing", "mimeType": "image/png"},
        {"uri": "test://watched-resource", "name": "Watched Resource",
         "description": "A resource that can be subscribed to", "mimeType": "text/plain"}
    ]}))
    .unwrap_or_default()
}

/// `resources/templates/list`.
pub(crate) fn list_resource_templates(enabled: bool) -> ListResourceTemplatesResult {
    if !enabled {
        return ListResourceTemplatesResult::default();
    }
    parse(json!({"resourceTemplates": [
        {"uriTemplate": "test://template/{id}/data", "name": "Resource Template",
         "description": "A resource template with parameter substitution", "mimeType": "application/json"}
    ]}))
    .unwrap_or_default()
}

/// `resources/read`.
pub(crate) fn read_resource(
    enabled: bool,
    request: ReadResourceRequestParams,
) -> Result<ReadResourceResponse, McpError> {
    let uri = request.uri;
    let not_found =
        || McpError::resource_not_found(format!("no resource {uri}"), Some(json!({"uri": uri})));
    if !enabled {
        return Err(not_found());
    }
    let contents = match uri.as_str() {
        "test://static-text" => json!([{"uri": uri, "mimeType": "text/plain",
            "text": "This is the content of the static text resource."}]),
        "test://static-binary" => json!([{"uri": uri, "mimeType": "image/png", "blob": PNG}]),
        "test://watched-resource" => json!([{"uri": uri, "mimeType": "text/plain",
            "text": "Watched resource content"}]),
        other => match other
            .strip_prefix("test://template/")
            .and_then(|r| r.strip_suffix("/data"))
        {
            Some(id) if !id.is_empty() && !id.contains('/') => json!([{"uri": uri,
                "mimeType": "application/json",
                "text": json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")}).to_string()}]),
            _ => return Err(not_found()),
        },
    };
    let result: ReadResourceResult = parse(json!({"contents": contents}))?;
    Ok(result.into())
}

/// `prompts/list`.
pub(crate) fn list_prompts(enabled: bool) -> ListPromptsResult {
    if !enabled {
        return ListPromptsResult::default();
    }
    parse(json!({"prompts": [
        {"name": "test_simple_prompt", "description": "A simple prompt without arguments"},
        {"name": "test_prompt_with_arguments", "description": "A prompt with required arguments",
         "arguments": [
            {"name": "arg1", "description": "First test argument", "required": true},
            {"name": "arg2", "description": "Second test argument", "required": true}]},
        {"name": "test_prompt_with_embedded_resource", "description": "A prompt with an embedded resource",
         "arguments": [{"name": "resourceUri", "description": "URI of the resource to embed", "required": true}]},
        {"name": "test_prompt_with_image", "description": "A prompt with image content"}
    ]}))
    .unwrap_or_default()
}

/// `prompts/get`.
pub(crate) fn get_prompt(
    enabled: bool,
    request: GetPromptRequestParams,
) -> Result<GetPromptResponse, McpError> {
    let args = request.arguments.unwrap_or_default();
    let arg = |k: &str| {
        args.get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let messages = match request.name.as_str() {
        _ if !enabled => Value::Null,
        "test_simple_prompt" => json!([{"role": "user",
            "content": {"type": "text", "text": "This is a simple prompt for testing."}}]),
        "test_prompt_with_arguments" => json!([{"role": "user", "content": {"type": "text",
            "text": format!("Prompt with arguments: arg1='{}', arg2='{}'", arg("arg1"), arg("arg2"))}}]),
        "test_prompt_with_embedded_resource" => json!([
            {"role": "user", "content": {"type": "resource", "resource": {"uri": arg("resourceUri"),
                "mimeType": "text/plain", "text": "Embedded resource content for testing."}}},
            {"role": "user", "content": {"type": "text", "text": "Please process the embedded resource above."}}]),
        "test_prompt_with_image" => json!([
            {"role": "user", "content": {"type": "image", "data": PNG, "mimeType": "image/png"}},
            {"role": "user", "content": {"type": "text", "text": "Please analyze the image above."}}]),
        _ => Value::Null,
    };
    if messages.is_null() {
        return Err(McpError::invalid_params(
            format!("no prompt {}", request.name),
            None,
        ));
    }
    let result: GetPromptResult = parse(json!({"messages": messages}))?;
    Ok(result.into())
}

/// `completion/complete`: a fixed, filtered list (the suite checks the shape only).
pub(crate) fn complete(request: CompleteRequestParams) -> Result<CompleteResult, McpError> {
    let prefix = request.argument.value;
    let values: Vec<&str> = ["paris", "park", "party"]
        .into_iter()
        .filter(|v| v.starts_with(&prefix))
        .collect();
    parse(json!({"completion": {"values": values, "total": values.len(), "hasMore": false}}))
}
