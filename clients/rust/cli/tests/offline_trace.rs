//! A run's trace under `baton up` (issue 30, item 11; docs/observability.md):
//! the context store is in-process, so a `write_context` has no
//! `ContextStore/Put` span, and the events a shell gets from `baton runs
//! watch --json` carry the span ids of the trace `baton up` exports.

mod support;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use baton_e2e::otlp::OtlpReceiver;
use support::*;

#[test]
fn under_baton_up_the_trace_has_no_store_spans_and_events_name_its_spans() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let receiver = rt.block_on(OtlpReceiver::start()).expect("otlp receiver");
    let endpoint = receiver.endpoint();
    let up = Up::start_with_env(&[], &[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)]);
    let out = up.cli(&["run", "payer", "x", "--approve", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let trace = events[0]["traceId"].as_str().expect("trace id").to_owned();
    let run_id = events[0]["runId"].as_str().expect("run id").to_owned();
    let wanted: HashSet<String> = events
        .iter()
        .filter_map(|e| e["spanId"].as_str().map(str::to_owned))
        .collect();

    // What `baton runs watch RUN_ID --json` gives a shell: the same ids.
    let watched = up.cli(&["runs", "watch", &run_id, "--json"]);
    let watched: HashSet<String> = String::from_utf8_lossy(&watched.stdout)
        .lines()
        .filter_map(|l| {
            let e: serde_json::Value = serde_json::from_str(l).ok()?;
            e["spanId"].as_str().map(str::to_owned)
        })
        .collect();
    assert_eq!(watched, wanted);

    let end = Instant::now() + Duration::from_secs(15);
    let spans = loop {
        let spans: Vec<_> = receiver
            .spans()
            .into_iter()
            .filter(|s| s.trace_id == trace)
            .collect();
        let ids: HashSet<String> = spans.iter().map(|s| s.span_id.clone()).collect();
        let written = spans.iter().any(|s| s.name == "execute_tool write_context");
        if (written && wanted.is_subset(&ids)) || Instant::now() > end {
            break spans;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    assert!(names.contains(&"execute_tool write_context"), "{names:?}");
    assert!(names.contains(&"invoke_agent payer"), "{names:?}");
    assert!(
        !names.iter().any(|n| n.contains("ContextStore")),
        "baton up's store is in-process: {names:?}"
    );
    let ids: HashSet<String> = spans.iter().map(|s| s.span_id.clone()).collect();
    assert!(
        wanted.is_subset(&ids),
        "every event's span_id is a span of the trace: {wanted:?} in {names:?}"
    );
}
