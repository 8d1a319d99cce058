-- Checks every answer a wrk run gets, for tools_call.lua and initialize.lua
-- (loadtest/peers/compare.sh, loadtest/wrk/compare.sh). Only an answer
-- checked here counts as a success; the rate printed by done() is
-- successes / run time. wrk's own "Requests/sec" counts every HTTP answer,
-- errors included, and is not used.
--
-- Each request gets a JSON-RPC id no other request of the run, and no other
-- run with a different RUN_ID, uses:
--   id = (RUN_ID * 100 + thread number) * 1e9 + per-thread counter
-- (below 2^53, so exact as a JSON number in every peer's language). An id
-- is "outstanding" from request() until its answer arrives.
--
-- An answer is a success when all of these hold:
--   - HTTP status 2xx; Content-Type application/json or text/event-stream;
--   - the body (a JSON document, or the `data:` of each SSE event, parsed
--     as the event-stream format says) holds exactly one JSON-RPC response
--     (messages with a `method`, i.e. notifications, are skipped);
--   - that response has "jsonrpc":"2.0", no "error", an object "result",
--     and an id that is outstanding in this thread (sent by it and not yet
--     answered: a wrong, unknown or repeated id fails);
--   - the script's own check of the result passes (tools_call.lua: the echo
--     text carries that same id; initialize.lua: a real initialize result).
-- Anything else is a failure, counted under a key (`http_status:404`,
-- `jsonrpc_error:-32600`, `unknown_id`, `wrong_text`, ...).
--
-- Counters live in each thread's Lua state (wrk runs one per thread);
-- setup() keeps every thread and done() collects them with thread:get(),
-- then prints, for compare.sh to parse:
--   checked ok N failed M socket_errors S responses R secs T ok_per_sec X
--   checked failure KEY COUNT          (one line per key)
--   checked sample STATUS BODY...      (the first failing answer per thread)
-- socket_errors are wrk's connect/read/write/timeout errors; compare.sh
-- counts them as failures too.
--
-- Cost: with a response() hook wrk hands every answer's headers and body to
-- Lua, and with a request() hook it formats every request in Lua; both
-- lower the rate one wrk thread can generate. Every target is measured
-- through the same script, so the comparison stays fair; PERFORMANCE.md
-- gives the cost on the actix ceiling.

local M = {}

local byte, sub, find, format, char = string.byte, string.sub, string.find, string.format, string.char
local concat = table.concat
local floor = math.floor

-- JSON null: present, unlike an absent key (nil).
M.null = setmetatable({}, { __tostring = function() return "null" end })

-- ---- a small strict JSON decoder (objects -> tables with string keys,
-- arrays -> sequences, null -> M.null)

local ESCAPES = { [34] = '"', [92] = "\\", [47] = "/", [98] = "\b", [102] = "\f",
  [110] = "\n", [114] = "\r", [116] = "\t" }
local MAX_DEPTH = 64

local function fail(why) error(why, 0) end

local function skip_ws(s, i)
  local b = byte(s, i)
  while b == 32 or b == 10 or b == 13 or b == 9 do
    i = i + 1
    b = byte(s, i)
  end
  return i
end

local function utf8(cp)
  if cp < 0x80 then return char(cp) end
  if cp < 0x800 then return char(0xC0 + floor(cp / 64), 0x80 + cp % 64) end
  if cp < 0x10000 then
    return char(0xE0 + floor(cp / 4096), 0x80 + floor(cp / 64) % 64, 0x80 + cp % 64)
  end
  return char(0xF0 + floor(cp / 262144), 0x80 + floor(cp / 4096) % 64,
    0x80 + floor(cp / 64) % 64, 0x80 + cp % 64)
end

