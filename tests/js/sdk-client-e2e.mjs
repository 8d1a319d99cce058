#!/usr/bin/env node
// End-to-end test of an MCP Streamable HTTP server using the official TypeScript
// SDK client (Client + StreamableHTTPClientTransport).
//
//   node tests/js/sdk-client-e2e.mjs http://127.0.0.1:PORT/mcp
//
// Prints `ok - <step>` per step and a final `N passed, M failed` line; exits 1 on
// the first failing step (later steps depend on earlier ones).
// Env: E2E_VERBOSE=1 dumps the wire log (every JSON-RPC message and HTTP status)
//      on failure and SDK transport errors as they happen.
//      E2E_STEP_TIMEOUT_MS (default 30000) bounds each step.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  CallToolResultSchema,
  CreateMessageRequestSchema,
  LATEST_PROTOCOL_VERSION,
} from '@modelcontextprotocol/sdk/types.js';
import { pingEndedSession } from './client-matrix-lib.mjs';

const url = process.argv[2];
if (!url) {
  console.error('usage: node sdk-client-e2e.mjs http://127.0.0.1:PORT/mcp');
  process.exit(2);
}
const VERBOSE = !!process.env.E2E_VERBOSE;
const STEP_TIMEOUT_MS = Number(process.env.E2E_STEP_TIMEOUT_MS ?? 30000);

// ---------------------------------------------------------------------------
// Instrumentation: a wire log of every JSON-RPC message in/out (per transport)
// and every HTTP exchange, so assertions do not depend on SDK internals.
// ---------------------------------------------------------------------------
const t0 = performance.now();
const now = () => performance.now() - t0;
/** @type {{t:number, tr:string, dir:'in'|'out'|'http', msg:any}[]} */
const wire = [];
const sdkErrors = [];

function loggingFetch(tr) {
  return async (input, init = {}) => {
    const method = init.method ?? 'GET';
    const hdrs = new Headers(init.headers);
    const entry = { t: now(), tr, dir: 'http', msg: { method, lastEventId: hdrs.get('last-event-id') ?? undefined } };
    wire.push(entry);
    try {
      const res = await fetch(input, init);
      entry.msg.status = res.status;
      entry.msg.contentType = res.headers.get('content-type') ?? undefined;
      return res;
    } catch (e) {
      entry.msg.error = String(e?.message ?? e);
      throw e;
    }
  };
}

function makeTransport(name, opts = {}) {
  const transport = new StreamableHTTPClientTransport(new URL(url), { fetch: loggingFetch(name), ...opts });
  // Protocol.connect() chains a pre-existing onmessage, so this sees every message.
  transport.onmessage = (msg) => wire.push({ t: now(), tr: name, dir: 'in', msg });
  const send = transport.send.bind(transport);
  transport.send = (msg, options) => {
    wire.push({ t: now(), tr: name, dir: 'out', msg });
    return send(msg, options);
  };
  return transport;
}

const isProgressFor = (token) => (e) =>
  e.dir === 'in' && e.msg.method === 'notifications/progress' && e.msg.params?.progressToken === token;
const isResponseTo = (id) => (e) =>
  e.dir === 'in' && e.msg.id === id && (e.msg.result !== undefined || e.msg.error !== undefined);

/** The last outgoing tools/call for `toolName` (its id is also its progress token). */
function lastOutgoingCall(toolName) {
  const e = [...wire].reverse().find(
    (x) => x.dir === 'out' && x.msg.method === 'tools/call' && x.msg.params?.name === toolName,
  );
  if (!e) throw new Error(`no outgoing tools/call ${toolName} in wire log`);
  return e.msg;
}

