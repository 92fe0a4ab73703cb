//! An exposed agent's card (A2A §8): its name and description, its
//! skills (the agent itself, and each tool it may call), the interfaces
//! of all three bindings in preference order (JSON-RPC, HTTP+JSON, gRPC),
//! capabilities as they are (streaming, push notifications and an
//! extended card yes; Baton's context extension, optional), and, when the
//! server takes API keys, the bearer scheme they are sent with. The
//! extended card (`GetExtendedAgentCard`, for a caller its key lets in) is
//! the card with the tenant's view: which tenant the key names, and what
//! it may ask of push notifications and webhooks (the tenant extension's
//! params).

use std::{collections::HashMap, sync::Arc};

use axum::{
    extract::{Path, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::Response,
};
use baton_proto::a2a::v1 as lf;

use super::{
    error::A2aError,
    face::A2a,
    json::json_response,
    names::{EXTENSION, TENANT_EXTENSION, VERSION},
    service::Exposed,
};

/// The name of the bearer scheme in the cards.
pub const BEARER: &str = "bearer";

/// The card of `agent`, for a caller that reached this port at `base`.
pub fn card(face: &A2a, agent: &Exposed, base: &str) -> lf::AgentCard {
    let url = format!("{base}/a2a/{}", agent.name);
    let interface = |binding: &str, url: String, tenant: &str| lf::AgentInterface {
        url,
        protocol_binding: binding.to_owned(),
        tenant: tenant.to_owned(),
        protocol_version: VERSION.to_owned(),
    };
    let description = if agent.description.is_empty() {
        format!("The Baton agent {}.", agent.name)
    } else {
        agent.description.clone()
    };
    let mut skills = vec![lf::AgentSkill {
        id: agent.name.clone(),
        name: agent.name.clone(),
        description: description.clone(),
        tags: vec!["baton".to_owned(), "agent".to_owned()],
        ..Default::default()
    }];
    skills.extend(agent.tools.iter().map(|tool| lf::AgentSkill {
        id: format!("{}.{tool}", agent.name),
        name: tool.clone(),
        description: format!("{} can call {tool} while it works.", agent.name),
        tags: vec!["baton".to_owned(), "tool".to_owned()],
        ..Default::default()
    }));
    let (security_schemes, security_requirements) = if face.keys_required() {
        let scheme = lf::SecurityScheme {
            scheme: Some(lf::security_scheme::Scheme::HttpAuthSecurityScheme(
                lf::HttpAuthSecurityScheme {
                    description: "A Baton API key: `Authorization: Bearer <key>`; the key names the tenant whose tasks the caller sees.".to_owned(),
                    scheme: "Bearer".to_owned(),
                    bearer_format: "Baton API key".to_owned(),
                },
            )),
        };
        let requirement = lf::SecurityRequirement {
            schemes: HashMap::from([(BEARER.to_owned(), lf::StringList::default())]),
        };
        (
            HashMap::from([(BEARER.to_owned(), scheme)]),
            vec![requirement],
        )
    } else {
        (HashMap::new(), Vec::new())
    };
    lf::AgentCard {
        name: agent.name.clone(),
        description,
        supported_interfaces: vec![
            interface("JSONRPC", url.clone(), ""),
            interface("HTTP+JSON", url, ""),
            interface("GRPC", face.grpc_address(base), &agent.name),
        ],
        provider: Some(lf::AgentProvider {
            url: base.to_owned(),
            organization: "Baton".to_owned(),
        }),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        documentation_url: None,
        capabilities: Some(lf::AgentCapabilities {
            streaming: Some(true),
            push_notifications: Some(true),
            extensions: vec![lf::AgentExtension {
                uri: EXTENSION.to_owned(),
                description: "Where in the run's tree of agents each update happened: metadata[uri] = {contextId, parentContextId, depth, agent, kind, seq}.".to_owned(),
                required: false,
                params: None,
            }],
            extended_agent_card: Some(true),
        }),
        security_schemes,
        security_requirements,
        default_input_modes: vec!["text/plain".to_owned(), "application/json".to_owned()],
        default_output_modes: vec!["text/plain".to_owned()],
        skills,
        signatures: Vec::new(),
        icon_url: None,
    }
}

/// The extended card of `agent` for `caller` (see the module docs).
pub fn extended(
    face: &A2a,
    agent: &Exposed,
    base: &str,
    caller: &crate::app::Caller,
    webhooks: &crate::config::webhooks::WebhookConfig,
) -> lf::AgentCard {
    use baton_proto::json_value::{Struct, Value, value::Kind};
    let mut card = card(face, agent, base);
    let string = |s: &str| Value {
        kind: Some(Kind::StringValue(s.to_owned())),
    };
    let number = |n: usize| Value {
        kind: Some(Kind::NumberValue(n as f64)),
    };
    let params = Struct {
        fields: [
            ("tenant".to_owned(), string(&caller.tenant)),
            (
                "maxPushConfigsPerTask".to_owned(),
                number(super::push::MAX_PER_TASK),
            ),
            ("maxWebhooksPerRun".to_owned(), number(webhooks.max_per_run)),
            (
                "webhookRetryForSeconds".to_owned(),
                number(webhooks.retry_for.as_secs() as usize),
            ),
        ]
        .into_iter()
        .collect(),
    };
    if let Some(caps) = card.capabilities.as_mut() {
        caps.extensions.push(lf::AgentExtension {
            uri: TENANT_EXTENSION.to_owned(),
            description: "The tenant the caller's API key names (\"\" without keys) and its limits on push notifications and webhooks.".to_owned(),
            required: false,
            params: Some(params),
        });
    }
    card
}

/// The card as its HTTP answer (public: a card holds no secret; cached for
/// a minute).
pub fn response(face: &A2a, agent: &Exposed, headers: &HeaderMap) -> Response {
    let base = face.base_url(headers);
    let card = card(face, agent, &base);
    let body = serde_json::to_value(&card).unwrap_or_default();
    // The same card, the same tag: a client revalidates with If-None-Match.
    let etag = format!(
        "\"{:016x}\"",
        baton_common::ids::fnv1a(0, body.to_string().bytes())
    );
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag));
    let mut response = if fresh {
        let mut r = Response::new(axum::body::Body::empty());
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        json_response(&body, StatusCode::OK)
    };
    let h = response.headers_mut();
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=60"),
    );
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    // The cards change only with the agents file, loaded at start.
    if let Ok(v) = HeaderValue::from_str(&httpdate::fmt_http_date(face.loaded_at())) {
        h.insert(header::LAST_MODIFIED, v);
    }
    response
}

