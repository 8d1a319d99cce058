#!/usr/bin/env node
// Tasks in a 2025-11-25 session, driven by the two official clients that run
// them: the TypeScript SDK v1 (`client.experimental.tasks`) and the SDK v2
// client with `@modelcontextprotocol/ext-tasks` (its task sessions), over
// each transport that opens a session:
//
//   node tests/js/session-tasks.mjs http URL
//   node tests/js/session-tasks.mjs sse URL-OF-/sse        (legacy HTTP+SSE)
//   node tests/js/session-tasks.mjs stdio MCP-NODE-BINARY  (spawns `mcp-node --stdio`)
//
// Checks, against the node's task tools (crates/mcp-node/src/task_fixtures.rs):
//   - capabilities.tasks (task-augmented tools/call, tasks/cancel) and each
//     tool's execution.taskSupport, as the SDK caches them;
//   - a task's life as each client lives it: created, polled, its result
//     fetched (slow_compute); a question asked from inside it, handled by the
//     client's elicitation handler and naming the task (confirm_delete); a
//     tool that reports an error failing its task (failing_job, which runs
//     only as a task); a task cancelled while it works;
//   - a tool that is no task answered at once through the same API.
// Prints `ok - <check>` / `not ok - <check>: <reason>` and
// `session-tasks <transport>: N passed, M failed`; exits 1 on failure.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import {
  Client as ClientV2,
  SSEClientTransport as SSEClientTransportV2,
  StreamableHTTPClientTransport as StreamableHTTPClientTransportV2,
} from '@modelcontextprotocol/client';
import { StdioClientTransport as StdioClientTransportV2 } from '@modelcontextprotocol/client/stdio';
import {
  createApplicationInputHandler,
  createTaskSessionFromClient,
  resultFromTaskOutcome,
} from '@modelcontextprotocol/ext-tasks/client';
import { fmt, assert, textOf, checker, listAll } from './client-matrix-lib.mjs';

const [transportKind, target] = process.argv.slice(2);
if (!['http', 'sse', 'stdio'].includes(transportKind) || !target) {
  console.error('usage: node session-tasks.mjs http URL | sse URL | stdio MCP-NODE');
  process.exit(2);
}
const label = `session-tasks ${transportKind}`;
const RELATED = 'io.modelcontextprotocol/related-task';
const { check, finish } = checker({ stepMs: 30000 });

function transport(v2) {
  const url = () => new URL(target);
  if (transportKind === 'http') return v2 ? new StreamableHTTPClientTransportV2(url()) : new StreamableHTTPClientTransport(url());
  if (transportKind === 'sse') return v2 ? new SSEClientTransportV2(url()) : new SSEClientTransport(url());
  const stdio = { command: target, args: ['--stdio'], stderr: 'ignore' };
  return v2 ? new StdioClientTransportV2(stdio) : new StdioClientTransport(stdio);
}

/**
 * Every event of an SDK v1 `callToolStream`, to its end. Each call names its
 * task (`options.task`): the SDK's own choice reads the taskSupport it cached
 * from the last tools/list page only (1.32.2 clears the cache per page), which
 * through the cluster's two-item pages misses most task tools.
 */
async function streamed(client, name, args, options = {}) {
  const events = [];
  for await (const event of client.experimental.tasks.callToolStream({ name, arguments: args }, CallToolResultSchema, options)) {
    events.push(event);
  }
  return events;
}

const kinds = (events) => events.map((e) => e.type).join(',');

// The TypeScript SDK v1.
const v1 = new Client({ name: 'session-tasks-v1', version: '1.0.0' }, { capabilities: { elicitation: {} } });
const asked = [];
v1.setRequestHandler(ElicitRequestSchema, async (request) => {
  asked.push(request.params);
  return { action: 'accept', content: { confirm: true } };
});
let connected = false;
await check(`SDK v1: connect (${transportKind}), capabilities.tasks declared`, async () => {
  await v1.connect(transport(false));
  const tasks = v1.getServerCapabilities()?.tasks;
  assert(tasks?.requests?.tools?.call && tasks.cancel, `capabilities.tasks ${fmt(tasks)}`);
  assert(tasks.list === undefined, `tasks.list declared: ${fmt(tasks)}`);
  connected = true;
  return fmt(tasks);
});

