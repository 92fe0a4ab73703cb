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
//!   keep flowing: approvals in parallel branches are asked side by side.
//!   On revision 2026-07-28, which has no such requests, the call asks in
//!   rounds instead: what is open ends the round as an
//!   `InputRequiredResult`, and the client's retry answers it and goes on
//!   ([`super::rounds`]);
//! - without the capability, the run's approval mode is the config's
//!   `mcp.approval_mode` (by default `auto_deny`: such a client gets a
//!   denial, never a run that waits for nobody), and a question fails the
//!   call: the run is cancelled and the result says the client cannot
//!   answer questions.
//!
//! The result is the run's output as text, with `runId` and `traceId` in
//! `_meta`; a failed or cancelled run is a tool error ([`super::error`]).

use std::{
    collections::{HashMap, HashSet},
    future::Future,
    pin::Pin,
    time::Duration,
};

use baton_proto::v1::{self as pb, run_event::Payload};
use futures::{StreamExt as _, stream::FuturesUnordered};
use rmcp::{
    Peer, RoleServer,
    model::{
        CallToolResponse, CallToolResult, ContentBlock, ElicitRequest, ElicitationAction,
        InputRequiredResult, InputResponses, JsonObject,
    },
};
use tokio::time::sleep_until;
use tokio_util::sync::CancellationToken;
use tonic::Code;

use super::{
    ask::{self, Asker},
    error::{McpError, RunIds, meta, tool_error},
    face::Mcp,
    progress::Progress,
    rounds::{self, Open, Response, RoundState},
};
use crate::{
    app::{Caller, Started},
    config::McpApprovalMode,
    request::AgentRequest,
    run::events::{EventStream, Filter},
};

/// What the client can do for a call.
pub struct Client {
    /// Talks to it.
    pub peer: Peer<RoleServer>,
    /// Its progress notifications, if it asked for them.
    pub progress: Option<Progress>,
    /// Whether it declared elicitation (in form mode).
    pub elicits: bool,
    /// Whether it asks in rounds (revision 2026-07-28: an
    /// `InputRequiredResult`, then a retry) rather than by elicitation
    /// requests ([`super::rounds`]).
    pub rounds: bool,
    /// Its cancellation of the call.
    pub cancelled: CancellationToken,
}

/// What the client sent: the arguments and, on a retry of a round, its
/// answers and the round's state.
pub struct Request {
    /// `{input, context}`.
    pub arguments: Option<JsonObject>,
    /// The answers to the round's `inputRequests`.
    pub input_responses: Option<InputResponses>,
    /// The round's `requestState`.
    pub request_state: Option<String>,
}

/// An elicitation under way: what it settles to.
type Asking<'a> = Pin<Box<dyn Future<Output = Option<String>> + Send + 'a>>;

/// How long a round waits, after something is first asked, for other
/// questions to gather (approvals in parallel branches come together).
const GATHER: Duration = Duration::from_millis(50);

/// The run a call follows, and where it picks it up.
struct Followed {
    run_id: String,
    trace_id: String,
    events: EventStream,
    /// Events up to this sequence number were seen by an earlier round:
    /// they are folded, not reported again.
    seen: u64,
    /// What this call answered (this retry and earlier ones), not to be
    /// asked again.
    answered: HashSet<String>,
    /// The questions this retry refused to answer (decline, cancel): the
    /// call fails if they are still open once the run is caught up with.
    refused: HashMap<String, ElicitationAction>,
}

/// Runs `agent` on the request's arguments for `caller`, or on a retry
/// goes on with the run of the round it retries, answering the call.
pub async fn call(
    face: &Mcp,
    caller: &Caller,
    agent: &str,
    request: Request,
    mut client: Client,
) -> Result<CallToolResponse, McpError> {
    let (input, context) = parse(request.arguments)?;
    let retry = request.request_state.is_some() || request.input_responses.is_some();
    if retry && !client.rounds {
        return Err(McpError::params(
            "requestState",
            "rounds are revision 2026-07-28's; this request is on an older one, where questions are elicitation requests",
        ));
    }
    if retry && !client.elicits {
        return Err(McpError::params(
            "requestState",
            "a retry answers its round's elicitation requests, so it must declare the elicitation capability",
        ));
    }
    let followed = match request.request_state {
        Some(state) => resume(face, caller, agent, &state, request.input_responses).await?,
        None if request.input_responses.is_some() => {
            return Err(McpError::params(
                "inputResponses",
                "come with the requestState of the round that asked them (there is none)",
            ));
        }
        None => {
            let started = start(face, caller, agent, input, context, &client).await?;
            // The run's ids first, so a client that loses the call (its
            // replica gone) can still find the run through another face.
            if let Some(progress) = client.progress.as_mut() {
                progress
                    .line(format!(
                        "run {} started (trace {})",
                        started.run_id, started.trace_id
                    ))
                    .await;
            }
            started
        }
    };
    follow(face, caller, followed, client).await
}

