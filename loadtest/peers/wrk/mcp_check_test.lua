-- Tests of mcp_check.lua outside wrk: `luajit loadtest/peers/wrk/mcp_check_test.lua`
-- from the repository root (apt-get install luajit; wrk embeds the same LuaJIT).
package.path = "loadtest/peers/wrk/?.lua;" .. package.path
local check = require("mcp_check")

local failures = 0
local function eq(got, want, what)
  if got ~= want then
    failures = failures + 1
    print(string.format("FAIL %s: got %s, want %s", what, tostring(got), tostring(want)))
  end
end

-- the decoder
local v = check.decode('{"a":[1,2.5e1,-3],"b":"x\\"y\\u00e9\\ud83d\\ude00","c":null,"d":true,"e":{}}')
eq(v.a[2], 25, "number with exponent")
eq(v.a[3], -3, "negative number")
eq(v.b, 'x"y\195\169\240\159\152\128', "escapes and surrogate pairs")
eq(v.c, check.null, "null is present")
eq(v.d, true, "true")
eq(type(v.e), "table", "empty object")
eq(check.decode('{"a":1} x'), nil, "trailing data")
eq(check.decode('{"a":01}'), nil, "leading zero")
eq(check.decode('{"a":"x\ny"}'), nil, "raw control character")
eq(check.decode('{"a":1'), nil, "unterminated object")
eq(check.decode('[1,]'), nil, "trailing comma")
eq(check.decode(string.rep("[", 100) .. string.rep("]", 100)), nil, "too deep")
eq(check.decode('  {"id":101000000001} ').id, 101000000001, "large id exact")

-- SSE bodies
local m = check.sse_messages('event: message\r\nid: 1\r\ndata: {"id":1}\r\n\r\n')
eq(#m, 1, "CRLF event")
eq(m[1].id, 1, "CRLF event data")
m = check.sse_messages('id: 0\nretry: 3000\ndata:\n\n: comment\ndata: {"a":\ndata: 1}\n\n')
eq(#m, 1, "priming event skipped, two data lines joined")
eq(m[1].a, 1, "joined data")
m = check.sse_messages('data: {"id":1}\n')
eq(#m, 0, "unterminated event discarded")
local _, why = check.sse_messages('data: {\n\n')
eq(why, "bad_json", "bad json in an event")

-- whole answers
local function echo(prefix)
  return function(result, id)
    local item = result.content and result.content[1]
    if type(item) ~= "table" or #result.content ~= 1 or item.type ~= "text" then return "wrong_content" end
    if item.text ~= prefix .. "m" .. check.id_text(id) then return "wrong_text" end
  end
end
local json = { ["content-type"] = "application/json" }
local sse = { ["Content-Type"] = "text/event-stream" }
local outstanding = { [7] = true, [8] = true, [9] = true }
eq(check.check(200, json, '{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"Echo: m7"}]}}',
  outstanding, echo("Echo: ")), nil, "a correct JSON answer")
eq(outstanding[7], nil, "an answered id is no longer outstanding")
eq(check.check(200, json, '{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"Echo: m7"}]}}',
  outstanding, echo("Echo: ")), "unknown_id", "a second answer with the same id")
eq(check.check(200, json, '{"jsonrpc":"2.0","id":8,"error":{"code":-32600,"message":"request id 8 is already in flight"}}',
  outstanding, echo("")), "jsonrpc_error:-32600", "a JSON-RPC error in a 200")
eq(check.check(200, sse, 'event: message\ndata: {"jsonrpc":"2.0","id":9,"result":{"content":[{"type":"text","text":"m8"}]}}\n\n',
  { [9] = true }, echo("")), "wrong_text", "text of another request")
eq(check.check(200, sse, 'data: {"jsonrpc":"2.0","method":"notifications/message","params":{}}\n\n' ..
  'event: message\ndata: {"jsonrpc":"2.0","id":9,"result":{"content":[{"type":"text","text":"m9"}],"isError":false}}\n\n',
  { [9] = true }, echo("")), nil, "a correct SSE answer after a notification")
eq(check.check(200, sse, 'data: {"jsonrpc":"2.0","method":"notifications/message"}\n\n', { [9] = true }, echo("")),
  "no_response", "no response")
eq(check.check(200, json, '{"jsonrpc":"2.0","id":5,"result":{}}', { [9] = true }, echo("")), "unknown_id",
  "an id never sent")
eq(check.check(200, json, '{"jsonrpc":"2.0","id":"9","result":{}}', { [9] = true }, echo("")), "unknown_id",
  "a string id for a number")
eq(check.check(202, {}, '', { [9] = true }, echo("")), "content_type", "a 202 without a body answers no request")
eq(check.check(404, json, '{}', { [9] = true }, echo("")), "http_status:404", "non-2xx")
eq(check.check(200, { ["content-type"] = "text/plain" }, 'x', { [9] = true }, echo("")), "content_type", "content type")
eq(check.check(200, json, '{"jsonrpc":"2.0","id":9,"result":null}', { [9] = true }, echo("")), "no_result", "null result")
eq(check.check(200, json, '{"jsonrpc":"1.0","id":9,"result":{}}', { [9] = true }, echo("")), "not_jsonrpc_2.0", "version")

-- the session header, whatever the case of its name, only when asked for
local seen
local function session(result, id, session_id) seen = session_id end
check.check(200, { ["Content-Type"] = "application/json", ["MCP-SESSION-ID"] = "s1" },
  '{"jsonrpc":"2.0","id":9,"result":{}}', { [9] = true }, session, true)
eq(seen, "s1", "session header in any case")
check.check(200, { ["content-type"] = "application/json", ["mcp-session-id"] = "s2" },
  '{"jsonrpc":"2.0","id":9,"result":{}}', { [9] = true }, session, false)
eq(seen, nil, "session header not looked up")

if failures > 0 then
  print(failures .. " failed")
  os.exit(1)
end
print("mcp_check: all passed")
