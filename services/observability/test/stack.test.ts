// The whole platform as real processes (backend, router, edge, sidecar) scraped by a real
// Prometheus: a short mixed load through the edge, then every dashboard query and every rule
// must return data; a trace id must reach every layer's logs; and killing the sidecar must not
// touch a running stream.
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import type { Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { optionalTestModel } from '@strata/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFailingBackend } from './support/failing-backend.js';
import { printingNvidiaSmi } from './support/fake-nvidia-smi.js';
import { freePort, type Prometheus, startPrometheus, waitFor } from './support/prometheus.js';
import { dashboardQueries, RULE_FILES, ruleQueries, type ShippedQuery } from './support/queries.js';
import { type LoggedService, MODEL, modelDir, postJson, randomTokens, startLogged } from './support/stack.js';

const tiny = optionalTestModel(MODEL);

const ACME_KEY = 'acme-test-key';
const TINY_KEY = 'tiny-test-key';
const sha = (key: string) => `sha256:${createHash('sha256').update(key).digest('hex')}`;
const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

// A shared opening longer than one KV block (16 tokens), so repeated prompts hit the prefix cache.
const STORY =
  'Once upon a time, there was a little girl named Lily. She loved to play outside in the sun with her friends.';

let backend: LoggedService;
let router: LoggedService;
let edge: LoggedService;
let sidecar: LoggedService;
let failing: Server;
let prometheus: Prometheus;

beforeAll(async () => {
  const dir = mkdtempSync(join(tmpdir(), 'strata-obs-stack-'));
  backend = await startLogged('backend', 'backend', {
    STRATA_MODEL_DIR: modelDir(),
    STRATA_KV_CACHE_BLOCKS: '256',
    STRATA_ENGINE_THREADS: '1',
  });
  const fault = await startFailingBackend(MODEL);
  failing = fault.server;
  const routes = join(dir, 'routes.yaml');
  writeFileSync(
    routes,
    JSON.stringify({
      // Ties go to the first name: "a-faulty" (always idle) comes first for a prompt no backend
      // has cached, so those requests fail there and are retried on backend-1, and its
      // consecutive failures eject it.
      pools: {
        main: {
          backends: [
            { name: 'backend-1', url: backend.url },
            { name: 'a-faulty', url: fault.url },
          ],
        },
      },
      rules: [{ name: 'long-prompts', match: { promptChars: { min: 1000 } }, pool: 'main' }],
      default: { pool: 'main' },
    }),
  );
  // Session affinity against a Redis that is not there: routing goes on, and the router's
  // Redis-health series (store errors, "unavailable" lookups) have something to show.
  router = await startLogged('router', 'router', {
    STRATA_ROUTES_FILE: routes,
    REDIS_URL: `redis://127.0.0.1:${await freePort()}`,
  });
  const tenants = join(dir, 'tenants.yaml');
  writeFileSync(
    tenants,
    JSON.stringify({
      tenants: [
        { name: 'acme', keys: [sha(ACME_KEY)] },
        { name: 'tiny', keys: [sha(TINY_KEY)], requests_per_minute: 2, tokens_per_minute: 40 },
      ],
    }),
  );
  edge = await startLogged('edge', 'edge', {
    STRATA_ROUTER_URL: router.url,
    STRATA_EDGE_TENANTS_FILE: tenants,
  });
  // No GPU here: a stand-in nvidia-smi on PATH gives the GPU dashboard its DCGM series.
  sidecar = await startLogged('sidecar', 'sidecar', {
    STRATA_BACKEND_URL: backend.url,
    PATH: `${printingNvidiaSmi()}:${process.env.PATH}`,
  });
  prometheus = await startPrometheus(
    [
      { job: 'strata-edge', targets: [edge.hostPort] },
      { job: 'strata-router', targets: [router.hostPort] },
      { job: 'strata-backend', targets: [backend.hostPort] },
      { job: 'strata-sidecar', targets: [sidecar.hostPort] },
    ],
    RULE_FILES,
  );
  await waitFor('the backend to be ready', async () => (await fetch(`${backend.url}/health/ready`)).ok);
  // Rates need a sample before the load: wait for a scrape of every target.
  await waitFor('a first scrape of every target', async () => {
    const up = await prometheus.query('sum(up)');
    return Number(up[0]?.value[1]) === 4;
  });
}, 240_000);

afterAll(async () => {
  await prometheus?.stop();
  await Promise.all([edge, router, sidecar, backend].map((s) => s?.stop()));
  await new Promise((r) => (failing ? failing.close(r) : r(undefined)));
});

/** Runs `tasks` with at most `width` in flight. */
async function pool<T>(width: number, tasks: (() => Promise<T>)[]): Promise<T[]> {
  const results: T[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < tasks.length) {
        const i = next++;
        results[i] = await (tasks[i] as () => Promise<T>)();
      }
    }),
  );
  return results;
}

