-- wrk script: POST tools/call (echo) to an MCP Streamable HTTP endpoint,
-- rotating over the session ids in the SESSIONS environment variable
-- (comma-separated). With SESSIONS unset it sends no session header (for a
-- bare JSON echo server).
local sessions = {}
for id in string.gmatch(os.getenv("SESSIONS") or "", "[^,]+") do
  table.insert(sessions, id)
end
local counter = 0
local body = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hello"}}}'

request = function()
  counter = counter + 1
  local headers = {
    ["Content-Type"] = "application/json",
    ["Accept"] = "application/json, text/event-stream",
    ["MCP-Protocol-Version"] = "2025-11-25",
  }
  if #sessions > 0 then
    headers["Mcp-Session-Id"] = sessions[(counter % #sessions) + 1]
  end
  return wrk.format("POST", nil, headers, body)
end

response = function(status, headers, body)
  if status ~= 200 then
    error("unexpected status " .. status .. ": " .. body)
  end
end
