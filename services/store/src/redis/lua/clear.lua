-- KEYS: meta, exp index, info
-- ARGV: slot prefix, channel, deadline (Unix ms, Redis's clock)
-- Returns {0, revision, removed}, or {9} when it started after the deadline
-- (nothing done).
local meta, idx, info = KEYS[1], KEYS[2], KEYS[3]
local now = now_ms()
if now > tonumber(ARGV[3]) then
  return {9}
end
if redis.call('EXISTS', meta) == 0 then
  -- An unknown (or long forgotten) trace: nothing to clear, and nothing may
  -- be created, since a key made here would have no TTL.
  return {0, 0, 0}
end
purge(meta, idx, info, ARGV[1], ARGV[2], now)

local keys = redis.call('ZRANGE', idx, 0, -1)
for _, k in ipairs(keys) do
  redis.call('UNLINK', ARGV[1] .. k)
end
redis.call('DEL', idx, info)
redis.call('HSET', meta, 'bytes', 0)
local rev = redis.call('HINCRBY', meta, 'rev', 1)
redis.call('PUBLISH', ARGV[2], string.format('C|%d|%d', rev, #keys))
return {0, rev, #keys}
