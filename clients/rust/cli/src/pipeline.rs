//! `baton pipeline FILE.yaml`: run a pipeline described in YAML (see
//! deploy/config/pipelines/research.yaml) and draw each step live.

use std::path::PathBuf;

use anyhow::Context;
use baton_client::pb;
use baton_orchestrator::pipeline::PipelineFile;
use clap::Args;

/// `baton pipeline` arguments.
#[derive(Args)]
pub struct PipelineArgs {
    /// The pipeline file (YAML).
    file: PathBuf,
    #[command(flatten)]
    target: crate::run::Target,
    /// Print events as JSON lines.
    #[arg(long)]
    json: bool,
    /// Approve every approval without asking.
    #[arg(long, conflicts_with = "deny")]
    approve: bool,
    /// Deny every approval without asking.
    #[arg(long)]
    deny: bool,
    /// Seed a slot, `key=value` (over the file's `initial_slots` of the
    /// same key); repeatable.
    #[arg(long = "input", value_name = "KEY=VALUE")]
    inputs: Vec<String>,
    /// The answer to the run's next input request, instead of asking;
    /// repeat for several, in order.
    #[arg(long = "answer", value_name = "TEXT")]
    answers: Vec<String>,
    /// Start the pipeline detached (it outlives this command), print its
    /// run id and return; follow it with `baton runs watch`. Into a pipe
    /// or `$(…)` the id alone is printed.
    #[arg(long, conflicts_with_all = ["approve", "deny", "answers"])]
    detach: bool,
    #[command(flatten)]
    steer: crate::steer::Steer,
}

/// Runs the pipeline in the file, drawing its steps; fails unless it completes.
pub async fn run(args: PipelineArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let file: PipelineFile = serde_norway::from_str(&text)
        .with_context(|| format!("{} is not a pipeline file", args.file.display()))?;
    let mut request = file
        .into_request()
        .map_err(|e| anyhow::anyhow!("in {}: {e}", args.file.display()))?;
    if args.approve {
        request.approval_mode = pb::ApprovalMode::AutoApprove as i32;
    }
    if args.deny {
        request.approval_mode = pb::ApprovalMode::AutoDeny as i32;
    }
    for pair in &args.inputs {
        let (key, value) = pair
            .split_once('=')
            .with_context(|| format!("--input {pair:?}: expected key=value"))?;
        request
            .initial_slots
            .insert(key.to_owned(), value.to_owned());
    }
    let (default_model, limits, settings) = args.steer.apply()?;
    if !default_model.is_empty() {
        request.default_model = default_model;
    }
    if let Some(l) = limits {
        let mine = request.limits.get_or_insert_with(Default::default);
        if l.max_turns > 0 {
            mine.max_turns = l.max_turns;
        }
        if l.max_depth.is_some() {
            mine.max_depth = l.max_depth;
        }
        if l.run_timeout.is_some() {
            mine.run_timeout = l.run_timeout;
        }
        if l.budget.is_some() {
            mine.budget = l.budget;
        }
    }
    if settings.is_some() {
        request.settings = settings;
    }
    request.detach = args.detach;
    let (client, links) = crate::follow::with_links(args.target.connect().await?);
    let steps: Vec<(String, String)> = request
        .pipeline
        .iter()
        .flat_map(|p| &p.steps)
        .map(|s| (s.id.clone(), s.agent.clone()))
        .collect();
    let events = match client.run_pipeline(request).await {
        Ok(events) => events,
        // A step names an agent there is not: as `baton run` says it.
        Err(e) if e.code() == tonic::Code::InvalidArgument => {
            let step = e
                .field()
                .and_then(|f| f.strip_prefix("pipeline.steps["))
                .and_then(|f| f.strip_suffix("].agent"))
                .and_then(|n| n.parse::<usize>().ok())
                .and_then(|n| steps.get(n));
            match step {
                Some((id, agent)) => {
                    let e = crate::run::did_you_mean(&client, agent, e).await;
                    return Err(anyhow::anyhow!("step {id:?}: {e}"));
                }
                None => return Err(e.into()),
            }
        }
        Err(e) => return Err(e.into()),
    };
    if args.detach {
        let mut events = events;
        let (run_id, trace_id) = crate::detach::started(&mut events).await?;
        let sentence = format!(
            "pipeline run {run_id} started, detached (trace {trace_id}): baton runs watch {run_id}"
        );
        let json = serde_json::json!({"runId": run_id, "traceId": trace_id});
        return crate::detach::detached(args.json, &json, &run_id, &sentence);
    }
    crate::follow::follow(
        &client,
        events,
        links,
        args.json,
        crate::follow::Answers {
            approvals: None,
            inputs: args.answers,
        },
        crate::follow::CtrlC::Cancel,
        crate::view::Mode::Tree,
    )
    .await
}
