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

use std::{
    collections::HashMap,
    future::Future,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use baton_client::balance::{DNS_SCHEME, Target};
use baton_proto::v1::orchestrator_client::OrchestratorClient;
use futures::{StreamExt, stream::FuturesUnordered};
use serde::{Deserialize, Serialize};
use tonic::{Code, Request, Response, Status, metadata::MetadataMap, transport::Channel};

/// The header that marks a call forwarded by a peer.
pub const FORWARDED: &str = "baton-forwarded";

/// The `peers` section of the config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PeersConfig {
    /// The replicas of this orchestrator, this one included (it is asked
    /// too, harmlessly): `host:port` or `dns:///host:port`, each resolved to
    /// every address of the name at every forwarded call. Empty: off (one
    /// replica, or a balancer that keeps a run's calls on its replica).
    pub endpoints: Vec<String>,
    /// How long a peer may take to answer a forwarded call (for WatchRun,
    /// to start the stream; the stream itself lasts as long as the run).
    #[serde(with = "baton_common::config::duration")]
    pub timeout: Duration,
    /// TLS towards the replicas (when their port speaks TLS, `tls.*`): on
    /// (`enabled`), each address is checked against the endpoint's name,
    /// with `ca_file` (or the system's roots); `cert_file`/`key_file`
    /// present a client certificate.
    pub tls: crate::client_tls::TlsClient,
}

impl Default for PeersConfig {
    fn default() -> Self {
        Self {
            endpoints: Vec::new(),
            timeout: Duration::from_secs(2),
            tls: Default::default(),
        }
    }
}

impl PeersConfig {
    /// Checks the section; names the field at fault.
    pub fn validate(&self) -> Result<(), String> {
        for (i, e) in self.endpoints.iter().enumerate() {
            host_port(e).map_err(|m| format!("peers.endpoints[{i}]: {m}"))?;
        }
        if self.timeout.is_zero() {
            return Err("peers.timeout must be positive".into());
        }
        Ok(())
    }
}

/// The name and port of a peers endpoint, parsed as the client parses
/// targets; a bare `host:port` is a name to resolve (as `dns:///`).
fn host_port(endpoint: &str) -> Result<(String, u16), String> {
    let target = if endpoint.contains("://") {
        Target::parse(endpoint)?
    } else {
        Target::parse(&format!("{DNS_SCHEME}{endpoint}"))?
    };
    target.host_port().map_err(|e| format!("{endpoint:?}: {e}"))
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

    /// Whether `metadata` says a peer sent this call.
    pub fn is_forwarded(metadata: &MetadataMap) -> bool {
        metadata.contains_key(FORWARDED)
    }

    async fn clients(&self) -> Vec<OrchestratorClient<Channel>> {
        let mut addresses = Vec::new();
        for endpoint in &self.config.endpoints {
            let Ok((host, port)) = host_port(endpoint) else {
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
                Some(c) => Some(c.clone()),
                None => match self.channel(a, &host) {
                    Ok(channel) => {
                        let c = OrchestratorClient::new(channel);
                        clients.insert(a, c.clone());
                        Some(c)
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
    fn channel(&self, address: SocketAddr, host: &str) -> Result<Channel, String> {
        let tls = self.config.tls.client();
        let scheme = if tls.enabled { "https" } else { "http" };
        let mut endpoint = tonic::transport::Endpoint::from_shared(format!("{scheme}://{address}"))
            .map_err(|e| e.to_string())?
            .tcp_nodelay(true)
            .connect_timeout(self.config.timeout);
        if tls.enabled {
            let config = tls
                .config(&format!("https://{host}:{}", address.port()), host)
                .map_err(|e| e.to_string())?;
            endpoint = endpoint.tls_config(config).map_err(|e| e.to_string())?;
        }
        Ok(endpoint.connect_lazy())
    }

    /// Asks every replica `call(client, request)` with `message`, marked as
    /// forwarded and carrying the caller's `traceparent`: the first answer
    /// that is not `NOT_FOUND` (nor a replica that cannot answer), or how
    /// many were asked.
    pub async fn ask<M, T, F, Fut>(&self, incoming: &MetadataMap, message: M, call: F) -> Answer<T>
    where
        M: Clone,
        F: Fn(OrchestratorClient<Channel>, Request<M>) -> Fut,
        Fut: Future<Output = Result<Response<T>, Status>>,
    {
        let clients = self.clients().await;
        let asked = clients.len();
        let timeout = self.config.timeout;
        let mut calls: FuturesUnordered<_> = clients
            .into_iter()
            .map(|client| {
                // No grpc-timeout on the request: it would bound a relayed
                // WatchRun stream too. The deadline below covers the answer
                // (for a stream, its start).
                let mut request = Request::new(message.clone());
                let md = request.metadata_mut();
                md.insert(FORWARDED, tonic::metadata::MetadataValue::from_static("1"));
                // The caller's trace, and its key: the peer authenticates the
                // same tenant.
                for header in ["traceparent", "authorization"] {
                    if let Some(v) = incoming.get(header) {
                        md.insert(header, v.clone());
                    }
                }
                let call = call(client, request);
                async move {
                    tokio::time::timeout(timeout, call)
                        .await
                        .unwrap_or_else(|_| {
                            Err(Status::deadline_exceeded("the peer did not answer"))
                        })
                }
            })
            .collect();
        let mut unanswered = 0;
        while let Some(answer) = calls.next().await {
            match answer {
                Err(s) if s.code() == Code::NotFound => {}
                // That replica is unreachable or going away: ask the rest.
                Err(s) if matches!(s.code(), Code::Unavailable | Code::DeadlineExceeded) => {
                    tracing::debug!(error = %s, "a peer did not answer a forwarded call");
                    unanswered += 1;
                }
                found => return Answer::Found(found),
            }
        }
        Answer::Missing { asked, unanswered }
    }
}

/// What the replicas said (see [`Peers::ask`]).
pub enum Answer<T> {
    /// A replica has the run; its answer.
    Found(Result<Response<T>, Status>),
    /// No replica has it.
    Missing {
        /// How many replicas were asked.
        asked: usize,
        /// How many of them could not answer.
        unanswered: usize,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(ok.validate(), Ok(()));
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
            let err = c.validate().expect_err(bad);
            assert!(
                err.starts_with("peers.endpoints[0]: ") && err.contains(why),
                "{err}"
            );
        }
        let zero = PeersConfig {
            timeout: Duration::ZERO,
            ..PeersConfig::default()
        };
        assert!(zero.validate().expect_err("zero").contains("peers.timeout"));
        assert!(Peers::new(&PeersConfig::default()).is_none());
    }
}
