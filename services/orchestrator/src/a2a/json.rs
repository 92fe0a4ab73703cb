//! JSON answers of the HTTP bindings (cards, JSON-RPC, HTTP+JSON).

use axum::{
    body::Body,
    http::{HeaderValue, StatusCode, header},
    response::Response,
};
use baton_proto::a2a::v1 as lf;
use serde_json::{Value, json};

/// A JSON answer with `status`.
pub fn json_response(body: &Value, status: StatusCode) -> Response {
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A `ListTaskPushNotificationConfigsResponse` as JSON: `configs` and
/// `nextPageToken` always present.
pub fn push_list_json(list: &lf::ListTaskPushNotificationConfigsResponse) -> Value {
    let mut value = serde_json::to_value(list).unwrap_or_default();
    if let Some(o) = value.as_object_mut() {
        o.entry("configs").or_insert_with(|| json!([]));
        o.entry("nextPageToken").or_insert_with(|| json!(""));
    }
    value
}

/// A `ListTasksResponse` as JSON: its required fields always present (A2A
/// §3.1.4: `nextPageToken` is `""` on the last page).
pub fn list_json(list: &lf::ListTasksResponse) -> Value {
    let mut value = serde_json::to_value(list).unwrap_or_default();
    if let Some(o) = value.as_object_mut() {
        o.entry("tasks").or_insert_with(|| json!([]));
        o.entry("nextPageToken").or_insert_with(|| json!(""));
        o.entry("pageSize").or_insert_with(|| json!(list.page_size));
        o.entry("totalSize")
            .or_insert_with(|| json!(list.total_size));
    }
    value
}
