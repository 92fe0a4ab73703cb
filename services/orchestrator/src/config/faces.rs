//! The config sections of the faces beside gRPC: the web console, the A2A
//! face and the MCP face (what each serves, and to whom).

use serde::{Deserialize, Serialize};

/// The `console` section of the config.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConsoleConfig {
    /// Where a trace id links, with `{trace_id}` in it (e.g.
    /// `https://jaeger.example/trace/{trace_id}`); empty: no link.
    pub trace_url: String,
}

/// The `a2a` section of the config: the agents served as A2A agents (none
/// unless named here or marked `a2a: true` in the agents file) and the
/// address their cards give out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct A2aConfig {
    /// Agents (or groups) of the agents file served over A2A, beside those
    /// the agents file marks `a2a: true`.
    pub agents: Vec<String>,
    /// The agent whose card `/.well-known/agent-card.json` serves (empty:
    /// the only exposed agent, if there is just one).
    pub default_agent: String,
    /// The base URL clients reach this port at (`https://baton.example`),
    /// which the cards' interface URLs start with; empty: taken from each
    /// request's `Host` (behind a proxy, set it).
    pub public_url: String,
    /// The gRPC address the cards give for the gRPC binding (`host:port`);
    /// empty: the public URL's host and port.
    pub grpc_address: String,
}

/// The `mcp` section of the config: the agents served as MCP tools at
/// `/mcp` (none unless named here or marked `mcp: true` in the agents
/// file), and what a call does with approvals its client cannot be asked.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct McpConfig {
    /// Agents (or groups) of the agents file served as MCP tools, beside
    /// those the agents file marks `mcp: true`.
    pub agents: Vec<String>,
    /// The approval mode of calls whose client did not declare the
    /// elicitation capability (a client that did is asked).
    pub approval_mode: McpApprovalMode,
    /// The `Host` names (`host` or `host:port`) the endpoint answers
    /// (DNS-rebinding protection); empty: any.
    pub allowed_hosts: Vec<String>,
}

/// What happens to an approval in a call whose client cannot be asked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum McpApprovalMode {
    /// Denied at once (the model sees the denial).
    #[default]
    AutoDeny,
    /// Granted at once.
    AutoApprove,
    /// Asked like any run's: a person answers through another face (CLI,
    /// console, gRPC, HTTP) before the approval's deadline.
    Ask,
}
