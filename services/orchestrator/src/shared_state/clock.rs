//! The one clock of what replicas share: Redis's (a leaf).

/// Redis's clock in ms, inside a script: `now`.
pub const NOW: &str = "local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
";

/// Milliseconds since the Unix epoch on this replica's clock (which
/// period a call falls in; what Redis compares is on Redis's).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
