#!/usr/bin/env node
// @modelcontextprotocol/server-everything (npm, pinned in package.json) hosted
// by a node (`[[upstreams]]`, one child per session), driven by the official
// TypeScript SDK client, and compared with the same server run directly over
// stdio by the same client: every deterministic tool, resource and prompt
// answers the same; questions (sampling, elicitation, roots), progress,
// cancellation and a resource subscription cross the relay; the child's
// environment holds what the configuration gives it and nothing of the
// node's own.
//
//   node tests/js/relay-everything.mjs http://127.0.0.1:PORT/mcp
//
// The node must host this package's server (tests/run-all.sh writes the
// configuration) with `env = { RELAY_GIVEN = "given" }`, and run with
// RELAY_NODE_SECRET set in its own environment. Prints `ok - <step>` per step
// and a final `N passed, M failed` line; exits 1 on the first failure.

import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
  ResourceUpdatedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';

const url = process.argv[2];
if (!url) {
  console.error('usage: node relay-everything.mjs http://127.0.0.1:PORT/mcp');
  process.exit(2);
}
const HERE = path.dirname(fileURLToPath(import.meta.url));
const SERVER = path.join(HERE, 'node_modules/@modelcontextprotocol/server-everything/dist/index.js');
const STEP_TIMEOUT_MS = Number(process.env.E2E_STEP_TIMEOUT_MS ?? 30000);

let passed = 0;
async function step(name, fn) {
  let timer;
  try {
    await Promise.race([
      fn(),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`timed out after ${STEP_TIMEOUT_MS} ms`)), STEP_TIMEOUT_MS);
      }),
    ]);
    clearTimeout(timer);
    passed += 1;
    console.log(`ok - ${name}`);
  } catch (err) {
    clearTimeout(timer);
    console.log(`not ok - ${name}: ${err?.stack ?? err}`);
    console.log(`${passed} passed, 1 failed`);
    process.exit(1);
  }
}

/**
 * Asserts two answers are the same, but for the wall-clock times the server
 * writes into some of them ("created at 1:13:00 PM"): the direct call and the
 * relayed one can fall on either side of a second.
 */
function assertSameAnswer(got, want) {
  const clock = /\b\d{1,2}:\d{2}:\d{2}(\s?[AP]M)?\b|\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z/g;
  const timeless = (value) => JSON.parse(JSON.stringify(value).replace(clock, '<time>'));
  assert.deepEqual(timeless(got), timeless(want));
}

/** A client that answers every question the same way, and counts them. */
function makeClient(name) {
  const client = new Client(
    { name, version: '1.0.0' },
    { capabilities: { sampling: {}, elicitation: {}, roots: { listChanged: true } } },
  );
  client.asked = { sampling: 0, elicitation: 0, roots: 0 };
  client.setRequestHandler(CreateMessageRequestSchema, async () => {
    client.asked.sampling += 1;
    return { role: 'assistant', model: 'relay-test', content: { type: 'text', text: 'sampled through the relay' } };
  });
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    client.asked.elicitation += 1;
    const content = {};
    for (const [key, schema] of Object.entries(request.params.requestedSchema?.properties ?? {})) {
      if (schema.type === 'string') content[key] = schema.enum?.[0] ?? 'relay';
      else if (schema.type === 'number' || schema.type === 'integer') content[key] = 7;
      else if (schema.type === 'boolean') content[key] = true;
    }
    return { action: 'accept', content };
  });
  client.setRequestHandler(ListRootsRequestSchema, async () => {
    client.asked.roots += 1;
    return { roots: [{ uri: 'file:///srv/relay-root', name: 'relay root' }] };
  });
  client.updates = [];
  client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => client.updates.push(n.params.uri));
  return client;
}

const direct = makeClient('direct');
const hosted = makeClient('hosted');

await step('connect to the server directly (stdio) and through the node', async () => {
  await direct.connect(new StdioClientTransport({ command: process.execPath, args: [SERVER, 'stdio'], stderr: 'ignore' }));
  await hosted.connect(new StreamableHTTPClientTransport(new URL(url)));
});

await step('initialize: the hosted server is the server itself (name, version, capabilities, instructions)', async () => {
  assert.deepEqual(hosted.getServerVersion(), direct.getServerVersion());
  assert.deepEqual(hosted.getServerCapabilities(), direct.getServerCapabilities());
  assert.equal(hosted.getInstructions(), direct.getInstructions());
});

await step('tools/list, resources/list, resources/templates/list, prompts/list: the same', async () => {
  assert.deepEqual(await hosted.listTools(), await direct.listTools());
  assert.deepEqual(await hosted.listResources(), await direct.listResources());
  assert.deepEqual(await hosted.listResourceTemplates(), await direct.listResourceTemplates());
  assert.deepEqual(await hosted.listPrompts(), await direct.listPrompts());
});

