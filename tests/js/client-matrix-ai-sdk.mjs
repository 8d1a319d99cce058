#!/usr/bin/env node
// Client matrix, Vercel AI SDK: `createMCPClient` (`@ai-sdk/mcp`) over its
// Streamable HTTP transport (`transport: { type: 'http' }`), and the tools it
// makes handed to `generateText` (`ai`) driven by a scripted mock model from
// `ai/test` (no network, no provider).
//
//   node tests/js/client-matrix-ai-sdk.mjs URL                  # default: probes server/discover at 2026-07-28
//   node tests/js/client-matrix-ai-sdk.mjs URL --discovery off  # protocolVersionDiscovery: false: initialize
//
// The SDK's default (`protocolVersionDiscovery` true) probes `server/discover`
// and falls back to `initialize` only when the probe fails without a modern
// error; against this node it settles on 2026-07-28.
//
// The checks: connect; `tools()` walks every page of tools/list (the node runs
// with --page-size 2 in the matrix) and sees the built-ins; `generateText`
// whose first step calls echo {message:"hi"} and add {a:2,b:3} over MCP and
// whose second step records the prompt, to see what reaches the model as the
// tool results: with the default ('automatic') schemas the SDK hands the model
// the result's `content` (text parts), not `structuredContent`; with add's
// outputSchema declared (`tools({ schemas })`) it hands the model
// `structuredContent` as JSON. The errors the client reports on its own
// (onUncaughtError) must be known ones. Then the era's end: in 2026-07-28 the
// wire rules (client-matrix-lib.mjs), in the session era DELETE and 404 after it.
// The era line is read off the HTTP exchanges recorded through the
// transport's `fetch` option.

import { createMCPClient } from '@ai-sdk/mcp';
import { generateText, isStepCount, jsonSchema } from 'ai';
import { MockLanguageModelV4 } from 'ai/test';
import {
  LISTS,
  MODERN,
  assert,
  eraFromWire,
  fmt,
  matrixChecker,
  modernWireViolations,
  pingEndedSession,
  recordingFetch,
  sleep,
} from './client-matrix-lib.mjs';

const [url, flag, value] = process.argv.slice(2);
if (!url || (flag !== undefined && (flag !== '--discovery' || value !== 'off'))) {
  console.error('usage: node client-matrix-ai-sdk.mjs http://127.0.0.1:PORT/mcp [--discovery off]');
  process.exit(2);
}
const discovery = flag === undefined;
const label = discovery ? 'ai-sdk' : 'ai-sdk-legacy';
const EXPECTED_TOOLS = LISTS.find((l) => l.kind === 'tools').expected;

const wire = [];
let sessionId;
const uncaught = [];
let client;
const { check, finish } = matrixChecker(label, wire);

/** A language-model usage record; the numbers do not matter to the SDK's tool loop. */
const USAGE = {
  inputTokens: { total: 10, noCache: 10, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 5, text: 5, reasoning: undefined },
};

/**
 * A mock model whose first step asks for `calls` (one tool call each) and
 * whose second step answers "done"; `model.doGenerateCalls[1].prompt` is what
 * the model was given after the tools ran.
 */
function scriptedModel(calls) {
  return new MockLanguageModelV4({
    doGenerate: [
      {
        content: calls.map(({ toolName, input }) => ({
          type: 'tool-call',
          toolCallId: `call-${toolName}`,
          toolName,
          input: JSON.stringify(input),
        })),
        finishReason: { unified: 'tool-calls', raw: 'tool_calls' },
        usage: USAGE,
        warnings: [],
      },
      {
        content: [{ type: 'text', text: 'done' }],
        finishReason: { unified: 'stop', raw: 'stop' },
        usage: USAGE,
        warnings: [],
      },
    ],
  });
}

/** Runs the scripted two steps; returns the tool-result parts of the second step's prompt, by tool name. */
async function runTools(tools, calls) {
  const model = scriptedModel(calls);
  const mark = wire.length;
  const result = await generateText({
    model,
    tools,
    prompt: 'Echo hi, then add 2 and 3.',
    stopWhen: isStepCount(2),
  });
  assert(model.doGenerateCalls.length === 2, `the model was called ${model.doGenerateCalls.length} time(s), expected 2`);
  assert(result.text === 'done', `final text ${fmt(result.text)}`);
  const sent = wire
    .slice(mark)
    .filter((w) => w.rpc === 'tools/call')
    .map((w) => `${w.target} ${w.status ?? w.error}`);
  for (const { toolName } of calls) {
    assert(sent.includes(`${toolName} 200`), `no tools/call ${toolName} answered 200 on the wire: ${fmt(sent)}`);
  }
  const parts = model.doGenerateCalls[1].prompt
    .filter((m) => m.role === 'tool')
    .flatMap((m) => m.content)
    .filter((p) => p.type === 'tool-result');
  const byName = Object.fromEntries(parts.map((p) => [p.toolName, p.output]));
  for (const { toolName } of calls) assert(byName[toolName], `no tool result for ${toolName} in the prompt: ${fmt(parts)}`);
  return { byName, sent };
}

