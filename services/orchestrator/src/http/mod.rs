//! The HTTP/JSON + SSE face, on the main port beside gRPC: the routes of
//! [`routes::ROUTES`] (from which [`openapi`] derives its document, served
//! at `GET /v1/openapi.json`), each converting its JSON — the proto3 JSON
//! mapping of the same `baton.v1` messages, so names and fields match the
//! gRPC API — calling the application core and converting back; errors are
//! JSON (`error.rs`), streams are Server-Sent Events (`sse.rs`).
//!
//! The same rules as the gRPC face, because the same core applies them:
//! `Authorization: Bearer` keys name the tenant, quotas and audit lines,
//! lossless streams with backpressure, a disconnected attached caller
//! cancels its run, durable runs answered by any replica. CORS is the
//! port's (`cors.allowed_origins`).

pub mod console;
pub mod error;
pub mod openapi;
pub mod request;
pub mod routes;
pub mod sse;

use std::{collections::BTreeMap, sync::Arc};

use axum::{
    Router,
    body::{Body, Bytes},
    extract::DefaultBodyLimit,
    extract::{Path, RawQuery, State},
    http::{HeaderMap, HeaderValue, Method, header},
    response::{IntoResponse, Response},
    routing::{MethodRouter, on},
};
use baton_common::auth::ApiKeys;
use baton_proto::v1 as pb;
use tonic::Code;

use self::{
    error::HttpError,
    request::{Query, json_body},
    routes::{ROUTES, Route, Rpc},
};
use crate::{
    app::{Caller, Orchestrator},
    config::ConsoleConfig,
    peers::{FORWARDED, Forward},
    request::{AgentRequest, PipelineRequest, RunsQuery},
    run::record::ApprovalAnswer,
    wire,
};

/// What every handler of the face shares.
struct Face {
    core: Orchestrator,
    keys: Option<Arc<ApiKeys>>,
    console: Arc<ConsoleConfig>,
}

type Answer = Result<Response, HttpError>;

