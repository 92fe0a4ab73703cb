//! The A2A face: agents the operator chooses (`a2a: true` in the agents
//! file, or `a2a.agents` in the config; none by default) are Agent2Agent
//! protocol 1.0 agents, each with its own card and all three bindings:
//!
//! - gRPC `lf.a2a.v1.A2AService` on the main port beside `baton.v1`
//!   ([`grpc`]); the request's `tenant` field names the agent (the card's
//!   gRPC interface declares it, and A2A clients copy it into every
//!   request);
//! - JSON-RPC 2.0 at `POST /a2a/{agent}` ([`jsonrpc`]);
//! - HTTP+JSON under `/a2a/{agent}/` ([`rest`]);
//!
//! and the card at `GET /a2a/{agent}/.well-known/agent-card.json`
//! ([`card`]); `GET /a2a` lists the exposed agents and their cards, and
//! `GET /.well-known/agent-card.json` is the card of `a2a.default_agent`
//! (or of the only exposed agent).
//!
//! Every binding converts its wire form and calls the same operations
//! ([`service`]), which call the application core; errors map to each
//! binding in one place ([`error`]). A task is a run of the agent (task id =
//! run id, context id = the run's trace id); events become updates as
//! [`task`] says. Authentication, quotas and audit are the core's: an API
//! key names the tenant, and no tenant sees another's tasks.

pub mod card;
pub mod error;
pub mod face;
pub mod grpc;
pub mod json;
pub mod jsonrpc;
pub mod list;
pub mod message;
pub mod names;
pub mod push;
pub mod push_ops;
pub mod rest;
pub mod service;
pub mod sse;
pub mod task;
pub mod updates;

use std::sync::Arc;

use axum::{
    Router,
    routing::{get, post},
};

use self::card::{agent_card, default_card, list_agents};
pub use self::face::{A2a, UnknownAgent};

/// The A2A routes of the HTTP port: cards, JSON-RPC and HTTP+JSON.
pub fn router(face: Arc<A2a>) -> Router {
    Router::new()
        .route("/.well-known/agent-card.json", get(default_card))
        .route("/a2a", get(list_agents))
        .route("/a2a/{agent}/.well-known/agent-card.json", get(agent_card))
        .route("/a2a/{agent}", post(jsonrpc::handle))
        // Clients that join the interface URL and "/" (httpx's base_url).
        .route("/a2a/{agent}/", post(jsonrpc::handle))
        .route("/a2a/{agent}/{*rest}", axum::routing::any(rest::handle))
        .with_state(face)
}
