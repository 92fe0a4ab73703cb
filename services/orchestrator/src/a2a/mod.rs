//! The A2A face: agents the operator chooses (`a2a: true` in the agents
//! file, or `a2a.agents` in the config; none by default) are Agent2Agent
//! protocol 1.0 agents, each with its own card and all three bindings:
//!
//! - gRPC `lf.a2a.v1.A2AService` on the main port beside `baton.v1`
//!   ([`grpc`]); the request's `tenant` field names the agent (the card's
//!   gRPC interface declares it, and A2A clients copy it into every
//!   request);
//! - JSON-RPC 2.0 at `POST /a2a/{agent}` ([`jsonrpc`]);
//! - HTTP+JSON under `/a2a/{agent}/` ([`rest`]);
//!
//! and the card at `GET /a2a/{agent}/.well-known/agent-card.json`
//! ([`card`]); `GET /a2a` lists the exposed agents and their cards, and
//! `GET /.well-known/agent-card.json` is the card of `a2a.default_agent`
//! (or of the only exposed agent).
//!
//! Every binding converts its wire form and calls the same operations
//! ([`service`]), which call the application core; errors map to each
//! binding in one place ([`error`]). A task is a run of the agent (task id =
//! run id, context id = the run's trace id); events become updates as
//! [`task`] says. Authentication, quotas and audit are the core's: an API
//! key names the tenant, and no tenant sees another's tasks.

pub mod card;
pub mod error;
pub mod grpc;
pub mod jsonrpc;
pub mod message;
pub mod rest;
pub mod service;
pub mod sse;
pub mod task;

use std::{collections::BTreeMap, sync::Arc};

use axum::{
    Router,
    extract::{Path, State},
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use baton_common::auth::ApiKeys;

use self::{
    error::{A2aError, json_response},
    service::Service,
};
use crate::{
    app::{Caller, Orchestrator},
    config::A2aConfig,
};

/// The A2A version this face speaks (`A2A-Version`).
pub const VERSION: &str = "1.0";

/// The header (and query parameter) that carries the version.
pub const VERSION_HEADER: &str = "a2a-version";

/// An agent served over A2A.
#[derive(Debug, Clone)]
pub struct Exposed {
    /// Its name in the agents file.
    pub name: String,
    /// What it does.
    pub description: String,
    /// The tools it may call (its card's skills).
    pub tools: Vec<String>,
    /// What it reads and writes.
    pub io: crate::catalog::A2aIo,
}

/// The A2A face: the exposed agents and the operations over the core.
pub struct A2a {
    service: Service,
    agents: BTreeMap<String, Exposed>,
    config: A2aConfig,
    keys: Option<Arc<ApiKeys>>,
    tls: bool,
    loaded_at: std::time::SystemTime,
}

/// The exposure named an agent that the agents file does not have.
#[derive(Debug, thiserror::Error)]
#[error("a2a.agents: {0:?} is not an agent or group of the agents file")]
pub struct UnknownAgent(pub String);

impl A2a {
    /// The face of `core`, serving the agents `config` and the agents file
    /// name; `tls` says whether the port speaks TLS (the cards' URLs).
    pub fn new(
        core: Orchestrator,
        config: &A2aConfig,
        keys: Option<Arc<ApiKeys>>,
        tls: bool,
    ) -> Result<Arc<Self>, UnknownAgent> {
        let catalog = core.catalog();
        let mut agents = BTreeMap::new();
        let mut expose = |name: &str| -> Result<(), UnknownAgent> {
            let exposed = if let Some(a) = catalog.agents.get(name) {
                Exposed {
                    name: name.to_owned(),
                    description: a.spec.description.clone(),
                    tools: a.spec.tools.clone(),
                    io: a.spec.a2a_io,
                }
            } else if let Some(g) = catalog.groups.get(name) {
                Exposed {
                    name: name.to_owned(),
                    description: g.description.clone(),
                    tools: g.members.clone(),
                    io: catalog
                        .agents
                        .get(&g.root)
                        .map(|a| a.spec.a2a_io)
                        .unwrap_or_default(),
                }
            } else {
                return Err(UnknownAgent(name.to_owned()));
            };
            agents.insert(name.to_owned(), exposed);
            Ok(())
        };
        for name in &config.agents {
            expose(name)?;
        }
        for (name, agent) in &catalog.agents {
            if agent.spec.a2a {
                expose(name)?;
            }
        }
        if !config.default_agent.is_empty() && !agents.contains_key(&config.default_agent) {
            return Err(UnknownAgent(format!(
                "{} (a2a.default_agent must be an exposed agent)",
                config.default_agent
            )));
        }
        Ok(Arc::new(Self {
            service: Service::new(core),
            agents,
            config: config.clone(),
            keys,
            tls,
            loaded_at: std::time::SystemTime::now(),
        }))
    }

    /// The agents served over A2A.
    pub fn agents(&self) -> impl Iterator<Item = &Exposed> {
        self.agents.values()
    }

    /// The exposed agent `name`.
    pub fn agent(&self, name: &str) -> Result<&Exposed, A2aError> {
        self.agents.get(name).ok_or_else(|| {
            A2aError::NoAgent(format!(
                "no A2A agent {name:?} here (GET /a2a lists the agents this server exposes)"
            ))
        })
    }

    /// The agent `/.well-known/agent-card.json` and a gRPC call without a
    /// `tenant` mean: `a2a.default_agent`, or the only exposed agent.
    pub fn default_agent(&self) -> Option<String> {
        if !self.config.default_agent.is_empty() {
            return Some(self.config.default_agent.clone());
        }
        match self.agents.len() {
            1 => self.agents.keys().next().cloned(),
            _ => None,
        }
    }

    /// When the agents the cards describe were loaded.
    pub fn loaded_at(&self) -> std::time::SystemTime {
        self.loaded_at
    }

    /// The operations.
    pub fn service(&self) -> &Service {
        &self.service
    }

    /// The base URL a request reached this port at: the config's
    /// `a2a.public_url`, or the scheme and the request's `Host`.
    pub fn base_url(&self, headers: &HeaderMap) -> String {
        if !self.config.public_url.is_empty() {
            return self.config.public_url.trim_end_matches('/').to_owned();
        }
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("localhost");
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{host}")
    }

    /// The address the cards give for the gRPC binding.
    pub fn grpc_address(&self, base: &str) -> String {
        if !self.config.grpc_address.is_empty() {
            return self.config.grpc_address.clone();
        }
        base.split_once("://")
            .map(|(_, rest)| rest)
            .unwrap_or(base)
            .trim_end_matches('/')
            .to_owned()
    }

    /// Who calls an HTTP binding.
    pub fn caller(&self, headers: &HeaderMap) -> Result<Caller, A2aError> {
        Ok(crate::http::caller(self.keys.as_deref(), headers)?)
    }

    /// Whether callers need a key.
    pub fn keys_required(&self) -> bool {
        self.keys.is_some()
    }
}

/// Checks the version a request asks for: `1.0` (a patch part is ignored,
/// as A2A §3.6 says); none means 0.3, which this face does not speak.
pub fn check_version(asked: Option<&str>) -> Result<(), A2aError> {
    let asked = asked.map(str::trim).unwrap_or_default();
    let mut parts = asked.split('.');
    let (major, minor) = (parts.next(), parts.next());
    if major == Some("1") && minor == Some("0") {
        return Ok(());
    }
    Err(A2aError::Version(asked.to_owned()))
}

/// The version an HTTP request asks for: the header, or the
/// `A2A-Version` query parameter.
pub fn http_version<'a>(headers: &'a HeaderMap, query: Option<&'a str>) -> Option<&'a str> {
    if let Some(v) = headers.get(VERSION_HEADER).and_then(|v| v.to_str().ok()) {
        return Some(v);
    }
    let query = query?;
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        k.eq_ignore_ascii_case(VERSION_HEADER).then_some(v)
    })
}

