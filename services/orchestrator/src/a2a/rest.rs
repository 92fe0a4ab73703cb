//! The HTTP+JSON binding (A2A §11) under `/a2a/{agent}/`: the routes the
//! `google.api.http` annotations of `a2a.proto` declare, with the agent's
//! URL as their base —
//!
//! | route | operation |
//! |---|---|
//! | `POST message:send` | SendMessage |
//! | `POST message:stream` | SendStreamingMessage (SSE) |
//! | `GET tasks/{id}` | GetTask (`historyLength`) |
//! | `GET tasks` | ListTasks (`contextId`, `status`, `pageSize`, `pageToken`, `historyLength`, `statusTimestampAfter`, `includeArtifacts`) |
//! | `POST tasks/{id}:cancel` | CancelTask |
//! | `GET`/`POST tasks/{id}:subscribe` | SubscribeToTask (SSE) |
//! | `… tasks/{id}/pushNotificationConfigs…` | PushNotificationNotSupportedError |
//! | `GET extendedAgentCard` | the extended card (`card::extended`) |
//!
//! Bodies and answers are the proto3 JSON of the `lf.a2a.v1` messages
//! (`application/a2a+json` or `application/json`); errors are
//! `{"error": google.rpc.Status}` with A2A's HTTP statuses (`error.rs`);
//! each SSE frame is one `StreamResponse`.

use std::sync::Arc;

use axum::{
    body::Body,
    extract::{Path, RawQuery, State},
    http::{HeaderMap, Method, StatusCode},
    response::Response,
};
use baton_proto::a2a::v1 as lf;
use serde_json::{Value, json};

use super::{
    error::A2aError,
    face::{A2a, check_version, http_version},
    json::{json_response, list_json},
    sse,
};

/// Handles one HTTP+JSON request to `agent` (`rest` is the path after the
/// agent's URL).
pub async fn handle(
    State(face): State<Arc<A2a>>,
    Path((agent, rest)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match call(
        &face,
        &agent,
        &rest,
        query.as_deref(),
        &method,
        &headers,
        body,
    )
    .await
    {
        Ok(response) => response,
        Err(e) => e.rest_response(),
    }
}

#[allow(clippy::too_many_arguments)]
async fn call(
    face: &A2a,
    agent: &str,
    rest: &str,
    query: Option<&str>,
    method: &Method,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, A2aError> {
    let caller = face.caller(headers)?;
    let exposed = face.agent(agent)?;
    check_version(http_version(headers, query))?;
    let body = crate::http::request::read_body(body).await?;
    if !body.is_empty()
        && let Some(e) = super::error::unsupported_media_type(headers)
    {
        return Ok(super::error::unsupported_media_type_response(&e));
    }
    let service = face.service();
    let segments: Vec<&str> = rest.split('/').collect();
    let no_route = || {
        A2aError::NoAgent(format!(
            "no A2A route {method} /a2a/{agent}/{rest} (A2A §11.3 lists the routes)"
        ))
    };
    match (method.as_str(), segments.as_slice()) {
        ("POST", ["message:send"]) => {
            let r: lf::SendMessageRequest = json_body(&body)?;
            Ok(json(&service.send(&caller, &exposed, r).await?))
        }
        ("POST", ["message:stream"]) => {
            let r: lf::SendMessageRequest = json_body(&body)?;
            Ok(stream(service.send_streaming(&caller, &exposed, r).await?))
        }
        ("GET", ["tasks"]) => {
            let r = list_request(query)?;
            Ok(json_value(&list_json(
                &service.list(&caller, agent, &r).await?,
            )))
        }
        ("GET" | "POST", ["tasks", last]) if last.ends_with(":subscribe") => {
            let id = last.trim_end_matches(":subscribe");
            Ok(stream(service.subscribe(&caller, agent, id).await?))
        }
        ("POST", ["tasks", last]) if last.ends_with(":cancel") => {
            let id = last.trim_end_matches(":cancel");
            Ok(json(&service.cancel(&caller, agent, id).await?))
        }
        ("GET", ["tasks", id]) if !id.contains(':') => {
            let history_length = query_number(query, "historyLength")?;
            let r = lf::GetTaskRequest {
                tenant: String::new(),
                id: (*id).to_owned(),
                history_length,
            };
            Ok(json(&service.get(&caller, agent, &r).await?))
        }
        ("POST", ["tasks", id, "pushNotificationConfigs"]) => {
            let r: lf::TaskPushNotificationConfig = json_body(&body)?;
            Ok(json(&service.create_push(&caller, agent, id, r).await?))
        }
        ("GET", ["tasks", id, "pushNotificationConfigs"]) => Ok(json_value(
            &super::json::push_list_json(&service.list_push(&caller, agent, id).await?),
        )),
        ("GET", ["tasks", id, "pushNotificationConfigs", config]) => {
            Ok(json(&service.get_push(&caller, agent, id, config).await?))
        }
        ("DELETE", ["tasks", id, "pushNotificationConfigs", config]) => {
            service.delete_push(&caller, agent, id, config).await?;
            Ok(json_value(&serde_json::json!({})))
        }
        ("GET", ["extendedAgentCard"]) => Ok(json(&super::card::extended(
            face,
            &exposed,
            &face.base_url(headers),
            &caller,
            service.core.webhooks().config(),
        ))),
        _ => Err(no_route()),
    }
}

/// A JSON body as the message `T`; a bad one names the field.
fn json_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, A2aError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(&mut de).map_err(|e| super::error::invalid_json(e, "body"))
}

/// The query's parameters, in order.
fn params(query: Option<&str>) -> Vec<(String, String)> {
    form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

fn query_number(query: Option<&str>, name: &str) -> Result<Option<i32>, A2aError> {
    params(query)
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| {
            v.parse()
                .map_err(|_| A2aError::invalid(name, format!("{v:?} is not a number")))
        })
        .transpose()
}

/// A `ListTasks` request from the query (camelCase names, as the JSON).
fn list_request(query: Option<&str>) -> Result<lf::ListTasksRequest, A2aError> {
    let mut object = serde_json::Map::new();
    for (k, v) in params(query) {
        let value = match k.as_str() {
            "pageSize" | "historyLength" => json!(
                v.parse::<i64>()
                    .map_err(|_| A2aError::invalid(&k, format!("{v:?} is not a number")))?
            ),
            "includeArtifacts" => match v.as_str() {
                "true" => json!(true),
                "false" => json!(false),
                _ => return Err(A2aError::invalid(&k, "must be true or false")),
            },
            "contextId" | "status" | "pageToken" | "statusTimestampAfter" | "tenant" => json!(v),
            _ if k.eq_ignore_ascii_case(super::names::VERSION_HEADER) => continue,
            _ => return Err(A2aError::invalid(&k, "is not a ListTasks parameter")),
        };
        object.insert(k, value);
    }
    json_body(Value::Object(object).to_string().as_bytes())
}

fn json<T: serde::Serialize>(message: &T) -> Response {
    json_value(&serde_json::to_value(message).unwrap_or_default())
}

/// A success answer: `application/json`, which every client (and the A2A
/// test kit) takes; the binding's own `application/a2a+json` is accepted
/// in requests.
fn json_value(value: &Value) -> Response {
    json_response(value, StatusCode::OK)
}

fn stream(updates: super::service::Updates) -> Response {
    sse::response(updates, |item| match item {
        Ok(update) => serde_json::to_value(update).unwrap_or_default(),
        Err(e) => json!({"error": {
            "code": e.http_status().as_u16(),
            "status": baton_proto::code_name(e.code()),
            "message": e.message(),
            "details": e.details_json(),
        }}),
    })
}
