#!/usr/bin/env node
// What the 2025-11-25 revision added, driven by the TypeScript SDK v2 client
// (`@modelcontextprotocol/client`) over each transport the node serves:
//
//   node tests/js/revision-features.mjs http URL [--era session|2026-07-28]
//   node tests/js/revision-features.mjs sse URL-OF-/sse        (legacy HTTP+SSE, session era)
//   node tests/js/revision-features.mjs stdio MCP-NODE-BINARY [--era session|2026-07-28]  (spawns `mcp-node --stdio`)
//
// Checks, against the node's built-ins (crates/mcp-node/src/revision_fixtures.rs):
//   - icons on the add tool, test://static-text and test_simple_prompt, as
//     the lists give them;
//   - server-to-client ping (test_ping_client; session era only: 2026-07-28
//     has no ping);
//   - URL-mode elicitation (test_url_elicitation): the handler gets mode url,
//     the URL and, in the session era, an elicitationId that
//     notifications/elicitation/complete then names; 2026-07-28 carries
//     neither (the revision removed them) and asks through input_required;
//   - -32042 URL elicitation required (test_url_elicitation_required), with
//     the elicitation in error.data;
//   - sampling with tools (test_sampling_with_tools): the handler gets tools
//     and toolChoice, answers with a tool_use block, the tool reads it;
//   - a client that did not declare elicitation.url and sampling.tools is
//     never asked: both tools fail with a result saying which capability.
// Prints `ok - <check>` / `not ok - <check>: <reason>` and
// `revision-features <transport>[ <era>]: N passed, M failed`; exits 1 on failure.

