//! Ownership of a durable run kept up and given up: the lease renewed
//! (with the questions its owner waits for), released, and a fork's start
//! marked done.

use std::sync::LazyLock;

use redis::Script;

use super::{RedisRuns, lease::Abandon, redis_error};
use crate::error::Error;

impl RedisRuns {
    /// A fork's history is written (owned with `epoch`): from now on a
    /// replica that claims it resumes it. Until then (`starting` in its
    /// hash) a claim ends it failed instead: a fork whose start failed, or
    /// whose replica stopped while it wrote its history, never runs from
    /// a part of it. `false` when another replica owns it now.
    pub async fn started(&self, run_id: &str, epoch: u64) -> Result<bool, Error> {
        static STARTED: LazyLock<Script> = LazyLock::new(|| {
            Script::new(
                "if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then return 0 end
redis.call('HDEL', KEYS[1], 'starting')
return 1",
            )
        });
        let mut c = self.conn().await?;
        let started: i64 = STARTED
            .key(self.meta_key(run_id))
            .arg(epoch)
            .invoke_async(&mut c)
            .await
            .map_err(redis_error)?;
        Ok(started == 1)
    }

    /// Gives up fork `run_id` (owned with `epoch`) whose start failed here,
    /// unless its start was recorded after all (a reply lost after Redis
    /// applied it): then it is started, and this replica runs it.
    pub async fn abandon_start(&self, run_id: &str, epoch: u64) -> Result<Abandon, Error> {
        static ABANDON: LazyLock<Script> = LazyLock::new(|| {
            Script::new(
                "if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then return 0 end
if redis.call('HEXISTS', KEYS[1], 'starting') == 0 then return 2 end
redis.call('HINCRBY', KEYS[1], 'epoch', 1)
redis.call('HSET', KEYS[1], 'owner', '', 'lease_until', 0)
return 1",
            )
        });
        let mut c = self.conn().await?;
        let answer: i64 = ABANDON
            .key(self.meta_key(run_id))
            .arg(epoch)
            .invoke_async(&mut c)
            .await
            .map_err(redis_error)?;
        Ok(match answer {
            1 => {
                // The next round of claims ends it failed (it is starting).
                redis::cmd("ZADD")
                    .arg(self.leases_key())
                    .arg(0)
                    .arg(run_id)
                    .query_async::<()>(&mut c)
                    .await
                    .map_err(redis_error)?;
                Abandon::Abandoned
            }
            2 => Abandon::Started,
            _ => Abandon::Lost,
        })
    }

    /// Whether run `run_id` is a fork whose history was never all
    /// written (see [`Self::started`]).
    pub async fn is_starting(&self, run_id: &str) -> Result<bool, Error> {
        let mut c = self.conn().await?;
        let starting: Option<String> = redis::cmd("HGET")
            .arg(self.meta_key(run_id))
            .arg("starting")
            .query_async(&mut c)
            .await
            .map_err(redis_error)?;
        Ok(starting.is_some())
    }

    /// Extends this replica's lease of a run: whether its inbox holds
    /// something (answers or a cancel given on another replica); `None`
    /// when the run's epoch is no longer `epoch` (another replica claimed
    /// it, or it expired): the caller must stop the run at once.
    ///
    /// `waiting`: the approvals and inputs the owner waits for now, which
    /// the run's record then says (see the script).
    pub async fn renew(
        &self,
        run_id: &str,
        epoch: u64,
        waiting: Option<(usize, usize)>,
    ) -> Result<Option<bool>, Error> {
        let lease = self.lease;
        let mut c = self.conn().await?;
        let (approvals, inputs) = match waiting {
            Some((a, i)) => (a.to_string(), i.to_string()),
            None => (String::new(), String::new()),
        };
        let (until, inbox): (i64, i64) = self
            .renew
            .key(self.meta_key(run_id))
            .key(self.inbox_key(run_id))
            .arg(epoch)
            .arg(lease.as_millis() as i64)
            .arg(approvals)
            .arg(inputs)
            .invoke_async(&mut c)
            .await
            .map_err(redis_error)?;
        if until < 0 {
            return Ok(None);
        }
        // XX: only a run still listed. The run may have ended between the
        // script and this (its end takes it out of the list, on another
        // connection of this replica): a plain ZADD put an ended run's
        // lease back, held until a claim round found it.
        redis::cmd("ZADD")
            .arg(self.leases_key())
            .arg("XX")
            .arg(until)
            .arg(run_id)
            .query_async::<()>(&mut c)
            .await
            .map_err(redis_error)?;
        Ok(Some(inbox == 1))
    }

    /// Gives a run this replica owns with `epoch` up (drain): raises its
    /// epoch, so nothing this replica still has in flight is written, and
    /// makes it claimable at once; `false` when it was not ours any more.
    pub async fn release(&self, run_id: &str, epoch: u64) -> Result<bool, Error> {
        let mut c = self.conn().await?;
        let released: i64 = self
            .release
            .key(self.meta_key(run_id))
            .arg(epoch)
            .invoke_async(&mut c)
            .await
            .map_err(redis_error)?;
        if released == 1 {
            redis::cmd("ZADD")
                .arg(self.leases_key())
                .arg(0)
                .arg(run_id)
                .query_async::<()>(&mut c)
                .await
                .map_err(redis_error)?;
        }
        Ok(released == 1)
    }
}