if (connected) {
  await check('SDK v1: tools/list says which tools run as tasks', async () => {
    const tools = await listAll((method, params) => v1.listTools(params), 'tools/list', 'tools');
    const support = Object.fromEntries(tools.filter((t) => t.execution).map((t) => [t.name, t.execution.taskSupport]));
    assert(support.slow_compute === 'optional' && support.failing_job === 'required', `taskSupport ${fmt(support)}`);
    assert(!('echo' in support), 'echo says execution');
    return `${Object.keys(support).length} task tools`;
  });

  await check('SDK v1: callToolStream runs slow_compute as a task and fetches its result', async () => {
    const events = await streamed(v1, 'slow_compute', { seconds: 0.3, label: 'v1' }, { task: { ttl: 60000 } });
    const created = events.find((e) => e.type === 'taskCreated');
    assert(created?.task?.ttl === 60000 && created.task.status === 'working', `events ${kinds(events)}: ${fmt(created)}`);
    const last = events.at(-1);
    assert(last.type === 'result' && textOf(last.result) === 'Computed v1 in 0.3 s.', `last ${fmt(last)}`);
    assert(last.result._meta?.[RELATED]?.taskId === created.task.taskId, `result _meta ${fmt(last.result._meta)}`);
    return kinds(events);
  });

  await check('SDK v1: a question from inside a task reaches the elicitation handler, naming the task', async () => {
    const before = asked.length;
    const events = await streamed(v1, 'confirm_delete', { filename: 'v1.txt' }, { task: {} });
    const created = events.find((e) => e.type === 'taskCreated');
    assert(created, `no task: ${kinds(events)}`);
    const questions = asked.slice(before);
    assert(questions.length === 1, `${questions.length} question(s)`);
    assert(questions[0]._meta?.[RELATED]?.taskId === created.task.taskId, `question _meta ${fmt(questions[0]._meta)}`);
    const last = events.at(-1);
    assert(last.type === 'result' && textOf(last.result) === 'Deleted v1.txt.', `last ${fmt(last)}`);
    return kinds(events);
  });

  await check('SDK v1: failing_job (only as a task) fails its task', async () => {
    const events = await streamed(v1, 'failing_job', {}, { task: {} });
    const last = events.at(-1);
    assert(events.some((e) => e.type === 'taskCreated'), `no task: ${kinds(events)}`);
    assert(last.type === 'error' && /failed/.test(last.error?.message), `last ${fmt(last)} ${last.error?.message}`);
    return last.error.message;
  });

  await check('SDK v1: cancelTask ends a working task cancelled', async () => {
    const stream = v1.experimental.tasks.callToolStream(
      { name: 'slow_compute', arguments: { seconds: 60, label: 'never' } }, CallToolResultSchema, { task: {} });
    const events = [];
    for await (const event of stream) {
      events.push(event);
      if (event.type === 'taskCreated') {
        const cancelled = await v1.experimental.tasks.cancelTask(event.task.taskId);
        assert(cancelled.status === 'cancelled' && cancelled.taskId === event.task.taskId, `cancel ${fmt(cancelled)}`);
      }
    }
    const last = events.at(-1);
    assert(last.type === 'error' && /cancelled/.test(last.error?.message), `last ${fmt(last)} ${last.error?.message}`);
    const task = await v1.experimental.tasks.getTask(events[0].task.taskId);
    assert(task.status === 'cancelled', `tasks/get ${fmt(task)}`);
    return kinds(events);
  });
}
await v1.close().catch(() => {});

// The TypeScript SDK v2 with ext-tasks.
const v2 = new ClientV2({ name: 'session-tasks-v2', version: '1.0.0' }, { capabilities: { elicitation: {} } });
const contexts = [];
let session;
await check(`ext-tasks: connect (${transportKind}), a task session of the v2 client`, async () => {
  await v2.connect(transport(true));
  assert(v2.getNegotiatedProtocolVersion() === '2025-11-25', `negotiated ${v2.getNegotiatedProtocolVersion()}`);
  session = createTaskSessionFromClient(v2, {
    endpointId: `session-tasks-${transportKind}`,
    onInputRequest: createApplicationInputHandler({
      elicitation: async (_request, context) => {
        contexts.push(context);
        return { action: 'accept', content: { confirm: false } };
      },
      sampling: async () => {
        throw new Error('no sampling here');
      },
      roots: async () => ({ roots: [] }),
    }),
  });
  return fmt(session.capabilities);
});

/** Calls `name` through the task session and settles it. */
async function settled(name, args, task) {
  const execution = await session.callTool(name, args, task ? { task } : {});
  return (await execution.settle()).outcome;
}

if (session) {
  await check('ext-tasks: confirm_delete as a task, its question answered in the task', async () => {
    const outcome = await settled('confirm_delete', { filename: 'v2.txt' }, { preference: 'require' });
    assert(outcome.status === 'completed', `outcome ${fmt(outcome)}`);
    assert(textOf(resultFromTaskOutcome(outcome)) === 'Kept v2.txt.', `result ${fmt(outcome.result)}`);
    assert(contexts.length === 1 && contexts[0].scope === 'task', `input contexts ${fmt(contexts)}`);
    return `${outcome.status}, ${outcome.task?.taskId ?? 'no task view'}`;
  });

  await check('ext-tasks: failing_job fails its task with its statusMessage', async () => {
    const outcome = await settled('failing_job', {});
    assert(outcome.status === 'failed' && /the job failed/.test(outcome.error?.message), `outcome ${fmt(outcome)} ${outcome.error?.message}`);
    return outcome.error.message;
  });

  await check('ext-tasks: a task cancelled while it works', async () => {
    const execution = await session.callTool('slow_compute', { seconds: 60, label: 'never' }, { task: { preference: 'require' } });
    await execution.cancel();
    const { outcome } = await execution.settle();
    assert(outcome.status === 'cancelled', `outcome ${fmt(outcome)}`);
    return outcome.status;
  });

  await check('ext-tasks: a tool that is no task answers at once', async () => {
    const outcome = await settled('echo', { message: 'now' });
    assert(outcome.status === 'completed' && textOf(outcome.result) === 'Echo: now', `outcome ${fmt(outcome)}`);
    return fmt(textOf(outcome.result));
  });
  await session.close().catch(() => {});
}
await v2.close().catch(() => {});

finish(label);
