#!/usr/bin/env node
// Client matrix, MCP Inspector CLI (`@modelcontextprotocol/inspector --cli`):
// runs the commands below against URL, one Inspector process each, and checks
// their JSON output (--format json) and what went over the wire.
//
//   node tests/js/client-matrix-inspector.mjs URL                        # the CLI's default for a URL: legacy (initialize)
//   node tests/js/client-matrix-inspector.mjs URL --protocol-era auto    # probe server/discover, fall back to initialize
//   node tests/js/client-matrix-inspector.mjs URL --protocol-era modern  # pinned to 2026-07-28, no fallback
//
// The Inspector reaches URL through a recording proxy on 127.0.0.1 started
// here (it forwards every request and response unchanged, streams included,
// and closes the upstream request when the Inspector closes its side), so the
// era and the wire rules of client-matrix-lib.mjs are checked for the
// Inspector too. The Inspector walks every page of a list itself and prints
// the union, so the list checks are: built-ins present, no duplicates, no
// nextCursor left over, and (from the wire) every page fetched. Roots come
// from a throw-away config file (`--config`), which the Inspector answers
// `roots/list` from without asking; it has no way to answer elicitation or
// sampling from the command line. Prints `ok - ...` / `not ok - ...` per
// check, `era: ...` and `N passed, M failed`.

import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  LISTS,
  MODERN,
  assert,
  describeMessage,
  eraFromWire,
  fmt,
  lastExchanges,
  modernWireViolations,
  requestEntry,
  responseType,
  sseEvents,
  textOf,
} from './client-matrix-lib.mjs';

const [url, flag, era] = process.argv.slice(2);
if (!url || (flag !== undefined && (flag !== '--protocol-era' || !['legacy', 'auto', 'modern'].includes(era)))) {
  console.error('usage: node client-matrix-inspector.mjs http://127.0.0.1:PORT/mcp [--protocol-era legacy|auto|modern]');
  process.exit(2);
}
const label = { auto: 'inspector-cli-auto', modern: 'inspector-cli-2026', legacy: 'inspector-cli-legacy' }[era] ?? 'inspector-cli';
const INSPECTOR = join(
  dirname(fileURLToPath(import.meta.url)),
  'node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js',
);
const TIMEOUT_MS = Number(process.env.MATRIX_STEP_TIMEOUT_MS ?? 20000);
const ROOTS = [{ uri: 'file:///matrix', name: 'matrix' }];

/**
 * A recording HTTP proxy on 127.0.0.1 in front of `target`: every exchange
 * lands in `wire` as recordingFetch records it.
 */
function startProxy(target, wire) {
  const upstream = new URL(target);
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const headers = new Headers();
      for (const [k, v] of Object.entries(req.headers)) headers.set(k, Array.isArray(v) ? v.join(', ') : v);
      const entry = requestEntry(req.method, headers, body.toString('utf8'));
      wire.push(entry);
      const up = http.request(
        {
          host: upstream.hostname,
          port: upstream.port,
          path: upstream.pathname + upstream.search,
          method: req.method,
          headers: { ...req.headers, host: upstream.host },
        },
        (upRes) => {
          entry.status = upRes.statusCode;
          const session = upRes.headers['mcp-session-id'];
          if (session) entry.gotSession = session;
          entry.type = responseType(upRes.headers['content-type']);
          entry.events = [];
          const parser = sseEvents(entry.events);
          const decoder = new TextDecoder();
          const json = [];
          res.writeHead(upRes.statusCode, upRes.headers);
          upRes.on('data', (chunk) => {
            if (entry.type === 'sse') parser.push(decoder.decode(chunk, { stream: true }));
            else if (entry.type === 'json') json.push(chunk);
            res.write(chunk);
          });
          upRes.on('end', () => {
            parser.end();
            if (entry.type === 'json') {
              try {
                entry.events.push(describeMessage(JSON.parse(Buffer.concat(json).toString('utf8'))));
              } catch {
                entry.events.push('garbage');
              }
            }
            res.end();
          });
          upRes.on('error', () => res.destroy());
        },
      );
      up.on('error', (err) => {
        entry.error = String(err?.message ?? err);
        res.destroy();
      });
      // The Inspector closing its side (a cancelled request) closes ours.
      res.on('close', () => {
        if (!res.writableFinished) up.destroy();
      });
      up.end(body);
    });
  });
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => resolve({ server, url: `http://127.0.0.1:${server.address().port}${upstream.pathname}` }));
  });
}