/// Starts the run of a first call.
async fn start(
    face: &Mcp,
    caller: &Caller,
    agent: &str,
    input: String,
    context: String,
    client: &Client,
) -> Result<Followed, McpError> {
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
        // A call in rounds outlives each round's request; the call
        // cancels it itself when the client goes away mid-round.
        detach: client.rounds,
        ..Default::default()
    };
    let core = face.core();
    let request = AgentRequest::try_from(request)
        .map_err(|e| McpError::from(core.refused("RunAgent", caller, e)))?;
    let Started {
        run_id,
        trace_id,
        events,
    } = core.start_agent(caller, request).await?;
    Ok(Followed {
        run_id,
        trace_id,
        events,
        seen: 0,
        answered: HashSet::new(),
        refused: HashMap::new(),
    })
}

/// A retry of a round: its answers checked, then given, then the run
/// followed from its first event.
async fn resume(
    face: &Mcp,
    caller: &Caller,
    agent: &str,
    state: &str,
    responses: Option<InputResponses>,
) -> Result<Followed, McpError> {
    let state = RoundState::decode(state)?;
    let core = face.core();
    let view = match core.get(caller, &state.run).await {
        Ok(view) => view,
        Err(e) if e.code() == Code::NotFound => {
            return Err(McpError::params(
                "requestState",
                format!("names run {:?}, which this caller has not got", state.run),
            ));
        }
        Err(e) => return Err(e.into()),
    };
    if view.target != agent {
        return Err(McpError::params(
            "requestState",
            format!(
                "is a round of a call of {:?}, not of {agent:?}",
                view.target
            ),
        ));
    }
    let responses = rounds::responses(&state, responses)?;
    let mut answered: HashSet<String> = state.answered.into_iter().collect();
    let mut refused = HashMap::new();
    for response in responses {
        let given = match response {
            Response::Approval {
                approval_id,
                result,
            } => {
                let answer = ask::approval_answer(Ok(result));
                let given = core
                    .resolve_approval(caller, &view.run_id, &approval_id, answer)
                    .await;
                answered.insert(approval_id);
                given
            }
            Response::Question { input_id, answer } => {
                let given = match answer {
                    Ok(answer) => {
                        core.submit_input(caller, &view.run_id, &input_id, answer)
                            .await
                    }
                    Err(action) => {
                        refused.insert(input_id.clone(), action);
                        Ok(())
                    }
                };
                answered.insert(input_id);
                given
            }
        };
        match given {
            // Answered elsewhere, or the run is over: following it says
            // what became of it.
            Err(e) if matches!(e.code(), Code::FailedPrecondition | Code::NotFound) => {}
            Err(e) => return Err(e.into()),
            Ok(()) => {}
        }
    }
    let events = core
        .watch(caller, &view.run_id, 0, Filter::default())
        .await?;
    Ok(Followed {
        run_id: view.run_id,
        trace_id: view.trace_id,
        events,
        seen: state.seq,
        answered,
        refused,
    })
}

