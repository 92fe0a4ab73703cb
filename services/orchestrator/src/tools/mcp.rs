//! MCP tools: tools of Model Context Protocol servers, through the
//! official Rust SDK (`rmcp`).
//!
//! Servers are declared in the agents file (`mcp_servers`) with the tool
//! names agents may call, so references are checked at start and only
//! declared servers are ever reached. A server is a stdio command (started
//! by the orchestrator, its stderr copied to the log, killed when the
//! orchestrator stops) or a Streamable HTTP endpoint. The connection is made
//! in the background at start, and again by the next call after it broke;
//! descriptions and schemas come from `tools/list`, fetched on each
//! connection and again when the server sends `tools/list_changed`.
//!
//! A call is one `tools/call` request. Its `_meta` carries the call's
//! idempotency key (`baton/idempotency_key`, the same key a ToolHost call
//! carries: a call replayed by a resumed run has the same key) and the
//! W3C `traceparent` of the tool span; progress notifications become
//! `ToolProgress` events; an elicitation request the server sends while the
//! call runs is a question of the call (`InputRequested`, see [`elicit`]),
//! and the person's answer its result (the connection declares form
//! elicitation); a result with `isError` is a tool error; the
//! content blocks become the output text (text as it is, other blocks
//! named). Dropping the call (the run cancelled, the tool timeout) sends
//! `notifications/cancelled` for it. A server that cannot be reached is a
//! tool error the model sees, never a failed run.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use rmcp::{
    ClientHandler, ErrorData, RoleClient, ServiceExt,
    model::{
        CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientConfig,
        ClientRequest, ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationCapability,
        FormElicitationCapability, MetaObject, ProgressNotificationParam, ProgressToken, RequestId,
        RequestMetaObject, ServerResult,
    },
    service::{NotificationContext, Peer, PeerRequestOptions, RequestContext, RunningService},
    transport::{
        StreamableHttpClientTransport, TokioChildProcess,
        streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use super::{
    elicit,
    error::ToolServerError,
    tool::{Resume, Tool, ToolCtx, ToolOutcome},
};
use crate::catalog::McpServerSpec;

/// The `_meta` key of a call's idempotency key.
pub const IDEMPOTENCY_META_KEY: &str = "baton/idempotency_key";

/// What the connection's handler and the server share.
#[derive(Default)]
struct Shared {
    name: String,
    /// Tool descriptions and input schemas, by name.
    specs: RwLock<HashMap<String, (String, Value)>>,
    /// Bumped whenever the descriptions are fetched again.
    generation: AtomicU64,
    /// Where each running call's progress and questions go, by progress
    /// token.
    progress: Mutex<HashMap<ProgressToken, Route>>,
    /// Numbers the calls in the order they started.
    calls: AtomicU64,
}

/// A server's elicitation request, and where its result goes.
type Elicitation = (ElicitRequestParams, oneshot::Sender<ElicitResult>);

/// Where a running call's progress and questions go.
struct Route {
    /// The call's number on the connection.
    seq: u64,
    progress: mpsc::UnboundedSender<ProgressNotificationParam>,
    asks: mpsc::UnboundedSender<Elicitation>,
}

impl Shared {
    async fn list(&self, peer: &Peer<RoleClient>) -> Result<usize, ToolServerError> {
        let tools = peer
            .list_all_tools()
            .await
            .map_err(|source| ToolServerError::McpList {
                server: self.name.clone(),
                source,
            })?;
        let mut specs = HashMap::new();
        for t in tools {
            let t = serde_json::to_value(&t).unwrap_or_default();
            let Some(name) = t["name"].as_str() else {
                continue;
            };
            let description = t["description"].as_str().unwrap_or_default().to_owned();
            let schema = match &t["inputSchema"] {
                Value::Object(_) => t["inputSchema"].clone(),
                _ => json!({"type": "object"}),
            };
            specs.insert(name.to_owned(), (description, schema));
        }
        let n = specs.len();
        *self.specs.write().unwrap_or_else(|p| p.into_inner()) = specs;
        self.generation.fetch_add(1, Ordering::Release);
        Ok(n)
    }
}

/// The client side of one connection: routes progress to its call and
/// refreshes the tool list when the server says it changed.
struct Handler {
    shared: Arc<Shared>,
}

impl ClientHandler for Handler {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let route = self
            .shared
            .progress
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&params.progress_token)
            .map(|r| r.progress.clone());
        if let Some(tx) = route {
            let _ = tx.send(params);
        }
    }

    // The protocol does not say which call an elicitation request is for
    // (a server sends it while handling one, and over stdio nothing links
    // them): it is the call's when one call runs on the connection, the
    // earliest call's when several do.
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let asks = self
            .shared
            .progress
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .min_by_key(|r| r.seq)
            .map(|r| r.asks.clone());
        let Some(asks) = asks else {
            tracing::warn!(server = %self.shared.name, "MCP elicitation outside a tool call declined");
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        };
        let (tx, rx) = oneshot::channel();
        if asks.send((request, tx)).is_err() {
            return Ok(ElicitResult::new(ElicitationAction::Cancel));
        }
        // The call ended (or was dropped) before an answer: cancelled.
        Ok(rx
            .await
            .unwrap_or_else(|_| ElicitResult::new(ElicitationAction::Cancel)))
    }

    fn get_info(&self) -> ClientConfig {
        let mut config = ClientConfig::default();
        // Every call runs in a run whose person can answer (form mode:
        // Baton has no way to send a person to a URL).
        config.capabilities.elicitation =
            Some(ElicitationCapability::new().with_form(FormElicitationCapability::new()));
        config
    }

    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        let shared = self.shared.clone();
        let peer = context.peer.clone();
        // Not inline: the handler must not wait on its own connection.
        tokio::spawn(async move {
            match shared.list(&peer).await {
                Ok(n) => {
                    tracing::info!(server = %shared.name, tools = n, "MCP server's tools changed")
                }
                Err(e) => tracing::warn!(error = %e, "MCP tool list not refreshed"),
            }
        });
    }
}

