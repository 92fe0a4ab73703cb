//! `rmcp`'s `ServerHandler` over the face: one per session, each a handle
//! on the same [`Mcp`]. It serves tools only: `tools/list` and
//! `tools/call`, on the protocol revisions of [`VERSIONS`].

use std::{borrow::Cow, sync::Arc};

use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
        PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig,
    },
    service::RequestContext,
};

use super::{
    call::{Client, Request, call},
    error::McpError,
    face::Mcp,
    progress::Progress,
};
use crate::app::Caller;

/// The protocol revisions served, oldest first: the newest `rmcp` speaks,
/// 2026-07-28 (`server/discover`, no handshake, no sessions; questions in
/// rounds), and the two before it with an `initialize` handshake (which
/// negotiates 2025-11-25, or 2025-06-18 when the client asks for it).
pub const VERSIONS: [ProtocolVersion; 3] = [
    ProtocolVersion::V_2025_06_18,
    ProtocolVersion::V_2025_11_25,
    ProtocolVersion::V_2026_07_28,
];

/// The face's handler of one session.
#[derive(Clone)]
pub struct Handler {
    face: Arc<Mcp>,
}

impl Handler {
    /// A handler of `face`.
    pub fn new(face: Arc<Mcp>) -> Self {
        Self { face }
    }
}

/// The caller the authentication layer put in the HTTP request.
fn caller_of(context: &RequestContext<RoleServer>) -> Result<Caller, McpError> {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Caller>())
        .cloned()
        .ok_or(McpError::NoCaller)
}

impl ServerHandler for Handler {
    fn get_info(&self) -> ServerConfig {
        // The tool list follows the agents file (tools/list_changed).
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_protocol_version(ProtocolVersion::V_2026_07_28)
        .with_server_info(Implementation::new("baton", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "Each tool is a Baton agent: call it with `input` (and optionally a `context` object); \
                 the result is the agent's answer, with the run's runId and traceId in _meta.",
        )
    }

    async fn on_initialized(&self, context: rmcp::service::NotificationContext<RoleServer>) {
        self.face.joined(context.peer);
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Owned(VERSIONS.to_vec())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        caller_of(&context).map_err(|_| no_caller())?;
        Ok(ListToolsResult::with_all_items(self.face.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let answered = async {
            let caller = caller_of(&context)?;
            let agent = self
                .face
                .agent(&request.name)
                .ok_or_else(|| McpError::UnknownTool(request.name.to_string()))?;
            let client = Client {
                peer: context.peer.clone(),
                progress: Progress::new(context.peer.clone(), context.meta.get_progress_token()),
                elicits: elicits(&context),
                rounds: context
                    .protocol_version()
                    .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str()),
                cancelled: context.ct.clone(),
            };
            let request = Request {
                arguments: request.arguments,
                input_responses: request.input_responses,
                request_state: request.request_state,
            };
            call(&self.face, &caller, &agent.name, request, client).await
        }
        .await;
        answered.or_else(|e| e.into_result().map(CallToolResponse::from))
    }
}

/// Whether the client answers elicitation requests in form mode: the
/// capabilities of its session, or on 2026-07-28 those its request
/// declares (a declaration without modes means form).
fn elicits(context: &RequestContext<RoleServer>) -> bool {
    context
        .client_capabilities()
        .and_then(|c| c.elicitation)
        .is_some_and(|e| e.form.is_some() || e.url.is_none())
}

fn no_caller() -> ErrorData {
    ErrorData::internal_error("the request has no caller", None)
}
