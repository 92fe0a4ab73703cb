//! Webhooks: what happens to runs, posted to URLs of their callers'
//! (docs/webhooks.md). A run's own subscriptions (its request's
//! `webhooks`) and its tenant's (the API's, the config's) are fixed as it
//! starts ([`Webhooks::attach`]); its sequencer asks its [`RunHooks`] for
//! the deliveries of each event and queues them in the [`outbox`] — in a
//! durable run, in the same script that logs the event. Each replica's
//! [`worker`] takes due streams (one per run and subscription, in order),
//! signs each try per the Standard Webhooks specification ([`sign`]),
//! posts it where [`hosts`] allows, retries with backoff and jitter for
//! `webhooks.retry_for`, then keeps it in the tenant's dead letters, which
//! can be listed and delivered again ([`api`]).

pub mod api;
pub mod delivery;
pub mod hosts;
pub mod outbox;
pub mod send;
pub mod sign;
pub mod tenants;
pub mod topics;
pub mod worker;

use std::sync::{Arc, atomic::AtomicUsize};

use baton_proto::v1 as pb;
use futures::future::BoxFuture;

pub use delivery::{Auth, Delivery, Hook, RunHooks, RunInfo, Shape, Standard};
pub use hosts::HostPolicy;
pub use topics::Topics;

use crate::{
    config::webhooks::WebhookConfig,
    error::{Error, Result},
    run::{hooks::Queued, record::RunRecord},
    shared_state::SharedState,
};

/// What the worker did, counted.
#[derive(Debug, Default)]
pub struct Stats {
    /// Tries made.
    pub attempts: std::sync::atomic::AtomicU64,
    /// Deliveries answered 2xx.
    pub delivered: std::sync::atomic::AtomicU64,
    /// Tries that failed.
    pub failed: std::sync::atomic::AtomicU64,
    /// Deliveries given up (dead letters).
    pub dead: std::sync::atomic::AtomicU64,
}

/// A run's own subscription, checked (from its request's `webhooks`).
#[derive(Debug, Clone)]
pub struct OwnHook {
    /// Where.
    pub url: String,
    /// What it asks for.
    pub topics: Topics,
    /// Its secret's text (empty with `authorization`).
    pub secret: String,
    /// The `Authorization` header instead of a signature.
    pub authorization: String,
    /// The `X-A2A-Notification-Token` header.
    pub token: String,
    /// The body's shape (empty: Standard; or a registered one: `a2a`).
    pub format: String,
    /// Its part of the stream's name when it is not the request's (an A2A
    /// config made later: `a/<id>`).
    pub sub: Option<String>,
}

/// Makes the shape of a registered format for a run.
pub type ShapeMaker = Arc<dyn Fn(&RunInfo) -> Arc<dyn Shape> + Send + Sync>;

