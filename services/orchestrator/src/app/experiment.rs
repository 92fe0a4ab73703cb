//! Experiments (RunExperiment, GetExperiment, ListExperiments,
//! CompareExperiments) and SaveCase: see `crate::eval`.
//!
//! An experiment is checked whole before anything runs (the dataset, each
//! case's target, judges' models, scorers' tools, recordings' runs), then
//! driven by a task of this replica: each case's tries are ordinary runs
//! started as RunAgent starts them, labelled with the experiment, at most
//! `concurrency` at once; each try is scored as its runs end, and a case
//! is told (and kept) when all of its tries are. Its record is written when
//! it starts, every [`SAVE_EVERY`] while cases end, and when it ends. When
//! its caller goes (the stream is dropped) or the replica stops, the runs
//! still going are cancelled (their streams dropped) and the record keeps
//! the cases that finished, `CANCELLED`.
//!
//! A judge is a run too: of an agent made for it (its model, the rubric as
//! its instructions, a `{score, reason}` JSON answer), labelled with the
//! experiment, so its calls go through the model-call stack — budgets,
//! rate limits, fallbacks, cost — and its usage counts with the try's.

use std::{
    collections::{BTreeSet, HashMap},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use baton_proto::v1::{self as pb, run_event::Payload};
use futures::{StreamExt as _, stream::FuturesUnordered};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{
    orchestrator::{Caller, Orchestrator},
    start::Checked,
};
use crate::{
    catalog::{
        Agent, AgentSpec,
        settings::{ResponseFormat, Settings},
    },
    error::{Error, Result},
    eval::{
        self,
        dataset::{Case, Dataset, RecordedCall, ToolsMode},
        score::{ActualCall, How, Scorer, Verdict, cut},
    },
    request::{
        AgentRequest,
        validate::{agent_run, agent_run_as},
    },
    run::{recording::rerun::Rerun, target::Resolved},
};

/// How often a running experiment's record is written.
pub const SAVE_EVERY: Duration = Duration::from_secs(2);

/// Where an experiment's events go: unbounded, so a slow reader never
/// holds its runs back (there are at most its cases' results, and two).
type Events = mpsc::UnboundedSender<pb::ExperimentEvent>;
/// Most bytes of a dataset (a request carrying it fits gRPC's 4 MiB).
pub const MAX_DATASET_BYTES: usize = 3 << 20;
/// Most tries of a case.
pub const MAX_REPEAT: u32 = 20;
/// Most runs of an experiment at once.
pub const MAX_CONCURRENCY: u32 = 64;

/// An experiment checked, ready to run.
struct Plan {
    record: pb::Experiment,
    dataset: Dataset,
    target: String,
    repeat: u32,
    concurrency: usize,
    default_model: String,
    budget: Option<pb::ExperimentBudget>,
}

/// What one try (one run of a case, or its runs for several messages)
/// came to.
struct Tried {
    case: usize,
    try_: pb::CaseTry,
    /// Why it could not run at all.
    error: Option<String>,
}

/// What the tries spent so far, for the experiment's budget.
#[derive(Default)]
struct Spent {
    tokens: u64,
    cost_nanos: u64,
}

impl Orchestrator {
    /// Checks and starts an experiment: its events (started, each case,
    /// ended). Dropping the receiver cancels it.
    pub async fn run_experiment(
        &self,
        caller: &Caller,
        r: pb::RunExperimentRequest,
    ) -> Result<mpsc::UnboundedReceiver<pb::ExperimentEvent>> {
        self.check_running()?;
        let plan = self.plan(caller, r).await?;
        let (tx, rx) = mpsc::unbounded_channel();
        let me = self.clone();
        let caller = caller.clone();
        self.tasks
            .spawn(async move { me.drive(caller, plan, tx).await });
        Ok(rx)
    }

    /// Checks a request whole (see the module docs).
    async fn plan(&self, caller: &Caller, r: pb::RunExperimentRequest) -> Result<Plan> {
        if r.dataset.len() > MAX_DATASET_BYTES {
            return Err(Error::Exhausted {
                field: "dataset".into(),
                message: format!("over {MAX_DATASET_BYTES} bytes"),
            });
        }
        let file = if r.dataset_name.is_empty() {
            "dataset".to_owned()
        } else {
            r.dataset_name.clone()
        };
        let dataset = eval::dataset::parse(&file, &r.dataset)
            .map_err(|b| Error::invalid("dataset", b.said(&file)))?;
        let repeat = if r.repeat == 0 { 1 } else { r.repeat };
        if repeat > MAX_REPEAT {
            return Err(Error::invalid("repeat", format!("at most {MAX_REPEAT}")));
        }
        let concurrency = if r.concurrency == 0 { 8 } else { r.concurrency };
        if concurrency > MAX_CONCURRENCY {
            return Err(Error::invalid(
                "concurrency",
                format!("at most {MAX_CONCURRENCY}"),
            ));
        }
        if let Some(b) = &r.budget
            && !(b.cost >= 0.0 && b.cost.is_finite())
        {
            return Err(Error::invalid("budget.cost", "must be a number ≥ 0"));
        }
        let services = self.services();
        let target = dataset.agent.clone().unwrap_or_default();
        let target = if r.agent.is_empty() {
            target
        } else {
            r.agent.clone()
        };
        if !r.default_model.is_empty() {
            services
                .models
                .resolve(&r.default_model)
                .map_err(|e| Error::invalid("default_model", e.to_string()))?;
        }
        let bad = |line: u32, field: &str, message: String| {
            Error::invalid(
                "dataset",
                eval::dataset::Bad::new(line, field, message).said(&file),
            )
        };
        let mut models = BTreeSet::new();
        let default_model = if r.default_model.is_empty() {
            services.catalog.default_model.clone()
        } else {
            r.default_model.clone()
        };
        if !default_model.is_empty() {
            models.insert(default_model.clone());
        }
        let mut runs_read = HashMap::new();
        for case in &dataset.cases {
            let agent = if case.agent.is_empty() {
                &target
            } else {
                &case.agent
            };
            if agent.is_empty() {
                return Err(Error::invalid(
                    "agent",
                    format!(
                        "{}:{}: the case names no agent, and neither do the dataset nor the request",
                        file, case.line
                    ),
                ));
            }
            if !services.catalog.is_callable(agent) {
                let unknown = format!("unknown agent or group {agent:?}");
                return Err(if !case.agent.is_empty() {
                    bad(case.line, "agent", unknown)
                } else if !r.agent.is_empty() {
                    Error::invalid("agent", unknown)
                } else {
                    bad(0, "dataset.agent", unknown)
                });
            }
            if let Some(a) = services.catalog.entry(agent)
                && !a.spec.model.is_empty()
            {
                models.insert(a.spec.model.clone());
            }
            for (i, s) in case.scorers.iter().enumerate() {
                match &s.how {
                    How::Judge { model, .. } => {
                        services.models.resolve(model).map_err(|e| {
                            bad(case.line, &format!("scorers[{i}].model"), e.to_string())
                        })?;
                    }
                    How::Tool(tool) if services.tools.get(tool).is_none() => {
                        return Err(bad(
                            case.line,
                            &format!("scorers[{i}].tool"),
                            format!(
                                "no tool server or MCP server of this orchestrator has a tool {tool:?}"
                            ),
                        ));
                    }
                    _ => {}
                }
            }
            if let Some(rec) = &case.recording
                && !rec.run_id.is_empty()
                && !runs_read.contains_key(&rec.run_id)
            {
                match self.get(caller, &rec.run_id).await {
                    Ok(view) if view.history_gone => {
                        return Err(bad(
                            case.line,
                            "recording.run_id",
                            format!(
                                "run {} has no recording any more (evicted for room): save the case with its recording inline",
                                rec.run_id
                            ),
                        ));
                    }
                    Ok(view) if view.status == pb::RunStatus::Running => {
                        return Err(bad(
                            case.line,
                            "recording.run_id",
                            format!("run {} is still running", rec.run_id),
                        ));
                    }
                    Ok(_) => {
                        runs_read.insert(rec.run_id.clone(), ());
                    }
                    Err(Error::InvalidArgument { message, .. }) => {
                        return Err(bad(case.line, "recording.run_id", message));
                    }
                    Err(Error::NotFound { .. }) => {
                        return Err(bad(
                            case.line,
                            "recording.run_id",
                            format!(
                                "no run {} (ended past its retention?): save the case with its recording inline",
                                rec.run_id
                            ),
                        ));
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        let id = format!("exp-{}", uuid::Uuid::new_v4().simple());
        let now = std::time::SystemTime::now();
        let name = if r.name.is_empty() {
            let at = serde_json::to_value(baton_proto::wkt::Timestamp::from(now))
                .ok()
                .and_then(|v| v.as_str().map(|s| s.chars().take(19).collect::<String>()))
                .unwrap_or_default();
            format!("{file} {at}")
        } else {
            r.name.clone()
        };
        if name.len() > 200 {
            return Err(Error::invalid("name", "at most 200 bytes"));
        }
        if name.starts_with("exp-") {
            return Err(Error::invalid(
                "name",
                "must not start with `exp-` (experiments' ids do)",
            ));
        }
        let record = pb::Experiment {
            id,
            name,
            target: target.clone(),
            dataset_name: file,
            agents_digest: services.catalog.digest.clone(),
            models: models.into_iter().collect(),
            status: pb::ExperimentStatus::Running as i32,
            started_at: Some(now.into()),
            repeat,
            case_count: dataset.cases.len() as u32,
            ..Default::default()
        };
        Ok(Plan {
            record,
            dataset,
            target,
            repeat,
            concurrency: concurrency as usize,
            default_model: r.default_model,
            budget: r.budget.filter(|b| b.tokens > 0 || b.cost > 0.0),
        })
    }

    /// Runs a checked experiment to its end, until `tx`'s receiver goes,
    /// or until this replica shuts down.
    async fn drive(self, caller: Caller, plan: Plan, tx: Events) {
        let tenant = caller.tenant.clone();
        let started = Instant::now();
        let mut record = plan.record.clone();
        self.save(&tenant, &mut record).await;
        let _ = tx.send(pb::ExperimentEvent {
            event: Some(pb::experiment_event::Event::Started(record.clone())),
        });
        let done: Mutex<Vec<Option<pb::CaseResult>>> =
            Mutex::new(vec![None; plan.dataset.cases.len()]);
        let usage = Mutex::new(pb::Usage::default());
        let plan = Arc::new(plan);
        let work = self.run_cases(&caller, &plan, &done, &usage, &tx, &record);
        let completed = tokio::select! {
            () = work => true,
            () = tx.closed() => false,
            // Shutting down: no case starts, none goes on (a durable case's
            // run is not handed over: see `app::resume`).
            () = self.shutdown.cancelled() => false,
            () = self.runs_stop.cancelled() => false,
        };
        // Dropped: the runs still going are cancelled with their streams.
        record.cases = done
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .flatten()
            .cloned()
            .collect();
        record.totals = Some(eval::totals(&record.cases, started.elapsed()));
        record.usage = Some(usage.lock().unwrap_or_else(|p| p.into_inner()).clone());
        record.status = if completed {
            pb::ExperimentStatus::Completed
        } else {
            pb::ExperimentStatus::Cancelled
        } as i32;
        record.ended_at = Some(std::time::SystemTime::now().into());
        // Its end is written, tried again once: a record left RUNNING
        // reads as ABANDONED once it is old.
        if !self.save(&tenant, &mut record).await {
            tokio::time::sleep(Duration::from_millis(500)).await;
            self.save(&tenant, &mut record).await;
        }
        tracing::info!(experiment = %record.id, cases = record.cases.len(), completed, "experiment ended");
        let _ = tx.send(pb::ExperimentEvent {
            event: Some(pb::experiment_event::Event::Ended(record)),
        });
    }

    /// Writes `record`, stamped with the time; whether it was written.
    async fn save(&self, tenant: &str, record: &mut pb::Experiment) -> bool {
        record.updated_at = Some(std::time::SystemTime::now().into());
        match self.experiments.put(tenant, record).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(experiment = %record.id, error = %e, "the experiment's record could not be written");
                false
            }
        }
    }

    /// Runs every try, scoring and telling each case as its last try ends;
    /// the record is written every [`SAVE_EVERY`] meanwhile.
    async fn run_cases(
        &self,
        caller: &Caller,
        plan: &Arc<Plan>,
        done: &Mutex<Vec<Option<pb::CaseResult>>>,
        usage: &Mutex<pb::Usage>,
        tx: &Events,
        record: &pb::Experiment,
    ) {
        let started = Instant::now();
        let spent = Mutex::new(Spent::default());
        let mut pending: Vec<Vec<Tried>> =
            (0..plan.dataset.cases.len()).map(|_| Vec::new()).collect();
        let mut queue =
            (0..plan.dataset.cases.len()).flat_map(|c| (0..plan.repeat).map(move |k| (c, k)));
        let mut running = FuturesUnordered::new();
        let mut next_save = tokio::time::Instant::now() + SAVE_EVERY;
        loop {
            while running.len() < plan.concurrency {
                let Some((c, _)) = queue.next() else { break };
                running.push(self.run_try(caller, plan, c, &spent));
            }
            if running.is_empty() {
                break;
            }
            let tried = tokio::select! {
                Some(tried) = running.next() => tried,
                () = tokio::time::sleep_until(next_save) => {
                    // Written while it runs, a case ended or not: a record
                    // not written for long reads as ABANDONED.
                    let mut r = record.clone();
                    r.cases = done.lock().unwrap_or_else(|p| p.into_inner()).iter().flatten().cloned().collect();
                    r.totals = Some(eval::totals(&r.cases, started.elapsed()));
                    r.usage = Some(usage.lock().unwrap_or_else(|p| p.into_inner()).clone());
                    self.save(&caller.tenant, &mut r).await;
                    next_save = tokio::time::Instant::now() + SAVE_EVERY;
                    continue;
                }
            };
            {
                let u = &tried.try_.usage.clone().unwrap_or_default();
                crate::run::usage::add(&mut usage.lock().unwrap_or_else(|p| p.into_inner()), u);
            }
            let c = tried.case;
            pending[c].push(tried);
            if pending[c].len() == plan.repeat as usize {
                let case = &plan.dataset.cases[c];
                let tries = std::mem::take(&mut pending[c]);
                let error = tries.iter().find_map(|t| t.error.clone());
                let errored_tries = tries.iter().filter(|t| t.error.is_some()).count() as u32;
                let mut result = pb::CaseResult {
                    case_id: case.id.clone(),
                    line: case.line,
                    input: cut(case.messages.last().map_or("", String::as_str)),
                    target: if case.agent.is_empty() {
                        plan.target.clone()
                    } else {
                        case.agent.clone()
                    },
                    tries: tries
                        .into_iter()
                        .filter(|t| t.error.is_none())
                        .map(|t| t.try_)
                        .collect(),
                    labels: case.labels.clone().into_iter().collect(),
                    error: error.unwrap_or_default(),
                    errored_tries,
                    ..Default::default()
                };
                eval::tally_case(&mut result);
                done.lock().unwrap_or_else(|p| p.into_inner())[c] = Some(result.clone());
                // Unbounded: a slow reader never holds the runs back (at
                // most a case's result a case is queued).
                let _ = tx.send(pb::ExperimentEvent {
                    event: Some(pb::experiment_event::Event::CaseScored(result)),
                });
            }
        }
    }

    /// One try of case `c`: its run (or runs, for several messages), then
    /// its scores.
    async fn run_try(&self, caller: &Caller, plan: &Plan, c: usize, spent: &Mutex<Spent>) -> Tried {
        let case = &plan.dataset.cases[c];
        let started = Instant::now();
        // A try that could not run, or whose run did not end here (its
        // replica shut down, its lease lapsed, its stream broke): an error,
        // not a failure of the agent. What it spent is counted.
        let errored = |error: String, usage: pb::Usage| {
            let mut s = spent.lock().unwrap_or_else(|p| p.into_inner());
            s.tokens += usage.input_tokens + usage.output_tokens;
            s.cost_nanos += usage.cost_nanos;
            Tried {
                case: c,
                try_: pb::CaseTry {
                    usage: Some(usage),
                    ..Default::default()
                },
                error: Some(error),
            }
        };
        let target = if case.agent.is_empty() {
            plan.target.clone()
        } else {
            case.agent.clone()
        };
        let mut conversation = String::new();
        let mut calls = Vec::new();
        let mut outputs = Vec::new();
        let mut usage = pb::Usage::default();
        let mut run_id = String::new();
        let mut status = "completed";
        let mut error = String::new();
        for (i, message) in case.messages.iter().enumerate() {
            // Each run is given what is left of the experiment's budget
            // when it starts (with what this try spent so far counted).
            let budget = match &plan.budget {
                None => None,
                Some(b) => {
                    let s = spent.lock().unwrap_or_else(|p| p.into_inner());
                    let used = s.tokens + usage.input_tokens + usage.output_tokens;
                    let cost = s.cost_nanos + usage.cost_nanos;
                    let tokens = (b.tokens > 0).then(|| b.tokens.saturating_sub(used));
                    let cost = (b.cost > 0.0).then(|| (b.cost - cost as f64 / 1e9).max(0.0));
                    if tokens == Some(0) || cost.is_some_and(|c| c <= 0.0) {
                        drop(s);
                        return errored("the experiment's budget is spent".into(), usage);
                    }
                    Some(pb::Budget { tokens, cost })
                }
            };
            let request = pb::RunAgentRequest {
                agent: target.clone(),
                input: message.clone(),
                run_context_json: if case.context.is_empty() {
                    String::new()
                } else {
                    Value::Object(case.context.clone()).to_string()
                },
                default_model: plan.default_model.clone(),
                limits: budget.map(|b| pb::RunLimits {
                    budget: Some(b),
                    ..Default::default()
                }),
                approval_mode: pb::ApprovalMode::AutoApprove as i32,
                new_conversation: case.messages.len() > 1 && i == 0,
                conversation_id: conversation.clone(),
                ..Default::default()
            };
            let started_run = match self.start_case_run(caller, plan, case, request).await {
                Ok(s) => s,
                Err(e) => return errored(format!("the case's run could not start: {e}"), usage),
            };
            run_id = started_run.run_id.clone();
            let ran = collect(started_run.events).await;
            crate::run::usage::add(&mut usage, &ran.usage);
            if ran.status == "error"
                || (ran.status == "failed" && ran.code == tonic::Code::Unavailable as i32)
            {
                return errored(
                    format!("the case's run {run_id} did not end here: {}", ran.error),
                    usage,
                );
            }
            if conversation.is_empty() {
                conversation = ran.conversation;
            }
            calls.extend(ran.calls);
            outputs.push(ran.output);
            if ran.status != "completed" {
                status = ran.status;
                error = ran.error;
                break;
            }
        }
        // The answers scored: the last, or each.
        let scored: Vec<(usize, &String)> = match case.scored {
            eval::dataset::Scored::Last => {
                outputs.iter().enumerate().next_back().into_iter().collect()
            }
            eval::dataset::Scored::Each => outputs.iter().enumerate().collect(),
        };
        let mut scores = Vec::new();
        for (i, output) in scored {
            for (k, scorer) in case.scorers.iter().enumerate() {
                let mut v = match scorer.score(
                    output,
                    case.expected.as_ref(),
                    case.trajectory.as_ref(),
                    &calls,
                ) {
                    Some(v) => v,
                    None => {
                        let asked = Asked {
                            output,
                            calls: &calls,
                            run_id: &run_id,
                            call_id: format!("score-{i}-{k}"),
                        };
                        let (v, u) = self.ask_scorer(caller, plan, scorer, case, &asked).await;
                        crate::run::usage::add(&mut usage, &u);
                        v
                    }
                };
                if case.scored == eval::dataset::Scored::Each && outputs.len() > 1 {
                    v.scorer = format!("{} (answer {})", v.scorer, i + 1);
                }
                scores.push(v);
            }
        }
        // What it spent, its judges' calls included.
        {
            let mut s = spent.lock().unwrap_or_else(|p| p.into_inner());
            s.tokens += usage.input_tokens + usage.output_tokens;
            s.cost_nanos += usage.cost_nanos;
        }
        let passed = status == "completed" && scores.iter().all(|v| v.passed);
        Tried {
            case: c,
            try_: pb::CaseTry {
                run_id,
                status: status.to_owned(),
                passed,
                scores: scores.into_iter().map(to_pb).collect(),
                output: cut_long(outputs.last().map_or("", String::as_str)),
                error,
                duration: Some(started.elapsed().into()),
                usage: Some(usage),
            },
            error: None,
        }
    }

    /// Starts one run of `case`, labelled with the experiment, its tool
    /// calls answered as the case says.
    async fn start_case_run(
        &self,
        caller: &Caller,
        plan: &Plan,
        case: &Case,
        request: pb::RunAgentRequest,
    ) -> Result<super::start::Started> {
        let request = AgentRequest::try_from(request)?;
        let services = self.services();
        let mut checked: Checked = agent_run(&services, request)?.into();
        checked.options.rerun = self.case_tools(caller, case).await?;
        self.start(
            caller,
            "RunExperiment",
            checked,
            services,
            Some(plan.record.id.clone()),
        )
        .await
    }

    /// What answers a case's tool calls: its recording (the run's, read
    /// as a replay reads it, or inline), and its faults.
    async fn case_tools(&self, caller: &Caller, case: &Case) -> Result<Option<Rerun>> {
        if case.tools == ToolsMode::Live && case.faults.is_empty() {
            return Ok(None);
        }
        let live = case.tools != ToolsMode::Recorded;
        let (origin, history, inline) = match (&case.recording, case.tools) {
            (Some(r), ToolsMode::Recorded | ToolsMode::LiveWhenUnrecorded)
                if !r.run_id.is_empty() =>
            {
                let (history, _, _) = self.history(caller, &r.run_id, u64::MAX).await?;
                (r.run_id.clone(), Some(history), &r.calls[..])
            }
            (Some(r), ToolsMode::Recorded | ToolsMode::LiveWhenUnrecorded) => {
                (String::new(), None, &r.calls[..])
            }
            _ => (String::new(), None, &[][..]),
        };
        Ok(Some(Rerun::tools(
            origin,
            history,
            inline,
            live || case.tools == ToolsMode::Live,
            case.faults.clone(),
        )))
    }

    /// A judge's or a tool scorer's verdict, and what asking it used.
    #[allow(clippy::too_many_arguments)]
    async fn ask_scorer(
        &self,
        caller: &Caller,
        plan: &Plan,
        scorer: &Scorer,
        case: &Case,
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
                    match self.judge(caller, plan, model, rubric, case, output).await {
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
                        scorer.verdict(0.0, format!("the judge did not answer: {why}")),
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
                self.tool_scorer(caller, scorer, tool, case, asked).await,
                pb::Usage::default(),
            ),
            _ => (
                scorer.verdict(0.0, "not a scorer that is asked".into()),
                pb::Usage::default(),
            ),
        }
    }

    /// One ask of a judge: its score (0 to 1), reason and usage.
    async fn judge(
        &self,
        caller: &Caller,
        plan: &Plan,
        model: &str,
        rubric: &str,
        case: &Case,
        output: &str,
    ) -> std::result::Result<(f64, String, pb::Usage), (String, pb::Usage)> {
        let services = self.services();
        let resolved = services
            .models
            .resolve(model)
            .map_err(|e| (e.to_string(), pb::Usage::default()))?;
        let schema = json!({
            "type": "object",
            "properties": {"score": {"type": "number", "minimum": 0, "maximum": 1}, "reason": {"type": "string"}},
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
        for m in &case.messages {
            input.push_str(&format!("User: {m}\n"));
        }
        if let Some(e) = &case.expected {
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
        let checked: Checked = agent_run_as(&services, request, target)
            .map_err(|e| (e.to_string(), no_usage()))?
            .into();
        let started = self
            .start(
                caller,
                "RunExperiment",
                checked,
                services,
                Some(plan.record.id.clone()),
            )
            .await
            .map_err(|e| (e.to_string(), no_usage()))?;
        let ran = collect(started.events).await;
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
        case: &Case,
        asked: &Asked<'_>,
    ) -> Verdict {
        let (output, calls, run_id) = (asked.output, asked.calls, asked.run_id);
        let services = self.services();
        let Some(t) = services.tools.get(tool).cloned() else {
            return scorer.verdict(0.0, format!("no tool {tool:?} any more"));
        };
        let args = json!({
            "case": {
                "id": case.id,
                "messages": case.messages,
                "expected": case.expected,
                "labels": case.labels,
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
                return scorer.verdict(
                    0.0,
                    format!("the scorer tool {tool} did not answer in {timeout:?}"),
                );
            }
        };
        match outcome {
            crate::tools::tool::ToolOutcome::Ok(text) => match parse_verdict(&text) {
                Some((score, reason)) => scorer.verdict(score, reason),
                None => scorer.verdict(
                    0.0,
                    format!("the scorer tool's answer is not a score: {:?}", cut(&text)),
                ),
            },
            crate::tools::tool::ToolOutcome::Err(e) => {
                scorer.verdict(0.0, format!("the scorer tool failed: {e}"))
            }
            crate::tools::tool::ToolOutcome::NeedInput { .. } => {
                scorer.verdict(0.0, "the scorer tool asked for a person's input".into())
            }
        }
    }

    /// An experiment of the caller's tenant, by id or name.
    pub async fn get_experiment(&self, caller: &Caller, which: &str) -> Result<pb::Experiment> {
        if which.is_empty() {
            return Err(Error::invalid(
                "experiment",
                "must name an experiment (its id or name)",
            ));
        }
        self.experiments
            .get(&caller.tenant, which)
            .await?
            .ok_or_else(|| Error::NotFound {
                field: "experiment",
                message: format!("no experiment {which:?}"),
            })
    }

    /// A page of the caller's experiments, newest first.
    pub async fn list_experiments(
        &self,
        caller: &Caller,
        page_size: i32,
        page_token: &str,
    ) -> Result<pb::ListExperimentsResponse> {
        let size = match page_size {
            0 => 50,
            n if (1..=500).contains(&n) => n as usize,
            _ => return Err(Error::invalid("page_size", "must be 0 to 500")),
        };
        let offset = if page_token.is_empty() {
            0
        } else {
            page_token
                .parse::<usize>()
                .map_err(|_| Error::invalid("page_token", "not a token a listing gave"))?
        };
        let (experiments, next) = self.experiments.list(&caller.tenant, offset, size).await?;
        Ok(pb::ListExperimentsResponse {
            experiments,
            next_page_token: next.map(|n| n.to_string()).unwrap_or_default(),
        })
    }

    /// Two experiments compared (see `eval::compare`).
    pub async fn compare_experiments(
        &self,
        caller: &Caller,
        r: pb::CompareExperimentsRequest,
    ) -> Result<pb::ExperimentComparison> {
        let alpha = if r.alpha == 0.0 { 0.05 } else { r.alpha };
        if !(alpha > 0.0 && alpha < 1.0) {
            return Err(Error::invalid("alpha", "must be between 0 and 1"));
        }
        let field = |f: &'static str, e: Error| match e {
            Error::NotFound { message, .. } => Error::NotFound { field: f, message },
            Error::InvalidArgument { message, .. } => Error::InvalidArgument {
                field: f.into(),
                message,
            },
            e => e,
        };
        let a = self
            .get_experiment(caller, &r.baseline)
            .await
            .map_err(|e| field("baseline", e))?;
        let b = self
            .get_experiment(caller, &r.candidate)
            .await
            .map_err(|e| field("candidate", e))?;
        for (f, e) in [("baseline", &a), ("candidate", &b)] {
            if e.status == pb::ExperimentStatus::Running as i32 {
                return Err(Error::FailedPrecondition {
                    field: f,
                    message: format!(
                        "experiment {} is still running: compare it once it ends",
                        e.name
                    ),
                });
            }
        }
        Ok(eval::compare::compare(a, b, alpha))
    }

    /// A dataset case made of ended run `run_id` (see SaveCase).
    pub async fn save_case(
        &self,
        caller: &Caller,
        r: pb::SaveCaseRequest,
    ) -> Result<pb::SaveCaseResponse> {
        if r.run_id.is_empty() {
            return Err(Error::invalid("run_id", "must name a run"));
        }
        let view = self.get(caller, &r.run_id).await?;
        if view.status == pb::RunStatus::Running {
            return Err(Error::FailedPrecondition {
                field: "run_id",
                message: format!(
                    "run {} is still running: save it as a case once it ends",
                    r.run_id
                ),
            });
        }
        let (history, stored, kind) = self.history(caller, &r.run_id, u64::MAX).await?;
        if kind == pb::RunKind::Pipeline {
            return Err(Error::FailedPrecondition {
                field: "run_id",
                message: format!(
                    "run {} is a pipeline's: only an agent's or a group's run can be saved as a case",
                    r.run_id
                ),
            });
        }
        use prost::Message as _;
        let request = pb::RunAgentRequest::decode(stored.as_slice()).map_err(|_| {
            Error::FailedPrecondition {
                field: "run_id",
                message: format!(
                    "the request of run {} cannot be read by this version",
                    r.run_id
                ),
            }
        })?;
        let (events, recording) = history.into_events();
        let mut expected_calls = Vec::new();
        for e in &events {
            if let Some(Payload::ToolCallStarted(s)) = &e.payload {
                let args = serde_json::from_str::<Value>(&s.arguments_json).unwrap_or(Value::Null);
                let mut call = json!({"tool": s.tool});
                if let Value::Object(args) = args
                    && !args.is_empty()
                {
                    call["args"] = Value::Object(
                        args.into_iter()
                            .map(|(k, v)| match v {
                                // An object is matched exactly, said so.
                                Value::Object(_) => (k, json!({"exact": v})),
                                v => (k, v),
                            })
                            .collect(),
                    );
                }
                expected_calls.push(call);
            }
        }
        let recorded: Vec<RecordedCall> = if r.inline_recording {
            Rerun::tools(
                r.run_id.clone(),
                Some(crate::run::recording::fork::History {
                    packed: Vec::new(),
                    events,
                    recording,
                }),
                &[],
                false,
                Vec::new(),
            )
            .recorded_calls()
        } else {
            Vec::new()
        };
        let mut case = json!({
            "id": format!("run-{}", r.run_id.trim_start_matches("run-")),
            "agent": request.agent,
            "input": request.input,
            "labels": {"saved_from": r.run_id},
        });
        if !request.run_context_json.is_empty()
            && let Ok(Value::Object(c)) = serde_json::from_str::<Value>(&request.run_context_json)
            && !c.is_empty()
        {
            case["context"] = Value::Object(c);
        }
        if view.status == pb::RunStatus::Completed {
            case["expected"] = Value::String(view.output.clone());
        }
        if !expected_calls.is_empty() {
            // Calls of branches running at once interleave differently run
            // to run: matched in any order (edit to `in_order` to check it).
            case["expected_tools"] = json!({"order": "any_order", "calls": expected_calls});
        }
        case["tools"] = json!("recorded");
        case["recording"] = if r.inline_recording {
            json!({"calls": recorded})
        } else {
            json!({"run_id": r.run_id})
        };
        if view.status != pb::RunStatus::Completed && expected_calls.is_empty() {
            return Err(Error::FailedPrecondition {
                field: "run_id",
                message: format!(
                    "run {} has no answer and made no tool call: nothing to expect of a case",
                    r.run_id
                ),
            });
        }
        Ok(pb::SaveCaseResponse {
            case_json: case.to_string(),
        })
    }
}

/// What a scorer that is asked (a judge, a tool) is given of a try.
struct Asked<'a> {
    /// The answer scored.
    output: &'a str,
    /// The try's tool calls.
    calls: &'a [ActualCall],
    /// The try's (last) run.
    run_id: &'a str,
    /// The call's id for a tool scorer, its own a scorer and an answer.
    call_id: String,
}

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

fn to_pb(v: Verdict) -> pb::Score {
    pb::Score {
        scorer: v.scorer,
        score: v.score,
        passed: v.passed,
        reason: v.reason,
        agreement: v.agreement,
    }
}

/// `s` in at most 2,000 characters.
fn cut_long(s: &str) -> String {
    let mut out: String = s.chars().take(2000).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

/// What a run's stream came to.
struct Ran {
    /// `completed`, `failed`, `cancelled`, or `error` (the stream broke or
    /// ended without the run's end).
    status: &'static str,
    /// A failure's code.
    code: i32,
    output: String,
    error: String,
    usage: pb::Usage,
    calls: Vec<ActualCall>,
    conversation: String,
}

/// Reads a run's events to its end.
async fn collect(mut events: crate::run::events::EventStream) -> Ran {
    let mut ran = Ran {
        status: "error",
        code: 0,
        output: String::new(),
        error: "the run's stream ended without its end".into(),
        usage: pb::Usage::default(),
        calls: Vec::new(),
        conversation: String::new(),
    };
    while let Some(e) = events.next().await {
        let e = match e {
            Ok(e) => e,
            Err(err) => {
                ran.error = err.to_string();
                break;
            }
        };
        match e.payload {
            Some(Payload::RunStarted(s)) => ran.conversation = s.conversation_id,
            Some(Payload::ToolCallStarted(s)) => ran.calls.push(ActualCall {
                tool: s.tool,
                arguments: serde_json::from_str(&s.arguments_json).unwrap_or(Value::Null),
                depth: e.depth,
            }),
            Some(Payload::RunCompleted(c)) => {
                ran.status = "completed";
                ran.output = c.output;
                ran.error.clear();
                ran.usage = c.usage.unwrap_or_default();
                break;
            }
            Some(Payload::RunFailed(f)) => {
                ran.status = "failed";
                ran.code = f.code;
                ran.error = f.message;
                ran.usage = f.usage.unwrap_or_default();
                break;
            }
            Some(Payload::RunCancelled(c)) => {
                ran.status = "cancelled";
                ran.error = if c.reason.is_empty() {
                    "cancelled".into()
                } else {
                    c.reason
                };
                ran.usage = c.usage.unwrap_or_default();
                break;
            }
            _ => {}
        }
    }
    ran
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
