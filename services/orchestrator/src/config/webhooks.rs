//! The `webhooks` section of the config: where deliveries may go, how long
//! they are tried, and the tenants' subscriptions the operator declares
//! (see `crate::webhook`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The `webhooks` section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebhookConfig {
    /// Hosts deliveries may go to: `*` (any host whose addresses are all
    /// public), a name (`hooks.example.com`), a suffix (`*.example.com`),
    /// an address (`10.1.2.3`, `::1`) or a range (`10.0.0.0/8`). Private,
    /// loopback and link-local addresses are refused unless an entry
    /// names them (the address or range, or the host by its exact name);
    /// plain `http` only to such an entry. Empty: no webhooks.
    pub allowed_hosts: Vec<String>,
    /// How long one try waits for the receiver's answer.
    #[serde(with = "baton_common::config::duration")]
    pub timeout: Duration,
    /// Most bytes of a receiver's answer read (the rest is not).
    pub max_response_bytes: usize,
    /// Most bytes of a delivery's body; a bigger event is delivered with
    /// its payload cut to what fits (`data.event` without its payload).
    pub max_body_bytes: usize,
    /// How long a delivery is tried before it goes to the dead letters.
    #[serde(with = "baton_common::config::duration")]
    pub retry_for: Duration,
    /// The wait before the first retry; each next one doubles it (with
    /// jitter), up to `retry_max`.
    #[serde(with = "baton_common::config::duration")]
    pub retry_initial: Duration,
    /// The longest wait between two tries (a `Retry-After` may ask more,
    /// up to `retry_for`).
    #[serde(with = "baton_common::config::duration")]
    pub retry_max: Duration,
    /// Most deliveries a replica makes at once.
    pub concurrency: usize,
    /// How often a replica looks for deliveries due (it is woken at once
    /// for those its own runs make).
    #[serde(with = "baton_common::config::duration")]
    pub poll: Duration,
    /// How long the previous secret signs too after a rotation, unless
    /// the rotation says.
    #[serde(with = "baton_common::config::duration")]
    pub rotation_overlap: Duration,
    /// Most webhooks a request may give its run.
    pub max_per_run: usize,
    /// Most subscriptions a tenant may have (besides the config's).
    pub max_per_tenant: usize,
    /// Dead letters kept per tenant (the oldest go first).
    pub max_dead_letters: usize,
    /// Tenants' subscriptions declared here (not changeable through the
    /// API).
    pub subscriptions: Vec<ConfigSubscription>,
}

/// A tenant's subscription in the config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigSubscription {
    /// The tenant (`""`: the default tenant, without authentication).
    #[serde(default)]
    pub tenant: String,
    /// Where deliveries go.
    pub url: String,
    /// What is delivered (empty: the five `run.` events).
    #[serde(default)]
    pub events: Vec<String>,
    /// The file holding the secret (`whsec_…`), as every path of the
    /// config: relative to the working directory.
    pub secret_file: String,
    /// What it is for.
    #[serde(default)]
    pub description: String,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        Self {
            allowed_hosts: vec!["*".into()],
            timeout: Duration::from_secs(10),
            max_response_bytes: 64 * 1024,
            max_body_bytes: 256 * 1024,
            retry_for: Duration::from_secs(12 * 3600),
            retry_initial: Duration::from_secs(5),
            retry_max: Duration::from_secs(3600),
            concurrency: 32,
            poll: Duration::from_secs(1),
            rotation_overlap: Duration::from_secs(24 * 3600),
            max_per_run: 8,
            max_per_tenant: 100,
            max_dead_letters: 10_000,
            subscriptions: Vec::new(),
        }
    }
}

/// Why the `webhooks` section is refused.
#[derive(Debug, thiserror::Error)]
#[error("webhooks.{field} {message}")]
pub struct WebhookConfigError {
    field: String,
    message: String,
}

impl WebhookConfig {
    /// Checks the section; the first problem names its field. (The
    /// hosts, and each subscription's URL, events and secret, are checked
    /// when the webhooks start: see `crate::webhook::Webhooks::new`.)
    pub fn validate(&self) -> Result<(), WebhookConfigError> {
        let bad = |field: &str, message: &str| {
            Err(WebhookConfigError {
                field: field.into(),
                message: message.into(),
            })
        };
        for (field, d) in [
            ("timeout", self.timeout),
            ("retry_for", self.retry_for),
            ("retry_initial", self.retry_initial),
            ("retry_max", self.retry_max),
            ("poll", self.poll),
        ] {
            if d.is_zero() {
                return bad(field, "must be positive");
            }
        }
        if self.retry_initial > self.retry_max {
            return bad("retry_initial", "must be at most webhooks.retry_max");
        }
        for (field, n) in [
            ("max_response_bytes", self.max_response_bytes),
            ("max_body_bytes", self.max_body_bytes),
            ("concurrency", self.concurrency),
            ("max_per_run", self.max_per_run),
            ("max_per_tenant", self.max_per_tenant),
            ("max_dead_letters", self.max_dead_letters),
        ] {
            if n == 0 {
                return bad(field, "must be positive");
            }
        }
        if self.max_body_bytes < 4096 {
            return bad("max_body_bytes", "must be at least 4096");
        }
        for (i, s) in self.subscriptions.iter().enumerate() {
            if s.url.is_empty() {
                return bad(&format!("subscriptions[{i}].url"), "is required");
            }
            if s.secret_file.is_empty() {
                return bad(&format!("subscriptions[{i}].secret_file"), "is required");
            }
        }
        Ok(())
    }
}
