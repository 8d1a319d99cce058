-- wrk script for loadtest/peers/compare.sh: POST tools/call (echo) to a
-- Streamable HTTP MCP endpoint, rotating over the session ids in the
-- SESSIONS environment variable (comma-separated; unset for the bare JSON
-- echo, which keeps no sessions).
-- The generator must outrun the fastest server on one core, so the requests
-- are formatted once, up front, and there is no response() hook (with one,
-- wrk hands every response to Lua; without it wrk counts non-2xx itself).
local body = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hello"}}}'
local requests = {}
local counter = 0

-- In init, not at load: wrk sets the Host header just before calling it.
init = function(args)
  local ids = {}
  for id in string.gmatch(os.getenv("SESSIONS") or "", "[^,]+") do
    table.insert(ids, id)
  end
  -- No sessions: one request without the header.
  if #ids == 0 then ids = { false } end
  for _, id in ipairs(ids) do
    local headers = {
      ["Content-Type"] = "application/json",
      ["Accept"] = "application/json, text/event-stream",
      ["MCP-Protocol-Version"] = "2025-11-25",
    }
    if id then headers["Mcp-Session-Id"] = id end
    table.insert(requests, wrk.format("POST", nil, headers, body))
  end
end

request = function()
  counter = counter + 1
  return requests[(counter % #requests) + 1]
end
