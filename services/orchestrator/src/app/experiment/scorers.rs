//! Scorers that are asked — a judge (a run of an agent made for it) and a
//! custom tool — for an experiment's case or a live run.

use std::sync::Arc;

use baton_proto::v1::{self as pb, run_event::Payload};
use serde_json::{Value, json};

use crate::{
    app::{
        orchestrator::{Caller, Orchestrator},
        start::Checked,
    },
    catalog::{
        Agent, AgentSpec,
        settings::{ResponseFormat, Settings},
    },
    eval::score::{ActualCall, How, Scorer, Verdict, cut},
    model::call::budget::Budgets,
    request::{AgentRequest, validate::agent_run_as},
    run::target::Resolved,
};

use super::ran::collect;

impl Orchestrator {
    /// A judge's or a tool scorer's verdict on `asked` (of `subject`), and
    /// what asking it used.
    pub(crate) async fn ask_scorer(
        &self,
        caller: &Caller,
        subject: &Subject<'_>,
        scorer: &Scorer,
        asked: &Asked<'_>,
    ) -> (Verdict, pb::Usage) {
        let output = asked.output;
        match &scorer.how {
            How::Judge {
                model,
                rubric,
                repeat,
            } => {
                let mut usage = pb::Usage::default();
                let mut verdicts = Vec::new();
                let mut failures = Vec::new();
                for _ in 0..*repeat {
                    match self.judge(caller, subject, model, rubric, output).await {
                        Ok((score, reason, u)) => {
                            crate::run::usage::add(&mut usage, &u);
                            verdicts.push((score, reason));
                        }
                        Err((why, u)) => {
                            crate::run::usage::add(&mut usage, &u);
                            failures.push(why);
                        }
                    }
                }
                if verdicts.is_empty() {
                    let why = failures.first().cloned().unwrap_or_default();
                    return (
                        scorer.errored(format!("the judge did not answer: {why}")),
                        usage,
                    );
                }
                let n = verdicts.len() as f64;
                let mean = verdicts.iter().map(|(s, _)| s).sum::<f64>() / n;
                let passes = verdicts
                    .iter()
                    .filter(|(s, _)| *s >= scorer.threshold)
                    .count() as f64;
                let agreement = passes.max(n - passes) / n;
                let reason = verdicts
                    .iter()
                    .min_by(|a, b| (a.0 - mean).abs().total_cmp(&(b.0 - mean).abs()))
                    .map(|(_, r)| r.clone())
                    .unwrap_or_default();
                let mut v = scorer.verdict(mean, reason);
                v.agreement = agreement;
                if !failures.is_empty() {
                    v.reason.push_str(&format!(
                        " ({} of {} asks failed: {})",
                        failures.len(),
                        repeat,
                        failures[0]
                    ));
                }
                (v, usage)
            }
            How::Tool(tool) => (
                self.tool_scorer(caller, scorer, tool, subject, asked).await,
                pb::Usage::default(),
            ),
            _ => (
                scorer.errored("not a scorer that is asked".into()),
                pb::Usage::default(),
            ),
        }
    }