type Connection = RunningService<RoleClient, Handler>;

/// One configured MCP server.
pub struct McpServer {
    spec: McpServerSpec,
    shared: Arc<Shared>,
    conn: tokio::sync::Mutex<Option<Connection>>,
    env: Vec<(String, String)>,
}

impl McpServer {
    /// A server not yet connected; `env` reads the bearer token variable.
    pub fn new(
        name: &str,
        spec: &McpServerSpec,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ToolServerError> {
        let mut vars = Vec::new();
        if !spec.bearer_token_env.is_empty() {
            let token = env(&spec.bearer_token_env)
                .filter(|t| !t.is_empty())
                .ok_or_else(|| ToolServerError::McpToken {
                    server: name.to_owned(),
                    variable: spec.bearer_token_env.clone(),
                })?;
            vars.push(("token".to_owned(), token));
        }
        Ok(Self {
            spec: spec.clone(),
            shared: Arc::new(Shared {
                name: name.to_owned(),
                ..Default::default()
            }),
            conn: tokio::sync::Mutex::new(None),
            env: vars,
        })
    }

    /// The server's name in the config.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// How many times the descriptions were fetched.
    pub fn generation(&self) -> u64 {
        self.shared.generation.load(Ordering::Acquire)
    }

    fn spec_of(&self, tool: &str) -> Option<(String, Value)> {
        self.shared
            .specs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(tool)
            .cloned()
    }

    /// The live connection's peer, connecting (and listing the tools)
    /// first when there is none or it broke.
    pub async fn peer(&self) -> Result<Peer<RoleClient>, ToolServerError> {
        let mut conn = self.conn.lock().await;
        if let Some(c) = conn.as_ref()
            && !c.is_closed()
        {
            return Ok(c.peer().clone());
        }
        let timeout = self.spec.connect_timeout.unwrap_or(Duration::from_secs(30));
        let c = tokio::time::timeout(timeout, self.connect())
            .await
            .map_err(|_| ToolServerError::McpHandshakeTimeout {
                server: self.name().to_owned(),
                timeout,
            })??;
        let peer = c.peer().clone();
        let n = tokio::time::timeout(timeout, self.shared.list(&peer))
            .await
            .map_err(|_| ToolServerError::McpListTimeout {
                server: self.name().to_owned(),
                timeout,
            })??;
        tracing::info!(server = %self.name(), tools = n, "MCP server connected and listed its tools");
        *conn = Some(c);
        Ok(peer)
    }

    async fn connect(&self) -> Result<Connection, ToolServerError> {
        let handler = Handler {
            shared: self.shared.clone(),
        };
        let name = self.name().to_owned();
        if !self.spec.command.is_empty() {
            let mut cmd = tokio::process::Command::new(&self.spec.command);
            cmd.args(&self.spec.args).envs(&self.spec.env);
            if let Some(dir) = &self.spec.cwd {
                cmd.current_dir(dir);
            }
            let (transport, stderr) = TokioChildProcess::builder(cmd)
                .stderr(std::process::Stdio::piped())
                .spawn()
                .map_err(|source| ToolServerError::McpSpawn {
                    server: name.clone(),
                    command: self.spec.command.clone(),
                    source,
                })?;
            if let Some(stderr) = stderr {
                let server = name.clone();
                tokio::spawn(async move {
                    use tokio::io::AsyncBufReadExt;
                    let mut lines = tokio::io::BufReader::new(stderr).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        tracing::info!(mcp_server = %server, "{line}");
                    }
                });
            }
            handler
                .serve(transport)
                .await
                .map_err(|source| ToolServerError::McpHandshake {
                    server: name,
                    source: Box::new(source),
                })
        } else {
            let mut config = StreamableHttpClientTransportConfig::with_uri(self.spec.url.as_str());
            if let Some((_, token)) = self.env.iter().find(|(k, _)| k == "token") {
                config.auth_header = Some(token.clone());
            }
            for (k, v) in &self.spec.headers {
                let (Ok(k), Ok(v)) = (
                    http::HeaderName::from_bytes(k.as_bytes()),
                    http::HeaderValue::from_str(v),
                ) else {
                    return Err(ToolServerError::McpHeader {
                        server: name,
                        header: k.clone(),
                    });
                };
                config.custom_headers.insert(k, v);
            }
            let transport = StreamableHttpClientTransport::with_client(
                reqwest::Client::builder()
                    .tcp_nodelay(true)
                    .build()
                    .map_err(|source| ToolServerError::McpHttpClient {
                        server: name.clone(),
                        source,
                    })?,
                config,
            );
            handler
                .serve(transport)
                .await
                .map_err(|source| ToolServerError::McpUrlHandshake {
                    server: name,
                    url: self.spec.url.clone(),
                    source: Box::new(source),
                })
        }
    }

