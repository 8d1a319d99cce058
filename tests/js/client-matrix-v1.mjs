#!/usr/bin/env node
// Client matrix, TypeScript SDK v1 (`@modelcontextprotocol/sdk`): Client +
// StreamableHTTPClientTransport in their default configuration (2025 era,
// initialize handshake). The checks are in client-matrix-lib.mjs. The client
// declares elicitation, sampling and roots and answers the server's requests
// with the handlers below (fixed answers, counted).
//
//   node tests/js/client-matrix-v1.mjs http://127.0.0.1:PORT/mcp

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  CallToolResultSchema,
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
  McpError,
} from '@modelcontextprotocol/sdk/types.js';
import { ANSWERS, recordingFetch, runMatrix } from './client-matrix-lib.mjs';

const url = process.argv[2];
if (!url) {
  console.error('usage: node client-matrix-v1.mjs http://127.0.0.1:PORT/mcp');
  process.exit(2);
}

const wire = [];
const client = new Client(
  { name: 'client-matrix-v1', version: '1.0.0' },
  { capabilities: { elicitation: {}, sampling: {}, roots: {} } },
);
const asked = { elicitation: 0, sampling: 0, roots: 0 };
client.setRequestHandler(ElicitRequestSchema, async () => {
  asked.elicitation++;
  return ANSWERS.elicitation;
});
client.setRequestHandler(CreateMessageRequestSchema, async () => {
  asked.sampling++;
  return ANSWERS.sampling;
});
client.setRequestHandler(ListRootsRequestSchema, async () => {
  asked.roots++;
  return ANSWERS.roots;
});
const transport = new StreamableHTTPClientTransport(new URL(url), { fetch: recordingFetch(wire) });

const LIST = {
  tools: (params) => client.listTools(params).then((r) => ({ items: r.tools, nextCursor: r.nextCursor })),
  resources: (params) => client.listResources(params).then((r) => ({ items: r.resources, nextCursor: r.nextCursor })),
  resourceTemplates: (params) =>
    client.listResourceTemplates(params).then((r) => ({ items: r.resourceTemplates, nextCursor: r.nextCursor })),
  prompts: (params) => client.listPrompts(params).then((r) => ({ items: r.prompts, nextCursor: r.nextCursor })),
};

const adapter = {
  sessionId: undefined,
  protocolVersion: undefined,
  asked,
  async connect() {
    await client.connect(transport);
    this.sessionId = transport.sessionId;
    this.protocolVersion = transport.protocolVersion;
  },
  // v1's list methods fetch exactly one page: the first without a cursor.
  listPage: (kind, cursor) => LIST[kind](cursor === undefined ? undefined : { cursor }),
  callTool: (name, args, onprogress) =>
    client.callTool({ name, arguments: args }, CallToolResultSchema, onprogress ? { onprogress } : undefined),
  getPrompt: (name, args) => client.getPrompt({ name, arguments: args }),
  readResource: (uri) => client.readResource({ uri }),
  terminate: () => transport.terminateSession(),
  close: () => client.close(),
  errorCode: (err) => (err instanceof McpError ? err.code : undefined),
};

await runMatrix({ url, label: 'ts-sdk-v1', adapter, wire });
