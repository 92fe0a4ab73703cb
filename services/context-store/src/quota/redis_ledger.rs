//! The ledger of the Redis backend, in the same Redis (shared by every
//! store replica): one Lua script per change, so a reservation's check and
//! write are one atomic step.

use baton_store::{
    error::{Error, Result},
    redis::{config::RedisConfig, conn::Connection},
    slot::now_ms,
};
use redis::Script;

use super::{
    config::StoreQuota,
    ledger::{Entry, Ledger, Refusal, Reservation, Totals},
};

/// Shared by the ledger scripts. Keys of a tenant (Q = `p:q:{t<hex>}`):
/// `Q:e` hash member → "size:expiry:nonce", `Q:x` zset member by expiry,
/// `Q:n` hash bytes/keys, `Q:t:<trace>` set of the trace's members.
const LEDGER_PRELUDE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local E, X, N, Q = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
local function parse(v)
  local size, exp, nonce = string.match(v, '^(%d+):(%d+):(%d+)$')
  return tonumber(size), tonumber(exp), nonce
end
local function trace_set(member)
  return Q .. ':t:' .. string.match(member, '^([^/]*)/')
end
local function remove(member)
  local v = redis.call('HGET', E, member)
  if not v then
    return
  end
  local size = parse(v)
  redis.call('HDEL', E, member)
  redis.call('ZREM', X, member)
  redis.call('SREM', trace_set(member), member)
  redis.call('HINCRBY', N, 'bytes', 0 - size)
  redis.call('HINCRBY', N, 'keys', -1)
end
local function insert(member, v)
  remove(member)
  local size, exp = parse(v)
  redis.call('HSET', E, member, v)
  redis.call('ZADD', X, exp, member)
  local ts = trace_set(member)
  redis.call('SADD', ts, member)
  redis.call('HINCRBY', N, 'bytes', size)
  redis.call('HINCRBY', N, 'keys', 1)
  for _, k in ipairs({E, X, N, ts}) do
    if redis.call('PEXPIRETIME', k) < exp + 3600000 then
      redis.call('PEXPIREAT', k, exp + 3600000)
    end
  end
end
for _, m in ipairs(redis.call('ZRANGEBYSCORE', X, '-inf', '(' .. now)) do
  remove(m)
end
local function totals()
  local n = redis.call('HMGET', N, 'bytes', 'keys')
  return tonumber(n[1] or '0'), tonumber(n[2] or '0')
end
";

const RESERVE: &str = r"
-- ARGV: Q, member, size, ttl ms, nonce, max bytes (-1: none), max keys (-1: none)
local member, size = ARGV[2], tonumber(ARGV[3])
local previous = redis.call('HGET', E, member)
local old = 0
if previous then
  old = parse(previous)
end
local bytes, keys = totals()
bytes = bytes - old + size
if tonumber(ARGV[6]) >= 0 and bytes > tonumber(ARGV[6]) and size > old then
  return {1, bytes}
end
if not previous then
  keys = keys + 1
  if tonumber(ARGV[7]) >= 0 and keys > tonumber(ARGV[7]) then
    return {2, keys}
  end
end
insert(member, string.format('%d:%d:%s', size, now + tonumber(ARGV[4]), ARGV[5]))
local b, k = totals()
return {0, b, k, previous or ''}
";

const UNDO: &str = r"
-- ARGV: Q, member, nonce, previous ('' : none)
local v = redis.call('HGET', E, ARGV[2])
if v then
  local _, _, nonce = parse(v)
  if nonce == ARGV[3] then
    if ARGV[4] == '' then
      remove(ARGV[2])
    else
      insert(ARGV[2], ARGV[4])
    end
  end
end
return 0
";

const FORGET: &str = r"
-- ARGV: Q, members... ; or with KEYS[4] a trace's set: all of its members
local members = {}
if KEYS[4] then
  members = redis.call('SMEMBERS', KEYS[4])
