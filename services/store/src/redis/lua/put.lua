-- KEYS: meta, exp index, info, slot
-- ARGV: key, value, content type, ttl ms, expected version ('' = none),
--       max trace bytes, max trace keys, slot prefix, channel, retention ms,
--       deadline (Unix ms, Redis's clock)
-- Returns {0, version, expires_at} or an error tuple:
--   {9}                                 started after the deadline: nothing done
--   {1, current version or -1}          version mismatch
--   {2, bytes the trace would use}      byte quota
--   {3, live keys}                      key quota
local meta, idx, info, slot = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local key, value, ct = ARGV[1], ARGV[2], ARGV[3]
local now = now_ms()
if now > tonumber(ARGV[11]) then
  return {9}
end
purge(meta, idx, info, ARGV[8], ARGV[9], now)

local cur_size, cur_ver = 0, nil
local i = redis.call('HGET', info, key)
if i then
  cur_size, cur_ver = parse_info(i)
end
if ARGV[5] ~= '' and (cur_ver or 0) ~= tonumber(ARGV[5]) then
  return {1, cur_ver or -1}
end

local size = string.len(value)
local bytes = tonumber(redis.call('HGET', meta, 'bytes') or '0')
local would_be = bytes - cur_size + size
if would_be > tonumber(ARGV[6]) then
  return {2, would_be}
end
if not cur_ver then
  local live = redis.call('ZCARD', idx)
  if live >= tonumber(ARGV[7]) then
    return {3, live}
  end
end

local rev = redis.call('HINCRBY', meta, 'rev', 1)
local exp = now + tonumber(ARGV[4])
redis.call('HSET', slot, 'v', value, 'ct', ct, 'ver', rev, 'exp', string.format('%d', exp))
redis.call('PEXPIREAT', slot, exp)
redis.call('ZADD', idx, exp, key)
redis.call('HSET', info, key, string.format('%d:%d', size, rev))
redis.call('HINCRBY', meta, 'bytes', size - cur_size)
extend({meta, idx, info}, exp + tonumber(ARGV[10]))
redis.call('PUBLISH', ARGV[9], string.format('P|%d|%d|%d|%s|%s', rev, size, exp, key, ct))
return {0, rev, exp}
