#!/usr/bin/env node
// @modelcontextprotocol/server-everything (npm, pinned in package.json) hosted
// by a node (`[[upstreams]]`), driven by an official TypeScript SDK client,
// and compared with the same server run directly over stdio: every
// deterministic tool, resource and prompt answers the same; questions
// (sampling, elicitation, roots), progress, cancellation and a resource
// subscription cross the relay; the child's environment holds what the
// configuration gives it and nothing of the node's own.
//
//   node tests/js/relay-everything.mjs URL [--era session|2026-07-28]
//
// `session` (the default): the SDK v1 client (`initialize`; one child per
// session), and a call's stream cut after its first progress, which the SDK
// resumes with `Last-Event-ID` (through a load balancer, on whichever node it
// picks). `2026-07-28`: the SDK v2 client pinned to that revision (no
// session; calls on pooled children, questions as `input_required` rounds,
// the subscription a `subscriptions/listen` stream), compared without what
// that revision adds to every result (the node's serverInfo in `_meta`, a
// list's caching hints, `resultType`; and a tool's session-era
// `execution`, which the v2 client does not keep).
//
// The node must host this package's server (tests/run-all.sh writes the
// configuration) with `env = { RELAY_GIVEN = "given" }`, and run with
// RELAY_NODE_SECRET set in its own environment. Prints `ok - <step>` per step
// and a final `N passed, M failed` line; exits 1 on the first failure.

import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

import { Client as ClientV2, StreamableHTTPClientTransport as HttpTransportV2 } from '@modelcontextprotocol/client';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
  ResourceUpdatedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';

const MODERN = '2026-07-28';
const [url, flag, eraArg] = process.argv.slice(2);
const era = eraArg ?? 'session';
if (!url || (flag !== undefined && (flag !== '--era' || !['session', MODERN].includes(era)))) {
  console.error(`usage: node relay-everything.mjs http://127.0.0.1:PORT/mcp [--era session|${MODERN}]`);
  process.exit(2);
}
const modern = era === MODERN;
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
    // What went over HTTP last, for the cause.
    for (const w of wire.slice(-8)) console.log(`# ${JSON.stringify(w)}`);
    console.log(`${passed} passed, 1 failed`);
    process.exit(1);
  }
}

/**
 * An answer as the server wrote it: without the wall-clock times the server
 * writes into some of them ("created at 1:13:00 PM": the direct call and the
 * relayed one can fall on either side of a second), and, in 2026-07-28,
 * without what that revision adds to every result.
 */
function asWritten(value) {
  const clock = /\b\d{1,2}:\d{2}:\d{2}(\s?[AP]M)?\b|\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z/g;
  const out = JSON.parse(JSON.stringify(value ?? null).replace(clock, '<time>'));
  if (modern && out && typeof out === 'object') {
    const { 'io.modelcontextprotocol/serverInfo': _, ...meta } = out._meta ?? {};
    delete out._meta;
    if (Object.keys(meta).length) out._meta = meta;
    for (const field of ['resultType', 'ttlMs', 'cacheScope']) delete out[field];
    // The v2 client keeps no session-era `execution.taskSupport` on a tool.
    for (const tool of out.tools ?? []) delete tool.execution;
  }
  return out;
}

function assertSameAnswer(got, want) {
  assert.deepEqual(asWritten(got), asWritten(want));
}

/** How the test client answers each question, counted on `client.asked`. */
function answering(client) {
  client.asked = { sampling: 0, elicitation: 0, roots: 0 };
  client.updates = [];
  return {
    sampling: async () => {
      client.asked.sampling += 1;
      return { role: 'assistant', model: 'relay-test', content: { type: 'text', text: 'sampled through the relay' } };
    },
    elicitation: async (request) => {
      client.asked.elicitation += 1;
      const content = {};
      for (const [key, schema] of Object.entries(request.params.requestedSchema?.properties ?? {})) {
        if (schema.type === 'string') content[key] = schema.enum?.[0] ?? 'relay';
        else if (schema.type === 'number' || schema.type === 'integer') content[key] = 7;
        else if (schema.type === 'boolean') content[key] = true;
      }
      return { action: 'accept', content };
    },
    roots: async () => {
      client.asked.roots += 1;
      return { roots: [{ uri: 'file:///srv/relay-root', name: 'relay root' }] };
    },
    updated: (n) => client.updates.push(n.params.uri),
  };
}

const CAPABILITIES = { sampling: {}, elicitation: {}, roots: { listChanged: true } };