/// The HTTP face of `core`, authenticating with `keys` (none: every caller
/// is the tenant `""`), and the web console.
pub fn router(core: Orchestrator, keys: Option<Arc<ApiKeys>>, console: ConsoleConfig) -> Router {
    let face = Arc::new(Face {
        core,
        keys,
        console: Arc::new(console),
    });
    // Routes that differ only by an action suffix (`{run_id}:cancel`,
    // `{run_id}:fork`) share axum's path and method: one handler picks.
    let mut shared: BTreeMap<(String, &'static str), Vec<&'static Route>> = BTreeMap::new();
    for route in ROUTES {
        shared
            .entry((axum_path(route.path), route.method))
            .or_default()
            .push(route);
    }
    let mut paths: BTreeMap<String, MethodRouter<Arc<Face>>> = BTreeMap::new();
    for ((path, _), routes) in shared {
        let handler = method_router(routes);
        let merged = match paths.remove(&path) {
            Some(existing) => existing.merge(handler),
            None => handler,
        };
        paths.insert(path, merged);
    }
    let mut router = Router::new();
    for (path, methods) in paths {
        router = router.route(&path, methods);
    }
    router
        .route("/v1/openapi.json", axum::routing::get(openapi_json))
        .route("/v1/console/config", axum::routing::get(console_config))
        .route("/v1/agents/reload", axum::routing::get(agents_reload))
        .merge(console::router())
        .route("/v1/{*rest}", axum::routing::any(no_route))
        // The face reads bodies itself, up to its own limit.
        .layer(DefaultBodyLimit::disable())
        .with_state(face)
}

/// The path axum matches: an action suffix (`{run_id}:cancel`) is read by
/// the handler from the whole segment.
fn axum_path(path: &str) -> String {
    match path.split_once("}:") {
        Some((head, _)) => format!("{head}}}"),
        None => path.to_owned(),
    }
}

fn method_router(routes: Vec<&'static Route>) -> MethodRouter<Arc<Face>> {
    let method = match routes[0].method {
        "POST" => axum::routing::MethodFilter::POST,
        "PATCH" => axum::routing::MethodFilter::PATCH,
        "DELETE" => axum::routing::MethodFilter::DELETE,
        _ => axum::routing::MethodFilter::GET,
    };
    on(
        method,
        move |State(face): State<Arc<Face>>,
              Path(params): Path<BTreeMap<String, String>>,
              RawQuery(query): RawQuery,
              headers: HeaderMap,
              body: Body| async move {
            let body = match request::read_body(body).await {
                Ok(body) => body,
                Err(e) => return e.into_response(),
            };
            // The route whose action the path ends with, else the first
            // (whose `param` names the action it wants).
            let route = routes
                .iter()
                .copied()
                .find(|r| {
                    r.path.split_once("}:").is_some_and(|(_, action)| {
                        params.values().any(|v| v.ends_with(&format!(":{action}")))
                    })
                })
                .unwrap_or(routes[0]);
            let call = Call {
                route,
                params,
                query: Query::parse(query.as_deref()),
                headers,
                body,
            };
            match face.handle(call).await {
                Ok(response) => response,
                Err(e) => e.into_response(),
            }
        },
    )
}

/// One request to a route.
struct Call {
    route: &'static Route,
    params: BTreeMap<String, String>,
    query: Query,
    headers: HeaderMap,
    body: Bytes,
}

impl Call {
    /// A path parameter; an action route's id comes without its action.
    fn param(&self, name: &str) -> Result<String, HttpError> {
        let value = self.params.get(name).cloned().unwrap_or_default();
        match self.route.path.split_once("}:") {
            Some((_, action)) if self.route.path.contains(&format!("{{{name}}}:")) => value
                .strip_suffix(&format!(":{action}"))
                .map(str::to_owned)
                .ok_or_else(|| {
                    HttpError::new(
                        Code::NotFound,
                        format!("no route POST {} (use :{action})", self.route.path),
                        None,
                    )
                }),
            _ => Ok(value),
        }
    }

    /// Whether the caller asked for an event stream.
    fn wants_stream(&self) -> bool {
        self.headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.contains("text/event-stream"))
    }
}

/// Who calls an HTTP route (this face's, the A2A face's): the tenant its
/// `Authorization: Bearer` key names (`keys`; none: every caller is the
/// tenant `""`), its trace, what a forwarded call would carry.
pub fn caller(keys: Option<&ApiKeys>, headers: &HeaderMap) -> Result<Caller, HttpError> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let authorization = text("authorization");
    let tenant = match keys {
        None => String::new(),
        Some(keys) => {
            let presented = authorization.as_deref().ok_or_else(|| {
                HttpError::new(
                    Code::Unauthenticated,
                    "authorization: missing; send `Authorization: Bearer <API key>`",
                    None,
                )
            })?;
            let key = presented
                .strip_prefix("Bearer ")
                .or_else(|| presented.strip_prefix("bearer "))
                .map(str::trim)
                .ok_or_else(|| {
                    HttpError::new(
                        Code::Unauthenticated,
                        "authorization: expected `Bearer <API key>`",
                        None,
                    )
                })?;
            keys.tenant_of_key(key)
                .ok_or_else(|| {
                    HttpError::new(
                        Code::Unauthenticated,
                        "authorization: unknown API key",
                        None,
                    )
                })?
                .0
        }
    };
    let metadata = tonic::metadata::MetadataMap::from_headers(headers.clone());
    Ok(Caller {
        tenant,
        trace: baton_common::otel::extract(&metadata),
        forward: Forward {
            forwarded: headers.contains_key(FORWARDED),
            traceparent: text("traceparent"),
            authorization,
            answer_token: None,
        },
    })
}

impl Face {
    fn caller(&self, headers: &HeaderMap) -> Result<Caller, HttpError> {
        caller(self.keys.as_deref(), headers)
    }

