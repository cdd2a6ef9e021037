#!/usr/bin/env node
// Benchmark: what the JSON body guards of the service base (src/request-guards.ts) cost, on a
// typical 2 KB chat body and on 1 MB bodies (a long chat history; one long prompt). Two views:
//   - the checks alone (UTF-8, nesting depth, the lone-surrogate prefilter) next to what the
//     parse costs anyway (toString + JSON.parse), on the body cut in 64 KB chunks as a socket
//     delivers it;
//   - a POST through Fastify (inject), with and without guardJsonBodies, parse and reply included.
//   node services/common/bench/body-guards.mjs      (build @strata/common first)
import Fastify from 'fastify';
import { DEFAULT_HTTP_LIMITS, guardJsonBodies, JsonDepthScanner, Utf8Scanner } from '../dist/index.js';

function chat(messages) {
  return JSON.stringify({
    model: 'tinyllama',
    max_tokens: 256,
    stream: true,
    messages: Array.from({ length: messages }, (_, i) => ({
      role: i % 2 ? 'assistant' : 'user',
      content:
        `Message ${i}: the quick brown fox jumps over the lazy dog, "quoted", caf\u00e9 \u20ac.`.repeat(2),
    })),
  });
}

function sized(bytes, make) {
  let n = 1;
  while (Buffer.byteLength(make(n)) < bytes) n++;
  return Buffer.from(make(n));
}

const bodies = {
  'chat, 2 KB': sized(2048, chat),
  'chat history, 1 MB': sized(1024 * 1024, chat),
  'one long prompt, 1 MB': sized(1024 * 1024, (n) =>
    JSON.stringify({ prompt: 'Once upon a time, '.repeat(n * 64) }),
  ),
};

function chunks(body) {
  const out = [];
  for (let at = 0; at < body.length; at += 65536) out.push(body.subarray(at, at + 65536));
  return out;
}

// The best of 5 rounds: the machine may be shared, and a busy neighbour only ever adds time.
const ROUNDS = 5;

function time(label, reps, fn) {
  for (let i = 0; i < Math.min(reps, 50); i++) fn();
  let best = Number.POSITIVE_INFINITY;
  for (let round = 0; round < ROUNDS; round++) {
    const started = process.hrtime.bigint();
    for (let i = 0; i < reps; i++) fn();
    best = Math.min(best, Number(process.hrtime.bigint() - started) / 1000 / reps);
  }
  return [label, best];
}

const surrogate = [Buffer.from('\\ud'), Buffer.from('\\uD')];
const rows = [];
for (const [name, body] of Object.entries(bodies)) {
  const parts = chunks(body);
  const reps = body.length < 10_000 ? 20_000 : 40;
  const results = [
    time('UTF-8', reps, () => {
      const s = new Utf8Scanner();
      for (const c of parts) s.push(c);
      s.end();
    }),
    time('depth', reps, () => {
      const s = new JsonDepthScanner(DEFAULT_HTTP_LIMITS.maxJsonDepth);
      for (const c of parts) s.push(c);
    }),
    time('surrogate prefilter', reps, () => {
      for (const c of parts) surrogate.some((e) => c.includes(e));
    }),
    time('toString + JSON.parse', reps, () => JSON.parse(body.toString('utf8'))),
  ];
  rows.push({
    body: `${name} (${body.length} B)`,
    ...Object.fromEntries(results.map(([k, us]) => [`${k} µs`, us.toFixed(1)])),
  });
}
console.table(rows);

async function app(guarded) {
  const fastify = Fastify({ bodyLimit: 8 * 1024 * 1024 });
  fastify.decorate('httpLimits', { ...DEFAULT_HTTP_LIMITS });
  if (guarded) guardJsonBodies(fastify);
  fastify.post('/x', async (request) => ({ keys: Object.keys(request.body).length }));
  await fastify.ready();
  return fastify;
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

// Requests to the two apps alternate, one by one, and each is timed alone: the median per app
// is what a request costs, without the GC pauses and busy neighbours that hit either at random.
const requests = [];
const plainApp = await app(false);
const guardedApp = await app(true);
for (const [name, body] of Object.entries(bodies)) {
  const reps = body.length < 10_000 ? 20_000 : 300;
  const send = (target) =>
    target.inject({
      method: 'POST',
      url: '/x',
      headers: { 'content-type': 'application/json' },
      payload: body,
    });
  const times = { plain: [], guarded: [] };
  for (let i = 0; i < reps + 50; i++) {
    for (const [key, target] of [
      ['plain', plainApp],
      ['guarded', guardedApp],
    ]) {
      const started = process.hrtime.bigint();
      await send(target);
      if (i >= 50) times[key].push(Number(process.hrtime.bigint() - started) / 1000);
    }
  }
  const plain = median(times.plain);
  const guarded = median(times.guarded);
  requests.push({
    body: `${name} (${body.length} B)`,
    'Fastify µs/request (median)': plain.toFixed(1),
    'with the guards': guarded.toFixed(1),
    added: `${(guarded - plain).toFixed(1)} µs`,
  });
}
await plainApp.close();
await guardedApp.close();
console.table(requests);
