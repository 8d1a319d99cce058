// The checks of the client matrix, shared by the TypeScript SDK v1 and v2
// clients (client-matrix-v1.mjs, client-matrix-v2.mjs). tests/py/client_matrix.py
// runs the same checks with the Python SDK; keep the three in step.
//
// The checks depend on the era the client negotiated:
//   session era (2024-11-05..2025-11-25): `initialize` opens a session
//     (Mcp-Session-Id); the run ends with DELETE, then the old id gets 404.
//   2026-07-28 (stateless): `server/discover` (or a pinned version), no
//     session; every POST carries MCP-Protocol-Version, every request
//     Mcp-Method (and Mcp-Name for tools/call, prompts/get, resources/read);
//     no GET, no DELETE; server-to-client requests come back as
//     `input_required` results answered by a retry; `subscriptions/listen`
//     carries list changes.
// The era is read off the HTTP exchanges the client made (eraFromWire) and
// must agree with what the SDK says it negotiated; the run prints it as
// `era: <session|2026-07-28> (...)`, which tests/client-matrix.sh compares
// with the era it expects of the client.
//
// A client script gives an adapter over its SDK:
//   connect()                    -> note string; initializes or negotiates
//   sessionId, protocolVersion   read after connect (protocolVersion: what the SDK negotiated)
//   listPage(kind, cursor)       -> { items, nextCursor } (one page; cursor undefined = first page)
//   listAll(kind)?               -> items; the SDK's own every-page walk, where it has one
//   callTool(name, args, onprogress?) -> CallToolResult (input_required rounds driven by the SDK)
//   getPrompt(name, args)        -> GetPromptResult
//   readResource(uri)            -> ReadResourceResult
//   asked                        { elicitation, sampling, roots }: how often each handler ran
//   listen(onToolsListChanged)?  -> { close() }; opens subscriptions/listen (2026-07-28 only)
//   terminate()                  ends the session (DELETE; session era)
//   close()                      closes the client
//   errorCode(err)               the JSON-RPC code of a rejected request, or undefined
// and runMatrix() prints `ok - <check>` / `not ok - <check>: <reason>` lines,
// the era line and `N passed, M failed`, then exits 1 if any check failed.

export const MODERN = '2026-07-28';

/** The lists every client walks, with the field that identifies an item. */
export const LISTS = [
  { kind: 'tools', method: 'tools/list', key: 'name', expected: ['echo', 'add', 'long_running_operation'] },
  { kind: 'resources', method: 'resources/list', key: 'uri', expected: ['test://static-text'] },
  {
    kind: 'resourceTemplates',
    method: 'resources/templates/list',
    key: 'uriTemplate',
    expected: ['test://template/{id}/data'],
  },
  { kind: 'prompts', method: 'prompts/list', key: 'name', expected: ['test_simple_prompt'] },
];

/**
 * The built-in tools that ask the client for input, what the client's handler
 * answers, and the tool's text with that answer. In the session era the server
 * asks with a request on the call's stream; in 2026-07-28 with an
 * `input_required` result that the client answers by retrying the call.
 */
export const ANSWERS = {
  elicitation: { action: 'accept', content: { name: 'Matrix' } },
  sampling: { role: 'assistant', content: { type: 'text', text: 'Paris' }, model: 'matrix-model', stopReason: 'endTurn' },
  roots: { roots: [{ uri: 'file:///matrix', name: 'matrix' }] },
};
export const ASKS = [
  { kind: 'elicitation', method: 'elicitation/create', tool: 'test_input_required_result_elicitation', text: 'Hello, Matrix!' },
  { kind: 'sampling', method: 'sampling/createMessage', tool: 'test_input_required_result_sampling', text: 'The model said: Paris' },
  { kind: 'roots', method: 'roots/list', tool: 'test_input_required_result_list_roots', text: 'Roots: file:///matrix' },
];

/** The request methods whose Mcp-Name header names their target, and the params field it comes from. */
export const MCP_NAME_SOURCE = { 'tools/call': 'name', 'prompts/get': 'name', 'resources/read': 'uri' };

