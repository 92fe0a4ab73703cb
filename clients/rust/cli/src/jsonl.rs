//! Events as JSON lines (`--json`): each event in the proto3 JSON mapping,
//! exactly as the HTTP face's `GET /v1/runs/{run_id}/events` sends it in
//! its SSE `data:` lines — one schema for every program that reads Baton's
//! events. The envelope's fields are camelCase (`traceId`, `contextId`,
//! `parentContextId`, `depth`, `agent`, `spanId`, `time`), 64-bit integers
//! are strings (`"seq": "12"`), fields at their default are left out, and
//! the payload is one field named after its kind (`"textDelta": {"text":
//! …}`, `"runCompleted": {"output": …}`). docs/clients.md has an example.

use baton_client::pb;
use serde_json::Value;

/// One event as its proto3 JSON object.
pub fn event_json(e: &pb::RunEvent) -> Value {
    // A RunEvent always serializes (pbjson).
    serde_json::to_value(e).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use baton_client::pb::{self, run_event::Payload};

    #[test]
    fn an_event_is_its_proto3_json_mapping() {
        let e = pb::RunEvent {
            seq: 7,
            trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
            run_id: "r".into(),
            context_id: "root.summarizer.1".into(),
            parent_context_id: "root".into(),
            depth: 1,
            agent: "summarizer".into(),
            payload: Some(Payload::TextDelta(pb::TextDelta { text: "hi".into() })),
            ..Default::default()
        };
        assert_eq!(
            super::event_json(&e),
            serde_json::json!({
                "seq": "7",
                "traceId": "4bf92f3577b34da6a3ce929d0e0e4736",
                "runId": "r",
                "contextId": "root.summarizer.1",
                "parentContextId": "root",
                "depth": 1,
                "agent": "summarizer",
                "textDelta": {"text": "hi"},
            })
        );
    }
}
