"""What the 2025-11-25 revision added, driven by the Python SDK (`mcp` on PyPI) over each transport the node serves.

    tests/py/.venv/bin/python tests/py/revision_features.py http URL [--era session|2026-07-28]
    tests/py/.venv/bin/python tests/py/revision_features.py sse URL-OF-/sse        (legacy HTTP+SSE, session era)
    tests/py/.venv/bin/python tests/py/revision_features.py stdio MCP-NODE [--era session|2026-07-28]

The checks of tests/js/revision-features.mjs (keep the two in step), against
the node's built-ins (crates/mcp-node/src/revision_fixtures.rs):
  - icons on the add tool, test://static-text and test_simple_prompt, as the
    lists give them (every page);
  - server-to-client ping (test_ping_client; session era only);
  - URL-mode elicitation (test_url_elicitation): the callback gets mode url,
    the URL and, in the session era, an elicitationId that
    notifications/elicitation/complete then names (seen by `message_handler`);
    2026-07-28 carries neither and asks through input_required;
  - -32042 URL elicitation required (test_url_elicitation_required), with the
    elicitation in the error's data;
  - sampling with tools (test_sampling_with_tools): the callback gets tools and
    toolChoice, answers with a tool_use block, the tool reads it;
  - a client that did not declare elicitation.url and sampling.tools is never
    asked: both tools fail with a result saying which capability.

How the SDK declares the capabilities: an `elicitation_callback` always
declares `elicitation: {form, url}` (there is no form-only option), and
`sampling.tools` is `sampling_capabilities=SamplingCapability(tools=...)` next
to a `sampling_callback`. So the client without elicitation.url has no
elicitation callback at all. The session era is the Client's `mode="legacy"`,
2026-07-28 its `mode="2026-07-28"` (adopted without a probe).

Prints `ok - <check>` / `not ok - <check>: <reason>` and
`revision-features-python <transport> <era>: N passed, M failed`; exits 1 if a check failed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.session import IncomingMessage
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError
from matrix_rules import MAX_PAGES, MODERN, CheckFailed, require, text_of

STEP_TIMEOUT_S = 20.0
SIGN_IN_URL = "https://auth.example.com/connect?elicitation="
ICON_SRC_PREFIX = "data:image/svg+xml;base64,"
WEATHER_TEXT = 'The model called get_weather with {"city":"Paris"}'


def fmt(value: Any) -> str:
    """A value in a reason or a note, as JSON when it is a model or plain data."""
    if isinstance(value, list):
        return "[" + ", ".join(fmt(v) for v in value) + "]"
    if hasattr(value, "model_dump"):
        value = value.model_dump(by_alias=True, mode="json", exclude_none=True)
    try:
        return json.dumps(value, separators=(",", ":"))
    except TypeError:
        return repr(value)


def loopback_http_client(
    headers: dict[str, str] | None = None, timeout: httpx2.Timeout | None = None, auth: httpx2.Auth | None = None
) -> httpx2.AsyncClient:
    """The SDK's default HTTP client, except that no proxy from the environment is used for loopback."""
    return httpx2.AsyncClient(
        headers=headers, timeout=timeout or create_mcp_http_client().timeout, auth=auth, trust_env=False
    )


@dataclass
class Seen:
    """What one client's callbacks were given."""

    elicitations: list[types.ElicitRequestParams] = field(default_factory=list)
    samplings: list[types.CreateMessageRequestParams] = field(default_factory=list)
    # The elicitationId of each notifications/elicitation/complete.
    completed: list[str] = field(default_factory=list)

    async def on_elicitation(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.elicitations.append(params)
        return types.ElicitResult(action="accept")

    async def on_sampling(
        self, context: Any, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResultWithTools:
        self.samplings.append(params)
        return types.CreateMessageResultWithTools(
            role="assistant",
            content=[types.ToolUseContent(id="call-1", name="get_weather", input={"city": "Paris"})],
            model="revision-model",
            stop_reason="toolUse",
        )

    async def on_roots(self, context: Any) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[])

    async def on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, types.ElicitCompleteNotification):
            self.completed.append(message.params.elicitation_id)


