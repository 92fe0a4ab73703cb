//! The orchestrator client.

use std::{
    pin::Pin,
    task::{Context, Poll, ready},
};

use futures::{Stream, StreamExt, future::BoxFuture};
use tonic::transport::Channel;

use baton_proto::v1::{self as pb, orchestrator_client::OrchestratorClient as Raw};

use crate::{channel::bearer, error::Error};

/// A client of `baton.v1.Orchestrator`. Cheap to clone.
#[derive(Debug, Clone)]
pub struct OrchestratorClient {
    inner: Raw<Channel>,
    /// `Bearer <key>`, sent with every call when set.
    authorization: Option<tonic::metadata::AsciiMetadataValue>,
    /// Told when a stream breaks and when it re-attaches.
    link: Option<LinkHook>,
}

/// A run's event stream. Dropping it cancels the run (unless it was
/// started detached).
///
/// When the stream breaks with `UNAVAILABLE` before the run's terminal
/// event — its replica is draining, or died and another resumed the run —
/// the stream re-attaches by itself with `WatchRun(after_seq)` through the
/// same target (another replica, for a balanced target) and goes on where
/// it was: the caller sees a pause, not an error. It gives up after
/// [`REATTACH_FOR`], yielding the last error.
pub type Events = std::pin::Pin<Box<dyn Stream<Item = Result<pb::RunEvent, Error>> + Send>>;

/// How long a broken stream keeps trying to re-attach.
pub const REATTACH_FOR: std::time::Duration = std::time::Duration::from_secs(30);

/// What happens to a run's stream on its way, for a caller that shows it
/// (see [`OrchestratorClient::on_link`]): a prompt waiting for a person,
/// say, ends when the stream breaks instead of waiting out the re-attach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Link {
    /// The stream broke with this error; it tries to re-attach for up to
    /// [`REATTACH_FOR`] (and yields the error if it cannot).
    Broken(String),
    /// It re-attached, and goes on after the last event it yielded.
    Reattached,
}

/// The function [`OrchestratorClient::on_link`] installs.
#[derive(Clone)]
struct LinkHook(std::sync::Arc<dyn Fn(Link) + Send + Sync>);

impl std::fmt::Debug for LinkHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LinkHook")
    }
}

/// Where a re-attaching stream is. A stream of its own (not an `unfold`,
/// which moves its whole state in and out of a new future for every
/// event): a fork's replayed history comes as hundreds of events at once.
struct Following {
    client: OrchestratorClient,
    current: Events,
    filter: Option<pb::EventFilter>,
    run_id: Option<String>,
    last_seq: u64,
    ended: bool,
    /// After the terminal event: the stream's own end (the server's
    /// trailers) is still to be read.
    draining: bool,
    /// A re-attach under way, with the error that broke the stream (what
    /// the stream ends with if it gives up). Boxed: a stream that never
    /// breaks holds only a pointer.
    reattaching: Option<(Error, BoxFuture<'static, Result<Events, Error>>)>,
}

impl OrchestratorClient {
    /// `stream`, re-attaching when it breaks (see [`Events`]).
    fn following(
        &self,
        stream: Events,
        filter: Option<pb::EventFilter>,
        run_id: Option<String>,
        after_seq: u64,
    ) -> Events {
        Box::pin(Following {
            client: self.clone(),
            current: stream,
            filter,
            run_id,
            last_seq: after_seq,
            ended: false,
            draining: false,
            reattaching: None,
        })
    }
}

impl Stream for Following {
    type Item = Result<pb::RunEvent, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let s = self.get_mut();
        loop {
            if let Some((_, reattach)) = &mut s.reattaching {
                let reattached = ready!(reattach.as_mut().poll(cx));
                let broke = s.reattaching.take().map(|(e, _)| e);
                match reattached {
                    Ok(stream) => {
                        s.current = stream;
                        s.client.tell(Link::Reattached);
                    }
                    Err(_) => {
                        s.ended = true;
                        return Poll::Ready(broke.map(Err));
                    }
                }
            }
            if s.draining {
                // The server ends the stream right after the terminal
                // event: read that end instead of resetting the stream (a
                // connection whose client resets its streams by the
                // thousand is closed by HTTP/2's reset-flood protection).
                while ready!(s.current.as_mut().poll_next(cx)).is_some() {}
                s.draining = false;
            }
            if s.ended {
                return Poll::Ready(None);
            }
            match ready!(s.current.as_mut().poll_next(cx)) {
                Some(Ok(event)) => {
                    s.run_id.get_or_insert_with(|| event.run_id.clone());
                    s.last_seq = event.seq;
                    s.ended = is_terminal(&event);
                    s.draining = s.ended;
                    return Poll::Ready(Some(Ok(event)));
                }
                // The replica went away (drained, or its connection
                // broke): re-attach, as often as it takes within
                // REATTACH_FOR each time.
                Some(Err(e)) if broken(&e) && s.run_id.is_some() => {
                    s.client.tell(Link::Broken(e.to_string()));
                    let reattach = reattach(
                        s.client.clone(),
                        s.run_id.clone().unwrap_or_default(),
                        s.last_seq,
                        s.filter.clone(),
                    );
                    s.reattaching = Some((e, Box::pin(reattach)));
                }
                Some(Err(e)) => {
                    s.ended = true;
                    return Poll::Ready(Some(Err(e)));
                }
                None => {
                    s.ended = true;
                    return Poll::Ready(None);
                }
            }
        }
    }
}

