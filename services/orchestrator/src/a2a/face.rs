//! The A2A face's state: the agents it serves, the operations over the
//! core, who calls (keys), where the cards say it is; and the version
//! check every binding makes.

use std::{collections::BTreeMap, sync::Arc};

use axum::http::{HeaderMap, header};
use baton_common::auth::ApiKeys;

use super::{
    error::A2aError,
    names::VERSION_HEADER,
    service::{Exposed, Service},
};
use crate::{
    app::{Caller, Orchestrator},
    config::A2aConfig,
};

/// The A2A face: the exposed agents and the operations over the core.
pub struct A2a {
    service: Service,
    /// The agents served, and when they were read: rebuilt when the agents
    /// file is reloaded.
    exposure: std::sync::RwLock<Arc<Exposure>>,
    config: A2aConfig,
    keys: Option<Arc<ApiKeys>>,
    tls: bool,
}

/// The agents served over A2A, as one agents file says.
struct Exposure {
    agents: BTreeMap<String, Exposed>,
    loaded_at: std::time::SystemTime,
}

/// The exposure named an agent that the agents file does not have.
#[derive(Debug, thiserror::Error)]
#[error("a2a.agents: {0:?} is not an agent or group of the agents file")]
pub struct UnknownAgent(pub String);

/// The agents `catalog` and `config` expose over A2A (`a2a.agents`, and
/// `a2a: true` on an agent).
pub fn exposed(
    catalog: &crate::catalog::Catalog,
    config: &A2aConfig,
) -> Result<BTreeMap<String, Exposed>, UnknownAgent> {
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
    Ok(agents)
}

impl A2a {
    /// The face of `core`, serving the agents `config` and the agents file
    /// name; `tls` says whether the port speaks TLS (the cards' URLs). The
    /// agents follow the agents file when it is reloaded.
    pub fn new(
        core: Orchestrator,
        config: &A2aConfig,
        keys: Option<Arc<ApiKeys>>,
        tls: bool,
    ) -> Result<Arc<Self>, UnknownAgent> {
        let agents = exposed(&core.catalog(), config)?;
        let mut reloads = core.reloaded();
        let face = Arc::new(Self {
            service: Service::new(core.clone()),
            exposure: std::sync::RwLock::new(Arc::new(Exposure {
                agents,
                loaded_at: std::time::SystemTime::now(),
            })),
            config: config.clone(),
            keys,
            tls,
        });
        let weak = Arc::downgrade(&face);
        tokio::spawn(async move {
            while reloads.changed().await.is_ok() {
                let Some(face) = weak.upgrade() else { return };
                match exposed(&core.catalog(), &face.config) {
                    Ok(agents) => {
                        *face.exposure.write().unwrap_or_else(|e| e.into_inner()) =
                            Arc::new(Exposure {
                                agents,
                                loaded_at: std::time::SystemTime::now(),
                            });
                    }
                    // Checked before the reload was taken; kept as it was.
                    Err(e) => tracing::warn!(error = %e, "A2A agents not reloaded"),
                }
            }
        });
        Ok(face)
    }

    fn exposure(&self) -> Arc<Exposure> {
        self.exposure
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The agents served over A2A.
    pub fn agents(&self) -> Vec<Exposed> {
        self.exposure().agents.values().cloned().collect()
    }

    /// The exposed agent `name`.
    pub fn agent(&self, name: &str) -> Result<Exposed, A2aError> {
        self.exposure().agents.get(name).cloned().ok_or_else(|| {
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
        let exposure = self.exposure();
        match exposure.agents.len() {
            1 => exposure.agents.keys().next().cloned(),
            _ => None,
        }
    }

    /// When the agents the cards describe were loaded.
    pub fn loaded_at(&self) -> std::time::SystemTime {
        self.exposure().loaded_at
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
