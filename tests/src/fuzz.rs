//! The bodies of the fuzz targets (`tests/fuzz`, cargo-fuzz on nightly),
//! shared with `tests/tests/fuzz_regressions.rs`, which replays the seeds
//! and every input a fuzzer once crashed on with plain `cargo test`.
//!
//! Each function takes arbitrary bytes and must return normally, whatever
//! they are: a panic is a bug.

use std::sync::{Arc, OnceLock};

use baton_orchestrator::{
    app::Orchestrator,
    catalog::Catalog,
    config::RunDefaults,
    pipeline::PipelineFile,
    request::{AgentRequest, PipelineRequest, validate},
    run::shared::Shared,
};
use baton_proto::v1 as pb;
use baton_store::{ContextStore, Limits, memory::MemoryStore};
use prost::Message;

/// The agents file requests are validated against.
pub const AGENTS: &str = r#"
default_model: "scripted:echo"
scripts:
  echo: [{text: "hi"}]
agents:
  writer: {tools: [write_context, read_context]}
  reviewer: {model: "scripted:echo", tools: [writer], handoffs: [writer]}
groups:
  desk: {root: reviewer, members: [writer, reviewer]}
"#;

/// A target's body.
pub type Target = fn(&[u8]);

/// The targets, by name (the fuzz crate's binaries and the folders of
/// seeds and regressions).
pub const TARGETS: [(&str, Target); 7] = [
    ("run_agent_request", run_agent_request),
    ("run_pipeline_request", run_pipeline_request),
    ("put_request", put_request),
    ("agents_file", agents_file),
    ("pipeline_file", pipeline_file),
    ("event_filter", event_filter),
    ("keys_file", keys_file),
];

/// An orchestrator service over the in-memory store (validation only: no
/// run is started), built once, inside a runtime of its own that lives as
/// long as the process.
fn service() -> &'static Orchestrator {
    static SERVICE: OnceLock<(tokio::runtime::Runtime, Orchestrator)> = OnceLock::new();
    let (_, service) = SERVICE.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let service = {
            let _inside = runtime.enter();
            let catalog = Arc::new(Catalog::from_yaml(AGENTS).expect("the fuzz catalog is valid"));
            let store: Arc<dyn ContextStore> = Arc::new(MemoryStore::new(Limits::default()));
            let services = Shared::new(
                catalog,
                store,
                RunDefaults::default(),
                Shared::untraced(),
                &|_| None,
            )
            .expect("the fuzz services build");
            Orchestrator::new(
                services,
                tokio_util::sync::CancellationToken::new(),
                tokio_util::task::TaskTracker::new(),
            )
        };
        (runtime, service)
    });
    service
}

/// RunAgent validation of any bytes decoded as a RunAgentRequest.
pub fn run_agent_request(data: &[u8]) {
    if let Ok(request) = pb::RunAgentRequest::decode(data)
        && let Ok(request) = AgentRequest::try_from(request)
    {
        let _ = validate::agent_run(&service().services(), request);
    }
}

/// RunPipeline validation of any bytes decoded as a RunPipelineRequest.
pub fn run_pipeline_request(data: &[u8]) {
    if let Ok(request) = pb::RunPipelineRequest::decode(data)
        && let Ok(request) = PipelineRequest::try_from(request)
    {
        let _ = validate::pipeline_run(&service().services(), request);
    }
}

/// The context store's Put validation.
pub fn put_request(data: &[u8]) {
    if let Ok(request) = pb::PutRequest::decode(data) {
        let _ = baton_context_store::grpc::put_of(request, Default::default(), &Limits::default());
    }
}

/// The agents-file parser and its validation.
pub fn agents_file(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = Catalog::from_yaml(text);
    }
}

/// The pipeline-file parser (`baton pipeline FILE.yaml`, the run_pipeline
/// tool's arguments), then the request it makes through validation.
pub fn pipeline_file(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(file) = serde_norway::from_str::<PipelineFile>(text) else {
        return;
    };
    if let Ok(request) = file.into_request()
        && let Ok(request) = PipelineRequest::try_from(request)
    {
        let _ = validate::pipeline_run(&service().services(), request);
    }
}

/// The event filter: validated, then asked about events at a few places.
pub fn event_filter(data: &[u8]) {
    let Ok(f) = pb::EventFilter::decode(data) else {
        return;
    };
    let Ok(filter) = baton_orchestrator::wire::request::filter(Some(f)) else {
        return;
    };
    if validate::check_filter(&filter, &RunDefaults::default()).is_err() {
        return;
    }
    let delta = pb::run_event::Payload::TextDelta(pb::TextDelta { text: "x".into() });
    for (id, depth) in [
        ("root", 0),
        ("root.a.1", 1),
        ("root.a.1.b.2", 2),
        ("root.a", 1),
    ] {
        let _ = filter.passes_at(id, depth, &delta);
    }
}

/// The API keys file parser (`<tenant> <key>` lines).
pub fn keys_file(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = baton_common::auth::parse_keys(text);
    }
}
