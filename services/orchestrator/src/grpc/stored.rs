//! Durable runs read from the run store when this replica cannot answer
//! from its own records: a run that is not here, or a log that does not
//! reach back far enough (a run resumed here holds only its new events).

use std::sync::Arc;

use super::OrchestratorService;
use crate::{
    auth::tenant_of,
    error::{Error, Result},
    run::{
        durable::{RedisRuns, RunMeta},
        log::LogRead,
    },
};

impl OrchestratorService {
    /// A ListRuns page from the run store when runs are durable (every
    /// replica's runs); `None` otherwise.
    pub(super) async fn stored_runs(
        &self,
        tenant: &str,
        status: Option<baton_proto::v1::RunStatus>,
        after: Option<&str>,
        size: usize,
    ) -> Result<Option<baton_proto::v1::ListRunsResponse>> {
        let Some(durable) = &self.services.durable else {
            return Ok(None);
        };
        let (runs, more) = durable.list(tenant, status, after, size).await?;
        let next_page_token = match runs.last() {
            Some(last) if more => format!("v1.{}", last.run_id),
            _ => String::new(),
        };
        Ok(Some(baton_proto::v1::ListRunsResponse {
            runs: runs.iter().map(RunMeta::to_summary).collect(),
            next_page_token,
        }))
    }

    /// Where a WatchRun of a durable run reads from: the run store, when
    /// the run is not here or this replica's log of it does not reach back
    /// to `after_seq` (a run resumed here holds only its new events); `None`
    /// to read this replica's log.
    pub(super) async fn stored_log(
        &self,
        ext: &tonic::Extensions,
        run_id: &str,
        after_seq: u64,
    ) -> Result<Option<Arc<RedisRuns>>> {
        let Some(durable) = &self.services.durable else {
            return Ok(None);
        };
        let here = match self.runs.get(run_id) {
            Ok(run) => Some(run),
            Err(Error::NotFound { .. }) => None,
            Err(e) => return Err(e),
        };
        if let Some(run) = here
            && run.tenant == tenant_of(ext)
            && after_seq >= run.resumed_after
            && !matches!(run.events_after(after_seq, 0), LogRead::Gone(_))
        {
            return Ok(None);
        }
        match durable.meta(run_id).await? {
            Some(meta) if meta.tenant == tenant_of(ext) => Ok(Some(durable.clone())),
            _ => Err(Error::NotFound {
                field: "run_id",
                message: format!("no run {run_id:?}"),
            }),
        }
    }

    /// A run that is not on this replica, from the run store when runs are
    /// durable: `None` when it is here (or runs are not durable);
    /// `NOT_FOUND` when no replica has it for the caller's tenant.
    pub(super) async fn stored_run(
        &self,
        ext: &tonic::Extensions,
        run_id: &str,
    ) -> Result<Option<RunMeta>> {
        let Some(durable) = &self.services.durable else {
            return Ok(None);
        };
        match self.runs.get(run_id) {
            Ok(_) => return Ok(None),
            Err(Error::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
        match durable.meta(run_id).await? {
            Some(meta) if meta.tenant == tenant_of(ext) => Ok(Some(meta)),
            _ => Err(Error::NotFound {
                field: "run_id",
                message: format!("no run {run_id:?}"),
            }),
        }
    }
}
