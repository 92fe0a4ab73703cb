//! The outbox in Redis (see the module docs of `webhook::outbox`): a due
//! set of streams (`wh:due`, scored by when each is due, on Redis's
//! clock), each stream a list under its run's hash tag (`whq`) with its
//! holder's lease key beside it (`whl`), and per tenant the dead letters
//! (`whdead`: a hash by id and a set by when).

use std::sync::Arc;

use redis::{Script, Value};

use super::entry::{Claim, Dead, Head};
use crate::{
    error::Error,
    shared_state::{NOW, SharedState, hex, redis_error},
    webhook::delivery::Delivery,
};

/// The scripts, built once.
struct Scripts {
    claim: Script,
    mark_due: Script,
    head: Script,
    pop: Script,
    retry: Script,
    release: Script,
    undue: Script,
    due_after: Script,
    bury: Script,
    unbury: Script,
}

impl Scripts {
    fn new() -> Self {
        Self {
            claim: Script::new(&format!(
                "{NOW}
-- KEYS[1] due; ARGV[1] most, ARGV[2] lease ms
local got = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
local score = string.format('%.1f', now + tonumber(ARGV[2]) + 0.5)
for _, m in ipairs(got) do
  redis.call('ZADD', KEYS[1], score, m)
end
return {{score, got}}"
            )),
            mark_due: Script::new(&format!(
                "{NOW}
for _, m in ipairs(ARGV) do
  redis.call('ZADD', KEYS[1], now, m)
end
return 1"
            )),
            head: Script::new(
                "if redis.call('GET', KEYS[2]) ~= ARGV[1] then return {0} end
redis.call('PEXPIRE', KEYS[2], ARGV[2])
local h = redis.call('LINDEX', KEYS[1], 0)
if not h then return {1} end
return {1, h}",
            ),
            pop: Script::new(
                "if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
if redis.call('LINDEX', KEYS[1], 0) ~= ARGV[2] then return 0 end
redis.call('LPOP', KEYS[1])
return 1",
            ),
            retry: Script::new(
                "if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
if redis.call('LINDEX', KEYS[1], 0) ~= ARGV[2] then return 0 end
redis.call('LSET', KEYS[1], 0, ARGV[3])
redis.call('DEL', KEYS[2])
return 1",
            ),
            release: Script::new(
                "if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
return redis.call('LLEN', KEYS[1])",
            ),
            due_after: Script::new(&format!(
                "{NOW}
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
return 1"
            )),
            undue: Script::new(
                "local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if s and tonumber(s) == tonumber(ARGV[2]) then redis.call('ZREM', KEYS[1], ARGV[1]) end
return 1",
            ),
            bury: Script::new(
                "-- KEYS[1] by id, KEYS[2] by when; ARGV id, record, when, most
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[4])
if over > 0 then
  for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, over - 1)) do
    redis.call('HDEL', KEYS[1], id)
    redis.call('ZREM', KEYS[2], id)
  end
end
return 1",
            ),
            unbury: Script::new(
                "local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return false end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return v",
            ),
        }
    }
}

/// The outbox in Redis.
pub struct RedisOutbox {
    shared: Arc<SharedState>,
    scripts: Scripts,
    /// How long a holder holds a stream without a word (a try's timeout
    /// and some).
    lease_ms: u64,
    /// How long a stream's list is kept after its last push.
    keep_ms: u64,
}

/// `{run_id}/{sub}` split.
fn split(stream: &str) -> (&str, &str) {
    stream.split_once('/').unwrap_or((stream, ""))
}

impl RedisOutbox {
    /// The outbox in `shared`'s Redis; a holder's lease is `lease_ms`, a
    /// stream is kept `keep_ms` after its last push.
    pub fn new(shared: Arc<SharedState>, lease_ms: u64, keep_ms: u64) -> Self {
        Self {
            shared,
            scripts: Scripts::new(),
            lease_ms,
            keep_ms,
        }
    }

    fn due_key(&self) -> String {
        self.shared.plain_key("wh:due")
    }

