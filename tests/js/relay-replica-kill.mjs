#!/usr/bin/env node
// One replica of a hosted HTTP server killed under its sessions: the
// sessions it kept in its memory end (the client hears 404, as for any
// ended session), every other session goes on, and new sessions open at the
// replicas still there. Driven by the official TypeScript client (SDK v1)
// through the nodes hosting the replicas (`[[upstreams]] urls`).
//
//   node tests/js/relay-replica-kill.mjs HOSTED-URL REPLICA-PID
//
// Nine sessions are opened first: each node opens its upstream sessions at
// the replicas in turn, so with three replicas behind three nodes some node
// opened at least three, one at every replica, and the replica killed held
// some sessions and not all. Prints `ok - <step>` per step and
// `relay-replica-kill: N passed, M failed`.

import assert from 'node:assert/strict';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { checker, sleep, textOf } from './client-matrix-lib.mjs';

const [hostedUrl, pidArg] = process.argv.slice(2);
const pid = Number(pidArg);
if (!hostedUrl || !Number.isInteger(pid) || pid <= 0) {
  console.error('usage: node relay-replica-kill.mjs HOSTED-URL REPLICA-PID');
  process.exit(2);
}
const { check, finish } = checker({ stepMs: 60000 });
const SESSIONS = 9;

async function connect() {
  const client = new Client({ name: 'relay-replica-kill', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(hostedUrl)));
  return client;
}

const greet = (client, name) => client.callTool({ name: 'greet', arguments: { name } });
/** A 404 from the node: the client's session has ended. */
const ended = (err) => err?.code === 404 || /\b404\b/.test(String(err?.message));

const clients = [];
await check(`${SESSIONS} sessions through the nodes, each greeted`, async () => {
  for (let i = 0; i < SESSIONS; i++) {
    const client = await connect();
    clients.push(client);
    assert.equal(textOf(await greet(client, `s${i}`)), `Hello, s${i}!`);
  }
});

if (clients.length === SESSIONS) {
  await check(`replica ${pid} killed: its sessions end (404), and only those`, async () => {
    process.kill(pid, 'SIGKILL');
    // Each session: still served, or ended. A call in between may fail
    // naming the upstream (-32603) before the node has seen the replica
    // gone; every session settles within 30 s.
    const settled = await Promise.all(
      clients.map(async (client, i) => {
        for (let attempt = 0; attempt < 300; attempt++) {
          try {
            const text = textOf(await greet(client, `s${i}`));
            assert.equal(text, `Hello, s${i}!`);
            // Served once more: this session's replica lives, unless the
            // node has not seen the kill yet; ask again a while later.
            if (attempt >= 20) return 'served';
          } catch (err) {
            if (ended(err)) return 'ended';
            assert.match(String(err?.message), /upstream|32603/, `session ${i}: ${err}`);
          }
          await sleep(100);
        }
        throw new Error(`session ${i} neither went on nor ended in 30 s`);
      }),
    );
    const count = (what) => settled.filter((s) => s === what).length;
    assert.ok(count('ended') >= 1, `no session ended: ${settled}`);
    assert.ok(count('served') >= 1, `every session ended: ${settled}`);
    return `${count('ended')} ended, ${count('served')} went on`;
  });

  await check('new sessions open at the replicas still there', async () => {
    for (let i = 0; i < 4; i++) {
      const client = await connect();
      assert.equal(textOf(await greet(client, `new${i}`)), `Hello, new${i}!`);
      await client.close();
    }
  });
}

for (const client of clients) await client.close().catch(() => {});
finish('relay-replica-kill');
