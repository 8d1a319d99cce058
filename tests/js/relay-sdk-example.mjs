#!/usr/bin/env node
// The TypeScript SDK's own example server (`simpleStreamableHttp`, SDK v1:
// stateful, its sessions in its own memory) run as several replicas and
// hosted by the node over HTTP (`[[upstreams]] urls`), driven by an official
// client and compared with one replica reached directly: the same tools,
// prompts and resources, the same answers, its log lines and its questions
// carried across. `--server v2`: the same surface on the SDK v2
// (`sdk-v2-server.mjs`, `createMcpHandler`: 2026-07-28 itself, no sessions),
// hosted with `stateless = true`; `--server v2-sessions`: that server with
// its sessions in its memory (`sdk-v2-server.mjs --sessions`).
//
//   node tests/js/relay-sdk-example.mjs HOSTED-URL DIRECT-URL [--era session|2026-07-28] [--server v1|v2|v2-sessions]
//
// `session` (the default): the SDK v1 client through the node, which opens
// an upstream session per session at the replicas in turn. `2026-07-28`: the
// SDK v2 client pinned to that revision (the node opens upstream sessions for
// it; the server's question becomes an input_required round). Prints
// `ok - <step>` per step and `relay-sdk-example <era>: N passed, M failed`.

import assert from 'node:assert/strict';

import { Client as ClientV2, StreamableHTTPClientTransport as HttpTransportV2 } from '@modelcontextprotocol/client';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema, LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { MODERN, checker, sleep, textOf } from './client-matrix-lib.mjs';

const [hostedUrl, directUrl, ...flags] = process.argv.slice(2);
const option = (name, fallback) => {
  const at = flags.indexOf(name);
  return at < 0 ? fallback : flags[at + 1];
};
const era = option('--era', 'session');
const server = option('--server', 'v1');
const SERVER_NAMES = {
  v1: 'simple-streamable-http-server',
  v2: 'sdk-v2-example-server',
  'v2-sessions': 'sdk-v2-example-server',
};
if (!hostedUrl || !directUrl || !['session', MODERN].includes(era) || !SERVER_NAMES[server]) {
  console.error(
    `usage: node relay-sdk-example.mjs HOSTED-URL DIRECT-URL [--era session|${MODERN}] [--server v1|v2|v2-sessions]`,
  );
  process.exit(2);
}
const modern = era === MODERN;
const { check, finish } = checker({ stepMs: 30000 });
const CONTACT = { name: 'Ada Lovelace', email: 'ada@example.com' };

/** A client of `url`: the SDK v1's, or (2026-07-28) the SDK v2's pinned to it; its log lines kept. */
function makeClient(url, pinned) {
  const logs = [];
  if (pinned) {
    const client = new ClientV2(
      { name: 'relay-sdk-example', version: '1.0.0' },
      { capabilities: { elicitation: { form: {} } }, versionNegotiation: { mode: { pin: MODERN } } },
    );
    client.setRequestHandler('elicitation/create', async () => ({ action: 'accept', content: CONTACT }));
    return { client, logs, transport: () => new HttpTransportV2(new URL(url)) };
  }
  const client = new Client({ name: 'relay-sdk-example', version: '1.0.0' }, { capabilities: { elicitation: {} } });
  client.setRequestHandler(ElicitRequestSchema, async () => ({ action: 'accept', content: CONTACT }));
  client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => logs.push(n.params));
  return { client, logs, transport: () => new StreamableHTTPClientTransport(new URL(url)) };
}

const hosted = makeClient(hostedUrl, modern);
const direct = makeClient(directUrl, false);
const call = (side, name, args) => side.client.callTool({ name, arguments: args });
/** Names of every item of a list, page by page (`list`: the client's method). */
async function names(side, list, field) {
  const out = [];
  let cursor;
  do {
    const page = await side.client[list](cursor ? { cursor } : {});
    out.push(...page[field].map((i) => i.name ?? i.uri));
    cursor = page.nextCursor;
  } while (cursor);
  return out.sort();
}

let connected = false;
await check(`connect through the node (${era}) and to one replica directly`, async () => {
  await hosted.client.connect(hosted.transport());
  await direct.client.connect(direct.transport());
  connected = true;
  const info = hosted.client.getServerVersion();
  assert.equal(info?.name, SERVER_NAMES[server], `serverInfo ${JSON.stringify(info)}`);
  return `${info.name} ${info.version}`;
});

if (connected) {
  await check('tools, prompts, resources: the same lists', async () => {
    for (const [list, field] of [['listTools', 'tools'], ['listPrompts', 'prompts'], ['listResources', 'resources']]) {
      assert.deepEqual(await names(hosted, list, field), await names(direct, list, field), list);
    }
  });

  await check('greet: the same answer', async () => {
    const [a, b] = [await call(hosted, 'greet', { name: 'Relay' }), await call(direct, 'greet', { name: 'Relay' })];
    assert.equal(textOf(a), 'Hello, Relay!');
    assert.equal(textOf(a), textOf(b));
  });

  await check('prompts/get and resources/read: the same answers', async () => {
    const prompt = { name: 'greeting-template', arguments: { name: 'Relay' } };
    assert.deepEqual((await hosted.client.getPrompt(prompt)).messages, (await direct.client.getPrompt(prompt)).messages);
    const read = { uri: 'https://example.com/greetings/default' };
    assert.deepEqual((await hosted.client.readResource(read)).contents, (await direct.client.readResource(read)).contents);
  });

  // The v2 server answers a 2025-era client one request at a time (its
  // legacy fallback), and cannot ask it anything then: directly as through
  // the node.
  if (server === 'v2' && !modern) {
    await check('collect-user-info: the same refusal as directly (the v2 legacy fallback cannot ask)', async () => {
      const outcome = (side) =>
        call(side, 'collect-user-info', { infoType: 'contact' }).then(
          (r) => `result ${textOf(r)}`,
          (e) => `error ${e.message}`,
        );
      const [a, b] = [await outcome(hosted), await outcome(direct)];
      assert.ok(a.includes('cannot receive server-to-client requests'), a);
      assert.equal(a, b);
    });
  } else await check('collect-user-info: the server asks the client through the node, and hears its answer', async () => {
    const result = await call(hosted, 'collect-user-info', { infoType: 'contact' });
    const text = textOf(result);
    assert.ok(text.startsWith('Thank you! Collected contact information'), text);
    assert.ok(text.includes('ada@example.com'), text);
  });

  // The v2 server keeps no session, hence no GET stream for its logs.
  if (!modern && server === 'v1') {
    await check('multi-greet: its log lines reach the client while it runs', async () => {
      const before = hosted.logs.length;
      const result = await call(hosted, 'multi-greet', { name: 'Relay' });
      assert.equal(textOf(result), 'Good morning, Relay!');
      // The server sends them on its GET stream, not the call's: the last
      // may come after the answer (directly too), but it comes.
      const last = 'Sending second greeting to Relay';
      const lines = () => hosted.logs.slice(before).map((l) => l.data);
      for (let i = 0; i < 100 && !lines().includes(last); i++) await sleep(50);
      assert.deepEqual(lines(), ['Starting multi-greet for Relay', 'Sending first greeting to Relay', last]);
      return `${lines().length} log lines`;
    });
  }
}

await hosted.client.close().catch(() => {});
await direct.client.close().catch(() => {});
finish(`relay-sdk-example ${server === 'v1' ? era : `${server}-${era}`}`);
