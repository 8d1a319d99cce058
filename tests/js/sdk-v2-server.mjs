#!/usr/bin/env node
// A server on the TypeScript SDK v2 (`@modelcontextprotocol/server`), served
// over HTTP in one of the two ways that SDK offers:
// - by default `createMcpHandler`, which speaks 2026-07-28 to each request
//   and answers 2025-era clients through its stateless legacy fallback (no
//   sessions kept anywhere);
// - with `--sessions`, one `WebStandardStreamableHTTPServerTransport` per
//   session, kept in this process's memory by its `Mcp-Session-Id` (the
//   stateful pattern: another process knows none of them).
// The surface of the SDK v1 example server the relay tests also host
// (`greet`, `collect-user-info`, a prompt, a resource), so that one driver
// (`relay-sdk-example.mjs --server v2|v2-sessions`) checks them all behind
// the node.
//
//   MCP_PORT=3000 node tests/js/sdk-v2-server.mjs [--sessions]
//
// Listens on 127.0.0.1 only.

import { randomUUID } from 'node:crypto';
import http from 'node:http';
import { Readable } from 'node:stream';

import {
  McpServer,
  WebStandardStreamableHTTPServerTransport,
  acceptedContent,
  createMcpHandler,
  inputRequired,
  isInitializeRequest,
} from '@modelcontextprotocol/server';
import * as z from 'zod';

export const NAME = 'sdk-v2-example-server';

const CONTACT_SCHEMA = {
  type: 'object',
  properties: { name: { type: 'string' }, email: { type: 'string' } },
  required: ['name', 'email'],
};

/** One server instance (the handler makes one per request). */
function build() {
  const server = new McpServer({ name: NAME, version: '1.0.0' });
  server.registerTool(
    'greet',
    { description: 'A simple greeting tool', inputSchema: z.object({ name: z.string() }) },
    async ({ name }) => ({ content: [{ type: 'text', text: `Hello, ${name}!` }] }),
  );
  server.registerTool(
    'collect-user-info',
    {
      description: 'Asks the user for contact information (an input round in 2026-07-28)',
      inputSchema: z.object({ infoType: z.enum(['contact']) }),
    },
    async ({ infoType }, ctx) => {
      const info = acceptedContent(ctx.mcpReq.inputResponses, 'contact');
      if (!info) {
        return inputRequired({
          inputRequests: {
            contact: inputRequired.elicit({ message: 'Your contact information?', requestedSchema: CONTACT_SCHEMA }),
          },
        });
      }
      return {
        content: [{ type: 'text', text: `Thank you! Collected ${infoType} information: ${JSON.stringify(info)}` }],
      };
    },
  );
  server.registerPrompt(
    'greeting-template',
    { description: 'A greeting prompt', argsSchema: z.object({ name: z.string() }) },
    async ({ name }) => ({
      messages: [{ role: 'user', content: { type: 'text', text: `Please greet ${name} in a friendly manner.` } }],
    }),
  );
  server.registerResource(
    'greeting-resource',
    'https://example.com/greetings/default',
    { mimeType: 'text/plain' },
    async () => ({
      contents: [{ uri: 'https://example.com/greetings/default', text: 'Hello, world!' }],
    }),
  );
  return server;
}

const port = Number(process.env.MCP_PORT ?? 3000);

/** `--sessions`: each session's transport, by its id, in this process only. */
function sessions() {
  const transports = new Map();
  const error = (status, message) =>
    Response.json({ jsonrpc: '2.0', id: null, error: { code: -32000, message } }, { status });
  return {
    async fetch(request) {
      const id = request.headers.get('mcp-session-id');
      if (id) {
        const transport = transports.get(id);
        return transport ? transport.handleRequest(request) : error(404, 'Session not found');
      }
      if (request.method !== 'POST') return error(400, 'No session');
      const body = await request.json();
      if (!isInitializeRequest(body)) return error(400, 'No session: initialize first');
      const transport = new WebStandardStreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (sid) => transports.set(sid, transport),
        onsessionclosed: (sid) => transports.delete(sid),
      });
      transport.onclose = () => transport.sessionId && transports.delete(transport.sessionId);
      await build().connect(transport);
      return transport.handleRequest(request, { parsedBody: body });
    },
  };
}

const handler = process.argv.includes('--sessions') ? sessions() : createMcpHandler(() => build());

http
  .createServer(async (req, res) => {
    // node:http to the Fetch API the handler speaks, and back.
    const abort = new AbortController();
    res.on('close', () => abort.abort());
    const body = req.method === 'GET' || req.method === 'HEAD' ? undefined : Readable.toWeb(req);
    const request = new Request(`http://${req.headers.host}${req.url}`, {
      method: req.method,
      headers: Object.entries(req.headers).flatMap(([k, v]) => (Array.isArray(v) ? v.map((x) => [k, x]) : [[k, v]])),
      body,
      duplex: 'half',
      signal: abort.signal,
    });
    try {
      const response = await handler.fetch(request);
      res.writeHead(response.status, Object.fromEntries(response.headers));
      if (response.body) {
        for await (const chunk of response.body) res.write(chunk);
      }
      res.end();
    } catch (err) {
      if (!res.headersSent) res.writeHead(500);
      res.end();
      if (!abort.signal.aborted) console.error(`sdk-v2-server: ${err?.stack ?? err}`);
    }
  })
  .listen(port, '127.0.0.1', () => console.error(`sdk-v2-server listening on 127.0.0.1:${port}`));