/** An SDK v1 client that answers every question the same way, and counts them. */
function makeClient(name) {
  const client = new Client({ name, version: '1.0.0' }, { capabilities: CAPABILITIES });
  const answer = answering(client);
  client.setRequestHandler(CreateMessageRequestSchema, answer.sampling);
  client.setRequestHandler(ElicitRequestSchema, answer.elicitation);
  client.setRequestHandler(ListRootsRequestSchema, answer.roots);
  client.setNotificationHandler(ResourceUpdatedNotificationSchema, answer.updated);
  return client;
}

/** The same, on the SDK v2 client pinned to 2026-07-28. */
function makeModernClient(name) {
  const client = new ClientV2(
    { name, version: '1.0.0' },
    { capabilities: CAPABILITIES, versionNegotiation: { mode: { pin: MODERN } } },
  );
  const answer = answering(client);
  client.setRequestHandler('sampling/createMessage', answer.sampling);
  client.setRequestHandler('elicitation/create', answer.elicitation);
  client.setRequestHandler('roots/list', answer.roots);
  client.setNotificationHandler('notifications/resources/updated', answer.updated);
  return client;
}

/** `tools/call` on `client` with these request options (v1 takes a result schema first). */
function callTool(client, params, options) {
  return modern ? client.callTool(params, options) : client.callTool(params, undefined, options);
}

/**
 * A fetch that cuts the next SSE response of a `tools/call` once a progress
 * notification came through it, as a dropped connection would (what came
 * before the cut reaches the client), and records each request's method and
 * Last-Event-ID.
 */
const wire = [];
let cutNextCall = false;
async function cuttingFetch(input, init = {}) {
  const body = typeof init.body === 'string' ? init.body : '';
  const headers = new Headers(init.headers);
  const sent = {
    method: init.method ?? 'GET',
    rpc: body.match(/"method":"([^"]+)"/)?.[1],
    id: body.match(/"id":([^,}]+)/)?.[1],
    lastEventId: headers.get('last-event-id'),
    at: new Date().toISOString(),
  };
  wire.push(sent);
  const response = await fetch(input, init);
  sent.status = response.status;
  const sse = response.headers.get('content-type')?.startsWith('text/event-stream');
  if (!cutNextCall || !sse || !body.includes('"tools/call"')) return response;
  cutNextCall = false;
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let seen = '';
  const cut = new ReadableStream({
    async pull(controller) {
      const { done, value } = await reader.read();
      if (done) return controller.close();
      controller.enqueue(value);
      seen += decoder.decode(value, { stream: true });
      // Whole events only: the cut falls after a blank line.
      if (seen.includes('notifications/progress') && seen.endsWith('\n\n')) {
        await reader.cancel();
        controller.error(new TypeError('the connection was cut'));
      }
    },
  });
  return new Response(cut, { status: response.status, statusText: response.statusText, headers: response.headers });
}

const direct = makeClient('direct');
const hosted = modern ? makeModernClient('hosted') : makeClient('hosted');

await step(`connect to the server directly (stdio) and through the node (${era})`, async () => {
  await direct.connect(new StdioClientTransport({ command: process.execPath, args: [SERVER, 'stdio'], stderr: 'ignore' }));
  const Transport = modern ? HttpTransportV2 : StreamableHTTPClientTransport;
  await hosted.connect(new Transport(new URL(url), { fetch: cuttingFetch }));
  if (modern) {
    assert.equal(hosted.getNegotiatedProtocolVersion(), MODERN);
    assert.ok(!wire.some((w) => w.rpc === 'initialize'), JSON.stringify(wire));
  } else {
    assert.ok(wire.some((w) => w.rpc === 'initialize'), JSON.stringify(wire));
  }
});

await step(`${modern ? 'server/discover' : 'initialize'}: the hosted server is the server itself (name, version, capabilities, instructions)`, async () => {
  assert.deepEqual(hosted.getServerVersion(), direct.getServerVersion());
  if (modern) {
    // 2026-07-28: tasks are the node's extension (run for the tools the
    // operator names), not the session-era `tasks` capability the server
    // declares to its own clients.
    const { extensions, ...capabilities } = hosted.getServerCapabilities();
    const { tasks, ...served } = direct.getServerCapabilities();
    assert.deepEqual(capabilities, served);
    assert.ok(extensions?.['io.modelcontextprotocol/tasks'], JSON.stringify(extensions));
  } else {
    assert.deepEqual(hosted.getServerCapabilities(), direct.getServerCapabilities());
  }
  assert.equal(hosted.getInstructions(), direct.getInstructions());
});