async function driveLoad(): Promise<void> {
  const generate = `${edge.url}/v1/generate`;
  const good: (() => Promise<number>)[] = [];
  for (let i = 0; i < 12; i++) {
    good.push(async () => {
      const r = await postJson(
        generate,
        { prompt: `${STORY} ${i % 3 === 0 ? 'One day' : 'Then'}`, max_tokens: 24, stream: true },
        { ...bearer(ACME_KEY), ...(i % 2 === 0 ? { 'x-session-id': `session-${i % 4}` } : {}) },
      );
      expect(r.events.at(-1)?.type).toBe('done');
      return r.status;
    });
    good.push(
      async () => (await postJson(generate, { prompt: STORY, max_tokens: 16 }, bearer(ACME_KEY))).status,
    );
  }
  for (let i = 0; i < 4; i++) {
    good.push(
      async () =>
        (
          await postJson(
            `${edge.url}/v1/completions`,
            { model: MODEL, prompt: STORY, max_tokens: 8 },
            bearer(ACME_KEY),
          )
        ).status,
    );
  }
  // Prompts no backend has seen: tried on a-faulty first, retried on backend-1.
  for (let i = 0; i < 4; i++) {
    good.push(
      async () =>
        (await postJson(generate, { prompt: `Tale ${i}: a dog ran home.`, max_tokens: 4 }, bearer(ACME_KEY)))
          .status,
    );
  }
  // A prompt over 1000 characters takes the router's long-prompts rule.
  good.push(
    async () =>
      (await postJson(generate, { prompt: STORY.repeat(10), max_tokens: 4 }, bearer(ACME_KEY))).status,
  );
  expect(await pool(4, good)).toEqual(good.map(() => 200));

  // Refused ones: no key, a bad body, a prompt over the model's context (the backend refuses it).
  expect((await postJson(generate, { prompt: STORY })).status).toBe(401);
  expect((await postJson(generate, { prompt: 5 }, bearer(ACME_KEY))).status).toBe(400);
  expect(
    (await postJson(generate, { prompt: randomTokens(600, 1), max_tokens: 1 }, bearer(ACME_KEY))).status,
  ).toBe(400);
  // A tenant with a tiny quota: 2 requests a minute, 40 tokens.
  const tiny: number[] = [];
  for (let i = 0; i < 5; i++)
    tiny.push((await postJson(generate, { prompt: STORY, max_tokens: 16 }, bearer(TINY_KEY))).status);
  expect(tiny.filter((s) => s === 429).length).toBeGreaterThan(0);
}

/** Queries with no sample, or only NaN/Inf samples, after the load. */
async function emptyQueries(queries: ShippedQuery[]): Promise<string[]> {
  const empty: string[] = [];
  for (const q of queries) {
    const result = await prometheus.query(q.expr);
    if (!result.some((s) => Number.isFinite(Number(s.value[1])))) empty.push(`${q.source}: ${q.expr}`);
  }
  return empty;
}

describe.skipIf(!tiny.path)(`observability over a running stack${tiny.skipped}`, () => {
  it('answers every dashboard query and every rule with data after a short load', async () => {
    // Labelled series are born at their first event; a rate needs that first value scraped
    // before the next events. So: one round, a scrape that holds its series, a second round.
    await driveLoad();
    await waitFor('the first round in Prometheus', async () => {
      const seen = await prometheus.query(
        'count(strata_edge_upstream_duration_seconds_count) + count(strata_router_upstream_first_byte_seconds_count)',
      );
      return seen.length > 0;
    });
    await driveLoad();
    const queries = [...dashboardQueries(), ...ruleQueries()];
    expect(queries.length).toBeGreaterThan(100);
    // Scrapes are 1 s apart and rules run every second: wait (speed-independently) until every
    // query has data, then report the ones that never got any.
    let empty: string[] = [];
    await waitFor(
      'every query to return data',
      async () => {
        empty = await emptyQueries(queries);
        return empty.length === 0;
      },
      60_000,
    ).catch(() => undefined);
    expect(empty).toEqual([]);
  }, 300_000);

  it("carries one request's trace id into the logs of edge, router and backend", async () => {
    const traceId = randomBytes(16).toString('hex');
    const traceparent = `00-${traceId}-${randomBytes(8).toString('hex')}-01`;
    const r = await postJson(
      `${edge.url}/v1/generate`,
      { prompt: STORY, max_tokens: 4 },
      { ...bearer(ACME_KEY), traceparent },
    );
    expect(r.status).toBe(200);
    const has = (s: LoggedService) => s.logs.some((line) => line.trace_id === traceId);
    await waitFor(
      'the trace id in every log',
      async () => has(edge) && has(router) && has(backend),
      10_000,
    ).catch(() => undefined);
    expect({ edge: has(edge), router: has(router), backend: has(backend) }).toEqual({
      edge: true,
      router: true,
      backend: true,
    });
  }, 60_000);

  it('lets a backend stream finish with done when the sidecar is killed -9 mid-stream', async () => {
    await waitFor('the sidecar polling the backend', async () => {
      const status = (await (await fetch(`${sidecar.url}/status`)).json()) as { backend: { up: boolean } };
      return status.backend.up;
    });
    let killed: Promise<void> | undefined;
    const result = await postJson(
      `${backend.url}/v1/generate`,
      { prompt: STORY, max_tokens: 300, ignore_eos: true, stream: true },
      {},
      (event) => {
        if (event.type === 'token' && !killed) killed = sidecar.stop('SIGKILL');
      },
    );
    await killed;
    expect(sidecar.child.signalCode).toBe('SIGKILL');
    expect(result.status).toBe(200);
    const done = result.events.at(-1);
    expect(done).toMatchObject({ type: 'done', finish_reason: 'length', usage: { output_tokens: 300 } });
    expect(result.events.filter((e) => e.type === 'token').length).toBeGreaterThan(0);
    // The backend goes on serving after the sidecar is gone.
    expect((await postJson(`${backend.url}/v1/generate`, { prompt: STORY, max_tokens: 4 })).status).toBe(200);
  }, 120_000);
});
