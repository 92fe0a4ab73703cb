//! The servers of an agents file whose tools agents call: ToolHost servers
//! and MCP servers.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::models;

/// A ToolHost server and the tools it serves.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ToolServerSpec {
    /// Its address: `http://host:port` (or `https://`), or
    /// `dns:///host:port` to spread calls over every address of the name
    /// (every replica behind a headless Service).
    pub endpoint: String,
    /// The names of the tools agents may call on it.
    pub tools: Vec<String>,
    /// TLS towards it (an `https://` endpoint always speaks TLS, checked
    /// against the system's roots unless `ca_file` is set).
    #[serde(default)]
    pub tls: crate::client_tls::TlsClient,
}

/// An MCP server (Model Context Protocol) and the tools agents may call on
/// it: a stdio command (`command`, `args`, `env`, `cwd`) or a Streamable
/// HTTP endpoint (`url`, with `bearer_token_env` and `headers`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct McpServerSpec {
    /// The program of a stdio server (found on `PATH`).
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Variables set for it (beside the orchestrator's own environment).
    pub env: BTreeMap<String, String>,
    /// Its working directory (unset: the orchestrator's).
    pub cwd: Option<String>,
    /// The endpoint of a Streamable HTTP server, `http(s)://host:port/path`.
    pub url: String,
    /// The variable holding a bearer token sent to `url` (empty: none).
    pub bearer_token_env: String,
    /// Headers sent with every request to `url`.
    pub headers: BTreeMap<String, String>,
    /// The names of the server's tools agents may call (as the server
    /// names them, `[a-zA-Z0-9_-]{1,64}`).
    pub tools: Vec<String>,
    /// Deadline of starting (or reaching) the server and its handshake
    /// (default 30s).
    #[serde(deserialize_with = "models::opt_duration")]
    pub connect_timeout: Option<std::time::Duration>,
}