/** A list that never ends is a failure, not a hang. */
const MAX_PAGES = 100;
const STEP_TIMEOUT_MS = Number(process.env.MATRIX_STEP_TIMEOUT_MS ?? 20000);
// MATRIX_VERBOSE=1: print every recorded exchange at the end.

export const fmt = (v) => JSON.stringify(v);
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
export function assert(cond, message) {
  if (!cond) throw new Error(message);
}
export const textOf = (result) =>
  (result?.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');

/**
 * What one JSON-RPC message that came back is, in a word: a notification's
 * method, `request:<method>`, `result:<resultType>` or `error:<code>`.
 */
export function describeMessage(m) {
  if (Array.isArray(m)) return m.map(describeMessage).join(',');
  if (!m || typeof m !== 'object') return 'garbage';
  if (m.method !== undefined) return m.id !== undefined ? `request:${m.method}` : m.method;
  if (m.error !== undefined) return `error:${m.error?.code}`;
  if (m.result !== undefined) return `result:${m.result?.resultType ?? 'complete'}`;
  return 'garbage';
}

/**
 * An incremental SSE parser: feed it text with push(), call end() at the end
 * of the stream; each `data:` message lands in `events` (see describeMessage).
 */
export function sseEvents(events) {
  let buffer = '';
  const flush = (final) => {
    const blocks = buffer.replace(/\r\n?/g, '\n').split('\n\n');
    buffer = final ? '' : blocks.pop();
    for (const block of blocks) {
      const data = block
        .split('\n')
        .filter((l) => l.startsWith('data:'))
        .map((l) => l.slice(5).replace(/^ /, ''))
        .join('\n');
      if (!data) continue;
      try {
        events.push(describeMessage(JSON.parse(data)));
      } catch {
        events.push('garbage');
      }
    }
  };
  return {
    push(text) {
      buffer += text;
      flush(false);
    },
    end: () => flush(true),
  };
}

/**
 * Watches an SSE body as it passes to the SDK (see sseEvents). Cancelling the
 * returned stream cancels the source, so closing a stream still reaches the
 * server.
 */
function observeSse(body, events) {
  const decoder = new TextDecoder();
  const parser = sseEvents(events);
  return body.pipeThrough(
    new TransformStream({
      transform(chunk, controller) {
        parser.push(decoder.decode(chunk, { stream: true }));
        controller.enqueue(chunk);
      },
      flush() {
        parser.end();
      },
    }),
  );
}

/**
 * The wire entry of one HTTP request (see recordingFetch): `headers` has
 * get(name), `bodyText` is the body or undefined.
 */
export function requestEntry(method, headers, bodyText) {
  let rpc;
  let target;
  let notification;
  try {
    const body = typeof bodyText === 'string' && bodyText !== '' ? JSON.parse(bodyText) : undefined;
    rpc = Array.isArray(body) ? body.map((m) => m.method ?? 'response') : body?.method ?? (body ? 'response' : undefined);
    if (body?.method !== undefined && body.id === undefined) notification = true;
    const field = MCP_NAME_SOURCE[body?.method];
    if (field) target = body?.params?.[field];
  } catch {
    rpc = undefined;
  }
  const entry = {
    method,
    rpc,
    notification,
    target,
    version: headers.get('mcp-protocol-version') ?? undefined,
    mcpMethod: headers.get('mcp-method') ?? undefined,
    mcpName: headers.get('mcp-name') ?? undefined,
    sentSession: headers.get('mcp-session-id') ?? undefined,
  };
  for (const k of Object.keys(entry)) if (entry[k] === undefined) delete entry[k];
  return entry;
}

/** `json`, `sse`, or the bare content type (`none` without one) of a response. */
export const responseType = (contentType) => {
  const type = (contentType ?? '').split(';')[0].trim().toLowerCase();
  return { 'text/event-stream': 'sse', 'application/json': 'json' }[type] ?? (type || 'none');
};

/**
 * A fetch that records every HTTP exchange into `wire`, so checks need no SDK
 * internals and a failure can show what went over the wire. Each entry:
 *   method, rpc (JSON-RPC method of the body, 'response' for a reply),
 *   notification (true for a notification), target (params.name / params.uri
 *   of tools/call, prompts/get, resources/read), version (MCP-Protocol-Version),
 *   mcpMethod, mcpName (Mcp-Method, Mcp-Name), sentSession (Mcp-Session-Id sent),
 *   status, gotSession (Mcp-Session-Id received), type (json|sse|none),
 *   events (what came back: see describeMessage).
 */
export function recordingFetch(wire) {
  return async (input, init = {}) => {
    const entry = requestEntry(init.method ?? 'GET', new Headers(init.headers), init.body);
    wire.push(entry);
    let res;
    try {
      res = await fetch(input, init);
    } catch (err) {
      entry.error = String(err?.message ?? err);
      throw err;
    }
    entry.status = res.status;
    const session = res.headers.get('mcp-session-id');
    if (session) entry.gotSession = session;
    entry.type = responseType(res.headers.get('content-type'));
    entry.events = [];
    if (entry.type === 'sse' && res.body) {
      const observed = new Response(observeSse(res.body, entry.events), {
        status: res.status,
        statusText: res.statusText,
        headers: res.headers,
      });
      Object.defineProperty(observed, 'url', { value: res.url });
      return observed;
    }
    if (entry.type === 'json') {
      // A JSON answer is whole anyway: read it here, so its entry is complete
      // before the SDK sees it.
      const text = await res.text();
      try {
        entry.events.push(describeMessage(JSON.parse(text)));
      } catch {
        entry.events.push('garbage');
      }
      const copy = new Response(text, { status: res.status, statusText: res.statusText, headers: res.headers });
      Object.defineProperty(copy, 'url', { value: res.url });
      return copy;
    }
    return res;
  };
}

/**
 * A `ping` POSTed with a session id after the session ended (the client's
 * DELETE): `{ status, body }` of the answer, which must be 404.
 */
export async function pingEndedSession(url, sessionId, protocolVersion) {
  const res = await fetch(url, {
    method: 'POST',
    headers: {
      'Mcp-Session-Id': sessionId,
      'MCP-Protocol-Version': protocolVersion,
      Accept: 'application/json, text/event-stream',
      'Content-Type': 'application/json',
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: 'after-delete', method: 'ping' }),
  });
  return { status: res.status, body: await res.text() };
}

