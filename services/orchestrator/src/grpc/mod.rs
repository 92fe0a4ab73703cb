//! The `baton.v1.Orchestrator` gRPC face: each handler converts its request
//! (`TryFrom`, [`crate::wire`]), calls the application core
//! ([`crate::app::Orchestrator`]) and converts the answer back; errors map
//! to `Status` in one place ([`status`]). Who calls — the tenant the
//! authentication interceptor put in the request's extensions, the
//! `traceparent`, and what a call forwarded to a peer carries — becomes a
//! [`Caller`] here.

pub mod outgoing;
pub mod status;

use std::pin::Pin;

use baton_proto::v1::{self as pb, orchestrator_server::Orchestrator as OrchestratorRpc};
use futures::{Stream, StreamExt as _};
use tonic::{Request, Response, Status, metadata::MetadataMap};

use crate::{
    app::{Caller, Orchestrator},
    auth::tenant_of,
    peers::{FORWARDED, Forward},
    request::{AgentRequest, PipelineRequest, RunsQuery},
    run::{events::EventStream, record::ApprovalAnswer},
    wire,
};
pub use status::status;

/// The orchestrator's gRPC face over the core.
#[derive(Clone)]
pub struct OrchestratorService {
    core: Orchestrator,
}

impl OrchestratorService {
    /// The face of `core`.
    pub fn new(core: Orchestrator) -> Self {
        Self { core }
    }
}

impl OrchestratorService {
    /// WatchRun's stream (the generated route's and [`outgoing`]'s).
    async fn watch(&self, request: Request<pb::WatchRunRequest>) -> Result<EventStream, Status> {
        let caller = caller(&request);
        let r = request.into_inner();
        let filter = wire::request::filter(r.filter).map_err(status)?;
        self.core
            .watch(&caller, &r.run_id, r.after_seq, filter)
            .await
            .map_err(status)
    }

    /// RunAgent's stream (the generated route's and [`outgoing`]'s).
    async fn agent(&self, request: Request<pb::RunAgentRequest>) -> Result<EventStream, Status> {
        let caller = caller(&request);
        let started = match AgentRequest::try_from(request.into_inner()) {
            Ok(request) => self.core.start_agent(&caller, request).await,
            Err(e) => Err(self.core.refused("RunAgent", &caller, e)),
        };
        Ok(started.map_err(status)?.events)
    }

    /// RunPipeline's stream (the generated route's and [`outgoing`]'s).
    async fn pipeline(
        &self,
        request: Request<pb::RunPipelineRequest>,
    ) -> Result<EventStream, Status> {
        let caller = caller(&request);
        let started = match PipelineRequest::try_from(request.into_inner()) {
            Ok(request) => self.core.start_pipeline(&caller, request).await,
            Err(e) => Err(self.core.refused("RunPipeline", &caller, e)),
        };
        Ok(started.map_err(status)?.events)
    }

    /// ReplayRun's stream (the generated route's and [`outgoing`]'s).
    async fn replay(&self, request: Request<pb::ReplayRunRequest>) -> Result<EventStream, Status> {
        let caller = caller(&request);
        let started = match wire::request::replay(request.into_inner()) {
            Ok(request) => self.core.replay(&caller, request).await,
            Err(e) => Err(self.core.refused("ReplayRun", &caller, e)),
        };
        Ok(started.map_err(status)?.events)
    }

    /// ForkRun's stream (the generated route's and [`outgoing`]'s).
    async fn fork(&self, request: Request<pb::ForkRunRequest>) -> Result<EventStream, Status> {
        let caller = caller(&request);
        let request = wire::request::fork(request.into_inner());
        let started = match request {
            Ok(request) => self.core.fork(&caller, request).await,
            Err(e) => Err(self.core.refused("ForkRun", &caller, e)),
        };
        Ok(started.map_err(status)?.events)
    }
}

/// The stream a streaming RPC answers with: the run's events, an error as
/// the stream's last item.
pub type EventStatusStream = Pin<Box<dyn Stream<Item = Result<pb::RunEvent, Status>> + Send>>;

fn events(stream: EventStream) -> EventStatusStream {
    Box::pin(stream.map(|item| item.map_err(status)))
}

