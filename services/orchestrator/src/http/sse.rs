//! A run's events as Server-Sent Events: each frame is `id:` the event's
//! seq, `event:` its payload's kind as the JSON mapping names it
//! (`textDelta`, `runCompleted`), `data:` the `RunEvent` in the JSON
//! mapping; a comment (`: keep-alive`) every [`KEEP_ALIVE`] while nothing
//! happens, so proxies keep the connection. The body is read from the
//! run's bounded stream as the client takes it: a slow reader slows the
//! run and nothing is dropped; a reader that goes away drops the stream,
//! which cancels an attached run. An error ends the stream with an
//! `event: error` frame carrying `{code, message, field}`.

use std::{collections::HashMap, sync::OnceLock, time::Duration};

use axum::{
    body::{Body, Bytes},
    http::{HeaderValue, header},
    response::Response,
};
use baton_proto::v1::{self as pb};
use futures::StreamExt as _;

use crate::{
    error::Error,
    run::events::{EventStream, kind_of},
};

/// How long an idle stream waits before a keep-alive comment.
pub const KEEP_ALIVE: Duration = Duration::from_secs(5);

/// Events put in one body chunk at most: what is ready when the client
/// takes more is written in one go, so a fast run costs a write per batch,
/// not per event.
const BATCH: usize = 512;

/// The SSE answer of `events`.
pub fn response(events: EventStream) -> Response {
    let batches = events.ready_chunks(BATCH);
    let frames = futures::stream::unfold(Some(batches), |state| async move {
        let mut batches = state?;
        let batch = match tokio::time::timeout(KEEP_ALIVE, batches.next()).await {
            Err(_) => {
                return Some((
                    Ok::<_, std::convert::Infallible>(Bytes::from_static(b": keep-alive\n\n")),
                    Some(batches),
                ));
            }
            Ok(None) => return None,
            Ok(Some(batch)) => batch,
        };
        let mut out = Vec::with_capacity(batch.len() * 256);
        for item in batch {
            match item {
                Ok(event) => write_frame(&mut out, &event),
                Err(e) => {
                    out.extend_from_slice(&error_frame(&e));
                    return Some((Ok(Bytes::from(out)), None));
                }
            }
        }
        Some((Ok(Bytes::from(out)), Some(batches)))
    });
    stream_response(Body::from_stream(frames))
}

/// The SSE answer of a watch of slots: `event: change` frames whose data
/// is a `WatchResponse` in the JSON mapping.
pub fn changes(changes: baton_store::ChangeStream) -> Response {
    let frames = futures::stream::unfold(Some(changes), |state| async move {
        let mut changes = state?;
        let frame = match tokio::time::timeout(KEEP_ALIVE, changes.next()).await {
            Err(_) => Bytes::from_static(b": keep-alive\n\n"),
            Ok(None) => return None,
            Ok(Some(Ok(change))) => {
                let data =
                    serde_json::to_string(&crate::wire::answer::change(change)).unwrap_or_default();
                Bytes::from(format!("event: change\ndata: {data}\n\n"))
            }
            Ok(Some(Err(e))) => {
                let e = Error::from(e);
                return Some((
                    Ok::<_, std::convert::Infallible>(Bytes::from(error_frame(&e))),
                    None,
                ));
            }
        };
        Some((Ok(frame), Some(changes)))
    });
    stream_response(Body::from_stream(frames))
}

