//! A delivery: what is posted where, how it is signed, and how often it
//! was tried; and a run's hooks, which make deliveries of its events.

use std::sync::Arc;

use baton_proto::v1 as pb;
use serde::{Deserialize, Serialize};

use super::topics::Topics;
use crate::run::log::Logged;

/// How a delivery proves where it is from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Auth {
    /// Signed with a run's own secret (`whsec_…`), kept with the delivery.
    Own {
        /// The secret's text.
        secret: String,
    },
    /// Signed with the tenant subscription's secrets as they are at each
    /// try (a rotation signs with both).
    Tenant,
    /// An A2A push: `Authorization: <value>` and, when set, the config's
    /// token in `X-A2A-Notification-Token`.
    Header {
        /// The `Authorization` header's value (empty: none).
        authorization: String,
        /// The config's token (empty: none).
        token: String,
    },
}

/// One delivery, as the outbox keeps it (JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    /// Its id: the `webhook-id` header, the same on every try and
    /// replica (`msg_…`).
    pub id: String,
    /// The tenant of the run.
    pub tenant: String,
    /// The run it tells of.
    pub run_id: String,
    /// The subscription's part of the stream (`{run_id}/{sub}`).
    pub sub: String,
    /// The tenant subscription's id; empty for a run's own.
    pub webhook_id: String,
    /// Where it is posted.
    pub url: String,
    /// Its type (`run.completed`, …).
    #[serde(rename = "type")]
    pub kind: String,
    /// The body.
    pub body: String,
    /// How it is signed.
    pub auth: Auth,
    /// When it was made (ms since the epoch, the making replica's clock).
    pub created_ms: i64,
    /// Tries so far.
    #[serde(default)]
    pub attempts: u32,
    /// Why the last try failed.
    #[serde(default)]
    pub last_error: String,
    /// Not tried before this time (ms since the epoch): its backoff.
    #[serde(default)]
    pub not_before_ms: i64,
}

impl Delivery {
    /// The stream it is ordered in: `{run_id}/{sub}`.
    pub fn stream(&self) -> String {
        format!("{}/{}", self.run_id, self.sub)
    }
}

/// How a subscription's deliveries are shaped.
pub trait Shape: Send + Sync {
    /// The type and body of a delivery of `event` of `run`, if the
    /// subscription wants one.
    fn body(&self, run: &RunInfo, event: &pb::RunEvent) -> Option<(String, String)>;
}

/// Who a run is, as bodies say it.
#[derive(Debug, Clone)]
pub struct RunInfo {
    /// Its id.
    pub run_id: String,
    /// Its trace id.
    pub trace_id: String,
    /// Its tenant.
    pub tenant: String,
    /// What started it.
    pub kind: pb::RunKind,
    /// Agent, group or pipeline.
    pub target: String,
}

/// One subscription of a run.
pub struct Hook {
    /// Its part of the stream's name: `w/<id>` for a tenant's, `r<i>` for
    /// a run's own, `a/<id>` for an A2A push config.
    pub sub: String,
    /// The tenant subscription's id (empty: not a tenant's).
    pub webhook_id: String,
    /// Where.
    pub url: String,
    /// How its deliveries are signed.
    pub auth: Auth,
    /// What it wants, and how its bodies look.
    pub shape: Arc<dyn Shape>,
}

/// The Standard Webhooks shape: a `WebhookPayload` of the types a
/// subscription's `events` asks for, its event cut to fit.
pub struct Standard {
    /// What it asks for.
    pub topics: Topics,
    /// Most bytes of a body.
    pub max_body: usize,
}

impl Shape for Standard {
    fn body(&self, run: &RunInfo, event: &pb::RunEvent) -> Option<(String, String)> {
        let kind = self.topics.type_of(event.payload.as_ref()?)?;
        let mut payload = pb::WebhookPayload {
            r#type: kind.clone(),
            timestamp: event.time,
            data: Some(pb::WebhookRun {
                run_id: run.run_id.clone(),
                trace_id: run.trace_id.clone(),
                kind: run.kind as i32,
                target: run.target.clone(),
                event: Some(event.clone()),
            }),
        };
        let mut body = serde_json::to_string(&payload).ok()?;
        if body.len() > self.max_body {
            // Too big (a long output, say): the event without its payload;
            // the run's record has it (GetRun).
            if let Some(e) = payload.data.as_mut().and_then(|d| d.event.as_mut()) {
                e.payload = None;
            }
            body = serde_json::to_string(&payload).ok()?;
        }
        Some((kind, body))
    }
}

/// A run's subscriptions: what its events are delivered to.
pub struct RunHooks {
    /// The run.
    pub run: RunInfo,
    /// Its subscriptions (fixed at its start; A2A push configs are added
    /// as they are made).
    pub hooks: std::sync::RwLock<Vec<Hook>>,
}

impl RunHooks {
    /// The deliveries of a logged event, one per subscription that wants
    /// it.
    pub fn deliveries(&self, logged: &Logged) -> Vec<Delivery> {
        let hooks = self.hooks.read().unwrap_or_else(|p| p.into_inner());
        if hooks.is_empty() {
            return Vec::new();
        }
        let event = logged.to_event(&self.run.trace_id, &self.run.run_id);
        let now = crate::shared_state::clock_now_ms();
        hooks
            .iter()
            .filter_map(|h| {
                let (kind, body) = h.shape.body(&self.run, &event)?;
                Some(Delivery {
                    id: format!("msg_{}", uuid::Uuid::now_v7().simple()),
                    tenant: self.run.tenant.clone(),
                    run_id: self.run.run_id.clone(),
                    sub: h.sub.clone(),
                    webhook_id: h.webhook_id.clone(),
                    url: h.url.clone(),
                    kind,
                    body,
                    auth: h.auth.clone(),
                    created_ms: now,
                    attempts: 0,
                    last_error: String::new(),
                    not_before_ms: 0,
                })
            })
            .collect()
    }
}