const wire = [];
const proxy = await startProxy(url, wire);
// The Inspector keeps a catalog and client config under $HOME/.mcp-inspector;
// a throw-away HOME keeps the run from reading or writing the user's.
const home = mkdtempSync(join(tmpdir(), 'inspector-home-'));
const config = join(home, 'matrix-servers.json');
writeFileSync(config, JSON.stringify({ mcpServers: { matrix: { type: 'streamable-http', url: proxy.url, roots: ROOTS } } }));

/** One run per invocation: its arguments and the exchanges it made. */
const runs = [];

/**
 * Runs the Inspector CLI with `--format json ARGS...` against the proxy (the
 * URL as target, or `--config` when `viaConfig`), plus `--protocol-era` when
 * given; resolves with its parsed stdout and the exchanges it made.
 */
function inspector(args, { viaConfig = false } = {}) {
  const target = viaConfig ? ['--config', config, '--server', 'matrix'] : [proxy.url];
  const full = [...target, '--format', 'json', ...(era ? ['--protocol-era', era] : []), ...args];
  const mark = wire.length;
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [INSPECTOR, '--cli', ...full], {
      env: { ...process.env, HOME: home },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), TIMEOUT_MS);
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      const exchanges = wire.slice(mark);
      runs.push({ args: args.join(' '), exchanges });
      const where = `inspector ${args.join(' ')}`;
      if (code !== 0) {
        reject(new Error(`${where}: exit ${code ?? signal}; stderr ${fmt(stderr.slice(-600))} stdout ${fmt(stdout.slice(-300))}`));
        return;
      }
      try {
        resolve({ out: JSON.parse(stdout), exchanges });
      } catch {
        reject(new Error(`${where}: stdout is not one JSON value: ${fmt(stdout.slice(0, 300))}`));
      }
    });
  });
}

let passed = 0;
let failed = 0;
async function check(name, fn) {
  try {
    const note = await fn();
    passed++;
    console.log(`ok - ${name}${note ? ` (${note})` : ''}`);
  } catch (err) {
    failed++;
    console.log(`not ok - ${name}: ${err?.message ?? err}`);
    console.log(`  last HTTP exchanges: ${lastExchanges(wire)}`);
  }
}
const isModern = (exchanges) => eraFromWire(exchanges).era === MODERN;

for (const list of LISTS) {
  await check(`inspector --method ${list.method}: every page, no duplicates, built-ins present`, async () => {
    const { out, exchanges } = await inspector(['--method', list.method]);
    const result = out.result;
    assert(result && Array.isArray(result[list.kind]), `no result.${list.kind} array in ${fmt(out).slice(0, 300)}`);
    assert(result.nextCursor === undefined, `nextCursor ${fmt(result.nextCursor)} left in the output`);
    const keys = result[list.kind].map((item) => item[list.key]);
    const dupes = keys.filter((k, i) => keys.indexOf(k) !== i);
    assert(dupes.length === 0, `duplicates: ${fmt(dupes)}`);
    const missing = list.expected.filter((k) => !keys.includes(k));
    assert(missing.length === 0, `missing ${fmt(missing)} from ${fmt(keys)}`);
    const pages = exchanges.filter((w) => w.rpc === list.method);
    const failedPages = pages.filter((w) => w.status !== 200 || !(w.events ?? []).every((e) => e === 'result:complete'));
    assert(failedPages.length === 0, `page request(s) that failed: ${failedPages.map((w) => fmt(w)).join(' ')}`);
    return `${keys.length} ${list.kind} over ${pages.length} page request(s)`;
  });
}

await check('inspector --method tools/call --tool-name echo', async () => {
  const message = 'matrix inspector';
  const { out } = await inspector(['--method', 'tools/call', '--tool-name', 'echo', '--tool-arg', `message=${message}`]);
  const text = textOf(out.result);
  assert(text === `Echo: ${message}`, `text ${fmt(text)}, expected ${fmt(`Echo: ${message}`)}: ${fmt(out).slice(0, 300)}`);
  assert(out.result.isError !== true, 'isError is true');
  return fmt(text);
});

