//! One `tools/call`: a run of the agent, started through the core and
//! followed to its end within the call.
//!
//! The run is attached to the call: it is the call's work, so when the
//! call's stream goes away (the session ends) the run is cancelled with
//! it, and the client's `notifications/cancelled` cancels it at once, and
//! everything under it. While it runs:
//!
//! - each event that makes a progress line is a progress notification,
//!   when the client sent a progress token ([`super::progress`]);
//! - an approval or a question anywhere in the run is an elicitation
//!   request to the client, when the client declared the elicitation
//!   capability ([`super::ask`]). The requests are sent from the call's
//!   own task (so they ride the call's response stream) while the events
//!   keep flowing: approvals in parallel branches are asked side by side;
//! - without the capability, the run's approval mode is the config's
//!   `mcp.approval_mode` (by default `auto_deny`: such a client gets a
//!   denial, never a run that waits for nobody), and a question fails the
//!   call: the run is cancelled and the result says the client cannot
//!   answer questions.
//!
//! The result is the run's output as text, with `runId` and `traceId` in
//! `_meta`; a failed or cancelled run is a tool error ([`super::error`]).

use std::{future::Future, pin::Pin};

use baton_proto::v1::{self as pb, run_event::Payload};
use futures::{StreamExt as _, stream::FuturesUnordered};
use rmcp::{
    Peer, RoleServer,
    model::{CallToolResult, ContentBlock, JsonObject},
};
use tokio_util::sync::CancellationToken;
use tonic::Code;

use super::{
    ask::{self, Asker},
    error::{McpError, RunIds, meta, tool_error},
    face::Mcp,
    progress::Progress,
};
use crate::{
    app::{Caller, Started},
    config::McpApprovalMode,
    request::AgentRequest,
};

/// What the client can do for a call.
pub struct Client {
    /// Talks to it.
    pub peer: Peer<RoleServer>,
    /// Its progress notifications, if it asked for them.
    pub progress: Option<Progress>,
    /// Whether it declared elicitation (in form mode).
    pub elicits: bool,
    /// Its cancellation of the call.
    pub cancelled: CancellationToken,
}

/// An elicitation under way: what it settles to.
type Asking<'a> = Pin<Box<dyn Future<Output = Option<String>> + Send + 'a>>;