/// Whether an error means the connection or the replica went away (so the
/// run goes on elsewhere), not that the request was wrong: `UNAVAILABLE`,
/// or `CANCELLED`/`UNKNOWN` from a transport that closed.
fn broken(e: &Error) -> bool {
    matches!(
        e.code(),
        tonic::Code::Unavailable | tonic::Code::Cancelled | tonic::Code::Unknown
    )
}

/// Re-attaches to run `run_id` after `last_seq`, retrying while the
/// orchestrator is unavailable (a replica draining, another taking the
/// run over): the stream from there.
async fn reattach(
    client: OrchestratorClient,
    run_id: String,
    last_seq: u64,
    filter: Option<pb::EventFilter>,
) -> Result<Events, Error> {
    let deadline = tokio::time::Instant::now() + REATTACH_FOR;
    let mut wait = std::time::Duration::from_millis(100);
    loop {
        match client.watch_once(&run_id, last_seq, filter.clone()).await {
            Ok(stream) => return Ok(stream),
            Err(e)
                if (broken(&e) || e.code() == tonic::Code::NotFound)
                    && tokio::time::Instant::now() + wait < deadline =>
            {
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(std::time::Duration::from_secs(1));
            }
            Err(e) => return Err(e),
        }
    }
}

fn is_terminal(e: &pb::RunEvent) -> bool {
    use pb::run_event::Payload;
    matches!(
        e.payload,
        Some(Payload::RunCompleted(_) | Payload::RunFailed(_) | Payload::RunCancelled(_))
    )
}

impl OrchestratorClient {
    /// Connects to `endpoint` (`http://host:port`).
    pub async fn connect(endpoint: impl Into<String>) -> Result<Self, Error> {
        Ok(Self::new(crate::channel::channel(endpoint).await?))
    }

    /// Connects to `endpoint` with TLS settings (`https://` endpoints always
    /// speak TLS; see [`crate::tls`]).
    pub async fn connect_with(
        endpoint: impl Into<String>,
        tls: &crate::tls::ClientTls,
    ) -> Result<Self, Error> {
        Ok(Self::new(
            crate::channel::channel_with(endpoint, tls).await?,
        ))
    }

    /// A client over an existing channel.
    pub fn new(channel: Channel) -> Self {
        Self {
            inner: Raw::new(channel).max_decoding_message_size(64 << 20),
            authorization: None,
            link: None,
        }
    }

