//! The push notification config operations (create, get, list, delete)
//! over the configs and the webhooks (see `super::push`).

use baton_proto::{a2a::v1 as lf, v1 as pb};

use super::{
    error::A2aError,
    push::{MAX_PER_TASK, as_webhook, shown},
    service::Service,
};
use crate::app::Caller;

type Result<T> = std::result::Result<T, A2aError>;

/// The stream part of a config's deliveries.
fn sub_of(id: &str) -> String {
    format!("a/{id}")
}

impl Service {
    /// Checks a config (its URL against the server's allowed hosts, its
    /// authentication), fills its task id and id; errors name A2A's
    /// fields.
    pub(super) fn checked_config(
        &self,
        task_id: &str,
        mut c: lf::TaskPushNotificationConfig,
    ) -> Result<lf::TaskPushNotificationConfig> {
        if !c.task_id.is_empty() && c.task_id != task_id {
            return Err(A2aError::invalid(
                "taskId",
                format!("{} is not the task this call is for ({task_id})", c.task_id),
            ));
        }
        c.task_id = task_id.to_owned();
        if c.id.is_empty() {
            c.id = uuid::Uuid::new_v4().to_string();
        }
        if c.id.len() > 128 || c.id.contains(['/', '\r', '\n']) {
            return Err(A2aError::invalid(
                "id",
                "must be 1 to 128 characters, without / or line breaks",
            ));
        }
        if let Some(a) = &c.authentication
            && a.scheme.trim().is_empty()
        {
            return Err(A2aError::invalid(
                "authentication.scheme",
                "is required (Bearer, Basic, …)",
            ));
        }
        self.core
            .webhooks()
            .check_own(vec![as_webhook(&c)])
            .map_err(|e| match e {
                crate::error::Error::InvalidArgument { field, message } => A2aError::invalid(
                    match field.trim_start_matches("webhooks[0].") {
                        "authorization" => "authentication",
                        f => f,
                    },
                    message,
                ),
                other => other.into(),
            })?;
        Ok(c)
    }

    /// Keeps a checked config and, when its task works on this replica,
    /// delivers to it from now on.
    pub(super) async fn keep_config(
        &self,
        caller: &Caller,
        c: &lf::TaskPushNotificationConfig,
        running_here: bool,
    ) -> Result<()> {
        let existing = self.push.all(&caller.tenant, &c.task_id).await?;
        if existing.len() >= MAX_PER_TASK && !existing.iter().any(|o| o.id == c.id) {
            return Err(A2aError::invalid(
                "id",
                format!(
                    "task {} has {MAX_PER_TASK} push configs, the most it may: delete one first",
                    c.task_id
                ),
            ));
        }
        self.push.put(&caller.tenant, c).await?;
        let webhooks = self.core.webhooks();
        webhooks
            .unstop(&format!("{}/{}", c.task_id, sub_of(&c.id)))
            .await?;
        // Kept for the replica that resumes the task.
        webhooks.keep_added(&c.task_id, as_webhook(c)).await?;
        if running_here && let Ok(record) = self.core.runs().get(&c.task_id) {
            let hook = self
                .core
                .webhooks()
                .check_own(vec![as_webhook(c)])
                .ok()
                .and_then(|mut h| h.pop());
            if let Some(hook) = hook {
                self.core.webhooks().add_hook(&record, hook);
            }
        }
        Ok(())
    }

    /// `CreateTaskPushNotificationConfig` (the HTTP+JSON binding passes
    /// the path's task id).
    pub async fn create_push(
        &self,
        caller: &Caller,
        agent: &str,
        task_id: &str,
        c: lf::TaskPushNotificationConfig,
    ) -> Result<lf::TaskPushNotificationConfig> {
        let task_id = if task_id.is_empty() {
            c.task_id.clone()
        } else {
            task_id.to_owned()
        };
        let view = self.view_of(caller, agent, &task_id).await?;
        let c = self.checked_config(&task_id, c)?;
        self.keep_config(caller, &c, view.status == pb::RunStatus::Running)
            .await?;
        Ok(shown(c))
    }

    /// `GetTaskPushNotificationConfig`.
    pub async fn get_push(
        &self,
        caller: &Caller,
        agent: &str,
        task_id: &str,
        id: &str,
    ) -> Result<lf::TaskPushNotificationConfig> {
        self.view_of(caller, agent, task_id).await?;
        if id.is_empty() {
            return Err(A2aError::invalid("id", "must not be empty"));
        }
        self.push
            .all(&caller.tenant, task_id)
            .await?
            .into_iter()
            .find(|c| c.id == id)
            .map(shown)
            .ok_or_else(|| {
                A2aError::TaskNotFound(format!(
                    "push notification config {id} of task {task_id} not found"
                ))
            })
    }

    /// `ListTaskPushNotificationConfigs` (one page: a task has at most
    /// [`MAX_PER_TASK`]).
    pub async fn list_push(
        &self,
        caller: &Caller,
        agent: &str,
        task_id: &str,
    ) -> Result<lf::ListTaskPushNotificationConfigsResponse> {
        self.view_of(caller, agent, task_id).await?;
        Ok(lf::ListTaskPushNotificationConfigsResponse {
            configs: self
                .push
                .all(&caller.tenant, task_id)
                .await?
                .into_iter()
                .map(shown)
                .collect(),
            next_page_token: String::new(),
        })
    }

    /// `DeleteTaskPushNotificationConfig`: idempotent; nothing more is
    /// sent to it (what this replica still holds for it is dropped).
    pub async fn delete_push(
        &self,
        caller: &Caller,
        agent: &str,
        task_id: &str,
        id: &str,
    ) -> Result<()> {
        self.view_of(caller, agent, task_id).await?;
        if id.is_empty() {
            return Err(A2aError::invalid("id", "must not be empty"));
        }
        self.push.remove(&caller.tenant, task_id, id).await?;
        let record = self.core.runs().get(task_id).ok();
        self.core
            .webhooks()
            .remove_hook(record.as_deref(), task_id, &sub_of(id))
            .await?;
        Ok(())
    }
}
