//! What the API does with tenants' subscriptions and dead letters (the
//! faces convert; errors name the request's fields).

use std::time::Duration;

use baton_proto::v1 as pb;

use super::{Webhooks, outbox::Dead, sign::Secret, tenants::Stored, topics::Topics};
use crate::{
    error::{Error, Result},
    shared_state::clock_now_ms as now_ms,
};

/// The longest a rotation may keep the previous secret signing.
pub const MAX_OVERLAP: Duration = Duration::from_secs(7 * 24 * 3600);

/// Most characters of a description.
pub const MAX_DESCRIPTION: usize = 256;

fn timestamp(ms: i64) -> Option<baton_proto::wkt::Timestamp> {
    (ms > 0).then(|| {
        baton_proto::wkt::Timestamp::from(std::time::UNIX_EPOCH + Duration::from_millis(ms as u64))
    })
}

/// A subscription as the API shows it: never its secret.
pub fn view(s: &Stored) -> pb::Webhook {
    pb::Webhook {
        webhook_id: s.id.clone(),
        url: s.url.clone(),
        events: Topics::parse(&s.events)
            .map(|t| t.names())
            .unwrap_or_default(),
        description: s.description.clone(),
        created_at: timestamp(s.created_ms),
        previous_secret_expires_at: if !s.previous.is_empty() && s.previous_until_ms > now_ms() {
            timestamp(s.previous_until_ms)
        } else {
            None
        },
        from_config: s.from_config,
    }
}

/// A dead letter as the API shows it.
pub fn dead_view(d: &Dead) -> pb::DeadLetter {
    pb::DeadLetter {
        delivery_id: d.delivery.id.clone(),
        webhook_id: d.delivery.webhook_id.clone(),
        run_id: d.delivery.run_id.clone(),
        r#type: d.delivery.kind.clone(),
        url: d.delivery.url.clone(),
        attempts: d.delivery.attempts,
        last_error: d.delivery.last_error.clone(),
        created_at: timestamp(d.delivery.created_ms),
        dead_at: timestamp(d.dead_ms),
    }
}

fn not_found(id: &str) -> Error {
    Error::NotFound {
        field: "webhook_id",
        message: format!("webhook {id} not found (for this tenant)"),
    }
}

impl Webhooks {
    /// CreateWebhook: the subscription and its secret.
    pub async fn create(
        &self,
        tenant: &str,
        r: pb::CreateWebhookRequest,
    ) -> Result<(pb::Webhook, String)> {
        self.policy
            .check_url(&r.url)
            .map_err(|e| Error::invalid("url", e))?;
        Topics::parse(&r.events).map_err(|(i, e)| Error::invalid(format!("events[{i}]"), e))?;
        if r.description.chars().count() > MAX_DESCRIPTION {
            return Err(Error::invalid(
                "description",
                format!("is over {MAX_DESCRIPTION} characters"),
            ));
        }
        let secret = if r.secret.is_empty() {
            Secret::generate().text()
        } else {
            Secret::parse(&r.secret).map_err(|e| Error::invalid("secret", e))?;
            r.secret
        };
        self.tenants.refresh().await?;
        let made = self
            .tenants
            .of(tenant)
            .iter()
            .filter(|s| !s.from_config)
            .count();
        if made >= self.config.max_per_tenant {
            return Err(Error::Exhausted {
                field: "url".into(),
                message: format!(
                    "this tenant has {made} webhooks, this server's limit (webhooks.max_per_tenant): delete one first"
                ),
            });
        }
        let stored = Stored {
            id: format!("wh_{}", &uuid::Uuid::new_v4().simple().to_string()[..20]),
            tenant: tenant.to_owned(),
            url: r.url,
            events: r.events,
            description: r.description,
            created_ms: now_ms(),
            secret: secret.clone(),
            previous: String::new(),
            previous_until_ms: 0,
            from_config: false,
        };
        let shown = view(&stored);
        self.tenants.put(stored).await?;
        Ok((shown, secret))
    }