/// Runs `agent` on `arguments` for `caller`, answering the call.
pub async fn call(
    face: &Mcp,
    caller: &Caller,
    agent: &str,
    arguments: Option<JsonObject>,
    mut client: Client,
) -> Result<CallToolResult, McpError> {
    let (input, context) = parse(arguments)?;
    let approval_mode = match (client.elicits, face.approval_mode()) {
        (true, _) | (false, McpApprovalMode::Ask) => pb::ApprovalMode::Ask,
        (false, McpApprovalMode::AutoApprove) => pb::ApprovalMode::AutoApprove,
        (false, McpApprovalMode::AutoDeny) => pb::ApprovalMode::AutoDeny,
    };
    let request = pb::RunAgentRequest {
        agent: agent.to_owned(),
        input,
        run_context_json: context,
        approval_mode: approval_mode as i32,
        ..Default::default()
    };
    let core = face.core();
    let request = AgentRequest::try_from(request)
        .map_err(|e| McpError::from(core.refused("RunAgent", caller, e)))?;
    let Started {
        run_id,
        trace_id,
        mut events,
    } = core.start_agent(caller, request).await?;
    let ids = RunIds {
        run_id: &run_id,
        trace_id: &trace_id,
    };
    // The run's ids first, so a client that loses the call (its replica
    // gone) can still find the run through another face.
    if let Some(progress) = client.progress.as_mut() {
        progress
            .line(format!("run {run_id} started (trace {trace_id})"))
            .await;
    }
    let mut asking: FuturesUnordered<Asking<'_>> = FuturesUnordered::new();
    // Why the call fails though the run may not have (a question nobody
    // answers); the run is cancelled and its end awaited.
    let mut failure: Option<(Code, String)> = None;
    let mut cancelling = false;
    loop {
        tokio::select! {
            () = client.cancelled.cancelled(), if !cancelling => {
                cancelling = true;
                let reason = if face.shutdown().is_cancelled() {
                    "the MCP session ended: server shutting down"
                } else {
                    "cancelled by the MCP client"
                };
                let _ = core.cancel(caller, &run_id, reason).await;
            }
            Some(settled) = asking.next(), if !asking.is_empty() => {
                if let Some(why) = settled
                    && failure.is_none()
                {
                    let _ = core.cancel(caller, &run_id, &why).await;
                    failure = Some((Code::Aborted, why));
                }
            }
            item = events.next() => {
                let event = match item {
                    Some(Ok(event)) => event,
                    // The stream lost its place (a reader too slow): the
                    // call ends, and the run attached to it with it.
                    Some(Err(e)) => return Ok(tool_error(e.code(), &e.message(), Some(&ids))),
                    None => {
                        return Ok(tool_error(Code::Unavailable, "the run's events ended before the run did", Some(&ids)));
                    }
                };
                if let Some(progress) = client.progress.as_mut() {
                    progress.event(&event).await;
                }
                let at = Asker { agent: &event.agent, context: &event.context_id };
                match event.payload {
                    Some(Payload::ApprovalRequested(a)) if client.elicits => {
                        let params = ask::approval_request(&at, &a);
                        let peer = client.peer.clone();
                        let (caller, run_id) = (caller.clone(), run_id.clone());
                        asking.push(Box::pin(async move {
                            let answer = ask::approval_answer(peer.create_elicitation(params).await);
                            // Already settled (its deadline, the run's end): nothing to do.
                            let _ = core.resolve_approval(&caller, &run_id, &a.approval_id, answer).await;
                            None
                        }));
                    }
                    Some(Payload::InputRequested(q)) if client.elicits => {
                        let params = ask::question_request(&at, &q);
                        let peer = client.peer.clone();
                        let (caller, run_id) = (caller.clone(), run_id.clone());
                        asking.push(Box::pin(async move {
                            match ask::question_answer(&q.prompt, peer.create_elicitation(params).await) {
                                Ok(answer) => {
                                    let _ = core.submit_input(&caller, &run_id, &q.input_id, answer).await;
                                    None
                                }
                                Err(why) => Some(why),
                            }
                        }));
                    }
                    Some(Payload::InputRequested(q)) if failure.is_none() => {
                        let why = format!(
                            "the run asks {:?}, and this MCP client cannot answer questions (it did not declare the elicitation capability), so the run was cancelled",
                            q.prompt
                        );
                        let _ = core.cancel(caller, &run_id, &why).await;
                        failure = Some((Code::FailedPrecondition, why));
                    }
                    Some(Payload::RunCompleted(done)) => {
                        let mut result = CallToolResult::success(vec![ContentBlock::text(done.output)]);
                        result.meta = meta(Some(&ids), None);
                        return Ok(result);
                    }
                    Some(Payload::RunFailed(failed)) => {
                        let code = Code::from_i32(failed.code);
                        return Ok(tool_error(code, &failed.message, Some(&ids)));
                    }
                    Some(Payload::RunCancelled(c)) => {
                        let (code, message) = failure.take().unwrap_or((Code::Cancelled, c.reason));
                        return Ok(tool_error(code, &message, Some(&ids)));
                    }
                    _ => {}
                }
            }
        }
    }
}

/// `{input, context}`: the input text and the run context as JSON.
fn parse(arguments: Option<JsonObject>) -> Result<(String, String), McpError> {
    let mut arguments = arguments.unwrap_or_default();
    let input = match arguments.remove("input") {
        Some(serde_json::Value::String(s)) => s,
        Some(_) => return Err(McpError::argument("input", "must be a string")),
        None => return Err(McpError::argument("input", "is required")),
    };
    let context = match arguments.remove("context") {
        None | Some(serde_json::Value::Null) => String::new(),
        Some(v @ serde_json::Value::Object(_)) => v.to_string(),
        Some(_) => return Err(McpError::argument("context", "must be a JSON object")),
    };
    if let Some(other) = arguments.keys().next() {
        return Err(McpError::argument(
            "input",
            format!("unknown argument {other:?} (the arguments are input and context)"),
        ));
    }
    Ok((input, context))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn args(v: serde_json::Value) -> Option<JsonObject> {
        match v {
            serde_json::Value::Object(m) => Some(m),
            _ => None,
        }
    }

    #[test]
    fn arguments_are_an_input_string_and_an_optional_context_object() {
        let (input, context) =
            parse(args(json!({"input": "hi", "context": {"a": 1}}))).expect("parsed");
        assert_eq!((input.as_str(), context.as_str()), ("hi", r#"{"a":1}"#));
        let (_, context) = parse(args(json!({"input": "hi"}))).expect("parsed");
        assert_eq!(context, "");
        for bad in [
            json!({}),
            json!({"input": 3}),
            json!({"input": "hi", "context": "x"}),
            json!({"input": "hi", "extra": 1}),
        ] {
            assert!(parse(args(bad.clone())).is_err(), "{bad}");
        }
        assert!(parse(None).is_err());
    }
}
