//! Run-scoped calls that land on the wrong replica.
//!
//! A run lives on the replica that started it (its stream, its questions,
//! its event log). Behind a load balancer, `ResolveApproval`, `SubmitInput`,
//! `CancelRun`, `GetRun` and `WatchRun` may reach any replica. When the run
//! is not here and `peers.endpoints` is set, the call is asked of every
//! other replica at once (the addresses the endpoints resolve to, e.g. a
//! Kubernetes headless Service), marked with the `baton-forwarded` header so
//! a peer answers from its own runs only and never forwards again. The first
//! answer that is not `NOT_FOUND` is the answer; when every replica says
//! `NOT_FOUND` (or does not answer within `peers.timeout`), so does this one.
//!
//! The fan-out costs one round trip per replica and only happens for runs
//! that are not local; calls for local runs never leave the replica.
//!
//! A forward that fails in transport (a connection reset, a peer's HTTP/2
//! GOAWAY) says nothing of the run: the peer counts as not answering, its
//! cached connection is dropped, and the whole ask is tried once more on
//! fresh connections. Still unanswered, the caller is told `UNAVAILABLE`
//! (retry) — or, for a durable run, the call takes the path that needs no
//! peer (the run's inbox in Redis). Forwards still in flight when an answer
//! is found are read to their end in the background rather than reset:
//! thousands of resets on one connection trip HTTP/2's reset-flood
//! protection, which closes it under every call it carries.

