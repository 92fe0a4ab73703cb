-- KEYS: exp index, info
-- ARGV: prefix, slot prefix
-- Returns {used bytes, used keys, key, content type, version, size, expiry, ...}
-- for the live slots whose key starts with the prefix. Reads only.
local idx, info = KEYS[1], KEYS[2]
local prefix, slot_prefix = ARGV[1], ARGV[2]
local live = redis.call('ZRANGEBYSCORE', idx, string.format('%d', now_ms()), '+inf', 'WITHSCORES')
local out = {0, 0}
local used = 0
for n = 1, #live, 2 do
  local k, exp = live[n], live[n + 1]
  local size, ver = parse_info(redis.call('HGET', info, k) or '0:0')
  used = used + size
  if prefix == '' or string.sub(k, 1, #prefix) == prefix then
    local ct = redis.call('HGET', slot_prefix .. k, 'ct')
    if ct then
      table.insert(out, k)
      table.insert(out, ct)
      table.insert(out, ver)
      table.insert(out, size)
      table.insert(out, tonumber(exp))
    end
  end
end
out[1] = used
out[2] = #live / 2
return out
