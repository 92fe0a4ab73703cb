//! A2A push notifications (A2A §3.1.7–3.1.10, §4.3.3): a task's push
//! configs (create, get, list, delete, on all three bindings) and their
//! deliveries. A config given with `SendMessage` or made while its task
//! works becomes a webhook of the task's run (`crate::webhook`, format
//! `a2a`): the same outbox, retries, dead letters, allowed hosts and
//! durability as Baton's own webhooks; its body is a `StreamResponse` of
//! the task's state changes (a status update, then the task itself when
//! it ends), sent with `Authorization: <scheme> <credentials>` and the
//! config's `token` in `X-A2A-Notification-Token`.
//!
//! Configs are kept beside the run (in Redis when runs are durable, for
//! the runs' retention) so that Get and List answer on any replica, for
//! ended tasks too. A config made on a replica that does not run the task
//! is kept, and is delivered to from the task's next resume on; one made
//! with the message that starts or answers the task always is. Answers
//! never show the config's credentials.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use baton_proto::{a2a::v1 as lf, v1 as pb};

use super::{error::A2aError, task::Task};
use crate::{
    shared_state::{SharedState, hex, redis_error},
    webhook::{RunInfo, Shape},
};

type Result<T> = std::result::Result<T, A2aError>;

/// Most push configs a task may have.
pub const MAX_PER_TASK: usize = 16;

/// The `a2a` shape: a task's state changes as `StreamResponse`s.
pub struct A2aShape {
    task: Mutex<Task>,
}

impl A2aShape {
    /// The shape of run `run`'s task.
    pub fn new(run: &RunInfo) -> Self {
        Self {
            task: Mutex::new(Task::new(&run.run_id, &run.trace_id)),
        }
    }
}

impl Shape for A2aShape {
    fn body(&self, _run: &RunInfo, event: &pb::RunEvent) -> Option<(String, String)> {
        let mut task = self.task.lock().unwrap_or_else(|p| p.into_inner());
        let before = task.state();
        let updates = task.apply(event);
        if task.ended {
            let r = lf::StreamResponse {
                payload: Some(lf::stream_response::Payload::Task(task.to_task(None, true))),
            };
            return Some(("a2a.task".into(), serde_json::to_string(&r).ok()?));
        }
        if task.state() == before {
            return None;
        }
        let status = updates
            .into_iter()
            .rev()
            .find(|u| matches!(u, lf::stream_response::Payload::StatusUpdate(_)))?;
        let r = lf::StreamResponse {
            payload: Some(status),
        };
        Some(("a2a.status".into(), serde_json::to_string(&r).ok()?))
    }
}

/// Where configs are kept.
pub enum Configs {
    /// In the process: by (tenant, task).
    Memory(Mutex<HashMap<(String, String), Vec<lf::TaskPushNotificationConfig>>>),
    /// In Redis, a hash per task and tenant, kept the runs' retention.
    Redis(Arc<SharedState>),
}

/// Tasks whose configs memory mode keeps at most (the oldest go).
const MEMORY_TASKS: usize = 100_000;

impl Configs {
    /// Kept in `shared`'s Redis, or in the process.
    pub fn new(shared: Option<Arc<SharedState>>) -> Self {
        match shared {
            Some(s) => Self::Redis(s),
            None => Self::Memory(Mutex::default()),
        }
    }

    fn key(shared: &SharedState, tenant: &str, task: &str) -> String {
        shared.key("a2apush", task, &hex(tenant))
    }

    pub(super) async fn all(
        &self,
        tenant: &str,
        task: &str,
    ) -> Result<Vec<lf::TaskPushNotificationConfig>> {
        match self {
            Self::Memory(m) => Ok(m
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&(tenant.to_owned(), task.to_owned()))
                .cloned()
                .unwrap_or_default()),
            Self::Redis(shared) => {
                let mut c = shared.conn().await?;
                let all: HashMap<String, String> = redis::cmd("HGETALL")
                    .arg(Self::key(shared, tenant, task))
                    .query_async(&mut c)
                    .await
                    .map_err(redis_error)?;
                let mut out: Vec<lf::TaskPushNotificationConfig> = all
                    .values()
                    .filter_map(|v| serde_json::from_str(v).ok())
                    .collect();
                out.sort_by(|a, b| a.id.cmp(&b.id));
                Ok(out)
            }
        }
    }

    pub(super) async fn put(&self, tenant: &str, c: &lf::TaskPushNotificationConfig) -> Result<()> {
        match self {
            Self::Memory(m) => {
                let mut m = m.lock().unwrap_or_else(|p| p.into_inner());
                if m.len() >= MEMORY_TASKS
                    && !m.contains_key(&(tenant.to_owned(), c.task_id.clone()))
                    && let Some(k) = m.keys().next().cloned()
                {
                    m.remove(&k);
                }
                let list = m.entry((tenant.to_owned(), c.task_id.clone())).or_default();
                list.retain(|o| o.id != c.id);
                list.push(c.clone());
                Ok(())
            }
            Self::Redis(shared) => {
                let key = Self::key(shared, tenant, &c.task_id);
                let raw = serde_json::to_string(c).unwrap_or_default();
                let mut conn = shared.conn().await?;
                let _: redis::Value = redis::pipe()
                    .hset(&key, &c.id, raw)
                    .pexpire(&key, shared.retention().as_millis() as i64)
                    .query_async(&mut conn)
                    .await
                    .map_err(redis_error)?;
                Ok(())
            }
        }
    }

    pub(super) async fn remove(&self, tenant: &str, task: &str, id: &str) -> Result<()> {
        match self {
            Self::Memory(m) => {
                if let Some(list) = m
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_mut(&(tenant.to_owned(), task.to_owned()))
                {
                    list.retain(|o| o.id != id);
                }
                Ok(())
            }
            Self::Redis(shared) => {
                let mut c = shared.conn().await?;
                let _: i64 = redis::cmd("HDEL")
                    .arg(Self::key(shared, tenant, task))
                    .arg(id)
                    .query_async(&mut c)
                    .await
                    .map_err(redis_error)?;
                Ok(())
            }
        }
    }
}

/// A config as answers show it: without its credentials.
pub(super) fn shown(mut c: lf::TaskPushNotificationConfig) -> lf::TaskPushNotificationConfig {
    if let Some(a) = c.authentication.as_mut() {
        a.credentials.clear();
    }
    c
}

/// The run webhook a config is (format `a2a`).
pub fn as_webhook(c: &lf::TaskPushNotificationConfig) -> pb::RunWebhook {
    let authorization = c
        .authentication
        .as_ref()
        .map(|a| format!("{} {}", a.scheme, a.credentials).trim().to_owned())
        .unwrap_or_default();
    pb::RunWebhook {
        url: c.url.clone(),
        events: Vec::new(),
        secret: String::new(),
        authorization,
        token: c.token.clone(),
        format: "a2a".into(),
        id: c.id.clone(),
    }
}
