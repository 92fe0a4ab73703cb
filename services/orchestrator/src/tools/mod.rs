//! Tools agents call. A tool gets a narrow [`ToolCtx`] (the store, the
//! run's ids, its events) to do its work and report progress and options, and ends with a [`ToolOutcome`]: a result, an error
//! the model sees, or a request for a person's input with a resume token
//! (the runtime asks, then calls the tool again with the token and answer).
//!
//! Built-ins ([`builtin`]): `read_context`, `write_context`, `list_context`
//! over the run's trace in the context store, `ask_user` (asks a person),
//! and `sleep` (waits with progress; it records being cancelled, which the
//! cancellation tests rely on). Remote tools ([`remote`]) run on `ToolHost`
//! servers in any language; MCP tools ([`mcp`]) on Model Context Protocol
//! servers. Agents and groups are tools too; the runtime runs
//! those in child contexts.
//!
//! The files: [`tool`] is the interface every kind implements; [`builtin`],
//! [`remote`] and [`mcp`] implement it; [`error`] says why a server cannot
//! be set up or reached; this file re-exports the interface and holds the
//! [`Toolbox`] built from the catalog. The built-in tools'
//! names are the catalog's ([`crate::catalog::builtin`]).

pub mod a2a;
pub mod builtin;
pub mod elicit;
pub mod error;
pub mod mcp;
pub mod remote;
pub mod tool;

use std::{collections::HashMap, sync::Arc};

pub use error::ToolServerError;
pub use tool::{Question, Resume, Tool, ToolCtx, ToolEvents, ToolOutcome};

/// Every tool the orchestrator can run by name: the built-ins and the tools
/// of the configured tool servers.
#[derive(Default)]
pub struct Toolbox {
    tools: HashMap<String, Arc<dyn Tool>>,
    servers: Vec<Arc<remote::ToolServer>>,
    mcp: Vec<Arc<mcp::McpServer>>,
    remote_agents: HashMap<String, Arc<a2a::RemoteAgent>>,
}

impl Toolbox {
    /// The built-ins plus the remote and MCP tools the catalog declares;
    /// `env` reads MCP servers' token variables.
    pub fn new(
        catalog: &crate::catalog::Catalog,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ToolServerError> {
        let mut tools: HashMap<String, Arc<dyn Tool>> = builtin::all()
            .into_iter()
            .map(|(n, t)| (n.to_owned(), t))
            .collect();
        let mut servers = Vec::new();
        for (name, spec) in &catalog.tool_servers {
            let server = Arc::new(remote::ToolServer::new(name, spec)?);
            for tool in &spec.tools {
                tools.insert(
                    tool.clone(),
                    Arc::new(remote::RemoteTool::new(server.clone(), tool)),
                );
            }
            servers.push(server);
        }
        let mut mcp = Vec::new();
        for (name, spec) in &catalog.mcp_servers {
            let server = Arc::new(mcp::McpServer::new(name, spec, env)?);
            for tool in &spec.tools {
                tools.insert(
                    tool.clone(),
                    Arc::new(mcp::McpTool::new(server.clone(), tool)),
                );
            }
            mcp.push(server);
        }
        let mut remote_agents = HashMap::new();
        for (name, spec) in &catalog.remote_agents {
            let agent = a2a::RemoteAgent::new(name, spec, env)?;
            remote_agents.insert(name.clone(), Arc::new(agent));
        }
        Ok(Self {
            tools,
            servers,
            mcp,
            remote_agents,
        })
    }

    /// The remote A2A agent called `name`.
    pub fn remote_agent(&self, name: &str) -> Option<&Arc<a2a::RemoteAgent>> {
        self.remote_agents.get(name)
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// Changes whenever a tool's description may have (a tool server
    /// listed its tools again); descriptions built from the toolbox are
    /// current while it stays the same.
    pub fn generation(&self) -> u64 {
        self.servers.iter().map(|s| s.generation()).sum::<u64>()
            + self.mcp.iter().map(|s| s.generation()).sum::<u64>()
    }

    /// The configured tool servers.
    pub fn servers(&self) -> &[Arc<remote::ToolServer>] {
        &self.servers
    }

    /// The configured MCP servers.
    pub fn mcp_servers(&self) -> &[Arc<mcp::McpServer>] {
        &self.mcp
    }
}