    /// The list of stream `{run_id}/{sub}` (under the run's hash tag: the
    /// run store's append pushes to it).
    pub fn queue_key(&self, stream: &str) -> String {
        let (run, sub) = split(stream);
        self.shared.key("whq", run, sub)
    }

    fn lease_key(&self, stream: &str) -> String {
        let (run, sub) = split(stream);
        self.shared.key("whl", run, sub)
    }

    fn dead_keys(&self, tenant: &str) -> (String, String) {
        let t = hex(tenant);
        (
            self.shared.key("whdead", &t, "d"),
            self.shared.key("whdead", &t, "t"),
        )
    }

    /// How long a stream's list is kept after a push.
    pub fn keep_ms(&self) -> u64 {
        self.keep_ms
    }

    /// Marks streams due now: done before their deliveries are pushed
    /// (see the module docs).
    pub async fn mark_due(&self, streams: &[String]) -> Result<(), Error> {
        if streams.is_empty() {
            return Ok(());
        }
        let mut c = self.shared.conn().await?;
        let mut inv = self.scripts.mark_due.prepare_invoke();
        inv.key(self.due_key());
        for s in streams {
            inv.arg(s);
        }
        let _: i64 = inv.invoke_async(&mut c).await.map_err(redis_error)?;
        Ok(())
    }

    pub(super) async fn push(&self, deliveries: &[Delivery]) -> Result<(), Error> {
        let streams: Vec<String> = deliveries.iter().map(Delivery::stream).collect();
        self.mark_due(&streams).await?;
        self.rpush(deliveries).await?;
        // Due again once pushed: a holder that found the stream empty in
        // between and let it go must not strand what was just pushed. (Its
        // failure is no failure of the push: the stream was due before.)
        if self.mark_due(&streams).await.is_err()
            && let Err(e) = self.mark_due(&streams).await
        {
            tracing::debug!(error = %e, "pushed webhook streams not marked due again");
        }
        Ok(())
    }

    async fn rpush(&self, deliveries: &[Delivery]) -> Result<(), Error> {
        let mut c = self.shared.conn().await?;
        for d in deliveries {
            let raw = serde_json::to_string(d).map_err(|e| Error::Internal(e.to_string()))?;
            let key = self.queue_key(&d.stream());
            let _: Value = redis::pipe()
                .atomic()
                .rpush(&key, raw)
                .pexpire(&key, self.keep_ms as i64)
                .query_async(&mut c)
                .await
                .map_err(redis_error)?;
        }
        Ok(())
    }

    pub(super) async fn claim(&self, max: usize) -> Result<Vec<Claim>, Error> {
        let mut c = self.shared.conn().await?;
        let (score, streams): (String, Vec<String>) = self
            .scripts
            .claim
            .key(self.due_key())
            .arg(max)
            .arg(self.lease_ms)
            .invoke_async(&mut c)
            .await
            .map_err(redis_error)?;
        let mut out = Vec::with_capacity(streams.len());
        for stream in streams {
            let token = format!(
                "{}/{}",
                self.shared.replica(),
                uuid::Uuid::new_v4().simple()
            );
            let got: Option<String> = redis::cmd("SET")
                .arg(self.lease_key(&stream))
                .arg(&token)
                .arg("NX")
                .arg("PX")
                .arg(self.lease_ms)
                .query_async(&mut c)
                .await
                .map_err(redis_error)?;
            if got.is_some() {
                out.push(Claim {
                    stream,
                    token,
                    score: score.clone(),
                });
            }
        }
        Ok(out)
    }

    pub(super) async fn head(&self, claim: &Claim) -> Result<Option<Head>, Error> {
        let mut c = self.shared.conn().await?;
        let reply: Vec<Value> = self
            .scripts
            .head
            .key(self.queue_key(&claim.stream))
            .key(self.lease_key(&claim.stream))
            .arg(&claim.token)
            .arg(self.lease_ms)
            .invoke_async(&mut c)
            .await
            .map_err(redis_error)?;
        match reply.as_slice() {
            [Value::Int(1)] => Ok(None),
            [Value::Int(1), v] => {
                let raw = match v {
                    Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                    Value::SimpleString(s) => s.clone(),
                    _ => {
                        return Err(Error::Internal(
                            "a webhook stream's head is not text".into(),
                        ));
                    }
                };
                match serde_json::from_str(&raw) {
                    Ok(delivery) => Ok(Some(Head { raw, delivery })),
                    Err(e) => Err(Error::Internal(format!(
                        "a webhook delivery in Redis does not read: {e}"
                    ))),
                }
            }
            _ => Err(Error::Unavailable(
                "another replica holds this webhook stream now".into(),
            )),
        }
    }