function assert(cond, message) {
  if (!cond) throw new Error(message);
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
/** Poll `pred` every 20 ms; resolves with its first truthy value (never rejects). */
function waitFor(pred, ms) {
  let timer;
  let stop = false;
  const promise = new Promise((resolve) => {
    const deadline = now() + ms;
    const tick = () => {
      if (stop || now() > deadline) return;
      const v = pred();
      if (v) resolve(v);
      else timer = setTimeout(tick, 20);
    };
    tick();
  });
  return { promise, cancel: () => { stop = true; clearTimeout(timer); } };
}
const textOf = (result) =>
  (result?.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');
const fmt = (v) => JSON.stringify(v);

function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([
    promise.finally(() => clearTimeout(timer)),
    new Promise((_, rej) => {
      timer = setTimeout(() => rej(new Error(`${what}: timed out after ${ms} ms`)), ms);
    }),
  ]);
}

let passed = 0;
async function step(name, fn) {
  try {
    const note = await withTimeout(Promise.resolve().then(fn), STEP_TIMEOUT_MS, name);
    passed++;
    console.log(`ok - ${name}${note ? ` (${note})` : ''}`);
  } catch (e) {
    console.log(`not ok - ${name}: ${e?.message ?? e}`);
    if (VERBOSE) {
      console.log('--- wire log (last 60 entries) ---');
      for (const w of wire.slice(-60)) console.log(`${w.t.toFixed(0).padStart(6)}ms ${w.tr} ${w.dir} ${fmt(w.msg)}`);
      if (sdkErrors.length) console.log('--- SDK errors ---\n' + sdkErrors.map(String).join('\n'));
    }
    console.log(`${passed} passed, 1 failed`);
    process.exit(1);
  }
}

// ---------------------------------------------------------------------------
const client = new Client(
  { name: 'sdk-client-e2e', version: '1.0.0' },
  { capabilities: { sampling: {} } },
);
client.onerror = (e) => {
  sdkErrors.push(e);
  if (VERBOSE) console.error(`[sdk onerror] ${e?.message ?? e}`);
};
const samplingRequests = [];
client.setRequestHandler(CreateMessageRequestSchema, async (request) => {
  samplingRequests.push(request.params);
  const first = request.params.messages?.[0]?.content;
  const blocks = Array.isArray(first) ? first : [first];
  const prompt = blocks.filter((b) => b?.type === 'text').map((b) => b.text).join('');
  return { role: 'assistant', content: { type: 'text', text: `pong:${prompt}` }, model: 'test-model' };
});

let transport = makeTransport('t1');
let sessionId;
let protocolVersion;

// a. initialize + initialized -----------------------------------------------
await step('a. connect: initialize + initialized, protocol version, capabilities', async () => {
  await client.connect(transport);
  sessionId = transport.sessionId;
  protocolVersion = transport.protocolVersion;
  assert(sessionId, 'server did not return an Mcp-Session-Id header');
  assert(
    protocolVersion === LATEST_PROTOCOL_VERSION,
    `negotiated protocol version ${protocolVersion}, expected the SDK's latest ${LATEST_PROTOCOL_VERSION}`,
  );
  const caps = client.getServerCapabilities() ?? {};
  const missing = ['tools', 'resources', 'prompts', 'logging'].filter((k) => !caps[k]);
  assert(missing.length === 0, `server capabilities lack ${missing.join(', ')}: ${fmt(caps)}`);
  const init = wire.find((w) => w.dir === 'http' && w.msg.method === 'POST');
  return `protocolVersion=${protocolVersion}, server=${fmt(client.getServerVersion())}, initialize response ${init?.msg.contentType}`;
});

// b. listings ---------------------------------------------------------------
await step('b. tools/list, prompts/list, resources/list', async () => {
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name);
  const missing = ['long_running_operation', 'test_sampling', 'echo'].filter((n) => !names.includes(n));
  assert(missing.length === 0, `tools/list lacks ${missing.join(', ')} (got ${names.join(', ')})`);
  const { prompts } = await client.listPrompts();
  assert(Array.isArray(prompts), 'prompts/list: prompts is not an array');
  const { resources } = await client.listResources();
  assert(Array.isArray(resources), 'resources/list: resources is not an array');
  return `${tools.length} tools, ${prompts.length} prompts, ${resources.length} resources`;
});

// c. progress ---------------------------------------------------------------
await step('c. long_running_operation {duration_ms:500, steps:5}: 5 increasing progress notifications before the result', async () => {
  const seen = [];
  const result = await client.callTool(
    { name: 'long_running_operation', arguments: { duration_ms: 500, steps: 5 } },
    CallToolResultSchema,
    { onprogress: (p) => seen.push(p) },
  );
  await sleep(200); // catch stragglers sent after the result
  const req = lastOutgoingCall('long_running_operation');
  const token = req.params._meta?.progressToken;
  assert(token !== undefined, 'SDK did not attach a progressToken (internal)');
  const idxResult = wire.findIndex(isResponseTo(req.id));
  const progress = wire.map((w, i) => [w, i]).filter(([w]) => isProgressFor(token)(w));
  const values = progress.map(([w]) => w.msg.params.progress);
  assert(progress.length === 5, `expected exactly 5 progress notifications, got ${progress.length}: ${fmt(values)}`);
  const late = progress.filter(([, i]) => i > idxResult);
  assert(late.length === 0, `${late.length} progress notification(s) arrived after the result`);
  assert(seen.length === 5, `onprogress called ${seen.length} times, expected 5`);
  for (let i = 1; i < values.length; i++) {
    assert(values[i] > values[i - 1], `progress not strictly increasing: ${fmt(values)}`);
  }
  assert(Array.isArray(result.content) && result.content.length > 0, `result has empty content: ${fmt(result)}`);
  return `progress ${fmt(values)}, total ${fmt(progress[0][0].msg.params.total)}`;
});

