#!/usr/bin/env node
// Client matrix, MCP Inspector CLI (`@modelcontextprotocol/inspector --cli`,
// default era): runs the five commands below against URL, one Inspector
// process each, and checks their JSON output (--format json).
//
//   node tests/js/client-matrix-inspector.mjs http://127.0.0.1:PORT/mcp
//
// The Inspector walks every page of a list itself and prints the union, so the
// list checks are: built-ins present, no duplicates, no nextCursor left over.
// Prints `ok - ...` / `not ok - ...` per command and `N passed, M failed`.

import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { LISTS, assert, fmt } from './client-matrix-lib.mjs';

const url = process.argv[2];
if (!url) {
  console.error('usage: node client-matrix-inspector.mjs http://127.0.0.1:PORT/mcp');
  process.exit(2);
}
const INSPECTOR = join(
  dirname(fileURLToPath(import.meta.url)),
  'node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js',
);
const TIMEOUT_MS = Number(process.env.MATRIX_STEP_TIMEOUT_MS ?? 20000);
// The Inspector keeps a catalog and client config under $HOME/.mcp-inspector;
// a throw-away HOME keeps the run from reading or writing the user's.
const home = mkdtempSync(join(tmpdir(), 'inspector-home-'));

/** Runs `inspector --cli URL --format json ARGS...`; resolves with its parsed stdout. */
function inspector(args) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [INSPECTOR, '--cli', url, '--format', 'json', ...args], {
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
      const where = `inspector ${args.join(' ')}`;
      if (code !== 0) {
        reject(new Error(`${where}: exit ${code ?? signal}; stderr ${fmt(stderr.slice(-600))} stdout ${fmt(stdout.slice(-300))}`));
        return;
      }
      try {
        resolve(JSON.parse(stdout));
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
  }
}

for (const list of LISTS) {
  await check(`inspector --method ${list.method}`, async () => {
    const out = await inspector(['--method', list.method]);
    const result = out.result;
    assert(result && Array.isArray(result[list.kind]), `no result.${list.kind} array in ${fmt(out).slice(0, 300)}`);
    assert(result.nextCursor === undefined, `nextCursor ${fmt(result.nextCursor)} left in the output`);
    const keys = result[list.kind].map((item) => item[list.key]);
    const dupes = keys.filter((k, i) => keys.indexOf(k) !== i);
    assert(dupes.length === 0, `duplicates: ${fmt(dupes)}`);
    const missing = list.expected.filter((k) => !keys.includes(k));
    assert(missing.length === 0, `missing ${fmt(missing)} from ${fmt(keys)}`);
    return `${keys.length} ${list.kind}`;
  });
}

await check('inspector --method tools/call --tool-name echo', async () => {
  const message = 'matrix inspector';
  const out = await inspector(['--method', 'tools/call', '--tool-name', 'echo', '--tool-arg', `message=${message}`]);
  const text = (out.result?.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');
  assert(text === `Echo: ${message}`, `text ${fmt(text)}, expected ${fmt(`Echo: ${message}`)}: ${fmt(out).slice(0, 300)}`);
  assert(out.result.isError !== true, 'isError is true');
  return fmt(text);
});

rmSync(home, { recursive: true, force: true });
console.log(`inspector-cli: ${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
