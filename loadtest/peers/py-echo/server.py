"""Peer for loadtest/peers/compare.sh: a minimal MCP echo server on the
official Python SDK (`mcp`; in 2.x FastMCP is named MCPServer), Streamable
HTTP with stateful sessions.

    python server.py HOST:PORT

SDK defaults except where they would make the comparison unfair or
impossible:
- stateless_http=False and json_response=False are the defaults (stateful
  sessions, SSE response bodies), spelled out because they are the point;
- max_sessions raised from 10 000 to 20 000 (env MAX_SESSIONS), as the
  node runs with --max-sessions 20000 and the memory step opens 10 000
  sessions; the initialize step raises it further for every server;
- the tool is registered with structured_output=False, so the result is
  the same text content every other peer returns (the SDK would add a
  structuredContent copy for a `str` return);
- log level ERROR, as the node runs with --log error: uvicorn's access log
  at INFO would write a line per request.
The DNS-rebinding Host check the SDK enables for a loopback bind stays on;
127.0.0.1:PORT passes it. One process, one asyncio event loop (uvicorn,
no workers), so the server is single-threaded like the others.
"""

import os
import sys

from mcp.server.mcpserver import MCPServer

host, _, port = (sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:18540").rpartition(":")
server = MCPServer("py-echo", log_level="ERROR")


# async: the SDK runs a plain `def` tool on a worker thread (anyio.to_thread),
# a thread hop per call that would put a second thread in play.
@server.tool(structured_output=False)
async def echo(message: str) -> str:
    """Returns its message as text content."""
    return message


if __name__ == "__main__":
    print(f"py-echo listening on http://{host}:{port}/mcp", flush=True)
    server.run(
        "streamable-http",
        host=host,
        port=int(port),
        stateless_http=False,
        json_response=False,
        max_sessions=int(os.environ.get("MAX_SESSIONS", "20000")),
    )
