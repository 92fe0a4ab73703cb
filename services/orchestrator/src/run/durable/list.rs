//! `ListRuns` from Redis: a tenant's runs, newest first, by status.

use std::collections::HashMap;

use baton_proto::v1 as pb;

use super::{RedisRuns, RunMeta, decode_meta, redis_error};
use crate::error::Error;

impl RedisRuns {
    /// A page of `tenant`'s runs (of `status` when set), newest first,
    /// after the run `after`; and whether more follow.
    pub async fn list(
        &self,
        tenant: &str,
        status: Option<pb::RunStatus>,
        after: Option<&str>,
        size: usize,
    ) -> Result<(Vec<RunMeta>, bool), Error> {
        self.list_waiting(tenant, status, false, after, size).await
    }

    /// [`Self::list`], only of runs waiting for a person when `waiting`.
    pub async fn list_waiting(
        &self,
        tenant: &str,
        status: Option<pb::RunStatus>,
        waiting: bool,
        after: Option<&str>,
        size: usize,
    ) -> Result<(Vec<RunMeta>, bool), Error> {
        let mut c = self.conn().await?;
        let index = self.index_key(tenant);
        let batch = (size + 1).max(64);
        let mut cursor = after.map(str::to_owned);
        let mut found = Vec::new();
        loop {
            let max = cursor
                .as_ref()
                .map_or_else(|| "+".to_owned(), |id| format!("({id}"));
            let ids: Vec<String> = redis::cmd("ZREVRANGEBYLEX")
                .arg(&index)
                .arg(&max)
                .arg("-")
                .arg("LIMIT")
                .arg(0)
                .arg(batch)
                .query_async(&mut c)
                .await
                .map_err(redis_error)?;
            // One command per run, concurrently: the runs' keys are in
            // different slots of a Cluster, which a pipeline cannot span.
            let metas: Vec<HashMap<String, Vec<u8>>> =
                futures::future::try_join_all(ids.iter().map(|id| async move {
                    let mut c = self.conn().await?;
                    redis::cmd("HGETALL")
                        .arg(self.meta_key(id))
                        .query_async::<HashMap<String, Vec<u8>>>(&mut c)
                        .await
                        .map_err(redis_error)
                }))
                .await?;
            let mut expired = Vec::new();
            for (id, fields) in ids.iter().zip(&metas) {
                match decode_meta(id, fields) {
                    // A run being created is in the index a moment before
                    // its record (two commands sent together): only one
                    // older than its record could last has expired.
                    None if being_created(id, self.retention.min(CREATING)) => {}
                    None => expired.push(id.clone()),
                    Some(m) if m.tenant != tenant => {}
                    Some(m) if status.is_some_and(|s| s != m.status) => {}
                    Some(m) if waiting && !m.waits() => {}
                    Some(m) => found.push(m),
                }
            }
            if !expired.is_empty() {
                // Their keys expired: forget them (best effort).
                let _ = redis::cmd("ZREM")
                    .arg(&index)
                    .arg(&expired)
                    .query_async::<()>(&mut c)
                    .await;
            }
            if found.len() > size || ids.len() < batch {
                break;
            }
            cursor = ids.last().cloned();
        }
        let more = found.len() > size;
        found.truncate(size);
        Ok((found, more))
    }
}

/// How long after its id was made a run without a record may still be
/// being created, at most (a record lasts at least the retention from the
/// run's start, so a shorter retention bounds it too).
const CREATING: std::time::Duration = std::time::Duration::from_secs(300);

/// Whether run `id` (a UUIDv7, whose first 48 bits are when it was made)
/// was made less than `window` ago.
fn being_created(id: &str, window: std::time::Duration) -> bool {
    let Some(made) = uuid::Uuid::try_parse(id)
        .ok()
        .and_then(|u| u.get_timestamp())
        .map(|t| {
            let (secs, nanos) = t.to_unix();
            std::time::UNIX_EPOCH + std::time::Duration::new(secs, nanos)
        })
    else {
        return false;
    };
    std::time::SystemTime::now()
        .duration_since(made)
        .map_or(true, |age| age < window)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_made_a_moment_ago_is_being_created_and_an_old_one_is_not() {
        assert!(being_created(&uuid::Uuid::now_v7().to_string(), CREATING));
        let old = uuid::Uuid::new_v7(uuid::Timestamp::from_unix(
            uuid::NoContext,
            1_700_000_000,
            0,
        ));
        assert!(!being_created(&old.to_string(), CREATING));
        assert!(!being_created("not-a-uuid", CREATING));
        let now = uuid::Uuid::now_v7().to_string();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!being_created(&now, std::time::Duration::from_millis(10)));
    }
}
