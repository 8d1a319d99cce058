-- wrk script for loadtest/peers/compare.sh: every request is an initialize
-- without a session, so each one creates a session the server keeps; the
-- script therefore runs it briefly against a freshly started server.
-- No notifications/initialized follows: the measure is session creation.
--
-- Every answer is checked (mcp_check.lua says what counts as a success):
-- the response must carry the request's own id (each request has its own)
-- and a result with a protocolVersion string, a capabilities object and a
-- serverInfo object, and the answer an Mcp-Session-Id header.
-- INIT_EXPECT=bare (the actix echo, which has no MCP and answers every POST
-- with an echo result) checks the id and that there is a result only.
--
-- Run from the repository root (or set WRK_LUA_DIR to this directory).
package.path = (os.getenv("WRK_LUA_DIR") or "loadtest/peers/wrk") .. "/?.lua;" .. package.path
local check = require("mcp_check")

local head
local bare = os.getenv("INIT_EXPECT") == "bare"

-- In init, not at load: wrk sets the Host header just before calling it.
init = function(args)
  head = check.post_head()
end

request = function()
  local _, id = check.next_id()
  local body = '{"jsonrpc":"2.0","id":' .. id ..
    ',"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"wrk","version":"0"}}}'
  return head .. #body .. "\r\n\r\n" .. body
end

local function expect(result, id, session_id)
  if bare then return nil end
  if type(result.protocolVersion) ~= "string" then return "no_protocol_version" end
  if type(result.capabilities) ~= "table" or result.capabilities == check.null then return "no_capabilities" end
  if type(result.serverInfo) ~= "table" or result.serverInfo == check.null then return "no_server_info" end
  if not session_id or session_id == "" then return "no_session_id" end
  return nil
end

response = check.response_hook(expect, not bare)
setup = check.setup
done = check.done