    async fn handle(&self, call: Call) -> Answer {
        let caller = self.caller(&call.headers)?;
        let core = &self.core;
        match call.route.rpc {
            Rpc::RunAgent => {
                let mut r: pb::RunAgentRequest = json_body(&call.body)?;
                let stream = call.wants_stream();
                if !stream {
                    r.detach = true;
                }
                let started = match AgentRequest::try_from(r) {
                    Ok(r) => core.start_agent(&caller, r).await,
                    Err(e) => Err(core.refused("RunAgent", &caller, e)),
                }?;
                Ok(started_answer(started, stream))
            }
            Rpc::RunPipeline => {
                let mut r: pb::RunPipelineRequest = json_body(&call.body)?;
                let stream = call.wants_stream();
                if !stream {
                    r.detach = true;
                }
                let started = match PipelineRequest::try_from(r) {
                    Ok(r) => core.start_pipeline(&caller, r).await,
                    Err(e) => Err(core.refused("RunPipeline", &caller, e)),
                }?;
                Ok(started_answer(started, stream))
            }
            Rpc::ForkRun => {
                let mut r: pb::ForkRunRequest = json_body_or_empty(&call.body)?;
                r.run_id = call.param("run_id")?;
                let stream = call.wants_stream();
                if !stream {
                    r.detach = true;
                }
                let started = match wire::request::fork(r) {
                    Ok(r) => core.fork(&caller, r).await,
                    Err(e) => Err(core.refused("ForkRun", &caller, e)),
                }?;
                Ok(started_answer(started, stream))
            }
            Rpc::ReplayRun => {
                let mut r: pb::ReplayRunRequest = json_body_or_empty(&call.body)?;
                r.run_id = call.param("run_id")?;
                let stream = call.wants_stream();
                if !stream {
                    r.detach = true;
                }
                let started = match wire::request::replay(r) {
                    Ok(r) => core.replay(&caller, r).await,
                    Err(e) => Err(core.refused("ReplayRun", &caller, e)),
                }?;
                Ok(started_answer(started, stream))
            }
            Rpc::ListRuns => {
                let r = call.query.list_runs()?;
                let query = RunsQuery::try_from(&r)?;
                let page = core.list(&caller, &query).await?;
                Ok(json(&pb::ListRunsResponse::from(page)))
            }
            Rpc::ListConversations => {
                let r = call.query.list_conversations()?;
                Ok(json(&core.list_conversations(&caller, &r).await?))
            }
            Rpc::GetConversation => {
                let mut r = call.query.get_conversation()?;
                r.conversation_id = call.param("conversation_id")?;
                Ok(json(&core.get_conversation(&caller, &r).await?))
            }
            Rpc::UpdateConversation => {
                let mut r: pb::UpdateConversationRequest = json_body(&call.body)?;
                r.conversation_id = call.param("conversation_id")?;
                Ok(json(&core.update_conversation(&caller, r).await?))
            }
            Rpc::DeleteConversation => {
                let id = call.param("conversation_id")?;
                Ok(json(&core.delete_conversation(&caller, &id).await?))
            }
            Rpc::GetRun => {
                let run = core.get(&caller, &call.param("run_id")?).await?;
                Ok(json(&pb::GetRunResponse::from(run)))
            }
            Rpc::WatchRun => {
                let after_seq = call.query.after_seq(&call.headers)?;
                let filter = wire::request::filter(Some(call.query.filter()?))?;
                let run_id = call.param("run_id")?;
                let events = core.watch(&caller, &run_id, after_seq, filter).await?;
                Ok(sse::response(events))
            }
            Rpc::CancelRun => {
                let run_id = call.param("run_id")?;
                let r: pb::CancelRunRequest = json_body_or_empty(&call.body)?;
                let status = core.cancel(&caller, &run_id, &r.reason).await?;
                Ok(json(&pb::CancelRunResponse {
                    status: status as i32,
                }))
            }
            Rpc::ResolveApproval => {
                let r: pb::ResolveApprovalRequest = json_body(&call.body)?;
                let answer = ApprovalAnswer {
                    approved: r.approved,
                    reason: r.reason,
                };
                let (run_id, approval_id) = (call.param("run_id")?, call.param("approval_id")?);
                core.resolve_approval(&caller, &run_id, &approval_id, answer)
                    .await?;
                Ok(json(&pb::ResolveApprovalResponse {}))
            }
            Rpc::SubmitInput => {
                let text = request::input_text(&call.body)?;
                let (run_id, input_id) = (call.param("run_id")?, call.param("input_id")?);
                core.submit_input(&caller, &run_id, &input_id, text).await?;
                Ok(json(&pb::SubmitInputResponse {}))
            }
            Rpc::RunExperiment => {
                let r: pb::RunExperimentRequest = json_body(&call.body)?;
                let mut events = core.run_experiment(&caller, r).await?;
                if call.wants_stream() {
                    return Ok(sse::experiment(events));
                }
                // Runs on: its events are read (and dropped) by a task.
                let Some(pb::ExperimentEvent {
                    event: Some(pb::experiment_event::Event::Started(e)),
                }) = events.recv().await
                else {
                    return Err(HttpError::new(
                        Code::Unavailable,
                        "the experiment did not start",
                        None,
                    ));
                };
                tokio::spawn(async move { while events.recv().await.is_some() {} });
                Ok(json_value(
                    &serde_json::json!({"experimentId": e.id, "name": e.name}),
                ))
            }
            Rpc::GetExperiment => {
                call.query.only_none()?;
                let e = core
                    .get_experiment(&caller, &call.param("experiment")?)
                    .await?;
                Ok(json(&e))
            }
            Rpc::CancelExperiment => {
                call.query.only_none()?;
                let e = core
                    .cancel_experiment(&caller, &call.param("experiment")?)
                    .await?;
                Ok(json(&e))
            }
            Rpc::ListExperiments => {
                let (page_size, page_token) = call.query.page()?;
                Ok(json(
                    &core
                        .list_experiments(&caller, page_size, &page_token)
                        .await?,
                ))
            }
            Rpc::CompareExperiments => {
                let (candidate, alpha) = call.query.compare()?;
                let r = pb::CompareExperimentsRequest {
                    baseline: call.param("experiment")?,
                    candidate,
                    alpha,
                };
                Ok(json(&core.compare_experiments(&caller, r).await?))
            }
            Rpc::SaveCase => {
                let mut r: pb::SaveCaseRequest = json_body_or_empty(&call.body)?;
                r.run_id = call.param("run_id")?;
                Ok(json(&core.save_case(&caller, r).await?))
            }
            Rpc::CreateWebhook => {
                let r: pb::CreateWebhookRequest = json_body(&call.body)?;
                Ok(json(&core.create_webhook(&caller, r).await?))
            }
            Rpc::ListWebhooks => {
                call.query.only_none()?;
                Ok(json(&core.list_webhooks(&caller).await?))
            }
            Rpc::GetWebhook => {
                let id = call.param("webhook_id")?;
                Ok(json(&core.get_webhook(&caller, &id).await?))
            }
            Rpc::DeleteWebhook => {
                let id = call.param("webhook_id")?;
                core.delete_webhook(&caller, &id).await?;
                Ok(json(&pb::DeleteWebhookResponse {}))
            }
            Rpc::RotateWebhookSecret => {
                let r: pb::RotateWebhookSecretRequest = json_body_or_empty(&call.body)?;
                let overlap = wire::duration("previous_valid_for", r.previous_valid_for)?;
                let id = call.param("webhook_id")?;
                Ok(json(
                    &core.rotate_webhook_secret(&caller, &id, overlap).await?,
                ))
            }
            Rpc::ListDeadLetters => {
                let size = call.query.page_size()?;
                Ok(json(&core.list_dead_letters(&caller, size).await?))
            }
            Rpc::RedeliverDeadLetter => {
                let id = call.param("delivery_id")?;
                core.redeliver_dead_letter(&caller, &id).await?;
                Ok(json(&pb::RedeliverDeadLetterResponse {}))
            }
            Rpc::CreateSchedule => {
                let r: pb::CreateScheduleRequest = json_body(&call.body)?;
                Ok(json(&core.create_schedule(&caller, r).await?))
            }
            Rpc::ListSchedules => {
                call.query.only_none()?;
                Ok(json(&core.list_schedules(&caller).await?))
            }
            Rpc::GetSchedule => {
                let id = call.param("schedule_id")?;
                Ok(json(&core.get_schedule(&caller, &id).await?))
            }
            Rpc::PauseSchedule | Rpc::ResumeSchedule => {
                let id = call.param("schedule_id")?;
                let pause = matches!(call.route.rpc, Rpc::PauseSchedule);
                Ok(json(&core.pause_schedule(&caller, &id, pause).await?))
            }
            Rpc::DeleteSchedule => {
                let id = call.param("schedule_id")?;
                core.delete_schedule(&caller, &id).await?;
                Ok(json(&pb::DeleteScheduleResponse {}))
            }
            Rpc::ListAgents => Ok(json(&wire::answer::agents(&core.catalog()))),
            Rpc::ListSlots => {
                let (after, size) = call.query.slots_page()?;
                let listing = core
                    .slots(&caller, &call.param("trace_id")?, after, size)
                    .await?;
                Ok(json(&wire::answer::listing(listing)))
            }
            Rpc::WatchSlots => {
                let changes = core.watch_slots(&caller, &call.param("trace_id")?).await?;
                Ok(sse::changes(changes))
            }
        }
    }
}

