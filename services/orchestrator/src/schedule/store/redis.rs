//! Schedules in Redis (durable mode; see the module docs of
//! `schedule::store`). Every key shares one hash tag (`{all}`), so each
//! script's keys are in one slot of a Cluster:
//!
//! - `sch:{all}:s:<id>`: a schedule's hash: `def` (its definition, the
//!   encoded `baton.v1.Schedule`), `tenant`, `paused`, `resumed` (ms) and
//!   `state` (JSON);
//! - `sch:{all}:due`: the due set, scored by when each is due on Redis's
//!   clock; a claim re-scores what it takes to its lease's end, and that
//!   score is its token;
//! - `sch:{all}:t:<tenant hex>`: a tenant's schedules made through the API,
//!   scored by creation;
//! - `sch:{all}:files`: the agents file's schedules, id → tenant.

use std::sync::Arc;

use prost::Message as _;
use redis::Script;

use super::record::{Claim, Claimed, State, Stored};
use crate::{
    error::{Error, Result},
    shared_state::{NOW, SharedState, hex, redis_error},
};

struct Scripts {
    put: Script,
    delete: Script,
    set_paused: Script,
    claim: Script,
    write: Script,
    release: Script,
}

/// Fails the script unless the claim (ARGV[1] id, ARGV[2] token) still
/// holds on the due set KEYS[1].
const HOLDS: &str = "local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s or tonumber(s) ~= tonumber(ARGV[2]) then return 0 end
";

impl Scripts {
    fn new() -> Self {
        Self {
            put: Script::new(
                "-- KEYS hash, own index, due, files
-- ARGV id, def, tenant, paused, resumed, state, due, replace, most, created, from_file
if ARGV[8] == '1' and redis.call('EXISTS', KEYS[1]) == 1 then
  local was = redis.call('HGET', KEYS[1], 'paused')
  redis.call('HSET', KEYS[1], 'def', ARGV[2], 'tenant', ARGV[3], 'paused', ARGV[4])
  if was == '1' and ARGV[4] ~= '1' then redis.call('HSET', KEYS[1], 'resumed', ARGV[5]) end
  redis.call('HSET', KEYS[4], ARGV[1], ARGV[3])
  if ARGV[4] == '1' then
    redis.call('ZREM', KEYS[3], ARGV[1])
  elseif ARGV[7] ~= '' then
    -- Due at the sooner of when it was and when it now is.
    redis.call('ZADD', KEYS[3], 'LT', ARGV[7], ARGV[1])
  end
  return 1
end
if ARGV[11] ~= '1' and redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[9]) then return 0 end
redis.call('HSET', KEYS[1], 'def', ARGV[2], 'tenant', ARGV[3], 'paused', ARGV[4],
  'resumed', ARGV[5], 'state', ARGV[6])
if ARGV[11] == '1' then
  redis.call('HSET', KEYS[4], ARGV[1], ARGV[3])
else
  redis.call('ZADD', KEYS[2], ARGV[10], ARGV[1])
end
if ARGV[7] ~= '' then redis.call('ZADD', KEYS[3], ARGV[7], ARGV[1]) end
return 1",
            ),
            delete: Script::new(
                "-- KEYS hash, own index, due, files; ARGV id, tenant
if redis.call('HGET', KEYS[1], 'tenant') ~= ARGV[2] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
return 1",
            ),
            set_paused: Script::new(
                "-- KEYS hash, due; ARGV id, paused, now, due
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'paused', ARGV[2])
if ARGV[2] == '1' then
  redis.call('ZREM', KEYS[2], ARGV[1])
else
  redis.call('HSET', KEYS[1], 'resumed', ARGV[3])
  if ARGV[4] ~= '' and not redis.call('ZSCORE', KEYS[2], ARGV[1]) then
    redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1])
  end
