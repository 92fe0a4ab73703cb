//! `baton pipeline FILE.yaml`: run a pipeline described in YAML (see
//! deploy/config/pipelines/research.yaml) and draw each step live.

use std::{collections::HashMap, path::PathBuf, time::Duration};

use anyhow::Context;
use baton_client::{OrchestratorClient, pb};
use clap::Args;
use serde::Deserialize;

/// `baton pipeline` arguments.
#[derive(Args)]
pub struct PipelineArgs {
    /// The pipeline file (YAML).
    file: PathBuf,
    /// The orchestrator's address.
    #[arg(long, env = "BATON_ENDPOINT", default_value = "http://127.0.0.1:50051")]
    endpoint: String,
    /// Print events as JSON lines.
    #[arg(long)]
    json: bool,
    /// Approve every approval without asking.
    #[arg(long)]
    approve: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    name: String,
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    policy: Option<String>,
    #[serde(default)]
    max_concurrency: Option<u32>,
    #[serde(default)]
    keep_context: bool,
    #[serde(default)]
    initial_slots: HashMap<String, String>,
    steps: Vec<StepFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StepFile {
    id: String,
    agent: String,
    #[serde(default)]
    task: String,
    #[serde(default)]
    input_from: Vec<String>,
    #[serde(default)]
    output_to: String,
    #[serde(default)]
    depends_on: Vec<String>,
    #[serde(default)]
    required: Option<bool>,
    #[serde(default)]
    timeout: Option<String>,
    #[serde(default)]
    retries: u32,
}

fn request(file: File) -> anyhow::Result<pb::RunPipelineRequest> {
    let mode = match file.mode.as_deref() {
        None | Some("sequential") => pb::PipelineMode::Sequential,
        Some("parallel") => pb::PipelineMode::Parallel,
        Some("dag") => pb::PipelineMode::Dag,
        Some(other) => anyhow::bail!("mode: {other:?} is not sequential, parallel or dag"),
    };
    let policy = match file.policy.as_deref() {
        None | Some("fail") => pb::FailurePolicy::Fail,
        Some("continue") => pb::FailurePolicy::Continue,
        Some("best_effort") => pb::FailurePolicy::BestEffort,
        Some(other) => anyhow::bail!("policy: {other:?} is not fail, continue or best_effort"),
    };
    let steps = file
        .steps
        .into_iter()
        .map(|s| {
            let timeout = s
                .timeout
                .map(|t| {
                    baton_common::config::duration::parse(&t)
                        .map_err(|e| anyhow::anyhow!("steps.{}.timeout: {e}", s.id))
                })
                .transpose()?
                .map(|d: Duration| prost_types::Duration {
                    seconds: d.as_secs() as i64,
                    nanos: d.subsec_nanos() as i32,
                });
            Ok(pb::PipelineStep {
                id: s.id,
                agent: s.agent,
                task: s.task,
                input_from: s.input_from,
                output_to: s.output_to,
                depends_on: s.depends_on,
                required: s.required,
                timeout,
                retries: s.retries,
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(pb::RunPipelineRequest {
        pipeline: Some(pb::PipelineSpec {
            name: file.name,
            steps,
            mode: mode as i32,
            policy: policy as i32,
            max_concurrency: file.max_concurrency,
        }),
        initial_slots: file.initial_slots,
        keep_context: file.keep_context,
        ..Default::default()
    })
}

/// Runs the pipeline in the file, drawing its steps; fails unless it completes.
pub async fn run(args: PipelineArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let file: File = serde_norway::from_str(&text)
        .with_context(|| format!("{} is not a pipeline file", args.file.display()))?;
    let mut request = request(file).with_context(|| format!("in {}", args.file.display()))?;
    if args.approve {
        request.approval_mode = pb::ApprovalMode::AutoApprove as i32;
    }
    let client = OrchestratorClient::connect(args.endpoint.clone()).await?;
    let events = client.run_pipeline(request).await?;
    crate::run::follow(&client, events, args.json).await
}
