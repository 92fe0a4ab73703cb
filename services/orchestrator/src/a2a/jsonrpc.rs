//! The JSON-RPC 2.0 binding (A2A §9) at `POST /a2a/{agent}`: methods named
//! as the gRPC ones (`SendMessage`, `GetTask`, …), params and results the
//! proto3 JSON of the `lf.a2a.v1` messages; the streaming methods answer
//! Server-Sent Events, each `data:` a JSON-RPC response carrying one
//! `StreamResponse`. Errors are JSON-RPC error objects with A2A's codes
//! (`error.rs`); a caller without a valid key gets HTTP 401.

use std::sync::Arc;

use axum::{
    body::Body,
    extract::{Path, RawQuery, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse as _, Response},
};
use baton_proto::a2a::v1 as lf;
use serde_json::{Value, json};

use super::{
    error::A2aError,
    face::{A2a, check_version, http_version},
    json::json_response,
    sse,
};

/// Handles one JSON-RPC request to `agent`.
pub async fn handle(
    State(face): State<Arc<A2a>>,
    Path(agent): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if let Some(e) = super::error::unsupported_media_type(&headers) {
        return reply(&Value::Null, Err(e));
    }
    let body = match crate::http::request::read_body(body).await {
        Ok(b) => b,
        Err(e) => return reply(&Value::Null, Err(A2aError::from(e))),
    };
    let request: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            let error = json!({"code": -32700, "message": format!("Invalid JSON payload: {e}")});
            return json_response(
                &json!({"jsonrpc": "2.0", "id": Value::Null, "error": error}),
                StatusCode::OK,
            );
        }
    };
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    let (method, params) = match envelope(&request) {
        Ok(x) => x,
        Err(message) => {
            let error = json!({"code": -32600, "message": message});
            return json_response(
                &json!({"jsonrpc": "2.0", "id": id, "error": error}),
                StatusCode::OK,
            );
        }
    };
    let caller = match face.caller(&headers) {
        Ok(c) => c,
        Err(e) => {
            let mut response = reply(&id, Err(e));
            *response.status_mut() = StatusCode::UNAUTHORIZED;
            return response;
        }
    };
    let exposed = match face.agent(&agent) {
        Ok(a) => a,
        Err(e) => return reply(&id, Err(e)),
    };
    if let Err(e) = check_version(http_version(&headers, query.as_deref())) {
        return reply(&id, Err(e));
    }
    let service = face.service();
    let result: Result<Value, A2aError> = match method {
        "SendMessage" => match parse::<lf::SendMessageRequest>(params) {
            Ok(r) => service.send(&caller, &exposed, r).await.map(to_json),
            Err(e) => Err(e),
        },
        "SendStreamingMessage" => {
            return match parse::<lf::SendMessageRequest>(params) {
                Ok(r) => match service.send_streaming(&caller, &exposed, r).await {
                    Ok(updates) => stream(id, updates),
                    Err(e) => reply(&id, Err(e)),
                },
                Err(e) => reply(&id, Err(e)),
            };
        }
        "SubscribeToTask" => {
            return match parse::<lf::SubscribeToTaskRequest>(params) {
                Ok(r) => match service.subscribe(&caller, &agent, &r.id).await {
                    Ok(updates) => stream(id, updates),
                    Err(e) => reply(&id, Err(e)),
                },
                Err(e) => reply(&id, Err(e)),
            };
        }
        "GetTask" => match parse::<lf::GetTaskRequest>(params) {
            Ok(r) => service.get(&caller, &agent, &r).await.map(to_json),
            Err(e) => Err(e),
        },
        "ListTasks" => match parse::<lf::ListTasksRequest>(params) {
            Ok(r) => service
                .list(&caller, &agent, &r)
                .await
                .map(|l| super::json::list_json(&l)),
            Err(e) => Err(e),
        },
        "CancelTask" => match parse::<lf::CancelTaskRequest>(params) {
            Ok(r) => service.cancel(&caller, &agent, &r.id).await.map(to_json),
            Err(e) => Err(e),
        },
        "CreateTaskPushNotificationConfig" => {
            match parse::<lf::TaskPushNotificationConfig>(params) {
                Ok(r) => service
                    .create_push(&caller, &agent, "", r)
                    .await
                    .map(to_json),
                Err(e) => Err(e),
            }
        }
        "GetTaskPushNotificationConfig" => {
            match parse::<lf::GetTaskPushNotificationConfigRequest>(params) {
                Ok(r) => service
                    .get_push(&caller, &agent, &r.task_id, &r.id)
                    .await
                    .map(to_json),
                Err(e) => Err(e),
            }
        }
        "ListTaskPushNotificationConfigs" => {
            match parse::<lf::ListTaskPushNotificationConfigsRequest>(params) {
                Ok(r) => service
                    .list_push(&caller, &agent, &r.task_id)
                    .await
                    .map(|l| super::json::push_list_json(&l)),
                Err(e) => Err(e),
            }
        }
        "DeleteTaskPushNotificationConfig" => {
            match parse::<lf::DeleteTaskPushNotificationConfigRequest>(params) {
                Ok(r) => service
                    .delete_push(&caller, &agent, &r.task_id, &r.id)
                    .await
                    .map(|()| json!({})),
                Err(e) => Err(e),
            }
        }
        "GetExtendedAgentCard" => Ok(to_json(super::card::extended(
            &face,
            &exposed,
            &face.base_url(&headers),
            &caller,
            face.service().core.webhooks().config(),
        ))),
        other => {
            let error = json!({"code": -32601, "message": format!("Method not found: {other:?}")});
            return json_response(
                &json!({"jsonrpc": "2.0", "id": id, "error": error}),
                StatusCode::OK,
            );
        }
    };
    reply(&id, result)
}

