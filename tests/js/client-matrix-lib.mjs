// The checks of the client matrix, shared by the TypeScript SDK v1 and v2
// clients (client-matrix-v1.mjs, client-matrix-v2.mjs). tests/py/client_matrix.py
// runs the same checks with the Python SDK; keep the three in step.
//
// A client script gives an adapter over its SDK:
//   connect()                    -> note string; initializes (or negotiates) the session
//   sessionId, protocolVersion   read after connect
//   listPage(kind, cursor)       -> { items, nextCursor } (one page; cursor undefined = first page)
//   callTool(name, args, onprogress?) -> CallToolResult
//   terminate()                  ends the session (DELETE)
//   close()                      closes the client
//   errorCode(err)               the JSON-RPC code of a rejected request, or undefined
//   listAll(kind)?               -> items; the SDK's own every-page walk, where it has one
// and runMatrix() prints `ok - <check>` / `not ok - <check>: <reason>` lines and
// `N passed, M failed`, then exits 1 if any check failed.

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

/** A list that never ends is a failure, not a hang. */
const MAX_PAGES = 100;
const STEP_TIMEOUT_MS = Number(process.env.MATRIX_STEP_TIMEOUT_MS ?? 20000);

export const fmt = (v) => JSON.stringify(v);
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
export function assert(cond, message) {
  if (!cond) throw new Error(message);
}
const textOf = (result) =>
  (result?.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');

/**
 * A fetch that records every HTTP exchange (method, JSON-RPC method, status) into
 * `wire`, so a failure can show what went over the wire and checks need no SDK internals.
 */
export function recordingFetch(wire) {
  return async (input, init = {}) => {
    let rpc;
    try {
      const body = typeof init.body === 'string' ? JSON.parse(init.body) : undefined;
      rpc = Array.isArray(body) ? body.map((m) => m.method ?? 'response') : body?.method ?? (body ? 'response' : undefined);
    } catch {
      rpc = undefined;
    }
    const headers = new Headers(init.headers);
    const entry = {
      method: init.method ?? 'GET',
      rpc,
      version: headers.get('mcp-protocol-version') ?? undefined,
    };
    wire.push(entry);
    try {
      const res = await fetch(input, init);
      entry.status = res.status;
      return res;
    } catch (err) {
      entry.error = String(err?.message ?? err);
      throw err;
    }
  };
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

/** Runs every check against `url` through `adapter`; never returns. */
export async function runMatrix({ url, label, adapter, wire }) {
  let passed = 0;
  let failed = 0;
  async function check(name, fn) {
    try {
      const note = await withTimeout(Promise.resolve().then(fn), STEP_TIMEOUT_MS, name);
      passed++;
      console.log(`ok - ${name}${note ? ` (${note})` : ''}`);
      return true;
    } catch (err) {
      failed++;
      console.log(`not ok - ${name}: ${err?.message ?? err}`);
      console.log(`  last HTTP exchanges: ${wire.slice(-8).map((w) => fmt(w)).join(' ')}`);
      return false;
    }
  }
  const finish = () => {
    console.log(`${label}: ${passed} passed, ${failed} failed`);
    process.exit(failed === 0 ? 0 : 1);
  };

  const connected = await check('connect', async () => {
    const note = await adapter.connect();
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
    return fmt(text);
  });

  await check('tools/call long_running_operation {duration_ms:500, steps:5}: 5 increasing progress before the result', async () => {
    const seen = [];
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
    return `progress ${fmt(seen)}`;
  });

  await check('end the session: DELETE 2xx, then the session id gets 404', async () => {
    const sessionId = adapter.sessionId;
    const protocolVersion = adapter.protocolVersion;
    const mark = wire.length;
    await adapter.terminate();
    const del = wire.slice(mark).find((w) => w.method === 'DELETE');
    assert(del, 'the client sent no DELETE');
    assert(del.status >= 200 && del.status < 300, `DELETE answered ${del.status ?? del.error}`);
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
    await res.text();
    assert(res.status === 404, `ping with the ended session id answered ${res.status}, expected 404`);
    return `DELETE ${del.status}, then ${res.status}`;
  });

  await adapter.close().catch(() => {});
  finish();
}