/** Shortens a wire entry for a failure message. */
const brief = (w) => {
  const { events, ...rest } = w;
  return fmt(events?.length ? { ...rest, events: events.length > 8 ? [...events.slice(0, 7), `+${events.length - 7}`] : events } : rest);
};
export const lastExchanges = (wire, n = 8) => wire.slice(-n).map(brief).join(' ');

/**
 * The era the exchanges in `wire` show: `session` when an `initialize` was
 * answered 2xx (with its protocol version from the later headers),
 * `2026-07-28` when no initialize was sent and a request carrying
 * MCP-Protocol-Version 2026-07-28 was answered 2xx, else `unknown`.
 */
export function eraFromWire(wire) {
  const init = wire.find((w) => w.method === 'POST' && w.rpc === 'initialize');
  if (init) {
    const ok = init.status >= 200 && init.status < 300;
    const after = wire.slice(wire.indexOf(init) + 1).find((w) => w.version);
    return {
      era: ok ? 'session' : 'unknown',
      detail: `initialize answered ${init.status ?? init.error}${after ? `, then protocol ${after.version}` : ''}${
        init.gotSession ? ', with a Mcp-Session-Id' : ', no Mcp-Session-Id'
      }`,
    };
  }
  const modern = wire.find((w) => w.method === 'POST' && w.version === MODERN && w.status >= 200 && w.status < 300);
  if (modern) {
    const probe = wire.find((w) => w.rpc === 'server/discover');
    const how = probe
      ? `server/discover answered ${probe.status ?? probe.error}`
      : `no server/discover, first request ${modern.rpc}`;
    return { era: MODERN, detail: `no initialize; ${how}` };
  }
  return { era: 'unknown', detail: `${wire.length} exchange(s), no initialize and no 2026-07-28 request answered 2xx` };
}