    /// One ask of a judge: its score (0 to 1), reason and usage.
    async fn judge(
        &self,
        caller: &Caller,
        subject: &Subject<'_>,
        model: &str,
        rubric: &str,
        output: &str,
    ) -> std::result::Result<(f64, String, pb::Usage), (String, pb::Usage)> {
        let services = self.services();
        let resolved = services
            .models
            .resolve(model)
            .map_err(|e| (e.to_string(), pb::Usage::default()))?;
        let schema = json!({
            "type": "object",
            "properties": {"score": {"type": "number"}, "reason": {"type": "string", "maxLength": 400}},
            "required": ["score", "reason"],
            "additionalProperties": false
        });
        let agent = Arc::new(Agent {
            name: "judge".into(),
            spec: AgentSpec {
                description: "Judges an answer by a rubric.".into(),
                instructions: format!("{JUDGE_INSTRUCTIONS}\n\nRubric:\n{rubric}"),
                model: model.to_owned(),
                settings: Settings {
                    response_format: Some(ResponseFormat {
                        name: "verdict".into(),
                        schema,
                        strict: true,
                        retries: 1,
                    }),
                    // Room for its verdict whatever its provider's default
                    // (a small model writes a long reason; cut, it is not
                    // JSON).
                    max_tokens: Some(JUDGE_MAX_TOKENS),
                    ..Default::default()
                },
                ..Default::default()
            },
            policies: Vec::new(),
        });
        let target = Resolved {
            target: "judge".into(),
            agent,
            model: resolved,
            group_members: None,
        };
        let mut input = String::new();
        input.push_str("Conversation:\n");
        for m in subject.messages {
            input.push_str(&format!("User: {m}\n"));
        }
        if let Some(e) = subject.expected {
            let e = match e {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            input.push_str(&format!("\nReference answer:\n{e}\n"));
        }
        input.push_str(&format!("\nAnswer to judge:\n{output}\n"));
        let request = pb::RunAgentRequest {
            agent: "judge".into(),
            input,
            ..Default::default()
        };
        let no_usage = || pb::Usage::default();
        let request = AgentRequest::try_from(request).map_err(|e| (e.to_string(), no_usage()))?;
        let mut checked: Checked = agent_run_as(&services, request, target)
            .map_err(|e| (e.to_string(), no_usage()))?
            .into();
        checked.options.shared_budget = subject.budget.cloned();
        // Labelled with its experiment, or as live scoring's: never scored
        // live itself, never resumed elsewhere (its agent is made here).
        let label = subject.experiment.unwrap_or(LIVE_SCORING).to_owned();
        let started = self
            .start(
                caller,
                "Judge",
                checked,
                services,
                crate::app::start::Origin::experiment(label),
            )
            .await
            .map_err(|e| (e.to_string(), no_usage()))?;
        let run_id = started.run_id.clone();
        let ran = collect(started.events).await;
        if subject.experiment.is_none() {
            // A live run's judge keeps no copy of the person's words: a
            // delete of the run's conversation must leave none.
            if let Err(e) = self.forget_run(caller, &run_id).await {
                tracing::debug!(run_id, error = %e, "a live judge's run could not be forgotten");
            }
        }
        if ran.status != "completed" {
            return Err((ran.error, ran.usage));
        }
        match parse_verdict(&ran.output) {
            Some((score, reason)) => Ok((score, reason, ran.usage)),
            None => Err((
                format!(
                    "its answer is not a {{score, reason}} object: {:?}",
                    cut(&ran.output)
                ),
                ran.usage,
            )),
        }
    }

    /// A custom scorer: the tool is called with `{case, result}` and
    /// answers a score (a number, or `{score, reason}`; `true`/`false`).
    #[allow(clippy::too_many_arguments)]
    async fn tool_scorer(
        &self,
        caller: &Caller,
        scorer: &Scorer,
        tool: &str,
        subject: &Subject<'_>,
        asked: &Asked<'_>,
    ) -> Verdict {
        let (output, calls, run_id) = (asked.output, asked.calls, asked.run_id);
        let services = self.services();
        let Some(t) = services.tools.get(tool).cloned() else {
            return scorer.errored(format!("no tool {tool:?} any more"));
        };
        let args = json!({
            "case": {
                "id": subject.case_id,
                "messages": subject.messages,
                "expected": subject.expected,
                "labels": subject.labels,
            },
            "result": {"output": output, "tool_calls": calls, "run_id": run_id},
        });
        let trace = baton_common::ids::TraceId::random();
        let scope =
            baton_store::Scope::new(baton_common::auth::Tenant(caller.tenant.clone()), trace);
        let cancelled = std::sync::atomic::AtomicUsize::new(0);
        let ctx = crate::tools::tool::ToolCtx {
            store: &services.store,
            scope: &scope,
            run_id,
            context_id: "scorer",
            depth: 0,
            agent: "scorer",
            // Its own id a scorer and an answer: a tool server that
            // de-duplicates calls by id answers each.
            call_id: &asked.call_id,
            tool,
            events: &Quiet,
            cancelled_calls: &cancelled,
        };
        let timeout = services.defaults.tool_timeout;
        let outcome = match tokio::time::timeout(timeout, t.call(&ctx, &args, None)).await {
            Ok(o) => o,
            Err(_) => {
                return scorer.errored(format!(
                    "the scorer tool {tool} did not answer in {timeout:?}"
                ));
            }
        };
        match outcome {
            crate::tools::tool::ToolOutcome::Ok(text) => match parse_verdict(&text) {
                Some((score, reason)) => scorer.verdict(score, reason),
                None => scorer.errored(format!(
                    "the scorer tool's answer is not a score: {:?}",
                    cut(&text)
                )),
            },
            crate::tools::tool::ToolOutcome::Err(e) => {
                scorer.errored(format!("the scorer tool failed: {e}"))
            }
            crate::tools::tool::ToolOutcome::NeedInput { .. } => {
                scorer.errored("the scorer tool asked for a person's input".into())
            }
        }
    }
}

/// What a scorer that is asked (a judge, a tool) is told of what it
/// scores: a case of an experiment, or a live run (`app::live_scoring`).
pub(crate) struct Subject<'a> {
    /// The experiment its judges' runs are labelled with (none: a live
    /// run's).
    pub experiment: Option<&'a str>,
    /// The case's id (a live run's: its run id).
    pub case_id: &'a str,
    /// The person's messages.
    pub messages: &'a [String],
    /// The expected answer, if any.
    pub expected: Option<&'a Value>,
    /// Its labels.
    pub labels: &'a std::collections::BTreeMap<String, String>,
    /// The experiment's budget, which its judges draw from too.
    pub budget: Option<&'a Arc<Budgets>>,
}

