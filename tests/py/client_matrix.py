"""Client matrix, Python SDK (`mcp` on PyPI): `mcp.Client` over Streamable HTTP.

    tests/py/.venv/bin/python tests/py/client_matrix.py http://127.0.0.1:PORT/mcp

The client runs in its default negotiation mode (`mode="auto"`): it first
probes `server/discover` at 2026-07-28 and falls back to the `initialize`
handshake unless the answer is evidence of a 2026-07-28 server
(`mcp/client/_probe.py`, `negotiate_auto`). The checks are the ones of
tests/js/client-matrix-lib.mjs; keep the two in step. Prints `ok - <check>` /
`not ok - <check>: <reason>` and `python-sdk: N passed, M failed`; exits 1 if
any check failed.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

LABEL = "python-sdk"
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
# A list that never ends is a failure, not a hang.
MAX_PAGES = 100
STEP_TIMEOUT_S = float(os.environ.get("MATRIX_STEP_TIMEOUT_MS", "20000")) / 1000


class CheckFailed(Exception):
    pass


def require(cond: bool, message: str) -> None:
    if not cond:
        raise CheckFailed(message)


def text_of(result: Any) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", None) == "text")


class Matrix:
    def __init__(self, url: str) -> None:
        self.url = url
        self.passed = 0
        self.failed = 0
        # Every HTTP exchange: method, JSON-RPC method, status (filled by the hooks).
        self.wire: list[dict[str, Any]] = []
        self.session_id: str | None = None
        self.protocol_version = ""
        # Index into `wire` where leaving the Client began (its DELETE comes after).
        self.delete_mark = 0

    async def _on_request(self, request: httpx2.Request) -> None:
        rpc = None
        if request.method == "POST":
            try:
                rpc = json.loads(request.content).get("method", "response")
            except (ValueError, AttributeError):
                rpc = None
        request.extensions["matrix_entry"] = entry = {"method": request.method, "rpc": rpc}
        if version := request.headers.get("mcp-protocol-version"):
            entry["version"] = version
        self.wire.append(entry)

    async def _on_response(self, response: httpx2.Response) -> None:
        entry = response.request.extensions.get("matrix_entry")
        if entry is not None:
            entry["status"] = response.status_code
        if session_id := response.headers.get("mcp-session-id"):
            self.session_id = session_id

    def http_client(self) -> httpx2.AsyncClient:
        # The SDK's own client (its timeouts), plus hooks that record the wire.
        # trust_env=False: loopback traffic never goes through a proxy from the environment.
        client = create_mcp_http_client()
        return httpx2.AsyncClient(
            timeout=client.timeout,
            trust_env=False,
            event_hooks={"request": [self._on_request], "response": [self._on_response]},
        )

    def fail(self, name: str, reason: str) -> None:
        self.failed += 1
        print(f"not ok - {name}: {reason}")
        print(f"  last HTTP exchanges: {' '.join(json.dumps(w) for w in self.wire[-8:])}", flush=True)

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
                async with Client(streamable_http_client(self.url, http_client=http)) as client:
                    entered = True
                    if await self.check("connect", lambda: self.connected(client)):
                        await self.session_checks(client)
                    # Leaving the Client ends the session: streamable_http_client's
                    # terminate_on_close (default True) sends DELETE.
                    self.delete_mark = len(self.wire)
            except Exception as err:  # noqa: BLE001 - the connect or the exit failed
                self.fail("leaving the client" if entered else "connect", repr(err))
            else:
                await self.check(
                    "end the session: DELETE 2xx, then the session id gets 404", lambda: self.after_exit(http)
                )
        print(f"{LABEL}: {self.passed} passed, {self.failed} failed")
        return 0 if self.failed == 0 else 1

    async def connected(self, client: Client) -> str:
        require(self.session_id is not None, "no Mcp-Session-Id after connect")
        self.protocol_version = client.protocol_version
        probe = next((w for w in self.wire if w.get("rpc") == "server/discover"), None)
        probed = f"; probe server/discover answered {probe.get('status')}" if probe else ""
        return f"protocol {client.protocol_version}, session {self.session_id}, negotiation default (auto){probed}"

    async def session_checks(self, client: Client) -> None:
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
            "tools/call long_running_operation {duration_ms:500, steps:5}: 5 increasing progress before the result",
            lambda: self.progress(client),
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
        message = f"matrix {LABEL}"
        result = await client.call_tool("echo", {"message": message})
        text = text_of(result)
        require(text == f"Echo: {message}", f"text {text!r}, expected {'Echo: ' + message!r}")
        require(not result.is_error, "isError is true")
        return repr(text)

    async def progress(self, client: Client) -> str:
        seen: list[float] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append(progress)

        result = await client.call_tool(
            "long_running_operation", {"duration_ms": 500, "steps": 5}, progress_callback=on_progress
        )
        before_result = len(seen)
        await anyio.sleep(0.3)  # a notification sent after the result would show up here
        require(before_result == 5, f"{before_result} progress notifications before the result, expected 5: {seen}")
        require(len(seen) == 5, f"{len(seen) - before_result} progress notification(s) after the result: {seen}")
        require(all(b > a for a, b in zip(seen, seen[1:])), f"progress not strictly increasing: {seen}")
        require(not result.is_error and text_of(result), f"unexpected result {result!r}")
        return f"progress {seen}"

    async def after_exit(self, http: httpx2.AsyncClient) -> str:
        deletes = [w for w in self.wire[self.delete_mark :] if w["method"] == "DELETE"]
        require(deletes, "leaving the Client sent no DELETE")
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
        require(response.status_code == 404, f"ping with the ended session id answered {response.status_code}")
        return f"DELETE {status}, then {response.status_code}"


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: client_matrix.py http://127.0.0.1:PORT/mcp", file=sys.stderr)
        return 2
    return anyio.run(Matrix(sys.argv[1]).run)


if __name__ == "__main__":
    sys.exit(main())