    /// ListWebhooks.
    pub async fn list(&self, tenant: &str) -> Result<Vec<pb::Webhook>> {
        self.tenants.refresh().await?;
        Ok(self.tenants.of(tenant).iter().map(|s| view(s)).collect())
    }

    fn named(&self, tenant: &str, id: &str) -> Result<std::sync::Arc<Stored>> {
        if id.is_empty() {
            return Err(Error::invalid("webhook_id", "is required"));
        }
        self.tenants.find(tenant, id).ok_or_else(|| not_found(id))
    }

    /// GetWebhook.
    pub async fn get(&self, tenant: &str, id: &str) -> Result<pb::Webhook> {
        self.tenants.refresh().await?;
        let s = self.named(tenant, id)?;
        Ok(view(&s))
    }

    /// DeleteWebhook.
    pub async fn delete(&self, tenant: &str, id: &str) -> Result<()> {
        self.tenants.refresh().await?;
        let s = self.named(tenant, id)?;
        if s.from_config {
            return Err(Error::FailedPrecondition {
                field: "webhook_id",
                message: format!(
                    "{id} is declared in the server's config (webhooks.subscriptions): change it there"
                ),
            });
        }
        if !self.tenants.remove(tenant, id).await? {
            return Err(not_found(id));
        }
        Ok(())
    }

    /// RotateWebhookSecret: the subscription and its new secret.
    pub async fn rotate(
        &self,
        tenant: &str,
        id: &str,
        previous_valid_for: Option<Duration>,
    ) -> Result<(pb::Webhook, String)> {
        self.tenants.refresh().await?;
        let s = self.named(tenant, id)?;
        if s.from_config {
            return Err(Error::FailedPrecondition {
                field: "webhook_id",
                message: format!(
                    "{id} is declared in the server's config: rotate its secret_file there"
                ),
            });
        }
        let overlap = previous_valid_for.unwrap_or(self.config.rotation_overlap);
        if overlap > MAX_OVERLAP {
            return Err(Error::invalid("previous_valid_for", "is over 7 days"));
        }
        let secret = Secret::generate().text();
        let mut next = (*s).clone();
        next.previous = std::mem::replace(&mut next.secret, secret.clone());
        next.previous_until_ms = now_ms() + overlap.as_millis() as i64;
        let shown = view(&next);
        self.tenants.put(next).await?;
        Ok((shown, secret))
    }

    /// ListDeadLetters.
    pub async fn dead_letters(&self, tenant: &str, page_size: u32) -> Result<Vec<pb::DeadLetter>> {
        let size = match page_size {
            0 => 100,
            n if n > 1000 => {
                return Err(Error::invalid("page_size", "is over 1000"));
            }
            n => n as usize,
        };
        Ok(self
            .outbox
            .dead(tenant, size)
            .await?
            .iter()
            .map(dead_view)
            .collect())
    }

    /// RedeliverDeadLetter: queued again with its id, tried from the
    /// first try's schedule.
    pub async fn redeliver(&self, tenant: &str, id: &str) -> Result<()> {
        if id.is_empty() {
            return Err(Error::invalid("delivery_id", "is required"));
        }
        let Some(dead) = self.outbox.unbury(tenant, id).await? else {
            return Err(Error::NotFound {
                field: "delivery_id",
                message: format!("dead letter {id} not found (for this tenant)"),
            });
        };
        let mut d = dead.delivery.clone();
        d.attempts = 0;
        d.not_before_ms = 0;
        d.last_error.clear();
        d.created_ms = now_ms();
        if let Err(e) = self.outbox.push(vec![d]).await {
            // Back where it was: a redelivery that did not queue loses
            // nothing.
            let _ = self.outbox.bury(&dead, self.config.max_dead_letters).await;
            return Err(e);
        }
        self.wake.notify_one();
        Ok(())
    }
}
