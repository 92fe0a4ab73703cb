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

mod cancel;
mod plan;
mod ran;
mod records;
pub(super) mod scorers;

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use baton_proto::v1::{self as pb};
use futures::{StreamExt as _, stream::FuturesUnordered};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::{
    app::{
        orchestrator::{Caller, Orchestrator},
        start::Checked,
    },
    error::Result,
    eval::{
        self,
        dataset::{Case, ToolsMode},
        score::{Verdict, cut},
    },
    request::{
        AgentRequest, PipelineRequest,
        validate::{agent_run, pipeline_run},
    },
    run::recording::rerun::Rerun,
};

use plan::Plan;
use ran::collect;
use scorers::{Asked, Subject};

/// How often a running experiment's record is written when cases ended.
pub const SAVE_EVERY: Duration = Duration::from_secs(2);
/// How often it is written when none did (see
/// `experiment_store::ABANDONED_AFTER`).
pub const WRITTEN_EVERY: Duration = Duration::from_secs(10);

/// What a case's run is asked: an agent's run, or a pipeline's.
enum CaseRequest {
    Agent(pb::RunAgentRequest),
    Pipeline(pb::RunPipelineRequest),
}

/// Why a try did not run: the experiment's budget.
const BUDGET_SPENT: &str = "the experiment's budget is spent";
/// Why a try did not end as its agent would have: the experiment's budget
/// refused one of its model calls.
const BUDGET_REFUSED: &str = "the experiment's budget refused a model call";

/// Where an experiment's events go: unbounded, so a slow reader never
/// holds its runs back (there are at most its cases' results, and two).
type Events = mpsc::UnboundedSender<pb::ExperimentEvent>;

/// What one try (one run of a case, or its runs for several messages)
/// came to.
struct Tried {
    case: usize,
    try_: pb::CaseTry,
    /// Why it could not run at all.
    error: Option<String>,
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

    /// Runs a checked experiment to its end, until `tx`'s receiver goes,
    /// or until this replica shuts down.
    async fn drive(self, caller: Caller, plan: Plan, tx: Events) {
        let tenant = caller.tenant.clone();
        let started = Instant::now();
        let mut record = plan.record.clone();
        // Whether a write named it (the first that succeeds does).
        let named = std::sync::atomic::AtomicBool::new(false);
        // CancelExperiment stops it, here or from another replica: it is
        // entered before any record says RUNNING, and leaves after the
        // record says it ended.
        let running = self.experiments_here.enter(&tenant, &record.id);
        self.save(&tenant, &mut record, &named).await;
        let _ = tx.send(pb::ExperimentEvent {
            event: Some(pb::experiment_event::Event::Started(record.clone())),
        });
        let done: Mutex<Vec<Option<pb::CaseResult>>> =
            Mutex::new(vec![None; plan.dataset.cases.len()]);
        let usage = Mutex::new(pb::Usage::default());
        let plan = Arc::new(plan);
        let asked = self.experiments.cancel_asked(&tenant, &record.id);
        let work = self.run_cases(&caller, &plan, &done, &usage, &tx, &record, &named);
        let completed = tokio::select! {
            // Done wins over a caller gone at the same moment.
            biased;
            () = work => true,
            () = tx.closed() => false,
            () = running.stop.cancelled() => false,
            () = asked => false,
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
        if !self.save(&tenant, &mut record, &named).await {
            tokio::time::sleep(Duration::from_millis(500)).await;
            self.save(&tenant, &mut record, &named).await;
        }
        drop(running);
        tracing::info!(experiment = %record.id, cases = record.cases.len(), completed, "experiment ended");
        let _ = tx.send(pb::ExperimentEvent {
            event: Some(pb::experiment_event::Event::Ended(record)),
        });
    }

    /// Writes `record`, stamped with the time (naming it, until a write
    /// has: `named`); whether it was written.
    async fn save(
        &self,
        tenant: &str,
        record: &mut pb::Experiment,
        named: &std::sync::atomic::AtomicBool,
    ) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        record.updated_at = Some(std::time::SystemTime::now().into());
        match self
            .experiments
            .put(tenant, record, !named.load(SeqCst))
            .await
        {
            Ok(()) => {
                named.store(true, SeqCst);
                true
            }
            Err(e) => {
                tracing::warn!(experiment = %record.id, error = %e, "the experiment's record could not be written");
                false
            }
        }
    }