/// The A2A routes of the HTTP port: cards, JSON-RPC and HTTP+JSON.
pub fn router(face: Arc<A2a>) -> Router {
    Router::new()
        .route("/.well-known/agent-card.json", get(default_card))
        .route("/a2a", get(list_agents))
        .route("/a2a/{agent}/.well-known/agent-card.json", get(agent_card))
        .route("/a2a/{agent}", post(jsonrpc::handle))
        // Clients that join the interface URL and "/" (httpx's base_url).
        .route("/a2a/{agent}/", post(jsonrpc::handle))
        .route("/a2a/{agent}/{*rest}", axum::routing::any(rest::handle))
        .with_state(face)
}

async fn agent_card(
    State(face): State<Arc<A2a>>,
    Path(agent): Path<String>,
    headers: HeaderMap,
) -> Response {
    match face.agent(&agent) {
        Ok(exposed) => card::response(&face, exposed, &headers),
        Err(e) => e.rest_response(),
    }
}

async fn default_card(State(face): State<Arc<A2a>>, headers: HeaderMap) -> Response {
    let name = match face.default_agent() {
        Some(name) => name,
        None => match face.agents.len() {
            0 => {
                return A2aError::NoAgent(
                    "this server exposes no agent over A2A (a2a.agents in the config, or `a2a: true` on an agent)".into(),
                )
                .rest_response();
            }
            _ => {
                let urls: Vec<String> = face
                    .agents
                    .keys()
                    .map(|n| {
                        format!(
                            "{}/a2a/{n}/.well-known/agent-card.json",
                            face.base_url(&headers)
                        )
                    })
                    .collect();
                return A2aError::NoAgent(format!(
                    "this server exposes {} A2A agents, each with its own card: {} (GET /a2a lists them)",
                    urls.len(),
                    urls.join(", ")
                ))
                .rest_response();
            }
        },
    };
    agent_card(State(face), Path(name), headers).await
}

async fn list_agents(State(face): State<Arc<A2a>>, headers: HeaderMap) -> Response {
    let base = face.base_url(&headers);
    let agents: Vec<serde_json::Value> = face
        .agents
        .values()
        .map(|a| {
            serde_json::json!({
                "name": a.name,
                "description": a.description,
                "cardUrl": format!("{base}/a2a/{}/.well-known/agent-card.json", a.name),
                "url": format!("{base}/a2a/{}", a.name),
            })
        })
        .collect();
    json_response(&serde_json::json!({ "agents": agents }), StatusCode::OK).into_response()
}
