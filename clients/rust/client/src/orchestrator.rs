//! The orchestrator client.

use futures::{Stream, StreamExt};
use tonic::transport::Channel;

use crate::{Error, pb, pb::orchestrator_client::OrchestratorClient as Raw};

/// A client of `baton.v1.Orchestrator`. Cheap to clone.
#[derive(Debug, Clone)]
pub struct OrchestratorClient {
    inner: Raw<Channel>,
    /// `Bearer <key>`, sent with every call when set.
    authorization: Option<tonic::metadata::AsciiMetadataValue>,
}

/// A run's event stream. Dropping it cancels the run.
pub type Events = std::pin::Pin<Box<dyn Stream<Item = Result<pb::RunEvent, Error>> + Send>>;

impl OrchestratorClient {
    /// Connects to `endpoint` (`http://host:port`).
    pub async fn connect(endpoint: impl Into<String>) -> Result<Self, Error> {
        Ok(Self::new(crate::channel(endpoint).await?))
    }

    /// A client over an existing channel.
    pub fn new(channel: Channel) -> Self {
        Self {
            inner: Raw::new(channel).max_decoding_message_size(64 << 20),
            authorization: None,
        }
    }

    /// Sends `authorization: Bearer <key>` with every call (an orchestrator
    /// with `auth.api_keys_file` refuses calls without a known key).
    pub fn with_api_key(mut self, key: &str) -> Result<Self, Error> {
        let value = format!("Bearer {key}")
            .parse()
            .map_err(|_| Error::Connect {
                endpoint: String::new(),
                message: "the API key must be printable ASCII".into(),
            })?;
        self.authorization = Some(value);
        Ok(self)
    }

