"""Several servers behind one endpoint (a federation of `[[upstreams]]`),
driven by the Python SDK client (`mcp.Client`) and compared with each
upstream reached directly: every tool, prompt, resource and template of
every upstream, walked page by page under its federated name, each once;
a call of each answered as the upstream answers it.

    tests/py/.venv/bin/python tests/py/relay_federation.py URL SPEC.json [--era session|2026-07-28]

SPEC.json is tests/js/relay-federation.mjs's: the upstreams in order, each
`{name, command, env}` (stdio) or `{name, url}` (HTTP), with `call: {name,
arguments}`. Prints `ok - <check>` / `not ok - <check>: <reason>` and `N
passed, M failed`; exits 1 if any failed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from relay_client import MODERN, Run, dump

# (list method, the field of its result, the field naming an entry, the
# capability that has it, whether entries are URIs)
LISTS = [
    ("list_tools", "tools", "name", "tools", False),
    ("list_prompts", "prompts", "name", "prompts", False),
    ("list_resources", "resources", "uri", "resources", True),
    ("list_resource_templates", "resource_templates", "uri_template", "resources", True),
]


def exposed(upstream: str, name: str, uri: bool) -> str:
    return f"{upstream.lower().replace('_', '-')}+{name}" if uri else f"{upstream}_{name}"


async def walk(client: Client, method: str, field: str, key: str) -> tuple[list[str], int]:
    names: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = await getattr(client, method)(cursor=cursor)
        names.extend(str(getattr(item, key)) for item in getattr(page, field))
        pages += 1
        cursor = page.next_cursor
        if not cursor:
            return names, pages
        assert pages < 500, f"{method} did not end"


def comparable(result: Any) -> Any:
    out = dump(result)
    if isinstance(out, dict):
        out.pop("meta", None)
        out.pop("result_type", None)
    return out


async def main(url: str, spec_path: str, era: str) -> int:
    run = Run()
    upstreams = json.loads(Path(spec_path).read_text())
    async with AsyncExitStack() as stack:
        federated = await stack.enter_async_context(Client(url, mode="auto" if era == MODERN else "legacy"))
        direct: dict[str, Client] = {}
        for u in upstreams:
            target: Any = u.get("url") or StdioServerParameters(
                command=u["command"][0], args=u["command"][1:], env={**os.environ, **u.get("env", {})}
            )
            direct[u["name"]] = await stack.enter_async_context(Client(target, mode="legacy"))

        async def server() -> None:
            want = "+".join(u["name"] for u in upstreams)
            assert federated.server_info.name == want, federated.server_info

        await run.check(f"the federation's serverInfo ({era})", server)
        for method, field, key, capability, uri in LISTS:

            async def same_list(method: str = method, field: str = field, key: str = key,
                                capability: str = capability, uri: bool = uri) -> None:
                names, _ = await walk(federated, method, field, key)
                assert len(set(names)) == len(names), f"an entry twice: {names}"
                expected: list[str] = []
                for u in upstreams:
                    own = direct[u["name"]]
                    if getattr(own.server_capabilities, capability, None) is None:
                        continue
                    expected += [exposed(u["name"], n, uri) for n in (await walk(own, method, field, key))[0]]
                assert sorted(names) == sorted(expected), (sorted(names), sorted(expected))

            await run.check(f"{method}: every upstream's, page by page, each once, under its federated name", same_list)
        for u in upstreams:

            async def same_call(u: dict[str, Any] = u) -> None:
                call = u["call"]
                got = await federated.call_tool(exposed(u["name"], call["name"], False), call["arguments"])
                want = await direct[u["name"]].call_tool(call["name"], call["arguments"])
                assert comparable(got) == comparable(want), (got, want)

            await run.check(f"{u['name']}: {u['call']['name']} answered as the upstream answers it", same_call)
    print(f"{run.passed} passed, {run.failed} failed", flush=True)
    return 1 if run.failed else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="A federation of hosted servers, compared with each reached directly.")
    parser.add_argument("url", help="the endpoint of a node federating the upstreams of SPEC")
    parser.add_argument("spec", help="the upstreams, as tests/js/relay-federation.mjs reads them")
    parser.add_argument("--era", choices=["session", MODERN], default="session")
    args = parser.parse_args()
    sys.exit(anyio.run(main, args.url, args.spec, args.era))