/// A started run's answer: its stream, or (detached) its ids.
fn started_answer(started: crate::app::Started, stream: bool) -> Response {
    if stream {
        return sse::response(started.events);
    }
    // Detached: the run goes on without its stream.
    drop(started.events);
    let body = serde_json::json!({"runId": started.run_id, "traceId": started.trace_id});
    json_value(&body)
}

/// A body that may be empty (`{}` then).
fn json_body_or_empty<T: serde::de::DeserializeOwned + Default>(
    body: &Bytes,
) -> Result<T, HttpError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        Ok(T::default())
    } else {
        json_body(body)
    }
}

/// A message as a JSON answer.
fn json<T: serde::Serialize>(message: &T) -> Response {
    let body = serde_json::to_vec(message).unwrap_or_default();
    let mut response = Response::new(Body::from(body));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn json_value(value: &serde_json::Value) -> Response {
    json(value)
}

/// What the console is told of the operator's settings (no key needed:
/// it holds no secret): the link of a trace id, and whether callers need
/// an API key (the console shows its key bar only then).
async fn console_config(State(face): State<Arc<Face>>) -> Response {
    json_value(&serde_json::json!({
        "traceUrl": face.console.trace_url,
        "keysRequired": face.keys.is_some(),
    }))
}

/// How the last look at the agents file went: the file, reloads taken and
/// refused, and why the last changed file was refused (any caller with a
/// key when keys are on).
async fn agents_reload(State(face): State<Arc<Face>>, headers: HeaderMap) -> Response {
    if let Err(e) = caller(face.keys.as_deref(), &headers) {
        return e.into_response();
    }
    json_value(&serde_json::to_value(face.core.reload_state()).unwrap_or_default())
}

async fn openapi_json() -> Response {
    json_value(openapi::document())
}

async fn no_route(method: Method, uri: axum::http::Uri) -> Response {
    HttpError::new(
        Code::NotFound,
        format!(
            "no route {method} {} (see GET /v1/openapi.json)",
            uri.path()
        ),
        None,
    )
    .into_response()
}
