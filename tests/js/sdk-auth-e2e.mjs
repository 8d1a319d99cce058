#!/usr/bin/env node
// The official TypeScript SDK client against a node (or a cluster behind a
// load balancer) with authorization on.
//
//   node tests/js/sdk-auth-e2e.mjs URL ISSUER CLIENT_ID CLIENT_SECRET TOKEN_A TOKEN_B
//
// URL: the MCP endpoint, which must equal the node's auth.resource (the SDK
// checks the protected resource metadata names it). ISSUER: the
// authorization server the SDK discovers through that metadata, where
// CLIENT_ID/CLIENT_SECRET get tokens (client_credentials). TOKEN_A and
// TOKEN_B: bearer tokens of two other principals, given as they are.
//
// Prints `ok - <step>` per step and `N passed, M failed`; exits 1 on the
// first failure.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ClientCredentialsProvider } from '@modelcontextprotocol/sdk/client/auth-extensions.js';

const [url, issuer, clientId, clientSecret, tokenA, tokenB] = process.argv.slice(2);
if (!tokenB) {
  console.error('usage: node sdk-auth-e2e.mjs URL ISSUER CLIENT_ID CLIENT_SECRET TOKEN_A TOKEN_B');
  process.exit(2);
}
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
    passed += 1;
    console.log(`ok - ${name}`);
  } catch (e) {
    console.log(`not ok - ${name}: ${e?.stack ?? e}`);
    console.log(`${passed} passed, 1 failed`);
    process.exit(1);
  } finally {
    clearTimeout(timer);
  }
}

function assert(cond, message) {
  if (!cond) throw new Error(message);
}

const clientInfo = { name: 'sdk-auth-e2e', version: '0.0.0' };

async function connectWith(opts) {
  const client = new Client(clientInfo);
  const transport = new StreamableHTTPClientTransport(new URL(url), opts);
  await client.connect(transport);
  return { client, transport };
}

async function whoami(client) {
  const result = await client.callTool({ name: 'whoami', arguments: {} });
  assert(!result.isError, `whoami failed: ${JSON.stringify(result)}`);
  return result.structuredContent;
}

await step('without a token the SDK meets 401 and cannot connect', async () => {
  let error;
  try {
    await connectWith({});
  } catch (e) {
    error = e;
  }
  assert(error, 'connected without a token');
  // The SDK's transport error carries the HTTP status as `code`.
  assert(error?.code === 401 || /\b401\b|Unauthorized/.test(String(error?.message)), `not a 401: ${error} (code ${error?.code})`);
});

let oauth;
await step('client_credentials: 401, protected resource metadata, issuer discovery, token, connect', async () => {
  const provider = new ClientCredentialsProvider({ clientId, clientSecret, expectedIssuer: issuer });
  oauth = await connectWith({ authProvider: provider });
  assert(provider.tokens()?.access_token, 'no token was obtained');
});

await step('tools/list and a tool call with the obtained token', async () => {
  const { tools } = await oauth.client.listTools();
  assert(tools.some((t) => t.name === 'whoami'), 'whoami not listed');
  const echo = await oauth.client.callTool({ name: 'echo', arguments: { message: 'hi' } });
  assert(echo.content?.[0]?.text === 'Echo: hi', `echo: ${JSON.stringify(echo)}`);
});

await step('the handler sees the principal of the token', async () => {
  const who = await whoami(oauth.client);
  assert(who.authenticated === true, `not authenticated: ${JSON.stringify(who)}`);
  assert(who.issuer === issuer.replace(/\/$/, '') || who.issuer === issuer, `issuer: ${JSON.stringify(who)}`);
});

await step('DELETE ends the session', async () => {
  await oauth.transport.terminateSession();
  await oauth.client.close();
});

let a;
await step('a bearer token given as a header connects', async () => {
  a = await connectWith({ requestInit: { headers: { Authorization: `Bearer ${tokenA}` } } });
  const who = await whoami(a.client);
  assert(who.authenticated === true, JSON.stringify(who));
});

await step("another principal using A's session id gets 404, and A's session lives on", async () => {
  const sessionId = a.transport.sessionId;
  assert(sessionId, 'no session id');
  const res = await fetch(url, {
    method: 'POST',
    headers: {
      'Content-Type': 'application/json',
      Accept: 'application/json, text/event-stream',
      'Mcp-Session-Id': sessionId,
      'MCP-Protocol-Version': a.transport.protocolVersion ?? '2025-11-25',
      Authorization: `Bearer ${tokenB}`,
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} }),
  });
  assert(res.status === 404, `expected 404, got ${res.status}: ${await res.text()}`);
  const del = await fetch(url, {
    method: 'DELETE',
    headers: { 'Mcp-Session-Id': sessionId, Authorization: `Bearer ${tokenB}` },
  });
  assert(del.status === 404, `DELETE by another principal: ${del.status}`);
  const who = await whoami(a.client);
  assert(who.authenticated === true, JSON.stringify(who));
  await a.transport.terminateSession();
  await a.client.close();
});

console.log(`${passed} passed, 0 failed`);