    /// Runs every try, scoring and telling each case as its last try ends;
    /// the record is written every [`SAVE_EVERY`] meanwhile when a case
    /// ended, and every [`WRITTEN_EVERY`] anyway (a record not written for
    /// long reads as ABANDONED).
    #[allow(clippy::too_many_arguments)]
    async fn run_cases(
        &self,
        caller: &Caller,
        plan: &Arc<Plan>,
        done: &Mutex<Vec<Option<pb::CaseResult>>>,
        usage: &Mutex<pb::Usage>,
        tx: &Events,
        record: &pb::Experiment,
        named: &std::sync::atomic::AtomicBool,
    ) {
        let started = Instant::now();
        let mut pending: Vec<Vec<Tried>> =
            (0..plan.dataset.cases.len()).map(|_| Vec::new()).collect();
        let mut queue =
            (0..plan.dataset.cases.len()).flat_map(|c| (0..plan.repeat).map(move |k| (c, k)));
        let mut running = FuturesUnordered::new();
        let mut next_save = tokio::time::Instant::now() + SAVE_EVERY;
        let mut written = Instant::now();
        let mut dirty = false;
        loop {
            while running.len() < plan.concurrency {
                let Some((c, _)) = queue.next() else { break };
                running.push(self.run_try(caller, plan, c));
            }
            if running.is_empty() {
                break;
            }
            let tried = tokio::select! {
                Some(tried) = running.next() => tried,
                () = tokio::time::sleep_until(next_save) => {
                    next_save = tokio::time::Instant::now() + SAVE_EVERY;
                    if dirty || written.elapsed() >= WRITTEN_EVERY {
                        let mut r = record.clone();
                        r.cases = done.lock().unwrap_or_else(|p| p.into_inner()).iter().flatten().cloned().collect();
                        r.totals = Some(eval::totals(&r.cases, started.elapsed()));
                        r.usage = Some(usage.lock().unwrap_or_else(|p| p.into_inner()).clone());
                        if self.save(&caller.tenant, &mut r, named).await {
                            written = Instant::now();
                            dirty = false;
                        }
                    }
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
                    target: plan.target_of(c),
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
                dirty = true;
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
    async fn run_try(&self, caller: &Caller, plan: &Plan, c: usize) -> Tried {
        let case = &plan.dataset.cases[c];
        let started = Instant::now();
        // A try that could not run, or whose run did not end here (its
        // replica shut down, its lease lapsed, its stream broke): an error,
        // not a failure of the agent.
        let errored = |error: String, usage: pb::Usage| Tried {
            case: c,
            try_: pb::CaseTry {
                usage: Some(usage),
                ..Default::default()
            },
            error: Some(error),
        };
        let target = if case.agent.is_empty() {
            plan.target.clone()
        } else {
            case.agent.clone()
        };
        let run_context_json = if case.context.is_empty() {
            String::new()
        } else {
            Value::Object(case.context.clone()).to_string()
        };
        let mut conversation = String::new();
        let mut calls = Vec::new();
        let mut outputs = Vec::new();
        let mut usage = pb::Usage::default();
        let mut run_id = String::new();
        let mut status = "completed";
        let mut error = String::new();
        for (i, message) in case.messages.iter().enumerate() {
            // Every run draws from the experiment's one budget (see
            // `start_case_run`); once it is spent no run starts.
            if plan.budget.as_ref().is_some_and(|b| b.spent_out()) {
                return errored(BUDGET_SPENT.into(), usage);
            }
            let request = match &plan.pipelines[c] {
                // A pipeline: the case's input in its `input` slot.
                Some(pipeline) => {
                    let mut request = pb::RunPipelineRequest::clone(pipeline);
                    request
                        .initial_slots
                        .insert(plan::CASE_INPUT_SLOT.to_owned(), message.clone());
                    request.run_context_json = run_context_json.clone();
                    request.default_model = plan.default_model.clone();
                    request.approval_mode = pb::ApprovalMode::AutoApprove as i32;
                    CaseRequest::Pipeline(request)
                }
                None => CaseRequest::Agent(pb::RunAgentRequest {
                    agent: target.clone(),
                    input: message.clone(),
                    run_context_json: run_context_json.clone(),
                    default_model: plan.default_model.clone(),
                    approval_mode: pb::ApprovalMode::AutoApprove as i32,
                    new_conversation: case.messages.len() > 1 && i == 0,
                    conversation_id: conversation.clone(),
                    ..Default::default()
                }),
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
            // The experiment's budget refused one of its model calls (at
            // any depth, whatever the agent did then: failed, finished
            // early, or a pipeline step failed): not the agent's doing.
            if let Some(budget) = &plan.budget {
                let name = budget.name();
                if let Some((_, message)) = ran.exhausted.iter().find(|(b, _)| *b == name) {
                    return errored(format!("{BUDGET_REFUSED}: {message}"), usage);
                }
            }
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
                        let subject = Subject {
                            experiment: Some(&plan.record.id),
                            case_id: &case.id,
                            messages: &case.messages,
                            expected: case.expected.as_ref(),
                            labels: &case.labels,
                            budget: plan.budget.as_ref(),
                        };
                        let (v, u) = self.ask_scorer(caller, &subject, scorer, &asked).await;
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
        // A scorer that could not say (its judge did not answer): the try
        // is an error, not the agent's failure.
        if let Some(v) = scores.iter().find(|v| v.errored) {
            return errored(
                format!("scorer {} could not score: {}", v.scorer, v.reason),
                usage,
            );
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
        request: CaseRequest,
    ) -> Result<super::start::Started> {
        let services = self.services();
        let mut checked: Checked = match request {
            CaseRequest::Agent(r) => agent_run(&services, AgentRequest::try_from(r)?)?.into(),
            CaseRequest::Pipeline(r) => {
                pipeline_run(&services, PipelineRequest::try_from(r)?)?.into()
            }
        };
        checked.options.rerun = self.case_tools(caller, case).await?;
        checked.options.shared_budget = plan.budget.clone();
        self.start(
            caller,
            "RunExperiment",
            checked,
            services,
            crate::app::start::Origin::experiment(plan.record.id.clone()),
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
