//! The MCP server's [`Approver`]: a command's network request asked of the user through the
//! client's elicitation, in the protocol era the client speaks.
//!
//! - **Initialize era** (2025-11-25 and before): an `elicitation/create` request to the client
//!   while the call waits.
//! - **2026-07-28**: servers send no requests; the call is answered with an input-required
//!   result carrying the question, and the client retries the call with the user's answer
//!   (`inputResponses`) and the opaque `requestState`. The state is a one-time handle to what
//!   the server keeps itself (the tool and arguments asked about), so an answer applies only to
//!   the question this server asked, for the same call.
//!
//! A client that declared no form elicitation, or whose user declines or dismisses the
//! question, gets the request refused with the catalog line to add.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rmcp::RoleServer;
use rmcp::model::{
    ClientCapabilities, ElicitRequestParams, ElicitResult, ElicitationAction, InputRequest,
    InputRequiredResult, JsonObject, ProtocolVersion,
};
use rmcp::service::{Peer, RequestContext};
use serde_json::{Value, json};
use toolyard_dispatch::network_request::{Answer, Approver, CHOICES, Question, Unanswered};

/// The key of the question in an input-required result's `inputRequests`.
const KEY: &str = "toolyard_network_request";

/// How long the initialize era waits for the user's answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(600);

/// How many unanswered questions of the 2026-07-28 era the server remembers (the oldest go).
const MAX_OPEN: usize = 256;

/// Questions asked in the 2026-07-28 era and not answered yet: handle → the call they were
/// asked for (tool and arguments).
#[derive(Default)]
pub(crate) struct Open {
    asked: Mutex<VecDeque<(String, String, JsonObject)>>,
}

impl Open {
    /// Remember a question asked for `tool` with `args`; its handle.
    fn remember(&self, tool: &str, args: &JsonObject) -> String {
        let handle = uuid::Uuid::new_v4().simple().to_string();
        if let Ok(mut a) = self.asked.lock() {
            if a.len() >= MAX_OPEN {
                a.pop_front();
            }
            a.push_back((handle.clone(), tool.to_string(), args.clone()));
        }
        handle
    }

    /// Take the question of `handle`, if this server asked it for `tool` with `args`.
    fn take(&self, handle: &str, tool: &str, args: &JsonObject) -> bool {
        let Ok(mut a) = self.asked.lock() else {
            return false;
        };
        match a.iter().position(|(h, _, _)| h == handle) {
            Some(i) => {
                let (_, t, x) = a.remove(i).unwrap_or_default();
                t == tool && &x == args
            }
            None => false,
        }
    }
}

/// How this call's client can be asked.
enum Channel {
    /// An `elicitation/create` request (initialize era).
    Request(Peer<RoleServer>),
    /// The answer the client's retry carried (2026-07-28), or none yet.
    Retry(Option<Value>),
}

/// The approver of one MCP call.
pub(crate) struct McpApprover {
    channel: Channel,
    /// Why the client cannot be asked, when it cannot.
    cannot: Option<String>,
    /// The question to send back as an input-required result (2026-07-28).
    pending: Mutex<Option<ElicitRequestParams>>,
}

impl McpApprover {
    /// The approver for a call of `tool` with `args` arriving with `ctx`; `retry` is the
    /// `requestState` and `inputResponses` the call carried.
    pub(crate) fn new(
        ctx: &RequestContext<RoleServer>,
        open: &Open,
        tool: &str,
        args: &JsonObject,
        retry: (Option<&str>, Option<&BTreeMap<String, Value>>),
    ) -> Self {
        let caps: Option<ClientCapabilities> = ctx.client_capabilities();
        let form = caps
            .and_then(|c| c.elicitation)
            .is_some_and(|e| e.form.is_some() || e.url.is_none());
        let cannot = (!form).then(|| {
            "your MCP client declared no form elicitation, so Toolyard cannot ask you".to_string()
        });
        let modern = ctx
            .protocol_version()
            .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
        let channel = if modern {
            // Only an answer to a question this server asked for this very call counts.
            let answer = match retry {
                (Some(handle), Some(responses)) if open.take(handle, tool, args) => {
                    responses.get(KEY).cloned()
                }
                _ => None,
            };
            Channel::Retry(answer)
        } else {
            Channel::Request(ctx.peer.clone())
        };
        Self {
            channel,
            cannot,
            pending: Mutex::new(None),
        }
    }

