// Peer for loadtest/peers/compare.sh: a minimal MCP echo server on the
// official TypeScript SDK, Streamable HTTP with stateful sessions.
//   node server.mjs HOST:PORT
//
// Plain node:http rather than Express: the transport parses the body itself,
// so a framework would only add cost that is not the SDK's. The SDK binds one
// McpServer to one transport, so each session gets its own pair, found by
// the Mcp-Session-Id header. Transport defaults otherwise: SSE response
// bodies (enableJsonResponse false), no event store, no Host checks (the
// transport's default; loopback only here anyway).
//
// Node runs JavaScript on one thread; libuv and V8 keep helper threads that
// the taskset in compare.sh confines to the same core.
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { z } from 'zod';

const [host, port] = (process.argv[2] ?? '127.0.0.1:18530').split(':');
const transports = new Map();

function newSession() {
  const server = new McpServer({ name: 'ts-echo', version: '0.0.0' });
  server.registerTool(
    'echo',
    { description: 'Returns its message as text content', inputSchema: { message: z.string() } },
    async ({ message }) => ({ content: [{ type: 'text', text: message }] }),
  );
  const transport = new StreamableHTTPServerTransport({
    sessionIdGenerator: () => randomUUID(),
    onsessioninitialized: (id) => transports.set(id, transport),
  });
  transport.onclose = () => {
    if (transport.sessionId) transports.delete(transport.sessionId);
  };
  return server.connect(transport).then(() => transport);
}

function reject(res, status, message) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32000, message } }));
}

const http = createServer(async (req, res) => {
  try {
    const id = req.headers['mcp-session-id'];
    if (id) {
      const transport = transports.get(id);
      if (!transport) return reject(res, 404, 'session not found');
      return await transport.handleRequest(req, res);
    }
    // No session header: only an initialize POST may come here; the new
    // transport answers anything else with its own 400.
    if (req.method !== 'POST') return reject(res, 400, 'session id required');
    const transport = await newSession();
    await transport.handleRequest(req, res);
  } catch (err) {
    if (!res.headersSent) reject(res, 500, String(err));
  }
});
http.listen(Number(port), host, () => console.log(`ts-echo listening on http://${host}:${port}/mcp`));
