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

pub mod builtin;
pub mod mcp;
pub mod names;
pub mod remote;

use std::{
    collections::HashMap,
    sync::{Arc, atomic::AtomicUsize},
};

use baton_proto::v1::{self as pb, run_event::Payload};
use serde_json::Value;

use baton_store::{ContextStore, Scope};

/// How a tool call ended.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolOutcome {
    /// Success: the output the model sees.
    Ok(String),
    /// Failure: the error the model sees.
    Err(String),
    /// The tool needs a person's answer to go on.
    NeedInput {
        /// What to ask.
        prompt: String,
        /// Suggested answers.
        options: Vec<String>,
        /// Handed back with the answer.
        resume_token: String,
    },
}

/// An answer to a tool's earlier [`ToolOutcome::NeedInput`].
#[derive(Debug, Clone)]
pub struct Resume {
    /// The token the tool gave.
    pub token: String,
    /// The person's answer.
    pub input: String,
}

/// Where a running tool's events go: into the run's stream, tagged with
/// the calling agent's context (the runtime implements it).
#[async_trait::async_trait]
pub trait ToolEvents: Send + Sync {
    /// Sends an event of the call.
    async fn emit(&self, payload: Payload);
}

/// What a running tool can see and do: the run's store and ids, and its
/// events. Narrow on purpose: a tool cannot reach the run's other parts.
pub struct ToolCtx<'a> {
    /// The context store.
    pub store: &'a Arc<dyn ContextStore>,
    /// The run's tenant and trace: the tool's slots are this trace's, in
    /// that tenant's namespace.
    pub scope: &'a Scope,
    /// The run's id.
    pub run_id: &'a str,
    /// The calling agent's context id.
    pub context_id: &'a str,
    /// That context's depth (root is 0).
    pub depth: u32,
    /// The calling agent.
    pub agent: &'a str,
    /// The call's id.
    pub call_id: &'a str,
    /// The tool's name.
    pub tool: &'a str,
    /// Where the call's events go.
    pub events: &'a dyn ToolEvents,
    /// The run's count of tool calls cancelled while they ran (`sleep`
    /// counts itself; the cancellation tests read it).
    pub cancelled_calls: &'a AtomicUsize,
}

impl ToolCtx<'_> {
    /// Sends an event of the call (waits while the client is slow).
    pub async fn emit(&self, payload: Payload) {
        self.events.emit(payload).await;
    }

    /// Reports progress (percent is clamped to 0–100).
    pub async fn progress(&self, percent: u32, message: impl Into<String>) {
        let payload = Payload::ToolProgress(pb::ToolProgress {
            call_id: self.call_id.to_owned(),
            tool: self.tool.to_owned(),
            percent: percent.min(100),
            message: message.into(),
        });
        self.emit(payload).await;
    }

    /// Offers options.
    pub async fn options(&self, question: impl Into<String>, options: Vec<String>) {
        let payload = Payload::ToolOptions(pb::ToolOptions {
            call_id: self.call_id.to_owned(),
            tool: self.tool.to_owned(),
            question: question.into(),
            options,
        });
        self.emit(payload).await;
    }
}

/// A tool.
#[async_trait::async_trait]
pub trait Tool: Send + Sync {
    /// What the model is told about it: description and argument schema.
    fn describe(&self) -> (String, Value);

    /// Runs one call (again, with `resume`, after it asked for input).
    async fn call(&self, ctx: &ToolCtx<'_>, args: &Value, resume: Option<Resume>) -> ToolOutcome;
}

/// Every tool the orchestrator can run by name: the built-ins and the tools
/// of the configured tool servers.
#[derive(Default)]
pub struct Toolbox {
    tools: HashMap<String, Arc<dyn Tool>>,
    servers: Vec<Arc<remote::ToolServer>>,
    mcp: Vec<Arc<mcp::McpServer>>,
}

impl Toolbox {
    /// The built-ins plus the remote and MCP tools the catalog declares;
    /// `env` reads MCP servers' token variables.
    pub fn new(
        catalog: &crate::catalog::Catalog,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, String> {
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
        Ok(Self {
            tools,
            servers,
            mcp,
        })
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