// d. sampling ---------------------------------------------------------------
await step('d. test_sampling {prompt:"hello"}: server asks the client via sampling/createMessage', async () => {
  const before = samplingRequests.length;
  const result = await client.callTool({ name: 'test_sampling', arguments: { prompt: 'hello' } });
  assert(samplingRequests.length === before + 1,
    `expected 1 sampling/createMessage request, got ${samplingRequests.length - before}`);
  const text = textOf(result);
  assert(text.includes('pong:hello'), `tool result does not contain "pong:hello": ${fmt(result.content)}`);
  return `result text ${fmt(text)}`;
});

// e. cancellation -----------------------------------------------------------
await step('e. cancellation: abort long_running_operation after 2nd progress; no more progress; session still usable', async () => {
  const ac = new AbortController();
  let count = 0;
  let tAbort;
  const call = client.callTool(
    { name: 'long_running_operation', arguments: { duration_ms: 5000, steps: 50 } },
    CallToolResultSchema,
    {
      signal: ac.signal,
      onprogress: () => {
        if (++count === 2) {
          tAbort = now();
          ac.abort('e2e-cancel');
        }
      },
    },
  );
  let rejected;
  try {
    await call;
  } catch (e) {
    rejected = e;
  }
  assert(rejected, 'the aborted tools/call resolved instead of rejecting');
  const req = lastOutgoingCall('long_running_operation');
  const cancelled = wire.find(
    (w) => w.dir === 'out' && w.msg.method === 'notifications/cancelled' && w.msg.params?.requestId === req.id,
  );
  assert(cancelled, `SDK did not send notifications/cancelled for request ${req.id}`);
  await sleep(800);
  const GRACE_MS = 250; // one in-flight notification may cross the cancel
  const progress = wire.filter(isProgressFor(req.params._meta.progressToken));
  const late = progress.filter((w) => w.t > tAbort + GRACE_MS);
  assert(late.length === 0,
    `${late.length} progress notification(s) arrived more than ${GRACE_MS} ms after cancellation ` +
    `(values ${fmt(late.map((w) => w.msg.params.progress))})`);
  const response = wire.find(isResponseTo(req.id));
  assert(!response, `server sent a response for the cancelled request: ${fmt(response?.msg)}`);
  const echo = await client.callTool({ name: 'echo', arguments: { message: 'after-cancel' } });
  assert(textOf(echo).includes('after-cancel'), `echo result lacks "after-cancel": ${fmt(echo.content)}`);
  return `rejected with ${fmt(rejected?.message)}; ${progress.length} progress total, none after cancel`;
});

