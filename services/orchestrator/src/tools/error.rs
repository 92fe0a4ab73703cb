//! Why a tool server (ToolHost or MCP) cannot be set up at start, listed
//! or connected: [`ToolServerError`]. At start it stops the orchestrator
//! (a bad endpoint, a missing token); later it is logged while the server
//! is retried, or becomes the error text the model reads for a call that
//! could not reach its server.
//!
//! The MCP client's handshake error is boxed: it can hold a whole server
//! message, and would make every `Result` of this type that large.

use std::time::Duration;

/// Why a tool server cannot be set up, listed or connected; the message
/// names the server (or its field in the agents file).
#[derive(Debug, thiserror::Error)]
pub enum ToolServerError {
    /// A ToolHost server's endpoint makes no channel.
    #[error("tool_servers.{server}.endpoint: {source}")]
    Endpoint {
        /// The server.
        server: String,
        /// What the client said.
        source: baton_client::Error,
    },
    /// A ToolHost server did not list its tools.
    #[error("tool server {server} ({endpoint}): {}", status.message())]
    List {
        /// The server.
        server: String,
        /// Its endpoint.
        endpoint: String,
        /// What it (or the channel) answered.
        status: tonic::Status,
    },
    /// A remote A2A agent cannot be set up (its key, its TLS files).
    #[error("remote_agents.{agent}: {problem}")]
    RemoteAgent {
        /// The agent.
        agent: String,
        /// What is wrong.
        problem: String,
    },
    /// An MCP server's bearer token variable is not set.
    #[error("mcp_servers.{server}.bearer_token_env: {variable} is not set")]
    McpToken {
        /// The server.
        server: String,
        /// The variable.
        variable: String,
    },
    /// An MCP server's `tools/list` failed.
    #[error("MCP server {server}: tools/list: {source}")]
    McpList {
        /// The server.
        server: String,
        /// What the client said.
        source: rmcp::ServiceError,
    },
    /// An MCP server did not complete the handshake in time.
    #[error("MCP server {server}: no handshake within {timeout:?}")]
    McpHandshakeTimeout {
        /// The server.
        server: String,
        /// The server's `connect_timeout`.
        timeout: Duration,
    },
    /// An MCP server did not list its tools in time.
    #[error("MCP server {server}: tools/list took over {timeout:?}")]
    McpListTimeout {
        /// The server.
        server: String,
        /// The server's `connect_timeout`.
        timeout: Duration,
    },
    /// A stdio MCP server's command cannot be started.
    #[error("MCP server {server}: cannot start {command:?}: {source}")]
    McpSpawn {
        /// The server.
        server: String,
        /// Its command.
        command: String,
        /// Why.
        source: std::io::Error,
    },
    /// A stdio MCP server failed the handshake.
    #[error("MCP server {server}: handshake failed: {source}")]
    McpHandshake {
        /// The server.
        server: String,
        /// What the client said.
        source: Box<rmcp::service::ClientInitializeError>,
    },
    /// A header of an HTTP MCP server is not a valid HTTP header.
    #[error("MCP server {server}: header {header:?} is not valid")]
    McpHeader {
        /// The server.
        server: String,
        /// The header's name.
        header: String,
    },
    /// The HTTP client of an MCP server cannot be built.
    #[error("MCP server {server}: HTTP client: {source}")]
    McpHttpClient {
        /// The server.
        server: String,
        /// What reqwest said.
        source: reqwest::Error,
    },
    /// An HTTP MCP server failed the handshake (the message holds the
    /// whole cause chain: which connection or TLS error it was).
    #[error(
        "MCP server {server} ({url}): handshake failed: {}",
        baton_client::cause_chain(source.as_ref())
    )]
    McpUrlHandshake {
        /// The server.
        server: String,
        /// Its URL.
        url: String,
        /// What the client said.
        source: Box<rmcp::service::ClientInitializeError>,
    },
}