use std::{
    collections::HashMap,
    future::Future,
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use baton_proto::v1::{self as pb, orchestrator_client::OrchestratorClient};
use futures::{
    StreamExt,
    stream::{BoxStream, FuturesUnordered},
};
use tonic::{Code, Request, Response, Status, metadata::MetadataValue, transport::Channel};

use crate::{
    config::PeersConfig,
    error::Error,
    run::{events::Filter, record::ApprovalAnswer, view::RunView},
};

/// The header that marks a call forwarded by a peer.
pub const FORWARDED: &str = "baton-forwarded";

/// The header a forwarded answer (ResolveApproval, SubmitInput) carries its
/// call's token in: the owner records the answer under it, so the caller
/// asking again (its forward timed out) is told the answer was taken (see
/// `run::durable::inbox`).
pub const ANSWER_TOKEN: &str = "baton-answer-token";

/// Why no channel to a peer can be made (logged; the peer is skipped).
#[derive(Debug, thiserror::Error)]
enum ChannelError {
    /// The address makes no URI, or the TLS settings no endpoint.
    #[error(transparent)]
    Endpoint(#[from] tonic::transport::Error),
    /// `peers.tls` names files that cannot be read.
    #[error(transparent)]
    Tls(#[from] baton_client::Error),
}

/// The other replicas, as far as forwarding is concerned.
pub struct Peers {
    config: PeersConfig,
    /// One lazily connected channel per address seen.
    clients: Mutex<HashMap<SocketAddr, OrchestratorClient<Channel>>>,
}

impl Peers {
    /// Forwarding as `config` says; `None` when it is off.
    pub fn new(config: &PeersConfig) -> Option<Arc<Self>> {
        (!config.endpoints.is_empty()).then(|| {
            Arc::new(Self {
                config: config.clone(),
                clients: Mutex::new(HashMap::new()),
            })
        })
    }

    /// Forgets the connection to `address` (it failed in transport): the
    /// next forward makes a new one.
    fn forget(&self, address: SocketAddr) {
        self.clients
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&address);
    }

    async fn clients(&self) -> Vec<(SocketAddr, OrchestratorClient<Channel>)> {
        let mut addresses = Vec::new();
        for endpoint in &self.config.endpoints {
            let Ok((host, port)) = crate::config::host_port(endpoint) else {
                continue;
            };
            match tokio::net::lookup_host((host.as_str(), port)).await {
                Ok(found) => addresses.extend(found.map(|a| (a, host.clone()))),
                Err(e) => tracing::warn!(endpoint, error = %e, "cannot resolve a peer"),
            }
        }
        addresses.sort();
        addresses.dedup_by(|a, b| a.0 == b.0);
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        clients.retain(|a, _| addresses.iter().any(|(b, _)| a == b));
        addresses
            .into_iter()
            .filter_map(|(a, host)| match clients.get(&a) {
                Some(c) => Some((a, c.clone())),
                None => match self.channel(a, &host) {
                    Ok(channel) => {
                        let c = OrchestratorClient::new(channel);
                        clients.insert(a, c.clone());
                        Some((a, c))
                    }
                    Err(e) => {
                        tracing::warn!(peer = %a, error = %e, "cannot reach a peer");
                        None
                    }
                },
            })
            .collect()
    }

    /// A lazily connected channel to the replica at `address`, over TLS
    /// (checked against `host`, the endpoint's name) when `peers.tls` is on.
    fn channel(&self, address: SocketAddr, host: &str) -> Result<Channel, ChannelError> {
        let tls = self.config.tls.client();
        let scheme = if tls.enabled { "https" } else { "http" };
        let mut endpoint =
            tonic::transport::Endpoint::from_shared(format!("{scheme}://{address}"))?
                .tcp_nodelay(true)
                .connect_timeout(self.config.timeout);
        if tls.enabled {
            let config = tls.config(&format!("https://{host}:{}", address.port()), host)?;
            endpoint = endpoint.tls_config(config)?;
        }
        Ok(endpoint.connect_lazy())
    }

    /// Asks every replica `call(client, request)` with `message`, marked as
    /// forwarded and carrying the caller's `traceparent` and key: the first
    /// answer that is not `NOT_FOUND` (nor a replica that cannot answer),
    /// or how many were asked. Forwards that failed in transport are asked
    /// once more, on fresh connections.
    async fn ask<M, T, F, Fut>(&self, caller: &Forward, message: M, call: F) -> Answer<T>
    where
        M: Clone,
        T: Send + 'static,
        F: Fn(OrchestratorClient<Channel>, Request<M>) -> Fut,
        Fut: Future<Output = Result<Response<T>, Status>> + Send + 'static,
    {
        let mut answer = self.ask_once(caller, message.clone(), &call).await;
        if let Answer::Missing { broken: true, .. } = answer {
            tracing::debug!("forwards failed in transport: asked again on fresh connections");
            answer = self.ask_once(caller, message, &call).await;
        }
        answer
    }

    async fn ask_once<M, T, F, Fut>(&self, caller: &Forward, message: M, call: &F) -> Answer<T>
    where
        M: Clone,
        T: Send + 'static,
        F: Fn(OrchestratorClient<Channel>, Request<M>) -> Fut,
        Fut: Future<Output = Result<Response<T>, Status>> + Send + 'static,
    {
        let clients = self.clients().await;
        let asked = clients.len();
        let timeout = self.config.timeout;
        let mut calls: FuturesUnordered<_> = clients
            .into_iter()
            .map(|(address, client)| {
                // No grpc-timeout on the request: it would bound a relayed
                // WatchRun stream too. The deadline below covers the answer
                // (for a stream, its start).
                let mut request = Request::new(message.clone());
                let md = request.metadata_mut();
                md.insert(FORWARDED, MetadataValue::from_static("1"));
                // The caller's trace, and its key: the peer authenticates the
                // same tenant.
                for (header, value) in [
                    ("traceparent", &caller.traceparent),
                    ("authorization", &caller.authorization),
                    (ANSWER_TOKEN, &caller.answer_token),
                ] {
                    if let Some(v) = value
                        .as_deref()
                        .and_then(|v| MetadataValue::try_from(v).ok())
                    {
                        md.insert(header, v);
                    }
                }
                let call = call(client, request);
                // `None`: the peer did not answer in time.
                async move { (address, tokio::time::timeout(timeout, call).await.ok()) }
            })
            .collect();
        let mut unanswered = 0;
        let mut broken = false;
        while let Some((address, answer)) = calls.next().await {
            let answer = match answer {
                None => {
                    tracing::debug!("a peer did not answer a forwarded call in time");
                    unanswered += 1;
                    continue;
                }
                // Nothing listens there: that replica is gone, and so are
                // its runs (a durable run's record is in Redis).
                Some(Err(s)) if refused(&s) => {
                    tracing::debug!(peer = %address, "a peer refused the connection");
                    self.forget(address);
                    continue;
                }
                Some(Err(s)) if in_transport(&s) => {
                    tracing::warn!(peer = %address, error = %s, "a forwarded call failed in transport");
                    self.forget(address);
                    unanswered += 1;
                    broken = true;
                    continue;
                }
                Some(answer) => answer.map(Response::into_inner).map_err(from_status),
            };
            match answer {
                Err(e) if e.code() == Code::NotFound => {}
                // That replica is unreachable or going away: ask the rest.
                Err(e) if matches!(e.code(), Code::Unavailable | Code::DeadlineExceeded) => {
                    tracing::debug!(error = %e, "a peer did not answer a forwarded call");
                    unanswered += 1;
                }
                found => {
                    // The others' answers are read, not reset.
                    if !calls.is_empty() {
                        tokio::spawn(async move { while calls.next().await.is_some() {} });
                    }
                    return Answer::Found(found);
                }
            }
        }
        Answer::Missing {
            asked,
            unanswered,
            broken,
        }
    }

    /// GetRun of a run on another replica.
    pub async fn get_run(&self, caller: &Forward, run_id: &str) -> Answer<RunView> {
        let request = pb::GetRunRequest {
            run_id: run_id.to_owned(),
        };
        self.ask(
            caller,
            request,
            |mut c, r| async move { c.get_run(r).await },
        )
        .await
        .map(RunView::from)
    }

    /// WatchRun of a run on another replica: its stream, as the peer sends it.
    pub async fn watch_run(
        &self,
        caller: &Forward,
        run_id: &str,
        after_seq: u64,
        filter: &Filter,
    ) -> Answer<BoxStream<'static, Result<pb::RunEvent, Error>>> {
        let request = pb::WatchRunRequest {
            run_id: run_id.to_owned(),
            after_seq,
            filter: Some(pb::EventFilter::from(filter)),
        };
        self.ask(
            caller,
            request,
            |mut c, r| async move { c.watch_run(r).await },
        )
        .await
        .map(|stream| stream.map(|e| e.map_err(from_status)).boxed())
    }

    /// CancelRun of a run on another replica: its status after.
    pub async fn cancel_run(
        &self,
        caller: &Forward,
        run_id: &str,
        reason: &str,
    ) -> Answer<pb::RunStatus> {
        let request = pb::CancelRunRequest {
            run_id: run_id.to_owned(),
            reason: reason.to_owned(),
        };
        self.ask(
            caller,
            request,
            |mut c, r| async move { c.cancel_run(r).await },
        )
        .await
        .map(|r| pb::RunStatus::try_from(r.status).unwrap_or_default())
    }

    /// ResolveApproval of a run on another replica.
    pub async fn resolve_approval(
        &self,
        caller: &Forward,
        run_id: &str,
        approval_id: &str,
        answer: &ApprovalAnswer,
    ) -> Answer<()> {
        let request = pb::ResolveApprovalRequest {
            run_id: run_id.to_owned(),
            approval_id: approval_id.to_owned(),
            approved: answer.approved,
            reason: answer.reason.clone(),
        };
        self.ask(caller, request, |mut c, r| async move {
            c.resolve_approval(r).await
        })
        .await
        .map(|_| ())
    }

    /// SubmitInput of a run on another replica.
    pub async fn submit_input(
        &self,
        caller: &Forward,
        run_id: &str,
        input_id: &str,
        input: &str,
    ) -> Answer<()> {
        let request = pb::SubmitInputRequest {
            run_id: run_id.to_owned(),
            input_id: input_id.to_owned(),
            input: input.to_owned(),
        };
        self.ask(caller, request, |mut c, r| async move {
            c.submit_input(r).await
        })
        .await
        .map(|_| ())
    }
}

/// What a forwarded call carries of its caller.
#[derive(Debug, Clone, Default)]
pub struct Forward {
    /// Whether a peer sent the call: it is answered from this replica's
    /// runs only, and never forwarded again.
    pub forwarded: bool,
    /// The caller's W3C `traceparent`.
    pub traceparent: Option<String>,
    /// The caller's `authorization` (its API key): the peer authenticates
    /// the same tenant.
    pub authorization: Option<String>,
    /// A forwarded answer's token (see [`ANSWER_TOKEN`]).
    pub answer_token: Option<String>,
}

/// A peer's error, passed on with its code, message and field.
fn from_status(s: Status) -> Error {
    Error::Peer {
        code: s.code(),
        message: s.message().to_owned(),
        field: s
            .metadata()
            .get(baton_proto::FIELD_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
    }
}

/// What the replicas said (see [`Peers::ask`]).
pub enum Answer<T> {
    /// A replica has the run; its answer.
    Found(Result<T, Error>),
    /// No replica has it.
    Missing {
        /// How many replicas were asked.
        asked: usize,
        /// How many of them could not answer.
        unanswered: usize,
        /// Whether a forward failed in transport (asked again once).
        broken: bool,
    },
}

/// Whether `s` says the peer's address refused the connection.
fn refused(s: &Status) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(s);
    while let Some(e) = cause {
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            return true;
        }
        cause = e.source();
    }
    s.message().contains("Connection refused")
}