await check('inspector --method tools/call --tool-name long_running_operation {duration_ms:500, steps:5}', async () => {
  const { out, exchanges } = await inspector([
    '--method',
    'tools/call',
    '--tool-name',
    'long_running_operation',
    '--tool-args-json',
    JSON.stringify({ duration_ms: 500, steps: 5 }),
  ]);
  const text = textOf(out.result);
  assert(text.length > 0 && out.result.isError !== true, `unexpected result ${fmt(out).slice(0, 300)}`);
  const calls = exchanges.filter((w) => w.rpc === 'tools/call');
  assert(calls.length === 1, `${calls.length} tools/call POSTs, expected 1`);
  const events = calls[0].events ?? [];
  const progress = events.filter((e) => e === 'notifications/progress').length;
  if (progress === 0) return `${fmt(text)}; the CLI asked for no progress`;
  assert(calls[0].type === 'sse', `progress, but the call was answered ${calls[0].type}`);
  assert(progress === 5, `${progress} progress notification(s) on the call's own stream: ${fmt(events)}`);
  assert(events.at(-1) === 'result:complete', `the call's stream did not end with its result: ${fmt(events)}`);
  return `${fmt(text)}; 5 progress notifications on the call's own response stream`;
});

await check(
  'inspector --config (roots file:///matrix) --method tools/call --tool-name test_input_required_result_list_roots',
  async () => {
    const { out, exchanges } = await inspector(
      ['--method', 'tools/call', '--tool-name', 'test_input_required_result_list_roots'],
      { viaConfig: true },
    );
    const text = textOf(out.result);
    const calls = exchanges.filter((w) => w.rpc === 'tools/call');
    const rounds = calls.map((c) => (c.events ?? []).filter((e) => /^(result|error|request):/.test(e)).join('+') || `HTTP ${c.status}`);
    assert(text === 'Roots: file:///matrix', `text ${fmt(text)}, expected "Roots: file:///matrix"; rounds ${fmt(rounds)}`);
    if (isModern(exchanges)) {
      assert(calls.length === 2, `${calls.length} tools/call POSTs, expected 2 (the call, then the retry): ${fmt(rounds)}`);
      assert(rounds[0] === 'result:input_required' && rounds[1] === 'result:complete', `rounds ${fmt(rounds)}`);
      return `${fmt(text)}; input_required, then the retry completes: ${fmt(rounds)}`;
    }
    const asked = calls.flatMap((c) => c.events ?? []).filter((e) => e === 'request:roots/list').length;
    assert(asked === 1, `${asked} roots/list request(s) on the call's stream: ${fmt(rounds)}`);
    return `${fmt(text)}; roots/list asked on the call's stream`;
  },
);

const expected = era === 'auto' || era === 'modern' ? MODERN : 'session';
await check(`every run negotiated the era ${expected} and kept its wire rules`, async () => {
  const eras = runs.map((r) => ({ args: r.args, ...eraFromWire(r.exchanges) }));
  const off = eras.filter((e) => e.era !== expected);
  assert(off.length === 0, `runs in another era: ${off.map((e) => `${e.args}: ${e.era} (${e.detail})`).join('; ')}`);
  if (expected === MODERN) {
    const bad = modernWireViolations(wire);
    assert(bad.length === 0, `${bad.length} violation(s): ${bad.slice(0, 6).join('; ')}`);
    const posts = wire.filter((w) => w.method === 'POST');
    const named = posts.filter((w) => w.mcpName !== undefined).length;
    return `${runs.length} runs; ${posts.length} POSTs, ${named} with Mcp-Name, no session id, no GET, no DELETE`;
  }
  const noSession = runs.filter((r) => !r.exchanges.some((w) => w.rpc === 'initialize' && w.gotSession));
  assert(noSession.length === 0, `runs without a session id: ${noSession.map((r) => r.args).join('; ')}`);
  const deletes = runs.filter((r) => r.exchanges.some((w) => w.method === 'DELETE' && w.status >= 200 && w.status < 300)).length;
  return `${runs.length} runs, each with initialize and a session id; ${deletes} ended it with DELETE`;
});

rmSync(home, { recursive: true, force: true });
proxy.server.close();
proxy.server.closeAllConnections?.();
if (process.env.MATRIX_VERBOSE) for (const w of wire) console.log(`  wire: ${fmt(w)}`);
const overall = [...new Set(runs.map((r) => eraFromWire(r.exchanges).era))];
console.log(
  `era: ${overall.length === 1 ? overall[0] : 'mixed'} (${runs.length} Inspector runs, protocol era setting ${era ?? 'default (legacy)'}${
    overall.length === 1 ? '' : `: ${overall.join(', ')}`
  })`,
);
console.log(`${label}: ${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
