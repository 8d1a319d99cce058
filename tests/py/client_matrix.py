"""Client matrix, Python SDK (`mcp` on PyPI): `mcp.Client` over Streamable HTTP.

    tests/py/.venv/bin/python tests/py/client_matrix.py URL [--mode auto|legacy|2026-07-28]

`--mode` is the Client's `mode=`:
  auto (the SDK's default, label python-sdk-auto): probes `server/discover` at
    2026-07-28 and falls back to the `initialize` handshake unless the answer
    is evidence of a 2026-07-28 server (`mcp/client/_probe.py`, `negotiate_auto`);
  2026-07-28 (label python-sdk-2026): adopts 2026-07-28 without a probe (no
    server/discover; the SDK synthesizes the discover result);
  legacy (label python-sdk-legacy): `initialize` only, the session era.

The checks are the ones of tests/js/client-matrix-lib.mjs, era by era; keep
the two in step. The era comes from what the SDK negotiated and is checked
against the HTTP exchanges recorded by a wrapping httpx2 transport (method,
headers, status, and each JSON-RPC message of the response body). Prints
`ok - <check>` / `not ok - <check>: <reason>`, `era: <session|2026-07-28> (...)`
and `<label>: N passed, M failed`; exits 1 if any check failed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from matrix_rules import (
    MAX_PAGES,
    MCP_NAME_SOURCE,
    MODERN,
    STEP_TIMEOUT_S,
    CheckFailed,
    describe,
    era_from_wire,
    modern_wire_violations,
    require,
    text_of,
)

LABELS = {"auto": "python-sdk-auto", MODERN: "python-sdk-2026", "legacy": "python-sdk-legacy"}
# (list method, Client method, result field, item key, built-ins that must be there)
LISTS = [
    ("tools/list", "list_tools", "tools", "name", ["echo", "add", "long_running_operation"]),
    ("resources/list", "list_resources", "resources", "uri", ["test://static-text"]),
    (
        "resources/templates/list",
        "list_resource_templates",
        "resource_templates",
        "uri_template",
        ["test://template/{id}/data"],
    ),
    ("prompts/list", "list_prompts", "prompts", "name", ["test_simple_prompt"]),
]
# (handler, method the server asks, built-in tool, the tool's text with the handler's answer)
ASKS = [
    ("elicitation", "elicitation/create", "test_input_required_result_elicitation", "Hello, Matrix!"),
    ("sampling", "sampling/createMessage", "test_input_required_result_sampling", "The model said: Paris"),
    ("roots", "roots/list", "test_input_required_result_list_roots", "Roots: file:///matrix"),
]


class ObservedStream(httpx2.AsyncByteStream):
    """Passes a response body through unchanged, noting each JSON-RPC message in `entry["events"]`."""

    def __init__(self, inner: Any, entry: dict[str, Any]) -> None:
        self.inner = inner
        self.entry = entry
        self.buffer = b""

    def _sse_blocks(self, final: bool) -> None:
        text = self.buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        blocks = text.split(b"\n\n")
        self.buffer = b"" if final else blocks.pop()
        for block in blocks:
            data = b"\n".join(
                line[5:].removeprefix(b" ") for line in block.split(b"\n") if line.startswith(b"data:")
            )
            if data:
                try:
                    self.entry["events"].append(describe(json.loads(data)))
                except ValueError:
                    self.entry["events"].append("garbage")

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.inner:
            self.buffer += chunk
            if self.entry["type"] == "sse":
                self._sse_blocks(False)
            yield chunk
        if self.entry["type"] == "sse":
            self._sse_blocks(True)
        elif self.entry["type"] == "json" and self.buffer:
            try:
                self.entry["events"].append(describe(json.loads(self.buffer)))
            except ValueError:
                self.entry["events"].append("garbage")

    async def aclose(self) -> None:
        await self.inner.aclose()


class RecordingTransport(httpx2.AsyncBaseTransport):
    """The default transport, recording every exchange into `wire` (the entry fields of recordingFetch)."""

    def __init__(self, wire: list[dict[str, Any]]) -> None:
        self.wire = wire
        self.inner = httpx2.AsyncHTTPTransport(trust_env=False)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        entry: dict[str, Any] = {"method": request.method}
        if request.method == "POST":
            try:
                body = json.loads(await request.aread())
            except ValueError:
                body = None
            if isinstance(body, list):
                entry["rpc"] = [m.get("method", "response") for m in body]
            elif isinstance(body, dict):
                entry["rpc"] = body.get("method", "response")
                if "method" in body and "id" not in body:
                    entry["notification"] = True
                field = MCP_NAME_SOURCE.get(body.get("method", ""))
                if field:
                    entry["target"] = (body.get("params") or {}).get(field)
        for key, header in (
            ("version", "mcp-protocol-version"),
            ("mcpMethod", "mcp-method"),
            ("mcpName", "mcp-name"),
            ("sentSession", "mcp-session-id"),
        ):
            if (value := request.headers.get(header)) is not None:
                entry[key] = value
        self.wire.append(entry)
        try:
            response = await self.inner.handle_async_request(request)
        except Exception as err:
            entry["error"] = repr(err)
            raise
        entry["status"] = response.status_code
        if session := response.headers.get("mcp-session-id"):
            entry["gotSession"] = session
        content_type = response.headers.get("content-type", "").partition(";")[0].strip().lower()
        kinds = {"text/event-stream": "sse", "application/json": "json"}
        entry["type"] = kinds.get(content_type, content_type or "none")
        entry["events"] = []
        return httpx2.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=ObservedStream(response.stream, entry),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


def brief(entry: dict[str, Any]) -> str:
    e = dict(entry)
    events = e.pop("events", None)
    if events:
        e["events"] = events if len(events) <= 8 else [*events[:7], f"+{len(events) - 7}"]
    return json.dumps(e)


class Matrix:
    def __init__(self, url: str, mode: str) -> None:
        self.url = url
        self.mode = mode
        self.label = LABELS[mode]
        self.passed = 0
        self.failed = 0
        # Every HTTP exchange (see RecordingTransport).
        self.wire: list[dict[str, Any]] = []
        self.session_id: str | None = None
        self.protocol_version = ""
        self.modern = False
        # How often each handler answered the server.
        self.asked = {"elicitation": 0, "sampling": 0, "roots": 0}
        # Index into `wire` where leaving the Client began (its DELETE comes after).
        self.delete_mark = 0

    async def on_elicitation(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.asked["elicitation"] += 1
        return types.ElicitResult(action="accept", content={"name": "Matrix"})

    async def on_sampling(self, context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        self.asked["sampling"] += 1
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="Paris"),
            model="matrix-model",
            stop_reason="endTurn",
        )

    async def on_roots(self, context: Any) -> types.ListRootsResult:
        self.asked["roots"] += 1
        return types.ListRootsResult(roots=[types.Root(uri="file:///matrix", name="matrix")])

    def http_client(self) -> httpx2.AsyncClient:
        # The SDK's own timeouts, plus a transport that records the wire.
        # trust_env=False: loopback traffic never goes through a proxy from the environment.
        return httpx2.AsyncClient(
            timeout=create_mcp_http_client().timeout, trust_env=False, transport=RecordingTransport(self.wire)
        )

    def fail(self, name: str, reason: str) -> None:
        self.failed += 1
        print(f"not ok - {name}: {reason}")
        print(f"  last HTTP exchanges: {' '.join(brief(w) for w in self.wire[-8:])}", flush=True)

    async def check(self, name: str, fn: Callable[[], Awaitable[str | None]]) -> bool:
        try:
            with anyio.fail_after(STEP_TIMEOUT_S):
                note = await fn()
        except TimeoutError:
            self.fail(name, f"timed out after {STEP_TIMEOUT_S} s")
            return False
        except Exception as err:  # noqa: BLE001 - every failure is reported, then the next check runs
            self.fail(name, repr(err))
            return False
        self.passed += 1
        print(f"ok - {name}" + (f" ({note})" if note else ""), flush=True)
        return True

    async def run(self) -> int:
        async with self.http_client() as http:
            entered = False
            try:
                async with Client(
                    streamable_http_client(self.url, http_client=http),
                    mode=self.mode,
                    elicitation_callback=self.on_elicitation,
                    sampling_callback=self.on_sampling,
                    list_roots_callback=self.on_roots,
                ) as client:
                    entered = True
                    if await self.check("connect", lambda: self.connected(client)):
                        await self.common_checks(client)
                    # Leaving the Client ends a session: streamable_http_client's
                    # terminate_on_close (default True) sends DELETE; in 2026-07-28
                    # there is no session and nothing to send.
                    self.delete_mark = len(self.wire)
            except Exception as err:  # noqa: BLE001 - the connect or the exit failed
                self.fail("leaving the client" if entered else "connect", repr(err))
            else:
                if self.modern:
                    await anyio.sleep(0.2)  # whatever the client sends while closing
                    await self.check(
                        "2026-07-28 on the wire: no session id, no GET, no DELETE, MCP-Protocol-Version on every"
                        " POST, Mcp-Method (and Mcp-Name) on every request",
                        self.modern_wire,
                    )
                elif entered and self.passed > 0:
                    await self.check(
                        "end the session: DELETE 2xx, then the session id gets 404", lambda: self.after_exit(http)
                    )
        if os.environ.get("MATRIX_VERBOSE"):
            for w in self.wire:
                print(f"  wire: {json.dumps(w)}")
        era, detail = era_from_wire(self.wire)
        print(f"era: {era} ({detail})")
        print(f"{self.label}: {self.passed} passed, {self.failed} failed")
        return 0 if self.failed == 0 else 1

    async def connected(self, client: Client) -> str:
        self.protocol_version = client.protocol_version
        self.modern = self.protocol_version == MODERN
        probe = next((w for w in self.wire if w.get("rpc") == "server/discover"), None)
        probed = f"; probe server/discover answered {probe.get('status')}" if probe else "; no probe"
        if self.modern:
            require(self.session_id_seen() is None, f"2026-07-28 but a session id {self.session_id_seen()!r}")
            return f"protocol {self.protocol_version}, no session, mode {self.mode}{probed}"
        self.session_id = self.session_id_seen()
        require(self.session_id is not None, "no Mcp-Session-Id after connect")
        return f"protocol {self.protocol_version}, session {self.session_id}, mode {self.mode}{probed}"

    def session_id_seen(self) -> str | None:
        return next((w["gotSession"] for w in self.wire if w.get("gotSession")), None)

    async def common_checks(self, client: Client) -> None:
        for list_method, attr, field, key, expected in LISTS:
            await self.check(
                f"{list_method}: every page, no duplicates, built-ins present",
                lambda a=attr, f=field, k=key, e=expected: self.walk(client, a, f, k, e),
            )
        await self.check(
            'tools/list with a foreign cursor ("" and "not-a-cursor"): -32602', lambda: self.foreign_cursor(client)
        )
        await self.check("tools/call echo", lambda: self.echo(client))
        await self.check(
            "tools/call add {a:2, b:3}: structuredContent {sum:5}, as its outputSchema says", lambda: self.add(client)
        )
        await self.check("prompts/get test_simple_prompt", lambda: self.prompt(client))
        await self.check("resources/read test://static-text", lambda: self.read(client))
        on_stream = ", on the call's own response stream" if self.modern else ""
        await self.check(
            "tools/call long_running_operation {duration_ms:500, steps:5}: 5 increasing progress before the result"
            + on_stream,
            lambda: self.progress(client),
        )
        for kind, method, tool, text in ASKS:
            how = (
                f"input_required, the {kind} handler answers, the retry completes"
                if self.modern
                else f"the server asks {method} on the call's stream, the handler answers"
            )
            await self.check(
                f"tools/call {tool}: {how}",
                lambda k=kind, m=method, t=tool, x=text: self.ask(client, k, m, t, x),
            )
        if self.modern:
            await self.check(
                "subscriptions/listen {toolsListChanged}, then test_trigger_tool_change:"
                " notifications/tools/list_changed on the listen stream",
                lambda: self.listen(client),
            )

    async def walk(self, client: Client, attr: str, field: str, key: str, expected: list[str]) -> str:
        items: list[Any] = []
        page_sizes: list[int] = []
        cursor: str | None = None
        while True:
            require(len(page_sizes) < MAX_PAGES, f"more than {MAX_PAGES} pages")
            page = await getattr(client, attr)(cursor=cursor)
            page_items = getattr(page, field)
            items.extend(page_items)
            page_sizes.append(len(page_items))
            require(page.next_cursor is None or page.next_cursor != cursor, f"nextCursor {cursor!r} repeats")
            cursor = page.next_cursor
            if cursor is None:
                break
        keys = [str(getattr(item, key)) for item in items]
        dupes = sorted({k for k in keys if keys.count(k) > 1})
        require(not dupes, f"duplicates across pages: {dupes}")
        missing = [k for k in expected if k not in keys]
        require(not missing, f"missing {missing} from {keys}")
        return f"{len(keys)} over {len(page_sizes)} page(s) {page_sizes}"

    async def foreign_cursor(self, client: Client) -> str:
        codes: list[Any] = []
        for cursor in ("", "not-a-cursor"):
            try:
                await client.list_tools(cursor=cursor)
                codes.append("resolved")
            except MCPError as err:
                codes.append(err.code)
        require(codes == [-32602, -32602], f"expected -32602 for both, got {codes}")
        return f"codes {codes}"

    async def echo(self, client: Client) -> str:
        message = f"matrix {self.label}"
        result = await client.call_tool("echo", {"message": message})
        text = text_of(result)
        require(text == f"Echo: {message}", f"text {text!r}, expected {'Echo: ' + message!r}")
        require(not result.is_error, "isError is true")
        # A text-only tool: no structuredContent, which clients would prefer to the text.
        require(result.structured_content is None, f"structuredContent {result.structured_content!r} on a text-only tool")
        return repr(text)

    async def add(self, client: Client) -> str:
        result = await client.call_tool("add", {"a": 2, "b": 3})
        require(not result.is_error, f"isError is true: {result!r}")
        require(result.structured_content == {"sum": 5}, f"structuredContent {result.structured_content!r}")
        return repr(result.structured_content)

    async def prompt(self, client: Client) -> str:
        result = await client.get_prompt("test_simple_prompt", {})
        require(len(result.messages) > 0, f"no messages in {result!r}")
        return f"{len(result.messages)} message(s)"

    async def read(self, client: Client) -> str:
        result = await client.read_resource("test://static-text", cache_mode="bypass")
        text = getattr(result.contents[0], "text", None) if result.contents else None
        require(isinstance(text, str) and len(text) > 0, f"no text content in {result!r}")
        return f"{len(text)} chars"

    def calls_since(self, mark: int) -> list[dict[str, Any]]:
        return [w for w in self.wire[mark:] if w.get("rpc") == "tools/call"]

    async def progress(self, client: Client) -> str:
        seen: list[float] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append(progress)

        mark = len(self.wire)
        result = await client.call_tool(
            "long_running_operation", {"duration_ms": 500, "steps": 5}, progress_callback=on_progress
        )
        before_result = len(seen)
        await anyio.sleep(0.3)  # a notification sent after the result would show up here
        require(before_result == 5, f"{before_result} progress notifications before the result, expected 5: {seen}")
        require(len(seen) == 5, f"{len(seen) - before_result} progress notification(s) after the result: {seen}")
        require(all(b > a for a, b in zip(seen, seen[1:])), f"progress not strictly increasing: {seen}")
        require(not result.is_error and text_of(result), f"unexpected result {result!r}")
        if not self.modern:
            return f"progress {seen}"
        calls = self.calls_since(mark)
        require(len(calls) == 1, f"{len(calls)} tools/call POSTs, expected 1")
        events = calls[0]["events"]
        count = events.count("notifications/progress")
        require(calls[0]["type"] == "sse", f"the call was answered {calls[0]['type']}, not as an SSE stream")
        require(count == 5, f"the call's own stream carried {count} progress notification(s): {events}")
        require(events[-1:] == ["result:complete"], f"the call's stream did not end with its result: {events}")
        return f"progress {seen}, all 5 on the tools/call response stream"

    async def ask(self, client: Client, kind: str, method: str, tool: str, expected: str) -> str:
        before = self.asked[kind]
        mark = len(self.wire)
        result = await client.call_tool(tool, {})
        text = text_of(result)
        calls = self.calls_since(mark)
        rounds = [
            "+".join(e for e in c["events"] if e.startswith(("result:", "error:", "request:")))
            or f"HTTP {c.get('status')}"
            for c in calls
        ]
        require(text == expected, f"text {text!r}, expected {expected!r}; rounds {rounds}")
        ran = self.asked[kind] - before
        require(ran == 1, f"the {kind} handler ran {ran} time(s)")
        events = [e for c in calls for e in c["events"]]
        if not self.modern:
            asked = events.count(f"request:{method}")
            require(asked == 1, f"{asked} {method} request(s) on the call's stream: {rounds}")
            return repr(text)
        require(len(calls) == 2, f"{len(calls)} tools/call POSTs, expected 2 (the call, then the retry): {rounds}")
        require(
            rounds[0] == "result:input_required", f"the first round came back {rounds[0]!r}, expected input_required"
        )
        require(rounds[1] == "result:complete", f"the retry came back {rounds[1]!r}, expected a complete result")
        requests = [e for e in events if e.startswith("request:")]
        require(not requests, f"server-to-client requests in 2026-07-28: {requests}")
        return f"{text!r}; rounds {rounds}"

    async def listen(self, client: Client) -> str:
        mark = len(self.wire)
        got: list[str] = []
        async with client.listen(tools_list_changed=True) as sub:
            result = await client.call_tool("test_trigger_tool_change", {})
            require(not result.is_error, f"test_trigger_tool_change failed: {result!r}")
            with anyio.fail_after(5):
                async for event in sub:
                    got.append(type(event).__name__)
                    if type(event).__name__ == "ToolsListChanged":
                        break
        require("ToolsListChanged" in got, f"events {got}")
        listen = next((w for w in self.wire[mark:] if w.get("rpc") == "subscriptions/listen"), None)
        require(listen is not None, "no subscriptions/listen POST")
        assert listen is not None
        require(listen["type"] == "sse", f"subscriptions/listen answered {listen.get('status')} {listen['type']}")
        events = listen["events"]
        require("notifications/tools/list_changed" in events, f"the listen stream carried {events}")
        return f"events {got}; listen stream {events}"

    async def modern_wire(self) -> str:
        era, detail = era_from_wire(self.wire)
        require(era == MODERN, f"the wire shows era {era} ({detail}), the SDK says {self.protocol_version}")
        bad = modern_wire_violations(self.wire)
        require(not bad, f"{len(bad)} violation(s): {'; '.join(bad[:6])}")
        posts = [w for w in self.wire if w["method"] == "POST"]
        named = sum(1 for w in posts if "mcpName" in w)
        notes = [
            f"{w['rpc']}{'' if 'mcpMethod' in w else ' without Mcp-Method'} {w.get('status')}"
            for w in posts
            if w.get("notification")
        ]
        return f"{len(posts)} POSTs, {named} with Mcp-Name" + (f"; notifications: {', '.join(notes)}" if notes else "")

    async def after_exit(self, http: httpx2.AsyncClient) -> str:
        deletes = [w for w in self.wire[self.delete_mark :] if w["method"] == "DELETE"]
        require(bool(deletes), "leaving the Client sent no DELETE")
        status = deletes[0].get("status")
        require(status is not None and 200 <= status < 300, f"DELETE answered {status}")
        response = await http.post(
            self.url,
            headers={
                "Mcp-Session-Id": self.session_id or "",
                "MCP-Protocol-Version": self.protocol_version,
                "Accept": "application/json, text/event-stream",
                "Content-Type": "application/json",
            },
            content=json.dumps({"jsonrpc": "2.0", "id": "after-delete", "method": "ping"}),
        )
        await response.aread()
        require(response.status_code == 404, f"ping with the ended session id answered {response.status_code}")
        era, detail = era_from_wire(self.wire)
        require(era == "session", f"the wire shows era {era} ({detail})")
        return f"DELETE {status}, then {response.status_code}"


def main() -> int:
    parser = argparse.ArgumentParser(description="The client matrix's Python SDK client.")
    parser.add_argument("url", help="http://127.0.0.1:PORT/mcp")
    parser.add_argument("--mode", choices=sorted(LABELS), default="auto", help="the Client's mode= (default: auto)")
    args = parser.parse_args()
    return anyio.run(Matrix(args.url, args.mode).run)


if __name__ == "__main__":
    sys.exit(main())
