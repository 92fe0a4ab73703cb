//! The MCP face: agents the operator chooses (`mcp: true` in the agents
//! file, or `mcp.agents` in the config; none by default) are the tools of
//! a Model Context Protocol server, served over Streamable HTTP at `/mcp`
//! on the orchestrator's port (`rmcp`'s server): protocol revision
//! 2026-07-28 (no handshake, no sessions: every request stands alone, and
//! questions are asked in rounds, [`rounds`]), and 2025-11-25 and
//! 2025-06-18 (with `initialize` and sessions).
//!
//! - `tools/list`: one tool per exposed agent, named after it, with its
//!   description and the input schema `{input, context}` ([`face`]);
//! - `tools/call`: a run of the agent through the application core
//!   ([`call`]), its progress as progress notifications ([`progress`]),
//!   its approvals and questions as elicitation requests ([`ask`]), its
//!   output (or its error, with its code) as the tool result; the client's
//!   cancellation cancels the run and everything under it.
//!
//! [`handler`] is `rmcp`'s `ServerHandler` over the face; errors map to
//! MCP in one place ([`error`]). Authentication is the HTTP face's: a
//! layer in front of the endpoint turns `Authorization: Bearer <API key>`
//! into the caller (its tenant) or answers 401; quotas and audit are the
//! core's, and no tenant sees another's runs.

pub mod ask;
pub mod call;
pub mod error;
pub mod face;
pub mod handler;
pub mod progress;
pub mod rounds;
pub mod sessions;

use std::sync::Arc;

use axum::{
    Router,
    extract::{Request, State},
    http::{Method, StatusCode},
    middleware::Next,
    response::{IntoResponse as _, Response},
};
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};

pub use self::face::{Mcp, UnknownAgent};
use self::handler::Handler;

/// Where the endpoint is.
pub const PATH: &str = "/mcp";

/// The MCP endpoint of the HTTP port; its sessions end when the server
/// shuts down.
pub fn router(face: Arc<Mcp>) -> Router {
    let mut config = StreamableHttpServerConfig::default()
        .with_cancellation_token(face.shutdown().child_token())
        .disable_allowed_origins();
    if let Some(durable) = face.core().durable() {
        config.session_store = Some(Arc::new(sessions::StoredSessions(durable.shared().clone())));
    }
    config = if face.allowed_hosts().is_empty() {
        config.disable_allowed_hosts()
    } else {
        config.with_allowed_hosts(face.allowed_hosts().iter().cloned())
    };
    let service = StreamableHttpService::new(
        {
            let face = face.clone();
            move || Ok(Handler::new(face.clone()))
        },
        Arc::new(LocalSessionManager::default()),
        config,
    );
    Router::new()
        .route_service(PATH, service)
        .layer(axum::middleware::from_fn_with_state(face, authenticate))
}

/// Puts the caller (the tenant its API key names) in the request, where
/// the handler finds it; a missing or wrong key is answered with 401.
async fn authenticate(State(face): State<Arc<Mcp>>, mut request: Request, next: Next) -> Response {
    match face.caller(request.headers()) {
        Ok(caller) => {
            let delete = request.method() == Method::DELETE;
            request.extensions_mut().insert(caller);
            let mut response = next.run(request).await;
            // A session ended by DELETE: rmcp answers 202, which clients
            // (the Python SDK's) take for a failure; it is done, so 204.
            if delete && response.status() == StatusCode::ACCEPTED {
                *response.status_mut() = StatusCode::NO_CONTENT;
            }
            response
        }
        Err(e) => e.into_response(),
    }
}