/// Who calls (see the module docs).
fn caller<T>(request: &Request<T>) -> Caller {
    let md = request.metadata();
    Caller {
        tenant: tenant_of(request.extensions()).to_owned(),
        trace: baton_common::otel::extract(md),
        forward: forward(md),
    }
}

fn forward(md: &MetadataMap) -> Forward {
    let header = |name: &str| {
        md.get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    Forward {
        forwarded: md.contains_key(FORWARDED),
        traceparent: header("traceparent"),
        authorization: header("authorization"),
        // Only a peer's call names the answer's token.
        answer_token: header(crate::peers::ANSWER_TOKEN).filter(|_| md.contains_key(FORWARDED)),
    }
}

type Answer<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl OrchestratorRpc for OrchestratorService {
    type RunAgentStream = EventStatusStream;

    async fn run_agent(
        &self,
        request: Request<pb::RunAgentRequest>,
    ) -> Answer<Self::RunAgentStream> {
        Ok(Response::new(events(self.agent(request).await?)))
    }

    type RunPipelineStream = EventStatusStream;

    async fn run_pipeline(
        &self,
        request: Request<pb::RunPipelineRequest>,
    ) -> Answer<Self::RunPipelineStream> {
        Ok(Response::new(events(self.pipeline(request).await?)))
    }

    async fn resolve_approval(
        &self,
        request: Request<pb::ResolveApprovalRequest>,
    ) -> Answer<pb::ResolveApprovalResponse> {
        let caller = caller(&request);
        let r = request.into_inner();
        let answer = ApprovalAnswer {
            approved: r.approved,
            reason: r.reason,
        };
        self.core
            .resolve_approval(&caller, &r.run_id, &r.approval_id, answer)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::ResolveApprovalResponse {}))
    }

    async fn submit_input(
        &self,
        request: Request<pb::SubmitInputRequest>,
    ) -> Answer<pb::SubmitInputResponse> {
        let caller = caller(&request);
        let r = request.into_inner();
        self.core
            .submit_input(&caller, &r.run_id, &r.input_id, r.input)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::SubmitInputResponse {}))
    }

    async fn cancel_run(
        &self,
        request: Request<pb::CancelRunRequest>,
    ) -> Answer<pb::CancelRunResponse> {
        let caller = caller(&request);
        let r = request.into_inner();
        let run_status = self
            .core
            .cancel(&caller, &r.run_id, &r.reason)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::CancelRunResponse {
            status: run_status as i32,
        }))
    }

    type WatchRunStream = EventStatusStream;

    async fn watch_run(
        &self,
        request: Request<pb::WatchRunRequest>,
    ) -> Answer<Self::WatchRunStream> {
        Ok(Response::new(events(self.watch(request).await?)))
    }

    type RunExperimentStream =
        Pin<Box<dyn Stream<Item = Result<pb::ExperimentEvent, Status>> + Send + 'static>>;

    async fn run_experiment(
        &self,
        request: Request<pb::RunExperimentRequest>,
    ) -> Answer<Self::RunExperimentStream> {
        let caller = caller(&request);
        let events = self
            .core
            .run_experiment(&caller, request.into_inner())
            .await
            .map_err(status)?;
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::UnboundedReceiverStream::new(events).map(Ok),
        )))
    }

    async fn get_experiment(
        &self,
        request: Request<pb::GetExperimentRequest>,
    ) -> Answer<pb::Experiment> {
        let caller = caller(&request);
        let e = self
            .core
            .get_experiment(&caller, &request.get_ref().experiment)
            .await
            .map_err(status)?;
        Ok(Response::new(e))
    }

    async fn cancel_experiment(
        &self,
        request: Request<pb::CancelExperimentRequest>,
    ) -> Answer<pb::Experiment> {
        let caller = caller(&request);
        let e = self
            .core
            .cancel_experiment(&caller, &request.get_ref().experiment)
            .await
            .map_err(status)?;
        Ok(Response::new(e))
    }

    async fn create_webhook(
        &self,
        request: Request<pb::CreateWebhookRequest>,
    ) -> Answer<pb::CreateWebhookResponse> {
        let caller = caller(&request);
        let made = self
            .core
            .create_webhook(&caller, request.into_inner())
            .await
            .map_err(status)?;
        Ok(Response::new(made))
    }

    async fn list_webhooks(
        &self,
        request: Request<pb::ListWebhooksRequest>,
    ) -> Answer<pb::ListWebhooksResponse> {
        let caller = caller(&request);
        let list = self.core.list_webhooks(&caller).await.map_err(status)?;
        Ok(Response::new(list))
    }

    async fn get_webhook(&self, request: Request<pb::GetWebhookRequest>) -> Answer<pb::Webhook> {
        let caller = caller(&request);
        let w = self
            .core
            .get_webhook(&caller, &request.get_ref().webhook_id)
            .await
            .map_err(status)?;
        Ok(Response::new(w))
    }

    async fn delete_webhook(
        &self,
        request: Request<pb::DeleteWebhookRequest>,
    ) -> Answer<pb::DeleteWebhookResponse> {
        let caller = caller(&request);
        self.core
            .delete_webhook(&caller, &request.get_ref().webhook_id)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::DeleteWebhookResponse {}))
    }

    async fn rotate_webhook_secret(
        &self,
        request: Request<pb::RotateWebhookSecretRequest>,
    ) -> Answer<pb::RotateWebhookSecretResponse> {
        let caller = caller(&request);
        let r = request.get_ref();
        let overlap =
            crate::wire::duration("previous_valid_for", r.previous_valid_for).map_err(status)?;
        let rotated = self
            .core
            .rotate_webhook_secret(&caller, &r.webhook_id, overlap)
            .await
            .map_err(status)?;
        Ok(Response::new(rotated))
    }

    async fn list_dead_letters(
        &self,
        request: Request<pb::ListDeadLettersRequest>,
    ) -> Answer<pb::ListDeadLettersResponse> {
        let caller = caller(&request);
        let list = self
            .core
            .list_dead_letters(&caller, request.get_ref().page_size)
            .await
            .map_err(status)?;
        Ok(Response::new(list))
    }

    async fn redeliver_dead_letter(
        &self,
        request: Request<pb::RedeliverDeadLetterRequest>,
    ) -> Answer<pb::RedeliverDeadLetterResponse> {
        let caller = caller(&request);
        self.core
            .redeliver_dead_letter(&caller, &request.get_ref().delivery_id)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::RedeliverDeadLetterResponse {}))
    }

    async fn create_schedule(
        &self,
        request: Request<pb::CreateScheduleRequest>,
    ) -> Answer<pb::Schedule> {
        let caller = caller(&request);
        let made = self
            .core
            .create_schedule(&caller, request.into_inner())
            .await
            .map_err(status)?;
        Ok(Response::new(made))
    }

    async fn get_schedule(&self, request: Request<pb::GetScheduleRequest>) -> Answer<pb::Schedule> {
        let caller = caller(&request);
        let s = self
            .core
            .get_schedule(&caller, &request.get_ref().schedule_id)
            .await
            .map_err(status)?;
        Ok(Response::new(s))
    }

    async fn list_schedules(
        &self,
        request: Request<pb::ListSchedulesRequest>,
    ) -> Answer<pb::ListSchedulesResponse> {
        let caller = caller(&request);
        let list = self.core.list_schedules(&caller).await.map_err(status)?;
        Ok(Response::new(list))
    }

    async fn pause_schedule(
        &self,
        request: Request<pb::PauseScheduleRequest>,
    ) -> Answer<pb::Schedule> {
        let caller = caller(&request);
        let s = self
            .core
            .pause_schedule(&caller, &request.get_ref().schedule_id, true)
            .await
            .map_err(status)?;
        Ok(Response::new(s))
    }

    async fn resume_schedule(
        &self,
        request: Request<pb::ResumeScheduleRequest>,
    ) -> Answer<pb::Schedule> {
        let caller = caller(&request);
        let s = self
            .core
            .pause_schedule(&caller, &request.get_ref().schedule_id, false)
            .await
            .map_err(status)?;
        Ok(Response::new(s))
    }

    async fn delete_schedule(
        &self,
        request: Request<pb::DeleteScheduleRequest>,
    ) -> Answer<pb::DeleteScheduleResponse> {
        let caller = caller(&request);
        self.core
            .delete_schedule(&caller, &request.get_ref().schedule_id)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::DeleteScheduleResponse {}))
    }

    async fn list_experiments(
        &self,
        request: Request<pb::ListExperimentsRequest>,
    ) -> Answer<pb::ListExperimentsResponse> {
        let caller = caller(&request);
        let r = request.get_ref();
        let page = self
            .core
            .list_experiments(&caller, r.page_size, &r.page_token)
            .await
            .map_err(status)?;
        Ok(Response::new(page))
    }

    async fn compare_experiments(
        &self,
        request: Request<pb::CompareExperimentsRequest>,
    ) -> Answer<pb::ExperimentComparison> {
        let caller = caller(&request);
        let c = self
            .core
            .compare_experiments(&caller, request.into_inner())
            .await
            .map_err(status)?;
        Ok(Response::new(c))
    }

    async fn save_case(
        &self,
        request: Request<pb::SaveCaseRequest>,
    ) -> Answer<pb::SaveCaseResponse> {
        let caller = caller(&request);
        let c = self
            .core
            .save_case(&caller, request.into_inner())
            .await
            .map_err(status)?;
        Ok(Response::new(c))
    }

    async fn get_run(&self, request: Request<pb::GetRunRequest>) -> Answer<pb::GetRunResponse> {
        let caller = caller(&request);
        let run = self
            .core
            .get(&caller, &request.get_ref().run_id)
            .await
            .map_err(status)?;
        Ok(Response::new(run.into()))
    }

    async fn list_runs(
        &self,
        request: Request<pb::ListRunsRequest>,
    ) -> Answer<pb::ListRunsResponse> {
        let caller = caller(&request);
        let query = RunsQuery::try_from(request.get_ref()).map_err(status)?;
        let page = self.core.list(&caller, &query).await.map_err(status)?;
        Ok(Response::new(page.into()))
    }

    async fn get_conversation(
        &self,
        request: Request<pb::GetConversationRequest>,
    ) -> Answer<pb::Conversation> {
        let caller = caller(&request);
        let c = self
            .core
            .get_conversation(&caller, request.get_ref())
            .await
            .map_err(status)?;
        Ok(Response::new(c))
    }

    async fn list_conversations(
        &self,
        request: Request<pb::ListConversationsRequest>,
    ) -> Answer<pb::ListConversationsResponse> {
        let caller = caller(&request);
        let page = self
            .core
            .list_conversations(&caller, request.get_ref())
            .await
            .map_err(status)?;
        Ok(Response::new(page))
    }

    async fn update_conversation(
        &self,
        request: Request<pb::UpdateConversationRequest>,
    ) -> Answer<pb::Conversation> {
        let caller = caller(&request);
        let c = self
            .core
            .update_conversation(&caller, request.into_inner())
            .await
            .map_err(status)?;
        Ok(Response::new(c))
    }

    async fn delete_conversation(
        &self,
        request: Request<pb::DeleteConversationRequest>,
    ) -> Answer<pb::DeleteConversationResponse> {
        let caller = caller(&request);
        let deleted = self
            .core
            .delete_conversation(&caller, &request.get_ref().conversation_id)
            .await
            .map_err(status)?;
        Ok(Response::new(deleted))
    }

    type ForkRunStream = EventStatusStream;

    async fn fork_run(&self, request: Request<pb::ForkRunRequest>) -> Answer<Self::ForkRunStream> {
        Ok(Response::new(events(self.fork(request).await?)))
    }

    type ReplayRunStream = EventStatusStream;

    async fn replay_run(
        &self,
        request: Request<pb::ReplayRunRequest>,
    ) -> Answer<Self::ReplayRunStream> {
        Ok(Response::new(events(self.replay(request).await?)))
    }

    async fn list_agents(
        &self,
        _: Request<pb::ListAgentsRequest>,
    ) -> Answer<pb::ListAgentsResponse> {
        Ok(Response::new(wire::answer::agents(&self.core.catalog())))
    }
}
