#!/usr/bin/env node
// The official TypeScript SDK clients against one of the example programs
// (examples/src/bin/), started by tests/tests/examples.rs as a 3-node cluster
// behind nginx. Every example is called in both protocol eras:
//
// * session (2025-11-25): `@modelcontextprotocol/sdk` (v1), initialize,
//   Mcp-Session-Id, the server asks on the call's stream;
// * 2026-07-28 (stateless): `@modelcontextprotocol/client` (v2) pinned to
//   2026-07-28 (`server/discover`, no session, input_required rounds).
//
//   node tests/js/examples-e2e.mjs greeter  URL
//   node tests/js/examples-e2e.mjs stateful URL
//   node tests/js/examples-e2e.mjs long_job URL
//   node tests/js/examples-e2e.mjs guarded  URL PLAIN_TOKEN AUDIT_TOKEN
//
// Prints `ok - <era>: <step>` or `not ok - <era>: <step>: <reason>` for each
// step (every step runs, also after a failure) and `N passed, M failed` at the
// end; exits 1 if any failed. E2E_STEP_TIMEOUT_MS (default 30000) bounds each
// step, E2E_RUN_TIMEOUT_MS (default 120000) the whole run.

import { Client as ClientV1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as TransportV1 } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { Client as ClientV2, StreamableHTTPClientTransport as TransportV2 } from '@modelcontextprotocol/client';

const MODERN = '2026-07-28';
const [example, url, ...rest] = process.argv.slice(2);
const EXAMPLES = ['greeter', 'stateful', 'long_job', 'guarded'];
if (!EXAMPLES.includes(example) || !url || (example === 'guarded' && rest.length !== 2)) {
  console.error(`usage: node examples-e2e.mjs ${EXAMPLES.join('|')} URL [PLAIN_TOKEN AUDIT_TOKEN]`);
  process.exit(2);
}
const STEP_TIMEOUT_MS = Number(process.env.E2E_STEP_TIMEOUT_MS ?? 30000);
const RUN_TIMEOUT_MS = Number(process.env.E2E_RUN_TIMEOUT_MS ?? 120000);
setTimeout(() => {
  console.log(`not ok - ${example}: the run still goes on after ${RUN_TIMEOUT_MS} ms`);
  process.exit(1);
}, RUN_TIMEOUT_MS).unref();

let passed = 0;
let failed = 0;
async function step(name, fn) {
  let timer;
  try {
    await Promise.race([
      fn(),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`timed out after ${STEP_TIMEOUT_MS} ms`)), STEP_TIMEOUT_MS);
      }),
    ]);
    passed += 1;
    console.log(`ok - ${name}`);
  } catch (e) {
    failed += 1;
    console.log(`not ok - ${name}: ${e?.stack ?? e}`);
  } finally {
    clearTimeout(timer);
  }
}

function assert(cond, message) {
  if (!cond) throw new Error(message);
}
const show = (value) => JSON.stringify(value);
// JSON with object keys sorted: equal values, equal text.
const canonical = (value) =>
  JSON.stringify(value, (_, v) =>
    v && typeof v === 'object' && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : v,
  );
const same = (a, b) => canonical(a) === canonical(b);
// The v2 SDK reports its own input_required rounds through onprogress
// ("Fulfilling input required by 'tools/call' (round 1)"); only the server's
// notifications count here.
const fromServer = (p) => !/^Fulfilling input required/.test(p.message ?? '');
const text = (result) => result?.content?.find((c) => c.type === 'text')?.text;

// Waits until `cond()` holds (the step's timeout bounds the wait).
async function until(cond) {
  while (!cond()) await new Promise((resolve) => setTimeout(resolve, 20));
}

// A fetch that records each exchange: HTTP method, the JSON-RPC methods of
// its body, and the HTTP status once it came.
function recordingFetch(wire) {
  return async (input, init = {}) => {
    let rpc = [];
    try {
      const body = JSON.parse(init.body);
      rpc = (Array.isArray(body) ? body : [body]).map((m) => m.method).filter(Boolean);
    } catch {
      // not a JSON body (GET, DELETE)
    }
    const entry = { method: init.method ?? 'GET', rpc, status: undefined };
    wire.push(entry);
    const res = await fetch(input, init);
    entry.status = res.status;
    return res;
  };
}

