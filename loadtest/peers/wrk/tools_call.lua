-- wrk script for loadtest/peers/compare.sh and loadtest/wrk/compare.sh:
-- POST tools/call (echo) to a Streamable HTTP MCP endpoint, rotating over
-- the session ids in the SESSIONS environment variable (comma-separated;
-- unset for the bare JSON echo, which keeps no sessions), and check every
-- answer (mcp_check.lua says what counts as a success).
--
-- Every request has its own id N (unique in the run, and across runs that
-- pass different RUN_IDs, so a session never sees an id twice) and the
-- message "mN"; the answer must carry id N and the single text content
-- ECHO_PREFIX .. "mN": "Echo: mN" from mcp-node's echo tool
-- (ECHO_PREFIX="Echo: "), "mN" from the SDK peers, the actix echo and the
-- hyper floor, which return the message as it came (ECHO_PREFIX unset).
--
-- Run from the repository root (or set WRK_LUA_DIR to this directory).
--   SESSIONS=a,b RUN_ID=1 ECHO_PREFIX="Echo: " wrk -t1 -c64 -d10s \
--     -s loadtest/peers/wrk/tools_call.lua http://127.0.0.1:18501/mcp
package.path = (os.getenv("WRK_LUA_DIR") or "loadtest/peers/wrk") .. "/?.lua;" .. package.path
local check = require("mcp_check")

local heads = {}
local counter = 0
local prefix = os.getenv("ECHO_PREFIX") or ""
-- STATELESS=1: the 2026-07-28 era, no session: every request carries its
-- _meta and the standard headers (MCP-Protocol-Version, Mcp-Method,
-- Mcp-Name).
local stateless = os.getenv("STATELESS") == "1"
local meta = ',"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",' ..
  '"io.modelcontextprotocol/clientInfo":{"name":"wrk","version":"0"},' ..
  '"io.modelcontextprotocol/clientCapabilities":{}}' 

-- In init, not at load: wrk sets the Host header just before calling it.
-- BEARERS (comma-separated, optional): bearer tokens, the i-th session's
-- requests carrying the i-th (a node with authorization binds each session
-- to its token's principal).
init = function(args)
  local ids, tokens = {}, {}
  for id in string.gmatch(os.getenv("SESSIONS") or "", "[^,]+") do
    table.insert(ids, id)
  end
  for token in string.gmatch(os.getenv("BEARERS") or "", "[^,]+") do
    table.insert(tokens, token)
  end
  if stateless then
    heads[1] = check.post_head({
      ["MCP-Protocol-Version"] = "2026-07-28", ["Mcp-Method"] = "tools/call", ["Mcp-Name"] = "echo",
    })
    return
  end
  if #ids == 0 then
    heads[1] = check.post_head({ ["MCP-Protocol-Version"] = "2025-11-25" })
  end
  for i, id in ipairs(ids) do
    local extra = { ["MCP-Protocol-Version"] = "2025-11-25", ["Mcp-Session-Id"] = id }
    if #tokens > 0 then extra["Authorization"] = "Bearer " .. tokens[((i - 1) % #tokens) + 1] end
    table.insert(heads, check.post_head(extra))
  end
end

request = function()
  counter = counter + 1
  local _, id = check.next_id()
  local body = '{"jsonrpc":"2.0","id":' .. id ..
    ',"method":"tools/call","params":{"name":"echo","arguments":{"message":"m' .. id .. '"}' ..
    (stateless and meta or "") .. '}}'
  return heads[(counter % #heads) + 1] .. #body .. "\r\n\r\n" .. body
end

-- The echo result: exactly one content item, text, ECHO_PREFIX .. "m<id>".
local function expect(result, id)
  if result.isError == true then return "tool_error" end
  local content = result.content
  if type(content) ~= "table" or #content ~= 1 or type(content[1]) ~= "table" then
    return "wrong_content"
  end
  local item = content[1]
  if item.type ~= "text" then return "wrong_content" end
  if item.text ~= prefix .. "m" .. check.id_text(id) then return "wrong_text" end
  return nil
end

response = check.response_hook(expect)
setup = check.setup
done = check.done
