//! Remote A2A agents (`remote_agents` in the agents file): agents of other
//! frameworks, reached over the Agent2Agent protocol, that Baton agents
//! list under `tools` and call like one of their own (see
//! `crate::tools::a2a` and `crate::agent::remote`).

use std::{path::PathBuf, time::Duration};

use serde::Deserialize;

use super::{error::CatalogError, models, names::valid_name};

/// One remote A2A agent.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RemoteAgentSpec {
    /// Its card: `http(s)://…/agent-card.json`, or the agent's base URL
    /// (`/.well-known/agent-card.json` is added).
    pub card_url: String,
    /// What it does, as the calling agent's model reads it (empty: the
    /// card's description is not fetched for this; say it here).
    pub description: String,
    /// The variable holding the API key or bearer token sent as
    /// `Authorization: Bearer` (empty: none).
    pub api_key_env: String,
    /// A file holding it instead.
    pub api_key_file: PathBuf,
    /// The binding to use: empty (the first of the card's that Baton
    /// speaks), `JSONRPC` or `HTTP+JSON`.
    pub binding: String,
    /// TLS to the agent: a CA to trust, a client certificate.
    pub tls: crate::client_tls::TlsClient,
    /// Deadline of connecting and of each wait for data (default 60s).
    #[serde(deserialize_with = "models::opt_duration")]
    pub timeout: Option<Duration>,
}

/// The bindings Baton's A2A client speaks.
pub const BINDINGS: [&str; 2] = ["JSONRPC", "HTTP+JSON"];

impl RemoteAgentSpec {
    /// Checks the entry `remote_agents.{name}`.
    pub fn validate(&self, name: &str) -> Result<(), CatalogError> {
        let problem = |problem: String| CatalogError::RemoteAgent {
            agent: name.to_owned(),
            problem,
        };
        if !valid_name(name) {
            return Err(CatalogError::AgentName(name.to_owned()));
        }
        let url_ok = (self.card_url.starts_with("http://")
            || self.card_url.starts_with("https://"))
            && reqwest::Url::parse(&self.card_url).is_ok();
        if !url_ok {
            return Err(problem(format!(
                "card_url: {:?} is not an http(s) URL",
                self.card_url
            )));
        }
        if !self.api_key_env.is_empty() && !self.api_key_file.as_os_str().is_empty() {
            return Err(problem(
                "api_key_env and api_key_file: give one or the other".into(),
            ));
        }
        if !self.binding.is_empty() && !BINDINGS.contains(&self.binding.as_str()) {
            return Err(problem(format!(
                "binding: {:?} is not one Baton speaks ({})",
                self.binding,
                BINDINGS.join(", ")
            )));
        }
        Ok(())
    }

    /// Where its card is.
    pub fn card_location(&self) -> String {
        if self.card_url.ends_with(".json") {
            self.card_url.clone()
        } else {
            format!(
                "{}/.well-known/agent-card.json",
                self.card_url.trim_end_matches('/')
            )
        }
    }
}