    /// Connects in the background until it works or `stop` fires, so the
    /// tools are described before the first call.
    pub async fn connect_until_ok(&self, stop: tokio_util::sync::CancellationToken) {
        loop {
            match self.peer().await {
                Ok(_) => return,
                Err(e) => tracing::warn!(error = %e, "MCP server not reachable yet"),
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_secs(5)) => {}
            }
        }
    }

    /// Stops the connection (a stdio server's process ends with it).
    pub async fn close(&self) {
        if let Some(c) = self.conn.lock().await.take() {
            let _ = c.cancel().await;
        }
    }
}

/// Sends `notifications/cancelled` for a request dropped before its answer.
struct CancelOnDrop {
    peer: Peer<RoleClient>,
    id: Option<RequestId>,
    token: ProgressToken,
    shared: Arc<Shared>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.shared
            .progress
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.token);
        if let Some(id) = self.id.take()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            let peer = self.peer.clone();
            rt.spawn(async move {
                let _ = peer
                    .notify_cancelled(CancelledNotificationParam::new(
                        Some(id),
                        Some("the Baton run no longer needs this call".into()),
                    ))
                    .await;
            });
        }
    }
}

/// A tool of an MCP server.
pub struct McpTool {
    server: Arc<McpServer>,
    name: String,
}

impl McpTool {
    /// The tool `name` of `server`.
    pub fn new(server: Arc<McpServer>, name: &str) -> Self {
        Self {
            server,
            name: name.to_owned(),
        }
    }
}

/// The text of a result's content blocks: text as it is, other blocks named
/// (an image by its type and size, an embedded text resource by its text).
fn content_text(result: &Value) -> String {
    let mut parts = Vec::new();
    for block in result["content"].as_array().into_iter().flatten() {
        let part = match block["type"].as_str() {
            Some("text") => block["text"].as_str().unwrap_or_default().to_owned(),
            Some("resource") => match block["resource"]["text"].as_str() {
                Some(t) => t.to_owned(),
                None => format!(
                    "[resource {}]",
                    block["resource"]["uri"].as_str().unwrap_or("?")
                ),
            },
            Some("resource_link") => {
                format!("[resource link {}]", block["uri"].as_str().unwrap_or("?"))
            }
            Some(kind) => format!(
                "[{kind} {}, {} bytes of base64]",
                block["mimeType"].as_str().unwrap_or("?"),
                block["data"].as_str().map_or(0, str::len)
            ),
            None => block.to_string(),
        };
        parts.push(part);
    }
    if parts.is_empty()
        && let Some(s) = result.get("structuredContent")
    {
        return s.to_string();
    }
    parts.join("\n")
}

/// A progress notification as a `ToolProgress` event.
async fn report(ctx: &ToolCtx<'_>, p: ProgressNotificationParam) {
    let percent = match p.total {
        Some(total) if total > 0.0 => (p.progress / total * 100.0).clamp(0.0, 100.0) as u32,
        _ => 0,
    };
    let message = match (&p.message, p.total) {
        (Some(m), _) => m.clone(),
        (None, Some(total)) => format!("{} of {}", p.progress, total),
        (None, None) => format!("{}", p.progress),
    };
    ctx.progress(percent, message).await;
}

