"""A Python SDK server (tests/py/hosted_server.py) hosted by a node
(`[[upstreams]]`) and run directly, driven by the Python SDK client
(`mcp.Client`): the same tools, results, resource and prompt; progress and
an elicitation through the relay. In the session era (`--era session`, the
default: `mode="legacy"`, one child per session), or in 2026-07-28
(`--era 2026-07-28`: `mode="auto"`, which settles on 2026-07-28 through the
node's `server/discover`; requests run on pooled children, the elicitation
is an `input_required` round).

    tests/py/.venv/bin/python tests/py/relay_client.py URL [--era session|2026-07-28]

URL is the endpoint of a node hosting hosted_server.py. Prints `ok - <check>`
/ `not ok - <check>: <reason>` and `N passed, M failed`; exits 1 if any failed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters

STEP_TIMEOUT_S = 30
SERVER = Path(__file__).with_name("hosted_server.py")
MODERN = "2026-07-28"


class Run:
    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0
        self.asked = 0

    async def on_elicitation(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.asked += 1
        return types.ElicitResult(action="accept", content={"name": "relay"})

    async def check(self, name: str, fn: Any) -> None:
        try:
            with anyio.fail_after(STEP_TIMEOUT_S):
                await fn()
        except Exception as err:  # noqa: BLE001 - every failure is reported, then the next check runs
            self.failed += 1
            print(f"not ok - {name}: {err!r}", flush=True)
            return
        self.passed += 1
        print(f"ok - {name}", flush=True)


def dump(value: Any) -> Any:
    return value.model_dump(mode="json", exclude_none=True) if hasattr(value, "model_dump") else value


# What a 2026-07-28 result carries that the server did not write: the node's
# serverInfo in `_meta`, the caching hints of a list, the result type.
ERA_FIELDS = ("ttl_ms", "cache_scope", "result_type")


def era_free(value: Any) -> Any:
    out = dump(value)
    if isinstance(out, dict):
        meta = {k: v for k, v in (out.pop("meta", None) or {}).items() if k != "io.modelcontextprotocol/serverInfo"}
        if meta:
            out["meta"] = meta
        for field in ERA_FIELDS:
            out.pop(field, None)
        # The node's own extensions (tasks) beside the server's capabilities.
        out.pop("extensions", None)
    return out


async def main(url: str, era: str) -> int:
    run = Run()
    direct_server = StdioServerParameters(command=sys.executable, args=[str(SERVER)])
    async with (
        Client(direct_server, mode="legacy", elicitation_callback=run.on_elicitation) as direct,
        Client(url, mode="auto" if era == MODERN else "legacy", elicitation_callback=run.on_elicitation) as hosted,
    ):

        # 2026-07-28 results are compared without what that revision adds.
        same = era_free if era == MODERN else dump

        async def negotiated() -> None:
            want = MODERN if era == MODERN else "2025-11-25"
            assert hosted.protocol_version == want, hosted.protocol_version

        async def same_server() -> None:
            assert same(hosted.server_info) == same(direct.server_info), (hosted.server_info, direct.server_info)
            assert same(hosted.server_capabilities) == same(direct.server_capabilities)

        async def same_lists() -> None:
            assert same(await hosted.list_tools()) == same(await direct.list_tools())
            assert same(await hosted.list_resources()) == same(await direct.list_resources())
            assert same(await hosted.list_prompts()) == same(await direct.list_prompts())

        async def same_calls() -> None:
            for tool, args in [("add", {"a": 40, "b": 2}), ("shout", {"text": "relay"})]:
                got, want = await hosted.call_tool(tool, args), await direct.call_tool(tool, args)
                assert same(got) == same(want), (got, want)
                assert not got.is_error, got

        async def same_resource_and_prompt() -> None:
            assert same(await hosted.read_resource("note://today")) == same(await direct.read_resource("note://today"))
            got = await hosted.get_prompt("ask", {"topic": "relays"})
            assert same(got) == same(await direct.get_prompt("ask", {"topic": "relays"}))

        async def progress() -> None:
            seen: list[float] = []

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                seen.append(progress)

            result = await hosted.call_tool("count", {"n": 3}, progress_callback=on_progress)
            assert seen == [1, 2, 3], seen
            assert "counted to 3" in str(dump(result)), result

        async def elicitation() -> None:
            before = run.asked
            result = await hosted.call_tool("greet", {})
            assert run.asked == before + 1, run.asked
            assert "hello relay" in str(dump(result)), result

        await run.check(f"the era: {era}", negotiated)
        await run.check("initialize (or server/discover): the hosted server is the server itself", same_server)
        await run.check("tools/list, resources/list, prompts/list: the same", same_lists)
        await run.check("tools/call add and shout: the same answers", same_calls)
        await run.check("resources/read and prompts/get: the same", same_resource_and_prompt)
        await run.check("progress through the relay, under the client token", progress)
        await run.check("elicitation through the relay", elicitation)
    print(f"{run.passed} passed, {run.failed} failed", flush=True)
    return 1 if run.failed else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="A hosted Python SDK server, compared with the same server run directly.")
    parser.add_argument("url", help="the endpoint of a node hosting hosted_server.py")
    parser.add_argument("--era", choices=["session", MODERN], default="session")
    args = parser.parse_args()
    sys.exit(anyio.run(main, args.url, args.era))
