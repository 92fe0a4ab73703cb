-- KEYS: exp index, info
-- ARGV: prefix, slot prefix, after ('' = from the first key), page size
-- Returns {used bytes, used keys, more (0/1), key, content type, version,
-- size, expiry, ...} for one page of the live slots whose key starts with
-- the prefix and comes after `after`, in byte order of the keys. Reads only.
local idx, info = KEYS[1], KEYS[2]
local prefix, slot_prefix, after, size = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])

-- Byte order, as the other backend and every client sort (Lua's own string
-- comparison follows the server's locale).
local function before(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return #a < #b
end

local live = redis.call('ZRANGEBYSCORE', idx, string.format('%d', now_ms()), '+inf', 'WITHSCORES')
local used = 0
local matched, meta = {}, {}
for n = 1, #live, 2 do
  local k, exp = live[n], live[n + 1]
  local sz, ver = parse_info(redis.call('HGET', info, k) or '0:0')
  used = used + sz
  if (prefix == '' or string.sub(k, 1, #prefix) == prefix) and (after == '' or before(after, k)) then
    table.insert(matched, k)
    meta[k] = {sz, ver, tonumber(exp)}
  end
end
table.sort(matched, before)
local out = {used, #live / 2, 0}
if #matched > size then
  out[3] = 1
end
for n = 1, math.min(size, #matched) do
  local k = matched[n]
  local ct = redis.call('HGET', slot_prefix .. k, 'ct')
  if ct then
    local m = meta[k]
    table.insert(out, k)
    table.insert(out, ct)
    table.insert(out, m[2])
    table.insert(out, m[1])
    table.insert(out, m[3])
  end
end
return out
