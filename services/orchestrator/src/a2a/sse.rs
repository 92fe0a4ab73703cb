//! A2A streams as Server-Sent Events, for the JSON-RPC and HTTP+JSON
//! bindings: each update one `data:` frame (its JSON made by the binding),
//! updates ready together written in one chunk, a keep-alive comment
//! while nothing happens; an error is the last frame.

use axum::{
    body::{Body, Bytes},
    http::{HeaderValue, header},
    response::Response,
};
use futures::StreamExt as _;

use super::{error::A2aError, service::Updates};

/// How long an idle stream waits before a keep-alive comment: under the
/// 5 s an `a2a-sdk` client waits for data by default.
pub const KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(2);

/// Updates put in one chunk at most.
const BATCH: usize = 256;

/// The SSE answer of `updates`, each frame's JSON made by `frame` (an
/// update, or the error that ends the stream).
pub fn response(
    updates: Updates,
    frame: impl Fn(Result<&baton_proto::a2a::v1::StreamResponse, &A2aError>) -> serde_json::Value
    + Send
    + Sync
    + 'static,
) -> Response {
    let batches = updates.ready_chunks(BATCH);
    let frame = std::sync::Arc::new(frame);
    let body = futures::stream::unfold(Some(batches), move |state| {
        let frame = frame.clone();
        async move {
            let mut batches = state?;
            let batch = match tokio::time::timeout(KEEP_ALIVE, batches.next()).await {
                Err(_) => return Some((Bytes::from_static(b": keep-alive\n\n"), Some(batches))),
                Ok(None) => return None,
                Ok(Some(batch)) => batch,
            };
            let mut out = Vec::with_capacity(batch.len() * 256);
            for item in batch {
                let (value, last) = match &item {
                    Ok(update) => (frame(Ok(update)), false),
                    Err(e) => (frame(Err(e)), true),
                };
                out.extend_from_slice(b"data: ");
                out.extend_from_slice(value.to_string().as_bytes());
                out.extend_from_slice(b"\n\n");
                if last {
                    return Some((Bytes::from(out), None));
                }
            }
            Some((Bytes::from(out), Some(batches)))
        }
    });
    let mut response = Response::new(Body::from_stream(
        body.map(Ok::<_, std::convert::Infallible>),
    ));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