// ---- connect ----

const connected = await check('connect', async () => {
  client = await createMCPClient({
    clientName: `client-matrix-${label}`,
    version: '1.0.0',
    transport: {
      type: 'http',
      url,
      fetch: recordingFetch(wire),
      onSessionIdChange: (id) => {
        if (id !== undefined) sessionId = id;
      },
    },
    ...(discovery ? {} : { protocolVersionDiscovery: false }),
    onUncaughtError: (err) => uncaught.push(err),
  });
  const version = client.initializeResult?.protocolVersion;
  const probe = wire.find((w) => w.rpc === 'server/discover');
  const how = `protocolVersionDiscovery ${discovery ? 'default (true)' : 'false'}${
    probe ? `; probe server/discover answered ${probe.status ?? probe.error}` : ''
  }`;
  const { era, detail } = eraFromWire(wire);
  if (version === MODERN) {
    assert(!sessionId, `2026-07-28 but a session id ${fmt(sessionId)}`);
    assert(era === MODERN, `the SDK says ${version}, the wire shows ${era} (${detail})`);
    return `protocol ${version}, no session, ${how}`;
  }
  assert(sessionId, `protocol ${version} but no Mcp-Session-Id`);
  assert(era === 'session', `the SDK says ${version}, the wire shows ${era} (${detail})`);
  return `protocol ${version}, session ${sessionId}, ${how}`;
});
if (!connected) finish();
const modern = client.initializeResult?.protocolVersion === MODERN;

// ---- tools() over every page ----

let definitions = [];
await check(`tools(): every page of tools/list, built-ins ${EXPECTED_TOOLS.join(', ')} present`, async () => {
  // The pages one by one, through the client's own listTools({ cursor }).
  const pageSizes = [];
  let cursor;
  do {
    assert(pageSizes.length < 100, 'more than 100 pages');
    const page = await client.listTools(cursor === undefined ? {} : { params: { cursor } });
    definitions.push(...page.tools);
    pageSizes.push(page.tools.length);
    assert(page.nextCursor !== cursor, `nextCursor ${fmt(cursor)} repeats`);
    cursor = page.nextCursor;
  } while (cursor !== undefined);
  const paged = definitions.map((t) => t.name);
  const dupes = paged.filter((n, i) => paged.indexOf(n) !== i);
  assert(dupes.length === 0, `duplicates across pages: ${fmt(dupes)}`);

  // What the framework builds for a model: its own walk.
  const mark = wire.length;
  const tools = await client.tools();
  const names = Object.keys(tools);
  const lists = wire.slice(mark).filter((w) => w.rpc === 'tools/list').length;
  const missing = EXPECTED_TOOLS.filter((n) => !names.includes(n));
  assert(missing.length === 0, `tools() is missing ${fmt(missing)}; it has ${fmt(names)} from ${lists} tools/list request(s)`);
  assert(
    fmt([...names].sort()) === fmt([...paged].sort()),
    `tools() has ${fmt(names)}, the pages have ${fmt(paged)}`,
  );
  assert(lists === pageSizes.length, `tools() sent ${lists} tools/list request(s) for ${pageSizes.length} page(s)`);
  return `${names.length} tools over ${pageSizes.length} page(s) ${fmt(pageSizes)}, tools() sent ${lists} tools/list`;
});

// ---- generateText with the default (automatic) schemas ----

let automatic;
const ECHO_TEXT = 'Echo: hi';
await check('generateText (tools() default schemas): step 1 calls echo and add over MCP, step 2 gets their results', async () => {
  const tools = await client.tools();
  automatic = await runTools(tools, [
    { toolName: 'echo', input: { message: 'hi' } },
    { toolName: 'add', input: { a: 2, b: 3 } },
  ]);
  return `tools/call ${automatic.sent.join(', ')}`;
});

await check(`echo {message:"hi"}: the model gets the text ${fmt(ECHO_TEXT)}`, async () => {
  assert(automatic, 'generateText did not run');
  const output = automatic.byName.echo;
  const want = { type: 'content', value: [{ type: 'text', text: ECHO_TEXT }] };
  assert(fmt(output) === fmt(want), `the model got ${fmt(output)}, expected ${fmt(want)}`);
  return fmt(output);
});

// The default schemas make every tool a dynamic tool whose output is the whole
// CallToolResult; its toModelOutput hands the model `content` and drops
// `structuredContent`. The node's text content for add is the JSON of its
// structured value (as the spec recommends), so the model sees {"sum":5} as text.
const ADD_AUTOMATIC =
  'add {a:2, b:3} (default schemas): the model gets the text content, the JSON of {sum:5}; structuredContent is not passed';
await check(ADD_AUTOMATIC, async () => {
  assert(automatic, 'generateText did not run');
  const output = automatic.byName.add;
  assert(output?.type === 'content', `the model got ${fmt(output)}, expected a content output`);
  assert(output.value.length === 1 && output.value[0].type === 'text', `the model got ${fmt(output)}, expected one text part`);
  let parsed;
  try {
    parsed = JSON.parse(output.value[0].text);
  } catch {
    parsed = undefined;
  }
  assert(fmt(parsed) === fmt({ sum: 5 }), `the text part ${fmt(output.value[0].text)} is not the JSON of {"sum":5}`);
  return fmt(output);
});