/// The SSE answer of an experiment's events: `event: started`,
/// `caseScored`, `ended` frames whose data is the `ExperimentEvent` in the
/// JSON mapping; keep-alive comments between.
pub fn experiment(events: tokio::sync::mpsc::UnboundedReceiver<pb::ExperimentEvent>) -> Response {
    let frames = futures::stream::unfold(Some(events), |state| async move {
        let mut events = state?;
        let frame = match tokio::time::timeout(KEEP_ALIVE, events.recv()).await {
            Err(_) => Bytes::from_static(b": keep-alive\n\n"),
            Ok(None) => return None,
            Ok(Some(e)) => {
                use pb::experiment_event::Event;
                let kind = match &e.event {
                    Some(Event::Started(_)) => "started",
                    Some(Event::CaseScored(_)) => "caseScored",
                    Some(Event::Ended(_)) => "ended",
                    None => "unknown",
                };
                let data = serde_json::to_string(&e).unwrap_or_default();
                Bytes::from(format!("event: {kind}\ndata: {data}\n\n"))
            }
        };
        Some((Ok::<_, std::convert::Infallible>(frame), Some(events)))
    });
    stream_response(Body::from_stream(frames))
}

fn stream_response(body: Body) -> Response {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Proxies that buffer (nginx) must not hold the stream back.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// One event's frame.
pub fn frame(event: &pb::RunEvent) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    write_frame(&mut out, event);
    out
}

/// Appends one event's frame to `out`.
fn write_frame(out: &mut Vec<u8>, event: &pb::RunEvent) {
    use std::io::Write as _;
    let kind = event.payload.as_ref().map_or("unknown", |p| kind_name(p));
    let _ = write!(out, "id: {}\nevent: {kind}\ndata: ", event.seq);
    // JSON text has no raw newline: one data line. Writing to a Vec cannot
    // fail, and a RunEvent always serializes.
    let _ = serde_json::to_writer(&mut *out, event);
    out.extend_from_slice(b"\n\n");
}

fn error_frame(e: &Error) -> Vec<u8> {
    let mut body = serde_json::json!({
        "code": baton_proto::code_name(e.code()),
        "message": e.message(),
    });
    if let Some(field) = e.field() {
        body["field"] = serde_json::Value::String(field.to_owned());
    }
    format!("event: error\ndata: {body}\n\n").into_bytes()
}

/// The payload's kind as the JSON mapping names its field (`textDelta`).
pub fn kind_name(p: &pb::run_event::Payload) -> &'static str {
    static NAMES: OnceLock<HashMap<i32, &'static str>> = OnceLock::new();
    let names = NAMES.get_or_init(|| {
        (0..128)
            .filter_map(|i| pb::EventKind::try_from(i).ok())
            .map(|k| {
                let snake = k
                    .as_str_name()
                    .trim_start_matches("EVENT_KIND_")
                    .to_ascii_lowercase();
                let camel: String = snake
                    .split('_')
                    .enumerate()
                    .map(|(i, w)| {
                        if i == 0 {
                            w.to_owned()
                        } else {
                            let mut c = w.chars();
                            c.next()
                                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                                .unwrap_or_default()
                        }
                    })
                    .collect();
                (k as i32, &*Box::leak(camel.into_boxed_str()))
            })
            .collect()
    });
    names
        .get(&(kind_of(p) as i32))
        .copied()
        .unwrap_or("unknown")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_names_its_seq_kind_and_carries_the_json_mapping() {
        let event = pb::RunEvent {
            seq: 7,
            context_id: "root.summarizer.1".into(),
            depth: 1,
            payload: Some(pb::run_event::Payload::TextDelta(pb::TextDelta {
                text: "hi\nthere".into(),
            })),
            ..Default::default()
        };
        let text = String::from_utf8(frame(&event)).expect("utf-8");
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("id: 7"));
        assert_eq!(lines.next(), Some("event: textDelta"));
        let data = lines.next().expect("data").trim_start_matches("data: ");
        let json: serde_json::Value = serde_json::from_str(data).expect("json");
        assert_eq!(json["seq"], "7", "uint64 is a string in the JSON mapping");
        assert_eq!(json["contextId"], "root.summarizer.1");
        assert_eq!(json["textDelta"]["text"], "hi\nthere");
        assert_eq!(lines.next(), Some(""));
        let done = pb::run_event::Payload::RunCompleted(Default::default());
        assert_eq!(kind_name(&done), "runCompleted");
    }
}
