#!/usr/bin/env node
// Several servers behind one endpoint (a federation of `[[upstreams]]`),
// driven by an official client and compared with each upstream reached
// directly: every tool, prompt and resource of every upstream, walked page
// by page, under its federated name and once only; a call, a prompt and a
// read of each answered as the upstream answers them itself.
//
//   node tests/js/relay-federation.mjs FEDERATED-URL SPEC.json [--era session|2026-07-28]
//
// SPEC.json lists the upstreams as configured, in order: `{name, command:
// [argv...], env: {...}}` (stdio, started here directly with the SDK's stdio
// transport) or `{name, url}` (HTTP), each with `call: {name, arguments}`,
// and optionally `prompt: {name, arguments}` and `read: uri`. `session` (the
// default): the SDK v1 client through the federation; `2026-07-28`: the SDK
// v2 client pinned to that revision. Prints `ok - <step>` per step and
// `relay-federation <era>: N passed, M failed`.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';

import { Client as ClientV2, StreamableHTTPClientTransport as HttpTransportV2 } from '@modelcontextprotocol/client';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { MODERN, checker } from './client-matrix-lib.mjs';

const [federatedUrl, specPath, flag, eraArg] = process.argv.slice(2);
const era = eraArg ?? 'session';
if (!federatedUrl || !specPath || (flag !== undefined && (flag !== '--era' || !['session', MODERN].includes(era)))) {
  console.error(`usage: node relay-federation.mjs FEDERATED-URL SPEC.json [--era session|${MODERN}]`);
  process.exit(2);
}
const upstreams = JSON.parse(readFileSync(specPath, 'utf8'));
const { check, finish } = checker({ stepMs: 60000 });
const info = { name: 'relay-federation', version: '1.0.0' };

const federated =
  era === MODERN
    ? new ClientV2(info, { capabilities: {}, versionNegotiation: { mode: { pin: MODERN } } })
    : new Client(info, { capabilities: {} });
const federatedTransport = () =>
  era === MODERN ? new HttpTransportV2(new URL(federatedUrl)) : new StreamableHTTPClientTransport(new URL(federatedUrl));

/** Each upstream's own client, reached directly. */
const direct = new Map();

/** How the federation names upstream `u`'s tools and prompts, and its URIs. */
const nameOf = (u, name) => `${u.name}_${name}`;
const uriOf = (u, uri) => `${u.name.toLowerCase().replaceAll('_', '-')}+${uri}`;

/** Every item of a list, page by page: its `key`s, and how many pages. */
async function walk(client, list, field, key) {
  const out = [];
  let cursor;
  let pages = 0;
  do {
    const page = await client[list](cursor ? { cursor } : {});
    out.push(...page[field].map((i) => i[key]));
    cursor = page.nextCursor;
    pages += 1;
    assert.ok(pages < 500, `${list} did not end`);
  } while (cursor);
  return { names: out, pages };
}

/** A result without what legitimately differs between two runs of one call. */
const comparable = (result) => JSON.parse(JSON.stringify(result, (k, v) => (k === '_meta' ? undefined : v)));

let connected = false;
await check(`connect through the federation (${era}) and to each of ${upstreams.length} upstreams directly`, async () => {
  await federated.connect(federatedTransport());
  for (const u of upstreams) {
    const client = new Client(info, { capabilities: {} });
    const transport = u.url
      ? new StreamableHTTPClientTransport(new URL(u.url))
      : new StdioClientTransport({ command: u.command[0], args: u.command.slice(1), env: { ...process.env, ...(u.env ?? {}) }, stderr: 'ignore' });
    await client.connect(transport);
    direct.set(u.name, client);
  }
  connected = true;
  const server = federated.getServerVersion();
  assert.equal(server?.name, upstreams.map((u) => u.name).join('+'), `serverInfo ${JSON.stringify(server)}`);
  return server.name;
});

if (connected) {
  const lists = [
    ['listTools', 'tools', 'name', 'tools', nameOf],
    ['listPrompts', 'prompts', 'name', 'prompts', nameOf],
    ['listResources', 'resources', 'uri', 'resources', uriOf],
    ['listResourceTemplates', 'resourceTemplates', 'uriTemplate', 'resources', uriOf],
  ];
  for (const [list, field, key, capability, expose] of lists) {
    await check(`${list}: every upstream's, page by page, each once, under its federated name`, async () => {
      const { names, pages } = await walk(federated, list, field, key);
      assert.equal(new Set(names).size, names.length, `an entry twice: ${names}`);
      const expected = [];
      for (const u of upstreams) {
        const client = direct.get(u.name);
        if (!client.getServerCapabilities()?.[capability]) continue;
        expected.push(...(await walk(client, list, field, key)).names.map((n) => expose(u, n)));
      }
      assert.deepEqual([...names].sort(), [...expected].sort());
      return `${names.length} in ${pages} pages`;
    });
  }

  for (const u of upstreams) {
    const own = direct.get(u.name);
    await check(`${u.name}: ${u.call.name} answered as the upstream answers it`, async () => {
      const through = await federated.callTool({ name: nameOf(u, u.call.name), arguments: u.call.arguments });
      const itself = await own.callTool(u.call);
      assert.deepEqual(comparable(through), comparable(itself));
    });
    if (u.prompt) {
      await check(`${u.name}: prompt ${u.prompt.name} as the upstream gives it`, async () => {
        const through = await federated.getPrompt({ ...u.prompt, name: nameOf(u, u.prompt.name) });
        assert.deepEqual(through.messages, (await own.getPrompt(u.prompt)).messages);
      });
    }
    if (u.read) {
      await check(`${u.name}: ${u.read} read under its federated URI`, async () => {
        const through = await federated.readResource({ uri: uriOf(u, u.read) });
        const itself = await own.readResource({ uri: u.read });
        assert.deepEqual(
          through.contents,
          itself.contents.map((c) => ({ ...c, uri: uriOf(u, c.uri) })),
        );
      });
    }
  }

  await check('a tool of no upstream is refused, naming none', async () => {
    await assert.rejects(federated.callTool({ name: 'nobody_echo', arguments: {} }), /no upstream serves the tool/);
  });
}

await federated.close().catch(() => {});
for (const client of direct.values()) await client.close().catch(() => {});
finish(`relay-federation ${era}`);