// One era's client behind one interface. `answer` is the elicitation handler's
// next answer (a function of the request's params), `asked` counts the
// questions the server put.
async function connect(era, headers = {}) {
  const info = { name: `examples-e2e-${era}`, version: '1.0.0' };
  const requestInit = { headers };
  const state = { asked: 0, answer: () => ({ action: 'decline' }) };
  const wire = [];
  const fetch = recordingFetch(wire);
  const onElicit = async (request) => {
    state.asked += 1;
    return state.answer(request.params);
  };
  let client;
  let transport;
  let call;
  if (era === 'session') {
    client = new ClientV1(info, { capabilities: { elicitation: {} } });
    client.setRequestHandler(ElicitRequestSchema, onElicit);
    transport = new TransportV1(new URL(url), { requestInit, fetch });
    await client.connect(transport);
    assert(transport.sessionId, 'no Mcp-Session-Id: not the session era');
    call = (params, options) => client.callTool(params, undefined, options);
  } else {
    client = new ClientV2(info, {
      capabilities: { elicitation: { form: {} } },
      versionNegotiation: { mode: { pin: MODERN } },
    });
    client.setRequestHandler('elicitation/create', onElicit);
    transport = new TransportV2(new URL(url), { requestInit, fetch });
    await client.connect(transport);
    const version = client.getNegotiatedProtocolVersion();
    assert(version === MODERN, `negotiated ${version}, not ${MODERN}`);
    assert(!transport.sessionId, `a session id in the stateless era: ${transport.sessionId}`);
    call = (params, options) => client.callTool(params, options);
  }
  return {
    era,
    state,
    wire,
    listTools: async () => (await client.listTools()).tools,
    call: (name, args, options = {}) => call({ name, arguments: args }, options),
    close: () => client.close(),
  };
}

const ERAS = ['session', MODERN];

async function greeter() {
  for (const era of ERAS) {
    const c = await connect(era);
    await step(`${era}: tools/list shows greet with its derived schema`, async () => {
      const tools = await c.listTools();
      assert(tools.length === 1 && tools[0].name === 'greet', show(tools));
      assert(show(tools[0].inputSchema.required) === '["name"]', show(tools[0].inputSchema));
    });
    await step(`${era}: greet answers, with progress on the call's stream`, async () => {
      const progress = [];
      const result = await c.call('greet', { name: 'Ann' }, { onprogress: (p) => fromServer(p) && progress.push(p) });
      assert(text(result) === 'Hello, Ann!' && !result.isError, show(result));
      assert(progress.length === 1 && progress[0].progress === 1, `progress: ${show(progress)}`);
    });
    await step(`${era}: arguments are checked against the schema before the handler`, async () => {
      const result = await c.call('greet', {});
      assert(result.isError === true, show(result));
    });
    await c.close();
  }
}

async function stateful() {
  for (const era of ERAS) {
    const c = await connect(era);
    await step(`${era}: tools/list shows increment, count and forecast with output schemas`, async () => {
      const tools = await c.listTools();
      const names = tools.map((t) => t.name).sort();
      assert(show(names) === show(['count', 'forecast', 'increment']), show(names));
      assert(tools.every((t) => t.outputSchema?.type === 'object'), show(tools));
    });
    // Round robin spreads these over the three nodes: the count lives in Redis.
    const counter = `visits-${era}`;
    await step(`${era}: six increments of ${counter} through the cluster count 1 to 6`, async () => {
      const values = [];
      for (let i = 0; i < 6; i++) {
        const result = await c.call('increment', { name: counter });
        assert(!result.isError, show(result));
        values.push(result.structuredContent.value);
      }
      assert(show(values) === show([1, 2, 3, 4, 5, 6]), show(values));
      const count = await c.call('count', { name: counter });
      assert(same(count.structuredContent, { name: counter, value: 6 }), show(count));
    });
    await step(`${era}: ten concurrent increments of shared by 5 each get ten different values`, async () => {
      const results = await Promise.all(
        Array.from({ length: 10 }, () => c.call('increment', { name: 'shared', by: 5 })),
      );
      const values = results.map((r) => r.structuredContent?.value);
      assert(new Set(values).size === 10 && values.every((v) => v % 5 === 0), show(results));
    });
    await step(`${era}: forecast passes on what the HTTP API answers`, async () => {
      const result = await c.call('forecast', { city: 'Paris' });
      assert(!result.isError, show(result));
      const expected = { city: 'Paris', temperature_c: 21.5, summary: 'Sunny' };
      assert(same(result.structuredContent, expected), show(result));
    });
    await step(`${era}: forecast of a city the API does not know is a tool error naming its 404`, async () => {
      const result = await c.call('forecast', { city: 'Atlantis' });
      assert(result.isError === true && /404/.test(text(result)), show(result));
    });
    await c.close();
  }
}

