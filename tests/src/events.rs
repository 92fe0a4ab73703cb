//! What the end-to-end tests check of every event stream: event kinds by
//! name, terminal events, and the rules every run's stream keeps.

use std::collections::HashMap;

use baton_client::{pb, pb::run_event::Payload};

/// The payload's kind, as the proto names its message (`AgentStarted`, …);
/// `""` for an event without payload.
pub fn kind(e: &pb::RunEvent) -> &'static str {
    match &e.payload {
        Some(Payload::RunStarted(_)) => "RunStarted",
        Some(Payload::RunCompleted(_)) => "RunCompleted",
        Some(Payload::RunFailed(_)) => "RunFailed",
        Some(Payload::RunCancelled(_)) => "RunCancelled",
        Some(Payload::RunResumed(_)) => "RunResumed",
        Some(Payload::AgentStarted(_)) => "AgentStarted",
        Some(Payload::TextDelta(_)) => "TextDelta",
        Some(Payload::MessageCompleted(_)) => "MessageCompleted",
        Some(Payload::AgentCompleted(_)) => "AgentCompleted",
        Some(Payload::Handoff(_)) => "Handoff",
        Some(Payload::ModelFallback(_)) => "ModelFallback",
        Some(Payload::BudgetExhausted(_)) => "BudgetExhausted",
        Some(Payload::RateLimitWait(_)) => "RateLimitWait",
        Some(Payload::HistoryCompacted(_)) => "HistoryCompacted",
        Some(Payload::ToolCallStarted(_)) => "ToolCallStarted",
        Some(Payload::ToolProgress(_)) => "ToolProgress",
        Some(Payload::ToolOptions(_)) => "ToolOptions",
        Some(Payload::ToolCallCompleted(_)) => "ToolCallCompleted",
        Some(Payload::ToolBatchCompleted(_)) => "ToolBatchCompleted",
        Some(Payload::ApprovalRequested(_)) => "ApprovalRequested",
        Some(Payload::ApprovalResolved(_)) => "ApprovalResolved",
        Some(Payload::InputRequested(_)) => "InputRequested",
        Some(Payload::InputReceived(_)) => "InputReceived",
        Some(Payload::InputTimedOut(_)) => "InputTimedOut",
        Some(Payload::ContextWritten(_)) => "ContextWritten",
        Some(Payload::StepStarted(_)) => "StepStarted",
        Some(Payload::StepCompleted(_)) => "StepCompleted",
        Some(Payload::StepFailed(_)) => "StepFailed",
        Some(Payload::StepSkipped(_)) => "StepSkipped",
        Some(Payload::PipelineCompleted(_)) => "PipelineCompleted",
        Some(Payload::Diverged(_)) => "Diverged",
        None => "",
    }
}

/// Whether `e` is a run's terminal event (completed, failed, cancelled).
pub fn is_terminal(e: &pb::RunEvent) -> bool {
    matches!(
        e.payload,
        Some(Payload::RunCompleted(_) | Payload::RunFailed(_) | Payload::RunCancelled(_))
    )
}

/// The last event's payload (the terminal one of a whole stream).
pub fn terminal(events: &[pb::RunEvent]) -> &Payload {
    events
        .last()
        .and_then(|e| e.payload.as_ref())
        .expect("a terminal event")
}

/// The rules every run's whole stream keeps: `seq` gap-free from 1, exactly
/// one terminal event and it is last, one run and trace id, one span per
/// context, and each context's parent is its id minus the last segment(s)
/// of the call that made it.
pub fn check_stream_rules(events: &[pb::RunEvent]) {
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        (1..=events.len() as u64).collect::<Vec<_>>(),
        "gap-free seq from 1"
    );
    assert_eq!(
        events.iter().filter(|e| is_terminal(e)).count(),
        1,
        "exactly one terminal event"
    );
    assert!(
        is_terminal(events.last().expect("events")),
        "the terminal event is last"
    );
    let run_id = &events[0].run_id;
    let trace_id = &events[0].trace_id;
    assert_eq!(trace_id.len(), 32);
    let mut spans: HashMap<&str, &str> = HashMap::new();
    for e in events {
        assert_eq!((&e.run_id, &e.trace_id), (run_id, trace_id));
        assert_eq!(e.span_id.len(), 16);
        let span = spans
            .entry(e.context_id.as_str())
            .or_insert(e.span_id.as_str());
        assert_eq!(*span, e.span_id, "one span per context");
    }
}

/// The output of a run that must have completed (its last event).
pub fn completed_output(events: &[pb::RunEvent]) -> String {
    match events.last().and_then(|e| e.payload.clone()) {
        Some(Payload::RunCompleted(c)) => c.output,
        other => panic!("expected RunCompleted, got {other:?}"),
    }
}

/// The failure of a run that must have failed (its last event).
pub fn run_failed(events: &[pb::RunEvent]) -> pb::RunFailed {
    match events.last().and_then(|e| e.payload.clone()) {
        Some(Payload::RunFailed(f)) => f,
        other => panic!("expected RunFailed, got {other:?}"),
    }
}