def declared(client: Client) -> str:
    """The capabilities the client declares (initialize, or each 2026-07-28 request's _meta)."""
    # ClientSession builds them in a private method; read here only for the
    # report line, so a release without it changes the line, not a check.
    build = getattr(client.session, "_build_capabilities", None)
    if build is None:
        return "(not readable from this SDK release)"
    return fmt(build(client.protocol_version))


def assert_icon(what: str, icons: list[types.Icon] | None) -> None:
    require(icons is not None and len(icons) == 1, f"{what} has icons {fmt(icons)}")
    assert icons is not None
    icon = icons[0]
    require(icon.src.startswith(ICON_SRC_PREFIX), f"{what}'s icon src {icon.src[:40]!r}")
    require(icon.mime_type == "image/svg+xml", f"{what}'s icon mimeType {icon.mime_type!r}")
    require(icon.sizes == ["any"], f"{what}'s icon sizes {icon.sizes!r}")


class RevisionFeatures:
    def __init__(self, transport: str, target: str, era: str) -> None:
        self.transport = transport
        self.target = target
        self.era = era
        self.modern = era == MODERN
        self.label = f"revision-features-python {transport} {era}"
        self.passed = 0
        self.failed = 0

    def fail(self, name: str, reason: str) -> None:
        self.failed += 1
        print(f"not ok - {name}: {reason}", flush=True)

    async def check(self, name: str, fn: Callable[[], Awaitable[str | None]]) -> bool:
        try:
            with anyio.fail_after(STEP_TIMEOUT_S):
                note = await fn()
        except TimeoutError:
            self.fail(name, f"no answer within {STEP_TIMEOUT_S:g} s")
            return False
        except CheckFailed as err:
            self.fail(name, str(err))
            return False
        except Exception as err:  # noqa: BLE001 - every failure is reported, then the next check runs
            self.fail(name, repr(err))
            return False
        self.passed += 1
        print(f"ok - {name}" + (f" ({note})" if note else ""), flush=True)
        return True

    @asynccontextmanager
    async def open_client(self, full: bool, seen: Seen) -> AsyncIterator[Client]:
        """A Client over the transport, declaring elicitation.url and sampling.tools (full) or neither."""
        async with AsyncExitStack() as stack:
            if self.transport == "http":
                http = await stack.enter_async_context(loopback_http_client())
                transport: Any = streamable_http_client(self.target, http_client=http)
            elif self.transport == "sse":
                transport = sse_client(self.target, httpx_client_factory=loopback_http_client)
            else:
                devnull = stack.enter_context(open(os.devnull, "w"))  # noqa: PTH123 - the node's stderr
                transport = stdio_client(StdioServerParameters(command=self.target, args=["--stdio"]), errlog=devnull)
            client = Client(
                transport,
                mode=MODERN if self.modern else "legacy",
                client_info=types.Implementation(name="revision-features", version="1.0.0"),
                # An elicitation callback declares {form, url}: the plain client has none.
                elicitation_callback=seen.on_elicitation if full else None,
                sampling_callback=seen.on_sampling,
                sampling_capabilities=types.SamplingCapability(tools=types.SamplingToolsCapability()) if full else None,
                list_roots_callback=seen.on_roots,
                message_handler=seen.on_message,
            )
            yield await stack.enter_async_context(client)

    async def run(self) -> int:
        seen = Seen()
        connect = f"connect ({self.transport}, {self.era})"
        entered = False
        # The deadline bounds entering the Client (and, set again, leaving it); the checks have their own.
        with anyio.CancelScope() as scope:
            scope.deadline = anyio.current_time() + STEP_TIMEOUT_S
            try:
                async with self.open_client(True, seen) as client:
                    entered = True
                    scope.deadline = math.inf
                    if await self.check(connect, lambda: self.connected(client)):
                        await self.checks(client, seen)
                    scope.deadline = anyio.current_time() + STEP_TIMEOUT_S
            except Exception as err:  # noqa: BLE001 - the connect or the exit failed
                self.fail("leaving the client" if entered else connect, repr(err))
        if scope.cancelled_caught:
            self.fail("leaving the client" if entered else connect, f"no answer within {STEP_TIMEOUT_S:g} s")
        if entered and self.passed > 0:
            await self.check(
                "a client without elicitation.url and sampling.tools is not asked; the tools say which capability",
                self.plain,
            )
        print(f"{self.label}: {self.passed} passed, {self.failed} failed", flush=True)
        return 0 if self.failed == 0 else 1

    async def connected(self, client: Client) -> str:
        version = client.protocol_version
        want = MODERN if self.modern else "2025-11-25"
        require(version == want, f"negotiated {version}, expected {want}")
        return f"protocol {version}, declares {declared(client)}"

    async def checks(self, client: Client, seen: Seen) -> None:
        await self.check("icons: the add tool, test://static-text, test_simple_prompt", lambda: self.icons(client))
        if not self.modern:
            await self.check(
                "test_ping_client: the server pings the client, the SDK answers", lambda: self.ping(client)
            )
        how = (
            " through input_required, no elicitationId"
            if self.modern
            else ", then notifications/elicitation/complete naming its elicitationId"
        )
        await self.check(f"test_url_elicitation: mode url{how}", lambda: self.url_elicitation(client, seen))
        await self.check(
            "test_url_elicitation_required: -32042 with the elicitation in error.data",
            lambda: self.url_elicitation_required(client),
        )
        await self.check(
            "test_sampling_with_tools: the callback gets tools and toolChoice, its tool_use reaches the tool",
            lambda: self.sampling_with_tools(client, seen),
        )

    async def list_all(self, client: Client, attr: str, item_field: str) -> list[Any]:
        """Every item of a list, page by page (the node may run with a small page size)."""
        items: list[Any] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = await getattr(client, attr)(cursor=cursor)
            items.extend(getattr(page, item_field))
            cursor = page.next_cursor
            if cursor is None:
                return items
        raise CheckFailed(f"{attr}: more than {MAX_PAGES} pages")

    async def icons(self, client: Client) -> str:
        tools = await self.list_all(client, "list_tools", "tools")
        assert_icon("add", next((t.icons for t in tools if t.name == "add"), None))
        resources = await self.list_all(client, "list_resources", "resources")
        static_text = next((r.icons for r in resources if str(r.uri) == "test://static-text"), None)
        assert_icon("test://static-text", static_text)
        prompts = await self.list_all(client, "list_prompts", "prompts")
        assert_icon("test_simple_prompt", next((p.icons for p in prompts if p.name == "test_simple_prompt"), None))
        with_icons = [t.name for t in tools if t.icons]
        require(with_icons == ["add"], f"tools with icons: {with_icons}")
        return f"{len(tools)} tools, one with an icon"

    async def ping(self, client: Client) -> str:
        result = await client.call_tool("test_ping_client", {})
        text = text_of(result)
        require(not result.is_error and text == "The client answered ping.", f"result {fmt(result)}")
        return repr(text)

    async def url_elicitation(self, client: Client, seen: Seen) -> str:
        before = len(seen.elicitations)
        result = await client.call_tool("test_url_elicitation", {})
        asked = seen.elicitations[before:]
        require(len(asked) == 1, f"the elicitation callback ran {len(asked)} time(s); result {fmt(result)}")
        params = asked[0]
        require(params.mode == "url", f"mode {params.mode!r}")
        require(isinstance(params, types.ElicitRequestURLParams), f"params {type(params).__name__} {fmt(params)}")
        assert isinstance(params, types.ElicitRequestURLParams)
        require(params.url.startswith(SIGN_IN_URL), f"url {params.url!r}")
        require(len(params.message) > 0, f"message {params.message!r}")
        text = text_of(result)
        require(not result.is_error, f"result {fmt(result)}")
        if self.modern:
            require(params.elicitation_id is None, f"2026-07-28 params carry elicitationId {params.elicitation_id!r}")
            require(
                re.fullmatch(r"The user accepted mcp-node-\d+, which completed\.", text) is not None, f"text {text!r}"
            )
            return repr(text)
        eid = params.elicitation_id
        require(isinstance(eid, str) and len(eid) > 0, f"elicitationId {eid!r}")
        require(text == f"The user accepted {eid}, which completed.", f"text {text!r}")
        for _ in range(20):
            if eid in seen.completed:
                break
            await anyio.sleep(0.05)
        require(eid in seen.completed, f"notifications/elicitation/complete named {seen.completed}, not {eid}")
        return f"{eid} completed"

    async def url_elicitation_required(self, client: Client) -> str:
        try:
            result = await client.call_tool("test_url_elicitation_required", {})
        except MCPError as err:
            error = err
        else:
            raise CheckFailed(f"the call succeeded: {fmt(result)}")
        require(error.code == -32042, f"rejected with {error.code}: {error.message}")
        data = error.data if isinstance(error.data, dict) else {}
        wanted = (data.get("elicitations") or [None])[0]
        require(
            isinstance(wanted, dict)
            and wanted.get("mode") == "url"
            and str(wanted.get("url", "")).startswith("https://auth.example.com/"),
            f"data {fmt(error.data)}",
        )
        assert isinstance(wanted, dict)
        # The SDK raises a plain MCPError; UrlElicitationRequiredError is what parses its data.
        parsed = UrlElicitationRequiredError.from_error(error.error).elicitations
        require(len(parsed) == 1 and parsed[0].url == wanted["url"], f"parsed {fmt(parsed)}")
        return f"{type(error).__name__} code {error.code}, {wanted.get('elicitationId')}"

    async def sampling_with_tools(self, client: Client, seen: Seen) -> str:
        before = len(seen.samplings)
        result = await client.call_tool("test_sampling_with_tools", {})
        asked = seen.samplings[before:]
        require(len(asked) == 1, f"the sampling callback ran {len(asked)} time(s); result {fmt(result)}")
        params = asked[0]
        tools = params.tools or []
        require([t.name for t in tools] == ["get_weather"], f"tools {fmt(params.tools)}")
        properties = tools[0].input_schema.get("properties") or {}
        require("city" in properties, f"get_weather inputSchema {fmt(tools[0].input_schema)}")
        choice = fmt(params.tool_choice)
        require(choice == fmt({"mode": "auto"}), f"toolChoice {choice}")
        text = text_of(result)
        require(not result.is_error and text == WEATHER_TEXT, f"result {fmt(result)}")
        return repr(text)

    async def plain(self) -> str:
        seen = Seen()
        async with self.open_client(False, seen) as client:
            url = await client.call_tool("test_url_elicitation", {})
            sampled = await client.call_tool("test_sampling_with_tools", {})
            caps = declared(client)
        require(url.is_error and "does not support elicitation.url" in text_of(url), f"URL elicitation: {fmt(url)}")
        require(
            sampled.is_error and "does not support sampling.tools" in text_of(sampled), f"sampling: {fmt(sampled)}"
        )
        require(
            not seen.elicitations and not seen.samplings,
            f"asked anyway: {fmt(seen.elicitations)} {fmt(seen.samplings)}",
        )
        return f"declares {caps}; {text_of(url)!r}; {text_of(sampled)!r}"


def main() -> int:
    parser = argparse.ArgumentParser(description="The 2025-11-25 revision's features, driven by the Python SDK.")
    parser.add_argument("transport", choices=["http", "sse", "stdio"])
    parser.add_argument("target", help="the /mcp URL (http), the /sse URL (sse), or the mcp-node binary (stdio)")
    parser.add_argument("--era", choices=["session", MODERN], default="session")
    args = parser.parse_args()
    if args.transport == "sse" and args.era == MODERN:
        parser.error("legacy HTTP+SSE is session era only")
    return anyio.run(RevisionFeatures(args.transport, args.target, args.era).run)


if __name__ == "__main__":
    sys.exit(main())