import { Client, ProtocolError, SSEClientTransport, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { MODERN, fmt, assert, textOf, checker, listAll, sleep } from './client-matrix-lib.mjs';

const [transportKind, target, flag, eraArg] = process.argv.slice(2);
const era = flag === '--era' ? eraArg : 'session';
if (!['http', 'sse', 'stdio'].includes(transportKind) || !target || !['session', MODERN].includes(era) ||
    (era === MODERN && transportKind === 'sse')) {
  console.error('usage: node revision-features.mjs http URL | stdio MCP-NODE [--era session|2026-07-28] | sse URL');
  process.exit(2);
}
const modern = era === MODERN;
const label = `revision-features ${transportKind} ${era}`;
const STEP_TIMEOUT_MS = 20000;

function makeTransport() {
  if (transportKind === 'http') return new StreamableHTTPClientTransport(new URL(target));
  if (transportKind === 'sse') return new SSEClientTransport(new URL(target));
  return new StdioClientTransport({ command: target, args: ['--stdio'], stderr: 'ignore' });
}

/** A client declaring the 2025-11-25 capabilities (or not), its handlers recording what they got. */
function makeClient(full) {
  const capabilities = full
    ? { elicitation: { form: {}, url: {} }, sampling: { tools: {} }, roots: {} }
    : { elicitation: { form: {} }, sampling: {}, roots: {} };
  const client = new Client(
    { name: 'revision-features', version: '1.0.0' },
    { capabilities, ...(modern ? { versionNegotiation: { mode: { pin: MODERN } } } : {}) },
  );
  const seen = { elicitations: [], samplings: [], completed: [] };
  client.setRequestHandler('elicitation/create', async (request) => {
    seen.elicitations.push(request.params);
    return { action: 'accept' };
  });
  client.setRequestHandler('sampling/createMessage', async (request) => {
    seen.samplings.push(request.params);
    return {
      role: 'assistant',
      content: [{ type: 'tool_use', id: 'call-1', name: 'get_weather', input: { city: 'Paris' } }],
      model: 'revision-model',
      stopReason: 'toolUse',
    };
  });
  client.setRequestHandler('roots/list', async () => ({ roots: [] }));
  client.setNotificationHandler('notifications/elicitation/complete', (n) => seen.completed.push(n.params.elicitationId));
  return { client, seen };
}

const { check, finish } = checker({ stepMs: STEP_TIMEOUT_MS });
/** Every item of a list, page by page (the node may run with a small page size). */
const listAllOf = (client, method, field) =>
  listAll((m, params) => client.request({ method: m, params }), method, field);

function assertIcon(what, icons) {
  assert(Array.isArray(icons) && icons.length === 1, `${what} has icons ${fmt(icons)}`);
  const [icon] = icons;
  assert(icon.src.startsWith('data:image/svg+xml;base64,'), `${what}'s icon src ${fmt(icon.src.slice(0, 40))}`);
  assert(icon.mimeType === 'image/svg+xml', `${what}'s icon mimeType ${fmt(icon.mimeType)}`);
  assert(fmt(icon.sizes) === fmt(['any']), `${what}'s icon sizes ${fmt(icon.sizes)}`);
}

const { client, seen } = makeClient(true);
let connected = false;
await check(`connect (${transportKind}, ${era})`, async () => {
  await client.connect(makeTransport());
  const version = client.getNegotiatedProtocolVersion();
  assert(modern ? version === MODERN : version === '2025-11-25', `negotiated ${version}`);
  connected = true;
  return `protocol ${version}`;
});

if (connected) {
  await check('icons: the add tool, test://static-text, test_simple_prompt', async () => {
    const tools = await listAllOf(client, 'tools/list', 'tools');
    assertIcon('add', tools.find((t) => t.name === 'add')?.icons);
    const resources = await listAllOf(client, 'resources/list', 'resources');
    assertIcon('test://static-text', resources.find((r) => r.uri === 'test://static-text')?.icons);
    const prompts = await listAllOf(client, 'prompts/list', 'prompts');
    assertIcon('test_simple_prompt', prompts.find((p) => p.name === 'test_simple_prompt')?.icons);
    const without = tools.filter((t) => t.icons).map((t) => t.name);
    assert(fmt(without) === fmt(['add']), `tools with icons: ${fmt(without)}`);
    return `${tools.length} tools, one with an icon`;
  });

  if (!modern) {
    await check('test_ping_client: the server pings the client, the SDK answers', async () => {
      const result = await client.callTool({ name: 'test_ping_client', arguments: {} });
      assert(!result.isError && textOf(result) === 'The client answered ping.', `result ${fmt(result)}`);
      return fmt(textOf(result));
    });
  }

  await check(
    `test_url_elicitation: mode url${modern ? ' through input_required, no elicitationId' : ', then notifications/elicitation/complete naming its elicitationId'}`,
    async () => {
      const before = seen.elicitations.length;
      const result = await client.callTool({ name: 'test_url_elicitation', arguments: {} });
      const asked = seen.elicitations.slice(before);
      assert(asked.length === 1, `the elicitation handler ran ${asked.length} time(s)`);
      const [params] = asked;
      assert(params.mode === 'url', `mode ${fmt(params.mode)}`);
      assert(params.url.startsWith('https://auth.example.com/connect?elicitation='), `url ${fmt(params.url)}`);
      assert(typeof params.message === 'string' && params.message.length > 0, `message ${fmt(params.message)}`);
      assert(!result.isError, `result ${fmt(result)}`);
      if (modern) {
        assert(!('elicitationId' in params), `2026-07-28 params carry elicitationId ${fmt(params.elicitationId)}`);
        assert(/^The user accepted mcp-node-\d+, which completed\.$/.test(textOf(result)), `text ${fmt(textOf(result))}`);
        return fmt(textOf(result));
      }
      const id = params.elicitationId;
      assert(typeof id === 'string' && id.length > 0, `elicitationId ${fmt(id)}`);
      assert(textOf(result) === `The user accepted ${id}, which completed.`, `text ${fmt(textOf(result))}`);
      for (let i = 0; i < 20 && !seen.completed.includes(id); i++) await sleep(50);
      assert(seen.completed.includes(id), `notifications/elicitation/complete named ${fmt(seen.completed)}, not ${id}`);
      return `${id} completed`;
    },
  );

  await check('test_url_elicitation_required: -32042 with the elicitation in error.data', async () => {
    let error;
    try {
      await client.callTool({ name: 'test_url_elicitation_required', arguments: {} });
    } catch (err) {
      error = err;
    }
    assert(error, 'the call succeeded');
    assert(error instanceof ProtocolError && error.code === -32042, `rejected with ${error?.code}: ${error?.message}`);
    const [wanted] = error.data?.elicitations ?? [];
    assert(wanted?.mode === 'url' && wanted.url.startsWith('https://auth.example.com/'), `data ${fmt(error.data)}`);
    return `${error.constructor.name}, ${wanted.elicitationId}`;
  });

  await check('test_sampling_with_tools: the handler gets tools and toolChoice, its tool_use reaches the tool', async () => {
    const before = seen.samplings.length;
    const result = await client.callTool({ name: 'test_sampling_with_tools', arguments: {} });
    const asked = seen.samplings.slice(before);
    assert(asked.length === 1, `the sampling handler ran ${asked.length} time(s)`);
    const [params] = asked;
    assert(fmt(params.tools?.map((t) => t.name)) === fmt(['get_weather']), `tools ${fmt(params.tools)}`);
    assert(params.tools[0].inputSchema?.properties?.city, `get_weather inputSchema ${fmt(params.tools[0].inputSchema)}`);
    assert(fmt(params.toolChoice) === fmt({ mode: 'auto' }), `toolChoice ${fmt(params.toolChoice)}`);
    const want = 'The model called get_weather with {"city":"Paris"}';
    assert(!result.isError && textOf(result) === want, `result ${fmt(result)}`);
    return fmt(textOf(result));
  });

  await client.close().catch(() => {});

  const plain = makeClient(false);
  await check('a client without elicitation.url and sampling.tools is not asked; the tools say which capability', async () => {
    await plain.client.connect(makeTransport());
    const url = await plain.client.callTool({ name: 'test_url_elicitation', arguments: {} });
    const sampled = await plain.client.callTool({ name: 'test_sampling_with_tools', arguments: {} });
    assert(url.isError && textOf(url).includes('does not support elicitation.url'), `URL elicitation: ${fmt(url)}`);
    assert(sampled.isError && textOf(sampled).includes('does not support sampling.tools'), `sampling: ${fmt(sampled)}`);
    assert(plain.seen.elicitations.length === 0 && plain.seen.samplings.length === 0, `asked anyway: ${fmt(plain.seen)}`);
    return `${fmt(textOf(url))}; ${fmt(textOf(sampled))}`;
  });
  await plain.client.close().catch(() => {});
}

finish(label);
