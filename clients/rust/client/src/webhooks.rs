//! Webhooks (CreateWebhook … RedeliverDeadLetter): a tenant's
//! subscriptions and its dead letters. A run's own webhooks are
//! `RunAgentRequest.webhooks`.

use crate::{Error, OrchestratorClient, pb};

impl OrchestratorClient {
    /// Subscribes a URL to the tenant's runs; the answer holds the secret,
    /// shown this once.
    pub async fn create_webhook(
        &self,
        request: pb::CreateWebhookRequest,
    ) -> Result<pb::CreateWebhookResponse, Error> {
        Ok(self
            .raw()
            .create_webhook(self.request(request))
            .await?
            .into_inner())
    }

    /// The tenant's webhooks.
    pub async fn list_webhooks(&self) -> Result<Vec<pb::Webhook>, Error> {
        Ok(self
            .raw()
            .list_webhooks(self.request(pb::ListWebhooksRequest {}))
            .await?
            .into_inner()
            .webhooks)
    }

    /// One webhook.
    pub async fn get_webhook(&self, id: &str) -> Result<pb::Webhook, Error> {
        Ok(self
            .raw()
            .get_webhook(self.request(pb::GetWebhookRequest {
                webhook_id: id.to_owned(),
            }))
            .await?
            .into_inner())
    }

    /// Deletes a webhook.
    pub async fn delete_webhook(&self, id: &str) -> Result<(), Error> {
        self.raw()
            .delete_webhook(self.request(pb::DeleteWebhookRequest {
                webhook_id: id.to_owned(),
            }))
            .await?;
        Ok(())
    }

    /// A new secret for a webhook; the previous one signs too for
    /// `previous_valid_for` (`None`: the server's default).
    pub async fn rotate_webhook_secret(
        &self,
        id: &str,
        previous_valid_for: Option<std::time::Duration>,
    ) -> Result<pb::RotateWebhookSecretResponse, Error> {
        Ok(self
            .raw()
            .rotate_webhook_secret(self.request(pb::RotateWebhookSecretRequest {
                webhook_id: id.to_owned(),
                previous_valid_for: previous_valid_for.map(Into::into),
            }))
            .await?
            .into_inner())
    }

    /// The tenant's dead letters, newest first (at most `page_size`; 0:
    /// 100).
    pub async fn list_dead_letters(&self, page_size: u32) -> Result<Vec<pb::DeadLetter>, Error> {
        Ok(self
            .raw()
            .list_dead_letters(self.request(pb::ListDeadLettersRequest { page_size }))
            .await?
            .into_inner()
            .dead_letters)
    }

    /// Delivers a dead letter again (same `webhook-id`).
    pub async fn redeliver_dead_letter(&self, delivery_id: &str) -> Result<(), Error> {
        self.raw()
            .redeliver_dead_letter(self.request(pb::RedeliverDeadLetterRequest {
                delivery_id: delivery_id.to_owned(),
            }))
            .await?;
        Ok(())
    }
}
