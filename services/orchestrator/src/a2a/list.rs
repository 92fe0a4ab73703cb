//! `ListTasks`: the caller's tenant's tasks of one agent, filtered,
//! sorted by last update (newest first) and paged with a cursor.

use baton_proto::{a2a::v1 as lf, v1 as pb};
use futures::StreamExt as _;

use super::{error::A2aError, message::context_trace, service::Service, task::Task};
use crate::{
    app::Caller,
    request::{MAX_RUNS_PAGE, RunsQuery},
    run::{events::Filter, view::RunView},
};

type Result<T> = std::result::Result<T, A2aError>;

/// The default `ListTasks` page.
pub const DEFAULT_PAGE: usize = 50;
/// The largest `ListTasks` page.
pub const MAX_PAGE: usize = 100;

impl Service {
    /// `ListTasks`: the caller's tenant's tasks of this agent, the most
    /// recently updated first.
    pub async fn list(
        &self,
        caller: &Caller,
        agent: &str,
        request: &lf::ListTasksRequest,
    ) -> Result<lf::ListTasksResponse> {
        let size = match request.page_size {
            None | Some(0) => DEFAULT_PAGE,
            Some(n) if n < 0 || n as usize > MAX_PAGE => {
                return Err(A2aError::invalid(
                    "pageSize",
                    format!("must be between 1 and {MAX_PAGE} (got {n})"),
                ));
            }
            Some(n) => n as usize,
        };
        if let Some(n) = request.history_length
            && n < 0
        {
            return Err(A2aError::invalid("historyLength", "must not be negative"));
        }
        let state = lf::TaskState::try_from(request.status).map_err(|_| {
            A2aError::invalid("status", format!("{} is not a TaskState", request.status))
        })?;
        let after = if request.page_token.is_empty() {
            None
        } else {
            Some(parse_cursor(&request.page_token).ok_or_else(|| {
                A2aError::invalid("pageToken", "is not a token this server gave out")
            })?)
        };
        let since = request
            .status_timestamp_after
            .and_then(|t| std::time::SystemTime::try_from(t).ok());
        // Every run of the tenant, then this agent's, filtered and sorted
        // here: the core keeps runs in start order.
        let mut all = Vec::new();
        let mut query = RunsQuery {
            status: None,
            waiting: false,
            failing_scores: false,
            after: None,
            size: MAX_RUNS_PAGE,
        };
        loop {
            let page = self.core.list(caller, &query).await?;
            let last = page.runs.last().map(|r| r.run_id.clone());
            all.extend(page.runs.into_iter().filter(|r| r.target == agent));
            match (last, page.next_page_token.is_empty()) {
                (Some(last), false) => query.after = Some(last),
                _ => break,
            }
        }
        let mut tasks: Vec<(Cursor, Task)> = all
            .iter()
            .filter(|r| {
                request.context_id.is_empty()
                    || r.trace_id == context_trace(&caller.tenant, &request.context_id)
            })
            .filter(|r| since.is_none_or(|t| updated(r) > t))
            .map(|r| (cursor(r), Task::of_view(r)))
            .filter(|(_, t)| state == lf::TaskState::Unspecified || t.state() == state)
            .collect();
        let total = tasks.len();
        tasks.sort_by(|a, b| b.0.cmp(&a.0));
        let start = match &after {
            Some(after) => tasks.partition_point(|(c, _)| c >= after),
            None => 0,
        };
        let page: Vec<_> = tasks.iter().skip(start).take(size).collect();
        let more = start + page.len() < tasks.len();
        let next_page_token = match page.last() {
            Some((c, _)) if more => format!("v1.{}.{}", c.0, c.1),
            _ => String::new(),
        };
        let artifacts = request.include_artifacts.unwrap_or(false);
        let history = Some(request.history_length.unwrap_or(0));
        let mut listed = Vec::with_capacity(page.len());
        for (_, t) in page {
            // A context a caller chose, and an agent's A2A messages mode,
            // are kept on the run's RunStarted.
            let labels = self.labels_of(caller, t.id()).await;
            let view = all.iter().find(|r| r.run_id == t.id());
            let task = match view {
                Some(view) if !labels.is_empty() => Task::of_view_labelled(view, &labels),
                _ => t.clone(),
            };
            listed.push(task.to_task(history, artifacts));
        }
        Ok(lf::ListTasksResponse {
            tasks: listed,
            next_page_token,
            page_size: size as i32,
            total_size: total as i32,
        })
    }

    /// The labels of task `id`'s run, from its `RunStarted`.
    pub(super) async fn labels_of(
        &self,
        caller: &Caller,
        id: &str,
    ) -> std::collections::HashMap<String, String> {
        let Ok(mut events) = self.core.watch(caller, id, 0, Filter::default()).await else {
            return Default::default();
        };
        match events.next().await {
            Some(Ok(pb::RunEvent {
                payload: Some(pb::run_event::Payload::RunStarted(s)),
                ..
            })) => s.labels,
            _ => Default::default(),
        }
    }
}

/// When a run was last updated (its end, or its start).
fn updated(view: &RunView) -> std::time::SystemTime {
    view.ended_at.unwrap_or(view.started_at)
}

/// Where a task sorts in `ListTasks`: last update (ms), then id.
type Cursor = (i64, String);

fn cursor(view: &RunView) -> Cursor {
    let ms = updated(view)
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    (ms, view.run_id.clone())
}

fn parse_cursor(token: &str) -> Option<Cursor> {
    let rest = token.strip_prefix("v1.")?;
    let (ms, id) = rest.split_once('.')?;
    Some((ms.parse().ok()?, id.to_owned()))
}
