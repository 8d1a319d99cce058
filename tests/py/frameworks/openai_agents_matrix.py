"""Client matrix, OpenAI Agents SDK (`openai-agents`): an Agent with `MCPServerStreamableHttp` and a scripted Model.

    tests/py/frameworks/openai-agents/.venv/bin/python tests/py/frameworks/openai_agents_matrix.py URL

Label openai-agents. With the `mcp` SDK v2 installed, the Agents SDK builds an
`mcp.Client` with `mode="auto"` itself (`agents/mcp/_compat.py`,
`create_v2_client`) and `MCPServerStreamableHttp` has no parameter to change
it: it probes `server/discover` and falls back to `initialize` only without
modern evidence, so against this node it takes 2026-07-28 and there is no
session-era configuration of this release over SDK v2.

The model is a `Model` of our own (no network, tracing off): its first answer
is a `function_call` of `echo`, its second of `add` {a: 2, b: 3}, its third a
message. It records what the runner hands it: the tools of its first call
(every page of tools/list), and the `function_call_output` item of echo (the
text) and of add (with `use_structured_content=True`, the JSON of
`structuredContent`, `{"sum": 5}`). Then the era's rules over every HTTP
exchange, recorded through the `httpx_client_factory` the server params take.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import AsyncIterator
from typing import Any

import httpx2
from agents import Agent, Runner, set_tracing_disabled
from agents.items import ModelResponse
from agents.mcp import MCPServerStreamableHttp
from agents.models.interface import Model
from agents.usage import Usage
from matrix_wire import Report, calls_answered, check_tools_handed, recording_client, require
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

LABEL = "openai-agents"
MESSAGE = "hello from openai-agents"
FINAL = "the matrix is done"


class ScriptedModel(Model):
    """Answers from a script and records every call's input items and tool names."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[Any], list[str]]] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[Any],
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: Any = None,
    ) -> ModelResponse:
        items = [{"type": "message", "role": "user", "content": input}] if isinstance(input, str) else list(input)
        self.calls.append((items, [t.name for t in tools]))
        step = len(self.calls)
        if step in (1, 2):
            name, args = ("echo", {"message": MESSAGE}) if step == 1 else ("add", {"a": 2, "b": 3})
            output: list[Any] = [
                ResponseFunctionToolCall(
                    type="function_call",
                    id=f"fc-{name}",
                    call_id=f"call-{name}",
                    name=name,
                    arguments=json.dumps(args),
                    status="completed",
                )
            ]
        else:
            output = [
                ResponseOutputMessage(
                    type="message",
                    id="msg-final",
                    role="assistant",
                    status="completed",
                    content=[ResponseOutputText(type="output_text", text=FINAL, annotations=[])],
                )
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the matrix runs the agent without streaming")


class Matrix:
    def __init__(self, url: str) -> None:
        self.url = url
        self.wire: list[dict[str, Any]] = []
        self.report = Report(LABEL, self.wire)
        self.model = ScriptedModel()
        self.output: Any = None

    def http_client(
        self, headers: dict[str, str] | None = None, timeout: Any = None, auth: Any = None
    ) -> httpx2.AsyncClient:
        # What the SDK's default factory passes (agents/mcp/server.py), recorded.
        kwargs: dict[str, Any] = {"follow_redirects": False}
        for key, value in (("headers", headers), ("timeout", timeout), ("auth", auth)):
            if value is not None:
                kwargs[key] = value
        return recording_client(httpx2, self.wire, **kwargs)

    def function_output(self, step: int, tool: str) -> Any:
        """The output of the tool's function_call_output item in the model's call number `step` (1-based)."""
        require(len(self.model.calls) >= step, f"the model was called {len(self.model.calls)} time(s), expected {step}")
        items = self.model.calls[step - 1][0]
        outputs = [
            i
            for i in items
            if (i.get("type") if isinstance(i, dict) else getattr(i, "type", None)) == "function_call_output"
        ]
        mine = [i for i in outputs if i.get("call_id") == f"call-{tool}"]
        require(len(mine) == 1, f"call {step} has {len(mine)} function_call_output for call-{tool}: {outputs!r}")
        answered = [w.get("status") for w in calls_answered(self.wire, tool)]
        require(answered == [200], f"tools/call {tool} POSTs answered {answered}, expected one 200")
        return mine[0].get("output")

    async def run(self) -> int:
        set_tracing_disabled(True)  # the default exporter would send traces to OpenAI
        server = MCPServerStreamableHttp(
            {"url": self.url, "httpx_client_factory": self.http_client},
            name="mcp-node",
            use_structured_content=True,
            client_session_timeout_seconds=20,
        )
        agent = Agent(name="matrix", instructions="Use the tools.", model=self.model, mcp_servers=[server])

        async def run_agent() -> str:
            async with server:
                result = await Runner.run(agent, "Use the tools.", max_turns=5)
                self.output = result.final_output
            return f"{len(self.model.calls)} model calls"

        await self.report.check("agent run: echo, then add, then a message", run_agent)
        await asyncio.sleep(0.2)  # whatever the client sends while closing

        def tools() -> str:
            require(bool(self.model.calls), "the model was never called")
            return check_tools_handed(self.model.calls[0][1], self.wire)

        def echo() -> str:
            output = self.function_output(2, "echo")
            text = output if isinstance(output, str) else None
            if isinstance(output, list) and len(output) == 1 and isinstance(output[0], dict):
                text = output[0].get("text")
            require(text == f"Echo: {MESSAGE}", f"the model got {output!r}, expected the text 'Echo: {MESSAGE}'")
            return repr(output)

        def add() -> str:
            output = self.function_output(3, "add")
            require(isinstance(output, str), f"the model got {output!r}, expected a JSON string")
            require(json.loads(output) == {"sum": 5}, f"the model got {output!r}, expected {{'sum': 5}}")
            return repr(output)

        def final() -> str:
            require(self.output == FINAL, f"the run's final output is {self.output!r}")
            return repr(self.output)

        await self.report.check("the model is handed every tool of every tools/list page", tools)
        await self.report.check("echo: the next model call gets a function_call_output with 'Echo: <message>'", echo)
        await self.report.check(
            "add {a:2, b:3} (use_structured_content): the next model call gets structuredContent {'sum': 5} as JSON",
            add,
        )
        await self.report.check("the run ends with the model's message", final)
        await self.report.wire_checks(expect_modern=True)
        return self.report.summary()


def main() -> int:
    parser = argparse.ArgumentParser(description="The client matrix's OpenAI Agents SDK client.")
    parser.add_argument("url", help="http://127.0.0.1:PORT/mcp")
    args = parser.parse_args()
    return asyncio.run(Matrix(args.url).run())


if __name__ == "__main__":
    sys.exit(main())
