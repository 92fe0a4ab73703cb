//! Ownership of durable runs, the scripts and answers of it: the lease a
//! replica holds on each of its runs (renewed in the background), the
//! lapsed leases other replicas look for, and the claim that raises a run's
//! epoch so its former owner can no longer write. `RedisRuns` runs them.

use redis::Value;

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

/// What became of a fork given up after its start failed
/// (`RedisRuns::abandon_start`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Abandon {
    /// Given up: it never runs (a claim ends it failed).
    Abandoned,
    /// Its start was recorded after all: it runs.
    Started,
    /// Another replica owns it now.
    Lost,
}

/// Redis's clock in ms, inside a script (the one clock of
/// `crate::shared_state`).
pub(super) use crate::shared_state::NOW;

pub(super) const CREATE: &str = r"
-- KEYS[1] meta; ARGV[1] lease ms, ARGV[2] ttl ms, then field/value pairs.
-- A run that exists is not made again (a schedule's tick names its run
-- before it starts it: see `crate::schedule`).
if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
redis.call('HSET', KEYS[1], 'lease_until', now + tonumber(ARGV[1]))
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
return now + tonumber(ARGV[1])
";

pub(super) const RENEW: &str = r"
-- KEYS[1] meta, KEYS[2] inbox; ARGV[1] epoch, ARGV[2] lease ms, ARGV[3]
-- and ARGV[4] the questions the owner waits for (approvals, inputs), or
-- empty: the counts the append script keeps are set to the owner's (a
-- question whose branch was dropped unanswered is journaled as nothing).
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then
  return {-1, 0}
end
redis.call('HSET', KEYS[1], 'lease_until', now + tonumber(ARGV[2]))
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[1], 'wait_ap', ARGV[3], 'wait_in', ARGV[4])
end
return {now + tonumber(ARGV[2]), redis.call('EXISTS', KEYS[2])}
";

pub(super) const RELEASE: &str = r"
-- KEYS[1] meta; ARGV[1] epoch.
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then
  return 0
end
redis.call('HINCRBY', KEYS[1], 'epoch', 1)
redis.call('HSET', KEYS[1], 'owner', '', 'lease_until', 0)
return 1
";

pub(super) const CLAIM: &str = r"
-- KEYS[1] meta; ARGV[1] new owner, ARGV[2] lease ms, ARGV[3] 1: also a
-- parked run before its wake-up time.
local m = redis.call('HMGET', KEYS[1], 'epoch', 'status', 'lease_until', 'owner', 'last_seq', 'trace_id', 'parked')
if not m[1] then
  return {-2}
end
if m[2] ~= '1' then
  return {-1}
end
if tonumber(m[3] or '0') >= now and not (ARGV[3] == '1' and m[7] == '1') then
  return {0}
end
local epoch = redis.call('HINCRBY', KEYS[1], 'epoch', 1)
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'lease_until', now + tonumber(ARGV[2]), 'parked', 0)
return {epoch, m[4] or '', tonumber(m[5] or '0'), m[6] or ''}
";

/// What the claim script answered.
pub(super) fn decode_claim(reply: &[Value]) -> Claim {
    let int = |v: Option<&Value>| match v {
        Some(Value::Int(i)) => *i,
        _ => 0,
    };
    let text = |v: Option<&Value>| match v {
        Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(Value::SimpleString(s)) => s.clone(),
        _ => String::new(),
    };
    match int(reply.first()) {
        -2 => Claim::Gone,
        -1 => Claim::Ended,
        0 => Claim::Owned,
        epoch => Claim::Claimed {
            epoch: epoch as u64,
            previous_owner: text(reply.get(1)),
            last_seq: int(reply.get(2)).max(0) as u64,
            trace_id: text(reply.get(3)),
        },
    }
}
