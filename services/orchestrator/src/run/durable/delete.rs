//! Deleting a run's record (its conversation was deleted: the run's
//! events, journal and request go with it).

use super::{RedisRuns, redis_error};
use crate::error::Error;

impl RedisRuns {
    /// Deletes every key of `run_id` and its entry in `tenant`'s index;
    /// whether it was there.
    pub async fn delete(&self, tenant: &str, run_id: &str) -> Result<bool, Error> {
        let mut c = self.conn().await?;
        let removed: i64 = redis::cmd("DEL")
            .arg(self.meta_key(run_id))
            .arg(self.log_key(run_id))
            .arg(self.journal_key(run_id))
            .arg(self.inbox_key(run_id))
            .arg(self.taken_key(run_id))
            .query_async(&mut c)
            .await
            .map_err(redis_error)?;
        let mut c = self.conn().await?;
        redis::cmd("ZREM")
            .arg(self.index_key(tenant))
            .arg(run_id)
            .query_async::<i64>(&mut c)
            .await
            .map_err(redis_error)?;
        let mut c = self.conn().await?;
        redis::cmd("ZREM")
            .arg(self.leases_key())
            .arg(run_id)
            .query_async::<i64>(&mut c)
            .await
            .map_err(redis_error)?;
        Ok(removed > 0)
    }
}