async function longJob() {
  for (const era of ERAS) {
    const c = await connect(era);
    await step(`${era}: process_batch asks for a name once, reports every item, uses the name`, async () => {
      const label = `nightly-${era}`;
      c.state.asked = 0;
      c.state.answer = (params) => {
        assert(/Process 4 items\?/.test(params.message), show(params));
        return { action: 'accept', content: { label } };
      };
      const progress = [];
      const result = await c.call('process_batch', { items: 4, item_ms: 50 }, {
        onprogress: (p) => fromServer(p) && progress.push(p),
      });
      assert(text(result) === `Batch ${label}: 4 items processed.` && !result.isError, show(result));
      assert(c.state.asked === 1, `asked ${c.state.asked} times`);
      assert(show(progress.map((p) => [p.progress, p.total])) === show([[1, 4], [2, 4], [3, 4], [4, 4]]), show(progress));
      assert(progress[3].message === `${label}: item 4 of 4 done`, show(progress));
    });
    await step(`${era}: declining the question leaves the batch unstarted`, async () => {
      c.state.answer = () => ({ action: 'decline' });
      const progress = [];
      const result = await c.call('process_batch', { items: 4, item_ms: 50 }, {
        onprogress: (p) => fromServer(p) && progress.push(p),
      });
      assert(text(result) === 'Batch not started: the user chose decline.', show(result));
      assert(progress.length === 0, show(progress));
    });
    await step(`${era}: a cancelled batch stops (the test reads the node's log for cancel-${era})`, async () => {
      c.state.answer = () => ({ action: 'accept', content: { label: `cancel-${era}` } });
      const abort = new AbortController();
      const progress = [];
      let rejected;
      try {
        await c.call(
          'process_batch',
          { items: 50, item_ms: 100 },
          {
            signal: abort.signal,
            onprogress: (p) => {
              if (!fromServer(p)) return;
              progress.push(p);
              if (progress.length === 2) abort.abort('examples-e2e cancel');
            },
          },
        );
      } catch (e) {
        rejected = e;
      }
      assert(rejected, 'the cancelled call resolved');
      assert(progress.length >= 2 && progress.length < 50, show(progress));
      if (era === 'session') {
        // The SDK sends notifications/cancelled on abort (the 2026-07-28
        // client closes the call's stream instead): it must reach the
        // cluster before this client closes.
        await until(() => c.wire.some((e) => e.rpc.includes('notifications/cancelled') && e.status !== undefined));
        const sent = c.wire.find((e) => e.rpc.includes('notifications/cancelled'));
        assert(sent.status === 202, `notifications/cancelled answered ${sent.status}`);
      }
    });
    await c.close();
  }
}

async function guarded() {
  const [plain, audit] = rest;
  for (const era of ERAS) {
    const reader = await connect(era, { Authorization: `Bearer ${plain}` });
    await step(`${era}: whoami sees the token's subject and scopes`, async () => {
      const result = await reader.call('whoami', {});
      assert(same(result.structuredContent, { subject: 'reader', scopes: ['notes:read'] }), show(result));
    });
    await step(`${era}: audit_log without audit:read is refused with 403 insufficient_scope`, async () => {
      let error;
      try {
        await reader.call('audit_log', {});
      } catch (e) {
        error = e;
      }
      assert(error, 'audit_log answered a token without the scope');
      const said = `${error?.code} ${error?.message}`;
      assert(/403|insufficient.scope|Forbidden/i.test(said), `not a 403: ${said}`);
      assert(/audit:read/.test(said), `the refusal does not name the scope: ${said}`);
    });
    await reader.close();
    const auditor = await connect(era, { Authorization: `Bearer ${audit}` });
    await step(`${era}: audit_log with audit:read answers`, async () => {
      const result = await auditor.call('audit_log', {});
      assert(!result.isError && /read by auditor/.test(text(result)), show(result));
    });
    await auditor.close();
  }
}

const RUN = { greeter, stateful, long_job: longJob, guarded };
try {
  await RUN[example]();
} catch (e) {
  failed += 1;
  console.log(`not ok - ${example}: ${e?.stack ?? e}`);
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