/// This server's webhooks: its policy, client, outbox and subscriptions.
pub struct Webhooks {
    config: WebhookConfig,
    policy: Arc<HostPolicy>,
    client: reqwest::Client,
    /// Where deliveries wait.
    pub outbox: outbox::Outbox,
    /// Tenants' subscriptions.
    pub tenants: tenants::Tenants,
    /// Wakes the worker (a delivery queued here).
    wake: tokio::sync::Notify,
    /// Deliveries being made now.
    in_flight: AtomicUsize,
    /// Counters, for `/metrics` and the benchmark.
    pub stats: Stats,
    /// Body shapes beside the Standard one, by format (`a2a`).
    shapes: std::sync::RwLock<std::collections::HashMap<String, ShapeMaker>>,
    /// Streams whose subscription was deleted here (an A2A config): what
    /// they still hold is not delivered.
    pub(crate) removed: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl Webhooks {
    /// The webhooks of `config`, kept in `shared`'s Redis when runs are
    /// durable; the config's subscriptions are read now (their secret
    /// files too), and the first problem is named.
    pub fn new(
        config: &WebhookConfig,
        shared: Option<Arc<SharedState>>,
    ) -> Result<Arc<Self>, String> {
        let policy = Arc::new(
            HostPolicy::parse(&config.allowed_hosts)
                .map_err(|(i, e)| format!("webhooks.allowed_hosts[{i}]: {e}"))?,
        );
        let mut declared = Vec::new();
        for (i, s) in config.subscriptions.iter().enumerate() {
            let field = |f: &str| format!("webhooks.subscriptions[{i}].{f}");
            policy
                .check_url(&s.url)
                .map_err(|e| format!("{}: {e}", field("url")))?;
            Topics::parse(&s.events).map_err(|(j, e)| format!("{}[{j}]: {e}", field("events")))?;
            let secret = baton_common::config::read_secret_file(&s.secret_file)
                .map_err(|e| format!("{}: {}: {e}", field("secret_file"), s.secret_file))?;
            let secret = secret.trim().to_owned();
            sign::Secret::parse(&secret)
                .map_err(|e| format!("{}: the secret {e}", field("secret_file")))?;
            declared.push(tenants::Stored {
                id: format!("config:{i}"),
                tenant: s.tenant.clone(),
                url: s.url.clone(),
                events: s.events.clone(),
                description: s.description.clone(),
                created_ms: 0,
                secret,
                previous: String::new(),
                previous_until_ms: 0,
                from_config: true,
            });
        }
        let client = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(config.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .dns_resolver(Arc::new(hosts::GuardedResolver(policy.clone())))
            .build()
            .map_err(|e| format!("webhooks: cannot make the HTTP client: {e}"))?;
        let outbox = match &shared {
            Some(s) => outbox::Outbox::Redis(Box::new(outbox::redis::RedisOutbox::new(
                s.clone(),
                (config.timeout.as_millis() as u64) * 2 + 5_000,
                (config.retry_for.as_millis() as u64) + 3_600_000,
            ))),
            None => outbox::Outbox::Memory(Box::default()),
        };
        Ok(Arc::new(Self {
            config: config.clone(),
            policy,
            client,
            outbox,
            tenants: tenants::Tenants::new(shared, declared),
            wake: tokio::sync::Notify::new(),
            in_flight: AtomicUsize::new(0),
            stats: Default::default(),
            shapes: Default::default(),
            removed: Default::default(),
        }))
    }

    /// At shutdown, once runs are over: waits up to `within` for what this
    /// process still holds to be delivered, and for runs still ending
    /// (`running`: their last events queue deliveries) — memory mode,
    /// where nobody else will; with Redis, nothing is lost by stopping at
    /// once (another replica takes what is left).
    pub async fn drain(&self, within: std::time::Duration, running: impl Fn() -> usize) {
        let deadline = tokio::time::Instant::now() + within;
        while self
            .outbox
            .pending()
            .is_some_and(|n| n > 0 || running() > 0)
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// Registers the body shape of `format` (a face's: `a2a`).
    pub fn register_shape(&self, format: &str, maker: ShapeMaker) {
        self.shapes
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(format.to_owned(), maker);
    }

    /// The section this runs by.
    pub fn config(&self) -> &WebhookConfig {
        &self.config
    }

    /// Checks a request's `webhooks`; an error names `webhooks[i].<field>`.
    pub fn check_own(&self, hooks: Vec<pb::RunWebhook>) -> Result<Vec<OwnHook>> {
        if hooks.len() > self.config.max_per_run {
            return Err(Error::Exhausted {
                field: "webhooks".into(),
                message: format!(
                    "{} webhooks is over this server's limit of {} (webhooks.max_per_run)",
                    hooks.len(),
                    self.config.max_per_run
                ),
            });
        }
        hooks
            .into_iter()
            .enumerate()
            .map(|(i, h)| {
                self.policy
                    .check_url(&h.url)
                    .map_err(|e| Error::invalid(format!("webhooks[{i}].url"), e))?;
                let topics = Topics::parse(&h.events)
                    .map_err(|(j, e)| Error::invalid(format!("webhooks[{i}].events[{j}]"), e))?;
                if !h.format.is_empty()
                    && !self
                        .shapes
                        .read()
                        .unwrap_or_else(|p| p.into_inner())
                        .contains_key(&h.format)
                {
                    return Err(Error::invalid(
                        format!("webhooks[{i}].format"),
                        format!("\"{}\" is not a format: empty (Standard Webhooks) or a2a", h.format),
                    ));
                }
                if h.id.len() > 128 || h.id.contains(['/', '\r', '\n']) {
                    return Err(Error::invalid(
                        format!("webhooks[{i}].id"),
                        "must be at most 128 characters, without / or line breaks",
                    ));
                }
                if h.authorization.contains(['\r', '\n']) || h.token.contains(['\r', '\n']) {
                    return Err(Error::invalid(
                        format!("webhooks[{i}].authorization"),
                        "may not hold a line break",
                    ));
                }
                if h.authorization.is_empty() && h.format.is_empty() {
                    if h.secret.is_empty() {
                        return Err(Error::invalid(
                            format!("webhooks[{i}].secret"),
                            "is required: the secret deliveries are signed with (whsec_ and the base64 of 24 to 64 bytes)",
                        ));
                    }
                    sign::Secret::parse(&h.secret)
                        .map_err(|e| Error::invalid(format!("webhooks[{i}].secret"), e))?;
                } else if !h.secret.is_empty() {
                    return Err(Error::invalid(
                        format!("webhooks[{i}].secret"),
                        "is not used with an authorization or a format: give one or the other",
                    ));
                }
                Ok(OwnHook {
                    url: h.url,
                    topics,
                    secret: h.secret,
                    authorization: h.authorization,
                    token: h.token,
                    sub: (!h.id.is_empty()).then(|| format!("{}/{}", if h.format == "a2a" { "a" } else { "n" }, h.id)),
                    format: h.format,
                })
            })
            .collect()
    }

    /// Gives a run its subscriptions: `own` and its tenant's as they are
    /// now. A run with none gets none (its events cost nothing more).
    pub fn attach(self: &Arc<Self>, record: &RunRecord, own: Vec<OwnHook>) {
        let tenant = self.tenants.of(&record.tenant);
        // A run with none gets none: its events cost one atomic load more.
        // (An A2A config made later gives it some: `add_hook`.)
        if own.is_empty() && tenant.is_empty() {
            return;
        }
        let run = RunInfo {
            run_id: record.run_id.clone(),
            trace_id: record.trace_id.to_string(),
            tenant: record.tenant.clone(),
            kind: record.kind,
            target: record.target.clone(),
        };
        let max_body = self.config.max_body_bytes;
        let mut hooks: Vec<Hook> = Vec::with_capacity(own.len() + tenant.len());
        for (i, h) in own.into_iter().enumerate() {
            hooks.push(self.own_hook(&run, format!("r{i}"), h));
        }
        for s in tenant.iter() {
            let Ok(topics) = Topics::parse(&s.events) else {
                continue;
            };
            hooks.push(Hook {
                sub: format!("w/{}", s.id),
                webhook_id: s.id.clone(),
                url: s.url.clone(),
                auth: Auth::Tenant,
                shape: Arc::new(Standard { topics, max_body }),
            });
        }
        let attached: Arc<dyn crate::run::hooks::Hooks> = Arc::new(Attached {
            run: RunHooks {
                run,
                hooks: std::sync::RwLock::new(hooks),
            },
            webhooks: self.clone(),
        });
        let _ = record.hooks.set(attached);
    }

    /// The hook of a run's own subscription.
    fn own_hook(&self, run: &RunInfo, sub: String, h: OwnHook) -> Hook {
        let maker = (!h.format.is_empty())
            .then(|| {
                self.shapes
                    .read()
                    .unwrap_or_else(|p| p.into_inner())
                    .get(&h.format)
                    .cloned()
            })
            .flatten();
        let shape: Arc<dyn Shape> = match maker {
            Some(make) => make(run),
            None => Arc::new(Standard {
                topics: h.topics,
                max_body: self.config.max_body_bytes,
            }),
        };
        let auth = if h.authorization.is_empty() && h.format.is_empty() {
            Auth::Own { secret: h.secret }
        } else {
            Auth::Header {
                authorization: h.authorization,
                token: h.token,
            }
        };
        Hook {
            sub: h.sub.unwrap_or(sub),
            webhook_id: String::new(),
            url: h.url,
            auth,
            shape,
        }
    }

    /// Adds a subscription to a run going on here (an A2A config made
    /// while its task works); false when the run has no hooks here.
    pub fn add_hook(self: &Arc<Self>, record: &RunRecord, hook: OwnHook) -> bool {
        if record.hooks.get().is_none() {
            // Its first: an empty set to add to (a race with another
            // first add keeps one of the two sets, and both add to it).
            let empty: Arc<dyn crate::run::hooks::Hooks> = Arc::new(Attached {
                run: RunHooks {
                    run: RunInfo {
                        run_id: record.run_id.clone(),
                        trace_id: record.trace_id.to_string(),
                        tenant: record.tenant.clone(),
                        kind: record.kind,
                        target: record.target.clone(),
                    },
                    hooks: std::sync::RwLock::new(Vec::new()),
                },
                webhooks: self.clone(),
            });
            let _ = record.hooks.set(empty);
        }
        let Some(attached) = record
            .hooks
            .get()
            .and_then(|h| h.as_any().downcast_ref::<Attached>())
        else {
            return false;
        };
        let sub = hook.sub.clone().unwrap_or_default();
        let hook = self.own_hook(&attached.run.run, sub.clone(), hook);
        self.removed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&format!("{}/{sub}", record.run_id));
        let mut hooks = attached
            .run
            .hooks
            .write()
            .unwrap_or_else(|p| p.into_inner());
        hooks.retain(|h| h.sub != sub);
        hooks.push(hook);
        true
    }

    /// Keeps a subscription added to a run after its start (an A2A config
    /// made while its task works), so that the replica resuming the run
    /// delivers to it too (durable runs; memory mode has no resume).
    pub async fn keep_added(&self, run_id: &str, hook: pb::RunWebhook) -> Result<()> {
        match &self.outbox {
            outbox::Outbox::Redis(r) => {
                let raw =
                    serde_json::to_string(&hook).map_err(|e| Error::Internal(e.to_string()))?;
                r.keep_added(run_id, &hook.id, &raw).await
            }
            outbox::Outbox::Memory(_) => Ok(()),
        }
    }

    /// A resumed run's own subscriptions: its request's (none for a fork
    /// or a replay, which start from another run's request) and those
    /// added since it started, each checked again (one the server no
    /// longer allows is dropped, not the run).
    pub async fn resumed_own(
        &self,
        run_id: &str,
        from_request: Vec<pb::RunWebhook>,
    ) -> Vec<OwnHook> {
        // Those added since win over the request's (a config made again
        // with the id of one given with the message replaces it).
        let mut all: Vec<pb::RunWebhook> = Vec::new();
        if let outbox::Outbox::Redis(r) = &self.outbox {
            match r.added(run_id).await {
                Ok(raws) => all.extend(raws.iter().filter_map(|r| serde_json::from_str(r).ok())),
                Err(e) => {
                    tracing::warn!(run_id, error = %e, "a resumed run's added webhooks could not be read");
                }
            }
        }
        all.extend(from_request);
        let mut seen = std::collections::HashSet::new();
        all.into_iter()
            .filter(|h| h.id.is_empty() || seen.insert(h.id.clone()))
            .filter_map(|h| match self.check_own(vec![h]) {
                Ok(mut one) => one.pop(),
                Err(e) => {
                    tracing::warn!(run_id, error = %e, "a resumed run's webhook is refused now; it goes on without it");
                    None
                }
            })
            .collect()
    }

    /// Lets a stream's deliveries through again (an A2A config made again
    /// with the id of a deleted one).
    pub async fn unstop(&self, stream: &str) -> Result<()> {
        self.removed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(stream);
        match &self.outbox {
            outbox::Outbox::Redis(r) => r.unstop(stream).await,
            outbox::Outbox::Memory(_) => Ok(()),
        }
    }

    /// Stops a run's subscription `sub` (an A2A config deleted): nothing
    /// more is made for it, and what its stream holds here is dropped.
    pub async fn remove_hook(
        &self,
        record: Option<&RunRecord>,
        run_id: &str,
        sub: &str,
    ) -> Result<()> {
        if let Some(attached) = record
            .and_then(|r| r.hooks.get())
            .and_then(|h| h.as_any().downcast_ref::<Attached>())
        {
            attached
                .run
                .hooks
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .retain(|h| h.sub != sub);
        }
        let stream = format!("{run_id}/{sub}");
        if let (outbox::Outbox::Redis(r), Some(id)) = (&self.outbox, sub.strip_prefix("a/")) {
            r.forget_added(run_id, id).await?;
        }
        {
            let mut removed = self.removed.lock().unwrap_or_else(|p| p.into_inner());
            // Bounded: what an old entry stopped is long delivered or dead.
            if removed.len() >= 10_000 {
                removed.clear();
            }
            removed.insert(stream.clone());
        }
        match &self.outbox {
            outbox::Outbox::Redis(r) => r.stop(&stream).await,
            outbox::Outbox::Memory(_) => Ok(()),
        }
    }
}

/// A run's hooks with the webhooks that deliver them: what its sequencer
/// sees (`run::hooks::Hooks`).
struct Attached {
    run: RunHooks,
    webhooks: Arc<Webhooks>,
}

impl crate::run::hooks::Hooks for Attached {
    fn deliveries(&self, logged: &crate::run::log::Logged) -> Vec<Queued> {
        self.run
            .deliveries(logged)
            .into_iter()
            .filter_map(|d| {
                Some(Queued {
                    stream: d.stream(),
                    raw: serde_json::to_string(&d).ok()?,
                })
            })
            .collect()
    }

    fn queue(&self, queued: Vec<Queued>) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let outbox::Outbox::Memory(m) = &self.webhooks.outbox {
                m.push_queued(queued);
            } else {
                let deliveries: Vec<Delivery> = queued
                    .iter()
                    .filter_map(|q| serde_json::from_str(&q.raw).ok())
                    .collect();
                if let Err(e) = self.webhooks.outbox.push(deliveries).await {
                    tracing::warn!(error = %e, run_id = %self.run.run.run_id, "webhook deliveries could not be queued");
                }
            }
            self.webhooks.wake.notify_one();
        })
    }

    fn mark_due<'a>(&'a self, streams: &'a [String]) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            match &self.webhooks.outbox {
                outbox::Outbox::Redis(r) => r.mark_due(streams).await,
                outbox::Outbox::Memory(_) => Ok(()),
            }
        })
    }

    fn queue_key(&self, stream: &str) -> (String, u64) {
        match &self.webhooks.outbox {
            outbox::Outbox::Redis(r) => (r.queue_key(stream), r.keep_ms()),
            outbox::Outbox::Memory(_) => (String::new(), 0),
        }
    }

    fn written(&self) {
        self.webhooks.wake.notify_one();
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