/// The method and params of a JSON-RPC request object; why not, if it is
/// not one.
fn envelope(request: &Value) -> Result<(&str, Value), String> {
    let Some(object) = request.as_object() else {
        return Err("Request payload validation error: the request is not a JSON object".into());
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err("Request payload validation error: jsonrpc must be \"2.0\"".into());
    }
    match object.get("id") {
        None | Some(Value::String(_) | Value::Number(_) | Value::Null) => {}
        Some(_) => {
            return Err(
                "Request payload validation error: id must be a string, a number or null".into(),
            );
        }
    }
    let method = object
        .get("method")
        .and_then(Value::as_str)
        .ok_or("Request payload validation error: method must be a string")?;
    let params = match object.get("params") {
        None | Some(Value::Null) => json!({}),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(_) => {
            return Err("Request payload validation error: params must be an object".into());
        }
    };
    Ok((method, params))
}

/// The params as the message `T`; invalid params name the field.
fn parse<T: serde::de::DeserializeOwned>(params: Value) -> Result<T, A2aError> {
    serde_path_to_error::deserialize(params).map_err(|e| super::error::invalid_json(e, "params"))
}

fn to_json<T: serde::Serialize>(message: T) -> Value {
    serde_json::to_value(&message).unwrap_or_default()
}

/// A JSON-RPC response with `result` or the error.
fn reply(id: &Value, result: Result<Value, A2aError>) -> Response {
    let body = match result {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(e) => json!({"jsonrpc": "2.0", "id": id, "error": e.jsonrpc_error()}),
    };
    json_response(&body, StatusCode::OK).into_response()
}

/// A streaming method's answer: each update a JSON-RPC response.
fn stream(id: Value, updates: super::service::Updates) -> Response {
    sse::response(updates, move |item| match item {
        Ok(update) => json!({"jsonrpc": "2.0", "id": id, "result": update}),
        Err(e) => json!({"jsonrpc": "2.0", "id": id, "error": e.jsonrpc_error()}),
    })
}
