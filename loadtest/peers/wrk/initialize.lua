-- wrk script for loadtest/peers/compare.sh: every request is an initialize
-- without a session, so each one creates a session the server keeps; the
-- script therefore runs it briefly against a freshly started server.
-- No notifications/initialized follows: the measure is session creation.
-- A fixed request set through wrk's globals keeps wrk on its fast path.
wrk.method = "POST"
wrk.body = '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"wrk","version":"0"}}}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
