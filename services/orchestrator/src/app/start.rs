//! Starting runs: a request checked once (`request::validate`), its run
//! built, admitted by the tenant's quota, recorded where runs are kept, and
//! its body started beside its sequencer. [`Body`] is the one place a run's
//! body is built, for a new run and for a resumed one alike.

use std::{future::Future, sync::Arc};

use baton_common::ids::TraceId;
use baton_proto::v1 as pb;
use futures::future::BoxFuture;
use opentelemetry::{
    Context, KeyValue,
    trace::{Span as _, SpanBuilder, SpanKind, TraceContextExt, Tracer},
};

use super::orchestrator::{Caller, Orchestrator, audit, audited_id};
use crate::{
    agent::{self, frame::CallFrame},
    error::{Error, Result},
    model::ChatMessage,
    pipeline::{self, Plan},
    request::{
        AgentRequest, PipelineRequest, StoredRequest,
        validate::{AgentRun, PipelineRun, agent_run, pipeline_run},
    },
    run::{
        events::EventStream,
        launch::{self, Prepared},
        log::Recorded,
        state::{Run, RunOptions},
        target::Resolved,
    },
};

/// A run started: its ids and its caller's stream of events.
pub struct Started {
    /// The run.
    pub run_id: String,
    /// Its trace.
    pub trace_id: String,
    /// Its events, from the first; with `detach`, the run goes on when
    /// this is dropped.
    pub events: EventStream,
}

/// Where a run comes from, beyond its caller: the experiment it is a case
/// of, or the schedule whose tick starts it (with the id the tick chose
/// for it).
#[derive(Default)]
pub(crate) struct Origin {
    pub(crate) experiment: Option<String>,
    pub(crate) schedule: Option<(String, i64)>,
    pub(crate) run_id: Option<String>,
}

impl Origin {
    /// A case of `experiment`.
    pub(crate) fn experiment(experiment: String) -> Self {
        Self {
            experiment: Some(experiment),
            ..Self::default()
        }
    }
}

/// What a run runs, checked: an agent (or group) resolved with its model,
/// or a planned pipeline.
pub(super) enum Body {
    Agent {
        target: Resolved,
        history: Vec<ChatMessage>,
        input: String,
        labels: std::collections::BTreeMap<String, String>,
    },
    Pipeline {
        plan: Plan,
        initial: Vec<(String, String)>,
        keep_context: bool,
    },
}

/// A checked run: its body, options and the request the run store keeps.
pub(super) struct Checked {
    pub(super) body: Body,
    pub(super) options: RunOptions,
    pub(super) stored: StoredRequest,
    /// The conversation an agent run continues or starts.
    pub(super) conversation: Option<crate::request::ConversationAsk>,
}

impl Checked {
    /// A run in a conversation (resumed, woken, forked or replayed) begins
    /// with the group member its original began with, `link`'s.
    pub(super) fn begin_with(
        &mut self,
        services: &Arc<crate::run::shared::Shared>,
        link: Option<&crate::conversation::link::Link>,
    ) {
        if let Some(link) = link {
            self.body
                .start_at(services, &self.options.default_model, &link.agent);
        }
    }
}

impl From<AgentRun> for Checked {
    fn from(r: AgentRun) -> Self {
        Self {
            body: Body::Agent {
                target: r.target,
                history: r.history,
                input: r.input,
                labels: r.labels,
            },
            options: r.options,
            stored: r.stored,
            conversation: r.conversation,
        }
    }
}

impl From<PipelineRun> for Checked {
    fn from(r: PipelineRun) -> Self {
        Self {
            body: Body::Pipeline {
                plan: r.plan,
                initial: r.initial,
                keep_context: r.keep_context,
            },
            options: r.options,
            stored: r.stored,
            conversation: None,
        }
    }
}

impl Body {
    /// What the run is of, for its record and span.
    pub(super) fn kind_and_target(&self) -> (pb::RunKind, String) {
        match self {
            Body::Agent { target, .. } => (pb::RunKind::Agent, target.target.clone()),
            Body::Pipeline { plan, .. } => (pb::RunKind::Pipeline, plan.target().to_owned()),
        }
    }

    /// Makes group member `agent` the one that runs first (a run in a
    /// conversation, resumed: the member it began with); nothing when the
    /// body is not a group's or `agent` is not of it.
    pub(super) fn start_at(
        &mut self,
        services: &crate::run::shared::Shared,
        default_model: &str,
        agent: &str,
    ) {
        let Body::Agent { target, .. } = self else {
            return;
        };
        let Some(members) = target.group_members.clone() else {
            return;
        };
        if agent.is_empty() || agent == target.agent.name || !members.iter().any(|m| m == agent) {
            return;
        }
        if let Ok(mut member) =
            crate::run::target::resolve(&services.catalog, &services.models, default_model, agent)
        {
            member.target = target.target.clone();
            member.group_members = Some(members);
            *target = member;
        }
    }

