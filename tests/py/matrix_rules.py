"""What every Python client check of this repository shares, without any SDK
import, so that scripts on different `mcp` releases (tests/py/.venv and the
agent frameworks' own virtualenvs, tests/py/frameworks/) use one copy: the
check helpers, and the wire rules of tests/js/client-matrix-lib.mjs (keep
the two in step).
"""

from __future__ import annotations

import os
from typing import Any

MODERN = "2026-07-28"
# The request methods whose Mcp-Name header names their target, and the params field it comes from.
MCP_NAME_SOURCE = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
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


def describe(message: Any) -> str:
    """One JSON-RPC message that came back, in a word (as describeMessage in client-matrix-lib.mjs)."""
    if isinstance(message, list):
        return ",".join(describe(m) for m in message)
    if not isinstance(message, dict):
        return "garbage"
    if "method" in message:
        return f"request:{message['method']}" if "id" in message else str(message["method"])
    if "error" in message:
        return f"error:{(message['error'] or {}).get('code')}"
    if "result" in message:
        return f"result:{(message['result'] or {}).get('resultType', 'complete')}"
    return "garbage"


def era_from_wire(wire: list[dict[str, Any]]) -> tuple[str, str]:
    """The era the exchanges show, as eraFromWire in client-matrix-lib.mjs."""
    init = next((w for w in wire if w["method"] == "POST" and w.get("rpc") == "initialize"), None)
    if init is not None:
        status = init.get("status")
        ok = status is not None and 200 <= status < 300
        after = next((w for w in wire[wire.index(init) + 1 :] if w.get("version")), None)
        detail = f"initialize answered {status if status is not None else init.get('error')}"
        detail += f", then protocol {after['version']}" if after else ""
        detail += ", with a Mcp-Session-Id" if init.get("gotSession") else ", no Mcp-Session-Id"
        return ("session" if ok else "unknown"), detail
    modern = next(
        (
            w
            for w in wire
            if w["method"] == "POST" and w.get("version") == MODERN and 200 <= (w.get("status") or 0) < 300
        ),
        None,
    )
    if modern is not None:
        probe = next((w for w in wire if w.get("rpc") == "server/discover"), None)
        how = (
            f"server/discover answered {probe.get('status')}"
            if probe
            else f"no server/discover, first request {modern.get('rpc')}"
        )
        return MODERN, f"no initialize; {how}"
    return "unknown", f"{len(wire)} exchange(s), no initialize and no 2026-07-28 request answered 2xx"


def modern_wire_violations(wire: list[dict[str, Any]]) -> list[str]:
    """The 2026-07-28 wire rules, as modernWireViolations in client-matrix-lib.mjs."""
    bad: list[str] = []
    for i, w in enumerate(wire):
        at = f"#{i + 1} {w['method']} {w.get('rpc') or ''}".strip()
        if w.get("sentSession"):
            bad.append(f"{at} sent Mcp-Session-Id")
        if w.get("gotSession"):
            bad.append(f"{at} received Mcp-Session-Id")
        if w["method"] in ("GET", "DELETE"):
            bad.append(f"{at}: no {w['method']} in 2026-07-28")
        if w["method"] != "POST":
            continue
        if w.get("version") != MODERN:
            bad.append(f"{at}: MCP-Protocol-Version {w.get('version')!r}")
        rpc = w.get("rpc")
        if not isinstance(rpc, str) or rpc == "response":
            bad.append(f"{at}: a JSON-RPC response or batch POSTed (no server-to-client requests in 2026-07-28)")
        elif w.get("notification"):
            if w.get("mcpMethod") not in (None, rpc):
                bad.append(f"{at}: Mcp-Method {w.get('mcpMethod')!r}")
            if w.get("status") != 202:
                bad.append(f"{at}: a notification answered {w.get('status')}, expected 202")
        elif w.get("mcpMethod") != rpc:
            bad.append(f"{at}: Mcp-Method {w.get('mcpMethod')!r}")
        if rpc in MCP_NAME_SOURCE and w.get("mcpName") != w.get("target"):
            bad.append(f"{at}: Mcp-Name {w.get('mcpName')!r}, expected {w.get('target')!r}")
    return bad