    /// The input-required result for the question this call left open, if it left one: the
    /// call is answered with it instead of its result.
    pub(crate) fn input_required(
        &self,
        open: &Open,
        tool: &str,
        args: &JsonObject,
    ) -> Option<InputRequiredResult> {
        let params = self.pending.lock().ok()?.take()?;
        let request: InputRequest = serde_json::from_value(json!({
            "method": "elicitation/create",
            "params": params,
        }))
        .ok()?;
        let handle = open.remember(tool, args);
        Some(InputRequiredResult::new(
            Some(BTreeMap::from([(KEY.to_string(), request)])),
            Some(handle),
        ))
    }
}

/// The form the user answers: one choice.
fn form(question: &Question) -> Option<ElicitRequestParams> {
    let choices: Vec<Value> = CHOICES
        .iter()
        .map(|(value, title, _)| json!({"const": value, "title": title}))
        .collect();
    let schema = json!({
        "type": "object",
        "properties": {
            "grant": {
                "type": "string",
                "title": "Let the command reach these hosts?",
                "oneOf": choices,
            }
        },
        "required": ["grant"],
    });
    let message = question.message();
    serde_json::from_value(json!({"mode": "form", "message": message, "requestedSchema": schema}))
        .or_else(|_| serde_json::from_value(json!({"message": message, "requestedSchema": schema})))
        .map_err(|e| tracing::error!(error = %e, "the network request's form is not valid MCP"))
        .ok()
}

/// The answer an elicitation result gives.
fn answer_of(result: &ElicitResult) -> Result<Answer, Unanswered> {
    match result.action {
        ElicitationAction::Accept => {
            let choice = result
                .content
                .as_ref()
                .and_then(|c| c.get("grant"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            Answer::from_choice(choice).ok_or_else(|| {
                Unanswered::Dismissed(format!(
                    "the answer `{choice}` is none of call, session, always, deny"
                ))
            })
        }
        ElicitationAction::Decline => Ok(Answer::Deny),
        // Cancel, and any action a later protocol adds: no answer.
        _ => Err(Unanswered::Dismissed(
            "the question was dismissed without an answer".into(),
        )),
    }
}

#[async_trait]
impl Approver for McpApprover {
    async fn ask(&self, question: &Question) -> Result<Answer, Unanswered> {
        if let Some(why) = &self.cannot {
            return Err(Unanswered::CannotAsk(why.clone()));
        }
        let params = form(question).ok_or_else(|| {
            Unanswered::CannotAsk("the question could not be put in MCP's form".into())
        })?;
        match &self.channel {
            Channel::Request(peer) => {
                match peer
                    .create_elicitation_with_timeout(params, Some(ANSWER_TIMEOUT))
                    .await
                {
                    Ok(result) => answer_of(&result),
                    Err(e) => Err(Unanswered::Dismissed(format!(
                        "the client did not answer the question ({e})"
                    ))),
                }
            }
            Channel::Retry(Some(answer)) => {
                let result: ElicitResult = serde_json::from_value(answer.clone()).map_err(|e| {
                    Unanswered::Dismissed(format!(
                        "the client's answer is not an elicitation result ({e})"
                    ))
                })?;
                answer_of(&result)
            }
            Channel::Retry(None) => {
                if let Ok(mut p) = self.pending.lock() {
                    *p = Some(params);
                }
                Err(Unanswered::Pending)
            }
        }
    }
}

/// The approver as the dispatcher takes it.
pub(crate) fn shared(a: &Arc<McpApprover>) -> Arc<dyn Approver> {
    a.clone()
}