/// Whether `s` was made here from a transport failure (a reset connection,
/// an HTTP/2 GOAWAY, a refused connect) rather than sent by the peer:
/// tonic keeps the cause of such a status, and never of one it read off
/// the wire.
fn in_transport(s: &Status) -> bool {
    std::error::Error::source(s).is_some()
        || (matches!(
            s.code(),
            Code::Unknown | Code::ResourceExhausted | Code::Internal | Code::Cancelled
        ) && ["transport error", "h2 protocol error", "connection"]
            .iter()
            .any(|m| s.message().contains(m)))
}

impl<T> Answer<T> {
    fn map<U>(self, f: impl FnOnce(T) -> U) -> Answer<U> {
        match self {
            Answer::Found(r) => Answer::Found(r.map(f)),
            Answer::Missing {
                asked,
                unanswered,
                broken,
            } => Answer::Missing {
                asked,
                unanswered,
                broken,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PeersConfig;
    use std::time::Duration;

    #[test]
    fn a_status_made_from_a_transport_failure_is_no_peers_answer() {
        let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        assert!(in_transport(&Status::from_error(Box::new(reset))));
        assert!(in_transport(&Status::new(
            Code::ResourceExhausted,
            "h2 protocol error: error reading a body from connection"
        )));
        // What a peer said is its answer.
        assert!(!in_transport(&Status::unknown("a tool said no")));
        assert!(!in_transport(&Status::resource_exhausted(
            "quotas.concurrent_runs: tenant acme is at its quota"
        )));
    }

    #[test]
    fn endpoints_are_checked() {
        let ok = PeersConfig {
            endpoints: vec![
                "dns:///baton-orchestrator-headless:50051".into(),
                "10.0.0.1:50051".into(),
                "http://orch-0.orch:50051".into(),
            ],
            ..PeersConfig::default()
        };
        ok.validate().expect("valid");
        for (bad, why) in [
            ("dns:///orch", "needs a port"),
            ("http://orch", "needs a port"),
            ("orch:http", "is not a port"),
            (":1", "needs a host"),
        ] {
            let c = PeersConfig {
                endpoints: vec![bad.into()],
                ..PeersConfig::default()
            };
            let err = c.validate().expect_err(bad).to_string();
            assert!(
                err.starts_with("peers.endpoints[0]: ") && err.contains(why),
                "{err}"
            );
        }
        let zero = PeersConfig {
            timeout: Duration::ZERO,
            ..PeersConfig::default()
        };
        assert_eq!(
            zero.validate().expect_err("zero").to_string(),
            "peers.timeout must be positive"
        );
        assert!(Peers::new(&PeersConfig::default()).is_none());
    }
}
