//! The script every write of a run's log goes through (see the module
//! docs of `run::durable`): fenced by the run's epoch, it appends events,
//! journal records and the run's fields in one step.

pub(super) const APPEND: &str = r"
-- KEYS[1] meta, KEYS[2] log, KEYS[3] journal, KEYS[4] inbox, then k
-- webhook streams' lists (KEYS[5..], one per delivery)
-- ARGV[1] epoch, ARGV[2] events n, ARGV[3] ttl ms (0: keep), ARGV[4] fields m,
-- ARGV[5] records j, ARGV[6] deliveries k, ARGV[7] their lists' ttl ms,
-- then n pairs (seq, event bytes), m pairs (field, value), j pairs (unit,
-- record), k deliveries.
local epoch = redis.call('HGET', KEYS[1], 'epoch')
if not epoch then
  return 2
end
-- How many of the run's questions wait for a person, by kind.
local function waits(field, by)
  if redis.call('HINCRBY', KEYS[1], field, by) < 0 then
    redis.call('HSET', KEYS[1], field, 0)
  end
end
if epoch ~= ARGV[1] then
  return 0
end
local n, m, j, i = tonumber(ARGV[2]), tonumber(ARGV[4]), tonumber(ARGV[5]), 8
local last = nil
for _ = 1, n do
  redis.call('XADD', KEYS[2], '0-' .. ARGV[i], 'e', ARGV[i + 1])
  last = ARGV[i]
  i = i + 2
end
if last then
  redis.call('HSET', KEYS[1], 'last_seq', last)
end
for _ = 1, m do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  i = i + 2
end
for _ = 1, j do
  local unit = ARGV[i]
  redis.call('HSET', KEYS[3], unit, ARGV[i + 1])
  -- An answered question leaves the inbox.
  local kind = string.sub(unit, 1, 3)
  if kind == 'ap/' or kind == 'in/' then
    redis.call('HDEL', KEYS[4], string.sub(unit, 4))
  end
  -- A question asked (q/) waits for a person until it is answered or
  -- closed (ap/, in/, it/: timed out).
  if string.sub(unit, 1, 2) == 'q/' then
    if string.sub(unit, 3, 11) == 'approval:' then
      waits('wait_ap', 1)
    else
      waits('wait_in', 1)
    end
  elseif kind == 'ap/' then
    waits('wait_ap', -1)
  elseif kind == 'in/' or kind == 'it/' then
    waits('wait_in', -1)
  end
  i = i + 2
end
if j > 0 then
  redis.call('PEXPIRE', KEYS[3], redis.call('PTTL', KEYS[1]))
end
-- Webhook deliveries of these events, at the ends of their streams (the
-- streams were marked due before: see `webhook::outbox`).
for x = 1, tonumber(ARGV[6]) do
  redis.call('RPUSH', KEYS[4 + x], ARGV[i])
  redis.call('PEXPIRE', KEYS[4 + x], ARGV[7])
  i = i + 1
end
local ttl = tonumber(ARGV[3])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
  redis.call('PEXPIRE', KEYS[3], ttl)
  redis.call('PEXPIRE', KEYS[4], ttl)
end
return 1
";