/// `GET /a2a/{agent}/.well-known/agent-card.json`.
pub async fn agent_card(
    State(face): State<Arc<A2a>>,
    Path(agent): Path<String>,
    headers: HeaderMap,
) -> Response {
    match face.agent(&agent) {
        Ok(exposed) => response(&face, &exposed, &headers),
        Err(e) => e.rest_response(),
    }
}

/// `GET /.well-known/agent-card.json`: the default agent's card.
pub async fn default_card(State(face): State<Arc<A2a>>, headers: HeaderMap) -> Response {
    let name = match face.default_agent() {
        Some(name) => name,
        None => match face.agents().len() {
            0 => {
                return A2aError::NoAgent(
                    "this server exposes no agent over A2A (a2a.agents in the config, or `a2a: true` on an agent)".into(),
                )
                .rest_response();
            }
            _ => {
                let urls: Vec<String> = face
                    .agents()
                    .iter()
                    .map(|a| &a.name)
                    .map(|n| {
                        format!(
                            "{}/a2a/{n}/.well-known/agent-card.json",
                            face.base_url(&headers)
                        )
                    })
                    .collect();
                return A2aError::NoAgent(format!(
                    "this server exposes {} A2A agents, each with its own card: {} (GET /a2a lists them)",
                    urls.len(),
                    urls.join(", ")
                ))
                .rest_response();
            }
        },
    };
    agent_card(State(face), Path(name), headers).await
}

/// `GET /a2a`: the exposed agents and their cards.
pub async fn list_agents(State(face): State<Arc<A2a>>, headers: HeaderMap) -> Response {
    let base = face.base_url(&headers);
    let agents: Vec<serde_json::Value> = face
        .agents()
        .iter()
        .map(|a| {
            serde_json::json!({
                "name": a.name,
                "description": a.description,
                "cardUrl": format!("{base}/a2a/{}/.well-known/agent-card.json", a.name),
                "url": format!("{base}/a2a/{}", a.name),
            })
        })
        .collect();
    json_response(&serde_json::json!({ "agents": agents }), StatusCode::OK)
}
