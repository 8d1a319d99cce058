"""What the framework rows of the client matrix share: the recorded HTTP exchanges and the report.

The agent frameworks (pydantic_ai_matrix.py, openai_agents_matrix.py,
langchain_mcp_matrix.py) each run in a virtualenv of their own, with the `mcp`
release their framework pins: SDK v2 talks through `httpx2`, SDK v1 through
`httpx`. `recording_client` takes whichever module the framework's SDK uses
and returns an `AsyncClient` whose transport records every exchange in `wire`
(the entry fields of recordingFetch in tests/js/client-matrix-lib.mjs and of
RecordingTransport in tests/py/client_matrix.py; `era_from_wire` and
`modern_wire_violations` are those of client_matrix.py, keep them in step).
Each entry of a `tools/list` response also keeps the tool names of that page
and its `nextCursor`, so a script can compare what its framework handed the
model with every page the server sent.

`Report` prints `ok - <check>` / `not ok - <check>: <reason>`, the `era:`
line and `<label>: N passed, M failed`, the lines tests/client-matrix.sh reads.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

# The shared checks and wire rules (tests/py/matrix_rules.py), which import
# no SDK: each framework runs on an `mcp` release of its own.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from matrix_rules import (  # noqa: E402
    MCP_NAME_SOURCE,
    MODERN,
    STEP_TIMEOUT_S,
    CheckFailed,
    describe,
    era_from_wire,
    modern_wire_violations,
    require,
)

# The built-in tools every framework must hand its model (the node serves more).
BUILTIN_TOOLS = ["echo", "add", "long_running_operation"]


def note_message(entry: dict[str, Any], data: bytes) -> None:
    try:
        message = json.loads(data)
    except ValueError:
        entry["events"].append("garbage")
        return
    entry["events"].append(describe(message))
    result = message.get("result") if isinstance(message, dict) else None
    if entry.get("rpc") == "tools/list" and isinstance(result, dict) and isinstance(result.get("tools"), list):
        entry["tools"] = [t.get("name") for t in result["tools"] if isinstance(t, dict)]
        entry["nextCursor"] = result.get("nextCursor")


def recording_client(httpx: Any, wire: list[dict[str, Any]], **kwargs: Any) -> Any:
    """An `httpx.AsyncClient` (of the module passed: `httpx2` or `httpx`) recording into `wire`.

    trust_env=False: loopback traffic never goes through a proxy from the environment.
    The other keyword arguments (headers, timeout, auth, follow_redirects) are the client's.
    """

    class ObservedStream(httpx.AsyncByteStream):
        """Passes a response body through unchanged, noting each JSON-RPC message in `entry`."""

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
                    note_message(self.entry, data)

        async def __aiter__(self) -> AsyncIterator[bytes]:
            async for chunk in self.inner:
                self.buffer += chunk
                if self.entry["type"] == "sse":
                    self._sse_blocks(False)
                yield chunk
            if self.entry["type"] == "sse":
                self._sse_blocks(True)
            elif self.entry["type"] == "json" and self.buffer:
                note_message(self.entry, self.buffer)

        async def aclose(self) -> None:
            await self.inner.aclose()

    class RecordingTransport(httpx.AsyncBaseTransport):
        def __init__(self) -> None:
            self.inner = httpx.AsyncHTTPTransport(trust_env=False)

        async def handle_async_request(self, request: Any) -> Any:
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
                    params = body.get("params") or {}
                    field = MCP_NAME_SOURCE.get(body.get("method", ""))
                    if field:
                        entry["target"] = params.get(field)
                    if body.get("method") == "tools/list" and "cursor" in params:
                        entry["cursor"] = params["cursor"]
            for key, header in (
                ("version", "mcp-protocol-version"),
                ("mcpMethod", "mcp-method"),
                ("mcpName", "mcp-name"),
                ("sentSession", "mcp-session-id"),
            ):
                if (value := request.headers.get(header)) is not None:
                    entry[key] = value
            wire.append(entry)
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
            return httpx.Response(
                status_code=response.status_code,
                headers=response.headers,
                stream=ObservedStream(response.stream, entry),
                extensions=response.extensions,
            )

        async def aclose(self) -> None:
            await self.inner.aclose()

    kwargs.pop("transport", None)
    return httpx.AsyncClient(trust_env=False, transport=RecordingTransport(), **kwargs)


def brief(entry: dict[str, Any]) -> str:
    e = dict(entry)
    events = e.pop("events", None)
    if events:
        e["events"] = events if len(events) <= 8 else [*events[:7], f"+{len(events) - 7}"]
    if e.get("tools"):
        e["tools"] = len(e["tools"])
    return json.dumps(e)


def session_wire_violations(wire: list[dict[str, Any]]) -> tuple[list[str], str]:
    """The session-era rules: each `initialize` answered 2xx with a Mcp-Session-Id, and every later
    exchange, up to the next `initialize`, sends that id and the negotiated MCP-Protocol-Version.
    Returns the violations and a summary (sessions, DELETEs and their statuses)."""
    bad: list[str] = []
    session: str | None = None
    version: str | None = None
    sessions = 0
    deletes: list[str] = []
    for i, w in enumerate(wire):
        at = f"#{i + 1} {w['method']} {w.get('rpc') or ''}".strip()
        if w.get("rpc") == "initialize":
            sessions += 1
            session = w.get("gotSession")
            version = None
            if not (200 <= (w.get("status") or 0) < 300) or not session:
                bad.append(f"{at}: answered {w.get('status')}, session id {session!r}")
            continue
        if session is None:
            bad.append(f"{at}: before any initialize")
            continue
        if w.get("sentSession") != session:
            bad.append(f"{at}: Mcp-Session-Id {w.get('sentSession')!r}, expected {session!r}")
        if version is None:
            version = w.get("version")
        if not w.get("version") or w.get("version") != version or w.get("version") == MODERN:
            bad.append(f"{at}: MCP-Protocol-Version {w.get('version')!r}")
        if w["method"] == "DELETE":
            deletes.append(str(w.get("status")))
    summary = f"{sessions} session(s), protocol {version}, " + (
        f"{len(deletes)} DELETE (answered {', '.join(deletes)})" if deletes else "no DELETE"
    )
    return bad, summary


def tool_pages(wire: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tools/list exchanges answered with a page of tools, in order."""
    return [w for w in wire if w.get("rpc") == "tools/list" and "tools" in w]


