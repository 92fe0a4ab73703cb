//! The Rust client's runner of the polyglot conformance scenario
//! (tests/polyglot/scenario.json): `baton-scenario ENDPOINT SCENARIO.json`
//! runs every run of the scenario against the orchestrator at ENDPOINT
//! (approving every approval request), then the error cases, and prints what
//! it saw as one JSON object — the same shape the Python and TypeScript
//! runners print, which tests/polyglot/run.py compares.

use std::time::Duration;

use baton_client::{OrchestratorClient, pb, pb::run_event::Payload};
use futures::StreamExt;
use serde_json::{Map, Value, json};

/// `run_started`, `tool_progress`, …: the payload's name as the proto spells it.
fn kind(e: &pb::RunEvent) -> String {
    e.payload
        .as_ref()
        .map(|p| {
            baton_orchestrator::run::events::kind_of(p)
                .as_str_name()
                .trim_start_matches("EVENT_KIND_")
                .to_ascii_lowercase()
        })
        .unwrap_or_default()
}

fn str_field<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or_default()
}

fn pipeline_request(p: &Value) -> anyhow::Result<pb::RunPipelineRequest> {
    let mode = match str_field(p, "mode") {
        "parallel" => pb::PipelineMode::Parallel,
        "dag" => pb::PipelineMode::Dag,
        _ => pb::PipelineMode::Sequential,
    };
    let strings = |s: &Value, k: &str| -> Vec<String> {
        s.get(k)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let steps = p
        .get("steps")
        .and_then(Value::as_array)
        .ok_or_else(|| anyhow::anyhow!("pipeline.steps missing"))?
        .iter()
        .map(|s| pb::PipelineStep {
            id: str_field(s, "id").into(),
            agent: str_field(s, "agent").into(),
            task: str_field(s, "task").into(),
            output_to: str_field(s, "output_to").into(),
            input_from: strings(s, "input_from"),
            depends_on: strings(s, "depends_on"),
            ..Default::default()
        })
        .collect();
    Ok(pb::RunPipelineRequest {
        pipeline: Some(pb::PipelineSpec {
            name: str_field(p, "name").into(),
            steps,
            mode: mode as i32,
            policy: pb::FailurePolicy::Fail as i32,
            max_concurrency: p
                .get("max_concurrency")
                .and_then(Value::as_u64)
                .map(|n| n as u32),
        }),
        ..Default::default()
    })
}

async fn run(client: &OrchestratorClient, spec: &Value) -> anyhow::Result<Value> {
    let mut stream = if let Some(p) = spec.get("pipeline") {
        client.run_pipeline(pipeline_request(p)?).await?
    } else {
        client
            .run_agent(pb::RunAgentRequest {
                agent: str_field(spec, "agent").into(),
                input: str_field(spec, "input").into(),
                limits: Some(pb::RunLimits {
                    max_depth: spec
                        .get("max_depth")
                        .and_then(Value::as_u64)
                        .map(|d| d as u32),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await?
    };
    let mut events = Vec::new();
    let mut output = Value::Null;
    while let Some(e) = stream.next().await {
        let e = e?;
        events.push(json!([kind(&e), e.context_id, e.depth]));
        match &e.payload {
            Some(Payload::ApprovalRequested(a)) => {
                client
                    .resolve_approval(&e.run_id, &a.approval_id, true, "")
                    .await?;
            }
            Some(Payload::RunCompleted(c)) => output = json!(c.output),
            _ => {}
        }
    }
    Ok(json!({"events": events, "output": output}))
}

async fn errors(client: &OrchestratorClient, spec: &Value) -> anyhow::Result<Value> {
    let bad = &spec["unknown_agent"];
    let refused = client
        .run_agent(pb::RunAgentRequest {
            agent: str_field(bad, "agent").into(),
            input: str_field(bad, "input").into(),
            ..Default::default()
        })
        .await;
    let unknown = match refused {
        Err(e) => json!({"code": baton_proto::code_name(e.code()), "field": e.field()}),
        Ok(_) => json!({"code": "OK"}),
    };
    let slow = &spec["disconnect"];
    let mut stream = client
        .run_agent(pb::RunAgentRequest {
            agent: str_field(slow, "agent").into(),
            input: str_field(slow, "input").into(),
            ..Default::default()
        })
        .await?;
    let first = stream
        .next()
        .await
        .ok_or_else(|| anyhow::anyhow!("no first event"))??;
    drop(stream); // disconnect
    let mut status = pb::RunStatus::Running;
    for _ in 0..100 {
        status = client.get_run(&first.run_id).await?.status();
        if status != pb::RunStatus::Running {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(json!({"unknown_agent": unknown, "disconnect": {"status": status.as_str_name()}}))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, endpoint, scenario] = args.as_slice() else {
        anyhow::bail!(
            "usage: baton-scenario ENDPOINT SCENARIO.json (env: BATON_CA_FILE, BATON_API_KEY)"
        );
    };
    let scenario: Value = serde_json::from_str(&std::fs::read_to_string(scenario)?)?;
    // TLS and authentication as the other runners: BATON_CA_FILE (the CA an
    // https:// endpoint is checked against), BATON_API_KEY.
    let tls = baton_client::ClientTls {
        ca_file: std::env::var_os("BATON_CA_FILE").map(Into::into),
        ..Default::default()
    };
    let client = OrchestratorClient::connect_with(endpoint.clone(), &tls).await?;
    let client = match std::env::var("BATON_API_KEY") {
        Ok(key) => client.with_api_key(&key)?,
        Err(_) => client,
    };
    let mut runs = Map::new();
    for spec in scenario["runs"].as_array().into_iter().flatten() {
        runs.insert(str_field(spec, "name").into(), run(&client, spec).await?);
    }
    let errors = errors(&client, &scenario["errors"]).await?;
    println!(
        "{}",
        json!({"client": "rust", "runs": runs, "errors": errors})
    );
    Ok(())
}