/**
 * The 2026-07-28 wire rules over `wire`; returns a list of violations (empty
 * when all hold): no Mcp-Session-Id sent or received, no GET, no DELETE, no
 * JSON-RPC response or batch POSTed, every POST with MCP-Protocol-Version
 * 2026-07-28; every request with an Mcp-Method equal to its method, and
 * Mcp-Name equal to its target for tools/call, prompts/get and resources/read.
 * A notification POST (the revision defines none for HTTP; the TypeScript SDK
 * sends notifications/cancelled when it closes a subscription) needs no
 * Mcp-Method ("header requirements for notification POSTs are not defined by
 * this revision"), but must get 202.
 */
export function modernWireViolations(wire) {
  const bad = [];
  wire.forEach((w, i) => {
    const at = `#${i + 1} ${w.method} ${w.rpc ?? ''}`.trim();
    if (w.sentSession) bad.push(`${at} sent Mcp-Session-Id`);
    if (w.gotSession) bad.push(`${at} received Mcp-Session-Id`);
    if (w.method === 'GET' || w.method === 'DELETE') bad.push(`${at}: no ${w.method} in 2026-07-28`);
    if (w.method !== 'POST') return;
    if (w.version !== MODERN) bad.push(`${at}: MCP-Protocol-Version ${fmt(w.version)}`);
    if (typeof w.rpc !== 'string' || w.rpc === 'response') {
      bad.push(`${at}: a JSON-RPC response or batch POSTed (no server-to-client requests in 2026-07-28)`);
    } else if (w.notification) {
      if (w.mcpMethod !== undefined && w.mcpMethod !== w.rpc) bad.push(`${at}: Mcp-Method ${fmt(w.mcpMethod)}`);
      if (w.status !== 202) bad.push(`${at}: a notification answered ${w.status ?? w.error}, expected 202`);
    } else if (w.mcpMethod !== w.rpc) {
      bad.push(`${at}: Mcp-Method ${fmt(w.mcpMethod)}`);
    }
    if (MCP_NAME_SOURCE[w.rpc] && w.mcpName !== w.target) bad.push(`${at}: Mcp-Name ${fmt(w.mcpName)}, expected ${fmt(w.target)}`);
  });
  return bad;
}