#[async_trait::async_trait]
impl Tool for McpTool {
    fn describe(&self) -> (String, Value) {
        self.server
            .spec_of(&self.name)
            .unwrap_or_else(|| (String::new(), json!({"type": "object"})))
    }

    async fn call(&self, ctx: &ToolCtx<'_>, args: &Value, _resume: Option<Resume>) -> ToolOutcome {
        let server = self.server.name().to_owned();
        let peer = match self.server.peer().await {
            Ok(p) => p,
            Err(e) => return ToolOutcome::Err(format!("{e} (the tool is unavailable)")),
        };
        let Value::Object(arguments) = args.clone() else {
            return ToolOutcome::Err("the arguments must be a JSON object".into());
        };
        let mut meta = MetaObject::new();
        meta.0.insert(
            IDEMPOTENCY_META_KEY.into(),
            json!(format!("{}/{}/{}", ctx.run_id, ctx.context_id, ctx.call_id)),
        );
        if let Some(traceparent) =
            baton_common::otel::traceparent(&opentelemetry::Context::current())
        {
            meta.set_traceparent(traceparent);
        }
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(
            CallToolRequestParams::new(self.name.clone()).with_arguments(arguments),
        ));
        let handle = match peer
            .send_cancellable_request(
                request,
                PeerRequestOptions::no_options().with_meta(RequestMetaObject(meta)),
            )
            .await
        {
            Ok(h) => h,
            Err(e) => return ToolOutcome::Err(format!("MCP server {server}: {e}")),
        };
        let (tx, mut progress) = mpsc::unbounded_channel();
        let (asks_tx, mut asks) = mpsc::unbounded_channel::<Elicitation>();
        let seq = self.server.shared.calls.fetch_add(1, Ordering::Relaxed);
        self.server
            .shared
            .progress
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                handle.progress_token.clone(),
                Route {
                    seq,
                    progress: tx,
                    asks: asks_tx,
                },
            );
        let mut guard = CancelOnDrop {
            peer: peer.clone(),
            id: Some(handle.id.clone()),
            token: handle.progress_token.clone(),
            shared: self.server.shared.clone(),
        };
        let answer = handle.await_response();
        tokio::pin!(answer);
        // The last (progress, total) reported.
        let mut last: Option<(f64, Option<f64>)> = None;
        // The question being asked, one at a time (the person answers them
        // in the order the server asked).
        let mut asking: Option<std::pin::Pin<Box<dyn Future<Output = ()> + Send + '_>>> = None;
        let answer = loop {
            tokio::select! {
                biased;
                Some(p) = progress.recv() => {
                    last = Some((p.progress, p.total));
                    report(ctx, p).await;
                }
                () = async { asking.as_mut().expect("asking").await }, if asking.is_some() => {
                    asking = None;
                }
                Some((params, reply)) = asks.recv(), if asking.is_none() => {
                    asking = Some(Box::pin(elicit::ask(ctx, params, reply)));
                }
                a = &mut answer => break a,
            }
        };
        drop(asking);
        // rmcp handles notifications on tasks of their own, so progress the
        // server sent before its answer may still be on its way: take what
        // is there, and wait a little for the rest of a count that had not
        // reached its total.
        let grace = tokio::time::Instant::now() + Duration::from_millis(50);
        loop {
            tokio::task::yield_now().await;
            let next = match progress.try_recv() {
                Ok(p) => Some(p),
                Err(_) if matches!(last, Some((done, Some(total))) if done < total) => {
                    tokio::time::timeout_at(grace, progress.recv())
                        .await
                        .ok()
                        .flatten()
                }
                Err(_) => None,
            };
            let Some(p) = next else { break };
            last = Some((p.progress, p.total));
            report(ctx, p).await;
        }
        guard.id = None;
        drop(guard);
        match answer {
            Ok(ServerResult::CallToolResult(result)) => {
                let result = serde_json::to_value(&result).unwrap_or_default();
                let text = content_text(&result);
                if result["isError"].as_bool() == Some(true) {
                    ToolOutcome::Err(text)
                } else {
                    ToolOutcome::Ok(text)
                }
            }
            Ok(other) => ToolOutcome::Err(format!(
                "MCP server {server} answered tools/call with something else: {}",
                serde_json::to_string(&other).unwrap_or_default()
            )),
            Err(e) => ToolOutcome::Err(format!("MCP server {server}: {e}")),
        }
    }
}