    /// The future that runs the body of `run`; it cannot fail to build,
    /// since the request was checked and its targets resolved.
    pub(super) fn future(self, run: &Arc<Run>) -> BoxFuture<'static, ()> {
        let run = run.clone();
        match self {
            Body::Agent {
                target,
                history,
                input,
                labels,
            } => {
                let name = target.target.clone();
                let root = CallFrame::root(&run, target, history, input);
                Box::pin(agent::body(run, root, name, labels))
            }
            Body::Pipeline {
                plan,
                initial,
                keep_context,
            } => Box::pin(pipeline::executor::body(
                run,
                plan,
                initial,
                keep_context,
                agent::run_step_boxed,
            )),
        }
    }
}

impl Orchestrator {
    /// Starts an agent run for `caller` (RunAgent).
    pub async fn start_agent(&self, caller: &Caller, request: AgentRequest) -> Result<Started> {
        // One catalog from the check to the launch, even if the agents file
        // is reloaded meanwhile.
        let services = self.services();
        let started = match self.check_running() {
            Ok(()) => match agent_run(&services, request) {
                Ok(run) => {
                    self.start(caller, "RunAgent", run.into(), services, Origin::default())
                        .await
                }
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        audit_started("RunAgent", caller, "", &started);
        started
    }

    /// Starts a pipeline run for `caller` (RunPipeline).
    pub async fn start_pipeline(
        &self,
        caller: &Caller,
        request: PipelineRequest,
    ) -> Result<Started> {
        let services = self.services();
        let started = match self.check_running() {
            Ok(()) => match pipeline_run(&services, request) {
                Ok(run) => {
                    self.start(
                        caller,
                        "RunPipeline",
                        run.into(),
                        services,
                        Origin::default(),
                    )
                    .await
                }
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        audit_started("RunPipeline", caller, "", &started);
        started
    }

    /// Audits a start a face refused before it reached the core (its
    /// request did not convert) and gives back the error.
    pub fn refused(&self, method: &'static str, caller: &Caller, e: Error) -> Error {
        let refused: Result<()> = Err(e);
        audit(method, caller, "", "", &refused);
        match refused {
            Err(e) => e,
            Ok(()) => unreachable!("a refusal is an error"),
        }
    }

    /// Builds, admits, records and launches a run checked against
    /// `services`, from `origin`.
    pub(super) async fn start(
        &self,
        caller: &Caller,
        method: &'static str,
        run: Checked,
        services: Arc<crate::run::shared::Shared>,
        origin: Origin,
    ) -> Result<Started> {
        let Checked {
            mut body,
            mut options,
            mut stored,
            conversation,
        } = run;
        let own_hooks = self
            .webhooks
            .check_own(std::mem::take(&mut options.webhooks))?;
        let (kind, target) = body.kind_and_target();
        let span = self.run_span(&caller.trace, method, kind, &target);
        let prepared = launch::prepare(
            &services,
            span,
            kind,
            target,
            caller.tenant.clone(),
            options,
            &self.runs_stop,
            origin.run_id,
        );
        if let Some(experiment) = origin.experiment {
            let _ = prepared.record.experiment.set(experiment);
        }
        if let Some(schedule) = origin.schedule {
            let _ = prepared.record.schedule.set(schedule);
        }
        self.webhooks.attach(&prepared.record, own_hooks);
        let entered = match conversation {
            Some(ask) => Some(
                self.enter_conversation(&services, &prepared, &mut body, &mut stored, ask)
                    .await?,
            ),
            None => None,
        };
        let hold = (prepared.run.limits.run_timeout + std::time::Duration::from_secs(60))
            .as_millis() as i64;
        let future = body.future(&prepared.run);
        let started = self.launch_with(prepared, stored, None, future).await;
        match (started, entered) {
            (Ok(started), Some(turn)) => {
                // Registered: a delete of the conversation from now on
                // finds the run. One just before it did not: the run is
                // stopped and forgotten, and nothing of it is kept.
                let deleted = matches!(turn.hold(hold).await, Ok(false));
                let id = turn.key().id.clone();
                turn.keep();
                if deleted {
                    self.forget_run(caller, &started.run_id).await?;
                    return Err(crate::conversation::not_found(&id));
                }
                Ok(started)
            }
            // The run of this id exists (a schedule's tick started twice):
            // the turn of a conversation it was in is that run's, kept; a
            // conversation this start made is not its, given back.
            (
                Err(
                    e @ Error::AlreadyExists {
                        field: "run_id", ..
                    },
                ),
                Some(turn),
            ) if !turn.created() => {
                turn.keep();
                Err(e)
            }
            (Err(e), Some(turn)) => {
                turn.give_back().await;
                Err(e)
            }
            (started, None) => started,
        }
    }

    /// Records a prepared run where runs are kept (with its request, when
    /// runs are durable; a fork's replayed events and journal, `fork`,
    /// too), then starts it.
    pub(super) async fn launch_with(
        &self,
        prepared: Prepared,
        stored: StoredRequest,
        fork: Option<&(Vec<pb::RunEvent>, Vec<Recorded>)>,
        body: impl Future<Output = ()> + Send + 'static,
    ) -> Result<Started> {
        let record = prepared.record.clone();
        // Forks and replays: the tenant's webhooks (a new run has its
        // own already).
        if record.hooks.get().is_none() {
            self.webhooks.attach(&record, Vec::new());
        }
        if prepared.run.services.durable.is_none() {
            // Memory mode: forks of the run start from its request.
            record.keep_request(stored.0.clone());
        }
        let deadline = launch::now_ms() + prepared.run.limits.run_timeout.as_millis() as i64;
        let services = prepared.run.services.clone();
        let quotas = &services.quotas;
        quotas
            .admit(&record.tenant, &record.run_id, deadline)
            .await?;
        // Scored live as it completes, when its agent says so.
        let to_score = self.to_score(&record, &stored.0);
        let registered = match launch::register(&services, &prepared, stored.0).await {
            Ok(Some(journal)) => match fork {
                Some((events, recording)) => {
                    match launch::write_fork(&journal, &record, events, recording).await {
                        Ok(()) => Ok(Some(journal)),
                        // Given up, unless its start was recorded after all
                        // (a reply lost after Redis applied it): then it
                        // runs, here, as started. Given up, a claim ends it
                        // failed; never both.
                        Err(e) => match journal
                            .runs
                            .abandon_start(&record.run_id, journal.epoch)
                            .await
                        {
                            Ok(crate::run::durable::Abandon::Started) => Ok(Some(journal)),
                            Ok(_) => Err(e),
                            Err(unknown) => Err(Error::Unavailable(format!(
                                "fork {} may have started (its start could not be checked: {unknown}); follow it with WatchRun",
                                record.run_id
                            ))),
                        },
                    }
                }
                None => Ok(Some(journal)),
            },
            other => other,
        };
        let journal = match registered {
            Ok(journal) => journal,
            Err(e) => {
                // A run of this id exists (a schedule's tick started it on
                // a replica that died before recording it): it counts in
                // the tenant's quota where it runs, not here.
                let exists = matches!(
                    e,
                    Error::AlreadyExists {
                        field: "run_id",
                        ..
                    }
                );
                quotas
                    .stopped(&record.tenant, &record.run_id, !exists)
                    .await;
                return Err(e);
            }
        };
        let events = launch::launch(prepared, journal, &self.runs, &self.tasks, body);
        if let Some(what) = to_score {
            self.score_when_ended(record.clone(), what);
        }
        Ok(Started {
            run_id: record.run_id.clone(),
            trace_id: record.trace_id.to_string(),
            events,
        })
    }

    /// A run's span, a child of the caller's trace when it has one; the
    /// run's trace id is that span's.
    pub(super) fn run_span(
        &self,
        parent: &Context,
        method: &'static str,
        kind: pb::RunKind,
        target: &str,
    ) -> (Context, TraceId) {
        let span = self.services().tracing.tracer().build_with_context(
            SpanBuilder::from_name(format!("run {target}"))
                .with_kind(SpanKind::Server)
                .with_attributes([
                    KeyValue::new("rpc.system", "grpc"),
                    KeyValue::new("rpc.service", "baton.v1.Orchestrator"),
                    KeyValue::new("rpc.method", method),
                    KeyValue::new("baton.run.kind", kind.as_str_name()),
                    KeyValue::new("baton.run.target", target.to_owned()),
                ]),
            parent,
        );
        let trace = span.span_context().trace_id().to_string();
        let cx = parent.with_span(span);
        // An OTel trace id is 32 lowercase hex and never all zeros, which is
        // what a TraceId is.
        let trace_id = TraceId::parse(&trace).unwrap_or_else(|_| TraceId::random());
        (cx, trace_id)
    }
}

/// Records an operation that starts a run in the audit log: started (with
/// the new run's ids) or refused (with the code, and for ForkRun and
/// ReplayRun the id of the run it was to start from, `origin`, when it is
/// well-formed; RunAgent and RunPipeline pass "").
pub(super) fn audit_started(
    method: &'static str,
    caller: &Caller,
    origin: &str,
    started: &Result<Started>,
) {
    let (run_id, trace_id) = match started {
        Ok(s) => (s.run_id.as_str(), s.trace_id.as_str()),
        Err(_) => (audited_id(origin), ""),
    };
    audit(method, caller, run_id, trace_id, started);
}
