//! The webhooks API of the core (CreateWebhook … RedeliverDeadLetter):
//! the caller's tenant's subscriptions and dead letters, each call
//! audited (see `crate::webhook`).

use std::time::Duration;

use baton_proto::v1 as pb;

use super::orchestrator::{Caller, Orchestrator, audit};
use crate::error::Result;

impl Orchestrator {
    /// CreateWebhook.
    pub async fn create_webhook(
        &self,
        caller: &Caller,
        r: pb::CreateWebhookRequest,
    ) -> Result<pb::CreateWebhookResponse> {
        let made = self.webhooks.create(&caller.tenant, r).await;
        audit("CreateWebhook", caller, "", "", &made);
        let (webhook, secret) = made?;
        tracing::info!(tenant = %caller.tenant, webhook_id = %webhook.webhook_id, url = %crate::webhook::hosts::redacted(&webhook.url), "webhook created");
        Ok(pb::CreateWebhookResponse {
            webhook: Some(webhook),
            secret,
        })
    }

    /// ListWebhooks.
    pub async fn list_webhooks(&self, caller: &Caller) -> Result<pb::ListWebhooksResponse> {
        let webhooks = self.webhooks.list(&caller.tenant).await?;
        Ok(pb::ListWebhooksResponse { webhooks })
    }

    /// GetWebhook.
    pub async fn get_webhook(&self, caller: &Caller, id: &str) -> Result<pb::Webhook> {
        self.webhooks.get(&caller.tenant, id).await
    }

    /// DeleteWebhook.
    pub async fn delete_webhook(&self, caller: &Caller, id: &str) -> Result<()> {
        let deleted = self.webhooks.delete(&caller.tenant, id).await;
        audit("DeleteWebhook", caller, "", "", &deleted);
        deleted
    }

    /// RotateWebhookSecret.
    pub async fn rotate_webhook_secret(
        &self,
        caller: &Caller,
        id: &str,
        previous_valid_for: Option<Duration>,
    ) -> Result<pb::RotateWebhookSecretResponse> {
        let rotated = self
            .webhooks
            .rotate(&caller.tenant, id, previous_valid_for)
            .await;
        audit("RotateWebhookSecret", caller, "", "", &rotated);
        let (webhook, secret) = rotated?;
        Ok(pb::RotateWebhookSecretResponse {
            webhook: Some(webhook),
            secret,
        })
    }

    /// ListDeadLetters.
    pub async fn list_dead_letters(
        &self,
        caller: &Caller,
        page_size: u32,
    ) -> Result<pb::ListDeadLettersResponse> {
        let dead_letters = self
            .webhooks
            .dead_letters(&caller.tenant, page_size)
            .await?;
        Ok(pb::ListDeadLettersResponse { dead_letters })
    }

    /// RedeliverDeadLetter.
    pub async fn redeliver_dead_letter(&self, caller: &Caller, id: &str) -> Result<()> {
        let done = self.webhooks.redeliver(&caller.tenant, id).await;
        audit("RedeliverDeadLetter", caller, "", "", &done);
        done
    }
}