const sameCalls = [
  ['echo', { message: 'through the relay' }],
  ['get-sum', { a: 19, b: 23 }],
  ['get-annotated-message', { messageType: 'success', includeImage: true }],
  ['get-tiny-image', {}],
  ['get-structured-content', { location: 'Chicago' }],
  ['get-resource-reference', { resourceType: 'Text', resourceId: 3 }],
  ['get-resource-links', { count: 2 }],
];
for (const [name, args] of sameCalls) {
  await step(`tools/call ${name}: the same answer`, async () => {
    const want = await direct.callTool({ name, arguments: args });
    const got = await hosted.callTool({ name, arguments: args });
    assertSameAnswer(got, want);
    assert.notEqual(got.isError, true, JSON.stringify(got));
  });
}

await step('resources/read and prompts/get and completion/complete: the same', async () => {
  const { resources } = await direct.listResources();
  for (const resource of resources.slice(0, 3)) {
    assertSameAnswer(await hosted.readResource({ uri: resource.uri }), await direct.readResource({ uri: resource.uri }));
  }
  for (const [name, args] of [['simple-prompt', {}], ['args-prompt', { city: 'Paris', state: 'TX' }]]) {
    assert.deepEqual(await hosted.getPrompt({ name, arguments: args }), await direct.getPrompt({ name, arguments: args }));
  }
  const ref = { type: 'ref/prompt', name: 'completable-prompt' };
  const argument = { name: 'department', value: 'E' };
  assert.deepEqual(await hosted.complete({ ref, argument }), await direct.complete({ ref, argument }));
});

await step('sampling: the server asks the client through the relay, and hears its answer', async () => {
  const result = await hosted.callTool({ name: 'trigger-sampling-request', arguments: { prompt: 'hello', maxTokens: 10 } });
  assert.equal(hosted.asked.sampling, 1);
  assert.match(JSON.stringify(result), /sampled through the relay/);
});

await step('elicitation: the server asks the client through the relay, and hears its answer', async () => {
  const result = await hosted.callTool({ name: 'trigger-elicitation-request', arguments: {} });
  assert.equal(hosted.asked.elicitation, 1);
  assert.match(JSON.stringify(result), /accept/);
});

await step('roots: the server asks for the client roots during a call, and lists them', async () => {
  const result = await hosted.callTool({ name: 'get-roots-list', arguments: {} });
  assert.ok(hosted.asked.roots >= 1);
  assert.match(JSON.stringify(result), /relay-root/);
});

await step('progress: under the client token, in order, then the answer', async () => {
  const seen = [];
  const result = await hosted.callTool(
    { name: 'trigger-long-running-operation', arguments: { duration: 1, steps: 3 } },
    undefined,
    { onprogress: (p) => seen.push(p.progress) },
  );
  assert.equal(seen.length, 3, JSON.stringify(seen));
  assert.deepEqual(seen, [...seen].sort((a, b) => a - b));
  assert.match(JSON.stringify(result), /completed/i);
});

await step('cancellation: an aborted call ends, and the session goes on', async () => {
  const controller = new AbortController();
  const call = hosted.callTool(
    { name: 'trigger-long-running-operation', arguments: { duration: 20, steps: 20 } },
    undefined,
    { signal: controller.signal, onprogress: () => controller.abort('enough') },
  );
  await assert.rejects(call);
  const echo = await hosted.callTool({ name: 'echo', arguments: { message: 'after the cancel' } });
  assert.match(JSON.stringify(echo), /after the cancel/);
});

await step('subscription: resources/updated reaches the client on its GET stream', async () => {
  const { resources } = await direct.listResources();
  const uri = resources[0].uri;
  await hosted.subscribeResource({ uri });
  await hosted.callTool({ name: 'toggle-subscriber-updates', arguments: {} });
  const deadline = Date.now() + 15000;
  while (!hosted.updates.includes(uri) && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.ok(hosted.updates.includes(uri), `no update for ${uri}: ${JSON.stringify(hosted.updates)}`);
  await hosted.callTool({ name: 'toggle-subscriber-updates', arguments: {} });
  await hosted.unsubscribeResource({ uri });
});

await step('environment: what the configuration gives, nothing of the node own', async () => {
  const result = await hosted.callTool({ name: 'get-env', arguments: {} });
  const text = result.content.map((c) => c.text ?? '').join('');
  const env = JSON.parse(text);
  assert.equal(env.RELAY_GIVEN, 'given');
  assert.equal(env.RELAY_NODE_SECRET, undefined, 'a variable of the node reached the child');
  for (const key of Object.keys(env)) {
    assert.ok(!key.startsWith('MCP_'), `the node variable ${key} reached the child`);
  }
});

await step('close both', async () => {
  await hosted.close();
  await direct.close();
});

console.log(`${passed} passed, 0 failed`);