function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([
    promise.finally(() => clearTimeout(timer)),
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: timed out after ${ms} ms`)), ms);
    }),
  ]);
}

/**
 * A checker for scripts that print `ok - <check>` / `not ok - <check>: <reason>`:
 * `check(name, fn)` runs `fn` within `stepMs` (its return value noted; after
 * a failure, `onFail()` adds what helps);
 * `finish(label)` prints `<label>: N passed, M failed` and exits 1 on a failure.
 */
export function checker({ stepMs = STEP_TIMEOUT_MS, onFail = () => {} } = {}) {
  let passed = 0;
  let failed = 0;
  return {
    async check(name, fn) {
      try {
        const note = await withTimeout(Promise.resolve().then(fn), stepMs, name);
        passed++;
        console.log(`ok - ${name}${note ? ` (${note})` : ''}`);
        return true;
      } catch (err) {
        failed++;
        const cause = err?.cause ? ` (cause: ${err.cause?.message ?? err.cause})` : '';
        console.log(`not ok - ${name}: ${err?.message ?? err}${cause}`);
        onFail();
        return false;
      }
    },
    finish(label) {
      console.log(`${label}: ${passed} passed, ${failed} failed`);
      process.exit(failed === 0 ? 0 : 1);
    },
  };
}

/**
 * The checker of a matrix client: a failure shows the last HTTP exchanges of
 * `wire`; `finish()` says the era the wire shows (every exchange with
 * MATRIX_VERBOSE=1), then the counts under `label`.
 */
export function matrixChecker(label, wire) {
  const { check, finish } = checker({ onFail: () => console.log(`  last HTTP exchanges: ${lastExchanges(wire)}`) });
  return {
    check,
    finish() {
      if (process.env.MATRIX_VERBOSE) for (const w of wire) console.log(`  wire: ${fmt(w)}`);
      const { era, detail } = eraFromWire(wire);
      console.log(`era: ${era} (${detail})`);
      finish(label);
    },
  };
}

/** Every item of a list (`field` of each page of `method`), through `request(method, params)`. */
export async function listAll(request, method, field) {
  const items = [];
  let cursor;
  for (let pages = 0; pages < MAX_PAGES; pages++) {
    const page = await request(method, cursor ? { cursor } : {});
    items.push(...page[field]);
    cursor = page.nextCursor;
    if (!cursor) return items;
  }
  throw new Error(`${method}: more than ${MAX_PAGES} pages`);
}

/** Runs every check against `url` through `adapter`; never returns. */
export async function runMatrix({ url, label, adapter, wire }) {
  const { check, finish } = matrixChecker(label, wire);

  // The era the SDK says it negotiated; the wire is checked against it at the end.
  let modern = false;
  const connected = await check('connect', async () => {
    const note = await adapter.connect();
    modern = adapter.protocolVersion === MODERN;
    if (modern) {
      assert(!adapter.sessionId, `2026-07-28 but a session id ${fmt(adapter.sessionId)}`);
      return `protocol ${adapter.protocolVersion}, no session${note ? `, ${note}` : ''}`;
    }
    assert(adapter.sessionId, 'no Mcp-Session-Id after connect');
    return `protocol ${adapter.protocolVersion}, session ${adapter.sessionId}${note ? `, ${note}` : ''}`;
  });
  if (!connected) finish();

  for (const list of LISTS) {
    await check(`${list.method}: every page, no duplicates, built-ins present`, async () => {
      const items = [];
      const pageSizes = [];
      let cursor;
      do {
        assert(pageSizes.length < MAX_PAGES, `more than ${MAX_PAGES} pages`);
        const page = await adapter.listPage(list.kind, cursor);
        assert(Array.isArray(page.items), `page ${pageSizes.length + 1} has no ${list.kind} array`);
        assert(page.nextCursor !== cursor || cursor === undefined, `nextCursor ${fmt(cursor)} repeats`);
        items.push(...page.items);
        pageSizes.push(page.items.length);
        cursor = page.nextCursor;
      } while (cursor !== undefined);
      const keys = items.map((item) => item[list.key]);
      const dupes = keys.filter((k, i) => keys.indexOf(k) !== i);
      assert(dupes.length === 0, `duplicates across pages: ${fmt(dupes)}`);
      const missing = list.expected.filter((k) => !keys.includes(k));
      assert(missing.length === 0, `missing ${fmt(missing)} from ${fmt(keys)}`);
      let sdkWalk = '';
      if (adapter.listAll) {
        const all = (await adapter.listAll(list.kind)).map((item) => item[list.key]);
        assert(fmt(all) === fmt(keys), `the SDK's own walk gave ${fmt(all)}, page by page gave ${fmt(keys)}`);
        sdkWalk = ", the SDK's own walk agrees";
      }
      return `${keys.length} over ${pageSizes.length} page(s) ${fmt(pageSizes)}${sdkWalk}`;
    });
  }

  await check('tools/list with a foreign cursor ("" and "not-a-cursor"): -32602', async () => {
    const codes = [];
    for (const cursor of ['', 'not-a-cursor']) {
      let code;
      try {
        await adapter.listPage('tools', cursor);
        code = 'resolved';
      } catch (err) {
        code = adapter.errorCode(err) ?? `no code (${err?.message ?? err})`;
      }
      codes.push(code);
    }
    assert(codes.every((c) => c === -32602), `expected -32602 for both, got ${fmt(codes)}`);
    return `codes ${fmt(codes)}`;
  });

  await check('tools/call echo', async () => {
    const message = `matrix ${label}`;
    const result = await adapter.callTool('echo', { message });
    const text = textOf(result);
    assert(text === `Echo: ${message}`, `text ${fmt(text)}, expected ${fmt(`Echo: ${message}`)}`);
    assert(!result.isError, 'isError is true');
    // A text-only tool: no structuredContent, which clients would prefer to the text.
    assert(!('structuredContent' in result), `structuredContent ${fmt(result.structuredContent)} on a text-only tool`);
    return fmt(text);
  });

  await check('tools/call add {a:2, b:3}: structuredContent {sum:5}, as its outputSchema says', async () => {
    const result = await adapter.callTool('add', { a: 2, b: 3 });
    assert(!result.isError, `isError is true: ${fmt(result)}`);
    assert(fmt(result.structuredContent) === fmt({ sum: 5 }), `structuredContent ${fmt(result.structuredContent)}`);
    return fmt(result.structuredContent);
  });

  await check('prompts/get test_simple_prompt', async () => {
    const result = await adapter.getPrompt('test_simple_prompt', {});
    assert(Array.isArray(result?.messages) && result.messages.length > 0, `no messages in ${fmt(result)}`);
    return `${result.messages.length} message(s)`;
  });

  await check('resources/read test://static-text', async () => {
    const result = await adapter.readResource('test://static-text');
    const text = result?.contents?.[0]?.text;
    assert(typeof text === 'string' && text.length > 0, `no text content in ${fmt(result)}`);
    return `${text.length} chars`;
  });

  await check(
    `tools/call long_running_operation {duration_ms:500, steps:5}: 5 increasing progress before the result${
      modern ? ', on the call\'s own response stream' : ''
    }`,
    async () => {
      const seen = [];
      const mark = wire.length;
      const result = await adapter.callTool('long_running_operation', { duration_ms: 500, steps: 5 }, (p) =>
        seen.push(p.progress),
      );
      const beforeResult = seen.length;
      await sleep(300); // a notification sent after the result would show up here
      assert(beforeResult === 5, `${beforeResult} progress notifications before the result, expected 5: ${fmt(seen)}`);
      assert(seen.length === 5, `${seen.length - beforeResult} progress notification(s) after the result: ${fmt(seen)}`);
      for (let i = 1; i < seen.length; i++) {
        assert(seen[i] > seen[i - 1], `progress not strictly increasing: ${fmt(seen)}`);
      }
      assert(!result.isError && textOf(result).length > 0, `unexpected result ${fmt(result)}`);
      if (!modern) return `progress ${fmt(seen)}`;
      const calls = wire.slice(mark).filter((w) => w.rpc === 'tools/call');
      assert(calls.length === 1, `${calls.length} tools/call POSTs, expected 1`);
      const [call] = calls;
      const events = call.events ?? [];
      const progress = events.filter((e) => e === 'notifications/progress').length;
      assert(call.type === 'sse', `the call was answered ${call.type}, not as an SSE stream`);
      assert(progress === 5, `the call's own stream carried ${progress} progress notification(s): ${fmt(events)}`);
      assert(events.at(-1) === 'result:complete', `the call's stream did not end with its result: ${fmt(events)}`);
      return `progress ${fmt(seen)}, all 5 on the tools/call response stream`;
    },
  );

  for (const ask of ASKS) {
    const how = modern
      ? `input_required, the ${ask.kind} handler answers, the retry completes`
      : `the server asks ${ask.method} on the call's stream, the handler answers`;
    await check(`tools/call ${ask.tool}: ${how}`, async () => {
      const before = adapter.asked[ask.kind];
      const mark = wire.length;
      const result = await adapter.callTool(ask.tool, {});
      const text = textOf(result);
      const calls = wire.slice(mark).filter((w) => w.rpc === 'tools/call');
      const rounds = calls.map(
        (c) => (c.events ?? []).filter((e) => /^(result|error|request):/.test(e)).join('+') || `HTTP ${c.status}`,
      );
      assert(text === ask.text, `text ${fmt(text)}, expected ${fmt(ask.text)}; rounds ${fmt(rounds)}`);
      assert(adapter.asked[ask.kind] === before + 1, `the ${ask.kind} handler ran ${adapter.asked[ask.kind] - before} time(s)`);
      if (!modern) {
        const asked = calls.flatMap((c) => c.events ?? []).filter((e) => e === `request:${ask.method}`);
        assert(asked.length === 1, `${asked.length} ${ask.method} request(s) on the call's stream: ${fmt(rounds)}`);
        return fmt(text);
      }
      assert(calls.length === 2, `${calls.length} tools/call POSTs, expected 2 (the call, then the retry): ${fmt(rounds)}`);
      assert(rounds[0] === 'result:input_required', `the first round came back ${fmt(rounds[0])}, expected an input_required result`);
      assert(rounds[1] === 'result:complete', `the retry came back ${fmt(rounds[1])}, expected a complete result`);
      const requests = calls.flatMap((c) => c.events ?? []).filter((e) => e.startsWith('request:'));
      assert(requests.length === 0, `server-to-client requests in 2026-07-28: ${fmt(requests)}`);
      return `${fmt(text)}; rounds ${fmt(rounds)}`;
    });
  }

  if (modern && adapter.listen) {
    const listenCheck =
      'subscriptions/listen {toolsListChanged}, then test_trigger_tool_change: ' +
      'notifications/tools/list_changed on the listen stream';
    await check(listenCheck, async () => {
      let changed = 0;
      let onChange;
      const gotChange = new Promise((resolve) => (onChange = resolve));
      const mark = wire.length;
      const sub = await adapter.listen(() => {
        changed++;
        onChange();
      });
      try {
        const result = await adapter.callTool('test_trigger_tool_change', {});
        assert(!result.isError, `test_trigger_tool_change failed: ${fmt(result)}`);
        await withTimeout(gotChange, 5000, 'notifications/tools/list_changed');
      } finally {
        await sub.close();
      }
      const listen = wire.slice(mark).find((w) => w.rpc === 'subscriptions/listen');
      assert(listen, 'no subscriptions/listen POST');
      assert(listen.type === 'sse', `subscriptions/listen answered ${listen.status} ${listen.type}, not an SSE stream`);
      await sleep(100); // the observer sees the stream's bytes as the SDK reads them
      const events = listen.events ?? [];
      assert(events.includes('notifications/tools/list_changed'), `the listen stream carried ${fmt(events)}`);
      return `handler ran ${changed} time(s); listen stream ${fmt(events)}`;
    });
  }

  if (modern) {
    await adapter.close().catch(() => {});
    await sleep(200); // whatever the client sends while closing
    const wireCheck =
      '2026-07-28 on the wire: no session id, no GET, no DELETE, ' +
      'MCP-Protocol-Version on every POST, Mcp-Method (and Mcp-Name) on every request';
    await check(wireCheck, async () => {
      const { era, detail } = eraFromWire(wire);
      assert(era === MODERN, `the wire shows era ${era} (${detail}), the SDK says ${adapter.protocolVersion}`);
      const bad = modernWireViolations(wire);
      assert(bad.length === 0, `${bad.length} violation(s): ${bad.slice(0, 6).join('; ')}`);
      const posts = wire.filter((w) => w.method === 'POST');
      const named = posts.filter((w) => w.mcpName !== undefined).length;
      const notes = posts.filter((w) => w.notification).map((w) => `${w.rpc}${w.mcpMethod ? '' : ' without Mcp-Method'} ${w.status}`);
      return `${posts.length} POSTs, ${named} with Mcp-Name${notes.length ? `; notifications: ${notes.join(', ')}` : ''}`;
    });
    finish();
  }

  await check('end the session: DELETE 2xx, then the session id gets 404', async () => {
    const sessionId = adapter.sessionId;
    const protocolVersion = adapter.protocolVersion;
    const mark = wire.length;
    await adapter.terminate();
    const del = wire.slice(mark).find((w) => w.method === 'DELETE');
    assert(del, 'the client sent no DELETE');
    assert(del.status >= 200 && del.status < 300, `DELETE answered ${del.status ?? del.error}`);
    const res = await pingEndedSession(url, sessionId, protocolVersion);
    assert(res.status === 404, `ping with the ended session id answered ${res.status}, expected 404`);
    const { era, detail } = eraFromWire(wire);
    assert(era === 'session', `the wire shows era ${era} (${detail})`);
    return `DELETE ${del.status}, then ${res.status}`;
  });

  await adapter.close().catch(() => {});
  finish();
}
