//! The workload's items: the example agents of `deploy/config/agents.yaml`
//! (assistant; researcher → summarizer → fact_checker; the support group,
//! triage → billing, whose write needs an approval; billing alone; the
//! interviewer, who asks a question; the planner's DAG) and the example
//! pipeline `deploy/config/pipelines/research.yaml` — plus two test-only
//! agents slow enough for faults to land mid-run: `sleeper` (a 1.5 s tool
//! call) and `slow_payer` (a 1 s call, then an approval).

use anyhow::Context as _;
use baton_client::pb;
use serde_json::{Value, json};

use super::history::Expected;

/// The example pipeline.
const RESEARCH_PIPELINE: &str = include_str!("../../../deploy/config/pipelines/research.yaml");

/// One kind of run the workload starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Item {
    /// `assistant`: echoes its input.
    Assistant,
    /// `researcher`: nesting two deep, a streaming sleep, a write.
    Researcher,
    /// The `support` group: a handoff, then an approval.
    Support,
    /// `billing`: an approval.
    Billing,
    /// `interviewer`: a question with options.
    Interviewer,
    /// `planner`: a DAG pipeline run by a tool.
    Planner,
    /// The research pipeline.
    Pipeline,
    /// `sleeper` (test-only): a 1.5 s tool call.
    Sleeper,
    /// `slow_payer` (test-only): a 1 s tool call, then an approval.
    SlowPayer,
    /// `chat`: a message of the client's conversation (its answer names
    /// every earlier message).
    Chat,
}

impl Item {
    /// Every item; the workload picks among them uniformly.
    pub const ALL: [Item; 10] = [
        Self::Assistant,
        Self::Researcher,
        Self::Support,
        Self::Billing,
        Self::Interviewer,
        Self::Planner,
        Self::Pipeline,
        Self::Sleeper,
        Self::SlowPayer,
        Self::Chat,
    ];

    /// The item's name in the summary.
    pub fn name(self) -> &'static str {
        match self {
            Self::Assistant => "assistant",
            Self::Researcher => "researcher",
            Self::Support => "support",
            Self::Billing => "billing",
            Self::Interviewer => "interviewer",
            Self::Planner => "planner",
            Self::Pipeline => "pipeline",
            Self::Sleeper => "sleeper",
            Self::SlowPayer => "slow_payer",
            Self::Chat => "chat",
        }
    }

    /// The agent (or group) a RunAgent of this item names; `None` for the
    /// pipeline.
    fn agent(self) -> Option<&'static str> {
        match self {
            Self::Pipeline => None,
            Self::Support => Some("support"),
            other => Some(other.name()),
        }
    }

    /// What a run of this item on `input` must end with (the interviewer's
    /// until its question is answered: then the city chosen, see
    /// [`interviewer_output`]).
    pub fn expected(self, input: &str) -> Expected {
        match self {
            Self::Assistant => Expected::Exact(format!("You said: {input}")),
            Self::Researcher => Expected::Prefix("Research done. ".into()),
            Self::Support | Self::Billing => Expected::Prefix("Done. ".into()),
            Self::Interviewer => Expected::Prefix("Planning a trip to ".into()),
            Self::Planner => Expected::Prefix("Plan carried out: ".into()),
            Self::Pipeline => Expected::Prefix("Report. ".into()),
            Self::Sleeper => Expected::Exact(format!("slept on {input}")),
            Self::SlowPayer => Expected::Exact(format!("paid {input}")),
            Self::Chat => Expected::Prefix(format!("You said: {input}. Before that: ")),
        }
    }
}

/// The interviewer's output once `city` was chosen.
pub fn interviewer_output(city: &str) -> String {
    format!("Planning a trip to {city}.")
}

/// A detached start of `item` on `input`.
pub enum Start {
    /// RunAgent.
    Agent(pb::RunAgentRequest),
    /// RunPipeline.
    Pipeline(pb::RunPipelineRequest),
}

/// The conversation of client `n`'s `chat` runs.
pub fn conversation_of(n: usize) -> String {
    format!("chaos-c{n}")
}

/// A `chat` run's conversation: its id, and whether the run starts it.
pub type InConversation<'a> = Option<(&'a str, bool)>;

/// The request that starts `item` on `input`, detached; its questions
/// have `approval_timeout` to be answered when one is given; a `chat` run
/// in `conversation`.
pub fn request(
    item: Item,
    input: &str,
    pipeline: &pb::PipelineSpec,
    approval_timeout: Option<std::time::Duration>,
    conversation: InConversation<'_>,
) -> Start {
    match item.agent() {
        Some(agent) => Start::Agent(pb::RunAgentRequest {
            agent: agent.into(),
            input: input.into(),
            detach: true,
            limits: approval_timeout.map(|t| pb::RunLimits {
                approval_timeout: Some(t.into()),
                ..Default::default()
            }),
            conversation_id: conversation
                .map(|(id, _)| id.to_owned())
                .unwrap_or_default(),
            new_conversation: conversation.is_some_and(|(_, new)| new),
            ..Default::default()
        }),
        None => Start::Pipeline(pb::RunPipelineRequest {
            pipeline: Some(pipeline.clone()),
            initial_slots: [("topic".to_owned(), input.to_owned())].into(),
            detach: true,
            ..Default::default()
        }),
    }
}

/// The example agents file with the test-only agents added.
pub fn agents_file() -> anyhow::Result<String> {
    let mut agents: Value =
        serde_norway::from_str(crate::EXAMPLE_AGENTS).context("the example agents")?;
    let scripts = agents
        .get_mut("scripts")
        .and_then(Value::as_object_mut)
        .context("the example agents have scripts")?;
    scripts.insert(
        "sleeper".into(),
        json!([
            {"calls": [
                {"tool": "sleep", "args": {"ms": 1500, "steps": 3}},
                {"tool": "write_context", "args": {"key": "chaos/nap", "value": "{{input}}"}}
            ]},
            {"text": "slept on {{input}}"}
        ]),
    );
    scripts.insert(
        "slow_payer".into(),
        json!([
            {"calls": [{"tool": "sleep", "args": {"ms": 1000, "steps": 2}}]},
            {"calls": [{"tool": "write_context", "args": {"key": "chaos/pay", "value": "{{input}}"}}]},
            {"text": "paid {{input}}"}
        ]),
    );
    let list = agents
        .get_mut("agents")
        .and_then(Value::as_object_mut)
        .context("the example agents have agents")?;
    list.insert(
        "sleeper".into(),
        json!({"model": "scripted:sleeper", "tools": ["sleep", "write_context"]}),
    );
    list.insert(
        "slow_payer".into(),
        json!({
            "model": "scripted:slow_payer",
            "tools": ["sleep", "write_context"],
            "approvals": {"write_context": "always"}
        }),
    );
    Ok(serde_norway::to_string(&agents)?)
}

/// The example pipeline as a PipelineSpec (its `initial_slots` aside: the
/// workload gives each run its own topic), read as `baton pipeline` reads
/// a pipeline file.
pub fn research_pipeline() -> anyhow::Result<pb::PipelineSpec> {
    let file: baton_orchestrator::pipeline::PipelineFile =
        serde_norway::from_str(RESEARCH_PIPELINE).context("the example pipeline")?;
    file.into_request()
        .map_err(|e| anyhow::anyhow!("the example pipeline: {e}"))?
        .pipeline
        .context("the example pipeline has a spec")
}
