"""Client matrix, Pydantic AI (`pydantic-ai-slim[mcp]`): an Agent with an `MCPToolset` and a scripted model.

    tests/py/frameworks/pydantic-ai/.venv/bin/python tests/py/frameworks/pydantic_ai_matrix.py URL \
        [--mode auto|legacy|2026-07-28]

`MCPToolset` (2.x's name for the MCP client; `MCPServerStreamableHTTP` is gone)
is built on the FastMCP 4 `Client`, itself on the `mcp` SDK v2, whose `mode=`
picks the protocol era:
  auto (label pydantic-ai): `MCPToolset(URL, http_client=...)`, the toolset's
    own default Client (FastMCP's default `mode="auto"`: probes
    `server/discover`, falls back to `initialize` without modern evidence);
  legacy (label pydantic-ai-legacy) and 2026-07-28 (label pydantic-ai-2026):
    `MCPToolset(fastmcp.Client(StreamableHttpTransport(URL, ...), mode=MODE))`,
    the toolset's documented way to configure the Client.

The model is `FunctionModel`: its first answer calls `echo`, its second `add`
{a: 2, b: 3}, its third is text. The checks are on what the framework hands
that model: the tool definitions of its first request (every page of
tools/list), the `ToolReturnPart` of its second request (echo's text) and of
its third (add's structured value `{"sum": 5}`), and the run's output; then
the era's rules over every HTTP exchange, recorded through the `httpx2` client
the transport is given.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import anyio
import httpx2
from fastmcp.client import Client as FastMCPClient
from fastmcp.client.transports import StreamableHttpTransport
from matrix_wire import MODERN, Report, calls_answered, check_tools_handed, recording_client, require
from mcp.shared._httpx_utils import create_mcp_http_client
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

LABELS = {"auto": "pydantic-ai", "legacy": "pydantic-ai-legacy", MODERN: "pydantic-ai-2026"}
MESSAGE = "hello from pydantic-ai"
FINAL = "the matrix is done"


class Matrix:
    def __init__(self, url: str, mode: str) -> None:
        self.url = url
        self.mode = mode
        self.wire: list[dict[str, Any]] = []
        self.report = Report(LABELS[mode], self.wire)
        # Each request the agent made to the model: (messages, the tool definitions it was handed).
        self.requests: list[tuple[list[ModelMessage], list[str]]] = []
        self.output: Any = None

    def model(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.requests.append((list(messages), [t.name for t in info.function_tools]))
        step = len(self.requests)
        if step == 1:
            return ModelResponse(parts=[ToolCallPart("echo", {"message": MESSAGE}, tool_call_id="call-echo")])
        if step == 2:
            return ModelResponse(parts=[ToolCallPart("add", {"a": 2, "b": 3}, tool_call_id="call-add")])
        return ModelResponse(parts=[TextPart(FINAL)])

    def toolset(self) -> MCPToolset[Any]:
        timeout = create_mcp_http_client().timeout
        if self.mode == "auto":
            return MCPToolset(self.url, http_client=recording_client(httpx2, self.wire, timeout=timeout))

        def factory(**kwargs: Any) -> httpx2.AsyncClient:
            kwargs.setdefault("timeout", timeout)
            return recording_client(httpx2, self.wire, **kwargs)

        transport = StreamableHttpTransport(self.url, httpx_client_factory=factory)
        return MCPToolset(FastMCPClient(transport, mode=self.mode))

    def tool_return(self, step: int, tool: str, call_id: str) -> Any:
        """The content of the tool's return part in the model's request number `step` (1-based)."""
        require(len(self.requests) >= step, f"the model got {len(self.requests)} request(s), expected {step}")
        last = self.requests[step - 1][0][-1]
        require(isinstance(last, ModelRequest), f"request {step} ends with {type(last).__name__}")
        parts = [p for p in last.parts if isinstance(p, ToolReturnPart)]
        require(len(parts) == 1, f"request {step} carries {len(parts)} tool return part(s): {last.parts!r}")
        part = parts[0]
        require(
            (part.tool_name, part.tool_call_id) == (tool, call_id),
            f"the tool return is for {part.tool_name} {part.tool_call_id}, expected {tool} {call_id}",
        )
        require(part.outcome == "success", f"outcome {part.outcome!r}: {part.content!r}")
        answered = [w.get("status") for w in calls_answered(self.wire, tool)]
        require(answered == [200], f"tools/call {tool} POSTs answered {answered}, expected one 200")
        return part.content

    async def run(self) -> int:
        agent = Agent(FunctionModel(self.model), toolsets=[self.toolset()])

        async def run_agent() -> str:
            # Entering the agent connects its toolset; leaving it closes the MCP client.
            async with agent:
                result = await agent.run("Use the tools.")
                self.output = result.output
            return f"{len(self.requests)} model requests"

        await self.report.check("agent run: echo, then add, then text", run_agent)
        await anyio.sleep(0.2)  # whatever the client sends while closing

        def tools() -> str:
            require(bool(self.requests), "the model was never called")
            return check_tools_handed(self.requests[0][1], self.wire)

        def echo() -> str:
            content = self.tool_return(2, "echo", "call-echo")
            require(content == f"Echo: {MESSAGE}", f"the model got {content!r}, expected 'Echo: {MESSAGE}'")
            return repr(content)

        def add() -> str:
            content = self.tool_return(3, "add", "call-add")
            require(content == {"sum": 5}, f"the model got {content!r}, expected the structured value {{'sum': 5}}")
            return repr(content)

        def output() -> str:
            require(self.output == FINAL, f"the run's output is {self.output!r}")
            return repr(self.output)

        await self.report.check("the model is handed every tool of every tools/list page", tools)
        await self.report.check("echo: the model's next request carries the text 'Echo: <message>'", echo)
        await self.report.check("add {a:2, b:3}: the model's next request carries structuredContent {'sum': 5}", add)
        await self.report.check("the run ends with the model's text", output)
        await self.report.wire_checks(expect_modern=self.mode != "legacy")
        return self.report.summary()


def main() -> int:
    parser = argparse.ArgumentParser(description="The client matrix's Pydantic AI client.")
    parser.add_argument("url", help="http://127.0.0.1:PORT/mcp")
    parser.add_argument("--mode", choices=sorted(LABELS), default="auto", help="the FastMCP Client's mode=")
    args = parser.parse_args()
    return anyio.run(Matrix(args.url, args.mode).run)


if __name__ == "__main__":
    sys.exit(main())
