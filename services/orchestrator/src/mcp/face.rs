//! The MCP face's state: the agents it serves as tools, the core, who
//! calls (keys), and what a call does with approvals its client cannot be
//! asked.

use std::{collections::BTreeMap, sync::Arc};

use axum::http::HeaderMap;
use baton_common::auth::ApiKeys;
use rmcp::model::{JsonObject, Tool};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::{
    app::{Caller, Orchestrator},
    config::{McpApprovalMode, McpConfig},
    http::error::HttpError,
};

/// An agent (or group) served as an MCP tool.
#[derive(Debug, Clone)]
pub struct Exposed {
    /// Its name in the agents file, and the tool's.
    pub name: String,
    /// What it does.
    pub description: String,
}

/// The MCP face: the exposed agents and the core they run on.
pub struct Mcp {
    core: Orchestrator,
    /// The agents served as tools: rebuilt when the agents file is
    /// reloaded, and every session is told (`tools/list_changed`).
    agents: std::sync::RwLock<Arc<BTreeMap<String, Exposed>>>,
    /// The sessions that said `initialized`, to tell of a new tool list.
    peers: std::sync::Mutex<Vec<rmcp::Peer<rmcp::RoleServer>>>,
    config: McpConfig,
    keys: Option<Arc<ApiKeys>>,
    approval_mode: McpApprovalMode,
    allowed_hosts: Vec<String>,
    shutdown: CancellationToken,
}

/// The exposure named an agent that the agents file does not have.
#[derive(Debug, thiserror::Error)]
#[error("mcp.agents: {0:?} is not an agent or group of the agents file")]
pub struct UnknownAgent(pub String);

/// The agents `catalog` and `config` serve as MCP tools (`mcp.agents`, and
/// `mcp: true` on an agent).
pub fn exposed(
    catalog: &crate::catalog::Catalog,
    config: &McpConfig,
) -> Result<BTreeMap<String, Exposed>, UnknownAgent> {
    let mut agents = BTreeMap::new();
    let marked = catalog
        .agents
        .iter()
        .filter(|(_, a)| a.spec.mcp)
        .map(|(name, _)| name);
    for name in config.agents.iter().chain(marked) {
        let description = if let Some(a) = catalog.agents.get(name) {
            a.spec.description.clone()
        } else if let Some(g) = catalog.groups.get(name) {
            g.description.clone()
        } else {
            return Err(UnknownAgent(name.clone()));
        };
        let exposed = Exposed {
            name: name.clone(),
            description,
        };
        agents.insert(name.clone(), exposed);
    }
    Ok(agents)
}

impl Mcp {
    /// The face of `core`, serving the agents `config` and the agents file
    /// name, until `shutdown` (which ends its sessions). The agents follow
    /// the agents file when it is reloaded.
    pub fn new(
        core: Orchestrator,
        config: &McpConfig,
        keys: Option<Arc<ApiKeys>>,
        shutdown: CancellationToken,
    ) -> Result<Arc<Self>, UnknownAgent> {
        let agents = exposed(&core.catalog(), config)?;
        let mut reloads = core.reloaded();
        let face = Arc::new(Self {
            core,
            agents: std::sync::RwLock::new(Arc::new(agents)),
            peers: std::sync::Mutex::default(),
            config: config.clone(),
            keys,
            approval_mode: config.approval_mode,
            allowed_hosts: config.allowed_hosts.clone(),
            shutdown,
        });
        let weak = Arc::downgrade(&face);
        tokio::spawn(async move {
            while reloads.changed().await.is_ok() {
                let Some(face) = weak.upgrade() else { return };
                face.reload().await;
            }
        });
        Ok(face)
    }

    /// Takes the reloaded agents file's exposure and tells every session
    /// that the tool list changed.
    async fn reload(&self) {
        match exposed(&self.core.catalog(), &self.config) {
            Ok(agents) => {
                *self.agents.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(agents);
            }
            // Checked before the reload was taken; kept as it was.
            Err(e) => {
                tracing::warn!(error = %e, "MCP tools not reloaded");
                return;
            }
        }
        let peers: Vec<_> = {
            let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
            peers.retain(|p| !p.is_transport_closed());
            peers.clone()
        };
        for peer in peers {
            if let Err(e) = peer.notify_tool_list_changed().await {
                tracing::debug!(error = %e, "a session was not told the tool list changed");
            }
        }
    }

    /// Remembers a session that said `initialized`, to tell it when the
    /// tool list changes.
    pub fn joined(&self, peer: rmcp::Peer<rmcp::RoleServer>) {
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        peers.retain(|p| !p.is_transport_closed());
        peers.push(peer);
    }

    /// The core.
    pub fn core(&self) -> &Orchestrator {
        &self.core
    }

    fn agents(&self) -> Arc<BTreeMap<String, Exposed>> {
        self.agents
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The exposed agent `name`.
    pub fn agent(&self, name: &str) -> Option<Exposed> {
        self.agents().get(name).cloned()
    }

    /// Every exposed agent as a tool, by name.
    pub fn tools(&self) -> Vec<Tool> {
        self.agents().values().map(tool).collect()
    }

    /// The approval mode of calls whose client cannot be asked.
    pub fn approval_mode(&self) -> McpApprovalMode {
        self.approval_mode
    }

    /// The `Host` names the endpoint answers (empty: any).
    pub fn allowed_hosts(&self) -> &[String] {
        &self.allowed_hosts
    }

    /// Cancelled when the server shuts down.
    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    /// Who calls: the tenant the request's API key names.
    pub fn caller(&self, headers: &HeaderMap) -> Result<Caller, HttpError> {
        crate::http::caller(self.keys.as_deref(), headers)
    }
}

/// The tool an agent is: its name, description and input schema.
pub fn tool(agent: &Exposed) -> Tool {
    let schema = json!({
        "type": "object",
        "properties": {
            "input": {
                "type": "string",
                "description": "what the agent is asked: its input text",
            },
            "context": {
                "type": "object",
                "description": "the run context: a JSON object every agent of the run reads",
            },
        },
        "required": ["input"],
    });
    let schema: JsonObject = match schema {
        serde_json::Value::Object(map) => map,
        _ => JsonObject::new(),
    };
    Tool::new(agent.name.clone(), agent.description.clone(), schema)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_is_named_and_described_after_its_agent_and_takes_input_and_context() {
        let t = tool(&Exposed {
            name: "assistant".into(),
            description: "Echoes what it is told.".into(),
        });
        assert_eq!(t.name, "assistant");
        assert_eq!(t.description.as_deref(), Some("Echoes what it is told."));
        let schema = serde_json::Value::Object((*t.input_schema).clone());
        assert_eq!(schema["required"], json!(["input"]));
        assert_eq!(schema["properties"]["input"]["type"], "string");
        assert_eq!(schema["properties"]["context"]["type"], "object");
    }
}
