//! The conversation store's Lua scripts (see the module docs of
//! `conversation::redis`): each runs on one conversation's keys, which
//! share a hash tag.

pub(super) const BEGIN: &str = r"
-- KEYS[1] meta, KEYS[2] msgs, KEYS[3] runs
-- ARGV[1] run, ARGV[2] open (0 existing, 1 new, 2 either), ARGV[3] hold ms,
-- ARGV[4] ttl ms, ARGV[5] branched from, ARGV[6] base bytes, ARGV[7] n,
-- then n base messages.
-- Returns {0} not found, {3} exists, {1, running, 1 when its hold
-- lapsed} busy (taken only once it is given back), {2, meta, msgs,
-- 1 when made now, now}. Only a new conversation is marked used: taking
-- the turn of one changes nothing until the run ends.
local exists = redis.call('EXISTS', KEYS[1]) == 1
if exists and ARGV[2] == '1' then
  return {3}
end
if not exists then
  if ARGV[2] == '0' then
    return {0}
  end
  local n = tonumber(ARGV[7])
  redis.call('DEL', KEYS[2], KEYS[3])
  redis.call('HSET', KEYS[1], 'created', now, 'updated', now, 'count', n,
    'bytes', ARGV[6], 'folded', 0, 'title', '', 'agent', '', 'bf', ARGV[5],
    'running', '')
  for i = 1, n do
    redis.call('RPUSH', KEYS[2], ARGV[7 + i])
  end
else
  local running = redis.call('HGET', KEYS[1], 'running')
  local till = tonumber(redis.call('HGET', KEYS[1], 'running_until') or '0')
  if running and running ~= '' and running ~= ARGV[1] then
    local lapsed = 0
    if till <= now then
      lapsed = 1
    end
    return {1, running, lapsed}
  end
end
local hold, ttl = tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('HSET', KEYS[1], 'running', ARGV[1], 'running_until', now + hold,
  'ttl', ttl)
for i = 1, 3 do
  redis.call('PEXPIRE', KEYS[i], ttl + hold)
end
local made = 0
if not exists then
  made = 1
end
return {2, redis.call('HGETALL', KEYS[1]), redis.call('LRANGE', KEYS[2], 0, -1), made, now}
";

pub(super) const FINISH: &str = r"
-- KEYS[1] meta, KEYS[2] msgs, KEYS[3] runs
-- ARGV[1] run, ARGV[2] fold, ARGV[3] summary ('' none), ARGV[4] agent,
-- ARGV[5] run entry, ARGV[6] count, ARGV[7] bytes, ARGV[8] ttl, ARGV[9] n,
-- then n messages, then the preview it gives a conversation that has none.
-- Returns when it was applied (Redis's clock: its place
-- in the tenant's index), or 0: not the run's turn.
if redis.call('HGET', KEYS[1], 'running') ~= ARGV[1] then
  return 0
end
local fold = tonumber(ARGV[2])
if fold > 0 then
  redis.call('LTRIM', KEYS[2], fold, -1)
  redis.call('HINCRBY', KEYS[1], 'folded', fold)
end
if ARGV[3] ~= '' then
  redis.call('LPUSH', KEYS[2], ARGV[3])
end
local n = tonumber(ARGV[9])
for i = 1, n do
  redis.call('RPUSH', KEYS[2], ARGV[9 + i])
end
redis.call('RPUSH', KEYS[3], ARGV[5])
if ARGV[10 + n] and ARGV[10 + n] ~= '' then
  redis.call('HSETNX', KEYS[1], 'preview', ARGV[10 + n])
end
redis.call('HSET', KEYS[1], 'running', '', 'running_until', 0, 'agent', ARGV[4],
  'count', ARGV[6], 'bytes', ARGV[7], 'updated', now, 'ttl', ARGV[8])
for i = 1, 3 do
  redis.call('PEXPIRE', KEYS[i], ARGV[8])
end
return now
";

pub(super) const DISCARD: &str = r"
-- KEYS[1] meta, KEYS[2] msgs, KEYS[3] runs; ARGV[1] the run it was made
-- for, which did not start: deleted while the turn is still that run's.
if redis.call('HGET', KEYS[1], 'running') == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
  return 1
end
return 0
";

pub(super) const RELEASE: &str = r"
-- KEYS[1] meta, KEYS[2] msgs, KEYS[3] runs; ARGV[1] the run giving the
-- turn back without appending: the conversation expires as it would have.
if redis.call('HGET', KEYS[1], 'running') == ARGV[1] then
  redis.call('HSET', KEYS[1], 'running', '', 'running_until', 0)
  local v = redis.call('HMGET', KEYS[1], 'updated', 'ttl')
  local ends = tonumber(v[1] or '0') + tonumber(v[2] or '0')
  for i = 1, 3 do
    if redis.call('EXISTS', KEYS[i]) == 1 then
      redis.call('PEXPIREAT', KEYS[i], math.max(ends, 1))
    end
  end
end
return 1
";

pub(super) const HOLD: &str = r"
-- KEYS[1] meta, KEYS[2] msgs, KEYS[3] runs; ARGV[1] the run, ARGV[2]
-- how long it holds the turn from now (ms). 0: the conversation is gone
-- (deleted); 1: held, or the run gave the turn back already (it ended
-- before this: nothing to hold).
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
if redis.call('HGET', KEYS[1], 'running') == ARGV[1] then
  local hold = tonumber(ARGV[2])
  redis.call('HSET', KEYS[1], 'running_until', now + hold)
  local ttl = tonumber(redis.call('HGET', KEYS[1], 'ttl') or '0')
  for i = 1, 3 do
    if redis.call('EXISTS', KEYS[i]) == 1 and redis.call('PTTL', KEYS[i]) < ttl + hold then
      redis.call('PEXPIRE', KEYS[i], ttl + hold)
    end
  end
  return 1
end
return 0
";

pub(super) const UPDATE: &str = r"
-- KEYS[1] meta; ARGV[1] 1 to set the title, ARGV[2] title, then label
-- pairs (an empty value deletes).
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
if ARGV[1] == '1' then
  redis.call('HSET', KEYS[1], 'title', ARGV[2])
end
for i = 3, #ARGV, 2 do
  if ARGV[i + 1] == '' then
    redis.call('HDEL', KEYS[1], 'l:' .. ARGV[i])
  else
    redis.call('HSET', KEYS[1], 'l:' .. ARGV[i], ARGV[i + 1])
  end
end
return 1
";
