"""A stdio MCP server on the Python SDK (`mcp` on PyPI), for the relay's
tests: tests/py/relay_client.py runs it directly and hosted by a node
(`[[upstreams]]`), and compares what the two answer.

    tests/py/.venv/bin/python tests/py/hosted_server.py
"""

from __future__ import annotations

from pydantic import BaseModel

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("python-hosted", instructions="A Python SDK server that a node hosts.")


@server.tool()
def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


@server.tool()
def shout(text: str) -> str:
    """Upper-cases its input."""
    return text.upper()


@server.tool()
async def count(n: int, ctx: Context) -> str:
    """Counts to n, reporting progress at each step."""
    for i in range(1, n + 1):
        await ctx.report_progress(i, n, f"step {i}")
    return f"counted to {n}"


class Name(BaseModel):
    name: str


@server.tool()
async def greet(ctx: Context) -> str:
    """Asks the client for a name (elicitation), then greets it."""
    answer = await ctx.elicit("Who is there?", Name)
    if answer.action == "accept" and answer.data is not None:
        return f"hello {answer.data.name}"
    return answer.action


@server.resource("note://today", mime_type="text/plain")
def today() -> str:
    """Today's note."""
    return "relayed, not copied"


@server.prompt()
def ask(topic: str) -> str:
    """A question about a topic."""
    return f"Tell me about {topic}."


if __name__ == "__main__":
    server.run()