-- s:byte(i) is the opening quote; returns the string and the index after it.
-- Byte loops rather than string.find patterns: LuaJIT compiles the former.
local function decode_string(s, i)
  local j, parts = i + 1, nil
  local k = j
  while true do
    local b = byte(s, k)
    if b == nil then fail("unterminated string") end
    if b == 34 then
      if not parts then return sub(s, j, k - 1), k + 1 end
      parts[#parts + 1] = sub(s, j, k - 1)
      return concat(parts), k + 1
    end
    if b < 32 then fail("control character in string") end
    if b ~= 92 then
      k = k + 1
    else
      parts = parts or {}
      parts[#parts + 1] = sub(s, j, k - 1)
      local e = byte(s, k + 1)
      if e == 117 then -- \uXXXX, a surrogate pair as two
        local hex = sub(s, k + 2, k + 5)
        if not find(hex, "^%x%x%x%x$") then fail("bad \\u escape") end
        local cp, after = tonumber(hex, 16), k + 6
        if cp >= 0xD800 and cp <= 0xDBFF then
          local low = sub(s, after, after + 5)
          if not find(low, "^\\u[dD][c-fC-F]%x%x$") then fail("lone surrogate") end
          cp = 0x10000 + (cp - 0xD800) * 1024 + (tonumber(sub(low, 3), 16) - 0xDC00)
          after = after + 6
        elseif cp >= 0xDC00 and cp <= 0xDFFF then
          fail("lone surrogate")
        end
        parts[#parts + 1] = utf8(cp)
        j = after
      else
        local r = e and ESCAPES[e]
        if not r then fail("bad escape") end
        parts[#parts + 1] = r
        j = k + 2
      end
      k = j
    end
  end
end

-- Digits from i on -> index after the last one (i when there is none).
local function digits(s, i)
  local b = byte(s, i)
  while b and b >= 48 and b <= 57 do
    i = i + 1
    b = byte(s, i)
  end
  return i
end

-- JSON number grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][-+]?[0-9]+)?
local function decode_number(s, i)
  local k = i
  if byte(s, k) == 45 then k = k + 1 end
  local first = byte(s, k)
  if not first or first < 48 or first > 57 then fail("unexpected character") end
  local e = digits(s, k)
  if first == 48 and e > k + 1 then fail("leading zero") end
  if byte(s, e) == 46 then
    local f = digits(s, e + 1)
    if f == e + 1 then fail("bad fraction") end
    e = f
  end
  local b = byte(s, e)
  if b == 101 or b == 69 then
    local x = e + 1
    b = byte(s, x)
    if b == 43 or b == 45 then x = x + 1 end
    local f = digits(s, x)
    if f == x then fail("bad exponent") end
    e = f
  end
  return tonumber(sub(s, i, e - 1)), e
end

local decode_value

local function decode_object(s, i, depth)
  local object = {}
  i = skip_ws(s, i + 1)
  if byte(s, i) == 125 then return object, i + 1 end
  while true do
    if byte(s, i) ~= 34 then fail("expected a key") end
    local key
    key, i = decode_string(s, i)
    i = skip_ws(s, i)
    if byte(s, i) ~= 58 then fail("expected ':'") end
    object[key], i = decode_value(s, i + 1, depth)
    i = skip_ws(s, i)
    local b = byte(s, i)
    if b == 125 then return object, i + 1 end
    if b ~= 44 then fail("expected ',' or '}'") end
    i = skip_ws(s, i + 1)
  end
end

local function decode_array(s, i, depth)
  local array = {}
  i = skip_ws(s, i + 1)
  if byte(s, i) == 93 then return array, i + 1 end
  while true do
    array[#array + 1], i = decode_value(s, i, depth)
    i = skip_ws(s, i)
    local b = byte(s, i)
    if b == 93 then return array, i + 1 end
    if b ~= 44 then fail("expected ',' or ']'") end
    i = i + 1
  end
end

decode_value = function(s, i, depth)
  i = skip_ws(s, i)
  local b = byte(s, i)
  if b == 123 or b == 91 then
    if depth >= MAX_DEPTH then fail("nested too deep") end
    if b == 123 then return decode_object(s, i, depth + 1) end
    return decode_array(s, i, depth + 1)
  end
  if b == 34 then return decode_string(s, i) end
  if b == 116 and sub(s, i, i + 3) == "true" then return true, i + 4 end
  if b == 102 and sub(s, i, i + 4) == "false" then return false, i + 5 end
  if b == 110 and sub(s, i, i + 3) == "null" then return M.null, i + 4 end
  if b == nil then fail("unexpected end") end
  return decode_number(s, i)
end

-- One JSON document (nothing but whitespace around it) -> value, or nil, why.
function M.decode(s)
  local ok, value, i = pcall(decode_value, s, 1, 0)
  if not ok then return nil, value end
  if skip_ws(s, i) <= #s then return nil, "data after the document" end
  return value
end

-- ---- bodies -> messages

-- The JSON messages of an SSE body: the `data:` lines of each event joined
-- with "\n" (WHATWG event-stream: lines end with CRLF, LF or CR; a blank
-- line dispatches; an event whose data is empty, like a priming event, is
-- not dispatched; an unterminated last event is discarded).
-- -> list of messages, or nil, failure key.
function M.sse_messages(body)
  local out, data = {}, nil
  local pos, len = 1, #body
  while pos <= len do
    local e = find(body, "[\r\n]", pos)
    if not e then break end
    local line = sub(body, pos, e - 1)
    pos = e + 1
    if byte(body, e) == 13 and byte(body, pos) == 10 then pos = pos + 1 end
    if line == "" then
      if data then
        local joined = concat(data, "\n")
        data = nil
        if joined ~= "" then
          local message = M.decode(joined)
          if message == nil then return nil, "bad_json" end
          out[#out + 1] = message
        end
      end
    elseif byte(line, 1) ~= 58 then -- ':' starts a comment
      local colon = find(line, ":", 1, true)
      local field, value = line, ""
      if colon then
        field, value = sub(line, 1, colon - 1), sub(line, colon + 1)
        if byte(value, 1) == 32 then value = sub(value, 2) end
      end
      if field == "data" then
        data = data or {}
        data[#data + 1] = value
      end
    end
  end
  return out
end

-- ---- one answer

-- A header's value, whatever the case of its name (HTTP names are
-- case-insensitive; wrk passes them as they came). The two usual spellings
-- are looked up directly; only a server using another one costs a scan.
local function header(headers, lower, usual)
  local value = headers[lower] or headers[usual]
  if value then return value end
  for name, v in pairs(headers) do
    if name:lower() == lower then return v end
  end
  return nil
end

-- Checks one answer against `outstanding` (id -> true for every request
-- sent and not yet answered; the answered id is removed).
-- `expect(result, id, session_id)` checks the result and returns nil or a
-- failure key; session_id (the Mcp-Session-Id header) is looked up only
-- with `expect_session`. -> nil when the answer is a success, else a
-- failure key.
function M.check(status, headers, body, outstanding, expect, expect_session)
  if status < 200 or status > 299 then return "http_status:" .. status end
  local content_type, session_id = header(headers, "content-type", "Content-Type"), nil
  if expect_session then
    session_id = header(headers, "mcp-session-id", "Mcp-Session-Id")
  end
  content_type = content_type and content_type:lower() or ""
  local messages, why
  if find(content_type, "text/event-stream", 1, true) then
    messages, why = M.sse_messages(body)
  elseif find(content_type, "application/json", 1, true) then
    local message = M.decode(body)
    if message == nil then return "bad_json" end
    messages = { message }
  else
    return "content_type"
  end
  if not messages then return why end
  local response
  for _, message in ipairs(messages) do
    if type(message) ~= "table" or message == M.null then return "not_an_object" end
    if message.method == nil then
      if response then return "several_responses" end
      response = message
    end
  end
  if not response then return "no_response" end
  if response.jsonrpc ~= "2.0" then return "not_jsonrpc_2.0" end
  local id = response.id
  if type(id) ~= "number" or not outstanding[id] then return "unknown_id" end
  outstanding[id] = nil
  local err = response.error
  if err ~= nil then
    return "jsonrpc_error:" .. tostring(type(err) == "table" and err.code or err)
  end
  local result = response.result
  if type(result) ~= "table" or result == M.null then return "no_result" end
  return expect(result, id, session_id)
end

-- ---- per-thread state and the wrk hooks

local IDS_PER_THREAD = 1e9
local MAX_RUN_ID = 90000 -- (90000 * 100 + 99) * 1e9 < 2^53

-- Thread-local: the Lua state of one wrk thread. `checked_*` are globals
-- so that done() can read them with thread:get().
checked_ok, checked_failed, checked_failures, checked_sample = 0, 0, {}, nil
local outstanding, id_base, counter = {}, nil, 0

-- The next request id (a number) and its decimal text.
function M.next_id()
  if not id_base then
    local run = tonumber(os.getenv("RUN_ID") or "0")
    local thread = checked_thread or 1
    if not run or run < 0 or run > MAX_RUN_ID or run % 1 ~= 0 then
      error("RUN_ID must be a whole number in 0.." .. MAX_RUN_ID)
    end
    if thread > 99 then error("at most 99 wrk threads") end
    id_base = (run * 100 + thread) * IDS_PER_THREAD
  end
  counter = counter + 1
  if counter >= IDS_PER_THREAD then error("request ids of this thread exhausted") end
  local id = id_base + counter
  outstanding[id] = true
  return id, format("%d", id)
end

-- The decimal text of an id, as next_id() gave it.
function M.id_text(id) return format("%d", id) end

-- Checks one answer of this thread (M.check against the thread's
-- outstanding ids). -> nil or a failure key.
function M.check_answer(status, headers, body, expect, expect_session)
  return M.check(status, headers, body, outstanding, expect, expect_session)
end

-- Counts an outcome: a success when `failure` is nil, else a failure under
-- that key (the first one's answer kept as the thread's sample).
function M.count(failure, status, body)
  if failure == nil then
    checked_ok = checked_ok + 1
    return
  end
  checked_failed = checked_failed + 1
  checked_failures[failure] = (checked_failures[failure] or 0) + 1
  if not checked_sample then
    checked_sample = failure .. " " .. status .. " " .. sub(body, 1, 400):gsub("[\r\n]", "\\n")
  end
end

-- A response() hook that checks with `expect` (see M.check) and counts.
function M.response_hook(expect, expect_session)
  return function(status, headers, body)
    M.count(M.check(status, headers, body, outstanding, expect, expect_session), status, body)
  end
end

-- A header's value by its lower-case name (see header above).
function M.header(headers, lower, usual)
  return header(headers, lower, usual)
end

-- Main state only: the threads, numbered from 1, for done().
local threads = {}

function M.setup(thread)
  threads[#threads + 1] = thread
  thread:set("checked_thread", #threads)
end

function M.done(summary, latency, requests)
  local ok, failed, failures, samples = 0, 0, {}, {}
  for i, thread in ipairs(threads) do
    local thread_ok, thread_failed = thread:get("checked_ok") or 0, thread:get("checked_failed") or 0
    ok, failed = ok + thread_ok, failed + thread_failed
    io.write(format("checked thread %d ok %d failed %d\n", i, thread_ok, thread_failed))
    for key, n in pairs(thread:get("checked_failures") or {}) do
      failures[key] = (failures[key] or 0) + n
    end
    local sample = thread:get("checked_sample")
    if sample then samples[#samples + 1] = sample end
  end
  local errors = summary.errors
  local socket_errors = errors.connect + errors.read + errors.write + errors.timeout
  local secs = summary.duration / 1e6
  io.write(format("checked ok %d failed %d socket_errors %d responses %d secs %.3f ok_per_sec %.1f\n",
    ok, failed, socket_errors, summary.requests, secs, secs > 0 and ok / secs or 0))
  for key, n in pairs(failures) do io.write(format("checked failure %s %d\n", key, n)) end
  for _, sample in ipairs(samples) do io.write("checked sample " .. sample .. "\n") end
end

-- The request line and headers of a POST to wrk's URL, up to and including
-- "Content-Length: "; the caller appends the length, a blank line and the
-- body. `extra`: more headers (name -> value). Call from init(): wrk sets
-- the Host header just before.
function M.post_head(extra)
  return M.head("POST", extra) .. "\r\nContent-Length: "
end

-- The request line and headers of a request to wrk's URL without a body,
-- ending with the last header line (no CRLF after it).
function M.head(method, extra)
  local lines = {
    format("%s %s HTTP/1.1", method, wrk.path),
    "Host: " .. wrk.headers["Host"],
    "Content-Type: application/json",
    "Accept: application/json, text/event-stream",
  }
  for name, value in pairs(extra or {}) do lines[#lines + 1] = name .. ": " .. value end
  return concat(lines, "\r\n")
end

return M