// f. resumption of a dropped stream ------------------------------------------
await step('f. resume: drop the POST stream after 2 progress, resume via GET + Last-Event-ID', async () => {
  const STEPS = 6;
  let lastEventId;
  let count = 0;
  let dropped;
  const droppedP = new Promise((r) => (dropped = r));
  const first = client.callTool(
    { name: 'long_running_operation', arguments: { duration_ms: 1500, steps: STEPS } },
    CallToolResultSchema,
    {
      onresumptiontoken: (id) => (lastEventId = id),
      onprogress: () => {
        if (++count === 2) {
          // Drop the connection the way a network failure would: transport.close()
          // aborts the in-flight fetch; the Client sends no notifications/cancelled.
          void transport.close().then(dropped);
        }
      },
    },
  );
  const firstOutcome = first.then(() => 'resolved', (e) => e);
  await droppedP;
  const outcome = await firstOutcome;
  assert(outcome !== 'resolved', 'the first call resolved although its connection was dropped');
  const req = lastOutgoingCall('long_running_operation');
  const token = req.params._meta.progressToken;
  assert(lastEventId, 'no SSE event id seen on the POST stream (server must send id: lines to be resumable)');
  assert(!wire.some((w) => w.dir === 'out' && w.msg.method === 'notifications/cancelled' && w.msg.params?.requestId === req.id),
    'internal: a notifications/cancelled was sent for the dropped request');
  const resumeFrom = lastEventId;
  const beforeDrop = wire.filter(isProgressFor(token)).map((w) => w.msg.params.progress);

  // New transport on the same session; Client.connect() skips initialize when
  // the transport already has a sessionId.
  transport = makeTransport('t2', { sessionId });
  transport.setProtocolVersion(protocolVersion);
  await client.connect(transport);
  // Give the server a moment to notice the dropped connection, as a real
  // reconnect would; then resume. With resumptionToken the transport does not
  // POST the request: it opens GET + Last-Event-ID and maps the replayed
  // response onto this request's id. The SDK does not retry that GET when it
  // fails (e.g. the SDK's own server answers 409 while it still considers the
  // old stream live), so retry it here a few times. A failed attempt is left
  // pending, not aborted: aborting would send notifications/cancelled through
  // transport.send(..., {resumptionToken}), which opens yet another GET.
  await sleep(200);
  const resumedAt = wire.length;
  let result;
  let attempts = 0;
  const resumeNotes = [];
  while (!result) {
    attempts++;
    const mark = wire.length;
    const call = client.request(
      { method: 'tools/call', params: { name: 'long_running_operation', arguments: { duration_ms: 1500, steps: STEPS } } },
      CallToolResultSchema,
      { resumptionToken: resumeFrom, onresumptiontoken: (id) => (lastEventId = id), timeout: 600000 },
    );
    const failedGet = waitFor(() => wire.slice(mark).find(
      (w) => w.dir === 'http' && w.msg.method === 'GET' && (w.msg.error || (w.msg.status && w.msg.status >= 300))), 15000);
    const winner = await Promise.race([
      call.then((r) => ({ r })),
      failedGet.promise.then((g) => ({ g })),
      sleep(15000).then(() => ({ timeout: true })),
    ]);
    assert(!winner.timeout, `no result within 15 s after resuming with Last-Event-ID ${resumeFrom}`);
    failedGet.cancel();
    if (winner.r) {
      result = winner.r;
      break;
    }
    const g = winner.g.msg;
    resumeNotes.push(`GET ${g.status ?? g.error}`);
    call.catch(() => {}); // rejected with ConnectionClosed by client.close() at the end
    assert(attempts < 5 && g.status === 409,
      `resume GET with Last-Event-ID ${resumeFrom} failed: ${g.status ?? g.error} (attempts: ${resumeNotes.join(', ')})`);
    await sleep(300);
  }
  await sleep(100);
  const get = [...wire.slice(resumedAt)].reverse().find((w) => w.dir === 'http' && w.msg.method === 'GET');
  assert(get && get.msg.lastEventId === resumeFrom, `expected GET with Last-Event-ID ${resumeFrom}, saw ${fmt(get?.msg)}`);
  const afterResume = wire.slice(resumedAt).filter(isProgressFor(token)).map((w) => w.msg.params.progress);
  const all = [...beforeDrop, ...afterResume];
  const dupes = all.filter((v, i) => all.indexOf(v) !== i);
  assert(dupes.length === 0, `duplicate progress values ${fmt(dupes)} (before drop ${fmt(beforeDrop)}, after resume ${fmt(afterResume)})`);
  const missing = Array.from({ length: STEPS }, (_, i) => i + 1).filter((v) => !all.includes(v));
  assert(missing.length === 0 && all.length === STEPS,
    `progress values missing ${fmt(missing)} (before drop ${fmt(beforeDrop)}, after resume ${fmt(afterResume)})`);
  assert(Array.isArray(result.content) && result.content.length > 0, `resumed result has empty content: ${fmt(result)}`);
  const retried = resumeNotes.length ? `; retried after ${resumeNotes.join(', ')}` : '';
  return `before drop ${fmt(beforeDrop)}, after resume ${fmt(afterResume)}, GET ${get.msg.status}${retried}`;
});

// g. session termination ------------------------------------------------------
await step('g. terminateSession (DELETE), then the old session id gets HTTP 404', async () => {
  const mark = wire.length;
  await transport.terminateSession();
  const del = wire.slice(mark).find((w) => w.dir === 'http' && w.msg.method === 'DELETE');
  assert(del && del.msg.status >= 200 && del.msg.status < 300, `DELETE returned ${del?.msg.status}, expected 2xx`);
  const res = await pingEndedSession(url, sessionId, protocolVersion);
  assert(res.status === 404, `POST ping with terminated session id returned HTTP ${res.status} (expected 404): ${res.body.slice(0, 200)}`);
  await client.close();
  return `DELETE ${del.msg.status}, then ping ${res.status}`;
});

console.log(`${passed} passed, 0 failed`);
process.exit(0);
