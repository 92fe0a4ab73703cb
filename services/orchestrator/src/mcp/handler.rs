//! `rmcp`'s `ServerHandler` over the face: one per session, each a handle
//! on the same [`Mcp`]. It serves tools only: `tools/list` and
//! `tools/call`; the protocol revisions it negotiates with `initialize`
//! are [`VERSIONS`].

use std::{borrow::Cow, sync::Arc};

use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
        PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig,
    },
    service::{ElicitationMode, RequestContext},
};

use super::{
    call::{Client, call},
    error::McpError,
    face::Mcp,
    progress::Progress,
};
use crate::app::Caller;

/// The protocol revisions served, oldest first: the newest `rmcp` speaks
/// with an `initialize` handshake, and the one before it. (2026-07-28,
/// which `rmcp` also knows, has no handshake and forbids the server's
/// elicitation requests this face asks questions with.)
pub const VERSIONS: [ProtocolVersion; 2] =
    [ProtocolVersion::V_2025_06_18, ProtocolVersion::V_2025_11_25];

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
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
            .with_server_info(Implementation::new("baton", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Each tool is a Baton agent: call it with `input` (and optionally a `context` object); \
                 the result is the agent's answer, with the run's runId and traceId in _meta.",
            )
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
                elicits: context
                    .peer
                    .supported_elicitation_modes()
                    .contains(&ElicitationMode::Form),
                cancelled: context.ct.clone(),
            };
            call(&self.face, &caller, &agent.name, request.arguments, client).await
        }
        .await;
        answered
            .or_else(McpError::into_result)
            .map(CallToolResponse::from)
    }
}

fn no_caller() -> ErrorData {
    ErrorData::internal_error("the request has no caller", None)
}