// ---- generateText with add's outputSchema declared ----

const ADD_DECLARED =
  "add {a:2, b:3} (tools({ schemas }) with the node's outputSchema): the model gets structuredContent {sum:5} as JSON";
await check(ADD_DECLARED, async () => {
  const def = definitions.find((t) => t.name === 'add');
  assert(def?.outputSchema, `add has no outputSchema in tools/list: ${fmt(def)}`);
  const tools = await client.tools({
    schemas: { add: { inputSchema: jsonSchema(def.inputSchema), outputSchema: jsonSchema(def.outputSchema) } },
  });
  assert(fmt(Object.keys(tools)) === fmt(['add']), `tools({ schemas }) gave ${fmt(Object.keys(tools))}`);
  const { byName } = await runTools(tools, [{ toolName: 'add', input: { a: 2, b: 3 } }]);
  const want = { type: 'json', value: { sum: 5 } };
  assert(fmt(byName.add) === fmt(want), `the model got ${fmt(byName.add)}, expected ${fmt(want)}`);
  return fmt(byName.add);
});

// ---- errors the client reported on its own ----

// The transport reports what goes wrong outside a request through
// onUncaughtError. Two are known and are the client's doing, not the node's:
// in the session era the transport opens its GET stream before `initialize`,
// without a session id, which the node answers 400 (2025-11-25: "Servers that
// require a session ID SHOULD respond to requests that do not include an
// Mcp-Session-Id header (other than initialization) with HTTP 400"), and it
// opens it again once it has the id; and it parses the empty `data:` of the
// event that primes an SSE stream for reconnection (2025-11-25: the server
// "SHOULD immediately send an SSE event consisting of an event ID and an empty
// data field") as a JSON-RPC message. Anything else fails the check.
const KNOWN_CLIENT_ERRORS = [
  {
    what: 'GET before initialize answered 400',
    is: (err) =>
      /GET SSE failed: 400\b/.test(err?.message ?? '') &&
      wire.some((w) => w.method === 'GET' && !w.sentSession && w.status === 400),
  },
  {
    what: 'empty-data priming event parsed as JSON',
    is: (err) =>
      /Failed to parse message/.test(err?.message ?? '') && err?.cause?.name === 'AI_JSONParseError' && err.cause.text === '',
  },
];
await check('errors the client reported (onUncaughtError): only the known ones', async () => {
  const counts = KNOWN_CLIENT_ERRORS.map(() => 0);
  const unknown = [];
  for (const err of uncaught) {
    const i = KNOWN_CLIENT_ERRORS.findIndex((k) => k.is(err));
    if (i === -1) unknown.push(`${err?.message ?? err}${err?.cause ? ` (cause: ${err.cause?.message ?? err.cause})` : ''}`);
    else counts[i]++;
  }
  assert(unknown.length === 0, `${unknown.length} unexpected: ${unknown.slice(0, 4).join('; ')}`);
  const seen = KNOWN_CLIENT_ERRORS.map((k, i) => (counts[i] ? `${counts[i]}x ${k.what}` : '')).filter(Boolean);
  return seen.length ? seen.join(', ') : 'none';
});

// ---- the era's end ----

if (modern) {
  await client.close().catch(() => {});
  await sleep(200); // whatever the client sends while closing
  const wireCheck =
    '2026-07-28 on the wire: no session id, no GET, no DELETE, ' +
    'MCP-Protocol-Version on every POST, Mcp-Method (and Mcp-Name) on every request';
  await check(wireCheck, async () => {
    const { era, detail } = eraFromWire(wire);
    assert(era === MODERN, `the wire shows era ${era} (${detail})`);
    const bad = modernWireViolations(wire);
    assert(bad.length === 0, `${bad.length} violation(s): ${bad.slice(0, 6).join('; ')}`);
    const posts = wire.filter((w) => w.method === 'POST');
    const named = posts.filter((w) => w.mcpName !== undefined).length;
    return `${posts.length} POSTs, ${named} with Mcp-Name`;
  });
  finish();
}

await check('close(): DELETE 2xx, then the session id gets 404', async () => {
  const protocolVersion = client.initializeResult.protocolVersion;
  const mark = wire.length;
  await client.close();
  const del = wire.slice(mark).find((w) => w.method === 'DELETE');
  assert(del, 'the client sent no DELETE');
  assert(del.status >= 200 && del.status < 300, `DELETE answered ${del.status ?? del.error}`);
  const res = await pingEndedSession(url, sessionId, protocolVersion);
  assert(res.status === 404, `ping with the ended session id answered ${res.status}, expected 404`);
  const { era, detail } = eraFromWire(wire);
  assert(era === 'session', `the wire shows era ${era} (${detail})`);
  return `DELETE ${del.status}, then ${res.status}`;
});
finish();