    /// `message` as a request carrying the API key, if any.
    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some(auth) = &self.authorization {
            request.metadata_mut().insert("authorization", auth.clone());
        }
        request
    }

    /// The generated client, for calls this wrapper does not cover (it sends
    /// no API key by itself).
    pub fn raw(&self) -> Raw<Channel> {
        self.inner.clone()
    }

    /// Starts an agent run; the stream ends with the run's terminal event.
    pub async fn run_agent(&self, request: pb::RunAgentRequest) -> Result<Events, Error> {
        self.run_agent_traced(request, None).await
    }

    /// Starts an agent run continuing the caller's W3C `traceparent`.
    pub async fn run_agent_traced(
        &self,
        request: pb::RunAgentRequest,
        traceparent: Option<&str>,
    ) -> Result<Events, Error> {
        let request = self.traced(request, traceparent)?;
        let stream = self.inner.clone().run_agent(request).await?.into_inner();
        Ok(Box::pin(stream.map(|e| e.map_err(Error::from))))
    }

    /// Runs an agent to its end and returns every event received.
    pub async fn run_agent_to_end(
        &self,
        request: pb::RunAgentRequest,
    ) -> Result<Vec<pb::RunEvent>, Error> {
        let mut events = self.run_agent(request).await?;
        let mut out = Vec::new();
        while let Some(e) = events.next().await {
            out.push(e?);
        }
        Ok(out)
    }

    /// Starts a pipeline run; the stream ends with the run's terminal event.
    pub async fn run_pipeline(&self, request: pb::RunPipelineRequest) -> Result<Events, Error> {
        self.run_pipeline_traced(request, None).await
    }

    /// Starts a pipeline continuing the caller's W3C `traceparent`.
    pub async fn run_pipeline_traced(
        &self,
        request: pb::RunPipelineRequest,
        traceparent: Option<&str>,
    ) -> Result<Events, Error> {
        let request = self.traced(request, traceparent)?;
        let stream = self.inner.clone().run_pipeline(request).await?.into_inner();
        Ok(Box::pin(stream.map(|e| e.map_err(Error::from))))
    }

    /// Re-attaches to a run: its events after `after_seq` (0: from the
    /// start), then live ones until its terminal event (WatchRun).
    pub async fn watch_run(
        &self,
        run_id: &str,
        after_seq: u64,
        filter: Option<pb::EventFilter>,
    ) -> Result<Events, Error> {
        let request = pb::WatchRunRequest {
            run_id: run_id.to_owned(),
            after_seq,
            filter,
        };
        let stream = self
            .inner
            .clone()
            .watch_run(self.request(request))
            .await?
            .into_inner();
        Ok(Box::pin(stream.map(|e| e.map_err(Error::from))))
    }

    /// Runs a pipeline to its end and returns every event received.
    pub async fn run_pipeline_to_end(
        &self,
        request: pb::RunPipelineRequest,
    ) -> Result<Vec<pb::RunEvent>, Error> {
        let mut events = self.run_pipeline(request).await?;
        let mut out = Vec::new();
        while let Some(e) = events.next().await {
            out.push(e?);
        }
        Ok(out)
    }

    /// Grants or denies a pending approval.
    pub async fn resolve_approval(
        &self,
        run_id: &str,
        approval_id: &str,
        approved: bool,
        reason: &str,
    ) -> Result<(), Error> {
        let request = pb::ResolveApprovalRequest {
            run_id: run_id.to_owned(),
            approval_id: approval_id.to_owned(),
            approved,
            reason: reason.to_owned(),
        };
        self.inner
            .clone()
            .resolve_approval(self.request(request))
            .await?;
        Ok(())
    }

    /// Answers a pending input request.
    pub async fn submit_input(
        &self,
        run_id: &str,
        input_id: &str,
        input: &str,
    ) -> Result<(), Error> {
        let request = pb::SubmitInputRequest {
            run_id: run_id.to_owned(),
            input_id: input_id.to_owned(),
            input: input.to_owned(),
        };
        self.inner
            .clone()
            .submit_input(self.request(request))
            .await?;
        Ok(())
    }

    /// Cancels a run.
    pub async fn cancel(&self, run_id: &str, reason: &str) -> Result<pb::RunStatus, Error> {
        let request = pb::CancelRunRequest {
            run_id: run_id.to_owned(),
            reason: reason.to_owned(),
        };
        let r = self
            .inner
            .clone()
            .cancel_run(self.request(request))
            .await?
            .into_inner();
        Ok(r.status())
    }

    /// A run's status and result.
    pub async fn get_run(&self, run_id: &str) -> Result<pb::GetRunResponse, Error> {
        Ok(self
            .inner
            .clone()
            .get_run(self.request(pb::GetRunRequest {
                run_id: run_id.to_owned(),
            }))
            .await?
            .into_inner())
    }

    /// A page of the caller's runs, newest first (ListRuns): `status`
    /// `Unspecified` lists every status; follow `next_page_token` with
    /// `page_token` until it is empty.
    pub async fn list_runs(
        &self,
        status: pb::RunStatus,
        page_size: i32,
        page_token: &str,
    ) -> Result<pb::ListRunsResponse, Error> {
        Ok(self
            .inner
            .clone()
            .list_runs(self.request(pb::ListRunsRequest {
                status: status as i32,
                page_size,
                page_token: page_token.to_owned(),
            }))
            .await?
            .into_inner())
    }

    /// The configured agents and groups.
    pub async fn list_agents(&self) -> Result<pb::ListAgentsResponse, Error> {
        Ok(self
            .inner
            .clone()
            .list_agents(self.request(pb::ListAgentsRequest {}))
            .await?
            .into_inner())
    }
}

impl OrchestratorClient {
    /// A request carrying `traceparent` (W3C trace context) when given.
    fn traced<T>(&self, message: T, traceparent: Option<&str>) -> Result<tonic::Request<T>, Error> {
        let mut request = self.request(message);
        if let Some(tp) = traceparent {
            let value = tp.parse().map_err(|_| {
                Error::Status(tonic::Status::invalid_argument("traceparent: not ASCII"))
            })?;
            request.metadata_mut().insert("traceparent", value);
        }
        Ok(request)
    }
}