else
  for i = 2, #ARGV do
    members[#members + 1] = ARGV[i]
  end
end
for _, m in ipairs(members) do
  remove(m)
end
local b, k = totals()
return {b, k}
";

/// The ledger of the Redis backend, in the same Redis.
pub(super) struct RedisLedger {
    conn: Connection,
    prefix: String,
    reserve: Script,
    undo: Script,
    forget: Script,
}

impl RedisLedger {
    /// The ledger in the Redis of `config` (connected lazily).
    pub(super) fn new(config: &RedisConfig) -> Result<Self> {
        Ok(Self {
            conn: Connection::open(config)?,
            prefix: config.key_prefix.clone(),
            reserve: Script::new(&format!("{LEDGER_PRELUDE}{RESERVE}")),
            undo: Script::new(&format!("{LEDGER_PRELUDE}{UNDO}")),
            forget: Script::new(&format!("{LEDGER_PRELUDE}{FORGET}")),
        })
    }

    /// The key base of `tenant`'s ledger.
    fn base(&self, tenant: &str) -> String {
        let hex: String = tenant.bytes().map(|b| format!("{b:02x}")).collect();
        format!("{}:q:{{t{hex}}}", self.prefix)
    }

    fn invocation<'a>(&self, script: &'a Script, tenant: &str) -> redis::ScriptInvocation<'a> {
        let q = self.base(tenant);
        let mut inv = script.prepare_invoke();
        inv.key(format!("{q}:e"))
            .key(format!("{q}:x"))
            .key(format!("{q}:n"))
            .arg(q);
        inv
    }
}

fn redis_error(e: redis::RedisError) -> Error {
    Error::Unavailable(format!("tenant quota ledger: redis: {e}"))
}

fn encode(e: &Entry) -> String {
    format!("{}:{}:{}", e.size, e.expires_ms, e.nonce)
}

fn decode(v: &str) -> Option<Entry> {
    let mut parts = v.split(':').map(str::parse::<u64>);
    Some(Entry {
        size: parts.next()?.ok()?,
        expires_ms: parts.next()?.ok()?,
        nonce: parts.next()?.ok()?,
    })
}

#[async_trait::async_trait]
impl Ledger for RedisLedger {
    async fn reserve(
        &self,
        tenant: &str,
        member: &str,
        entry: Entry,
        limits: &StoreQuota,
    ) -> Result<std::result::Result<(Reservation, Totals), Refusal>> {
        let ttl = entry.expires_ms.saturating_sub(now_ms());
        let limit = |l: Option<u64>| l.map_or(-1, |n| n.min(i64::MAX as u64) as i64);
        let mut inv = self.invocation(&self.reserve, tenant);
        inv.arg(member)
            .arg(entry.size)
            .arg(ttl)
            .arg(entry.nonce)
            .arg(limit(limits.bytes))
            .arg(limit(limits.keys));
        let mut c = self.conn.get().await?;
        let reply: Vec<redis::Value> = inv.invoke_async(&mut c).await.map_err(redis_error)?;
        let int = |i: usize| match reply.get(i) {
            Some(redis::Value::Int(n)) => *n as u64,
            _ => 0,
        };
        Ok(match int(0) {
            0 => {
                let previous = match reply.get(3) {
                    Some(redis::Value::BulkString(b)) => decode(&String::from_utf8_lossy(b)),
                    _ => None,
                };
                Ok((
                    Reservation {
                        previous,
                        nonce: entry.nonce,
                    },
                    (int(1), int(2)),
                ))
            }
            1 => Err(Refusal {
                quota: "bytes",
                would_be: int(1),
            }),
            _ => Err(Refusal {
                quota: "keys",
                would_be: int(1),
            }),
        })
    }

    async fn undo(&self, tenant: &str, member: &str, r: Reservation) -> Result<()> {
        let mut inv = self.invocation(&self.undo, tenant);
        inv.arg(member)
            .arg(r.nonce)
            .arg(r.previous.as_ref().map(encode).unwrap_or_default());
        let mut c = self.conn.get().await?;
        inv.invoke_async::<i64>(&mut c).await.map_err(redis_error)?;
        Ok(())
    }

    async fn forget(&self, tenant: &str, members: &[String]) -> Result<Totals> {
        let mut inv = self.invocation(&self.forget, tenant);
        for m in members {
            inv.arg(m);
        }
        let mut c = self.conn.get().await?;
        inv.invoke_async(&mut c).await.map_err(redis_error)
    }

    async fn forget_trace(&self, tenant: &str, trace: &str) -> Result<Totals> {
        let mut inv = self.invocation(&self.forget, tenant);
        inv.key(format!("{}:t:{trace}", self.base(tenant)));
        let mut c = self.conn.get().await?;
        inv.invoke_async(&mut c).await.map_err(redis_error)
    }
}
