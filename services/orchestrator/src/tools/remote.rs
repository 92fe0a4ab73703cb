//! Remote tools: tools served by `ToolHost` servers in any language.
//!
//! Servers and the tool names each serves are declared in the agents file,
//! so agents' references are checked at start and the orchestrator can start
//! before its tool servers. Descriptions and argument schemas come from the
//! server's `ListTools`, fetched in the background at start and again
//! whenever a call finds them missing. Only servers from the config are ever
//! called; callers cannot supply endpoints.
//!
//! A call is one `Execute` stream: progress and options become ToolProgress
//! and ToolOptions events; `input_required` asks a person and calls
//! `Execute` again with the resume token and the answer. Cancelling the run
//! drops the stream, which cancels the call on the server.

use std::{
    collections::HashMap,
    sync::{Arc, RwLock},
    time::Duration,
};

use baton_proto::v1::{self as pb, execute_response::Event, tool_host_client::ToolHostClient};
use serde_json::{Value, json};
use tonic::transport::Channel;

use super::{
    error::ToolServerError,
    tool::{Resume, Tool, ToolCtx, ToolOutcome},
};
use crate::catalog::ToolServerSpec;

/// One configured ToolHost server.
pub struct ToolServer {
    name: String,
    endpoint: String,
    client: ToolHostClient<Channel>,
    specs: RwLock<HashMap<String, (String, Value)>>,
    /// Bumped whenever the descriptions are fetched again.
    generation: std::sync::atomic::AtomicU64,
}

impl ToolServer {
    /// What a call that failed with `e` says: the server, its address, the
    /// code and message, and what to check when nothing answered there.
    /// `Cancelled` is one of those: a run's own cancellation drops the call
    /// and never reads a status, so a `Cancelled` read here is the
    /// connection closing under the call (the server went down with a
    /// connection still open to it).
    fn failure(&self, e: &tonic::Status) -> String {
        let (name, endpoint) = (&self.name, &self.endpoint);
        let mut message = format!(
            "tool server {name} at {endpoint} failed: {} ({:?})",
            e.message(),
            e.code()
        );
        if matches!(
            e.code(),
            tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
        ) {
            message.push_str(&format!(
                "; check that it is running and reachable at {endpoint} (tool_servers.{name}.endpoint in the agents file)"
            ));
        }
        message
    }

    /// A server connected lazily (and re-connected by itself).
    pub fn new(name: &str, spec: &ToolServerSpec) -> Result<Self, ToolServerError> {
        // `http://host:port`, or `dns:///host:port` to spread calls over
        // every replica of a tool server.
        let channel = baton_client::balance::lazy_channel_tls(&spec.endpoint, &spec.tls.client())
            .map_err(|source| ToolServerError::Endpoint {
            server: name.to_owned(),
            source,
        })?;
        Ok(Self {
            name: name.to_owned(),
            endpoint: spec.endpoint.clone(),
            client: ToolHostClient::new(channel),
            specs: RwLock::new(HashMap::new()),
            generation: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// The server's name in the config.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Fetches the server's tool descriptions.
    pub async fn refresh(&self) -> Result<usize, ToolServerError> {
        let list = self
            .client
            .clone()
            .list_tools(pb::ListToolsRequest {})
            .await
            .map_err(|status| ToolServerError::List {
                server: self.name.clone(),
                endpoint: self.endpoint.clone(),
                status,
            })?
            .into_inner();
        let mut specs = HashMap::new();
        for t in list.tools {
            let schema = serde_json::from_str(&t.parameters_json_schema)
                .unwrap_or_else(|_| json!({"type": "object"}));
            specs.insert(t.name, (t.description, schema));
        }
        let n = specs.len();
        *self.specs.write().unwrap_or_else(|p| p.into_inner()) = specs;
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::Release);
        Ok(n)
    }

    /// How many times the descriptions were fetched (what the model is told
    /// about this server's tools changes only then).
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    fn spec(&self, tool: &str) -> Option<(String, Value)> {
        self.specs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(tool)
            .cloned()
    }

    /// Keeps trying to fetch the descriptions until it works or `stop` fires.
    pub async fn refresh_until_ok(&self, stop: tokio_util::sync::CancellationToken) {
        loop {
            match self.refresh().await {
                Ok(n) => {
                    tracing::info!(server = %self.name, tools = n, "tool server listed its tools");
                    return;
                }
                Err(e) => tracing::warn!(error = %e, "tool server not reachable yet"),
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_secs(5)) => {}
            }
        }
    }
}

/// A tool of a ToolHost server.
pub struct RemoteTool {
    server: Arc<ToolServer>,
    name: String,
}

impl RemoteTool {
    /// The tool `name` of `server`.
    pub fn new(server: Arc<ToolServer>, name: &str) -> Self {
        Self {
            server,
            name: name.to_owned(),
        }
    }
}

#[async_trait::async_trait]
impl Tool for RemoteTool {
    fn describe(&self) -> (String, Value) {
        self.server
            .spec(&self.name)
            .unwrap_or_else(|| (String::new(), json!({"type": "object"})))
    }

    async fn call(&self, ctx: &ToolCtx<'_>, args: &Value, resume: Option<Resume>) -> ToolOutcome {
        if self.server.spec(&self.name).is_none() {
            // Descriptions missing (the server was away at start): try now,
            // but a failure here is the call's failure below anyway.
            let _ = self.server.refresh().await;
        }
        let (resume_token, input) = resume.map(|r| (r.token, r.input)).unwrap_or_default();
        let request = pb::ExecuteRequest {
            idempotency_key: format!("{}/{}/{}", ctx.run_id, ctx.context_id, ctx.call_id),
            tool: self.name.clone(),
            call_id: ctx.call_id.to_owned(),
            arguments_json: args.to_string(),
            context: Some(pb::ToolCallContext {
                trace_id: ctx.scope.trace_id.to_string(),
                run_id: ctx.run_id.to_owned(),
                context_id: ctx.context_id.to_owned(),
                depth: ctx.depth,
                agent: ctx.agent.to_string(),
            }),
            resume_token,
            input,
        };
        let unavailable = |e: tonic::Status| ToolOutcome::Err(self.server.failure(&e));
        // The call carries the tool span as W3C traceparent, so the tool
        // server's spans join the run's trace.
        let mut request = tonic::Request::new(request);
        baton_common::otel::inject(&opentelemetry::Context::current(), request.metadata_mut());
        let mut stream = match self.server.client.clone().execute(request).await {
            Ok(r) => r.into_inner(),
            Err(e) => return unavailable(e),
        };
        loop {
            match stream.message().await {
                Ok(Some(pb::ExecuteResponse { event: Some(event) })) => match event {
                    Event::Progress(p) => ctx.progress(p.percent, p.message).await,
                    Event::Options(o) => ctx.options(o.question, o.options).await,
                    Event::InputRequired(i) => {
                        return ToolOutcome::NeedInput {
                            prompt: i.prompt,
                            options: i.options,
                            resume_token: i.resume_token,
                        };
                    }
                    Event::Result(r) => return ToolOutcome::Ok(r.output),
                    Event::Error(e) => return ToolOutcome::Err(e.message),
                },
                Ok(Some(pb::ExecuteResponse { event: None })) => {}
                Ok(None) => {
                    return ToolOutcome::Err(format!(
                        "tool server {} ended the call without a result",
                        self.server.name
                    ));
                }
                Err(e) => return unavailable(e),
            }
        }
    }
}