await step('tools/list, resources/list, resources/templates/list, prompts/list: the same', async () => {
  assertSameAnswer(await hosted.listTools(), await direct.listTools());
  assertSameAnswer(await hosted.listResources(), await direct.listResources());
  assertSameAnswer(await hosted.listResourceTemplates(), await direct.listResourceTemplates());
  assertSameAnswer(await hosted.listPrompts(), await direct.listPrompts());
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
    const got = await callTool(hosted, { name, arguments: args });
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
    assertSameAnswer(await hosted.getPrompt({ name, arguments: args }), await direct.getPrompt({ name, arguments: args }));
  }
  const ref = { type: 'ref/prompt', name: 'completable-prompt' };
  const argument = { name: 'department', value: 'E' };
  assertSameAnswer(await hosted.complete({ ref, argument }), await direct.complete({ ref, argument }));
});

await step('sampling: the server asks the client through the relay, and hears its answer', async () => {
  const result = await callTool(hosted, { name: 'trigger-sampling-request', arguments: { prompt: 'hello', maxTokens: 10 } });
  assert.equal(hosted.asked.sampling, 1);
  assert.match(JSON.stringify(result), /sampled through the relay/);
});

await step('elicitation: the server asks the client through the relay, and hears its answer', async () => {
  const result = await callTool(hosted, { name: 'trigger-elicitation-request', arguments: {} });
  assert.equal(hosted.asked.elicitation, 1);
  assert.match(JSON.stringify(result), /accept/);
});

await step('roots: the server asks for the client roots during a call, and lists them', async () => {
  const result = await callTool(hosted, { name: 'get-roots-list', arguments: {} });
  assert.ok(hosted.asked.roots >= 1, JSON.stringify(result));
  assert.match(JSON.stringify(result), /relay-root/);
});

await step('progress: under the client token, in order, then the answer', async () => {
  const seen = [];
  const result = await callTool(
    hosted,
    { name: 'trigger-long-running-operation', arguments: { duration: 1, steps: 3 } },
    { onprogress: (p) => seen.push(p.progress) },
  );
  assert.equal(seen.length, 3, JSON.stringify(seen));
  assert.deepEqual(seen, [...seen].sort((a, b) => a - b));
  assert.match(JSON.stringify(result), /completed/i);
});

if (!modern) {
  await step('resumption: a call whose stream is cut after its first progress, resumed by the SDK with Last-Event-ID', async () => {
    const seen = [];
    const before = wire.length;
    cutNextCall = true;
    const result = await callTool(
      hosted,
      { name: 'trigger-long-running-operation', arguments: { duration: 2, steps: 4 } },
      { onprogress: (p) => seen.push(p.progress) },
    );
    assert.equal(cutNextCall, false, 'the stream was not cut');
    assert.match(JSON.stringify(result), /completed/i);
    assert.deepEqual(seen, [1, 2, 3, 4], 'every progress, once, in order');
    const resumed = wire.slice(before).filter((w) => w.method === 'GET' && w.lastEventId);
    assert.ok(resumed.length >= 1, `no GET with Last-Event-ID: ${JSON.stringify(wire.slice(before))}`);
  });
}

await step('cancellation: an aborted call ends, and the next call is served', async () => {
  const controller = new AbortController();
  const call = callTool(
    hosted,
    { name: 'trigger-long-running-operation', arguments: { duration: 20, steps: 20 } },
    { signal: controller.signal, onprogress: () => controller.abort('enough') },
  );
  await assert.rejects(call);
  const echo = await callTool(hosted, { name: 'echo', arguments: { message: 'after the cancel' } });
  assert.match(JSON.stringify(echo), /after the cancel/);
});

if (modern) {
  // server-everything's updates come from a timer in the process a tool
  // call turned on, and each 2026-07-28 request may run on another child:
  // the listen stream's own child (the one subscribed) is acknowledged.
  await step('subscription: subscriptions/listen acknowledges the resource, subscribed by a child of the stream', async () => {
    const { resources } = await direct.listResources();
    const uri = resources[0].uri;
    const subscription = await hosted.listen({ resourceSubscriptions: [uri] });
    const ack = JSON.stringify(subscription.acknowledged ?? subscription.ack ?? subscription);
    assert.ok(ack.includes(uri), ack);
    await subscription.close();
  });
} else await step('subscription: resources/updated reaches the client on its GET stream', async () => {
  const { resources } = await direct.listResources();
  const uri = resources[0].uri;
  await hosted.subscribeResource({ uri });
  await callTool(hosted, { name: 'toggle-subscriber-updates', arguments: {} });
  const deadline = Date.now() + 15000;
  while (!hosted.updates.includes(uri) && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.ok(hosted.updates.includes(uri), `no update for ${uri}: ${JSON.stringify(hosted.updates)}`);
  await callTool(hosted, { name: 'toggle-subscriber-updates', arguments: {} });
  await hosted.unsubscribeResource({ uri });
});

await step('environment: what the configuration gives, nothing of the node own', async () => {
  const result = await callTool(hosted, { name: 'get-env', arguments: {} });
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