    /// Calls `f` when a run stream of this client breaks and when it
    /// re-attaches (see [`Events`]).
    pub fn on_link(mut self, f: impl Fn(Link) + Send + Sync + 'static) -> Self {
        self.link = Some(LinkHook(std::sync::Arc::new(f)));
        self
    }

    fn tell(&self, link: Link) {
        if let Some(hook) = &self.link {
            (hook.0)(link);
        }
    }

    /// Sends `authorization: Bearer <key>` with every call (an orchestrator
    /// with `auth.api_keys_file` refuses calls without a known key).
    pub fn with_api_key(mut self, key: &str) -> Result<Self, Error> {
        self.authorization = Some(bearer(key)?);
        Ok(self)
    }

    /// `message` as a request carrying the API key, if any.
    pub(crate) fn request<T>(&self, message: T) -> tonic::Request<T> {
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
        let filter = request.filter.clone();
        let request = self.traced(request, traceparent)?;
        let stream = self.inner.clone().run_agent(request).await?.into_inner();
        Ok(self.following(
            Box::pin(stream.map(|e| e.map_err(Error::from))),
            filter,
            None,
            0,
        ))
    }

    /// Forks a run at a point (ForkRun): the stream carries the fork's
    /// replayed events (marked `replayed`), then its live ones, until its
    /// terminal event (re-attaching like [`Self::run_agent`]).
    pub async fn fork_run(&self, request: pb::ForkRunRequest) -> Result<Events, Error> {
        let filter = request.filter.clone();
        let request = self.traced(request, None)?;
        let stream = self.inner.clone().fork_run(request).await?.into_inner();
        Ok(self.following(
            Box::pin(stream.map(|e| e.map_err(Error::from))),
            filter,
            None,
            0,
        ))
    }

    /// Replays an ended run against today's agents (ReplayRun): the stream
    /// carries the replay's events until its terminal event, whose
    /// `replay` counts the calls that matched the recording (re-attaching
    /// like [`Self::run_agent`]).
    pub async fn replay_run(&self, request: pb::ReplayRunRequest) -> Result<Events, Error> {
        let filter = request.filter.clone();
        let request = self.traced(request, None)?;
        let stream = self.inner.clone().replay_run(request).await?.into_inner();
        Ok(self.following(
            Box::pin(stream.map(|e| e.map_err(Error::from))),
            filter,
            None,
            0,
        ))
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
        let filter = request.filter.clone();
        let request = self.traced(request, traceparent)?;
        let stream = self.inner.clone().run_pipeline(request).await?.into_inner();
        Ok(self.following(
            Box::pin(stream.map(|e| e.map_err(Error::from))),
            filter,
            None,
            0,
        ))
    }

    /// Re-attaches to a run: its events after `after_seq` (0: from the
    /// start), then live ones until its terminal event (WatchRun).
    pub async fn watch_run(
        &self,
        run_id: &str,
        after_seq: u64,
        filter: Option<pb::EventFilter>,
    ) -> Result<Events, Error> {
        let stream = self.watch_once(run_id, after_seq, filter.clone()).await?;
        Ok(self.following(stream, filter, Some(run_id.to_owned()), after_seq))
    }

    /// One WatchRun call, without re-attaching.
    async fn watch_once(
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
                waiting: false,
                failing_scores: false,
            }))
            .await?
            .into_inner())
    }

    /// A page of the caller's runs that a live scorer failed (their agent's
    /// `scoring`), newest first; follow `next_page_token` as `list_runs`.
    pub async fn list_failing_runs(
        &self,
        page_size: i32,
        page_token: &str,
    ) -> Result<pb::ListRunsResponse, Error> {
        Ok(self
            .inner
            .clone()
            .list_runs(self.request(pb::ListRunsRequest {
                page_size,
                page_token: page_token.to_owned(),
                failing_scores: true,
                ..Default::default()
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
