-- wrk script for loadtest/peers/compare.sh: whole session lives, one after
-- the other on each connection: POST initialize, POST
-- notifications/initialized with the session id it gave, DELETE the
-- session. A life counts as one success once all three are answered right:
--   - initialize: checked as initialize.lua checks it (the request's own
--     id, a real initialize result, an Mcp-Session-Id header);
--   - notifications/initialized: 202 Accepted (the transport's answer to a
--     notification);
--   - DELETE: 2xx (the session is ended).
-- A step answered wrong counts one failure (its key: `initialized_status:404`,
-- `delete_status:405`, or initialize's) and the connection starts a new
-- life; a session left behind by such a failure stays with the server.
--
-- wrk's Lua state is per thread, not per connection, and a thread serves
-- its connections in whatever order they become ready: so each thread must
-- have exactly one connection (wrk -tN -cN), which compare.sh does. A
-- request asked for while an answer is awaited (a reconnection after a
-- socket error, which wrk counts) starts a new life.
--
-- Run from the repository root (or set WRK_LUA_DIR to this directory).
--   RUN_ID=1 wrk -t16 -c16 -d5s -s loadtest/peers/wrk/life.lua http://127.0.0.1:18501/mcp
package.path = (os.getenv("WRK_LUA_DIR") or "loadtest/peers/wrk") .. "/?.lua;" .. package.path
local check = require("mcp_check")

local PROTOCOL_VERSION = "2025-11-25"
local INITIALIZED = '{"jsonrpc":"2.0","method":"notifications/initialized"}'

local init_head
local step = "initialize"
local session
-- Whether a request is out: the next answer is to it.
local waiting = false

init = function(args)
  init_head = check.post_head()
end

request = function()
  if waiting then
    -- The answer never came (wrk reconnected after a socket error, which
    -- it counts itself), or wrk asked for a request it did not send: the
    -- life starts again.
    step = "initialize"
  end
  waiting = true
  if step == "initialize" then
    local _, id = check.next_id()
    local body = '{"jsonrpc":"2.0","id":' .. id ..
      ',"method":"initialize","params":{"protocolVersion":"' .. PROTOCOL_VERSION ..
      '","capabilities":{},"clientInfo":{"name":"wrk","version":"0"}}}'
    return init_head .. #body .. "\r\n\r\n" .. body
  end
  local extra = { ["MCP-Protocol-Version"] = PROTOCOL_VERSION, ["Mcp-Session-Id"] = session }
  if step == "initialized" then
    return check.post_head(extra) .. #INITIALIZED .. "\r\n\r\n" .. INITIALIZED
  end
  return check.head("DELETE", extra) .. "\r\n\r\n"
end

local function expect_initialize(result, id, session_id)
  if type(result.protocolVersion) ~= "string" then return "no_protocol_version" end
  if type(result.capabilities) ~= "table" or result.capabilities == check.null then return "no_capabilities" end
  if type(result.serverInfo) ~= "table" or result.serverInfo == check.null then return "no_server_info" end
  if not session_id or session_id == "" then return "no_session_id" end
  session = session_id
  return nil
end

response = function(status, headers, body)
  waiting = false
  if step == "initialize" then
    local failure = check.check_answer(status, headers, body, expect_initialize, true)
    if failure then
      check.count(failure, status, body)
    else
      step = "initialized"
    end
  elseif step == "initialized" then
    if status == 202 then
      step = "delete"
    else
      check.count("initialized_status:" .. status, status, body)
      step = "initialize"
    end
  else
    step = "initialize"
    if status >= 200 and status <= 299 then
      check.count(nil, status, body)
    else
      check.count("delete_status:" .. status, status, body)
    end
  end
end

setup = check.setup
done = check.done