    pub(super) async fn pop(&self, claim: &Claim, raw: &str) -> Result<bool, Error> {
        let mut c = self.shared.conn().await?;
        let done: i64 = self
            .scripts
            .pop
            .key(self.queue_key(&claim.stream))
            .key(self.lease_key(&claim.stream))
            .arg(&claim.token)
            .arg(raw)
            .invoke_async(&mut c)
            .await
            .map_err(redis_error)?;
        Ok(done == 1)
    }

    pub(super) async fn retry(
        &self,
        claim: &Claim,
        raw: &str,
        updated: &Delivery,
        after_ms: u64,
    ) -> Result<bool, Error> {
        let new = serde_json::to_string(updated).map_err(|e| Error::Internal(e.to_string()))?;
        let mut c = self.shared.conn().await?;
        // Due after the wait first, then the head rewritten and the lease
        // let go: a replica killed between the two leaves a stream due when
        // its backoff ends (the head's `not_before_ms` holds it back
        // anyway).
        self.due_after(&claim.stream, after_ms).await?;
        let done: i64 = self
            .scripts
            .retry
            .key(self.queue_key(&claim.stream))
            .key(self.lease_key(&claim.stream))
            .arg(&claim.token)
            .arg(raw)
            .arg(new)
            .invoke_async(&mut c)
            .await
            .map_err(redis_error)?;
        Ok(done == 1)
    }

    /// Makes a stream due `after_ms` from now (Redis's clock).
    async fn due_after(&self, stream: &str, after_ms: u64) -> Result<(), Error> {
        let mut c = self.shared.conn().await?;
        let _: i64 = self
            .scripts
            .due_after
            .key(self.due_key())
            .arg(stream)
            .arg(after_ms)
            .invoke_async(&mut c)
            .await
            .map_err(redis_error)?;
        Ok(())
    }

    /// Lets a held stream go until `after_ms` from now, untried.
    pub(super) async fn defer(&self, claim: &Claim, after_ms: u64) -> Result<(), Error> {
        self.due_after(&claim.stream, after_ms).await?;
        self.let_go(claim).await.map(|_| ())
    }

    fn stopped_key(&self, stream: &str) -> String {
        let (run, _) = split(stream);
        self.shared.key("whx", run, "stopped")
    }

    /// Stops a stream's deliveries on every replica (an A2A config
    /// deleted): what it holds is dropped when met.
    pub async fn stop(&self, stream: &str) -> Result<(), Error> {
        let key = self.stopped_key(stream);
        let mut c = self.shared.conn().await?;
        let _: redis::Value = redis::pipe()
            .sadd(&key, stream)
            .pexpire(&key, self.keep_ms as i64)
            .query_async(&mut c)
            .await
            .map_err(redis_error)?;
        Ok(())
    }

    fn added_key(&self, run_id: &str) -> String {
        self.shared.key("whx", run_id, "added")
    }

    /// Keeps a subscription added to a run after its start (an A2A
    /// config), for the replica that resumes the run, by its id.
    pub async fn keep_added(&self, run_id: &str, id: &str, raw: &str) -> Result<(), Error> {
        let key = self.added_key(run_id);
        let mut c = self.shared.conn().await?;
        let _: redis::Value = redis::pipe()
            .hset(&key, id, raw)
            .pexpire(&key, self.keep_ms as i64)
            .query_async(&mut c)
            .await
            .map_err(redis_error)?;
        Ok(())
    }

    /// Forgets an added subscription.
    pub async fn forget_added(&self, run_id: &str, id: &str) -> Result<(), Error> {
        let mut c = self.shared.conn().await?;
        let _: i64 = redis::cmd("HDEL")
            .arg(self.added_key(run_id))
            .arg(id)
            .query_async(&mut c)
            .await
            .map_err(redis_error)?;
        Ok(())
    }

