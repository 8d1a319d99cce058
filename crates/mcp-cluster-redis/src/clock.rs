//! The clock scripts share: Redis's own (`TIME`), the one every node of a
//! cluster reads alike whatever its host's clock says.

/// Lua: `now_ms()`, Redis's time in whole milliseconds.
const NOW_MS: &str = r"
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
";

/// A script: [`NOW_MS`], then `body`.
pub(crate) fn with_now_ms(body: &str) -> redis::Script {
    redis::Script::new(&[NOW_MS, body].concat())
}
