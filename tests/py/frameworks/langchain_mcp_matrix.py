"""Client matrix, LangChain MCP adapters (`langchain-mcp-adapters`): `MultiServerMCPClient` tools run by a scripted chat model.

    tests/py/frameworks/langchain-mcp-adapters/.venv/bin/python tests/py/frameworks/langchain_mcp_matrix.py URL

Label langchain-mcp-adapters. The adapters require `mcp>=1.24,<2`, and the SDK
v1 (1.30.0 here) knows only the session era (`initialize`, up to 2025-11-25):
there is no 2026-07-28 configuration. `MultiServerMCPClient` with a
`streamable_http` connection opens one session for `get_tools()` and one per
tool call (no `session()` context), each ended with DELETE.

LangGraph is not a dependency of the adapters, so the agent loop is the few
lines a LangGraph agent runs: a chat model of our own (a `BaseChatModel`
answering from a script, `bind_tools` turning the tools into the OpenAI tool
schemas a real model gets) calls `echo`, then `add` {a: 2, b: 3}, then
answers text; each tool call is invoked with the model's `ToolCall`, and the
`ToolMessage` it returns goes back to the model. The checks are on what the
model is handed: the tool schemas of its first call (every page of
tools/list), echo's `ToolMessage` (the text `Echo: <message>`) and add's
(`artifact` `{"structured_content": {"sum": 5}}`, content the text the node
sent). Then the session-era rules over every HTTP exchange, recorded through
the connection's `httpx_client_factory`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

import httpx  # the SDK v1's HTTP client
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from langchain_mcp_adapters.client import MultiServerMCPClient
from matrix_wire import Report, calls_answered, check_tools_handed, recording_client, require

LABEL = "langchain-mcp-adapters"
MESSAGE = "hello from langchain"
FINAL = "the matrix is done"
SCRIPT = [
    AIMessage(content="", tool_calls=[{"name": "echo", "args": {"message": MESSAGE}, "id": "call-echo"}]),
    AIMessage(content="", tool_calls=[{"name": "add", "args": {"a": 2, "b": 3}, "id": "call-add"}]),
    AIMessage(content=FINAL),
]
# Each call the model got: (the messages, the names of the tool schemas bound to it).
SEEN: list[tuple[list[BaseMessage], list[str]]] = []


class ScriptedChatModel(BaseChatModel):
    """Answers the script's next message and records what it was handed."""

    @property
    def _llm_type(self) -> str:
        return "matrix-scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        SEEN.append((list(messages), [t["function"]["name"] for t in kwargs.get("tools", [])]))
        step = len(SEEN)
        require(step <= len(SCRIPT), f"the model was called {step} times")
        return ChatResult(generations=[ChatGeneration(message=SCRIPT[step - 1])])


def text_of(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [b.get("text") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        return "".join(texts) if len(texts) == len(content) else None
    return None


class Matrix:
    def __init__(self, url: str) -> None:
        self.url = url
        self.wire: list[dict[str, Any]] = []
        self.report = Report(LABEL, self.wire)
        self.final: BaseMessage | None = None

    def http_client(
        self, headers: dict[str, str] | None = None, timeout: Any = None, auth: Any = None
    ) -> httpx.AsyncClient:
        # What the SDK's create_mcp_http_client passes, recorded.
        kwargs: dict[str, Any] = {"follow_redirects": True}
        for key, value in (("headers", headers), ("timeout", timeout), ("auth", auth)):
            if value is not None:
                kwargs[key] = value
        return recording_client(httpx, self.wire, **kwargs)

    def tool_message(self, step: int, tool: str) -> ToolMessage:
        """The ToolMessage that ends the model's call number `step` (1-based)."""
        require(len(SEEN) >= step, f"the model was called {len(SEEN)} time(s), expected {step}")
        last = SEEN[step - 1][0][-1]
        require(isinstance(last, ToolMessage), f"call {step} ends with {type(last).__name__}: {last!r}")
        assert isinstance(last, ToolMessage)
        require(
            (last.name, last.tool_call_id) == (tool, f"call-{tool}"),
            f"the ToolMessage is for {last.name} {last.tool_call_id}, expected {tool} call-{tool}",
        )
        require(last.status == "success", f"status {last.status!r}: {last.content!r}")
        answered = [w.get("status") for w in calls_answered(self.wire, tool)]
        require(answered == [200], f"tools/call {tool} POSTs answered {answered}, expected one 200")
        return last

    async def run(self) -> int:
        client = MultiServerMCPClient(
            {"node": {"transport": "streamable_http", "url": self.url, "httpx_client_factory": self.http_client}}
        )

        async def run_agent() -> str:
            tools = await client.get_tools()
            by_name = {t.name: t for t in tools}
            model = ScriptedChatModel().bind_tools(tools)
            history: list[BaseMessage] = [HumanMessage("Use the tools.")]
            for _ in range(len(SCRIPT)):
                answer = await model.ainvoke(history)
                history.append(answer)
                if not answer.tool_calls:
                    self.final = answer
                    break
                for call in answer.tool_calls:
                    history.append(await by_name[call["name"]].ainvoke({**call, "type": "tool_call"}))
            return f"{len(tools)} tools, {len(SEEN)} model calls"

        await self.report.check("get_tools(), then the model calls echo, then add, then answers", run_agent)
        await asyncio.sleep(0.2)  # whatever the client sends while closing

        def tools() -> str:
            require(bool(SEEN), "the model was never called")
            return check_tools_handed(SEEN[0][1], self.wire)

        def echo() -> str:
            message = self.tool_message(2, "echo")
            text = text_of(message.content)
            require(text == f"Echo: {MESSAGE}", f"content {message.content!r}, expected the text 'Echo: {MESSAGE}'")
            require(message.artifact is None, f"artifact {message.artifact!r} for a text-only tool")
            return repr(message.content)

        def add() -> str:
            message = self.tool_message(3, "add")
            artifact = message.artifact
            require(
                isinstance(artifact, dict) and artifact.get("structured_content") == {"sum": 5},
                f"artifact {artifact!r}, expected structured_content {{'sum': 5}}",
            )
            text = text_of(message.content)
            require(text is not None and json.loads(text) == {"sum": 5}, f"content {message.content!r}")
            return f"artifact {artifact!r}, content {message.content!r}"

        def final() -> str:
            require(self.final is not None and self.final.content == FINAL, f"the last answer is {self.final!r}")
            return repr(FINAL)

        await self.report.check("the model is handed every tool of every tools/list page", tools)
        await self.report.check("echo: the ToolMessage back to the model has the text 'Echo: <message>'", echo)
        await self.report.check("add {a:2, b:3}: the ToolMessage's artifact is structuredContent {'sum': 5}", add)
        await self.report.check("the loop ends with the model's text", final)
        await self.report.wire_checks(expect_modern=False)
        return self.report.summary()


def main() -> int:
    parser = argparse.ArgumentParser(description="The client matrix's LangChain MCP adapters client.")
    parser.add_argument("url", help="http://127.0.0.1:PORT/mcp")
    args = parser.parse_args()
    # Nothing of this run goes to LangSmith (langchain-core reads these when a run starts).
    os.environ["LANGSMITH_TRACING"] = "false"
    os.environ["LANGCHAIN_TRACING_V2"] = "false"
    return asyncio.run(Matrix(args.url).run())


if __name__ == "__main__":
    sys.exit(main())
