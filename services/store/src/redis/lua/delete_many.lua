-- KEYS: meta, exp index, info
-- ARGV: slot prefix, channel, deadline (Unix ms, Redis's clock), mode ('k':
--       the keys follow; 'p': the prefix follows)
-- Removes the selected live slots, each with its own revision and change.
-- Returns {0, last revision or 0, removed key, removed key, ...}, or {9}
-- when it started after the deadline (nothing done).
local meta, idx, info = KEYS[1], KEYS[2], KEYS[3]
local now = now_ms()
if now > tonumber(ARGV[3]) then
  return {9}
end
if redis.call('EXISTS', meta) == 0 then
  return {0, 0}
end
purge(meta, idx, info, ARGV[1], ARGV[2], now)

local selected = {}
if ARGV[4] == 'p' then
  local prefix = ARGV[5]
  for _, k in ipairs(redis.call('ZRANGE', idx, 0, -1)) do
    if string.sub(k, 1, #prefix) == prefix then
      selected[#selected + 1] = k
    end
  end
else
  for j = 5, #ARGV do
    selected[#selected + 1] = ARGV[j]
  end
end

local out = {0, 0}
local freed = 0
for _, k in ipairs(selected) do
  local i = redis.call('HGET', info, k)
  if i then
    local size = parse_info(i)
    freed = freed + size
    redis.call('UNLINK', ARGV[1] .. k)
    redis.call('ZREM', idx, k)
    redis.call('HDEL', info, k)
    local rev = redis.call('HINCRBY', meta, 'rev', 1)
    redis.call('PUBLISH', ARGV[2], string.format('D|%d|%s', rev, k))
    out[2] = rev
    out[#out + 1] = k
  end
end
if freed > 0 then
  redis.call('HINCRBY', meta, 'bytes', -freed)
end
return out
