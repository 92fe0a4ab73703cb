//! Ownership of durable runs: the lease a replica holds on each of its runs
//! (renewed in the background), the lapsed leases other replicas look for,
//! and the claim that raises a run's epoch so its former owner can no
//! longer write.

use std::time::Duration;

use baton_proto::v1 as pb;
use redis::Value;

use super::{RedisRuns, RunMeta, redis_error};
use crate::error::Error;

/// What [`RedisRuns::claim`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Claim {
    /// The run's keys are gone (expired).
    Gone,
    /// The run has ended.
    Ended,
    /// Its owner's lease has not lapsed.
    Owned,
    /// This replica owns it now, with `epoch`.
    Claimed {
        /// The new epoch.
        epoch: u64,
        /// The replica that owned it before.
        previous_owner: String,
        /// The seq of its last logged event.
        last_seq: u64,
        /// Its trace.
        trace_id: String,
    },
}

/// Redis's clock in ms, inside a script.
pub(super) const NOW: &str = "local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
";

pub(super) const CREATE: &str = r"
-- KEYS[1] meta; ARGV[1] lease ms, ARGV[2] ttl ms, then field/value pairs.
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
redis.call('HSET', KEYS[1], 'lease_until', now + tonumber(ARGV[1]))
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
return now + tonumber(ARGV[1])
";

pub(super) const RENEW: &str = r"
-- KEYS[1] meta; ARGV[1] epoch, ARGV[2] lease ms.
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then
  return -1
end
redis.call('HSET', KEYS[1], 'lease_until', now + tonumber(ARGV[2]))
return now + tonumber(ARGV[2])
";

pub(super) const CLAIM: &str = r"
-- KEYS[1] meta; ARGV[1] new owner, ARGV[2] lease ms.
local m = redis.call('HMGET', KEYS[1], 'epoch', 'status', 'lease_until', 'owner', 'last_seq', 'trace_id')
if not m[1] then
  return {-2}
end
if m[2] ~= '1' then
  return {-1}
end
if tonumber(m[3] or '0') >= now then
  return {0}
end
local epoch = redis.call('HINCRBY', KEYS[1], 'epoch', 1)
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'lease_until', now + tonumber(ARGV[2]))
return {epoch, m[4] or '', tonumber(m[5] or '0'), m[6] or ''}
";

impl RedisRuns {
    /// Records a new run (epoch 1) owned by this replica for a lease, and
    /// lists it under its tenant; its keys live `live_for` (its deadline)
    /// plus the retention, until it ends.
    pub async fn create(&self, meta: &RunMeta, live_for: Duration) -> Result<u64, Error> {
        let (owner, lease) = (self.owner.as_str(), self.lease);
        let mut c = self.conn().await?;
        let ttl = (live_for + self.retention).as_millis() as i64;
        let mut invocation = self.create.prepare_invoke();
        invocation
            .key(self.meta_key(&meta.run_id))
            .arg(lease.as_millis() as i64)
            .arg(ttl);
        for (field, value) in [
            ("epoch", "1".to_owned()),
            ("owner", owner.to_owned()),
            ("tenant", meta.tenant.clone()),
            ("kind", (meta.kind as i32).to_string()),
            ("target", meta.target.clone()),
            ("trace_id", meta.trace_id.clone()),
            ("started_ms", meta.started_ms.to_string()),
            ("detached", u8::from(meta.detached).to_string()),
            ("status", (pb::RunStatus::Running as i32).to_string()),
            ("last_seq", "0".to_owned()),
        ] {
            invocation.arg(field).arg(value);
        }
        let until: i64 = invocation.invoke_async(&mut c).await.map_err(redis_error)?;
        // Two keys of their own (not the run's hash tag): two commands, so
        // a Cluster can route each.
        redis::cmd("ZADD")
            .arg(self.index_key(&meta.tenant))
            .arg(0)
            .arg(&meta.run_id)
            .query_async::<()>(&mut c)
            .await
            .map_err(redis_error)?;
        redis::cmd("ZADD")
            .arg(self.leases_key())
            .arg(until)
            .arg(&meta.run_id)
            .query_async::<()>(&mut c)
            .await
            .map_err(redis_error)?;
        Ok(1)
    }

    /// Extends this replica's lease of a run; `false` when the run's epoch
    /// is no longer `epoch` (another replica claimed it, or it expired):
    /// the caller must stop the run at once.
    pub async fn renew(&self, run_id: &str, epoch: u64) -> Result<bool, Error> {
        let lease = self.lease;
        let mut c = self.conn().await?;
        let until: i64 = self
            .renew
            .key(self.meta_key(run_id))
            .arg(epoch)
            .arg(lease.as_millis() as i64)
            .invoke_async(&mut c)
            .await
            .map_err(redis_error)?;
        if until < 0 {
            return Ok(false);
        }
        redis::cmd("ZADD")
            .arg(self.leases_key())
            .arg(until)
            .arg(run_id)
            .query_async::<()>(&mut c)
            .await
            .map_err(redis_error)?;
        Ok(true)
    }

    /// Runs whose lease lapsed (by Redis's clock), at most `count`.
    pub async fn lapsed(&self, count: usize) -> Result<Vec<String>, Error> {
        let mut c = self.conn().await?;
        let (secs, micros): (i64, i64) = redis::cmd("TIME")
            .query_async(&mut c)
            .await
            .map_err(redis_error)?;
        let now = secs * 1000 + micros / 1000;
        redis::cmd("ZRANGEBYSCORE")
            .arg(self.leases_key())
            .arg("-inf")
            .arg(format!("({now}"))
            .arg("LIMIT")
            .arg(0)
            .arg(count)
            .query_async(&mut c)
            .await
            .map_err(redis_error)
    }

    /// Takes a run whose lease lapsed over for this replica (see
    /// [`Claim`]); runs that are gone or ended leave the lease set.
    pub async fn claim(&self, run_id: &str) -> Result<Claim, Error> {
        let (owner, lease) = (self.owner.as_str(), self.lease);
        let mut c = self.conn().await?;
        let reply: Vec<Value> = self
            .claim
            .key(self.meta_key(run_id))
            .arg(owner)
            .arg(lease.as_millis() as i64)
            .invoke_async(&mut c)
            .await
            .map_err(redis_error)?;
        let int = |v: Option<&Value>| match v {
            Some(Value::Int(i)) => *i,
            _ => 0,
        };
        let text = |v: Option<&Value>| match v {
            Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            Some(Value::SimpleString(s)) => s.clone(),
            _ => String::new(),
        };
        let claim = match int(reply.first()) {
            -2 => Claim::Gone,
            -1 => Claim::Ended,
            0 => Claim::Owned,
            epoch => Claim::Claimed {
                epoch: epoch as u64,
                previous_owner: text(reply.get(1)),
                last_seq: int(reply.get(2)).max(0) as u64,
                trace_id: text(reply.get(3)),
            },
        };
        if matches!(claim, Claim::Gone | Claim::Ended) {
            self.forget_lease(run_id).await;
        }
        Ok(claim)
    }

    /// Drops a run from the lease set (it ended); best effort.
    pub async fn forget_lease(&self, run_id: &str) {
        if let Ok(mut c) = self.conn().await {
            let _ = redis::cmd("ZREM")
                .arg(self.leases_key())
                .arg(run_id)
                .query_async::<()>(&mut c)
                .await;
        }
    }
}
