-- Shared by every script. All keys of a trace share the hash tag {trace_id},
-- so each script touches one Redis Cluster slot.
--
-- Layout (P = key prefix, T = trace id):
--   P:{T}:meta   hash  rev = trace revision counter, bytes = bytes of live slots
--   P:{T}:exp    zset  member = key, score = expiry (Unix ms)
--   P:{T}:info   hash  key -> "size:version" (kept after the slot's own expiry
--                      so that purging can release its quota exactly)
--   P:{T}:s:KEY  hash  v = value, ct = content type, ver = version, exp = expiry
--   P:{T}:watch  pub/sub channel of changes

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function parse_info(info)
  local size, ver = string.match(info, '^(%d+):(%d+)$')
  return tonumber(size), tonumber(ver)
end

-- Removes the slots whose TTL ran out (expires_at < now), releases their
-- quota and publishes one expiry per slot.
local function purge(meta, idx, info, slot_prefix, channel, now)
  local expired = redis.call('ZRANGEBYSCORE', idx, '-inf', '(' .. string.format('%d', now))
  if #expired == 0 then
    return
  end
  local freed = 0
  for _, k in ipairs(expired) do
    local i = redis.call('HGET', info, k)
    local ver = 0
    if i then
      local size
      size, ver = parse_info(i)
      freed = freed + size
    end
    redis.call('HDEL', info, k)
    redis.call('UNLINK', slot_prefix .. k)
    redis.call('PUBLISH', channel, string.format('E|%d|%s', ver, k))
  end
  redis.call('ZREMRANGEBYSCORE', idx, '-inf', '(' .. string.format('%d', now))
  redis.call('HINCRBY', meta, 'bytes', -freed)
end

-- Keeps the trace's bookkeeping keys alive at least until `exp` (the caller
-- adds the retention period past the slot's expiry).
local function extend(keys, exp)
  for _, k in ipairs(keys) do
    if redis.call('PEXPIRETIME', k) < exp then
      redis.call('PEXPIREAT', k, exp)
    end
  end
end