/// What a scorer that is asked (a judge, a tool) is given of a try.
pub(crate) struct Asked<'a> {
    /// The answer scored.
    pub output: &'a str,
    /// The try's tool calls.
    pub calls: &'a [ActualCall],
    /// The try's (last) run.
    pub run_id: &'a str,
    /// The call's id for a tool scorer, its own a scorer and an answer.
    pub call_id: String,
}

/// The experiment label of a live run's judge runs (see
/// `app::live_scoring`): not an experiment's id (those start `exp-`).
pub(crate) const LIVE_SCORING: &str = "live-scoring";

/// Most tokens a judge answers with: a `{score, reason}` and room to spare.
const JUDGE_MAX_TOKENS: u32 = 512;

/// What a judge is told before its rubric.
const JUDGE_INSTRUCTIONS: &str = "You are an impartial judge of an AI assistant's answer. Read the conversation, the reference answer if there is one, and the answer to judge. Judge the answer only by the rubric below. Reply with a JSON object and nothing else: {\"score\": a number from 0 (fails the rubric) to 1 (meets it fully), \"reason\": one sentence saying why}.";

/// A `{score, reason}` (or a bare number, or true/false) in `text`.
fn parse_verdict(text: &str) -> Option<(f64, String)> {
    let text = text.trim();
    let v: Value = serde_json::from_str(text).ok().or_else(|| {
        let (a, b) = (text.find('{')?, text.rfind('}')?);
        serde_json::from_str(text.get(a..=b)?).ok()
    })?;
    match v {
        Value::Number(n) => Some((n.as_f64()?, String::new())),
        Value::Bool(b) => Some((if b { 1.0 } else { 0.0 }, String::new())),
        Value::Object(m) => {
            let score = match m.get("score")? {
                Value::Number(n) => n.as_f64()?,
                Value::Bool(b) => f64::from(u8::from(*b)),
                Value::String(s) => s.trim().parse().ok()?,
                _ => return None,
            };
            let reason = m
                .get("reason")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            Some((score, reason))
        }
        _ => None,
    }
}

/// A scorer tool's events go nowhere: it runs outside any run.
struct Quiet;

#[async_trait::async_trait]
impl crate::tools::tool::ToolEvents for Quiet {
    async fn emit(&self, _payload: Payload) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_are_read_from_what_a_judge_says() {
        assert_eq!(
            parse_verdict("{\"score\": 0.8, \"reason\": \"good\"}"),
            Some((0.8, "good".into()))
        );
        assert_eq!(
            parse_verdict("Sure! ```json\n{\"score\": 1, \"reason\": \"ok\"}\n```"),
            Some((1.0, "ok".into()))
        );
        assert_eq!(parse_verdict("0.25"), Some((0.25, String::new())));
        assert_eq!(parse_verdict("true"), Some((1.0, String::new())));
        assert_eq!(parse_verdict("no idea"), None);
    }
}