    /// The subscriptions added to a run after its start.
    pub async fn added(&self, run_id: &str) -> Result<Vec<String>, Error> {
        let mut c = self.shared.conn().await?;
        redis::cmd("HVALS")
            .arg(self.added_key(run_id))
            .query_async(&mut c)
            .await
            .map_err(redis_error)
    }

    /// Lets a stopped stream's deliveries through again.
    pub async fn unstop(&self, stream: &str) -> Result<(), Error> {
        let mut c = self.shared.conn().await?;
        let _: i64 = redis::cmd("SREM")
            .arg(self.stopped_key(stream))
            .arg(stream)
            .query_async(&mut c)
            .await
            .map_err(redis_error)?;
        Ok(())
    }

    /// Whether a stream's deliveries were stopped ([`Self::stop`]).
    pub async fn is_stopped(&self, stream: &str) -> Result<bool, Error> {
        let mut c = self.shared.conn().await?;
        redis::cmd("SISMEMBER")
            .arg(self.stopped_key(stream))
            .arg(stream)
            .query_async(&mut c)
            .await
            .map_err(redis_error)
    }

    /// Drops the stream's lease if this claim still holds it; the
    /// deliveries left in the stream.
    async fn let_go(&self, claim: &Claim) -> Result<i64, Error> {
        let mut c = self.shared.conn().await?;
        self.scripts
            .release
            .key(self.queue_key(&claim.stream))
            .key(self.lease_key(&claim.stream))
            .arg(&claim.token)
            .invoke_async(&mut c)
            .await
            .map_err(redis_error)
    }

    pub(super) async fn release(&self, claim: &Claim) -> Result<(), Error> {
        let left = self.let_go(claim).await?;
        let mut c = self.shared.conn().await?;
        if left == 0 {
            let _: i64 = self
                .scripts
                .undue
                .key(self.due_key())
                .arg(&claim.stream)
                .arg(&claim.score)
                .invoke_async(&mut c)
                .await
                .map_err(redis_error)?;
        } else {
            self.mark_due(std::slice::from_ref(&claim.stream)).await?;
        }
        Ok(())
    }

    pub(super) async fn bury(&self, dead: &Dead, max: usize) -> Result<(), Error> {
        let (by_id, by_when) = self.dead_keys(&dead.delivery.tenant);
        let raw = serde_json::to_string(dead).map_err(|e| Error::Internal(e.to_string()))?;
        let mut c = self.shared.conn().await?;
        let _: i64 = self
            .scripts
            .bury
            .key(by_id)
            .key(by_when)
            .arg(&dead.delivery.id)
            .arg(raw)
            .arg(dead.dead_ms)
            .arg(max)
            .invoke_async(&mut c)
            .await
            .map_err(redis_error)?;
        Ok(())
    }

    pub(super) async fn dead(&self, tenant: &str, max: usize) -> Result<Vec<Dead>, Error> {
        let (by_id, by_when) = self.dead_keys(tenant);
        let mut c = self.shared.conn().await?;
        let ids: Vec<String> = redis::cmd("ZREVRANGE")
            .arg(&by_when)
            .arg(0)
            .arg(max.saturating_sub(1))
            .query_async(&mut c)
            .await
            .map_err(redis_error)?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let raws: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(&by_id)
            .arg(&ids)
            .query_async(&mut c)
            .await
            .map_err(redis_error)?;
        Ok(raws
            .into_iter()
            .flatten()
            .filter_map(|r| serde_json::from_str(&r).ok())
            .collect())
    }

    pub(super) async fn unbury(&self, tenant: &str, id: &str) -> Result<Option<Dead>, Error> {
        let (by_id, by_when) = self.dead_keys(tenant);
        let mut c = self.shared.conn().await?;
        let raw: Option<String> = self
            .scripts
            .unbury
            .key(by_id)
            .key(by_when)
            .arg(id)
            .invoke_async(&mut c)
            .await
            .map_err(redis_error)?;
        Ok(raw.and_then(|r| serde_json::from_str(&r).ok()))
    }
}