/// Follows the run to its end (the call's result) or, in rounds, to what
/// it asks (an `InputRequiredResult`).
async fn follow(
    face: &Mcp,
    caller: &Caller,
    followed: Followed,
    mut client: Client,
) -> Result<CallToolResponse, McpError> {
    let core = face.core();
    let Followed {
        run_id,
        trace_id,
        mut events,
        seen,
        answered,
        refused,
    } = followed;
    // Why the call fails though the run may not have (a question nobody
    // answers); the run is cancelled and its end awaited.
    let mut failure: Option<(Code, String)> = None;
    // Refused questions still open in the run, with what they ask.
    let mut refused_open: HashMap<String, (String, ElicitationAction)> = HashMap::new();
    let mut caught_up = seen == 0;
    let ids = RunIds {
        run_id: &run_id,
        trace_id: &trace_id,
    };
    let mut asking: FuturesUnordered<Asking<'_>> = FuturesUnordered::new();
    // In rounds: what is open, and when the round ends with it.
    let mut open = Open::default();
    let mut gathered: Option<tokio::time::Instant> = None;
    let mut last_seq = 0;
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
            () = sleep_until(gathered.unwrap_or_else(tokio::time::Instant::now)), if gathered.is_some() => {
                gathered = None;
                if !open.is_empty() && !cancelling && failure.is_none() {
                    let (requests, state) = std::mem::take(&mut open).into_round(&run_id, last_seq, &answered);
                    let mut round = InputRequiredResult::new(Some(requests), Some(state.encode()));
                    round.meta = meta(Some(&ids), None);
                    return Ok(round.into());
                }
            }
            item = events.next() => {
                let event = match item {
                    Some(Ok(event)) => event,
                    // The stream lost its place (a reader too slow): the
                    // call ends, and the run that is its work with it
                    // (attached, or in rounds cancelled here).
                    Some(Err(e)) => {
                        if client.rounds {
                            let _ = core.cancel(caller, &run_id, "the MCP call lost the run's events").await;
                        }
                        return Ok(tool_error(e.code(), &e.message(), Some(&ids)).into());
                    }
                    None => {
                        if client.rounds {
                            let _ = core.cancel(caller, &run_id, "the MCP call lost the run's events").await;
                        }
                        return Ok(tool_error(Code::Unavailable, "the run's events ended before the run did", Some(&ids)).into());
                    }
                };
                last_seq = event.seq;
                let live = event.seq > seen;
                if live && let Some(progress) = client.progress.as_mut() {
                    progress.event(&event).await;
                }
                let at = Asker { agent: &event.agent, context: &event.context_id };
                match event.payload {
                    Some(Payload::ApprovalRequested(a))
                        if client.elicits && client.rounds && !answered.contains(&a.approval_id) =>
                    {
                        let request = ElicitRequest::new(ask::approval_request(&at, &a));
                        open.approval(&a.approval_id, request);
                    }
                    Some(Payload::InputRequested(q))
                        if client.elicits && client.rounds && !answered.contains(&q.input_id) =>
                    {
                        let request = ElicitRequest::new(ask::question_request(&at, &q));
                        open.question(&q.input_id, request);
                    }
                    Some(Payload::InputRequested(q)) if refused.contains_key(&q.input_id) => {
                        refused_open.insert(q.input_id.clone(), (q.prompt.clone(), refused[&q.input_id].clone()));
                    }
                    Some(Payload::ApprovalResolved(r)) => open.settled(&r.approval_id),
                    Some(Payload::InputReceived(r)) => {
                        open.settled(&r.input_id);
                        refused_open.remove(&r.input_id);
                    }
                    // Nobody answered in time: the question is closed.
                    Some(Payload::InputTimedOut(t)) => {
                        open.settled(&t.input_id);
                        refused_open.remove(&t.input_id);
                    }
                    Some(Payload::ApprovalRequested(a)) if client.elicits && !client.rounds && live => {
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
                    Some(Payload::InputRequested(q)) if client.elicits && !client.rounds && live => {
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
                    Some(Payload::InputRequested(q)) if !client.elicits && failure.is_none() && live => {
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
                        return Ok(result.into());
                    }
                    Some(Payload::RunFailed(failed)) => {
                        let code = Code::from_i32(failed.code);
                        return Ok(tool_error(code, &failed.message, Some(&ids)).into());
                    }
                    Some(Payload::RunCancelled(c)) => {
                        let (code, message) = failure.take().unwrap_or((Code::Cancelled, c.reason));
                        return Ok(tool_error(code, &message, Some(&ids)).into());
                    }
                    _ => {}
                }
                // Caught up with the last round: a question this retry
                // refused fails the call if nobody answered it meanwhile.
                if !caught_up && event.seq >= seen {
                    caught_up = true;
                    if let Some((prompt, action)) = refused_open.values().next()
                        && failure.is_none()
                    {
                        let why = ask::refusal(prompt, action);
                        let _ = core.cancel(caller, &run_id, &why).await;
                        failure = Some((Code::Aborted, why));
                    }
                }
                // A round ends once the run has caught up with the last
                // one and something is open, after a moment to gather.
                if gathered.is_none() && !open.is_empty() && event.seq >= seen {
                    gathered = Some(tokio::time::Instant::now() + GATHER);
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