end
return 1",
            ),
            claim: Script::new(&format!(
                "{NOW}
-- KEYS due; ARGV most, lease ms
local got = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
local token = now + tonumber(ARGV[2])
for _, m in ipairs(got) do redis.call('ZADD', KEYS[1], token, m) end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {{tostring(now), tostring(token), got, first[2] or ''}}"
            )),
            write: Script::new(&format!(
                "-- KEYS due, hash; ARGV id, token, state, due
{HOLDS}if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 0
end
redis.call('HSET', KEYS[2], 'state', ARGV[3])
if ARGV[4] == '' or redis.call('HGET', KEYS[2], 'paused') == '1' then
  redis.call('ZREM', KEYS[1], ARGV[1])
else
  redis.call('ZADD', KEYS[1], ARGV[4], ARGV[1])
end
return 1"
            )),
            release: Script::new(&format!(
                "-- KEYS due; ARGV id, token, due
{HOLDS}redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
return 1"
            )),
        }
    }
}

/// Schedules in Redis.
pub struct RedisSchedules {
    shared: Arc<SharedState>,
    scripts: Scripts,
}

fn opt(v: Option<i64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

fn internal(e: impl std::fmt::Display) -> Error {
    Error::Internal(format!("schedule store: {e}"))
}

impl RedisSchedules {
    pub(super) fn new(shared: Arc<SharedState>) -> Self {
        Self {
            shared,
            scripts: Scripts::new(),
        }
    }

    fn key(&self, part: &str) -> String {
        self.shared.key("sch", "all", part)
    }

    fn hash(&self, id: &str) -> String {
        self.key(&format!("s:{id}"))
    }

    fn own(&self, tenant: &str) -> String {
        self.key(&format!("t:{}", hex(tenant)))
    }

    pub(super) async fn put(
        &self,
        s: &Stored,
        due_ms: Option<i64>,
        replace: bool,
        most: usize,
    ) -> Result<bool> {
        let state = serde_json::to_string(&s.state).map_err(internal)?;
        let created = s
            .def
            .created_at
            .as_ref()
            .map(crate::schedule::spec::ms)
            .unwrap_or_default();
        let mut c = self.shared.conn().await?;
        let done: i64 = self
            .scripts
            .put
            .key(self.hash(&s.id))
            .key(self.own(&s.tenant))
            .key(self.key("due"))
            .key(self.key("files"))
            .arg(&s.id)
            .arg(s.def.encode_to_vec())
            .arg(&s.tenant)
            .arg(if s.paused { "1" } else { "0" })
            .arg(s.resumed_ms)
            .arg(state)
            .arg(opt(due_ms))
            .arg(if replace { "1" } else { "0" })
            .arg(most)
            .arg(created)
            .arg(if s.def.from_agents_file { "1" } else { "0" })
            .invoke_async(&mut c)
            .await
            .map_err(redis_error)?;
        Ok(done == 1)
    }

    fn read(id: &str, fields: std::collections::HashMap<String, Vec<u8>>) -> Option<Stored> {
        let def = pb::Schedule::decode(fields.get("def")?.as_slice()).ok()?;
        let text = |f: &str| {
            fields
                .get(f)
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default()
        };
        let state = serde_json::from_str(&text("state")).unwrap_or_default();
        Some(Stored {
            id: id.to_owned(),
            tenant: text("tenant"),
            def,
            paused: text("paused") == "1",
            resumed_ms: text("resumed").parse().unwrap_or_default(),
            state,
        })
    }

    pub(super) async fn get(&self, id: &str) -> Result<Option<Stored>> {
        let mut c = self.shared.conn().await?;
        let fields: std::collections::HashMap<String, Vec<u8>> = redis::cmd("HGETALL")
            .arg(self.hash(id))
            .query_async(&mut c)
            .await
            .map_err(redis_error)?;
        Ok(Self::read(id, fields))
    }

    pub(super) async fn list(&self, tenant: &str) -> Result<Vec<Stored>> {
        let mut c = self.shared.conn().await?;
        let (own, files): (Vec<String>, std::collections::HashMap<String, String>) = redis::pipe()
            .cmd("ZRANGE")
            .arg(self.own(tenant))
            .arg(0)
            .arg(-1)
            .cmd("HGETALL")
            .arg(self.key("files"))
            .query_async(&mut c)
            .await
            .map_err(redis_error)?;
        let mut ids: Vec<String> = files
            .into_iter()
            .filter(|(_, t)| t == tenant)
            .map(|(id, _)| id)
            .collect();
        ids.sort();
        ids.extend(own);
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for id in &ids {
            pipe.cmd("HGETALL").arg(self.hash(id));
        }
        let all: Vec<std::collections::HashMap<String, Vec<u8>>> =
            pipe.query_async(&mut c).await.map_err(redis_error)?;
        Ok(ids
            .iter()
            .zip(all)
            .filter_map(|(id, f)| Self::read(id, f))
            .filter(|s| s.tenant == tenant)
            .collect())
    }

    pub(super) async fn declared(&self) -> Result<Vec<(String, String)>> {
        let mut c = self.shared.conn().await?;
        let files: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
            .arg(self.key("files"))
            .query_async(&mut c)
            .await
            .map_err(redis_error)?;
        Ok(files.into_iter().map(|(id, t)| (t, id)).collect())
    }

    pub(super) async fn delete(&self, tenant: &str, id: &str) -> Result<bool> {
        let mut c = self.shared.conn().await?;
        let done: i64 = self
            .scripts
            .delete
            .key(self.hash(id))
            .key(self.own(tenant))
            .key(self.key("due"))
            .key(self.key("files"))
            .arg(id)
            .arg(tenant)
            .invoke_async(&mut c)
            .await
            .map_err(redis_error)?;
        Ok(done == 1)
    }

    pub(super) async fn set_paused(
        &self,
        id: &str,
        paused: bool,
        now_ms: i64,
        due_ms: Option<i64>,
    ) -> Result<bool> {
        let mut c = self.shared.conn().await?;
        let done: i64 = self
            .scripts
            .set_paused
            .key(self.hash(id))
            .key(self.key("due"))
            .arg(id)
            .arg(if paused { "1" } else { "0" })
            .arg(now_ms)
            .arg(opt(due_ms))
            .invoke_async(&mut c)
            .await
            .map_err(redis_error)?;
        Ok(done == 1)
    }

    pub(super) async fn claim(&self, most: usize, lease_ms: i64) -> Result<Claimed> {
        let mut c = self.shared.conn().await?;
        let (now, token, ids, first): (String, String, Vec<String>, String) = self
            .scripts
            .claim
            .key(self.key("due"))
            .arg(most)
            .arg(lease_ms)
            .invoke_async(&mut c)
            .await
            .map_err(redis_error)?;
        Ok(Claimed {
            now_ms: now.parse().unwrap_or_default(),
            claims: ids
                .into_iter()
                .map(|id| Claim {
                    id,
                    token: token.clone(),
                })
                .collect(),
            next_due_ms: first.parse::<f64>().ok().map(|f| f as i64),
        })
    }

    pub(super) async fn write(
        &self,
        claim: &Claim,
        state: &State,
        due_ms: Option<i64>,
    ) -> Result<bool> {
        let state = serde_json::to_string(state).map_err(internal)?;
        let mut c = self.shared.conn().await?;
        let done: i64 = self
            .scripts
            .write
            .key(self.key("due"))
            .key(self.hash(&claim.id))
            .arg(&claim.id)
            .arg(&claim.token)
            .arg(state)
            .arg(opt(due_ms))
            .invoke_async(&mut c)
            .await
            .map_err(redis_error)?;
        Ok(done == 1)
    }

    pub(super) async fn release(&self, claim: &Claim, due_ms: i64) -> Result<bool> {
        let mut c = self.shared.conn().await?;
        let held: i64 = self
            .scripts
            .release
            .key(self.key("due"))
            .arg(&claim.id)
            .arg(&claim.token)
            .arg(due_ms)
            .invoke_async(&mut c)
            .await
            .map_err(redis_error)?;
        Ok(held == 1)
    }
}

use baton_proto::v1 as pb;