def check_tools_handed(names: list[str], wire: list[dict[str, Any]]) -> str:
    """The tool names a framework handed its model against the tools/list pages on the wire: the
    built-ins present, no name twice, and exactly the union of the last complete walk of the pages
    (from a tools/list without a cursor to a page without `nextCursor`). A walk that stopped early
    (the SDK v1 reads only the first page to look up a tool's output schema) is named in the note."""
    pages = tool_pages(wire)
    require(bool(pages), "no tools/list answered with tools on the wire")
    walks: list[list[dict[str, Any]]] = []
    for page in pages:
        if "cursor" not in page or not walks:
            walks.append([])
        walks[-1].append(page)
    complete = [w for w in walks if w[-1].get("nextCursor") is None]
    require(bool(complete), f"none of the {len(walks)} tools/list walk(s) reached a page without nextCursor")
    walk = complete[-1]
    served = [name for p in walk for name in p["tools"]]
    require(len(walk) >= 2, f"the tools came in {len(walk)} page(s); the node runs with --page-size 2")
    missing = [t for t in BUILTIN_TOOLS if t not in names]
    require(not missing, f"the model was not handed {missing}; it got {names}")
    dupes = sorted({n for n in names if names.count(n) > 1})
    require(not dupes, f"handed twice: {dupes}")
    require(
        sorted(names) == sorted(served),
        f"handed {sorted(names)}, the {len(walk)} pages served {sorted(served)}",
    )
    note = f"{len(names)} tools from {len(walk)} pages of tools/list"
    partial = [len(w) for w in walks if w[-1].get("nextCursor") is not None]
    if partial:
        note += f"; {len(partial)} other walk(s) stopped early, after {', '.join(map(str, partial))} page(s)"
    return note


def calls_answered(wire: list[dict[str, Any]], tool: str) -> list[dict[str, Any]]:
    return [w for w in wire if w.get("rpc") == "tools/call" and w.get("target") == tool]


class Report:
    """The checks of one run: each prints one line, and every check runs even after a failure."""

    def __init__(self, label: str, wire: list[dict[str, Any]]) -> None:
        self.label = label
        self.wire = wire
        self.passed = 0
        self.failed = 0

    def fail(self, name: str, reason: str) -> None:
        self.failed += 1
        print(f"not ok - {name}: {reason}")
        print(f"  last HTTP exchanges: {' '.join(brief(w) for w in self.wire[-8:])}", flush=True)

    async def check(self, name: str, fn: Callable[[], Awaitable[str | None] | str | None]) -> bool:
        try:
            note = fn()
            if asyncio.iscoroutine(note):
                note = await asyncio.wait_for(note, STEP_TIMEOUT_S)
        except TimeoutError:
            self.fail(name, f"timed out after {STEP_TIMEOUT_S} s")
            return False
        except Exception as err:  # noqa: BLE001 - every failure is reported, then the next check runs
            self.fail(name, str(err) if isinstance(err, CheckFailed) else repr(err))
            return False
        self.passed += 1
        print(f"ok - {name}" + (f" ({note})" if note else ""), flush=True)
        return True

    async def wire_checks(self, expect_modern: bool) -> None:
        """The era line, then the era's wire rules over every exchange of the run."""
        era, detail = era_from_wire(self.wire)
        print(f"era: {era} ({detail})", flush=True)
        if os.environ.get("MATRIX_VERBOSE") == "1":
            for i, w in enumerate(self.wire):
                print(f"  #{i + 1} {brief(w)}")

        def modern() -> str:
            require(era == MODERN, f"the wire shows era {era} ({detail})")
            bad = modern_wire_violations(self.wire)
            require(not bad, f"{len(bad)} violation(s): {'; '.join(bad[:6])}")
            posts = [w for w in self.wire if w["method"] == "POST"]
            return f"{len(posts)} POSTs, {sum(1 for w in posts if 'mcpName' in w)} with Mcp-Name"

        def session() -> str:
            require(era == "session", f"the wire shows era {era} ({detail})")
            bad, summary = session_wire_violations(self.wire)
            require(not bad, f"{len(bad)} violation(s): {'; '.join(bad[:6])}")
            return summary

        if expect_modern:
            await self.check(
                "2026-07-28 on the wire: no session id, no GET, no DELETE, MCP-Protocol-Version on every POST,"
                " Mcp-Method (and Mcp-Name) on every request",
                modern,
            )
        else:
            await self.check(
                "session era on the wire: initialize gave a Mcp-Session-Id, every later request sent it"
                " and the negotiated MCP-Protocol-Version",
                session,
            )

    def summary(self) -> int:
        print(f"{self.label}: {self.passed} passed, {self.failed} failed", flush=True)
        return 1 if self.failed else 0
