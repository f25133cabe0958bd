//! An agent loop on seeds 003/004's API: the model (any OpenAI-compatible Chat Completions
//! endpoint) gets the registry's tools; each tool call goes through
//! `ToolRegistry.get(name).invoke(args, ctx)`; results go back as tool messages (an error as
//! `Error: ...`); the loop ends when the model answers without a tool call.
//!
//! cargo run -p toolyard-api --example agent_loop -- BASE_URL WORKSPACE "PROMPT"
//! (BASE_URL e.g. http://127.0.0.1:8000/v1; OPENAI_API_KEY is sent when set)

use std::path::PathBuf;

use serde_json::{Value, json};
use toolyard_api::{ToolContext, ToolRegistry};

/// One tool call the loop made, and what went back to the model.
#[derive(Debug)]
pub struct Step {
    /// The tool's name.
    pub tool: String,
    /// Whether it succeeded.
    pub ok: bool,
    /// The tool message's content.
    pub content: String,
}

/// Run the loop until the model stops calling tools (at most `max_turns` requests); returns
/// the steps and the model's final text.
pub async fn run(
    base_url: &str,
    registry: &ToolRegistry,
    ctx: &ToolContext,
    prompt: &str,
    max_turns: usize,
) -> Result<(Vec<Step>, String), Box<dyn std::error::Error>> {
    let tools: Vec<Value> = registry
        .definitions()
        .into_iter()
        .map(|d| {
            json!({"type": "function", "function": {
            "name": d.name, "description": d.description, "parameters": d.input_schema}})
        })
        .collect();
    let mut messages = vec![json!({"role": "user", "content": prompt})];
    let http = reqwest::Client::new();
    let key = std::env::var("OPENAI_API_KEY").unwrap_or_else(|_| "none".into());
    let mut steps = Vec::new();
    for _ in 0..max_turns {
        let reply: Value = http
            .post(format!(
                "{}/chat/completions",
                base_url.trim_end_matches('/')
            ))
            .bearer_auth(&key)
            .json(&json!({"model": "agent", "messages": messages, "tools": tools}))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let message = reply["choices"][0]["message"].clone();
        let calls = message["tool_calls"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        messages.push(message.clone());
        if calls.is_empty() {
            return Ok((steps, message["content"].as_str().unwrap_or("").to_string()));
        }
        for call in calls {
            let name = call["function"]["name"].as_str().unwrap_or("");
            let args: Value =
                serde_json::from_str(call["function"]["arguments"].as_str().unwrap_or("{}"))
                    .unwrap_or_else(|e| json!({"_unparsable": e.to_string()}));
            let outcome = match registry.get(name) {
                Some(tool) => tool.invoke(args, ctx).await,
                None => Err(toolyard_api::ToolError::NotFound(format!(
                    "no tool named {name}"
                ))),
            };
            let (ok, content) = match outcome {
                Ok(value) => (true, value.to_string()),
                Err(e) => (false, format!("Error: {e}")),
            };
            messages.push(json!({"role": "tool", "tool_call_id": call["id"], "content": content}));
            steps.push(Step {
                tool: name.to_string(),
                ok,
                content,
            });
        }
    }
    Err(format!("the model still called tools after {max_turns} turns").into())
}

#[allow(dead_code)] // the test includes this file as a module and calls `run`
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: agent_loop BASE_URL WORKSPACE PROMPT";
    let base_url = args.next().ok_or(usage)?;
    let workspace = PathBuf::from(args.next().ok_or(usage)?);
    let prompt = args.next().ok_or(usage)?;
    let registry = ToolRegistry::for_workspace(&workspace)?;
    let ctx = ToolContext::new(&workspace).with_thread("agent-loop");
    let (steps, answer) = run(&base_url, &registry, &ctx, &prompt, 50).await?;
    for s in &steps {
        println!(
            "{} {}: {}",
            if s.ok { "ok " } else { "err" },
            s.tool,
            s.content
        );
    }
    println!("{answer}");
    Ok(())
}
