//! Why an agents file is refused: [`CatalogError`], whose message names
//! the YAML path at fault (`agents.a.tools`, `mcp_servers.m.url`) so the
//! author can find it. The leaves' own errors ([`ModelRefError`],
//! [`ProviderError`], [`ScriptError`], [`InvalidSetting`],
//! [`PolicyError`]) are wrapped with the path they were found at.

use super::{
    models::{ProviderError, ScriptError},
    names::ModelRefError,
    policy::PolicyError,
    settings::InvalidSetting,
};

/// Why an agents file is refused: the first problem found, its message
/// naming the path.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// The text is not YAML of an agents file (a syntax error, an unknown
    /// field, a value of the wrong type).
    #[error("agents file: {0}")]
    Yaml(#[source] serde_norway::Error),
    /// A price, or the prices file, is refused (the message names the
    /// field).
    #[error("{0}")]
    Prices(String),
    /// An agent's budget or fallbacks are wrong (the message names the
    /// field).
    #[error("{0}")]
    Budget(String),

    /// An agent's live scoring is refused (the message names the field).
    #[error("{0}")]
    Scoring(String),
    /// A scripted turn is incoherent.
    #[error("scripts.{script}[{turn}]: {source}")]
    Script {
        /// The script.
        script: String,
        /// The turn's index.
        turn: usize,
        /// What is wrong with it.
        source: ScriptError,
    },
    /// An entry of `providers` is refused.
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// A model reference is not `provider:model`.
    #[error("{field}: {source}")]
    ModelRef {
        /// Where it is (`default_model`, `agents.a.model`).
        field: String,
        /// What is wrong with it.
        source: ModelRefError,
    },
    /// A `scripted:` model names no script of the file.
    #[error("{field}: no script named {script:?} in scripts")]
    NoScript {
        /// Where the reference is.
        field: String,
        /// The script it names.
        script: String,
    },
    /// A model reference names a provider the file does not configure.
    #[error("{field}: {reference:?}: unknown provider {provider:?} (known: {known})")]
    UnknownProvider {
        /// Where the reference is.
        field: String,
        /// The reference.
        reference: String,
        /// The provider it names.
        provider: String,
        /// The providers it may name, comma-separated.
        known: String,
    },
    /// An agent or group name is not `[a-z0-9_-]{1,64}`.
    #[error("{0:?}: agent and group names match [a-z0-9_-]{{1,64}}")]
    AgentName(String),
    /// An agent or group takes a built-in tool's name.
    #[error("{0:?}: the name of a built-in tool")]
    BuiltinName(String),
    /// A name is both an agent's and a group's.
    #[error("{0:?} is both an agent and a group")]
    AgentAndGroup(String),
    /// A tool or MCP server's name is not `[a-z0-9_-]{1,64}`.
    #[error("{section}.{server}: server names match [a-z0-9_-]{{1,64}}")]
    ServerName {
        /// `tool_servers` or `mcp_servers`.
        section: &'static str,
        /// The server.
        server: String,
    },
    /// A tool server's endpoint has none of the schemes clients take.
    #[error(
        "tool_servers.{server}.endpoint: {endpoint:?} is not http(s)://host:port or dns:///host:port"
    )]
    ToolServerScheme {
        /// The server.
        server: String,
        /// Its endpoint.
        endpoint: String,
    },
    /// A tool server's endpoint is not a target clients take.
    #[error("tool_servers.{server}.endpoint: {source}")]
    ToolServerEndpoint {
        /// The server.
        server: String,
        /// What is wrong with it.
        source: baton_client::balance::TargetError,
    },
    /// A tool server's tool takes a name already taken, or no name.
    #[error("tool_servers.{server}.tools: {tool:?} is not a free tool name")]
    ToolServerTool {
        /// The server.
        server: String,
        /// The tool.
        tool: String,
    },
    /// An MCP server with both or neither of `command` and `url`.
    #[error(
        "mcp_servers.{0}: set exactly one of command (a stdio server) and url (a Streamable HTTP server)"
    )]
    McpCommandOrUrl(String),
    /// An MCP server's `url` is not an http(s) URL.
    #[error("mcp_servers.{server}.url: {url:?} is not an http(s) URL")]
    McpUrl {
        /// The server.
        server: String,
        /// Its URL.
        url: String,
    },
    /// A stdio MCP server with `headers` or `bearer_token_env`.
    #[error("mcp_servers.{0}: headers and bearer_token_env are for url servers")]
    McpHeaders(String),
    /// An MCP server that lists no tools.
    #[error("mcp_servers.{0}.tools: list the tools agents may call")]
    McpNoTools(String),
    /// An MCP server's tool takes a name already taken, or no name.
    #[error(
        "mcp_servers.{server}.tools: {tool:?} is not a free tool name ([a-zA-Z0-9_-]{{1,64}}, not taken by another tool)"
    )]
    McpTool {
        /// The server.
        server: String,
        /// The tool.
        tool: String,
    },
    /// A generation setting of an agent.
    #[error(transparent)]
    Settings(#[from] InvalidSetting),
    /// A remote A2A agent's entry is wrong.
    #[error("remote_agents.{agent}: {problem}")]
    RemoteAgent {
        /// The entry.
        agent: String,
        /// What is wrong.
        problem: String,
    },
    /// A list names a tool that is none of the built-ins, agents, groups
    /// or servers' tools.
    #[error("{field}: unknown tool {tool:?}")]
    UnknownTool {
        /// The list (`agents.a.tools`, `policies.p.tools`).
        field: String,
        /// The tool.
        tool: String,
    },
    /// A list names an agent the file does not declare.
    #[error("{field}: unknown agent {agent:?}")]
    UnknownAgent {
        /// The list (`agents.a.handoffs`, `groups.g.members`).
        field: String,
        /// The agent.
        agent: String,
    },
    /// An agent hands off to itself.
    #[error("agents.{0}.handoffs: an agent cannot hand off to itself")]
    SelfHandoff(String),
    /// An agent's `approvals` names a tool the agent cannot call.
    #[error("agents.{agent}.approvals: {tool:?} is not one of its tools")]
    ApprovalOfNoTool {
        /// The agent.
        agent: String,
        /// The tool.
        tool: String,
    },
    /// A declared policy is refused.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// A list names a policy the file does not declare.
    #[error("{field}: unknown policy {policy:?}")]
    UnknownPolicy {
        /// The list (`run_policies`, `agents.a.policies`).
        field: String,
        /// The policy.
        policy: String,
    },
    /// A group's root is not one of its members.
    #[error("groups.{group}.root: {root:?} is not in members")]
    RootNotMember {
        /// The group.
        group: String,
        /// Its root.
        root: String,
    },
}
