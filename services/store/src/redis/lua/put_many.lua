-- KEYS: meta, exp index, info, then the slot of each entry
-- ARGV: max trace bytes, max trace keys, slot prefix, channel, retention ms,
--       deadline (Unix ms, Redis's clock), then five per entry: key, value,
--       content type, ttl ms, expected version ('' = none)
-- Every entry is checked before anything is written: all or nothing.
-- Returns {0, version, expires_at, version, expires_at, ...} (per entry) or
-- an error tuple naming the entry (1-based):
--   {9}                                    started after the deadline
--   {1, entry, current version or -1}      version mismatch
--   {2, entry, bytes the trace would use}  byte quota
--   {3, entry, live keys}                  key quota
local meta, idx, info = KEYS[1], KEYS[2], KEYS[3]
local now = now_ms()
if now > tonumber(ARGV[6]) then
  return {9}
end
purge(meta, idx, info, ARGV[3], ARGV[4], now)

local n = (#ARGV - 6) / 5
local bytes = tonumber(redis.call('HGET', meta, 'bytes') or '0')
local live = redis.call('ZCARD', idx)
local max_bytes, max_keys = tonumber(ARGV[1]), tonumber(ARGV[2])
local old_size = {}
for e = 1, n do
  local a = 6 + (e - 1) * 5
  local key, size = ARGV[a + 1], string.len(ARGV[a + 2])
  local cur_size, cur_ver = 0, nil
  local i = redis.call('HGET', info, key)
  if i then
    cur_size, cur_ver = parse_info(i)
  end
  if ARGV[a + 5] ~= '' and (cur_ver or 0) ~= tonumber(ARGV[a + 5]) then
    return {1, e, cur_ver or -1}
  end
  bytes = bytes - cur_size + size
  if bytes > max_bytes then
    return {2, e, bytes}
  end
  if not cur_ver then
    if live >= max_keys then
      return {3, e, live}
    end
    live = live + 1
  end
  old_size[e] = cur_size
end

local out = {0}
local last_exp = 0
for e = 1, n do
  local a = 6 + (e - 1) * 5
  local key, value, ct = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  local size = string.len(value)
  local rev = redis.call('HINCRBY', meta, 'rev', 1)
  local exp = now + tonumber(ARGV[a + 4])
  local slot = KEYS[3 + e]
  redis.call('HSET', slot, 'v', value, 'ct', ct, 'ver', rev, 'exp', string.format('%d', exp))
  redis.call('PEXPIREAT', slot, exp)
  redis.call('ZADD', idx, exp, key)
  redis.call('HSET', info, key, string.format('%d:%d', size, rev))
  redis.call('PUBLISH', ARGV[4], string.format('P|%d|%d|%d|%s|%s', rev, size, exp, key, ct))
  if exp > last_exp then
    last_exp = exp
  end
  out[#out + 1] = rev
  out[#out + 1] = exp
end
redis.call('HSET', meta, 'bytes', bytes)
extend({meta, idx, info}, last_exp + tonumber(ARGV[5]))
return out
