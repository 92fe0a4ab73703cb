-- KEYS: meta, exp index, info, slot
-- ARGV: key, expected version ('' = none), slot prefix, channel, deadline
--       (Unix ms, Redis's clock)
-- Returns {0, revision}, {1, current version} (mismatch), {4} (not found) or
-- {9} (started after the deadline: nothing done).
local meta, idx, info, slot = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local key = ARGV[1]
local now = now_ms()
if now > tonumber(ARGV[5]) then
  return {9}
end
purge(meta, idx, info, ARGV[3], ARGV[4], now)

local i = redis.call('HGET', info, key)
if not i then
  return {4}
end
local size, ver = parse_info(i)
if ARGV[2] ~= '' and ver ~= tonumber(ARGV[2]) then
  return {1, ver}
end
redis.call('UNLINK', slot)
redis.call('ZREM', idx, key)
redis.call('HDEL', info, key)
redis.call('HINCRBY', meta, 'bytes', -size)
local rev = redis.call('HINCRBY', meta, 'rev', 1)
redis.call('PUBLISH', ARGV[4], string.format('D|%d|%s', rev, key))
return {0, rev}
