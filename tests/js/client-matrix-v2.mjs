#!/usr/bin/env node
// Client matrix, TypeScript SDK v2 (`@modelcontextprotocol/client`): Client +
// StreamableHTTPClientTransport. The checks are in client-matrix-lib.mjs.
//
//   node tests/js/client-matrix-v2.mjs URL                          # default: 'legacy' (initialize)
//   node tests/js/client-matrix-v2.mjs URL --negotiation auto       # probe server/discover, fall back to initialize
//   node tests/js/client-matrix-v2.mjs URL --negotiation 2026-07-28 # pinned: { pin: '2026-07-28' }, no fallback
//
// With `auto` the client first probes `server/discover` at 2026-07-28 and falls
// back to initialize unless the answer is modern evidence (the SDK's
// classifyProbeOutcome); the connect check and the era line report the era it
// settled on. The client declares elicitation, sampling and roots and answers
// them with the handlers below (fixed answers, counted): in the session era
// the server asks with requests on the call's stream, in 2026-07-28 the SDK's
// input_required auto-fulfilment (the default) calls the same handlers.

import { Client, ProtocolError, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { ANSWERS, MODERN, recordingFetch, runMatrix } from './client-matrix-lib.mjs';

const [url, flag, mode] = process.argv.slice(2);
if (!url || (flag !== undefined && (flag !== '--negotiation' || !['legacy', 'auto', MODERN].includes(mode)))) {
  console.error(`usage: node client-matrix-v2.mjs http://127.0.0.1:PORT/mcp [--negotiation legacy|auto|${MODERN}]`);
  process.exit(2);
}
const negotiation = mode === MODERN ? { mode: { pin: MODERN } } : mode ? { mode } : undefined;
const label = mode === MODERN ? 'ts-sdk-v2-2026' : mode === 'auto' ? 'ts-sdk-v2-auto' : 'ts-sdk-v2';

const wire = [];
const client = new Client(
  { name: 'client-matrix-v2', version: '1.0.0' },
  {
    capabilities: { elicitation: { form: {} }, sampling: {}, roots: {} },
    ...(negotiation ? { versionNegotiation: negotiation } : {}),
  },
);
const asked = { elicitation: 0, sampling: 0, roots: 0 };
client.setRequestHandler('elicitation/create', async () => {
  asked.elicitation++;
  return ANSWERS.elicitation;
});
client.setRequestHandler('sampling/createMessage', async () => {
  asked.sampling++;
  return ANSWERS.sampling;
});
client.setRequestHandler('roots/list', async () => {
  asked.roots++;
  return ANSWERS.roots;
});
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
  asked,
  async connect() {
    await client.connect(transport);
    this.sessionId = transport.sessionId;
    this.protocolVersion = client.getNegotiatedProtocolVersion();
    const probe = wire.find((w) => w.rpc === 'server/discover');
    const probed = probe ? `; probe server/discover answered ${probe.status ?? probe.error}` : '';
    return `negotiation ${mode ?? 'default (legacy)'}, SDK era ${client.getProtocolEra()}${probed}`;
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
  getPrompt: (name, args) => client.getPrompt({ name, arguments: args }),
  readResource: (uri) => client.readResource({ uri }, { cacheMode: 'bypass' }),
  async listen(onToolsListChanged) {
    client.setNotificationHandler('notifications/tools/list_changed', () => onToolsListChanged());
    return client.listen({ toolsListChanged: true });
  },
  terminate: () => transport.terminateSession(),
  close: () => client.close(),
  errorCode: (err) => (err instanceof ProtocolError ? err.code : undefined),
};

await runMatrix({ url, label, adapter, wire });
