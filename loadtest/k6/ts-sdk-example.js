// The greet operation of loadtest/scenarios/ts-sdk-example.toml, written
// for k6, which knows HTTP but not MCP: the session, the SSE framing of
// the answers and the JSON-RPC ids are this script's job.
//   k6 run -e URL=http://127.0.0.1:3000/mcp --vus 8 --duration 30s loadtest/k6/ts-sdk-example.js
import http from 'k6/http';
import { check } from 'k6';

const URL = __ENV.URL || 'http://127.0.0.1:3000/mcp';
const HEADERS = {
  'Content-Type': 'application/json',
  Accept: 'application/json, text/event-stream',
};

export const options = {
  thresholds: {
    checks: ['rate>0.999'],
    'http_req_duration{op:greet}': ['p(99)<500'],
  },
};

// One JSON-RPC message from a JSON body or the `data:` lines of an SSE body.
function message(res) {
  if (String(res.headers['Content-Type']).startsWith('text/event-stream')) {
    const data = res.body.split('\n').filter((l) => l.startsWith('data:'));
    return data.length === 1 ? JSON.parse(data[0].slice(5)) : null;
  }
  return JSON.parse(res.body);
}

// Each virtual user opens its session once.
let session = null;
let nextId = 1;

function post(body, tags) {
  const headers = Object.assign({ 'MCP-Protocol-Version': '2025-11-25' }, HEADERS);
  if (session) headers['Mcp-Session-Id'] = session;
  return http.post(URL, JSON.stringify(body), { headers, tags });
}

function open() {
  const res = post({
    jsonrpc: '2.0', id: 0, method: 'initialize',
    params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'k6', version: '0' } },
  }, { op: 'initialize' });
  session = res.headers['Mcp-Session-Id'];
  check(res, { 'initialize answered': (r) => r.status === 200 && session !== undefined });
  post({ jsonrpc: '2.0', method: 'notifications/initialized' }, { op: 'initialized' });
}

export default function () {
  if (session === null) open();
  const id = nextId++;
  const name = `user${__VU}-${id}`;
  const res = post({
    jsonrpc: '2.0', id, method: 'tools/call',
    params: { name: 'greet', arguments: { name } },
  }, { op: 'greet' });
  const msg = res.status === 200 ? message(res) : null;
  check(msg, {
    'greet answered for this id': (m) => m !== null && m.id === id && m.result !== undefined,
    'greet says hello': (m) => m !== null && m.result && m.result.content[0].text === `Hello, ${name}!`,
  });
}
