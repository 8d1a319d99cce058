#!/usr/bin/env node
// Client matrix, TypeScript SDK v2 (`@modelcontextprotocol/client`): Client +
// StreamableHTTPClientTransport. The checks are in client-matrix-lib.mjs.
//
//   node tests/js/client-matrix-v2.mjs URL                 # default negotiation ('legacy': initialize)
//   node tests/js/client-matrix-v2.mjs URL --negotiation auto
//
// With `auto` the client first probes `server/discover` at 2026-07-28 and falls
// back to initialize unless the answer is modern evidence (the SDK's
// classifyProbeOutcome); the connect check reports the era it settled on.

import { Client, ProtocolError, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { recordingFetch, runMatrix } from './client-matrix-lib.mjs';

const [url, flag, mode] = process.argv.slice(2);
if (!url || (flag !== undefined && (flag !== '--negotiation' || !['legacy', 'auto'].includes(mode)))) {
  console.error('usage: node client-matrix-v2.mjs http://127.0.0.1:PORT/mcp [--negotiation legacy|auto]');
  process.exit(2);
}

const wire = [];
const client = new Client(
  { name: 'client-matrix-v2', version: '1.0.0' },
  mode ? { versionNegotiation: { mode } } : undefined,
);
const transport = new StreamableHTTPClientTransport(new URL(url), { fetch: recordingFetch(wire) });

const ITEMS = { tools: 'tools', resources: 'resources', resourceTemplates: 'resourceTemplates', prompts: 'prompts' };
const METHOD = {
  tools: 'tools/list',
  resources: 'resources/list',
  resourceTemplates: 'resources/templates/list',
  prompts: 'prompts/list',
};
const LIST = {
  tools: (params) => client.listTools(params),
  resources: (params) => client.listResources(params),
  resourceTemplates: (params) => client.listResourceTemplates(params),
  prompts: (params) => client.listPrompts(params),
};

const adapter = {
  sessionId: undefined,
  protocolVersion: undefined,
  async connect() {
    await client.connect(transport);
    this.sessionId = transport.sessionId;
    this.protocolVersion = client.getNegotiatedProtocolVersion();
    const probe = wire.find((w) => w.rpc === 'server/discover');
    const probed = probe ? `; probe server/discover answered ${probe.status ?? probe.error}` : '';
    return `negotiation ${mode ?? 'default'}, era ${client.getProtocolEra()}${probed}`;
  },
  // v2's list methods walk every page themselves when called without a cursor;
  // the first page alone is a plain request, later pages pass their cursor.
  async listPage(kind, cursor) {
    const page =
      cursor === undefined ? await client.request({ method: METHOD[kind] }) : await LIST[kind]({ cursor });
    return { items: page[ITEMS[kind]], nextCursor: page.nextCursor };
  },
  listAll: async (kind) => (await LIST[kind]())[ITEMS[kind]],
  callTool: (name, args, onprogress) =>
    client.callTool({ name, arguments: args }, onprogress ? { onprogress } : undefined),
  terminate: () => transport.terminateSession(),
  close: () => client.close(),
  errorCode: (err) => (err instanceof ProtocolError ? err.code : undefined),
};

await runMatrix({ url, label: mode === 'auto' ? 'ts-sdk-v2-auto' : 'ts-sdk-v2', adapter, wire });
